"""The engine's verdict codes (a leaf module: every other part of the engine imports them
from here).

A chain function, a stage and a hook runner return one of these integers. ``CONTINUE``
(0) means "go on": the chain ended or RETURNed, or a stage let the packet pass to the
next one. The others end the table, the hook or the packet as their names say; a hook
that only ever continued reports ``ACCEPT``. ``STOLEN`` is IPVS taking a packet in
INPUT to send it on itself through OUTPUT and POSTROUTING.
"""

from __future__ import annotations

__all__ = ["ACCEPT", "CONTINUE", "DROP", "REJECT", "STOLEN", "VERDICT_NAMES"]

CONTINUE = 0
ACCEPT = 1
DROP = 2
REJECT = 3
STOLEN = 4

#: The verdict a hook reports for each code (a hook that only continued accepted).
VERDICT_NAMES = {
    CONTINUE: "ACCEPT",
    ACCEPT: "ACCEPT",
    DROP: "DROP",
    REJECT: "REJECT",
    STOLEN: "STOLEN",
}
