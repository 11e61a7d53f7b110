"""Lifecycle of a realised cluster: realize is idempotent and resumable, teardown removes
everything, cleanup works after a SIGINT in the middle of realize, pod servers are
tracked, and one process's cleanup leaves a live process's namespaces alone."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from dataplane.linux import inspect, nsenter
from dataplane.linux.netns import is_root, list_ours
from dataplane.linux.realize import RealCluster, cleanup, cleanup_plan, realize, teardown
from dataplane.linux.servers import is_ours, read_pid, served
from dataplane.linux.testing import (
    leftovers,
    processes_in,
    realized,
    sample_network,
    unique_cluster_id,
)
from dataplane.linux.traffic import ConnectFailed
from netmodel.errors import BackendError

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

ROOT = Path(__file__).resolve().parents[2]


def _dumps(c: RealCluster) -> dict[str, inspect.NetnsDump]:
    return {logical: inspect.dump(kernel) for logical, kernel in c.namespaces.items()}


def _root_links() -> set[str]:
    with IPRoute() as ipr:
        return {str(x.get_attr("IFLA_IFNAME")) for x in ipr.get_links()}


def test_realize_twice_changes_nothing() -> None:
    sample = sample_network(2, 2, overlay="vxlan", external_clients=["203.0.113.7"])
    with realized(sample.network) as c:
        before = _dumps(c)
        assert set(before) == set(sample.network.namespaces)
        again = realize(sample.network, cluster_id=c.cluster_id)
        assert again == c
        assert _dumps(again) == before


def test_realize_converges_to_a_grown_then_shrunk_model() -> None:
    small = sample_network(2, 1)
    full = sample_network(2, 3)
    with realized(small.network) as c:
        bigger = realize(full.network, cluster_id=c.cluster_id)
        assert sorted(bigger.pods) == sorted(p.key for p in full.pods)
        pids = c.serve({p.key: [(8080, "tcp")] for p in full.pods})
        assert bigger.connect("pod/default/p0-0", "10.244.1.4", 8080).pod == "default/p1-2"

        shrunk = realize(small.network, cluster_id=c.cluster_id)
        assert sorted(shrunk.pods) == sorted(p.key for p in small.pods)
        gone = [p.key for p in full.pods if p not in small.pods]
        assert all(nsenter.inode(c.pod_netns(k)) is None for k in gone)
        assert not any(is_ours(pids[k]) for k in gone)
        assert set(c.servers.running()) == {p.key for p in small.pods}
        assert sorted(c.cni_runner().attached()) == sorted(p.key for p in small.pods)
        present = [n for n in list_ours(include_held=True) if c.names.owns(n)]
        assert sorted(present) == sorted(shrunk.namespaces.values())
        # the released address is free again for host-local
        again = c.cni_runner().add(
            "n1", "default/new", full.nodes[1].pod_cidr, requested_ip=full.pod("default/p1-2").ip
        )  # type: ignore[arg-type]
        assert again.ip == full.pod("default/p1-2").ip


def test_teardown_removes_namespaces_servers_and_state() -> None:
    sample = sample_network(2, 2)
    cid = unique_cluster_id()
    c = realize(sample.network, cluster_id=cid)
    try:
        pids = c.serve({p.key: [(8080, "tcp"), (53, "udp")] for p in sample.pods})
        supervisor = c.servers.supervisor_pid()
        assert supervisor is not None and all(is_ours(p) for p in pids.values())
        namespaces = list(c.namespaces.values())
        # one process per node answers for the node's pods, from the node's namespace
        assert len(set(pids.values())) == len(sample.nodes)
        assert all(pids[p.key] == pids[f"default/p{p.node[1:]}-0"] for p in sample.pods)
        assert sorted(processes_in([c.node_netns(n.name) for n in sample.nodes])) == sorted(
            set(pids.values())
        )
        assert processes_in([c.pod_netns(p.key) for p in sample.pods]) == []
    except BaseException:
        teardown(cid)  # also on failure: pod servers, state and namespaces
        raise
    removed = teardown(c)
    assert sorted(removed.namespaces) == sorted(namespaces)
    assert leftovers(cid) == []
    assert not any(is_ours(p) for p in [*pids.values(), supervisor])
    teardown(cid)  # tolerates an already removed cluster


def test_pod_servers_stop_per_pod(tmp_path: Path) -> None:
    sample = sample_network(1, 3)
    with realized(sample.network) as c:
        pids = c.serve({p.key: [(8080, "tcp")] for p in sample.pods[:2]})
        node_server = pids["default/p0-0"]
        assert pids == {"default/p0-0": node_server, "default/p0-1": node_server}
        assert c.serve({"default/p0-0": [(8080, "tcp")]}) == {"default/p0-0": node_server}
        c.servers.stop(["default/p0-1"])
        assert served(c.state.servers_dir) == {"default/p0-0": node_server}
        with pytest.raises(ConnectFailed) as e:
            c.connect("pod/default/p0-0", "10.244.0.3", 8080)
        assert e.value.reason == "refused"
        # the node's process still answers for its other pod, and takes a new one
        assert c.connect("pod/default/p0-1", "10.244.0.2", 8080).pod == "default/p0-0"
        assert c.serve({"default/p0-2": [(8080, "tcp"), (5353, "udp")]}) == {
            "default/p0-2": node_server
        }
        assert c.connect("pod/default/p0-0", "10.244.0.4", 5353, "udp").pod == "default/p0-2"
        assert set(c.servers.running()) == {"default/p0-0", "default/p0-2"}
        # other ports: the pod's sockets are replaced, the old port refuses
        c.serve({"default/p0-0": [(9090, "tcp")]})
        assert c.connect("pod/default/p0-1", "10.244.0.2", 9090).pod == "default/p0-0"
        with pytest.raises(ConnectFailed):
            c.connect("pod/default/p0-1", "10.244.0.2", 8080)
        # a process left without pods exits
        c.servers.stop(["default/p0-0", "default/p0-2"])
        assert not is_ours(node_server)
        assert c.servers.running() == {}
        assert list(c.state.servers_dir.glob("host-*")) == []


def test_a_pod_server_that_cannot_bind_is_named_and_the_others_serve() -> None:
    sample = sample_network(1, 2)
    with realized(sample.network) as c:
        taken = nsenter.socket_in(c.pod_netns("default/p0-1"), socket.AF_INET, socket.SOCK_STREAM)
        try:
            taken.bind(("0.0.0.0", 8080))
            taken.listen(1)
            with pytest.raises(BackendError, match=r"default/p0-1: .*Address already in use"):
                c.serve({p.key: [(8080, "tcp")] for p in sample.pods})
        finally:
            taken.close()
        assert set(c.servers.running()) == {"default/p0-0"}
        assert c.connect("pod/default/p0-1", "10.244.0.2", 8080).pod == "default/p0-0"


def test_sigint_during_realize_then_cleanup_removes_everything() -> None:
    cid = unique_cluster_id("s")
    root_before = _root_links()
    # The child realises a served 2-pod cluster, then grows it to 2 x 40 pods; we
    # interrupt the growth half-way.
    script = f"""
