"""``ct mark set`` against the kernel: the mark is the connection's (``conntrack -L``
shows it, later packets of the flow in both directions read it with ``ct mark``), each
form of the value (a constant, the packet mark, the connection mark combined with
``or``/``xor``/``and``) computes what the kernel computes, and before conntrack's hook
(priority -300) the statement has no connection to set. Real UDP exchanges through a
router namespace, rule counters and conntrack marks compared with svclab's evaluation
(:mod:`tests.kernel.nftlab`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dataplane.linux import netns as ns
from tests.kernel.nftlab import RouterLab, emulate, router_lab

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

#: (name, the chains' rules, the mark conntrack shows at the end)
CASES = [
    (
        "constant-on-new-persists",
        """chain filt {
            type filter hook forward priority filter; policy accept;
            ct state new ct mark set 0x2a
            ct mark 0x2a counter
            iifname "r2" ct mark 0x2a counter
        }""",
        0x2A,
    ),
    (
        "from-packet-mark",
        """chain pre {
            type filter hook prerouting priority mangle; policy accept;
            iifname "r1" meta mark set 0x1234
        }
        chain filt {
            type filter hook forward priority filter; policy accept;
            iifname "r1" ct mark set meta mark and 0xff00
            ct mark 0x1200 counter
        }""",
        0x1200,
    ),
    (
        "xor-toggles-per-packet",
        """chain filt {
            type filter hook forward priority filter; policy accept;
            ct mark set ct mark xor 0x1
            ct mark 0x1 counter
            ct mark 0x0 counter
        }""",
        0,
    ),
    (
        "or-accumulates",
        """chain filt {
            type filter hook forward priority filter; policy accept;
            iifname "r1" ct mark set ct mark or 0x10
            iifname "r2" ct mark set ct mark or 0x100
            ct mark 0x110 counter
        }""",
        0x110,
    ),
    (
        "before-conntrack-nothing-to-set",
        """chain raw {
            type filter hook prerouting priority raw; policy accept;
            ct mark set 0x5 counter
            meta mark set ct mark counter
        }
        chain filt {
            type filter hook forward priority filter; policy accept;
            ct mark 0x5 counter
        }""",
        0,
    ),
    (
        "verdict-on-ct-mark",
        """chain filt {
            type filter hook forward priority filter; policy accept;
            iifname "r1" ct state new ct mark set 0x7
            iifname "r2" ct mark 0x7 counter drop
        }""",
        0x7,
    ),
]


@pytest.fixture(scope="module")
def lab() -> Iterator[RouterLab]:
    with router_lab() as lab:
        yield lab


@pytest.mark.parametrize(("name", "chains", "mark"), CASES, ids=[c[0] for c in CASES])
def test_ct_mark_set_agrees_with_kernel(lab: RouterLab, name: str, chains: str, mark: int) -> None:
    text = f"table ip t {{\n{chains}\n}}\n"
    lab.load(text)
    answered = lab.exchange(3)
    kernel = lab.counters()
    kernel_marks = lab.conntrack_marks()
    hits, marks, got = emulate(text, 3)
    assert ({k: hits.get(k, 0) for k in kernel}, marks, got) == (kernel, kernel_marks, answered)
    assert marks == [mark]
