"""The packet emulator: devices built from netmodel values, the hop-by-hop packet walk
through veths, bridges, routes, VXLAN and netfilter, and its traces.

The CLI uses :class:`EmulatedCluster` (``trace``, ``trace_all``, ``ping``, ``connect``,
``conntrack``, ``pcap``) and the trace values (:class:`Trace`, :class:`Hop`).
"""

from dataplane.emulator.cluster import (
    ConnResult,
    ConntrackEntry,
    EmulatedCluster,
    PingResult,
)
from dataplane.emulator.trace import VERDICTS, DeliveredTo, EndpointChance, Hop, Trace
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput

__all__ = [
    "VERDICTS",
    "ConnResult",
    "ConntrackEntry",
    "DeliveredTo",
    "EmulatedCluster",
    "EndpointChance",
    "Hop",
    "IptablesRules",
    "IpvsRules",
    "NftRules",
    "PingResult",
    "RulesetInput",
    "Trace",
]
