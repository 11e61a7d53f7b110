"""Differential tests: one scenario, realised by both backends from the same
:class:`~netmodel.view.ClusterView`, compared flow by flow.

Compared per flow: delivered or not (the socket's verdict), the receiving pod, the
source address it sees, masquerade, the set of endpoints reached over N connections,
and the conntrack entries of the connection on every node (normalised: timeout and
``use`` left out). Where a rule chooses at random the two backends may pick different
endpoints, so a kernel outcome is checked against every outcome the emulator can
produce for that flow (``trace --all`` on a pristine emulated cluster), and conntrack
entries are compared when both landed on the same pod.

The real side uses the real CNI plugins (bridge + host-local), under both overlays, with
kube-proxy's rules loaded on both iptables back ends: by ``iptables-nft-restore``
(nf_tables) and by ``iptables-legacy-restore`` (x_tables, rules and counters read back
through libiptc). Every test runs on each (overlay, back end) pair of :data:`SETUPS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import (
    ConnOutcome,
    EmulatorBackend,
    RealBackend,
    conntrack_key,
    emulator_backend,
    real_backend,
)
from dataplane.emulator.trace import Trace
from dataplane.linux.netns import is_root
from dataplane.proxy.savefmt import saved_rule
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod, Service

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

EXT = "203.0.113.7"
Hit = tuple[str, str, str]  # node, chain, iptables-save line
N = 24  # connections per multi-endpoint flow: all of 2 endpoints reached but with p < 1e-6

SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: differential}}
spec: {{nodes: 3, overlay: {overlay}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client, labels: {{role: client}}}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: x}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-1, labels: {{app: web, instance: web-1}}}}
spec:
  nodeName: node-1
  containers:
  - name: c
    image: x
    ports: [{{containerPort: 8080}}, {{containerPort: 5353, protocol: UDP}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-2, labels: {{app: web, instance: web-2}}}}
spec:
  nodeName: node-2
  containers:
  - name: c
    image: x
    ports: [{{containerPort: 8080}}, {{containerPort: 5353, protocol: UDP}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: solo, labels: {{app: solo}}}}
spec:
  nodeName: node-2
  containers: [{{name: c, image: x, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports:
  - {{name: http, port: 80, targetPort: 8080}}
  - {{name: dns, port: 53, targetPort: 5353, protocol: UDP}}
---
apiVersion: v1
kind: Service
metadata: {{name: web-1}}
spec:
  selector: {{instance: web-1}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web-np}}
spec:
  type: NodePort
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web-local}}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30081}}]
---
apiVersion: v1
kind: Service
metadata: {{name: sticky}}
spec:
  selector: {{app: web}}
  sessionAffinity: ClientIP
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: solo}}
spec:
  selector: {{app: solo}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: empty}}
spec:
  selector: {{app: nothing}}
  ports:
  - {{name: http, port: 80, targetPort: 8080}}
  - {{name: dns, port: 53, targetPort: 5353, protocol: UDP}}
"""


@dataclass
class Pair:
    """Both backends over one view, a pristine emulator for the possible outcomes, and
    the scenario's addresses."""

    emu: EmulatorBackend
    pristine: EmulatorBackend
    real: RealBackend
    session: Session

    def svc(self, name: str) -> str:
        s = self.session.store.get("Service", f"default/{name}")
        assert isinstance(s, Service) and s.spec.cluster_ip
        return s.spec.cluster_ip

    def pod(self, name: str) -> str:
        p = self.session.store.get("Pod", f"default/{name}")
        assert isinstance(p, Pod) and p.status.pod_ip
        return p.status.pod_ip

    def node(self, name: str) -> str:
        n = self.session.store.get("Node", name)
        assert isinstance(n, Node)
        return n.internal_ips[0]

    def cni0(self, node: str) -> str:
        ns = self.emu.view.network.namespaces[f"node/{node}"]
        return str(ns.interface("cni0").addresses[0].ip)

    def flannel(self, node: str) -> str:
        ns = self.emu.view.network.namespaces[f"node/{node}"]
        return str(ns.interface("flannel.1").addresses[0].ip)


