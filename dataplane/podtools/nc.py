"""``nc`` (netcat-openbsd 1.219, Debian's and nicolaka/netshoot's ``nc``) and
``ping`` (iputils 20221126) against the emulated cluster; their output recorded in
``tests/data/podtools/nc-*.out`` and ``ping-*.out``.

nc: ``nc [-v] [-z] [-n] [-w SECONDS] HOST PORT`` over TCP (``-n``: HOST must be an
address; ``-w`` only changes the words of a timeout, the emulator does not wait). ``-z`` connects and closes;
without it the pod server's answer is printed (nothing is sent: stdin is empty under a
non-interactive exec). ping: ``ping [-c COUNT] [-W SECONDS] [-n] HOST`` (``-W``: how long to wait for a reply,
which a simulated reply never needs; ``-w`` is refused); without ``-c``
it would run until interrupted, which an emulated exec cannot do: ``-c`` is required.
Round trips are simulated (0.05 ms per link crossed, :mod:`.net`); ``time`` of the
statistics line is one second per request after the first, as ping's interval.
"""

from __future__ import annotations

import math

from dataplane.podtools.explain import explain, refused_by_policy
from dataplane.podtools.net import (
    EAI_NONAME,
    LINK_LATENCY,
    Emulated,
    hosts_lookup,
    lookup,
    tcp_exchange,
)
from dataplane.podtools.services import TCP_SERVICES
from dataplane.podtools.target import PodTarget

Result = tuple[int, bytes, bytes]
NC_USAGE = (
    "usage: nc [-46CDdFhklNnrStUuvZz] [-I length] [-i interval] [-M ttl]\n"
    "\t  [-m minttl] [-O length] [-P proxy_username] [-p source_port]\n"
    "\t  [-q seconds] [-s sourceaddr] [-T keyword] [-V rtable] [-W recvlimit]\n"
    "\t  [-w timeout] [-X proxy_protocol] [-x proxy_address[:port]]\n"
    "\t  [destination] [port]\n"
)


