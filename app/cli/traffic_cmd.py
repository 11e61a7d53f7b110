"""Traffic commands: ``trace``, ``ping``, ``connect``, ``pcap``, ``conntrack``.

Each is written once, over a :class:`dataplane.backends.Backend` that ``--real`` chooses
(:func:`backend_for`): the emulator by default; with ``--real`` the real kernel — on a
persistent cluster (``--state DIR``) the cluster ``svclab up --real`` realised, brought up
to date first if the state changed since (:func:`app.real.ensure_current`); with ``-f
FILE`` a throw-away real cluster realised for the one command and removed after it. A
source given as an IP nobody in the cluster owns is an external client: its namespace is
added (hanging off the router) if missing. ``pcap`` and ``conntrack`` are the emulator's.

``trace --at node/NAME`` evaluates only that node's netfilter (kube-proxy's packet-flow
tests' question); without ``--at`` the packet walks the whole cluster.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.context import Context, handle_errors
from app.cli.printers import format_table
from app.cli.types import (
    COUNT,
    ENDPOINT,
    GRAPH_FILE,
    NEW_FILE,
    NODE_REF,
    PORT,
    READABLE_FILE,
    check_endpoint,
    endpoint_port,
)
from app.stats import CONFIDENCE, ChiSquare, shares_summary
from netmodel.errors import InputError, NotFoundError
from netmodel.ip import split_host_port

# The session, the backends (the emulator, pyroute2) and the netfilter tracer are
# imported inside the commands (see app.cli.main's docstring: start-up).
if TYPE_CHECKING:
    from app.connectpolicy import Attribution
    from app.netpolview import PolicyAgent
    from control.session import Session
    from dataplane.backends import EmulatorBackend, RealBackend
    from dataplane.netfilter.rules import Ruleset
    from netmodel.rulesets import RulesetInput

    AnyBackend = EmulatorBackend | RealBackend

PROTOS = ["tcp", "udp", "icmp", "sctp"]
REAL_HELP = "On the real kernel (svclab up --real; with -f a throw-away one) instead"


# --------------------------------------------------------------------------- helpers


def _ip_of(session: Session, text: str) -> tuple[str, int | None]:
    """An endpoint spec as (IP, port or None) for ``--at`` mode."""
    from app import emulation
    from netmodel.objects import Node, Pod

    text = emulation.resolve_endpoint(session, text)
    if text.startswith("node/"):
        try:
            node = session.store.get("Node", text[5:])
        except NotFoundError:
            raise InputError(f"node {text[5:]} not found", field=text) from None
        assert isinstance(node, Node)
        return node.internal_ips[0], None
    if text.startswith("pod/"):
        try:
            pod = session.store.get("Pod", text[4:])
        except NotFoundError:
            raise InputError(f"pod {text[4:]} not found", field=text) from None
        assert isinstance(pod, Pod)
        if not pod.status.pod_ip:
            raise InputError(f"pod {text[4:]} has no IP yet", field=text)
        return pod.status.pod_ip, None
    if text.count(":") == 1 or text.startswith("["):
        host, port = split_host_port(text)
        return host, port
    return text, None


def _load_override(path: str | None, node: str | None) -> dict[str, RulesetInput]:
    from netmodel.rulesets import IptablesRules

    if not path:
        return {}
    if node is None:
        raise click.UsageError("--iptables-save needs --at node/NAME (whose rules it replaces)")
    return {node: IptablesRules(_read_text(path), source=path)}


def _read_text(path: str) -> str:
    """A file's text, or an InputError naming it (gone, unreadable, not text)."""
    try:
        return Path(path).read_text()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (UTF-8)", file=path) from None


