"""Typed apps/v1 kinds: ControllerRevision (the revision history StatefulSets and
DaemonSets keep, :mod:`control.controllers.history`).

Like every model of :mod:`netmodel.objects`, they type the fields svclab reads and keep
every other field as it came (``extra='allow'``), so an object round-trips through
``to_dict()``.
"""

from __future__ import annotations

from typing import Any

from netmodel.objects import KubeObject


class ControllerRevision(KubeObject):
    """An immutable snapshot of a controller's state (apps/v1 ControllerRevision):
    ``data`` is any JSON (a RawExtension; for StatefulSets and DaemonSets the template
    patch of :func:`control.controllers.history.template_patch`), ``revision`` its
    number in its owner's history."""

    KIND = "ControllerRevision"
    API_VERSION = "apps/v1"
    data: Any = None
    revision: int = 0
