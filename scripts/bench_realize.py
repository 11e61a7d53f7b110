#!/usr/bin/env python3
"""Benchmark the real-kernel backend: bring a cluster up, connect through it, tear it
down; compare the connection time with the emulator's. Prints one JSON object.

    python3 scripts/bench_realize.py [--nodes 4] [--pods-per-node 25]
                                     [--cni bridge-plugin|netlink] [--overlay vxlan|host-gw]
                                     [--connections 200] [--repeat 1]

Fields (cold: the first bring-up in this process, on fresh namespaces; with
``--repeat``, the medians of the later runs beside them as ``..._warm_median_...``):
``up_cold_seconds`` (realize + every pod server listening + the readiness probes of
:mod:`dataplane.linux.ready`, as ``svclab up`` does; ``realize_cold_seconds``,
``serve_cold_seconds`` and ``ready_cold_seconds`` split it), ``down_cold_seconds``
(teardown), ``real_connection_warm_median_seconds`` (one TCP connection from a pod to
another pod's server on the cluster once up: connect, read the answer, close; pods on
all nodes as targets), ``emulated_connection_warm_median_seconds`` (the same
connections through :class:`dataplane.emulator.cluster.EmulatedCluster`, as ``svclab
connect`` runs them, with traces; ``..._untraced`` without), or null with the reason in
``emulated_note``. ``emulated_to_real_connection_warm_ratio``: the untraced emulated
connection's median over the real one's, both measured in this run (target <= 1.0,
beside it). ``realize_cold_cpu_seconds`` and ``realize_children_cold_cpu_seconds``: CPU
time of this process and of the processes it ran (CNI plugins, iproute2) during
realize, and ``ready_cold_cpu_seconds`` during the readiness check,
``up_cold_cpu_seconds`` for the whole up (both kinds), and
``up_cold_cpu_per_cpu_seconds``, that divided by the machine's CPUs (the wall time of
the up with every CPU to itself, perfectly parallel: a floor): figures that other load
on a shared machine moves much less than the wall-clock ones (the pod servers' own CPU
is not counted: the supervisor, not this process, reaps them). ``phases_cold`` breaks
``up_cold_seconds`` down (:mod:`dataplane.linux.phases`): ``wall`` seconds of each step
(stale state, namespaces, devices, link configuration, routes/neighbours/FDB tables,
CNI plugin calls or, with ``--cni netlink``, ``pods_netlink``, sysctls and hairpin
rules, saving the state, the pod-server supervisor, starting the servers, the readiness
kernel-state check and probes) and, in ``thread_sum``, the CNI calls' steps summed over
the concurrent workers. At ``--nodes 40 --pods-per-node 25`` ``up_cold_seconds``
carries its target (10 s); ``load_average`` puts the figures in context on a shared
machine. Needs root.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchjson import emit, target

from dataplane.linux.phases import Phases
from dataplane.linux.ready import wait_ready
from dataplane.linux.realize import realize, teardown
from dataplane.linux.testing import Sample, leftovers, sample_network, unique_cluster_id

PORT = 8080
UP_40_TARGET = 10.0  # seconds, for --nodes 40 --pods-per-node 25


def _targets(sample: Sample, n: int) -> list[tuple[str, str]]:
    """``n`` (source pod, destination IP) pairs cycling over every other pod."""
    src = sample.pods[0]
    others = [p for p in sample.pods if p.key != src.key]
    return [(f"pod/{src.key}", str(others[i % len(others)].ip)) for i in range(n)]


def _cpu() -> tuple[float, float]:
    """CPU seconds used so far by this process and by its reaped children (the CNI
    plugins and iproute2 runs)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def run_real(sample: Sample, cni: str, connections: int) -> tuple[dict[str, float], Phases, float]:
    """One bring-up, connections and teardown: the up/down figures, the phases, and the
    median seconds of a connection on the cluster once up."""
    cid = unique_cluster_id("b")
    phases = Phases()
    t0, c0 = time.perf_counter(), _cpu()
    try:
        cluster = realize(
            sample.network,
            cluster_id=cid,
            cni=cni,  # type: ignore[arg-type]
            phases=phases,
        )
        t1, c1 = time.perf_counter(), _cpu()
        with phases.phase("serve_supervisor"):
            cluster.servers.ensure_supervisor()
        with phases.phase("serve_start"):
            cluster.serve({p.key: [(PORT, "tcp")] for p in sample.pods})
        t2, c2 = time.perf_counter(), _cpu()
        wait_ready(sample.network, cluster.namespaces, phases=phases)
        t2r, c2r = time.perf_counter(), _cpu()
        times = []
        for src, dst in _targets(sample, connections):
            times.append(cluster.connect(src, dst, PORT).seconds)
    finally:
        t3 = time.perf_counter()
        teardown(cid)
        t4 = time.perf_counter()
    left = leftovers(cid)
    if left:
        raise SystemExit(f"teardown left {left}")
    return (
        {
            "realize_seconds": t1 - t0,
            "serve_seconds": t2 - t1,
            "ready_seconds": t2r - t2,
            "up_seconds": t2r - t0,
            "realize_cpu_seconds": c1[0] - c0[0],
            "realize_children_cpu_seconds": c1[1] - c0[1],
            "ready_cpu_seconds": sum(c2r) - sum(c2),
            "up_cpu_seconds": sum(c2r) - sum(c0),
            "down_seconds": t4 - t3,
        },
        phases,
        statistics.median(times),
    )