#: (overlay, iptables back end) the scenario is realised with, each once per module
SETUPS = [("vxlan", "nft"), ("host-gw", "nft"), ("vxlan", "legacy"), ("host-gw", "legacy")]


@pytest.fixture(scope="module", params=SETUPS, ids=[f"{o}-{b}" for o, b in SETUPS])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    overlay, backend = request.param
    session = Session.ephemeral(load_text(SCENARIO.format(overlay=overlay), source="differential"))
    view = emulation.view(session, external_clients=[EXT])
    with (
        emulator_backend(view, seed=7) as emu,
        emulator_backend(view, seed=7) as pristine,
        real_backend(view, cni="bridge-plugin", iptables_backend=backend) as real,
    ):
        assert real.cluster.iptables_backend == backend
        yield Pair(emu, pristine, real, session)


# ---------------------------------------------------------------------------- helpers


def conntrack_of(
    backend: EmulatorBackend | RealBackend, sports: set[int], proto: str, source: str | None
) -> dict[int, dict[str, list[str]]]:
    found = backend.flows_conntrack(sports, proto, source=source)
    return {p: {n: [conntrack_key(x) for x in v] for n, v in f.items()} for p, f in found.items()}


def flow(
    pair: Pair, src: str, dst: str, port: int, proto: str = "tcp", *, n: int = 1
) -> tuple[list[ConnOutcome], list[ConnOutcome]]:
    """``n`` connections on both backends (the kernel's from the emulator's source ports);
    every kernel outcome must be one the emulator can produce, the emulator's own ones
    too, and where both reached the same endpoint, the conntrack entries must agree."""
    branches = pair.pristine.possible(src, dst, port, proto)  # type: ignore[arg-type]
    possible = {o.key() for _, o in branches}
    deterministic = len(branches) == 1
    emu = pair.emu.connect(src, dst, port, proto, n)  # type: ignore[arg-type]
    real = pair.real.connect(src, dst, port, proto, n, sports=[o.sport or 0 for o in emu])  # type: ignore[arg-type]
    same: set[int] = set()
    for e, r in zip(emu, real, strict=True):
        where = f"{proto} {src} -> {dst}:{port} sport {e.sport}"
        assert e.key() in possible, f"{where}: emulator {e} not among {possible}"
        if r.key() not in possible:
            pytest.fail(
                f"{where}: kernel {r} not among emulator's {possible}\n"
                + pair.real.diagnose(e.sport, proto)
            )
        # conntrack entries name the endpoint: comparable when no random choice was
        # made, or both reached the same pod (the Service's one port on it)
        same_endpoint = deterministic or (e.verdict == "delivered" and e.pod == r.pod)
        if e.key() == r.key() and same_endpoint and e.sport is not None:
            same.add(e.sport)
    source = emu[0].source  # the client's address (the same on both sides)
    kernel = conntrack_of(pair.real, same, proto, source)
    emulated = conntrack_of(pair.emu, same, proto, source)
    for sport in sorted(same):
        where = f"{proto} {src} -> {dst}:{port} sport {sport}: conntrack"
        assert kernel.get(sport) == emulated.get(sport), where
    return emu, real


def single(
    pair: Pair, src: str, dst: str, port: int, proto: str = "tcp"
) -> tuple[ConnOutcome, ConnOutcome]:
    [e], [r] = flow(pair, src, dst, port, proto)
    assert e.key() == r.key(), f"{src} -> {dst}:{port}: emulator {e} vs kernel {r}"
    return e, r


# ---------------------------------------------------------------------------- tests


def test_pod_to_pod_same_node(pair: Pair) -> None:
    e, _ = single(pair, "pod/default/client", pair.pod("web-1"), 8080)
    assert (e.verdict, e.pod, e.source_seen) == ("delivered", "default/web-1", pair.pod("client"))
    e, _ = single(pair, "pod/default/client", pair.pod("web-1"), 5353, "udp")
    assert (e.pod, e.masquerade) == ("default/web-1", False)
    assert pair.emu.ping("pod/default/client", pair.pod("web-1"), 2) == pair.real.ping(
        "pod/default/client", pair.pod("web-1"), 2
    )


