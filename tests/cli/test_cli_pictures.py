"""The picture commands end to end: ``topology``, ``events --diagram``, ``trace
--diagram``, ``connect --plot``; their files parse and hold what they should; bad file
names and bad combinations fail with one line and the right exit code."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli

WEB = Path(__file__).resolve().parents[2] / "examples" / "web.yaml"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    st = tmp_path_factory.mktemp("pictures") / "state"
    res = CliRunner().invoke(cli, ["--state", str(st), "apply", "-f", str(WEB)])
    assert res.exit_code == 0, res.output
    return st


def run(state: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--state", str(state), *args])


def texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def pods(state: Path) -> list[str]:
    res = run(state, "get", "pods", "-o", "name")
    return [line.split("/", 1)[1] for line in res.output.split()]


def test_topology_svg_and_png(state: Path, tmp_path: Path) -> None:
    res = run(state, "topology", str(tmp_path / "t.svg"))
    assert res.exit_code == 0, res.output
    # web's 3 pods and cluster DNS's 2 coredns pods; web, kubernetes and kube-dns
    assert res.output.strip() == f"{tmp_path / 't.svg'}: 3 node(s), 5 pod(s), 3 service(s)"
    labels = texts(tmp_path / "t.svg")
    assert {"node-1", "node-2", "node-3", "Service default/web"} <= set(labels)
    assert "Service kube-system/kube-dns" in labels
    assert all(f"pod default/{p}" in labels for p in pods(state))
    res = run(state, "topology", str(tmp_path / "t.png"), "--node", "node-2")
    assert res.exit_code == 0, res.output
    data = (tmp_path / "t.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert 300 < width < 3000 and 100 < height < 2000


def test_events_diagram_in_three_formats(state: Path, tmp_path: Path) -> None:
    for name in ("e.svg", "e.png", "e.mmd"):
        res = run(state, "events", "--diagram", str(tmp_path / name), "--for", "deploy/web")
        assert res.exit_code == 0, res.output
        assert re.fullmatch(rf"{re.escape(str(tmp_path / name))}: \d+ events\n", res.output)
    labels = texts(tmp_path / "e.svg")
    assert "timeline of deploy/web" in labels
    assert {"kubectl", "apiserver", "store", "default-scheduler", "kubelet node-1"} <= set(labels)
    assert not any("namespace/" in t for t in labels)  # --for keeps what deploy/web caused
    mmd = (tmp_path / "e.mmd").read_text().splitlines()
    assert mmd[0] == "sequenceDiagram"
    assert "    kubectl->>apiserver: Created deployment/web" in mmd
    assert any(re.fullmatch(r"    apiserver->>store: write rev \d+", line) for line in mmd)
    assert (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"


def test_trace_diagram(state: Path, tmp_path: Path) -> None:
    src = pods(state)[0]
    out = tmp_path / "tr.svg"
    res = run(
        state, "trace", "--from", f"pod/{src}", "--to", "svc/default/web:80", "--diagram", str(out)
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith("request: tcp ")  # the text trace is still printed
    labels = texts(out)
    assert any(t.startswith("tcp 10.244.") and "delivered" in t for t in labels)
    assert "1" in labels and "r1" in labels
    assert any(t.startswith("DNAT 10.96.0.2:80 -> 10.244.") for t in labels)


def test_connect_plot(state: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.png"
    src = pods(state)[0]
    res = run(state, "connect", f"pod/{src}", "svc/default/web:80", "-n", "60", "--plot", str(out))
    assert res.exit_code == 0, res.output
    data = out.read_bytes()
    assert struct.unpack(">II", data[16:24]) == (800, 450)


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (
            ("topology", "t.gif"),
            2,
            "Invalid value for 'FILE': 't.gif': unknown picture format '.gif'; use one of .svg, .png",
        ),
        (("topology", "t.svg", "--node", "nope"), 1, "--node: node nope not found"),
        (
            ("events", "--diagram", "e.txt"),
            2,
            "'e.txt': unknown picture format '.txt'; use one of .svg, .png, .mmd",
        ),
        (("events", "--diagram", "no/such/dir/e.svg"), 2, "directory 'no/such/dir' does not exist"),
        (
            ("events", "--diagram", "e.svg", "-o", "json"),
            2,
            "--diagram draws the timeline: not with -o",
        ),
        (
            ("events", "--diagram", "e.mmd", "--for", "deploy/nope"),
            1,
            "--for: deployment default/nope not found",
        ),
        (
            ("connect", "pod/x", "svc/default/web:80", "--plot", "c.jpg"),
            2,
            "'c.jpg': unknown picture format '.jpg'",
        ),
        (
            ("trace", "--from", "pod/x", "--to", "10.96.0.2:80", "--diagram", "t.pdf"),
            2,
            "'t.pdf': unknown picture format '.pdf'",
        ),
        (
            ("trace", "--from", "pod/x", "--to", "10.96.0.2:80", "--all", "--diagram", "t.svg"),
            2,
            "--diagram draws one emulated trace: not with --real, --all, --at or --flows",
        ),
        (("report", "-o", "r.pdf"), 2, "'r.pdf': unknown picture format '.pdf'; use one of .html"),
        (("report", "-o", "r.html", "--pairs", "x"), 2, "--pairs: expected SRC=DST, got 'x'"),
    ],
)
def test_bad_picture_arguments_fail_with_one_line(
    state: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    code: int,
    expected: str,
) -> None:
    """One line on stderr, the exit code, no file written, the state unchanged."""
    monkeypatch.chdir(tmp_path)
    # (the state's files; not cache/, derived data a question may fill: control/rulecache.py)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in state.iterdir() if p.is_file()}
    res = run(state, *args)
    assert res.exit_code == code, res.output
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], res.stderr
    assert not any(tmp_path.iterdir())
    assert {
        p: (p.stat().st_mtime_ns, p.read_bytes()) for p in state.iterdir() if p.is_file()
    } == before


def test_a_big_cluster_is_refused_whole_and_drawn_one_node_at_a_time(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 61}\n")
    res = run(tmp_path / "s", "topology", str(tmp_path / "big.svg"), "-f", str(f))
    assert res.exit_code == 1
    assert res.output == (
        "error: the cluster has 61 nodes, too many to draw in one picture (at most 60): "
        "draw one node with --node NAME\n"
    )
    res = run(
        tmp_path / "s", "topology", str(tmp_path / "n.svg"), "-f", str(f), "--node", "node-61"
    )
    assert res.exit_code == 0, res.output
    assert "60 other nodes" in texts(tmp_path / "n.svg")
