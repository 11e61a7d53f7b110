"""``svclab serve`` (the Kubernetes API over HTTPS) and ``svclab kubeconfig`` (a client
certificate and kubeconfig for a user, as ``kubeadm kubeconfig user``)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from app.cli.context import Context, handle_errors
from netmodel.errors import InputError

DEFAULT_LISTEN = "127.0.0.1:6443"


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {text!r}", param_hint="--listen")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


@click.command()
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT to serve on.")
@click.option(
    "--token-auth-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='kube-apiserver\'s static token CSV: token,user,uid,"group1,group2".',
)
@click.option(
    "--watch-history",
    default=100_000,
    show_default=True,
    help="Revisions the watch log keeps; older watches get 410 Gone.",
)
@click.option(
    "--compact-every",
    default=30.0,
    show_default=True,
    help="Seconds between compactions of the watch log.",
)
@click.option(
    "--kube-proxies/--no-kube-proxies",
    default=True,
    show_default=True,
    help="Run one emulated kube-proxy per node in the server (off for large clusters).",
)
@click.option(
    "--control-plane",
    type=click.Choice(["live", "runner", "none"]),
    default="live",
    show_default=True,
    help="live: controllers, scheduler, kubelets and kube-proxies are API clients with "
    "their own identities; runner: the deterministic runner inside the server; none: "
    "the API only (a stateless replica over an etcd another server's control plane "
    "works on).",
)
@click.option(
    "--ca",
    "ca_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory holding the cluster CA (ca.crt, ca.key) to adopt, e.g. the first "
    "replica's DIR/pki: replicas over one etcd share one CA, so one kubeconfig works "
    "on every replica.",
)
@click.option(
    "--components",
    type=click.Choice(["threads", "processes"]),
    default="threads",
    show_default=True,
    help="live control plane: threads of one process beside the server, or one OS process "
    "per identity group under a supervisor (kube-controller-manager, kube-scheduler, and "
    "per node a kubelet and a kube-proxy; nodes pooled above 16), restarted with back-off.",
)
@click.option(
    "--leader-elect-lease-duration",
    type=float,
    default=15.0,
    show_default=True,
    help="processes: the controller-manager's and scheduler's Lease duration (seconds).",
)
@click.option(
    "--leader-elect-renew-deadline",
    type=float,
    default=10.0,
    show_default=True,
    help="processes: a leader that could not renew for this long stops leading.",
)
@click.option(
    "--leader-elect-retry-period",
    type=float,
    default=2.0,
    show_default=True,
    help="processes: seconds between a candidate's tries (and a leader's renewals).",
)
@click.option(
    "--real",
    is_flag=True,
    help="The nodes are the real cluster of DIR (realised now as 'svclab up --real' "
    "does, if needed): each node's kubelet attaches pods with the real CNI plugins and "
    "starts their servers, each kube-proxy loads its syncs into the node's namespace; "
    "exec, port-forward and logs reach the real pods (app.realnode, app.realruntime).",
)
@click.pass_obj
@handle_errors
def serve(
    ctx: Context,
    listen: str,
    token_auth_file: Path | None,
    watch_history: int,
    compact_every: float,
    kube_proxies: bool,
    control_plane: str,
    ca_dir: Path | None,
    components: str,
    leader_elect_lease_duration: float,
    leader_elect_renew_deadline: float,
    leader_elect_retry_period: float,
    real: bool,
) -> None:
    """Serve the state directory's cluster as a Kubernetes API (HTTPS) for kubectl and
    client libraries. Creates DIR/pki/ and DIR/kubeconfig (cluster-admin) on first
    start; the control plane keeps running while it serves."""
    host, port = parse_listen(listen)
    from app.podruntime import runtime_for
    from control.apiserver.http.serve import serve as run

    follow: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if real:
        if control_plane != "live":
            raise click.UsageError(
                "--real: the kernel's nodes follow the cluster through the live control "
                "plane's kubelets and kube-proxies (--control-plane live)"
            )
        follow = _realise(ctx)

    from app.livehost import election_options
    from control.leaderelection import LeaderElectionConfig

    election = LeaderElectionConfig(
        lease_duration=leader_elect_lease_duration,
        renew_deadline=leader_elect_renew_deadline,
        retry_period=leader_elect_retry_period,
    )
    mode = "supervise" if components == "processes" else "threads"
    options = [*election_options(election), *(["--real"] if real else [])]
    try:
        with follow:
            run(
                ctx.state,
                host,
                port,
                token_file=token_auth_file,
                watch_history=watch_history,
                compact_every=compact_every,
                kube_proxies=kube_proxies,
                control_plane=control_plane,
                ca_dir=ca_dir,
                runtime_factory=lambda api: runtime_for(api.session, real=real),
                live_argv=("-m", "app.livehost", mode),
                live_options=options,
            )
    except OSError as e:
        raise InputError(f"cannot serve on {listen}: {e.strerror or e}", field="--listen") from None
    except KeyboardInterrupt:
        pass


def _realise(ctx: Context) -> contextlib.AbstractContextManager[None]:
    """``serve --real`` before serving: the state's cluster realised as ``svclab up
    --real`` leaves it (nothing touched when it is already; pods and rules realised
    before are adopted by the live agents, :mod:`app.realnode`); then the marker that it is followed (while serving,
    ``ensure_current`` waits for the agents instead of realising, :mod:`app.real`)."""
    from app import real
    from control.serving import is_served
    from control.session import Session

    if is_served(ctx.state):
        from control.serving import AlreadyServedError

        raise AlreadyServedError(f"{ctx.state}: already served by another 'svclab serve'")
    session = Session.open(ctx.state, store_url=ctx.store)
    try:
        real.up(session)
    finally:
        session.close()
    return real.following(ctx.state)


@click.command()
@click.option("--user", "user", required=True, help="User name (the certificate's CN).")
@click.option(
    "--group", "groups", multiple=True, help="Group (an O of the certificate); repeatable."
)
@click.option("--server", default=None, help="API server URL (default: the one in DIR/kubeconfig).")
@click.pass_obj
@handle_errors
def kubeconfig(ctx: Context, user: str, groups: tuple[str, ...], server: str | None) -> None:
    """Issue a client certificate signed by the cluster CA and print its kubeconfig."""
    import yaml

    from control.apiserver.http import pki

    state = ctx.state
    if not (state / "pki" / "ca.key").exists():
        raise InputError(f"{state / 'pki'}: no cluster CA here (run 'svclab serve' first)")
    if server is None:
        admin = state / "kubeconfig"
        try:
            doc = yaml.safe_load(admin.read_text())
            server = doc["clusters"][0]["cluster"]["server"]
        except (OSError, KeyError, IndexError, TypeError, yaml.YAMLError):
            server = pki.server_url(*parse_listen(DEFAULT_LISTEN))
    click.echo(pki.user_kubeconfig(state, user, list(groups), server), nl=False)


COMMANDS = [serve, kubeconfig]
