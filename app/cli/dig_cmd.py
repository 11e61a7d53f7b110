"""``svclab dig SRC NAME [TYPE]``: ask cluster DNS from a pod, dig-like.

The question is a UDP datagram from the pod to its first nameserver (kube-dns's
ClusterIP with ClusterFirst) or to ``--server``, walked through the cluster like any
other packet (kube-proxy DNATs it to a DNS pod); a truncated answer is asked again over
TCP. As dig, NAME is taken as absolute (``+nosearch``); ``--search`` asks the names of
the pod's search list in turn (glibc's order, ndots included), of TYPE and of
``--server`` when given, printing every question. ``-o json`` gives the answer sections
and the path.

``--hops`` shows how each question went: on the emulator every hop of every walk (text:
the trace tables after each answer; JSON: ``traces``), on the kernel (``--real``) the
conntrack entries the nodes kept for the question (text: ``;; CONNTRACK:`` lines; JSON:
``conntrack``), which show the DNAT kube-proxy's rules made. Every option is evaluated
on both backends. Exit status as dig's: 0 when an answer came back (whatever its
status), 9 when none did; 1 for bad input, 2 for bad usage.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import click

from app.cli.context import Context, handle_errors
from app.cli.types import IPV4
from netmodel.errors import InputError

NO_REPLY_EXIT = 9


@click.command()
@click.argument("src")
@click.argument("name")
@click.argument("qtype", default="A")
@click.option(
    "--server", type=IPV4, default=None, help="Ask this IP (default: the pod's nameserver)"
)
@click.option("--tcp", is_flag=True, help="Ask over TCP (dig +tcp)")
@click.option("--search", is_flag=True, help="Use the pod's search list (dig +search)")
@click.option(
    "--hops",
    is_flag=True,
    help="Show how each question went: every hop (emulator), conntrack entries (--real)",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("-f", "--filename", "files", multiple=True, help="Throw-away cluster from manifests")
@click.option("--real", "on_kernel", is_flag=True, help="Ask from the real pod's namespace")
@click.pass_obj
@handle_errors
def dig(
    ctx: Context,
    src: str,
    name: str,
    qtype: str,
    server: str | None,
    tcp: bool,
    search: bool,
    hops: bool,
    output: str,
    files: tuple[str, ...],
    on_kernel: bool,
) -> None:
    """Ask cluster DNS from pod SRC: NAME of TYPE (A, SRV, PTR, ...), dig-like output."""
    from app import emulation

    if search and tcp:
        raise click.UsageError("--search asks over UDP as libc does; drop --tcp")
    if on_kernel:
        _real(
            ctx,
            files,
            src,
            name,
            qtype,
            server=server,
            tcp=tcp,
            search=search,
            hops=hops,
            output=output,
        )
        return
    session = ctx.session(files)
    try:
        s = _source(session, src)
        emu = emulation.emulator(session)
        conf = emu.resolv_confs.get(s)
        if conf is None:
            raise InputError(f"{src}: no such running pod", field="SRC")
        if server is None and not conf.nameservers:
            raise InputError(f"{src}: its resolv.conf has no nameserver", field="SRC")
        if search:
            from dataplane.emulator.resolver import resolve

            if server is not None:
                conf = replace(conf, nameservers=(server,))
            res = resolve(emu, s, name, conf, qtype)
            out: dict[str, Any] = res.to_json(hops=hops)
            out["text"] = "\n".join(_text(q, s, hops=hops) for q in res.queries)
            out["ok"] = all(q.response is not None for q in res.queries)
            _emit(out, output)
            return
        if server is None:
            server = conf.nameservers[0]
        from dataplane.emulator.resolver import query

        q = query(emu, s, server, name, qtype, tcp=tcp)
        out = q.to_json(hops=hops)
        out["text"] = _text(q, s, hops=hops)
        out["ok"] = q.response is not None
        _emit(out, output)
    finally:
        session.close()


def _source(session: Any, src: str) -> str:
    from app import emulation

    s = emulation.resolve_endpoint(session, src)
    if not s.startswith("pod/"):
        raise InputError(f"{src}: DNS questions are asked from a pod (pod/NS/NAME)", field="SRC")
    return s


def _real(
    ctx: Context,
    files: tuple[str, ...],
    src: str,
    name: str,
    qtype: str,
    *,
    server: str | None,
    tcp: bool,
    search: bool,
    hops: bool,
    output: str,
) -> None:
    """``dig --real``: the questions from the real pod's namespace, real packets through
    the kernel's rules (``--search``: each name of the search list in turn)."""
    from app import dnsqueries
    from app.cli.traffic_cmd import backend_for
    from dataplane.backends import RealBackend

    session = ctx.session(files)
    try:
        with backend_for(session, src, real=True, throwaway=bool(files)) as be:
            assert isinstance(be, RealBackend)
            s = _source(session, src)
            if search:
                found = dnsqueries.search(be, s, name, qtype, server=server)
                asked = list(found.queries)
            else:
                asked = [dnsqueries.dig(be, s, name, qtype, server=server, tcp=tcp)]
    finally:
        session.close()
    texts = [_real_text(o, s, hops=hops) for o in asked]
    jsons = [_real_json(o, hops=hops) for o in asked]
    out: dict[str, Any]
    if search:
        out = {
            "name": name,
            "qtype": found.qtype,
            "status": found.status,
            "addresses": [r.rsplit(" ", 1)[1] for r in found.records if " IN A " in r],
            "answered_name": found.answered_name,
            "queries": jsons,
        }
    else:
        out = jsons[0]
    out["text"] = "\n".join(texts)
    out["ok"] = all(o.response is not None for o in asked)
    _emit(out, output)


def _real_json(o: Any, *, hops: bool) -> dict[str, Any]:
    out: dict[str, Any] = o.to_json()
    if not hops:
        del out["conntrack"]
    return out


def _real_text(o: Any, src: str, *, hops: bool) -> str:
    from dataplane.dns.dig import render

    return render(
        qname=o.qname,
        qtype=o.qtype,
        server=o.server,
        proto=o.proto,
        response=o.response,
        error=o.error,
        source=f"{src}, kernel",
        answered_by=f"pod/{o.server_pod}" if o.server_pod else None,
        truncated_udp=o.truncated_udp,
        conntrack=o.conntrack if hops else (),
    )


def _text(q: Any, src: str, *, hops: bool) -> str:
    from dataplane.dns.dig import render

    d = q.traces[-1].delivered_to if q.traces else None
    text = render(
        qname=q.qname,
        qtype=q.qtype,
        server=q.server,
        proto=q.proto,
        response=q.response,
        error=q.error,
        source=src,
        path=q.path(),
        answered_by=f"pod/{d.pod} ({d.ip}:{d.port}, node {d.node})" if d and d.pod else None,
        truncated_udp=q.truncated_udp,
    )
    if hops:
        text += "".join(t.render_text() + "\n" for t in q.traces)
    return text


def _emit(out: dict[str, Any], output: str) -> None:
    ok = out.pop("ok")
    text = out.pop("text")
    click.echo(json.dumps(out, indent=2) if output == "json" else text.rstrip("\n"))
    if not ok:
        sys.exit(NO_REPLY_EXIT)


COMMANDS = [dig]
