"""Containers that run to completion: the kubelet's container lifecycle.

A container whose command svclab evaluates (:mod:`control.agents.commands`) ends with
its exit status; any other runs as a long-running server. :func:`advance` moves a
running pod's ``containerStatuses`` to a time ``now``, as the kubelet does:

* a container that ended is ``terminated`` (``exitCode``, reason ``Completed`` for 0,
  ``Error`` otherwise, ``startedAt``/``finishedAt``);
* ``restartPolicy`` decides whether it starts again: ``Always`` every time, ``OnFailure``
  after a non-zero status, ``Never`` not at all. A restart counts in ``restartCount``,
  the ended run goes to ``lastState``; the first restart is immediate, the next wait the
  kubelet's crash-loop back-off (10 s, doubling, at most 300 s), meanwhile the
  container is ``waiting`` with reason ``CrashLoopBackOff``;
* the pod's phase is kube's: Succeeded when every container ended with 0 and none will
  start again, Failed when they all ended, none will start again and one failed;
  Running otherwise.

Where commands run is a :class:`Runtime`: :class:`EmulatedRuntime` (the control plane's
clock: a run of ``sleep 2`` started at t ends at t+2, computed from the status alone, so a
restarted control plane carries on where it stopped) or
:class:`app.realnet.NetnsRuntime` (the Linux backend: the argv runs for real in the pod's
network namespace, and ends when the process does).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

from control.agents.commands import Program, Server, program
from control.clock import parse_rfc3339, rfc3339
from netmodel.objects import Condition, Container, Pod

BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0
TERMINAL = frozenset({"Succeeded", "Failed"})


def restart_delay(restarts: int) -> float:
    """Seconds before restart number ``restarts`` (1-based) of a container."""
    if restarts <= 1:
        return 0.0
    return min(BACKOFF_INITIAL * 2 ** (restarts - 2), BACKOFF_MAX)


def container_program(c: Container) -> Program | Server:
    """What ``c``'s command does (:func:`control.agents.commands.program`)."""
    extra = c.model_extra or {}
    return _program(_words(extra.get("command")), _words(extra.get("args")))


def _words(v: object) -> tuple[str, ...] | None:
    return tuple(str(w) for w in v) if isinstance(v, list) else None


@functools.lru_cache(maxsize=1024)
def _program(command: tuple[str, ...] | None, args: tuple[str, ...] | None) -> Program | Server:
    return program(command, args)


def has_programs(pod: Pod) -> bool:
    """Whether one of the pod's containers runs a command that ends."""
    return any(isinstance(container_program(c), Program) for c in pod.spec.containers)


def restart_policy(pod: Pod) -> str:
    extra = pod.spec.model_extra or {}
    return str(extra.get("restartPolicy") or extra.get("restart_policy") or "Always")


def container_statuses(pod: Pod) -> list[dict[str, Any]]:
    extra = pod.status.model_extra or {}
    return list(extra.get("containerStatuses") or [])


class Runtime(Protocol):
    """Where evaluated commands run. ``start`` a run; ``ended`` says whether it ended by
    ``now`` (its exit status and finish time, or None); ``due`` is when it will end when
    known in advance (None: ask ``ended`` again, :meth:`any_ended` says when)."""

    def start(self, pod: Pod, name: str, prog: Program, started: float) -> None: ...

    def ended(
        self, pod: Pod, name: str, prog: Program, started: float, now: float
    ) -> tuple[int, float] | None: ...

    def due(self, prog: Program, started: float) -> float | None: ...

    def any_ended(self) -> bool: ...

    def stop(self, pod: Pod) -> None: ...


class EmulatedRuntime:
    """Runs on the control plane's clock: a run ends ``prog.seconds`` after it started."""

    def start(self, pod: Pod, name: str, prog: Program, started: float) -> None:
        return None

    def ended(
        self, pod: Pod, name: str, prog: Program, started: float, now: float
    ) -> tuple[int, float] | None:
        end = started + prog.seconds
        return (prog.code, end) if end <= now else None

    def due(self, prog: Program, started: float) -> float | None:
        return started + prog.seconds

    def any_ended(self) -> bool:
        return False

    def stop(self, pod: Pod) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Advanced:
    """The result of :func:`advance`: the new ``containerStatuses``, the pod's phase, when
    something will next happen on its own (None: nothing known in advance), and the
    containers started (or restarted) on the way."""

    statuses: list[dict[str, Any]]
    phase: str
    next_due: float | None
    started: list[str]


