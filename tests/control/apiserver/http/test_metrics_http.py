"""``/metrics`` on a real ``svclab serve``, read by prometheus_client's own text parser:
kube-apiserver's series and labels (request counts by code, the duration histogram,
stored objects, watches counted while they last), and RBAC's non-resource rule (a user
needs system:monitoring or cluster-admin)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from serving import KUBECTL, Served

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("metrics") / "state")
    try:
        s.start()
        s.apply_web(all_pods=True)
        yield s
    finally:
        s.stop()


def _scrape(srv: Served, *who: str) -> dict[str, list[Sample]]:
    text = srv.kubectl(*who, "get", "--raw", "/metrics").stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    types = {name: f.type for name, f in families.items()}
    assert types == {
        "apiserver_longrunning_requests": "gauge",
        "apiserver_registered_watchers": "gauge",
        "apiserver_request_duration_seconds": "histogram",
        "apiserver_request": "counter",  # the parser drops a counter's _total
        "apiserver_storage_objects": "gauge",
    }
    return {name: f.samples for name, f in families.items()}


def _one(samples: list[Sample], name: str, **labels: str) -> float:
    hits = [
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_request_counts_durations_and_storage(srv: Served) -> None:
    srv.kubectl("get", "pods")
    srv.kubectl("get", "pod", "nope", check=False)
    m = _scrape(srv)
    pods = _one(
        m["apiserver_request"],
        "apiserver_request_total",
        verb="LIST",
        resource="pods",
        scope="namespace",
        code="200",
        group="",
        version="v1",
        subresource="",
        dry_run="",
        component="apiserver",
    )
    assert pods >= 1
    missing = _one(
        m["apiserver_request"],
        "apiserver_request_total",
        verb="GET",
        resource="pods",
        scope="resource",
        code="404",
    )
    assert missing == 1
    # the histogram: cumulative buckets ending in +Inf == count, kube's bounds
    want = {"verb": "LIST", "resource": "pods", "scope": "namespace"}
    buckets = [
        s
        for s in m["apiserver_request_duration_seconds"]
        if s.name.endswith("_bucket") and all(s.labels.get(k) == v for k, v in want.items())
    ]
    les = [s.labels["le"] for s in buckets]
    assert les[:3] == ["0.005", "0.025", "0.05"] and les[-2:] == ["60", "+Inf"]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts)
    total = _one(
        m["apiserver_request_duration_seconds"], "apiserver_request_duration_seconds_count", **want
    )
    assert counts[-1] == total >= pods
    # stored objects, counted as kubectl lists them
    n_pods = len(srv.kubectl("get", "pods", "-A", "-o", "name").stdout.split())
    n_deps = len(srv.kubectl("get", "deployments", "-A", "-o", "name").stdout.split())
    stored = m["apiserver_storage_objects"]
    assert _one(stored, "apiserver_storage_objects", resource="pods") == n_pods > 0
    assert _one(stored, "apiserver_storage_objects", resource="deployments.apps") == n_deps


def _watchers(srv: Served) -> tuple[float, float]:
    m = _scrape(srv)
    w = _one(
        m["apiserver_registered_watchers"],
        "apiserver_registered_watchers",
        group="",
        kind="Namespace",
        version="v1",
    )
    lr = [
        s.value
        for s in m["apiserver_longrunning_requests"]
        if s.labels.get("resource") == "namespaces" and s.labels.get("verb") == "WATCH"
    ]
    assert "dry_run" not in m["apiserver_longrunning_requests"][0].labels
    return w, sum(lr)


def test_a_watch_counts_while_it_lasts(srv: Served) -> None:
    before = _watchers(srv)
    watch = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(srv.kubeconfig), "get", "namespaces", "-w"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while _watchers(srv) != (before[0] + 1, before[1] + 1):
            assert time.monotonic() < deadline, (before, _watchers(srv))
            time.sleep(0.2)
    finally:
        watch.terminate()
        watch.wait(10)
    deadline = time.monotonic() + 20
    while _watchers(srv) != before:
        assert time.monotonic() < deadline, (before, _watchers(srv))
        time.sleep(0.2)


def test_metrics_need_system_monitoring(srv: Served) -> None:
    out = srv.kubectl("--as=carol", "get", "--raw", "/metrics", check=False)
    assert out.returncode != 0
    assert 'User \\"carol\\" cannot get path \\"/metrics\\"' in out.stderr or (
        'User "carol" cannot get path "/metrics"' in out.stderr
    )
    m = _scrape(srv, "--as=prometheus", "--as-group=system:monitoring")
    assert m["apiserver_storage_objects"]
