#!/usr/bin/env python3
"""Benchmark importing a real cluster: a 10,000-Service ``kubectl get -A -o yaml`` dump
and a 10,000-Service node dump.

* ``apply_10k_services_seconds`` — ``svclab --state DIR apply -f dump.yaml`` (a fresh
  interpreter, a fresh state) on a generated ``v1 List``: one Node, the ``kubernetes``
  Service and 10,000 ClusterIP Services (recorded ClusterIPs, server-set metadata,
  managedFields, status) — target <= 20 s.
* ``node_dump_parse_seconds`` — :func:`dataplane.nodedump.load_node_dump` on a node dump
  whose ``iptables-save.txt`` is kube-proxy's iptables-mode rules for those Services
  (``svclab rules --node``, with one endpoint each), best of 3.
* ``legacy_restore_seconds`` — ``iptables-legacy-restore`` loading the same text into a
  fresh network namespace (made and removed here), best of 3, in the same run.
* ``parse_to_legacy_restore_ratio`` — the two above (target <= 1.0);
  ``parse_to_legacy_restore_cpu_ratio`` — the same in CPU seconds (user + system), which
  the neighbours' load on a shared machine disturbs far less.

Prints one JSON object, with the load average and the targets. ``--parse-only`` skips
the apply measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N = 10_000
SVCLAB = [sys.executable, "-c", "from app.cli.main import main; main()"]


def make_dump(n: int) -> dict[str, object]:
    meta = {"creationTimestamp": "2024-05-01T10:00:00Z", "resourceVersion": "1"}
    items: list[dict[str, object]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "worker-1", "uid": "n1", **meta},
            "spec": {"podCIDR": "10.4.0.0/24", "podCIDRs": ["10.4.0.0/24"]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.128.0.5"}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "uid": "k", **meta},
            "spec": {
                "clusterIP": "10.8.0.1",
                "clusterIPs": ["10.8.0.1"],
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                "type": "ClusterIP",
            },
            "status": {"loadBalancer": {}},
        },
    ]
    for i in range(n):
        ip = f"10.8.{(i + 2) // 250 + 1}.{(i + 2) % 250 + 2}"
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": f"svc-{i}",
                    "namespace": "bench",
                    "uid": f"u{i}",
                    "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                    **meta,
                },
                "spec": {
                    "clusterIP": ip,
                    "clusterIPs": [ip],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                    "selector": {"app": f"a{i}"},
                    "type": "ClusterIP",
                },
                "status": {"loadBalancer": {}},
            }
        )
    items.insert(
        1,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "bench", "uid": "ns", **meta},
        },
    )
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def node_dump_rules(n: int) -> str:
    """kube-proxy's iptables-save for n Services with one endpoint each (rendered by
    svclab from manifests)."""
    docs: list[dict[str, object]] = [
        {
            "apiVersion": "svclab.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "b"},
            # no nfacct objects exist in the bench namespace: rules without -m nfacct
            "spec": {
                "nodes": 1,
                "allocation": "recorded",
                "nodeEnvironment": {
                    "nfacctCounters": {
                        "ct_state_invalid_dropped_pkts": False,
                        "localhost_nps_accepted_pkts": False,
                    }
                },
            },
        }
    ]
    for i in range(n):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"s{i}", "namespace": "default"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            }
        )
        docs.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"s{i}-x",
                    "namespace": "default",
                    "labels": {"kubernetes.io/service-name": f"s{i}"},
                },
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [
                    {
                        "addresses": [f"10.244.{i // 250}.{i % 250 + 2}"],
                        "conditions": {"ready": True},
                    }
                ],
            }
        )
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "m.yaml"
        f.write_text(yaml.safe_dump_all(docs))
        out = subprocess.run(
            [*SVCLAB, "rules", "-f", str(f), "--node", "node-1"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    return out.stdout


def best(fn: object, repeat: int = 3) -> tuple[float, float]:
    """Best wall and best CPU seconds of ``fn()`` (CPU: this process's, plus the child
    processes it waited for)."""
    walls, cpus = [], []
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(
            sum(b - a for a, b in ((r0.ru_utime, r1.ru_utime), (r0.ru_stime, r1.ru_stime)))
            + sum(b - a for a, b in ((c0.ru_utime, c1.ru_utime), (c0.ru_stime, c1.ru_stime)))
        )
    return min(walls), min(cpus)


def main() -> None:
    from dataplane.nodedump import load_node_dump

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--parse-only",
        action="store_true",
        help="measure the node-dump parse against iptables-legacy-restore only (no apply)",
    )
    args = ap.parse_args()
    result: dict[str, object] = {"services": N}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.parse_only:
            apply_dump(tmp, result)
        measure_node_dump(tmp, result, load_node_dump)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["targets"] = {
        "apply_10k_services_seconds": 20.0,
        "parse_to_legacy_restore_ratio": 1.0,
        "parse_to_legacy_restore_cpu_ratio": 1.0,
    }
    print(json.dumps(result))


def apply_dump(tmp: str, result: dict[str, object]) -> None:
    """``apply_10k_services_seconds``: a fresh ``svclab apply`` of the generated dump."""
    dump = Path(tmp) / "dump.yaml"
    dump.write_text(yaml.safe_dump(make_dump(N)))
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [*SVCLAB, "--state", f"{tmp}/st", "apply", "-f", str(dump)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    result["apply_10k_services_seconds"] = round(time.perf_counter() - t0, 3)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of the apply process (one process, one thread): what the wall time is on
    # an idle machine, and far less noisy than it on a shared one
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    result["apply_10k_services_cpu_seconds"] = round(cpu, 3)
    print(
        f"applied in {result['apply_10k_services_seconds']} s ({cpu:.1f} s CPU)", file=sys.stderr
    )


def measure_node_dump(tmp: str, result: dict[str, object], load_node_dump: Any) -> None:
    """``node_dump_parse_seconds`` against ``iptables-legacy-restore`` on the same text."""
    t0 = time.perf_counter()
    rules = node_dump_rules(N)
    print(f"rendered the node dump in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    nd = Path(tmp) / "node"
    nd.mkdir()
    (nd / "iptables-save.txt").write_text(rules)
    result["node_dump_rules"] = sum(1 for line in rules.splitlines() if line.startswith("-A"))
    parse, parse_cpu = best(lambda: load_node_dump(str(nd)))
    from dataplane.linux import netns as netns_mod

    # made through svclab's netns module: owned by this process, so no other
    # svclab process's leftover cleanup takes it
    with netns_mod.temporary("bench") as ns:

        def restore() -> None:
            subprocess.run(
                ["ip", "netns", "exec", ns, "iptables-legacy-restore"],
                input=rules,
                text=True,
                check=True,
            )

        legacy, legacy_cpu = best(restore)
    result["node_dump_parse_seconds"] = round(parse, 3)
    result["legacy_restore_seconds"] = round(legacy, 3)
    result["parse_to_legacy_restore_ratio"] = round(parse / legacy, 3)
    # the same in CPU seconds (user + system): on a loaded machine wall time mostly
    # measures the neighbours
    result["node_dump_parse_cpu_seconds"] = round(parse_cpu, 3)
    result["legacy_restore_cpu_seconds"] = round(legacy_cpu, 3)
    result["parse_to_legacy_restore_cpu_ratio"] = round(parse_cpu / legacy_cpu, 3)


if __name__ == "__main__":
    main()
