"""The real kernel from the command line: ``up --real``, ``down``, ``cleanup``, and what
``trace``/``ping``/``connect`` do with ``--real`` (they delegate to :func:`real_trace`,
:func:`real_ping` and :func:`real_connect`).

``--real`` on a persistent cluster (``--state DIR``) uses the cluster ``svclab up --real``
realised, brought up to date first if the state changed since (:func:`control.real.
ensure_current`); with ``-f FILE`` a throw-away real cluster is realised for the one
command and removed after it. A source given as an IP nobody in the cluster owns is an
external client: its namespace is added (hanging off the router) if missing.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from ipaddress import IPv4Address
from typing import TYPE_CHECKING

import click

from control.cli.main import Context, handle_errors
from control.cli.printers import format_table
from control.cli.types import CLUSTER_ID

# control.real, control.backends and the emulation (pyroute2 and the emulator behind
# them) are imported inside the commands (see control.cli.main's docstring: start-up).
if TYPE_CHECKING:
    from control.backends import ConnOutcome, RealBackend
    from control.session import Session
    from dataplane.linux.realize import Removed

CNI_MODES = ["bridge-plugin", "netlink"]
IPTABLES_BACKENDS = ["nft", "legacy"]  # dataplane.linux.rules.IPTABLES_BACKENDS


# --------------------------------------------------------------------------- helpers


@contextmanager
def kernel(ctx: Context, files: tuple[str, ...], src: str) -> Iterator[tuple[Session, RealBackend]]:
    """The session and a RealBackend over its real cluster (see the module docstring);
    ``src`` (as given on the command line) may add an external client."""
    from control import emulation, real
    from control.backends import RealBackend, real_backend

    session = ctx.session(files)
    try:
        clients = emulation.external_sources(session, emulation.resolve_endpoint(session, src))
        if files:
            view = emulation.view(session, external_clients=clients)
            with real_backend(view) as be:
                yield session, be
        else:
            view, cluster = real.ensure_current(session, external_clients=clients)
            yield session, RealBackend(view, cluster, timeout=2.0)
    finally:
        session.close()


def _flow(
    session: Session, src: str, dst: str, be: RealBackend | None = None
) -> tuple[str, str, int | None]:
    from control import emulation
    from control.cli.traffic_cmd import _split_dst

    s = emulation.resolve_endpoint(session, src)
    d, port = _split_dst(emulation.resolve_endpoint(session, dst))
    return s, _by_name(be, s, d) if be is not None else d, port


def _by_name(be: RealBackend, src: str, dst: str) -> str:
    """A DNS name resolved by the source pod's own libc (getaddrinfo under ``ip netns
    exec``); anything else as it is. Says what it resolved on stderr."""
    from control import dnsqueries, names

    if not names.is_name(dst, be.view.network.namespaces):
        return dst
    found = dnsqueries.resolve(be, src, dst)
    if found.status != "ok":
        from netmodel.errors import InputError

        raise InputError(f"cannot resolve {dst!r} from {src}: {found.status}", field="DST")
    click.echo(f"{dst} resolved to {found.addresses[0]} (getaddrinfo in {src})", err=True)
    return found.addresses[0]


def _refuse(conflicts: Mapping[str, object], what: str) -> None:
    bad = [name for name, value in conflicts.items() if value]
    if bad:
        raise click.UsageError(f"{what} --real cannot be combined with {', '.join(bad)}")


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
    from control import real
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
    from control import real

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
    from control import real

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


# --------------------------------------------------------------------------- --real


def real_trace(
    ctx: Context,
    *,
    src: str | None,
    dst: str | None,
    proto: str,
    sport: int | None,
    output: str,
    files: tuple[str, ...],
    conflicts: Mapping[str, object],
) -> None:
    """``trace --real``: one connection on the kernel, and what the kernel did with it
    (verdict, pod, source seen, conntrack entries, counters of the rules that matched)."""
    _refuse(conflicts, "trace")
    if not src or not dst:
        raise click.UsageError("--from and --to are required")
    if proto not in ("tcp", "udp"):
        raise click.UsageError("trace --real follows tcp and udp connections (ping --real: ICMP)")
    with kernel(ctx, files, src) as (session, be):
        s, d, port = _flow(session, src, dst, be)
        if port is None:
            raise click.UsageError(f"--to {dst}: give a port (IP:PORT or svc/NS/NAME:PORT)")
        t = be.trace(s, d, port, proto, sport=sport)  # type: ignore[arg-type]
    if output == "json":
        click.echo(json.dumps(t.to_json(), indent=2))
    else:
        click.echo(t.render_text())


def real_ping(ctx: Context, *, src: str, dst: str, count: int, files: tuple[str, ...]) -> None:
    """``ping --real``: ICMP echo between real namespaces, ping's output (times measured
    from the raw socket's send to the reply's arrival)."""
    from control import emulation
    from control.cli.traffic_cmd import Reply, _host, ping_report

    with kernel(ctx, files, src) as (session, be):
        s = emulation.resolve_endpoint(session, src)
        d = _by_name(be, s, _host(emulation.resolve_endpoint(session, dst)))
        target = be.dest_ip(d)
        results = be.ping(s, target, count)
    replies = [
        Reply(seq, r.reply_from, r.ttl, r.rtt * 1000 if r.ok and r.rtt is not None else None)
        for seq, r in enumerate(results, 1)
    ]
    click.echo(ping_report(dst, target, replies, count, suffix=" (kernel)"))
    if not all(r.ok for r in results):
        raise SystemExit(1)


def real_connect(
    ctx: Context,
    *,
    src: str,
    dst: str,
    count: int,
    proto: str,
    output: str,
    files: tuple[str, ...],
    plot: str | None = None,
) -> None:
    """``connect --real``: N connections on the kernel; per connection the pod that
    answered and the source it saw, then per-pod counts and a chi-square test
    (``plot``: their shares drawn to that file)."""
    from control.cli.traffic_cmd import chi_square

    with kernel(ctx, files, src) as (session, be):
        s, d, port = _flow(session, src, dst, be)
        if port is None:
            raise click.UsageError(f"{dst}: give a port (IP:PORT or svc/NS/NAME:PORT)")
        conns = be.connect(s, d, port, proto, count)  # type: ignore[arg-type]
    counts = Counter(_label(c) for c in conns)
    stat, p = chi_square(list(counts.values()))
    dof = max(len(counts) - 1, 0)
    if plot:
        from control.cli.picture_cmd import shares_plot

        shares_plot(counts, stat, p, plot, title=f"connect {src} -> {dst}, real kernel")
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "backend": "kernel",
                    "connections": [c.to_json() for c in conns],
                    "counts": dict(counts),
                    "chi_square": {"statistic": stat, "dof": dof, "p_value": p},
                },
                indent=2,
            )
        )
        return
    rows = [["#", "SPORT", "ENDPOINT", "POD", "SOURCE SEEN", "VERDICT"]]
    for i, c in enumerate(conns, 1):
        seen = f"{c.source_seen}:{c.sport_seen}" if c.source_seen else "-"
        rows.append([str(i), str(c.sport or "-"), c.endpoint or "-", c.pod or "-", seen, c.verdict])
    click.echo(format_table(rows))
    click.echo("")
    total = sum(counts.values())
    summary = [["ENDPOINT", "COUNT", "SHARE"]]
    summary += [[k, str(v), f"{v / total:.3f}"] for k, v in counts.most_common()]
    click.echo(format_table(summary))
    click.echo(f"\nchi-square vs equal shares: {stat:.3f} (dof {dof}), p = {p:.4f}")


def _label(c: ConnOutcome) -> str:
    if c.verdict != "delivered":
        return c.verdict
    return c.endpoint or f"pod/{c.pod}"


COMMANDS = [up, down, cleanup]
