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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from app.cli import (
    diff_cmd,
    dig_cmd,
    exec_cmd,
    import_cmd,
    kubelet_cmd,
    nodedump_cmd,
    picture_cmd,
    pod_cmd,
    printers,
    reach_cmd,
    real_cmd,
    report_cmd,
    rules_cmd,
    serve_cmd,
    traffic_cmd,
)
from app.cli.context import DEFAULT_STATE, Context, OneLineUsageError, handle_errors
from app.cli.types import SELECTOR, TIMELINE_FILE
from netmodel.errors import NotFoundError

if TYPE_CHECKING:
    from control.session import Session
    from netmodel.objects import KubeObject


class Group(click.Group):
    """svclab's command group: usage errors, at any level, as one line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise OneLineUsageError(e) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise OneLineUsageError(e) from None


EPILOG = """\b
Environment:
  SVCLAB_STATE  the state directory when --state is not given

\b
Shell completion (bash; zsh and fish likewise with zsh_source, fish_source):
  eval "$(_SVCLAB_COMPLETE=bash_source svclab)"
"""


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.option(
    "--state",
    default=DEFAULT_STATE,
    show_default=True,
    envvar="SVCLAB_STATE",
    show_envvar=True,
    help="Directory of the persistent cluster.",
)
@click.option(
    "--store",
    default=None,
    envvar="SVCLAB_STORE",
    show_envvar=True,
    metavar="URL",
    help="Store holding the cluster: etcd://HOST:PORT[,HOST:PORT...] (all members, with "
    "failover). Default: DIR/state.db (SQLite). The state directory remembers it.",
)
@click.version_option(package_name="svclab", prog_name="svclab", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, state: str, store: str | None) -> None:
    """svclab: the Kubernetes Services dataplane, emulated and explained."""
    ctx.obj = Context(state, store)


def dump(objs: Sequence[KubeObject], fmt: str, single: bool) -> str:
    items = [o.to_dict() for o in objs]
    data: Any = items[0] if single else {"apiVersion": "v1", "kind": "List", "items": items}
    if fmt == "json":
        return json.dumps(data, indent=2)
    import yaml

    return yaml.safe_dump(data, sort_keys=False).rstrip()


def parse_kind_name(
    kind: str, name: str | None, session: Session | None = None
) -> tuple[str, str | None]:
    """The store kind and the name of ``KIND NAME`` or ``KIND/NAME``. A built-in kind is
    resolved without the cluster; any other name is looked up again, when ``session`` is
    given, after the kinds of its stored CRDs are registered (a custom resource's
    plural, singular, short name or kind). A usage error, kubectl's words, if none
    matches."""
    if "/" in kind and name is None:
        kind, name = kind.split("/", 1)
    resolved = printers.resolve_kind(kind)
    if resolved is None and session is not None:
        from control.apiserver import crds

        crds.sync(session.store)
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
    """Create or update objects from multi-document YAML; says, as kubectl does, what
    happened to each: created, configured or unchanged. The apiserver's warnings (e.g.
    legacy IPs) go to stderr as kubectl prints them."""
    import warnings

    from control.apiserver import crds
    from control.apiserver.validation import APIWarning
    from control.session import Session
    from netmodel.errors import InputError
    from netmodel.manifests import load

    session = Session.open(ctx.state, must_exist=False, store_url=ctx.store)
    try:
        crds.sync(session.store)  # the stored CRDs' kinds, before their objects are read
        manifests = load(list(files))
    except BaseException:
        session.close()
        raise
    if manifests.skipped:
        kinds = ", ".join(f"{n} {k}" for k, n in manifests.skipped)
        total = sum(n for _, n in manifests.skipped)
        click.echo(f"skipped {total} objects of kinds svclab does not model: {kinds}", err=True)
    for note in manifests.warnings:
        click.echo(f"warning: {note}", err=True)
    if not manifests.objects and manifests.cluster is None and manifests.proxy_config is None:
        session.close()
        raise InputError("no objects passed to apply")  # kubectl's words; nothing recorded
    # no kube-proxy per node here: later questions render a node's rules from the
    # store (one SyncProxyRules Event per change for all nodes; control.noderules)
    session.proxies_from_store = True
    fresh = session.holds_no_cluster
    before = session.cluster
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", APIWarning)
            results = session.apply(manifests)
        # a dump's Endpoints are computed, not stored: compare the recorded ones
        if manifests.recorded_endpoints:
            from control.endpointscheck import differences

            for note in differences(manifests.recorded_endpoints, session.store):
                click.echo(f"warning: {note}", err=True)
    finally:
        session.close()
    for w in caught:  # kubectl prints the apiserver's warnings so, on stderr
        if issubclass(w.category, APIWarning):
            click.echo(f"Warning: {w.message}", err=True)
    if manifests.cluster is not None:
        # a Cluster that differs from the stored one is refused, unless both were
        # inferred from dumps of one cluster: then the stored ranges may widen
        name = manifests.cluster.metadata.get("name", "svclab")
        verb = "created" if fresh else ("configured" if session.cluster != before else "unchanged")
        click.echo(f"cluster.svclab.dev/{name} {verb}")
    for verb, obj in results:
        click.echo(f"{obj.kind.lower()}/{obj.name} {verb}")


# --------------------------------------------------------------------------- get


@cli.command()
@click.argument("kind")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("-A", "--all-namespaces", is_flag=True)
@click.option("-o", "--output", type=click.Choice(["wide", "yaml", "json", "name"]))
@click.option("-l", "--selector", type=SELECTOR, default=None, help="Label selector, e.g. app=web")
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
    """List objects, or show one, of any kind svclab stores (by plural, singular, short
    name or kind: ``cm``, ``secrets``, ``sts``, ``statefulsets.apps``), custom resources of
    the stored CRDs too (``ippools``, with the CRD's printer columns); ``all``: pods,
    services, deployments and replicasets."""
    if kind.lower() == "all":
        if name is not None:
            raise click.UsageError("'get all' takes no NAME")
        if output not in (None, "wide", "name"):
            raise click.UsageError(f"'get all' prints tables or names, not -o {output}")
        _get_all(ctx, namespace, all_namespaces, output, selector)
        return
    session = ctx.session()
    try:
        kind, name = parse_kind_name(kind, name, session)  # custom kinds: the stored CRDs'
        if name is not None and selector:
            raise click.UsageError("name cannot be provided when a selector is specified")
        cluster_scoped = not printers.is_namespaced(kind)
        ns = None if (all_namespaces or cluster_scoped) else namespace
        if name is not None:
            key = name if cluster_scoped else f"{namespace}/{name}"
            try:
                objs = [session.store.get(kind, key)]
            except NotFoundError:
                raise NotFoundError(
                    f'{printers.qualified_plural_of(kind)} "{name}" not found'
                    + ("" if cluster_scoped else f" in namespace {namespace!r}")
                ) from None
        else:
            objs = session.store.list(kind, ns, _selector(selector))
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


def _selector(text: str | None) -> Any:
    """The parsed ``-l`` selector (already checked by its click type), or None."""
    if not text:
        return None
    from netmodel.selectors import parse_selector

    return parse_selector(text)


#: what ``get all`` lists, in kubectl's order, with the name prefix kubectl prints
ALL_KINDS = (
    ("Pod", "pod"),
    ("Service", "service"),
    ("Deployment", "deployment.apps"),
    ("ReplicaSet", "replicaset.apps"),
)


def _get_all(
    ctx: Context, namespace: str, all_namespaces: bool, output: str | None, selector: str | None
) -> None:
    """``get all``: one table per kind that has objects, names as ``KIND/NAME``, a blank
    line between tables (kubectl's layout)."""
    session = ctx.session()
    try:
        ns = None if all_namespaces else namespace
        sel = _selector(selector)
        blocks: list[str] = []
        for kind, prefix in ALL_KINDS:
            objs = session.store.list(kind, ns, sel)
            if not objs:
                continue
            if output == "name":
                blocks.append("\n".join(f"{prefix}/{o.name}" for o in objs))
                continue
            text = printers.table(
                kind,
                objs,
                now=session.clock.now(),
                wide=output == "wide",
                all_namespaces=all_namespaces,
                name_prefix=f"{prefix}/",
            )
            blocks.append(text)
    finally:
        session.close()
    if not blocks:
        where = "" if all_namespaces else f" in {namespace} namespace"
        click.echo(f"No resources found{where}.", err=True)
        return
    click.echo(("\n" if output == "name" else "\n\n").join(blocks))


# --------------------------------------------------------------------------- events


@cli.command()
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table")
@click.option(
    "--for",
    "for_",
    default=None,
    help="Only events about KIND/NAME (--diagram: and what it caused)",
)
@click.option(
    "--diagram",
    type=TIMELINE_FILE,
    default=None,
    help="Draw the sequence diagram to FILE.svg|.png|.mmd",
)
@click.pass_obj
@handle_errors
def events(ctx: Context, output: str, for_: str | None, diagram: str | None) -> None:
    """The timeline: every control-plane step in order (``-o json|yaml``: one v1 List
    of the Events, as kubectl prints a list)."""
    from control.events import timeline

    kind = name = None
    if for_:
        k, slash, name = for_.partition("/")
        kind = printers.resolve_kind(k)
        if not slash or not name or kind is None:
            raise click.UsageError(f"--for {for_}: want KIND/NAME with a known kind, e.g. pod/web")
    if diagram and output != "table":
        raise click.UsageError("--diagram draws the timeline: not with -o")
    session = ctx.session()
    try:
        evs = timeline(session.store)
        if diagram:
            if for_:
                evs = picture_cmd.events_for(session, evs, for_)
            title = f"timeline of {for_}" if for_ else "timeline"
            picture_cmd.events_diagram(session, evs, diagram, title=title)
            click.echo(f"{diagram}: {len(evs)} events")
            return
        if for_:
            evs = [
                e for e in evs if e.involved_object.kind == kind and e.involved_object.name == name
            ]
        if output in ("json", "yaml"):
            click.echo(dump(evs, output, single=False))
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
    """Delete objects by kind and name, or those named in files. KIND is any name ``get``
    takes, a custom resource's too (resolved after the stored CRDs are loaded)."""
    if files and (kind or names):
        raise click.UsageError("give KIND NAME or -f FILE, not both")
    if not files and not kind:
        raise click.UsageError("give KIND NAME or -f FILE")
    if kind and "/" not in kind and not names:
        raise click.UsageError("name required")
    targets: list[tuple[str, str]] = []
    if files:
        from netmodel.manifests import load

        for o in load(list(files)).objects:
            targets.append((o.kind, o.key))
    session = ctx.session(read_only=False)
    session.proxies_from_store = True  # as apply: rules are rendered from the store
    try:
        if kind:
            k, first = parse_kind_name(kind, None, session)  # custom kinds: the stored CRDs'
            all_names = ([first] if first else []) + list(names)
            if not all_names:
                raise click.UsageError("name required")
            namespaced = printers.is_namespaced(k)
            targets.extend((k, f"{namespace}/{n}" if namespaced else n) for n in all_names)
        session.start_quietly()  # what is recorded is what the delete changed
        for k, key in targets:
            obj = session.plane.apiserver.delete(k, key)
            click.echo(f'{k.lower()} "{obj.name}" deleted')
        session.converge()  # a served directory: the server converges
    finally:
        session.close()


# --------------------------------------------------------------------------- describe


@cli.command()
@click.argument("kind")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("-A", "--all-namespaces", is_flag=True)
@click.option("-l", "--selector", type=SELECTOR, default=None, help="Label selector, e.g. app=web")
@click.pass_obj
@handle_errors
def describe(
    ctx: Context,
    kind: str,
    name: str | None,
    namespace: str,
    all_namespaces: bool,
    selector: str | None,
) -> None:
    """Show objects in detail, with their events (pods: the scheduler's table). As
    kubectl: NAME is an exact name or else a prefix (``describe pod web`` describes every
    pod whose name starts with ``web``); without NAME, every object of the kind. KIND is
    any name ``get`` takes, a custom resource's too; its scope is the kind table's."""
    from app.cli.describe import describe_object

    session = ctx.session()
    try:
        kind, name = parse_kind_name(kind, name, session)  # custom kinds: the stored CRDs'
        cluster_scoped = not printers.is_namespaced(kind)  # the kind table's scope
        ns = None if (all_namespaces or cluster_scoped) else namespace
        objs = session.store.list(kind, ns, _selector(selector))
        if name is not None:
            exact = [o for o in objs if o.name == name]
            objs = exact or [o for o in objs if o.name.startswith(name)]
        if not objs:
            plural = printers.qualified_plural_of(kind)
            what = f'{plural} "{name}"' if name else plural
            raise NotFoundError(
                f"{what} not found"
                + ("" if cluster_scoped or ns is None else f" in namespace {ns!r}")
            )
        click.echo("\n\n".join(describe_object(session, o) for o in objs))
    finally:
        session.close()


#: the modules whose ``COMMANDS`` join the group, in ``--help`` order after the ones above
COMMAND_MODULES = (
    rules_cmd,
    traffic_cmd,
    real_cmd,
    nodedump_cmd,
    diff_cmd,
    import_cmd,
    serve_cmd,
    picture_cmd,
    report_cmd,
    dig_cmd,
    exec_cmd,
    pod_cmd,
    kubelet_cmd,
    reach_cmd,
)


def register(group: click.Group) -> None:
    """Attach every command module's commands to ``group``, explicitly: the command
    modules import :mod:`app.cli.context`, never this module, so whichever of them is
    imported first, ``svclab`` has all of its commands."""
    for module in COMMAND_MODULES:
        for command in module.COMMANDS:
            group.add_command(command)


register(cli)


def main(argv: Sequence[str] | None = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="svclab")
