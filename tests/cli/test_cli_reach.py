"""``svclab reach``: the matrix of a stored cluster in each format, and ``--what-if``
checked against applying the change for real (``svclab apply`` / ``svclab delete`` on a
copy of the state) and computing the matrix again."""

from __future__ import annotations

import csv
import io
import json
import shutil
from ipaddress import ip_address
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli
from netmodel.netpolicy import PROTOCOLS
from netmodel.reach import ALL, EMPTY, PortSet

CLUSTER = """\
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
---
apiVersion: v1
kind: Namespace
metadata: {name: web, labels: {team: web}}
---
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: shop, labels: {app: api}}
spec:
  containers:
  - name: api
    image: x
    ports: [{name: http, containerPort: 8080}, {name: dns, containerPort: 53, protocol: UDP}]
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec:
  containers: [{name: db, image: x, ports: [{containerPort: 5432}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: front, namespace: web, labels: {app: front}}
spec:
  containers: [{name: front, image: x}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: shop}
spec: {podSelector: {}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-front, namespace: shop}
spec:
  podSelector: {matchLabels: {app: api}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: web}}}]
    ports: [{port: http}]
"""

#: what-if files: a new policy, one replacing a stored one, one isolating egress
CHANGES = {
    "db-from-api": """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-api, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: api}}}]
    ports: [{port: 5432}, {protocol: UDP, port: 5000, endPort: 5010}]
""",
    "replace-allow-front": """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-front, namespace: shop}
spec:
  podSelector: {matchLabels: {app: api}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: web}}}]
    ports: [{protocol: UDP, port: dns}]
""",
    "web-egress": """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-dns, namespace: web}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.96.0.0/12]}}]
    ports: [{protocol: UDP, port: 53}]
""",
}


def run(state: Path, *args: str, code: int = 0) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == code, (res.exit_code, res.output, res.stderr)
    return res


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("reach")
    (d / "cluster.yaml").write_text(CLUSTER)
    run(d / "state", "apply", "-f", str(d / "cluster.yaml"))
    return d / "state"


def _lines(res: Result) -> list[str]:
    return res.output.splitlines()


def test_text_lists_each_pair_once_sorted(state: Path) -> None:
    lines = _lines(run(state, "reach", "-n", "shop"))
    assert lines == sorted(lines) and len(set(lines)) == len(lines)
    assert "web/front => shop/api : TCP 8080" in lines
    # shop is default-deny for ingress: nothing else reaches its pods
    into_shop = [ln for ln in lines if " => shop/" in ln]
    assert into_shop == ["web/front => shop/api : TCP 8080"]
    # its pods are not isolated for egress: they reach every pod outside shop
    assert "shop/db => web/front : All Connections" in lines
    assert "shop/api => 0.0.0.0-255.255.255.255 : All Connections" in lines


def test_json_csv_md_dot_say_the_same(state: Path) -> None:
    doc = json.loads(run(state, "reach", "-n", "shop", "-o", "json").output)
    text = _lines(run(state, "reach", "-n", "shop"))
    assert len(doc["allowed"]) == len(text)
    front = next(e for e in doc["allowed"] if e["from"] == "web/front")
    assert front == {
        "from": "web/front",
        "to": "shop/api",
        "protocols": {"TCP": [[8080, 8080]], "UDP": [], "SCTP": []},
    }
    assert {e["protocols"] for e in doc["allowed"] if e["from"] != "web/front"} == {"all"}
    rows = list(csv.reader(io.StringIO(run(state, "reach", "-n", "shop", "-o", "csv").output)))
    assert rows[0] == ["src", "dst", "conn"]
    assert [f"{a} => {b} : {c}" for a, b, c in rows[1:]] == text
    md = _lines(run(state, "reach", "-n", "shop", "-o", "md"))
    assert md[0] == "| src | dst | conn |" and len(md) == len(text) + 2
    assert "| web/front | shop/api | TCP 8080 |" in md
    dot = run(state, "reach", "-n", "shop", "-o", "dot").output
    assert dot.startswith("digraph reach {")
    assert '"web/front" -> "shop/api" [label="TCP 8080"' in dot


def test_port_keeps_what_may_use_it(state: Path) -> None:
    lines = _lines(run(state, "reach", "-n", "shop", "--port", "8080"))
    assert "web/front => shop/api : TCP 8080" in lines
    assert "shop/db => web/front : TCP 8080,UDP 8080,SCTP 8080" in lines
    assert not [ln for ln in _lines(run(state, "reach", "--port", "9")) if " => shop/" in ln]


# --------------------------------------------------------------------------- what-if


def _ports(protocols: Any) -> PortSet:
    if protocols == "all":
        return ALL
    out = EMPTY
    for proto in PROTOCOLS:
        for lo, hi in protocols[proto]:
            out = out | PortSet.of(proto, lo, hi)
    return out


def _matrix(state: Path) -> dict[tuple[str, str], PortSet]:
    doc = json.loads(run(state, "reach", "-o", "json").output)
    return {(e["from"], e["to"]): _ports(e["protocols"]) for e in doc["allowed"]}


def _span(key: str) -> tuple[int, int] | None:
    if "/" in key:
        return None
    lo, hi = key.split("-")
    return int(ip_address(lo)), int(ip_address(hi))


def _refine(m: dict[tuple[str, str], PortSet], cuts: list[int]) -> dict[tuple[str, str], PortSet]:
    """Each IP range cut at ``cuts``: two matrices cut by different ipBlocks compare
    piece by piece."""

    def pieces(key: str) -> list[str]:
        span = _span(key)
        if span is None:
            return [key]
        bounds = [span[0], *(c for c in cuts if span[0] < c <= span[1]), span[1] + 1]
        return [f"{ip_address(a)}-{ip_address(b - 1)}" for a, b in pairwise(bounds)]

    return {(a, b): ps for (x, y), ps in m.items() for a in pieces(x) for b in pieces(y)}


