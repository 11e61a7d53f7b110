"""``iptables -S`` listings read as ``iptables-save`` text (the node dumps
eks-vpc-cni-kube-proxy, cilium-kpr-gke-dpv2 and eks-branch-eni-policy-routing keep
their authors' listings and are checked against the kernel, which loads them line by
line with ``iptables -t TABLE``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.netfilter import parse_save
from dataplane.netfilter.iptlist import is_listing, listing_to_save
from dataplane.nodedump import load_node_dump
from netmodel.errors import InputError

DUMPS = Path(__file__).resolve().parents[2] / "data" / "node-dumps"

LISTING = """\
# iptables -S
-P INPUT ACCEPT
-P FORWARD DROP
-P OUTPUT ACCEPT
-N KUBE-FIREWALL
-A INPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP

# iptables -t nat -S
-P PREROUTING ACCEPT
-P INPUT ACCEPT
-P OUTPUT ACCEPT
-P POSTROUTING ACCEPT
-A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE
"""

SAVE = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE
COMMIT
"""


def test_listing_is_the_save_text_of_the_same_rules() -> None:
    assert is_listing(LISTING) and not is_listing(SAVE)
    saved, origin = listing_to_save(LISTING, "l.txt")
    assert saved == SAVE
    assert origin[saved.splitlines().index("*nat")] == 10  # the first -P line of nat
    a, b = parse_save(saved, source="a"), parse_save(SAVE, source="b")
    assert [(t, r.chain, r.spec) for t, r in a.rules()] == [
        (t, r.chain, r.spec) for t, r in b.rules()
    ]


@pytest.mark.parametrize(
    ("policies", "table"),
    [
        (["INPUT", "FORWARD", "OUTPUT"], "filter"),
        (["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"], "nat"),
        (["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"], "mangle"),
        (["PREROUTING", "OUTPUT"], "raw"),
    ],
)
def test_without_comments_the_built_in_chains_name_the_table(
    policies: list[str], table: str
) -> None:
    text = "".join(f"-P {c} ACCEPT\n" for c in policies)
    saved, _ = listing_to_save(text, "l.txt")
    assert saved.splitlines()[0] == f"*{table}"


def test_a_table_line_names_the_table_and_ambiguity_is_refused() -> None:
    sec = "*security\n-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n"
    assert listing_to_save(sec, "l.txt")[0].startswith("*security\n")
    two = "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n-P PREROUTING ACCEPT\n"
    with pytest.raises(InputError, match=r"^l\.txt:1: cannot tell which table"):
        listing_to_save(two, "l.txt")
    with pytest.raises(InputError, match=r"^l\.txt:2: -X FOO: not an iptables -S line"):
        listing_to_save("-P INPUT ACCEPT\n-X FOO\n", "l.txt")


def test_node_dump_errors_name_the_listing_line(tmp_path: Path) -> None:
    bad = LISTING.replace("-m mark --mark", "-m nosuchmatch --mark")
    (tmp_path / "iptables-save.txt").write_text(bad)
    src = str(tmp_path / "iptables-save.txt")
    with pytest.raises(InputError, match=rf"^{src}:7: -A KUBE-FIREWALL -m nosuchmatch"):
        load_node_dump(str(tmp_path))


def test_real_listings_read_as_their_rules() -> None:
    """The three real listings: every rule the author printed is read."""
    for name in ("eks-vpc-cni-kube-proxy", "cilium-kpr-gke-dpv2", "eks-branch-eni-policy-routing"):
        text = (DUMPS / name / "iptables-save.txt").read_text()
        rules = [ln for ln in text.splitlines() if ln.startswith("-A ")]
        dump = load_node_dump(str(DUMPS / name))
        assert dump.iptables is not None
        assert len(list(dump.iptables.rules())) == len(rules), name
