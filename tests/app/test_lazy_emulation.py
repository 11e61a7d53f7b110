"""Lazy and eager builds of a persistent cluster give the same answers.

A read-only session over a converged store starts no control plane and renders a node's
rules, and builds its namespaces, only when a packet reaches them
(:mod:`control.noderules`, :class:`netmodel.lazy.LazyMapping`). The eager build (the
control plane run to idle, every kube-proxy synced, every namespace built) is the
reference: the same flows must give equal traces (hops, verdicts, endpoints chosen, for
the cluster's seed), equal ``--all`` explorations, the same endpoint sequence over many
connections, and the same conntrack tables, in every proxy mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app import emulation
from control.noderules import converged_revision
from control.session import Session
from dataplane.emulator.cluster import EmulatedCluster
from netmodel.manifests import load

ROOT = Path(__file__).resolve().parents[2]

EXTRA = """
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Service
metadata: {name: web-np}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 81, targetPort: 8080, nodePort: 30081}]
"""

EXTERNAL = "203.0.113.9"


def _cluster(tmp_path: Path, mode: str) -> Path:
    web = (ROOT / "examples" / "web.yaml").read_text()
    web = web.replace("nodes: 3", f"nodes: 4\n  proxyMode: {mode}")
    src = tmp_path / "cluster.yaml"
    src.write_text(web + "---\n" + EXTRA)
    svcs = ROOT / "examples" / "services.yaml"
    state = tmp_path / "state"
    s = Session.open(state, must_exist=False)
    try:
        s.apply(load([src, svcs]))
        # a Service whose external IP is node-3's own address: under IPVS every node
        # binds it, so an ARP request for node-3 may be answered by another node first
        node3 = s.store.get("Node", "node-3").internal_ips[0]  # type: ignore[attr-defined]
        ext = tmp_path / "ext.yaml"
        ext.write_text(
            "apiVersion: v1\nkind: Service\nmetadata: {name: web-ext}\nspec:\n"
            f"  selector: {{app: web}}\n  externalIPs: [{node3}]\n"
            "  ports: [{port: 83, targetPort: 8080}]\n"
        )
        s.apply(load([ext]))
    finally:
        s.close()
    assert converged_revision(state) is not None
    return state


def _emulator(state: Path, *, lazy: bool) -> tuple[Session, EmulatedCluster]:
    """lazy: what a read-only command gets. Eager, the reference: the control plane run
    to idle, every kube-proxy's rules kept as it loaded them, every namespace and every
    filter built up front."""
    from control import rulecache

    s = Session.open(state, read_only=True)
    s.eager_rules = not lazy
    if lazy:
        # as in a fresh process: compiled rules come from the state directory's cache
        # (each chain's rules loaded when a packet first runs it), not from memory
        rulecache._MEMORY["compiled"].clear()
    emu = emulation.emulator(s, external_clients=[EXTERNAL])
    assert (s.lazy_rules is not None) == lazy
    if not lazy:
        for name in emu.hosts:
            emu.filters[name]
        assert len(emu.filters.built()) == len(emu.hosts)
    return s, emu


def _flows(s: Session) -> list[tuple[str, str, str]]:
    np_node = next(n for n in s.store.list("Node")).internal_ips[0]  # type: ignore[attr-defined]
    node3 = s.store.get("Node", "node-3").internal_ips[0]  # type: ignore[attr-defined]
    pods = sorted(p.key for p in s.store.list("Pod") if p.key.startswith("default/web"))
    return [
        ("pod/default/client", emulation.resolve_endpoint(s, "svc/default/web:80"), "tcp"),
        ("pod/default/client", emulation.resolve_endpoint(s, "svc/default/web-sticky:80"), "tcp"),
        ("pod/default/client", f"pod/{pods[0]}", "icmp"),
        ("pod/default/client", f"{np_node}:30081", "tcp"),
        (EXTERNAL, f"{np_node}:30080", "tcp"),
        (EXTERNAL, f"{np_node}:30081", "udp"),
        ("node/node-2", emulation.resolve_endpoint(s, "svc/default/web:80"), "tcp"),
        (EXTERNAL, node3, "icmp"),
        ("node/node-1", f"{node3}:83", "tcp"),
        (EXTERNAL, f"{node3}:83", "tcp"),
    ]


@pytest.mark.parametrize("mode", ["iptables", "ipvs", "nftables"])
def test_lazy_and_eager_builds_answer_alike(tmp_path: Path, mode: str) -> None:
    state = _cluster(tmp_path, mode)
    eager_s, eager = _emulator(state, lazy=False)
    lazy_s, lazy = _emulator(state, lazy=True)
    try:
        flows = _flows(eager_s)
        assert flows == _flows(lazy_s)
        # the flows to node-3's address go last: where IPVS binds it on every node, the
        # ARP answers they get (from another node) misdirect later underlay traffic
        for src, dst, proto in flows[:-3]:
            a = eager.trace(src, dst, proto)  # type: ignore[arg-type]
            b = lazy.trace(src, dst, proto)  # type: ignore[arg-type]
            assert a == b, (src, dst, proto)
            if (src, dst) == flows[0][:2]:
                # the lazy build paid only for what the packet reached
                assert len(lazy.filters.built()) < len(lazy.filters)
        for src, dst, proto in flows[:2]:
            a = eager.trace_all(src, dst, proto)  # type: ignore[arg-type]
            b = lazy.trace_all(src, dst, proto)  # type: ignore[arg-type]
            assert a == b, (src, dst, proto)
        dst = flows[0][1]
        for release in (False, True):
            a_conns = list(
                eager.iter_connect("pod/default/client", dst, "tcp", n=40, release=release)
            )
            b_conns = list(
                lazy.iter_connect("pod/default/client", dst, "tcp", n=40, release=release)
            )
            assert a_conns == b_conns
            if mode != "ipvs":
                # (under IPVS, web-ext's external IP, node-3's address, is local on every
                # node: the underlay toward node-3 ends where it starts, as in the kernel)
                assert len({c.endpoint for c in a_conns}) > 1
        for src, dst, proto in flows[-3:]:
            a = eager.trace(src, dst, proto)  # type: ignore[arg-type]
            b = lazy.trace(src, dst, proto)  # type: ignore[arg-type]
            assert a == b, (src, dst, proto)
        for node in ("node-1", "node-2", "node-3", "node-4"):
            assert eager.conntrack(node) == lazy.conntrack(node)
    finally:
        eager_s.close()
        lazy_s.close()
    # and on fresh builds (nothing built yet: the router's ARP flood for node-3's
    # address meets unbuilt nodes, which under IPVS may hold it too)
    eager_s, eager = _emulator(state, lazy=False)
    lazy_s, lazy = _emulator(state, lazy=True)
    try:
        for src, dst, proto in flows[-3:]:
            assert eager.trace(src, dst, proto) == lazy.trace(src, dst, proto)  # type: ignore[arg-type]
    finally:
        eager_s.close()
        lazy_s.close()


def test_a_write_makes_the_next_read_converge(tmp_path: Path) -> None:
    """After a write that did not converge (the record is behind the store), a
    read-only session runs the control plane again and records the new revision."""
    state = _cluster(tmp_path, "iptables")
    s = Session.open(state, read_only=True)
    try:
        svc = s.store.get("Service", "default/web")
        s.store.update(svc)  # a write no control loop has seen
        rev = s.store.revision
        assert converged_revision(state) != rev
    finally:
        s.close()
    s2 = Session.open(state, read_only=True)
    try:
        emulation.emulator(s2)
        assert s2._plane is not None  # it ran
        assert converged_revision(state) == s2.store.revision
    finally:
        s2.close()
    s3 = Session.open(state, read_only=True)
    try:
        emulation.emulator(s3)
        assert s3._plane is None and s3.lazy_rules is not None
    finally:
        s3.close()


def test_cached_rules_answer_alike_and_follow_changes(tmp_path: Path) -> None:
    """The state directory's rule cache (control.rulecache): a second process (memory
    cleared) reads every rule set it needs from disk and answers as the first; an
    apply that changes the rules makes new entries, never a stale hit."""
    import shutil

    from control import rulecache

    state = _cluster(tmp_path, "iptables")
    shutil.rmtree(state / rulecache.CACHE_DIR, ignore_errors=True)
    traces = []
    for round_ in range(2):
        for level in rulecache._MEMORY.values():
            level.clear()
        s, emu = _emulator(state, lazy=True)
        try:
            flows = _flows(s)
            traces.append([emu.trace(src, dst, proto) for src, dst, proto in flows])  # type: ignore[arg-type]
            cache = s.lazy_rules.cache  # type: ignore[union-attr]
            assert cache is not None
            if round_ == 0:
                assert cache.hits["rendered"] == 0 and cache.misses["rendered"] > 0
            else:
                assert cache.misses["rendered"] == 0 and cache.hits["rendered"] > 0
        finally:
            s.close()
    assert traces[0] == traces[1]
    # a new Service: its ClusterIP must be served, so no node may reuse old rules
    extra = tmp_path / "more.yaml"
    extra.write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web-more}\n"
        "spec:\n  selector: {app: web}\n  ports: [{port: 82, targetPort: 8080}]\n"
    )
    w = Session.open(state)
    try:
        w.apply(load([extra]))
    finally:
        w.close()
    lazy_s, lazy = _emulator(state, lazy=True)
    eager_s, eager = _emulator(state, lazy=False)
    try:
        dst = emulation.resolve_endpoint(lazy_s, "svc/default/web-more:82")
        t = lazy.trace("pod/default/client", dst, "tcp")
        assert t.verdict == "delivered"
        assert t == eager.trace("pod/default/client", dst, "tcp")
    finally:
        lazy_s.close()
        eager_s.close()


def test_recorded_rules_follow_the_chains_the_kernel_would_hold(tmp_path: Path) -> None:
    """A writing process's kube-proxies sync into RecordedRules (no rule model): the
    KUBE-* chains of nat it believes each node holds, which the next partial sync reads,
    are those the parsed model (EmulatedRules) holds, through full and partial syncs,
    Services added and removed; and the Events they record are the same."""
    import shutil

    from control.agents.kubeproxy import EmulatedRules
    from control.noderules import RecordedRules

    state = _cluster(tmp_path, "iptables")
    twin = tmp_path / "twin"
    shutil.copytree(state, twin)
    more = tmp_path / "more.yaml"
    more.write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web-more}\n"
        "spec:\n  selector: {app: web}\n  ports: [{port: 82, targetPort: 8080}]\n"
    )
    chains = []
    events = []
    for d, eager in ((state, False), (twin, True)):
        s = Session.open(d)
        s.eager_rules = eager
        try:
            s.apply(load([more]))
            s.store.delete("Service", "default/web-sticky")
            s.converge()
            assert isinstance(s.rules, EmulatedRules if eager else RecordedRules)
            nodes = sorted(s.proxies)
            chains.append({n: sorted(s.rules.existing_chains(n)) for n in nodes})
            events.append(
                sorted(
                    (e.involved_object.name, e.message)  # type: ignore[attr-defined]
                    for e in s.store.list("Event")
                    if e.reason == "SyncProxyRules"  # type: ignore[attr-defined]
                )
            )
        finally:
            s.close()
    assert chains[0] == chains[1]
    assert any(c for c in chains[0].values())
    assert events[0] == events[1] and events[0]


def test_the_cli_backend_builds_only_what_the_packet_visits(tmp_path: Path) -> None:
    """The traffic commands' backend (``backend_for``, what trace, ping, connect and
    conntrack use) is the lazy one: a trace builds the namespaces and filters the walk
    reached, not the cluster's, and a second session builds the same."""
    from app.cli.traffic_cmd import backend_for

    state = _cluster(tmp_path, "iptables")
    svc = None
    built: list[set[str]] = []
    for _ in range(2):
        s = Session.open(state, read_only=True)
        try:
            svc = emulation.resolve_endpoint(s, "svc/default/web:80")
            with backend_for(s, "pod/default/client") as be:
                emu = be.cluster  # type: ignore[union-attr]
                host, port = svc.split(":")
                emu.trace("pod/default/client", host, "tcp", int(port))
                assert s.lazy_rules is not None
                assert len(emu.hosts.built()) < len(emu.hosts)
                built.append(set(emu.filters.built()))
        finally:
            s.close()
    assert built[0] == built[1]


