"""Two ``svclab serve`` replicas over one real etcd: A runs the control plane (``live``),
B is the API only (``--control-plane none --ca A/pki``), a stateless replica sharing
A's CA. Driven by the real kubectl and the official kubernetes Python client against
both: each sees the other's writes, a watch on one delivers writes made through the
other, resourceVersions agree, and the allocators of the two never hand out one
ClusterIP or NodePort twice, even when both are asked at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from etcd_procs import EtcdCluster
from kubernetes import client, config, watch
from serving import SVCLAB, WEB, Served

pytestmark = pytest.mark.slow


def replica_kubeconfig(a: Served, b: Served, path: Path) -> Path:
    """A's admin kubeconfig pointed at B: one credential, both replicas (one CA)."""
    doc = yaml.safe_load(a.kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = b.url
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def replicas(
    etcd_member: EtcdCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, Served, Path]]:
    import subprocess

    etcd_member.wipe()
    base = tmp_path_factory.mktemp("replicas")
    a_state, b_state = base / "a", base / "b"
    got = subprocess.run(
        [SVCLAB, "--state", str(a_state), "--store", etcd_member.url, "apply", "-f", str(WEB)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    a = Served(a_state)
    b_state.mkdir()
    (b_state / "store.json").write_text(json.dumps({"store": etcd_member.url}) + "\n")
    b = Served(b_state, "--control-plane", "none", "--ca", str(a_state / "pki"))
    try:
        a.start()
        b.start()
        a.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
        yield a, b, replica_kubeconfig(a, b, base / "kubeconfig-b")
    finally:
        b.stop()
        a.stop()


def test_one_credential_reads_the_same_objects_through_either_replica(
    replicas: tuple[Served, Served, Path],
) -> None:
    a, b, kb = replicas
    # B's own kubeconfig (its admin certificate, issued by the adopted CA) works on A too
    own_b = replica_kubeconfig(b, a, b.state.parent / "kubeconfig-a-by-b")
    assert "web" in a.kubectl("get", "deploy", "-o", "name", kubeconfig=own_b).stdout
    for kc in (a.kubeconfig, kb):
        names = a.kubectl("get", "pods", "-l", "app=web", "-o", "name", kubeconfig=kc).stdout
        assert len(names.split()) == 3, names
    # resourceVersions agree: each object, read through A and through B
    ra = client.CoreV1Api(config.new_client_from_config(str(a.kubeconfig)))
    rb = client.CoreV1Api(config.new_client_from_config(str(kb)))
    for _ in range(20):
        pa = {
            p.metadata.name: p.metadata.resource_version
            for p in ra.list_namespaced_pod("default").items
        }
        pb = {
            p.metadata.name: p.metadata.resource_version
            for p in rb.list_namespaced_pod("default").items
        }
        if pa == pb:
            break
        time.sleep(0.2)  # B's cache follows etcd within a tenth of a second
    assert pa == pb and pa


def test_a_watch_on_one_replica_delivers_writes_made_through_the_other(
    replicas: tuple[Served, Served, Path],
) -> None:
    a, _b, kb = replicas
    v1b = client.CoreV1Api(config.new_client_from_config(str(kb)))
    rv = v1b.list_namespaced_pod("default").metadata.resource_version
    seen: dict[str, list[str]] = {}
    revisions: list[int] = []

    def watch_b() -> None:
        w = watch.Watch()
        for ev in w.stream(
            v1b.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=40
        ):
            pod = ev["object"]
            revisions.append(int(pod.metadata.resource_version))
            seen.setdefault(pod.metadata.name, []).append(ev["type"])
            ready = [n for n, t in seen.items() if "ADDED" in t]
            if len(ready) >= 2 and all(
                p.status.phase == "Running" for p in v1b.list_namespaced_pod("default").items
            ):
                w.stop()

    t = threading.Thread(target=watch_b)
    t.start()
    time.sleep(1)
    # scaled through A: A's controllers, scheduler and kubelets write through A
    a.kubectl("scale", "deploy/web", "--replicas=5")
    t.join(60)
    added = [n for n, types in seen.items() if "ADDED" in types]
    assert len(added) == 2, seen  # the two new pods, created by A's ReplicaSet controller
    assert revisions == sorted(revisions), revisions  # in revision order
    # and the other way: a write through B reaches A's components (the kubelets of A's
    # live plane watch A): the pods of a Deployment made through B come up Running
    a.kubectl("create", "deployment", "viab", "--image=nginx", "--replicas=2", kubeconfig=kb)
    a.kubectl("rollout", "status", "deploy/viab", "--timeout=60s")
    a.kubectl("scale", "deploy/web", "--replicas=3", kubeconfig=kb)


def test_replicas_never_hand_out_one_address_twice(replicas: tuple[Served, Served, Path]) -> None:
    a, _b, kb = replicas
    apis = [
        client.CoreV1Api(config.new_client_from_config(str(a.kubeconfig))),
        client.CoreV1Api(config.new_client_from_config(str(kb))),
    ]

    def make(i: int) -> None:
        svc = client.V1Service(
            metadata=client.V1ObjectMeta(name=f"np-{i}"),
            spec=client.V1ServiceSpec(
                type="NodePort",
                selector={"app": "none"},
                ports=[client.V1ServicePort(port=80, target_port=80)],
            ),
        )
        apis[i % 2].create_namespaced_service("default", svc)

    with ThreadPoolExecutor(8) as pool:  # both replicas at once
        list(pool.map(make, range(24)))
    svcs = apis[0].list_service_for_all_namespaces().items
    ips = [s.spec.cluster_ip for s in svcs if s.spec.cluster_ip not in (None, "None")]
    ports = [p.node_port for s in svcs for p in s.spec.ports or [] if p.node_port]
    assert len(ips) == len(set(ips)), sorted(ips)
    assert len(ports) == len(set(ports)), sorted(ports)
    assert len([s for s in svcs if s.metadata.name.startswith("np-")]) == 24
    # a replica that learns of the other's allocations later still refuses a taken port
    taken = ports[0]
    out = a.kubectl(
        "create", "service", "nodeport", "dup", "--tcp=80", f"--node-port={taken}",
        kubeconfig=kb, check=False,
    )  # fmt: skip
    assert out.returncode != 0 and "already allocated" in out.stderr, out.stderr


def test_ca_of_another_cluster_is_refused(tmp_path: Path, etcd_member: EtcdCluster) -> None:
    import subprocess

    from control.apiserver.http import pki

    pki.ensure_pki(tmp_path / "one", "127.0.0.1", 1)
    pki.ensure_pki(tmp_path / "two", "127.0.0.1", 1)
    got = subprocess.run(
        [SVCLAB, "--state", str(tmp_path / "two"), "serve", "--control-plane", "none",
         "--ca", str(tmp_path / "one" / "pki"), "--listen", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode != 0
    assert "holds another CA than" in got.stderr and got.stderr.count("\n") == 1, got.stderr
