"""A cluster the CLI (and labs) work on: persistent under a state directory, or
throw-away, built in memory from manifests.

State directory layout (``--state DIR``, default ``.svclab/``)::

    DIR/state.db          the store (SQLite backend)
    DIR/cluster.yaml      the Cluster document, fixed by the first apply
    DIR/kube-proxy.yaml   the KubeProxyConfiguration document, if one was applied

Contract: :meth:`Session.apply` validates everything first; on any error nothing is
stored (the store's revision is unchanged) and no file in DIR changes.

The control plane and the kube-proxies (the runner, the controllers, the scheduler and
numpy, the renderers) are imported when :attr:`Session.plane` or :attr:`Session.rules`
is first used: commands that only read the store (``svclab get``) never load them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from control.clock import Clock, FakeClock, WallClock
from control.store.base import Store
from control.store.memory import MemoryStore
from netmodel.cluster import Cluster, cluster_from_dict
from netmodel.errors import InputError, SvclabError
from netmodel.manifests import Manifests, load
from netmodel.objects import KubeObject
from netmodel.proxyconfig import KubeProxyConfiguration, proxy_config_from_dict

if TYPE_CHECKING:
    from control.agents.kubeproxy import EmulatedRules, KubeProxy
    from control.runner import ControlPlane

DEFAULT_STATE = ".svclab"


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
    #: record the kube-proxies' syncs on the timeline. Commands that only read a
    #: persistent cluster (get, rules, trace, ...) turn this off, so that looking at a
    #: cluster does not add events to it; apply and delete keep it on.
    record_proxy_syncs: bool = True

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
        cls, state_dir: str | Path, *, must_exist: bool = True, read_only: bool = False
    ) -> Session:
        """Open a persistent cluster. Raises NoClusterError when ``must_exist`` and the
        directory holds no cluster."""
        from control.store.sqlite import SqliteStore

        d = Path(state_dir)
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
            self._plane.start()
            self._add_proxies()
        return self._plane

    @property
    def rules(self) -> EmulatedRules:
        """What each node's kube-proxy loaded (the emulated rule sink), by node name."""
        if self._rules is None:
            from control.agents.kubeproxy import EmulatedRules

            self._rules = EmulatedRules()
        return self._rules

    def _add_proxies(self) -> None:
        from control.agents.kubeproxy import KubeProxy

        assert self._plane is not None
        for node in self.store.list("Node"):
            if node.name not in self.proxies:
                proxy = KubeProxy(
                    node.name,
                    self.cluster.spec,
                    self.proxy_config,
                    self.rules,
                    self._plane.recorder if self.record_proxy_syncs else None,
                    clock=self._plane.clock,
                )
                self.proxies[node.name] = proxy
                self._plane.add_agent(proxy)

    def converge(self) -> None:
        """Run every control loop (kube-proxies included) until nothing is left to do."""
        self.plane.run_until_idle()

    def start_quietly(self) -> None:
        """Start the control plane over the stored cluster and let the kube-proxies do
        their start-up sync without recording it: what an apply then records is what the
        apply changed (kube-proxy's own syncs included), as on a cluster whose
        kube-proxies have been running all along; an apply that changes nothing records
        nothing."""
        plane = self.plane
        proxies = list(self.proxies.values())
        recorders = [p.recorder for p in proxies]
        for p in proxies:
            p.recorder = None
        try:
            plane.run_until_idle()
        finally:
            for p, r in zip(proxies, recorders, strict=True):
                p.recorder = r

    def _apply_objects(
        self, objs: Sequence[KubeObject], *, source: str | None
    ) -> list[tuple[str, KubeObject]]:
        results = self.plane.apply(objs, source=source) if objs else []
        self.plane.run_until_idle()
        return results

    def apply(self, manifests: Manifests) -> list[tuple[str, KubeObject]]:
        """Apply to a persistent cluster (the first apply fixes the Cluster document)."""
        if self.state_dir is None:
            return self._apply_objects(manifests.objects, source=None)
        d = self.state_dir
        fresh = not (d / "cluster.yaml").exists()
        if not fresh and manifests.cluster is not None and manifests.cluster != self.cluster:
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
        if fresh:
            _write_yaml(d / "cluster.yaml", self.cluster.to_dict())
        if manifests.proxy_config is not None:
            _write_yaml(
                d / "kube-proxy.yaml",
                manifests.proxy_config.model_dump(by_alias=True, exclude_defaults=True, mode="json")
                | {
                    "apiVersion": manifests.proxy_config.api_version,
                    "kind": "KubeProxyConfiguration",
                },
            )
        return results

    def close(self) -> None:
        self.store.close()


def _read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise InputError("not a mapping", file=str(path))
    return data


def _write_yaml(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)