def test_rendered_keys_from_the_store_s_fields_are_those_of_the_objects(
    tmp_path: Path,
) -> None:
    """The rendered-level cache key of a node's rules, made from the identities the
    store reads without decoding (control.store.base.scan), is the key made from the
    decoded Node, Services and EndpointSlices (rulecache.inputs_key): a warm question
    hits exactly the entries an earlier one wrote, and a changed object misses."""
    import shutil

    from control import rulecache
    from control.rulecache import inputs_key
    from netmodel.objects import EndpointSlice, Node, Service

    state = _cluster(tmp_path, "iptables")
    shutil.rmtree(state / rulecache.CACHE_DIR, ignore_errors=True)
    for level in rulecache._MEMORY.values():
        level.clear()
    s = Session.open(state, read_only=True)
    try:
        emulation.emulator(s)
        src = s.lazy_rules
        assert src is not None and src.cache is not None
        objs = [
            *(o for o in s.store.list("Service") if isinstance(o, Service)),
            *(o for o in s.store.list("EndpointSlice") if isinstance(o, EndpointSlice)),
        ]
        assert src.nodes() == [n.name for n in s.store.list("Node")]
        for name in src.nodes():
            node = s.store.get("Node", name)
            assert isinstance(node, Node)
            parts = ["node-rules", name, repr(src.cluster), repr(src.proxy_config)]
            src.ruleset(name, emulation.ruleset_input)
            assert src.cache.get("rendered", inputs_key(parts, [node, *objs])) is not None
    finally:
        s.close()


