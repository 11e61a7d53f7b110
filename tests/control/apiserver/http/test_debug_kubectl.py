"""``kubectl debug`` against a real ``svclab serve`` on the emulator: the real kubectl
1.32 adds an ephemeral container through pods/ephemeralcontainers (a strategic merge
patch), the kubelet reports it running, and ``svclab exec -c`` reaches it;
``kubectl debug node/NAME`` (a protobuf Pod) creates the node debugger pod unchanged
(host namespaces, the node's root as a volume), it runs on the node's address and its
shell sees the node's rules. Refusals carry kube-apiserver's wording (422). Debian's
kubectl 1.20 debugs a node the same way; its ``debug POD`` sends the alpha
EphemeralContainers kind, which a 1.22+ apiserver refuses."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from serving import Served, kubectl_1_20

pytestmark = pytest.mark.slow

PODS = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("debug") / "state")
    try:
        s.start()
        s.apply_web()
        yield s
    finally:
        s.stop()


def _pod(srv: Served, name: str) -> dict[str, Any]:
    return json.loads(srv.kubectl("get", "pod", name, "-o", "json").stdout)  # type: ignore[no-any-return]


def _web_pods(srv: Served) -> list[str]:
    out = srv.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout
    return sorted(line.removeprefix("pod/") for line in out.split())


def _wait(srv: Served, name: str, ok: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    pod = _pod(srv, name)
    while not ok(pod):
        assert time.monotonic() < deadline, f"{name}: never {what}: {pod.get('status')}"
        time.sleep(0.2)
        pod = _pod(srv, name)
    return pod


def _running_ephemeral(name: str) -> Any:
    def ok(pod: dict[str, Any]) -> bool:
        st = {s["name"]: s for s in pod["status"].get("ephemeralContainerStatuses") or []}
        return name in st and "running" in st[name]["state"]

    return ok


def test_kubectl_debug_adds_an_ephemeral_container_that_exec_reaches(srv: Served) -> None:
    pod = _web_pods(srv)[0]
    srv.kubectl("debug", pod, "--image=busybox", "-c", "dbg")
    got = _wait(srv, pod, _running_ephemeral("dbg"), "running dbg")
    eph = got["spec"]["ephemeralContainers"]
    assert [(c["name"], c["image"]) for c in eph] == [("dbg", "busybox")]
    assert got["spec"]["containers"][0]["name"] == "web"  # the rest untouched
    out = srv.svclab("exec", pod, "-c", "dbg", "--", "ip", "addr")
    assert out.returncode == 0, out.stderr
    assert f"inet {got['status']['podIP']}/" in out.stdout
    refused = srv.svclab("exec", pod, "-c", "nope", "--", "ip", "addr")
    assert refused.returncode != 0
    assert f"container nope is not valid for pod {pod}" in refused.stderr


def test_refusals_with_upstream_wording(srv: Served) -> None:
    pod = _web_pods(srv)[1]
    url = f"{PODS}/{pod}/ephemeralcontainers"
    add = {"spec": {"ephemeralContainers": [{"name": "dbg2", "image": "busybox"}]}}
    code, body, _ = srv.raw("PATCH", url, add, content_type=STRATEGIC)
    assert code == 200, body
    before = _pod(srv, pod)
    change = {"spec": {"ephemeralContainers": [{"name": "dbg2", "image": "alpine"}]}}
    code, body, _ = srv.raw("PATCH", url, change, content_type=STRATEGIC)
    assert code == 422 and isinstance(body, dict)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(
        f'Pod "{pod}" is invalid: spec.ephemeralContainers[dbg2]: Forbidden: '
        'existing ephemeral containers "dbg2" may not be changed\n'
    )
    whole = dict(before)
    whole["spec"] = {**before["spec"], "ephemeralContainers": []}
    code, body, _ = srv.raw("PUT", url, whole)
    assert (code, body["message"]) == (  # type: ignore[index]
        422,
        f'Pod "{pod}" is invalid: spec.ephemeralContainers: Forbidden: '
        'existing ephemeral containers "dbg2" may not be removed\n',
    )
    ported = {
        "spec": {
            "ephemeralContainers": [
                {"name": "p", "image": "busybox", "ports": [{"containerPort": 80}]}
            ]
        }
    }
    code, body, _ = srv.raw("PATCH", url, ported, content_type=STRATEGIC)
    assert (code, body["message"]) == (  # type: ignore[index]
        422,
        f'Pod "{pod}" is invalid: spec.ephemeralContainers[1].ports: '
        "Forbidden: cannot be set for an Ephemeral Container",
    )
    dup = {"spec": {"ephemeralContainers": [{"name": "web", "image": "busybox"}]}}
    code, body, _ = srv.raw("PATCH", url, dup, content_type=STRATEGIC)
    assert (code, body["message"]) == (  # type: ignore[index]
        422,
        f'Pod "{pod}" is invalid: spec.ephemeralContainers[1].name: Duplicate value: "web"',
    )
    assert _pod(srv, pod)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    created = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "withdbg"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "ephemeralContainers": [{"name": "d", "image": "busybox"}],
        },
    }
    code, body, _ = srv.raw("POST", PODS, created)
    assert (code, body["message"]) == (  # type: ignore[index]
        422,
        'Pod "withdbg" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create',
    )


def _node_debugger(srv: Served, node: str, out: str) -> str:
    want = f"Creating debugging pod node-debugger-{node}-"
    assert want in out, out
    suffix = out.split(want, 1)[1].split(" ", 1)[0]
    return f"node-debugger-{node}-{suffix}"


def _check_node_debugger(srv: Served, name: str, node: str, *, tolerates: bool = True) -> None:
    """The pod as kubectl made it (1.20's tolerates no taint), running on the node's
    address; its shell shows the node's rules and addresses."""
    pod = _wait(srv, name, lambda p: p["status"].get("phase") == "Running", "Running")
    spec = pod["spec"]
    assert (spec["nodeName"], spec["hostNetwork"], spec["hostPID"], spec["hostIPC"]) == (
        node,
        True,
        True,
        True,
    )
    assert spec["volumes"] == [{"name": "host-root", "hostPath": {"path": "/"}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "host-root", "mountPath": "/host"}]
    assert spec["restartPolicy"] == "Never"
    # (a pod that tolerates nothing gets DefaultTolerationSeconds' two)
    defaults = [
        {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute"}
        | {"tolerationSeconds": 300}
        for k in ("not-ready", "unreachable")
    ]
    assert spec.get("tolerations") == ([{"operator": "Exists"}] if tolerates else defaults)
    node_ip = json.loads(srv.kubectl("get", "node", node, "-o", "json").stdout)["status"][
        "addresses"
    ]
    address = next(a["address"] for a in node_ip if a["type"] == "InternalIP")
    assert pod["status"]["podIP"] == address
    rules = srv.svclab("exec", name, "--", "iptables-save")
    assert rules.returncode == 0, rules.stderr
    assert "-A KUBE-SERVICES" in rules.stdout
    addr = srv.svclab("exec", name, "--", "ip", "addr")
    assert f"inet {address}/" in addr.stdout


def test_kubectl_debug_node_creates_the_node_debugger_pod(srv: Served) -> None:
    out = srv.kubectl("debug", "node/node-1", "--image=busybox")
    name = _node_debugger(srv, "node-1", out.stdout + out.stderr)
    _check_node_debugger(srv, name, "node-1")


def test_kubectl_1_20_debug(srv: Served) -> None:
    binary, why = kubectl_1_20()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no kubectl 1.20 under CI=true: {why}", pytrace=False)
        pytest.skip(why)
    out = srv.kubectl("debug", "node/node-2", "--image=busybox", binary=binary)
    name = _node_debugger(srv, "node-2", out.stdout + out.stderr)
    _check_node_debugger(srv, name, "node-2", tolerates=False)
    pod = _web_pods(srv)[2]
    before = _pod(srv, pod)["metadata"]["resourceVersion"]
    old = srv.kubectl("debug", pod, "--image=busybox", "-c", "old", binary=binary, check=False)
    assert old.returncode != 0
    assert (
        "error updating ephemeral containers: the object provided is unrecognized "
        "(kind EphemeralContainers in a pods request)"
    ) in old.stderr
    assert _pod(srv, pod)["metadata"]["resourceVersion"] == before
