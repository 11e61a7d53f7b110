"""Pods that run to completion under the deterministic runner: the kubelet's container
lifecycle (control/agents/containers.py) and the commands svclab evaluates
(control/agents/commands.py), on the emulator's clock."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from control.agents.commands import Program, Server, program
from control.agents.containers import container_statuses
from control.clock import FakeClock
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import EndpointSlice, Pod


def _plane(nodes: int = 1) -> tuple[ControlPlane, FakeClock]:
    clock = FakeClock()
    plane = ControlPlane(MemoryStore(), ClusterSpec(nodes=nodes, dns=False), clock=clock)
    plane.start()
    plane.run_until_idle()
    return plane, clock


def _pod(
    name: str, policy: str, command: list[str] | None, labels: dict[str, str] | None = None
) -> Pod:
    c: dict[str, Any] = {"name": "c", "image": "busybox", "ports": [{"containerPort": 80}]}
    if command is not None:
        c["command"] = command
    obj = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"restartPolicy": policy, "containers": [c]},
        }
    )
    assert isinstance(obj, Pod)
    return obj


def _get(plane: ControlPlane, name: str) -> Pod:
    pod = plane.store.get("Pod", f"default/{name}")
    assert isinstance(pod, Pod)
    return pod


def _state(pod: Pod) -> dict[str, Any]:
    (cs,) = container_statuses(pod)
    return cs


@pytest.mark.parametrize(
    ("command", "args", "want"),
    [
        (["sh", "-c", "exit 3"], None, (0.0, 3)),
        (["sleep"], ["2"], (2.0, 0)),
        (["/bin/true"], None, (0.0, 0)),
        (["false"], None, (0.0, 1)),
        (["sleep", "1m", "30"], None, (90.0, 0)),
        (["bash", "-c", "sleep 1; false && sleep 9 || exit 2"], None, (1.0, 2)),
        (["sh", "-c", "sleep 1\nexit"], None, (1.0, 0)),
        (["sh", "-c", "false; exit"], None, (0.0, 1)),
        (["sh", "-c", "exit 256"], None, (0.0, 0)),
    ],
)
def test_evaluated_commands(
    command: list[str], args: list[str] | None, want: tuple[float, int]
) -> None:
    got = program(command, args)
    assert isinstance(got, Program)
    assert (got.seconds, got.code) == want


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (None, "entrypoint"),
        (["nginx"], "'nginx'"),
        (["sleep", "infinity"], "infinity"),
        (["sh", "-c", "echo hi; exit 0"], "'echo'"),
        (["sh", "-c", "sleep 5 &"], "'&'"),
        (["sh", "-c", "exit $CODE"], "'$'"),
        (["sh", "-c", "sleep 1 | true"], "'|'"),
        (["sh", "script.sh"], "without -c"),
    ],
)
def test_other_commands_are_servers_and_say_why(command: list[str] | None, why: str) -> None:
    got = program(command, None)
    assert isinstance(got, Server) and why in got.why


def test_never_pod_fails_with_its_exit_code_and_leaves_the_endpoints() -> None:
    plane, clock = _plane()
    svc = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]},
        }
    )
    plane.apply(
        [
            svc,
            _pod("job", "Never", ["sh", "-c", "sleep 2; exit 3"], {"app": "a"}),
            _pod("srv", "Never", None, {"app": "a"}),
        ]
    )
    plane.run_until_idle()
    job, srv = _get(plane, "job"), _get(plane, "srv")
    assert job.status.phase == "Running" and _state(job)["state"].keys() == {"running"}

    def endpoints() -> list[str]:
        return sorted(
            a
            for s in plane.store.list("EndpointSlice")
            if isinstance(s, EndpointSlice) and s.service_name == "s"
            for ep in s.endpoints
            for a in ep.addresses
        )

    assert endpoints() == sorted([job.status.pod_ip or "", srv.status.pod_ip or ""])
    clock.advance(1)
    plane.run_until_idle()
    assert _get(plane, "job").status.phase == "Running"
    clock.advance(1)
    plane.run_until_idle()
    job = _get(plane, "job")
    assert job.status.phase == "Failed"
    term = _state(job)["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    assert term["finishedAt"] == "2026-01-01T00:00:02Z"
    assert _state(job)["restartCount"] == 0
    ready = job.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == ("False", "PodCompleted")
    assert endpoints() == [srv.status.pod_ip]
    # the address is free again in the node's IPAM (host-local hands it out in turn)
    assert job.status.pod_ip  # kept in the status, as kube keeps it
    held = plane.network_plugin.allocated(job.spec.node_name or "")  # type: ignore[attr-defined]
    assert job.status.pod_ip not in held and srv.status.pod_ip in held
    assert _get(plane, "srv").status.phase == "Running"


def test_succeeded_and_onfailure_restarts_with_backoff() -> None:
    plane, clock = _plane()
    plane.apply(
        [_pod("ok", "Never", ["true"]), _pod("flaky", "OnFailure", ["sh", "-c", "sleep 1; exit 1"])]
    )
    plane.run_until_idle()
    ok = _get(plane, "ok")
    assert ok.status.phase == "Succeeded"
    assert _state(ok)["state"]["terminated"]["reason"] == "Completed"
    restarts = []
    for _ in range(6):
        clock.advance(1)
        plane.run_until_idle()
        restarts.append(_state(_get(plane, "flaky"))["restartCount"])
    # ends at t=1, restarts at once; ends at t=2, back-off 10 s
    assert restarts == [1, 1, 1, 1, 1, 1]
    flaky = _state(_get(plane, "flaky"))
    assert flaky["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert flaky["lastState"]["terminated"]["exitCode"] == 1
    clock.advance(6)  # t = 12: restarted at t = 12, second restart
    plane.run_until_idle()
    pod = _get(plane, "flaky")
    assert _state(pod)["restartCount"] == 2 and pod.status.phase == "Running"
    assert "running" in _state(pod)["state"]


def test_always_restarts_a_command_that_succeeds() -> None:
    plane, clock = _plane()
    plane.apply([_pod("loop", "Always", ["sleep", "5"])])
    plane.run_until_idle()
    clock.advance(5)
    plane.run_until_idle()
    pod = _get(plane, "loop")
    assert pod.status.phase == "Running" and _state(pod)["restartCount"] == 1
    assert _state(pod)["lastState"]["terminated"]["reason"] == "Completed"


def test_a_restarted_control_plane_carries_on_from_the_status() -> None:
    plane, clock = _plane()
    plane.apply([_pod("job", "Never", ["sleep", "30"])])
    plane.run_until_idle()
    again = ControlPlane(plane.store, ClusterSpec(nodes=1, dns=False), clock=clock)
    again.start()
    again.run_until_idle()
    clock.advance(30)
    again.run_until_idle()
    assert _get(again, "job").status.phase == "Succeeded"


def test_yaml_roundtrip_keeps_command() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, command: [sleep, '1']}]\n"
    pod = object_from_dict(yaml.safe_load(text))
    assert isinstance(pod, Pod)
    assert (pod.spec.containers[0].model_extra or {}).get("command") == ["sleep", "1"]
