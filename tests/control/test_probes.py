"""Probes as kubelet's prober workers run them: the state machine
(control/agents/probes.py) on its own, then the kubelet under the deterministic runner
(FakeClock) probing emulated pod servers whose health is flipped (netmodel/podhealth.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from control.agents.containers import container_statuses
from control.agents.probes import ProbeManager, ProbeResult
from control.clock import FakeClock
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel import podhealth
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import Container, EndpointSlice, Event, Pod

OK, BAD = ProbeResult(True), ProbeResult(False, "HTTP probe failed with statuscode: 500")


def _container(**probes: dict[str, Any]) -> Container:
    return Container.model_validate({"name": "c", "ports": [{"containerPort": 8080}], **probes})


def _run(m: ProbeManager, now: float, result: ProbeResult) -> list[tuple[str, bool, bool]]:
    out = []
    for w in m.due(now):
        o = m.observe(w, result, now)
        out.append((w.kind, o.changed, o.kill))
    return out


def test_readiness_thresholds_and_period() -> None:
    m = ProbeManager()
    c = _container(
        readinessProbe={
            "httpGet": {"port": 8080},
            "initialDelaySeconds": 5,
            "periodSeconds": 2,
            "successThreshold": 2,
            "failureThreshold": 3,
        }
    )
    m.start("default/p", c, 100.0)
    assert not m.ready("default/p", "c")  # not ready before the first success
    assert m.due(104.9) == [] and m.next_due() == 105.0  # initial delay
    assert _run(m, 105, OK) == [("readiness", False, False)]  # 1 of 2 successes
    assert m.due(106.9) == []
    assert _run(m, 107, OK) == [("readiness", True, False)]
    assert m.ready("default/p", "c")
    assert _run(m, 109, BAD) == [("readiness", False, False)]
    assert _run(m, 111, BAD) == [("readiness", False, False)]
    assert m.ready("default/p", "c")  # 2 failures < failureThreshold 3
    assert _run(m, 113, BAD) == [("readiness", True, False)]
    assert not m.ready("default/p", "c")
    assert _run(m, 115, OK) == [("readiness", False, False)]  # one success is not enough


def test_liveness_kills_and_holds() -> None:
    m = ProbeManager()
    c = _container(
        livenessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
    )
    m.start("default/p", c, 0.0)
    assert m.ready("default/p", "c")  # no readiness probe: ready once running
    assert _run(m, 0, BAD) == [("liveness", False, False)]
    assert _run(m, 1, BAD) == [("liveness", True, True)]
    assert m.next_due() is None  # on hold until the container restarts
    m.start("default/p", c, 5.0)
    assert m.next_due() == 5.0


def test_startup_gates_liveness_and_readiness() -> None:
    m = ProbeManager()
    c = _container(
        startupProbe={"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 3},
        livenessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    )
    m.start("default/p", c, 0.0)
    assert [w.kind for w in m.due(0)] == ["startup"]
    assert not m.started("default/p", "c")
    assert _run(m, 0, BAD) == [("startup", False, False)]
    assert _run(m, 1, OK) == [("startup", True, False)]
    assert m.started("default/p", "c") and not m.ready("default/p", "c")
    assert sorted(w.kind for w in m.due(2)) == ["liveness", "readiness"]  # startup stopped


def test_startup_failure_kills() -> None:
    m = ProbeManager()
    c = _container(
        startupProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
    )
    m.start("default/p", c, 0.0)
    assert _run(m, 0, BAD) == [("startup", False, False)]
    assert _run(m, 1, BAD) == [("startup", True, True)]


# ---------------------------------------------------------------- the kubelet, runner


@pytest.fixture(autouse=True)
def _memory_health() -> Iterator[None]:
    before = podhealth.root()
    podhealth.configure(None)
    yield
    podhealth.configure(before)


def _plane() -> tuple[ControlPlane, FakeClock]:
    clock = FakeClock()
    plane = ControlPlane(MemoryStore(), ClusterSpec(nodes=1, dns=False), clock=clock)
    plane.start()
    plane.run_until_idle()
    return plane, clock


def _pod(name: str, **probes: dict[str, Any]) -> Pod:
    obj = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "nginx", "ports": [{"containerPort": 8080}], **probes}
                ]
            },
        }
    )
    assert isinstance(obj, Pod)
    return obj


def _svc() -> Any:
    return object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
    )


def _get(plane: ControlPlane, name: str) -> Pod:
    pod = plane.store.get("Pod", f"default/{name}")
    assert isinstance(pod, Pod)
    return pod


def _endpoint_ready(plane: ControlPlane) -> list[bool | None]:
    return [
        e.conditions.ready
        for s in plane.store.list("EndpointSlice")
        if isinstance(s, EndpointSlice)
        and (s.metadata.labels or {}).get("kubernetes.io/service-name") == "web"
        for e in s.endpoints
    ]


def _events(plane: ControlPlane, reason: str) -> list[str]:
    return [
        str(e.message)
        for e in plane.store.list("Event")
        if isinstance(e, Event) and e.reason == reason
    ]


READY = {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
LIVE = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}


def test_readiness_failure_takes_the_endpoint_out_and_heal_brings_it_back() -> None:
    plane, clock = _plane()
    plane.apply([_svc(), _pod("p", readinessProbe=READY)])
    plane.run_until_idle()
    assert _get(plane, "p").is_ready and _endpoint_ready(plane) == [True]
    podhealth.set_flags("default/p", False, ("ready",))
    clock.advance(1)
    plane.run_until_idle()
    assert _get(plane, "p").is_ready  # one failure of two
    assert _events(plane, "Unhealthy") == [
        "Readiness probe failed: HTTP probe failed with statuscode: 503"
    ]
    clock.advance(1)
    plane.run_until_idle()
    pod = _get(plane, "p")
    assert not pod.is_ready and pod.condition("ContainersReady").status == "False"
    assert container_statuses(pod)[0]["ready"] is False
    assert _endpoint_ready(plane) == [False]
    podhealth.set_flags("default/p", True, ("ready",))
    clock.advance(1)
    plane.run_until_idle()
    assert _get(plane, "p").is_ready and _endpoint_ready(plane) == [True]


def test_liveness_failure_restarts_with_crash_loop_back_off() -> None:
    plane, clock = _plane()
    plane.apply([_pod("p", livenessProbe=LIVE)])
    plane.run_until_idle()
    podhealth.set_flags("default/p", False, ("live",))
    clock.advance(1)
    plane.run_until_idle()
    clock.advance(1)
    plane.run_until_idle()  # second failure: killed, first restart at once
    cs = container_statuses(_get(plane, "p"))[0]
    assert cs["restartCount"] == 1 and "running" in cs["state"]
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert _events(plane, "Killing") == ["Container c failed liveness probe, will be restarted"]
    # the new run is probed at once (t = 2: a failure), then at t = 3: killed again,
    # back-off 10 s (until t = 13)
    clock.advance(1)
    plane.run_until_idle()
    cs = container_statuses(_get(plane, "p"))[0]
    assert cs["restartCount"] == 1 and cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert not _get(plane, "p").is_ready
    assert len(_events(plane, "BackOff")) == 1
    clock.advance(9)
    plane.run_until_idle()
    assert container_statuses(_get(plane, "p"))[0]["restartCount"] == 1
    clock.advance(1)
    plane.run_until_idle()
    cs = container_statuses(_get(plane, "p"))[0]
    assert cs["restartCount"] == 2 and "running" in cs["state"]
    podhealth.set_flags("default/p", True, ("live",))
    for _ in range(5):
        clock.advance(1)
        plane.run_until_idle()
    assert container_statuses(_get(plane, "p"))[0]["restartCount"] == 2
    assert _get(plane, "p").is_ready
