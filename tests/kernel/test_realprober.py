"""The kernel's prober (app/realprober.py) against real pod servers in real network
namespaces (mark.kernel): httpGet and tcpSocket are real connections from the node's
namespace, the pod servers' health URLs answer the pod's health flags (flipped in the
files ``svclab pod fail`` writes, and by the POST toggle), exec runs in the pod's
namespace; grpc is a real gRPC Health/Check call from the node's namespace, answered
by the pod server's gRPC health service on the pod's gRPC port (SERVING from the same
flags), and fails on a port that speaks no gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.real import RealRecord
from app.realprober import RealProber
from control.agents.probes import ProbeResult
from dataplane.linux.netns import is_root
from dataplane.linux.podserver import health_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import Sample, realized, sample_network
from netmodel import podhealth
from netmodel.cluster import ClusterSpec
from netmodel.objects import Container, Pod, Probe

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

SERVER = "default/p0-1"
#: the pods' gRPC health port
GRPC = 9000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sample, RealCluster, Path]]:
    sample = sample_network(1, 2, overlay="host-gw")
    with realized(sample.network, cni="bridge-plugin") as c:
        c.serve(
            {p.key: [(8080, "tcp"), (GRPC, "tcp")] for p in sample.pods},
            {p.key: {GRPC} for p in sample.pods},
        )
        state = tmp_path_factory.mktemp("realprober")
        RealRecord(cluster_id=c.cluster_id, status="up").write(state)
        yield sample, c, state


def _pod(sample: Sample) -> tuple[Pod, Container]:
    info = sample.pod(SERVER)
    ns, name = SERVER.split("/")
    pod = Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": info.node,
                "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}],
            },
            "status": {"phase": "Running", "podIP": str(info.ip)},
        }
    )
    return pod, pod.spec.containers[0]


def info_node(sample: Sample) -> str:
    return sample.pod(SERVER).node


def _probe(**handler: object) -> Probe:
    return Probe.model_validate({"timeoutSeconds": 1, **handler})


def test_http_and_tcp_probes_are_real_connections_from_the_node(
    cluster: tuple[Sample, RealCluster, Path],
) -> None:
    sample, c, state = cluster
    prober = RealProber(state, ClusterSpec())
    pod, ctr = _pod(sample)
    root = health_root(c.state.servers_dir)
    ready = _probe(httpGet={"path": "/readyz", "port": "http"})
    live = _probe(httpGet={"path": "/healthz", "port": 8080})
    assert prober.probe(pod, ctr, "readiness", ready).ok
    assert prober.probe(pod, ctr, "liveness", live).ok
    assert prober.probe(pod, ctr, "readiness", _probe(tcpSocket={"port": 8080})).ok
    refused = prober.probe(pod, ctr, "readiness", _probe(tcpSocket={"port": 9090}))
    assert not refused.ok and "connection refused" in refused.message
    try:
        podhealth.set_flags(SERVER, False, ("ready",), root)
        res = prober.probe(pod, ctr, "readiness", ready)
        assert res == res.__class__(False, "HTTP probe failed with statuscode: 503")
        assert prober.probe(pod, ctr, "liveness", live).ok
        podhealth.set_flags(SERVER, False, ("live",), root)
        res = prober.probe(pod, ctr, "liveness", live)
        assert res.message == "HTTP probe failed with statuscode: 500"
        podhealth.set_flags(SERVER, True, ("ready", "live"), root)
        assert prober.probe(pod, ctr, "readiness", ready).ok
    finally:
        podhealth.forget(SERVER, root)


def test_the_pod_servers_toggle_and_exec_probes(
    cluster: tuple[Sample, RealCluster, Path],
) -> None:
    sample, c, state = cluster
    prober = RealProber(state, ClusterSpec())
    pod, ctr = _pod(sample)
    root = health_root(c.state.servers_dir)
    ip = str(sample.pod(SERVER).ip)
    try:
        fail = _probe(
            exec={"command": ["curl", "-sf", "-X", "POST", f"http://{ip}:8080/readyz/fail"]}
        )
        assert prober.probe(pod, ctr, "readiness", fail).ok  # the toggle answers 200
        assert not prober.probe(
            pod, ctr, "readiness", _probe(httpGet={"path": "/readyz", "port": 8080})
        ).ok
        check = _probe(exec={"command": ["curl", "-sf", f"http://{ip}:8080/readyz"]})
        res = prober.probe(pod, ctr, "readiness", check)
        assert not res.ok  # curl -f: exit 22 on 503
        heal = _probe(
            exec={"command": ["curl", "-sf", "-X", "POST", f"http://{ip}:8080/readyz/heal"]}
        )
        assert prober.probe(pod, ctr, "readiness", heal).ok
        assert prober.probe(pod, ctr, "readiness", check).ok
    finally:
        podhealth.forget(SERVER, root)


def test_grpc_probes_are_real_health_checks_from_the_node(
    cluster: tuple[Sample, RealCluster, Path],
) -> None:
    sample, c, state = cluster
    prober = RealProber(state, ClusterSpec())
    pod, ctr = _pod(sample)
    root = health_root(c.state.servers_dir)
    ip = str(sample.pod(SERVER).ip)
    node_ips = {str(a) for a in sample.network.namespaces[f"node/{info_node(sample)}"].addresses()}
    ready = _probe(grpc={"port": GRPC, "service": "readiness"})
    live = _probe(grpc={"port": GRPC})
    unhealthy = 'service unhealthy (responded with "NOT_SERVING")'
    log = c.state.pod_log(SERVER)
    before = log.read_text() if log.exists() else ""
    try:
        assert prober.probe(pod, ctr, "readiness", ready) == ProbeResult(True)
        assert prober.probe(pod, ctr, "liveness", live) == ProbeResult(True)
        podhealth.set_flags(SERVER, False, ("ready",), root)
        assert prober.probe(pod, ctr, "readiness", ready) == ProbeResult(False, unhealthy)
        assert prober.probe(pod, ctr, "liveness", live).ok
        podhealth.set_flags(SERVER, False, ("live",), root)
        assert prober.probe(pod, ctr, "liveness", live) == ProbeResult(False, unhealthy)
        podhealth.set_flags(SERVER, True, ("ready", "live"), root)
        assert prober.probe(pod, ctr, "readiness", ready).ok
        assert prober.probe(pod, ctr, "liveness", live).ok
    finally:
        podhealth.forget(SERVER, root)
    # each call in the pod's access log, from the node's address
    calls = [
        line
        for line in log.read_text()[len(before) :].splitlines()
        if '"POST /grpc.health.v1.Health/Check HTTP/2.0" 200 7' in line
    ]
    assert len(calls) == 7
    assert all(f" -> {ip}:{GRPC} " in line for line in calls)
    assert {line.split(" ")[3].rsplit(":", 1)[0] for line in calls} <= node_ips
    # 8080 speaks no gRPC: the pod server answers the preface with its line
    plain = prober.probe(pod, ctr, "readiness", _probe(grpc={"port": 8080}))
    assert not plain.ok
    assert plain.message.startswith(f'error: failed to connect service at "{ip}:8080": ')
    refused = prober.probe(pod, ctr, "readiness", _probe(grpc={"port": 9090}))
    assert refused.message == f"dial tcp {ip}:9090: connect: connection refused"
    # other traffic to the gRPC port is answered as on every port
    got = c.connect(f"node/{pod.spec.node_name}", ip, GRPC)
    assert got.pod == SERVER