def at_trace(
    session: Session,
    node_name: str,
    src: str,
    dst: str,
    proto: str,
    *,
    all_branches: bool,
    rules_text: str | Ruleset | None = None,
    linear: bool = False,
) -> dict[str, Any]:
    """``--at node/NAME``: the node's netfilter alone, as upstream's flow tests."""
    from app.cli.rules_cmd import node_rules
    from dataplane.netfilter import Flow, FlowResult, FlowTracer
    from dataplane.proxy.savefmt import saved_rule
    from netmodel.objects import Node

    try:
        node = session.store.get("Node", node_name)
    except NotFoundError:
        raise InputError(f"node {node_name} not found", field="--at") from None
    assert isinstance(node, Node)
    sip, _ = _ip_of(session, src)
    dip, dport = _ip_of(session, dst)
    if dport is None and proto != "icmp":
        raise click.UsageError(f"--to {dst}: give a port (IP:PORT or svc/NS/NAME:PORT)")
    if rules_text is None:
        rendered = node_rules(session, node_name, "iptables")
        rules_text = rendered.save_text
    local = ["127.0.0.1", "::1", *node.internal_ips]
    tracer = FlowTracer(rules_text, local, linear=linear)
    flow = Flow(sip, dip, dport or 0, proto)
    result: FlowResult = tracer.trace(flow)
    if all_branches:
        endpoints = [
            {"endpoint": e.endpoint, "probability": round(e.probability, 10)}
            for e in result.endpoints
        ]
        verdict = result.verdict
        masq = result.masquerade
        records = result.branches[0].result.records if result.branches else []
        visited = result.branches[0].result.visited if result.branches else 0
    else:
        import random

        t = tracer.sample(flow, random.Random(session.cluster.spec.seed))
        p = next((b.probability for b in result.branches if b.result.dnat == t.dnat), 1.0)
        endpoints = (
            [{"endpoint": f"{t.dnat[0]}:{t.dnat[1]}", "probability": round(p, 10)}]
            if t.dnat
            else []
        )
        verdict, masq, records, visited = t.verdict, t.masquerade, t.records, t.visited
    return {
        "at": f"node/{node_name}",
        "flow": {"from": sip, "to": dip, "port": dport, "proto": proto},
        "verdict": verdict,
        "output": result.upstream_output(),
        "endpoints": endpoints,
        "masquerade": masq,
        "origin": result.origin,
        "rules_visited": visited,
        "hops": [r.to_dict() | {"text": saved_rule(r.text)} for r in records],
    }


def _render_at(res: dict[str, Any]) -> str:
    f = res["flow"]
    head = f"{f['proto']} {f['from']} -> {f['to']}:{f['port']} at {res['at']}: {res['verdict']}" + (
        " (masquerade)" if res["masquerade"] else ""
    )
    rows = [["HOOK", "TABLE", "CHAIN", "RULE", "EFFECT", "NAT", "CTSTATE", "MARK"]]
    rows += [
        [
            h["hook"],
            h["table"],
            h["chain"],
            str(h["rule"] or "-"),
            h["effect"],
            h["nat"] or "",
            h["ctstate"],
            h["mark"],
        ]
        for h in res["hops"]
    ]
    eps = "\n".join(f"  {e['endpoint']}  p={e['probability']:.4f}" for e in res["endpoints"])
    return head + "\n" + format_table(rows) + ("\nendpoints:\n" + eps if eps else "")


@contextmanager
def backend_for(
    session: Session,
    src: str | None,
    *,
    real: bool = False,
    throwaway: bool = False,
    override: Mapping[str, RulesetInput] | None = None,
) -> Iterator[AnyBackend]:
    """The backend ``--real`` chooses, over ``session``'s cluster (see the module
    docstring; ``throwaway``: the session came from ``-f FILE``). ``src`` (as given on
    the command line) may add an external client. ``override``: rules replacing some
    nodes' (the emulator only)."""
    from app import emulation
    from dataplane.backends import EmulatorBackend, RealBackend, real_backend

    specs = [emulation.resolve_endpoint(session, src)] if src else []
    clients = emulation.external_sources(session, *specs)
    if not real:
        # lazy: only what the packet visits is built (nodes, devices, rules)
        view = emulation.view(
            session, external_clients=clients, rules_override=override, lazy=True
        )
        yield EmulatorBackend(
            view, seed=session.cluster.spec.seed, compiled_cache=emulation.compiled_cache(session)
        )
    elif throwaway:
        with real_backend(emulation.view(session, external_clients=clients)) as be:
            yield be
    else:
        from app import real as real_cluster

        view, cluster = real_cluster.ensure_current(session, external_clients=clients)
        yield RealBackend(view, cluster, timeout=2.0)


def _host(text: str) -> str:
    """``IP:PORT`` -> ``IP``; other forms unchanged."""
    return _split_dst(text)[0]


def _split_dst(text: str) -> tuple[str, int | None]:
    if text.count(":") == 1 and not text.startswith(("pod/", "node/")):
        host, port = split_host_port(text)
        return host, port
    return text, None


def full_trace(
    session: Session,
    src: str,
    dst: str,
    proto: str,
    *,
    sport: int | None,
    all_branches: bool,
    override: dict[str, RulesetInput] | None = None,
    real: bool = False,
    throwaway: bool = False,
) -> Any:
    """One flow through the whole cluster on the chosen backend: the emulator's walk
    (a :class:`~app.names.NamedTrace` when ``dst`` was a DNS name), or what the kernel
    did with one connection (:class:`~dataplane.backends.RealTrace`)."""
    from app import emulation, hopobjects, names, netpolview

    with backend_for(session, src, real=real, throwaway=throwaway, override=override) as be:
        s = emulation.resolve_endpoint(session, src)
        d, port = _split_dst(emulation.resolve_endpoint(session, dst))
        if be.name == "kernel":
            d = _by_name(be, s, d)
            if port is None:
                raise click.UsageError(f"--to {dst}: give a port (IP:PORT or svc/NS/NAME:PORT)")
            rt = be.trace(s, d, port, proto, sport=sport)  # type: ignore[arg-type]
            return hopobjects.annotate(rt, hopobjects.ObjectIndex.from_store(session.store))
        from dataplane.backends import EmulatorBackend

        assert isinstance(be, EmulatorBackend)
        d, looked_up = names.destination(be.cluster, s, d)  # a DNS name: from the source pod
        t = be.trace(s, d, port, proto, sport=sport, all_branches=all_branches)
        t = netpolview.attribute(t, emulation.policy_agent_of(session), netpolview.node_of)
        t = hopobjects.annotate(t, hopobjects.ObjectIndex.from_store(session.store))
        return t if looked_up is None else names.NamedTrace(looked_up, t)