def test_pod_placements_are_kept_only_while_the_store_is_unchanged(tmp_path: Path) -> None:
    """What a lazy view reads of every Pod (and Node) is kept in the state directory by
    the store's state token: a second question reads it back (no new entry), and after a write (a
    new pod) the next question reads the store again and reaches the new pod, as the
    eager build does."""
    import shutil

    from control import rulecache

    state = _cluster(tmp_path, "iptables")
    shutil.rmtree(state / rulecache.CACHE_DIR, ignore_errors=True)
    scanned = state / rulecache.CACHE_DIR / "derived"

    def entries() -> int:
        for level in rulecache._MEMORY.values():
            level.clear()
        return len(list(scanned.glob("*.pickle"))) if scanned.is_dir() else 0

    for _ in range(2):
        s, emu = _emulator(state, lazy=True)
        try:
            assert "pod/default/client" in emu.hosts
        finally:
            s.close()
        assert entries() == 3  # where the pods are, their hostPorts, the nodes' addresses
    more = tmp_path / "late.yaml"
    more.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: late, labels: {app: late}}\n"
        "spec:\n  containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]\n"
    )
    w = Session.open(state)
    try:
        w.apply(load([more]))
    finally:
        w.close()
    lazy_s, lazy = _emulator(state, lazy=True)
    eager_s, eager = _emulator(state, lazy=False)
    try:
        assert entries() == 6
        t = lazy.trace("pod/default/client", "pod/default/late", "tcp", 8080)
        assert t.verdict == "delivered"
        assert t == eager.trace("pod/default/client", "pod/default/late", "tcp", 8080)
    finally:
        lazy_s.close()
        eager_s.close()


