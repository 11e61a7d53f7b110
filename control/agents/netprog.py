"""The network programming SLI as kube-proxy measures it (upstream's
``kubeproxy_network_programming_duration_seconds``).

The EndpointSlice controller stamps each slice it changes with the time of the change
that triggered it (``endpoints.kubernetes.io/last-change-trigger-time``,
:mod:`control.controllers.endpointslice`). A kube-proxy :meth:`NetworkProgramming.note`s
every slice event it handles; when a sync has loaded the rules,
:meth:`NetworkProgramming.synced` gives, for each slice change that sync applied, the
duration ``sync done - trigger time`` and logs it on the ``svclab.live`` logger as one
line ``component=kube-proxy/NODE network_programming_seconds=S slice=NS/NAME
trigger=TIME`` (the annotation's time: ``trigger + S`` is when the rules were in place,
which ``scripts/bench_live.py`` reads).

Contract:

* A slice counts once per new trigger time: an event whose annotation equals the one
  already seen for that slice (a label change, a relist) adds nothing; a deleted slice
  or one without the annotation adds nothing (upstream: a zero trigger time is skipped).
* Of several changes of one slice before a sync, the earliest trigger counts (the
  rules then in place cover all of them; upstream keeps each, the earliest is the
  longest wait).
* A sync that fails (the load raises) measures nothing: the pending changes stay for
  the next sync, which applies them.
* An annotation that is no RFC 3339 time is skipped and logged once as a warning
  naming the slice (upstream logs and skips it too).
"""

from __future__ import annotations

import logging

from control.clock import parse_rfc3339_nano
from netmodel.objects import EndpointSlice

TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"

log = logging.getLogger("svclab.live")


class NetworkProgramming:
    """Per kube-proxy: slice changes awaiting a sync, and the durations measured."""

    def __init__(self, component: str) -> None:
        self.component = component
        #: slice key -> its trigger-time annotation as last seen
        self._seen: dict[str, str] = {}
        #: slice key -> trigger time (Unix seconds, annotation) of the changes not yet synced
        self._pending: dict[str, tuple[float, str]] = {}
        #: every duration measured so far, in order (seconds)
        self.durations: list[float] = []

    def note(self, key: str, sl: EndpointSlice | None) -> None:
        """A watch event of slice ``key``: ``sl`` as it is now, None when deleted."""
        if sl is None:
            self._seen.pop(key, None)
            return
        text = sl.metadata.annotations.get(TRIGGER_TIME_ANNOTATION)
        if text is None:
            self._seen.pop(key, None)
            return
        if self._seen.get(key) == text:
            return
        self._seen[key] = text
        try:
            at = parse_rfc3339_nano(text)
        except ValueError:
            log.warning(
                "component=%s slice=%s bad %s annotation %r: not measured",
                self.component,
                key,
                TRIGGER_TIME_ANNOTATION,
                text,
            )
            return
        cur = self._pending.get(key)
        if cur is None or at < cur[0]:
            self._pending[key] = (at, text)

    def synced(self, now: float) -> list[float]:
        """A sync loaded the rules at clock time ``now``: the durations of the slice
        changes it applied (logged), which are then no longer pending."""
        out: list[float] = []
        for key, (at, text) in sorted(self._pending.items()):
            seconds = max(0.0, now - at)
            out.append(seconds)
            log.info(
                "component=%s network_programming_seconds=%.6f slice=%s trigger=%s",
                self.component,
                seconds,
                key,
                text,
            )
        self._pending.clear()
        self.durations.extend(out)
        return out
