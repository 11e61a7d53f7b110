"""Upstream kube-proxy cases that cannot go through the CLI, replayed the way upstream's
tests feed their proxier: the case's objects handed to the proxy as recorded, not
admitted through svclab's apiserver and allocator.

* ``assertion`` cases (TestLoadBalancerIngressRouteTypeProxy): their ClusterIPs
  (``10.20.30.41``...) lie outside the fake's Service range, which an apiserver refuses;
  the renderers get them as recorded, for iptables with the case's ``node:`` and for
  nftables with its ``nftables.node`` (upstream's nftables fake: its own
  ``nodePortAddresses`` and ``serviceCIDRs``).
* IPv6 ``flows`` cases (TestNodePorts' IPv6 sub-tests): the CLI's clusters are
  IPv4-only (issue 27 item 1), so they are rendered for the case's IPv6 node and traced
  with upstream's packet-tracer rules (STRUCTURE.md §1.6, ``proxy_builders.trace``);
  the IPv4 flows cases go through ``svclab trace`` (tests/cli/test_upstream_cases.py).
* ``dump-sequence`` cases (TestSyncProxyRulesRepeated): svclab's kube-proxy agent
  (:class:`control.agents.kubeproxy.KubeProxy`) over an emulated node, fed the case's
  changes one step at a time as watch events; after each step the ``iptables-restore``
  payload its sync wrote is compared with upstream's, and the node's rules are checked.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from proxy_builders import CASES, trace
from upstream_cases import case_documents

from control.agents.kubeproxy import EmulatedRules, KubeProxy, Rendered
from control.store.base import WatchEvent
from dataplane.netfilter import RestoreError, apply_restore, format_save
from dataplane.proxy import IptablesRender, Mode, build_snapshot, render_iptables
from dataplane.proxy.cases import load_case, strip_extensions
from dataplane.proxy.nftables import render_nftables
from dataplane.proxy.normalize import consistency_errors, normalize, parse_tables
from netmodel.cluster import Cluster
from netmodel.manifests import decode
from netmodel.objects import EndpointSlice, KubeObject, Node, Service
from netmodel.proxyconfig import KubeProxyConfiguration


def _kind(path: Path) -> str:
    return str(yaml.safe_load(path.read_text()).get("kind"))


def _cases(kind: str) -> list[Path]:
    return [p for p in sorted(CASES.glob("*.yaml")) if _kind(p) == kind]


def _ipv6_cases(kind: str) -> list[Path]:
    return [
        p
        for p in _cases(kind)
        if (yaml.safe_load(p.read_text()).get("node") or {}).get("ipFamily") == "IPv6"
    ]


def test_the_replayed_cases_are_found() -> None:
    assert [p.stem for p in _cases("assertion")] == [
        f"TestLoadBalancerIngressRouteTypeProxy-{gate}-{mode}"
        for gate in ("disabled", "enabled")
        for mode in ("Proxy", "VIP", "nil")
    ]
    assert [p.stem for p in _cases("dump-sequence")] == ["TestSyncProxyRulesRepeated"]
    assert [p.stem for p in _ipv6_cases("flows")] == [
        "TestNodePorts-ipv6-localhost-disabled-nodeport-addresses",
        "TestNodePorts-ipv6-localhost-disabled",
        "TestNodePorts-ipv6-localhost-enabled",
    ]
    # every case file has a replay: flows and dumps go through the CLI
    # (tests/cli/test_upstream_cases.py), these here
    kinds = {_kind(p) for p in CASES.glob("*.yaml")}
    assert kinds <= {"dump", "flows", "assertion", "dump-sequence"}, kinds


# --------------------------------------------------------------------------- assertions


def _destination(rule: str) -> str | None:
    toks = shlex.split(rule)
    for i, tok in enumerate(toks[:-1]):
        if tok == "-d" and toks[i - 1] != "!":
            return toks[i + 1]
    return None


@pytest.mark.parametrize("path", _cases("assertion"), ids=lambda p: p.stem)
def test_assertion_case_iptables(path: Path) -> None:
    case = load_case(path)
    cfg = case.node_config
    out = render_iptables(build_snapshot(case.services, case.endpointslices, cfg), cfg)
    tables = parse_tables(out.restore_input)
    (svc,) = case.services
    nat_services = tables["nat"].rules.get("KUBE-SERVICES", [])
    # the recorded ClusterIP, outside the fake's Service range, is rendered as recorded
    assert svc.spec.cluster_ip in {_destination(r) for r in nat_services}
    assert consistency_errors(out.restore_input) == []
    for a in case.raw["expected_assertions"]:
        rules = tables[a["table"]].rules.get(a["chain"], [])
        hit = [r for r in rules if _destination(r) == a["destination"]]
        assert bool(hit) == a["present"], (a, hit)


def _element_key(element: str) -> str:
    """``1.2.3.4 . tcp . 80`` of a map element ``KEY [comment "..."] : VERDICT``."""
    return element.split(" : ", 1)[0].split(" comment ", 1)[0]


@pytest.mark.parametrize("path", _cases("assertion"), ids=lambda p: p.stem)
def test_assertion_case_nftables(path: Path) -> None:
    case = load_case(path)
    cfg = case.nftables_config
    # the nftables fake proxier's own settings, from the case
    assert cfg.node_port_addresses == ("192.168.0.2/32", "2001:db8::1/128")
    assert cfg.service_cidrs == ("172.30.0.0/16",)
    out = render_nftables(build_snapshot(case.services, case.endpointslices, cfg), cfg)
    sets = {s.name: s for s in out.sets}
    (svc,) = case.services
    assert f"{svc.spec.cluster_ip} . tcp . 80" in map(_element_key, sets["service-ips"].elements)
    for a in case.raw["nftables"]["expected_assertions"]:
        keys = [_element_key(e) for e in sets[a["map"]].elements]
        assert (a["key"] in keys) == a["present"], (a, keys)


# --------------------------------------------------------------------------- IPv6 flows


@pytest.mark.parametrize("path", _ipv6_cases("flows"), ids=lambda p: p.stem)
def test_ipv6_flows_case(path: Path) -> None:
    case = load_case(path)
    cfg = case.node_config
    assert cfg.is_ipv6
    out = render_iptables(build_snapshot(case.services, case.endpointslices, cfg), cfg)
    assert consistency_errors(out.restore_input) == []
    for fl in case.raw["flows"]:
        got = trace(
            out.restore_input,
            cfg,
            fl["sourceIP"],
            fl["destIP"],
            fl["destPort"],
            fl.get("protocol", "TCP").lower(),
        )
        assert got == (fl["output"], fl["masq"]), fl["name"]
    tables = parse_tables(out.restore_input)
    for want in case.raw.get("expected_chain_rules") or []:
        rules = tables[want["table"]].rules.get(want["chain"], [])
        assert "".join(f"{r}\n" for r in rules) == want["rules"], want


# --------------------------------------------------------------------------- sequences


class _Recording(EmulatedRules):
    """The emulated node, keeping every payload the agent loaded (or tried to)."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: list[tuple[str, bool]] = []

    def load(self, node: str, mode: Mode, rendered: Rendered, *, full: bool) -> None:
        assert isinstance(rendered, IptablesRender)
        self.payloads.append((rendered.restore_input, full))
        super().load(node, mode, rendered, full=full)


