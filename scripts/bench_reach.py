#!/usr/bin/env python3
"""Benchmark ``svclab reach``: the NetworkPolicy reach matrix of a synthetic cluster
(default: 10,000 pods in 500 namespaces, 1,000 policies), and what one policy added or
removed changes. Prints one JSON object.

The cluster (applied once, untimed, to a persistent state in a temporary directory):
``--namespaces`` namespaces labelled ``team=tN`` (N = i mod 10), each with ``--pods``
pods of five apps (``app=a0..a4``, a ``pod`` label each, a named port ``http`` 8080)
and two policies: a default deny (ingress; ingress and egress in every fifth
namespace) and an allow to ``app=a0`` on ``http`` and TCP 80 from ``app=a1`` of its
namespace and ``app=a2`` of every namespace of its team; every fifth namespace also
lets its pods out to UDP 53 of ``ns-000`` and TCP 443 outside 10.0.0.0/8.

Figures:

* ``reach_all_pairs_cold_seconds`` (target ≤ 10 s) and ``..._peak_rss_bytes`` (≤ 2 GiB):
  ``svclab reach -o json`` in a fresh process, the CLI path, output to a file;
  ``reach_what_if_cold_seconds``: ``svclab reach --what-if -f ONE.yaml`` likewise;
* ``changed_pairs_after_add_warm_seconds`` / ``..._after_delete_warm_seconds`` (target
  ≤ 0.1 s): :func:`netmodel.reachdelta.delta` for one policy added (``EXTRA``) / removed
  (``ns-001/allow``), over a matrix already computed in this process (the best of
  ``--repeat``), checked against computing both matrices in full
  (:func:`netmodel.reach.what_if`); ``..._after_delete_deny_warm_seconds`` removes
  ``ns-002/deny`` instead, which opens that namespace's pods to every pod and range:
  a change as large as its output (no target);
* ``matrix_compute_warm_seconds``: :class:`netmodel.reach.Matrix` over the same
  values, in this process.

Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from benchjson import emit, target  # noqa: E402

GIB = 1 << 30


def cluster_docs(namespaces: int, pods: int) -> list[dict[str, Any]]:
    """The synthetic cluster as wire documents (see the module docstring)."""
    nodes = max(2, (namespaces * pods) // 100 + 1)
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "svclab.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "reach"},
            "spec": {"nodes": nodes, "podCIDR": "10.128.0.0/9", "nodeNetwork": "172.16.0.0/12"},
        }
    ]
    for i in range(namespaces):
        ns = f"ns-{i:03d}"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"team": f"t{i % 10}"}},
            }
        )
        for j in range(pods):
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"p{j:02d}",
                        "namespace": ns,
                        "labels": {"app": f"a{j % 5}", "pod": f"p{j}"},
                    },
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "x",
                                "ports": [{"name": "http", "containerPort": 8080}],
                            }
                        ]
                    },
                }
            )
        docs.extend(policies_of(i))
    return docs


def policies_of(i: int) -> list[dict[str, Any]]:
    ns = f"ns-{i:03d}"
    egress = i % 5 == 0
    deny = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "deny", "namespace": ns},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"] + (["Egress"] if egress else [])},
    }
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {"app": "a0"}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {"podSelector": {"matchLabels": {"app": "a1"}}},
                    {
                        "namespaceSelector": {"matchLabels": {"team": f"t{i % 10}"}},
                        "podSelector": {"matchLabels": {"app": "a2"}},
                    },
                ],
                "ports": [{"protocol": "TCP", "port": "http"}, {"protocol": "TCP", "port": 80}],
            }
        ],
    }
    if egress:
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = [
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "ns-000"}
                        }
                    }
                ],
                "ports": [{"protocol": "UDP", "port": 53}],
            },
            {
                "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}],
                "ports": [{"protocol": "TCP", "port": 443}],
            },
        ]
    allow = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "allow", "namespace": ns},
        "spec": spec,
    }
    return [deny, allow]


#: the policy the what-if and the incremental figures add: a1 pods of ns-001 open to
#: every pod of team t1 on TCP 9000
EXTRA = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "extra", "namespace": "ns-001"},
    "spec": {
        "podSelector": {"matchLabels": {"app": "a1"}},
        "ingress": [
            {
                "from": [{"namespaceSelector": {"matchLabels": {"team": "t1"}}}],
                "ports": [{"protocol": "TCP", "port": 9000}],
            }
        ],
    },
}


def svclab() -> list[str]:
    return [str(Path(sys.executable).with_name("svclab"))]


#: runs a command and writes its wall time and peak RSS (bytes) to the file argv[1]
_MEASURE = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
code = subprocess.run(sys.argv[2:]).returncode
wall = time.perf_counter() - t0
use = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{wall} {use.ru_maxrss * 1024} {use.ru_utime + use.ru_stime}")
sys.exit(code)
"""


