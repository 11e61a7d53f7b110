"""kube-proxy's sync timing (minSyncPeriod, syncPeriod), on a fake clock.

A kube-proxy given :class:`SyncPeriods` syncs the first time at once; a change that
arrives less than ``minSyncPeriod`` after a sync waits (``sync`` does nothing,
``next_due`` names the end of the hold-off) and goes out with every other change made
meanwhile in one partial sync; with no change at all a full sync runs ``syncPeriod``
after the last one. A sync whose load fails leaves the next one full. Without periods
(the deterministic runner) every change syncs at once and nothing is due."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from control.agents.kubeproxy import (
    EmulatedRules,
    KubeProxy,
    Rendered,
    SyncPeriods,
    sync_periods,
)
from control.clock import FakeClock
from control.session import Session
from control.store.base import WatchEvent
from dataplane.proxy import IptablesRender, Mode
from netmodel.errors import BackendError, InputError
from netmodel.manifests import load_text
from netmodel.objects import Service
from netmodel.proxyconfig import proxy_config_from_dict

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
"""


def _service(name: str) -> Service:
    ip = f"10.96.1.{ord(name[0])}"
    text = (
        f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n"
        f"spec: {{clusterIP: {ip}, selector: {{app: web}}, ports: [{{port: 81, targetPort: 8080}}]}}\n"
    )
    (svc,) = load_text(text, source="more.yaml").objects
    assert isinstance(svc, Service)
    return svc


class FailingOnce(EmulatedRules):
    """The emulated sink, whose next load fails when ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def load(self, node: str, mode: Mode, rendered: Rendered, *, full: bool) -> None:
        if self.fail:
            self.fail = False
            raise BackendError("iptables-restore: line 3 failed")
        super().load(node, mode, rendered, full=full)

    def existing_chains(self, node: str) -> Collection[str]:
        return super().existing_chains(node)


def _proxy(periods: SyncPeriods | None) -> tuple[KubeProxy, FakeClock, Session, FailingOnce]:
    s = Session.ephemeral(load_text(MANIFEST, source="t.yaml"))
    s.converge()
    clock = FakeClock()
    sink = FailingOnce()
    proxy = KubeProxy("node-1", s.cluster.spec, None, sink, clock=clock, periods=periods)
    proxy.resync([*s.store.list("Node"), *s.store.list("Service"), *s.store.list("EndpointSlice")])
    return proxy, clock, s, sink


def _add(proxy: KubeProxy, svc: Service) -> None:
    proxy.handle([WatchEvent("ADDED", svc, 1)])


def test_min_sync_period_holds_changes_back_and_sends_them_together() -> None:
    proxy, clock, _, _ = _proxy(SyncPeriods(min_sync=1.0, resync=30.0))
    assert proxy.next_due() is None  # nothing synced yet: the start event syncs
    assert proxy.sync() == 1 and proxy.full_syncs == 1
    t0 = clock.now()
    assert proxy.next_due() == t0 + 30.0  # nothing waits: only the periodic resync
    clock.advance(0.4)
    _add(proxy, _service("a"))
    assert proxy.sync() == 0  # held off
    assert proxy.next_due() == t0 + 1.0
    clock.advance(0.3)
    _add(proxy, _service("b"))
    assert proxy.sync() == 0
    clock.advance(0.3)  # t0 + 1.0: the hold-off is over
    assert proxy.sync() == 1
    last = proxy.last
    assert isinstance(last, IptablesRender) and last.partial
    assert "default/a has no endpoints" in last.restore_input
    assert "default/b has no endpoints" in last.restore_input
    assert (proxy.full_syncs, proxy.partial_syncs) == (1, 1)
    assert proxy.next_due() == t0 + 1.0 + 30.0


def test_sync_period_resyncs_fully_with_no_change() -> None:
    proxy, clock, _, sink = _proxy(SyncPeriods(min_sync=1.0, resync=30.0))
    assert proxy.sync() == 1
    clock.advance(29.9)
    assert proxy.sync() == 0
    clock.advance(0.1)
    assert proxy.sync() == 1
    last = proxy.last
    assert isinstance(last, IptablesRender) and not last.partial
    assert proxy.full_syncs == 2 and sink.nodes["node-1"].syncs == 2


def test_a_failed_load_makes_the_next_sync_full() -> None:
    proxy, clock, _, sink = _proxy(SyncPeriods(min_sync=1.0, resync=None))
    assert proxy.sync() == 1
    assert proxy.next_due() is None  # no resync period, nothing waiting
    clock.advance(2)
    _add(proxy, _service("a"))
    sink.fail = True
    with pytest.raises(BackendError):
        proxy.sync()
    assert proxy.next_due() == clock.now() - 2 + 1.0  # waiting since the last good sync
    assert proxy.sync() == 1
    last = proxy.last
    assert isinstance(last, IptablesRender) and not last.partial
    assert "default/a has no endpoints" in last.restore_input


def test_without_periods_every_change_syncs_at_once() -> None:
    proxy, _, _, _ = _proxy(None)
    assert proxy.sync() == 1
    _add(proxy, _service("a"))
    assert proxy.sync() == 1
    assert proxy.next_due() is None


def test_periods_come_from_the_mode_section() -> None:
    assert sync_periods(None, "iptables") == SyncPeriods(1.0, 30.0)
    assert sync_periods(None, "ipvs") == SyncPeriods(0.0, 30.0)
    cfg = proxy_config_from_dict(
        {
            "nftables": {"minSyncPeriod": "250ms", "syncPeriod": "1m30s"},
            "iptables": {"syncPeriod": "0s"},
        }
    )
    assert sync_periods(cfg, "nftables") == SyncPeriods(0.25, 90.0)
    assert sync_periods(cfg, "iptables") == SyncPeriods(1.0, None)


def test_a_bad_period_is_refused_naming_the_field() -> None:
    with pytest.raises(InputError, match=r"kp.yaml.*iptables.minSyncPeriod: invalid duration '1x'"):
        proxy_config_from_dict({"iptables": {"minSyncPeriod": "1x"}}, file="kp.yaml")
