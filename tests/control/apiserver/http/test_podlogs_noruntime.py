"""pods/log on an API server that has no way to the kubelets (``serve()`` called without
a ``runtime_factory``, as a library user may run it): 503 with the text kube-apiserver
makes of a kubelet that cannot serve, for the raw API and for kubectl; the checks
before the kubelet (the pod, the container) still answer as usual."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator

import pytest
from serving import ROOT, Served

pytestmark = pytest.mark.slow

BARE = (
    "import sys; from pathlib import Path; "
    "from control.apiserver.http.serve import serve; "
    "serve(Path(sys.argv[1]), '127.0.0.1', int(sys.argv[2]))"
)


class Bare(Served):
    """``serve()`` without a runtime, in a subprocess."""

    def start(self) -> Bare:
        self.state.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-c", BARE, str(self.state), str(self.port)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            if self.kubeconfig.exists():
                try:
                    if self.raw("GET", "/healthz")[0] == 200:
                        return self
                except (OSError, urllib.error.URLError):
                    pass
            time.sleep(0.2)
        raise AssertionError(f"serve() did not come up: {self.log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Bare(tmp_path_factory.mktemp("noruntime") / "state")
    try:
        s.start()
        s.apply_web()
        yield s
    finally:
        s.stop()


def test_logs_without_a_runtime_are_503(srv: Served) -> None:
    name = srv.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()[0][4:]
    code, body, _ = srv.raw("GET", f"/api/v1/namespaces/default/pods/{name}/log")
    assert code == 503
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"the server is currently unable to handle the request ( pods/log {name})",
        "reason": "ServiceUnavailable",
        "code": 503,
        "details": {"name": name, "kind": "pods/log"},
    }
    out = srv.kubectl("logs", name, check=False)
    assert out.returncode == 1
    assert out.stderr == (
        "Error from server (ServiceUnavailable): the server is currently unable to "
        f"handle the request ( pods/log {name})\n"
    )
    # what kube-apiserver checks itself comes first
    code, body, _ = srv.raw("GET", f"/api/v1/namespaces/default/pods/{name}/log?container=x")
    assert (code, body["message"]) == (400, f"container x is not valid for pod {name}")  # type: ignore[index]