def _agent(case: dict[str, Any], sink: _Recording) -> KubeProxy:
    """svclab's kube-proxy for the case's node: a Cluster and KubeProxyConfiguration
    stating its ``node:`` block (scripts/upstream_cases.py), and its Node object."""
    cluster_doc, kpc_doc = case_documents(case)[:2]
    cluster = decode(cluster_doc, source=case["name"], index=1)
    kpc = decode(kpc_doc, source=case["name"], index=2)
    assert isinstance(cluster, Cluster) and isinstance(kpc, KubeProxyConfiguration)
    (spec_node,) = cluster_doc["spec"]["nodes"]
    node = Node.model_validate(
        {
            "metadata": {"name": spec_node["name"]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": a} for a in spec_node["addresses"]]
            },
        }
    )
    proxy = KubeProxy(node.name, cluster.spec, kpc, sink, None)
    proxy.resync([node])
    return proxy


def _event(change: dict[str, Any], current: dict[str, KubeObject], source: str) -> WatchEvent:
    """A watch event for one change of a step: ``add`` / ``update`` carry the object,
    ``delete`` names it (kind, namespace, name) and the event carries its last state."""
    ((op, body),) = change.items()
    if op == "delete":
        key = f"{body['kind']}/{body['namespace']}/{body['name']}"
        return WatchEvent("DELETED", current.pop(key), 0)
    obj = decode(strip_extensions(body), source=source, index=1)
    assert isinstance(obj, Service | EndpointSlice)
    key = f"{obj.kind}/{obj.key}"
    assert (key in current) == (op == "update"), (op, key)
    current[key] = obj
    return WatchEvent("ADDED" if op == "add" else "MODIFIED", obj, 0)


