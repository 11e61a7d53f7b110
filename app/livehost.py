"""The live control plane's entry points (the composition root): what ``svclab serve``
starts beside the API server, in either mode of ``--components``.

``python -m app.livehost threads STATE_DIR SERVER [options]``
    every component as threads of one process (:class:`control.live.LiveControlPlane`).
``python -m app.livehost supervise STATE_DIR SERVER [options]``
    the supervisor of ``--components processes`` (:class:`control.supervisor.Supervisor`):
    one process per identity group, following the Nodes through its own API identity
    (``system:svclab-supervisor``, which may read Nodes only).
With ``--real`` the supervisor (or the threads' process) also makes the kernel's nodes
follow the Nodes (:class:`app.realnode.RealNodeFollower`).

``python -m app.livehost component GROUP STATE_DIR SERVER [--node N ...] [options]``
    one group's process: ``kube-controller-manager`` or ``kube-scheduler`` (both with
    leader election through their Lease), or ``kubelet`` / ``kube-proxy`` /
    ``kube-router`` (the NetworkPolicy agent) of the named nodes.

Every process ends when its standard input ends (its parent closed it, or died) or on
SIGTERM/SIGINT. Each is an API client of SERVER with client certificates from
``STATE_DIR/pki`` and reads the cluster only through the API (``cluster.yaml`` and
``kube-proxy.yaml`` of the state directory are its configuration, as a kubeconfig and
a KubeProxyConfiguration file are kube's).

Emulated kube-proxy processes publish the rules each node last loaded to
``STATE_DIR/live/rules/NODE`` (``iptables-save`` text, or the mode's listing), replaced
atomically after every sync: what the node holds, readable from outside the process.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from control.agents.kubeproxy import EmulatedRules, Mode, Rendered, RuleSink
from control.agents.netpolicy import PolicySink
from control.agents.probes import Prober
from control.components import GROUPS, NODE_GROUPS, Identity
from control.leaderelection import LeaderElectionConfig
from control.nodehost import EmulatedNodeHost, NodeHost
from netmodel import podhealth
from netmodel.cluster import ClusterSpec

log = logging.getLogger("svclab.livehost")

SUPERVISOR = Identity("system:svclab-supervisor")
RULES_DIR = Path("live") / "rules"


def node_host(state_dir: Path, cluster: ClusterSpec, *, real: bool) -> NodeHost:
    """What the nodes' kubelets and kube-proxies act on: the kernel's nodes built from
    ``state_dir`` (``real``: :class:`app.realnode.RealNodeHost`) or emulated ones."""
    if real:  # only then: it needs root and the kernel's tools
        from app.realnode import RealNodeHost

        return RealNodeHost(state_dir, cluster)
    # pods' health flags live in the state directory: the CLI's `svclab pod fail`, the
    # API server's exec and every kubelet process share them
    return EmulatedNodeHost(cluster, health_root=podhealth.state_root(state_dir))


class PublishedRules:
    """An :class:`EmulatedRules` sink that also writes each node's rules to
    ``DIR/NODE`` after every load (see the module docstring)."""

    def __init__(self, inner: EmulatedRules, directory: Path) -> None:
        self.inner = inner
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def load(self, node: str, mode: Mode, rendered: Rendered, *, full: bool) -> None:
        self.inner.load(node, mode, rendered, full=full)
        path = self.directory / node
        tmp = path.with_name(f".{node}.{os.getpid()}")
        tmp.write_text(self.inner.nodes[node].save_text)
        tmp.replace(path)

    def existing_chains(self, node: str) -> Sequence[str]:
        return self.inner.existing_chains(node)


class PublishingHost:
    """An emulated host whose kube-proxies publish their rules (see :class:`PublishedRules`)."""

    def __init__(self, inner: EmulatedNodeHost, directory: Path) -> None:
        self.inner = inner
        self.calico = inner.calico
        self.rules = PublishedRules(inner.rules, directory)

    def network_plugin(self, node: str) -> Any:
        return self.inner.network_plugin(node)

    def rule_sink(self, node: str) -> RuleSink:
        return self.rules

    def policy_sink(self, node: str) -> PolicySink:
        return self.inner.policy_sink(node)

    def prober(self, node: str) -> Prober:
        return self.inner.prober(node)

    def release(self, node: str) -> None:
        self.inner.release(node)
        with contextlib.suppress(OSError):
            (self.rules.directory / node).unlink()


def _until_stopped() -> threading.Event:
    """An event set on SIGTERM/SIGINT or when standard input ends."""
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def until_eof() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        done.set()

    threading.Thread(target=until_eof, name="stdin", daemon=True).start()
    return done


def _election(args: argparse.Namespace) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )


def election_options(config: LeaderElectionConfig) -> list[str]:
    return [
        f"--leader-elect-lease-duration={config.lease_duration}",
        f"--leader-elect-renew-deadline={config.renew_deadline}",
        f"--leader-elect-retry-period={config.retry_period}",
    ]


def _plane(
    args: argparse.Namespace,
    *,
    groups: Sequence[str] | None,
    nodes: Sequence[str] | None,
    publish: bool,
    leader_election: LeaderElectionConfig | None,
    done: threading.Event,
) -> Any:
    from control.live import LiveControlPlane, https_connector, load_config

    spec, proxy_config = load_config(args.state_dir)
    host = node_host(args.state_dir, spec, real=args.real)
    if publish and isinstance(host, EmulatedNodeHost):
        host = PublishingHost(host, args.state_dir / RULES_DIR)

    def lost(lease: str) -> None:
        log.error("leader election lost (%s): exiting", lease)
        done.set()

    return LiveControlPlane(
        https_connector(args.state_dir, args.server),
        spec,
        proxy_config=proxy_config,
        seed=spec.seed,
        kube_proxies=args.kube_proxies,
        host=host,
        groups=groups,
        nodes=nodes,
        leader_election=leader_election,
        on_lost=lost,
    )


def _run_plane(plane: Any, done: threading.Event, *, state_dir: Path | None = None) -> int:
    """Run ``plane`` until ``done``; with ``state_dir`` (the threaded plane, whose kubelets
    are not processes to kill) it also follows ``STATE_DIR/kubelets-stopped``
    (:func:`control.live.follow_stopped_kubelets`)."""
    from control.live import follow_stopped_kubelets

    starter = threading.Thread(target=plane.start, name="live-control-plane", daemon=True)
    starter.start()
    if state_dir is not None:  # the main thread stays free for the signal handlers
        follow_stopped_kubelets(plane, state_dir, done)
    while not done.wait(0.5):
        pass
    plane.stop()
    log.info("live control plane stopped")
    return 1 if plane.lost_lease is not None else 0


def _follow_real_nodes(args: argparse.Namespace, done: threading.Event) -> None:
    """``--real``: the kernel's nodes follow the Nodes (:class:`app.realnode.RealNodeFollower`),
    read through the supervisor's identity, in threads of this process until ``done``.
    A failure is logged and tried again on the next Node event or 5 s later."""
    from app.realnode import RealNodeFollower
    from control.informers.informer import Reflector, SharedInformer
    from control.live import https_connector, load_config
    from control.store.base import WatchEvent
    from netmodel.objects import Node

    spec, _ = load_config(args.state_dir)
    follower = RealNodeFollower(args.state_dir, spec)
    conn = https_connector(args.state_dir, args.server)(SUPERVISOR, "svclab-real-nodes")
    nodes = SharedInformer("Node")
    changed = threading.Event()

    def on_nodes(_events: Sequence[WatchEvent]) -> None:
        changed.set()

    nodes.add_handler(on_nodes)
    reflector = Reflector(conn.lister_watcher, nodes, name="real-nodes/Node")
    threading.Thread(target=reflector.run, args=(done,), name="real-nodes", daemon=True).start()

    def work() -> None:
        while not done.is_set():
            changed.wait(5.0)
            if done.is_set() or not changed.is_set():
                continue
            changed.clear()
            try:
                added, released = follower.follow(o for o in nodes.objects() if isinstance(o, Node))
            except Exception as e:  # logged, tried again
                log.error("real nodes: %s (trying again)", e)
                changed.set()
                done.wait(5.0)
                continue
            for name in added:
                log.info("real nodes: %s realised", name)
            for name in released:
                log.info("real nodes: %s released", name)

    threading.Thread(target=work, name="real-nodes-follow", daemon=True).start()


def _supervise(args: argparse.Namespace, done: threading.Event) -> int:
    from control.informers.informer import Reflector, SharedInformer
    from control.live import https_connector
    from control.store.base import WatchEvent
    from control.supervisor import Supervisor
    from netmodel.objects import Node

    election = _election(args)
    common = [str(args.state_dir), args.server, *election_options(election)]
    if args.real:
        common.append("--real")
    if not args.kube_proxies:
        common.append("--no-kube-proxies")

    def command(group: str, nodes: tuple[str, ...]) -> list[str]:
        argv = [sys.executable, "-m", "app.livehost", "component", group, *common]
        for n in nodes:
            argv += ["--node", n]
        return argv

    sup = Supervisor(command, kube_proxies=args.kube_proxies)
    conn = https_connector(args.state_dir, args.server)(SUPERVISOR, "svclab-supervisor")
    nodes = SharedInformer("Node")

    def on_nodes(_events: Sequence[WatchEvent]) -> None:
        sup.set_nodes(o.name for o in nodes.objects() if isinstance(o, Node))

    nodes.add_handler(on_nodes)
    reflector = Reflector(conn.lister_watcher, nodes, name="supervisor/Node")
    threading.Thread(target=reflector.run, args=(done,), name="reflector", daemon=True).start()
    log.info("supervising the components as processes of %s", args.server)

    def follow_held() -> None:  # svclab kubelet stop|start
        from control.live import stopped_kubelets

        while not done.wait(0.5):
            sup.hold(f"kubelet/{n}" for n in stopped_kubelets(args.state_dir))

    threading.Thread(target=follow_held, name="held", daemon=True).start()
    sup.run(done)
    with contextlib.suppress(Exception):
        conn.api.client.close()
    log.info("supervisor stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """See the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m app.livehost")
    ap.add_argument("mode", choices=["threads", "supervise", "component"])
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    top = ap.parse_args(argv)
    p = argparse.ArgumentParser(prog=f"python -m app.livehost {top.mode}")
    if top.mode == "component":
        p.add_argument("group", choices=GROUPS)
    p.add_argument("state_dir", type=Path)
    p.add_argument("server")
    p.add_argument("--node", action="append", default=[])
    p.add_argument("--real", action="store_true")
    p.add_argument("--no-kube-proxies", dest="kube_proxies", action="store_false")
    p.add_argument("--leader-elect-lease-duration", type=float, default=15.0)
    p.add_argument("--leader-elect-renew-deadline", type=float, default=10.0)
    p.add_argument("--leader-elect-retry-period", type=float, default=2.0)
    args = p.parse_args(top.rest)
    name = args.group if top.mode == "component" else top.mode
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s %(name)s [{name} {os.getpid()}]: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request: too much
    done = _until_stopped()
    if args.real and top.mode in ("supervise", "threads"):
        _follow_real_nodes(args, done)
    if top.mode == "supervise":
        return _supervise(args, done)
    if top.mode == "threads":
        plane = _plane(
            args, groups=None, nodes=None, publish=False, leader_election=None, done=done
        )
        return _run_plane(plane, done, state_dir=args.state_dir)
    group: str = args.group
    if group in NODE_GROUPS and not args.node:
        p.error(f"{group}: name its node(s) with --node")
    plane = _plane(
        args,
        groups=[group],
        nodes=args.node if group in NODE_GROUPS else (),
        publish=group == "kube-proxy",
        leader_election=None if group in NODE_GROUPS else _election(args),
        done=done,
    )
    return _run_plane(plane, done)


__all__ = ["PublishedRules", "PublishingHost", "main", "node_host"]


if __name__ == "__main__":
    raise SystemExit(main())
