#!/usr/bin/env python3
"""Lab 10 — a live cluster: every change reaches every node, with no further command.

`svclab serve` keeps the control plane running as API clients (lab 06); here we watch
what its kubelets and kube-proxies do to the *nodes*. With ``--real`` the nodes are
real network namespaces (`svclab serve --real` realises the cluster as
`svclab up --real` does, then each node's kubelet attaches pods with the real CNI
plugins and starts their servers, and each node's kube-proxy loads its syncs with
`iptables-restore --noflush`); without, they are the emulator's, whose rules
`svclab rules --node N` renders from the served state as it is now.

Part 1 — scale up and see the new KUBE-SEP chains appear in every node's namespace:

1. a 3-node cluster in a temporary state directory, served on a free port;
   `kubectl apply` a Deployment `web` (2 replicas) and its Service; every node's nat
   table has one KUBE-SEP chain per pod (real: ``iptables-save`` in the node's
   namespace);
2. `kubectl scale --replicas=5`: three new pods run with addresses, and every node's
   rules gain exactly their three KUBE-SEP chains (kube-proxy's partial sync: only the
   changed Service's chains are rewritten);
3. `svclab connect [--real] node/node-1 svc/default/web:80` reaches all five pods.

Part 2 — a readiness probe fails, and the endpoint leaves every node's rules:

4. `svclab pod fail POD --probe readiness` makes one pod's ``/readyz`` answer 503; its
   kubelet's readiness probe (every second, failureThreshold 2) turns the pod unready,
   the EndpointSlice marks its endpoint ``ready: false``, and every node's kube-proxy
   drops its KUBE-SEP chain; `svclab pod heal` brings it back.

Part 3 — a kubelet dies, its node goes NotReady, its pods move:

5. `svclab kubelet stop node-3` stops node-3's kubelet as a crash would. With no Lease
   renewal for the node-monitor grace period (6 s here, ``spec.nodeLifecycle``), the
   node lifecycle controller marks node-3 NotReady and taints it
   ``node.kubernetes.io/unreachable``; node-3's pods turn not ready and leave every
   node's rules; after their ``tolerationSeconds`` (5 s here) the taint-eviction
   controller evicts them and the Deployment replaces them on node-1 and node-2;
   `svclab kubelet start node-3` brings the node back Ready.

The lab is a list of steps (:data:`STEPS`) sharing one served cluster, so later parts
(a readiness probe failing, a kubelet killed) are appended as steps of their own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Checks, parse_real_flag

NODES = ("node-1", "node-2", "node-3")
CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab10}
spec:
  nodes: 3
  dns: false
  # short heartbeats so that part 3 takes seconds (upstream: 50 s grace, 5 s period)
  nodeLifecycle: {nodeMonitorGracePeriodSeconds: 6, nodeMonitorPeriodSeconds: 1,
                  nodeLeaseDurationSeconds: 4}
"""
APP = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: registry.k8s.io/e2e-test-images/agnhost:2.47
        args: [netexec, --http-port=8080]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 1
          failureThreshold: 2
      tolerations:  # leave an unreachable node after 5 s (the default is 300 s)
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute,
         tolerationSeconds: 5}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute,
         tolerationSeconds: 5}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""
TIMEOUT = 60.0
#: how long a node's rules may take to follow (well under kube-proxy's 30 s syncPeriod:
#: the change must come from the sync it caused, not from the next periodic resync)
RULES_TIMEOUT = 15.0
SEP_IP = re.compile(
    r'^-A KUBE-SEP-\w+ .*--comment "?default/web:http"? .*-j DNAT .*--to-destination ([\d.]+):',
    re.M,
)
SEP = re.compile(r'^-A (KUBE-SEP-\w+) .*--comment "?default/web:http"? .*-j DNAT', re.M)


def svclab_argv() -> list[str]:
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main())"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """Poll ``what()`` until it returns something truthy (returned) or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = what()
        except (RuntimeError, ValueError, KeyError):
            got = None
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