def _median_phases(all_phases: list[Phases]) -> dict[str, dict[str, float]]:
    """Per phase, the median over the runs of its seconds (``wall``: wall clock of each
    step of realize, the pod servers and the readiness check, in order; ``thread_sum``:
    per CNI step, seconds summed over the concurrent worker threads)."""
    out: dict[str, dict[str, float]] = {}
    for section in ("wall", "thread_sum"):
        keys: list[str] = []
        for ph in all_phases:
            keys += [k for k in ph.rounded()[section] if k not in keys]
        out[section] = {
            k: round(statistics.median(ph.rounded()[section].get(k, 0.0) for ph in all_phases), 4)
            for k in keys
        }
    return out


def run_emulated(sample: Sample, connections: int) -> dict[str, Any]:
    try:
        from dataplane.emulator.cluster import EmulatedCluster
    except ImportError as e:
        return {"emulated_connection_warm_median_seconds": None, "emulated_note": f"{e}"}
    emu = EmulatedCluster(
        sample.network, listeners={f"pod/{p.key}": [("tcp", PORT)] for p in sample.pods}
    )
    out: dict[str, Any] = {}
    for record, key in ((True, ""), (False, "_untraced")):
        times = []
        for src, dst in _targets(sample, connections):
            start = time.perf_counter()
            [res] = emu.connect(src, dst, "tcp", PORT, close=True, record=record)
            times.append(time.perf_counter() - start)
            if not res.established:
                return {
                    "emulated_connection_warm_median_seconds": None,
                    "emulated_note": f"emulated connection {src} -> {dst} not established",
                }
        out[f"emulated_connection_warm_median_seconds{key}"] = statistics.median(times)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--pods-per-node", type=int, default=25)
    ap.add_argument("--cni", choices=["bridge-plugin", "netlink"], default="bridge-plugin")
    ap.add_argument("--overlay", choices=["vxlan", "host-gw"], default="vxlan")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_realize: needs root", file=sys.stderr)
        return 2
    sample = sample_network(args.nodes, args.pods_per_node, overlay=args.overlay)
    measured = [run_real(sample, args.cni, args.connections) for _ in range(args.repeat)]
    runs = [m[0] for m in measured]
    result: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": len(sample.pods),
        "cni": args.cni,
        "overlay": args.overlay,
        "cpus": os.cpu_count(),
        "connections": args.connections,
        "repeat": args.repeat,
    }
    cpus = os.cpu_count() or 1
    # the first run is cold (this process's first bring-up); with --repeat, the medians
    # of the others are warm
    for temp, group in (("cold", runs[:1]), ("warm_median", runs[1:])):
        if not group:
            continue
        for key in group[0]:
            result[labelled(key, temp)] = round(statistics.median(r[key] for r in group), 6)
        up_cpu = result[labelled("up_cpu_seconds", temp)]
        result[labelled("up_cpu_per_cpu_seconds", temp)] = round(up_cpu / cpus, 6)
    if (args.nodes, args.pods_per_node) == (40, 25):
        result["up_cold_seconds"] = target(result["up_cold_seconds"], at_most=UP_40_TARGET)
    result["phases_cold"] = _median_phases([measured[0][1]])
    if len(measured) > 1:
        result["phases_warm_median"] = _median_phases([m[1] for m in measured[1:]])
    result["real_connection_warm_median_seconds"] = round(
        statistics.median(m[2] for m in measured), 6
    )
    result["load_average"] = os.getloadavg()[0]
    result.update(
        {
            k: (round(v, 6) if isinstance(v, float) else v)
            for k, v in run_emulated(sample, args.connections).items()
        }
    )
    emu = result.get("emulated_connection_warm_median_seconds_untraced")
    real = result["real_connection_warm_median_seconds"]
    ratio = round(emu / real, 3) if isinstance(emu, float) else None
    result["emulated_to_real_connection_warm_ratio"] = target(ratio, at_most=1.0)
    emit(result)
    return 0


def labelled(key: str, temp: str) -> str:
    """``key`` with ``temp`` (cold, warm_median) before its unit: ``up_seconds`` ->
    ``up_cold_seconds``, ``up_cpu_seconds`` -> ``up_cold_cpu_seconds``."""
    for unit in ("_cpu_per_cpu_seconds", "_cpu_seconds", "_seconds"):
        if key.endswith(unit):
            return f"{key.removesuffix(unit)}_{temp}{unit}"
    raise ValueError(key)


if __name__ == "__main__":
    sys.exit(main())
