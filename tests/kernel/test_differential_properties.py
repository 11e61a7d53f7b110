"""Differential properties: generated clusters realised by both backends, generated flows
through them; the backends must agree on every flow.

Each generated cluster (2-3 nodes, either overlay, 2-6 pods with or without TCP/UDP
servers, 1-3 Services of every kind: ClusterIP, NodePort or LoadBalancer,
externalTrafficPolicy and internalTrafficPolicy Cluster or Local, sessionAffinity None or
ClientIP, some without endpoints; kube-proxy in iptables mode, its rules on the
iptables-nft or the iptables-legacy back end, or in nftables mode) is realised once; then 10-12 generated flows (from pods, nodes or an external client; to pod IPs,
served or closed ports, ClusterIPs on served and unserved ports, LoadBalancer IPs,
NodePorts on every node and on a node's own localhost) run 1-3 connections each on
both backends. For every connection:

* the kernel's outcome (verdict, pod, source seen, masquerade) is one the emulator can
  produce for that flow (every branch of every random rule, from a pristine state), and
  so is the emulator's own;
* when both landed on the same pod, the connection's conntrack entries agree on every
  node (timeouts and the port a ``--random-fully`` masquerade picks left out);
* under ClientIP affinity, all connections of one client to one destination land on one
  pod, on each backend.

Seeded and reproducible (``derandomize``, no example database): every run checks the
same clusters and flows. A failure prints the cluster's manifest and the flow.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from app import emulation
from control.session import Session
from dataplane.backends import (
    ConnOutcome,
    EmulatorBackend,
    RealBackend,
    conntrack_key,
    real_backend,
)
from dataplane.linux.netns import is_root
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod, Service

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.skipif(not is_root(), reason="needs root"),
]

EXT = "203.0.113.50"
#: clusters per run; ``SVCLAB_DIFF_CLUSTERS=200`` for a deeper (still reproducible) run
CLUSTERS = int(os.environ.get("SVCLAB_DIFF_CLUSTERS", "30"))
#: how pods are attached on the kernel side (``netlink``: svclab's own veths)
CNI = os.environ.get("SVCLAB_DIFF_CNI", "bridge-plugin")
MIN_CLUSTERS, MIN_FLOWS = 20, 200
APPS = ("a", "b", "c")
#: ICMP errors for unroutable packets a router sends one source before it stays silent
#: (the kernel's ``ip_error`` token bucket: 5, refilled at 1/s), with a margin of one.
ROUTE_ERROR_BURST = 4


# ---------------------------------------------------------------------------- clusters


@dataclass(frozen=True)
class PodSpec:
    name: str
    node: int
    app: str
    tcp: bool
    udp: bool


@dataclass(frozen=True)
class SvcSpec:
    name: str
    app: str  # "z": selects nothing
    type: str  # ClusterIP, NodePort, LoadBalancer
    local: bool  # externalTrafficPolicy Local (NodePort, LoadBalancer)
    internal_local: bool  # internalTrafficPolicy Local
    affinity: bool
    tcp: bool
    udp: bool


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int
    overlay: str
    mode: str
    pods: tuple[PodSpec, ...]
    services: tuple[SvcSpec, ...]
    backend: str = "nft"  # the iptables back end (iptables mode): nft or legacy

    def manifest(self) -> str:
        docs = [
            "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: prop}\n"
            # dns: false: the generated flows probe every pod's ports with svclab's test
            # servers; a coredns pod's port 53 runs a DNS server, which does not answer
            # the probe (tests/kernel/test_differential_dns.py covers DNS on both)
            f"spec: {{nodes: {self.nodes}, overlay: {self.overlay}, proxyMode: {self.mode}, "
            "dns: false}"
        ]
        for p in self.pods:
            ports = [*(["{containerPort: 8080}"] if p.tcp else [])]
            ports += ["{containerPort: 5353, protocol: UDP}"] if p.udp else []
            docs.append(
                f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {p.name}, labels: {{app: {p.app}}}}}\n"
                f"spec:\n  nodeName: node-{p.node}\n"
                f"  containers: [{{name: c, image: x, ports: [{', '.join(ports)}]}}]"
            )
        for s in self.services:
            ports = [*(["{name: http, port: 80, targetPort: 8080}"] if s.tcp else [])]
            ports += ["{name: dns, port: 53, targetPort: 5353, protocol: UDP}"] if s.udp else []
            spec = [f"  selector: {{app: {s.app}}}", f"  ports: [{', '.join(ports)}]"]
            if s.type != "ClusterIP":
                spec.append(f"  type: {s.type}")
                if s.local:
                    spec.append("  externalTrafficPolicy: Local")
            if s.internal_local:
                spec.append("  internalTrafficPolicy: Local")
            if s.affinity:
                spec.append("  sessionAffinity: ClientIP")
            docs.append(
                f"apiVersion: v1\nkind: Service\nmetadata: {{name: {s.name}}}\nspec:\n"
                + "\n".join(spec)
            )
        return "\n---\n".join(docs) + "\n"


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSpec:
    nodes = draw(st.integers(2, 3))
    overlay = draw(st.sampled_from(["vxlan", "host-gw"]))
    mode = draw(st.sampled_from(["iptables", "nftables"]))
    n_pods = draw(st.integers(2, 6))
    pods = tuple(
        PodSpec(
            f"p{i}",
            draw(st.integers(1, nodes)),
            draw(st.sampled_from(APPS)),
            draw(st.booleans()) or i == 0,
            draw(st.booleans()),
        )
        for i in range(n_pods)
    )
    services = []
    for i in range(draw(st.integers(1, 3))):
        tcp = draw(st.booleans())
        kind = draw(st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]))
        services.append(
            SvcSpec(
                f"s{i}",
                draw(st.sampled_from((*APPS, "z"))),
                kind,
                kind != "ClusterIP" and draw(st.booleans()),
                draw(st.integers(0, 3)) == 0,
                draw(st.booleans()),
                tcp,
                not tcp or draw(st.booleans()),
            )
        )
    # drawn last, so the clusters drawn before are the same as without it
    backend = draw(st.sampled_from(["nft", "legacy"])) if mode == "iptables" else "nft"
    return ClusterSpec(nodes, overlay, mode, pods, tuple(services), backend)


# ---------------------------------------------------------------------------- flows


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    port: int
    proto: str
    n: int
    sticky: bool  # the destination is a ClientIP-affinity Service


def flows_for(session: Session) -> st.SearchStrategy[Flow]:
    """Flows over the realised cluster: every source kind, every destination kind."""
    pods = [p for p in session.store.list("Pod") if isinstance(p, Pod) and p.status.pod_ip]
    nodes = [n for n in session.store.list("Node") if isinstance(n, Node)]
    services = [
        s
        for s in session.store.list("Service")
        if isinstance(s, Service) and s.name != "kubernetes" and s.spec.cluster_ip
    ]
    node_sources = [f"node/{n.name}" for n in nodes]
    sources = [f"pod/{p.key}" for p in pods] + node_sources + [f"ext/{EXT}"]
    dests: list[tuple[str, int, str, bool]] = []
    localhost: list[tuple[str, int, str, bool]] = []  # a node's own localhost NodePorts
    for p in pods:
        ip = p.status.pod_ip or ""
        dests += [(ip, 8080, "tcp", False), (ip, 5353, "udp", False), (ip, 9999, "tcp", False)]
    for s in services:
        sticky = s.spec.session_affinity == "ClientIP"
        cip = s.spec.cluster_ip or ""
        dests.append((cip, 81, "tcp", False))  # no rule: routed to the underlay
        for port in s.spec.ports:
            proto = port.protocol.lower()
            dests += [(cip, port.port, proto, sticky)] * 2  # the common case, twice as often
            for ingress in s.status.load_balancer.ingress:
                if ingress.ip:
                    dests.append((ingress.ip, port.port, proto, sticky))
            if port.node_port:
                for n in nodes:
                    dests.append((n.internal_ips[0], port.node_port, proto, sticky))
                localhost.append(("127.0.0.1", port.node_port, proto, sticky))

    def flow(src: str, d: tuple[str, int, str, bool], n: int, node: str) -> Flow:
        if d[0] == "127.0.0.1":  # a node's own localhost
            src = node
        return Flow(src, d[0], d[1], d[2], n, d[3])

    return st.builds(
        flow,
        st.sampled_from(sources),
        st.sampled_from(dests + localhost),
        st.integers(1, 3),
        st.sampled_from(node_sources),
    )


# ---------------------------------------------------------------------------- checks


def conntrack_of(
    backend: EmulatorBackend | RealBackend, sports: set[int], proto: str, source: str | None
) -> dict[int, dict[str, list[str]]]:
    found = backend.flows_conntrack(sports, proto, source=source)
    return {p: {n: [conntrack_key(x) for x in v] for n, v in f.items()} for p, f in found.items()}


class Run:
    """One realised cluster and both backends; counts what was checked."""

    def __init__(self, emu: EmulatorBackend, pristine: EmulatorBackend, real: RealBackend) -> None:
        self.emu, self.pristine, self.real = emu, pristine, real
        self.sticky: dict[tuple[str, ...], dict[str, set[str | None]]] = {}
        self.route_errors: Counter[str] = Counter()
        self.verdicts: Counter[str] = Counter()  # the kernel's, for the run's summary

    def check(self, f: Flow) -> int:
        """Run ``f`` on both backends and check it (module docstring); returns the number
        of connections made on each."""
        proto = f.proto
        outcomes = [o for _, o in self.pristine.possible(f.src, f.dst, f.port, proto)]  # type: ignore[arg-type]
        possible = {o.key() for o in outcomes}
        deterministic = len(outcomes) == 1
        n = 1 if {k[0] for k in possible} == {"timeout"} else f.n  # a timeout costs seconds
        if all(o.verdict == "unreachable" and o.detail == "no-route" for o in outcomes):
            # the router's "no route" ICMP error: rate-limited by the kernel per source
            # (ip_error: net.ipv4.route.error_burst / error_cost, host-wide sysctls)
            n = min(n, ROUTE_ERROR_BURST - self.route_errors[f.src])
            self.route_errors[f.src] += max(n, 0)
            if n <= 0:
                return 0
        emu = self.emu.connect(f.src, f.dst, f.port, proto, n)  # type: ignore[arg-type]
        real = self.real.connect(f.src, f.dst, f.port, proto, n, sports=[o.sport or 0 for o in emu])  # type: ignore[arg-type]
        where = f"{proto} {f.src} -> {f.dst}:{f.port}"
        same: set[int] = set()
        for e, r in zip(emu, real, strict=True):
            self.verdicts[r.verdict + (" (localhost)" if f.dst == "127.0.0.1" else "")] += 1
            note(f"{where} sport {e.sport}: emulator {e.key()}, kernel {r.key()}")
            assert e.key() in possible, f"{where}: emulator {e} not among {possible}"
            assert r.key() in possible, (
                f"{where} sport {e.sport}: kernel {r} is none of the emulator's {possible}"
            )
            # conntrack entries name the endpoint: comparable when no random choice was
            # made, or both reached the same pod (the Service's one port on it)
            same_endpoint = deterministic or (e.verdict == "delivered" and e.pod == r.pod)
            if e.key() == r.key() and same_endpoint and e.sport is not None:
                same.add(e.sport)
        if same:
            source = emu[0].source  # the client's address (the same on both sides)
            kernel = conntrack_of(self.real, same, proto, source)
            emulated = conntrack_of(self.emu, same, proto, source)
            for sport in sorted(same):
                assert kernel.get(sport) == emulated.get(sport), (
                    f"{where} sport {sport}: conntrack kernel {kernel.get(sport)} "
                    f"vs emulator {emulated.get(sport)}"
                )
        if f.sticky:
            self._sticky((f.src, f.dst, str(f.port), proto), emu, real)
        return n

    def _sticky(
        self, key: tuple[str, ...], emu: list[ConnOutcome], real: list[ConnOutcome]
    ) -> None:
        seen = self.sticky.setdefault(key, {"emulator": set(), "kernel": set()})
        seen["emulator"] |= {o.pod for o in emu if o.verdict == "delivered"}
        seen["kernel"] |= {o.pod for o in real if o.verdict == "delivered"}
        for backend, pods in seen.items():
            assert len(pods) <= 1, f"{' '.join(key)}: ClientIP affinity broken on {backend}: {pods}"


def test_backends_agree_on_generated_clusters_and_flows() -> None:
    stats: Counter[str] = Counter()
    start = time.monotonic()

    @settings(
        max_examples=CLUSTERS,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(spec=clusters(), data=st.data())
    def run(spec: ClusterSpec, data: st.DataObject) -> None:
        note(spec.manifest())
        note(f"iptables back end: {spec.backend}")
        session = Session.ephemeral(load_text(spec.manifest(), source="generated"))
        view = emulation.view(session, external_clients=[EXT])
        flows = data.draw(st.lists(flows_for(session), min_size=10, max_size=12), label="flows")
        emu, pristine = EmulatorBackend(view, seed=1), EmulatorBackend(view, seed=1)
        with real_backend(view, cni=CNI, timeout=0.5, iptables_backend=spec.backend) as real:
            r = Run(emu, pristine, real)
            for f in flows:
                made = r.check(f)
                stats["connections"] += made
                stats["flows" if made else "flows skipped (route error budget)"] += 1
        stats.update(r.verdicts)
        stats["clusters"] += 1
        stats[spec.overlay] += 1
        stats[spec.mode] += 1
        if spec.mode == "iptables":
            stats[f"iptables-{spec.backend}"] += 1

    run()
    took = time.monotonic() - start
    print(f"\ndifferential properties: {dict(stats)} in {took:.1f}s")
    assert stats["clusters"] >= MIN_CLUSTERS and stats["flows"] >= MIN_FLOWS, stats
    assert stats["vxlan"] and stats["host-gw"] and stats["iptables"] and stats["nftables"], stats
    assert stats["iptables-nft"] and stats["iptables-legacy"], stats