def test_pod_to_pod_across_nodes(pair: Pair) -> None:
    e, _ = single(pair, "pod/default/client", pair.pod("web-2"), 8080)
    assert (e.pod, e.source_seen) == ("default/web-2", pair.pod("client"))
    e, _ = single(pair, "pod/default/client", pair.pod("web-2"), 5353, "udp")
    assert e.pod == "default/web-2"
    emu = pair.emu.ping("pod/default/client", pair.pod("web-2"), 2)
    assert emu == pair.real.ping("pod/default/client", pair.pod("web-2"), 2)
    assert [p.ttl for p in emu] == [62, 62]


def test_closed_port_is_refused(pair: Pair) -> None:
    for proto in ("tcp", "udp"):
        e, _ = single(pair, "pod/default/client", pair.pod("web-2"), 9999, proto)
        assert e.verdict == "refused"


def test_pod_to_cluster_ip_reaches_every_endpoint_unmasqueraded(pair: Pair) -> None:
    emu, real = flow(pair, "pod/default/client", pair.svc("web"), 80, n=N)
    both = {"default/web-1", "default/web-2"}
    assert {o.pod for o in emu} == {o.pod for o in real} == both
    assert {o.source_seen for o in emu + real} == {pair.pod("client")}
    emu, real = flow(pair, "pod/default/client", pair.svc("web"), 53, "udp", n=N)
    assert {o.pod for o in emu} == {o.pod for o in real} == both


def test_node_to_cluster_ip_is_masqueraded(pair: Pair) -> None:
    emu, real = flow(pair, "node/node-3", pair.svc("web"), 80, n=N)
    assert {o.pod for o in emu} == {o.pod for o in real} == {"default/web-1", "default/web-2"}
    assert all(o.masquerade for o in emu + real)
    # node-3 has no pod of the service: the source is its address towards the pod
    via = (
        pair.flannel("node-3") if pair.emu.view.network.overlay == "vxlan" else pair.node("node-3")
    )
    assert {o.source_seen for o in emu + real} == {via}


def test_external_to_node_port_cluster_policy(pair: Pair) -> None:
    emu, real = flow(pair, f"ext/{EXT}", pair.node("node-3"), 30080, n=N)
    assert {o.pod for o in emu} == {o.pod for o in real} == {"default/web-1", "default/web-2"}
    assert all(o.masquerade and o.source_seen != EXT for o in emu + real)


def test_external_to_node_port_local_policy(pair: Pair) -> None:
    for node, pod in (("node-1", "default/web-1"), ("node-2", "default/web-2")):
        emu, real = flow(pair, f"ext/{EXT}", pair.node(node), 30081, n=4)
        assert {o.pod for o in emu} == {o.pod for o in real} == {pod}
        assert {o.source_seen for o in emu + real} == {EXT}  # the client's IP is kept
    e, _ = single(pair, f"ext/{EXT}", pair.node("node-3"), 30081)  # no local endpoint
    assert (e.verdict, e.detail) == ("timeout", "DROP")


def test_hairpin(pair: Pair) -> None:
    # a pod reaching itself through its Service: kube-proxy masquerades (to cni0)
    e, _ = single(pair, "pod/default/solo", pair.svc("solo"), 80)
    assert (e.pod, e.source_seen, e.masquerade) == ("default/solo", pair.cni0("node-2"), True)
    # a pod reaching another pod of its own node through a Service: bridged reply, no NAT
    e, _ = single(pair, "pod/default/client", pair.svc("web-1"), 80)
    assert (e.pod, e.source_seen) == ("default/web-1", pair.pod("client"))
    # an endpoint reaching itself through a multi-endpoint Service
    emu, real = flow(pair, "pod/default/web-1", pair.svc("web"), 80, n=N)
    for o in emu + real:
        expected = pair.cni0("node-1") if o.pod == "default/web-1" else pair.pod("web-1")
        assert o.source_seen == expected


