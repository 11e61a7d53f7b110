"""Readiness of a realised cluster: what the model expects (pure), and on the kernel a
ready cluster passes, a removed route is named, reconciled once and reported."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest

from dataplane.linux import inspect, ready
from dataplane.linux.links import NsLink
from dataplane.linux.netns import is_root
from dataplane.linux.realize import realize
from dataplane.linux.testing import realized, sample_network

kernel = pytest.mark.skipif(not is_root(), reason="needs root")


def test_expectations_leave_out_the_kernels_and_the_cni_plugins_parts() -> None:
    net = sample_network(2, 1, overlay="host-gw").network
    want = ready.expected_state(net.namespaces["node/n0"])
    assert want["routes"] == (
        "default via 172.18.0.1 dev eth0",
        "10.244.1.0/24 via 172.18.0.3 dev eth0",
    )
    assert want["up"] == ("eth0", "cni0")  # not lo, not the pod's host veth
    assert want["neighbours"] == want["fdb"] == ()
    vx = ready.expected_state(sample_network(2, 1).network.namespaces["node/n0"])
    assert len(vx["neighbours"]) == len(vx["fdb"]) == 1 and "flannel.1" in vx["up"]


def test_probes_cross_the_underlay_the_bridge_and_the_overlay() -> None:
    net = sample_network(2, 1, overlay="host-gw").network
    got = {(p.src, str(p.dst), p.what) for p in ready.probes(net)}
    assert got == {
        ("node/n0", "172.18.0.3", "underlay to node/n1"),
        ("node/n0", "10.244.0.2", "own pod default/p0-0"),
        ("node/n0", "10.244.1.2", "pod on node/n1 default/p1-0"),
        ("node/n1", "172.18.0.2", "underlay to node/n0"),
        ("node/n1", "10.244.0.2", "pod on node/n0 default/p0-0"),
        ("node/n1", "10.244.1.2", "own pod default/p1-0"),
    }


def test_pods_a_policy_guards_are_probed_from_their_own_node_only() -> None:
    net = sample_network(2, 2, overlay="host-gw").network
    got = {(p.src, str(p.dst)) for p in ready.probes(net, guarded={"10.244.1.2"})}
    assert ("node/n1", "10.244.1.2") in got  # its own node: policy always lets it in
    assert ("node/n0", "10.244.1.2") not in got
    assert ("node/n0", "10.244.1.3") in got  # the overlay is still crossed, to another pod


def test_probes_cover_every_node_pair_and_every_pod_from_two_nodes() -> None:
    sample = sample_network(5, 4)
    got = ready.probes(sample.network)
    assert len(got) == len({(p.src, p.dst) for p in got})  # no probe twice
    node_of = {str(p.ip): f"node/{p.node}" for p in sample.pods}
    pairs = {(p.src, node_of[str(p.dst)]) for p in got if str(p.dst) in node_of}
    nodes = {f"node/{n.name}" for n in sample.nodes}
    assert pairs == {(a, b) for a in nodes for b in nodes}  # own pods and the overlay
    for pod in sample.pods:
        sources = {p.src for p in got if p.dst == pod.ip}
        assert f"node/{pod.node}" in sources and len(sources) >= 2
    assert len(got) == 5 * (4 + 4 + 3 + 4)


def test_compare_names_what_is_missing_or_down() -> None:
    ns = sample_network(2, 1, overlay="host-gw").network.namespaces["node/n0"]
    dump = inspect.NetnsDump(
        links=("cni0 bridge 02:00:00:00:00:01 1500 - down", "lo loopback 0 65536 - up"),
        addresses=(),
        routes=("default via 172.18.0.1 dev eth0",),
        neighbours=(),
        fdb=(),
    )
    assert ready.compare("node/n0", ns, dump) == [
        "node/n0: route 10.244.1.0/24 via 172.18.0.3 dev eth0 missing",
        "node/n0: link eth0 missing",
        "node/n0: link cni0 down",
    ]


@pytest.mark.kernel
@kernel
@pytest.mark.parametrize("overlay", ["vxlan", "host-gw"])
def test_tables_read_by_iproute2_match_the_netlink_dump(overlay: str) -> None:
    """Readiness reads routes, neighbours, FDB and link states through iproute2's JSON;
    every line must be the one pyroute2's :func:`inspect.dump` gives, for every kind of
    namespace (host routes, onlink, scope link, proto kernel, src, VXLAN FDB)."""
    net = sample_network(3, 2, overlay=overlay).network  # type: ignore[arg-type]
    with realized(net) as c:
        with NsLink(c.node_netns("n0")) as lk:  # a host route and a down link too
            lk.ipr.route("add", dst="10.77.0.5/32", oif=lk.must_index("eth0"), scope=253)
            lk.ipr.link("add", ifname="br9", kind="bridge")
        for logical, netns in c.namespaces.items():
            d, t = inspect.dump(netns), inspect.tables(netns)
            assert (t.routes, t.neighbours, t.fdb) == (d.routes, d.neighbours, d.fdb), logical
            for line in d.links:
                name = line.split()[0]
                assert t.is_up(name) == d.is_up(name), (logical, name)
            assert t.links == {x.split()[0] for x in d.links}
        n0 = inspect.tables(c.node_netns("n0"))
        assert "10.77.0.5/32 dev eth0 scope link" in n0.routes and n0.is_up("br9") is False
        assert n0.is_up("nope") is None


@pytest.mark.kernel
@kernel
def test_a_lost_route_is_named_then_reconciled() -> None:
    net = sample_network(2, 1, overlay="host-gw").network
    with realized(net, cni="netlink") as c:
        assert ready.wait_ready(net, c.namespaces) == ready.Readiness(rounds=1)
        with NsLink(c.node_netns("n0")) as lk:
            lk.ipr.route("del", dst="10.244.1.0/24", gateway="172.18.0.3")
        with pytest.raises(ready.NotReady) as e:
            ready.wait_ready(net, c.namespaces, timeout=0.3)
        msg = str(e.value)
        assert msg.splitlines()[0].endswith(
            "node/n0: route 10.244.1.0/24 via 172.18.0.3 dev eth0 missing"
        )
        diag = msg.split("--- node/n0 (", 1)[1]
        assert "route default via 172.18.0.1 dev eth0" in diag and "10.244.1.0/24" not in diag

        def again() -> None:
            realize(net, cluster_id=c.cluster_id, cni="netlink")

        r = ready.wait_ready(net, c.namespaces, reconcile=again)
        assert r.reconciled and r.drift == (
            "node/n0: route 10.244.1.0/24 via 172.18.0.3 dev eth0 missing",
        )
        assert ready.failed_probes(ready.probes(net), c.namespaces) == []


@pytest.mark.kernel
@kernel
def test_an_unanswered_probe_shows_the_neighbour_states() -> None:
    net = sample_network(2, 1, overlay="host-gw").network
    with realized(net, cni="netlink") as c:
        with NsLink(c.node_netns("n1")) as lk:  # the peer stops forwarding to its pods
            lk.ipr.link("set", index=lk.must_index("cni0"), state="down")
        probe = ready.Probe("node/n0", IPv4Address("10.244.1.2"), "pod on node/n1")
        assert ready.failed_probes([probe], c.namespaces, timeout=0.2) == [probe]
        with pytest.raises(ready.NotReady) as e:
            ready.wait_ready(net, c.namespaces, timeout=0.3)
        msg = str(e.value)
        assert "node/n1: link cni0 down" in msg.splitlines()[0]
        assert "--- node/n1 (" in msg and "link cni0 bridge" in msg


@pytest.mark.kernel
@kernel
def test_hundreds_of_echo_replies_at_once_are_all_counted() -> None:
    """A raw ICMP socket's default receive buffer holds ~170 echo replies; the probe of
    a 200-pod cluster used to send all its requests at once and lose the rest (the
    kernel drops what overflows, silently), so live pods looked dead."""
    from dataplane.linux import netns as ns
    from dataplane.linux.traffic import ping_many

    dsts = [IPv4Address("10.99.0.0") + i for i in range(1, 601)]
    with ns.temporary("t") as name:
        with NsLink(name) as lk:
            for d in dsts:
                lk.ipr.addr("add", index=lk.must_index("lo"), address=str(d), prefixlen=32)
        assert ping_many(name, dsts, timeout=2.0) == {str(d) for d in dsts}
        assert ping_many(name, [IPv4Address("10.98.0.1")], timeout=0.1) == set()


@pytest.mark.kernel
@kernel
def test_eight_nodes_of_twenty_five_pods_come_up_ready() -> None:
    """The scale at which ``up`` used to fail with hundreds of unanswered probes: every
    node reaches every node and a pod on every node; every pod answers its own node and
    one other node."""
    net = sample_network(8, 25).network
    with realized(net, cni="netlink") as c:
        r = ready.wait_ready(net, c.namespaces, timeout=20)
        assert not r.reconciled
        # per node: 7 peers, its 25 pods, one pod of each of 6 other nodes, the next
        # node's 25 pods
        assert len(ready.probes(net)) == 8 * (7 + 25 + 6 + 25)


@pytest.mark.kernel
@kernel
def test_batched_tables_are_idempotent_and_a_refused_entry_is_named() -> None:
    """``links.ensure_tables`` (``ip -batch`` / ``bridge -batch``): a second call changes
    nothing, and the first entry the kernel refuses is named with iproute2's reason."""
    from ipaddress import IPv4Network

    from dataplane.linux import netns as ns
    from dataplane.linux.links import ensure_tables
    from netmodel.errors import BackendError
    from netmodel.network import Neighbor, Route

    with ns.temporary("t") as name:
        with NsLink(name) as lk:
            lk.ipr.link("add", ifname="br9", kind="bridge")
            lk.ipr.link("set", index=lk.must_index("br9"), state="up")
            lk.ipr.addr("add", index=lk.must_index("br9"), address="10.9.0.1", prefixlen=24)
        routes = [
            Route(IPv4Network("10.77.0.0/24"), dev="br9", via=IPv4Address("10.9.0.7")),
            Route(IPv4Network("10.78.0.5/32"), dev="br9", scope="link"),
        ]
        neigh = [Neighbor(IPv4Address("10.9.0.7"), "02:00:00:00:00:07", "br9")]
        for _ in range(2):
            ensure_tables(name, routes, neigh)
            t = inspect.tables(name)
            assert {r.describe() for r in routes} <= set(t.routes)
            assert t.neighbours == ("10.9.0.7 02:00:00:00:00:07 br9",)
        bad = Route(IPv4Network("10.79.0.0/24"), dev="br9", via=IPv4Address("192.0.2.1"))
        with pytest.raises(BackendError) as e:
            ensure_tables(name, [routes[0], bad], neigh)
        assert "route 10.79.0.0/24 via 192.0.2.1 dev br9" in str(e.value)
        assert name in str(e.value)
