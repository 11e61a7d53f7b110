"""Test helpers: compact builders for Services / EndpointSlices, upstream's fake node
config, hypothesis strategies for whole Service sets, and a small packet tracer that
follows STRUCTURE.md §1.6 (upstream's tracePacket) over a restore payload."""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from dataplane.proxy.iptables import jump_rules
from dataplane.proxy.model import IPFamily, LocalDetector, NodeProxyConfig
from dataplane.proxy.normalize import parse_tables, rule_target
from netmodel.objects import EndpointSlice, Service

CASES = Path(__file__).resolve().parents[2] / "data" / "kube-proxy" / "cases"

FAKE_NODE_IPS = (
    "127.0.0.1",
    "::1",
    "192.168.0.2",
    "192.168.1.2",
    "192.168.99.11",
    "2001:db8::1",
    "2001:db8:1::2",
)


def fake_config(**changes: Any) -> NodeProxyConfig:
    """Upstream's NewFakeProxier settings (README.md of the cases), with changes."""
    cfg = NodeProxyConfig(
        node_name="test-node",
        node_ips=FAKE_NODE_IPS,
        primary_ip="192.168.0.2",
        ip_family=IPFamily.IPV4,
        local_detector=LocalDetector("ClusterCIDR", "10.0.0.0/8"),
        masquerade_mark="0x4000",
        random_fully=False,
    )
    return replace(cfg, **changes)


def fake_config_v6(**changes: Any) -> NodeProxyConfig:
    return fake_config(
        ip_family=IPFamily.IPV6,
        primary_ip="2001:db8::1",
        local_detector=LocalDetector("ClusterCIDR", "fd00:10::/64"),
        **changes,
    )


def service(
    ns: str,
    name: str,
    cluster_ip: str,
    *,
    type: str = "ClusterIP",
    ports: Sequence[tuple[str, str, int, int | None]] = (("p80", "TCP", 80, None),),
    external_ips: Sequence[str] = (),
    lb_ips: Sequence[str] = (),
    etp: str | None = None,
    itp: str | None = None,
    affinity: int | None = None,
    source_ranges: Sequence[str] = (),
    hcnp: int | None = None,
) -> Service:
    """A Service; ``ports`` are (name, protocol, port, nodePort)."""
    spec: dict[str, Any] = {
        "type": type,
        "clusterIP": cluster_ip,
        "ports": [
            {"name": n, "protocol": p, "port": port, **({"nodePort": np} if np else {})}
            for n, p, port, np in ports
        ],
        "externalIPs": list(external_ips),
        "loadBalancerSourceRanges": list(source_ranges),
    }
    if etp:
        spec["externalTrafficPolicy"] = etp
    if itp:
        spec["internalTrafficPolicy"] = itp
    if hcnp:
        spec["healthCheckNodePort"] = hcnp
    if affinity:
        spec["sessionAffinity"] = "ClientIP"
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": affinity}}
    return Service.model_validate(
        {
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
            "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in lb_ips]}},
        }
    )


def endpoint(
    ip: str,
    node: str | None = None,
    *,
    ready: bool | None = None,
    serving: bool | None = None,
    terminating: bool | None = None,
) -> dict[str, Any]:
    cond = {
        k: v
        for k, v in (("ready", ready), ("serving", serving), ("terminating", terminating))
        if v is not None
    }
    return {"addresses": [ip], "nodeName": node, "conditions": cond}


def slice_(
    ns: str,
    svc: str,
    endpoints: Iterable[dict[str, Any]],
    *,
    name: str | None = None,
    ports: Sequence[tuple[str, str, int]] = (("p80", "TCP", 80),),
    address_type: str = "IPv4",
) -> EndpointSlice:
    """An EndpointSlice of ``svc``; ``ports`` are (name, protocol, port)."""
    return EndpointSlice.model_validate(
        {
            "metadata": {
                "name": name or f"{svc}-1",
                "namespace": ns,
                "labels": {"kubernetes.io/service-name": svc},
            },
            "addressType": address_type,
            "endpoints": list(endpoints),
            "ports": [{"name": n, "protocol": p, "port": port} for n, p, port in ports],
        }
    )


# --------------------------------------------------------------------------- tracer


def _matches(rule: str, src: str, dst: str, proto: str, dport: int, local: set[str]) -> bool:
    toks = shlex.split(rule)
    i = 2
    while i < len(toks):
        neg = toks[i] == "!"
        if neg:
            i += 1
        opt = toks[i]
        val = toks[i + 1] if i + 1 < len(toks) else ""
        ok: bool | None = None
        if opt in ("-s", "-d"):
            addr = src if opt == "-s" else dst
            try:
                ok = ipaddress.ip_address(addr) in ipaddress.ip_network(val, strict=False)
            except (ValueError, TypeError):
                ok = False
        elif opt in ("--src-type", "--dst-type"):
            ok = ((src if opt == "--src-type" else dst) in local) == (val == "LOCAL")
        elif opt == "-p":
            ok = val == proto
        elif opt == "--dport":
            ok = val == str(dport)
        elif opt in ("--rcheck", "--mark", "--ctstate"):
            return False
        if ok is not None:
            if ok == neg:
                return False
            i += 2
            continue
        i += 1
    return True