def nc(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    verbose = zero = numeric = False
    wait: float | None = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                c = arg[j]
                j += 1
                if c == "v":
                    verbose = True
                elif c == "z":
                    zero = True
                elif c == "n":
                    numeric = True
                elif c == "w":
                    value = arg[j:] or (argv[i] if i < len(argv) else "")
                    if not arg[j:]:
                        i += 1
                    try:
                        wait = float(value)
                    except ValueError:
                        return 1, b"", f"nc: timeout invalid: {value}\n".encode()
                    break
                else:
                    return 1, b"", f"nc: invalid option -- '{c}'\n".encode() + NC_USAGE.encode()
        else:
            rest.append(arg)
    if len(rest) != 2:
        return 1, b"", NC_USAGE.encode()
    host, port_text = rest
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return 1, b"", f"nc: port number invalid: {port_text}\n".encode()
    port = int(port_text)
    found = lookup(world, pod, host)
    if numeric and found.source != "literal":  # -n: AI_NUMERICHOST, no lookup at all
        return 1, b"", f'nc: getaddrinfo for host "{host}" port {port}: {EAI_NONAME}\n'.encode()
    if not found.addresses:
        return 1, b"", f'nc: getaddrinfo for host "{host}" port {port}: {found.error}\n'.encode()
    ip = found.addresses[0]
    ex = tcp_exchange(world, pod, ip, port, b"", zero_io=zero)
    err = ""
    out = b""
    rc = 0
    if ex.verdict == "delivered":
        if verbose:
            name = f"{host} ({ip})" if host != ip else ip
            err += (
                f"Connection to {name} {port} port [tcp/{TCP_SERVICES.get(port, '*')}] succeeded!\n"
            )
        out = ex.answer
    else:
        rc = 1
        if verbose:
            if ex.verdict == "timeout" and wait is not None:
                err += (
                    f"nc: connect to {ip} port {port} (tcp) timed out: Operation now in progress\n"
                )
            else:
                err += f"nc: connect to {ip} port {port} (tcp) failed: {ex.error}\n"
    err += explain(world, pod, found, ex) if trace else refused_by_policy(ex)
    return rc, out, err.encode()


def _ms(t: float) -> str:
    """ping's precision: 3 decimals under 1 ms, 2 under 10, 1 under 100, else none."""
    if t < 1:
        return f"{t:.3f}"
    if t < 10:
        return f"{t:.2f}"
    if t < 100:
        return f"{t:.1f}"
    return f"{t:.0f}"


def _reverse(pod: PodTarget, ip: str) -> str:
    hit = None
    for line in pod.hosts.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == ip:
            hit = words[1]
            break
    return hit or ip


def ping(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    count: int | None = None
    numeric = False
    hosts: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("-c", "-W", "-w", "-i", "-s", "-t"):
            if i >= len(argv):
                return 2, b"", f"ping: option requires an argument -- '{arg[1]}'\n".encode()
            value = argv[i]
            i += 1
            if arg == "-c":
                if not value.isdigit() or int(value) < 1:
                    return (
                        1,
                        b"",
                        f"ping: invalid argument: '{value}': out of range: 1 <= value <= 9223372036854775807\n".encode(),
                    )
                count = int(value)
            elif arg in ("-s", "-t", "-i", "-w"):
                return 2, b"", f"ping: svclab: {arg} is not emulated\n".encode()
        elif arg.startswith("-c") and arg[2:].isdigit():
            count = int(arg[2:])
        elif arg == "-n":
            numeric = True
        elif arg.startswith("-"):
            return 2, b"", f"ping: invalid option -- '{arg[1:2]}'\n".encode()
        else:
            hosts.append(arg)
    if len(hosts) != 1:
        return 2, b"", b"ping: usage error: Destination address required\n"
    if count is None:
        return 2, b"", b"ping: svclab: give -c COUNT (an emulated ping cannot be interrupted)\n"
    host = hosts[0]
    found = lookup(world, pod, host)
    if not found.addresses:
        return 2, b"", f"ping: {host}: {found.error}\n".encode()
    ip = found.addresses[0]
    shown = found.canonical if found.source != "literal" else ip
    results = world.cluster.ping(pod.netns, ip, count)
    lines = [f"PING {shown} ({ip}) 56(84) bytes of data."]
    times: list[float] = []
    for r in results:
        if not r.ok:
            continue
        rtt = LINK_LATENCY * (max(len(r.path) - 1, 0) + max(len(r.reply_path) - 1, 0)) * 1000
        times.append(rtt)
        src = r.reply_from or ip
        who = src if found.source == "literal" or numeric else f"{_reverse(pod, src)} ({src})"
        lines.append(f"64 bytes from {who}: icmp_seq={r.seq} ttl={r.ttl} time={_ms(rtt)} ms")
    loss = 100 * (count - len(times)) // count
    lines += [
        "",
        f"--- {shown} ping statistics ---",
        f"{count} packets transmitted, {len(times)} received, {loss}% packet loss, "
        f"time {(count - 1) * 1000}ms",
    ]
    if times:
        avg = sum(times) / len(times)
        mdev = math.sqrt(max(sum(t * t for t in times) / len(times) - avg * avg, 0.0))
        lines.append(
            f"rtt min/avg/max/mdev = {min(times):.3f}/{avg:.3f}/{max(times):.3f}/{mdev:.3f} ms"
        )
    else:
        lines.append("")
    err = b""
    if trace and results:
        err = (
            "* svclab: the first echo request, hop by hop:\n"
            + results[0].trace.render_text()
            + "\n"
        ).encode()
    return (0 if times else 1), ("\n".join(lines) + "\n").encode(), err


__all__ = ["hosts_lookup", "nc", "ping"]
