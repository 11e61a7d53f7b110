"""Faults converge on the kernel (mark.kernel): ``svclab serve --real --components
processes`` over two real nodes, each node's kubelet and kube-proxy an OS process of its
own under the supervisor.

* A kube-proxy killed with SIGKILL while the cluster changes (a Service added, a
  Deployment scaled) is restarted by the supervisor and converges by relisting: its
  node's ``iptables-save`` (kube-proxy's ``KUBE-*`` chains, no counters) ends exactly as
  a fresh full sync of the cluster as it is now leaves a fresh namespace.
* A kubelet killed with SIGKILL while its pods are deleted (gracefully, and with
  ``--force``) and created is restarted and converges: the pods of its node in the API,
  the pods the realised cluster records, their namespaces, and the pod servers running
  are the same sets, and a new pod is reachable at its own address.
* A Service with ``internalTrafficPolicy: Local`` whose only local endpoint is
  terminating (deleted, running out its preStop hook) still answers from that node
  through the kernel's rules (kube-proxy's terminating fallback), and from the node
  without a local endpoint it does not.

To hold a component dead for as long as a change takes, without racing the
supervisor's one-second back-off, the supervisor itself is paused (SIGSTOP) around the
kill and the change, and resumed (SIGCONT) after; it then sees the exit and restarts the
process. The cluster is always torn down, with a leak check."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served

from app import real
from control.agents.kubeproxy import KubeProxy, Mode, Rendered
from control.apiserver.http import pki
from control.clock import WallClock
from control.informers.http import Credentials, KubeClient
from control.live import load_config
from dataplane.linux import netns as ns
from dataplane.linux import rules
from dataplane.linux.netns import is_root
from dataplane.linux.nsenter import inode
from dataplane.linux.realize import RealCluster
from dataplane.linux.servers import PodServers
from dataplane.linux.testing import leftovers
from dataplane.proxy import IptablesRender
from netmodel.objects import KubeObject, Node

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

SVCLAB = str(Path(sys.executable).parent / "svclab")
NODES = ("node-1", "node-2")
BOUND = 90.0
#: how long a restarted kube-proxy may take to converge: under kube-proxy's 30 s
#: syncPeriod, so that what converges it is its relist and first sync, not the next
#: periodic full resync
CONVERGE = 20.0
CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: faults}
spec: {nodes: 2, dns: false}
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
EXTRA = """\
apiVersion: v1
kind: Service
metadata: {name: extra}
spec:
  selector: {app: web}
  type: NodePort
  ports: [{name: http, port: 81, targetPort: 8080}]
"""
BUILTIN = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

T = TypeVar("T")


def svclab(state: Path, *args: str) -> str:
    out = subprocess.run(
        [SVCLAB, "--state", str(state), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def wait_for(
    check: Callable[[], T | None],
    what: str,
    timeout: float = BOUND,
    why: Callable[[], object] = lambda: "",
) -> T:
    """Poll ``check()`` until it is truthy and return it; on timeout fail naming
    ``what`` and ``why()``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"never: {what}\n{why()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    d = tmp_path_factory.mktemp("livefaults")
    state = d / "state"
    (d / "cluster.yaml").write_text(CLUSTER)
    svclab(state, "apply", "-f", str(d / "cluster.yaml"))
    s = Served(state, "--real", "--components", "processes")
    try:
        s.start()
        s.kubectl("apply", "-f", "-", input=WEB)
        yield s
    finally:
        with contextlib.suppress(ProcessLookupError, KeyError):
            os.kill(livehost(state)["supervise"][0], signal.SIGCONT)  # never left paused
        s.stop()
        record = real.RealRecord.read(state)
        real.down(state)
        if record is not None:
            assert leftovers(record.cluster_id) == []


# ---------------------------------------------------------------------------- helpers


