"""``svclab connect`` streams: -o jsonl is one record per line then a summary line;
-o json is one document with the same records; the summary's intervals are the 95%
Wilson intervals of its counts, and they hold the share the rules configure.

The emulator draws every random rule from the cluster's ``spec.seed`` (0 unless the
manifest says otherwise), so each run here is reproducible: a test that passes passes
every time. A 95% interval still misses the true share one time in twenty, so the
configured share is checked twice: in the whole run's intervals, and as the coverage of
the intervals of the run cut into blocks, which must be near 95% (a biased choice
drives it far below)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from scipy.stats import binomtest

from app.cli.main import cli
from app.stats import wilson_interval

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"
CLIENT = "apiVersion: v1\nkind: Pod\nmetadata: {name: client}\nspec:\n  containers: [{name: c, image: busybox}]\n"

# A Service of four endpoints on two nodes: kube-proxy gives each a quarter, by
# `--probability` 0.25, 1/3, 1/2 then unconditionally (iptables) or `numgen random mod 4`
# (nftables).
REPLICAS = 4
SHARES_CLUSTER = f"""\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: shares}}
spec: {{serviceCIDR: 10.96.0.0/12, podCIDR: 10.244.0.0/16, nodes: 2, proxyMode: MODE}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, labels: {{app: web}}}}
spec:
  replicas: {REPLICAS}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - {{name: web, image: agnhost, ports: [{{name: http, containerPort: 8080}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
{CLIENT}"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    client = tmp_path_factory.mktemp("connect") / "client.yaml"
    client.write_text(CLIENT)
    return ["-f", str(WEB), "-f", str(client)]


def run(*args: str) -> Result:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res


def connect(files: list[str], *args: str) -> Result:
    return run("connect", *files, "pod/default/client", "svc/default/web:80", *args)


def wilson95(k: int, n: int) -> tuple[float, float]:
    """The reference: scipy's 95% Wilson interval."""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def test_jsonl_and_json_carry_the_same_records_and_summary(files: list[str]) -> None:
    lines = connect(files, "-n", "40", "-o", "jsonl").stdout.splitlines()
    assert len(lines) == 41
    records = [json.loads(x) for x in lines[:-1]]
    summary = json.loads(lines[-1])["summary"]
    doc = json.loads(connect(files, "-n", "40", "-o", "json").stdout)
    assert doc["connections"] == records  # the same seed: the same connections
    assert {k: doc[k] for k in summary} == summary
    assert [r["index"] for r in records] == list(range(40))
    assert summary["counts"] == Counter(r["endpoint"] for r in records)
    assert sum(summary["counts"].values()) == 40 and len(summary["counts"]) == 3
    assert all(r["chosen_by"].startswith("-A KUBE-SVC-") for r in records)


def test_the_summary_is_the_95_percent_wilson_interval_of_its_counts(files: list[str]) -> None:
    """What the JSON summary and the text table print is scipy's 95% Wilson interval of
    each endpoint's count, and the chi-square test is scipy's."""
    from scipy.stats import chisquare

    summary = json.loads(connect(files, "-n", "300", "-o", "json").stdout)
    counts = summary["counts"]
    assert summary["shares"] == {k: v / 300 for k, v in counts.items()}
    for ep, k in counts.items():
        assert summary["confidence_intervals"][ep] == pytest.approx(wilson95(k, 300), abs=1e-12)
    want = chisquare(list(counts.values()))
    chi = summary["chi_square"]
    assert chi["statistic"] == pytest.approx(want.statistic) and chi["dof"] == 2
    assert chi["p_value"] == pytest.approx(want.pvalue)

    text = connect(files, "-n", "300").stdout.splitlines()
    head = text.index(next(x for x in text if x.startswith("ENDPOINT")))
    assert text[head].split() == ["ENDPOINT", "COUNT", "SHARE", "95%", "CI"]
    table = {row.split()[0]: row.split()[1:] for row in text[head + 1 : head + 4]}
    for ep, k in counts.items():
        lo, hi = wilson95(k, 300)
        assert table[ep] == [str(k), f"{k / 300:.3f}", f"{lo:.3f}-{hi:.3f}"]
    assert f"p = {want.pvalue:.4f}" in text[-1]


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_the_intervals_hold_the_configured_share(tmp_path: Path, mode: str) -> None:
    """The share the rules configure (``trace --all``: 1/4 for each of four endpoints)
    lies inside each endpoint's 95% interval of a run, and inside ~95% of the intervals
    of that run's blocks of 500 connections."""
    manifest = tmp_path / "shares.yaml"
    manifest.write_text(SHARES_CLUSTER.replace("MODE", mode))
    f = ["-f", str(manifest)]
    where = ["--from", "pod/default/client", "--to", "svc/default/web:80"]
    configured = json.loads(run("trace", *f, *where, "--all", "-o", "json").stdout)
    share = {e["endpoint"]: e["probability"] for e in configured["endpoints"]}
    assert len(share) == REPLICAS
    assert all(p == pytest.approx(1 / REPLICAS, abs=1e-9) for p in share.values())

    n, block = 8000, 500
    lines = connect(f, "-n", str(n), "-o", "jsonl").stdout.splitlines()
    records = [json.loads(x)["endpoint"] for x in lines[:-1]]
    summary = json.loads(lines[-1])["summary"]
    assert set(summary["counts"]) == set(share)
    for ep, (lo, hi) in summary["confidence_intervals"].items():
        assert lo <= share[ep] <= hi, f"{ep}: configured {share[ep]} outside [{lo}, {hi}]"

    held = missed = 0
    for start in range(0, n, block):
        counts = Counter(records[start : start + block])
        for ep, p in share.items():
            lo, hi = wilson_interval(counts[ep], block)
            held, missed = (held + 1, missed) if lo <= p <= hi else (held, missed + 1)
    # 64 intervals at 95%: 3.2 misses expected, more than 8 has odds under 2%
    assert missed <= 8, f"{missed} of {held + missed} intervals miss the configured share"
