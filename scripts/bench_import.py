#!/usr/bin/env python3
"""Benchmark importing a real cluster: a 10,000-Service ``kubectl get -A -o yaml`` dump
and a 10,000-Service node dump.

* ``apply_10k_services_cold_seconds`` — ``svclab --state DIR apply -f dump.yaml`` (a
  fresh interpreter, a fresh state) on a generated ``v1 List``: one Node, the
  ``kubernetes`` Service and 10,000 ClusterIP Services (recorded ClusterIPs, server-set
  metadata, managedFields, status) — target <= 20 s.
* ``node_dump_parse_cold_best_seconds`` — :func:`dataplane.nodedump.load_node_dump` on
  a node dump whose ``iptables-save.txt`` is kube-proxy's iptables-mode rules for those
  Services (``svclab rules --node``, with one endpoint each), each of 3 runs in a fresh
  interpreter (its caches empty; the load alone timed), the best; and
  ``node_dump_parse_warm_best_seconds``, the best of 3 repeats in this process after a
  first load.
* ``legacy_restore_cold_best_seconds`` — ``iptables-legacy-restore`` loading the same
  text, a fresh process into a fresh network namespace (made and removed here) each
  time, best of 3, in the same run.
* ``parse_to_legacy_restore_cold_ratio`` — the two cold ones above (target <= 1.0);
  ``parse_to_legacy_restore_cold_cpu_ratio`` — the same in CPU seconds (user + system),
  which the neighbours' load on a shared machine disturbs far less.

Targets sit beside their figures (``{"value", "at_most", "met"}``). ``--services N``
makes smaller dumps (the figures' names keep saying 10k).
Prints one JSON object, with the load average and the targets. ``--parse-only`` skips
the apply measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchjson import emit, target  # noqa: E402

N = 10_000
SVCLAB = [sys.executable, "-c", "from app.cli.main import main; main()"]


def make_dump(n: int) -> dict[str, object]:
    meta = {"creationTimestamp": "2024-05-01T10:00:00Z", "resourceVersion": "1"}
    items: list[dict[str, object]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "worker-1", "uid": "n1", **meta},
            "spec": {"podCIDR": "10.4.0.0/24", "podCIDRs": ["10.4.0.0/24"]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.128.0.5"}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "uid": "k", **meta},
            "spec": {
                "clusterIP": "10.8.0.1",
                "clusterIPs": ["10.8.0.1"],
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                "type": "ClusterIP",
            },
            "status": {"loadBalancer": {}},
        },
    ]
    for i in range(n):
        ip = f"10.8.{(i + 2) // 250 + 1}.{(i + 2) % 250 + 2}"
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": f"svc-{i}",
                    "namespace": "bench",
                    "uid": f"u{i}",
                    "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                    **meta,
                },
                "spec": {
                    "clusterIP": ip,
                    "clusterIPs": [ip],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                    "selector": {"app": f"a{i}"},
                    "type": "ClusterIP",
                },
                "status": {"loadBalancer": {}},
            }
        )
    items.insert(
        1,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "bench", "uid": "ns", **meta},
        },
    )
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def node_dump_rules(n: int) -> str:
    """kube-proxy's iptables-save for n Services with one endpoint each (rendered by
    svclab from manifests)."""
    docs: list[dict[str, object]] = [
        {
            "apiVersion": "svclab.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "b"},
            # no nfacct objects exist in the bench namespace: rules without -m nfacct
            "spec": {
                "nodes": 1,
                "allocation": "recorded",
                "nodeEnvironment": {
                    "nfacctCounters": {
                        "ct_state_invalid_dropped_pkts": False,
                        "localhost_nps_accepted_pkts": False,
                    }
                },
            },
        }
    ]
    for i in range(n):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"s{i}", "namespace": "default"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            }
        )
        docs.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"s{i}-x",
                    "namespace": "default",
                    "labels": {"kubernetes.io/service-name": f"s{i}"},
                },
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [
                    {
                        "addresses": [f"10.244.{i // 250}.{i % 250 + 2}"],
                        "conditions": {"ready": True},
                    }
                ],
            }
        )
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "m.yaml"
        f.write_text(yaml.safe_dump_all(docs))
        out = subprocess.run(
            [*SVCLAB, "rules", "-f", str(f), "--node", "node-1"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    return out.stdout


#: run in a fresh interpreter: load the node dump in argv[1] once, print the load's wall
#: and CPU seconds (the imports before it are not timed)
_COLD_LOAD = """
import json, sys, time
from dataplane.nodedump import load_node_dump
c0, t0 = time.process_time(), time.perf_counter()
load_node_dump(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"wall": t1 - t0, "cpu": c1 - c0}))
"""


def load_cold(nd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of :func:`load_node_dump` on ``nd`` in a fresh interpreter
    (its caches empty)."""
    done = subprocess.run(
        [sys.executable, "-c", _COLD_LOAD, str(nd)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(done.stdout)
    return got["wall"], got["cpu"]


def best(fn: Callable[[], object], repeat: int = 3) -> tuple[float, float]:
    """Best wall and best CPU seconds of ``fn()`` (CPU: this process's, plus the child
    processes it waited for)."""
    walls, cpus = [], []
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(
            sum(b - a for a, b in ((r0.ru_utime, r1.ru_utime), (r0.ru_stime, r1.ru_stime)))
            + sum(b - a for a, b in ((c0.ru_utime, c1.ru_utime), (c0.ru_stime, c1.ru_stime)))
        )
    return min(walls), min(cpus)


def main() -> None:
    from dataplane.nodedump import load_node_dump

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--parse-only",
        action="store_true",
        help="measure the node-dump parse against iptables-legacy-restore only (no apply)",
    )
    ap.add_argument("--services", type=int, default=N, help="Services in the dumps")
    args = ap.parse_args()
    result: dict[str, object] = {"services": args.services}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.parse_only:
            apply_dump(tmp, result, args.services)
        measure_node_dump(tmp, result, load_node_dump, args.services)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    emit(result)


def apply_dump(tmp: str, result: dict[str, object], n: int) -> None:
    """``apply_10k_services_cold_seconds``: a fresh ``svclab apply`` of the generated dump
    (a fresh interpreter, a fresh state)."""
    dump = Path(tmp) / "dump.yaml"
    dump.write_text(yaml.safe_dump(make_dump(n)))
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [*SVCLAB, "--state", f"{tmp}/st", "apply", "-f", str(dump)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    wall = round(time.perf_counter() - t0, 3)
    result["apply_10k_services_cold_seconds"] = target(wall, at_most=20.0)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of the apply process (one process, one thread): what the wall time is on
    # an idle machine, and far less noisy than it on a shared one
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    result["apply_10k_services_cold_cpu_seconds"] = round(cpu, 3)
    print(f"applied in {wall} s ({cpu:.1f} s CPU)", file=sys.stderr)


def measure_node_dump(tmp: str, result: dict[str, object], load_node_dump: Any, n: int) -> None:
    """The node dump's parse, cold and warm, against ``iptables-legacy-restore`` (cold:
    a fresh process into a fresh namespace each time) on the same text."""
    t0 = time.perf_counter()
    rules = node_dump_rules(n)
    print(f"rendered the node dump in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    nd = Path(tmp) / "node"
    nd.mkdir()
    (nd / "iptables-save.txt").write_text(rules)
    result["node_dump_rules"] = sum(1 for line in rules.splitlines() if line.startswith("-A"))
    cold = [load_cold(nd) for _ in range(3)]
    parse, parse_cpu = min(c[0] for c in cold), min(c[1] for c in cold)
    load_node_dump(str(nd))  # this process's first load: fills its caches
    warm, warm_cpu = best(lambda: load_node_dump(str(nd)))
    from dataplane.linux import netns as netns_mod

    def restore() -> None:
        # made through svclab's netns module: owned by this process, so no other
        # svclab process's leftover cleanup takes it; a fresh one each time
        with netns_mod.temporary("bench") as ns:
            subprocess.run(
                ["ip", "netns", "exec", ns, "iptables-legacy-restore"],
                input=rules,
                text=True,
                check=True,
            )

    legacy, legacy_cpu = best(restore)
    result["node_dump_parse_cold_best_seconds"] = round(parse, 3)
    result["node_dump_parse_warm_best_seconds"] = round(warm, 3)
    result["legacy_restore_cold_best_seconds"] = round(legacy, 3)
    result["parse_to_legacy_restore_cold_ratio"] = target(round(parse / legacy, 3), at_most=1.0)
    # the same in CPU seconds (user + system): on a loaded machine wall time mostly
    # measures the neighbours
    result["node_dump_parse_cold_best_cpu_seconds"] = round(parse_cpu, 3)
    result["node_dump_parse_warm_best_cpu_seconds"] = round(warm_cpu, 3)
    result["legacy_restore_cold_best_cpu_seconds"] = round(legacy_cpu, 3)
    result["parse_to_legacy_restore_cold_cpu_ratio"] = target(
        round(parse_cpu / legacy_cpu, 3), at_most=1.0
    )


if __name__ == "__main__":
    main()
