#!/usr/bin/env python3
"""Lab 04 — pod-to-pod reachability without NAT, as a property tested with hypothesis.

Kubernetes asks every pod network for one thing: every pod reaches every other pod on
that pod's own IP, on any node, without NAT. Rather than check one cluster by hand, this
lab states it as a property and lets hypothesis generate the scenarios: a cluster of 2-4
nodes with a VXLAN or host-gw overlay, 2-5 pods placed on the nodes (each serving TCP
8080), and a few ordered pairs of those pods. For each pair (client -> the server's pod
IP, port 8080):

* the server pod itself answers (no Service, no load balancing in between);
* the server sees the client's own pod IP and source port: no SNAT, no masquerade;
* the reply comes back the way the request went: each node the connection crossed
  (the client's and the server's) holds exactly one conntrack entry for it, which saw
  both directions (``[ASSURED]``) and whose reply tuple mirrors the original (no DNAT
  either); no other node has one. On the emulator, the reply's hops also cross the same
  namespaces as the request's, in reverse order.

Two explicit examples (``@example``) always run first: one pod on each of two nodes,
over each overlay. Generation is seeded (``derandomize``): every run checks the same
scenarios. If the property fails, the lab prints the counterexample (on the emulator
shrunk by hypothesis to a smallest one) with its manifest, and exits non-zero. The
summary shows, for one cross-node pair per overlay, the hops that carry it: VXLAN
encapsulation on the client's node and decapsulation on the server's, or host-gw's
route via the server node's address.

``--examples N`` generates N scenarios (default 50). Run with ``--real`` to check the
property on real network namespaces (needs root; 3 generated scenarios by default, a few
seconds): ``--real --examples N`` checks the very scenarios ``--examples N`` checks on
the emulator, and prints the kernel's conntrack entries of one cross-node pair per
overlay.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, LabArguments, backend
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from app.emulation import running_pods
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend
from dataplane.emulator.trace import Trace
from dataplane.linux.conntrack import parse_line
from netmodel.manifests import load_text
from netmodel.objects import Node

PORT = 8080
OVERLAYS = ("vxlan", "host-gw")
#: the hops that show how a packet is carried (the whole walk: ``svclab trace``)
CARRYING = ("send", "route", "forward", "vxlan", "deliver")


# ---------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """A generated cluster and the pairs to check in it. ``placement``: the node number
    of each pod (``p0``, ``p1``, ...); ``pairs``: (client, server) pod numbers."""

    nodes: int
    overlay: str
    placement: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]

    def manifest(self) -> str:
        # dns: false: cluster DNS plays no part in pod-to-pod reachability, and its two
        # coredns pods would be two more pods (and, with --real, two DNS servers) per
        # generated scenario
        docs = [
            "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: lab04}\n"
            f"spec: {{nodes: {self.nodes}, overlay: {self.overlay}, dns: false}}"
        ]
        for i, node in enumerate(self.placement):
            docs.append(
                f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\n"
                f"spec:\n  nodeName: node-{node}\n"
                f"  containers: [{{name: c, image: x, ports: [{{containerPort: {PORT}}}]}}]"
            )
        return "\n---\n".join(docs) + "\n"

    def describe(self) -> str:
        pods = " ".join(f"p{i}@node-{n}" for i, n in enumerate(self.placement))
        return f"{self.nodes} nodes, {self.overlay}: {pods}"

    def pair_text(self) -> str:
        return ", ".join(f"p{c} -> p{v}" for c, v in self.pairs)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    nodes = draw(st.integers(2, 4))
    overlay = draw(st.sampled_from(OVERLAYS))
    placement = draw(st.lists(st.integers(1, nodes), min_size=2, max_size=5))
    candidates = list(permutations(range(len(placement)), 2))
    pairs = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=6, unique=True))
    return Scenario(nodes, overlay, tuple(placement), tuple(pairs))


#: lab 01's two pods, one on each node, both ways, over each overlay
EXPLICIT = tuple(Scenario(2, o, (1, 2), ((0, 1), (1, 0))) for o in OVERLAYS)


# ---------------------------------------------------------------------------- the property


def namespaces(trace: Trace) -> tuple[str, ...]:
    """The namespaces a packet crossed, in order (ARP exchanges left out)."""
    out: list[str] = []
    for h in trace.hops:
        if h.kind != "arp" and (not out or out[-1] != h.netns):
            out.append(h.netns)
    return tuple(out)


def check_pair(
    be: EmulatorBackend | RealBackend,
    client: str,
    server: str,
    ip: dict[str, str],
    node: dict[str, str],
) -> tuple[list[str], Trace | None]:
    """The property for one pair (module docstring): an AssertionError says what did not
    hold. Returns the connection's conntrack entries (``node: entry``, one per node
    crossed) and, on the
    emulator, the trace of one more connection of the pair."""
    where = f"{client} ({node[client]}) -> {server} ({node[server]}) at {ip[server]}:{PORT}"
    (o,) = be.connect(f"pod/{client}", ip[server], PORT, "tcp", 1)
    assert o.verdict == "delivered" and o.pod == server, (
        f"{where}: {o.verdict} ({o.detail}), answered by {o.pod}"
    )
    assert o.source_seen == ip[client] and not o.masquerade, (
        f"{where}: the server saw {o.source_seen}:{o.sport_seen}, "
        f"the client is {o.source}:{o.sport} (NAT on the way)"
    )
    assert o.sport is not None
    entries = be.flows_conntrack([o.sport], "tcp", source=ip[client]).get(o.sport, {})
    crossed = {node[client], node[server]}
    assert set(entries) == crossed, (
        f"{where}: conntrack entries on {sorted(entries)}, expected on {sorted(crossed)}"
    )
    mirror = {"src": ip[server], "dst": ip[client], "sport": str(PORT), "dport": str(o.sport)}
    for n, lines in sorted(entries.items()):
        assert len(lines) == 1, f"{where}: {n} has {len(lines)} entries: {lines}"
        e = parse_line(lines[0])
        reply = {k: e.field("reply", k) for k in mirror}
        assert reply == mirror, f"{where}: {n}'s reply tuple {reply} is not the mirror {mirror}"
        assert e.assured and not e.unreplied, f"{where}: {n} did not see the reply: {lines[0]}"
    trace = None
    if isinstance(be, EmulatorBackend):
        trace = be.cluster.trace(f"pod/{client}", ip[server], "tcp", PORT)
        there = namespaces(trace)
        back = namespaces(trace.reply) if trace.reply is not None else ()
        assert back == tuple(reversed(there)), (
            f"{where}: the request crossed {' > '.join(there)}, the reply {' > '.join(back)}"
        )
    return [f"{n}: {line}" for n, lines in sorted(entries.items()) for line in lines], trace


@dataclass(frozen=True)
class Example:
    """One cross-node pair kept for the summary."""

    scenario: str
    pair: str
    client_node: str
    server_node: str
    server_node_ip: str
    conntrack: list[str]
    trace: Trace | None


@dataclass
class Run:
    """What the property saw. ``failed``: stop printing progress once hypothesis
    replays (and shrinks) a counterexample. ``counterexample``: the scenario of the last
    failing call. Hypothesis ends a failing run by calling the test once more with the
    example it reports (the shrunk one), so this is that example, whatever hypothesis
    version prints or attaches to the exception."""

    real: bool
    stats: Counter[str] = field(default_factory=Counter)
    examples: dict[str, Example] = field(default_factory=dict)
    failed: bool = False
    counterexample: Scenario | None = None

    def check(self, s: Scenario) -> None:
        """The property over one scenario; what it saw counts once the scenario passed."""
        session = Session.ephemeral(load_text(s.manifest(), source="lab04"))
        pods = {p.key: p for p in running_pods(session)}
        ip = {k: p.status.pod_ip or "" for k, p in pods.items()}
        node = {k: p.spec.node_name or "" for k, p in pods.items()}
        node_ip = {
            n.name: n.internal_ips[0] for n in session.store.list("Node") if isinstance(n, Node)
        }
        seen: Counter[str] = Counter(scenarios=1, pairs=len(s.pairs))
        seen[s.overlay] += 1
        example: Example | None = None
        try:
            assert len(pods) == len(s.placement), f"{len(pods)} of {len(s.placement)} pods run"
            with backend(session, real=self.real) as be:
                for c, v in s.pairs:
                    client, server = f"default/p{c}", f"default/p{v}"
                    entries, trace = check_pair(be, client, server, ip, node)
                    if node[client] == node[server]:
                        seen["same-node pairs"] += 1
                        continue
                    seen["cross-node pairs"] += 1
                    seen[f"cross-node {s.overlay}"] += 1
                    example = example or Example(
                        s.describe(),
                        f"p{c} -> p{v}",
                        node[client],
                        node[server],
                        node_ip[node[server]],
                        entries,
                        trace,
                    )
        except Exception:
            self.failed = True
            self.counterexample = s
            raise
        if self.failed:  # hypothesis replaying or shrinking a counterexample
            return
        self.stats.update(seen)
        if example is not None:
            self.examples.setdefault(s.overlay, example)
        n = len(s.pairs)
        print(f"  {self.stats['scenarios']:>3}. {s.describe():<58} {n} pair{'s' * (n > 1)} ok")


def prop(run: Run, examples: int) -> Callable[[], None]:
    """The hypothesis test: the explicit scenarios, then ``examples`` generated ones."""

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        report_multiple_bugs=False,
        phases=(Phase.explicit, Phase.generate)
        if run.real  # a kernel counterexample is reported as found, not shrunk
        else (Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(scenarios())
    @example(EXPLICIT[0])
    @example(EXPLICIT[1])
    def every_pod_reaches_every_other_pod(s: Scenario) -> None:
        run.check(s)

    return every_pod_reaches_every_other_pod


# ---------------------------------------------------------------------------- the lab


def show(ex: Example, overlay: str) -> None:
    print(f"\n{overlay}: {ex.pair} in [{ex.scenario}], the hops that carry it")
    for title, t in (("request", ex.trace), ("reply", ex.trace and ex.trace.reply)):
        if t is None:
            continue
        print(f"  {title}: {t.packet.summary()}  => {t.verdict}")
        for h in t.hops:
            if h.kind in CARRYING:
                print(f"    {h.netns:<16} {h.kind:<8} {h.detail()}")


def parse_args(doc: str) -> argparse.Namespace:
    parser = LabArguments(doc)
    parser.add_argument(
        "--examples",
        type=int,
        default=None,
        metavar="N",
        help="scenarios to generate after the explicit ones (default 50; with --real 3)",
    )
    args = parser.parse_args()
    if args.examples is not None and args.examples < 1:
        parser.error("--examples must be at least 1")
    return args


def main() -> None:
    args = parse_args(__doc__ or "")
    real: bool = args.real
    examples: int = args.examples or (3 if real else 50)
    c = Checks("lab 04" + (" (real)" if real else ""))
    run = Run(real)
    total = examples + len(EXPLICIT)
    print(
        f"{len(EXPLICIT)} explicit + {examples} generated scenarios; pods connect to pod IPs:{PORT}"
    )
    start = time.monotonic()
    error: Exception | None = None
    try:
        prop(run, examples)()
    except Exception as e:
        error = e
        print(f"\n{type(e).__name__}: {e}")
        bad = run.counterexample
        if bad is not None:
            how = "as found" if real else "shrunk by hypothesis"
            print(f"Falsifying example ({how}): {bad.describe()}; pairs {bad.pair_text()}")
            print("\n".join(f"  {line}" for line in bad.manifest().splitlines()))
    took = time.monotonic() - start
    s = run.stats
    print(
        f"\n{s['scenarios']} clusters tried ({s['vxlan']} vxlan, {s['host-gw']} host-gw), "
        f"{s['pairs']} pairs checked ({s['cross-node pairs']} across nodes, "
        f"{s['same-node pairs']} on one node) in {took:.1f}s"
    )
    for overlay in OVERLAYS:
        ex = run.examples.get(overlay)
        if ex is not None and ex.trace is not None:
            show(ex, overlay)
    if real:
        for overlay, ex in run.examples.items():
            print(f"\n{overlay}: {ex.pair} in [{ex.scenario}], its conntrack entry on each node")
            for line in ex.conntrack:
                print(f"    {line}")

    print()
    c.check(
        error is None,
        "every pair: the server pod answered on its own IP, saw the client's own IP and "
        "port, and the reply retraced the request's path",
    )
    c.check(s["scenarios"] == total, f"{total} scenarios checked")
    c.check(
        s["cross-node vxlan"] > 0 and s["cross-node host-gw"] > 0,
        "pairs across nodes over both overlays were among them",
    )
    if real:
        c.finish()
    vx, hg = run.examples.get("vxlan"), run.examples.get("host-gw")
    c.check(
        vx is not None
        and vx.trace is not None
        and any(
            h.netns == f"node/{vx.client_node}" and (h.vxlan or "").startswith("encap")
            for h in vx.trace.hops
        )
        and any(
            h.netns == f"node/{vx.server_node}" and (h.vxlan or "").startswith("decap")
            for h in vx.trace.hops
        ),
        "vxlan: encapsulated on the client's node, decapsulated on the server's",
    )
    c.check(
        hg is not None
        and hg.trace is not None
        and not hg.trace.hops_of("vxlan")
        and any(
            h.netns == f"node/{hg.client_node}" and f"via {hg.server_node_ip} dev eth0" in h.route
            for h in hg.trace.hops_of("route")
            if h.route
        ),
        "host-gw: no encapsulation; the client's node routes via the server node's address",
    )
    c.finish()


if __name__ == "__main__":
    main()
