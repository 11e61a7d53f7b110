"""``svclab diff --node NAME --node-dump DIR`` finds drift planted in a real node: the
rules kube-proxy would write (examples/web.yaml) loaded into a namespace, then a
Service's KUBE-SVC chain deleted, a stale KUBE-SEP chain added, and (IPVS mode) an ipset
member removed, with the real tools; ``node-dump collect`` inside the namespace, then
``diff``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux import netns as ns
from dataplane.linux.netns import is_root

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"


def _manifest(tmp: Path, mode: str) -> str:
    """examples/web.yaml in MODE, without nfacct counters (no nfacct objects exist in a
    fresh namespace; kube-proxy checks for them the same way)."""
    docs = list(yaml.safe_load_all(WEB.read_text()))
    for d in docs:
        if d and d.get("kind") == "Cluster":
            d["spec"]["proxyMode"] = mode
            d["spec"]["nodeEnvironment"] = {
                "nfacctCounters": {
                    "ct_state_invalid_dropped_pkts": False,
                    "localhost_nps_accepted_pkts": False,
                }
            }
    m = tmp / f"web-{mode}.yaml"
    m.write_text(yaml.safe_dump_all(docs))
    return str(m)


def _svclab(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def _collect(name: str, out: Path) -> None:
    svclab = str(Path(sys.executable).with_name("svclab"))
    ns.run_in(name, [svclab, "node-dump", "collect", str(out)])


def _diff(files: list[str], out: Path) -> tuple[int, dict[str, object]]:
    args = ["diff", "--node", "node-1", "--node-dump", str(out), "-o", "json"]
    for f in files:
        args += ["-f", f]
    r = CliRunner().invoke(cli, args)
    return r.exit_code, json.loads(r.output)


def test_diff_finds_deleted_svc_chain_and_stale_sep(netns: str, tmp_path: Path) -> None:
    web = _manifest(tmp_path, "iptables")
    save = _svclab("rules", "-f", web, "--node", "node-1")
    ns.run_in(netns, ["iptables-nft-restore"], input=save)
    clean = tmp_path / "clean"
    _collect(netns, clean)
    code, res = _diff([web], clean)
    assert code == 0 and res["in_sync"] is True, res

    svc_chain = next(
        line[1:].split()[0]
        for line in save.splitlines()
        if line.startswith(":KUBE-SVC-") and "NPX46M4PTMTKRN6Y" not in line
    )
    rules = ns.run_in(netns, ["iptables-nft", "-t", "nat", "-S"]).stdout.splitlines()
    for r in rules:
        if r.startswith("-A ") and f"-j {svc_chain}" in r:
            ns.run_in(netns, ["iptables-nft", "-t", "nat", "-D", *_split(r[3:])])
    ns.run_in(netns, ["iptables-nft", "-t", "nat", "-F", svc_chain])
    ns.run_in(netns, ["iptables-nft", "-t", "nat", "-X", svc_chain])
    stale = "KUBE-SEP-STALESTALESTALE1"
    ns.run_in(netns, ["iptables-nft", "-t", "nat", "-N", stale])
    ns.run_in(
        netns,
        [
            "iptables-nft",
            "-t",
            "nat",
            "-A",
            stale,
            "-p",
            "tcp",
            "-m",
            "comment",
            "--comment",
            "default/web:http",
            "-m",
            "tcp",
            "-j",
            "DNAT",
            "--to-destination",
            "10.244.9.9:8080",
        ],
    )
    drifted = tmp_path / "drifted"
    _collect(netns, drifted)
    code, res = _diff([web], drifted)
    assert code == 1 and res["in_sync"] is False
    services = res["services"]
    assert isinstance(services, dict)
    found = services["default/web:http"]
    kinds = {(f["kind"], f["chain"]) for f in found}
    assert ("missing-chain", svc_chain) in kinds
    assert ("extra-chain", stale) in kinds
    assert any(f["kind"] == "extra-rule" and "10.244.9.9:8080" in f["rule"] for f in found)
    assert any(f["kind"] == "missing-rule" and f"-j {svc_chain}" in f["rule"] for f in found)


def _split(spec: str) -> list[str]:
    import shlex

    return shlex.split(spec)


def test_diff_finds_a_removed_ipset_member(netns: str, tmp_path: Path) -> None:
    m = _manifest(tmp_path, "ipvs")
    out = _svclab("rules", "-f", m, "--node", "node-1")
    ipsets = out.split("# ipset save\n", 1)[1].split("# iptables-save\n", 1)[0]
    glue = out.split("# iptables-save\n", 1)[1]
    ns.run_in(netns, ["ipset", "restore"], input=ipsets)
    ns.run_in(netns, ["iptables-nft-restore"], input=glue)
    member = next(
        line.split()[2] for line in ipsets.splitlines() if line.startswith("add KUBE-CLUSTER-IP ")
    )
    ns.run_in(netns, ["ipset", "del", "KUBE-CLUSTER-IP", member])
    d = tmp_path / "dump"
    _collect(netns, d)
    code, res = _diff([m], d)
    assert code == 1
    node = res["services"]["(node)"]  # type: ignore[index]
    assert {
        "kind": "missing-member",
        "service": "(node)",
        "table": "ipset",
        "chain": "KUBE-CLUSTER-IP",
        "rule": member,
    } in node


K3S = ROOT / "tests" / "data" / "kubectl-dumps" / "k3s-support-bundle"

# k3s's own cluster range (its --cluster-cidr default, which no object records: the one
# Node's podCIDR is a /24 of it) and no nfacct counters (no nfacct objects exist in a
# fresh namespace); the rest as inferred from the dump
K3S_CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: k3s}
spec:
  serviceCIDR: 10.43.0.0/16
  podCIDR: 10.42.0.0/16
  nodeCIDRMaskSize: 24
  nodeNetwork: 172.17.0.0/24
  allocation: recorded
  nodeEnvironment:
    nfacctCounters: {ct_state_invalid_dropped_pkts: false, localhost_nps_accepted_pkts: false}
"""


