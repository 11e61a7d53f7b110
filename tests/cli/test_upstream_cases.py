"""Upstream kube-proxy cases through the whole CLI: the case's Services and
EndpointSlices applied with a matching Cluster and KubeProxyConfiguration
(upstream_cases), then ``svclab rules`` (dumps) and
``svclab trace --at node/NAME --all -o json`` (flows). Every case file of a supported
kind in tests/data/kube-proxy/cases is picked up; a dump case with an nftables
expectation is also rendered by kube-proxy in nftables mode. Assertion and
sync-sequence cases are replayed in tests/dataplane/proxy/test_upstream_replay.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from upstream_cases import case_yaml

from app.cli.main import cli
from dataplane.proxy import normalize
from dataplane.proxy.normalize import normalize_transaction

CASES = Path(__file__).resolve().parents[1] / "data" / "kube-proxy" / "cases"


def _cases(kind: str) -> list[Path]:
    out = []
    for p in sorted(CASES.glob("*.yaml")):
        data = yaml.safe_load(p.read_text())
        if (
            data.get("kind") == kind
            and (data.get("node") or {}).get("ipFamily", "IPv4") == "IPv4"
            and (kind != "dump" or data.get("expected_iptables_restore"))
        ):
            out.append(p)
    return out


def _manifests(tmp_path: Path, case: dict[str, Any], mode: str = "iptables") -> Path:
    f = tmp_path / f"case-{mode}.yaml"
    f.write_text(case_yaml(case, mode))
    return f


def test_the_case_files_are_found() -> None:
    assert [p.name for p in _cases("dump")] == ["TestOverallIPTablesRules.yaml"]
    assert [p.name for p in _nft_dump_cases()] == ["TestOverallIPTablesRules.yaml"]
    assert [p.name for p in _cases("flows")] == ["TestExternalTrafficPolicyLocal.yaml"]


@pytest.mark.parametrize("path", _cases("dump"), ids=lambda p: p.stem)
def test_rules_equal_upstream_dump(path: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    f = _manifests(tmp_path, case)
    res = CliRunner().invoke(
        cli, ["rules", "-f", str(f), "--node", case["node"]["name"], "--restore-input"]
    )
    assert res.exit_code == 0, res.output
    assert normalize(res.output) == case["expected_iptables_restore"].lstrip(" \t\n")


def _nft_dump_cases() -> list[Path]:
    return [
        p
        for p in _cases("dump")
        if (yaml.safe_load(p.read_text()).get("nftables") or {}).get("expected_nft_transaction")
    ]


@pytest.mark.parametrize("path", _nft_dump_cases(), ids=lambda p: p.stem)
def test_nft_rules_equal_upstream_dump(path: Path, tmp_path: Path) -> None:
    """The nftables leg: kube-proxy in nftables mode with the case's ``nftables.node``
    (upstream's nftables fake proxier has nodePortAddresses [192.168.0.2/32,
    2001:db8::1/128], so NodePorts are matched on the node-port-ips set, not on every
    local address) gives upstream's transaction."""
    case = yaml.safe_load(path.read_text())
    f = _manifests(tmp_path, case, "nftables")
    kpc = list(yaml.safe_load_all(f.read_text()))[1]
    assert kpc["mode"] == "nftables"
    assert kpc["nodePortAddresses"] == case["nftables"]["node"]["nodePortAddresses"]
    res = CliRunner().invoke(
        cli, ["rules", "-f", str(f), "--node", case["node"]["name"], "--restore-input"]
    )
    assert res.exit_code == 0, res.output
    want = case["nftables"]["expected_nft_transaction"]
    assert normalize_transaction(res.output) == normalize_transaction(want)


