"""kubectl drain and the pods/eviction subresource against a real ``svclab serve``: the
real kubectl (its Eviction is protobuf) is refused while a PodDisruptionBudget forbids
the disruption, retrying with kube-apiserver's message until its --timeout, and drains
the node once the budget allows; ``kubectl get pdb`` shows the controller's figures; the
official Python client's ``create_namespaced_pod_eviction`` gets 429 with the
DisruptionTarget cause, a dry run deletes nothing, and a policy/v1beta1 body is taken.
Debian's kubectl 1.20 drains the same way."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import WEB, Served, kubectl_1_20

pytestmark = pytest.mark.slow

PDB = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web-pdb}
spec:
  minAvailable: %s
  selector: {matchLabels: {app: web}}
"""
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("drain") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))
        s.kubectl("apply", "-f", "-", input=PDB % 3)
        _ready(s)
        yield s
    finally:
        s.stop()


def _ready(srv: Served, n: int = 3) -> None:
    """Wait for ``n`` web pods, all Ready."""
    deadline = time.monotonic() + 60
    while len(srv.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()) < n:
        assert time.monotonic() < deadline, "the web pods never came"
        time.sleep(0.2)
    srv.kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=web", "--timeout=60s")


def _budget(srv: Served) -> dict[str, int]:
    out = srv.kubectl("get", "pdb", "web-pdb", "-o", "json").stdout
    st = json.loads(out).get("status", {})
    return {k: st.get(k, 0) for k in ("currentHealthy", "desiredHealthy", "disruptionsAllowed")}


def _wait_budget(srv: Served, **want: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        have = _budget(srv)
        if all(have[k] == v for k, v in want.items()):
            return
        time.sleep(0.2)
    raise AssertionError(f"budget never reached {want}: {_budget(srv)}")


def _pods_on(srv: Served, node: str) -> list[str]:
    out = srv.kubectl(
        "get", "pods", "-l", "app=web", "--field-selector", f"spec.nodeName={node}", "-o", "name"
    ).stdout
    return [line.removeprefix("pod/") for line in out.split()]


def test_drain_is_refused_while_the_budget_forbids_then_drains(srv: Served) -> None:
    _wait_budget(srv, currentHealthy=3, desiredHealthy=3, disruptionsAllowed=0)
    table = srv.kubectl("get", "pdb").stdout.splitlines()
    header = "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE"
    assert table[0].split() == header.split()
    assert table[1].split()[:4] == ["web-pdb", "3", "N/A", "0"]
    (victim,) = _pods_on(srv, "node-1")

    out = srv.kubectl(
        "drain",
        "node-1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=12s",
        check=False,
    )
    assert out.returncode != 0
    assert (
        f'error when evicting pods/"{victim}" -n "default" (will retry after 5s): {VIOLATION}'
        in out.stderr
    )
    assert "global timeout reached: 12s" in out.stderr
    node = json.loads(srv.kubectl("get", "node", "node-1", "-o", "json").stdout)
    assert node["spec"]["unschedulable"] is True
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    pod = json.loads(srv.kubectl("get", "pod", victim, "-o", "json").stdout)
    assert "deletionTimestamp" not in pod["metadata"]  # refused: nothing happened to it

    srv.kubectl("apply", "-f", "-", input=PDB % 2)
    _wait_budget(srv, desiredHealthy=2, disruptionsAllowed=1)
    assert srv.kubectl("get", "pdb").stdout.splitlines()[1].split()[:4] == [
        "web-pdb",
        "2",
        "N/A",
        "1",
    ]
    out = srv.kubectl(
        "drain", "node-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"
    )
    assert f"pod/{victim} evicted" in out.stdout
    assert "node/node-1 drained" in out.stdout
    assert _pods_on(srv, "node-1") == []
    # the replacement lands elsewhere (node-1 is cordoned); the budget is whole again
    _ready(srv)
    _wait_budget(srv, currentHealthy=3, disruptionsAllowed=1)
    srv.kubectl("uncordon", "node-1")


@pytest.fixture(scope="module")
def v1(srv: Served) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))


