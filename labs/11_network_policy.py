#!/usr/bin/env python3
"""Lab 11 — a default-deny goes wrong, and the what-if that would have caught it.

The classic NetworkPolicy outage: a team locks its namespace down with a default-deny
for ingress *and egress*, allows the one connection it knows about (frontend to
backend), and ships it. The frontend can still open its TCP connection to the backend
by IP, but it can no longer ask DNS anything: egress to kube-system on UDP 53 is
denied too, so every name lookup times out.

The cluster: namespace ``shop`` with ``frontend`` (app=frontend) and ``backend``
(app=backend, serving TCP 8080), and ``kube-system/coredns`` (k8s-app=kube-dns, serving
UDP and TCP 53; the probes ask the question a DNS lookup's first packet asks of the
policies: may UDP 53 leave ``shop`` for that pod?). Cluster DNS is off so that this one
pod plays it, on both backends alike.

1. Before any policy, the probed matrix (:func:`app.reachprobe.probe_matrix`: a real
   connection from each pod to each pod's IP, through the emulator or with ``--real``
   the kernel) has frontend -> backend TCP 8080 and frontend -> coredns UDP 53.
2. The change under review (``default-deny`` + ``allow-frontend``) is asked about with
   ``svclab reach --what-if -f change.yaml -o json``, which stores nothing: it exits 1
   (the change changes connections) and lists the frontend's UDP 53 to coredns among
   the connections it would remove. Nothing is stored.
3. Applied anyway: the frontend still reaches the backend, and no longer reaches DNS:
   the outage the what-if predicted, seen by real connections.
4. The fix (``allow-dns-egress``: every pod of ``shop`` may reach k8s-app=kube-dns in
   kube-system on UDP and TCP 53): its what-if lists the UDP 53 connection coming
   back; applied, DNS and the backend are reachable again, and the default-deny still
   holds where it should (the backend cannot open connections to the frontend).

Run with ``--real`` for the same on real network namespaces (needs root): the cluster
is brought up with ``svclab up --real`` in a temporary state directory, and each probe
brings the kernel's rules up to date first; it is torn down at the end, also on failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Checks, parse_real_flag

from app.reachprobe import probe_matrix

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab11}
spec: {nodes: 2, dns: false}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: frontend, namespace: shop, labels: {app: frontend}}
spec:
  nodeName: node-1
  containers:
  - {name: web, image: nginx, ports: [{name: http, containerPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: backend, namespace: shop, labels: {app: backend}}
spec:
  nodeName: node-2
  containers:
  - {name: api, image: api, ports: [{name: http, containerPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  nodeName: node-2
  containers:
  - name: coredns
    image: coredns
    ports:
    - {name: dns, containerPort: 53, protocol: UDP}
    - {name: dns-tcp, containerPort: 53, protocol: TCP}
"""

#: the change under review: deny everything in shop, allow frontend -> backend on 8080
CHANGE = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny, namespace: shop}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-frontend, namespace: shop}
spec:
  podSelector: {matchLabels: {app: backend}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: frontend}}}]
    ports: [{protocol: TCP, port: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: frontend-to-backend, namespace: shop}
spec:
  podSelector: {matchLabels: {app: frontend}}
  policyTypes: [Egress]
  egress:
  - to: [{podSelector: {matchLabels: {app: backend}}}]
    ports: [{protocol: TCP, port: 8080}]
"""

#: the fix: DNS egress for every pod of shop
FIX = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-dns-egress, namespace: shop}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
      podSelector: {matchLabels: {k8s-app: kube-dns}}
    ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]
"""

PORTS = [("TCP", 8080), ("UDP", 53)]
FRONTEND, BACKEND, DNS = "shop/frontend", "shop/backend", "kube-system/coredns"


def svclab_argv() -> list[str]:
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main())"]


