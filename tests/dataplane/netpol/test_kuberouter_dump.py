"""svclab's kube-router rendering against rules users posted from real nodes
(``tests/data/kuberouter/``, see PROVENANCE.md there): the same pods (and policy)
rendered by :func:`dataplane.netpol.render_policy` give the same rule lines, once each
dump chain is mapped to the chain svclab names for the same pod (kube-router hashes a
timestamp into its names, so those cannot be reproduced)."""

from __future__ import annotations

import re
from ipaddress import ip_address
from pathlib import Path

from dataplane.netpol import render_policy
from dataplane.netpol.kuberouter import policy_chain
from netmodel.netpolicy import PolicyPod, policy_from_wire

DATA = Path(__file__).resolve().parents[2] / "data" / "kuberouter"
_JUMP = re.compile(
    r'-([sd]) (\S+)/32 .*POD name:(\S+) namespace: (\S+) to chain (KUBE-POD-FW-[A-Z2-7]{16})"'
)
_POD = re.compile(r"POD name:(\S+) namespace: (\S+?)\"")


def _lines(name: str) -> list[str]:
    return [ln for ln in (DATA / name).read_text().splitlines() if ln.strip()]


def _pods_named(lines: list[str]) -> dict[str, tuple[str, str, str | None]]:
    """dump chain -> (namespace, pod, IP if a jump or -d/-s rule names it)."""
    chains: dict[str, tuple[str, str, str | None]] = {}
    for ln in lines:
        m = _JUMP.search(ln)
        if m:
            chains[m.group(5)] = (m.group(4), m.group(3), m.group(2))
    for ln in lines:
        chain = ln.split()[1]
        if not chain.startswith("KUBE-POD-FW-") or chain in chains:
            continue
        m = _POD.search(ln)
        ip = re.search(r"-[sd] (\S+)/32", ln)
        if m:
            chains[chain] = (m.group(2), m.group(1), None)
        elif ip:
            chains.setdefault(chain, ("", "", ip.group(1)))
    return chains


def _compare(dump: list[str]) -> None:
    named = _pods_named(dump)
    # a chain whose pod the dump names only by IP is matched by its IP
    by_ip = {ip: (ns, pod) for ns, pod, ip in named.values() if ip and pod}
    pods = []
    for ns, pod, ip in named.values():
        if not pod:
            continue
        addr = ip or next((i for i, (n, p) in by_ip.items() if (n, p) == (ns, pod)), "10.99.0.1")
        pods.append(PolicyPod(ns, pod, {}, ip_address(addr), "node-1"))
    unnamed_ips = [ip for ns, pod, ip in named.values() if not pod and ip]
    for k, ip in enumerate(unnamed_ips):
        pods.append(PolicyPod("unnamed", f"pod-{k}", {}, ip_address(ip), "node-1"))
    rendered = render_policy("node-1", "172.18.0.2", pods, [], {})
    ours = {
        p.key: c for p, c in zip(pods, [_chain_of(rendered.filter, p) for p in pods], strict=True)
    }
    rename: dict[str, str] = {}
    for chain, (ns, pod, ip) in named.items():
        key = f"{ns}/{pod}" if pod else f"unnamed/pod-{unnamed_ips.index(ip or '')}"
        rename[chain] = ours[key]
    have = set(rendered.jumps) | set(rendered.rules)
    for line in dump:
        mapped = line
        for theirs, mine in rename.items():
            mapped = mapped.replace(theirs, mine)
        assert mapped in have, f"not rendered: {line}"


def _chain_of(text: str, pod: PolicyPod) -> str:
    m = re.search(
        rf"-d {pod.ip}/32 -m comment --comment \"rule to jump traffic destined to POD "
        rf"name:{re.escape(pod.name)} namespace: {pod.namespace} to chain (\S+)\"",
        text,
    )
    assert m is not None
    return m.group(1)


def test_k0s_node_pod_chains_and_jumps_are_rendered_line_for_line() -> None:
    dump = _lines("k0s-2849-filter.txt")
    assert len(dump) == 14
    _compare(dump)


def test_k3s_node_default_chain_and_pod_chain_tail_are_rendered_line_for_line() -> None:
    dump = _lines("k3s-3373-filter.txt")
    assert len(dump) == 7
    _compare(dump)


def test_dump_chain_names_have_kube_routers_shape() -> None:
    for name in ("k0s-2849-filter.txt", "k3s-3373-filter.txt"):
        for ln in _lines(name):
            for chain in re.findall(r"KUBE-(?:POD-FW|NWPLCY)-\S+", ln):
                assert re.fullmatch(r"KUBE-(POD-FW|NWPLCY)-([A-Z2-7]{16}|DEFAULT)\"?", chain), chain


def test_a_policy_chain_has_the_mark_return_pairs_of_kube_router_v2() -> None:
    """kube-router#1617 lists a v2.x policy chain with ``iptables -L -v -n``: per rule a
    MARK (``MARK or 0x10000``: ``--set-xmark 0x10000/0x10000``) then a RETURN of marked
    packets, both matching the peers' set as src and the selected pods' as dst, with
    the policy's comment, and ``tcp dpt:8765`` for the rule with a port."""
    listed = _lines("kube-router-1617-policy-chain.txt")
    pol = policy_from_wire(
        {
            "metadata": {"name": "test-network-policy", "namespace": "test"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "api"}},
                "ingress": [
                    {"from": [{"podSelector": {"matchLabels": {"app": "a"}}}]},
                    {
                        "from": [{"podSelector": {"matchLabels": {"app": "b"}}}],
                        "ports": [{"protocol": "TCP", "port": 8765}],
                    },
                ],
            },
        }
    )
    pods = [PolicyPod("test", "api", {"app": "api"}, ip_address("10.0.10.124"), "node-1")]
    r = render_policy("node-1", "10.0.0.1", pods, [pol], {"test": {}})
    chain = policy_chain(pol, "ingress")
    ours = [ln.removeprefix(f"-A {chain} ") for ln in r.rules if ln.startswith(f"-A {chain} ")]
    assert len(ours) == len(listed) == 4

    def shape_listed(ln: str) -> tuple[str, str, str | None, str]:
        target = ln.split()[2]
        comment = re.search(r"/\* (.*) \*/", ln).group(1)  # type: ignore[union-attr]
        port = re.search(r"tcp dpt:(\d+)", ln)
        effect = "MARK 0x10000/0x10000" if "MARK or 0x10000" in ln else "RETURN if 0x10000/0x10000"
        assert re.search(
            r"match-set KUBE-SRC-[A-Z2-7]{16} src match-set KUBE-DST-[A-Z2-7]{16} dst", ln
        )
        return target, comment, port.group(1) if port else None, effect

    def shape_ours(ln: str) -> tuple[str, str, str | None, str]:
        target = ln.rsplit("-j ", 1)[1].split()[0]
        comment = re.search(r'--comment "([^"]*)"', ln).group(1)  # type: ignore[union-attr]
        port = re.search(r"-m tcp --dport (\d+)", ln)
        effect = (
            "MARK 0x10000/0x10000"
            if ln.endswith("-j MARK --set-xmark 0x10000/0x10000")
            else "RETURN if 0x10000/0x10000"
            if ln.endswith("-m mark --mark 0x10000/0x10000 -j RETURN")
            else ln
        )
        assert re.search(
            r"-m set --match-set KUBE-SRC-[A-Z2-7]{16} src -m set --match-set KUBE-DST-[A-Z2-7]{16} dst",
            ln,
        )
        return target, comment, port.group(1) if port else None, effect

    assert [shape_ours(ln) for ln in ours] == [shape_listed(ln) for ln in listed]
