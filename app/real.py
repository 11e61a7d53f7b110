"""A Session's cluster on the real kernel: ``svclab up --real`` / ``down`` / ``cleanup``.

What :func:`up` realises is :func:`app.emulation.view` of the session — the one
description both backends consume — with
:func:`dataplane.backends.realise.realize_view` (``persistent=True``: a dev cluster that
global cleanups and other sessions' leak checks leave alone): the network, each node's
kube-proxy rules and a pod server per pod.

The state directory keeps which real cluster belongs to it, in ``DIR/real.json``::

    {"cluster_id": "s1a2b3c4d", "cni": "bridge-plugin", "external_clients": [...],
     "status": "realising" | "up", "fingerprint": "<sha256 of the view>",
     "nft": {"node-1": "<sha256 of the loaded nft text>"}, "iptables_backend": "nft"}

It is written *before* anything is created, so :func:`down` and :func:`cleanup` find a
cluster whose ``up`` was interrupted (Ctrl-C, crash). The kernel-side state (namespaces,
CNI results, pod servers) lives under ``/run/svclab/<cluster_id>/``
(:mod:`dataplane.linux.state`).

Contracts: :func:`up` is idempotent — a second call with an unchanged session changes
nothing in the kernel (no namespace, address, rule, counter or server is touched: rules
are compared with what the kernel holds before anything is loaded) — and converges: after
the session changed, pods, rules and servers follow. :func:`ensure_current` is what
traffic commands call: the recorded cluster as is when the session's view has not changed
since ``up``, else ``up`` again.

Followed clusters. ``svclab serve --real`` realises the cluster once (:func:`up`), then
its kubelets and kube-proxies keep the kernel current (:mod:`app.realnode`); while it
runs it holds the state directory's serve lock and names itself in ``DIR/real-follow``
(:func:`following`). On such a cluster :func:`ensure_current` never realises anything
(that would fight the agents): it waits, a few seconds at most, until the kernel holds
what the store asks for — every running pod attached with its address, every
iptables-mode node's tables equal to a full sync of the store as it is — and then uses
the kernel as it is. :func:`up` refuses to run on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app import emulation
from control.session import Session
from dataplane.backends.realise import (
    check_realisable,
    fingerprint,
    foreign_chains,
    kept,
    kernel_holds,
    new_cluster_id,
    realize_view,
    summary,
)
from dataplane.linux.cni import CniMode
from dataplane.linux.names import CLUSTER_ID_RE, check_cluster_id
from dataplane.linux.nsenter import inode
from dataplane.linux.realize import RealCluster, Removed, teardown
from dataplane.linux.realize import cleanup as linux_cleanup
from dataplane.linux.rules import IptablesBackend
from netmodel.errors import BackendError, InputError, SvclabError
from netmodel.rulesets import IptablesRules
from netmodel.view import ClusterView

__all__ = [
    "REAL_FILE",
    "NoRealCluster",
    "RealRecord",
    "cleanup",
    "down",
    "ensure_current",
    "followed",
    "following",
    "kept",
    "summary",
    "up",
]

REAL_FILE = "real.json"
FOLLOW_FILE = "real-follow"
#: how long :func:`ensure_current` waits for a followed cluster's agents to catch up
FOLLOW_WAIT = 10.0


class NoRealCluster(SvclabError):
    """The state directory has no real cluster (``svclab up --real`` was not run)."""


@dataclass
class RealRecord:
    """``DIR/real.json``: the real cluster that belongs to a state directory."""

    cluster_id: str
    cni: CniMode = "bridge-plugin"
    external_clients: tuple[str, ...] = ()
    status: Literal["realising", "up"] = "realising"
    fingerprint: str = ""
    nft: dict[str, str] = field(default_factory=dict)
    iptables_backend: IptablesBackend = "nft"

    @staticmethod
    def path(state_dir: Path) -> Path:
        return Path(state_dir) / REAL_FILE

    @classmethod
    def read(cls, state_dir: Path) -> RealRecord | None:
        """The record, or None when the directory has none, or an unreadable one, or one
        whose cluster id is not valid: nothing in the kernel can carry such an id (every
        name built from it is checked), so there is no cluster to find, and the next
        ``up`` replaces the record (older versions wrote a refused id before checking)."""
        try:
            d = json.loads(cls.path(state_dir).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if not isinstance(d, dict) or not CLUSTER_ID_RE.match(str(d.get("cluster_id", ""))):
            return None
        return cls(
            cluster_id=str(d["cluster_id"]),
            cni=d.get("cni", "bridge-plugin"),
            external_clients=tuple(d.get("external_clients", ())),
            status=d.get("status", "realising"),
            fingerprint=str(d.get("fingerprint", "")),
            nft={str(k): str(v) for k, v in d.get("nft", {}).items()},
            iptables_backend=d.get("iptables_backend", "nft"),
        )

    def write(self, state_dir: Path) -> None:
        """Atomic (temp file + rename): an interrupted write leaves the old record."""
        p = self.path(state_dir)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "cluster_id": self.cluster_id,
                    "cni": self.cni,
                    "external_clients": list(self.external_clients),
                    "status": self.status,
                    "fingerprint": self.fingerprint,
                    "nft": self.nft,
                    "iptables_backend": self.iptables_backend,
                },
                indent=1,
                sort_keys=True,
            )
        )
        tmp.replace(p)

    @classmethod
    def remove(cls, state_dir: Path) -> None:
        cls.path(state_dir).unlink(missing_ok=True)


# ---------------------------------------------------------------------------- up / down


def _state_dir(session: Session) -> Path:
    if session.state_dir is None:
        raise NoRealCluster(
            "a throw-away cluster (-f FILE) is realised per command; 'up' needs --state DIR"
        )
    return session.state_dir


# ---------------------------------------------------------------------------- followed


@contextlib.contextmanager
def following(state_dir: Path) -> Iterator[None]:
    """Mark ``state_dir``'s real cluster as followed live by this process (``svclab
    serve --real``, which holds the serve lock) for the block."""
    path = Path(state_dir) / FOLLOW_FILE
    path.write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def followed(state_dir: Path) -> bool:
    """Whether a live ``svclab serve --real`` follows ``state_dir``'s real cluster: it
    holds the serve lock and wrote its pid in ``DIR/real-follow`` (a crashed server
    leaves the file, never the lock)."""
    from control.serving import LOCK_FILE, is_served

    d = Path(state_dir)
    try:
        pid = (d / FOLLOW_FILE).read_text().strip()
        holder = (d / LOCK_FILE).read_text().strip()
    except OSError:
        return False
    return bool(pid) and pid == holder and is_served(d)


def caught_up(view: ClusterView, cluster: RealCluster) -> list[str]:
    """What the kernel does not hold yet of ``view`` (empty: all of it): running pods
    not attached with the view's address, iptables-mode nodes whose tables differ from
    the view's rules (nftables nodes are not compared)."""
    missing: list[str] = []
    for ns in view.network.namespaces.values():
        if ns.role != "pod" or ns.pod is None:
            continue
        got = cluster.pods.get(str(ns.pod))
        want = ns.interface("eth0").addresses
        if got is None or not want or got.ip != want[0].ip:
            missing.append(f"pod {ns.pod}")
    foreign = foreign_chains(cluster)
    for node, rs in sorted(view.rulesets.items()):
        if isinstance(rs, IptablesRules) and not kernel_holds(
            cluster.node_netns(node), rs.text, cluster.iptables_backend, foreign=foreign
        ):
            missing.append(f"rules of node {node}")
    return missing


