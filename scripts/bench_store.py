#!/usr/bin/env python3
"""Store benchmark: every backend on the same machine in one run. Prints one JSON object
with, per backend (memory, sqlite, etcd_1_member, etcd_3_members):

    writes_warm_per_second           creates of a ~1 KB Pod, one client
    writes_8_clients_warm_per_second the same from 8 threads (etcd: 8 stores, 8
                                     connections; memory and SQLite: one store behind a
                                     lock, which is how one process shares an embedded
                                     store)
    watch_events_warm_per_second     events read by watch() from before those writes
                                     (etcd: a freshly opened store, so etcd's watch
                                     stream)
    list_30k_cold_seconds            list("Pod") of 30,000 pods by a store opened in a
                                     fresh interpreter (SQLite and etcd; the memory store
                                     lives in this process only)
    list_30k_warm_seconds            the same by a store opened afresh in this process,
                                     which has decoded pods before (memory: the same
                                     store)

and for etcd, raw etcd3gw puts of the same bytes to the same etcd, one client:
``raw_puts_warm_per_second`` and ``etcd_overhead_warm_ratio`` = raw puts/s / svclab
writes/s (target <= 1.5, beside it). Both are measured in interleaved rounds (median of
5), so that a busy machine weighs on both alike; all the rates are warm (a process and
a store that have written before). The etcd members run on /dev/shm (tmpfs), so fsync
costs nothing and the figures measure the request path, not the disk.

Usage: scripts/bench_store.py [--writes N] [--list N] [--only BACKEND ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

import etcd3gw  # noqa: E402
from benchjson import emit, target  # noqa: E402
from etcd_procs import etcd_cluster  # noqa: E402

from control.store import Store, open_store  # noqa: E402
from control.store.etcd_layout import MARKER_KEY, b64, encode_value, object_key  # noqa: E402
from netmodel.kinds import object_from_dict  # noqa: E402
from netmodel.objects import KubeObject  # noqa: E402


def make_pod(i: int, prefix: str = "p") -> KubeObject:
    """A pod as the control plane stores it: labels, owner, one container, status."""
    return object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{prefix}-{i:06d}",
                "namespace": "default",
                "labels": {"app": f"app-{i % 200:03d}", "pod-template-hash": "6d4cf56db6"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"app-{i % 200:03d}-6d4cf56db6",
                        "uid": "5f0c8a8e-2f53-4b6f-9a43-6c1f0e0f3f11",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": f"node-{i % 1000:04d}",
                "containers": [
                    {
                        "name": "server",
                        "image": "registry.k8s.io/e2e-test-images/agnhost:2.47",
                        "ports": [
                            {"name": "http", "containerPort": 8080},
                            {"name": "metrics", "containerPort": 9090},
                        ],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    }
                ],
            },
            "status": {
                "phase": "Running",
                "podIP": f"10.{128 + i // 65536 % 16}.{i // 256 % 256}.{i % 256}",
                "hostIP": f"192.168.{i // 256 % 4}.{i % 250 + 1}",
            },
        }
    )


def rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else float("inf")


ROUNDS = 5


def one_client(store: Store, url: str | None, n: int) -> tuple[float, float | None]:
    """svclab creates (and, for etcd, raw etcd3gw puts of the same bytes) in
    :data:`ROUNDS` interleaved rounds, so that a busy machine slows both alike; the
    median round of each."""
    pods = [make_pod(i, "w") for i in range(n)]
    raw = _raw_client(url) if url is not None else None
    per = max(1, n // ROUNDS)
    ours: list[float] = []
    theirs: list[float] = []
    for r in range(ROUNDS):
        batch = pods[r * per : (r + 1) * per]
        t0 = time.perf_counter()
        for p in batch:
            store.create(p)
        ours.append(rate(len(batch), time.perf_counter() - t0))
        if raw is not None:
            items = [(f"/bench-raw/{object_key(p.kind, p.key)}", encode_value(p)) for p in batch]
            t0 = time.perf_counter()
            for key, value in items:
                raw.put(key, value)
            theirs.append(rate(len(items), time.perf_counter() - t0))
    if raw is not None:
        raw.delete_prefix("/bench-raw/")
    return statistics.median(ours), (statistics.median(theirs) if theirs else None)


def eight_clients(opener: Callable[[], Store], shared: Store | None, n: int) -> float:
    lock = threading.Lock()
    per = n // 8
    stores = [shared if shared is not None else opener() for _ in range(8)]
    pods = [[make_pod(c * per + i, f"c{c}") for i in range(per)] for c in range(8)]
    errors: list[BaseException] = []

    def work(c: int) -> None:
        try:
            for p in pods[c]:
                if shared is not None:
                    with lock:
                        shared.create(p)
                else:
                    stores[c].create(p)
        except BaseException as e:  # reported after the join
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c,)) for c in range(8)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if shared is None:
        for s in stores:
            s.close()
    if errors:
        raise errors[0]
    return rate(per * 8, seconds)


def load_30k(store: Store, url: str | None, n: int) -> None:
    """Put ``n`` pods in place (setup, not measured): through the store for the embedded
    backends, as raw etcd Txns of 100 puts (the same keys and values) for etcd."""
    pods = [make_pod(i, "l") for i in range(n)]
    if url is None:
        with store.transaction():
            for p in pods:
                store.create(p)
        return
    client = _raw_client(url)
    for start in range(0, n, 100):
        ops = [
            {"request_put": {"key": b64(object_key("Pod", p.key)), "value": b64(encode_value(p))}}
            for p in pods[start : start + 100]
        ]
        ops.append({"request_put": {"key": b64(MARKER_KEY), "value": b64("bench")}})
        client.post(client.get_url("/kv/txn"), json={"success": ops})


def _raw_client(url: str) -> etcd3gw.Etcd3Client:
    host, _, port = url.removeprefix("etcd://").split(",")[0].rpartition(":")
    return etcd3gw.Etcd3Client(host=host, port=int(port), api_path="/v3/", timeout=30)


def bench(
    opener: Callable[[], Store],
    url: str | None,
    store_url: str | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Every figure of one backend; ``url``: etcd's (None: embedded), ``store_url``:
    what another process opens (None: the memory store, which none can)."""
    embedded = url is None
    store = opener()
    out: dict[str, Any] = {}
    r0 = store.revision
    writes, raw = one_client(store, url, args.writes)
    out["writes_warm_per_second"] = writes
    out["writes_8_clients_warm_per_second"] = eight_clients(
        opener, store if embedded else None, args.writes
    )
    reader = store if embedded else opener()
    t0 = time.perf_counter()
    events = reader.watch(r0)
    out["watch_events_warm_per_second"] = rate(len(events), time.perf_counter() - t0)
    out["watch_events"] = len(events)
    if reader is not store:
        reader.close()
    load_30k(store, url, args.list)
    flush = getattr(store, "flush", None)
    if flush is not None:
        flush()  # SQLite: what another opener sees is what is committed
    if store_url is not None:
        out["list_30k_cold_seconds"] = list_cold(store_url)
    lister = opener()  # memory: the same store
    t0 = time.perf_counter()
    n = len(lister.list("Pod"))
    out["list_30k_warm_seconds"] = round(time.perf_counter() - t0, 3)
    out["listed"] = n
    if lister is not store:
        lister.close()
    store.close()
    if raw is not None:
        out["raw_puts_warm_per_second"] = raw
        out["etcd_overhead_warm_ratio"] = target(round(raw / writes, 2), at_most=1.5)
    return out