def cold(args: list[str], out: Path) -> tuple[float, int, int, float]:
    """Wall time, peak RSS (bytes), exit status and CPU time (user + system) of
    ``svclab ARGS`` in a fresh process (measured by a parent of its own), its output to
    ``out``. The CPU time says what the wall time means on a loaded machine."""
    figures = out.with_suffix(".figures")
    with out.open("w") as f:
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, str(figures), *svclab(), *args],
            stdout=f,
            stderr=subprocess.PIPE,
            check=False,
        )
    if done.returncode not in (0, 1):
        sys.exit(f"svclab {' '.join(args)}: exit {done.returncode}: {done.stderr.decode()}")
    wall, rss, cpu = figures.read_text().split()
    return float(wall), int(rss), done.returncode, float(cpu)


def warm_delta(state: Path, repeat: int) -> dict[str, Any]:
    """The incremental figures, over the stored cluster read in this process."""
    from app.cli.reach_cmd import cluster_view
    from control.session import Session
    from netmodel.netpolicy import policy_from_wire
    from netmodel.reach import Matrix, what_if
    from netmodel.reachdelta import delta

    session = Session.open(state, read_only=True)
    try:
        pods, policies, namespaces = cluster_view(session)
    finally:
        session.close()
    extra = policy_from_wire({**EXTRA, "spec": {**EXTRA["spec"], "policyTypes": ["Ingress"]}})
    t0 = time.perf_counter()
    matrix = Matrix(pods, policies, namespaces)
    compute = time.perf_counter() - t0
    out: dict[str, Any] = {"matrix_compute_warm_seconds": round(compute, 3)}
    cases: list[tuple[str, list[Any], list[str]]] = [
        ("add", [extra], []),
        ("delete", [], ["ns-001/allow"]),
        # a namespace's default deny: the world reaches its pods (output-bound: no target)
        ("delete_deny", [], ["ns-002/deny"]),
    ]
    for name, add, remove in cases:
        best = float("inf")
        changes = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            changes = delta(matrix, add=add, delete=remove)
            best = min(best, time.perf_counter() - t0)
        _, _, full = what_if(pods, policies, namespaces, add=add, delete=remove)
        if changes != full:
            sys.exit(f"delta after {name} differs from computing both matrices in full")
        figure = round(best, 4)
        out[f"changed_pairs_after_{name}_warm_seconds"] = (
            figure if name == "delete_deny" else target(figure, at_most=0.1)
        )
        out[f"changed_pairs_after_{name}"] = len(changes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespaces", type=int, default=500)
    parser.add_argument("--pods", type=int, default=20, help="pods per namespace")
    parser.add_argument("--repeat", type=int, default=5, help="runs of the warm figures")
    args = parser.parse_args()
    import yaml

    with tempfile.TemporaryDirectory(prefix="svclab-bench-reach-") as tmp:
        d = Path(tmp)
        manifest = d / "cluster.yaml"
        docs = cluster_docs(args.namespaces, args.pods)
        manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        extra = d / "extra.yaml"
        extra.write_text(yaml.safe_dump(EXTRA, sort_keys=False))
        state = d / "state"
        t0 = time.perf_counter()
        done = subprocess.run(
            [*svclab(), "--state", str(state), "apply", "-f", str(manifest)],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            sys.exit(f"apply failed: {done.stderr.decode()[-2000:]}")
        setup = time.perf_counter() - t0
        wall, rss, _, cpu = cold(["--state", str(state), "reach", "-o", "json"], d / "reach.json")
        pairs = len(json.loads((d / "reach.json").read_text())["allowed"])
        wi_wall, _, wi_code, wi_cpu = cold(
            ["--state", str(state), "reach", "--what-if", "-f", str(extra), "-o", "json"],
            d / "whatif.json",
        )
        out: dict[str, Any] = {
            "pods": args.namespaces * args.pods,
            "namespaces": args.namespaces,
            "policies": 2 * args.namespaces,
            "setup_apply_cold_seconds": round(setup, 1),
            "reach_all_pairs_cold_seconds": target(round(wall, 2), at_most=10.0),
            "reach_all_pairs_cold_cpu_seconds": round(cpu, 2),
            "reach_all_pairs_cold_peak_rss_bytes": target(rss, at_most=GIB * 2),
            "allowed_pairs": pairs,
            "reach_what_if_cold_seconds": round(wi_wall, 2),
            "reach_what_if_cold_cpu_seconds": round(wi_cpu, 2),
            "load_average": list(os.getloadavg()),
            "reach_what_if_exit_status": wi_code,
        }
        out.update(warm_delta(state, args.repeat))
    emit(out)
    missed = [v for v in out.values() if isinstance(v, dict) and v.get("met") is not True]
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
