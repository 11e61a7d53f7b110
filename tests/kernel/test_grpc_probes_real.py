"""gRPC probes on the kernel's nodes (mark.kernel): ``svclab serve --real`` over two real
nodes, each kubelet probing with real gRPC health checks (``grpc.health.v1.Health/Check``
from the node's namespace to the pod server's gRPC port).

* A pod with a grpc readinessProbe (service ``readiness``) becomes Ready, its endpoint
  ``ready: true`` and in every node's ``iptables-save``; ``svclab pod fail POD --probe
  readiness`` makes its health service answer NOT_SERVING: the pod turns unready (the
  event carries kubelet's message), its endpoint ``ready: false``, and it leaves every
  node's rules; ``svclab pod heal`` brings it back.
* A pod with a grpc livenessProbe (service ``""``) whose liveness fails is restarted by
  its kubelet: ``restartCount`` grows, with kubelet's events.

The cluster is always torn down, with a leak check."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servedreal import served_real, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served

from app import real
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.rules import iptables_save

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: grpcprobes}
spec: {nodes: 2, dns: false}
"""
APP = """\
apiVersion: v1
kind: Pod
metadata: {name: ready, labels: {app: g}}
spec:
  containers:
  - name: c
    image: agnhost
    ports: [{containerPort: 8080}]
    readinessProbe:
      grpc: {port: 9000, service: readiness}
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Service
metadata: {name: g}
spec:
  selector: {app: g}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  containers:
  - name: c
    image: agnhost
    ports: [{containerPort: 8080}]
    livenessProbe:
      grpc: {port: 9000}
      periodSeconds: 1
      failureThreshold: 2
"""
NODES = ("node-1", "node-2")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_real(tmp_path_factory, "grpcprobes", CLUSTER) as s:
        applied = s.kubectl("apply", "-f", "-", input=APP)
        assert applied.returncode == 0, applied.stderr
        yield s


def _pod(s: Served, name: str) -> dict[str, object]:
    out = s.kubectl("get", "pod", name, "-o", "json")
    assert out.returncode == 0, out.stderr
    pod: dict[str, object] = json.loads(out.stdout)
    return pod


def _ready_endpoint(s: Served, ip: str) -> bool | None:
    """The ``ready`` condition of Service g's endpoint ``ip`` (None: no such endpoint)."""
    out = s.kubectl(
        "get", "endpointslices", "-l", "kubernetes.io/service-name=g", "-o", "json"
    ).stdout
    for sl in json.loads(out)["items"]:
        for ep in sl.get("endpoints") or []:
            if ip in ep.get("addresses", []):
                return bool((ep.get("conditions") or {}).get("ready"))
    return None


def _in_rules(s: Served, ip: str) -> dict[str, bool]:
    """node -> whether its namespace's nat table DNATs to ``ip:8080`` (a KUBE-SEP rule)."""
    record = real.RealRecord.read(s.state)
    assert record is not None
    c = RealCluster.load(record.cluster_id)
    return {
        n: f"--to-destination {ip}:8080"
        in iptables_save(c.node_netns(n), table="nat", backend=c.iptables_backend)
        for n in NODES
    }


def _condition(pod: dict[str, object], kind: str) -> str | None:
    status = pod["status"]
    assert isinstance(status, dict)
    return next((c["status"] for c in status.get("conditions") or [] if c["type"] == kind), None)


def _events(s: Served, name: str) -> str:
    return str(s.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}").stdout)


def test_a_grpc_readiness_probe_takes_the_endpoint_out_of_every_nodes_rules(
    srv: Served,
) -> None:
    wait_until("pod ready turns Ready", lambda: _condition(_pod(srv, "ready"), "Ready") == "True")
    status = _pod(srv, "ready")["status"]
    assert isinstance(status, dict)
    ip = str(status["podIP"])
    wait_until("its endpoint ready", lambda: _ready_endpoint(srv, ip) is True)
    wait_until("it in every node's rules", lambda: all(_in_rules(srv, ip).values()))

    out = srv.svclab("pod", "fail", "ready", "--probe", "readiness")
    assert out.returncode == 0, out.stderr
    wait_until("its endpoint unready", lambda: _ready_endpoint(srv, ip) is False)
    assert _condition(_pod(srv, "ready"), "Ready") == "False"
    assert 'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")' in _events(
        srv, "ready"
    )
    wait_until("it gone from every node's rules", lambda: not any(_in_rules(srv, ip).values()))

    out = srv.svclab("pod", "heal", "ready", "--probe", "readiness")
    assert out.returncode == 0, out.stderr
    wait_until("its endpoint ready again", lambda: _ready_endpoint(srv, ip) is True)
    wait_until("it back in every node's rules", lambda: all(_in_rules(srv, ip).values()))


def _restarts(s: Served) -> int:
    status = _pod(s, "live")["status"]
    assert isinstance(status, dict)
    return sum(int(cs.get("restartCount", 0)) for cs in status.get("containerStatuses") or [])


def test_a_grpc_liveness_failure_restarts_the_container(srv: Served) -> None:
    wait_until("pod live Running", lambda: _condition(_pod(srv, "live"), "Ready") == "True")
    assert _restarts(srv) == 0
    out = srv.svclab("pod", "fail", "live", "--probe", "liveness")
    assert out.returncode == 0, out.stderr
    try:
        wait_until("a restart", lambda: _restarts(srv) >= 1)
        events = _events(srv, "live")
        assert 'Liveness probe failed: service unhealthy (responded with "NOT_SERVING")' in events
        assert "Container c failed liveness probe, will be restarted" in events
    finally:
        srv.svclab("pod", "heal", "live")
    # healed: after the back-off it runs again, Ready, and stays
    wait_until(
        "running again, Ready",
        lambda: _condition(_pod(srv, "live"), "Ready") == "True",
        timeout=60,
    )
