#!/usr/bin/env python3
"""Benchmark cluster DNS on both backends; prints one JSON object.

A 2-node cluster with kubeadm's DNS (two coredns pods behind kube-dns 10.96.0.10) and a
ClusterIP Service ``web``. One client pod asks kube-dns over and over, from its own
namespace, each question from a new socket (so the run also proves that sockets give
their ephemeral ports back: more questions are asked than the range has ports):

* ``emulated_warm_queries_per_second`` — a cycle of varied questions (A, AAAA, SRV,
  PTR, NXDOMAIN names; see ``details.warm_questions``), each a UDP datagram walked end
  to end through the emulated cluster (client pod, its node's kube-proxy DNAT to a DNS
  pod on either node, VXLAN when it is the other one, the DNS pod's answer, the answer
  back through conntrack's reverse NAT to the client socket), the question encoded and
  the answer decoded with dnspython, no hop records kept. Warm: the DNS pods' answer
  cache (CoreDNS's ``cache``) and the resolver's decoding memo hold every question;
* ``emulated_warm_traced_queries_per_second`` — the same with every hop recorded (what
  ``svclab dig`` and ``trace`` print);
* ``emulated_cold_queries_per_second`` — every question one never asked before (the
  name's letters in a new upper/lower case mix, or a new missing name): the DNS pod
  computes each answer and the resolver decodes it; the walk is the warm one's;
* ``emulated_cold_cli_dig_seconds`` — ``svclab dig -f MANIFEST`` in a fresh process
  (a throw-away cluster built from the manifest, then one question): what a user
  waits for the first answer;
* ``real_warm_queries_per_second`` — the warm questions over a UDP socket in the real
  client pod's namespace, answered by the real DNS server processes through the
  kernel's kube-proxy rules (needs root; null otherwise);
* ``emulated_to_real_warm_latency_ratio`` — the emulator's wall-clock time per warm
  question over the kernel's, measured in the same run (above 1: the emulator is slower).

Each rate is the best of ``--rounds`` runs of ``--seconds`` after a warm-up: the
emulator's by this process's CPU time (as ``bench_packets``: the emulator is this
process alone; its wall-clock figure is in ``details``), the kernel's by the wall clock
(its DNS servers are other processes). Each target sits beside its figure. Usage:
``python3 scripts/bench_dns.py [--seconds S] [--rounds R] [--no-real]``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchjson import emit, target

from app import emulation
from control.session import Session
from dataplane.backends import emulator_backend, real_backend
from dataplane.emulator.resolver import query
from netmodel.manifests import load_text

D = "cluster.local"
NAME = f"web.default.svc.{D}"
CLIENT = "pod/default/client"
SERVER = "10.96.0.10"

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: true}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {containers: [{name: c, image: busybox}]}
"""


def warm_questions(web_ip: str) -> list[tuple[str, str, str, list[str] | None]]:
    """(name, type, expected rcode, expected A addresses or None: not checked)."""
    rev = ".".join(reversed(web_ip.split("."))) + ".in-addr.arpa"
    return [
        (NAME, "A", "NOERROR", [web_ip]),
        (f"kubernetes.default.svc.{D}", "A", "NOERROR", ["10.96.0.1"]),
        (f"kube-dns.kube-system.svc.{D}", "A", "NOERROR", [SERVER]),
        (NAME, "AAAA", "NOERROR", []),
        (NAME, "SRV", "NOERROR", None),
        (rev, "PTR", "NOERROR", None),
        (f"missing.default.svc.{D}", "A", "NXDOMAIN", []),
        (f"web.nowhere.svc.{D}", "A", "NXDOMAIN", []),
    ]


def cold_questions(web_ip: str) -> Iterator[tuple[str, str, str, list[str]]]:
    """Questions never asked before, forever: NAME with its letters in the n-th upper
    and lower case mix (the same Service, another question to the cache), and every
    fourth one a new missing name."""
    letters = [i for i, ch in enumerate(NAME) if ch.isalpha()]
    for n in itertools.count(1):
        if n % 4 == 0:
            yield f"missing-{n}.default.svc.{D}", "A", "NXDOMAIN", []
            continue
        chars = list(NAME)
        for bit, i in enumerate(letters):
            if n >> bit & 1:
                chars[i] = chars[i].upper()
        yield "".join(chars), "A", "NOERROR", [web_ip]


