"""A :class:`~app.pictures.timeline.Timeline` drawn as a sequence diagram: by
Graphviz (``dot``: one column per lane, one rank per message, lifelines as heavy edges
that keep the columns straight), or as Mermaid ``sequenceDiagram`` text.

Pure: both functions return a value; :mod:`app.pictures.files` writes it.
"""

from __future__ import annotations

import re

import graphviz

from app.pictures.timeline import Timeline

FONT = "Helvetica"


def _lane_colour(lane: str) -> str:
    if lane in ("kubectl",):
        return "#fff7c2"
    if lane in ("apiserver", "store"):
        return "#dbe8f6"
    if lane.startswith(("kubelet", "kube-proxy")):
        return "#e6f2e6"
    return "#e9e1f5"


def sequence_graph(tl: Timeline, *, title: str = "") -> graphviz.Digraph:
    """The timeline as a Graphviz graph: lane heads on top, then one row per message,
    numbered; arrows carry the Event's reason and object, and the store revision."""
    g = graphviz.Digraph("timeline", engine="dot")
    g.attr(
        rankdir="TB",
        fontname=FONT,
        fontsize="12",
        nodesep="0.8",
        ranksep="0.3",
        newrank="true",
        forcelabels="true",
        splines="line",
        label=title,
        labelloc="t",
    )
    g.attr("node", fontname=FONT, fontsize="10")
    g.attr("edge", fontname=FONT, fontsize="8", arrowsize="0.6")
    col = {lane: i for i, lane in enumerate(tl.lanes)}
    with g.subgraph() as heads:
        heads.attr(rank="same")
        for lane, i in col.items():
            heads.node(
                f"h{i}",
                lane,
                shape="box",
                style="rounded,filled",
                fillcolor=_lane_colour(lane),
                group=f"lane{i}",
            )
        for i in range(len(col) - 1):
            heads.edge(f"h{i}", f"h{i + 1}", style="invis")
    rows = len(tl.messages)
    for i in range(len(col)):
        prev = f"h{i}"
        for j in range(rows + 1):
            cur = f"p{i}_{j}"
            g.node(
                cur, "", shape="point", width="0.02", height="0.02", style="invis", group=f"lane{i}"
            )
            g.edge(prev, cur, dir="none", style="dashed", color="#bbbbbb", weight="1000")
            prev = cur
    for j, m in enumerate(tl.messages):
        with g.subgraph() as row:
            row.attr(rank="same")
            for i in range(len(col)):
                row.node(f"p{i}_{j}")
        a, b = col[m.source], col[m.target]
        colour = "#c62828" if m.warning else ("#1565c0" if m.target == "store" else "#333333")
        label = f"{j + 1}. {m.text}"
        if a == b:
            g.node(
                f"s{j}",
                label.replace("\\n", "\\l") + "\\l",
                shape="note",
                fontsize="8",
                style="filled",
                fillcolor="#fafafa",
                color=colour,
            )
            with g.subgraph() as row:
                row.attr(rank="same")
                row.node(f"s{j}")
                if a + 1 < len(col):
                    row.edge(f"p{a}_{j}", f"s{j}", color=colour, arrowhead="none")
                    row.edge(f"s{j}", f"p{a + 1}_{j}", style="invis")
                else:
                    row.edge(f"p{a - 1}_{j}", f"s{j}", style="invis")
                    row.edge(f"s{j}", f"p{a}_{j}", color=colour, arrowhead="none")
        else:
            g.edge(
                f"p{a}_{j}",
                f"p{b}_{j}",
                xlabel=label,
                color=colour,
                fontcolor=colour,
                constraint="false",
            )
    return g


_ID = re.compile(r"[^A-Za-z0-9_]")


def mermaid_id(lane: str) -> str:
    """A Mermaid participant id for a lane (letters, digits, underscores)."""
    return _ID.sub("_", lane)


def sequence_mermaid(tl: Timeline, *, title: str = "") -> str:
    """Mermaid ``sequenceDiagram`` text: one participant per lane (aliased to its name),
    one arrow per message (``->>``; a step inside a component is an arrow to itself)."""
    lines = ["sequenceDiagram"]
    if title:
        lines.append(f"    title {_text(title)}")
    lines.append("    autonumber")
    for lane in tl.lanes:
        kind = "actor" if lane == "kubectl" else "participant"
        lines.append(f"    {kind} {mermaid_id(lane)} as {_text(lane)}")
    for m in tl.messages:
        text = _text(m.text.replace("\\n", ": ", 1).replace("\\n", " "))
        lines.append(f"    {mermaid_id(m.source)}->>{mermaid_id(m.target)}: {text}")
    return "\n".join(lines) + "\n"


def _text(text: str) -> str:
    """Message text Mermaid takes literally: no ``;`` or ``#`` (its statement and entity
    separators), no newlines."""
    return text.replace(";", ",").replace("#", "no. ").replace("\n", " ")
