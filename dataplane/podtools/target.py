"""What an emulated pod's shell knows about its pod: names, addresses, and the two files
kubelet writes into every container (``/etc/resolv.conf``, ``/etc/hosts``). Values only,
made from a :class:`~netmodel.objects.Pod` by :func:`pod_target`.

``/etc/hosts`` is kubelet's ``managedHostsFileContent`` (pkg/kubelet/kubelet_pods.go):
the fixed header and loopback lines, one line per pod IP (``IP<TAB>hostname``, or
``IP<TAB>hostname.subdomain.ns.svc.<domain><TAB>hostname`` when ``spec.subdomain`` is set),
then ``spec.hostAliases`` after ``# Entries added by HostAliases.`` (one line per alias,
its hostnames tab-separated). A host-network pod gets its node's ``/etc/hosts`` under
kubelet's ``(host network)`` header; svclab's nodes are modelled as kind's (docker's
hosts file: loopback lines and ``<node IP><TAB><node name>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netmodel.errors import InputError
from netmodel.objects import Pod
from netmodel.resolvconf import ResolvConf

MANAGED = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
MANAGED_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
#: docker's /etc/hosts of a kind node (before its own line)
NODE_HOSTS = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "ff00::0\tip6-mcastprefix\n"
    "ff02::1\tip6-allnodes\n"
    "ff02::2\tip6-allrouters\n"
)
#: kubelet truncates a hostname to 63 characters (and strips a trailing - or .)
HOSTNAME_MAX = 63


@dataclass(frozen=True, slots=True)
class PodTarget:
    """One running pod as its shell sees it. ``netns``: the emulator's namespace the
    pod's sockets live in (its node's for a host-network pod). ``containers``: their
    names, for ``-c``."""

    key: str
    hostname: str
    netns: str
    node: str
    ip: str
    host_network: bool
    resolv_conf: ResolvConf
    hosts: str
    containers: tuple[str, ...]

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


def _hostname(pod: Pod) -> str:
    extra = pod.spec.model_extra or {}
    name = str(extra.get("hostname") or pod.name)
    if len(name) > HOSTNAME_MAX:
        name = name[:HOSTNAME_MAX].rstrip("-.")
    return name


def hosts_file(
    pod: Pod, cluster_domain: str, *, node_ip: str | None = None, node_name: str = ""
) -> str:
    """``/etc/hosts`` as kubelet writes it for ``pod`` (see the module docstring)."""
    extra = pod.spec.model_extra or {}
    aliases = _aliases(pod, extra.get("hostAliases"))
    if pod.spec.host_network:
        own = f"{node_ip}\t{node_name}\n" if node_ip else ""
        return MANAGED_HOST_NETWORK + NODE_HOSTS + own + aliases
    hostname = _hostname(pod)
    sub = extra.get("subdomain")
    ips = [p.ip for p in pod.status.pod_ips] or ([pod.status.pod_ip] if pod.status.pod_ip else [])
    lines = []
    for ip in ips:
        if sub:
            fqdn = f"{hostname}.{sub}.{pod.namespace}.svc.{cluster_domain}"
            lines.append(f"{ip}\t{fqdn}\t{hostname}\n")
        else:
            lines.append(f"{ip}\t{hostname}\n")
    return MANAGED + "".join(lines) + aliases


def _aliases(pod: Pod, value: Any) -> str:
    if not value:
        return ""
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise InputError("must be a list", obj=f"Pod/{pod.key}", field="spec.hostAliases")
    out = ["\n# Entries added by HostAliases.\n"]
    for i, a in enumerate(value):
        if not isinstance(a, dict) or not isinstance(a.get("ip"), str):
            raise InputError(
                "must have an ip", obj=f"Pod/{pod.key}", field=f"spec.hostAliases[{i}].ip"
            )
        names = [str(h) for h in a.get("hostnames") or []]
        out.append(f"{a['ip']}\t{chr(9).join(names)}\n")
    return "".join(out)


def pod_target(
    pod: Pod,
    resolv_conf: ResolvConf,
    cluster_domain: str,
    *,
    node_ip: str | None = None,
) -> PodTarget:
    """The shell's view of a running ``pod`` (placed on a node, with an IP: a
    host-network pod's IP is its node's). Raises InputError when it is not running."""
    node = pod.spec.node_name
    if not node or not pod.status.pod_ip:
        raise InputError(
            f"pod {pod.name} is not running (no node or no IP yet)", obj=f"Pod/{pod.key}"
        )
    host_network = pod.spec.host_network
    return PodTarget(
        key=pod.key,
        hostname=node if host_network else _hostname(pod),
        netns=f"node/{node}" if host_network else f"pod/{pod.key}",
        node=node,
        ip=pod.status.pod_ip,
        host_network=host_network,
        resolv_conf=resolv_conf,
        hosts=hosts_file(pod, cluster_domain, node_ip=node_ip or pod.status.pod_ip, node_name=node),
        containers=tuple(c.name for c in pod.spec.containers),
    )
