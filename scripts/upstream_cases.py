"""Replay upstream kube-proxy test cases (tests/data/kube-proxy/cases/*.yaml) as svclab
manifests: a Cluster and a KubeProxyConfiguration that state the case's ``node:`` block,
plus its Services and EndpointSlices (``x-`` annotations of the case format dropped).

The Cluster uses ``allocation: recorded`` (the tests' Services carry NodePorts of 0 and a
shared healthCheckNodePort that a real apiserver would not allow), ``kubernetesService:
false`` and ``dns: false`` (the fake proxier sees only the case's Services), and
``nodeEnvironment`` for what the upstream test fake fixes (mark text ``0x4000``, no ``--random-fully``,
nfacct counters present). ``python3 scripts/case_manifests.py CASE.yaml`` prints them.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml


def _strip_x(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_x(v) for k, v in value.items() if not str(k).startswith("x-")}
    if isinstance(value, list):
        return [_strip_x(v) for v in value]
    return value


def case_documents(case: dict[str, Any], mode: str = "iptables") -> list[dict[str, Any]]:
    """The manifests (as dicts) that reproduce ``case`` in svclab, for kube-proxy in
    ``mode`` (``iptables`` or ``nftables``). The nftables leg lays the case's
    ``nftables.node`` block (upstream's nftables fake proxier: its own
    ``nodePortAddresses``) over ``node:``."""
    node = case["node"]
    if mode == "nftables":
        nft = case.get("nftables")
        over = nft.get("node") if isinstance(nft, dict) else None
        node = {**node, **(over or {})}
    family = node.get("ipFamily", "IPv4")
    ips = [ip for ip in node.get("localIPs", []) if not ipaddress.ip_address(ip).is_loopback]
    primary = node.get("nodeIP")
    if primary in ips:
        ips.remove(primary)
        ips.insert(0, primary)
    if family == "IPv4":
        ips = [ip for ip in ips if ipaddress.ip_address(ip).version == 4] + [
            ip for ip in ips if ipaddress.ip_address(ip).version == 6
        ]
    detector = node.get("localDetector") or {}
    cluster_cidr = detector.get("clusterCIDR") if detector.get("mode") == "ClusterCIDR" else ""
    pod_cidr = cluster_cidr if cluster_cidr and family == "IPv4" else "10.0.0.0/8"
    env: dict[str, Any] = {
        "masqueradeMark": str(node.get("masqueradeMark", "0x4000")),
        "iptablesHasRandomFully": bool(node.get("iptablesHasRandomFully", False)),
        "nfacctCounters": dict(node.get("nfacctCounters") or {}),
        "largeClusterEndpointsThreshold": int(node.get("largeClusterEndpointsThreshold", 1000)),
    }
    cluster = {
        "apiVersion": "svclab.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": case.get("name", "case")},
        "spec": {
            "serviceCIDR": "172.30.0.0/16",
            "podCIDR": pod_cidr,
            "nodeCIDRMaskSize": 24,
            "nodePortRange": "1-65535",
            "nodeNetwork": "192.168.0.0/16",
            "loadBalancerCIDR": "172.31.0.0/24",
            "allocation": "recorded",
            # upstream's fake proxier has only the case's Services: no default/kubernetes
            # and no kube-system/kube-dns
            "kubernetesService": False,
            "dns": False,
            "nodes": [{"name": node["name"], "addresses": ips}],
            "nodeEnvironment": env,
        },
    }
    kpc: dict[str, Any] = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": mode,
        "clusterCIDR": cluster_cidr or "",
        "detectLocalMode": "ClusterCIDR",
        "iptables": {
            "masqueradeAll": bool(node.get("masqueradeAll", False)),
            "localhostNodePorts": bool(node.get("localhostNodePorts", True)),
        },
        "nodePortAddresses": list(node.get("nodePortAddresses") or []),
        "conntrack": {"tcpBeLiberal": bool(node.get("conntrackTCPLiberal", False))},
    }
    services = [_service(_strip_x(o)) for o in case.get("services") or []]
    slices = [_strip_x(o) for o in case.get("endpointslices") or []]
    return [cluster, kpc, *services, *slices]


def _service(svc: dict[str, Any]) -> dict[str, Any]:
    """Drop what kube-proxy ignores and Kubernetes validation would refuse: a
    healthCheckNodePort on a Service that is not LoadBalancer with eTP Local."""
    spec = svc.get("spec") or {}
    local_lb = spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"
    if "healthCheckNodePort" in spec and not local_lb:
        spec = {k: v for k, v in spec.items() if k != "healthCheckNodePort"}
        svc = {**svc, "spec": spec}
    return svc


def case_yaml(case: dict[str, Any], mode: str = "iptables") -> str:
    return yaml.safe_dump_all(case_documents(case, mode), sort_keys=False)