def _cuts(*docs: dict[tuple[str, str], PortSet]) -> list[int]:
    out = set()
    for m in docs:
        for key in {k for pair in m for k in pair}:
            span = _span(key)
            if span is not None:
                out.update((span[0], span[1] + 1))
    return sorted(out)


def _said(doc: dict[str, Any]) -> dict[str, dict[tuple[str, str], PortSet]]:
    return {
        sign: {(e["from"], e["to"]): _ports(e["protocols"]) for e in doc[sign]}
        for sign in ("added", "removed")
    }


def _check(said: dict[str, Any], before: Path, after: Path) -> None:
    """``said`` (what-if's JSON) is the difference of two computed matrices, range by
    range once all are cut alike."""
    old, new = _matrix(before), _matrix(after)
    got = _said(said)
    cuts = _cuts(old, new, got["added"], got["removed"])
    old, new = _refine(old, cuts), _refine(new, cuts)
    want: dict[str, dict[tuple[str, str], PortSet]] = {"added": {}, "removed": {}}
    for key in old.keys() | new.keys():
        o, n = old.get(key, EMPTY), new.get(key, EMPTY)
        for sign, ps in (("added", n - o), ("removed", o - n)):
            if not ps.empty:
                want[sign][key] = ps
    assert {s: _refine(got[s], cuts) for s in got} == want


def _expected(before: Path, after: Path) -> dict[str, Any]:
    """The added and removed connections, from two computed matrices (same cut)."""
    old, new = _matrix(before), _matrix(after)
    added, removed = [], []
    for key in sorted(old.keys() | new.keys()):
        o, n = old.get(key, EMPTY), new.get(key, EMPTY)
        for out, ps in ((added, n - o), (removed, o - n)):
            if not ps.empty:
                out.append({"from": key[0], "to": key[1], "protocols": ps.to_json()})
    return {"added": added, "removed": removed}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_what_if_file_is_applying_it_and_computing_again(
    state: Path, tmp_path: Path, change: str
) -> None:
    f = tmp_path / f"{change}.yaml"
    f.write_text(CHANGES[change])
    said = json.loads(run(state, "reach", "--what-if", "-f", str(f), "-o", "json", code=1).output)
    copy = tmp_path / "applied"
    shutil.copytree(state, copy)
    run(copy, "apply", "-f", str(f))
    _check(said, state, copy)
    assert said["added"] or said["removed"]
    # the text form says the same, one signed line per direction of change
    text = _lines(run(state, "reach", "--what-if", "-f", str(f), code=1))
    assert len(text) == len(said["added"]) + len(said["removed"])


def test_what_if_delete_is_deleting_and_computing_again(state: Path, tmp_path: Path) -> None:
    res = run(state, "reach", "--what-if", "--delete", "allow-front", "-n", "shop", code=1)
    assert _lines(res) == ["- web/front => shop/api : TCP 8080"]
    said = json.loads(
        run(
            state, "reach", "--what-if", "--delete", "deny-all", "-n", "shop", "-o", "json", code=1
        ).output
    )
    copy = tmp_path / "deleted"
    shutil.copytree(state, copy)
    run(copy, "delete", "networkpolicy", "deny-all", "-n", "shop")
    assert said == _expected(state, copy)  # no ipBlock: the same ranges
    _check(said, state, copy)


def test_what_if_that_changes_nothing_exits_0(state: Path, tmp_path: Path) -> None:
    f = tmp_path / "same.yaml"
    f.write_text(CLUSTER.split("---\n")[-1])  # allow-front as stored
    res = run(state, "reach", "--what-if", "-f", str(f))
    assert _lines(res) == ["the change adds and removes no connection"]


def _stored(state: Path) -> tuple[str, str]:
    return (
        run(state, "get", "networkpolicies", "-A", "-o", "json").output,
        run(state, "reach").output,
    )


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        (
            CHANGES["db-from-api"].replace("endPort: 5010", "endPort: 4000"),
            "spec.ingress[0].ports[1].endPort: Invalid value: 4000: must be greater than or "
            "equal to `port`",
        ),
        (
            CHANGES["web-egress"].replace("except: [10.96.0.0/12]", "except: [192.168.0.0/16]"),
            "spec.egress[0].to[0].ipBlock.except[0]",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: shop}\n",
            "reach --what-if takes NetworkPolicy and ClusterNetworkPolicy objects only",
        ),
    ],
)
def test_bad_policy_file_is_one_line_naming_file_and_field_and_nothing_changes(
    state: Path, tmp_path: Path, doc: str, says: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(doc)
    before = _stored(state)
    res = run(state, "reach", "--what-if", "-f", str(f), code=1)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert str(f) in err and says in err, err
    assert _stored(state) == before
    if "what-if" not in says:  # svclab apply refuses it with the same words
        copy = tmp_path / "copy"
        shutil.copytree(state, copy)
        assert says in run(copy, "apply", "-f", str(f), code=1).stderr


def test_delete_of_a_policy_not_stored_and_misuse(state: Path, tmp_path: Path) -> None:
    res = run(state, "reach", "--what-if", "--delete", "nope", "-n", "shop", code=1)
    assert res.stderr.strip() == 'error: networkpolicies.networking.k8s.io "nope" not found'
    assert "go with --what-if" in run(state, "reach", "--delete", "x", code=2).stderr
    assert "needs -f FILE" in run(state, "reach", "--what-if", code=2).stderr
    assert "--real goes with --probe" in run(state, "reach", "--real", code=2).stderr
