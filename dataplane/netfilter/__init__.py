"""The netfilter engine of the packet emulator: parse iptables-save/restore and nftables
text into typed rules, evaluate packets with the kernel's hook order, conntrack, NAT and
random choices, and explain every step (trace records).

Public entry points (stable for the emulator, the CLI and the Linux backend):

* :func:`parse_save`, :func:`apply_restore`, :func:`format_save` — iptables text.
* :class:`Netfilter` — one host: :meth:`~Netfilter.run_hook`, :meth:`~Netfilter.traverse`,
  :meth:`~Netfilter.enumerate`.
* :class:`ConntrackTable`, :func:`format_conntrack_l`, :class:`SimClock`.
* :class:`FlowTracer`, :class:`Flow`, :func:`trace_flow` — ``trace --at``.
* :func:`parse_nft`, :class:`NftEngine` — nftables (``Netfilter(nft=...)``).
* :class:`IpvsState`, :class:`VirtualServer`, :class:`RealServer`, :class:`IpvsEngine` —
  IPVS (``Netfilter(ipvs=...)``); :func:`parse_ipvsadm` reads ``ipvsadm-save -n`` text.
* :class:`CompiledRuleset` — compile once, share between hosts with the same rules.
* :class:`TraceRecord` — the trace format.

Modules: ``verdict`` (verdict codes, a leaf), ``rules`` (model), ``ruleparse`` (one
rule), ``parse`` (save/restore text), ``compile`` (match tests, index), ``codegen``
(chain functions), ``compiled`` (compiled ruleset, raw traces), ``evaluate`` (hooks,
paths, the :class:`~.evaluate.Provider` protocol of nftables and IPVS), ``nat`` (NAT
targets and the nat stage), ``conntrack``, ``recent``, ``limit``, ``ipset``/``ipsetlist``,
``choice`` (random decisions, enumeration), ``nftrules``/``nft``, ``ipvs``,
``ipvsadm``/``ipvslist``, ``flowtrace``, ``trace``.
"""

from .choice import Branch, Explorer, RandomChooser, explore
from .compiled import CompiledRuleset
from .conntrack import Connection, ConntrackTable, SimClock, format_conntrack_l
from .evaluate import HOOKS, HookResult, Netfilter, Skb, Traversal
from .flowtrace import Flow, FlowResult, FlowTracer, trace_flow
from .ipset import IpSet, parse_ipset_save
from .ipvs import IpvsEngine, IpvsState, RealServer, VirtualServer
from .ipvsadm import parse_ipvsadm
from .nft import NftEngine, NftRuleset, parse_nft
from .parse import RestoreError, apply_restore, format_save, parse_save
from .rules import Ruleset
from .trace import TraceRecord

__all__ = [
    "HOOKS",
    "Branch",
    "CompiledRuleset",
    "Connection",
    "ConntrackTable",
    "Explorer",
    "Flow",
    "FlowResult",
    "FlowTracer",
    "HookResult",
    "IpSet",
    "IpvsEngine",
    "IpvsState",
    "Netfilter",
    "NftEngine",
    "NftRuleset",
    "RandomChooser",
    "RealServer",
    "RestoreError",
    "Ruleset",
    "SimClock",
    "Skb",
    "TraceRecord",
    "Traversal",
    "VirtualServer",
    "apply_restore",
    "explore",
    "format_conntrack_l",
    "format_save",
    "parse_ipset_save",
    "parse_ipvsadm",
    "parse_nft",
    "parse_save",
    "trace_flow",
]