def _running(now: float) -> dict[str, Any]:
    return {"running": {"startedAt": rfc3339(now)}}


def start_runs(pod: Pod, now: float, runtime: Runtime) -> None:
    """Start the run of each container of ``pod`` whose command ends, at ``now``."""
    for c in pod.spec.containers:
        prog = container_program(c)
        if isinstance(prog, Program):
            runtime.start(pod, c.name, prog, float(int(now)))


def _terminated(code: int, started: str, finished: float, cid: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": rfc3339(finished),
            "containerID": cid,
        }
    }


def advance(pod: Pod, now: float, runtime: Runtime) -> Advanced:
    """The pod's containers moved to ``now`` (see the module docstring)."""
    policy = restart_policy(pod)
    by_name = {cs.get("name"): cs for cs in container_statuses(pod)}
    out: list[dict[str, Any]] = []
    started: list[str] = []
    next_due: float | None = None
    ended_for_good: list[int] = []
    for c in pod.spec.containers:
        cs = dict(by_name.get(c.name) or {"name": c.name, "restartCount": 0})
        prog = container_program(c)
        while isinstance(prog, Program):
            state = cs.get("state") or {}
            restarts = int(cs.get("restartCount") or 0)
            if "running" in state:
                t0_text = state["running"].get("startedAt") or rfc3339(now)
                t0 = parse_rfc3339(t0_text)
                res = runtime.ended(pod, c.name, prog, t0, now)
                if res is None:
                    due = runtime.due(prog, t0)
                    if due is not None:
                        next_due = due if next_due is None else min(next_due, due)
                    break
                code, finished = res
                term = _terminated(code, t0_text, finished, str(cs.get("containerID", "")))
                if policy == "Always" or (policy == "OnFailure" and code != 0):
                    cs["lastState"] = term
                    delay = restart_delay(restarts + 1)
                    cs["ready"], cs["started"] = False, False
                    cs["state"] = {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": (
                                f"back-off {int(delay)}s restarting failed container="
                                f"{c.name} pod={pod.name}_{pod.namespace}"
                                f"({pod.metadata.uid or ''})"
                            ),
                        }
                    }
                    continue  # the waiting branch starts it when the back-off ran out
                cs["state"], cs["ready"], cs["started"] = term, False, False
                ended_for_good.append(code)
                break
            if "waiting" in state and "lastState" in cs:
                last = cs["lastState"].get("terminated") or {}
                finished = parse_rfc3339(last.get("finishedAt") or rfc3339(now))
                at = finished + restart_delay(restarts + 1)
                if at > now:
                    next_due = at if next_due is None else min(next_due, at)
                    break
                cs["restartCount"] = restarts + 1
                cs["state"], cs["ready"], cs["started"] = _running(at), True, True
                runtime.start(pod, c.name, prog, float(int(at)))
                started.append(c.name)
                continue
            if "terminated" in state:
                ended_for_good.append(int(state["terminated"].get("exitCode") or 0))
            break
        out.append(cs)
    if len(ended_for_good) == len(pod.spec.containers) and pod.spec.containers:
        phase = "Failed" if any(ended_for_good) else "Succeeded"
    else:
        phase = "Running"
    return Advanced(out, phase, next_due, started)


def status_conditions(
    phase: str, statuses: list[dict[str, Any]], now_text: str, current: list[Condition]
) -> list[Condition] | None:
    """The Ready and ContainersReady conditions for ``statuses`` (None: all ready, the
    running conditions stand). ``current``: the pod's conditions (transition times kept
    when the status does not change)."""
    unready = [cs["name"] for cs in statuses if not cs.get("ready")]
    if not unready:
        return None
    reason = "PodCompleted" if phase in TERMINAL else "ContainersNotReady"
    message = (
        None if phase in TERMINAL else f"containers with unready status: [{' '.join(unready)}]"
    )
    old = {c.type: c for c in current}
    out: list[Condition] = []
    for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled"):
        ready_kind = t in ("Ready", "ContainersReady")
        status = "False" if ready_kind else "True"
        prev = old.get(t)
        since = (
            prev.last_transition_time
            if prev is not None and prev.status == status and prev.last_transition_time
            else now_text
        )
        out.append(
            Condition(
                type=t,
                status=status,
                reason=reason if ready_kind else None,
                message=message if ready_kind else None,
                last_transition_time=since,
            )
        )
    return out
