"""A pod's ``/etc/resolv.conf`` as kubelet writes it, and the glibc stub resolver's
order of queries. Pure functions of the pod and the cluster.

kubelet (``pkg/kubelet/network/dns``), per ``spec.dnsPolicy``:

* ``ClusterFirst`` (the default): ``nameserver`` kube-dns's ClusterIP, ``search
  <ns>.svc.<d> svc.<d> <d>``, ``options ndots:5``; a host-network pod with
  ClusterFirst gets the node's resolv.conf instead (as with ``Default``);
* ``ClusterFirstWithHostNet``: ClusterFirst, also for host-network pods;
* ``Default``: the node's resolv.conf. svclab's nodes have no resolver configured (their
  upstream is CoreDNS's static table, not a server), so it is empty: glibc then asks
  127.0.0.1, where nothing listens;
* ``None``: nothing but ``spec.dnsConfig``.

``spec.dnsConfig`` is merged in after: its nameservers and searches are appended
(duplicates dropped, at most 3 nameservers and 32 search domains kept, as kubelet
does), its options override options of the same name. A cluster without DNS
(``dns: false``) gives ClusterFirst pods the node's resolv.conf, as a kubelet without
``--cluster-dns`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError
from netmodel.objects import Pod

MAX_NAMESERVERS = 3
MAX_SEARCHES = 32
POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")


@dataclass(frozen=True, slots=True)
class ResolvConf:
    """The resolver configuration of one pod (``options`` in file order)."""

    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[tuple[str, str | None], ...] = ()

    @property
    def ndots(self) -> int:
        """glibc's ndots (default 1; capped at 15)."""
        for name, value in self.options:
            if name == "ndots" and value is not None and value.isdigit():
                return min(int(value), 15)
        return 1

    def render(self) -> str:
        """The file's text, as kubelet writes it."""
        lines = [f"nameserver {n}" for n in self.nameservers]
        if self.searches:
            lines.append("search " + " ".join(self.searches))
        if self.options:
            opts = (n if v is None else f"{n}:{v}" for n, v in self.options)
            lines.append("options " + " ".join(opts))
        return "".join(line + "\n" for line in lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "nameservers": list(self.nameservers),
            "searches": list(self.searches),
            "options": [n if v is None else f"{n}:{v}" for n, v in self.options],
        }


def cluster_first(namespace: str, cluster: ClusterSpec) -> ResolvConf:
    d = cluster.cluster_domain
    return ResolvConf(
        (cluster.dns_service_ip(),),
        (f"{namespace}.svc.{d}", f"svc.{d}", d),
        (("ndots", "5"),),
    )


def pod_resolv_conf(pod: Pod, cluster: ClusterSpec) -> ResolvConf:
    """The resolv.conf kubelet gives ``pod`` (see the module docstring). Raises
    InputError naming the pod and field for an unknown dnsPolicy or a bad dnsConfig."""
    spec = pod.spec
    extra = spec.model_extra or {}
    policy = str(extra.get("dnsPolicy") or "ClusterFirst")
    if policy not in POLICIES:
        raise InputError(
            f'unsupported value "{policy}": supported values: {", ".join(POLICIES)}',
            obj=f"Pod/{pod.key}",
            field="spec.dnsPolicy",
        )
    node = ResolvConf()
    if policy == "None":
        base = ResolvConf()
    elif policy == "Default" or (policy == "ClusterFirst" and spec.host_network) or not cluster.dns:
        base = node
    else:
        base = cluster_first(pod.namespace, cluster)
    return merge(base, extra.get("dnsConfig"), obj=f"Pod/{pod.key}")


def merge(base: ResolvConf, config: Any, *, obj: str = "Pod") -> ResolvConf:
    """``base`` with a pod's ``dnsConfig`` merged in (see the module docstring)."""
    if not config:
        return base
    if not isinstance(config, Mapping):
        raise InputError("must be an object", obj=obj, field="spec.dnsConfig")
    servers = list(base.nameservers)
    for s in _strings(config, "nameservers", obj):
        if s not in servers:
            servers.append(s)
    searches = list(base.searches)
    for s in _strings(config, "searches", obj):
        if s not in searches:
            searches.append(s)
    options = dict(base.options)
    for i, opt in enumerate(config.get("options") or []):
        if not isinstance(opt, Mapping) or not isinstance(opt.get("name"), str):
            raise InputError("must have a name", obj=obj, field=f"spec.dnsConfig.options[{i}]")
        value = opt.get("value")
        options[opt["name"]] = None if value is None else str(value)
    return ResolvConf(
        tuple(servers[:MAX_NAMESERVERS]), tuple(searches[:MAX_SEARCHES]), tuple(options.items())
    )


def _strings(config: Mapping[str, Any], key: str, obj: str) -> list[str]:
    values = config.get(key) or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InputError("must be a list of strings", obj=obj, field=f"spec.dnsConfig.{key}")
    return values


def search_order(name: str, conf: ResolvConf) -> list[str]:
    """The absolute names glibc's ``res_nsearch`` asks for ``name``, in order: a name
    ending with a dot as it is; a name with at least ndots dots first as it is, then with
    each search domain; otherwise with each search domain first, the name as it is last.
    The result's names end with a dot."""
    if name.endswith("."):
        return [name]
    dots = name.count(".")
    with_search = [f"{name}.{s.rstrip('.')}." for s in conf.searches]
    if dots >= conf.ndots:
        return [f"{name}.", *with_search]
    return [*with_search, f"{name}."]
