"""``kubectl rollout history`` and ``rollout undo`` of a StatefulSet against ``svclab
serve``, with the real kubectl: kubectl lists the StatefulSet's ControllerRevisions and
undoes by patching the StatefulSet with a revision's data (a strategic merge patch
whose template carries ``$patch: replace``); the controller then rolls the pods back
and renumbers the old revision as the newest."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from serving import Served

pytestmark = pytest.mark.slow

STS = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1, ports: [{containerPort: 80}]}]}
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        yield s
    finally:
        s.stop()


def _images(srv: Served) -> dict[str, str]:
    items = json.loads(srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["spec"]["containers"][0]["image"] for p in items}


def _revisions(srv: Served) -> dict[str, int]:
    items = json.loads(srv.kubectl("get", "controllerrevisions", "-o", "json").stdout)["items"]
    return {r["metadata"]["name"]: r["revision"] for r in items}


def test_rollout_history_and_undo_of_a_statefulset(srv: Served) -> None:
    srv.kubectl("apply", "-f", "-", input=STS)
    srv.kubectl("rollout", "status", "sts/web", "--timeout=60s")
    srv.kubectl("set", "image", "sts/web", "web=nginx:2")
    srv.kubectl("rollout", "status", "sts/web", "--timeout=60s")
    assert set(_images(srv).values()) == {"nginx:2"}
    history = srv.kubectl("rollout", "history", "sts/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    one = srv.kubectl("rollout", "history", "sts/web", "--revision=1").stdout
    assert "nginx:1" in one
    first = min(_revisions(srv).items(), key=lambda kv: kv[1])[0]
    out = srv.kubectl("rollout", "undo", "sts/web").stdout
    assert "rolled back" in out
    srv.kubectl("rollout", "status", "sts/web", "--timeout=60s")
    deadline_images = srv.wait_for(
        ["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"],
        "nginx:1 nginx:1",
    )
    assert "nginx:2" not in deadline_images
    revs = _revisions(srv)
    assert len(revs) == 2 and revs[first] == 3
    history = srv.kubectl("rollout", "history", "sts/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]
    sts = json.loads(srv.kubectl("get", "sts", "web", "-o", "json").stdout)
    assert sts["status"]["currentRevision"] == sts["status"]["updateRevision"] == first
