"""Real nodes follow the cluster (mark.kernel): ``svclab serve --real`` over four real
nodes, driven by the real kubectl. Each node's kubelet attaches pods with the real CNI
plugins and starts their servers; each kube-proxy loads its syncs into its node's
namespace. So ``kubectl scale``, ``delete pod``, ``patch svc`` and ``rollout restart``
reach the kernel with no further command: every node's ``iptables-save`` holds a
KUBE-SEP chain per endpoint, and ``svclab connect --real`` reaches every pod. The
cluster is always torn down, with a leak check."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served

from app import real
from dataplane.linux.netns import is_root
from dataplane.linux.nsenter import inode
from dataplane.linux.realize import RealCluster
from dataplane.linux.rules import iptables_save
from dataplane.linux.testing import leftovers

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

SVCLAB = str(Path(sys.executable).parent / "svclab")
NODES = [f"node-{i}" for i in range(1, 5)]
CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: live}
spec: {nodes: 4, dns: false}
"""
WEB = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: agnhost, ports: [{name: http, containerPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}
"""
#: how long the nodes' rules may take to follow a change: well under kube-proxy's 30 s
#: syncPeriod, so that what is checked is the sync the change caused, not the next
#: periodic full resync
RULES_TIMEOUT = 15.0
SEP_DNAT = re.compile(
    r'^-A (KUBE-SEP-\S+) .*--comment "default/web:http" .*--to-destination (\S+):8080$', re.M
)


def svclab(state: Path, *args: str) -> str:
    out = subprocess.run(
        [SVCLAB, "--state", str(state), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    d = tmp_path_factory.mktemp("livenodes")
    state = d / "state"
    (d / "cluster.yaml").write_text(CLUSTER)
    svclab(state, "apply", "-f", str(d / "cluster.yaml"))
    s = Served(state, "--real")  # realises the nodes itself: no 'up' first
    try:
        s.start()
        s.kubectl("apply", "-f", "-", input=WEB)
        yield s
    finally:
        s.stop()
        record = real.RealRecord.read(state)
        real.down(state)
        if record is not None:
            assert leftovers(record.cluster_id) == []


def cluster(srv: Served) -> RealCluster:
    record = real.RealRecord.read(srv.state)
    assert record is not None
    return RealCluster.load(record.cluster_id)


def running_ips(srv: Served) -> dict[str, str]:
    """pod name -> podIP of the web pods that run (not terminating)."""
    out = srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout
    return {
        p["metadata"]["name"]: p["status"]["podIP"]
        for p in json.loads(out)["items"]
        if p["status"].get("phase") == "Running"
        and p["status"].get("podIP")
        and not p["metadata"].get("deletionTimestamp")
    }


def node_endpoints(c: RealCluster, node: str) -> set[str]:
    """The web endpoints the node's nat table DNATs to (one KUBE-SEP chain each)."""
    save = iptables_save(c.node_netns(node), counters=False, table="nat")
    return {ip for _, ip in SEP_DNAT.findall(save)}


def wait_until(what: str, check: object, timeout: float = 60) -> float:
    """Poll ``check()`` until true; returns when it became true (monotonic)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():  # type: ignore[operator]
            return time.monotonic()
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def converged(srv: Served, replicas: int) -> dict[str, str]:
    """Wait until ``replicas`` web pods run with addresses and every node's rules hold
    exactly their endpoints; returns name -> IP."""
    ips: dict[str, str] = {}

    def pods_up() -> bool:
        nonlocal ips
        ips = running_ips(srv)
        return len(ips) == replicas

    wait_until(f"{replicas} web pods running", pods_up)
    c = cluster(srv)
    wanted = set(ips.values())
    wait_until(
        f"every node's KUBE-SEP chains for {sorted(wanted)}",
        lambda: all(node_endpoints(c, n) == wanted for n in NODES),
        timeout=RULES_TIMEOUT,
    )
    return ips


def connect_counts(srv: Served, n: int = 120) -> dict[str, int]:
    out = svclab(
        srv.state,
        "connect",
        "--real",
        "node/node-1",
        "svc/default/web:80",
        "-n",
        str(n),
        "-o",
        "json",
    )
    return {k.split(":")[0]: v for k, v in json.loads(out)["counts"].items()}


def test_scale_to_ten_reaches_every_node_and_every_pod(srv: Served) -> None:
    converged(srv, 2)
    srv.kubectl("scale", "deploy", "web", "--replicas=10")
    ips = converged(srv, 10)
    c = cluster(srv)
    for node in NODES:
        save = iptables_save(c.node_netns(node), counters=False, table="nat")
        chains = {chain for chain, _ in SEP_DNAT.findall(save)}
        assert len(chains) == 10, (node, chains)
    for name, ip in ips.items():  # each a real namespace with its address, a real server
        key = f"default/{name}"
        assert inode(c.pod_netns(key)) is not None
        assert str(c.pods[key].ip) == ip
    counts = connect_counts(srv)
    assert set(counts) == set(ips.values())


def test_delete_pod_reaches_the_kernel(srv: Served) -> None:
    before = converged(srv, 10)
    victim = sorted(before)[0]
    old_ns = cluster(srv).pod_netns(f"default/{victim}")
    srv.kubectl("delete", "pod", victim, "--wait=false")
    after = converged(srv, 10)
    assert victim not in after
    assert inode(old_ns) is None  # CNI DEL removed its sandbox
    assert f"default/{victim}" not in cluster(srv).pods


def test_patch_service_port_reaches_the_kernel(srv: Served) -> None:
    converged(srv, 10)
    cip = srv.kubectl("get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}").stdout
    srv.kubectl(
        "patch", "svc", "web", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/ports/0/port", "value": 8081}]',
    )  # fmt: skip
    c = cluster(srv)
    rule = re.compile(rf"-A KUBE-SERVICES -d {re.escape(cip)}/32 -p tcp .*--dport (\d+) ")

    def ports(node: str) -> set[str]:
        return set(rule.findall(iptables_save(c.node_netns(node), counters=False, table="nat")))

    wait_until(
        "port 8081 in every node", lambda: all(ports(n) == {"8081"} for n in NODES), RULES_TIMEOUT
    )
    out = svclab(
        srv.state, "connect", "--real", "node/node-2", f"{cip}:8081", "-n", "5", "-o", "json"
    )
    assert sum(json.loads(out)["counts"].values()) == 5
    srv.kubectl(
        "patch", "svc", "web", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/ports/0/port", "value": 80}]',
    )  # fmt: skip
    wait_until("port 80 back", lambda: all(ports(n) == {"80"} for n in NODES), RULES_TIMEOUT)


def test_rollout_restart_replaces_every_pod_in_the_kernel(srv: Served) -> None:
    before = converged(srv, 10)
    srv.kubectl("rollout", "restart", "deploy", "web")
    srv.kubectl("rollout", "status", "deploy", "web", "--timeout=120s", timeout=150)
    after = converged(srv, 10)
    assert not set(after) & set(before)
    c = cluster(srv)
    for name in before:
        assert f"default/{name}" not in c.pods
    assert set(connect_counts(srv)) == set(after.values())
