"""``save_form`` maps iptables-save text to itself, so save text and kube-proxy's
restore text can both be compared with what the kernel holds."""

from __future__ import annotations

import pytest

from dataplane.proxy.savefmt import save_form

RULES = [
    '-A KUBE-SVC-X -m comment --comment "default/web:http -> 10.244.1.2:8080" '
    "-m recent --name KUBE-SEP-A --rcheck --seconds 10800 --reap -j KUBE-SEP-A",
    "-A KUBE-SEP-A -p tcp -m comment --comment default/web:http -m recent --set "
    "--name KUBE-SEP-A --rsource -m tcp -j DNAT --to-destination 10.244.1.2:8080",
    "-A KUBE-SVC-X -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-A",
    "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
]


@pytest.mark.parametrize("rule", RULES)
def test_save_form_is_idempotent(rule: str) -> None:
    once = save_form(rule)
    assert save_form(once) == once


def test_recent_keeps_a_given_mask_and_side() -> None:
    got = save_form("-A C -m recent --rcheck --name N --mask 255.255.255.0 --rdest -j RETURN")
    assert "-m recent --rcheck --name N --mask 255.255.255.0 --rdest" in got
    assert "--mask 255.255.255.255 --rsource" in save_form(
        "-A C -m recent --set --name N -j RETURN"
    )
