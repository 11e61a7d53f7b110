"""``svclab rules``: what a node's kube-proxy loads, in the form the node's tools print;
``--policy-hits``: which NetworkPolicy rules the real node's kernel counted packets on,
each named by the policy and rule that made it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from app.cli.context import Context, handle_errors
from netmodel.errors import NotFoundError

if TYPE_CHECKING:
    from control.session import Session
    from dataplane.proxy import Mode

#: :data:`dataplane.proxy.MODES`, repeated so that ``--help`` does not import the
#: renderers (a test checks that the two agree)
MODES = ("iptables", "ipvs", "nftables")


def node_rules(session: Session, node_name: str, mode: Mode | None = None):  # type: ignore[no-untyped-def]
    """A full render for ``node_name`` from the session's current state: exactly what a
    freshly started kube-proxy on that node hands to the kernel."""
    from control.proxyenv import node_proxy_config, proxy_mode
    from dataplane.proxy import render_objects
    from netmodel.objects import EndpointSlice, Node, Service

    try:
        node = session.store.get("Node", node_name)
    except NotFoundError:
        names = ", ".join(n.name for n in session.store.list("Node"))
        raise NotFoundError(f'node "{node_name}" not found (nodes: {names or "none"})') from None
    assert isinstance(node, Node)
    cfg = node_proxy_config(session.proxy_config, session.cluster.spec, node)
    if mode is None:
        mode = proxy_mode(session.proxy_config, session.cluster.spec)  # type: ignore[assignment]
    services = [s for s in session.store.list("Service") if isinstance(s, Service)]
    slices = [s for s in session.store.list("EndpointSlice") if isinstance(s, EndpointSlice)]
    return render_objects(mode, services, slices, cfg)  # type: ignore[arg-type]


@click.command()
@click.option("--node", "node_name", required=True, help="Node whose rules to print")
@click.option(
    "--mode", type=click.Choice(MODES), default=None, help=(
        "Default: the cluster's proxyMode. nftables is GA since Kubernetes 1.33; ipvs is "
        "deprecated since 1.35 (KEP-5495) and still rendered as upstream renders it"
    ),
)
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    help="Build a throw-away cluster from these manifests",
)
@click.option(
    "--restore-input",
    is_flag=True,
    help="Print exactly the payload handed to iptables-restore / nft -f",
)
@click.option(
    "--policy-hits",
    is_flag=True,
    help="The real node's NetworkPolicy rules with packets (svclab up --real), "
    "each named by its policy and rule",
)
@click.pass_obj
@handle_errors
def rules(
    ctx: Context,
    node_name: str,
    mode: str | None,
    files: tuple[str, ...],
    restore_input: bool,
    policy_hits: bool,
) -> None:
    """Print what NODE's kube-proxy would load: iptables-save text (filter, nat), or
    ipvsadm-save + ipset save + the iptables glue, or nft list ruleset text.

    With --policy-hits: one line per NetworkPolicy rule of the real node whose kernel
    counters are not zero (packets, bytes, chain, and the policy rule it stands for)."""
    from dataplane.proxy.iptables import IptablesRender
    from dataplane.proxy.savefmt import with_save_comments

    if policy_hits and (files or mode or restore_input):
        raise click.UsageError("--policy-hits reads the real cluster: not with -f, --mode or --restore-input")
    session = ctx.session(files)
    try:
        if policy_hits:
            from app.policyhits import describe, real_policy_hits

            for hit in real_policy_hits(session, node_name):
                click.echo(f"{hit.packets} {hit.bytes} {hit.chain} {describe(hit)}")
            return
        out = node_rules(session, node_name, mode)  # type: ignore[arg-type]
        if restore_input:
            text = out.restore_input
        else:
            text = out.save_text
            if isinstance(out, IptablesRender) and not text.endswith("\n"):
                text += "\n"
            # iptables-save's comment lines around each table (nft text has no tables
            # of that form: unchanged)
            text = with_save_comments(text, time.time())
        click.echo(text, nl=not text.endswith("\n"))
    finally:
        session.close()


COMMANDS = [rules]
