"""``GET /api/v1/namespaces/NS/pods/NAME/log``: a container's log, as kube-apiserver
and the pod's kubelet serve it together (``kubectl logs``).

kube-apiserver's part (its ``LogREST`` and ``LogLocation``), in its order:

1. the query becomes a ``PodLogOptions``: a malformed integer or time is 400
   (``strconv.ParseInt: parsing "x": invalid syntax``, Go's time parse error); a boolean
   is false only for ``false`` and ``0`` (any other value, even empty, is true);
2. validation (``ValidatePodLogOptions``): 422 ``PodLogOptions "NAME" is invalid``
   (``tailLines`` < 0, ``limitBytes`` < 1, ``sinceSeconds`` < 1, both since params);
3. the pod (404), the container (400 ``a container name must be specified for pod P,
   choose one of: [A B]`` / ``container C is not valid for pod P``; the list names
   init, regular and ephemeral containers, as kube's ``VisitContainers``);
4. a pod with no node yet: 204 No Content (kube's empty location);
5. the node's kubelet: its Node (404 ``nodes "N" not found``) and a runtime to reach
   (``api.runtime`` None: 503, the text kube-apiserver makes of a kubelet's 503,
   ``the server is currently unable to handle the request ( pods/log P)``).

Then kubelet's (``validateContainerLogStatus``), from the pod's container statuses:
400 ``container "C" in pod "P" is waiting to start: REASON`` (a scheduled pod with no
status yet: ``ContainerCreating``, as kubelet reports it), ``... is not available``,
``... is terminated``, ``previous terminated container "C" in pod "P" not found``.

The log is the CRI file :meth:`~control.apiserver.podruntime.PodRuntime.log_path`
names, read and rendered by :mod:`control.apiserver.crilog` (``tailLines``, ``since*``,
``timestamps``, ``limitBytes``). ``follow`` streams it (chunked, ``text/plain``): the
file is polled every :data:`POLL` seconds, so a record reaches the client within that
time of being written; the stream ends when the pod is deleted (or replaced by one of
the same name), its container stops running, ``limitBytes`` is reached, or the client
goes away (the server then cancels the generator: no task outlives it).

``pretty`` is accepted without effect, as kube-apiserver does for this text output;
``insecureSkipTLSVerifyBackend`` chooses kube-apiserver's transport to the kubelet,
and svclab's runtime is reached in-process with no TLS to skip: it is parsed (as a
boolean) and has nothing to change. Other query parameters are ignored, as kube's
parameter decoder ignores unknown ones.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.responses import Response, StreamingResponse

from control.apiserver import crilog
from control.apiserver.http import connect, status
from control.apiserver.http.status import APIError
from netmodel.errors import NotFoundError
from netmodel.objects import Pod

if TYPE_CHECKING:
    from starlette.requests import Request

    from control.apiserver.http.app import API, RequestInfo
    from control.apiserver.http.authn import User
    from control.apiserver.podruntime import PodRuntime

__all__ = ["POLL", "LogOptions", "follow", "handle_log", "log_container", "log_options"]

log = logging.getLogger(__name__)

#: seconds between two looks at a followed log file (the delivery delay it bounds)
POLL = 0.02
#: seconds between two looks at the followed pod in the store
POD_CHECK = 0.2
TEXT = {"Content-Type": "text/plain"}
_INT = re.compile(r"[+-]?\d+")
_RFC3339_LAYOUT = "2006-01-02T15:04:05Z07:00"
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class LogOptions:
    """A ``PodLogOptions`` as kube-apiserver decodes it from the query.
    ``since_time_ns``: ``sinceTime`` to the second (what kubelet receives); ``since_time``
    is whether the parameter was given (an empty value is the zero time)."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: bool = False
    since_time_ns: int | None = None
    limit_bytes: int | None = None
    insecure_skip_tls_verify_backend: bool = False

    def since_ns(self, now_ns: int) -> int | None:
        """The oldest record time shown (None: no bound)."""
        if self.since_seconds is not None:
            return now_ns - self.since_seconds * crilog.NS
        return self.since_time_ns


