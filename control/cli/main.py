"""``svclab``: the command line. kubectl-like verbs over a persistent or throw-away cluster.

Exit codes: 0 success, 1 a bad cluster or input (one line on stderr naming file,
document, object and field), 2 bad usage.

Start-up: this module and the command modules import only click and light modules at
the top; the session, the pydantic models, the emulator, the real-kernel backend
(pyroute2), scipy and scapy are imported inside the commands that use them, so that
``--help`` and usage errors stay cheap (``tests/cli/test_cli_imports.py`` checks it,
``scripts/bench_cli.py`` measures it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from control.cli import printers
from netmodel.errors import NotFoundError, SvclabError

if TYPE_CHECKING:
    from control.session import Session
    from netmodel.objects import KubeObject

F = TypeVar("F", bound=Callable[..., Any])

#: ``--state`` when not given: :data:`control.session.DEFAULT_STATE`, repeated here so
#: that ``--help`` does not import the session (a test checks that the two agree)
DEFAULT_STATE = ".svclab"


class Context:
    def __init__(self, state: str) -> None:
        self.state = Path(state)

    def session(self, files: Sequence[str] = (), *, read_only: bool = True) -> Session:
        """A throw-away session from ``files`` if given, else the persistent one
        (``read_only``: the kube-proxies' syncs are not recorded as events)."""
        from control.session import Session

        if files:
            return Session.from_files(list(files))
        return Session.open(self.state, read_only=read_only)


def handle_errors(fn: F) -> F:
    """Turn svclab errors into one line on stderr and their exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SvclabError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--state",
    default=DEFAULT_STATE,
    show_default=True,
    envvar="SVCLAB_STATE",
    help="Directory of the persistent cluster.",
)
@click.pass_context
def cli(ctx: click.Context, state: str) -> None:
    """svclab: the Kubernetes Services dataplane, emulated and explained."""
    ctx.obj = Context(state)


def dump(objs: Sequence[KubeObject], fmt: str, single: bool) -> str:
    items = [o.to_dict() for o in objs]
    data: Any = items[0] if single else {"apiVersion": "v1", "kind": "List", "items": items}
    if fmt == "json":
        return json.dumps(data, indent=2)
    import yaml

    return yaml.safe_dump(data, sort_keys=False).rstrip()


def parse_kind_name(kind: str, name: str | None) -> tuple[str, str | None]:
    if "/" in kind and name is None:
        kind, name = kind.split("/", 1)
    resolved = printers.resolve_kind(kind)
    if resolved is None:
        raise click.UsageError(f'the server doesn\'t have a resource type "{kind}"')
    return resolved, name


# --------------------------------------------------------------------------- apply


@cli.command()
@click.option("-f", "--filename", "files", multiple=True, required=True, help="File or directory")
@click.pass_obj
@handle_errors
def apply(ctx: Context, files: tuple[str, ...]) -> None:
    """Create or update objects from multi-document YAML."""
    from control.session import Session
    from netmodel.manifests import load

    manifests = load(list(files))
    session = Session.open(ctx.state, must_exist=False)
    try:
        results = session.apply(manifests)
    finally:
        session.close()
    if manifests.cluster is not None:
        click.echo(
            f"cluster.svclab.dev/{manifests.cluster.metadata.get('name', 'svclab')} configured"
        )
    for verb, obj in results:
        click.echo(f"{obj.kind.lower()}/{obj.name} {verb}")


# --------------------------------------------------------------------------- get


@cli.command()
@click.argument("kind")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("-A", "--all-namespaces", is_flag=True)
@click.option("-o", "--output", type=click.Choice(["wide", "yaml", "json", "name"]))
@click.option("-l", "--selector", default=None, help="Label selector, e.g. app=web")
@click.pass_obj
@handle_errors
def get(
    ctx: Context,
    kind: str,
    name: str | None,
    namespace: str,
    all_namespaces: bool,
    output: str | None,
    selector: str | None,
) -> None:
    """List objects, or show one: nodes, pods, services, endpointslices, deployments,
    replicasets, events."""
    kind, name = parse_kind_name(kind, name)
    session = ctx.session()
    try:
        cluster_scoped = kind in ("Node", "Namespace")
        ns = None if (all_namespaces or cluster_scoped) else namespace
        if name is not None:
            key = name if cluster_scoped else f"{namespace}/{name}"
            try:
                objs = [session.store.get(kind, key)]
            except NotFoundError:
                raise NotFoundError(
                    f'{kind.lower()}s "{name}" not found'
                    + ("" if cluster_scoped else f" in namespace {namespace!r}")
                ) from None
        else:
            sel = None
            if selector:
                from netmodel.selectors import parse_selector

                try:
                    sel = parse_selector(selector)
                except ValueError as e:
                    raise click.UsageError(str(e)) from None
            objs = session.store.list(kind, ns, sel)
            if kind == "Event":
                objs = sorted(objs, key=lambda e: getattr(e, "sequence", 0))
        if output in ("yaml", "json"):
            click.echo(dump(objs, output, single=name is not None))
        elif output == "name":
            for o in objs:
                click.echo(f"{kind.lower()}/{o.name}")
        elif not objs:
            where = "" if (all_namespaces or cluster_scoped) else f" in {namespace} namespace"
            click.echo(f"No resources found{where}.", err=True)
        else:
            click.echo(
                printers.table(
                    kind,
                    objs,
                    now=session.clock.now(),
                    wide=output == "wide",
                    all_namespaces=all_namespaces,
                )
            )
    finally:
        session.close()


# --------------------------------------------------------------------------- events


@cli.command()
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@click.option("--for", "for_", default=None, help="Only events about KIND/NAME")
@click.pass_obj
@handle_errors
def events(ctx: Context, output: str, for_: str | None) -> None:
    """The timeline: every control-plane step in order."""
    from control.events import timeline

    session = ctx.session()
    try:
        evs = timeline(session.store)
        if for_:
            k, _, n = for_.partition("/")
            kind = printers.resolve_kind(k) or k
            evs = [e for e in evs if e.involved_object.kind == kind and e.involved_object.name == n]
        if output == "json":
            for e in evs:
                io = e.involved_object
                click.echo(
                    json.dumps(
                        {
                            "revision": e.revision,
                            "sequence": e.sequence,
                            "component": e.source_component,
                            "type": e.type,
                            "reason": e.reason,
                            "object": f"{io.kind}/{io.namespace + '/' if io.namespace else ''}{io.name}",
                            "message": e.message,
                        }
                    )
                )
        else:
            click.echo(
                printers.table(
                    "Event", evs, now=session.clock.now(), wide=False, all_namespaces=False
                )
            )
    finally:
        session.close()


# --------------------------------------------------------------------------- delete


@cli.command()
@click.argument("kind", required=False)
@click.argument("names", nargs=-1)
@click.option("-f", "--filename", "files", multiple=True)
@click.option("-n", "--namespace", default="default", show_default=True)
@click.pass_obj
@handle_errors
def delete(
    ctx: Context, kind: str | None, names: tuple[str, ...], files: tuple[str, ...], namespace: str
) -> None:
    """Delete objects by kind and name, or those named in files."""
    targets: list[tuple[str, str]] = []
    if files:
        from netmodel.manifests import load

        for o in load(list(files)).objects:
            targets.append((o.kind, o.key))
    elif kind:
        k, first = parse_kind_name(kind, None)
        all_names = ([first] if first else []) + list(names)
        if not all_names:
            raise click.UsageError("name required")
        for n in all_names:
            targets.append((k, n if k in ("Node", "Namespace") else f"{namespace}/{n}"))
    else:
        raise click.UsageError("give KIND NAME or -f FILE")
    session = ctx.session(read_only=False)
    try:
        for k, key in targets:
            obj = session.plane.apiserver.delete(k, key)
            click.echo(f'{k.lower()} "{obj.name}" deleted')
        session.converge()
    finally:
        session.close()


# --------------------------------------------------------------------------- describe


@cli.command()
@click.argument("kind")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default="default", show_default=True)
@click.pass_obj
@handle_errors
def describe(ctx: Context, kind: str, name: str | None, namespace: str) -> None:
    """Show one object in detail, with its events (pods: the scheduler's table)."""
    kind, name = parse_kind_name(kind, name)
    if name is None:
        raise click.UsageError("name required")
    from control.cli.describe import describe_object

    session = ctx.session()
    try:
        key = name if kind in ("Node", "Namespace") else f"{namespace}/{name}"
        click.echo(describe_object(session, session.store.get(kind, key)))
    finally:
        session.close()


def _register_optional() -> None:
    """Attach command groups that live in their own modules."""
    import importlib

    for module in (
        "control.cli.rules_cmd",
        "control.cli.traffic_cmd",
        "control.cli.real_cmd",
        "control.cli.serve_cmd",
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                continue
            raise
        for command in getattr(mod, "COMMANDS", ()):
            cli.add_command(command)


_register_optional()


def main(argv: Sequence[str] | None = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="svclab")
