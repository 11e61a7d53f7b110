"""What ``kubectl get -A -o yaml`` (or ``-o json``) prints for a real cluster, made into
svclab input.

:func:`is_cluster_dump` tells a dump from hand-written manifests: a ``List`` document,
or objects carrying server-set metadata (``uid``, ``resourceVersion``,
``managedFields``, ``creationTimestamp``). :func:`prepare` then

* reads legacy fields an older API prints beside the current ones (a Service's
  ``portalIP``, a Pod's ``host``, a Node's ``LegacyHostIP`` address:
  :func:`resolve_legacy`);
* drops the server-set metadata (``resourceVersion``, ``managedFields``,
  ``creationTimestamp``, ``generation``, ``selfLink``) and the Service ``status``; the
  ``uid`` is kept (the apiserver keeps it on create, so ownerReferences still name their
  owners), and so is a Pod's status (``spec.nodeName`` with ``status.podIP(s)``: the
  Pod stays bound there with those addresses, see ``control.apiserver.podips``);
* skips the kinds svclab does not serve, counting them per kind (the caller reports
  the counts): custom resources are served, their CRD the dump's own, else one svclab
  ships or infers (:mod:`netmodel.crdsupply`, added before :func:`prepare`); the
  kube-proxy ConfigMap (``kube-system/kube-proxy``, key
  ``config.conf``) and ``ServiceCIDR`` objects are read, and kept;
* infers the ``Cluster`` document when the dump has none: ``serviceCIDR`` from the
  ServiceCIDR objects, else the smallest network whose first address is the
  ``kubernetes`` Service's ClusterIP and that holds every ClusterIP of the dump;
  ``podCIDR`` the kube-proxy ConfigMap's ``clusterCIDR`` when it holds every Node's
  podCIDRs, else the smallest network holding them, ``nodeCIDRMaskSize`` their prefix
  length (a serviceCIDR inside that podCIDR, as GKE's routes-based clusters have, is
  accepted with a warning: ``ClusterSpec.layout_warnings``); ``nodeNetwork`` the smallest network (at most /24) holding the
  Nodes' InternalIPs; ``proxyMode`` from the kube-proxy ConfigMap; ``allocation:
  recorded`` (ClusterIPs, NodePorts kept as recorded), ``kubernetesService: false``
  (the dump's own ``default/kubernetes`` is applied) and ``dns: false`` (the dump's own
  ``kube-dns`` Service and ``coredns`` pods, when it has them, are applied as recorded:
  the import invents no second cluster DNS and no pods the dump lacks); ``nodes: 0`` (the Nodes come from
  the dump); ``cni: calico`` when the dump shows Calico (a ``calico-node`` Pod or
  DaemonSet, Pods annotated ``cni.projectcalico.org/podIP(s)``, IPPool or BlockAffinity
  objects), with ``calico.ipPools`` from the IPPool objects (their CIDR, natOutgoing and
  vxlanMode; else, when some pod address lies outside the podCIDR, the smallest network
  holding every pod address, with natOutgoing as calico-node's default pool, and a
  warning) and ``calico.blockAffinities`` from the BlockAffinity objects (else the
  blocks are inferred from the pods, see ``netmodel.topology.calico_blocks``). The
  IPPool and BlockAffinity objects are kept too (stored as the custom resources they
  are); what they mean for the network is read from the Cluster's ``calico``.

Values only: no I/O.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from netmodel import kinds
from netmodel.cluster import Cluster, cluster_from_dict
from netmodel.errors import InputError, SchemaError

__all__ = [
    "INFERRED_ANNOTATION",
    "MODELLED_KINDS",
    "PreparedDump",
    "is_cluster_dump",
    "is_inferred",
    "merge_inferred",
    "prepare",
    "resolve_legacy",
]

#: on a Cluster inferred from a dump (and so on the state's ``cluster.yaml``): its
#: ranges are lower bounds the next dump of the same cluster may widen
INFERRED_ANNOTATION = "svclab.dev/inferred-from"

#: the kinds a dump brings in (the kind table's ``dump`` rows); others are skipped
MODELLED_KINDS = frozenset(r.kind for r in kinds.ROWS if r.dump)


@kinds.on_change
def _rebuild_modelled() -> None:
    """Rows registered at run time (a CRD's) are brought in from dumps too."""
    global MODELLED_KINDS
    MODELLED_KINDS = frozenset(r.kind for r in kinds.ROWS if r.dump)


_SERVER_META = (
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "generation",
    "selfLink",
)
#: metadata only a server sets: its presence tells a dump from hand-written manifests
_DUMP_META = ("uid", "resourceVersion", "managedFields", "creationTimestamp")
_SVC_MODES = ("iptables", "ipvs", "nftables")


@dataclass
class PreparedDump:
    """The documents to decode, what was skipped, the Cluster inferred, warnings, and
    the recorded Endpoints (svclab computes Endpoints from EndpointSlices: the recorded
    ones are not stored but compared with the computed ones after apply)."""

    docs: list[dict[str, Any]]
    skipped: Counter[str] = field(default_factory=Counter)
    cluster: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    endpoints: list[dict[str, Any]] = field(default_factory=list)


def is_cluster_dump(raw_docs: Iterable[Any]) -> bool:
    """A ``List`` (or typed ``<Kind>List``) document, or any object with server-set
    metadata."""
    for d in raw_docs:
        if not isinstance(d, dict):
            continue
        kind = d.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(d.get("items"), list):
            return True
        meta = d.get("metadata")
        if isinstance(meta, dict) and any(k in meta for k in _DUMP_META):
            return True
    return False


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {k: v for k, v in meta.items() if k not in _SERVER_META}
        ann = out["metadata"].get("annotations")
        if isinstance(ann, dict):
            ann = {
                k: v
                for k, v in ann.items()
                if k != "kubectl.kubernetes.io/last-applied-configuration"
            }
            out["metadata"]["annotations"] = ann
            if not ann:
                del out["metadata"]["annotations"]
    if out.get("kind") == "Service":
        out.pop("status", None)
    return out


def _covering(addrs: list[ipaddress.IPv4Network], longest: int = 32) -> ipaddress.IPv4Network:
    """The smallest network (prefix at most ``longest``) holding every given network."""
    first = addrs[0]
    for plen in range(min(longest, min(a.prefixlen for a in addrs)), -1, -1):
        net = ipaddress.ip_network(f"{first.network_address}/{plen}", strict=False)
        if all(a.subnet_of(net) for a in addrs):  # type: ignore[arg-type]
            return net  # type: ignore[return-value]
    return ipaddress.IPv4Network("0.0.0.0/0")


#: (kind, legacy field, current field): spellings an older API still prints beside the
#: current field (OpenShift 3's v1 API printed a Service's ``portalIP`` beside
#: ``clusterIP`` and a Pod's ``host`` beside ``nodeName``); a Node address of type
#: ``LegacyHostIP`` (Kubernetes before 1.0) is read as its InternalIP when it has none
_LEGACY_ALIASES = (("Service", "portalIP", "clusterIP"), ("Pod", "host", "nodeName"))


def resolve_legacy(doc: dict[str, Any]) -> dict[str, Any]:
    """A dump object with its legacy spec fields (:data:`_LEGACY_ALIASES`) read as the
    current ones: the legacy value is taken when the current field is absent, dropped when
    the two agree; :class:`~netmodel.errors.SchemaError` naming the legacy field when they
    disagree (the caller adds file, document and object)."""
    for kind, old, new in _LEGACY_ALIASES:
        spec = doc.get("spec")
        if doc.get("kind") != kind or not isinstance(spec, dict) or old not in spec:
            continue
        spec = dict(spec)
        value = spec.pop(old)
        if spec.get(new) in (None, ""):
            spec[new] = value
        elif spec[new] != value:
            raise SchemaError(
                f"legacy field disagrees with spec.{new} ({value!r} != {spec[new]!r})",
                field=f"spec.{old}",
            )
        doc = {**doc, "spec": spec}
    status = doc.get("status")
    if doc.get("kind") == "Node" and isinstance(status, dict):
        addrs = status.get("addresses")
        if isinstance(addrs, list) and not any(
            isinstance(a, dict) and a.get("type") == "InternalIP" for a in addrs
        ):
            # the host IP of clusters before 1.0 (``LegacyHostIP``): the node's InternalIP
            fixed = [
                {**a, "type": "InternalIP"}
                if isinstance(a, dict) and a.get("type") == "LegacyHostIP"
                else a
                for a in addrs
            ]
            doc = {**doc, "status": {**status, "addresses": fixed}}
    return doc


def _v4(text: object) -> ipaddress.IPv4Address | None:
    try:
        a = ipaddress.ip_address(str(text))
    except ValueError:
        return None
    return a if isinstance(a, ipaddress.IPv4Address) else None


def _service_cidr(services: list[dict[str, Any]], cidr_objs: list[str]) -> str | None:
    if cidr_objs:
        v4 = [c for c in cidr_objs if ":" not in c]
        if v4:
            return v4[0]
    ips: list[ipaddress.IPv4Address] = []
    kube: ipaddress.IPv4Address | None = None
    for s in services:
        spec = s.get("spec") or {}
        ip = _v4(spec.get("clusterIP") or spec.get("portalIP"))
        if ip is None:
            continue
        ips.append(ip)
        meta = s.get("metadata") or {}
        if meta.get("name") == "kubernetes" and meta.get("namespace") == "default":
            kube = ip
    if kube is None:
        return None
    for plen in range(31, 7, -1):
        net = ipaddress.ip_network(f"{kube}/{plen}", strict=False)
        if net.network_address + 1 == kube and all(i in net for i in ips):
            return str(net)
    return None


def _proxy_conf(doc: dict[str, Any]) -> dict[str, Any]:
    data = doc.get("data") or {}
    text = data.get("config.conf")
    if not isinstance(text, str):
        return {}
    try:
        conf = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return conf if isinstance(conf, dict) else {}


def _proxy_mode(conf: dict[str, Any]) -> str | None:
    mode = conf.get("mode")
    return str(mode) if mode in _SVC_MODES else ("iptables" if mode == "" else None)


def _cluster_cidr(conf: dict[str, Any]) -> ipaddress.IPv4Network | None:
    """kube-proxy's ``clusterCIDR`` (the cluster's whole pod range; comma-separated when
    dual-stack): its IPv4 network, if any."""
    for part in str(conf.get("clusterCIDR") or "").split(","):
        try:
            net = ipaddress.ip_network(part.strip(), strict=False)
        except ValueError:
            continue
        if isinstance(net, ipaddress.IPv4Network):
            return net
    return None


_CALICO_ANNOTATIONS = ("cni.projectcalico.org/podIP", "cni.projectcalico.org/podIPs")


@dataclass
class _CalicoSeen:
    """What a dump shows of Calico."""

    seen: bool = False
    pools: list[dict[str, Any]] = field(default_factory=list)
    block_size: int | None = None
    affinities: list[dict[str, str]] = field(default_factory=list)
    #: what an IPPool asks for that svclab does not model, one note per pool
    unmodelled: list[str] = field(default_factory=list)

    def read(self, kind: str, d: dict[str, Any]) -> bool:
        """Note what ``d`` shows; True when it is Calico's own object (an IPPool or a
        BlockAffinity)."""
        meta = d.get("metadata") or {}
        spec = d.get("spec") or {}
        name = str(meta.get("name") or "")
        if kind == "IPPool" and "projectcalico.org" in str(d.get("apiVersion", "")):
            self.seen = True
            cidr = spec.get("cidr")
            _check_cidr(cidr, f"{kind}/{name}")
            net = _v4net(cidr)
            if net is not None and not spec.get("disabled"):
                nat = spec.get("natOutgoing", False)
                if not isinstance(nat, bool):
                    raise SchemaError(
                        f"natOutgoing must be true or false, not {nat!r}",
                        obj=f"{kind}/{name}",
                        field="spec.natOutgoing",
                    )
                vxlan = spec.get("vxlanMode") or "Never"
                if vxlan not in ("Never", "Always", "CrossSubnet"):
                    raise SchemaError(
                        f"vxlanMode must be Never, Always or CrossSubnet, not {vxlan!r}",
                        obj=f"{kind}/{name}",
                        field="spec.vxlanMode",
                    )
                self.pools.append({"cidr": str(net), "natOutgoing": nat, "vxlanMode": vxlan})
                if isinstance(spec.get("blockSize"), int):
                    self.block_size = spec["blockSize"]
                ipip = spec.get("ipipMode")
                if ipip not in (None, "", "Never"):
                    how = "through vxlan.calico" if vxlan == "Always" else (
                        "without encapsulation, as in Calico's BGP mode"
                    )
                    self.unmodelled.append(
                        f"Calico IPPool {name} ({net}): ipipMode {ipip} not modelled "
                        f"(its blocks are routed {how})"
                    )
            return True
        if kind == "BlockAffinity" and "projectcalico.org" in str(d.get("apiVersion", "")):
            self.seen = True
            _check_cidr(spec.get("cidr"), f"{kind}/{name}")
            net = _v4net(spec.get("cidr"))
            if net is not None and spec.get("node") and spec.get("state", "confirmed") == "confirmed":
                self.affinities.append({"node": str(spec["node"]), "cidr": str(net)})
            return True
        if kind in ("DaemonSet", "Pod") and name.startswith("calico-node"):
            self.seen = True
        ann = meta.get("annotations")
        if kind == "Pod" and isinstance(ann, dict) and any(k in ann for k in _CALICO_ANNOTATIONS):
            self.seen = True
        return False


def _check_cidr(text: object, obj: str) -> None:
    """A Calico object's ``spec.cidr`` must be a network (IPv6 ones are ignored later);
    :class:`SchemaError` naming the object and field otherwise (the caller adds the
    file and document)."""
    try:
        ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        raise SchemaError(f"invalid CIDR {text!r}", obj=obj, field="spec.cidr") from None


def _v4net(text: object) -> ipaddress.IPv4Network | None:
    try:
        net = ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        return None
    return net if isinstance(net, ipaddress.IPv4Network) else None


def _pod_ip(d: dict[str, Any]) -> ipaddress.IPv4Address | None:
    if (d.get("spec") or {}).get("hostNetwork"):
        return None
    return _v4((d.get("status") or {}).get("podIP"))


def prepare(docs: list[dict[str, Any]], *, has_cluster: bool) -> PreparedDump:
    """Dump documents (List items already unfolded) -> :class:`PreparedDump`."""
    out = PreparedDump(docs=[])
    calico = _CalicoSeen()
    pod_ips: list[ipaddress.IPv4Network] = []
    services: list[dict[str, Any]] = []
    cidr_objs: list[str] = []
    pod_cidrs: list[ipaddress.IPv4Network] = []
    node_ips: list[ipaddress.IPv4Network] = []
    mode: str | None = None
    cluster_cidr: ipaddress.IPv4Network | None = None
    for d in docs:
        kind = str(d.get("kind", ""))
        meta = d.get("metadata") or {}
        if kind in ("Cluster", "KubeProxyConfiguration"):
            out.docs.append(d)
            continue
        if kind == "ConfigMap" and (meta.get("namespace"), meta.get("name")) == (
            "kube-system",
            "kube-proxy",
        ):  # read for the proxy mode and cluster CIDR, and kept (a generic kind)
            conf = _proxy_conf(d)
            mode = _proxy_mode(conf) or mode
            cluster_cidr = _cluster_cidr(conf) or cluster_cidr
        # Calico's own objects are read for the Cluster and kept (custom resources: their
        # CRD is the dump's, or svclab's shipped one, see netmodel.crdsupply)
        calico.read(kind, d)
        if kind == "Pod":
            pip = _pod_ip(d)
            if pip is not None:
                pod_ips.append(ipaddress.IPv4Network(f"{pip}/32"))
        if kind == "ServiceCIDR":
            # read for the Service range, and kept (the ClusterIP allocator's own state)
            cidr_objs.extend(str(c) for c in (d.get("spec") or {}).get("cidrs") or [])
        if kind == "Endpoints" and d.get("apiVersion") == "v1":
            out.endpoints.append(_strip(d))  # compared after apply, not stored
            continue
        if kind not in MODELLED_KINDS:
            out.skipped[kind or "<no kind>"] += 1
            continue
        if kind == "Service":
            services.append(d)
        if kind == "Node":
            nspec = d.get("spec") or {}
            for c in nspec.get("podCIDRs") or ([nspec["podCIDR"]] if nspec.get("podCIDR") else []):
                net = ipaddress.ip_network(str(c), strict=False)
                if isinstance(net, ipaddress.IPv4Network):
                    pod_cidrs.append(net)
            for a in (d.get("status") or {}).get("addresses") or []:
                internal = a.get("type") in ("InternalIP", "LegacyHostIP")
                ip = _v4(a.get("address")) if internal else None
                if ip is not None:
                    node_ips.append(ipaddress.IPv4Network(f"{ip}/32"))
        out.docs.append(_strip(d))
    if not has_cluster:
        spec: dict[str, Any] = {
            "allocation": "recorded",
            "kubernetesService": False,
            "dns": False,
            "nodes": 0,
        }
        svc = _service_cidr(services, cidr_objs)
        if svc is not None:
            spec["serviceCIDR"] = svc
            if not cidr_objs:
                out.warnings.append(
                    f"serviceCIDR {svc} inferred from the ClusterIPs (no ServiceCIDR object)"
                )
        if pod_cidrs:
            pod = _covering(pod_cidrs)
            if cluster_cidr is not None and pod.subnet_of(cluster_cidr):
                pod = cluster_cidr  # the whole pod range, as kube-proxy was told it
            else:
                # no object records the cluster range (k3s's --cluster-cidr, kubeadm's
                # podSubnet): the Nodes' ranges give only a lower bound, and kube-proxy's
                # masquerade rules (`! -s CLUSTER-CIDR`) follow the range it was given
                out.warnings.append(
                    f"podCIDR {pod} inferred from the Nodes' podCIDRs (no kube-proxy "
                    "clusterCIDR): the cluster's range may be wider; a Cluster document "
                    "can give it"
                )
            spec["podCIDR"] = str(pod)
            spec["nodeCIDRMaskSize"] = max(c.prefixlen for c in pod_cidrs)
        if node_ips:
            spec["nodeNetwork"] = str(_covering(node_ips, 24))
        if mode is not None:
            spec["proxyMode"] = mode
        if calico.seen:
            out.warnings.extend(calico.unmodelled)
            spec["cni"] = "calico"
            spec.pop("overlay", None)
            cal: dict[str, Any] = {}
            pod_range = ipaddress.ip_network(spec.get("podCIDR", "10.244.0.0/16"))
            if calico.pools:
                cal["ipPools"] = calico.pools
            elif pod_ips and not all(p.subnet_of(pod_range) for p in pod_ips):  # type: ignore[arg-type]
                pool = _covering(pod_ips, 26)
                cal["ipPools"] = [{"cidr": str(pool), "natOutgoing": True, "vxlanMode": "Never"}]
                out.warnings.append(
                    f"Calico IP pool {pool} inferred from the pod addresses (no IPPool "
                    "object), with natOutgoing as calico-node's default pool has it"
                )
            if not pod_cidrs and "podCIDR" not in spec:
                first = ipaddress.ip_network(
                    (cal.get("ipPools") or [{"cidr": "10.244.0.0/16"}])[0]["cidr"]
                )
                spec["podCIDR"] = str(cluster_cidr or first)
            if calico.block_size is not None:
                cal["blockSize"] = calico.block_size
            if calico.affinities:
                cal["blockAffinities"] = calico.affinities
            if cal:
                spec["calico"] = cal
        out.cluster = {
            "apiVersion": "svclab.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "imported", "annotations": {INFERRED_ANNOTATION: "kubectl-dump"}},
            "spec": spec,
        }
    return out


def is_inferred(cluster: Cluster) -> bool:
    """Whether ``cluster`` was inferred from a dump (:data:`INFERRED_ANNOTATION`)."""
    ann = cluster.metadata.get("annotations")
    return isinstance(ann, dict) and INFERRED_ANNOTATION in ann


#: ranges a dump's inference gives (the smallest network holding what the dump records)
_RANGES = (
    ("serviceCIDR", "service_cidr"),
    ("podCIDR", "pod_cidr"),
    ("nodeNetwork", "node_network"),
)
#: values a dump's inference reads as they are: a second dump must agree
_SCALARS = (
    ("nodeCIDRMaskSize", "node_cidr_mask_size"),
    ("proxyMode", "proxy_mode"),
    ("cni", "cni"),
    ("allocation", "allocation"),
    ("kubernetesService", "kubernetes_service"),
    ("nodes", "nodes"),
)


def merge_inferred(stored: Cluster, inferred: Cluster, *, where: str) -> Cluster:
    """The Cluster a state holding ``stored`` has after applying a dump whose Cluster was
    inferred as ``inferred`` (a later dump of the same cluster).

    Only what the inference set is compared (``model_fields_set``). A range the dump
    needs (serviceCIDR, podCIDR, nodeNetwork) that lies inside the stored one changes
    nothing; outside it, a stored Cluster that was itself inferred is widened to the
    smallest network holding both (its range was a lower bound: the allocators are
    rebuilt from the stored objects, so every address stays valid), and a Cluster the
    user wrote is a conflict. A value read as it is (nodeCIDRMaskSize, proxyMode,
    allocation, kubernetesService, nodes) must be equal; ``dns`` is not compared (the
    inference's ``dns: false`` only keeps an import from inventing cluster DNS: the stored
    Cluster's choice stands). A conflict is one
    :class:`InputError` naming the field and ``where`` (the stored Cluster's place);
    the widened Cluster is validated again (layout checks)."""
    name = f"Cluster/{stored.metadata.get('name', 'svclab')}"
    set_ = inferred.spec.model_fields_set
    widen = is_inferred(stored)
    update: dict[str, Any] = {}
    for alias, attr in _SCALARS:
        if attr in set_ and getattr(inferred.spec, attr) != getattr(stored.spec, attr):
            raise InputError(
                f"the dump gives {getattr(inferred.spec, attr)!r}, the cluster in {where} has "
                f"{getattr(stored.spec, attr)!r}: a different cluster (use a new --state)",
                obj=name,
                field=f"spec.{alias}",
            )
    for alias, attr in _RANGES:
        if attr not in set_:
            continue
        new = ipaddress.ip_network(getattr(inferred.spec, attr), strict=False)
        old = ipaddress.ip_network(getattr(stored.spec, attr), strict=False)
        if new.version == old.version and new.subnet_of(old):  # type: ignore[arg-type]
            continue
        if not widen or new.version != 4 or old.version != 4:
            raise InputError(
                f"the dump needs {new}, outside {old} of the cluster in {where} "
                "(a Cluster written by hand is not widened; use a new --state)",
                obj=name,
                field=f"spec.{alias}",
            )
        update[alias] = str(_covering([old, new]))
    if "calico" in set_ and inferred.spec.calico != stored.spec.calico:
        old_c, new_c = stored.spec.calico, inferred.spec.calico
        if not widen or old_c.block_size != new_c.block_size:
            raise InputError(
                f"the dump gives Calico settings {new_c.model_dump(by_alias=True)}, the "
                f"cluster in {where} has {old_c.model_dump(by_alias=True)}: a different "
                "cluster (use a new --state)",
                obj=name,
                field="spec.calico",
            )
        # by CIDR: a later dump's settings for a pool (natOutgoing) are the newer ones
        by_cidr = {p.cidr: p for p in old_c.ip_pools} | {p.cidr: p for p in new_c.ip_pools}
        pools = list(by_cidr.values())
        seen = {(a.node, a.cidr) for a in old_c.block_affinities}
        affinities = [a.model_dump(by_alias=True) for a in old_c.block_affinities] + [
            a.model_dump(by_alias=True)
            for a in new_c.block_affinities
            if (a.node, a.cidr) not in seen
        ]
        update["calico"] = {
            "ipPools": [p.model_dump(by_alias=True) for p in pools],
            "blockSize": old_c.block_size,
            "blockAffinities": affinities,
        }
    if not update:
        return stored
    data = stored.to_dict()
    data["spec"].update(update)
    return cluster_from_dict(data, file=where)
