"""``svclab describe`` and ``svclab delete`` of a custom resource, each in a fresh
``svclab`` process (so the kinds of the stored CRDs are only what that process loads from
the state): the CR is named by its plural or singular (``describe widgets/NAME``,
``delete widget NAME``), and a cluster-scoped custom kind is described without a
namespace because the kind table says it has none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CRDS = """
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
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: racks.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: racks, singular: rack, kind: Rack}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"""

CRS = """
apiVersion: example.com/v1
kind: Widget
metadata: {name: blue-one, labels: {color: blue}}
spec: {color: blue}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: red-one}
spec: {color: red}
---
apiVersion: example.com/v1
kind: Rack
metadata: {name: rack-a}
spec: {slots: 4}
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


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    (tmp_path / "cluster.yaml").write_text(
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1}\n"
    )
    (tmp_path / "crds.yaml").write_text(CRDS)
    (tmp_path / "crs.yaml").write_text(CRS)
    for f in ("cluster.yaml", "crds.yaml", "crs.yaml"):
        out = svclab(state, "apply", "-f", str(tmp_path / f))
        assert out.returncode == 0, out.stderr
    return state


def _field(text: str, name: str) -> str | None:
    """The value of describe's ``Name:  value`` line ``name``, or None."""
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    return None


def test_describe_a_custom_resource_by_plural_slash_name(state: Path) -> None:
    out = svclab(state, "describe", "widgets/blue-one")
    assert out.returncode == 0, out.stderr
    assert _field(out.stdout, "Name") == "blue-one"
    assert _field(out.stdout, "Namespace") == "default"
    assert _field(out.stdout, "Labels") == "color=blue"
    out = svclab(state, "describe", "wdg", "nope")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "error: widgets.example.com \"nope\" not found in namespace 'default'"
    )


def test_describe_a_cluster_scoped_custom_resource(state: Path) -> None:
    # -n names a namespace the rack is not in: a cluster-scoped kind ignores it
    out = svclab(state, "describe", "rack", "rack-a", "-n", "elsewhere")
    assert out.returncode == 0, out.stderr
    assert _field(out.stdout, "Name") == "rack-a"
    assert _field(out.stdout, "Namespace") is None
    out = svclab(state, "describe", "racks", "nope", "-n", "elsewhere")
    assert out.returncode == 1
    assert out.stderr.strip() == 'error: racks.example.com "nope" not found'


def test_delete_a_custom_resource_by_singular_and_name(state: Path) -> None:
    out = svclab(state, "delete", "widget", "blue-one")
    assert out.returncode == 0, out.stderr
    assert '"blue-one" deleted' in out.stdout
    out = svclab(state, "get", "widgets", "-o", "name")
    assert out.returncode == 0, out.stderr
    assert "blue-one" not in out.stdout and "red-one" in out.stdout
    out = svclab(state, "delete", "rack", "rack-a")  # cluster-scoped: keyed by name alone
    assert out.returncode == 0, out.stderr
    out = svclab(state, "delete", "gadget", "x")
    assert out.returncode == 2
    assert 'the server doesn\'t have a resource type "gadget"' in out.stderr
