"""``svclab get`` serves every kind of the kind table, as kubectl does: a plural,
singular, short name or kind (optionally ``.group``) names it, the table has the
columns of the apiserver's Table for the kind (kube-apiserver's, NAME and AGE for a kind
without columns of its own), a cluster-scoped kind is found without a namespace, and
``-o yaml|json`` print the objects as stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from control.apiserver.http.resources import by_path
from control.apiserver.strategy import strategy_of
from netmodel import kinds

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 1}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a: "1", b: "2"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: prices, namespace: shop}
data: {tea: "3"}
---
apiVersion: v1
kind: Secret
metadata: {name: tok}
type: kubernetes.io/basic-auth
data: {username: YWRtaW4=, password: cw==}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: app, namespace: shop}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv1}
spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], hostPath: {path: /srv/pv1}}
"""


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("getany")
    f = tmp / "app.yaml"
    f.write_text(MANIFEST)
    state = tmp / "state"
    res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert res.exit_code == 0, res.output
    return state


def _get(state: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["--state", str(state), "get", *args])
    return res.exit_code, res.output


def _lines(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def test_config_kinds_print_kube_apiservers_columns(state: Path) -> None:
    code, out = _get(state, "cm")
    assert code == 0, out
    rows = _lines(out)
    assert rows[0] == ["NAME", "DATA", "AGE"]
    assert rows[1][:2] == ["cfg", "2"]
    code, out = _get(state, "secrets")
    assert code == 0, out
    assert _lines(out)[0] == ["NAME", "TYPE", "DATA", "AGE"]
    assert _lines(out)[1][:3] == ["tok", "kubernetes.io/basic-auth", "2"]
    code, out = _get(state, "sa", "-A")
    assert code == 0, out
    assert _lines(out)[:2] == [
        ["NAMESPACE", "NAME", "SECRETS", "AGE"],
        ["shop", "app", "0", _lines(out)[1][3]],
    ]
    code, out = _get(state, "configmaps", "-n", "shop")
    assert code == 0 and [r[:2] for r in _lines(out)[1:]] == [["prices", "1"]], out


@pytest.mark.parametrize(
    "name", ["statefulsets", "statefulset", "sts", "StatefulSet", "statefulsets.apps"]
)
def test_a_workload_kind_by_any_name_has_the_http_tables_columns(state: Path, name: str) -> None:
    r = kinds.row_of_store("StatefulSet")
    res = by_path(r.group, r.version, r.plural)
    assert res is not None
    want = [
        c["name"].upper()
        for c in strategy_of("StatefulSet").table_columns(res)
        if not c["priority"]
    ]
    code, out = _get(state, name)
    assert code == 0, out
    header, *rows = out.strip().splitlines()
    assert (
        header.split("   ")[0] == "NAME"
        and [h.strip() for h in header.split("   ") if h.strip()] == want
    )
    assert [row.split()[0] for row in rows] == ["db"]


def test_a_cluster_scoped_kind_is_found_without_a_namespace(state: Path) -> None:
    code, out = _get(state, "pv", "pv1", "-n", "shop")
    assert code == 0, out
    assert _lines(out)[1][0] == "pv1"
    code, out = _get(state, "persistentvolume/pv1", "-o", "json")
    assert code == 0, out
    assert json.loads(out)["spec"]["hostPath"] == {"path": "/srv/pv1"}


def test_yaml_and_json_print_the_stored_objects(state: Path) -> None:
    code, out = _get(state, "cm", "cfg", "-o", "yaml")
    assert code == 0, out
    doc = yaml.safe_load(out)
    assert (doc["kind"], doc["metadata"]["name"], doc["data"]) == (
        "ConfigMap",
        "cfg",
        {"a": "1", "b": "2"},
    )
    code, out = _get(state, "secret", "-o", "json")
    assert code == 0, out
    lst = json.loads(out)
    assert lst["kind"] == "List" and [i["metadata"]["name"] for i in lst["items"]] == ["tok"]


def test_a_missing_object_and_an_unknown_kind_are_refused_in_one_line(state: Path) -> None:
    code, out = _get(state, "cm", "nope")
    assert code != 0 and 'configmaps "nope" not found' in out, out
    code, out = _get(state, "widgets")
    assert code != 0 and 'the server doesn\'t have a resource type "widgets"' in out, out


def test_every_stored_row_of_the_kind_table_is_served(state: Path) -> None:
    """Each row's plural, singular and short names resolve to it, and ``get`` of its
    plural answers (an empty kind: "No resources found")."""
    from app.cli.printers import resolve_kind

    for r in kinds.stored_rows():
        for name in (r.plural, r.singular, *r.short_names, r.kind):
            assert resolve_kind(name) == r.store_kind, (name, r.kind)
        code, out = _get(state, r.plural, "-A")
        assert code == 0, (r.plural, out)