def livehost(state: Path) -> dict[str, tuple[int, int]]:
    """The live control plane's processes of ``state`` as ``ps`` shows them: name ->
    (pid, parent pid); ``supervise`` and each component (``GROUP`` or ``GROUP/NODE``)."""
    out = subprocess.run(
        ["ps", "-wweo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        parts = line.split()
        if "app.livehost" not in parts:
            continue
        args = parts[2:]
        if "supervise" in args and args[args.index("supervise") + 1] == str(state):
            found["supervise"] = (int(parts[0]), int(parts[1]))
        elif "component" in args and args[args.index("component") + 2] == str(state):
            group = args[args.index("component") + 1]
            nodes = [args[j + 1] for j, a in enumerate(args) if a == "--node"]
            name = f"{group}/{','.join(nodes)}" if nodes else group
            found[name] = (int(parts[0]), int(parts[1]))
    return found


@contextlib.contextmanager
def killed_while_paused(s: Served, name: str) -> Iterator[int]:
    """SIGKILL component ``name`` with its supervisor paused, so that it stays dead for
    the body; then resume the supervisor and wait until it runs ``name`` again (a new
    pid, the same parent). Yields the killed pid."""
    procs = wait_for(lambda: (p := livehost(s.state)).get(name) and p, f"{name} running")
    sup = procs["supervise"][0]
    pid, parent = procs[name]
    assert parent == sup
    os.kill(sup, signal.SIGSTOP)
    try:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{pid}/cmdline").exists() or _zombie(pid), "it died")
        yield pid
    finally:
        os.kill(sup, signal.SIGCONT)
    new = wait_for(
        lambda: (c := livehost(s.state).get(name)) and c[0] != pid and c, f"{name} restarted"
    )
    assert new[1] == sup, "restarted by the same supervisor"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def cluster(s: Served) -> RealCluster:
    record = real.RealRecord.read(s.state)
    assert record is not None
    return RealCluster.load(record.cluster_id)


def pods(s: Served, selector: str = "") -> dict[str, dict[str, Any]]:
    args = ["get", "pods", "-o", "json", *(["-l", selector] if selector else [])]
    return {p["metadata"]["name"]: p for p in json.loads(s.kubectl(*args).stdout)["items"]}


def running(s: Served, selector: str, n: int) -> dict[str, dict[str, Any]] | None:
    got = {
        k: p
        for k, p in pods(s, selector).items()
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }
    ok = len(got) == n and all(p["status"].get("podIP") for p in got.values())
    return got if ok else None


def client_as(s: Served, user: str) -> KubeClient:
    ca = pki.load_ca(s.state / "pki")
    cert, key = pki.client_cert(ca, user, [])
    return KubeClient(Credentials(s.url, ca.pem, cert, key), user_agent="faults-test")


class _Capture:
    """A kube-proxy rule sink that keeps the last render (nothing is loaded)."""

    def __init__(self) -> None:
        self.rendered: Rendered | None = None

    def load(self, node: str, mode: Mode, rendered: Rendered, *, full: bool) -> None:
        self.rendered = rendered

    def existing_chains(self, node: str) -> tuple[str, ...]:
        return ()


def fresh_full_sync(s: Served, node: str) -> str:
    """What a kube-proxy of ``node`` started now leaves in a fresh namespace: one full
    sync over the Node, Services and EndpointSlices listed through the API now, loaded
    as kube-proxy loads it (at start-up its canary and top-level chains and jump rules,
    then the sync by ``iptables-restore --noflush``), then ``iptables-save`` without
    counters."""
    client = client_as(s, "system:kube-proxy")
    try:
        objs: list[KubeObject] = [
            o for o in client.list("Node").objects if isinstance(o, Node) and o.name == node
        ]
        objs += client.list("Service").objects + client.list("EndpointSlice").objects
    finally:
        client.close()
    spec, proxy_config = load_config(s.state)
    sink = _Capture()
    proxy = KubeProxy(node, spec, proxy_config, sink, None, clock=WallClock())
    proxy.resync(objs)
    proxy.sync()
    assert isinstance(sink.rendered, IptablesRender)
    backend = cluster(s).iptables_backend
    with ns.temporary("fresh") as scratch:
        # kube-proxy's start-up (canary and top-level chains, the jumps), then the sync
        rules.load_iptables(scratch, sink.rendered.ensure_input(), jumps=None, backend=backend)
        rules.load_iptables(scratch, sink.rendered.restore_input, jumps=None, backend=backend)
        return rules.iptables_save(scratch, counters=False, backend=backend)


def kube_chains(save: str) -> dict[str, dict[str, list[str]]]:
    """kube-proxy's part of an ``iptables-save``: per table, each ``KUBE-*`` chain with
    its rules in order, and each built-in chain's jumps to a ``KUBE-*`` chain in order.
    Not the order chains were declared in (a fresh sync and one that added a Service's
    chains later differ there), nor anything of others (the CNI plugins' chains)."""
    out: dict[str, dict[str, list[str]]] = {}
    table: dict[str, list[str]] = {}
    for line in save.splitlines():
        if line.startswith("*"):
            table = out.setdefault(line[1:], {})
        elif line.startswith(":KUBE-"):
            table.setdefault(line.split()[0][1:], [])
        elif line.startswith("-A "):
            chain = line.split()[1]
            if chain.startswith("KUBE-") or (chain in BUILTIN and " -j KUBE-" in line):
                table.setdefault(chain, []).append(line)
    return {t: chains for t, chains in out.items() if chains}


def node_rules(s: Served, node: str) -> dict[str, dict[str, list[str]]]:
    c = cluster(s)
    return kube_chains(rules.iptables_save(c.node_netns(node), counters=False,
                                           backend=c.iptables_backend))  # fmt: skip


def rules_diff(s: Served, node: str) -> list[str]:
    """How ``node``'s kube-proxy rules differ from a fresh full sync's (unified diff
    lines; empty when they are the same)."""

    def lines(d: dict[str, dict[str, list[str]]]) -> list[str]:
        return [f"{t} {c}: {r}" for t in sorted(d) for c in sorted(d[t]) for r in d[t][c] or [""]]

    have, want = lines(node_rules(s, node)), lines(kube_chains(fresh_full_sync(s, node)))
    return list(difflib.unified_diff(want, have, "fresh full sync", node, lineterm="", n=0))


def converged_rules(s: Served, node: str) -> bool:
    return not rules_diff(s, node)


# ---------------------------------------------------------------------------- tests


def test_a_killed_kube_proxy_converges_to_a_fresh_full_sync(srv: Served) -> None:
    s = srv
    web = wait_for(lambda: running(s, "app=web", 2), "two web pods Running")
    for node in NODES:
        wait_for(
            lambda node=node: converged_rules(s, node),
            f"{node} synced before the fault",
            why=lambda node=node: "\n".join(rules_diff(s, node)),
        )
    before = node_rules(s, "node-1")
    with killed_while_paused(s, "kube-proxy/node-1"):
        # while node-1 has no kube-proxy: a new Service, and a third endpoint for both
        s.kubectl("apply", "-f", "-", input=EXTRA)
        s.kubectl("scale", "deployment", "web", "--replicas=3")
        web = wait_for(lambda: running(s, "app=web", 3), "three web pods Running")
        ips = {p["status"]["podIP"] for p in web.values()}
        wait_for(
            lambda: converged_rules(s, "node-2") and all(ip in str(node_rules(s, "node-2"))
                                                         for ip in ips),
            "node-2 (its kube-proxy alive) follows the change",
        )  # fmt: skip
        # the dead kube-proxy's node kept its old rules: the fault is real
        assert node_rules(s, "node-1") == before
        assert not converged_rules(s, "node-1")
    wait_for(
        lambda: converged_rules(s, "node-1"),
        "node-1's rules are what a fresh full sync leaves, after its kube-proxy's restart",
        CONVERGE,
        why=lambda: "\n".join(rules_diff(s, "node-1")),
    )
    save = str(node_rules(s, "node-1"))
    assert all(ip in save for ip in ips) and "default/extra:http" in save
    log = s.log.read_text(errors="replace")
    assert "process=kube-proxy/node-1 pid=" in log and "exited code=-9" in log
    out = svclab(s.state, "connect", "--real", "node/node-1", "svc/default/extra:81",
                 "-n", "60", "-o", "json")  # fmt: skip
    reached = {k.split(":")[0] for k in json.loads(out)["counts"]}
    assert reached == ips


def lone(name: str) -> str:
    """A bare pod bound to node-1 (no scheduler, no controller: what the kubelet of
    node-1 alone acts on)."""
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: lone}}}}
spec:
  nodeName: node-1
  containers:
  - {{name: c, image: agnhost, ports: [{{containerPort: 8080}}]}}
