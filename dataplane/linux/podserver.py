"""The pod servers: one process per pod, inside the pod's network namespace, listening
on the pod's containerPorts (TCP and UDP) and answering every connection or datagram
with one line::

    <pod ns/name> <peer ip> <peer port>\\n

i.e. who answered and which source address the server saw (after any NAT).

This file is a standalone script (standard library only, run as
``python3 -I podserver.py STATE_DIR``): starting a Python interpreter costs ~80 ms here,
so instead of one interpreter per pod, one *supervisor* per cluster forks a child per pod
(~1 ms). The supervisor:

* writes ``STATE_DIR/supervisor.pid`` and listens on ``STATE_DIR/supervisor.sock``;
  prints ``ready`` on stdout once it does, then closes stdout;
* takes one JSON request per connection, answers one JSON line:
  ``{"op": "start", "pods": [{"pod", "netns", "tcp": [..], "udp": [..]}]}`` ->
  ``{"ok": true, "pids": {pod: pid}}`` (a pod already served with the same ports keeps
  its process); ``{"op": "stop", "pods": [pod, ...]}``; ``{"op": "list"}``;
  ``{"op": "shutdown"}``;
* each child enters the pod's namespace with ``setns(2)``, binds its sockets, writes
  ``STATE_DIR/<sha256(pod)[:8]>.pid`` and reports success (or the bind error) to the
  supervisor before the supervisor answers, so a started server is already listening;
* reaps its children; on SIGTERM it stops every child, removes the pid files and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000


def pid_file(state_dir: Path, pod: str) -> Path:
    return state_dir / f"{hashlib.sha256(pod.encode()).hexdigest()[:8]}.pid"


# ---------------------------------------------------------------------- the pod server
def _enter(netns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
    finally:
        os.close(fd)


def _bind(tcp: list[int], udp: list[int]) -> list[socket.socket]:
    socks: list[socket.socket] = []
    for port in tcp:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(512)
        socks.append(s)
    for port in udp:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        socks.append(s)
    for s in socks:
        s.setblocking(False)
    return socks


def serve(pod: str, socks: list[socket.socket]) -> None:
    """Answer forever: TCP accept -> one line, close; UDP datagram -> one line back."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                if sock.type == socket.SOCK_STREAM:
                    conn, peer = sock.accept()
                    with conn:
                        conn.setblocking(True)
                        conn.settimeout(1.0)
                        conn.sendall(f"{pod} {peer[0]} {peer[1]}\n".encode())
                        with contextlib.suppress(OSError):
                            conn.shutdown(socket.SHUT_WR)
                else:
                    _, peer = sock.recvfrom(2048)
                    sock.sendto(f"{pod} {peer[0]} {peer[1]}\n".encode(), peer)
            except (BlockingIOError, InterruptedError, ConnectionError, TimeoutError):
                continue


def _child(spec: dict[str, Any], state_dir: Path, report: int) -> None:
    """In the forked child: enter the namespace, bind, report, serve. Never returns."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _enter(spec["netns"])
        socks = _bind(list(spec.get("tcp", [])), list(spec.get("udp", [])))
        pid_file(state_dir, spec["pod"]).write_text(f"{os.getpid()}\n")
        os.write(report, b"ok")
        os.close(report)
    except BaseException as e:  # report any failure, never fall back into the supervisor
        with contextlib.suppress(OSError):
            os.write(report, f"{type(e).__name__}: {e}".encode()[:4000])
        os._exit(1)
    try:
        serve(spec["pod"], socks)
    finally:
        os._exit(0)


# ---------------------------------------------------------------------- the supervisor
class Supervisor:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.children: dict[str, tuple[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
        self.running = True

    def start(self, specs: list[dict[str, Any]]) -> dict[str, Any]:
        pending: list[tuple[str, int, int, Any]] = []
        pids: dict[str, int] = {}
        errors: dict[str, str] = {}
        for spec in specs:
            pod = spec["pod"]
            ports = (tuple(spec.get("tcp", [])), tuple(spec.get("udp", [])))
            if pod in self.children:
                pid, have = self.children[pod]
                if have == ports and _alive(pid):
                    pids[pod] = pid
                    continue
                self._kill(pod)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(spec, self.state_dir, w)
            os.close(w)
            pending.append((pod, pid, r, ports))
        for pod, pid, r, ports in pending:
            chunks = []
            while chunk := os.read(r, 4096):
                chunks.append(chunk)
            os.close(r)
            answer = b"".join(chunks).decode()
            if answer == "ok":
                self.children[pod] = (pid, ports)
                pids[pod] = pid
            else:
                errors[pod] = answer or "server exited before listening"
                _reap(pid)
        return {"ok": not errors, "pids": pids, "errors": errors}

    def _kill(self, pod: str) -> None:
        pid, _ = self.children.pop(pod, (0, ((), ())))
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _reap(pid)
        pid_file(self.state_dir, pod).unlink(missing_ok=True)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "start":
            return self.start(list(req["pods"]))
        if op == "stop":
            for pod in req["pods"]:
                self._kill(pod)
            return {"ok": True}
        if op == "list":
            return {"ok": True, "pids": {p: pid for p, (pid, _) in self.children.items()}}
        if op == "shutdown":
            self.running = False
            return {"ok": True}
        return {"ok": False, "errors": {"": f"unknown op {op!r}"}}

    def shutdown(self) -> None:
        for pod in list(self.children):
            self._kill(pod)
        (self.state_dir / "supervisor.sock").unlink(missing_ok=True)
        (self.state_dir / "supervisor.pid").unlink(missing_ok=True)

    def run(self) -> None:
        sock_path = self.state_dir / "supervisor.sock"
        sock_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_path))
        listener.listen(64)
        listener.settimeout(1.0)
        (self.state_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")

        def on_term(signum: int, frame: object) -> None:
            raise SystemExit(0)  # interrupts accept(); the finally below stops children

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # only teardown stops us
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        os.close(1)
        try:
            while self.running:
                self._reap_exited()
                try:
                    conn, _ = listener.accept()
                except (TimeoutError, InterruptedError):
                    continue
                with conn:
                    conn.settimeout(30)
                    data = b""
                    with contextlib.suppress(OSError):
                        while not data.endswith(b"\n"):
                            chunk = conn.recv(65536)
                            if not chunk:
                                break
                            data += chunk
                    try:
                        reply = self.handle(json.loads(data))
                    except (ValueError, KeyError, TypeError) as e:
                        reply = {"ok": False, "errors": {"": f"bad request: {e}"}}
                    with contextlib.suppress(OSError):
                        conn.sendall(json.dumps(reply).encode() + b"\n")
        finally:
            listener.close()
            self.shutdown()

    def _reap_exited(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for pod, (cpid, _) in list(self.children.items()):
                if cpid == pid:
                    del self.children[pod]
                    pid_file(self.state_dir, pod).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reap(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError as e:
            if e.errno == errno.ECHILD:
                return
            raise
        if done:
            return
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: podserver.py STATE_DIR\n")
        return 2
    state_dir = Path(argv[1])
    state_dir.mkdir(parents=True, exist_ok=True)
    Supervisor(state_dir).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
