"""A followed pod log (:func:`control.apiserver.http.podlogs.follow`) in-process, over
the emulator's real runtime (:class:`app.podruntime.EmulatedRuntime`): requests the pod
server answers after the follow started reach it (the log file may not even exist when
it starts); cancelling the consumer (what
the server does when the client goes away) ends the generator and leaves no task; the
stream ends by itself once the pod is deleted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.podruntime import EmulatedRuntime
from control.apiserver import crilog
from control.apiserver.http import podlogs
from control.apiserver.podruntime import ExecSpec
from control.session import Session
from netmodel.objects import Pod

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = [str(ROOT / "examples" / f) for f in ("web.yaml", "pods.yaml")]


class Out:
    def __init__(self) -> None:
        self.out = b""

    async def read_stdin(self) -> bytes | None:
        return None

    async def write_stdout(self, data: bytes) -> None:
        self.out += data

    async def write_stderr(self, data: bytes) -> None:
        pass


async def curl(rt: EmulatedRuntime, pod: Pod) -> str:
    """``curl -s POD_IP:8080`` in pod ``client``: the answer (``ns/pod ip port``)."""
    io = Out()
    argv = ("curl", "-s", f"{pod.status.pod_ip}:8080")
    code = await rt.exec(ExecSpec("default", "client", "client", argv), io)
    assert code == 0
    return io.out.decode()


async def forward(rt: EmulatedRuntime, pod: Pod) -> None:
    """One HTTP request through a port-forward to ``pod``'s port 8080."""
    conn = await rt.port_forward(pod.namespace, pod.name, 8080)
    await conn.write(b"GET /pf HTTP/1.1\r\nHost: x\r\n\r\n")
    while await conn.read():
        pass
    await conn.close()


@pytest.fixture
def rt(tmp_path: Path) -> EmulatedRuntime:
    return EmulatedRuntime(Session.from_files(EXAMPLES), logs_dir=tmp_path)


def start(rt: EmulatedRuntime, pod: Pod):  # type: ignore[no-untyped-def]
    reader = podlogs._Reader(rt.log_path(pod.namespace, pod.name, "web", False))
    renderer = crilog.Renderer()
    first = renderer.feed(reader.read())
    store = rt.session.store  # what follow() reads of the API: get(kind, key)
    return podlogs.follow(store, rt, pod, "web", reader, renderer, first)  # type: ignore[arg-type]


def web(rt: EmulatedRuntime) -> Pod:
    p = min(
        (p for p in rt.session.store.list("Pod") if p.name.startswith("web-")),
        key=lambda p: p.name,
    )
    assert isinstance(p, Pod)
    return p


def test_requests_after_the_start_reach_the_follow(rt: EmulatedRuntime) -> None:
    async def go() -> None:
        pod = web(rt)
        stream = start(rt, pod)  # no log file yet: nothing answered so far
        assert rt.log_path(pod.namespace, pod.name, "web", False) is None
        assert await anext(stream) == b""
        _, ip, port = (await curl(rt, pod)).split()
        line = await asyncio.wait_for(anext(stream), 2)
        assert line.startswith(f"{ip}:{port} -> {pod.status.pod_ip}:8080 ".encode())
        await forward(rt, pod)
        line = await asyncio.wait_for(anext(stream), 2)
        assert line.startswith(b"127.0.0.1:") and b'"GET /pf HTTP/1.1" 200' in line
        await stream.aclose()

    asyncio.run(go())


def test_the_client_going_away_ends_it_and_leaves_no_task(rt: EmulatedRuntime) -> None:
    async def go() -> None:
        await curl(rt, web(rt))
        stream = start(rt, web(rt))

        async def consume() -> None:
            async for _ in stream:
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)  # it is waiting for the next record
        assert not task.done()
        task.cancel()  # what Starlette does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stream.ag_frame is None  # the generator has ended
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(go())


def test_the_stream_ends_when_the_pod_is_deleted(rt: EmulatedRuntime) -> None:
    async def go() -> list[bytes]:
        pod = web(rt)
        await curl(rt, pod)
        stream = start(rt, pod)
        got = [await anext(stream)]
        rt.session.store.delete("Pod", pod.key)

        async def rest() -> None:
            async for chunk in stream:
                got.append(chunk)

        await asyncio.wait_for(rest(), 2)
        return got

    assert len(asyncio.run(go())) == 1
