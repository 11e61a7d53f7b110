"""``svclab serve`` over a real three-member etcd cluster given all three endpoints:
one member killed (SIGKILL) while clients write and watch through the API, first the
member the server's etcd client was talking to, then (with that one back) the
leader. No write is lost (every write acknowledged is stored, and each object made is
stored once), and a watch sees every write, in revision order."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator

import pytest
from etcd_procs import EtcdCluster, etcd_cluster
from kubernetes import client, config, watch
from serving import SVCLAB, Served

pytestmark = pytest.mark.slow

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: members}
spec:
  nodes: 1
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EtcdCluster, Served]]:
    base = tmp_path_factory.mktemp("members")
    with etcd_cluster(3) as etcd:
        manifest = base / "cluster.yaml"
        manifest.write_text(CLUSTER)
        got = subprocess.run(
            [SVCLAB, "--state", str(base / "s"), "--store", etcd.url, "apply", "-f", str(manifest)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert got.returncode == 0, got.stderr
        srv = Served(base / "s", "--control-plane", "none")
        try:
            yield etcd, srv.start()
        finally:
            srv.stop()


def _leader(etcd: EtcdCluster) -> int:
    out = json.loads(etcd.etcdctl("endpoint", "status", "-w", "json"))
    leader = out[0]["Status"]["leader"]
    ids = [e["Status"]["header"]["member_id"] for e in out]
    return ids.index(leader)


def _write_and_watch(srv: Served, prefix: str, n: int, fault: Callable[[], None]) -> None:
    v1 = client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    seen: list[tuple[str, int]] = []

    def watch_them() -> None:
        w = watch.Watch()
        for ev in w.stream(
            v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=90
        ):
            name = ev["object"].metadata.name
            if ev["type"] == "ADDED" and name.startswith(prefix):
                seen.append((name, int(ev["object"].metadata.resource_version)))
                if len(seen) == n:
                    w.stop()

    watcher = threading.Thread(target=watch_them)
    watcher.start()
    made: dict[str, int] = {}
    for i in range(n):
        if i == n // 3:
            fault()
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"{prefix}{i}"), data={"i": str(i)}
        )
        made[f"{prefix}{i}"] = int(
            v1.create_namespaced_config_map("default", body).metadata.resource_version
        )
    watcher.join(90)
    stored = {
        c.metadata.name: int(c.metadata.resource_version)
        for c in v1.list_namespaced_config_map("default").items
        if c.metadata.name.startswith(prefix)
    }
    assert stored == made  # every write acknowledged is stored, as acknowledged
    assert len(made) == n
    assert dict(seen) == made  # the watch saw every write
    revs = [r for _, r in seen]
    assert revs == sorted(revs) and len(set(revs)) == n


def test_losing_the_member_the_server_talks_to(served: tuple[EtcdCluster, Served]) -> None:
    etcd, srv = served
    # the server's etcd client starts with the first endpoint given: member 0
    _write_and_watch(srv, "first-", 30, lambda: etcd.kill(0))
    assert not etcd.healthy(0)
    etcd.restart(0)  # it comes back and catches up from the others


def test_losing_the_leader(served: tuple[EtcdCluster, Served]) -> None:
    etcd, srv = served
    etcd.wait_healthy()
    leader = _leader(etcd)
    _write_and_watch(srv, "second-", 30, lambda: etcd.kill(leader))
    etcd.restart(leader)
