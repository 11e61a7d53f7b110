"""The kernel's prober (app/realprober.py) against real pod servers in real network
namespaces (mark.kernel): httpGet and tcpSocket are real connections from the node's
namespace, the pod servers' health URLs answer the pod's health flags (flipped in the
files ``svclab pod fail`` writes, and by the POST toggle), exec runs in the pod's
namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.real import RealRecord
from app.realprober import RealProber
from dataplane.linux.netns import is_root
from dataplane.linux.podserver import health_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import Sample, realized, sample_network
from netmodel import podhealth
from netmodel.cluster import ClusterSpec
from netmodel.objects import Container, Pod, Probe

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

SERVER = "default/p0-1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sample, RealCluster, Path]]:
    sample = sample_network(1, 2, overlay="host-gw")
    with realized(sample.network, cni="bridge-plugin") as c:
        c.serve({p.key: [(8080, "tcp")] for p in sample.pods})
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
