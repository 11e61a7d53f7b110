"""svclab's parsers against the kernel-agreement corpus, without the kernel: each entry
is accepted or refused as the corpus records the kernel doing (the kernel test,
tests/kernel/test_kernel_agreement.py, checks those records against the real tools), and
a refusal names a line of the entry."""

from __future__ import annotations

import pytest
from nfcorpus import Entry, load, svclab_verdict

ENTRIES = load()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_svclab_agrees_with_the_recorded_kernel(entry: Entry) -> None:
    got = svclab_verdict(entry)
    if entry.svclab_expect == "accept":
        if entry.unsupported:
            assert not got.accepted and got.unsupported, got
        else:
            assert got.accepted, got.message
        return
    assert not got.accepted, "svclab accepts what the kernel refuses"
    if entry.kind == "iptables":
        assert not got.unsupported, got.message
    lines = entry.text.count("\n")
    assert got.line is not None and 1 <= got.line <= lines + 1, got.message


def test_every_issue_example_is_in_the_corpus() -> None:
    names = {e.id for e in ENTRIES}
    for want in (
        "iptables/dnat-two-to-destination",
        "iptables/comment-negated",
        "iptables/ctstate-twice",
        "iptables/statistic-random-with-every",
        "iptables/masquerade-to-ports-no-proto",
        "iptables/two-source",
        "iptables/icmp-type-over-255",
        "iptables/reject-in-raw",
        "nft/add-table-trailing-words",
        "nft/policy-typo",
        "nft/set-elements-flat-form",
        "nft/delete-missing-set",
    ):
        assert want in names
