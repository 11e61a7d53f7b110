"""What only the etcd backend promises: kube-apiserver's layout as etcdctl shows it,
the CLI on etcd, transactions against other writers, compaction seen by another
client, and faults (a member lost, the whole cluster lost and restarted, nothing
listening). Real etcd processes throughout (tests/etcd_procs.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from etcd_procs import EtcdCluster, etcd_cluster, free_port

from app.cli.main import cli
from control.store import open_store
from control.store.etcd import EtcdStore
from control.store.etcd_client import StoreUnavailableError
from netmodel.errors import CompactedError, ConflictError
from netmodel.objects import Node, ObjectMeta, Pod, Service

ROOT = Path(__file__).resolve().parents[3]
WEB = ROOT / "examples" / "web.yaml"


def pod(name: str, ns: str = "default") -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace=ns, labels={"app": "web"}))


@pytest.fixture
def member(etcd_member: EtcdCluster) -> EtcdCluster:
    etcd_member.wipe()
    return etcd_member


@pytest.fixture
def store(member: EtcdCluster) -> Iterator[EtcdStore]:
    s = EtcdStore(member.endpoints)
    yield s
    s.close()


@pytest.fixture
def three() -> Iterator[EtcdCluster]:
    """A fresh 3-member cluster per test (fault tests leave members killed)."""
    with etcd_cluster(3) as c:
        yield c


def svclab(state: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    return res.exit_code, res.output


def keys(cluster: EtcdCluster, prefix: str, member: int | None = None) -> list[str]:
    out = cluster.etcdctl("get", "--prefix", prefix, "--keys-only", member=member)
    return [line for line in out.splitlines() if line]


# --------------------------------------------------------------------------- layout


def test_layout_and_values_as_etcdctl_shows_them(store: EtcdStore, member: EtcdCluster) -> None:
    svc = store.create(Service(metadata=ObjectMeta(name="web", namespace="default")))
    store.create(pod("web-1"))
    store.create(Node(metadata=ObjectMeta(name="node-1")))
    assert keys(member, "/registry/") == [
        "/registry/minions/node-1",
        "/registry/pods/default/web-1",
        "/registry/services/specs/default/web",
        "/registry/svclab.dev/revision",
    ]
    _key, value = member.etcdctl("get", "/registry/services/specs/default/web").splitlines()
    # the value is the object's JSON without resourceVersion: that is the mod_revision
    assert json.loads(value) == svc.with_meta(resource_version=None).to_dict()
    meta = json.loads(member.etcdctl("get", "/registry/services/specs/default/web", "-w", "json"))
    assert int(meta["kvs"][0]["mod_revision"]) == svc.resource_version
    assert int(meta["header"]["revision"]) == store.revision


def test_cli_apply_converges_and_etcdctl_lists_it(member: EtcdCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    code, out = svclab(state, "--store", member.url, "apply", "-f", str(WEB))
    assert code == 0 and "cluster.svclab.dev/lab created" in out, out
    assert json.loads((state / "store.json").read_text()) == {"store": member.url}
    assert not (state / "state.db").exists()
    pods = keys(member, "/registry/pods/default/")
    assert len(pods) == 3 and all(k.startswith("/registry/pods/default/web-") for k in pods)
    web = member.etcdctl("get", "/registry/services/specs/default/web").splitlines()
    assert web[0] == "/registry/services/specs/default/web"
    assert json.loads(web[1])["spec"]["clusterIP"].startswith("10.")
    assert keys(member, "/registry/minions/") == [f"/registry/minions/node-{i}" for i in (1, 2, 3)]
    assert keys(member, "/registry/svclab.dev/records/") == ["/registry/svclab.dev/records/cluster"]
    # later commands find the cluster through DIR/store.json, without --store
    code, out = svclab(state, "get", "pods")
    assert code == 0 and out.count("Running") == 3, out
    # another state directory reaches the same cluster with --store
    code, out = svclab(tmp_path / "other", "--store", member.url, "get", "endpointslices")
    assert code == 0 and "web-" in out, out
    # one directory, one store
    code, out = svclab(state, "--store", "etcd://127.0.0.1:1", "get", "pods")
    assert code == 1 and out.count("\n") == 1 and "store.json" in out, out


# --------------------------------------------------------------------------- transactions


def test_transaction_lost_to_another_writer_applies_nothing(
    store: EtcdStore, member: EtcdCluster
) -> None:
    other = EtcdStore(member.endpoints)
    a = store.create(pod("a"))
    rev = store.revision
    with pytest.raises(ConflictError, match="nothing was applied"), store.transaction():
        store.create(pod("b"))
        store.update(a.with_meta(labels={"v": "mine"}))
        other.update(a.with_meta(labels={"v": "theirs"}))  # between read and commit
    assert [p.name for p in store.list("Pod")] == ["a"]
    assert store.get("Pod", "default/a").labels == {"v": "theirs"}
    assert store.revision == rev + 1  # only the other writer's write
    other.close()


def test_transaction_beyond_etcd_limits_is_undone_by_compensation(
    store: EtcdStore, member: EtcdCluster
) -> None:
    store.MAX_TXN_OPS = 5  # 3 objects per Txn (+ undo record, lease key): 4 Txns
    other = EtcdStore(member.endpoints)
    keep = store.create(pod("keep"))
    with pytest.raises(ConflictError), store.transaction():
        for i in range(9):
            store.create(pod(f"p{i}"))
        store.delete("Pod", "default/keep")
        store.create(pod("x"))
        other.create(pod("x"))  # the last Txn's compare fails
    assert [p.name for p in store.list("Pod")] == ["keep", "x"]
    restored = store.get("Pod", "default/keep")  # put back (a new revision: history shows it)
    assert restored.with_meta(resource_version=None) == keep.with_meta(resource_version=None)
    # and a block that fits commits in pieces, all of it
    with store.transaction():
        for i in range(7):
            store.create(pod(f"q{i}"))
    assert len(store.list("Pod")) == 9
    other.close()


def _after_txns(store: EtcdStore, n: int, then: Callable[[], None]) -> None:
    """Run ``then`` once ``n`` of this store's write Txns have committed (fault injection
    between the Txns of one transaction; etcd itself is real)."""
    commit = store._commit
    done = 0

    def counting(compare: list[dict[str, Any]], ops: list[dict[str, Any]]) -> tuple[bool, int]:
        nonlocal done
        out = commit(compare, ops)
        done += 1
        if done == n:
            then()
        return out

    store._commit = counting  # type: ignore[method-assign]


def _pods_in_etcd(cluster: EtcdCluster) -> list[str]:
    return [k.rsplit("/", 1)[1] for k in keys(cluster, "/registry/pods/")]


def test_etcd_dying_between_the_txns_of_a_transaction_leaves_nothing_half_written() -> None:
    with etcd_cluster(1) as c:
        store = EtcdStore(c.endpoints)
        store.MAX_TXN_OPS = 5  # 3 objects per Txn: the transaction below takes 5 Txns
        store.PENDING_TTL = 2
        store.client.deadline = store.client.refused_grace = 2.0
        keep = store.create(pod("keep"))
        _after_txns(store, 2, lambda: c.kill(0))  # etcd dies after the 2nd of 5 Txns
        with pytest.raises(StoreUnavailableError), store.transaction():
            store.delete("Pod", "default/keep")
            for i in range(12):
                store.create(pod(f"p{i:02d}"))
        store.close()
        c.start(0)
        c.wait_healthy()
        # the first two Txns are in etcd (a reader sees them until someone recovers)
        assert "p00" in _pods_in_etcd(c) and "keep" not in _pods_in_etcd(c)
        assert keys(c, "/registry/svclab.dev/pending/")
        time.sleep(4)  # the writer's lease expires (etcd renews it once on restart)
        again = EtcdStore(c.endpoints)
        assert [p.name for p in again.list("Pod")] == ["keep"]
        restored = again.get("Pod", "default/keep")
        assert restored.with_meta(resource_version=None) == keep.with_meta(resource_version=None)
        assert _pods_in_etcd(c) == ["keep"]
        assert keys(c, "/registry/svclab.dev/pending/") == []
        again.close()


def test_unfinished_transaction_of_a_live_writer_is_left_alone(
    store: EtcdStore, member: EtcdCluster
) -> None:
    """Another store opened while a multi-Txn transaction is under way does not undo it
    (the writer's lease is alive); the transaction completes."""
    store.MAX_TXN_OPS = 5
    seen: list[list[str]] = []

    def open_another() -> None:
        other = EtcdStore(member.endpoints)
        seen.append([p.name for p in other.list("Pod")])
        other.close()

    _after_txns(store, 1, open_another)
    with store.transaction():
        for i in range(7):
            store.create(pod(f"p{i}"))
    assert seen == [["p0", "p1", "p2"]]  # a reader between Txns sees part of it
    assert [p.name for p in store.list("Pod")] == [f"p{i}" for i in range(7)]
    assert keys(member, "/registry/svclab.dev/pending/") == []


# --------------------------------------------------------------------------- watch


def test_watch_from_a_revision_compacted_by_another_client(
    store: EtcdStore, member: EtcdCluster
) -> None:
    for i in range(5):
        store.create(pod(f"p{i}"))
    start = store.revision - 5
    member.etcdctl("compaction", str(start + 3))
    fresh = EtcdStore(member.endpoints)  # knows nothing of the compaction
    try:
        with pytest.raises(CompactedError, match="compacted"):
            fresh.watch(start + 1)  # etcd's compact_revision cancellation
        assert fresh.compacted_revision == start + 3
        assert [e.revision for e in fresh.watch(start + 3)] == [start + 4, start + 5]
    finally:
        fresh.close()


def test_watch_spans_every_prefix_in_revision_order(store: EtcdStore) -> None:
    r0 = store.revision
    store.create(pod("a"))
    store.create(Node(metadata=ObjectMeta(name="n")))
    store.create(Service(metadata=ObjectMeta(name="s", namespace="default")))
    store.delete("Node", "n")
    got = [(e.type, e.kind, e.revision) for e in store.watch(r0)]
    assert got == [
        ("ADDED", "Pod", r0 + 1),
        ("ADDED", "Node", r0 + 2),
        ("ADDED", "Service", r0 + 3),
        ("DELETED", "Node", r0 + 4),
    ]


# --------------------------------------------------------------------------- faults


def test_nothing_listening_is_one_line_within_bounded_time(tmp_path: Path) -> None:
    url = f"etcd://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    code, out = svclab(tmp_path / "s", "--store", url, "apply", "-f", str(WEB))
    assert code == 1
    assert out.startswith("error: etcd at 127.0.0.1:") and out.count("\n") == 1, out
    assert "unavailable" in out and "connection refused" in out
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "s" / "store.json").exists()