import sys
from dataplane.linux.realize import realize
from dataplane.linux.testing import sample_network
small = sample_network(2, 2)
c = realize(small.network, cluster_id={cid!r})
c.serve({{p.key: [(8080, "tcp")] for p in small.pods}})
print("served", flush=True)
realize(sample_network(2, 40).network, cluster_id={cid!r}, workers=2)
print("finished", flush=True)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "served"
        prefix = f"svclab-{cid}-pod-"
        deadline = time.monotonic() + 20
        while sum(n.startswith(prefix) for n in list_ours(include_held=True)) < 10:
            assert time.monotonic() < deadline, "the child never got into the second realize"
            time.sleep(0.005)
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
        assert "finished" not in out, "SIGINT came too late to interrupt realize"
        assert child.returncode != 0
        state = Path(f"/run/svclab/{cid}")
        server_pids = [read_pid(p) for p in (state / "servers").glob("*.pid")]
        # the supervisor and one server process per node (both nodes have pods)
        assert len({p for p in server_pids if p and is_ours(p)}) == 3
        assert leftovers(cid), "the interrupted run left a partial cluster"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        removed = cleanup(cid)
    assert removed.namespaces and removed.state_dirs
    assert leftovers(cid) == []
    assert not any(p and is_ours(p) for p in server_pids)
    assert _root_links() == root_before


def test_cleanup_deletes_root_interfaces_peered_into_our_namespaces() -> None:
    cid = unique_cluster_id()
    c = realize(sample_network(1, 0).network, cluster_id=cid)
    stray = f"svlt{cid[-8:]}"
    try:
        with IPRoute() as ipr:  # a stray veth a crashed tool might leave: root <-> node
            ipr.link(
                "add",
                ifname=stray,
                kind="veth",
                peer={"ifname": "stray0", "net_ns_fd": nsenter.netns_path(c.node_netns("n0"))},
            )
        removed = cleanup(cid)
        assert stray in removed.root_links
        assert stray not in _root_links()
    finally:
        with IPRoute() as ipr:
            for idx in ipr.link_lookup(ifname=stray):
                ipr.link("del", index=idx)
        cleanup(cid)


def test_global_cleanup_spares_a_live_processs_cluster() -> None:
    cid = unique_cluster_id("o")
    script = f"""
import sys
from dataplane.linux.realize import realize
from dataplane.linux.testing import sample_network
realize(sample_network(1, 1).network, cluster_id={cid!r})
print("up", flush=True)
sys.stdin.readline()
"""
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    state_dir = Path(f"/run/svclab/{cid}")
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "up"
        mine = [n for n in list_ours(include_held=True) if n.startswith(f"svclab-{cid}-")]
        assert len(mine) == 3 and all(nsenter.owner(n) == child.pid for n in mine)
        assert not set(mine) & set(list_ours())  # not this process's to judge
        # (the plan is checked, not executed: a global cleanup would also remove other
        # people's orphaned clusters on this shared machine)
        plan = cleanup_plan()
        assert not set(mine) & set(plan.namespaces) and state_dir not in plan.state_dirs
        forced = cleanup_plan(force=True)
        assert set(mine) <= set(forced.namespaces) and state_dir in forced.state_dirs
        assert set(mine) <= set(cleanup_plan(cid).namespaces)
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=10)
        assert set(mine) <= set(list_ours())  # owner gone: now they are leftovers
        assert state_dir in cleanup_plan().state_dirs
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        cleanup(cid)
    assert leftovers(cid) == []


def test_a_persistent_cluster_survives_global_cleanups_until_named() -> None:
    cid = unique_cluster_id("p")
    c = realize(sample_network(1, 1).network, cluster_id=cid, persistent=True)
    try:
        assert c.persistent
        mine = sorted(c.namespaces.values())
        assert not set(mine) & set(list_ours())  # not a leak, even for its creator
        plan = cleanup_plan()
        assert not set(mine) & set(plan.namespaces) and c.state.root not in plan.state_dirs
        assert set(mine) <= set(cleanup_plan(force=True).namespaces)
        again = realize(sample_network(1, 1).network, cluster_id=cid)
        assert again.persistent  # the mark stays until teardown
    finally:
        removed = teardown(cid)
    assert sorted(removed.namespaces) == mine
    assert leftovers(cid) == []