def _int(params: dict[str, list[str]], name: str) -> int | None:
    v = params.get(name)
    if not v:
        return None
    text = v[0]
    if not _INT.fullmatch(text):
        raise status.bad_request(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    n = int(text)
    if not INT64[0] <= n <= INT64[1]:
        raise status.bad_request(f'strconv.ParseInt: parsing "{text}": value out of range')
    return n


def _time(params: dict[str, list[str]], name: str) -> tuple[bool, int | None]:
    v = params.get(name)
    if not v:
        return False, None
    text = v[0]
    if text in ("", "null"):
        return True, None  # metav1.Time's zero time: no bound
    try:
        return True, crilog.parse_rfc3339(text, fraction=False)
    except ValueError:
        raise status.bad_request(
            f'parsing time "{text}" as "{_RFC3339_LAYOUT}": cannot parse "{text}" as "2006"'
            if not re.match(r"\d{4}", text)
            else f'parsing time "{text}" as "{_RFC3339_LAYOUT}": not an RFC 3339 time'
        ) from None


def log_options(params: dict[str, list[str]], name: str) -> LogOptions:
    """The query's ``PodLogOptions``, decoded then validated as kube-apiserver does
    (400 for what does not decode, 422 for what does not validate)."""
    since_time, since_time_ns = _time(params, "sinceTime")
    opts = LogOptions(
        container=connect.query(params, "container"),
        follow=connect.flag(params, "follow"),
        previous=connect.flag(params, "previous"),
        timestamps=connect.flag(params, "timestamps"),
        tail_lines=_int(params, "tailLines"),
        since_seconds=_int(params, "sinceSeconds"),
        since_time=since_time,
        since_time_ns=since_time_ns,
        limit_bytes=_int(params, "limitBytes"),
        insecure_skip_tls_verify_backend=connect.flag(params, "insecureSkipTLSVerifyBackend"),
    )
    _validate(opts, name)
    return opts


def _validate(opts: LogOptions, name: str) -> None:
    """kube's ``ValidatePodLogOptions``: 422 with one cause per field error."""
    errs: list[tuple[str, str, str]] = []  # (field, cause type, body)
    if opts.tail_lines is not None and opts.tail_lines < 0:
        errs.append(
            (
                "tailLines",
                "FieldValueInvalid",
                f"Invalid value: {opts.tail_lines}: must be greater than or equal to 0",
            )
        )
    if opts.limit_bytes is not None and opts.limit_bytes < 1:
        errs.append(
            (
                "limitBytes",
                "FieldValueInvalid",
                f"Invalid value: {opts.limit_bytes}: must be greater than 0",
            )
        )
    if opts.since_seconds is not None and opts.since_time:
        errs.append(
            (
                "",
                "FieldValueForbidden",
                "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            )
        )
    elif opts.since_seconds is not None and opts.since_seconds < 1:
        errs.append(
            (
                "sinceSeconds",
                "FieldValueInvalid",
                f"Invalid value: {opts.since_seconds}: must be greater than 0",
            )
        )
    if not errs:
        return
    texts = [f"{f}: {body}" for f, _, body in errs]  # Go prints an empty path as ""
    agg = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {
        "name": name,
        "kind": "PodLogOptions",
        "causes": [{"reason": t, "message": body, "field": f} for f, t, body in errs],
    }
    raise APIError(422, "Invalid", f'PodLogOptions "{name}" is invalid: {agg}', details)


# --------------------------------------------------------------------------- the pod


def _extra_names(pod: Pod, field: str) -> list[str]:
    extra = pod.spec.model_extra or {}
    items = extra.get(field) or []
    return [c["name"] if isinstance(c, dict) else c.name for c in items]


def log_container(pod: Pod, container: str) -> str:
    """kube-apiserver's ``validateContainer`` for a log: the container named (one of
    the pod's init, regular or ephemeral containers) or the pod's only container."""
    regular = [c.name for c in pod.spec.containers]
    every = _extra_names(pod, "initContainers") + connect.container_names(pod)
    if not container:
        if len(regular) == 1:
            return regular[0]
        if not regular:
            raise status.bad_request(f"a container name must be specified for pod {pod.name}")
        raise status.bad_request(
            f"a container name must be specified for pod {pod.name}, "
            f"choose one of: [{' '.join(every)}]"
        )
    if container not in every:
        raise status.bad_request(f"container {container} is not valid for pod {pod.name}")
    return container


def _statuses(pod: Pod) -> dict[str, dict[str, Any]]:
    extra = pod.status.model_extra or {}
    out: dict[str, dict[str, Any]] = {}
    for field in ("ephemeralContainerStatuses", "initContainerStatuses", "containerStatuses"):
        for s in extra.get(field) or []:
            if isinstance(s, dict) and "name" in s:
                out[s["name"]] = s  # regular first, then init, then ephemeral (kubelet's)
    return out


def container_log_status(pod: Pod, container: str, previous: bool) -> None:
    """kubelet's ``validateContainerLogStatus``: 400 with its wording when the container
    has no log to show (see the module docstring)."""
    statuses = _statuses(pod)
    c, p = container, pod.name
    st = statuses.get(container)
    if st is None:
        if not statuses and pod.status.phase in (None, "Pending"):
            # kubelet reports a container it is still creating as waiting
            st = {"state": {"waiting": {"reason": "ContainerCreating"}}}
        else:
            raise status.bad_request(f'container "{c}" in pod "{p}" is not available')
    state = st.get("state") or {}
    last = (st.get("lastState") or {}).get("terminated")
    waiting, running, terminated = (
        state.get("waiting"),
        state.get("running"),
        state.get("terminated"),
    )
    if previous:
        if not last or not last.get("containerID"):
            raise status.bad_request(f'previous terminated container "{c}" in pod "{p}" not found')
        return
    if running is not None:
        return
    if terminated is not None:
        if terminated.get("containerID") or (last and last.get("containerID")):
            return
        raise status.bad_request(f'container "{c}" in pod "{p}" is terminated')
    if last is not None:
        if last.get("containerID"):
            return
        raise status.bad_request(f'container "{c}" in pod "{p}" is terminated')
    if waiting is not None:
        reason = waiting.get("reason") or ""
        why = {
            "ErrImagePull": "image can't be pulled",
            "ImagePullBackOff": "trying and failing to pull image",
        }.get(reason, reason)
        raise status.bad_request(f'container "{c}" in pod "{p}" is waiting to start: {why}')
    raise status.bad_request(f'container "{c}" in pod "{p}" is waiting to start - no logs yet')


def _running(pod: Pod, container: str) -> bool:
    st = _statuses(pod).get(container)
    return st is not None and (st.get("state") or {}).get("running") is not None


def _kubelet(api: API, pod: Pod) -> PodRuntime:
    """The pod's node and the runtime that reaches its kubelet (404 / 503)."""
    node = pod.spec.node_name or ""
    try:
        api.get("Node", node)
    except NotFoundError:
        raise APIError(
            404, "NotFound", f'nodes "{node}" not found', {"name": node, "kind": "nodes"}
        ) from None
    if api.runtime is None:
        raise APIError(
            503,
            "ServiceUnavailable",
            f"the server is currently unable to handle the request ( pods/log {pod.name})",
            {"name": pod.name, "kind": "pods/log"},
        )
    return api.runtime


# --------------------------------------------------------------------------- the handler


async def handle_log(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    """See the module docstring."""
    if info.verb != "get":
        raise status.method_not_allowed()
    opts = log_options(params, info.name)
    pod = connect.pod_of(api, info.namespace, info.name)
    container = log_container(pod, opts.container)
    if not pod.spec.node_name:
        return Response(status_code=204)
    runtime = _kubelet(api, pod)
    container_log_status(pod, container, opts.previous)
    now = time.time_ns()
    renderer = crilog.Renderer(
        timestamps=opts.timestamps, since_ns=opts.since_ns(now), limit=opts.limit_bytes
    )
    path = runtime.log_path(pod.namespace, pod.name, container, opts.previous)
    reader = _Reader(path)
    first = renderer.feed(crilog.tail(reader.read(), opts.tail_lines))
    if not opts.follow or opts.previous or renderer.exhausted:
        # a previous instance has ended: kubelet's follow of it ends at its last record
        return Response(first, headers=TEXT)
    body = follow(api, runtime, pod, container, reader, renderer, first)
    return StreamingResponse(body, headers=TEXT | {"Transfer-Encoding": "chunked"})


class _Reader:
    """Reads a CRI log file's new complete lines, from where it stopped last time (an
    unfinished last line waits for its end)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = 0
        self.line = 1
        self._rest = b""

    def read(self) -> list[crilog.Record]:
        if self.path is None:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self._rest + data
        errors: list[str] = []
        records = crilog.parse_records(data, str(self.path), first_line=self.line, errors=errors)
        for e in errors:
            log.warning("skipped a malformed CRI log line: %s", e)
        complete = data.rfind(b"\n") + 1
        self.line += data.count(b"\n", 0, complete)
        self._rest = data[complete:]
        return records


async def follow(
    api: API,
    runtime: PodRuntime,
    pod: Pod,
    container: str,
    reader: _Reader,
    renderer: crilog.Renderer,
    first: bytes,
) -> AsyncIterator[bytes]:
    """The body of a followed log: ``first``, then each new record as it is written
    (see the module docstring for when it ends). Runs in the response's task: it starts
    no other, so cancelling the response ends it."""
    yield first
    key, uid = pod.key, pod.metadata.uid
    loop = asyncio.get_running_loop()
    next_check = loop.time() + POD_CHECK
    while True:
        await asyncio.sleep(POLL)
        if reader.path is None:
            reader.path = runtime.log_path(pod.namespace, pod.name, container, False)
        chunk = renderer.feed(reader.read())
        if chunk:
            yield chunk
        if renderer.exhausted:
            return
        if loop.time() >= next_check:
            next_check = loop.time() + POD_CHECK
            try:
                now = api.get("Pod", key)
            except NotFoundError:
                now = None
            if not isinstance(now, Pod) or now.metadata.uid != uid or not _running(now, container):
                tail = renderer.feed(reader.read())  # what was written before it ended
                if tail:
                    yield tail
                return


connect.HANDLERS[("pods", "log")] = handle_log
