"""``svclab report -o report.html``: the cluster on one self-contained page (see
:mod:`app.pictures.report`). The explorer's traces are computed here: every running
pod to every Service port with a ClusterIP when there are at most :data:`MAX_PAIRS`
such pairs, else only the ``--pairs`` asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from app.cli.context import Context, handle_errors
from app.cli.types import HTML_FILE

if TYPE_CHECKING:
    from app.pictures.report import PairView, ServiceRow
    from app.pictures.scene import Scene
    from control.session import Session

#: the most pod x Service pairs traced without ``--pairs``
MAX_PAIRS = 60


def _all_pairs(scene: Scene) -> list[tuple[str, str]]:
    dsts = [
        f"svc/{s.key}:{port.split('/', 1)[0]}"
        for s in scene.services
        if s.cluster_ip and s.cluster_ip != "None"
        for port in s.ports
    ]
    return [(f"pod/{p.key}", d) for p in scene.pods for d in dsts]


def parse_pairs(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """``SRC=DST`` items, several per value when separated by commas."""
    out = []
    for value in values:
        for item in value.split(","):
            src, sep, dst = item.strip().partition("=")
            if not sep or not src or not dst:
                raise click.UsageError(f"--pairs: expected SRC=DST, got {item.strip()!r}")
            out.append((src, dst))
    return out


def _pair_views(session: Session, scene: Scene, pairs: list[tuple[str, str]]) -> list[PairView]:
    from app import emulation
    from app.pictures.files import render_graph
    from app.pictures.path import path_graph
    from app.pictures.report import PairView
    from app.pictures.scene import scene as make_scene

    sources = [emulation.resolve_endpoint(session, s) for s, _ in pairs]
    clients = emulation.external_sources(session, *sources)
    view = emulation.view(session, external_clients=clients)
    emu = emulation.emulator(session, external_clients=clients)
    full = make_scene(session, network=view.network) if clients else scene
    out = []
    for (src, dst), s in zip(pairs, sources, strict=True):
        d = emulation.resolve_endpoint(session, dst)
        host, _, port = d.rpartition(":") if d.count(":") == 1 else (d, "", "")
        t = emu.trace(s, host, "tcp", int(port) if port else None)
        tj = t.to_json()
        svg = render_graph(path_graph(full, tj), "svg").decode()
        summary = f"{t.packet.summary()}: {t.verdict}"
        if t.verdict == "delivered" and t.delivered_to is not None:
            to = t.delivered_to
            summary += f", to {to.ip}:{to.port} ({f'pod {to.pod}' if to.pod else to.netns})"
        elif t.reason:
            summary += f" ({t.reason})"
        if t.masquerade:
            summary += f", source masqueraded to {t.source_seen}"
        out.append(PairView(src, dst, svg, summary))
    return out


def _service_rows(scene: Scene) -> list[ServiceRow]:
    from app.pictures.report import ServiceRow

    return [
        ServiceRow(
            s.key,
            s.type,
            s.cluster_ip or "",
            ", ".join(s.ports),
            ", ".join(e.ip + (f" ({e.pod})" if e.pod else "") for e in s.endpoints) or "<none>",
        )
        for s in scene.services
    ]


@click.command()
@click.option(
    "-o", "--output", "output", type=HTML_FILE, required=True, help="The HTML file to write"
)
@click.option(
    "--pairs",
    "pairs",
    multiple=True,
    help="SRC=DST to trace for the explorer (repeat, or comma-separated); "
    f"default: every pod x Service port when at most {MAX_PAIRS}",
)
@click.option("-f", "--filename", "files", multiple=True, help="Throw-away cluster from manifests")
@click.pass_obj
@handle_errors
def report(ctx: Context, output: str, pairs: tuple[str, ...], files: tuple[str, ...]) -> None:
    """Write one self-contained HTML page: topology, Services, timeline, and an
    explorer of traced paths (no network needed to open it)."""
    from app.pictures import files as picture_files
    from app.pictures.report import Report, report_html
    from app.pictures.scene import MAX_NODES, TooManyNodesError, pod_nodes, scene
    from app.pictures.sequence import sequence_graph
    from app.pictures.timeline import sequence
    from app.pictures.topology import topology_graph
    from control.events import timeline

    chosen = parse_pairs(pairs)
    session = ctx.session(files)
    try:
        try:
            sc = scene(session)
        except TooManyNodesError:
            raise TooManyNodesError(
                f"a report draws the whole cluster: at most {MAX_NODES} nodes "
                "(svclab topology --node NAME draws one node of a bigger one)",
                field="-o",
            ) from None
        note = ""
        if not chosen:
            chosen = _all_pairs(sc)
            if len(chosen) > MAX_PAIRS:
                note = (
                    f"{len(chosen)} pod x Service pairs: too many to trace them all "
                    f"(at most {MAX_PAIRS}); name some with svclab report --pairs SRC=DST"
                )
                chosen = []
        views = _pair_views(session, sc, chosen) if chosen else []
        tl = sequence(timeline(session.store), pod_nodes(session))
        name = session.cluster.metadata.get("name", "svclab")
    finally:
        session.close()
    page = report_html(
        Report(
            title=f"svclab report: cluster {name}",
            topology_svg=picture_files.render_graph(topology_graph(sc), "svg").decode(),
            timeline_svg=picture_files.render_graph(sequence_graph(tl), "svg").decode(),
            services=tuple(_service_rows(sc)),
            pairs=tuple(views),
            note=note,
        )
    )
    picture_files.write_text(page, output)
    click.echo(f"{output}: {len(sc.nodes)} node(s), {len(views)} traced pair(s)")


COMMANDS = [report]
