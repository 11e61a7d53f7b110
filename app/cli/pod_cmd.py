"""``svclab pod fail|heal POD [-n NS] [--probe readiness|liveness]``: flip a pod's health,
as its pod server reports it to probes (:mod:`netmodel.podhealth`): ``fail`` makes the
pod's readiness URL (``/readyz``, gRPC service ``readiness``) and/or its liveness URL
(``/healthz``, ``/livez``, gRPC service ``""``) answer failure; ``heal`` makes them pass
again. Without ``--probe`` both flip. The kubelet's probes see it at their next period:
a failing readiness probe takes the pod's endpoints out of the Services' rules, a
failing liveness probe restarts the container (a crash loop until healed).

The flags live in the cluster's state directory (``DIR/pods/health``), so a served
cluster's kubelets (in any process) and the emulated pod servers see them; with a real
cluster (``svclab up --real``) they are also written where its pod servers read them.
"""

from __future__ import annotations

from pathlib import Path

import click

from app.cli.context import Context, handle_errors
from netmodel.errors import NotFoundError

_FLAGS = {"readiness": ("ready",), "liveness": ("live",), None: ("ready", "live")}


@click.group("pod")
def pod() -> None:
    """Flip an emulated or real pod's health (what its probes see)."""


def _flip(ctx: Context, name: str, namespace: str, probe: str | None, ok: bool) -> None:
    from netmodel import podhealth
    from netmodel.objects import Pod

    name = name.split("/", 1)[1] if name.startswith(("pod/", "pods/")) else name
    session = ctx.session(read_only=True)
    try:
        try:
            p = session.store.get("Pod", f"{namespace}/{name}")
        except NotFoundError:
            raise NotFoundError(f'pods "{name}" not found in namespace "{namespace}"') from None
        assert isinstance(p, Pod)
        root = podhealth.state_root(ctx.state)
        h = podhealth.set_flags(p.key, ok, _FLAGS[probe], root)
        real = _real_health_root(ctx)
        if real is not None:  # the kernel's pod servers of this cluster read theirs
            podhealth.write(p.key, h, real)
    finally:
        session.close()
    word = "healed" if ok else "failed"
    click.echo(
        f"pod/{name} {word} ({probe or 'readiness and liveness'}): "
        f"readiness {'passes' if h.ready else 'fails'}, liveness {'passes' if h.live else 'fails'}"
    )


def _real_health_root(ctx: Context) -> Path | None:
    """Where the real pod servers of the cluster ``svclab up --real`` built from this
    state directory keep the pods' health (None: no real cluster)."""
    from app.real import RealRecord

    record = RealRecord.read(ctx.state)
    if record is None:
        return None
    from dataplane.linux.podserver import health_root
    from dataplane.linux.state import StateDir

    return health_root(StateDir.of(record.cluster_id).servers_dir)


_PROBE = click.option(
    "--probe",
    type=click.Choice(["readiness", "liveness"]),
    default=None,
    help="Which probes to flip (default: both)",
)


@pod.command("fail")
@click.argument("name", metavar="POD")
@click.option("-n", "--namespace", default="default", show_default=True)
@_PROBE
@click.pass_obj
@handle_errors
def fail(ctx: Context, name: str, namespace: str, probe: str | None) -> None:
    """Make POD's health URLs answer failure."""
    _flip(ctx, name, namespace, probe, ok=False)


@pod.command("heal")
@click.argument("name", metavar="POD")
@click.option("-n", "--namespace", default="default", show_default=True)
@_PROBE
@click.pass_obj
@handle_errors
def heal(ctx: Context, name: str, namespace: str, probe: str | None) -> None:
    """Make POD's health URLs answer success again."""
    _flip(ctx, name, namespace, probe, ok=True)


COMMANDS = [pod]
