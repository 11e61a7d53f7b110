"""The emulator's nft evaluator refuses what the kernel refuses when kube-proxy retires
chains: flushing or deleting a missing chain, deleting a chain that a rule or a
verdict-map element still points to; it accepts upstream's order (references gone in
one transaction, the chain deleted in a later one)."""

from __future__ import annotations

import pytest

from dataplane.netfilter import parse_nft
from dataplane.netfilter.nftrules import NftError

TABLE = ("ip", "kube-proxy")


@pytest.mark.parametrize(
    "text, error",
    [
        ("flush chain ip kube-proxy nope", "nope"),
        ("delete chain ip kube-proxy nope", "no chain 'nope'"),
        ("delete chain ip kube-proxy target", "still used by user"),
        (
            "flush chain ip kube-proxy user\ndelete chain ip kube-proxy target",
            "still used by @vmap",
        ),
    ],
)
def test_the_emulator_refuses_what_the_kernel_refuses(text: str, error: str) -> None:
    base = parse_nft(
        "add table ip kube-proxy\nadd chain ip kube-proxy target\nadd chain ip kube-proxy user\n"
        "add rule ip kube-proxy user goto target\n"
        "add map ip kube-proxy vmap { type ipv4_addr : verdict ; }\n"
        "add element ip kube-proxy vmap { 1.2.3.4 : goto target }\n"
    )
    with pytest.raises(NftError, match=error):
        parse_nft(text, base=base)
    # what upstream does: the map element and the rule go in one sync, the chain later
    after = parse_nft(
        "flush map ip kube-proxy vmap\nflush chain ip kube-proxy user\nflush chain ip kube-proxy target\n",
        base=base,
    )
    assert (
        "target"
        not in parse_nft("delete chain ip kube-proxy target", base=after).tables[TABLE].chains
    )
    assert parse_nft("destroy chain ip kube-proxy nope", base=after).tables[
        TABLE
    ].chains.keys() == {"target", "user"}