def trace(
    restore: str,
    config: NodeProxyConfig,
    src: str,
    dst: str,
    dport: int,
    proto: str = "tcp",
) -> tuple[str, bool]:
    """STRUCTURE.md §1.6: ``(output, masq)`` for one packet through a full render."""
    tables = parse_tables(restore)
    for r in jump_rules(config):
        tables[r.table].rules.setdefault(r.chain, []).insert(0, f"-A {r.chain} {r.args}")
    local = set(config.node_ips)
    outputs: list[str] = []
    masq = False

    def run(table: str, chain: str, dest: str) -> bool:
        nonlocal masq
        for rule in tables[table].rules.get(chain, []):
            if not _matches(rule, src, dest, proto, dport, local):
                continue
            target = rule_target(rule)
            if target is None:
                continue
            if target == "KUBE-MARK-MASQ":
                masq = True
            elif target in ("ACCEPT", "REJECT", "DROP"):
                outputs.append(target)
                return True
            elif target == "DNAT":
                outputs.append(rule.split("--to-destination ")[1].split()[0])
                return True
            elif (
                target in tables[table].rules
                and run(table, target, dest)
                and "--probability" not in rule
            ):
                return True
        return False

    run("nat", "PREROUTING", dst)
    dest = dst
    if outputs:
        first = outputs[0]
        dest = first.rsplit(":", 1)[0].strip("[]") if ":" in first else first
    for chain in (
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-FIREWALL",
    ):
        run("filter", chain, dest)
    return ", ".join(outputs), masq


# --------------------------------------------------------------------------- strategies

_names = st.sampled_from(["a", "b", "c", "web", "db"])


@st.composite
def service_sets(
    draw: st.DrawFn, max_services: int = 6
) -> tuple[list[Service], list[EndpointSlice]]:
    """Random Services (every type and policy) with EndpointSlices of mixed conditions."""
    services: list[Service] = []
    slices: list[EndpointSlice] = []
    n = draw(st.integers(0, max_services))
    used_node_ports: set[int] = set()
    for i in range(n):
        ns = draw(_names)
        name = f"svc{i}"
        stype = draw(st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]))
        nports = draw(st.integers(1, 2))
        ports = []
        for j in range(nports):
            proto = draw(st.sampled_from(["TCP", "UDP", "SCTP"]))
            node_port = None
            if stype != "ClusterIP" and draw(st.booleans()):
                node_port = 30000 + len(used_node_ports)
                used_node_ports.add(node_port)
            ports.append((f"p{j}", proto, 80 + j, node_port))
        lb_ips = (
            [f"5.6.{i}.{k + 1}" for k in range(draw(st.integers(0, 2)))]
            if (stype == "LoadBalancer")
            else []
        )
        ranges = draw(
            st.lists(
                st.sampled_from(["203.0.113.0/25", "192.168.0.0/16", "10.0.0.0/8"]),
                max_size=2,
                unique=True,
            )
        )
        services.append(
            service(
                ns,
                name,
                f"172.30.{i}.1",
                type=stype,
                ports=ports,
                external_ips=[f"192.168.99.{100 + i}"] if draw(st.booleans()) else [],
                lb_ips=lb_ips,
                etp=draw(st.sampled_from([None, "Cluster", "Local"])),
                itp=draw(st.sampled_from([None, "Cluster", "Local"])),
                affinity=draw(st.sampled_from([None, 10800, 60])),
                source_ranges=ranges,
                hcnp=draw(st.sampled_from([None, 31000 + i])),
            )
        )
        neps = draw(st.integers(0, 4))
        eps = []
        for k in range(neps):
            cond = draw(
                st.sampled_from(
                    [
                        (None, None, None),
                        (False, True, True),
                        (False, False, True),
                        (False, None, None),
                    ]
                )
            )
            eps.append(
                endpoint(
                    f"10.180.{i}.{k + 1}",
                    draw(st.sampled_from([None, "test-node", "other"])),
                    ready=cond[0],
                    serving=cond[1],
                    terminating=cond[2],
                )
            )
        if neps or draw(st.booleans()):
            slices.append(
                slice_(
                    ns,
                    name,
                    eps,
                    ports=[(pn, pp, 8000 + k) for k, (pn, pp, _, _) in enumerate(ports)],
                )
            )
    return services, slices


# --------------------------------------------------------------------------- fake kernel


def apply_noflush(state: dict[str, dict[str, list[str]]], payload: str) -> None:
    """Apply an ``iptables-restore --noflush`` payload to ``{table: {chain: rules}}`` as
    the kernel would: a ``:CHAIN`` line creates or flushes, ``-A`` appends (the chain
    must exist), ``-X`` deletes (the chain must exist and be unreferenced)."""
    table: dict[str, list[str]] | None = None
    for line in payload.splitlines():
        if line.startswith("*"):
            table = state.setdefault(line[1:], {})
        elif line == "COMMIT":
            table = None
        elif line.startswith(":"):
            assert table is not None
            table[line[1:].split(" ", 1)[0]] = []
        elif line.startswith("-A "):
            assert table is not None
            chain = line.split(" ", 2)[1]
            assert chain in table, f"append to missing chain {chain}"
            target = rule_target(line)
            assert target is None or not target.startswith("KUBE-") or target in table, line
            table[chain].append(line)
        elif line.startswith("-X "):
            assert table is not None
            chain = line[3:]
            assert chain in table, f"delete of missing chain {chain}"
            refs = [r for rules in table.values() for r in rules if rule_target(r) == chain]
            assert not refs, f"delete of referenced chain {chain}: {refs[:1]}"
            del table[chain]
