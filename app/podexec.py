"""From a stored cluster to an emulated pod's shell (:mod:`dataplane.podtools`): the
emulated world (cluster, Services by address, each node's rules, the NetworkPolicy
verdicts of a walk named as a trace names them) and a pod as its shell sees it. What
``svclab exec`` runs on, and what ``kubectl exec`` on the emulator will.
"""

from __future__ import annotations

from collections.abc import Sequence

from app import emulation, netpolview
from control.session import Session
from dataplane.backends.emulated import answerers
from dataplane.emulator.cluster import EmulatedCluster
from dataplane.podtools import Emulated, PodTarget, pod_target
from netmodel.errors import InputError, NotFoundError
from netmodel.objects import Node, Pod, Service
from netmodel.resolvconf import pod_resolv_conf


def service_addresses(
    session: Session, node_ips: Sequence[str]
) -> dict[tuple[str, int, str], str]:
    """Every Service address a client connects to, ``(ip, port, proto)`` ->
    ``ns/name:port`` (the port's name, or its number when unnamed): ClusterIPs, and
    NodePorts on every node address."""
    out: dict[tuple[str, int, str], str] = {}
    for s in session.store.list("Service"):
        assert isinstance(s, Service)
        for p in s.spec.ports:
            label = f"{s.namespace}/{s.name}:{p.name or p.port}"
            proto = (p.protocol or "TCP").lower()
            if s.spec.cluster_ip and not s.is_headless:
                out[(s.spec.cluster_ip, p.port, proto)] = label
            if p.node_port:
                for ip in node_ips:
                    out[(ip, p.node_port, proto)] = f"{label} (NodePort)"
    return out


def world(session: Session, *, seed: int | None = None) -> Emulated:
    """The emulated cluster of ``session`` as pods' commands see it (converges the
    control plane first)."""
    v = emulation.view(session, lazy=True)
    cluster = EmulatedCluster(
        v.network,
        v.rulesets,
        v.listeners,
        v.local_addresses,
        seed=session.cluster.spec.seed if seed is None else seed,
        answerers=answerers(v),
        resolv_confs=v.resolv_confs,
        compiled_cache=emulation.compiled_cache(session),
    )
    node_ips = [ip for ips in v.node_ips.values() for ip in ips]
    agent = emulation.policy_agent_of(session)
    return Emulated(
        cluster,
        service_addresses(session, node_ips),
        v.rulesets,
        policy=netpolview.Verdicts(agent) if agent is not None else None,
    )


def target(
    session: Session, world_: Emulated, namespace: str, name: str, container: str | None
) -> PodTarget:
    """Pod ``namespace/name`` as its shell sees it (``container``: one of its containers
    or ephemeral containers; all share the pod's network namespace, so they see the
    same). Errors as kube-apiserver words them: no such pod; no such container
    (``-c``); not running."""
    try:
        pod = session.store.get("Pod", f"{namespace}/{name}")
    except NotFoundError:
        raise NotFoundError(f'pods "{name}" not found in namespace {namespace!r}') from None
    assert isinstance(pod, Pod)
    names = [c.name for c in pod.spec.containers + pod.spec.ephemeral_containers]
    if container is not None and container not in names:
        raise InputError(f"container {container} is not valid for pod {name}", field="-c")
    spec = session.cluster.spec
    node_ip = None
    if pod.spec.host_network and pod.spec.node_name:
        try:
            n = session.store.get("Node", pod.spec.node_name)
        except NotFoundError:
            n = None
        if isinstance(n, Node) and n.internal_ips:
            node_ip = n.internal_ips[0]
    return pod_target(pod, pod_resolv_conf(pod, spec), spec.cluster_domain, node_ip=node_ip)
