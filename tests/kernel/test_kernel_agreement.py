"""svclab's netfilter parsers accept exactly what the kernel accepts.

Every entry of the corpus (``tests/data/netfilter-corpus/``, read by
``tests/dataplane/netfilter/nfcorpus.py``) goes to the kernel's own tools in fresh
``svclab-`` namespaces: iptables payloads to ``iptables-nft-restore`` (nf_tables back end)
and ``iptables-legacy-restore`` (x_tables through libiptc), nft scripts to
``nft --check -f`` (the kernel validates the whole transaction, then it is aborted).
The same entries go to svclab's parsers. For each entry:

* the kernel does what the corpus records (``expect=``), on every back end;
* svclab accepts it when the kernel accepts it (or refuses it as unsupported, when the
  corpus says so), and refuses it when the kernel refuses it;
* when the kernel names the failing line, svclab's error names the same line.

svclab's own renderers' output for ``cluster.yaml`` (iptables, ipvs and nftables modes)
joins the corpus as accepted entries. ipsets and nfacct objects that rules refer to are
created in each namespace first (``ipsets.save``), as a node would have them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataplane" / "netfilter"))
from nfcorpus import CORPUS, Entry, Verdict, load, svclab_verdict

from dataplane.linux import netns as ns
from dataplane.linux.netns import run_in

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

# nfacct objects kube-proxy creates at start-up (the rules' -m nfacct needs them)
NFACCT = ("ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts")
NFACCT_ADD = r"""
import socket, struct, sys
for name in sys.argv[1:]:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
    nb = name.encode() + b"\0"
    attr = struct.pack("HH", 4 + len(nb), 1) + nb
    attr += b"\0" * (-len(attr) % 4)
    body = struct.pack("BBH", 0, 0, 0) + attr
    s.send(struct.pack("IHHII", 16 + len(body), 7 << 8, 0x1 | 0x4 | 0x400, 1, 0) + body)
    err = struct.unpack("i", s.recv(4096)[16:20])[0]
    if err not in (0, -17):
        raise SystemExit(f"nfacct {name}: errno {-err}")
