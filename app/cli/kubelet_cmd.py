"""``svclab kubelet stop|start NODE``: stop a node's kubelet as a crash would, and start
it again, on a served cluster (``svclab serve``).

A stopped kubelet renews neither its Lease nor its Node's status, so after the
node-monitor grace period (the Cluster's ``spec.nodeLifecycle``) the node lifecycle
controller marks it NotReady, taints it ``node.kubernetes.io/unreachable`` and its pods
not ready (their endpoints leave every node's rules); the taint-eviction controller then
evicts them per their tolerations, and their owners replace them on other nodes. Its
kube-proxy runs on, and so do its pods (their servers still answer).

The node is named in ``DIR/kubelets-stopped`` (one a line), which the served cluster's
live control plane follows every half second: threads stop the kubelet's worker and
watches and close its connection; with ``--components processes`` the supervisor kills
the node's kubelet process and does not restart it until ``start``.
"""

from __future__ import annotations

import click

from app.cli.context import Context, handle_errors
from netmodel.errors import NotFoundError


def _set(ctx: Context, node: str, stopped: bool) -> None:
    from control.live import STOPPED_KUBELETS, stopped_kubelets

    node = node.split("/", 1)[1] if node.startswith(("node/", "nodes/")) else node
    session = ctx.session(read_only=True)
    try:
        try:
            session.store.get("Node", node)
        except NotFoundError:
            raise NotFoundError(f'nodes "{node}" not found') from None
    finally:
        session.close()
    names = stopped_kubelets(ctx.state)
    was = node in names
    names = names | {node} if stopped else names - {node}
    path = ctx.state / STOPPED_KUBELETS
    tmp = path.with_name(f".{STOPPED_KUBELETS}.tmp")
    tmp.write_text("".join(f"{n}\n" for n in sorted(names)))
    tmp.replace(path)
    if stopped:
        word = "already stopped" if was else "stopped"
    else:
        word = "started" if was else "already running"
    click.echo(f"kubelet/{node} {word}")


@click.group("kubelet")
def kubelet() -> None:
    """Stop a node's kubelet as a crash would, or start it again (served clusters)."""


@kubelet.command("stop")
@click.argument("node", metavar="NODE")
@click.pass_obj
@handle_errors
def stop(ctx: Context, node: str) -> None:
    """Stop NODE's kubelet: the node goes NotReady after the grace period."""
    _set(ctx, node, stopped=True)


@kubelet.command("start")
@click.argument("node", metavar="NODE")
@click.pass_obj
@handle_errors
def start(ctx: Context, node: str) -> None:
    """Start NODE's kubelet again: it relists its pods and the node turns Ready."""
    _set(ctx, node, stopped=False)


COMMANDS = [kubelet]
