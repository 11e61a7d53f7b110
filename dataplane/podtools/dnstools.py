"""``nslookup`` (BIND 9.18's, as in the dnsutils and netshoot images that Kubernetes'
DNS debugging guide uses), ``dig`` (BIND 9.18) and ``getent hosts`` (glibc 2.36) against
the emulated cluster DNS; their output recorded in ``tests/data/podtools/nslookup*.out``,
``dig*.out`` and ``getent*.out``.

Every question is a datagram walked through the emulated cluster (kube-proxy DNATs it to
a DNS pod, :func:`dataplane.emulator.resolver.query`); dig's carries EDNS (UDP buffer
1232, no cookie) as dig 9.18 asks. ``nslookup NAME`` walks the pod's search list as BIND's
nslookup does (ndots from resolv.conf) and asks A then AAAA of the name that answered;
``dig`` takes NAME as absolute (``+nosearch``). ``Query time`` is simulated (0.05 ms per
link crossed, rounded down to whole milliseconds) and ``WHEN`` is the world's clock.
"""

from __future__ import annotations

import time
from ipaddress import IPv4Address

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.reversename

from dataplane.emulator.resolver import query
from dataplane.emulator.trace import Trace
from dataplane.podtools.explain import explain_dns
from dataplane.podtools.net import LINK_LATENCY, Emulated, _links, lookup
from dataplane.podtools.target import PodTarget
from netmodel.resolvconf import search_order

Result = tuple[int, bytes, bytes]
DIG_VERSION = "9.18.49-1~deb12u3-Debian"
EDNS_PAYLOAD = 1232


# ------------------------------------------------------------------ one question


def ask(
    world: Emulated, pod: PodTarget, server: str, qname: str, qtype: str, *, edns: bool
) -> tuple[bytes | None, str | None, list[Trace]]:
    """One question (UDP; TCP again after a truncated answer): the answer's wire
    form, or None and what the socket reported; and the walks."""
    if not edns:
        q = query(world.cluster, pod.netns, server, qname, qtype)
        return q.response, q.error, list(q.traces)
    msg = dns.message.make_query(
        dns.name.from_text(qname),
        dns.rdatatype.from_text(qtype),
        use_edns=0,
        payload=EDNS_PAYLOAD,
    )
    msg.flags |= dns.flags.AD
    msg.id = world.cluster.dns_id()
    wire = msg.to_wire()
    t = world.cluster.trace(pod.netns, f"{server}:53", "udp", payload=wire)
    r = t.reply
    got = (
        r.received.payload
        if r is not None and r.received is not None and r.received.proto == "udp"
        else None
    )
    if got is None:
        err = "connection refused" if r is not None and r.packet.proto == "icmp" else "timed out"
        return None, err, [t]
    if got[2] & 0x02:  # TC: again over TCP
        syn, data = world.cluster.stream(
            pod.netns, f"{server}:53", None, len(wire).to_bytes(2, "big") + wire
        )
        traces = [t, syn] + ([data] if data is not None else [])
        r2 = data.reply if data is not None else None
        got2 = r2.received.payload if r2 is not None and r2.received is not None else b""
        if len(got2) < 2:
            return None, "connection refused", traces
        return got2[2:], None, traces
    return got, None, [t]


# ------------------------------------------------------------------ dig


def _pad(line: str, col: int) -> str:
    """Advance ``line`` to column ``col`` with tabs, or one space when it is past it
    (dig's column layout)."""
    if len(line.expandtabs()) >= col:
        return line + " "
    while len(line.expandtabs()) < col:
        line += "\t"
    return line


def rr_line(name: str, ttl: int | None, rdclass: str, rdtype: str, rdata: str | None) -> str:
    """One record (or question, ``ttl`` and ``rdata`` None) in dig's columns: TTL at
    24, class at 32, type at 40, data at 48."""
    if ttl is None:
        line = _pad(f";{name}", 32) + rdclass
        return _pad(line, 40) + rdtype
    line = _pad(name, 24) + str(ttl)
    line = _pad(line, 32) + rdclass
    line = _pad(line, 40) + rdtype
    return _pad(line, 48) + (rdata or "")


def _flags(m: dns.message.Message) -> str:
    order = ("qr", "aa", "tc", "rd", "ra", "ad", "cd")
    bits = {
        "qr": dns.flags.QR, "aa": dns.flags.AA, "tc": dns.flags.TC, "rd": dns.flags.RD,
        "ra": dns.flags.RA, "ad": dns.flags.AD, "cd": dns.flags.CD,
    }  # fmt: skip
    return " ".join(f for f in order if m.flags & bits[f])