PLAIN = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: plain}
spec: {nodes: 3}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: 4
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: s}
spec:
  selector: {app: d}
  ports: [{port: 80, targetPort: 8080}]
"""


def _plain(tmp_path: Path) -> Path:
    src = tmp_path / "plain.yaml"
    src.write_text(PLAIN)
    state = tmp_path / "plain"
    s = Session.open(state, must_exist=False)
    try:
        s.apply(load([src]))
    finally:
        s.close()
    return state


@pytest.mark.parametrize("plain", [False, True])
def test_nodes_with_the_same_payloads_share_one_converted_ruleset(
    tmp_path: Path, plain: bool
) -> None:
    """NodeRulesSource.ruleset(by_rules=True): a node whose iptables payloads are those
    of a node converted before gets that node's value without a parse; every node's
    value is still the one its own parse gives, and the eager control plane's. The
    plain cluster's nodes render the same rules; the other's (externalIPs, NodePorts,
    Local policies) do not."""
    from control.noderules import NodeRulesSource

    state = _plain(tmp_path) if plain else _cluster(tmp_path, "iptables")
    lazy = Session.open(state, read_only=True)
    eager = Session.open(state, read_only=True)
    eager.eager_rules = True
    try:
        eager.converge()

        def source() -> NodeRulesSource:
            return NodeRulesSource(lazy.store, lazy.cluster.spec, lazy.proxy_config, lazy.clock)

        shared, alone = source(), source()
        nodes = shared.nodes()
        parsed: list[str] = []
        load = shared._load

        def counting(node: str, loads: list[tuple[str, object, bool]]):  # type: ignore[no-untyped-def]
            parsed.append(node)
            return load(node, loads)

        shared._load = counting  # type: ignore[method-assign]
        for node in nodes:
            got = shared.ruleset(node, emulation.ruleset_input, by_rules=True)
            assert got == alone.ruleset(node, emulation.ruleset_input)
            assert got[0] == emulation.ruleset_input(eager.rules.nodes[node])
        assert len(parsed) == len(shared._by_rules)
        assert len(parsed) == (1 if plain else len(nodes)), parsed
    finally:
        lazy.close()
        eager.close()
