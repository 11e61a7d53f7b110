"""One self-contained HTML page about a cluster: the topology, the Services table, the
timeline, and an explorer that shows the traced path of a chosen (source, destination)
pair. Everything is inline (SVG, CSS, a few lines of JavaScript); the page loads nothing.

The explorer keeps each pair's picture in a ``<template>`` and copies the chosen one into
``#path-view``; the choice is mirrored in the address's fragment
(``report.html#src=pod/default/a&dst=svc/default/web:80``), so a link opens a pair (and
shows the explorer first).

Pure: :func:`report_html` turns a :class:`Report` into the page's text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True, slots=True)
class PairView:
    """One precomputed trace: its source and destination as the CLI spells them, the
    picture (an ``<svg>`` element's text) and a one-line summary."""

    src: str
    dst: str
    svg: str
    summary: str


@dataclass(frozen=True, slots=True)
class ServiceRow:
    name: str
    type: str
    cluster_ip: str
    ports: str
    endpoints: str


@dataclass(frozen=True)
class Report:
    title: str
    topology_svg: str
    timeline_svg: str
    services: tuple[ServiceRow, ...]
    pairs: tuple[PairView, ...]
    note: str = ""


def svg_element(svg_document: str) -> str:
    """The ``<svg>...</svg>`` element of an SVG document (drops the XML prolog and the
    DOCTYPE, which have no place inside HTML)."""
    start = svg_document.find("<svg")
    return svg_document[start:] if start >= 0 else svg_document


CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.picture { overflow: auto; border: 1px solid #ddd; padding: 4px; max-height: 80vh; }
.picture svg { max-width: none; height: auto; }
#path-view svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f0f0f0; }
#explorer label { margin-right: 1em; }
#path-summary { margin: 0.6em 0; font-family: monospace; }
nav a { margin-right: 1em; }
"""

JS = """
(function () {
  var data = JSON.parse(document.getElementById('pairs-data').textContent);
  var src = document.getElementById('src'), dst = document.getElementById('dst');
  var view = document.getElementById('path-view');
  var summary = document.getElementById('path-summary');
  function show(remember) {
    var key = src.value + '\\u0000' + dst.value;
    var pair = data[key];
    view.innerHTML = '';
    if (pair === undefined) {
      summary.textContent = 'no trace precomputed for ' + src.value + ' -> ' + dst.value +
        ' (svclab report --pairs SRC=DST)';
      view.setAttribute('data-pair', '');
      return;
    }
    var tpl = document.getElementById(pair.template);
    view.appendChild(document.importNode(tpl.content, true));
    view.setAttribute('data-pair', src.value + ' -> ' + dst.value);
    summary.textContent = pair.summary;
    var frag = 'src=' + encodeURIComponent(src.value) + '&dst=' + encodeURIComponent(dst.value);
    if (remember) { history.replaceState(null, '', '#' + frag); }
  }
  function fromHash() {
    var params = new URLSearchParams(location.hash.slice(1));
    if (params.get('src')) { src.value = params.get('src'); }
    if (params.get('dst')) { dst.value = params.get('dst'); }
    return params.has('src') || params.has('dst');
  }
  src.addEventListener('change', function () { show(true); });
  dst.addEventListener('change', function () { show(true); });
  window.addEventListener('hashchange', function () { fromHash(); show(false); });
  var linked = fromHash();
  show(false);
  if (linked) {  // a link to a pair: show the explorer first
    var section = document.getElementById('explorer-section');
    section.parentNode.insertBefore(section, document.getElementById('topology-section'));
  }
})();
"""


def _options(values: list[str], select_id: str, label: str) -> str:
    opts = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
    return f'<label>{label} <select id="{select_id}">{opts}</select></label>'


def report_html(r: Report) -> str:
    """The page. Each pair's ``<template>`` has id ``pair-N``; ``#pairs-data`` maps
    ``SRC\\0DST`` to its template and summary."""
    srcs = list(dict.fromkeys(p.src for p in r.pairs))
    dsts = list(dict.fromkeys(p.dst for p in r.pairs))
    data = {
        f"{p.src}\0{p.dst}": {"template": f"pair-{i}", "summary": p.summary}
        for i, p in enumerate(r.pairs)
    }
    data_json = json.dumps(data).replace("</", "<\\/")
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{escape(c)}</td>" for c in (s.name, s.type, s.cluster_ip, s.ports))
        + f"<td>{escape(s.endpoints)}</td></tr>"
        for s in r.services
    )
    templates = "\n".join(
        f'<template id="pair-{i}">{svg_element(p.svg)}</template>' for i, p in enumerate(r.pairs)
    )
    note = f"<p>{escape(r.note)}</p>" if r.note else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(r.title)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>{escape(r.title)}</h1>
<nav><a href="#topology">Topology</a><a href="#services">Services</a>
<a href="#timeline">Timeline</a><a href="#explorer">Explorer</a></nav>
<section id="topology-section">
<h2 id="topology">Topology</h2>
<div class="picture" id="topology-picture">{svg_element(r.topology_svg)}</div>
</section>
<section id="services-section">
<h2 id="services">Services</h2>
<table id="services-table">
<tr><th>NAME</th><th>TYPE</th><th>CLUSTER-IP</th><th>PORTS</th><th>ENDPOINTS</th></tr>
{rows}
</table>
</section>
<section id="timeline-section">
<h2 id="timeline">Timeline</h2>
<div class="picture" id="timeline-picture">{svg_element(r.timeline_svg)}</div>
</section>
<section id="explorer-section">
<h2 id="explorer">Explorer: the path of a packet</h2>
{note}
<div>{_options(srcs, "src", "from")}{_options(dsts, "dst", "to")}</div>
<div id="path-summary"></div>
<div class="picture" id="path-view"></div>
</section>
{templates}
<script type="application/json" id="pairs-data">{data_json}</script>
<script>{JS}</script>
</body>
</html>
"""
