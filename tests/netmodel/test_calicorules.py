"""Felix's natOutgoing rules (:mod:`netmodel.calicorules`): what is rendered for which
pools, and how it joins kube-proxy's rules of each mode without changing them."""

from __future__ import annotations

from netmodel.calicorules import felix_rules, merge_save, with_calico
from netmodel.cluster import IPPool
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules

KUBE = """*filter
:INPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A INPUT -j KUBE-FORWARD
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-POSTROUTING -j RETURN
COMMIT
"""


def pools(*spec: tuple[str, bool]) -> list[IPPool]:
    return [IPPool(cidr=c, nat_outgoing=n) for c, n in spec]


def test_nothing_is_rendered_without_felix_rules() -> None:
    assert felix_rules(pools(("10.244.0.0/16", False))) is None
    rules = IptablesRules(KUBE)
    assert with_calico(rules, None) is rules


def test_the_sets_hold_every_pool_and_the_nat_outgoing_ones() -> None:
    cal = felix_rules(pools(("10.244.0.0/16", True), ("10.9.0.0/16", False)))
    assert cal is not None
    assert cal.ipsets.splitlines() == [
        "create cali40all-ipam-pools hash:net family inet hashsize 1024 maxelem 1048576",
        "add cali40all-ipam-pools 10.244.0.0/16",
        "add cali40all-ipam-pools 10.9.0.0/16",
        "create cali40masq-ipam-pools hash:net family inet hashsize 1024 maxelem 1048576",
        "add cali40masq-ipam-pools 10.244.0.0/16",
    ]
    assert cal.rules[-1].endswith(
        "-m set --match-set cali40masq-ipam-pools src "
        "-m set ! --match-set cali40all-ipam-pools dst -j MASQUERADE --random-fully"
    )
    plain = felix_rules(pools(("10.244.0.0/16", True)), random_fully=False)
    assert plain is not None and plain.rules[-1].endswith("-j MASQUERADE")


def test_felixs_jump_heads_postrouting_and_kube_proxys_rules_stay() -> None:
    cal = felix_rules(pools(("10.244.0.0/16", True)))
    assert cal is not None
    merged = merge_save(KUBE, cal).splitlines()
    post = [ln for ln in merged if ln.startswith("-A POSTROUTING")]
    assert post[0].endswith("-j cali-POSTROUTING") and post[1].endswith("-j KUBE-POSTROUTING")
    assert [ln for ln in merged if ln not in cal.rules + cal.first
            and not ln.startswith(":cali-")] == KUBE.splitlines()
    nat = merged[merged.index("*nat"):]
    assert nat.index(":cali-nat-outgoing - [0:0]") < nat.index(post[0])
    assert nat[-2] == cal.rules[-1] and nat[-1] == "COMMIT"
    # a text without a nat table gets Felix's alone
    only_filter = KUBE.split("*nat")[0]
    assert merge_save(only_filter, cal).endswith(cal.nat_text())


def test_each_mode_carries_the_rules_and_sets() -> None:
    cal = felix_rules(pools(("10.244.0.0/16", True)))
    assert cal is not None
    ipt = with_calico(IptablesRules(KUBE, source="kp"), cal)
    assert isinstance(ipt, IptablesRules) and ipt.ipsets == cal.ipsets and ipt.source == "kp"
    ipvs = with_calico(IpvsRules("-A -t 10.96.0.1:443 -s rr\n", "create K hash:ip\n", KUBE), cal)
    assert isinstance(ipvs, IpvsRules) and ipvs.ipset == "create K hash:ip\n" + cal.ipsets
    assert "cali-nat-outgoing" in ipvs.iptables
    nft = with_calico(NftRules("table ip kube-proxy {}\n"), cal)
    assert isinstance(nft, NftRules) and nft.text == "table ip kube-proxy {}\n"
    assert nft.iptables == cal.nat_text() and nft.ipsets == cal.ipsets
