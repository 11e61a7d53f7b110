"""``svclab report`` opened in a real browser (Debian's headless Chromium): the page
renders its topology, Services table and timeline with nothing fetched, and the
explorer's selection (from the address's fragment, as a shared link carries it) decides
which traced path is drawn. A screenshot of each selection is kept as a test artefact.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from app.cli.main import cli

WEB = Path(__file__).resolve().parents[2] / "examples" / "web.yaml"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


class Element(HTMLParser):
    """The attributes and text of the element with id ``target``, and of its
    descendants (text of ``<title>`` left out: Graphviz's ids, not labels)."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "path", "polygon", "ellipse", "polyline"}

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.depth = 0
        self.attrs: dict[str, str | None] = {}
        self.texts: list[str] = []
        self.tags: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth:
            self.tags.append(tag)
            if tag not in self.VOID:
                self.depth += 1
            self._in_title = tag == "title"
        elif dict(attrs).get("id") == self.target:
            self.attrs = dict(attrs)
            self.depth = 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth:
            self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in self.VOID:
            self.depth -= 1
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self.depth and not self._in_title and data.strip():
            self.texts.append(data.strip())


def element(dom: str, target: str) -> Element:
    e = Element(target)
    e.feed(dom)
    assert e.attrs, f"no element #{target}"
    return e


def chromium(url: str, *extra: str) -> str:
    with tempfile.TemporaryDirectory(prefix="svclab-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp("report") / "report.html"
    runner = CliRunner()
    res = runner.invoke(cli, ["report", "-o", str(out), "-f", str(WEB)])
    assert res.exit_code == 0, res.output
    # 5 pods (3 web, 2 coredns: cluster DNS is on by default) x 5 Service ports (web,
    # kubernetes, kube-dns's dns, dns-tcp and metrics)
    assert res.output.strip() == f"{out}: 3 node(s), 25 traced pair(s)"
    pods = re.findall(r'<option value="pod/(default/web-[a-z0-9-]+)">', out.read_text())
    assert len(pods) == 3
    return out, pods


def test_the_page_needs_no_network(report: tuple[Path, list[str]]) -> None:
    html = report[0].read_text()
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "<link" not in html and "<script src" not in html and "@import" not in html
    assert "<!DOCTYPE svg" not in html and "<?xml" not in html


def _url(path: Path, src: str, dst: str) -> str:
    return f"{path.as_uri()}#src={quote(src, safe='')}&dst={quote(dst, safe='')}"


def test_chromium_renders_the_report_and_the_chosen_path(report: tuple[Path, list[str]]) -> None:
    path, pods = report
    shots = Path(tempfile.mkdtemp(prefix="svclab-report-shots-"))
    pairs = [
        (f"pod/{pods[0]}", "svc/default/web:80"),
        (f"pod/{pods[1]}", "svc/default/kubernetes:443"),
    ]
    views = []
    for i, (src, dst) in enumerate(pairs):
        url = _url(path, src, dst)
        dom = chromium(url, "--dump-dom")
        topo = element(dom, "topology-picture")
        assert "svg" in topo.tags and {"node-1", "node-2", "node-3"} <= set(topo.texts)
        table = element(dom, "services-table")
        assert "default/web" in table.texts and "default/kubernetes" in table.texts
        timeline = element(dom, "timeline-picture")
        assert "svg" in timeline.tags and "kubectl" in timeline.texts
        view = element(dom, "path-view")
        assert view.attrs["data-pair"] == f"{src} -> {dst}"
        assert "svg" in view.tags
        assert f"pod {src[4:]}" in view.texts  # the chosen source is drawn...
        assert "1" in view.texts and "r1" in view.texts  # ...with numbered hops and the reply
        summary = element(dom, "path-summary").texts
        assert len(summary) == 1 and summary[0].startswith("tcp 10.244.")
        views.append((tuple(view.texts), summary[0]))
        shot = shots / f"report-{i}.png"
        chromium(url, f"--screenshot={shot}", "--window-size=1400,1000")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (
            1400,
            1000,
        )
        print(f"screenshot: {shot}")
    # another selection draws another path: another source pod, another Service
    assert views[0] != views[1]
    assert any(t.startswith("DNAT 10.96.0.2:80 ->") for t in views[0][0])
    assert any(t.startswith("DNAT 10.96.0.1:443 ->") for t in views[1][0])
    assert ":80 [SYN]: delivered, to 10.244." in views[0][1]
    assert ":443 [SYN]" in views[1][1]


def test_an_unknown_pair_says_so(report: tuple[Path, list[str]]) -> None:
    path, pods = report
    dom = chromium(_url(path, f"pod/{pods[0]}", "svc/default/nope:1"), "--dump-dom")
    view = element(dom, "path-view")
    assert view.attrs["data-pair"] == "" and "svg" not in view.tags


def test_pairs_option(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(
        cli, ["report", "-o", str(out), "-f", str(WEB), "--pairs", "node/node-1=svc/default/web:80"]
    )
    assert res.exit_code == 0, res.output
    assert res.output.strip().endswith("1 traced pair(s)")
    assert '<option value="node/node-1">' in out.read_text()


def test_a_20_node_report(tmp_path: Path) -> None:
    manifest = Path(__file__).resolve().parents[1] / "app" / "pictures" / "cluster20.yaml"
    out = tmp_path / "r20.html"
    res = CliRunner().invoke(cli, ["report", "-o", str(out), "-f", str(manifest)])
    assert res.exit_code == 0, res.output
    # 10 pods (8 web, 2 coredns) x 6 Service ports (web, web-np, kubernetes, and
    # kube-dns's dns, dns-tcp and metrics: cluster DNS is on by default)
    assert res.output.strip() == f"{out}: 20 node(s), 60 traced pair(s)"
    html = out.read_text()
    pods = re.findall(r'<option value="pod/(default/web-[a-z0-9-]+)">', html)
    assert len(pods) == 8 and html.count("<template id=") == 60
    dom = chromium(_url(out, f"pod/{pods[-1]}", "svc/default/web-np:80"), "--dump-dom")
    assert {f"node-{i}" for i in range(1, 21)} <= set(element(dom, "topology-picture").texts)
    view = element(dom, "path-view")
    assert view.attrs["data-pair"] == f"pod/{pods[-1]} -> svc/default/web-np:80"
    assert f"pod {pods[-1]}" in view.texts and "Service default/web-np" in view.texts
    # the path shows only the nodes the packet crossed, not all 20
    assert 1 <= len({t for t in view.texts if re.fullmatch(r"node-\d+", t)}) <= 2
