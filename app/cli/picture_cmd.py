"""Pictures from the command line: ``svclab topology FILE``, and the helpers behind
``events --diagram``, ``trace --diagram`` and ``connect --plot``.

The options check their file at the edge (:class:`app.cli.types.PictureFile`: a
known suffix in a writable directory, else a usage error before any work). Each helper
gathers values from the session, calls a pure drawing function of
:mod:`app.pictures` and writes the file (checking the suffix again, for callers
other than the CLI). Graphviz and matplotlib are imported here, inside the functions,
never when ``svclab --help`` runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from app.cli.context import Context, handle_errors
from app.cli.types import GRAPH_FILE

if TYPE_CHECKING:
    from app.stats import ChiSquare
    from control.session import Session
    from netmodel.network import ClusterNetwork
    from netmodel.objects import Event

GRAPH = (".svg", ".png")
TIMELINE = (".svg", ".png", ".mmd")
#: the most messages a drawn (.svg/.png) timeline holds; Mermaid text has no limit
MAX_MESSAGES = 500


def events_for(session: Session, events: Sequence[Event], target: str) -> list[Event]:
    """The events about ``target`` (KIND/NAME, in its namespace ``default`` unless
    KIND/NS/NAME) and about everything it caused (see
    :func:`app.pictures.timeline.caused_by`)."""
    from app.cli.printers import resolve_kind
    from app.pictures.timeline import caused_by, events_caused
    from netmodel.errors import InputError, NotFoundError

    k, _, rest = target.partition("/")
    kind = resolve_kind(k)
    if kind is None or not rest:
        raise InputError(f"expected KIND/NAME, got {target!r}", field="--for")
    ns, _, name = rest.rpartition("/")
    key = name if kind in ("Node", "Namespace") else f"{ns or 'default'}/{name}"
    try:
        root = session.store.get(kind, key)
    except NotFoundError:
        raise InputError(f"{kind.lower()} {key} not found", field="--for") from None
    objects = [o for kd in ("ReplicaSet", "Pod", "EndpointSlice") for o in session.store.list(kd)]
    return events_caused(events, caused_by(root, objects))


def events_diagram(
    session: Session, events: Sequence[Event], path: str, *, title: str = "timeline"
) -> None:
    """Write the sequence diagram of ``events`` to ``path`` (.svg, .png or .mmd)."""
    from app.pictures import files
    from app.pictures.scene import pod_nodes
    from app.pictures.sequence import sequence_graph, sequence_mermaid
    from app.pictures.timeline import sequence
    from netmodel.errors import InputError

    suffix = files.suffix_of(path, TIMELINE, option="--diagram")
    tl = sequence(events, pod_nodes(session))
    if suffix != ".mmd" and len(tl.messages) > MAX_MESSAGES:
        raise InputError(
            f"{len(tl.messages)} steps, too many to draw (at most {MAX_MESSAGES}): "
            "keep one object's with --for KIND/NAME, or write Mermaid text (.mmd)",
            field="--diagram",
        )
    if suffix == ".mmd":
        files.write_text(sequence_mermaid(tl, title=title), path)
    else:
        files.write_graph(sequence_graph(tl, title=title), path)


def trace_diagram(session: Session, trace: Mapping[str, Any], path: str, src: str) -> None:
    """Write the topology with ``trace``'s path (its JSON form) to ``path``."""
    from app import emulation
    from app.pictures import files
    from app.pictures.path import path_graph
    from app.pictures.scene import scene

    files.suffix_of(path, GRAPH, option="--diagram")
    clients = emulation.external_sources(session, emulation.resolve_endpoint(session, src))
    network: ClusterNetwork = emulation.view(session, external_clients=clients).network
    files.write_graph(path_graph(scene(session, network=network), trace), path)


def shares_plot(
    counts: Mapping[str, int],
    chi: ChiSquare,
    path: str,
    *,
    title: str,
) -> None:
    """Write the per-endpoint shares of a connect run and its chi-square test ``chi`` to
    ``path`` (.png or .svg)."""
    from app.pictures import files
    from app.pictures.shares import shares_figure

    files.suffix_of(path, GRAPH, option="--plot")
    files.write_figure(shares_figure(counts, chi, title=title), path)


@click.command()
@click.argument("output", metavar="FILE", type=GRAPH_FILE)
@click.option("--node", "node", default=None, help="Draw this node alone (zoom in)")
@click.option("-f", "--filename", "files", multiple=True, help="Throw-away cluster from manifests")
@click.pass_obj
@handle_errors
def topology(ctx: Context, output: str, node: str | None, files: tuple[str, ...]) -> None:
    """Draw the cluster to FILE (.svg or .png): nodes with addresses and podCIDRs,
    cni0, pod veths and IPs, flannel.1 (or host-gw routes), the underlay, Services
    pointing at their endpoints."""
    from app.pictures import files as picture_files
    from app.pictures.scene import scene
    from app.pictures.topology import topology_graph

    session = ctx.session(files)
    try:
        sc = scene(session, node=node)
    finally:
        session.close()
    picture_files.write_graph(topology_graph(sc), output)
    click.echo(
        f"{output}: {len(sc.nodes)} node(s), {len(sc.pods)} pod(s), {len(sc.services)} service(s)"
    )


COMMANDS = [topology]