"""


def node_pods(s: Served, node: str) -> dict[str, str]:
    """pod key -> podIP of the pods bound to ``node`` in the API."""
    return {
        f"default/{name}": p["status"].get("podIP", "")
        for name, p in pods(s).items()
        if p["spec"].get("nodeName") == node
    }


def kernel_pods(s: Served, node: str) -> dict[str, str]:
    """pod key -> address of the pods the realised cluster holds on ``node``: recorded
    there, with their namespace present."""
    c = cluster(s)
    return {
        k: str(c.pods[k].ip)
        for k, n in c.pod_nodes.items()
        if n == node and inode(c.pod_netns(k)) is not None
    }


def same_pods(s: Served, node: str) -> bool:
    """The API's pods of ``node`` are the kernel's, at the same addresses, and the pod
    servers answer for exactly the API's pods (of every node)."""
    c = cluster(s)
    served = set(PodServers(c.cluster_id).running())
    return node_pods(s, node) == kernel_pods(s, node) and served == {
        f"default/{n}" for n in pods(s)
    }


def test_a_killed_kubelet_converges_to_its_pods_in_the_api(srv: Served) -> None:
    s = srv
    for name in ("lone-a", "lone-b"):
        s.kubectl("apply", "-f", "-", input=lone(name))
    wait_for(lambda: running(s, "app=lone", 2), "lone-a and lone-b Running")
    wait_for(lambda: same_pods(s, "node-1"), "node-1's pods in the kernel before the fault")
    c = cluster(s)
    old_ns = {k: c.pod_netns(k) for k in ("default/lone-a", "default/lone-b")}
    old_ip = kernel_pods(s, "node-1")["default/lone-b"]
    with killed_while_paused(s, "kubelet/node-1"):
        # while node-1 has no kubelet: one pod deleted (it stays Terminating: no kubelet
        # finishes it), one force-deleted (gone from the API at once, its sandbox left
        # in the kernel), one created
        s.kubectl("delete", "pod", "lone-a", "--wait=false")
        s.kubectl("delete", "pod", "lone-b", "--grace-period=0", "--force")
        s.kubectl("apply", "-f", "-", input=lone("lone-c"))
        time.sleep(2)  # a kubelet that was alive would have acted by now
        assert pods(s, "app=lone")["lone-a"]["metadata"].get("deletionTimestamp")
        assert "default/lone-c" not in kernel_pods(s, "node-1")
        assert {"default/lone-a", "default/lone-b"} <= set(kernel_pods(s, "node-1"))
    wait_for(
        lambda: set(pods(s, "app=lone")) == {"lone-c"} and running(s, "app=lone", 1),
        "lone-a finished, lone-c Running",
    )
    wait_for(
        lambda: same_pods(s, "node-1"),
        "node-1's pods in the kernel are the API's after its kubelet's restart",
        why=lambda: (node_pods(s, "node-1"), kernel_pods(s, "node-1"),
                     sorted(PodServers(cluster(s).cluster_id).running())),
    )  # fmt: skip
    for key, netns in old_ns.items():
        assert inode(netns) is None, f"{key}'s sandbox is gone"
    ips = list(node_pods(s, "node-1").values())
    assert len(set(ips)) == len(ips), f"an address handed out twice: {ips}"
    new_ip = node_pods(s, "node-1")["default/lone-c"]
    out = svclab(s.state, "connect", "--real", "node/node-2", f"{new_ip}:8080",
                 "-n", "3", "-o", "json")  # fmt: skip
    assert json.loads(out)["counts"] == {f"{new_ip}:8080": 3}, (old_ip, out)


