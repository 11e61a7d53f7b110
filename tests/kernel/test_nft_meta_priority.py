"""``meta priority set`` against the kernel: the priority each form stores (a TC handle,
``none``, ``root``, a number, the priority combined with ``or``) is what the kernel's later
rules read with ``meta priority`` (equality, ranges, sets), it stays with the packet from
one hook to the next (forward to postrouting), and forwarding recomputes it from the TOS
before the forward hook (a priority set in prerouting is gone there). Real UDP exchanges
through a router namespace, rule counters compared with svclab's evaluation
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

#: (statement in the forward chain, the priority nft list prints for what it stores)
FORMS = [
    ("meta priority set 1:2", "1:2"),
    ("meta priority set abcd:ef", "abcd:ef"),
    ("meta priority set root", "root"),
    ("meta priority set none", "none"),
    ("meta priority set 10", "0:a"),
    ("meta priority set 0x1ffff", "1:ffff"),
    ("meta priority set foo", "none"),
    ("meta priority set 1:0 meta priority set meta priority or 0x10", "1:10"),
]


def ruleset(statement: str, want: str) -> str:
    return f"""table ip t {{
    chain pre {{
        type filter hook prerouting priority mangle; policy accept;
        meta priority set 7:7
    }}
    chain filt {{
        type filter hook forward priority filter; policy accept;
        meta priority none counter
        meta priority 7:7 counter
        {statement}
        meta priority {want} counter
        meta priority != {want} counter
        meta priority 1:0-1:ffff counter
        meta priority {{ 1:2, root }} counter
        meta priority >= 8000:0 counter
    }}
    chain post {{
        type filter hook postrouting priority srcnat; policy accept;
        meta priority {want} counter
        ip saddr 10.77.2.2 meta priority {want} counter drop
    }}
}}
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[RouterLab]:
    with router_lab() as lab:
        yield lab


@pytest.mark.parametrize(("statement", "want"), FORMS, ids=[f for f, _ in FORMS])
def test_meta_priority_set_agrees_with_kernel(lab: RouterLab, statement: str, want: str) -> None:
    text = ruleset(statement, want)
    lab.load(text)
    answered = lab.exchange(3)
    kernel = lab.counters()
    hits, _marks, got = emulate(text, 3)
    assert ({k: hits.get(k, 0) for k in kernel}, got) == (kernel, answered)
    # the value the probes name is the one stored: every packet in forward and postrouting
    assert kernel[("ip t", "filt", 4)] == 6 and kernel[("ip t", "post", 1)] == 6
    # prerouting's 7:7 did not reach the forward hook
    assert kernel[("ip t", "filt", 1)] == 6
