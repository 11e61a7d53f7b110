"""``meta mark set`` against the kernel: each form of the statement (a constant, the
mark combined with ``and|or|xor|<<|>>``, constants folded, ``mark set``, the mark read
from the connection) sets the mark that the kernel's later rules see, and svclab's
evaluation of the same ruleset sees the same (rule counters compared, packet for packet,
over a real UDP exchange through a router namespace: :mod:`tests.kernel.nftlab`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dataplane.linux import netns as ns
from tests.kernel.nftlab import RouterLab, emulate, router_lab

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

#: the mark every packet has when the statement runs (set in prerouting)
BASE = 0x1234

#: (statement, the mark the packets have after it: what the probe rules test for)
FORMS = [
    ("meta mark set 0x4000", 0x4000),
    ("mark set 7", 7),
    ("meta mark set mark or 0x4000", BASE | 0x4000),
    ("meta mark set meta mark and 0xff", BASE & 0xFF),
    ("meta mark set mark xor 0x1230", BASE ^ 0x1230),
    ("meta mark set meta mark ^ 0x00004000", BASE ^ 0x4000),
    ("meta mark set mark and 0xff00 or 0x1", (BASE & 0xFF00) | 1),
    ("meta mark set 1 or 2", 3),
    ("meta mark set mark << 4", BASE << 4),
    ("meta mark set mark >> 4", BASE >> 4),
    ("meta mark set 0xffffffff", 0xFFFFFFFF),
    ("meta mark set 010", 8),
]


def ruleset(statement: str, want: int) -> str:
    return f"""table ip t {{
    chain pre {{
        type filter hook prerouting priority mangle; policy accept;
        meta mark set {BASE:#x}
    }}
    chain filt {{
        type filter hook forward priority filter; policy accept;
        {statement}
        meta mark {want:#x} counter
        meta mark != {want:#x} counter
        meta mark & 0x4000 == 0x4000 counter
        meta mark {want:#x} udp dport 5353 counter drop
    }}
}}
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[RouterLab]:
    with router_lab() as lab:
        yield lab


@pytest.mark.parametrize(("statement", "want"), FORMS, ids=[f for f, _ in FORMS])
def test_meta_mark_set_agrees_with_kernel(lab: RouterLab, statement: str, want: int) -> None:
    text = ruleset(statement, want)
    lab.load(text)
    answered = lab.exchange(3)
    kernel = lab.counters()
    hits, _marks, got = emulate(text, 3)
    svclab = {k: hits.get(k, 0) for k in kernel}
    assert (svclab, got) == (kernel, answered)
    # the statement did set that mark: every request matched the probe and was dropped
    assert kernel[("ip t", "filt", 2)] == 3 and answered == 0


def test_meta_mark_set_ct_mark_restores_the_connection_mark_on_replies(lab: RouterLab) -> None:
    """``ct mark set meta mark`` on the request, ``meta mark set ct mark`` on the reply:
    the reply (which arrives without a mark) carries the request's mark."""
    text = """table ip t {
    chain filt {
        type filter hook forward priority filter; policy accept;
        iifname "r1" meta mark set 0x4242 ct mark set meta mark
        iifname "r2" meta mark 0x0 counter
        iifname "r2" meta mark set ct mark
        iifname "r2" meta mark 0x4242 counter
        iifname "r2" meta mark set ct mark and 0xff00 counter
        meta mark 0x4200 counter
    }
}
"""
    lab.load(text)
    answered = lab.exchange(3)
    kernel = lab.counters()
    hits, marks, got = emulate(text, 3)
    assert ({k: hits.get(k, 0) for k in kernel}, got) == (kernel, answered)
    assert kernel[("ip t", "filt", 4)] == 3 and answered == 3
    assert marks == lab.conntrack_marks() == [0x4242]
