"""``svclab node-dump collect DIR`` and the ``--node-dump DIR`` form of ``trace`` and
``connect``: a real node's state, as the standard tools print it, evaluated as that
node's kernel would (:mod:`dataplane.nodedump`).

Flows name addresses only (``--from IP``, ``--to IP:PORT``): a node dump carries no
cluster objects to resolve ``svc/`` or ``pod/`` names against.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import click

from app.cli.context import handle_errors
from app.cli.printers import format_table
from netmodel.ip import split_host_port

if TYPE_CHECKING:
    from dataplane.nodedump import BranchOutcome, NodeFlow, NodeTracer

__all__ = ["COMMANDS", "node_dump_connect", "node_dump_trace"]


def _address(text: str, what: str, *, port: bool) -> tuple[str, int | None]:
    """``IP`` or ``IP:PORT`` (``[v6]:PORT``); other forms need a cluster."""
    from ipaddress import ip_address

    if text.startswith(("svc/", "pod/", "node/")):
        raise click.UsageError(
            f"{what} {text}: a node dump has no cluster objects; give an address (IP or IP:PORT)"
        )
    host, p = text, None
    if text.count(":") == 1 or text.startswith("["):
        try:
            host, p = split_host_port(text)
        except ValueError as e:
            raise click.UsageError(f"{what} {text}: {e}") from None
    try:
        ip_address(host)
    except ValueError:
        raise click.UsageError(f"{what} {text}: not an IP address") from None
    if port and p is None:
        raise click.UsageError(f"{what} {text}: give a port (IP:PORT)")
    return host, p


def _tracer(directory: str) -> NodeTracer:
    from dataplane.nodedump import NodeTracer, load_node_dump

    return NodeTracer(load_node_dump(directory))


def _flow(
    src: str, dst: str, proto: str, sport: int | None, iif: str | None = None
) -> NodeFlow:
    from dataplane.nodedump import NodeFlow

    s, _ = _address(src, "--from", port=False)
    d, dport = _address(dst, "--to", port=proto != "icmp")
    if proto == "icmp" and dport is not None:
        raise click.UsageError(f"--to {dst}: ICMP has no ports (--proto icmp)")
    return NodeFlow(s, d, dport or 0, proto, 40000 if sport is None else sport, iif)


def _known_iif(tracer: NodeTracer, directory: str, name: str, what: str) -> str:
    """``name`` if the dump has an interface of that name (one with an address or a
    route), else one line naming the dump, ``what`` (the option, or the flow's field) and
    the interfaces it does have."""
    from netmodel.errors import InputError

    if name not in tracer.fib.interfaces:
        have = ", ".join(sorted(tracer.fib.interfaces)) or "none"
        raise InputError(
            f"{what} {name!r}: no interface of that name has an address or a route "
            f"in this node dump (it has: {have})",
            file=directory,
        )
    return name


def _iif(tracer: NodeTracer, directory: str, index: int, f: dict[str, Any]) -> str | None:
    """A flow's ``iif`` (the interface it arrives on), checked against the dump."""
    if f.get("iif") is None:
        return None
    what = f"flow {index} ({f.get('name') or f['from']}): iif"
    return _known_iif(tracer, directory, str(f["iif"]), what)


def _hops(b: BranchOutcome) -> list[dict[str, Any]]:
    from app.hopobjects import refs_from_rule
    from dataplane.proxy.savefmt import saved_rule
    from netmodel.objectref import objects_json

    out = []
    for r in b.records:
        hop = r.to_dict() | {"text": saved_rule(r.text)}
        refs = refs_from_rule(r.text or "", r.chain or "")
        if refs:  # what the rule's comment or chain name says made it (no objects here)
            hop["object"] = objects_json(tuple(refs))
        out.append(hop)
    return out


def node_dump_trace(
    directory: str,
    flows: list[dict[str, Any]],
    *,
    sport: int | None,
    all_branches: bool,
    as_json: bool,
    seed: int = 0,
) -> None:
    """``trace --node-dump DIR``: each flow through the node (one JSON line per flow
    with ``--flows``; ``--all`` every branch, else one sampled from ``seed``)."""
    import random

    from dataplane.nodedump import summarise

    tracer = _tracer(directory)
    for i, f in enumerate(flows):
        proto = str(f.get("proto", "tcp")).lower()
        flow = _flow(str(f["from"]), str(f["to"]), proto, sport, _iif(tracer, directory, i, f))
        origin = tracer.origin(flow)
        if all_branches:
            branches = tracer.trace(flow)
        else:
            branches = [tracer.sample(flow, random.Random(seed))]
        res = summarise(flow, origin, branches)
        res = {"at": f"node-dump {directory}", **res}
        if tracer.dump.sysctls.assumed:
            res["assumed"] = list(tracer.dump.sysctls.assumed)
        res["rules_visited"] = branches[0].visited if branches else 0
        res["hops"] = _hops(branches[0]) if branches else []
        if f.get("name"):
            res["name"] = f["name"]
        click.echo(json.dumps(res) if as_json else render(res))


def _as_list(obj: Any) -> list[dict[str, Any]]:
    return obj if isinstance(obj, list) else [obj]


def _ref_text(o: dict[str, Any]) -> str:
    out = f"{o['kind']} {o['namespace']}/{o['name']} {o['field']}"
    return f"{out} ({o['detail']})" if o.get("detail") else out


def render(res: dict[str, Any]) -> str:
    """The text form of one ``trace --node-dump`` answer."""
    f = res["flow"]
    port = f":{f['port']}" if f["proto"] != "icmp" else ""
    if res["masquerade"]:
        nat = f"source NAT on every branch, source seen: {res['source']}"
    elif any(e["masquerade"] for e in res["endpoints"]):
        nat = "source NAT on some branches only"
    else:
        nat = f"no source NAT, source seen: {res['source'] or f['from']}"
    head = f"{f['proto']} {f['from']}:{f['sport']} -> {f['to']}{port} at {res['at']}: "
    head += f"{res['verdict']} ({nat})"
    lines = [head]
    for r in res["reasons"]:
        lines.append(f"  dropped by {r}")
    rows = [["HOOK", "TABLE", "CHAIN", "RULE", "EFFECT", "NAT", "CTSTATE", "MARK"]]
    keys = ("hook", "table", "chain", "rule", "effect", "nat", "ctstate", "mark")
    rows += [[str(h[k] or ("-" if k == "rule" else "")) for k in keys] for h in res["hops"]]
    lines.append(format_table(rows))
    made = [
        f"  rule {i}: " + "; ".join(_ref_text(o) for o in _as_list(h["object"]))
        for i, h in enumerate(res["hops"], 1)
        if h.get("object")
    ]
    if made:
        lines.append("made by (rule comments and chain names):")
        lines.extend(made)
    if res["endpoints"]:
        lines.append("endpoints:")
        for e in res["endpoints"]:
            m = "source NAT" if e["masquerade"] else "no source NAT"
            lines.append(
                f"  {e['endpoint']}  p={e['probability']:.4f}  {e['verdict']}  {m}, "
                f"source seen: {e['source']}"
            )
    if res.get("assumed"):
        lines.append("assumed (no sysctl.txt): " + ", ".join(res["assumed"]))
    return "\n".join(lines)


def node_dump_connect(
    directory: str,
    src: str,
    dst: str,
    count: int,
    proto: str,
    *,
    output: str = "text",
    seed: int = 0,
    iif: str | None = None,
) -> None:
    """``connect --node-dump DIR``: ``count`` connections from consecutive source ports,
    each committed to the node's state (conntrack, ``recent``, IPVS schedulers); ``iif``:
    the interface they arrive on (checked against the dump; None: the source's reverse
    path, or OUTPUT when the source is the node's own address). ``output``: ``text``,
    ``json`` (one document) or ``jsonl`` (one line per connection, then
    ``{"summary": {...}}``)."""
    import random

    tracer = _tracer(directory)
    if iif is not None:
        _known_iif(tracer, directory, iif, "--iif")
    rng = random.Random(seed)
    conns = []
    for i in range(count):
        flow = _flow(src, dst, proto, 40000 + i, iif)
        b = tracer.sample(flow, rng, commit=True)
        conns.append(
            {
                "sport": flow.sport,
                "verdict": b.verdict,
                "endpoint": b.endpoint,
                "masquerade": b.masquerade,
                "source": b.source if b.verdict == "ACCEPT" else None,
                "reason": b.reason,
            }
        )
    counts = Counter(str(c["endpoint"] or c["verdict"]) for c in conns)
    from app.stats import chi_square

    chi = chi_square(list(counts.values()))
    where = {"iif": iif} if iif is not None else {}
    summary = {"counts": dict(counts), "chi_square": chi.to_json()}
    if output == "json":
        click.echo(json.dumps({**where, "connections": conns, **summary}, indent=2))
        return
    if output == "jsonl":
        for c in conns:
            click.echo(json.dumps(c))
        click.echo(json.dumps({"summary": {**where, **summary}}))
        return
    rows = [["#", "SPORT", "ENDPOINT", "SOURCE SEEN", "SOURCE NAT"]]
    for i, c in enumerate(conns, 1):
        rows.append(
            [
                str(i),
                str(c["sport"]),
                str(c["endpoint"] or c["verdict"]),
                str(c["source"] or "-"),
                "yes" if c["masquerade"] else "no",
            ]
        )
    click.echo(format_table(rows))
    total = sum(counts.values())
    table = [["ENDPOINT", "COUNT", "SHARE"]]
    table += [[k, str(v), f"{v / total:.3f}"] for k, v in counts.most_common()]
    click.echo("\n" + format_table(table))
    click.echo(
        f"\nchi-square vs equal shares: {chi.statistic:.3f} (dof {chi.dof}), "
        f"p = {chi.p_value:.4f}"
    )


@click.group("node-dump")
def node_dump() -> None:
    """A real node's dataplane state as the standard tools print it.

    \b
    DIR holds one file per tool (all optional; at least one rule source):
      iptables-nft-save.txt     iptables-nft-save -c
      iptables-legacy-save.txt  iptables-legacy-save -c
      iptables-save.txt         iptables-save [-c] pasted from a node
      nft-ruleset.txt           nft list ruleset
      ip-addr.json              ip -j addr
      ip-route.json             ip -j route show table all
      ip-rule.json              ip -j rule
      ip-neigh.json             ip -j neigh
      ipset.txt                 ipset save, or an ipset -L listing
      ipvsadm.txt               ipvsadm -Sn, or an ipvsadm -L -n listing
      conntrack.txt             conntrack -L
      sysctl.txt                sysctl lines: ip_forward, route_localnet, rp_filter,
                                bridge-nf-call-iptables
      manifest.json             what collect ran and skipped

    Use it with `svclab trace --node-dump DIR` and `svclab connect --node-dump DIR`."""


@node_dump.command("collect")
@click.argument("directory", type=click.Path(file_okay=False))
@handle_errors
def collect_cmd(directory: str) -> None:
    """Record this host's (or, under `ip netns exec NAME`, that namespace's) state
    into DIR; missing tools are skipped and noted in DIR/manifest.json."""
    from dataplane.linux.nodedump import collect

    manifest = collect(directory)
    for name, cmd in manifest["written"].items():
        click.echo(f"wrote {name}  ({cmd})")
    for name, why in manifest["skipped"].items():
        click.echo(f"skipped {name}: {why}", err=True)


COMMANDS = [node_dump]
