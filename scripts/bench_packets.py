#!/usr/bin/env python3
"""Benchmark the packet emulator; prints one JSON object.

A 10-node cluster (flannel VXLAN, 10 pods per node) runs kube-proxy's iptables rules
for 10,000 ClusterIP Services of 5 endpoints each, rendered by ``dataplane.proxy``
(every Service has Cluster traffic policies, so the render is the same on every node and
is done once). Every endpoint is a pod on nodes 2-10; clients are the pods of node 1, so
each connection crosses: client pod → node-1 (br_netfilter PREROUTING, DNAT, FORWARD,
POSTROUTING) → VXLAN over the router → node-k (decap, forward) → endpoint pod, and the
answer back the same way through the same conntrack entries. Measured on one core
(CPU time of this process, best of ``--rounds`` interleaved short runs, after setup
and warm-up with the static state frozen out of the garbage collector's reach):

* ``full_path_connections_warm_per_second`` — new TCP connections: the SYN and its SYN-ACK,
  both walked end to end (no trace recorded);
* ``established_packets_warm_per_second`` — data segments of established connections and
  their answers (the flow-cache fast path: conntrack looked up and updated in every
  namespace on the way, nat table and lookups skipped);
* ``at_new_connections_warm_per_second`` — ``svclab trace --at node/NAME`` on node 1: one
  random traversal of the node's netfilter per new flow, trace records on;
* ``cost_ratio_10k_vs_100_warm`` — CPU time per full-path connection with 10,000 Services
  over the same with 100.

Every rate is warm: each measurement starts after a warm-up that opens one connection per Service (ARP
and FDB entries learnt, every chain compiled: the engine compiles chains on first use).
``details`` adds the CPU time of an empty million-iteration loop and the load average,
to put the figures in context on a shared machine.

Targets (issue 11's raised ones, beside their figures as ``{"value", "at_least"|"at_most",
"met"}``): >= 100,000 --at connections/s, >= 10,000 full-path connections/s, >= 250,000
established packets/s, ratio <= 1.1. ``details.setup_cold_seconds``: rendering the
rules and building both emulated clusters, the process's first work. Usage: ``python3 scripts/bench_packets.py [--services N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from ipaddress import IPv4Address, ip_network
from pathlib import Path
from random import Random

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchjson import emit, target

from dataplane.emulator import EmulatedCluster, IptablesRules
from dataplane.proxy.iptables import render_iptables
from dataplane.proxy.snapshot import build_node_config, build_snapshot
from netmodel.cluster import ClusterSpec
from netmodel.objects import EndpointSlice, Service
from netmodel.packet import Packet
from netmodel.topology import PodInfo, build, node_info

NODE_NETWORK = "172.18.0.0/16"
POD_CIDR = "10.244.0.0/16"


def node_ip(i: int) -> str:
    return f"172.18.0.{i + 1}"


def pod_ip(node: int, j: int) -> str:
    return f"10.244.{node}.{j + 2}"


_CLUSTER_IP_BASE = int(IPv4Address("10.96.0.10"))


def cluster_ip(i: int) -> str:
    """The ClusterIP of Service ``i`` (10.96.0.10 + i), formatted from the integer: the
    measured loops call this once per flow, and parsing an address each time cost a
    fifth of a ``--at`` traversal."""
    n = _CLUSTER_IP_BASE + i
    return f"{n >> 24}.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def objects(
    services: int, endpoints: int, nodes: int, pods: int
) -> tuple[list[Service], list[EndpointSlice]]:
    """Services s0..sN-1 (ClusterIP, port 80) whose endpoints (port 8080) are pods of
    nodes 2..nodes, spread round robin."""
    svcs: list[Service] = []
    slices: list[EndpointSlice] = []
    targets = [(n, j) for n in range(2, nodes + 1) for j in range(pods)]
    for i in range(services):
        name = f"s{i}"
        svcs.append(
            Service.model_validate(
                {
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "type": "ClusterIP",
                        "clusterIP": cluster_ip(i),
                        "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
                    },
                }
            )
        )
        eps = []
        for k in range(endpoints):
            n, j = targets[(i * endpoints + k) % len(targets)]
            eps.append(
                {"addresses": [pod_ip(n, j)], "nodeName": f"n{n}", "conditions": {"ready": True}}
            )
        slices.append(
            EndpointSlice.model_validate(
                {
                    "metadata": {
                        "name": f"{name}-1",
                        "namespace": "default",
                        "labels": {"kubernetes.io/service-name": name},
                    },
                    "addressType": "IPv4",
                    "endpoints": eps,
                    "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
                }
            )
        )
    return svcs, slices


def rules_text(services: int, endpoints: int, nodes: int, pods: int) -> str:
    svcs, slices = objects(services, endpoints, nodes, pods)
    cfg = build_node_config(
        None, ClusterSpec(pod_cidr=POD_CIDR), "n1", [node_ip(1)], "10.244.1.0/24"
    )
    return render_iptables(build_snapshot(svcs, slices, cfg), cfg).save_text


def emulated(text: str, nodes: int, pods: int, seed: int) -> EmulatedCluster:
    infos = [node_info(f"n{i}", node_ip(i), f"10.244.{i}.0/24") for i in range(1, nodes + 1)]
    pod_infos = [
        PodInfo(f"default/p{i}-{j}", f"n{i}", IPv4Address(pod_ip(i, j)))
        for i in range(1, nodes + 1)
        for j in range(pods)
    ]
    net = build(ip_network(NODE_NETWORK), infos, pod_infos, overlay="vxlan")  # type: ignore[arg-type]
    rules = IptablesRules(text)
    listeners = {f"pod/{p.key}": {("tcp", 8080)} for p in pod_infos}
    return EmulatedCluster(
        net, rulesets={f"n{i}": rules for i in range(1, nodes + 1)}, listeners=listeners, seed=seed
    )


def timed(seconds: float, step: Callable[[int], int], start: int = 0) -> tuple[float, int]:
    """Run ``step(i)`` (returning units done) for ``seconds`` of CPU time; returns (units
    per CPU second, next i)."""
    begin = time.process_time()
    done = 0
    i = start
    while True:
        for _ in range(50):
            done += step(i)
            i += 1
        spent = time.process_time() - begin
        if spent >= seconds:
            return done / spent, i


def best_of(rounds: int, seconds: float, steps: list[Callable[[int], int]]) -> list[float]:
    """The best rate of each step function over ``rounds`` short runs, the functions
    interleaved round by round (so that a burst of load from other processes on the
    machine hits them alike)."""
    best = [0.0] * len(steps)
    nexts = [0] * len(steps)
    for _ in range(rounds):
        for k, step in enumerate(steps):
            rate, nexts[k] = timed(seconds / rounds, step, nexts[k])
            best[k] = max(best[k], rate)
    return best


class FullPath:
    """New connections over the full path (see the module docstring)."""

    def __init__(self, c: EmulatedCluster, services: int, pods: int) -> None:
        self.c = c
        self.services = services
        self.clients = [f"pod/default/p1-{j}" for j in range(pods)]
        self.failures = 0
        # warm up: ARP and FDB entries, and one connection per Service, so that every
        # chain the measurement meets has been compiled (the engine compiles lazily)
        for i in range(max(200, services)):
            (r,) = c.connect(
                self.clients[i % len(self.clients)],
                cluster_ip(i % services),
                "tcp",
                80,
                n=1,
                record=False,
                complete=False,
            )
            assert r.established, r

    def step(self, i: int) -> int:
        (r,) = self.c.connect(
            self.clients[i % len(self.clients)],
            cluster_ip((i * 7919) % self.services),
            "tcp",
            80,
            n=1,
            record=False,
            complete=False,
        )
        if not r.established or r.node in (None, "n1"):
            self.failures += 1
        return 1


class Established:
    """Data segments of established connections and their answers."""

    def __init__(self, c: EmulatedCluster, services: int, pods: int, flows: int = 200) -> None:
        self.c = c
        self.conns: list[tuple[str, Packet]] = []
        self.failures = 0
        for i in range(flows):
            src = f"pod/default/p1-{i % pods}"
            cip = cluster_ip((i * 104729) % services)
            (r,) = c.connect(src, cip, "tcp", 80, n=1, record=False)
            assert r.established, r
            data = Packet.make(
                r.source, cip, "tcp", r.sport, 80, flags=frozenset({"PSH", "ACK"}), length=100
            )
            self.conns.append((src, data))
        for i in range(3 * flows):  # the 2nd packet of each flow is recorded, later ones replay
            self.step(i)
        self.failures = 0

    def step(self, i: int) -> int:
        src, pkt = self.conns[i % len(self.conns)]
        req, reply = self.c.exchange(src, pkt, record=False)
        if req.verdict != "delivered" or reply is None or reply.verdict != "delivered":
            self.failures += 1
        return 2


class AtMode:
    """``trace --at node/n1``: one random traversal of node 1's netfilter per new flow."""

    def __init__(self, text: str, services: int, pods: int) -> None:
        from dataplane.netfilter.flowtrace import Flow, FlowTracer

        self.flow = Flow
        self.tracer = FlowTracer(text, ["127.0.0.1", node_ip(1)])
        self.rng = Random(1)
        self.services = services
        self.pods = pods
        for i in range(services):  # compile every chain first, as for the full path
            self.step(i)

    def step(self, i: int) -> int:
        flow = self.flow(pod_ip(1, i % self.pods), cluster_ip((i * 7919) % self.services), 80)
        t = self.tracer.sample(flow, self.rng)
        assert t.verdict == "ACCEPT", t
        return 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--small", type=int, default=100, help="Services of the ratio baseline")
    ap.add_argument("--endpoints", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--pods", type=int, default=10, help="pods per node")
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per measurement")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per measurement (best kept)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    big_text = rules_text(args.services, args.endpoints, args.nodes, args.pods)
    big = emulated(big_text, args.nodes, args.pods, args.seed)
    setup = time.perf_counter() - t0
    small = emulated(
        rules_text(args.small, args.endpoints, args.nodes, args.pods),
        args.nodes,
        args.pods,
        args.seed,
    )
    fp_big = FullPath(big, args.services, args.pods)
    fp_small = FullPath(small, args.small, args.pods)
    est = Established(big, args.services, args.pods)
    at = AtMode(big_text, args.services, args.pods)
    # what setup built is static from here on: keep the collector off it
    gc.collect()
    gc.freeze()
    before = big.walker.replayed
    fp_big_rate, fp_small_rate, est_rate, at_rate = best_of(
        args.rounds, args.seconds, [fp_big.step, fp_small.step, est.step, at.step]
    )
    replayed = big.walker.replayed - before

    ref = time.process_time()
    for _ in range(1_000_000):
        pass
    ref = time.process_time() - ref
    # issue 11's raised targets, beside the figures
    out = {
        "at_new_connections_warm_per_second": target(round(at_rate), at_least=100_000),
        "full_path_connections_warm_per_second": target(round(fp_big_rate), at_least=10_000),
        "established_packets_warm_per_second": target(round(est_rate), at_least=250_000),
        "cost_ratio_10k_vs_100_warm": target(round(fp_small_rate / fp_big_rate, 3), at_most=1.1),
        "details": {
            "services": args.services,
            "endpoints_per_service": args.endpoints,
            "nodes": args.nodes,
            "pods_per_node": args.pods,
            "rule_lines": big_text.count("\n"),
            "setup_cold_seconds": round(setup, 1),
            "full_path_small_warm_per_second": round(fp_small_rate),
            "full_path_failures": fp_big.failures + fp_small.failures,
            "established_failures": est.failures,
            "flow_cache_replays": replayed,
            "empty_loop_1e6_warm_cpu_ms": round(ref * 1000, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    }
    emit(out)


if __name__ == "__main__":
    main()