def test_session_affinity_client_ip(pair: Pair) -> None:
    for client in ("pod/default/client", "pod/default/solo", "node/node-3"):
        emu, real = flow(pair, client, pair.svc("sticky"), 80, n=12)
        assert len({o.pod for o in emu}) == 1, f"{client}: emulator spread {emu}"
        assert len({o.pod for o in real}) == 1, f"{client}: kernel spread {real}"
        assert {o.verdict for o in emu + real} == {"delivered"}


def test_service_without_endpoints_is_rejected(pair: Pair) -> None:
    for port, proto in ((80, "tcp"), (53, "udp")):
        e, _ = single(pair, "pod/default/client", pair.svc("empty"), port, proto)
        assert (e.verdict, e.detail) == ("refused", "REJECT")
    e, _ = single(pair, "node/node-2", pair.svc("empty"), 80)
    assert e.verdict == "refused"


def test_unserved_cluster_ip_port(pair: Pair) -> None:
    # no rule matches: routed to the underlay, which has no route for the Service range
    e, _ = single(pair, "node/node-1", pair.svc("web"), 81)  # ICMP net unreachable back
    assert e.verdict == "unreachable"
    e, _ = single(pair, "pod/default/client", pair.svc("web"), 81)  # the error cannot return
    assert e.verdict == "timeout"


def test_external_ping_reaches_nodes_not_pods(pair: Pair) -> None:
    for dst in (pair.node("node-2"), pair.pod("web-2")):
        assert pair.emu.ping(f"ext/{EXT}", dst, 1) == pair.real.ping(f"ext/{EXT}", dst, 1)


def test_kubernetes_service_reaches_the_apiserver_address(pair: Pair) -> None:
    # default/kubernetes DNATs to node-1:6443 (its advertise address); no apiserver
    # listens there, so the node itself resets the connection, on both backends
    for src in ("pod/default/client", "node/node-3"):
        e, _ = single(pair, src, pair.svc("kubernetes"), 443)
        assert e.verdict == "refused"


def test_real_trace_picks_another_source_port_when_its_random_one_is_taken(pair: Pair) -> None:
    """``trace --real`` chooses the source port itself (its conntrack read-back needs it):
    a port still held in the client's namespace makes it try another, not crash with
    EADDRINUSE; a port the user asked for that is taken is a one-line error. Each case
    is forced deterministically (the backend's RNG seeded so that its first choice is a
    port held by a listening socket), then a few traces run in a row."""
    import random
    import socket

    from dataplane.backends.base import EPHEMERAL
    from dataplane.linux import nsenter
    from dataplane.linux.traffic import PortInUse

    taken = random.Random(9).randint(*EPHEMERAL)
    holder = nsenter.socket_in(
        pair.real.cluster.netns("pod/default/client"), socket.AF_INET, socket.SOCK_STREAM
    )
    try:
        holder.bind(("0.0.0.0", taken))
        holder.listen(1)
        pair.real._rng = random.Random(9)
        t = pair.real.trace("pod/default/client", pair.svc("web"), 80)
        assert t.outcome.verdict == "delivered"
        assert t.outcome.sport not in (None, taken)
        with pytest.raises(PortInUse, match=f"source port {taken} is in use"):
            pair.real.trace("pod/default/client", pair.svc("web"), 80, sport=taken)
    finally:
        holder.close()
    for _ in range(8):
        assert pair.real.trace("pod/default/client", pair.svc("web"), 80).outcome.verdict == (
            "delivered"
        )


# ---------------------------------------------------------------------------- counters