def rate(step: Callable[[], None], seconds: float, rounds: int, warmup: int = 200) -> tuple[float, float, int]:
    """Best questions/s over ``rounds`` runs of ``seconds``: by this process's CPU time
    and by the wall clock; and how many questions were asked in all."""
    for _ in range(warmup):
        step()
    gc.collect()
    gc.freeze()  # the static state out of the collector's reach, as bench_packets
    best_cpu = best_wall = 0.0
    asked = warmup
    for _ in range(rounds):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while (elapsed := time.perf_counter() - t0) < seconds:
            for _ in range(50):
                step()
            n += 50
        cpu = time.process_time() - c0
        asked += n
        best_wall = max(best_wall, n / elapsed)
        best_cpu = max(best_cpu, n / cpu) if cpu > 0 else best_cpu
    return best_cpu, best_wall, asked


def cold_cli_dig() -> float:
    """Seconds of ``svclab dig -f MANIFEST CLIENT NAME`` in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="svclab-bench-dns-") as d:
        f = Path(d) / "cluster.yaml"
        f.write_text(MANIFEST)
        cmd = [sys.executable, "-c", "from app.cli.main import main; main()",
               "dig", "-f", str(f), CLIENT, NAME]
        root = Path(__file__).resolve().parents[1]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=root, check=False)
        took = time.perf_counter() - t0
        if out.returncode != 0 or "NOERROR" not in out.stdout:
            raise SystemExit(f"svclab dig failed ({out.returncode}): {out.stderr.strip()}")
        return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-real", action="store_true")
    args = ap.parse_args()
    cli_seconds = cold_cli_dig()
    session = Session.ephemeral(load_text(MANIFEST, source="bench_dns"))
    view = emulation.view(session)
    web_ip = session.store.get("Service", "default/web").spec.cluster_ip  # type: ignore[attr-defined]
    warm = warm_questions(web_ip)
    asked = 0

    with emulator_backend(view) as emu:

        def emulated(questions: Iterator[tuple[str, str, str, list[str] | None]],
                     record: bool) -> Callable[[], None]:
            def step() -> None:
                name, qtype, rcode, addresses = next(questions)
                q = query(emu.cluster, CLIENT, SERVER, name, qtype, record=record)
                assert q.rcode == rcode, (name, qtype, q.rcode, q.error)
                assert addresses is None or q.addresses() == addresses, (name, q.addresses())

            return step

        cold_qps, cold_wall, n = rate(emulated(cold_questions(web_ip), False), args.seconds,
                                      args.rounds, warmup=0)
        asked += n
        warm_qps, warm_wall, n = rate(emulated(itertools.cycle(warm), False), args.seconds,
                                      args.rounds)
        asked += n
        traced_qps, _, n = rate(emulated(itertools.cycle(warm), True), args.seconds,
                                max(1, args.rounds // 2))
        asked += n
        in_use = emu.cluster.ports.in_use(emu.cluster.resolve_source(CLIENT)[0].name, "udp")

    real_qps = None
    if not args.no_real and os.geteuid() == 0:
        import socket

        import dns.message
        import dns.rcode

        from dataplane.linux.nsenter import socket_in

        with real_backend(view) as real:
            sock = socket_in(real.cluster.netns(CLIENT), socket.AF_INET, socket.SOCK_DGRAM)
            sock.settimeout(2.0)
            sock.connect((SERVER, 53))
            wires = itertools.cycle(
                [(dns.message.make_query(n, t).to_wire(), r) for n, t, r, _ in warm]
            )

            def kernel_step() -> None:
                wire, rcode = next(wires)
                sock.send(wire)
                got = dns.message.from_wire(sock.recv(4096))
                assert dns.rcode.to_text(got.rcode()) == rcode

            try:
                _, real_qps, _ = rate(kernel_step, args.seconds, args.rounds)
            finally:
                sock.close()
    emit(
        {
            "emulated_warm_queries_per_second": target(round(warm_qps), at_least=5000),
            "emulated_warm_traced_queries_per_second": round(traced_qps),
            "emulated_cold_queries_per_second": round(cold_qps),
            "emulated_cold_cli_dig_seconds": round(cli_seconds, 3),
            "real_warm_queries_per_second": None if real_qps is None else round(real_qps),
            "emulated_to_real_warm_latency_ratio": (
                None if real_qps is None else round(real_qps / warm_wall, 3)
            ),
            "details": {
                "warm_questions": [f"{n} {t} -> {r}" for n, t, r, _ in warm],
                "cold_questions": f"{NAME} A in a new letter case each time; every "
                "fourth a new missing name (NXDOMAIN)",
                "asked_from": f"{CLIENT} to {SERVER}, each question from a new socket",
                "emulated_questions_asked": asked,
                "client_udp_ports_in_use_after": in_use,
                "emulated_warm_queries_per_second_wall_clock": round(warm_wall),
                "emulated_cold_queries_per_second_wall_clock": round(cold_wall),
                "round_length_s_setting": args.seconds,
                "rounds": args.rounds,
                "loadavg": os.getloadavg(),
            },
        }
    )


if __name__ == "__main__":
    main()
