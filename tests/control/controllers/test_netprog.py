"""The network programming SLI: the EndpointSlice controller stamps the slices it writes
with the time of the change that triggered them (upstream's
``endpoints.kubernetes.io/last-change-trigger-time``, RFC3339Nano in UTC), and each
kube-proxy measures ``sync done - trigger time`` for every slice change a sync applied."""

from __future__ import annotations

import logging

import pytest
from cp_helpers import deployment, make_plane, pods, service, slices

from control.agents.kubeproxy import EmulatedRules, KubeProxy
from control.agents.netprog import TRIGGER_TIME_ANNOTATION
from control.clock import FakeClock, parse_rfc3339_nano, rfc3339_nano
from control.runner import ControlPlane
from control.store.base import WatchEvent
from dataplane.proxy import Mode
from netmodel.objects import (
    Condition,
    EndpointSlice,
    KubeObject,
    Node,
    Pod,
    Service,
)

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def test_rfc3339_nano_is_gos_format_and_parses_back() -> None:
    assert rfc3339_nano(T0) == "2026-01-01T00:00:00Z"
    assert rfc3339_nano(T0 + 0.25) == "2026-01-01T00:00:00.25Z"
    assert rfc3339_nano(T0 + 61.000123) == "2026-01-01T00:01:01.000123Z"
    assert parse_rfc3339_nano("2026-01-01T00:00:00.25Z") == T0 + 0.25
    assert parse_rfc3339_nano("2026-01-01T00:00:01.123456789Z") == pytest.approx(T0 + 1.123456)
    assert parse_rfc3339_nano("2026-01-01T00:00:00Z") == T0
    for bad in ("2026-01-01T00:00:00", "2026-01-01T00:00:00.Z", "yesterday"):
        with pytest.raises(ValueError):
            parse_rfc3339_nano(bad)


def _unready(pod: Pod) -> Pod:
    return pod.evolve(
        status=pod.status.evolve(conditions=[Condition(type="Ready", status="False")])
    )


def _web_plane() -> tuple[ControlPlane, FakeClock]:
    plane = make_plane(2)
    plane.apply([deployment("web", 2), service("web", {"app": "web"})])
    plane.run_until_idle()
    clock = FakeClock(T0 + 10.5)
    plane.endpointslices.clock = clock
    return plane, clock


def test_slice_carries_the_time_of_the_first_change_that_queued_it() -> None:
    plane, clock = _web_plane()
    es = plane.endpointslices
    (before,) = slices(plane, "web")
    assert TRIGGER_TIME_ANNOTATION not in before.metadata.annotations  # runner: no clock
    a, b = sorted(pods(plane, "web-"), key=lambda p: p.name)
    es.handle([WatchEvent("MODIFIED", _unready(a), 0)])  # at T0+10.5
    clock.advance(2.25)
    es.handle([WatchEvent("MODIFIED", _unready(b), 0)])  # the same Service, later
    clock.advance(1.0)
    assert es.sync() == 1
    plane.run_until_idle()  # the controller's informer sees its own write
    (sl,) = slices(plane, "web")
    assert [e.conditions.ready for e in sl.endpoints] == [False, False]
    assert sl.metadata.annotations[TRIGGER_TIME_ANNOTATION] == "2026-01-01T00:00:10.5Z"
    # the next change gets its own time; a reconcile that writes nothing keeps the last
    clock.advance(0.125)
    es.handle([WatchEvent("MODIFIED", a, 0)])
    es.sync()
    plane.run_until_idle()
    (sl,) = slices(plane, "web")
    assert sl.metadata.annotations[TRIGGER_TIME_ANNOTATION] == "2026-01-01T00:00:13.875Z"
    es.queue.add("default/web")
    es.sync()
    (again,) = slices(plane, "web")
    assert again.metadata.resource_version == sl.metadata.resource_version


def _proxy_objects(plane: ControlPlane) -> tuple[Node, list[KubeObject], EndpointSlice]:
    node = next(n for n in plane.store.list("Node") if isinstance(n, Node))
    objs: list[KubeObject] = [node]
    objs += [s for s in plane.store.list("Service") if isinstance(s, Service)]
    objs += [s for s in plane.store.list("EndpointSlice") if isinstance(s, EndpointSlice)]
    (sl,) = slices(plane, "web")
    return node, objs, sl


class _FailingOnce(EmulatedRules):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def load(self, node: str, mode: Mode, rendered: object, *, full: bool) -> None:  # type: ignore[override]
        if self.fail:
            self.fail = False
            raise OSError("iptables-restore: exit 1")
        super().load(node, mode, rendered, full=full)  # type: ignore[arg-type]


def test_kube_proxy_measures_sync_done_minus_trigger_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plane = make_plane(2)
    plane.apply([deployment("web", 2), service("web", {"app": "web"})])
    plane.run_until_idle()
    node, objs, sl = _proxy_objects(plane)
    clock = FakeClock(T0 + 100.0)
    sink = _FailingOnce()
    kp = KubeProxy(node.name, plane.cluster, None, sink, clock=clock)
    kp.resync(objs)
    assert kp.sync() == 1 and kp.netprog.durations == []  # no trigger time: nothing measured

    def changed(at: float, ip: str) -> EndpointSlice:
        eps = [sl.endpoints[0].evolve(addresses=[ip]), *sl.endpoints[1:]]
        notes = {**sl.metadata.annotations, TRIGGER_TIME_ANNOTATION: rfc3339_nano(at)}
        return sl.evolve(endpoints=eps).with_meta(annotations=notes)

    one = changed(T0 + 99.5, "10.244.9.9")
    kp.handle([WatchEvent("MODIFIED", one, 0)])
    clock.advance(0.25)
    with caplog.at_level(logging.INFO, logger="svclab.live"):
        assert kp.sync() == 1
    assert kp.netprog.durations == [0.75]
    line = (
        f"component=kube-proxy/{node.name} network_programming_seconds=0.750000 "
        f"slice={sl.key} trigger=2026-01-01T00:01:39.5Z"
    )
    assert line in caplog.text
    # the same annotation again (a relabel, a relist's event) is no new change
    kp.handle([WatchEvent("MODIFIED", one.with_meta(labels={**one.labels, "x": "y"}), 0)])
    kp.sync()
    assert kp.netprog.durations == [0.75]
    # a failed load measures nothing; the sync that applies the change does
    kp.handle([WatchEvent("MODIFIED", changed(T0 + 100.0, "10.244.9.10"), 0)])
    sink.fail = True
    with pytest.raises(OSError):
        kp.sync()
    assert kp.netprog.durations == [0.75]
    # (the tracker took that change: only a new one makes the next sync; of the two
    # changes of one slice, the earliest trigger counts)
    kp.handle([WatchEvent("MODIFIED", changed(T0 + 101.0, "10.244.9.12"), 0)])
    clock.advance(1.5)
    assert kp.sync() == 1
    assert kp.netprog.durations == [0.75, 1.75]
    # a bad annotation is named and skipped
    bad = changed(T0, "10.244.9.11").with_meta(annotations={TRIGGER_TIME_ANNOTATION: "soon"})
    with caplog.at_level(logging.WARNING, logger="svclab.live"):
        kp.handle([WatchEvent("MODIFIED", bad, 0)])
        kp.sync()
    assert kp.netprog.durations == [0.75, 1.75]
    assert f"slice={sl.key} bad {TRIGGER_TIME_ANNOTATION} annotation 'soon'" in caplog.text