def emulated_nat_hits(
    pair: Pair, src: str, dst: str, port: int, proto: str
) -> tuple[Counter[Hit], set[str]]:
    """The nat-table rules one emulated connection matched (its first packet: nat sees
    only a connection's first packet), as (node, chain, iptables-save line) -> packets,
    and the nodes its packets crossed."""
    [c] = pair.emu.cluster.connect(src, dst, proto, port, 1, close=True, complete=proto == "tcp")  # type: ignore[arg-type]
    assert c.trace is not None
    hits: Counter[Hit] = Counter()
    crossed: set[str] = set()
    t: Trace | None = c.trace
    while t is not None:
        crossed |= {h.netns[len("node/") :] for h in t.hops if h.netns.startswith("node/")}
        t = t.reply
    for h in c.trace.rules():
        if h.table == "nat" and h.netns.startswith("node/") and h.rule and h.chain:
            hits[(h.netns[len("node/") :], h.chain, saved_rule(h.rule))] += 1
    return hits, crossed


def kernel_nat_hits(pair: Pair, src: str, dst: str, port: int, proto: str) -> Counter[Hit]:
    """The nat-table rules whose counters one kernel connection moved (read just before
    and just after it), from the cluster's back end: iptables-nft-save, or libiptc for
    legacy."""
    before = pair.real.counters()
    pair.real.connect(src, dst, port, proto, 1)  # type: ignore[arg-type]
    after = pair.real.counters()
    hits: Counter[Hit] = Counter()
    for node, rules in after.items():
        old = {(r.table, r.chain, r.rule): r.packets for r in before[node]}
        for r in rules:
            moved = r.packets - old.get((r.table, r.chain, r.rule), 0)
            if r.table == "nat" and moved:
                hits[(node, r.chain, r.rule)] = moved
    return hits


def test_rule_counters_agree_with_the_emulator(pair: Pair) -> None:
    """Per connection, the nat rules the emulator walked through are exactly those whose
    kernel counters moved on the nodes the connection crossed, by as many packets, read
    back from the back end the rules were loaded on (libiptc for legacy).

    Under VXLAN only connections that stay on one node are compared: the overlay's outer
    packets are conntrack flows of their own whose source ports the kernel hashes at
    random, so they cross nat on their own schedule (on any node) and move the counters
    of the built-in chains' jump rules; host-gw has no outer packets, and there flows
    across nodes are compared too."""
    flows = [
        ("pod/default/client", pair.svc("web-1"), 80, "tcp"),  # DNAT, endpoint on the node
        ("pod/default/solo", pair.svc("solo"), 80, "tcp"),  # hairpin: masqueraded
        (f"ext/{EXT}", pair.node("node-1"), 30081, "tcp"),  # NodePort, eTP Local
        ("pod/default/client", pair.svc("empty"), 80, "tcp"),  # no endpoints
        ("node/node-1", pair.svc("web-1"), 80, "tcp"),  # from the node itself
        ("pod/default/client", pair.svc("web-1"), 80, "tcp"),  # a second time: same counts
    ]
    if pair.emu.view.network.overlay == "host-gw":  # across nodes, on the underlay
        flows += [
            ("pod/default/client", pair.svc("solo"), 80, "tcp"),
            ("node/node-3", pair.svc("web-1"), 80, "tcp"),
            (f"ext/{EXT}", pair.node("node-2"), 30081, "tcp"),
        ]
    for src, dst, port, proto in flows:
        # one possible outcome: no random choice, so both sides walk the same rules
        assert len(pair.pristine.possible(src, dst, port, proto)) == 1  # type: ignore[arg-type]
        where = f"{proto} {src} -> {dst}:{port} ({pair.real.cluster.iptables_backend})"
        for attempt in range(2):
            emulated, crossed = emulated_nat_hits(pair, src, dst, port, proto)
            assert emulated, f"{where}: the emulator walked no nat rule"
            moved = kernel_nat_hits(pair, src, dst, port, proto)
            kernel = Counter({h: n for h, n in moved.items() if h[0] in crossed})
            if kernel == emulated:
                break
            # a node's IGMP report (a new conntrack flow from cni0 to 224.0.0.22, which
            # crosses the node's nat OUTPUT and POSTROUTING; the emulator models no IGMP)
            # can fall into the window once per flow timeout: measure once more
            assert attempt == 0, (
                f"{where}:\nkernel   {sorted(kernel.items())}\nemulator {sorted(emulated.items())}"
            )