@pytest.mark.parametrize("path", _cases("flows"), ids=lambda p: p.stem)
def test_flows_through_trace_at(path: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    flows = [
        {
            "name": fl["name"],
            "from": fl["sourceIP"],
            "to": f"{fl['destIP']}:{fl['destPort']}",
            "proto": fl.get("protocol", "TCP").lower(),
        }
        for fl in case["flows"]
    ]
    ffile = tmp_path / "flows.yaml"
    ffile.write_text(yaml.safe_dump(flows))
    f = _manifests(tmp_path, case)
    res = CliRunner().invoke(
        cli,
        [
            "trace",
            "-f",
            str(f),
            "--at",
            f"node/{case['node']['name']}",
            "--all",
            "--flows",
            str(ffile),
            "-o",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    results = [json.loads(line) for line in res.output.splitlines() if line.strip()]
    assert len(results) == len(case["flows"])
    for fl, got in zip(case["flows"], results, strict=True):
        want = fl["output"]
        if want in ("REJECT", "DROP"):
            assert got["verdict"] == want, fl["name"]
        else:
            assert ", ".join(e["endpoint"] for e in got["endpoints"]) == want, fl["name"]
            assert abs(sum(e["probability"] for e in got["endpoints"]) - 1.0) < 1e-9
        assert got["masquerade"] == fl["masq"], fl["name"]


def test_trace_iptables_save_traces_the_expected_dump(tmp_path: Path) -> None:
    """``--iptables-save`` replaces the node's rules by a dump: upstream's expected dump
    (plus the built-in jump rules kube-proxy ensures) is traced as it stands."""
    case = yaml.safe_load((CASES / "TestOverallIPTablesRules.yaml").read_text())
    f = _manifests(tmp_path, {**case, "services": [], "endpointslices": []})
    jumps = {
        "filter": [
            ":INPUT ACCEPT [0:0]",
            ":FORWARD ACCEPT [0:0]",
            ":OUTPUT ACCEPT [0:0]",
            "-A INPUT -j KUBE-FIREWALL",
            "-A INPUT -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL",
            "-A INPUT -j KUBE-NODEPORTS",
            "-A INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES",
            "-A FORWARD -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL",
            "-A FORWARD -j KUBE-FORWARD",
            "-A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES",
            "-A FORWARD -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES",
            "-A OUTPUT -m conntrack --ctstate NEW -j KUBE-SERVICES",
        ],
        "nat": [
            ":PREROUTING ACCEPT [0:0]",
            ":INPUT ACCEPT [0:0]",
            ":OUTPUT ACCEPT [0:0]",
            ":POSTROUTING ACCEPT [0:0]",
            "-A PREROUTING -j KUBE-SERVICES",
            "-A OUTPUT -j KUBE-SERVICES",
            "-A POSTROUTING -j KUBE-POSTROUTING",
        ],
    }
    text = case["expected_iptables_restore"]
    for table, lines in jumps.items():
        # chains are declared before a rule jumps to them (iptables-restore refuses a
        # jump to a chain declared further down): the jumps go at the end of the table
        decl = [ln for ln in lines if ln.startswith(":")]
        rules = [ln for ln in lines if not ln.startswith(":")]
        head, _, rest = text.partition(f"*{table}\n")
        body, _, tail = rest.partition("COMMIT\n")
        text = (
            f"{head}*{table}\n" + "\n".join(decl) + "\n" + body + "\n".join(rules) + "\nCOMMIT\n"
            + tail
        )
    dump = tmp_path / "dump.txt"
    dump.write_text(text)

    def at(src: str, dst: str) -> dict[str, Any]:
        res = CliRunner().invoke(
            cli,
            [
                "trace",
                "-f",
                str(f),
                "--at",
                "node/test-node",
                "--all",
                "--from",
                src,
                "--to",
                dst,
                "--iptables-save",
                str(dump),
                "-o",
                "json",
            ],
        )
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    r = at("10.0.0.2", "172.30.0.41:80")
    assert [e["endpoint"] for e in r["endpoints"]] == ["10.180.0.1:80"] and not r["masquerade"]
    r = at("203.0.113.2", "5.6.7.8:80")  # LB with source range, client inside it
    assert [e["endpoint"] for e in r["endpoints"]] == ["10.180.0.3:80"] and r["masquerade"]
    assert at("203.0.113.130", "5.6.7.8:80")["verdict"] == "DROP"  # outside the range
    assert at("10.0.0.2", "172.30.0.46:80")["verdict"] == "REJECT"  # no endpoints
    r = at("203.0.113.2", "192.168.0.2:3003")  # NodePort, eTP Cluster
    assert [e["endpoint"] for e in r["endpoints"]] == ["10.180.0.3:80"] and r["masquerade"]
