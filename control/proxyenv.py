"""One node's kube-proxy configuration: KubeProxyConfiguration + Cluster + Node, plus the
Cluster's ``nodeEnvironment`` facts. The single place both the kube-proxy agent and the
``rules`` command get it from, so they cannot disagree."""

from __future__ import annotations

from dataclasses import replace

from dataplane.proxy import NodeProxyConfig, build_node_config
from netmodel.cluster import ClusterSpec
from netmodel.objects import Node
from netmodel.proxyconfig import KubeProxyConfiguration


def node_proxy_config(
    proxy_config: KubeProxyConfiguration | None, cluster: ClusterSpec, node: Node
) -> NodeProxyConfig:
    cfg = build_node_config(
        proxy_config,
        cluster,
        node.name,
        [a.address for a in node.status.addresses],
        node.spec.pod_cidr,
        node_labels=node.labels,
    )
    env = cluster.node_environment
    return replace(
        cfg,
        masquerade_mark=env.masquerade_mark or cfg.masquerade_mark,
        random_fully=env.iptables_has_random_fully,
        nfacct_counters=frozenset(k for k, v in env.nfacct_counters.items() if v),
        large_cluster_threshold=env.large_cluster_endpoints_threshold,
    )


def proxy_mode(proxy_config: KubeProxyConfiguration | None, cluster: ClusterSpec) -> str:
    """KubeProxyConfiguration.mode when set, else the Cluster's proxyMode."""
    if proxy_config is not None and proxy_config.mode:
        return proxy_config.mode
    return cluster.proxy_mode