class Lab:
    """The served cluster the steps share: kubectl, svclab, and each node's rules."""

    def __init__(self, state: Path, kubectl: str, *, real: bool) -> None:
        self.state = state
        self.kubectl_bin = kubectl
        self.real = real
        self.kubeconfig = state / "kubeconfig"
        #: what earlier steps learnt (later steps read it): e.g. "seps" node -> chains
        self.memo: dict[str, Any] = {}

    def run(self, argv: list[str], *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=180, cwd=ROOT
        )

    def svclab(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([*svclab_argv(), "--state", str(self.state), *args])

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(
            [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args], stdin=stdin
        )

    def pods(self) -> dict[str, str]:
        """name -> podIP of the web pods Running (not terminating)."""
        proc = self.kubectl("get", "pods", "-l", "app=web", "-o", "json")
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return {
            p["metadata"]["name"]: p["status"]["podIP"]
            for p in json.loads(proc.stdout)["items"]
            if p["status"].get("phase") == "Running"
            and p["status"].get("podIP")
            and not p["metadata"].get("deletionTimestamp")
        }

    def node_rules(self, node: str) -> str:
        """The node's nat table: ``iptables-save`` in its namespace (real), or the rules
        its kube-proxy holds (``svclab rules``, emulator)."""
        if self.real:
            from app.real import RealRecord
            from dataplane.linux.realize import RealCluster
            from dataplane.linux.rules import iptables_save

            record = RealRecord.read(self.state)
            assert record is not None
            netns = RealCluster.load(record.cluster_id).node_netns(node)
            return iptables_save(netns, counters=False, table="nat")
        proc = self.svclab("rules", "--node", node)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return proc.stdout

    def seps(self) -> dict[str, set[str]]:
        """node -> the KUBE-SEP chains of default/web:http its rules hold."""
        return {n: set(SEP.findall(self.node_rules(n))) for n in NODES}

    def sep_ips(self, node: str) -> set[str]:
        """The pod addresses the node's KUBE-SEP DNAT rules for web send to."""
        return set(SEP_IP.findall(self.node_rules(node)))

    def endpoint_ready(self, ip: str) -> bool | None:
        """The ``ready`` condition of web's endpoint ``ip`` (None: no such endpoint)."""
        proc = self.kubectl(
            "get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "json"
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        for sl in json.loads(proc.stdout)["items"]:
            for ep in sl.get("endpoints") or []:
                if ip in ep.get("addresses", []):
                    return bool((ep.get("conditions") or {}).get("ready"))
        return None

    def pods_on(self, node: str) -> dict[str, str]:
        """name -> podIP of the running web pods bound to ``node``."""
        proc = self.kubectl(
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            f"spec.nodeName={node}",
            "-o",
            "json",
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return {
            p["metadata"]["name"]: p["status"].get("podIP", "")
            for p in json.loads(proc.stdout)["items"]
            if not p["metadata"].get("deletionTimestamp")
        }

    def node_ready(self, node: str) -> str:
        """The status of the node's Ready condition (True, False, Unknown)."""
        proc = self.kubectl(
            "get", "node", node, "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return proc.stdout.strip()

    def pods_when(self, n: int) -> dict[str, str] | None:
        """:meth:`pods` once ``n`` run, else None."""
        pods = self.pods()
        return pods if len(pods) == n else None

    def seps_when(self, n: int) -> dict[str, set[str]] | None:
        """:meth:`seps` once every node holds ``n`` chains, else None."""
        seps = self.seps()
        return seps if all(len(c) == n for c in seps.values()) else None


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


# --------------------------------------------------------------------------- part 1


def step_apply(lab: Lab, checks: Checks) -> None:
    print("\n1. kubectl apply: a Deployment web (2 replicas) and its Service")
    out = lab.kubectl("apply", "-f", "-", stdin=APP)
    print(indent(out.stdout or out.stderr))
    out = lab.kubectl("rollout", "status", "deployment/web", f"--timeout={int(TIMEOUT)}s")
    checks.check(out.returncode == 0, "rollout status: 2 pods Running")
    ips = wait_until(lambda: lab.pods_when(2)) or {}
    seps = wait_until(lambda: lab.seps_when(2), RULES_TIMEOUT)
    for node, chains in sorted((seps or {}).items()):
        print(f"    {node}: {' '.join(sorted(chains))}")
    checks.check(
        bool(seps), f"every node's nat table has 2 KUBE-SEP chains for web ({sorted(ips.values())})"
    )
    lab.memo["ips"], lab.memo["seps"] = ips, seps or {}


def step_scale(lab: Lab, checks: Checks) -> None:
    print("\n2. kubectl scale --replicas=5: watch the new KUBE-SEP chains appear")
    out = lab.kubectl("scale", "deployment/web", "--replicas=5")
    print(indent(out.stdout or out.stderr))
    t0 = time.monotonic()
    ips = wait_until(lambda: lab.pods_when(5)) or {}
    new_ips = set(ips.values()) - set(lab.memo["ips"].values())
    checks.check(len(new_ips) == 3, f"3 new pods Running with addresses {sorted(new_ips)}")
    seps = wait_until(lambda: lab.seps_when(5), RULES_TIMEOUT)
    took = time.monotonic() - t0
    before: dict[str, set[str]] = lab.memo["seps"]
    for node, chains in sorted((seps or {}).items()):
        print(f"    {node}: new {' '.join(sorted(chains - before.get(node, set())))}")
    checks.check(
        bool(seps) and all(before[n] < seps[n] and len(seps[n] - before[n]) == 3 for n in NODES),
        f"every node's rules gained exactly 3 KUBE-SEP chains, kept the 2 others ({took:.1f}s)",
    )
    lab.memo["ips"] = ips


def step_connect(lab: Lab, checks: Checks) -> None:
    print("\n3. connections from node-1 to the Service")
    args = ["connect", "node/node-1", "svc/default/web:80", "-n", "100", "-o", "json"]
    proc = lab.svclab(*args, *(["--real"] if lab.real else []))
    counts: dict[str, int] = {}
    if proc.returncode == 0:
        counts = {k.split(":")[0]: v for k, v in json.loads(proc.stdout)["counts"].items()}
        for ip, n in sorted(counts.items()):
            print(f"    {ip}:8080  {n} connections")
    else:
        print(indent(proc.stderr))
    want = set(lab.memo["ips"].values())
    checks.check(set(counts) == want, f"svclab connect reaches all 5 pods {sorted(want)}")


# --------------------------------------------------------------------------- part 2


def step_readiness(lab: Lab, checks: Checks) -> None:
    print("\n4. a readiness probe fails: svclab pod fail POD --probe readiness")
    ips: dict[str, str] = lab.memo["ips"]
    pod, ip = sorted(ips.items())[0]
    out = lab.svclab("pod", "fail", pod, "--probe", "readiness")
    print(indent(out.stdout or out.stderr))
    t0 = time.monotonic()
    gone = wait_until(lambda: lab.endpoint_ready(ip) is False)
    checks.check(bool(gone), f"{pod}'s endpoint {ip} turns ready: false in its EndpointSlice")
    seps = wait_until(lambda: lab.seps_when(4), RULES_TIMEOUT)
    took = time.monotonic() - t0
    for node, chains in sorted((seps or {}).items()):
        print(f"    {node}: {len(chains)} KUBE-SEP chains")
    checks.check(
        bool(seps) and all(ip not in lab.sep_ips(n) for n in NODES),
        f"{ip} left every node's rules {took:.1f}s after its /readyz began failing "
        "(probe period 1 s x failureThreshold 2, then the endpoint and kube-proxy's sync)",
    )
    out = lab.svclab("pod", "heal", pod, "--probe", "readiness")
    print(indent(out.stdout or out.stderr))
    back = wait_until(lambda: lab.seps_when(5), RULES_TIMEOUT + 5)
    checks.check(bool(back), f"healed: {ip} is back in every node's rules")


# --------------------------------------------------------------------------- part 3


def step_kubelet_dies(lab: Lab, checks: Checks) -> None:
    print("\n5. node-3's kubelet dies: svclab kubelet stop node-3")
    on3 = {n: ip for n, ip in lab.pods_on("node-3").items()}
    print(f"    node-3 runs {sorted(on3) or 'no web pod'}")
    out = lab.svclab("kubelet", "stop", "node-3")
    print(indent(out.stdout or out.stderr))
    t0 = time.monotonic()
    not_ready = wait_until(lambda: lab.node_ready("node-3") == "Unknown")
    took = time.monotonic() - t0
    out = lab.kubectl("get", "nodes")
    print(indent(out.stdout))
    checks.check(bool(not_ready), f"node-3 turns NotReady (Ready Unknown) after {took:.1f}s")
    taints = lab.kubectl("get", "node", "node-3", "-o", "jsonpath={.spec.taints[*].key}")
    checks.check(
        "node.kubernetes.io/unreachable" in taints.stdout,
        f"node-3 is tainted: {taints.stdout.strip()}",
    )
    moved = wait_until(
        lambda: (pods := lab.pods()) and len(pods) == 5 and not lab.pods_on("node-3") and pods,
        TIMEOUT + 30,
    )
    out = lab.kubectl("get", "pods", "-l", "app=web", "-o", "wide")
    print(indent(out.stdout))
    checks.check(
        bool(moved), "node-3's pods were evicted and replaced: 5 Running on node-1 and node-2"
    )
    old = set(on3.values())

    def rules_follow() -> set[str] | None:
        """The running pods' addresses once every node's rules hold exactly them (the
        replacements turn Ready at their first readiness probe, and the ReplicaSet may
        still be settling: each poll takes a fresh listing)."""
        now = set(lab.pods().values())
        if len(now) != 5 or now & old:
            return None
        return now if all(lab.sep_ips(n) == now for n in NODES) else None

    same = wait_until(rules_follow, TIMEOUT)
    checks.check(
        bool(same),
        "every node's rules hold exactly the 5 running pods (node-3's old ones are gone)",
    )
    out = lab.svclab("kubelet", "start", "node-3")
    print(indent(out.stdout or out.stderr))
    ready = wait_until(lambda: lab.node_ready("node-3") == "True")
    checks.check(bool(ready), "svclab kubelet start node-3: node-3 is Ready again")


#: the lab's steps, in order, over one served cluster
STEPS: list[Callable[[Lab, Checks], None]] = [
    step_apply,
    step_scale,
    step_connect,
    step_readiness,
    step_kubelet_dies,
]


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    checks = Checks(f"lab 10 ({'real' if real else 'emulated'})")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        checks.check(False, "kubectl is on PATH (scripts/install installs kubernetes-client)")
        checks.finish()
    assert kubectl is not None
    with tempfile.TemporaryDirectory(prefix="svclab-lab10-") as tmp:
        state = Path(tmp) / "state"
        (Path(tmp) / "cluster.yaml").write_text(CLUSTER)
        lab = Lab(state, kubectl, real=real)
        made = lab.svclab("apply", "-f", str(Path(tmp) / "cluster.yaml"))
        checks.check(made.returncode == 0, f"a 3-node cluster {made.stderr.strip()}")
        port = free_port()
        cmd = [*svclab_argv(), "--state", str(state), "serve", "--listen", f"127.0.0.1:{port}"]
        log_path = Path(tmp) / "serve.log"
        with log_path.open("w") as log:
            server = subprocess.Popen(
                [*cmd, *(["--real"] if real else [])],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        try:
            ready = wait_until(
                lambda: (
                    lab.kubeconfig.exists()
                    and lab.kubectl("get", "--raw", "/readyz").returncode == 0
                )
            )
            checks.check(
                bool(ready), f"svclab serve{' --real' if real else ''} answers on port {port}"
            )
            if ready:
                for step in STEPS:
                    step(lab, checks)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            if real:
                from app import real as real_cluster

                real_cluster.down(state)
            if checks.failed:
                print("\n--- server log (tail) ---")
                print("\n".join(log_path.read_text().splitlines()[-30:]))
    checks.finish()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
