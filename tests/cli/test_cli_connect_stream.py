"""``svclab connect`` streams: -o jsonl is one record per line then a summary line;
-o json is one document with the same records; shares come with Wilson intervals that
hold the true share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli
from app.cli.traffic_cmd import chi2_sf, chi_square, wilson_interval

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"
CLIENT = "apiVersion: v1\nkind: Pod\nmetadata: {name: client}\nspec:\n  containers: [{name: c, image: busybox}]\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    client = tmp_path_factory.mktemp("connect") / "client.yaml"
    client.write_text(CLIENT)
    return ["-f", str(WEB), "-f", str(client)]


def connect(files: list[str], *args: str) -> Result:
    res = CliRunner().invoke(
        cli, ["connect", *files, "pod/default/client", "svc/default/web:80", *args]
    )
    assert res.exit_code == 0, res.output
    return res


def test_jsonl_and_json_carry_the_same_records_and_summary(files: list[str]) -> None:
    lines = connect(files, "-n", "40", "-o", "jsonl").stdout.splitlines()
    assert len(lines) == 41
    records = [json.loads(x) for x in lines[:-1]]
    summary = json.loads(lines[-1])["summary"]
    doc = json.loads(connect(files, "-n", "40", "-o", "json").stdout)
    assert doc["connections"] == records
    assert {k: doc[k] for k in summary} == summary
    assert [r["index"] for r in records] == list(range(40))
    assert sum(summary["counts"].values()) == 40 and len(summary["counts"]) == 3
    for ep, (lo, hi) in summary["confidence_intervals"].items():
        assert lo <= summary["shares"][ep] <= hi
    assert all(r["chosen_by"].startswith("-A KUBE-SVC-") for r in records)


def test_wilson_interval_known_values() -> None:
    lo, hi = wilson_interval(50, 100)
    assert abs(lo - 0.4038) < 1e-4 and abs(hi - 0.5962) < 1e-4
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 0) == (0.0, 1.0)


def test_chi_square_agrees_with_scipy() -> None:
    """The closed-form p-value (no scipy import on connect's path) is scipy's."""
    from scipy.stats import chi2, chisquare

    for dof in range(1, 40):
        for x in (0.01, 0.5, 1.0, 3.5, 10.0, 40.0, 150.0):
            assert chi2_sf(x, dof) == pytest.approx(chi2.sf(x, dof), rel=1e-9, abs=1e-300)
    for counts in ([5, 5], [1, 0, 7], [333_512, 333_102, 333_386], [10, 20, 30, 40, 50]):
        stat, p = chi_square(counts)
        res = chisquare(counts)
        assert stat == pytest.approx(res.statistic) and p == pytest.approx(res.pvalue)
    assert chi_square([4]) == (0.0, 1.0) and chi2_sf(0.0, 3) == 1.0