def dig_text(args: str, response: bytes, server: str, qname: str, ms: int, when: float) -> str:
    """dig 9.18's default output for an answer (see ``tests/data/podtools/dig.out``)."""
    m = dns.message.from_wire(response)
    additional = sum(len(r) for r in m.additional) + (1 if m.edns >= 0 else 0)
    counts = (
        f"QUERY: {len(m.question)}, ANSWER: {sum(len(r) for r in m.answer)}, "
        f"AUTHORITY: {sum(len(r) for r in m.authority)}, ADDITIONAL: {additional}"
    )
    lines = [
        "",
        f"; <<>> DiG {DIG_VERSION} <<>> {args}",
        ";; global options: +cmd",
        ";; Got answer:",
    ]
    if qname.rstrip(".").lower().endswith(".local"):
        lines += [
            ";; WARNING: .local is reserved for Multicast DNS",
            ";; You are currently testing what happens when an mDNS query is leaked to DNS",
        ]
    lines += [
        f";; ->>HEADER<<- opcode: {dns.opcode.to_text(m.opcode())}, "
        f"status: {dns.rcode.to_text(m.rcode())}, id: {m.id}",
        f";; flags: {_flags(m)}; {counts}",
    ]
    if m.flags & dns.flags.RD and not m.flags & dns.flags.RA:
        lines.append(";; WARNING: recursion requested but not available")
    lines.append("")
    if m.edns >= 0:
        flags = " do" if m.ednsflags & dns.flags.DO else ""
        lines += [
            ";; OPT PSEUDOSECTION:",
            f"; EDNS: version: {m.edns}, flags:{flags}; udp: {m.payload}",
        ]
    lines.append(";; QUESTION SECTION:")
    for q in m.question:
        lines.append(
            rr_line(
                q.name.to_text(),
                None,
                dns.rdataclass.to_text(q.rdclass),
                dns.rdatatype.to_text(q.rdtype),
                None,
            )
        )
    lines.append("")
    for title, section in (
        ("ANSWER", m.answer),
        ("AUTHORITY", m.authority),
        ("ADDITIONAL", m.additional),
    ):
        if not section:
            continue
        lines.append(f";; {title} SECTION:")
        for rrset in section:
            for rd in rrset:
                lines.append(
                    rr_line(
                        rrset.name.to_text(),
                        rrset.ttl,
                        dns.rdataclass.to_text(rrset.rdclass),
                        dns.rdatatype.to_text(rrset.rdtype),
                        rd.to_text(),
                    )
                )
        lines.append("")
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(when))
    lines += [
        f";; Query time: {ms} msec",
        f";; SERVER: {server}#53({server}) (UDP)",
        f";; WHEN: {stamp}",
        f";; MSG SIZE  rcvd: {len(response)}",
        "",
    ]
    return "\n".join(lines) + "\n"


