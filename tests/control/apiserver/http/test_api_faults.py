"""Faults between the API server and its clients, end to end against a real
``svclab serve``: a watch that gets 410 Gone relists and loses no change; a stopped API
server makes clients retry with back-off and resume, losing no write."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from serving import ROOT, SVCLAB, WEB, Served

from control.informers.http import Credentials, HTTPListerWatcher, KubeClient
from control.informers.informer import Reflector, SharedInformer
from control.store.base import WatchEvent
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject

pytestmark = pytest.mark.slow


def admin_client(srv: Served) -> KubeClient:
    pki = srv.state / "pki"
    creds = Credentials(
        server=srv.url,
        ca_pem=(pki / "ca.crt").read_bytes(),
        cert_pem=(pki / "admin.crt").read_bytes(),
        key_pem=(pki / "admin.key").read_bytes(),
    )
    return KubeClient(creds, user_agent="fault-test")


@pytest.fixture
def compacting(tmp_path: Path) -> Iterator[Served]:
    """A server keeping 5 revisions of watch history, compacting every 0.2 s."""
    s = Served(tmp_path / "state", "--watch-history", "5", "--compact-every", "0.2")
    try:
        yield s.start()
    finally:
        s.stop()


def test_a_watch_that_gets_410_relists_and_loses_no_change(compacting: Served) -> None:
    srv = compacting
    for i in range(3):
        srv.kubectl("create", "configmap", f"keep-{i}")
    client = admin_client(srv)
    informer = SharedInformer("ConfigMap")
    state: dict[str, int] = {}  # what the handler was told: key -> resourceVersion

    def told(events: Sequence[WatchEvent]) -> None:
        for ev in events:
            if ev.type == "DELETED":
                state.pop(ev.object.key, None)
            else:
                state[ev.object.key] = ev.object.resource_version

    informer.add_handler(told)
    reflector = Reflector(HTTPListerWatcher(client), informer, watch_timeout=2)
    reflector.step()  # the first list
    assert reflector.lists == 1
    # while the reflector is not watching: changes, then enough writes to compact past
    # its revision (every kind of change: one created, one modified, one deleted)
    srv.kubectl("create", "configmap", "born-in-the-gap")
    srv.kubectl("label", "configmap", "keep-0", "touched=yes")
    srv.kubectl("delete", "configmap", "keep-1")
    for i in range(10):
        srv.kubectl("annotate", "svc", "kubernetes", f"churn={i}", "--overwrite")
    time.sleep(1.0)  # a compaction runs
    reflector.step()  # the watch from the old revision: 410 Gone
    assert reflector.gone == 1 and reflector.revision is None
    reflector.step()  # the relist
    assert reflector.lists == 2
    fresh = client.list("ConfigMap")
    want = {o.key: o.resource_version for o in fresh.objects}
    have = {o.key: o.resource_version for o in informer.objects()}
    assert have == want  # the cache equals a fresh list
    assert state == want  # and the handlers were told every change it took
    assert "default/born-in-the-gap" in want and "default/keep-1" not in want
    # and the reflector watches on from the relist's revision
    srv.kubectl("create", "configmap", "after-relist")
    reflector.step()
    assert "default/after-relist" in state
    client.close()


# --------------------------------------------------------------------------- stopped server


class _Components:
    """``python -m control.live STATE SERVER``: the control plane's components as a
    process of their own, API clients of a server they outlive."""

    def __init__(self, srv: Served) -> None:
        self.log = srv.state.parent / "components.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "control.live", str(srv.state), srv.url],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[Served, _Components]]:
    """An API-only server over SQLite and the components in their own process."""
    state = tmp_path / "state"
    got = subprocess.run(
        [SVCLAB, "--state", str(state), "apply", "-f", str(WEB)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    srv = Served(state, "--control-plane", "none").start()
    comps = _Components(srv)
    try:
        # 'apply' converged the cluster in-process: make the components prove they act
        srv.kubectl("scale", "deploy/web", "--replicas=4")
        srv.kubectl("rollout", "status", "deploy/web", "--timeout=90s")
        yield srv, comps
    finally:
        comps.stop()
        srv.stop()


def _endpoints(srv: Served) -> int:
    out = srv.kubectl(
        "get", "endpointslices", "-l", "kubernetes.io/service-name=web",
        "-o", "jsonpath={.items[*].endpoints[*].addresses[0]}",
    ).stdout  # fmt: skip
    return len(out.split())


def test_components_resume_after_the_api_server_stops_and_starts_again(
    split: tuple[Served, _Components],
) -> None:
    srv, comps = split
    assert srv.stop() is not None  # the API server is gone; the components are not
    time.sleep(4)  # their watches fail and back off
    assert comps.proc.poll() is None
    srv.start()  # same state, same port
    srv.kubectl("scale", "deploy/web", "--replicas=5")
    srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
    deadline = time.monotonic() + 30
    while _endpoints(srv) != 5:  # the EndpointSlice controller follows too
        assert time.monotonic() < deadline, "the EndpointSlice never reached 5 endpoints"
        time.sleep(0.3)
    log = comps.log.read_text()
    # the back-off is visible, and grows (jittered, capped)
    waits = [float(w) for w in _retry_waits(log)]
    assert len(waits) >= 2, log[-3000:]
    assert max(waits) > min(waits)


def _retry_waits(log: str) -> list[str]:
    import re

    return re.findall(r"reflector \S+: \S+: .*\(retrying in ([0-9.]+)s\)", log)


def test_a_write_made_while_the_api_server_is_down_is_retried_not_lost(
    split: tuple[Served, _Components], caplog: pytest.LogCaptureFixture
) -> None:
    srv, _comps = split
    client = admin_client(srv)
    srv.stop()
    done: list[object] = []

    def write() -> None:
        try:
            cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap"}
            cm["metadata"] = {"name": "in-the-outage", "namespace": "default"}
            done.append(client.create(object_from_dict(cm)))
        except Exception as e:  # the assertion below shows it
            done.append(e)

    with caplog.at_level(logging.WARNING, logger="svclab.client"):
        t = threading.Thread(target=write)
        t.start()
        time.sleep(3)  # the write is refused, again and again, backing off
        assert not done
        srv.start()
        t.join(60)
    assert done and isinstance(done[0], KubeObject), done
    assert int(done[0].resource_version) > 0
    srv.kubectl("get", "configmap", "in-the-outage")
    retries = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) >= 2, [r.getMessage() for r in caplog.records]
    client.close()
