"""``svclab connect`` streams: -o jsonl is one record per line then a summary line;
-o json is one document with the same records; shares come with Wilson intervals that
hold the true share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli

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
