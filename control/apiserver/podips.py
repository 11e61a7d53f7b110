"""Pod IPs given by an apply, as a replayed ``kubectl get -A -o yaml`` dump records them.

A Pod that arrives with ``spec.nodeName`` and ``status.podIP(s)`` is stored bound to that
node with those addresses, and the kubelet keeps them (it reserves them in its IPAM
instead of allocating; see :mod:`control.agents.kubelet`). So that the IPAM never has to
refuse or double-book such an address later, :func:`check_recorded_pod_ips` refuses, at
admission, every recorded address the node could not have given:

* ``status.podIPs[0].ip`` must equal ``status.podIP`` when both are set (kube-apiserver's
  rule);
* an address outside every podCIDR of its node's family (``spec.podCIDRs``, else
  ``spec.podCIDR``), its network or broadcast address, or the node bridge's gateway (the
  first address): the CNI bridge + host-local pair never hands those out. Calico's
  block IPAM does hand out addresses outside the node's podCIDR (/26 blocks affine to
  the node): in a cluster with ``cni: calico`` (``pools`` given) an address must lie in
  one of Calico's IP pools instead, wherever the node's podCIDR is; in a flannel
  cluster it is refused, and the message says that the Pod carries Calico's
  ``cni.projectcalico.org/podIP(s)`` annotation and how to model it (``cni: calico``);
* an address another live Pod holds (stored, or earlier in the same apply).

Pods in the host network share the node's address (no check), and so do Pods whose
phase is ``Succeeded`` or ``Failed`` (their sandbox, and so their address, is gone). A
Pod whose node is unknown, or has no podCIDR of that family, is checked for duplicates
only. Errors are :class:`~netmodel.errors.InvalidError` naming the Pod and the field.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence

from netmodel.errors import InvalidError
from netmodel.objects import Node, Pod

__all__ = ["check_recorded_pod_ips", "recorded_ips"]

_ENDED = ("Succeeded", "Failed")


def recorded_ips(pod: Pod) -> list[tuple[str, str]]:
    """``(field, ip)`` for each address the Pod's status records that names a sandbox of
    its own (not host network, not ended); empty when there is none."""
    st = pod.status
    if pod.spec.host_network or st.phase in _ENDED:
        return []
    out: list[tuple[str, str]] = []
    if st.pod_ips:
        out.extend((f"status.podIPs[{i}].ip", p.ip) for i, p in enumerate(st.pod_ips))
    elif st.pod_ip:
        out.append(("status.podIP", st.pod_ip))
    return out


#: annotations Calico's CNI plugin puts on every Pod it gives an address
_CALICO_ANNOTATIONS = ("cni.projectcalico.org/podIP", "cni.projectcalico.org/podIPs")


def _calico_annotation(pod: Pod) -> str | None:
    """The Calico IPAM annotation the Pod carries (``name: value``), or None."""
    ann = pod.metadata.annotations
    for k in _CALICO_ANNOTATIONS:
        if k in ann:
            return f"{k}: {ann[k]}"
    return None


def _cidrs(node: Node) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    texts = list(node.spec.pod_cidrs) or ([node.spec.pod_cidr] if node.spec.pod_cidr else [])
    out = []
    for t in texts:
        try:
            out.append(ipaddress.ip_network(t, strict=False))
        except ValueError:
            continue  # validation of the Node says so
    return out


def check_recorded_pod_ips(
    pods: Sequence[Pod],
    *,
    node: Callable[[str], Node | None],
    held: Iterable[Pod],
    pools: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network] | None = None,
) -> list[tuple[int, InvalidError]]:
    """Check the recorded addresses of ``pods`` (the Pods of one apply, in order) against
    their nodes (``node(name)``: the Node as it will be after the apply, or None) and
    against ``held`` (the stored Pods that this apply does not replace); ``pools``:
    Calico's IP pools (a ``cni: calico`` cluster), None for flannel. Returns the first
    problem as ``[(index into pods, error)]``, or ``[]``."""
    keys = {p.key for p in pods}
    owner: dict[str, str] = {}
    for p in held:
        if p.key in keys:
            continue
        for _, ip in recorded_ips(p):
            owner.setdefault(ip, p.key)
    for i, pod in enumerate(pods):
        ips = recorded_ips(pod)
        if not ips:
            continue
        st = pod.status
        if st.pod_ip and st.pod_ips and st.pod_ips[0].ip != st.pod_ip:
            return [
                (
                    i,
                    InvalidError(
                        f"Invalid value: {st.pod_ips[0].ip!r}: must match status.podIP "
                        f"{st.pod_ip!r}",
                        obj=pod.ref,
                        field="status.podIPs[0].ip",
                    ),
                )
            ]
        n = node(pod.spec.node_name) if pod.spec.node_name else None
        cidrs = _cidrs(n) if n is not None else []
        for field, ip in ips:
            try:
                addr = ipaddress.ip_address(ip)
            except ValueError:
                continue  # validation of the Pod says so
            same = [c for c in cidrs if c.version == addr.version]
            if pools is not None:
                mine = [c for c in pools if c.version == addr.version]
                if mine and not any(addr in c for c in mine):
                    shown = ", ".join(str(c) for c in mine)
                    err = InvalidError(
                        f"Invalid value: {ip!r}: not in any of Calico's IP pools ({shown}; "
                        "calico.ipPools)",
                        obj=pod.ref,
                        field=field,
                    )
                    return [(i, err)]
                same = []  # Calico ignores the node's podCIDR
            if same:
                inside = next((c for c in same if addr in c), None)
                why = None
                if inside is None:
                    shown = ", ".join(str(c) for c in same)
                    why = f"not in the podCIDR of node {pod.spec.node_name} ({shown})"
                    calico = _calico_annotation(pod)
                    if calico is not None:
                        why += (
                            f"; the address comes from Calico's block IPAM ({calico}): "
                            "give the Cluster cni: calico to model Calico's network"
                        )
                elif addr in (inside.network_address, inside.broadcast_address):
                    why = f"the network or broadcast address of podCIDR {inside}"
                elif addr == inside.network_address + 1:
                    why = f"the gateway of podCIDR {inside} (the node's bridge holds it)"
                if why is not None:
                    err = InvalidError(f"Invalid value: {ip!r}: {why}", obj=pod.ref, field=field)
                    return [(i, err)]
            holder = owner.get(str(addr))
            if holder is not None and holder != pod.key:
                err = InvalidError(
                    f"Invalid value: {ip!r}: address already held by Pod/{holder}",
                    obj=pod.ref,
                    field=field,
                )
                return [(i, err)]
            owner[str(addr)] = pod.key
    return []
