"""``svclab dig SRC NAME [TYPE]``: ask cluster DNS from a pod, dig-like.

The question is a UDP datagram from the pod to its first nameserver (kube-dns's
ClusterIP with ClusterFirst), walked through the cluster like any other packet (kube-
proxy DNATs it to a DNS pod); a truncated answer is asked again over TCP. As dig, NAME
is taken as absolute (``+nosearch``); ``--search`` looks it up through the pod's search
list instead, as its libc would, printing every query. ``-o json`` gives the answer
sections and the path (``--hops`` adds every hop of every walk). Exit status as dig's:
0 when an answer came back (whatever its status), 9 when none did; 1 for bad input.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from app.cli.context import Context, handle_errors
from netmodel.errors import InputError

NO_REPLY_EXIT = 9


@click.command()
@click.argument("src")
@click.argument("name")
@click.argument("qtype", default="A")
@click.option("--server", default=None, help="Ask this IP (default: the pod's nameserver)")
@click.option("--tcp", is_flag=True, help="Ask over TCP (dig +tcp)")
@click.option("--search", is_flag=True, help="Use the pod's search list (dig +search)")
@click.option("--hops", is_flag=True, help="-o json: include every hop of every walk")
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
        _real(ctx, files, src, name, qtype, server=server, tcp=tcp, search=search, output=output)
        return
    session = ctx.session(files)
    try:
        s = _source(session, src)
        emu = emulation.emulator(session)
        conf = emu.resolv_confs.get(s)
        if conf is None:
            raise InputError(f"{src}: no such running pod", field="SRC")
        if search:
            from dataplane.emulator.resolver import resolve

            res = resolve(emu, s, name, conf, qtype)
            out: dict[str, Any] = res.to_json(hops=hops)
            out["text"] = "\n".join(_text(q, s) for q in res.queries)
            out["ok"] = all(q.response is not None for q in res.queries)
            _emit(out, output)
            return
        if server is None:
            if not conf.nameservers:
                raise InputError(f"{src}: its resolv.conf has no nameserver", field="SRC")
            server = conf.nameservers[0]
        from dataplane.emulator.resolver import query

        q = query(emu, s, server, name, qtype, tcp=tcp)
        out = q.to_json(hops=hops)
        out["text"] = _text(q, s)
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
    output: str,
) -> None:
    """``dig --real``: the question from the real pod's namespace (``--search``: the
    pod's libc, ``getaddrinfo``)."""
    from app import dnsqueries
    from app.cli.traffic_cmd import backend_for
    from dataplane.backends import RealBackend
    from dataplane.dns.dig import render

    session = ctx.session(files)
    try:
        with backend_for(session, src, real=True, throwaway=bool(files)) as be:
            assert isinstance(be, RealBackend)
            s = _source(session, src)
            if search:
                lookup = dnsqueries.resolve(be, s, name)
                out: dict[str, Any] = {
                    "name": name,
                    "status": lookup.status,
                    "addresses": list(lookup.addresses),
                }
                out["text"] = f"{name}: {lookup.status} {' '.join(lookup.addresses)}"
                out["ok"] = lookup.status != "error"
                _emit(out, output)
                return
            o = dnsqueries.dig(be, s, name, qtype, server=server, tcp=tcp)
    finally:
        session.close()
    srv = server or be.view.resolv_confs[s].nameservers[0]
    out = o.to_json()
    out["text"] = render(
        qname=o.qname,
        qtype=o.qtype,
        server=srv,
        proto=o.proto,
        response=o.response,
        error=o.error,
        source=f"{s}, kernel",
        answered_by=f"pod/{o.server_pod}" if o.server_pod else None,
        truncated_udp=o.truncated_udp,
    )
    out["ok"] = o.response is not None
    _emit(out, output)


def _text(q: Any, src: str) -> str:
    from dataplane.dns.dig import render

    d = q.traces[-1].delivered_to if q.traces else None
    return render(
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


def _emit(out: dict[str, Any], output: str) -> None:
    ok = out.pop("ok")
    text = out.pop("text")
    click.echo(json.dumps(out, indent=2) if output == "json" else text.rstrip("\n"))
    if not ok:
        sys.exit(NO_REPLY_EXIT)


COMMANDS = [dig]
