"""A cluster the CLI (and labs) work on: persistent under a state directory, or
throw-away, built in memory from manifests.

State directory layout (``--state DIR``, default ``.svclab/``)::

    DIR/state.db          the store (SQLite backend, the default)
    DIR/store.json        {"store": URL}: the store this directory uses, when it is not
                          DIR/state.db (``--store etcd://...``); later commands without
                          --store find the same cluster through it
    DIR/cluster.yaml      the Cluster document, fixed by the first apply (SQLite); one
                          inferred from a kubectl dump is widened by a later dump of
                          the same cluster (netmodel.kubedump.merge_inferred)
    DIR/kube-proxy.yaml   the KubeProxyConfiguration document, if one was applied (SQLite)
    DIR/converged.json    {"revision": N}: the store revision after the last run of the
                          control plane to idle (:mod:`control.noderules`)
    DIR/cache/            nodes' rendered and compiled rules by content
                          (:mod:`control.rulecache`); safe to delete

A store that keeps records of its own (etcd: ``/registry/svclab.dev/records/``) holds the
Cluster and KubeProxyConfiguration documents itself, so any machine that reaches the
store finds the whole cluster.

Contract: :meth:`Session.apply` validates everything first; on any error nothing is
stored (the store's revision is unchanged) and no file in DIR changes. The first apply to
an empty remote store that fails (etcd went away half-way) removes what it wrote.

The control plane and the kube-proxies (the runner, the controllers, the scheduler and
numpy, the renderers) are imported when :attr:`Session.plane` or :attr:`Session.rules`
is first used: commands that only read the store (``svclab get``) never load them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from control.clock import Clock, FakeClock, WallClock
from control.store.base import Store
from control.store.memory import MemoryStore
from netmodel import podhealth
from netmodel.cluster import Cluster, cluster_from_dict
from netmodel.errors import InputError, SvclabError
from netmodel.kubedump import is_inferred, merge_inferred
from netmodel.manifests import Manifests, load
from netmodel.objects import KubeObject
from netmodel.proxyconfig import KubeProxyConfiguration, proxy_config_from_dict

if TYPE_CHECKING:
    from control.agents.kubeproxy import EmulatedRules, KubeProxy
    from control.agents.netpolicy import EmulatedPolicies, NetworkPolicyAgent
    from control.noderules import NodeRulesSource, StoreSyncNote
    from control.runner import ControlPlane

DEFAULT_STATE = ".svclab"
STORE_FILE = "store.json"
#: names of the documents a store with records keeps (see the module docstring)
CLUSTER_RECORD = "cluster"
PROXY_RECORD = "kube-proxy"


class NoClusterError(SvclabError):
    """The state directory holds no cluster yet."""


@dataclass
class Session:
    store: Store
    cluster: Cluster
    proxy_config: KubeProxyConfiguration | None
    clock: Clock
    state_dir: Path | None = None
    _plane: ControlPlane | None = None
    _rules: EmulatedRules | None = None
    proxies: dict[str, KubeProxy] = field(default_factory=dict)
    #: each node's NetworkPolicy agent (kube-router), loading into :attr:`policies`
    policy_agents: dict[str, NetworkPolicyAgent] = field(default_factory=dict)
    _policies: EmulatedPolicies | None = None
    #: record the kube-proxies' syncs on the timeline. Commands that only read a
    #: persistent cluster (get, rules, trace, ...) turn this off, so that looking at a
    #: cluster does not add events to it; apply and delete keep it on.
    record_proxy_syncs: bool = True
    #: the store's URL when it is not the state directory's SQLite file
    store_url: str | None = None
    #: run one emulated kube-proxy per node in :attr:`plane` (``svclab serve
    #: --no-kube-proxies`` turns this off for large clusters: ``svclab rules`` renders
    #: from the store either way)
    with_proxies: bool = True
    #: set by :meth:`converge` when it left the control plane unstarted (a read-only
    #: session over a converged store, see :mod:`control.noderules`): each node's rules
    #: are then rendered when first asked for, from here
    lazy_rules: NodeRulesSource | None = None
    #: keep every node's rules as its kube-proxy loaded them (the EmulatedRules sink)
    #: and answer from those, never lazily: the reference the lazy path is tested against
    eager_rules: bool = False
    #: a writing command on a persistent cluster (the CLI's apply and delete): run the
    #: control plane without the per-node kube-proxies; one
    #: :class:`control.noderules.StoreSyncNote` records each round's change to what they
    #: read (one SyncProxyRules Event for all nodes), and once converged
    #: (DIR/converged.json) every node's rules are rendered from the store when asked
    #: for, as read-only commands do (:mod:`control.noderules`). Off: one emulated
    #: kube-proxy per node (the in-memory cluster, the server, the Python API's default)
    proxies_from_store: bool = False
    #: with :attr:`proxies_from_store`, over a store at its converged revision
    #: (DIR/converged.json): start the control plane from that revision, each component
    #: when the change first reaches it (:meth:`control.runner.ControlPlane.start`),
    #: instead of listing every object into every component. Off: the full start (the
    #: reference the converged start is tested against)
    converged_start: bool = True
    _note: StoreSyncNote | None = None

    def __post_init__(self) -> None:
        if self.state_dir is not None:  # the pods' health flags: the cluster's, on disk
            podhealth.configure(podhealth.state_root(Path(self.state_dir)))

    # ---- construction

    @classmethod
    def ephemeral(cls, manifests: Manifests, *, clock: Clock | None = None) -> Session:
        """A throw-away cluster in memory, converged from ``manifests``."""
        s = cls(
            store=MemoryStore(),
            cluster=manifests.cluster or Cluster(),
            proxy_config=manifests.proxy_config,
            clock=clock or FakeClock(),
        )
        s._apply_objects(manifests.objects, source=",".join(manifests.sources) or None)
        return s

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], *, clock: Clock | None = None) -> Session:
        return cls.ephemeral(load(paths), clock=clock)

    @classmethod
    def open(
        cls,
        state_dir: str | Path,
        *,
        must_exist: bool = True,
        read_only: bool = False,
        store_url: str | None = None,
    ) -> Session:
        """Open a persistent cluster. Raises NoClusterError when ``must_exist`` and the
        directory (or the store it names, or ``store_url``) holds no cluster."""
        from control.store.sqlite import SqliteStore

        d = Path(state_dir)
        url = resolve_store_url(d, store_url)
        if url is not None:
            return cls._open_url(d, url, must_exist=must_exist, read_only=read_only)
        cfile = d / "cluster.yaml"
        if not cfile.exists():
            if must_exist:
                raise NoClusterError(
                    f"{d}: no cluster here yet (run 'svclab apply -f FILE' first, "
                    "or pass --state DIR)"
                )
            return cls(
                store=MemoryStore(),
                cluster=Cluster(),
                proxy_config=None,
                clock=WallClock(),
                state_dir=d,
            )
        cluster = cluster_from_dict(_read_yaml(cfile), file=str(cfile))
        pfile = d / "kube-proxy.yaml"
        proxy = (
            proxy_config_from_dict(_read_yaml(pfile), file=str(pfile)) if pfile.exists() else None
        )
        return cls(
            store=SqliteStore(d / "state.db"),
            cluster=cluster,
            proxy_config=proxy,
            clock=WallClock(),
            state_dir=d,
            record_proxy_syncs=not read_only,
        )

    @classmethod
    def _open_url(cls, d: Path, url: str, *, must_exist: bool, read_only: bool) -> Session:
        from control.store import open_store

        store = open_store(url)
        try:
            records = _records(store, url)
            doc = records.get_record(CLUSTER_RECORD)
            if doc is None:
                if must_exist:
                    raise NoClusterError(
                        f"{url}: no cluster here yet (run 'svclab --store {url} apply -f FILE' "
                        "first)"
                    )
                cluster, proxy = Cluster(), None
            else:
                where = f"{url} (record {CLUSTER_RECORD})"
                cluster = cluster_from_dict(doc, file=where)
                pdoc = records.get_record(PROXY_RECORD)
                proxy = (
                    proxy_config_from_dict(pdoc, file=f"{url} (record {PROXY_RECORD})")
                    if pdoc is not None
                    else None
                )
        except BaseException:
            store.close()
            raise
        return cls(
            store=store,
            cluster=cluster,
            proxy_config=proxy,
            clock=WallClock(),
            state_dir=d,
            record_proxy_syncs=not read_only,
            store_url=url,
        )

    def reload_cluster(self) -> bool:
        """For a store that keeps its own records (etcd): read the Cluster and
        KubeProxyConfiguration documents again (another process, e.g. another API server
        replica, may have created them since this session was opened). Returns whether
        the store holds a cluster. Without records: whether DIR/cluster.yaml exists."""
        if self.store_url is None:
            return self.state_dir is not None and (self.state_dir / "cluster.yaml").exists()
        records = _records(self.store, self.store_url)
        doc = records.get_record(CLUSTER_RECORD)
        if doc is None:
            return False
        self.cluster = cluster_from_dict(doc, file=f"{self.store_url} (record {CLUSTER_RECORD})")
        pdoc = records.get_record(PROXY_RECORD)
        if pdoc is not None:
            where = f"{self.store_url} (record {PROXY_RECORD})"
            self.proxy_config = proxy_config_from_dict(pdoc, file=where)
        return True

    def put_cluster(self, cluster: Cluster) -> None:
        """Keep a changed Cluster document (not its address plan, which never changes):
        DIR/cluster.yaml, or the store's record (etcd)."""
        if self.store_url is not None:
            _records(self.store, self.store_url).put_record(CLUSTER_RECORD, cluster.to_dict())
        else:
            assert self.state_dir is not None
            _write_yaml(self.state_dir / "cluster.yaml", cluster.to_dict())
        self.cluster = cluster

    @property
    def holds_no_cluster(self) -> bool:
        """No apply has created a cluster here yet (the next one fixes the Cluster)."""
        if self.state_dir is None:
            return False
        if self.store_url is not None:
            return _records(self.store, self.store_url).get_record(CLUSTER_RECORD) is None
        return not (self.state_dir / "cluster.yaml").exists()

    # ---- control plane

    @property
    def plane(self) -> ControlPlane:
        """The control plane over this session's store (started: nodes bootstrapped), with
        one kube-proxy per node feeding :attr:`rules`."""
        if self._plane is None:
            from control.runner import ControlPlane

            self._plane = ControlPlane(
                self.store, self.cluster.spec, seed=self.cluster.spec.seed, clock=self.clock
            )
            rev = self._converged_start_revision()
            work = None
            if rev is not None and self.state_dir is not None:
                from control.noderules import converged_start_work

                work = converged_start_work(self.state_dir)
            self._plane.start(converged_at=rev, start_work=work)
            if self._proxies_from_store:
                from control.noderules import StoreSyncNote

                self._note = StoreSyncNote(
                    self._plane.recorder if self.record_proxy_syncs else None
                )
                self._plane.add_agent(self._note)
            elif self.with_proxies:
                self._add_proxies()
        return self._plane

    def _converged_start_revision(self) -> int | None:
        """The revision the control plane may start from without listing (see
        :attr:`converged_start`), or None for a full start."""
        if not (self.converged_start and self._proxies_from_store) or self.state_dir is None:
            return None
        if self.served:
            return None
        from control.noderules import converged_revision

        rev = converged_revision(self.state_dir)
        return rev if rev is not None and rev == self.store.revision else None

    @property
    def _proxies_from_store(self) -> bool:
        return self.proxies_from_store and self.state_dir is not None and not self.eager_rules

    @property
    def rules(self) -> EmulatedRules:
        """What each node's kube-proxy loaded (the emulated rule sink), by node name."""
        if self._rules is None:
            if self.state_dir is not None and not self.eager_rules:
                # a persistent cluster's questions render from the store
                # (lazy_rules): the agents here only sync and record
                from control.noderules import RecordedRules

                self._rules = RecordedRules()  # type: ignore[assignment]
            else:
                from control.agents.kubeproxy import EmulatedRules

                self._rules = EmulatedRules()
        assert self._rules is not None
        return self._rules

    @property
    def policies(self) -> EmulatedPolicies:
        """What each node's NetworkPolicy agent loaded (the emulated policy sink), by
        node name."""
        if self._policies is None:
            from control.agents.netpolicy import EmulatedPolicies

            self._policies = EmulatedPolicies()
        return self._policies

    def _add_proxies(self) -> None:
        """One kube-proxy and one NetworkPolicy agent (kube-router) per Node that has
        none yet, beside the control plane's components (the deterministic runner runs
        them after the built-in ones, with no sync timing: every change at once)."""
        from control.agents.kubeproxy import KubeProxy
        from control.agents.netpolicy import NetworkPolicyAgent

        assert self._plane is not None
        recorder = self._plane.recorder if self.record_proxy_syncs else None
        for node in self.store.list("Node"):
            if node.name not in self.proxies:
                proxy = KubeProxy(
                    node.name,
                    self.cluster.spec,
                    self.proxy_config,
                    self.rules,
                    recorder,
                    clock=self._plane.clock,
                )
                self.proxies[node.name] = proxy
                self._plane.add_agent(proxy)
            if node.name not in self.policy_agents:
                agent = NetworkPolicyAgent(
                    node.name,
                    self.policies,
                    recorder,
                    service_cidrs=(self.cluster.spec.service_cidr,),
                    clock=self._plane.clock,
                )
                self.policy_agents[node.name] = agent
                self._plane.add_agent(agent)

    @property
    def served(self) -> bool:
        """Whether ``svclab serve`` runs on this state directory (its live components
        converge the cluster; see :mod:`control.serving`)."""
        if self.state_dir is None:
            return False
        from control.serving import is_served

        return is_served(self.state_dir)

    def converge(self) -> None:
        """Run every control loop (kube-proxies included) until nothing is left to do.

        While a server serves the state directory, nothing runs here: the server's
        components converge the cluster (a second control plane would fight them), and
        a node's rules are rendered from the store as it is when first asked for.

        A session that only reads (``record_proxy_syncs`` off) over a store that is
        converged (served, or at the revision recorded after the last run to idle) starts
        nothing: :attr:`lazy_rules` then renders a node's rules when first asked for
        (:mod:`control.noderules`)."""
        if self._converged_already():
            return
        if self.served:
            self._render_lazily()
            return
        self.plane.run_until_idle()
        if self.state_dir is not None:
            from control.noderules import record_converged

            record_converged(self.state_dir, self.store.revision, self.plane.start_work())
            self._render_lazily()

    def _converged_already(self) -> bool:
        """Whether :meth:`converge` can leave the control plane unstarted (and set
        :attr:`lazy_rules`); see :meth:`converge`."""
        if self._plane is not None or self.eager_rules:
            return False
        if self.lazy_rules is not None:
            return True
        if self.record_proxy_syncs or self.state_dir is None:
            return False
        from control.noderules import converged_revision

        if not self.served and converged_revision(self.state_dir) != self.store.revision:
            return False
        self._render_lazily()
        return True

    def _render_lazily(self) -> None:
        """Questions about a persistent cluster render a node's rules from the store as
        it is now, when first asked (its agents' sink keeps no model:
        :class:`control.noderules.RecordedRules`)."""
        if self.eager_rules:
            return
        from control.noderules import NodeRulesSource
        from control.rulecache import RuleCache

        self.lazy_rules = NodeRulesSource(
            self.store,
            self.cluster.spec,
            self.proxy_config,
            self.clock,
            RuleCache.for_state(self.state_dir),
        )

    def start_quietly(self) -> None:
        """Start the control plane over the stored cluster and let the kube-proxies do
        their start-up sync without recording it: what an apply then records is what the
        apply changed (kube-proxy's own syncs included), as on a cluster whose
        kube-proxies have been running all along; an apply that changes nothing records
        nothing. A served state directory: nothing to do (the server's components run)."""
        plane = self.plane
        if self.served:
            return
        proxies = list(self.proxies.values())
        recorders = [p.recorder for p in proxies]
        for p in proxies:
            p.recorder = None
            # the node holds its start-up sync's rules: take them as they are (the
            # sink keeps no model of them here) instead of rendering each node's
            p.adopt()
        agents = list(self.policy_agents.values())
        agent_recorders = [a.recorder for a in agents]
        for a in agents:
            a.recorder = None  # their start-up syncs are not the apply's either
        note = self._note
        note_recorder = note.recorder if note is not None else None
        if note is not None:
            note.recorder = None
        try:
            plane.run_until_idle()
        finally:
            for p, r in zip(proxies, recorders, strict=True):
                p.recorder = r
            for a, ar in zip(agents, agent_recorders, strict=True):
                a.recorder = ar
            if note is not None:
                note.forget()
                note.recorder = note_recorder

    def _apply_objects(
        self, objs: Sequence[KubeObject], *, source: str | None
    ) -> list[tuple[str, KubeObject]]:
        results = self.plane.apply(objs, source=source) if objs else []
        if self.with_proxies and self._plane is not None and not self._proxies_from_store:
            self._add_proxies()  # Nodes this apply created (a kubectl dump's) run one too
        self.converge()
        return results

    def apply(self, manifests: Manifests) -> list[tuple[str, KubeObject]]:
        """Apply to a persistent cluster (the first apply fixes the Cluster document)."""
        if self.state_dir is None:
            return self._apply_objects(manifests.objects, source=None)
        if self.store_url is not None:
            return self._apply_to_store(manifests)
        d = self.state_dir
        fresh = not (d / "cluster.yaml").exists()
        widened = False
        if not fresh and manifests.cluster is not None and manifests.cluster != self.cluster:
            if is_inferred(manifests.cluster):
                # a later kubectl dump of the same cluster: an update
                merged = merge_inferred(
                    self.cluster, manifests.cluster, where=str(d / "cluster.yaml")
                )
                widened = merged != self.cluster
                self.cluster = merged
            else:
                raise InputError(
                    "the Cluster document differs from the one this state was created with "
                    f"({d / 'cluster.yaml'}); the address plan cannot change — use a new --state",
                    obj=f"Cluster/{manifests.cluster.metadata.get('name', 'svclab')}",
                )
        if fresh:
            from control.store.sqlite import SqliteStore

            d.mkdir(parents=True, exist_ok=True)
            self.cluster = manifests.cluster or Cluster()
            self.store.close()
            self.store = SqliteStore(d / "state.db")
            self.clock = WallClock()
            self._plane = None
        if manifests.proxy_config is not None:
            self.proxy_config = manifests.proxy_config
        if not fresh:
            self.start_quietly()
        try:
            results = self._apply_objects(manifests.objects, source=",".join(manifests.sources))
        except BaseException:
            if fresh:
                self.store.close()
                (d / "state.db").unlink(missing_ok=True)
            raise
        if fresh or widened:
            _write_yaml(d / "cluster.yaml", self.cluster.to_dict())
        if manifests.proxy_config is not None:
            _write_yaml(d / "kube-proxy.yaml", _proxy_doc(manifests.proxy_config))
        return results

    def _apply_to_store(self, manifests: Manifests) -> list[tuple[str, KubeObject]]:
        """:meth:`apply` for a store that keeps the Cluster document itself (etcd)."""
        assert self.store_url is not None and self.state_dir is not None
        url, records = self.store_url, _records(self.store, self.store_url)
        fresh = records.get_record(CLUSTER_RECORD) is None
        widened = False
        if not fresh and manifests.cluster is not None and manifests.cluster != self.cluster:
            if is_inferred(manifests.cluster):
                merged = merge_inferred(
                    self.cluster, manifests.cluster, where=f"{url}, record {CLUSTER_RECORD}"
                )
                widened = merged != self.cluster
                self.cluster = merged
            else:
                raise InputError(
                    "the Cluster document differs from the one this cluster was created with "
                    f"({url}, record {CLUSTER_RECORD}); the address plan cannot change",
                    obj=f"Cluster/{manifests.cluster.metadata.get('name', 'svclab')}",
                )
        if fresh:
            self.cluster = manifests.cluster or Cluster()
            self.clock = WallClock()
            self._plane = None
        if manifests.proxy_config is not None:
            self.proxy_config = manifests.proxy_config
        try:
            if fresh:
                records.put_record(CLUSTER_RECORD, self.cluster.to_dict())
            results = self._apply_objects(manifests.objects, source=",".join(manifests.sources))
            if widened:  # only once the objects are in: a refused apply changes nothing
                records.put_record(CLUSTER_RECORD, self.cluster.to_dict())
            if manifests.proxy_config is not None:
                records.put_record(PROXY_RECORD, _proxy_doc(manifests.proxy_config))
        except BaseException:
            if fresh:
                # the store may be gone: then the error being raised says so
                with contextlib.suppress(SvclabError):
                    records.delete_everything()
            raise
        remember_store_url(self.state_dir, url)
        return results

    def close(self) -> None:
        self.store.close()


