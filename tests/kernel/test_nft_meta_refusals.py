"""What the kernel refuses of the metadata statements, svclab refuses, and what it
accepts svclab accepts: each text is checked by the real ``nft -c -f`` in a fresh
namespace and parsed by svclab (a refusal is one line naming the file and line)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dataplane.linux import netns as ns
from dataplane.netfilter.nft import parse_nft
from netmodel.errors import InputError

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

STATEMENTS = [
    "meta nftrace set 1",
    "meta nftrace set 0",
    "meta nftrace set 0x1",
    "nftrace set 1",
    "meta nftrace set 2",
    "meta nftrace set -1",
    "meta nftrace set true",
    "meta nftrace set 1 or 2",
    "meta nftrace set 1 xor 1",
    "meta nftrace set meta mark",
    "meta nftrace 1",
    "meta mark set 0xffffffff",
    "meta mark set 0x100000000",
    "meta mark set foo",
    "meta mark set 1:2",
    "meta mark set 1_0",
    "meta mark set 0b11",
    "meta mark set mark or 0x100000000",
    "meta mark set meta priority",
    "meta mark set ct mark and 0xff",
    "meta mark set mark >> 1",
    "ct mark set 0x100000000",
    "ct mark set meta priority",
    "ct mark set mark or ct mark",
    "ct mark set 077",
    "meta priority set 1:2",
    "meta priority set ffff:ffff",
    "meta priority set 1:2:3",
    "meta priority set 10000:1",
    "meta priority set 1:10000",
    "meta priority set 0x1:2",
    "meta priority set :1",
    "meta priority set foo",
    "meta priority set meta mark",
    "meta priority set mark",
    "meta priority set meta priority or 1",
    "meta priority 1:2-1:5 counter",
    "meta priority { 1:2, 1:3 } counter",
    "priority set 1:3",
]


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    with ns.temporary("nmk") as name:
        yield name


def ruleset(statement: str) -> str:
    return (
        "table ip t {\n chain c {\n  type filter hook prerouting priority 0; policy accept;\n"
        f"  {statement}\n }}\n}}\n"
    )


@pytest.mark.parametrize("statement", STATEMENTS)
def test_svclab_refuses_what_nft_refuses(netns: str, statement: str) -> None:
    text = ruleset(statement)
    kernel = ns.run_in(netns, ["nft", "-c", "-f", "-"], input=text, check=False)
    try:
        parse_nft(text, source="meta.nft")
        refused = None
    except InputError as e:
        refused = str(e)
    assert (refused is None) == (kernel.returncode == 0), (kernel.stderr, refused)
    if refused is not None:
        assert refused.startswith("meta.nft:") and "\n" not in refused