def test_losing_one_member_of_three_changes_nothing(three: EtcdCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    code, out = svclab(state, "--store", three.url, "apply", "-f", str(WEB))
    assert code == 0, out
    three.kill(0)  # the first endpoint given: the client fails over to the others
    scaled = tmp_path / "scale.yaml"
    scaled.write_text(WEB.read_text().replace("replicas: 3", "replicas: 5"))
    code, out = svclab(state, "apply", "-f", str(scaled))
    assert code == 0 and "cluster.svclab.dev/lab unchanged" in out, out
    code, out = svclab(state, "get", "pods")
    assert code == 0 and out.count("Running") == 5, out
    three.restart(0)  # it catches up from the others
    for _ in range(50):
        if len(keys(three, "/registry/pods/default/", member=0)) == 5:
            break
        time.sleep(0.1)
    assert len(keys(three, "/registry/pods/default/", member=0)) == 5


def test_losing_the_leader_keeps_serving(three: EtcdCluster) -> None:
    store = EtcdStore(three.endpoints)
    store.create(pod("a"))
    status = json.loads(three.etcdctl("endpoint", "status", "-w", "json"))
    leader = next(
        i
        for i, s in enumerate(status)
        if s["Status"]["leader"] == s["Status"]["header"]["member_id"]
    )
    three.kill(leader)
    store.create(pod("b"))  # waits out the election, on another member
    assert [p.name for p in store.list("Pod")] == ["a", "b"]
    store.close()


def test_losing_every_member_then_restarting_keeps_everything(
    three: EtcdCluster, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    code, out = svclab(state, "--store", three.url, "apply", "-f", str(WEB))
    assert code == 0, out
    before = open_store(three.url)
    snapshot = {k: before.list(k) for k in ("Pod", "Service", "Node", "EndpointSlice")}
    rev = before.revision
    before.close()
    for i in range(3):
        three.kill(i)
    scaled = tmp_path / "scale.yaml"
    scaled.write_text(WEB.read_text().replace("replicas: 3", "replicas: 6"))
    t0 = time.monotonic()
    code, out = svclab(state, "apply", "-f", str(scaled))
    assert code == 1 and out.count("\n") == 1 and "unavailable" in out, out
    assert time.monotonic() - t0 < 30
    for i in range(3):
        three.start(i)
    three.wait_healthy()
    after = open_store(three.url)
    assert after.revision == rev  # nothing half-written
    assert {k: after.list(k) for k in snapshot} == snapshot
    after.close()
    code, out = svclab(state, "apply", "-f", str(scaled))
    assert code == 0, out
    code, out = svclab(state, "get", "pods")
    assert out.count("Running") == 6, out


def test_bad_store_urls_are_one_line(member: EtcdCluster, tmp_path: Path) -> None:
    code, out = svclab(tmp_path / "a", "--store", "etcd://localhost", "get", "pods")
    assert code == 1 and out == (
        "error: store: bad etcd endpoint 'localhost': expected HOST:PORT[,HOST:PORT...]\n"
    )
    code, out = svclab(tmp_path / "b", "--store", member.url, "get", "pods")
    assert code == 1 and "no cluster here yet" in out and out.count("\n") == 1, out
    code, out = svclab(tmp_path / "c", "--store", "memory://", "apply", "-f", str(WEB))
    assert code == 1 and "cannot hold a cluster of its own" in out, out


def test_every_kind_has_a_key_that_maps_back() -> None:
    from control.store.etcd_layout import RESOURCES, object_key, split_key
    from netmodel.kinds import KINDS

    assert set(RESOURCES) == set(KINDS)
    for kind in KINDS:
        for key in ("ns/name", "name"):
            assert split_key(object_key(kind, key)) == (kind, key)
    assert object_key("Service", "default/web") == "/registry/services/specs/default/web"
    assert object_key("Node", "node-1") == "/registry/minions/node-1"
    assert split_key("/registry/services/endpoints/default/web") is None
    assert split_key("/registry/svclab.dev/revision") is None


def test_decoding_gives_the_version_to_the_top_level_metadata() -> None:
    from control.store.etcd_layout import decode_value, encode_value
    from netmodel.kinds import object_from_dict

    dep = object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}},
            },
        }
    )
    for obj in (dep, pod("a"), Node(metadata=ObjectMeta(name="n"))):
        value = encode_value(obj.with_meta(resource_version="7"))
        assert "resourceVersion" not in value
        assert decode_value(obj.kind, value, 42) == obj.with_meta(resource_version="42")
    # a value another writer laid out differently: parsed, then given its version
    foreign = json.dumps({"kind": "Pod", "spec": {}, "metadata": {"name": "x", "namespace": "d"}})
    assert decode_value("Pod", foreign, 5).metadata.resource_version == "5"
