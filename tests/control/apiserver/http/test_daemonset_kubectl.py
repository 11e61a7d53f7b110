"""A DaemonSet through the real kubectl against a real ``svclab serve``: apply, one pod
per node, ``rollout status``, an image change rolled out, ``rollout history`` and
``rollout undo`` (which send the ControllerRevision's template patch back)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from serving import Served

pytestmark = pytest.mark.slow

DS = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: main, image: "agent:1"}]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        yield s
    finally:
        s.stop()


def _json(srv: Served, *args: str) -> Any:
    return json.loads(srv.kubectl(*args, "-o", "json").stdout)


def _images(srv: Served) -> dict[str, str]:
    """node -> image of the agent pods that are not terminating."""
    items = _json(srv, "get", "pods", "-l", "app=agent")["items"]
    return {
        p["spec"].get("nodeName", ""): p["spec"]["containers"][0]["image"]
        for p in items
        if not p["metadata"].get("deletionTimestamp")
    }


def _wait_images(srv: Served, image: str, nodes: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    got: dict[str, str] = {}
    while time.monotonic() < deadline:
        got = _images(srv)
        if set(got) == nodes and set(got.values()) == {image}:
            return
        time.sleep(0.3)
    raise AssertionError(f"pods never all {image} on {sorted(nodes)}: {got}")


def test_kubectl_rolls_a_daemonset_out_shows_its_history_and_undoes(srv: Served) -> None:
    out = srv.kubectl("apply", "-f", "-", input=DS)
    assert out.stdout.strip() == "daemonset.apps/agent created"
    nodes = {n["metadata"]["name"] for n in _json(srv, "get", "nodes")["items"]}
    assert nodes
    status = srv.kubectl("rollout", "status", "ds/agent", "--timeout=60s")
    assert 'daemon set "agent" successfully rolled out' in status.stdout
    _wait_images(srv, "agent:1", nodes)
    ds = _json(srv, "get", "ds", "agent")
    assert ds["status"]["desiredNumberScheduled"] == len(nodes)
    assert ds["status"]["numberAvailable"] == len(nodes)

    srv.kubectl("set", "image", "ds/agent", "main=agent:2")
    srv.kubectl("rollout", "status", "ds/agent", "--timeout=60s")
    _wait_images(srv, "agent:2", nodes)
    hist = srv.kubectl("rollout", "history", "ds/agent").stdout
    assert [ln.split()[0] for ln in hist.splitlines()[2:] if ln.strip()] == ["1", "2"]
    rev1 = srv.kubectl("rollout", "history", "ds/agent", "--revision=1").stdout
    assert "agent:1" in rev1

    out = srv.kubectl("rollout", "undo", "ds/agent")
    assert out.stdout.strip() == "daemonset.apps/agent rolled back"
    srv.kubectl("rollout", "status", "ds/agent", "--timeout=60s")
    _wait_images(srv, "agent:1", nodes)
    hist = srv.kubectl("rollout", "history", "ds/agent").stdout
    assert [ln.split()[0] for ln in hist.splitlines()[2:] if ln.strip()] == ["2", "3"]
    revs = _json(srv, "get", "controllerrevisions", "-l", "app=agent")["items"]
    assert sorted(r["revision"] for r in revs) == [2, 3]
