"""The iptables legacy back end: rules loaded by ``iptables-legacy-restore`` and read back
through libiptc (python-iptables, :mod:`dataplane.linux.legacy`).

* What libiptc returns, rendered by svclab, is line for line what the kernel's own
  ``iptables-legacy-save`` prints, with and without counters: for kube-proxy's payloads
  and for every accepted IPv4 entry of the kernel-agreement corpus (kube-proxy in all
  modes, flannel, Calico, Weave, Docker, the option corpus).
* Counters read through libiptc count the packets the kernel matched.
* A namespace on the legacy back end holds nothing in nf_tables, and the reverse.
* The back end is per cluster: chosen, recorded, and a change refused.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app import emulation
from control.session import Session
from dataplane.backends.realise import check_realisable
from dataplane.linux import legacy, nsenter, rules
from dataplane.linux.netns import is_root, run_in
from dataplane.linux.testing import realized, sample_network
from netmodel.errors import BackendError
from netmodel.manifests import load_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataplane" / "netfilter"))
from nfcorpus import CORPUS, load

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

NFACCT = ("ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts")


def kernel_save(netns: str, *, counters: bool) -> str:
    """``iptables-legacy-save [-c]`` without its comment lines."""
    out = run_in(netns, ["iptables-legacy-save", *(["-c"] if counters else [])]).stdout
    return "".join(f"{line}\n" for line in out.splitlines() if not line.startswith("#"))


def rendered(mode: str, node: str) -> str:
    """svclab's own payload for a node of the corpus cluster (the CLI's output)."""
    exe = Path(sys.executable).with_name("svclab")
    proc = subprocess.run(
        [str(exe), "rules", "-f", str(CORPUS / "cluster.yaml"), "--node", node, "--mode", mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return proc.stdout


def test_libiptc_reads_back_what_iptables_legacy_save_prints(netns: str) -> None:
    run_in(netns, ["ipset", "restore"], input=(CORPUS / "ipsets.save").read_text())
    rules.ensure_nfacct(netns, NFACCT)
    payloads = [(f"svclab {n}", rendered("iptables", n)) for n in ("node-1", "node-2")]
    payloads += [
        (e.id, e.text)
        for e in load("iptables")
        if e.family == 4 and e.expect == "accept" and e.legacy_expect == "accept"
    ]
    assert len(payloads) >= 20
    compared = 0
    for name, text in payloads:
        run_in(netns, ["iptables-legacy-restore"], input=text)  # the tables it names, whole
        for counters in (True, False):
            got = legacy.save_text(netns, counters=counters)
            assert got == kernel_save(netns, counters=counters), name
        assert legacy.save_text(netns, table="nat") == "".join(
            f"{line}\n"
            for line in run_in(
                netns, ["iptables-legacy-save", "-c", "-t", "nat"]
            ).stdout.splitlines()
            if not line.startswith("#")
        )
        compared += sum(line.startswith("[") for line in legacy.save_text(netns).splitlines())
    assert compared >= 300, compared  # rules compared, over all payloads


def test_counters_through_libiptc_count_what_the_kernel_matched(netns: str) -> None:
    rules.load_iptables(
        netns,
        "*filter\n:SVCLAB-T - [0:0]\n-A OUTPUT -p udp -m udp --dport 9 -j SVCLAB-T\n"
        '-A SVCLAB-T -m comment --comment "discard packets" -j ACCEPT\nCOMMIT\n',
        jumps=None,
        backend="legacy",
    )
    with nsenter.socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM) as s:
        for size in (10, 20, 30):
            s.sendto(b"x" * size, ("127.0.0.1", 9))
    got = {
        (r.chain, r.rule): (r.packets, r.bytes)
        for r in rules.rule_counters(netns, backend="legacy")
    }
    ip_udp = 20 + 8
    assert got == {
        ("OUTPUT", "-A OUTPUT -p udp -m udp --dport 9 -j SVCLAB-T"): (3, 60 + 3 * ip_udp),
        ("SVCLAB-T", '-A SVCLAB-T -m comment --comment "discard packets" -j ACCEPT'): (
            3,
            60 + 3 * ip_udp,
        ),
    }
    # the nf_tables side of the namespace holds nothing: one back end per namespace
    assert "-A " not in run_in(netns, ["iptables-nft-save"]).stdout
    rules.flush_iptables(netns, backend="legacy")
    assert rules.rule_counters(netns, backend="legacy") == []


def test_the_nft_back_end_leaves_x_tables_alone(netns: str) -> None:
    rules.load_iptables(netns, rendered("iptables", "node-1"), backend="nft")
    assert "KUBE-SERVICES" in rules.iptables_save(netns, backend="nft")
    assert legacy.save_text(netns) == ""  # no x_tables table was even created
    assert rules.rule_counters(netns, backend="legacy") == []


def test_kube_proxy_jumps_are_ensured_on_the_legacy_back_end(netns: str) -> None:
    payload = "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n"
    rules.load_iptables(netns, payload, backend="legacy")
    first = legacy.save_text(netns, counters=False)
    assert (
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES' in first
    )
    rules.load_iptables(netns, payload, backend="legacy")  # a second sync adds nothing
    assert legacy.save_text(netns, counters=False) == first
    assert rules.ensure_jumps(netns, backend="legacy") == []


def test_unknown_back_end_and_nftables_mode_on_legacy_are_refused() -> None:
    with pytest.raises(BackendError, match="unknown iptables back end 'xt'"):
        rules.restore_tool("xt")  # type: ignore[arg-type]
    manifest = (CORPUS / "cluster.yaml").read_text()
    session = Session.ephemeral(load_text(manifest, source="cluster.yaml"))
    view = emulation.view(session)
    check_realisable(view, "legacy")  # iptables mode: fine
    nft = manifest.replace("  nodes: 2\n", "  nodes: 2\n  proxyMode: nftables\n")
    nft_view = emulation.view(Session.ephemeral(load_text(nft, source="cluster.yaml")))
    with pytest.raises(BackendError) as err:
        check_realisable(nft_view, "legacy")
    assert "nftables mode cannot run on the iptables legacy back end" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_cluster_keeps_its_back_end() -> None:
    from dataplane.linux.realize import RealCluster, realize

    net = sample_network().network
    with realized(net, cni="netlink", hairpin="masquerade", iptables_backend="legacy") as c:
        assert c.iptables_backend == "legacy"
        # svclab's own rule (the hairpin fallback) went to the same back end
        node = c.node_netns("n0")
        assert "-A SVCLAB-HAIRPIN -s 10.244.0.0/24 -d 10.244.0.0/24 -o cni0" in legacy.save_text(
            node
        )
        assert "-A " not in rules.iptables_save(node, backend="nft")
        assert RealCluster.load(c.cluster_id).iptables_backend == "legacy"
        with pytest.raises(BackendError, match="realised on the iptables legacy back end"):
            realize(net, cluster_id=c.cluster_id, cni="netlink", iptables_backend="nft")
