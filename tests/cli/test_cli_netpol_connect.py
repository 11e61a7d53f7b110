"""``svclab connect`` and the pod tools of ``svclab exec`` name the NetworkPolicy rule
that decided a connection, in the words of the trace's ``netpol`` hop
(:meth:`netmodel.netpolicy.Decision.describe`): the allow rule that let it in, the
policy that refused it at the destination's ingress or at the source's egress. A
connection no policy selects says nothing more, and a cluster without policies prints
what it always printed (tests/cli/test_cli_connect_stream.py and test_cli_exec.py).

Each run is the installed ``svclab`` on a state directory, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netpol_connect_app import (
    ACCEPT,
    ACCEPT_JSON,
    APP,
    REFUSE_EGRESS,
    REFUSE_EGRESS_JSON,
    REFUSE_INGRESS,
    REFUSE_INGRESS_JSON,
    without_policies,
)

SVCLAB = str(Path(sys.executable).parent / "svclab")


def svclab(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SVCLAB, "--state", str(state), *args], capture_output=True, text=True, check=False
    )


def ok(state: Path, *args: str) -> str:
    r = svclab(state, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def applied(tmp: Path, app: str) -> Path:
    (tmp / "app.yaml").write_text(app)
    state = tmp / "st"
    ok(state, "apply", "-f", str(tmp / "app.yaml"))
    return state


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield applied(tmp_path_factory.mktemp("npconnect"), APP.replace("MODE", "iptables"))


def connect_json(state: Path, src: str, dst: str = "svc/default/web:80", n: int = 6) -> dict:
    return json.loads(ok(state, "connect", src, dst, "-n", str(n), "-o", "json"))


def test_connect_json_names_the_allowing_rule_per_connection(state: Path) -> None:
    doc = connect_json(state, "pod/front/fe")
    conns = doc["connections"]
    assert {c["verdict"] for c in conns} == {"delivered"}
    assert {c["pod"] for c in conns} == {"default/web-1", "default/web-2"}  # both endpoints
    assert [c["policy"] for c in conns] == [[ACCEPT_JSON]] * 6
    verdicts = doc["policy_verdicts"]
    assert sorted(v["outcome"] for v in verdicts) == sorted(doc["counts"])
    assert all(v["decided_by"] == [ACCEPT] for v in verdicts)
    assert sum(v["count"] for v in verdicts) == 6


def test_connect_json_names_the_policy_that_refused(state: Path) -> None:
    ingress = connect_json(state, "pod/other/lurker")
    assert {c["verdict"] for c in ingress["connections"]} == {"REJECT"}
    assert [c["policy"] for c in ingress["connections"]] == [[REFUSE_INGRESS_JSON]] * 6
    assert ingress["policy_verdicts"] == [
        {"outcome": "REJECT", "decided_by": [REFUSE_INGRESS], "count": 6}
    ]
    egress = connect_json(state, "pod/other/intruder", n=2)
    assert [c["policy"] for c in egress["connections"]] == [[REFUSE_EGRESS_JSON]] * 2
    assert egress["policy_verdicts"] == [
        {"outcome": "REJECT", "decided_by": [REFUSE_EGRESS], "count": 2}
    ]


def test_connect_names_what_the_trace_names(state: Path) -> None:
    """One attribution source: the words are the trace's netpol hop's."""
    for src, want in (
        ("pod/front/fe", ACCEPT),
        ("pod/other/lurker", REFUSE_INGRESS),
        ("pod/other/intruder", REFUSE_EGRESS),
    ):
        t = json.loads(
            ok(state, "trace", "--from", src, "--to", "svc/default/web:80", "-o", "json")
        )
        notes = [
            h["note"]
            for h in t["hops"]
            if h["kind"] == "netpol" and not h["note"].startswith(("not isolated", "from the"))
        ]
        assert notes == [want]
        doc = connect_json(state, src, n=1)
        assert [d["text"] for d in doc["connections"][0]["policy"]] == notes


def test_connect_text_lists_each_outcome_with_its_deciding_rule(state: Path) -> None:
    out = ok(state, "connect", "pod/front/fe", "svc/default/web:80", "-n", "6")
    head, _, table = out.partition("\nchi-square vs equal shares:")
    table_lines = table.splitlines()[2:]
    assert table_lines[0].split() == ["OUTCOME", "COUNT", "DECIDED", "BY", "(NetworkPolicy)"]
    rows = {ln.split()[0]: ln.split(None, 2) for ln in table_lines[1:]}
    assert sorted(rows) == sorted(
        ln.split()[0] for ln in head.splitlines() if ln.startswith("10.244.")
    )
    assert {r[2] for r in rows.values()} == {ACCEPT}
    assert sum(int(r[1]) for r in rows.values()) == 6
    out = ok(state, "connect", "pod/other/lurker", "svc/default/web:80", "-n", "3")
    assert out.splitlines()[-2:] == [
        "OUTCOME   COUNT   DECIDED BY (NetworkPolicy)",
        f"REJECT    3       {REFUSE_INGRESS}",
    ]


def test_jsonl_records_carry_the_policy_too(state: Path) -> None:
    lines = ok(state, "connect", "pod/other/intruder", "svc/default/web:80", "-n", "2",
               "-o", "jsonl").splitlines()  # fmt: skip
    records = [json.loads(ln) for ln in lines]
    assert [r["policy"] for r in records[:-1]] == [[REFUSE_EGRESS_JSON]] * 2
    assert records[-1]["summary"]["policy_verdicts"][0]["decided_by"] == [REFUSE_EGRESS]


def test_a_connection_no_policy_selects_says_nothing_more(state: Path) -> None:
    doc = connect_json(state, "pod/front/fe", "svc/default/free:80", n=2)
    assert [c["policy"] for c in doc["connections"]] == [[], []]
    assert doc["policy_verdicts"] == []
    text = ok(state, "connect", "pod/front/fe", "svc/default/free:80", "-n", "2")
    assert "DECIDED BY" not in text and text.rstrip().splitlines()[-1].startswith("chi-square")


def test_without_policies_connect_prints_what_it_printed(tmp_path: Path) -> None:
    state = applied(tmp_path, without_policies(APP.replace("MODE", "iptables")))
    doc = connect_json(state, "pod/other/lurker", n=2)
    assert {c["verdict"] for c in doc["connections"]} == {"delivered"}
    assert all("policy" not in c for c in doc["connections"])
    assert "policy_verdicts" not in doc
    text = ok(state, "connect", "pod/other/lurker", "svc/default/web:80", "-n", "2")
    assert "DECIDED BY" not in text and text.rstrip().splitlines()[-1].startswith("chi-square")


@pytest.mark.parametrize("mode", ["nftables", "ipvs"])
def test_every_proxy_mode_names_the_same_rules(tmp_path: Path, mode: str) -> None:
    state = applied(tmp_path, APP.replace("MODE", mode))
    for src, want in (
        ("pod/front/fe", ACCEPT_JSON),
        ("pod/other/lurker", REFUSE_INGRESS_JSON),
        ("pod/other/intruder", REFUSE_EGRESS_JSON),
    ):
        assert [c["policy"] for c in connect_json(state, src, n=2)["connections"]] == [[want]] * 2


# --------------------------------------------------------------------------- exec


def exec_(state: Path, pod: str, *argv: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    ns, name = pod.split("/")
    return subprocess.run(
        [SVCLAB, "--state", str(state), "exec", name, "-n", ns, "--", *argv],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip


def web_ip(state: Path) -> str:
    for line in ok(state, "get", "svc", "web").splitlines()[1:]:
        return line.split()[2]
    raise AssertionError("no Service web")


def test_exec_tools_say_which_policy_refused_them(state: Path) -> None:
    ip = web_ip(state)
    r = exec_(state, "other/lurker", "curl", "-sS", f"http://{ip}/")
    assert r.returncode == 7
    curl_line, note = r.stderr.splitlines()
    assert curl_line.startswith(f"curl: (7) Failed to connect to {ip} port 80 after ")
    assert note == f"* svclab: refused by policy {REFUSE_INGRESS}"
    r = exec_(state, "other/intruder", "nc", "-z", ip, "80")
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "",
        f"* svclab: refused by policy {REFUSE_EGRESS}\n",
    )
    r = exec_(state, "other/lurker", "wget", "-q", "-O", "-", f"http://{ip}/")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"wget: can't connect to remote host ({ip}): Connection refused",
        f"* svclab: refused by policy {REFUSE_INGRESS}",
    ]


def test_exec_allowed_is_the_real_tools_output_and_explained_when_asked(state: Path) -> None:
    ip = web_ip(state)
    r = exec_(state, "front/fe", "curl", "-sS", f"http://{ip}/")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.split()[0] in ("default/web-1", "default/web-2")
    r = exec_(state, "front/fe", "nc", "-z", ip, "80", env={"SVCLAB_TRACE": "1", "PATH": ""})
    assert r.returncode == 0
    assert f"* svclab: allowed by policy {ACCEPT}\n" in r.stderr
    netpol = [
        ln.split("netpol", 1)[1].strip() for ln in r.stderr.splitlines() if "  netpol  " in ln
    ]
    assert netpol[-1] == ACCEPT  # the hops table shows the trace's netpol hop