class Lab:
    def __init__(self, state: Path, real: bool) -> None:
        self.state, self.real = state, real

    def svclab(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*svclab_argv(), "--state", str(self.state), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )

    def must(self, *args: str, stdin: str | None = None) -> str:
        p = self.svclab(*args, stdin=stdin)
        if p.returncode != 0:
            raise RuntimeError(f"svclab {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def reaches(self, src: str, dst: str, proto: str, port: int) -> bool:
        m = probe_matrix(self.state, ports=PORTS, real=self.real)
        return (proto, port) in m[(src, dst)]

    def policies(self) -> list[str]:
        out = self.must("get", "networkpolicies", "-A", "-o", "name")
        return sorted(line for line in out.splitlines() if line.strip())


def covers(protocols: Any, proto: str, port: int) -> bool:
    """Does a reach JSON ``protocols`` value (``"all"`` or ``{"UDP": [[lo, hi], ...]}``)
    include ``proto``/``port``?"""
    if protocols == "all":
        return True
    return any(lo <= port <= hi for lo, hi in protocols.get(proto, ()))


def what_if(lab: Lab, path: Path) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """``svclab reach --what-if -f PATH -o json``: its exit code and its changes
    (``{"added": [...], "removed": [...]}``, each ``{"from", "to", "protocols"}``),
    printed one line each as the text form shows them."""
    p = lab.svclab("reach", "--what-if", "-f", str(path), "-o", "json")
    try:
        changes = json.loads(p.stdout) if p.stdout.strip() else {}
    except json.JSONDecodeError:
        changes = {}
    if p.returncode not in (0, 1):
        print(f"   svclab reach --what-if: exit {p.returncode}: {p.stderr.strip()}")
    for sign, key in (("+", "added"), ("-", "removed")):
        for e in changes.get(key, []):
            print(f"   {sign} {e['from']} => {e['to']} : {e['protocols']}")
    return p.returncode, changes


def lists(changes: dict[str, list[dict[str, Any]]], key: str, src: str, dst: str) -> bool:
    """``changes[key]`` has ``src`` -> ``dst`` on UDP 53."""
    return any(
        e["from"] == src and e["to"] == dst and covers(e["protocols"], "UDP", 53)
        for e in changes.get(key, [])
    )


def run(lab: Lab, c: Checks, files: Path) -> None:
    print("1. no policy yet")
    c.check(lab.reaches(FRONTEND, BACKEND, "TCP", 8080), "frontend -> backend TCP 8080 connects")
    c.check(lab.reaches(FRONTEND, DNS, "UDP", 53), "frontend -> coredns UDP 53 answers")

    print("2. svclab reach --what-if -f change.yaml (default-deny + allow-frontend)")
    change = files / "change.yaml"
    change.write_text(CHANGE)
    code, changes = what_if(lab, change)
    c.check(code == 1, f"the what-if exits 1: the change changes connections (got {code})")
    c.check(
        lists(changes, "removed", FRONTEND, DNS),
        "it lists frontend -> coredns UDP 53 among the connections removed",
    )
    c.check(lab.policies() == [], "the what-if stored nothing")

    print("3. applied anyway")
    lab.must("apply", "-f", str(change))
    c.check(
        lab.reaches(FRONTEND, BACKEND, "TCP", 8080), "frontend -> backend TCP 8080 still connects"
    )
    c.check(
        not lab.reaches(FRONTEND, DNS, "UDP", 53),
        "frontend -> coredns UDP 53 is denied: DNS is down",
    )

    print("4. the fix: allow-dns-egress")
    fix = files / "fix.yaml"
    fix.write_text(FIX)
    code, changes = what_if(lab, fix)
    c.check(code == 1, f"its what-if exits 1 (got {code})")
    c.check(
        lists(changes, "added", FRONTEND, DNS),
        "it lists frontend -> coredns UDP 53 among the connections added back",
    )
    lab.must("apply", "-f", str(fix))
    c.check(lab.reaches(FRONTEND, DNS, "UDP", 53), "frontend -> coredns UDP 53 answers again")
    c.check(lab.reaches(FRONTEND, BACKEND, "TCP", 8080), "frontend -> backend TCP 8080 connects")
    c.check(
        not lab.reaches(BACKEND, FRONTEND, "TCP", 8080),
        "backend -> frontend TCP 8080 stays denied (the default-deny holds)",
    )


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 11" + (" (real)" if real else ""))
    with tempfile.TemporaryDirectory(prefix="svclab-lab11-") as tmp:
        lab = Lab(Path(tmp) / "state", real)
        lab.must("apply", "-f", "-", stdin=CLUSTER)
        try:
            if real:
                lab.must("up", "--real")
            run(lab, c, Path(tmp))
        except RuntimeError as e:
            c.check(False, str(e))
        finally:
            if real:
                lab.svclab("down")
    c.finish()


if __name__ == "__main__":
    main()
