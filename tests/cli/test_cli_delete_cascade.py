"""``svclab delete namespace`` and ``svclab delete node`` on a persistent cluster: the
namespace and everything in it go (one command converges it), the system namespaces are
refused in one line with the state unchanged, and a deleted node's pods are replaced."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from app.cli.main import cli
from control.store.sqlite import SqliteStore
from netmodel.objects import Pod

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 3}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
"""

KINDS = ("Deployment", "ReplicaSet", "Service", "EndpointSlice", "Pod")


def _state(tmp_path: Path) -> Path:
    f = tmp_path / "shop.yaml"
    f.write_text(MANIFEST)
    state = tmp_path / "state"
    res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert res.exit_code == 0, res.output
    return state


def _svclab(state: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    return res.exit_code, res.output


def test_delete_namespace_removes_it_and_everything_in_it(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with SqliteStore(state / "state.db") as store:
        assert all(store.list(k, "shop") for k in KINDS)

    code, out = _svclab(state, "delete", "namespace", "shop")
    assert code == 0, out
    assert out.strip() == 'namespace "shop" deleted'

    with SqliteStore(state / "state.db") as store:
        assert {k: store.list(k, "shop") for k in KINDS} == {k: [] for k in KINDS}
        assert "shop" not in {n.name for n in store.list("Namespace")}
    code, out = _svclab(state, "get", "events", "-n", "shop")  # the timeline stays
    assert code == 0, out
    deleted = [line.split()[4] for line in out.splitlines() if "namespace-controller" in line]
    assert {d.split("/")[0] for d in deleted} == {
        "deployment",
        "replicaset",
        "service",
        "endpointslice",
        "pod",
    }
    code, out = _svclab(state, "get", "ns")
    assert code == 0 and "shop" not in out, out


def test_delete_system_namespace_is_refused_in_one_line(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with SqliteStore(state / "state.db") as store:
        before = store.revision
    code, out = _svclab(state, "delete", "ns", "default")
    assert code == 1
    assert out.strip() == "error: Namespace/default: Forbidden: this namespace may not be deleted"
    with SqliteStore(state / "state.db") as store:
        assert store.revision == before


def test_delete_node_replaces_its_pods_elsewhere(tmp_path: Path) -> None:
    state = _state(tmp_path)
    code, out = _svclab(state, "delete", "node", "node-2")
    assert code == 0, out
    with SqliteStore(state / "state.db") as store:
        pods = [p for p in store.list("Pod", "shop") if isinstance(p, Pod)]
        assert len(pods) == 3
        assert all(p.spec.node_name in ("node-1", "node-3") for p in pods)
        assert all(p.status.phase == "Running" for p in pods)