"""

BACKENDS = {
    "nft": {4: "iptables-nft-restore", 6: "ip6tables-nft-restore"},
    "legacy": {4: "iptables-legacy-restore", 6: "ip6tables-legacy-restore"},
}
_KERNEL_LINE = re.compile(r"(?:Error occurred at line: |line )(\d+)|^[^:\s]*:(\d+):\d+", re.M)


def rendered_entries() -> list[Entry]:
    """svclab's renderers' payloads for ``cluster.yaml``, one entry per mode, printed by
    the real CLI (``svclab rules --restore-input``)."""
    exe = Path(sys.executable).with_name("svclab")
    cmd = [str(exe)] if exe.exists() else [shutil.which("svclab") or "svclab"]
    out = []
    for mode in ("iptables", "ipvs", "nftables"):
        proc = subprocess.run(
            [
                *cmd,
                "rules",
                "-f",
                str(CORPUS / "cluster.yaml"),
                "--node",
                "node-1",
                "--mode",
                mode,
                "--restore-input",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        kind = "nft" if mode == "nftables" else "iptables"
        text = proc.stdout
        if mode == "ipvs":  # this kernel has no IPVS, hence no "-m ipvs" match
            text = "".join(ln for ln in text.splitlines(True) if " -m ipvs " not in ln)
        out.append(Entry(f"svclab-render-{mode}", kind, 4, text, "accept", False, "cluster.yaml"))
    return out


@pytest.fixture(scope="module")
def namespaces() -> Iterator[dict[str, str]]:
    """One fresh namespace per back end (iptables nft, iptables legacy, nft), with the
    corpus's ipsets and kube-proxy's nfacct objects; all removed at the end."""
    made: dict[str, str] = {}
    try:
        for role in ("nft", "legacy", "nftcli"):
            name = ns.unique_name("ka")
            ns.create(name)
            made[role] = name
            run_in(name, ["ipset", "restore"], input=(CORPUS / "ipsets.save").read_text())
            run_in(name, [sys.executable, "-c", NFACCT_ADD, *NFACCT])
        yield made
    finally:
        for name in made.values():
            ns.remove(name)


def kernel_verdict(netns: str, argv: list[str], text: str) -> Verdict:
    proc = run_in(netns, argv, input=text, check=False, timeout=30)
    if proc.returncode == 0:
        return Verdict(True)
    msg = (proc.stderr + proc.stdout).strip()
    m = _KERNEL_LINE.search(msg)
    line = int(m.group(1) or m.group(2)) if m else None
    return Verdict(False, line, msg.splitlines()[0] if msg else f"exit {proc.returncode}")


def _entries() -> list[Entry]:
    return load()


def test_corpus_is_not_trivial() -> None:
    entries = load()
    assert sum(e.expect == "refuse" for e in entries if e.kind == "iptables") >= 50
    assert sum(e.expect == "refuse" for e in entries if e.kind == "nft") >= 20
    assert sum(e.expect == "accept" for e in entries) >= 30


def test_iptables_corpus_agrees_with_the_kernel(namespaces: dict[str, str]) -> None:
    entries = [e for e in load("iptables")] + [
        e for e in rendered_entries() if e.kind == "iptables"
    ]
    # both back ends, always: Debian's iptables package (scripts/install) has them all
    missing = [t for tools in BACKENDS.values() for t in tools.values() if not shutil.which(t)]
    assert not missing, f"missing {missing}: install Debian's iptables package"
    problems: list[str] = []
    for e in entries:
        mine = svclab_verdict(e)
        for backend, tools in BACKENDS.items():
            k = kernel_verdict(namespaces[backend], [tools[e.family]], e.text)
            want = e.legacy_expect if backend == "legacy" else e.expect
            problems += _compare(e, want, mine, k, f"iptables-{backend}")
    assert not problems, "\n".join(problems)


def test_nft_corpus_agrees_with_the_kernel(namespaces: dict[str, str]) -> None:
    entries = load("nft") + [e for e in rendered_entries() if e.kind == "nft"]
    problems: list[str] = []
    for e in entries:
        mine = svclab_verdict(e)
        # applied for real (``--check`` skips the kernel's validation of the chains
        # a rule's expressions may run in), then flushed for the next entry
        k = kernel_verdict(namespaces["nftcli"], ["nft", "-f", "-"], e.text)
        run_in(namespaces["nftcli"], ["nft", "flush", "ruleset"])
        problems += _compare(e, e.expect, mine, k, "nft")
    assert not problems, "\n".join(problems)


def _compare(e: Entry, want: str, mine: Verdict, kernel: Verdict, tool: str) -> list[str]:
    """Disagreements between the corpus record (``want``, for this tool), the kernel's
    tool and svclab. A kernel error reported at a ``COMMIT`` line is one found when the
    table was committed: svclab names the offending rule's line instead, which must lie
    before it."""
    where = f"{e.id} ({e.where})"
    out = []
    if kernel.accepted != (want == "accept"):
        out.append(
            f"{where}: corpus says {want}, {tool} {'accepts' if kernel.accepted else 'refuses: ' + kernel.message}"
        )
    if e.svclab_expect == "accept":
        if e.unsupported:
            if mine.accepted or not mine.unsupported:
                out.append(f"{where}: marked unsupported, svclab: {mine}")
        elif not mine.accepted:
            out.append(f"{where}: {tool} accepts, svclab refuses: {mine.message}")
        return out
    if mine.accepted:
        out.append(f"{where}: the kernel refuses ({kernel.message}), svclab accepts")
    elif mine.unsupported and e.kind == "iptables":
        # (nft text: svclab's nft grammar is a subset, so a word it does not know is
        # "unsupported" where nft calls it a syntax error; both refuse)
        out.append(
            f"{where}: the kernel refuses ({kernel.message}), svclab calls it unsupported: {mine.message}"
        )
    elif not kernel.accepted and kernel.line is not None and mine.line != kernel.line:
        lines = e.text.splitlines()
        at_commit = 0 < kernel.line <= len(lines) and lines[kernel.line - 1].strip() == "COMMIT"
        if not (at_commit and mine.line is not None and mine.line < kernel.line):
            out.append(
                f"{where}: {tool} refuses line {kernel.line} ({kernel.message}), svclab line {mine.line}: {mine.message}"
            )
    return out


NOMATCH_SET = """create svclab-holes hash:net family inet hashsize 1024 maxelem 65536
add svclab-holes 10.0.0.0/8
add svclab-holes 10.1.0.0/16 nomatch
add svclab-holes 10.1.2.0/24
add svclab-holes 192.168.0.0/24 nomatch
"""


def test_ipset_nomatch_agrees_with_the_kernel(namespaces: dict[str, str]) -> None:
    """``ipset test`` in the kernel and svclab's set agree on every address probed."""
    from ipaddress import ip_address

    from dataplane.netfilter.ipset import parse_ipset_save

    netns = namespaces["nftcli"]
    run_in(netns, ["ipset", "restore"], input=NOMATCH_SET)
    mine = parse_ipset_save(NOMATCH_SET)["svclab-holes"]
    try:
        for addr in ("10.2.0.1", "10.1.0.1", "10.1.2.3", "10.1.3.1", "192.168.0.7", "11.0.0.1"):
            kernel = run_in(netns, ["ipset", "test", "svclab-holes", addr], check=False)
            assert (kernel.returncode == 0) == mine.contains((int(ip_address(addr)),)), addr
    finally:
        run_in(netns, ["ipset", "destroy", "svclab-holes"], check=False)
