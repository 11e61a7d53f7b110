"""``svclab get`` of a custom resource, each in a fresh ``svclab`` process (so the kinds
of the stored CRDs are only what that process loads from the state, never what an earlier
command registered in the test's own process): the CR is named by its plural, singular,
short name or kind (or ``plural.group``), listed with its CRD's additionalPrinterColumns
as kube-apiserver's Table gives them, and a Calico dump's IPPool is listed by
``svclab get ippools``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CALICO = ROOT / "tests" / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wdg]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              replicas: {type: integer}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"""

CR = """
apiVersion: example.com/v1
kind: Widget
metadata: {name: blue-one}
spec: {color: blue, replicas: 3}
"""


def svclab(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``svclab`` command in a fresh process."""
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


@pytest.fixture(scope="module")
def widgets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("getcr")
    state = tmp / "state"
    (tmp / "cluster.yaml").write_text(
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1}\n"
    )
    (tmp / "crd.yaml").write_text(CRD)
    (tmp / "cr.yaml").write_text(CR)
    for f in ("cluster.yaml", "crd.yaml", "cr.yaml"):
        out = svclab(state, "apply", "-f", str(tmp / f))
        assert out.returncode == 0, out.stderr
    return state


@pytest.mark.parametrize("name", ["widgets", "widget", "wdg", "Widget", "widgets.example.com"])
def test_a_custom_resource_by_any_name_has_its_crds_printer_columns(
    widgets: Path, name: str
) -> None:
    out = svclab(widgets, "get", name)
    assert out.returncode == 0, out.stderr
    header, *rows = [ln.split() for ln in out.stdout.strip().splitlines()]
    assert header == ["NAME", "COLOR", "REPLICAS", "AGE"]
    assert [r[:3] for r in rows] == [["blue-one", "blue", "3"]]


def test_one_custom_resource_by_name_and_a_missing_one(widgets: Path) -> None:
    out = svclab(widgets, "get", "widget/blue-one", "-o", "json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["kind"], got["spec"]) == ("Widget", {"color": "blue", "replicas": 3})
    out = svclab(widgets, "get", "wdg", "nope")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "error: widgets.example.com \"nope\" not found in namespace 'default'"
    )
    out = svclab(widgets, "get", "deploy", "nope")  # a grouped built-in: kube's words too
    assert out.stderr.strip() == "error: deployments.apps \"nope\" not found in namespace 'default'"
    out = svclab(widgets, "get", "gadgets")
    assert out.returncode == 2
    assert 'the server doesn\'t have a resource type "gadgets"' in out.stderr


def test_a_calico_dumps_ippool_is_listed_by_get_ippools(tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = svclab(state, "apply", "-f", str(CALICO))
    assert out.returncode == 0, out.stderr
    out = svclab(state, "get", "ippools")
    assert out.returncode == 0, out.stderr
    header, *rows = [ln.split() for ln in out.stdout.strip().splitlines()]
    assert header == ["NAME", "AGE"] and [r[0] for r in rows] == ["default-ipv4-ippool"]
    out = svclab(state, "get", "ippool", "default-ipv4-ippool", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["spec"]["cidr"] == "192.168.0.0/16"
