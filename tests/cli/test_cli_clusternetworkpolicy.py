"""ClusterNetworkPolicy through ``svclab apply`` (each command a fresh ``svclab``
process): a manifest of them brings the CRD svclab ships, they are listed with the CRD's
printer columns, and a manifest with one invalid policy is refused whole with the API
server's wording, one line naming the file, document and object, nothing stored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
STORIES = ROOT / "tests" / "data" / "clusternetworkpolicy" / "user-stories.yaml"

BAD = """
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: bad}
spec:
  tier: Baseline
  priority: 5
  subject: {namespaces: {}}
  egress:
  - action: Deny
    to:
    - networks: [10.0.0.0/33]
"""


def svclab(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from app.cli.main import main; main()",
            "--state",
            str(state),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_apply_brings_the_crd_and_lists_the_policies_by_tier_and_priority(tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = svclab(state, "apply", "-f", str(STORIES))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "customresourcedefinition/clusternetworkpolicies.policy.networking.k8s.io created",
        "clusternetworkpolicy/cluster-wide-deny-example created",
        "clusternetworkpolicy/cluster-wide-allow-example created",
        "clusternetworkpolicy/pub-svc-delegate-example created",
        "clusternetworkpolicy/default created",
    ]
    listed = svclab(state, "get", "cnp")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[:3] for line in listed.stdout.splitlines()]
    assert rows == [
        ["NAME", "TIER", "PRIORITY"],
        ["cluster-wide-allow-example", "Admin", "30"],
        ["cluster-wide-deny-example", "Admin", "10"],
        ["default", "Baseline", "10"],
        ["pub-svc-delegate-example", "Admin", "20"],
    ]
    got = yaml.safe_load(
        svclab(state, "get", "clusternetworkpolicy", "default", "-o", "yaml").stdout
    )
    want = [d for d in yaml.safe_load_all(STORIES.read_text()) if d][-1]
    assert got["spec"] == want["spec"]


def test_an_invalid_policy_refuses_the_whole_manifest_and_stores_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert svclab(state, "apply", "-f", str(STORIES)).returncode == 0
    before = svclab(state, "get", "cnp", "-o", "yaml").stdout
    # the stories again (unchanged), a new valid policy, then the bad one
    late = BAD.replace("name: bad", "name: late").replace("/33", "/8")
    manifest = tmp_path / "more.yaml"
    manifest.write_text(STORIES.read_text() + "---" + late + "---" + BAD)
    out = svclab(state, "apply", "-f", str(manifest))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"error: {manifest} (document 6): ClusterNetworkPolicy/bad: "
        'spec.egress[0].to[0].networks[0]: Invalid value: "string": Invalid CIDR format provided'
    )
    assert svclab(state, "get", "cnp", "-o", "yaml").stdout == before
    assert "late" not in svclab(state, "get", "cnp").stdout