def test_diff_finds_drift_in_a_real_k3s_clusters_node(netns: str, tmp_path: Path) -> None:
    """A real cluster's objects (tests/data/kubectl-dumps/k3s-support-bundle) applied; what
    kube-proxy on its node would hold loaded into a namespace: in sync. Then kube-dns's
    KUBE-SVC chain for dns/udp deleted and a stale KUBE-SEP (a gone CoreDNS pod) added
    with the real tools: ``diff`` names both under kube-system/kube-dns:dns."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(K3S_CLUSTER)
    state = str(tmp_path / "state")
    _svclab("--state", state, "apply", "-f", str(K3S), "-f", str(cluster))
    save = _svclab("--state", state, "rules", "--node", "primary-node")
    ns.run_in(netns, ["iptables-nft-restore"], input=save)

    def diff(d: Path) -> tuple[int, dict[str, object]]:
        args = ["--state", state, "diff", "--node", "primary-node", "--node-dump", str(d)]
        r = CliRunner().invoke(cli, [*args, "-o", "json"])
        return r.exit_code, json.loads(r.output)

    clean = tmp_path / "clean"
    _collect(netns, clean)
    code, res = diff(clean)
    assert code == 0 and res["in_sync"] is True, res

    svc_chain = "KUBE-SVC-TCOU7JCQXEZGVUNU"  # kube-system/kube-dns:dns, as on real nodes
    assert f":{svc_chain} " in save
    for r in ns.run_in(netns, ["iptables-nft", "-t", "nat", "-S"]).stdout.splitlines():
        if r.startswith("-A ") and f"-j {svc_chain}" in r:
            ns.run_in(netns, ["iptables-nft", "-t", "nat", "-D", *_split(r[3:])])
    ns.run_in(netns, ["iptables-nft", "-t", "nat", "-F", svc_chain])
    ns.run_in(netns, ["iptables-nft", "-t", "nat", "-X", svc_chain])
    stale = "KUBE-SEP-GONECOREDNSPOD1"
    ns.run_in(netns, ["iptables-nft", "-t", "nat", "-N", stale])
    ns.run_in(
        netns,
        [
            *("iptables-nft", "-t", "nat", "-A", stale, "-p", "udp", "-m", "comment"),
            *("--comment", "kube-system/kube-dns:dns", "-m", "udp", "-j", "DNAT"),
            *("--to-destination", "10.42.0.99:53"),
        ],
    )
    drifted = tmp_path / "drifted"
    _collect(netns, drifted)
    code, res = diff(drifted)
    assert code == 1 and res["in_sync"] is False
    services = res["services"]
    assert isinstance(services, dict)
    found = services["kube-system/kube-dns:dns"]
    kinds = {(f["kind"], f["chain"]) for f in found}
    assert ("missing-chain", svc_chain) in kinds
    assert ("extra-chain", stale) in kinds
    assert any(f["kind"] == "extra-rule" and "10.42.0.99:53" in f["rule"] for f in found)
    assert set(services) == {"kube-system/kube-dns:dns"}, services
