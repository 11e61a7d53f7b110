"""On the Linux backend a container's command runs for real, in the pod's network
namespace (:class:`app.realnet.NetnsRuntime`): its real exit status ends the pod, and
the pod's sandbox (namespace, address) goes with it. The control plane's clock never
moves here, so only the real process can end ``sleep 1``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from ipaddress import IPv4Network

import pytest

from app.realnet import RealCNI
from control.agents.containers import container_statuses
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from dataplane.linux import nsenter
from dataplane.linux.netns import is_root
from dataplane.linux.realize import realize, teardown
from dataplane.linux.testing import leftovers, unique_cluster_id
from netmodel import topology
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import Node, Pod

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]


@pytest.fixture
def plane() -> Iterator[tuple[ControlPlane, RealCNI]]:
    cid = unique_cluster_id("c")
    cni = RealCNI(cid, ipam="emulated", mtu=1450)
    p = ControlPlane(MemoryStore(), ClusterSpec(nodes=1, dns=False), seed=1, network_plugin=cni)
    try:
        p.start()
        p.run_until_idle()
        nodes = [n for n in p.store.list("Node") if isinstance(n, Node)]
        infos = [topology.node_info(n.name, n.internal_ips[0], n.spec.pod_cidr) for n in nodes]
        realize(
            topology.build(IPv4Network("172.18.0.0/16"), infos, [], overlay="vxlan"), cluster_id=cid
        )
        yield p, cni
    finally:
        teardown(cid)
        assert leftovers(cid) == []


def _pod(name: str, command: list[str]) -> Pod:
    obj = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "command": command}],
            },
        }
    )
    assert isinstance(obj, Pod)
    return obj


def _wait_terminal(p: ControlPlane, name: str, seconds: float = 20.0) -> Pod:
    deadline = time.monotonic() + seconds
    while True:
        p.run_until_idle()
        pod = p.store.get("Pod", f"default/{name}")
        assert isinstance(pod, Pod)
        if pod.status.phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
            return pod
        time.sleep(0.05)


def test_a_real_command_ends_the_pod_with_its_exit_status(
    plane: tuple[ControlPlane, RealCNI],
) -> None:
    p, cni = plane
    p.apply([_pod("job", ["sh", "-c", "sleep 1; exit 3"]), _pod("ok", ["true"])])
    p.run_until_idle()
    job = p.store.get("Pod", "default/job")
    assert isinstance(job, Pod) and job.status.phase == "Running"
    ns = cni.pod_netns(job)
    assert os.path.exists(nsenter.netns_path(ns))
    job = _wait_terminal(p, "job")
    assert job.status.phase == "Failed"
    term = container_statuses(job)[0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    ok = _wait_terminal(p, "ok")
    assert ok.status.phase == "Succeeded"
    assert not os.path.exists(nsenter.netns_path(ns)), "the sandbox goes with the finished pod"
    assert cni.container_runtime.running() == 0
