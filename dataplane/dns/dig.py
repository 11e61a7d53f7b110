"""dig-like text for one DNS question and its answer (pure).

The layout follows dig 9's default output: the ``->>HEADER<<-`` line (opcode, status,
id), the flags line with section counts, the QUESTION / ANSWER / AUTHORITY /
ADDITIONAL sections (empty ones left out), then the ``SERVER`` line. svclab adds where
the question went (``PATH``, the namespaces it crossed there and back) and which DNS pod
answered (``ANSWERED BY``) and, when given, the conntrack entries the kernel kept for the
question (``CONNTRACK``). No answer: dig's ``communications error`` lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


def _rr_lines(rrsets: Sequence[dns.rrset.RRset]) -> list[str]:
    out = []
    for r in rrsets:
        cls = dns.rdataclass.to_text(r.rdclass)
        typ = dns.rdatatype.to_text(r.rdtype)
        out += [f"{r.name}\t\t{r.ttl}\t{cls}\t{typ}\t{rd}" for rd in r]
    return out


def render(
    *,
    qname: str,
    qtype: str,
    server: str,
    proto: str,
    response: bytes | None,
    error: str | None,
    source: str,
    path: Sequence[str] = (),
    answered_by: str | None = None,
    truncated_udp: bool = False,
    conntrack: Sequence[str] = (),
) -> str:
    """The text of one question (see the module docstring)."""
    lines = [f"; <<>> svclab dig <<>> @{server} {qname} {qtype} (from {source})"]
    if truncated_udp:
        lines.append(";; Truncated, retrying in TCP mode.")
    if response is None:
        lines.append(f";; communications error to {server}#53: {error or 'timed out'}")
        lines.append(";; no servers could be reached")
        if path:
            lines.append(f";; PATH: {' > '.join(path)}")
        lines += [f";; CONNTRACK: {c}" for c in conntrack]
        return "\n".join(lines) + "\n"
    m = dns.message.from_wire(response)
    lines += [
        ";; Got answer:",
        f";; ->>HEADER<<- opcode: {dns.opcode.to_text(m.opcode())}, "
        f"status: {dns.rcode.to_text(m.rcode())}, id: {m.id}",
        f";; flags: {dns.flags.to_text(m.flags).lower()}; QUERY: {len(m.question)}, "
        f"ANSWER: {sum(len(r) for r in m.answer)}, "
        f"AUTHORITY: {sum(len(r) for r in m.authority)}, "
        f"ADDITIONAL: {sum(len(r) for r in m.additional)}",
        "",
        ";; QUESTION SECTION:",
    ]
    for q in m.question:
        lines.append(
            f";{q.name}\t\t{dns.rdataclass.to_text(q.rdclass)}\t{dns.rdatatype.to_text(q.rdtype)}"
        )
    for title, section in (
        ("ANSWER", m.answer),
        ("AUTHORITY", m.authority),
        ("ADDITIONAL", m.additional),
    ):
        if section:
            lines += ["", f";; {title} SECTION:", *_rr_lines(section)]
    lines += ["", f";; SERVER: {server}#53({server}) ({proto.upper()})"]
    if answered_by:
        lines.append(f";; ANSWERED BY: {answered_by}")
    if path:
        lines.append(f";; PATH: {' > '.join(path)}")
    lines += [f";; CONNTRACK: {c}" for c in conntrack]
    lines.append(f";; MSG SIZE  rcvd: {len(response)}")
    return "\n".join(lines) + "\n"