class _Records(Protocol):
    """What a store that keeps svclab's own documents provides (etcd)."""

    def get_record(self, name: str) -> dict[str, Any] | None: ...

    def put_record(self, name: str, data: dict[str, Any]) -> None: ...

    def delete_everything(self) -> None: ...


def _records(store: Store, url: str) -> _Records:
    if not all(hasattr(store, m) for m in ("get_record", "put_record", "delete_everything")):
        store.close()
        raise InputError(
            f"store {url!r} cannot hold a cluster of its own (use etcd://... here, or "
            "leave --store out for the state directory's SQLite file)",
            field="store",
        )
    return store  # type: ignore[return-value]


def resolve_store_url(state_dir: Path, given: str | None) -> str | None:
    """The store URL for ``state_dir``: ``given`` (``--store`` / SVCLAB_STORE) or the one
    the directory remembers (DIR/store.json); None means DIR/state.db. A given URL that
    differs from the remembered one is an InputError (one directory, one cluster)."""
    remembered = None
    sfile = state_dir / STORE_FILE
    if sfile.exists():
        try:
            remembered = json.loads(sfile.read_text())["store"]
        except (ValueError, KeyError, TypeError):
            raise InputError('not {"store": URL}', file=str(sfile)) from None
    if given and remembered and given != remembered:
        raise InputError(
            f"this state directory uses store {remembered} ({sfile}), not {given}; "
            "pass another --state for another cluster",
            field="store",
        )
    return given or remembered


def remember_store_url(state_dir: Path, url: str) -> None:
    sfile = state_dir / STORE_FILE
    if sfile.exists():
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = sfile.with_suffix(".tmp")
    tmp.write_text(json.dumps({"store": url}) + "\n")
    tmp.replace(sfile)


def _proxy_doc(config: KubeProxyConfiguration) -> dict[str, Any]:
    return config.model_dump(by_alias=True, exclude_defaults=True, mode="json") | {
        "apiVersion": config.api_version,
        "kind": "KubeProxyConfiguration",
    }


def _read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise InputError("not a mapping", file=str(path))
    return data


def _write_yaml(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)
