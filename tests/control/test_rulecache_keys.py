"""control.rulecache.content_key: the compiled level's key names a ruleset exactly
(equal rulesets share it, any difference in kind or in any field gives another)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from control.rulecache import content_key
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules

texts = st.text(max_size=40)


@given(texts, texts, texts, texts)
def test_keys_are_equal_exactly_when_the_rulesets_are(a: str, b: str, c: str, d: str) -> None:
    # IpvsRules' three texts in a row: moving characters across a field boundary
    # ("ab", "c" against "a", "bc") must change the key
    x, y = IpvsRules(a, b, c, source=d), IpvsRules(a + b[:1], b[1:], c, source=d)
    assert (content_key(x) == content_key(y)) == (x == y)
    p, q = IptablesRules(a, source=b), IptablesRules(c, source=d)
    assert (content_key(p) == content_key(q)) == (p == q)
    assert content_key(IptablesRules(a, source=b)) == content_key(IptablesRules(a, source=b))


def test_the_kind_is_part_of_the_key() -> None:
    assert content_key(IptablesRules("x", source="s")) != content_key(NftRules("x", source="s"))


def test_texts_that_are_not_valid_utf8_alone_still_have_keys() -> None:
    lone = IptablesRules("\ud800", source="s")  # a lone surrogate (surrogateescape input)
    assert content_key(lone) != content_key(IptablesRules("\ud801", source="s"))