#: run in a fresh interpreter: open the store at argv[1], list its pods, print the
#: seconds of the list alone and how many
_COLD_LIST = """
import json, sys, time
from control.store import open_store
store = open_store(sys.argv[1])
t0 = time.perf_counter()
n = len(store.list("Pod"))
print(json.dumps({"seconds": time.perf_counter() - t0, "listed": n}))
store.close()
"""


def list_cold(url: str) -> float:
    """Seconds of ``list("Pod")`` by a store opened in a fresh interpreter (its decoding
    caches empty): what a new svclab process pays for its first LIST."""
    done = subprocess.run(
        [sys.executable, "-c", _COLD_LIST, url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return round(float(json.loads(done.stdout)["seconds"]), 3)


@contextlib.contextmanager
def backend(name: str) -> Iterator[tuple[Callable[[], Store], str | None, str | None]]:
    """(opener, etcd's URL or None, the URL another process opens or None)."""
    if name == "memory":
        from control.store import MemoryStore

        shared = MemoryStore()
        yield (lambda: shared), None, None
    elif name == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            url = f"sqlite://{d}/state.db"
            yield (lambda: open_store(url)), None, url
    else:
        members = 1 if name == "etcd_1_member" else 3
        with etcd_cluster(members) as c:
            yield (lambda: open_store(c.url)), c.url, c.url


BACKENDS = ["memory", "sqlite", "etcd_1_member", "etcd_3_members"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--list", type=int, default=30_000)
    ap.add_argument("--only", nargs="*", choices=BACKENDS, default=BACKENDS)
    args = ap.parse_args()
    out: dict[str, Any] = {"writes": args.writes, "list_objects": args.list}
    for name in args.only:
        with backend(name) as (opener, url, store_url):
            out[name] = bench(opener, url, store_url, args)
    emit(out)
    met = [out[n]["etcd_overhead_warm_ratio"]["met"] for n in args.only if n.startswith("etcd")]
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