def _followed_current(
    session: Session, record: RealRecord, clients: tuple[str, ...]
) -> tuple[ClusterView, RealCluster]:
    """:func:`ensure_current` on a followed cluster (module docstring)."""
    if set(clients) - set(record.external_clients):
        raise BackendError(
            f"cluster {record.cluster_id} is followed live by 'svclab serve --real': "
            f"external clients {', '.join(sorted(set(clients) - set(record.external_clients)))} "
            "cannot be added now ('svclab up --real --external-client IP' before serving)"
        )
    v = emulation.view(session, external_clients=record.external_clients)  # the store now
    deadline = time.monotonic() + FOLLOW_WAIT
    while True:
        try:
            cluster = RealCluster.load(record.cluster_id)
        except BackendError as e:
            raise NoRealCluster(str(e)) from None
        if not caught_up(v, cluster) or time.monotonic() >= deadline:
            return v, cluster
        time.sleep(0.1)


def up(
    session: Session,
    *,
    cluster_id: str | None = None,
    cni: CniMode | None = None,
    external_clients: Iterable[str] = (),
    iptables_backend: IptablesBackend | None = None,
) -> RealCluster:
    """Realise ``session``'s cluster (see the module docstring) and record it in the
    state directory. ``cluster_id`` defaults to the one recorded, else a new one; asking
    for another id than the recorded one is an error (``down`` first). ``cni`` defaults
    to the recorded mode, else ``bridge-plugin`` (``netlink`` for a ``cni: calico``
    cluster, which refuses ``bridge-plugin``); ``iptables_backend`` likewise, else
    ``nft``. ``external_clients`` are added to the ones recorded (each gets a namespace
    hanging off the router)."""
    if cluster_id is not None:
        check_cluster_id(cluster_id)  # before real.json is written
    state_dir = _state_dir(session)
    if followed(state_dir):
        raise BackendError(
            f"{state_dir}: 'svclab serve --real' follows this cluster live (its kubelets "
            "and kube-proxies keep the kernel current); stop it to realise again"
        )
    record = RealRecord.read(state_dir)
    if record is not None and cluster_id is not None and cluster_id != record.cluster_id:
        raise BackendError(
            f"{state_dir} is already realised as cluster {record.cluster_id}; "
            "run 'svclab down' first"
        )
    if session.cluster.spec.cni == "calico":
        # Calico's own CNI plugin is not installed: svclab lays its pods out itself
        if cni == "bridge-plugin":
            raise InputError(
                "the CNI bridge plugin is flannel's; the pods of a cni: calico cluster "
                "are laid out by svclab itself (--cni netlink)",
                field="--cni",
            )
        cni = cni or "netlink"
    if record is None:
        record = RealRecord(
            cluster_id=cluster_id or new_cluster_id(),
            cni=cni or "bridge-plugin",
            iptables_backend=iptables_backend or "nft",
        )
    elif cni is not None and cni != record.cni:
        raise BackendError(
            f"cluster {record.cluster_id} was realised with cni={record.cni}; "
            "run 'svclab down' first to change it"
        )
    elif iptables_backend is not None and iptables_backend != record.iptables_backend:
        raise BackendError(
            f"cluster {record.cluster_id} was realised on the iptables "
            f"{record.iptables_backend} back end; run 'svclab down' first to change it"
        )
    record.external_clients = tuple(sorted({*record.external_clients, *external_clients}))
    v = emulation.view(session, external_clients=record.external_clients)
    check_realisable(v, record.iptables_backend)
    record.status = "realising"
    record.write(state_dir)  # before anything exists: down/cleanup can find it
    cluster, shas = realize_view(
        v,
        cluster_id=record.cluster_id,
        cni=record.cni,
        persistent=True,
        loaded_nft=record.nft,
        iptables_backend=record.iptables_backend,
    )
    record.nft = shas
    record.fingerprint = fingerprint(v)
    record.status = "up"
    record.write(state_dir)
    return cluster