def _nat_chains(sink: _Recording, node: str) -> set[str]:
    return set(sink.nodes[node].ruleset.tables["nat"].chains)


@pytest.mark.parametrize("path", _cases("dump-sequence"), ids=lambda p: p.stem)
def test_sync_sequence_replayed_change_by_change(path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    sink = _Recording()
    proxy = _agent(case, sink)
    node = proxy.node_name
    current: dict[str, KubeObject] = {}
    for i, step in enumerate(case["steps"]):
        where = f"step {i} ({step['name']})"
        if "inject" in step:  # a rule added behind kube-proxy's back (iptables -A)
            inj = step["inject"]
            state = sink.nodes[node]
            state.ruleset = apply_restore(
                state.ruleset, f"*{inj['table']}\n{inj['rule']}\nCOMMIT\n", source=where
            )
        proxy.handle([_event(c, current, f"{path}: {where}") for c in step["changes"]])
        before = format_save(sink.nodes[node].ruleset) if sink.nodes else ""
        loaded = len(sink.payloads)
        if step["sync"] == "fails":
            # the partial payload deletes a chain the injected rule still jumps to: the
            # load is refused as a whole, the node keeps its rules, the next sync is full
            with pytest.raises(RestoreError, match="KUBE-SEP-AYCN5HPXMIRJNJXU is still referenced"):
                proxy.sync()
            assert len(sink.payloads) == loaded + 1 and not sink.payloads[-1][1], where
            assert format_save(sink.nodes[node].ruleset) == before, where
            assert set(step["expected_chains_kept"]) <= _nat_chains(sink, node), where
            continue
        want = step["expected_iptables_restore"]
        if not step["changes"] and step["sync"] == "partial":
            # nothing pending: svclab's kube-proxy does not sync at all; upstream's
            # payload for that sync rewrites only what the node already holds
            assert proxy.sync() == 0, where
            after = apply_restore(sink.nodes[node].ruleset, want, source=where)
            assert format_save(after) == before, where
            continue
        assert proxy.sync() == 1, where
        got, full = sink.payloads[-1]
        assert full == (step["sync"] == "full"), where
        assert normalize(got) == normalize(want), where
        if step.get("expected_check_consistency"):
            assert consistency_errors(got) == [], where
    # the node ends with what a fresh full render of the final state gives
    cfg = proxy.node_config
    assert cfg is not None
    services = [o for o in current.values() if isinstance(o, Service)]
    slices = [o for o in current.values() if isinstance(o, EndpointSlice)]
    fresh = EmulatedRules()
    fresh.load(
        node, "iptables", render_iptables(build_snapshot(services, slices, cfg), cfg), full=True
    )
    assert _by_chain(sink, node) == _by_chain(fresh, node)


def _by_chain(sink: EmulatedRules, node: str) -> dict[str, dict[str, list[str]]]:
    """The node's filter and nat rules, chain by chain (chains a partial sync created
    are listed last by iptables-save; their order is not part of the state)."""
    rs = sink.nodes[node].ruleset
    return {
        t: {c: [r.spec for r in ch.rules] for c, ch in rs.tables[t].chains.items()}
        for t in ("filter", "nat")
    }