def _eviction(name: str, **opts: object) -> client.V1Eviction:
    return client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
        delete_options=client.V1DeleteOptions(**opts) if opts else None,  # type: ignore[arg-type]
    )


def test_python_client_eviction_refused_dry_run_and_v1beta1(
    srv: Served, v1: client.CoreV1Api
) -> None:
    srv.kubectl("apply", "-f", "-", input=PDB % 3)
    _wait_budget(srv, currentHealthy=3, desiredHealthy=3, disruptionsAllowed=0)
    name = v1.list_namespaced_pod("default", label_selector="app=web").items[0].metadata.name
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod_eviction(name, "default", _eviction(name))
    assert e.value.status == 429
    assert "Retry-After" not in (e.value.headers or {})
    body = json.loads(e.value.body)
    assert (body["reason"], body["message"], body["code"]) == ("TooManyRequests", VIOLATION, 429)
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionTarget",
            "message": "The disruption budget web-pdb needs 3 healthy pods and has 3 currently",
        }
    ]

    srv.kubectl("apply", "-f", "-", input=PDB % 2)
    _wait_budget(srv, desiredHealthy=2, disruptionsAllowed=1)
    resp = v1.create_namespaced_pod_eviction(
        name, "default", _eviction(name, dry_run=["All"]), _preload_content=False
    )
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    assert v1.read_namespaced_pod(name, "default").metadata.deletion_timestamp is None
    assert _budget(srv)["disruptionsAllowed"] == 1  # a dry run spends nothing

    old = {
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "default"},
    }
    code, answer, _ = srv.raw("POST", f"/api/v1/namespaces/default/pods/{name}/eviction", old)
    assert code == 201 and isinstance(answer, dict) and answer["status"] == "Success", answer
    try:
        pod = v1.read_namespaced_pod(name, "default")
    except ApiException as gone:
        assert gone.status == 404
    else:
        assert pod.metadata.deletion_timestamp is not None
        assert ("DisruptionTarget", "True") in [
            (c.type, c.status) for c in pod.status.conditions or []
        ]
    code, answer, _ = srv.raw(
        "POST",
        "/api/v1/namespaces/default/pods/nope/eviction",
        {**old, "metadata": {"name": "nope"}},
    )
    assert code == 404 and isinstance(answer, dict) and answer["message"] == 'pods "nope" not found'


def test_kubectl_1_20_drain_is_refused_then_drains(srv: Served) -> None:
    binary, why = kubectl_1_20()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no kubectl 1.20 under CI=true: {why}", pytrace=False)
        pytest.skip(f"no kubectl 1.20: {why}")
    srv.kubectl("apply", "-f", "-", input=PDB % 3)
    _ready(srv)
    _wait_budget(srv, currentHealthy=3, desiredHealthy=3, disruptionsAllowed=0)
    # a node holding one web pod (node-1's moved to another when the test above drained it)
    node = next(n for n in ("node-1", "node-2", "node-3") if len(_pods_on(srv, n)) == 1)
    (victim,) = _pods_on(srv, node)
    drain = ("drain", node, "--ignore-daemonsets", "--delete-emptydir-data")
    out = srv.kubectl(*drain, "--timeout=12s", check=False, binary=binary)
    assert out.returncode != 0
    assert (
        f'error when evicting pods/"{victim}" -n "default" (will retry after 5s): {VIOLATION}'
        in out.stderr
    )
    srv.kubectl("apply", "-f", "-", input=PDB % 2)
    _wait_budget(srv, desiredHealthy=2, disruptionsAllowed=1)
    out = srv.kubectl(*drain, "--timeout=60s", binary=binary)
    assert f"pod/{victim} evicted" in out.stdout
    assert _pods_on(srv, node) == []
    srv.kubectl("uncordon", node)
