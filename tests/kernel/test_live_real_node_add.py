"""A Node created while ``svclab serve --real`` runs gets a real node (mark.kernel): its
namespace, its veth to the router, its cni0 and flannel device, and the routes that
join it to the other nodes, as ``up --real`` builds them; a pod scheduled on it is
attached there and reached from another node with ``svclab connect --real``, through a
Service too. Deleting the Node releases its namespace and its pods'. The cluster is
always torn down, with a leak check."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servedreal import served_real, svclab, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served

from app import real
from dataplane.linux.netns import is_root
from dataplane.linux.nsenter import inode
from dataplane.linux.realize import RealCluster

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: grow}
spec: {nodes: 2, dns: false}
"""
#: the third node's address: node-1 and node-2 hold 172.18.0.2 and .3
NODE3 = """\
apiVersion: v1
kind: Node
metadata:
  name: node-3
  labels: {kubernetes.io/hostname: node-3, kubernetes.io/os: linux}
status:
  addresses: [{type: InternalIP, address: 172.18.0.4}, {type: Hostname, address: node-3}]
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {name: late, labels: {app: late}}
spec:
  nodeName: node-3
  containers:
  - {name: web, image: agnhost, ports: [{containerPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: late}
spec: {selector: {app: late}, ports: [{port: 80, targetPort: 8080}]}
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_real(tmp_path_factory, "grow", CLUSTER) as s:
        yield s


def cluster(srv: Served) -> RealCluster:
    record = real.RealRecord.read(srv.state)
    assert record is not None
    return RealCluster.load(record.cluster_id)


def pod_ip(srv: Served) -> str:
    out = srv.kubectl("get", "pod", "late", "-o", "json")
    if out.returncode != 0:
        return ""
    st = json.loads(out.stdout)["status"]
    return str(st.get("podIP") or "") if st.get("phase") == "Running" else ""


def test_a_node_created_while_served_gets_a_real_node_and_runs_pods(srv: Served) -> None:
    made = srv.kubectl("apply", "-f", "-", input=NODE3)
    assert made.returncode == 0, made.stderr
    c = cluster(srv)
    netns = c.names.netns("node/node-3")
    wait_until("node-3's namespace", lambda: inode(netns) is not None)
    wait_until("node-3 in the cluster's record", lambda: "node/node-3" in cluster(srv).namespaces)

    applied = srv.kubectl("apply", "-f", "-", input=POD)
    assert applied.returncode == 0, applied.stderr
    wait_until("pod late Running on node-3 with an address", lambda: pod_ip(srv))
    ip = pod_ip(srv)
    c = cluster(srv)
    assert c.pod_nodes["default/late"] == "node-3"
    assert inode(c.pod_netns("default/late")) is not None
    # straight to the pod, from another node: the routes between the nodes reach it
    direct = json.loads(
        svclab(srv.state, "connect", "--real", "node/node-1", f"{ip}:8080", "-n", "3", "-o", "json")
    )
    assert set(direct["counts"]) == {f"{ip}:8080"}, direct["counts"]
    # through the Service, from another node's kube-proxy rules
    argv = ["connect", "--real", "node/node-2", "svc/default/late:80", "-n", "3", "-o", "json"]
    via = json.loads(svclab(srv.state, *argv))
    assert set(via["counts"]) == {f"{ip}:8080"}, via["counts"]


def test_a_deleted_node_is_released(srv: Served) -> None:
    c = cluster(srv)
    node_ns = c.names.netns("node/node-3")
    pod_ns = c.pod_netns("default/late")
    assert inode(node_ns) is not None
    gone = srv.kubectl("delete", "node", "node-3", "--wait=false")
    assert gone.returncode == 0, gone.stderr
    wait_until("node-3's namespace removed", lambda: inode(node_ns) is None)
    assert inode(pod_ns) is None
    # the record is written once the namespaces are gone: wait for it too
    wait_until("node-3 gone from the record", lambda: "node/node-3" not in cluster(srv).namespaces)
    after = cluster(srv)
    assert "default/late" not in after.pods
