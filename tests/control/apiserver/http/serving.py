"""A real ``svclab serve`` in a subprocess on a free port, driven by the real kubectl and
the official kubernetes Python client (shared by the tests of this package)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
WEB = ROOT / "examples" / "web.yaml"
SVCLAB = str(Path(sys.executable).parent / "svclab")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """One ``svclab serve`` process over ``state``; :meth:`stop` is always called."""

    def __init__(self, state: Path, *extra: str) -> None:
        self.state = state
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state.parent / f"serve-{self.port}.log"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> Served:
        self.state.mkdir(parents=True, exist_ok=True)
        cmd = [SVCLAB, "--state", str(self.state), "serve"]
        cmd += ["--listen", f"127.0.0.1:{self.port}", *self.extra]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"svclab serve exited: {self.log.read_text()[-2000:]}")
            if self.kubeconfig.exists():
                try:
                    if self.raw("GET", "/healthz")[0] == 200:
                        return self
                except (OSError, urllib.error.URLError):
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"svclab serve did not come up: {self.log.read_text()[-2000:]}")

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc = self.proc.returncode
        self.proc = None
        return rc

    # ---- clients

    def ssl_context(self, *, client: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
        if client:
            ctx.load_cert_chain(
                str(self.state / "pki" / "admin.crt"), str(self.state / "pki" / "admin.key")
            )
        return ctx

    def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        ctx: ssl.SSLContext | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, Any] | str, dict[str, str]]:
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, context=ctx or self.ssl_context(), timeout=30) as resp:
                text = resp.read().decode()
                code, hdrs = resp.status, dict(resp.headers)
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            code, hdrs = e.code, dict(e.headers)
        try:
            return code, json.loads(text), hdrs
        except ValueError:
            return code, text, hdrs

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        kubeconfig: Path | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
        timeout: float = 60,
        binary: str = KUBECTL,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [binary, "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            input=input,
            timeout=timeout,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({out.returncode}): {out.stderr}")
        return out

    def svclab(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [SVCLAB, "--state", str(self.state), *args]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)

    def apply_web(self, *, all_pods: bool = False) -> Served:
        """Apply examples/web.yaml and wait for its three web pods to be Ready
        (``all_pods``: every pod of every namespace, CoreDNS's too)."""
        self.kubectl("apply", "-f", str(WEB))
        deadline = time.monotonic() + 60
        while len(self.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()) < 3:
            assert time.monotonic() < deadline, "the web pods never came"
            time.sleep(0.2)
        which = ["--all", "-A"] if all_pods else ["-l", "app=web"]
        self.kubectl("wait", "--for=condition=Ready", "pod", *which, "--timeout=60s")
        return self

    def wait_for(self, args: Sequence[str], want: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = self.kubectl(*args, check=False).stdout
            if want in out:
                return out
            time.sleep(0.3)
        raise AssertionError(f"{' '.join(args)}: {want!r} not seen in {out!r}")


def kubectl_1_20() -> tuple[str | None, str]:
    """Debian's kubectl 1.20 (package kubernetes-client), the oldest client svclab keeps
    working, and why not when there is none. ``SVCLAB_KUBECTL_1_20`` names a binary;
    otherwise ``scripts/kubectl-1.20`` (which scripts/install runs too) fetches the
    package once into ``.cache/kubectl-1.20`` in the checkout, never installed."""
    binary = os.environ.get("SVCLAB_KUBECTL_1_20")
    if not binary:
        got = subprocess.run(
            ["bash", str(ROOT / "scripts" / "kubectl-1.20")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if got.returncode != 0:
            return None, got.stderr.strip()[-400:]
        binary = got.stdout.strip()
    try:
        out = subprocess.run(
            [binary, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        minor = json.loads(out.stdout)["clientVersion"]["minor"]
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        return None, f"{binary} does not run: {e}"
    if minor.rstrip("+") != "20":
        return None, f"{binary} is kubectl 1.{minor}, not 1.20"
    return binary, ""