def _by_name(be: AnyBackend, src: str, dst: str, *, quiet: bool = False) -> str:
    """``dst`` itself, or the address a DNS name resolves to from ``src``. The emulator
    resolves as the pod's resolver would and prints the queries, one line each, unless
    ``quiet``; the kernel asks the source pod's own libc (getaddrinfo under ``ip netns
    exec``) and says what it resolved on stderr."""
    from app import names

    if be.name == "kernel":
        if not names.is_name(dst, be.view.network.namespaces):
            return dst
        from app import dnsqueries

        found = dnsqueries.resolve(be, src, dst)
        if found.status != "ok":
            raise InputError(f"cannot resolve {dst!r} from {src}: {found.status}", field="DST")
        click.echo(f"{dst} resolved to {found.addresses[0]} (getaddrinfo in {src})", err=True)
        return found.addresses[0]
    from dataplane.backends import EmulatorBackend

    assert isinstance(be, EmulatorBackend)
    try:
        addr, looked_up = names.destination(be.cluster, src, dst)
    except names.LookupFailed as e:
        if not quiet:
            click.echo(names.query_lines(e.resolution))
        raise
    if looked_up is not None and not quiet:
        click.echo(names.query_lines(looked_up))
        click.echo(f"{dst} resolved to {addr}")
    return addr


def _refuse_on_kernel(conflicts: Mapping[str, object], what: str) -> None:
    bad = [name for name, value in conflicts.items() if value]
    if bad:
        raise click.UsageError(f"{what} --real cannot be combined with {', '.join(bad)}")


# --------------------------------------------------------------------------- trace

NODE_DUMP_HELP = "Evaluate a real node's dump (see `svclab node-dump --help`); no cluster needed"
DUMP_DIR = click.Path(exists=True, file_okay=False)


def _check_flows(flows: list[Any], flows_file: str | None) -> None:
    for i, f in enumerate(flows):
        if not isinstance(f, dict) or "from" not in f or "to" not in f:
            raise InputError("each flow needs 'from' and 'to'", file=flows_file, field=f"[{i}]")
        for end in ("from", "to"):
            try:
                check_endpoint(str(f[end]))
            except ValueError as e:
                raise InputError(str(e), file=flows_file, field=f"[{i}].{end}") from None


def _no_cluster_options(
    what: str, given: dict[str, object], files: tuple[str, ...], on_kernel: bool
) -> None:
    """``--node-dump`` evaluates the dump alone: options about a cluster are refused."""
    given = {**given, "-f": files, "--real": on_kernel}
    clash = [k for k, v in given.items() if v]
    if clash:
        raise click.UsageError(f"{what} evaluates a node dump alone: no {', '.join(clash)}")


