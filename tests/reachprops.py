"""Generated small clusters and NetworkPolicies for the three-way reach property: the
matrix :func:`netmodel.netpolicy.decide` computes from the stored objects equals the one
probed through the emulated dataplane (tests/app/test_reach_property.py) and through
the kernel (tests/kernel/test_reach_property_real.py).

A scenario: two or three namespaces with generated labels, two to five pods spread over
two nodes with generated labels, each serving TCP 80 (``http``), TCP 81 (``alt``) and
UDP 80 (``udp-80``), and one to three policies of generated selectors, peers (pod,
namespace, both, ipBlock over the pod network), ports (numbers, names, ranges, bare
protocols) and policy types. The computed side reads the policies back as the API
server stored them (defaulted), so defaulting is part of what is checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import strategies as st

from app.cli.main import cli
from netmodel.netpolicy import PolicyPod, decide, named_ports, policy_from_wire

PORTS: tuple[tuple[str, int], ...] = (("TCP", 80), ("TCP", 81), ("UDP", 80))
CONTAINER_PORTS = [
    {"name": "http", "containerPort": 80, "protocol": "TCP"},
    {"name": "alt", "containerPort": 81, "protocol": "TCP"},
    {"name": "udp-80", "containerPort": 80, "protocol": "UDP"},
]
APPS = ("web", "db", "cache")
TEAMS = ("red", "blue")
#: ipBlocks over the pod network (node-1 holds 10.244.0.0/24, node-2 10.244.1.0/24)
BLOCKS = (
    {"cidr": "10.244.0.0/16"},
    {"cidr": "10.244.1.0/24"},
    {"cidr": "10.244.0.0/16", "except": ["10.244.0.0/24"]},
    {"cidr": "10.244.0.0/24", "except": ["10.244.0.2/32", "10.244.0.4/31"]},
    {"cidr": "0.0.0.0/0"},
)


@dataclass(frozen=True)
class Scenario:
    namespaces: dict[str, dict[str, str]]
    pods: list[tuple[str, str, dict[str, str]]]  # (namespace, name, labels)
    policies: list[dict[str, Any]]

    def manifest(self) -> str:
        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "svclab.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "reachprop"},
                "spec": {"nodes": 2, "dns": False},
            }
        ]
        docs += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
            for n, labels in self.namespaces.items()
        ]
        for i, (ns, name, labels) in enumerate(self.pods):
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": ns, "labels": labels},
                    "spec": {
                        "nodeName": f"node-{1 + i % 2}",
                        "containers": [{"name": "c", "image": "x", "ports": CONTAINER_PORTS}],
                    },
                }
            )
        docs += [
            {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **p}
            for p in self.policies
        ]
        return yaml.safe_dump_all(docs, sort_keys=False)


def _selector(draw: st.DrawFn, key: str, values: tuple[str, ...]) -> dict[str, Any]:
    kind = draw(st.sampled_from(("all", "labels", "in", "notin", "exists")))
    if kind == "all":
        return {}
    if kind == "labels":
        return {"matchLabels": {key: draw(st.sampled_from(values))}}
    if kind == "exists":
        return {"matchExpressions": [{"key": key, "operator": "Exists"}]}
    vals = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True))
    return {
        "matchExpressions": [
            {"key": key, "operator": "In" if kind == "in" else "NotIn", "values": vals}
        ]
    }


def _peer(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(("pod", "ns", "both", "ip")))
    if kind == "ip":
        return {"ipBlock": draw(st.sampled_from(BLOCKS))}
    out: dict[str, Any] = {}
    if kind in ("pod", "both"):
        out["podSelector"] = _selector(draw, "app", APPS)
    if kind in ("ns", "both"):
        out["namespaceSelector"] = _selector(draw, "team", TEAMS)
    return out


def _port(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(("number", "name", "range", "protocol")))
    proto = draw(st.sampled_from(("TCP", "UDP", None)))
    out: dict[str, Any] = {} if proto is None else {"protocol": proto}
    if kind == "number":
        out["port"] = draw(st.sampled_from((80, 81)))
    elif kind == "name":
        out["port"] = draw(st.sampled_from(("http", "alt", "udp-80", "nope")))
    elif kind == "range":
        out["port"], out["endPort"] = draw(st.sampled_from(((79, 80), (81, 90), (80, 81))))
    return out


def _rule(draw: st.DrawFn, peers_field: str) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    peers = draw(st.integers(0, 2))
    if peers:
        rule[peers_field] = [_peer(draw) for _ in range(peers)]
    ports = draw(st.integers(0, 2))
    if ports:
        rule["ports"] = [_port(draw) for _ in range(ports)]
    return rule


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    names = ["n1", "n2", "n3"][: draw(st.integers(2, 3))]
    namespaces = {n: {"team": draw(st.sampled_from(TEAMS))} for n in names}
    count = draw(st.integers(2, 5))
    pods = [
        (draw(st.sampled_from(names)), f"p{i}", {"app": draw(st.sampled_from(APPS))})
        for i in range(count)
    ]
    policies = []
    for i in range(draw(st.integers(1, 3))):
        types = draw(st.sampled_from((["Ingress"], ["Egress"], ["Ingress", "Egress"])))
        spec: dict[str, Any] = {"podSelector": _selector(draw, "app", APPS), "policyTypes": types}
        for t, field, peers in (("Ingress", "ingress", "from"), ("Egress", "egress", "to")):
            if t in types:
                rules = [_rule(draw, peers) for _ in range(draw(st.integers(0, 2)))]
                if rules:
                    spec[field] = rules
        policies.append(
            {
                "metadata": {"name": f"pol{i}", "namespace": draw(st.sampled_from(names))},
                "spec": spec,
            }
        )
    return Scenario(namespaces, pods, policies)


# ------------------------------------------------------------------------------ running


def svclab(state: Path, *args: str, stdin: str | None = None) -> str:
    res = CliRunner().invoke(cli, ["--state", str(state), *args], input=stdin)
    if res.exit_code != 0:
        raise AssertionError(f"svclab {' '.join(args)}: exit {res.exit_code}: {res.output}")
    return res.output


def stored(state: Path, kind: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(svclab(state, "get", kind, "-A", "-o", "json"))[
        "items"
    ]
    return items


def computed(state: Path) -> dict[tuple[str, str], frozenset[tuple[str, int]]]:
    """The matrix :func:`decide` gives over the stored pods, namespaces and policies."""
    namespaces: Mapping[str, Mapping[str, str]] = {
        n["metadata"]["name"]: n["metadata"].get("labels") or {}
        for n in stored(state, "namespaces")
    }
    pods = [
        PolicyPod(
            p["metadata"]["namespace"],
            p["metadata"]["name"],
            p["metadata"].get("labels") or {},
            ip_address(p["status"]["podIP"]),
            ports=named_ports(p["spec"]["containers"]),
        )
        for p in stored(state, "pods")
        if p["status"].get("podIP")
    ]
    policies = [policy_from_wire(d) for d in stored(state, "networkpolicies")]
    return {
        (s.key, d.key): frozenset(
            (proto, port)
            for proto, port in PORTS
            if decide(s, d, proto, port, policies, namespaces).allowed
        )
        for s in pods
        for d in pods
    }


def without_self(
    m: Mapping[tuple[str, str], frozenset[tuple[str, int]]],
) -> dict[tuple[str, str], frozenset[tuple[str, int]]]:
    """Pairs of distinct pods only (a pod to itself never crosses a node's filter: as
    upstream's e2e tables, loopback is not judged)."""
    return {k: v for k, v in m.items() if k[0] != k[1]}
