"""Legacy IPs: IPv4 written with leading zeros, as existing clusters may hold them, is
accepted where kube-apiserver accepts it, with kube-apiserver's warning; it is stored as
written, and kube-proxy's rules (and their chain-name hashes) use the normalised form."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli

# a `kubectl get -o yaml` dump (a List with server-set fields) of a cluster whose
# Services and EndpointSlices carry leading-zero IPv4 addresses
DUMP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: legacy}}
spec:
  serviceCIDR: 10.96.0.0/12
  podCIDR: 10.244.0.0/16
  nodes: 2
---
apiVersion: v1
kind: List
metadata: {{resourceVersion: ""}}
items:
- apiVersion: v1
  kind: Service
  metadata:
    name: web
    namespace: default
    resourceVersion: "1234"
    uid: 0b7c5f9e-0000-4000-8000-000000000001
    creationTimestamp: "2024-05-01T10:00:00Z"
  spec:
    clusterIP: {cip}
    clusterIPs: [{cip}]
    externalIPs: [{ext}]
    ipFamilies: [IPv4]
    ipFamilyPolicy: SingleStack
    ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
    sessionAffinity: None
    type: ClusterIP
  status: {{loadBalancer: {{}}}}
- apiVersion: v1
  kind: Service
  metadata: {{name: lb, namespace: default, resourceVersion: "1240"}}
  spec:
    type: LoadBalancer
    clusterIP: {cip2}
    clusterIPs: [{cip2}]
    loadBalancerSourceRanges: [{range}]
    ports: [{{name: http, port: 8080, targetPort: 8080, protocol: TCP, nodePort: 30080}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-abcde
    namespace: default
    labels: {{kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints:
  - addresses: [{ep1}]
    conditions: {{ready: true}}
  - addresses: [{ep2}]
    conditions: {{ready: true}}
  ports: [{{name: http, port: 8080, protocol: TCP}}]
"""
LEGACY = dict(
    cip="010.096.000.050",
    ext="192.000.002.010",
    cip2="10.96.000.51",
    range="203.000.113.000/24",
    ep1="010.244.001.005",
    ep2="10.244.2.06",
)
CANONICAL = dict(
    cip="10.96.0.50",
    ext="192.0.2.10",
    cip2="10.96.0.51",
    range="203.0.113.0/24",
    ep1="10.244.1.5",
    ep2="10.244.2.6",
)
WARN = "IP address was accepted, but will be invalid in a future Kubernetes release"


def _apply(tmp_path: Path, name: str, values: dict[str, str]) -> tuple[Path, str]:
    f = tmp_path / f"{name}.yaml"
    f.write_text(DUMP.format(**values))
    state = tmp_path / name
    res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert res.exit_code == 0, res.output
    return state, res.stderr


def _rules(state: Path) -> str:
    res = CliRunner().invoke(cli, ["--state", str(state), "rules", "--node", "node-1"])
    assert res.exit_code == 0, res.output
    return res.output


def test_a_dump_with_leading_zero_ips_applies_with_warnings(tmp_path: Path) -> None:
    state, stderr = _apply(tmp_path, "legacy", LEGACY)
    warnings = [ln for ln in stderr.splitlines() if ln.startswith("Warning: ")]
    assert (
        f'Warning: spec.clusterIPs[0]: {WARN}: ParseAddr("010.096.000.050"): IPv4 field has '
        "octet with leading zero"
    ) in warnings
    assert any(w.startswith(f"Warning: spec.externalIPs[0]: {WARN}") for w in warnings)
    assert any(
        w.startswith("Warning: spec.loadBalancerSourceRanges[0]: IP prefix was accepted")
        and 'netip.ParsePrefix("203.000.113.000/24")' in w
        for w in warnings
    )
    assert any(w.startswith(f"Warning: endpoints[0].addresses[0]: {WARN}") for w in warnings)
    assert not any("spec.clusterIP:" in w for w in warnings)  # warned once, as clusterIPs
    # stored as written (kube-apiserver does not rewrite them)
    res = CliRunner().invoke(cli, ["--state", str(state), "get", "svc", "web", "-o", "yaml"])
    assert "clusterIP: 010.096.000.050" in res.output
    # applying the same dump again changes nothing (no "field is immutable")
    res = CliRunner().invoke(
        cli, ["--state", str(state), "apply", "-f", str(tmp_path / "legacy.yaml")]
    )
    assert res.exit_code == 0 and "service/web unchanged" in res.stdout, res.output


def test_rules_and_chain_hashes_use_the_normalised_form(tmp_path: Path) -> None:
    legacy, _ = _apply(tmp_path, "legacy", LEGACY)
    canonical, stderr = _apply(tmp_path, "canonical", CANONICAL)
    assert "Warning" not in stderr
    rules = _rules(legacy)
    assert rules == _rules(canonical)
    assert "-d 10.96.0.50/32" in rules and "--to-destination 10.244.1.5:8080" in rules
    assert not re.search(r"\b0\d+\.", rules)


@pytest.mark.parametrize(
    ("field", "value"),
    [("clusterIP", "010.096.000.300"), ("clusterIP", "0x0a.96.0.50"), ("ext", "192.0.2.010.1")],
)
def test_what_is_not_an_ip_even_sloppily_is_still_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    values = dict(CANONICAL)
    key = "cip" if field == "clusterIP" else field
    values[key] = value
    f = tmp_path / "bad.yaml"
    f.write_text(DUMP.format(**values))
    state = tmp_path / "st"
    res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert res.exit_code == 1 and "must be a valid IP address" in res.output


def test_the_same_address_written_two_ways_is_one_address(tmp_path: Path) -> None:
    values = dict(LEGACY, cip2="10.96.0.50")  # lb asks for web's 010.096.000.050
    f = tmp_path / "dup.yaml"
    f.write_text(DUMP.format(**values))
    res = CliRunner().invoke(cli, ["--state", str(tmp_path / "st"), "apply", "-f", str(f)])
    assert res.exit_code == 1 and "already allocated" in res.output
