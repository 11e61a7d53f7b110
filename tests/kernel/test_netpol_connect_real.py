"""``svclab connect --real`` names the NetworkPolicy rule that decided each connection
from the kernel's own counters (mark.kernel): the policy rules of every node whose packet
counts grew while the connection was made, read back through the rendering's origins as
``svclab rules --policy-hits`` reads them. The kernel and the emulator name the same
rule for an accepted connection, one refused at the destination's ingress and one
refused at the client's own egress. Each run is a throw-away cluster (``-f``), removed
again: no namespace of it is left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.linux.netns import is_root, list_ours
from tests.netpol_connect_app import (
    ACCEPT_JSON,
    APP,
    REFUSE_EGRESS_JSON,
    REFUSE_INGRESS_JSON,
)

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

SVCLAB = str(Path(sys.executable).parent / "svclab")


def connect(app: Path, src: str, n: int, *real: str) -> dict:
    r = subprocess.run(
        [SVCLAB, "connect", "-f", str(app), src, "svc/default/web:80", "-n", str(n),
         "-o", "json", *real],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    ("src", "verdict", "want"),
    [
        ("pod/front/fe", "delivered", ACCEPT_JSON),
        ("pod/other/lurker", "refused", REFUSE_INGRESS_JSON),
        ("pod/other/intruder", "refused", REFUSE_EGRESS_JSON),
    ],
)
def test_the_kernels_counters_name_the_rule_the_emulator_names(
    tmp_path: Path, src: str, verdict: str, want: dict
) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP.replace("MODE", "iptables"))
    before = set(list_ours())
    real = connect(app, src, 3, "--real")
    assert set(list_ours()) <= before, "the throw-away cluster left namespaces"
    assert real["backend"] == "kernel"
    assert [c["verdict"] for c in real["connections"]] == [verdict] * 3
    assert [c["policy"] for c in real["connections"]] == [[want]] * 3
    assert [(v["decided_by"], v["count"]) for v in real["policy_verdicts"]] in (
        [([want["text"]], 3)],
        # delivered: one row per endpoint reached
        [([want["text"]], k) for k in real["counts"].values()],
    )
    emulated = connect(app, src, 3)
    assert [c["policy"] for c in emulated["connections"]] == [
        c["policy"] for c in real["connections"]
    ]
