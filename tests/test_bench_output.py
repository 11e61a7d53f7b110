"""What the benchmarks print: every timed key says cold or warm, every target sits beside
its figure, and a target not measured is never met (scripts/benchjson.py).

The checker is tested on outputs built to break each rule; then each benchmark runs at
a tiny size and its JSON must pass the checker and carry the figures its targets name
(the cold ones above all). The figures themselves are not asserted: a unit test never
judges time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

from benchjson import problems, target  # noqa: E402

# -- the checker ---------------------------------------------------------------------


def test_a_conforming_output_passes() -> None:
    out = {
        "trace_cold_seconds": target(1.2, at_most=1.0),
        "trace_warm_median_seconds": 0.4,
        "peak_rss_bytes": target(10, at_most=20),
        "writes_warm_per_second": target(None, at_least=1000),
        "where": {"list_pods_cold": {"wall_s": 0.3, "all_runs_s": [0.1, 0.2]}},
        "cli": {"help": {"cold_s": 0.1, "warm_best_s": 0.09}},
        "endpoints_per_service": 5,
        "load_average": [1.0, 2.0, 3.0],
        "rss_flat": True,
    }
    assert problems(out) == []


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ({"list_pods_seconds": 0.5}, "list_pods_seconds: a timed key says neither"),
        ({"get_pod_p99_ms": target(3, at_most=10)}, "get_pod_p99_ms: a timed key"),
        ({"writes_per_second": 10.0}, "writes_per_second: a timed key"),
        ({"to_sqlite_ratio": 2.0}, "to_sqlite_ratio: a timed key"),
        ({"where": {"get_pod": {"wall_s": 0.1}}}, "where.get_pod.wall_s: a timed key"),
        ({"x": {"all_runs_s": [0.1, 0.2]}}, "x.all_runs_s: a timed key"),
        (
            {"ratio_cold": {"value": None, "at_most": 1.0, "met": True}},
            "ratio_cold: met is True for a figure not measured",
        ),
        (
            {"ratio_cold": {"value": 2.0, "at_most": 1.0, "met": True}},
            "ratio_cold: met is True for 2.0 against 1.0",
        ),
        (
            {"ratio_cold": {"value": 2.0, "at_most": 1.0, "met": None}},
            "ratio_cold: met must be true or false",
        ),
        ({"targets_met": {"a": True}}, "targets_met: a verdict away from its figure"),
        ({"x": {"ratio_met": True}}, "x.ratio_met: a verdict away from its figure"),
    ],
)
def test_the_checker_names_each_break(out: dict[str, Any], says: str) -> None:
    found = problems(out)
    assert any(line.startswith(says) for line in found), found


def test_target_is_met_only_when_measured() -> None:
    assert target(None, at_most=1.0)["met"] is None
    assert target(0.5, at_most=1.0)["met"] is True
    assert target(1.5, at_most=1.0)["met"] is False
    assert target(999, at_least=1000)["met"] is False
    with pytest.raises(ValueError, match="exactly one"):
        target(1.0)


# -- every benchmark, tiny ------------------------------------------------------------

#: per benchmark: its arguments for a run of seconds, whether it needs the kernel
#: (network namespaces), and keys its output must hold (dotted for nested ones)
TINY: dict[str, tuple[list[str], bool, list[str]]] = {
    "bench_api.py": (
        [
            "--nodes",
            "6",
            "--pods",
            "40",
            "--deployments",
            "2",
            "--services",
            "4",
            "--watchers",
            "3",
            "--samples",
            "10",
            "--clients",
            "2",
            "--write-seconds",
            "0.5",
            "--settle",
            "5",
        ],
        False,
        ["list_pods_cold_seconds", "list_pods_table_cold_seconds", "list_pods_warm_best_seconds"],
    ),
    "bench_apply_kinds.py": (
        ["--objects", "200", "--configmaps", "100"],
        False,
        ["apply_10k_kinds_cold_seconds", "list_30k_configmaps_cold_seconds"],
    ),
    "bench_cli.py": (["--repeat", "1"], False, ["bytecode_cache.trace.cold_s"]),
    "bench_connect.py": (
        ["--n", "2000", "--rounds", "1"],
        False,
        ["connect_2k_cold_seconds", "connect_2k_cold_peak_rss_bytes"],
    ),
    "bench_live.py": (
        [
            "--nodes",
            "3",
            "--services",
            "6",
            "--deployments",
            "2",
            "--replicas",
            "1",
            "--scale",
            "1",
            "--timeout",
            "120",
        ],
        False,
        [
            "emulated_warm.network_programming_p50_seconds",
            "emulated_warm.network_programming_p99_seconds",
            "emulated_warm.readiness_to_rules_p99_seconds",
            "emulated_warm.kill_kube_proxy_converge_seconds",
            "setup.apply_converge_cold_seconds",
        ],
    ),
    "bench_control_plane.py": (
        ["--nodes", "4", "--deployments", "2", "--pods", "8", "--services", "4"],
        False,
        ["converge_cold_seconds", "scheduler_cold_pods_per_second"],
    ),
    "bench_daemonset.py": (["--nodes", "20"], False, ["daemonset_converge_cold_seconds"]),
    "bench_exec.py": (
        ["--samples", "2"],
        False,
        ["exec_curl_cold_server_ms", "exec_curl_warm_server_p50_ms"],
    ),
    "bench_logs.py": (
        ["--samples", "3"],
        False,
        ["follow_first_line_cold_ms", "request_to_follow_line_warm_p95_ms"],
    ),
    "bench_dns.py": (
        ["--seconds", "0.05", "--rounds", "1"],
        True,
        [
            "emulated_warm_queries_per_second",
            "emulated_cold_queries_per_second",
            "emulated_cold_cli_dig_seconds",
            "emulated_to_real_warm_latency_ratio",
        ],
    ),
    "bench_import.py": (
        ["--services", "100"],
        True,
        [
            "apply_10k_services_cold_seconds",
            "node_dump_parse_cold_best_seconds",
            "node_dump_parse_warm_best_seconds",
            "parse_to_legacy_restore_cold_ratio",
        ],
    ),
    "bench_netfilter.py": (
        ["--services", "100", "--small", "20", "--rounds", "1"],
        True,
        [
            "parse_vs_legacy_restore.parse_cold_best_seconds",
            "parse_vs_legacy_restore.parse_warm_best_seconds",
            "parse_to_legacy_restore_cold_ratio",
        ],
    ),
    "bench_packets.py": (
        ["--services", "50", "--small", "10", "--seconds", "0.05", "--rounds", "1"],
        False,
        ["full_path_connections_warm_per_second"],
    ),
    "bench_pictures.py": (["--repeat", "1"], False, ["nodes_1000.topology_node.cold_s"]),
    "bench_netpol_connect.py": (
        ["--namespaces", "3", "--pods", "2", "--repeat", "1"],
        False,
        ["connect_cold_ratio"],
    ),
    "bench_reach.py": (
        ["--namespaces", "4", "--pods", "5", "--repeat", "1"],
        False,
        [
            "reach_all_pairs_cold_seconds",
            "reach_all_pairs_cold_peak_rss_bytes",
            "reach_what_if_cold_seconds",
            "changed_pairs_after_add_warm_seconds",
            "changed_pairs_after_delete_warm_seconds",
        ],
    ),
    "bench_realpod.py": (
        ["--runs", "2", "--megabytes", "4", "--rounds", "1"],
        True,
        [
            "exec_curl_cold_ms",
            "exec_curl_warm_p50_ms",
            "port_forward_download_warm_megabytes_per_s",
            "kubectl_exec_curl_warm_server_p50_ms",
            "kubectl_port_forward_upload_warm_megabytes_per_s",
        ],
    ),
    "bench_realize.py": (
        ["--nodes", "2", "--pods-per-node", "2", "--connections", "4"],
        True,
        ["up_cold_seconds", "emulated_to_real_connection_warm_ratio"],
    ),
    "bench_rules.py": (
        ["--services", "100", "--repeat", "1", "--no-kernel"],
        False,
        ["full_render_cold_best_seconds", "render_to_legacy_restore_cold_ratio"],
    ),
    "bench_scale.py": (
        ["--nodes", "3", "--pods", "8", "--deployments", "2", "--services", "4", "--repeat", "1"],
        False,
        [
            "apply_cluster_cold_seconds",
            "trace_cold_seconds",
            "trace_cold_peak_rss_bytes",
            "trace_warm_median_seconds",
            "trace_warm_peak_rss_bytes",
            "apply_one_service_cold_seconds",
            "apply_one_service_cold_peak_rss_bytes",
        ],
    ),
    "bench_statefulset.py": (
        ["--replicas", "3"],
        False,
        ["converge_3_ordered_ready_cold_seconds"],
    ),
    "bench_store.py": (
        ["--writes", "20", "--list", "50", "--only", "memory", "sqlite", "etcd_1_member"],
        False,
        ["sqlite.list_30k_cold_seconds", "etcd_1_member.etcd_overhead_warm_ratio"],
    ),
}

ELSEWHERE: set[str] = set()


def test_every_benchmark_is_run_here() -> None:
    benches = {p.name for p in SCRIPTS.glob("bench_*.py")}
    assert benches - ELSEWHERE == set(TINY)


def _dig(out: dict[str, Any], dotted: str) -> Any:
    node: Any = out
    for part in dotted.split("."):
        assert part in node, f"{dotted}: no {part!r} in {sorted(node)}"
        node = node[part]
    return node


def _params() -> list[Any]:
    out = []
    for name, (args, kernel, _) in TINY.items():
        marks = [pytest.mark.slow]
        if kernel:
            marks.append(pytest.mark.kernel)
        out.append(pytest.param(name, args, id=name, marks=marks))
    return out


@pytest.mark.parametrize(("name", "args"), _params())
def test_benchmark_output_says_cold_or_warm(name: str, args: list[str]) -> None:
    if TINY[name][1] and os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if name == "bench_store.py" and shutil.which("etcd") is None:
        pytest.skip("needs etcd on PATH")
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    # 1: a target missed (bench_rules, bench_control_plane, bench_store say so)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert problems(out) == []
    for key in TINY[name][2]:
        _dig(out, key)
    if name == "bench_rules.py":  # --no-kernel: the legacy ratio was never measured
        ratio = out["render_to_legacy_restore_cold_ratio"]
        assert ratio["value"] is None and ratio["met"] is None
        assert done.returncode == 1  # an unmeasured target is not met