def ensure_current(
    session: Session, *, external_clients: Iterable[str] = ()
) -> tuple[ClusterView, RealCluster]:
    """The session's real cluster, brought up to date: unchanged since ``up`` (and the
    external clients asked for are realised) → loaded as is; otherwise :func:`up` again.
    Raises :class:`NoRealCluster` when the state directory was never brought up."""
    state_dir = _state_dir(session)
    record = RealRecord.read(state_dir)
    if record is None:
        raise NoRealCluster(f"{state_dir}: no real cluster here (run 'svclab up --real' first)")
    clients = tuple(sorted({*record.external_clients, *external_clients}))
    if followed(state_dir):
        return _followed_current(session, record, clients)
    v = emulation.view(session, external_clients=clients)
    current = record.status == "up" and clients == record.external_clients
    if current and record.fingerprint == fingerprint(v):
        try:
            cluster = RealCluster.load(record.cluster_id)
        except BackendError:
            cluster = None  # the state is gone (reboot, a foreign cleanup): realise again
        if cluster is not None and all(inode(n) is not None for n in cluster.namespaces.values()):
            return v, cluster
    return v, up(session, external_clients=clients)


def down(state_dir: str | Path) -> Removed | None:
    """Tear down the real cluster of ``state_dir`` (namespaces, pod servers, CNI state)
    and forget it. None when there was none. Tolerates a half-realised cluster."""
    d = Path(state_dir)
    record = RealRecord.read(d)
    if record is None:
        RealRecord.remove(d)  # a damaged record (see RealRecord.read) names no cluster
        return None
    removed = teardown(record.cluster_id)
    RealRecord.remove(d)
    return removed


def cleanup(state_dir: str | Path | None = None, *, force: bool = False) -> list[Removed]:
    """Remove what svclab left in the kernel: the real cluster of ``state_dir`` (even if
    persistent: it is named), then every ``svclab-`` namespace and state dir that no
    live process holds and no persistent cluster owns (``force``: those too). Returns
    what each step removed."""
    out: list[Removed] = []
    if state_dir is not None:
        gone = down(state_dir)
        if gone is not None:
            out.append(gone)
    out.append(linux_cleanup(None, force=force))
    return out