SOLO = """\
apiVersion: v1
kind: Pod
metadata: {name: solo, labels: {app: solo}}
spec:
  nodeName: node-1
  containers:
  - name: c
    image: agnhost
    ports: [{containerPort: 8080}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
    lifecycle:
      preStop:
        exec: {command: [sleep, "300"]}
---
apiVersion: v1
kind: Service
metadata: {name: solo}
spec:
  selector: {app: solo}
  internalTrafficPolicy: Local
  ports: [{name: http, port: 80, targetPort: 8080}]
"""


def solo_endpoint(s: Served) -> dict[str, bool]:
    out = s.kubectl(
        "get", "endpointslices", "-l", "kubernetes.io/service-name=solo", "-o", "json"
    ).stdout
    found = [e for sl in json.loads(out)["items"] for e in sl.get("endpoints") or []]
    return found[0]["conditions"] if len(found) == 1 else {}


def reached(s: Served, node: str, n: int) -> dict[str, int]:
    """``svclab connect --real node/NODE svc/default/solo:80``: endpoint (or verdict) ->
    count."""
    out = subprocess.run(
        [SVCLAB, "--state", str(s.state), "connect", "--real", f"node/{node}",
         "svc/default/solo:80", "-n", str(n), "-o", "json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    counts: dict[str, int] = json.loads(out.stdout)["counts"]
    return counts


def test_the_only_local_endpoint_terminating_still_answers_on_the_kernel(srv: Served) -> None:
    s = srv
    s.kubectl("apply", "-f", "-", input=SOLO)
    s.kubectl("wait", "--for=condition=Ready", "pod/solo", "--timeout=60s")
    ip = pods(s, "app=solo")["solo"]["status"]["podIP"]
    wait_for(lambda: converged_rules(s, "node-1"), "node-1 holds solo's rules")
    assert reached(s, "node-1", 5) == {f"{ip}:8080": 5}
    assert f"{ip}:8080" not in reached(s, "node-2", 2)  # no local endpoint there
    s.kubectl("delete", "pod", "solo", "--grace-period=25", "--wait=false")
    t0 = time.monotonic()
    wait_for(lambda: solo_endpoint(s).get("terminating"), "solo's endpoint terminating")
    assert solo_endpoint(s) == {"ready": False, "serving": True, "terminating": True}
    wait_for(
        lambda: converged_rules(s, "node-1"),
        "node-1's kube-proxy synced the terminating endpoint",
        why=lambda: "\n".join(rules_diff(s, "node-1")),
    )
    # no ready local endpoint: kube-proxy falls back to the serving, terminating one
    assert reached(s, "node-1", 5) == {f"{ip}:8080": 5}
    assert f"{ip}:8080" not in reached(s, "node-2", 2)
    assert time.monotonic() - t0 < 20, "still within the grace period"
    assert "solo" in pods(s, "app=solo")
    netns = cluster(s).pod_netns("default/solo")
    wait_for(lambda: "solo" not in pods(s, "app=solo"), "solo gone after its grace period", 60)
    assert time.monotonic() - t0 >= 20
    assert inode(netns) is None
