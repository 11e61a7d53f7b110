#!/usr/bin/env python3
"""Benchmark a StatefulSet's convergence on the emulator, on the user's path.

``svclab --state DIR apply -f sts.yaml`` in a fresh process (cold: a state just made,
nothing cached) applies a headless Service ``web`` and a StatefulSet ``web`` of
``--replicas`` pods (default 100) with podManagementPolicy OrderedReady; ``apply``
returns once the control plane is idle, i.e. once the StatefulSet controller has
created every ordinal in turn, each after the one before was Running and Ready.
Then ``svclab --state DIR get pods -o json`` checks that every pod ``web-0`` …
``web-(n-1)`` is Running and Ready (the bench stops otherwise).

``converge_<n>_ordered_ready_cold_seconds``: the apply's wall clock (target: at most
5 s for 100 replicas, issue 23). Also: a fresh ``svclab --help`` (the interpreter's and
the CLI's start-up, part of that figure). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from bench_cli import svclab_script  # noqa: E402
from benchjson import emit, target  # noqa: E402

TARGET_SECONDS = 5.0

MANIFEST = """\
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  clusterIP: None
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web, namespace: default}}
spec:
  replicas: {replicas}
  serviceName: web
  podManagementPolicy: OrderedReady
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: main, image: nginx, ports: [{{containerPort: 8080}}]}}]
"""


def run(argv: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stderr}")
    return dt, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=100)
    args = ap.parse_args()
    n = args.replicas
    svclab = svclab_script()
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "sts.yaml"
        manifest.write_text(MANIFEST.format(replicas=n))
        state = str(Path(tmp) / "state")
        help_s, _ = run([*svclab, "--help"])
        apply_s, _ = run([*svclab, "--state", state, "apply", "-f", str(manifest)])
        _, out = run([*svclab, "--state", state, "get", "pods", "-o", "json"])
    items = json.loads(out)["items"]
    ready = sorted(
        p["metadata"]["name"]
        for p in items
        if p["metadata"]["name"].startswith("web-")
        and p["status"].get("phase") == "Running"
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    )
    want = sorted(f"web-{i}" for i in range(n))
    if ready != want:
        raise SystemExit(f"not converged: {len(ready)} of {n} pods Running and Ready")
    emit(
        {
            "replicas": n,
            f"converge_{n}_ordered_ready_cold_seconds": target(
                round(apply_s, 3), at_most=TARGET_SECONDS
            ),
            "cli_help_cold_seconds": round(help_s, 3),
        }
    )


if __name__ == "__main__":
    main()