def dig(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    """``dig [@SERVER] [-x IP] NAME [TYPE] [+short] [+search]``."""
    server: str | None = None
    short = search = False
    names: list[str] = []
    qtype: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("@"):
            server = arg[1:]
        elif arg == "+short":
            short = True
        elif arg == "+search":
            search = True
        elif arg in ("+nosearch", "+noall", "+answer") and arg != "+noall":
            pass
        elif arg == "-x":
            if i >= len(argv):
                return 1, b"", b"dig: option requires an argument -- 'x'\n"
            names.append(dns.reversename.from_address(argv[i]).to_text())
            qtype = "PTR"
            i += 1
        elif arg.startswith("+") or arg.startswith("-"):
            return 1, b"", f"dig: svclab: option {arg} is not emulated\n".encode()
        elif arg.upper() in dns.rdatatype.RdataType.__members__ and names:
            qtype = arg.upper()
        else:
            names.append(arg)
    if len(names) != 1:
        return 1, b"", b"dig: svclab: give one NAME\n"
    name = names[0]
    qtype = qtype or "A"
    if server is None:
        if not pod.resolv_conf.nameservers:
            return 9, b"", b";; no servers could be reached\n"
        server = pod.resolv_conf.nameservers[0]
    candidates = search_order(name, pod.resolv_conf) if search else [name]
    response: bytes | None = None
    err: str | None = None
    walks: list[Trace] = []
    for cand in candidates:
        try:
            response, err, traces = ask(world, pod, server, cand, qtype, edns=True)
        except dns.exception.DNSException as e:
            return 1, b"", f"dig: '{cand}' is not a legal name ({e})\n".encode()
        walks += traces
        if response is None:
            break
        m = dns.message.from_wire(response)
        if m.rcode() == dns.rcode.NOERROR and m.answer:
            break
    ms = int(sum(_links(t) for t in walks[-1:]) * LINK_LATENCY * 1000)
    expl = explain_dns(walks) if trace else ""
    if response is None:
        text = "".join(f";; communications error to {server}#53: {err}\n" for _ in range(3))
        text += f"\n; <<>> DiG {DIG_VERSION} <<>> {' '.join(argv)}\n;; global options: +cmd\n;; no servers could be reached\n"
        return 9, text.encode(), expl.encode()
    if short:
        m = dns.message.from_wire(response)
        out = "".join(rd.to_text() + "\n" for r in m.answer for rd in r)
        return 0, out.encode(), expl.encode()
    qname = dns.message.from_wire(response).question[0].name.to_text()
    return (
        0,
        dig_text(" ".join(argv), response, server, qname, ms, world.clock()).encode(),
        expl.encode(),
    )


# ------------------------------------------------------------------ nslookup


def nslookup(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    """``nslookup NAME [SERVER]`` (BIND 9.18): A then AAAA of the first name of the
    search list that exists."""
    args = [a for a in argv if not a.startswith("-")]
    if any(a.startswith("-") for a in argv):
        bad = next(a for a in argv if a.startswith("-"))
        return 1, b"", f"nslookup: svclab: option {bad} is not emulated\n".encode()
    if not args or len(args) > 2:
        return 1, b"", b"nslookup: svclab: give NAME [SERVER]\n"
    name = args[0]
    if len(args) == 2:
        server = args[1]
    elif pod.resolv_conf.nameservers:
        server = pod.resolv_conf.nameservers[0]
    else:
        server = "127.0.0.1"
    head = f"Server:\t\t{server}\nAddress:\t{server}#53\n\n"
    try:
        IPv4Address(name)
        candidates = [dns.reversename.from_address(name).to_text()]
        qtypes = ["PTR"]
    except ValueError:
        candidates = search_order(name, pod.resolv_conf) if len(args) == 1 else [name]
        qtypes = ["A", "AAAA"]
    walks: list[Trace] = []
    for cand in candidates:
        response, err, traces = ask(world, pod, server, cand, qtypes[0], edns=False)
        walks += traces
        if response is None:
            text = "".join(f";; communications error to {server}#53: {err}\n" for _ in range(3))
            text += ";; no servers could be reached\n\n"
            return 1, text.encode(), (explain_dns(walks) if trace else "").encode()
        m = dns.message.from_wire(response)
        if m.rcode() != dns.rcode.NOERROR:
            continue
        if not m.answer and len(candidates) > 1:
            continue
        body = _ns_answer(m)
        if qtypes[1:]:
            r2, _, t2 = ask(world, pod, server, cand, qtypes[1], edns=False)
            walks += t2
            if r2 is not None:
                body += _ns_answer(dns.message.from_wire(r2), addresses_only=True)
        if not body:
            body = f"*** Can't find {name}: No answer\n"
        nonauth = "" if m.flags & dns.flags.AA else "Non-authoritative answer:\n"
        return (
            0,
            (head + nonauth + body + "\n").encode(),
            (explain_dns(walks) if trace else "").encode(),
        )
    status = "NXDOMAIN"
    text = head + f"** server can't find {name}: {status}\n\n"
    return 1, text.encode(), (explain_dns(walks) if trace else "").encode()


def _ns_answer(m: dns.message.Message, *, addresses_only: bool = False) -> str:
    out = []
    for rrset in m.answer:
        owner = rrset.name.to_text().rstrip(".")
        for rd in rrset:
            t = dns.rdatatype.to_text(rrset.rdtype)
            if t in ("A", "AAAA"):
                out.append(f"Name:\t{owner}\nAddress: {rd.to_text()}\n")
            elif t == "CNAME" and not addresses_only:
                out.append(f"{owner}\tcanonical name = {rd.to_text()}\n")
            elif t == "PTR" and not addresses_only:
                out.append(f"{rrset.name.to_text()}\tname = {rd.to_text()}\n")
    return "".join(out)


# ------------------------------------------------------------------ getent


def getent(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    """``getent hosts NAME...`` (``ahosts``/``ahostsv4`` too): the hosts file, then DNS;
    one ``%-15s %s`` line per address; exit 2 when a name is not found."""
    if not argv or argv[0] not in ("hosts", "ahosts", "ahostsv4"):
        db = argv[0] if argv else ""
        return (
            1,
            b"",
            f"Unknown database: {db}\nTry `getent --help' or `getent --usage' for more information.\n".encode(),
        )
    out: list[str] = []
    err = ""
    rc = 0
    for name in argv[1:]:
        try:
            IPv4Address(name)
            names = [
                line.split()[1:]
                for line in pod.hosts.splitlines()
                if line.split("#", 1)[0].split()[:1] == [name]
            ]
            if names:
                out.append(f"{name:<15} {' '.join(names[0])}\n")
            else:
                rc = 2
            continue
        except ValueError:
            pass
        found = lookup(world, pod, name)
        if trace and found.resolution is not None:
            err += explain_dns([t for q in found.resolution.queries for t in q.traces])
        if not found.addresses:
            rc = 2
            continue
        for a in found.addresses:
            if argv[0] == "hosts":
                out.append(f"{a:<15} {found.canonical}\n")
            else:
                out += [
                    f"{a:<15} STREAM {found.canonical}\n",
                    f"{a:<15} DGRAM  \n",
                    f"{a:<15} RAW    \n",
                ]
    return rc, "".join(out).encode(), err.encode()
