"""Nodes that fail, end to end against a real ``svclab serve`` (its live control plane:
components as API clients) with short node-monitor periods, seen through the real
kubectl: a stopped kubelet's node turns NotReady with the unreachable taints, its pods'
endpoints turn not ready, they are evicted after their tolerationSeconds and replaced
on the other node; the kubelet that comes back makes its node Ready again. Also the
apiserver's DefaultTolerationSeconds admission and the validation of tolerations."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from serve_helpers import Served, serve, wait_for

pytestmark = pytest.mark.slow

GRACE = 6  # nodeMonitorGracePeriodSeconds of the served cluster
CLUSTER = f"""\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: nodefail}}
spec:
  nodes: 2
  dns: false
  nodeLifecycle:
    nodeMonitorGracePeriodSeconds: {GRACE}
    nodeMonitorPeriodSeconds: 1
    nodeLeaseDurationSeconds: 4
"""

APP = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 3}
      containers:
      - name: web
        image: nginx
        ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""

BOUND = 60.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("nodefail")
    manifest = tmp / "cluster.yaml"
    manifest.write_text(CLUSTER)
    with serve(tmp, manifest=manifest) as s:
        wait_for(
            lambda: "component=kubelet/node-2 started" in s.log_text(),
            BOUND,
            "node-2's kubelet starts",
        )
        yield s


def kjson(s: Served, *args: str) -> Any:
    proc = s.kubectl(*args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _apply(s: Served, text: str) -> None:
    out = s.kubectl("apply", "-f", "-", stdin=text)
    assert out.returncode == 0, out.stderr


def _pod(name: str, tolerations: list[dict[str, Any]] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "c", "image": "nginx"}],
                **({"tolerations": tolerations} if tolerations is not None else {}),
            },
        }
    )


def test_pods_get_the_default_toleration_seconds(served: Served) -> None:
    _apply(served, _pod("defaults"))
    tols = kjson(served, "get", "pod", "defaults")["spec"]["tolerations"]
    assert tols == [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    # a pod that tolerates unreachable its own way keeps it, and gets not-ready only
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    _apply(served, _pod("own", [own]))
    tols = kjson(served, "get", "pod", "own")["spec"]["tolerations"]
    assert [t["key"] for t in tols] == [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]
    assert "tolerationSeconds" not in tols[0] and tols[1]["tolerationSeconds"] == 300
    # and re-applying the manifest changes nothing (the plugin runs on updates too)
    out = served.kubectl("apply", "-f", "-", stdin=_pod("defaults"))
    assert out.returncode == 0 and "unchanged" in out.stdout, out.stdout + out.stderr
    for name in ("defaults", "own"):
        served.kubectl("delete", "pod", name, "--wait=false")


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        (
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
            'spec.tolerations[0].effect: Invalid value: "NoSchedule": '
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        (
            {"operator": "Equal", "value": "v", "effect": "NoExecute"},
            'spec.tolerations[0].operator: Invalid value: "Equal": operator must be Exists '
            'when `key` is empty, which means "match all values and all keys"',
        ),
        (
            {"key": "k", "operator": "Exists", "value": "v"},
            'spec.tolerations[0].operator: Invalid value: "v": '
            "value must be empty when `operator` is 'Exists'",
        ),
        (
            {"key": "k", "operator": "In"},
            'spec.tolerations[0].operator: Unsupported value: "In": '
            'supported values: "Equal", "Exists"',
        ),
    ],
)
def test_tolerations_are_validated(
    served: Served, toleration: dict[str, Any], message: str
) -> None:
    name = f"bad-{sorted(toleration).index('operator')}-{len(toleration)}-{len(message)}"
    out = served.kubectl("apply", "-f", "-", stdin=_pod(name, [toleration]))
    try:
        assert out.returncode != 0
        assert message in out.stderr, out.stderr
        assert served.kubectl("get", "pod", name).returncode != 0  # nothing stored
    finally:
        served.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false")


def _node_rows(s: Served) -> dict[str, str]:
    out = s.kubectl("get", "nodes", "--no-headers")
    assert out.returncode == 0, out.stderr
    return {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}


def _web(s: Served) -> list[dict[str, Any]]:
    return list(kjson(s, "get", "pods", "-l", "app=web")["items"])


def _endpoints(s: Served) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for sl in kjson(s, "get", "endpointslices", "-l", "kubernetes.io/service-name=web")["items"]:
        for e in sl.get("endpoints") or []:
            for a in e["addresses"]:
                out[a] = bool(e["conditions"].get("ready"))
    return out


def _stop_kubelet(s: Served, node: str | None) -> None:
    (s.state / "kubelets-stopped").write_text(f"{node}\n" if node else "")


def test_a_stopped_kubelets_node_goes_not_ready_and_its_pods_move(served: Served) -> None:
    s = served
    _apply(s, APP)
    out = s.kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert out.returncode == 0, out.stderr
    on2 = [p for p in _web(s) if p["spec"].get("nodeName") == "node-2"]
    assert len(on2) == 1  # the scheduler's SelectorSpread: one a node
    ip2 = on2[0]["status"]["podIP"]
    wait_for(lambda: _endpoints(s).get(ip2) is True, BOUND, "node-2's pod is a ready endpoint")
    assert _node_rows(s) == {"node-1": "Ready", "node-2": "Ready"}
    # both leases are renewed: a grace period and more later, still Ready
    time.sleep(GRACE + 2)
    assert _node_rows(s) == {"node-1": "Ready", "node-2": "Ready"}

    _stop_kubelet(s, "node-2")
    try:
        wait_for(lambda: _node_rows(s).get("node-2") == "NotReady", BOUND, "node-2 turns NotReady")
        assert _node_rows(s)["node-1"] == "Ready"
        desc = s.kubectl("describe", "node", "node-2")
        assert desc.returncode == 0, desc.stderr
        text = " ".join(desc.stdout.split())
        assert "node.kubernetes.io/unreachable:NoExecute" in text
        assert "node.kubernetes.io/unreachable:NoSchedule" in text
        assert "Kubelet stopped posting node status." in text
        # the pod's endpoint turns not ready; after its 3 s it is evicted, and its
        # replacement runs on node-1
        wait_for(lambda: _endpoints(s).get(ip2) is not True, BOUND, "node-2's endpoint unready")

        def moved() -> bool:
            pods = _web(s)
            running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return len(running) == 2 and all(
                p["spec"].get("nodeName") == "node-1"
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p["status"].get("conditions") or []
                )
                for p in running
            )

        wait_for(moved, BOUND, "node-2's web pod is replaced on node-1")
        old = kjson(s, "get", "pod", on2[0]["metadata"]["name"])
        assert old["metadata"].get("deletionTimestamp")  # Terminating: no kubelet finishes it
        assert any(c["type"] == "DisruptionTarget" for c in old["status"]["conditions"])
        events = s.kubectl("get", "events", "--field-selector", "reason=TaintManagerEviction")
        assert f"Marking for deletion Pod default/{on2[0]['metadata']['name']}" in events.stdout
    finally:
        _stop_kubelet(s, None)
    # the kubelet comes back: Ready, untainted, and it finishes the evicted pod
    wait_for(lambda: _node_rows(s).get("node-2") == "Ready", BOUND, "node-2 Ready again")
    wait_for(
        lambda: not kjson(s, "get", "node", "node-2")["spec"].get("taints"),
        BOUND,
        "node-2's taints go",
    )
    wait_for(
        lambda: all(not p["metadata"].get("deletionTimestamp") for p in _web(s)),
        BOUND,
        "the evicted pod is finished by its kubelet",
    )
