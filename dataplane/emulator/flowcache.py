"""The flow cache: replaying walks of packets that belong to known connections.

A walk without a trace, of a packet seen before, records per namespace the conntrack
entry it found, the direction, the ctstate and the TCP state the entry had before this
packet (a :class:`~dataplane.emulator.hooks.ReplayStep`, logged by the netfilter
adapters). If the walk ended in delivery, the next identical packet (same sender, same
header) is replayed instead of walked: namespace by namespace the recorded entry must
still be live, in that TCP state (so only packets that leave an entry's state unchanged
are replayed) and give the same ctstate; conntrack then updates it exactly as the full
walk would. Rules, routes, neighbours and FDBs are not consulted again. When every
recorded step is a packet that leaves its entry's state as it was (a plain ACK segment of
an ESTABLISHED TCP connection, a UDP datagram of a known flow) and all the tables read
one simulated clock, the whole replay is one loop over precomputed tests and updates
(:func:`~dataplane.netfilter.conntrack.refresh_all`), with the same effects.

A replay is refused (and the full walk taken) when a learned L2 entry changed since the
recording (:class:`~dataplane.emulator.devices.Epoch`), when any recorded entry moved on,
and it is never recorded through a ruleset that could decide differently for a packet of
a known connection (:func:`~dataplane.emulator.replay.replay_safe`). State that is
replaced rather than updated (a restored snapshot) needs :meth:`FlowCache.clear`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataplane.emulator.devices import Epoch
from dataplane.emulator.hooks import ReplayStep
from dataplane.netfilter.conntrack import (
    SEEN_REPLY,
    Connection,
    RefreshStep,
    SimClock,
    refresh_all,
    refresh_step,
)
from netmodel.packet import Packet

FLOW_CACHE_LIMIT = 100_000

FlowKey = tuple[str, Packet]  # sending namespace, packet as sent


@dataclass(frozen=True, slots=True)
class Flow:
    """A recorded walk: the L2 epoch it saw, its conntrack steps, and where it was
    delivered (namespace, device, the packet as the socket saw it)."""

    epoch: int
    steps: tuple[ReplayStep, ...]
    #: per step, what the replay tests and calls, prepared once (the replay is hot):
    #: the table's ``refresh``, connection, direction, ctstate, TCP state before,
    #: original direction, ctstate is ESTABLISHED
    plan: tuple[
        tuple[
            Callable[[Connection, int, frozenset[str]], str | None],
            Connection,
            int,
            str,
            str | None,
            bool,
            bool,
        ],
        ...,
    ]
    src: str
    host: str
    dev: str
    delivered: Packet
    src_rewritten: bool
    #: when every step is one :func:`~dataplane.netfilter.conntrack.refresh_step` can
    #: make (packets that leave the connections' states as they were) and every table
    #: reads one simulated clock: the whole replay as one
    #: :func:`~dataplane.netfilter.conntrack.refresh_all` at that clock's time
    fast: tuple[RefreshStep, ...] | None = None
    clock: SimClock | None = None


class FlowCache:
    """Recorded flows by (sending namespace, packet) — see the module docstring."""

    def __init__(self, epoch: Epoch, limit: int = FLOW_CACHE_LIMIT) -> None:
        self.epoch = epoch
        self.limit = limit
        #: (the dictionary is never replaced: :meth:`get` is its ``get``)
        self.flows: dict[FlowKey, Flow] = {}
        self.get: Callable[[FlowKey], Flow | None] = self.flows.get
        self._seen: set[FlowKey] = set()
        #: how many packets were replayed (statistics for benchmarks and tests)
        self.replayed = 0

    def __len__(self) -> int:
        return len(self.flows)

    def seen_before(self, key: FlowKey) -> bool:
        """Whether this packet was walked before (only then is a walk recorded: a first
        packet may be the only one of its kind)."""
        if key in self._seen:
            return True
        if len(self._seen) >= self.limit:
            self._seen.clear()
        self._seen.add(key)
        return False

    def remember(
        self,
        key: FlowKey,
        log: Sequence[ReplayStep | None],
        host: str,
        dev: str,
        delivered: Packet,
        src_rewritten: bool,
    ) -> None:
        """Record a walk that ended in delivery, if every namespace logged a replayable
        step (``None`` in ``log`` means one did not)."""
        if not log or any(step is None for step in log):
            self.flows.pop(key, None)
            return
        if len(self.flows) >= self.limit:
            self.flows.clear()
        steps = tuple(s for s in log if s is not None)
        fast, clock = _fast_plan(key[1], steps)
        self.flows[key] = Flow(
            epoch=self.epoch.value,
            steps=steps,
            plan=tuple(
                (
                    st.table.refresh,
                    st.conn,
                    st.direction,
                    st.state,
                    st.tcp_before,
                    st.direction == 0,
                    st.state == "ESTABLISHED",
                )
                for st in steps
            ),
            src=key[0],
            host=host,
            dev=dev,
            delivered=delivered,
            src_rewritten=src_rewritten,
            fast=fast,
            clock=clock,
        )

    def forget(self, key: FlowKey) -> None:
        self.flows.pop(key, None)

    def clear(self) -> None:
        self.flows.clear()
        self._seen.clear()

    def replay(self, flow: Flow, pkt: Packet) -> bool:
        """Apply ``pkt`` to the recorded conntrack entries; False (and the flow
        forgotten) when the recording no longer applies.

        A refusal midway leaves the namespaces already replayed updated once; the full
        walk that follows updates them again, which is harmless: a replay only ever
        applies updates that leave an entry's state as it was (same packet, same
        instant: the same state and expiry)."""
        if flow.epoch != self.epoch.value or not flow.steps:
            return False
        fast = flow.fast
        if fast is not None:
            assert flow.clock is not None
            if refresh_all(fast, flow.clock.t):
                self.replayed += 1
                return True
            self.flows.pop((flow.src, pkt), None)
            return False
        flags = pkt.flags
        for refresh, conn, direction, state, tcp_before, original, established in flow.plan:
            if conn.tcp_state != tcp_before or (
                original and bool(conn.status & SEEN_REPLY) != established
            ):
                self.flows.pop((flow.src, pkt), None)
                return False
            # the entry is updated in place (no tuple lookup): refresh refuses an entry
            # that expired or left its table
            if refresh(conn, direction, flags) != state:
                self.flows.pop((flow.src, pkt), None)
                return False
        self.replayed += 1
        return True


def _fast_plan(
    pkt: Packet, steps: tuple[ReplayStep, ...]
) -> tuple[tuple[RefreshStep, ...] | None, SimClock | None]:
    """:attr:`Flow.fast` and its clock, when every step has a
    :func:`~dataplane.netfilter.conntrack.refresh_step` (made from the TCP state it was
    recorded in) and all the tables read one :class:`SimClock` (so that one reading is
    what each namespace's own would give); (None, None) otherwise."""
    if not steps:
        return None, None
    clock = steps[0].table.clock
    if clock.__class__ is not SimClock:
        return None, None
    fast: list[RefreshStep] = []
    for st in steps:
        if st.table.clock is not clock:
            return None, None
        step = refresh_step(st.table, st.conn, st.direction, st.state, pkt.flags)
        if step is None or step.tcp_state != st.tcp_before:
            return None, None
        fast.append(step)
    assert isinstance(clock, SimClock)
    return tuple(fast), clock
