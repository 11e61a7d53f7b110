"""The real kernel's own commands: ``up --real``, ``down``, ``cleanup``. The traffic
commands take ``--real`` themselves (:mod:`app.cli.traffic_cmd`: one code path over
either backend).
"""

from __future__ import annotations

import sys
from ipaddress import IPv4Address
from typing import TYPE_CHECKING

import click

from app.cli.context import Context, handle_errors
from app.cli.types import CLUSTER_ID

# app.real, dataplane.backends and the emulation (pyroute2 and the emulator behind
# them) are imported inside the commands (see app.cli.main's docstring: start-up).
if TYPE_CHECKING:
    from dataplane.linux.realize import Removed

CNI_MODES = ["bridge-plugin", "netlink"]
IPTABLES_BACKENDS = ["nft", "legacy"]  # dataplane.linux.rules.IPTABLES_BACKENDS


# --------------------------------------------------------------------------- up / down


@click.command()
@click.option("--real", "on_kernel", is_flag=True, help="Realise on network namespaces (root)")
@click.option(
    "--cluster-id", type=CLUSTER_ID, default=None, help="1-12 of [a-z0-9] (default: a new one)"
)
@click.option(
    "--cni",
    type=click.Choice(CNI_MODES),
    default=None,
    help="Pods through the real CNI plugins (default) or by svclab itself",
)
@click.option(
    "--iptables-backend",
    type=click.Choice(IPTABLES_BACKENDS),
    default=None,
    help="Where iptables-mode rules go: iptables-nft (nf_tables, default) or "
    "iptables-legacy (x_tables, read back through libiptc)",
)
@click.option(
    "--external-client",
    "externals",
    multiple=True,
    help="IP of a client outside the cluster (a namespace off the router)",
)
@click.pass_obj
@handle_errors
def up(
    ctx: Context,
    on_kernel: bool,
    cluster_id: str | None,
    cni: str | None,
    iptables_backend: str | None,
    externals: tuple[str, ...],
) -> None:
    """Realise the cluster of --state DIR on real network namespaces: nodes, pods
    (real CNI plugins), each node's kube-proxy rules, a server per pod on its
    containerPorts. Idempotent; after a change it converges."""
    if not on_kernel:
        raise click.UsageError(
            "the emulator needs no 'up': every command builds the emulated cluster from "
            "the state. 'svclab up --real' realises it on network namespaces."
        )
    for ip in externals:
        try:
            IPv4Address(ip)
        except ValueError:
            raise click.UsageError(f"--external-client {ip}: not an IPv4 address") from None
    from app import real
    from control.session import Session

    session = Session.open(ctx.state, store_url=ctx.store)
    try:
        cluster = real.up(
            session,
            cluster_id=cluster_id,
            cni=cni,  # type: ignore[arg-type]
            external_clients=externals,
            iptables_backend=iptables_backend,  # type: ignore[arg-type]
        )
    except KeyboardInterrupt:
        record = real.RealRecord.read(ctx.state)
        cid = record.cluster_id if record else "?"
        click.echo(
            f"interrupted: cluster {cid} is partly realised; 'svclab down' (or "
            "'svclab cleanup') removes it, 'svclab up --real' completes it",
            err=True,
        )
        sys.exit(130)
    finally:
        session.close()
    s = real.summary(cluster)
    click.echo(
        f"cluster {s['cluster_id']} up: {s['nodes']} nodes, {s['pods']} pods, "
        f"{s['external']} external clients ({s['namespaces']} namespaces "
        f"svclab-{s['cluster_id']}-*); cni {s['cni']}, overlay {s['overlay']}, "
        f"hairpin {s['hairpin']}, rules on iptables-{s['iptables_backend']}"
    )


def _report(removed: Removed) -> list[str]:
    return (
        [f"removed netns {n}" for n in removed.namespaces]
        + [f"killed process {p}" for p in removed.processes]
        + [f"removed interface {i} (peer in a removed namespace)" for i in removed.root_links]
        + [f"removed state dir {d}" for d in removed.state_dirs]
    )


@click.command()
@click.pass_obj
@handle_errors
def down(ctx: Context) -> None:
    """Remove the real cluster of --state DIR (namespaces, pod servers, CNI state)."""
    from app import real

    record = real.RealRecord.read(ctx.state)
    removed = real.down(ctx.state)
    if record is None or removed is None:
        click.echo(f"no real cluster in {ctx.state}")
        return
    click.echo(
        f"cluster {record.cluster_id} removed: {len(removed.namespaces)} namespaces, "
        f"{len(removed.processes)} processes"
    )


@click.command()
@click.option(
    "--force",
    is_flag=True,
    help="Also kept clusters (svclab up --real) and other live processes' namespaces",
)
@click.pass_obj
@handle_errors
def cleanup(ctx: Context, force: bool) -> None:
    """Remove what svclab left in the kernel: namespaces with svclab's prefix, pod
    servers, state under /run/svclab, and the cluster of --state DIR if its 'up' was
    interrupted. Prints what it removed."""
    from app import real

    record = real.RealRecord.read(ctx.state)
    own = ctx.state if record is not None and (force or record.status != "up") else None
    lines = [line for r in real.cleanup(own, force=force) for line in _report(r)]
    for line in lines:
        click.echo(line)
    if not lines:
        click.echo("nothing to clean up")
    kept = real.kept(force=force)
    if kept:
        click.echo(
            f"kept {len(kept)} namespaces of realised clusters or of live svclab processes "
            "('svclab down' in their state dir, or --force, removes them)"
        )


COMMANDS = [up, down, cleanup]
