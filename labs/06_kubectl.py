#!/usr/bin/env python3
"""Lab 06 — kubectl drives svclab: a live API server, its components as API clients.

`svclab serve` serves the Kubernetes REST API over HTTPS on a state directory and keeps
the control plane running: the controllers, the scheduler, one kubelet and one
kube-proxy per node list and watch through that API (each with its own client
certificate: system:kube-controller-manager, system:kube-scheduler, system:node:NAME,
system:kube-proxy) and react to every write. Nothing in this lab calls svclab's control
plane directly: the kubectl found on this machine does the writes.

The flow, each step checked:

1. a 2-node cluster in a temporary state directory; `svclab serve` on a free port of
   127.0.0.1 writes DIR/kubeconfig (cluster-admin, a client certificate);
2. `kubectl apply` a Deployment `web` (2 replicas) and its Service; `kubectl rollout
   status` returns once the pods are scheduled and Running — no CLI command drove them;
3. the EndpointSlice controller filled the Service's EndpointSlice, and core/v1
   Endpoints (what `kubectl describe svc` reads) list the same 2 addresses;
4. `svclab rules --node node-1` (the CLI reads the served state directory directly:
   the SQLite store is safe for concurrent processes) shows one KUBE-SEP chain per pod;
5. `kubectl scale --replicas=3`: a third pod runs, and the rules gain its KUBE-SEP chain;
6. `svclab trace --all` from node-1 to the Service reaches the new pod's address;
7. a user `jane` (`svclab kubeconfig --user jane`) gets Forbidden listing pods, with
   kube-apiserver's RBAC wording; after `kubectl create rolebinding --clusterrole=view`
   the same command succeeds.

Stopping the server (SIGTERM) ends every component; the state directory keeps the cluster.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Checks

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab06}
spec:
  serviceCIDR: 10.96.0.0/12
  podCIDR: 10.244.0.0/16
  nodes: 2
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
        resources: {requests: {cpu: 100m, memory: 64Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""

TIMEOUT = 60.0


def svclab() -> list[str]:
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main())"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lab:
    def __init__(self, state: Path, kubectl: str) -> None:
        self.state = state
        self.kubectl_bin = kubectl
        self.kubeconfig = state / "kubeconfig"

    def run(
        self, argv: list[str], *, stdin: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
        )

    def svclab(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([*svclab(), "--state", str(self.state), *args])

    def kubectl(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        cfg = kubeconfig or self.kubeconfig
        return self.run([self.kubectl_bin, "--kubeconfig", str(cfg), *args], stdin=stdin)

    def kjson(self, *args: str) -> dict:  # type: ignore[type-arg]
        proc = self.kubectl(*args, "-o", "json")
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        out: dict = json.loads(proc.stdout)  # type: ignore[type-arg]
        return out


def wait_until(what, timeout: float = TIMEOUT):  # type: ignore[no-untyped-def]
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


def sep_chains(rules_text: str) -> set[str]:
    """The KUBE-SEP chains of default/web:http in an iptables-save text."""
    return {
        m.group(1)
        for m in re.finditer(
            r'-A (KUBE-SEP-\w+) -s \S+ -m comment --comment "?default/web:http', rules_text
        )
    }


def main() -> None:
    checks = Checks("lab 06 (kubectl against svclab serve)")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl not found on PATH (scripts/install installs kubernetes-client)")
        checks.check(False, "kubectl is on PATH")
        checks.finish()
    assert kubectl is not None
    with tempfile.TemporaryDirectory(prefix="svclab-lab06-") as tmp:
        state = Path(tmp) / "state"
        (Path(tmp) / "cluster.yaml").write_text(CLUSTER)
        lab = Lab(state, kubectl)
        made = lab.svclab("apply", "-f", str(Path(tmp) / "cluster.yaml"))
        checks.check(
            made.returncode == 0, f"a 2-node cluster in {state.name}/ {made.stderr.strip()}"
        )
        port = free_port()
        log = open(Path(tmp) / "serve.log", "w")  # noqa: SIM115 - closed below
        server = subprocess.Popen(
            [*svclab(), "--state", str(state), "serve", "--listen", f"127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        try:
            steps(lab, checks, port)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                code = server.wait()
            log.close()
            checks.check(code == 0, f"SIGTERM stops the server cleanly (exit {code})")
            text = (Path(tmp) / "serve.log").read_text()
            if checks.failed:
                print("\n--- server log (tail) ---\n" + "\n".join(text.splitlines()[-40:]))
            checks.check(
                "component=kube-proxy/node-1" in text,
                "the server logged its components' steps (e.g. kube-proxy/node-1 syncs)",
            )
    checks.finish()


def steps(lab: Lab, checks: Checks, port: int) -> None:
    ready = wait_until(
        lambda: lab.kubeconfig.exists() and lab.kubectl("get", "--raw", "/readyz").returncode == 0,
        timeout=30,
    )
    checks.check(
        bool(ready), f"svclab serve answers on https://127.0.0.1:{port} (kubeconfig written)"
    )
    if not ready:
        return

    print("\n1. kubectl apply, then wait for the rollout")
    out = lab.kubectl("apply", "-f", "-", stdin=APP)
    print(textwrap_indent(out.stdout or out.stderr))
    checks.check(out.returncode == 0, "kubectl apply -f: deployment and service created")
    out = lab.kubectl("rollout", "status", "deployment/web", f"--timeout={int(TIMEOUT)}s")
    print(textwrap_indent(out.stdout or out.stderr))
    checks.check(
        out.returncode == 0,
        "rollout status: 2 pods scheduled and Running, no CLI step driving them",
    )
    pods = lab.kjson("get", "pods", "-l", "app=web")["items"]
    running = [
        p
        for p in pods
        if p.get("status", {}).get("phase") == "Running" and p["spec"].get("nodeName")
    ]
    checks.check(
        len(running) == 2,
        f"2 web pods Running, bound to {sorted({p['spec']['nodeName'] for p in running})}",
    )
    ips = {p["status"]["podIP"] for p in running}

    print("\n2. EndpointSlices and core/v1 Endpoints")

    def slice_ips() -> set[str]:
        items = lab.kjson("get", "endpointslices", "-l", "kubernetes.io/service-name=web")["items"]
        return {a for s in items for e in s.get("endpoints") or [] for a in e["addresses"]}

    got = wait_until(lambda: slice_ips() == ips)
    checks.check(bool(got), f"the EndpointSlice of web lists the pods' addresses {sorted(ips)}")
    ep = lab.kjson("get", "endpoints", "web")
    ep_ips = {a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []}
    checks.check(ep_ips == ips, f"core/v1 Endpoints web lists the same addresses {sorted(ep_ips)}")

    print("\n3. kube-proxy's rules on node-1 (svclab rules reads the served state)")

    def seps() -> set[str]:
        proc = lab.svclab("rules", "--node", "node-1")
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return sep_chains(proc.stdout)

    def seps_when(n: int) -> set[str]:
        found = seps()
        return found if len(found) == n else set()

    before = wait_until(lambda: seps_when(2)) or set()
    checks.check(
        len(before) == 2, f"node-1's nat table has 2 KUBE-SEP chains for web: {sorted(before)}"
    )

    print("\n4. kubectl scale --replicas=3")
    out = lab.kubectl("scale", "deployment/web", "--replicas=3")
    print(textwrap_indent(out.stdout or out.stderr))
    out = lab.kubectl("rollout", "status", "deployment/web", f"--timeout={int(TIMEOUT)}s")
    checks.check(out.returncode == 0, "rollout status after scale: 3 replicas available")
    pods = lab.kjson("get", "pods", "-l", "app=web")["items"]
    new_ips = {p["status"].get("podIP") for p in pods} - ips - {None}
    checks.check(len(new_ips) == 1, f"one new pod address: {sorted(new_ips)}")
    after = wait_until(lambda: seps_when(3)) or set()
    added = after - before
    checks.check(
        len(after) == 3 and len(added) == 1, f"the rules gained one KUBE-SEP chain: {sorted(added)}"
    )

    print("\n5. trace from node-1 to the Service: every endpoint, the new one included")
    proc = lab.svclab(
        "trace", "--from", "node/node-1", "--to", "svc/default/web:80", "--all", "-o", "json"
    )
    reached: dict[str, float] = {}
    if proc.returncode == 0:
        for e in json.loads(proc.stdout).get("endpoints") or []:
            reached[e["endpoint"].rsplit(":", 1)[0]] = e["probability"]
        for ip, p in sorted(reached.items()):
            print(f"    {ip}:8080  probability {p:.4f}")
    else:
        print(textwrap_indent(proc.stderr))
    checks.check(
        bool(new_ips) and new_ips <= set(reached) and len(reached) == 3,
        f"trace --all reaches the new endpoint {sorted(new_ips)}",
    )

    print("\n6. RBAC: a restricted user")
    cfg = lab.svclab("kubeconfig", "--user", "jane")
    jane = lab.state.parent / "jane.kubeconfig"
    jane.write_text(cfg.stdout)
    checks.check(cfg.returncode == 0, "svclab kubeconfig --user jane issues a client certificate")
    out = lab.kubectl("get", "pods", kubeconfig=jane)
    print(textwrap_indent(out.stderr.strip()))
    checks.check(
        out.returncode != 0
        and 'User "jane" cannot list resource "pods" in API group "" in the namespace "default"'
        in out.stderr,
        "jane is Forbidden to list pods (kube-apiserver's RBAC wording)",
    )
    out = lab.kubectl(
        "create", "rolebinding", "jane-view", "--clusterrole=view", "--user=jane", "-n", "default"
    )
    checks.check(
        out.returncode == 0, "kubectl create rolebinding jane-view --clusterrole=view --user=jane"
    )
    allowed = wait_until(
        lambda: lab.kubectl("get", "pods", kubeconfig=jane).returncode == 0, timeout=10
    )
    checks.check(bool(allowed), "after the RoleBinding jane lists the pods")
    print()


def textwrap_indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