@click.command()
@click.option("--from", "src", type=ENDPOINT, help="pod/NS/NAME, node/NAME, an IP")
@click.option(
    "--to",
    "dst",
    type=ENDPOINT,
    help="pod/NS/NAME, node/NAME, IP, IP:PORT, svc/NS/NAME:PORT, or a DNS NAME[:PORT]",
)
@click.option("--proto", type=click.Choice(PROTOS), default="tcp", show_default=True)
@click.option("--sport", type=PORT, default=None, help="Source port (default: ephemeral)")
@click.option("--all", "all_branches", is_flag=True, help="Follow every branch of random choices")
@click.option(
    "--at", "at", type=NODE_REF, default=None, help="node/NAME: evaluate only that node's netfilter"
)
@click.option(
    "--flows",
    "flows_file",
    type=READABLE_FILE,
    default=None,
    help="YAML/JSON list of {from, to, proto} (with --node-dump, also iif: the interface "
    "a flow arrives on)",
)
@click.option(
    "--iptables-save",
    "iptables_save",
    type=READABLE_FILE,
    default=None,
    help="Replace the node's rules by a dump",
)
@click.option(
    "--linear", is_flag=True, help="--at: walk rules one by one, report how many were visited"
)
@click.option("--node-dump", "node_dump", type=DUMP_DIR, default=None, help=NODE_DUMP_HELP)
@click.option(
    "--iif",
    default=None,
    help="--node-dump: the interface the flow arrives on (default: its reverse path)",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("-f", "--filename", "files", multiple=True, help="Throw-away cluster from manifests")
@click.option("--real", "on_kernel", is_flag=True, help=REAL_HELP)
@click.option(
    "--diagram",
    type=GRAPH_FILE,
    default=None,
    help="Draw the topology with the path to FILE.svg|.png",
)
@click.pass_obj
@handle_errors
def trace(
    ctx: Context,
    src: str | None,
    dst: str | None,
    proto: str,
    sport: int | None,
    all_branches: bool,
    at: str | None,
    flows_file: str | None,
    iptables_save: str | None,
    linear: bool,
    node_dump: str | None,
    iif: str | None,
    output: str,
    files: tuple[str, ...],
    on_kernel: bool,
    diagram: str | None,
) -> None:
    """Walk one packet and its reply, and explain every hop and rule."""
    if iif is not None and node_dump is None:
        raise click.UsageError("--iif names an interface of a node dump: give --node-dump")
    if iif is not None and flows_file:
        raise click.UsageError("--flows FILE gives the flows: put iif in each flow, no --iif")
    if node_dump is not None:
        _no_cluster_options(
            "--node-dump",
            {
                "--at": at,
                "--iptables-save": iptables_save,
                "--linear": linear,
                "--diagram": diagram,
            },
            files,
            on_kernel,
        )
    if diagram and (on_kernel or all_branches or at or flows_file):
        raise click.UsageError(
            "--diagram draws one emulated trace: not with --real, --all, --at or --flows"
        )
    if on_kernel:  # one connection on the kernel, and what the kernel did with it
        conflicts = {"--all": all_branches, "--at": at, "--flows": flows_file}
        conflicts |= {"--iptables-save": iptables_save, "--linear": linear}
        _refuse_on_kernel(conflicts, "trace")
        if not src or not dst:
            raise click.UsageError("--from and --to are required")
        if proto not in ("tcp", "udp"):
            raise click.UsageError(
                "trace --real follows tcp and udp connections (ping --real: ICMP)"
            )
    # every option is evaluated or refused, never ignored
    if proto == "icmp" and dst and endpoint_port(dst) is not None:
        raise click.UsageError(f"--to {dst}: ICMP has no ports (--proto icmp)")
    if proto == "icmp" and sport is not None:
        raise click.UsageError("--sport: ICMP has no ports (--proto icmp)")
    if flows_file and (src or dst):
        raise click.UsageError("--flows FILE gives the flows: no --from/--to with it")
    if linear and not at:
        raise click.UsageError("--linear counts the rules --at node/NAME walks: give --at")
    if sport is not None and at:
        raise click.UsageError("--at evaluates a flow without a source port: no --sport")
    flows: list[dict[str, Any]]
    if flows_file:
        import yaml

        try:
            data = yaml.safe_load(_read_text(flows_file))
        except yaml.YAMLError as e:
            raise InputError(f"cannot read flows: {e}", file=flows_file) from None
        if not isinstance(data, list):
            raise InputError("expected a list of {from, to, proto}", file=flows_file)
        flows = data
    else:
        if not src or not dst:
            raise click.UsageError("--from and --to are required (or --flows FILE)")
        flows = [{"from": src, "to": dst, "proto": proto}]
        if iif is not None:
            flows[0]["iif"] = iif
    if node_dump is not None:
        from app.cli.nodedump_cmd import node_dump_trace

        _check_flows(flows, flows_file)
        as_json = output == "json" or bool(flows_file)
        node_dump_trace(node_dump, flows, sport=sport, all_branches=all_branches, as_json=as_json)
        return
    node = at[5:] if at and at.startswith("node/") else None
    if at and node is None:
        raise click.UsageError("--at takes node/NAME")
    session = ctx.session(files)
    try:
        rules_text: str | Ruleset | None = None
        if iptables_save and node:
            from dataplane.netfilter.parse import parse_save

            # parsed here so that errors name the file and line
            rules_text = parse_save(_read_text(iptables_save), source=iptables_save)
        override = {} if node else _load_override(iptables_save, None) if iptables_save else {}
        _check_flows(flows, flows_file)
        for f in flows:
            p = str(f.get("proto", "tcp")).lower()
            if node:
                res = at_trace(
                    session,
                    node,
                    str(f["from"]),
                    str(f["to"]),
                    p,
                    all_branches=all_branches,
                    rules_text=rules_text,
                    linear=linear,
                )
                if f.get("name"):
                    res["name"] = f["name"]
                click.echo(json.dumps(res) if output == "json" or flows_file else _render_at(res))
            else:
                from app.names import LookupFailed, render_lookup

                try:
                    t = full_trace(
                        session,
                        str(f["from"]),
                        str(f["to"]),
                        p,
                        sport=sport,
                        all_branches=all_branches,
                        override=override,
                        real=on_kernel,
                        throwaway=bool(files),
                    )
                except LookupFailed as e:  # show every query, then the error
                    r = e.resolution
                    out = json.dumps({"dns": r.to_json()}) if output == "json" else render_lookup(r)
                    click.echo(out)
                    raise
                if output == "json" or flows_file:
                    click.echo(json.dumps(t.to_json(), indent=None if flows_file else 2))
                else:
                    click.echo(t.render_text())
                if diagram:
                    from app.cli.picture_cmd import trace_diagram

                    trace_diagram(session, t.to_json(), diagram, str(f["from"]))
    finally:
        session.close()


# --------------------------------------------------------------------------- ping


@dataclass(frozen=True, slots=True)
class Reply:
    """One echo request as ping prints it: ``rtt_ms`` None when it got no reply."""

    seq: int
    reply_from: str | None
    ttl: int | None
    rtt_ms: float | None
    note: str = ""


def ping_report(dst: str, target: str, replies: list[Reply], count: int, suffix: str = "") -> str:
    """iputils ping's output: the header, one line per reply (``time=X ms``), the
    statistics and ``rtt min/avg/max/mdev`` when any reply came back."""
    lines = [f"PING {dst} ({target}) 56(84) bytes of data.{suffix}"]
    for r in replies:
        if r.rtt_ms is not None:
            lines.append(
                f"64 bytes from {r.reply_from}: icmp_seq={r.seq} ttl={r.ttl} "
                f"time={_ms(r.rtt_ms)} ms{r.note}"
            )
        else:
            lines.append(f"From {target} icmp_seq={r.seq} no reply{r.note}")
    times = [r.rtt_ms for r in replies if r.rtt_ms is not None]
    loss = 100 * (count - len(times)) // count
    lines.append(f"--- {dst} ping statistics ---")
    lines.append(f"{count} packets transmitted, {len(times)} received, {loss}% packet loss")
    if times:
        avg = sum(times) / len(times)
        mdev = math.sqrt(max(sum(t * t for t in times) / len(times) - avg * avg, 0.0))
        lines.append(
            f"rtt min/avg/max/mdev = {min(times):.3f}/{avg:.3f}/{max(times):.3f}/{mdev:.3f} ms"
        )
    return "\n".join(lines)


def _ms(t: float) -> str:
    """ping's precision: 3 decimals under 1 ms, 2 under 10, 1 under 100, else none."""
    if t < 1:
        return f"{t:.3f}"
    if t < 10:
        return f"{t:.2f}"
    if t < 100:
        return f"{t:.1f}"
    return f"{t:.0f}"


@click.command()
@click.argument("src", type=ENDPOINT)
@click.argument("dst", type=ENDPOINT)
@click.option("-c", "--count", type=COUNT, default=3, show_default=True)
@click.option("-f", "--filename", "files", multiple=True)
@click.option("--real", "on_kernel", is_flag=True, help=REAL_HELP)
@click.pass_obj
@handle_errors
def ping(
    ctx: Context, src: str, dst: str, count: int, files: tuple[str, ...], on_kernel: bool
) -> None:
    """ICMP echo from SRC to DST, output as iputils ping's, with the path each request
    took. time= on the emulator is simulated: 0.05 ms per link (veth, bridge port,
    underlay) crossed by the request and its reply; with --real it is measured (from the
    raw socket's send to the reply's arrival)."""
    from app import emulation

    if endpoint_port(dst) is not None:
        raise click.UsageError(f"{dst}: ping sends ICMP echo to a host: give no port")
    session = ctx.session(files)
    try:
        with backend_for(session, src, real=on_kernel, throwaway=bool(files)) as be:
            s = emulation.resolve_endpoint(session, src)
            d = _host(emulation.resolve_endpoint(session, dst))  # svc/NS/NAME: its ClusterIP
            d = _by_name(be, s, d)  # a DNS name: resolved from the source pod
            results = be.ping(s, d, count)
            kernel = be.name == "kernel"
        target = next((r.target for r in results if r.target), d)
        replies = [
            Reply(
                seq,
                r.reply_from,
                r.ttl,
                r.rtt * 1000 if r.ok and r.rtt is not None else None,
                f"   path: {' > '.join(r.path)}" + ("" if r.ok else f" ({r.detail})")
                if r.path
                else "",
            )
            for seq, r in enumerate(results, 1)
        ]
        click.echo(ping_report(dst, target, replies, count, suffix=" (kernel)" if kernel else ""))
        if not all(r.ok for r in results):
            raise SystemExit(1)
    finally:
        session.close()


# --------------------------------------------------------------------------- connect


class _Progress:
    """A rich progress bar on stderr, shown once a run has lasted a second (and only on
    a terminal: piped output stays clean)."""

    def __init__(self, total: int) -> None:
        import time

        self.total, self.clock = total, time.monotonic
        self.start = self.clock()
        self.bar: Any = None
        self.task: Any = None
        self.tty = sys.stderr.isatty()

    def update(self, done: int) -> None:
        if not self.tty or done & 255:
            return
        if self.bar is None:
            if self.clock() - self.start < 1.0:
                return
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("connections", total=self.total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@click.command()
@click.argument("src", type=ENDPOINT)
@click.argument("dst", type=ENDPOINT)
@click.option("-n", "count", type=COUNT, default=100, show_default=True)
@click.option("--proto", type=click.Choice(["tcp", "udp"]), default="tcp", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json", "jsonl"]),
    default="text",
    help="json: one document; jsonl: one line per connection, then one summary line",
)
@click.option("-f", "--filename", "files", multiple=True)
@click.option("--real", "on_kernel", is_flag=True, help=REAL_HELP)
@click.option("--node-dump", "node_dump", type=DUMP_DIR, default=None, help=NODE_DUMP_HELP)
@click.option(
    "--iif",
    default=None,
    help="--node-dump: the interface the connections arrive on (default: their reverse path)",
)
@click.option(
    "--plot", type=GRAPH_FILE, default=None, help="Draw each endpoint's share to FILE.png|.svg"
)
@click.pass_obj
@handle_errors
def connect(
    ctx: Context,
    src: str,
    dst: str,
    count: int,
    proto: str,
    output: str,
    files: tuple[str, ...],
    on_kernel: bool,
    node_dump: str | None,
    iif: str | None,
    plot: str | None,
) -> None:
    """Open N connections SRC -> DST; per connection the endpoint and the rule that chose
    it; then per-endpoint counts, shares with 95% confidence intervals (Wilson) and a
    chi-square test of equal shares.

    Connections are opened one after the other, each forgotten once its record is
    written (records are streamed, nothing but the counts is kept), so memory stays flat
    however large N is."""
    from app import emulation

    if iif is not None and node_dump is None:
        raise click.UsageError("--iif names an interface of a node dump: give --node-dump")
    if node_dump is not None:
        from app.cli.nodedump_cmd import node_dump_connect

        _no_cluster_options("--node-dump", {"--plot": plot}, files, on_kernel)
        node_dump_connect(node_dump, src, dst, count, proto, output=output, iif=iif)
        return

    session = ctx.session(files)
    try:
        with backend_for(session, src, real=on_kernel, throwaway=bool(files)) as be:
            s = emulation.resolve_endpoint(session, src)
            d, port = _split_dst(emulation.resolve_endpoint(session, dst))
            if port is None:
                raise click.UsageError(f"{dst}: give a port (IP:PORT or svc/NS/NAME:PORT)")
            d = _by_name(be, s, d, quiet=output != "text")
            # NetworkPolicy in the cluster: each connection names the rule that decided
            agent = emulation.policy_agent_of(session)
            conns: Any
            policy: Attribution | None = None
            if be.name == "kernel":
                from dataplane.backends import RealBackend

                assert isinstance(be, RealBackend)
                if agent is not None:
                    policy = _kernel_attribution(session, be, agent, src)
                conns = be.iter_connect(s, d, port, proto, count)  # type: ignore[arg-type]
            else:
                from app.connectpolicy import EmulatedAttribution
                from dataplane.backends import EmulatorBackend

                assert isinstance(be, EmulatorBackend)
                if agent is not None:
                    policy = EmulatedAttribution(agent)
                conns = be.cluster.iter_connect(
                    s,
                    d,
                    proto,  # type: ignore[arg-type]
                    port,
                    count,
                    # the walk is kept only to read its policy verdicts off it
                    record=policy is not None,
                    choice=True,
                    complete=False,
                    release=True,
                )
            report = ConnectReport(
                src, dst, count, output, plot, kernel=be.name == "kernel", policy=policy
            )
            from app.zoneshares import endpoint_zones

            report.zones, report.source = endpoint_zones(session.store), s
            report.run(conns)
    finally:
        session.close()


def _kernel_attribution(
    session: Session, be: RealBackend, agent: PolicyAgent, src: str
) -> Attribution:
    """The kernel's counters of every node's policy rules, read around each connection
    (:class:`app.connectpolicy.KernelAttribution`)."""
    from app.connectpolicy import KernelAttribution
    from dataplane.linux.policyrules import policy_hits

    cluster = be.cluster

    def read(node: str, origins: Any) -> list[Any]:
        return policy_hits(cluster.node_netns(node), origins, backend=cluster.iptables_backend)

    return KernelAttribution(agent, _ip_of(session, src)[0], read)


class ConnectReport:
    """``connect``'s output, one streaming formatter for both backends: per connection a
    line (or record) written as it is made, then per-endpoint counts, shares with Wilson
    intervals and the chi-square test of equal shares, from running tallies (memory stays
    flat however many connections); ``plot``: the shares drawn to that file.

    The kernel's records are :meth:`ConnOutcome.to_json` (their text rows show the source
    the pod saw and the socket's verdict), and its JSON document starts with ``"backend":
    "kernel"``; the emulator's records are :meth:`ConnResult.to_json` with ``chosen_by``,
    the rule that chose the endpoint, in ``iptables-save`` form. ``-o json`` is one
    document ``{..., "connections": [records], <summary keys>}``; ``-o jsonl`` one record
    per line, then ``{"summary": {...}}``.

    ``policy`` (given when the cluster holds a NetworkPolicy): the rules that decided
    each connection (:mod:`app.connectpolicy`); then each record carries ``"policy"``,
    a list of :func:`~app.connectpolicy.decision_json` (empty when no policy decided
    it), the summary ``"policy_verdicts"`` (:meth:`~app.connectpolicy.PolicyTally.summary`)
    and the text, after the chi-square line, a table of the connections per outcome and
    deciding rule (none when no connection met a policy)."""

    def __init__(
        self,
        src: str,
        dst: str,
        count: int,
        output: str,
        plot: str | None,
        *,
        kernel: bool,
        policy: Attribution | None = None,
    ) -> None:
        self.src, self.dst, self.count, self.output, self.plot = src, dst, count, output, plot
        self.kernel = kernel
        self.policy = policy
        # a run names a handful of distinct rules: each is put in save form once
        self._saved: dict[str, str] = {}
        #: zone by endpoint address (app.zoneshares.endpoint_zones; empty: no zones)
        self.zones: dict[str, str] = {}
        self.source = ""

    def _plot(self, counts: Counter[str], chi: ChiSquare, where: str) -> None:
        if self.plot:
            from app.cli.picture_cmd import shares_plot

            title = f"connect {self.src} -> {self.dst}, {where}"
            shares_plot(counts, chi, self.plot, title=title)

    def _rule(self, text: str | None) -> str | None:
        """``text`` in ``iptables-save`` form, memoised."""
        if text is None:
            return None
        saved = self._saved.get(text)
        if saved is None:
            from dataplane.proxy.savefmt import saved_rule

            saved = self._saved[text] = saved_rule(text)
        return saved

    def _record(self, c: Any) -> dict[str, Any]:
        rec: dict[str, Any] = c.to_json()
        if not self.kernel:
            rec["chosen_by"] = self._rule(c.chosen_by)
        return rec

    def _head(self, width: int) -> str:
        if self.kernel:
            return (
                f"{'#':>{width}}  SPORT  {'ENDPOINT':<21}  {'POD':<40}  "
                f"{'SOURCE SEEN':<21}  VERDICT\n"
            )
        return f"{'#':>{width}}  SPORT  {'ENDPOINT':<21}  {'POD':<40}  CHOSEN BY\n"

    def _row(self, i: int, c: Any, width: int) -> str:
        if self.kernel:
            seen = f"{c.source_seen}:{c.sport_seen}" if c.source_seen else "-"
            return (
                f"{i:>{width}}  {c.sport or '-':>5}  {c.endpoint or '-':<21}  "
                f"{c.pod or '-':<40}  {seen:<21}  {c.verdict}\n"
            )
        return (
            f"{i:>{width}}  {c.sport:>5}  {c.endpoint or c.verdict:<21}  "
            f"{c.pod or '-':<40}  {self._rule(c.chosen_by) or '-'}\n"
        )

    def run(self, conns: Iterator[Any]) -> None:
        output, count, kernel = self.output, self.count, self.kernel
        label = _label if kernel else _emulated_label
        counts: Counter[str] = Counter()
        policy = self.policy
        if policy is not None:
            from app.connectpolicy import PolicyTally, decision_json

            tally = PolicyTally()
        progress = _Progress(count)
        out = sys.stdout
        write = out.write
        encode = json.JSONEncoder().encode
        record = self._record
        width = len(str(count))
        try:
            if output == "json":
                write(('{"backend": "kernel", ' if kernel else "{") + '"connections": [\n')
            elif output == "text":
                write(self._head(width))
            sep = ""
            for i, c in enumerate(conns, 1):
                outcome = label(c)
                counts[outcome] += 1
                rec = None
                if policy is not None:
                    decided = policy(c)
                    tally.add(outcome, decided)
                    if output != "text":
                        rec = record(c)
                        rec["policy"] = [decision_json(d) for d in decided]
                if output == "jsonl":
                    write(encode(rec or record(c)) + "\n")
                elif output == "json":
                    write(sep + encode(rec or record(c)))
                    sep = ",\n"
                else:
                    write(self._row(i, c, width))
                if not i & 255:
                    progress.update(i)
        finally:
            progress.close()
        summary = shares_summary(counts)
        if policy is not None:
            summary["policy_verdicts"] = tally.summary()
        if self.zones:
            from app.zoneshares import zone_shares, zone_table

            summary["zones"] = zone_shares(counts, self.zones)
        chi = summary["chi_square"]
        self._plot(counts, ChiSquare(**chi), "real kernel" if kernel else "emulated")
        if output == "json":
            write("\n],\n" + json.dumps(summary, indent=2)[1:] + "\n")
            return
        if output == "jsonl":
            write(json.dumps({"summary": summary}) + "\n")
            return
        total = sum(counts.values())
        rows = [["ENDPOINT", "COUNT", "SHARE", f"{CONFIDENCE:.0%} CI"]]
        for k, v in counts.most_common():
            lo, hi = summary["confidence_intervals"][k]
            rows.append([k, str(v), f"{v / total:.3f}", f"{lo:.3f}-{hi:.3f}"])
        click.echo("")
        click.echo(format_table(rows))
        click.echo(
            f"\nchi-square vs equal shares: {chi['statistic']:.3f} (dof {chi['dof']}), "
            f"p = {chi['p_value']:.4f}"
        )
        if policy is not None and tally.counts:
            click.echo("")
            click.echo(format_table(tally.rows()))
        if "zones" in summary:
            rows = zone_table(summary["zones"], self.zones.get(self.source))
            click.echo("\n" + format_table(rows))


def _emulated_label(c: Any) -> str:
    return c.endpoint or c.verdict


def _label(c: Any) -> str:
    if c.verdict != "delivered":
        return c.verdict
    return c.endpoint or f"pod/{c.pod}"


# --------------------------------------------------------------------------- pcap, conntrack


@click.command()
@click.option("--from", "src", type=ENDPOINT, required=True)
@click.option("--to", "dst", type=ENDPOINT, required=True)
@click.option("--proto", type=click.Choice(PROTOS), default="tcp")
@click.option("-w", "write", type=NEW_FILE, required=True, help="pcap file to write")
@click.option("-f", "--filename", "files", multiple=True)
@click.pass_obj
@handle_errors
def pcap(ctx: Context, src: str, dst: str, proto: str, write: str, files: tuple[str, ...]) -> None:
    """Trace one packet and write its frames on every hop as a pcap (Wireshark opens it)."""
    from app import emulation

    if proto == "icmp" and endpoint_port(dst) is not None:
        raise click.UsageError(f"--to {dst}: ICMP has no ports (--proto icmp)")
    session = ctx.session(files)
    try:
        from dataplane.backends import EmulatorBackend

        with backend_for(session, src) as be:
            assert isinstance(be, EmulatorBackend)
            s = emulation.resolve_endpoint(session, src)
            d, port = _split_dst(emulation.resolve_endpoint(session, dst))
            t = be.trace(s, d, port, proto)
            n = be.cluster.pcap(t, write)
        click.echo(f"{n} frames written to {write} ({t.verdict})")
    finally:
        session.close()


@click.command()
@click.option("--node", "node_name", required=True)
@click.option(
    "--from", "src", type=ENDPOINT, default=None, help="First open a connection from here..."
)
@click.option("--to", "dst", type=ENDPOINT, default=None, help="...to here")
@click.option("-f", "--filename", "files", multiple=True)
@click.option("--real", "on_kernel", is_flag=True, help=REAL_HELP)
@click.pass_obj
@handle_errors
def conntrack(
    ctx: Context,
    node_name: str,
    src: str | None,
    dst: str | None,
    files: tuple[str, ...],
    on_kernel: bool,
) -> None:
    """Print a node's conntrack table like `conntrack -L` (optionally after a connection:
    on the emulator it stays open, ESTABLISHED; the kernel's client closes it, so its
    entry is in TIME_WAIT)."""
    from app import emulation

    if (src is None) != (dst is None):
        raise click.UsageError("--from and --to go together")
    session = ctx.session(files)
    try:
        with backend_for(session, src or dst, real=on_kernel, throwaway=bool(files)) as be:
            node = node_name
            if be.name == "kernel":  # the emulator checks its own (any namespace)
                node = node_name.removeprefix("node/")
                if f"node/{node}" not in be.view.network.namespaces:
                    raise InputError(f"no such node {node_name!r}", field="--node")
            if src and dst:
                s = emulation.resolve_endpoint(session, src)
                d, port = _split_dst(emulation.resolve_endpoint(session, dst))
                if port is None:
                    raise click.UsageError(f"--to {dst}: give a port (IP:PORT or svc/NS/NAME:PORT)")
                if be.name == "kernel":
                    be.connect(s, _by_name(be, s, d), port, "tcp", 1)
                else:
                    from dataplane.backends import EmulatorBackend

                    assert isinstance(be, EmulatorBackend)
                    be.cluster.connect(s, d, "tcp", port, 1)  # left open: ESTABLISHED
            for line in be.conntrack(node):
                click.echo(line)
    finally:
        session.close()


COMMANDS = [trace, ping, connect, pcap, conntrack]
