"""A pod's health, as its pod server reports it to probes: two flags, ``ready`` and
``live``, that users flip (``svclab pod fail|heal``, or the pod server's toggle) and that
both backends' pod servers and probers read.

The pod server answers (same URLs on both backends):

* ``GET /readyz`` (and anything under it): ``200 ok`` while ready, ``503 not ready``
  otherwise: point a readinessProbe's ``httpGet.path`` here;
* ``GET /healthz`` or ``/livez`` (and anything under them): ``200 ok`` while live,
  ``500 unhealthy`` otherwise: a livenessProbe's path;
* ``POST /readyz/fail``, ``/readyz/heal``, ``/healthz/fail``, ``/healthz/heal``: flip the
  flag (``200 ok``), e.g. ``kubectl exec POD -- curl -X POST localhost:8080/readyz/fail``;
* every other request: the usual answer (:mod:`dataplane.podtools.podserver`).

A gRPC health check (``grpc`` probe) is SERVING while live (service ``""``) or ready
(service ``readiness``). The flags are the pod's, not one container run's: a container
restarted by its liveness probe comes back as sick as it was (a crash loop), until healed.

Where the flags live: one file per pod, ``<root>/<ns>_<name>`` (JSON), so that the CLI,
the API server's ``kubectl exec`` and each node's kubelet (any of them in its own
process) see the same state; the served cluster's root is ``DIR/pods/health``. With no
root (a throw-away cluster in one process) they live in this process's memory.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

READY_PATH = "/readyz"
LIVE_PATHS = ("/healthz", "/livez")
FLAGS = ("ready", "live")


@dataclass(frozen=True, slots=True)
class Health:
    ready: bool = True
    live: bool = True


_memory: dict[str, Health] = {}
_lock = threading.Lock()
#: the root of this process's health files (None: memory); :func:`configure` sets it
_root: list[Path | None] = [None]


def configure(root: Path | None) -> None:
    """Keep the health flags under ``root`` (None: in memory)."""
    _root[0] = root


def state_root(state_dir: Path) -> Path:
    """The health files' root of the cluster kept in ``state_dir``."""
    return state_dir / "pods" / "health"


def root() -> Path | None:
    return _root[0]


def _file(base: Path, pod: str) -> Path:
    ns, _, name = pod.partition("/")
    return base / f"{ns}_{name}"


def read(pod: str, base: Path | None = None) -> Health:
    """The health of pod ``ns/name`` (healthy when nothing was recorded)."""
    base = base if base is not None else _root[0]
    if base is None:
        with _lock:
            return _memory.get(pod, Health())
    try:
        data = json.loads(_file(base, pod).read_text())
    except (OSError, ValueError):
        return Health()
    return Health(ready=bool(data.get("ready", True)), live=bool(data.get("live", True)))


def write(pod: str, health: Health, base: Path | None = None) -> None:
    base = base if base is not None else _root[0]
    if base is None:
        with _lock:
            _memory[pod] = health
        return
    path = _file(base, pod)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps({"ready": health.ready, "live": health.live}))
    tmp.replace(path)


def set_flags(pod: str, ok: bool, flags: tuple[str, ...], base: Path | None = None) -> Health:
    """Set ``flags`` (of :data:`FLAGS`) of ``pod`` to ``ok``; the new health."""
    h = read(pod, base)
    new = Health(ready=ok if "ready" in flags else h.ready, live=ok if "live" in flags else h.live)
    write(pod, new, base)
    return new


def forget(pod: str, base: Path | None = None) -> None:
    """The pod is gone: a new pod of the same name starts healthy."""
    base = base if base is not None else _root[0]
    if base is None:
        with _lock:
            _memory.pop(pod, None)
        return
    _file(base, pod).unlink(missing_ok=True)


def _flag_of(path: str) -> str | None:
    p = path.split("?", 1)[0]
    if p == READY_PATH or p.startswith(READY_PATH + "/"):
        return "ready"
    if any(p == lp or p.startswith(lp + "/") for lp in LIVE_PATHS):
        return "live"
    return None


def http_answer(
    pod: str, method: str, path: str, base: Path | None = None
) -> tuple[int, str] | None:
    """(status, body) of the pod server for ``method path`` when it is a health URL
    (see the module docstring); None: not one, the usual answer."""
    flag = _flag_of(path)
    if flag is None:
        return None
    p = path.split("?", 1)[0]
    if method == "POST" and (p.endswith("/fail") or p.endswith("/heal")):
        set_flags(pod, p.endswith("/heal"), (flag,), base)
        return 200, "ok\n"
    h = read(pod, base)
    if getattr(h, flag):
        return 200, "ok\n"
    return (503, "not ready\n") if flag == "ready" else (500, "unhealthy\n")


def grpc_serving(pod: str, service: str, base: Path | None = None) -> bool:
    """A gRPC health check of ``service``: SERVING (True) or NOT_SERVING."""
    h = read(pod, base)
    return h.ready if service == "readiness" else h.live
