"""The event timeline as a sequence of messages between lanes, and the ``--for`` filter.

Lanes: ``kubectl`` (the user), ``apiserver``, ``store``, one per controller, the
scheduler, one kubelet per node, one kube-proxy per node (all kubelets, or all
kube-proxies, share one lane when more than :data:`MAX_NODE_LANES` nodes have one).

Each Event becomes messages:

* a write the apiserver recorded (``Created``, ``Updated``, ``Deleting``, ``Deleted``):
  requester -> apiserver (the reason and the object), apiserver -> store (the revision).
  The requester of an apiserver-recorded write by ``apiserver`` itself is the user.
* any other Event whose step wrote to the store (the revision it describes, its
  subject's as the step left it, is newer than the previous Event's own write, e.g. a
  kubelet's status update before ``Started``): the same two messages. Writes that
  record no Event (a kubelet's Lease renewals, status updates without a reason) are
  not drawn, and move no Event's revision (:class:`control.events.Recorder`): the
  steps after them stay steps;
* otherwise a step inside the component (``Scheduled``, ``SandboxCreated`` with its CNI
  ADD, ``SyncProxyRules``): a message from the lane to itself.

Pure: :func:`sequence` maps Events (and where each pod runs) to a :class:`Sequence`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from netmodel.objects import Event, KubeObject

WRITE_REASONS = frozenset({"Created", "Updated", "Deleting", "Deleted"})
#: node-bound lanes (kubelet, kube-proxy) merge into one when more nodes than this act
MAX_NODE_LANES = 4
USER = "kubectl"
APISERVER = "apiserver"
STORE = "store"


@dataclass(frozen=True, slots=True)
class Message:
    """One arrow: ``source`` lane to ``target`` lane (equal for a step inside a
    component), its text, and the Event it comes from (``sequence``, ``revision``)."""

    source: str
    target: str
    text: str
    sequence: int
    revision: int
    warning: bool = False


@dataclass(frozen=True, slots=True)
class Timeline:
    """Lanes left to right, and the messages in timeline order."""

    lanes: tuple[str, ...]
    messages: tuple[Message, ...]


def _subject(e: Event) -> str:
    io = e.involved_object
    return f"{(io.kind or '').lower()}/{io.name}"


def _actor(e: Event, pod_nodes: Mapping[str, str]) -> str:
    comp = e.source_component or "unknown"
    if comp == APISERVER:
        return USER
    io = e.involved_object
    if comp in ("kubelet", "kube-proxy"):
        if comp == "kube-proxy" and io.kind == "Node":
            return f"kube-proxy {io.name}"
        node = pod_nodes.get(f"{io.namespace}/{io.name}") if io.kind == "Pod" else None
        if io.kind == "Lease" and io.namespace == "kube-node-lease":
            node = io.name  # a kubelet's heartbeat: its node's Lease
        return f"{comp} {node}" if node else comp
    return comp


def _step_text(e: Event) -> str:
    msg = e.message
    if e.reason == "SandboxCreated" and msg.startswith("Created pod sandbox: "):
        msg = "RunPodSandbox, CNI ADD: " + msg[len("Created pod sandbox: ") :]
    return f"{e.reason} {_subject(e)}\\n{_short(msg)}"


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _merge_node_lanes(actors: list[str]) -> dict[str, str]:
    """Lane of each actor: ``kubelet node-1`` stays, unless too many nodes have one."""
    out = {a: a for a in actors}
    for comp in ("kubelet", "kube-proxy"):
        mine = [a for a in actors if a.startswith(comp + " ")]
        if len(mine) > MAX_NODE_LANES:
            for a in mine:
                out[a] = f"{comp} ({len(mine)} nodes)"
    return out


def _lane_group(lane: str) -> int:
    """Left to right: the user, apiserver, store, controllers, scheduler, kubelets,
    kube-proxies."""
    if lane in (USER, APISERVER, STORE):
        return (USER, APISERVER, STORE).index(lane)
    if lane.startswith("kubelet"):
        return 5
    if lane.startswith("kube-proxy"):
        return 6
    return 4 if "scheduler" in lane else 3


def sequence(events: Sequence[Event], pod_nodes: Mapping[str, str]) -> Timeline:
    """The messages of ``events`` (in timeline order); ``pod_nodes`` maps ``ns/name``
    of each pod to its node (the kubelet lane its steps go to)."""
    actors = [_actor(e, pod_nodes) for e in events]
    lane_of = _merge_node_lanes(sorted(set(actors)))
    messages: list[Message] = []
    last_own_write = events[0].revision if events else 0
    for e, actor in zip(events, actors, strict=True):
        lane = lane_of[actor]
        prefix = "" if lane == actor else actor.split(" ", 1)[1] + ": "
        warning = e.type == "Warning"
        wrote = e.reason in WRITE_REASONS or e.revision > last_own_write
        if wrote:
            text = prefix + (
                f"{e.reason} {_subject(e)}" if e.reason in WRITE_REASONS else _step_text(e)
            )
            messages.append(Message(lane, APISERVER, text, e.sequence, e.revision, warning))
            messages.append(
                Message(APISERVER, STORE, f"write rev {e.revision}", e.sequence, e.revision)
            )
        else:
            messages.append(
                Message(lane, lane, prefix + _step_text(e), e.sequence, e.revision, warning)
            )
        last_own_write = max(last_own_write, e.sequence)
    first: dict[str, int] = {}
    for i, m in enumerate(messages):
        first.setdefault(m.source, i)
        first.setdefault(m.target, i)
    lanes = sorted(first, key=lambda lane: (_lane_group(lane), first[lane], lane))
    return Timeline(tuple(lanes), tuple(messages))


# --------------------------------------------------------------------------- --for


def _key(kind: str | None, ns: str | None, name: str | None) -> tuple[str, str, str]:
    return (kind or "", ns or "", name or "")


def caused_by(root: KubeObject, objects: Iterable[KubeObject]) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of ``root`` and of every object it caused: objects whose
    ownerReferences lead to it (deployment -> replicasets -> pods), and EndpointSlices
    listing one of those pods (their endpoints' targetRef)."""
    objs = list(objects)
    caused = {_key(root.kind, root.namespace, root.name)}
    uids = {root.metadata.uid} if root.metadata.uid else set()
    changed = True
    while changed:
        changed = False
        for o in objs:
            k = _key(o.kind, o.namespace, o.name)
            if k in caused:
                continue
            owners = o.metadata.owner_references
            if any(
                (r.uid and r.uid in uids) or _key(r.kind, o.namespace, r.name) in caused
                for r in owners
            ):
                caused.add(k)
                if o.metadata.uid:
                    uids.add(o.metadata.uid)
                changed = True
    for o in objs:
        endpoints = getattr(o, "endpoints", None)
        if o.kind != "EndpointSlice" or not endpoints:
            continue
        for ep in endpoints:
            ref = ep.target_ref
            if ref is not None and _key(ref.kind, ref.namespace, ref.name) in caused:
                caused.add(_key(o.kind, o.namespace, o.name))
    return caused


def events_caused(events: Sequence[Event], caused: set[tuple[str, str, str]]) -> list[Event]:
    """The events about ``caused`` objects, and each kube-proxy sync that follows one
    (a sync takes in every change before it; it is kept when the last store change
    before it came from a caused object)."""
    out: list[Event] = []
    last_was_caused = False
    for e in events:
        io = e.involved_object
        mine = _key(io.kind, io.namespace, io.name) in caused
        if e.source_component == "kube-proxy" and e.reason == "SyncProxyRules":
            if last_was_caused:
                out.append(e)
            continue
        if mine:
            out.append(e)
        last_was_caused = mine
    return out
