"""What a node's rules can be given as, to either backend (a small union, pure values):

* :class:`IptablesRules` — ``iptables-save`` text (or an ``iptables-restore`` payload
  applied to empty tables with ``restore=True``), with the ``ipset save`` text of the
  sets its rules use (Calico's, :mod:`netmodel.calicorules`);
* :class:`NftRules` — ``nft list ruleset`` / ``nft -f`` text, and the iptables tables
  and ipsets another agent keeps beside it (Calico's Felix);
* :class:`IpvsRules` — ``ipvsadm-save -n`` text plus ``ipset save`` text plus the
  iptables glue (``iptables-save`` text).

The emulator evaluates them (:mod:`dataplane.emulator.filters`); the kernel backend loads
the same text (:mod:`dataplane.backends.realise`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IptablesRules:
    """``iptables-save`` text; with ``restore`` an ``iptables-restore`` payload applied to
    empty tables (kube-proxy's jump rules are then missing unless the text has them)."""

    text: str
    restore: bool = False
    source: str = "<iptables-save>"
    #: ``ipset save`` text of the sets ``-m set`` rules in ``text`` refer to ("": none)
    ipsets: str = ""


@dataclass(frozen=True, slots=True)
class NftRules:
    """``nft`` ruleset text."""

    text: str
    source: str = "<nft>"
    #: ``iptables-save`` text of tables kept beside the nft ruleset by another agent
    #: (iptables-nft; Calico's Felix) and the ``ipset save`` text its rules use
    iptables: str = ""
    ipsets: str = ""


@dataclass(frozen=True, slots=True)
class IpvsRules:
    """IPVS state: ``ipvsadm-save -n`` text, ``ipset save`` text and the iptables glue."""

    ipvsadm: str
    ipset: str
    iptables: str
    source: str = "<ipvs>"


RulesetInput = IptablesRules | NftRules | IpvsRules
