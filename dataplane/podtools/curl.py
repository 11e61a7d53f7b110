"""``curl`` (7.88.1, Debian 12's) and ``wget -qO-`` (BusyBox 1.35's, the wget of the
busybox and Alpine images) against the emulated cluster; their output recorded in
``tests/data/podtools/curl-*.out`` and ``wget-busybox*.out``.

curl options: ``-s``/``--silent``, ``-S``/``--show-error``, ``-v``/``--verbose``,
``-o FILE``/``--output`` (``/dev/null`` or ``-``: the emulated pod has no file system),
``-w FORMAT``/``--write-out`` (``%{http_code}``, ``%{remote_ip}``, ``%{remote_port}``,
``%{local_ip}``, ``%{local_port}``, ``%{time_total}``, ``%{size_download}``, ``\\n``),
``-m``/``--max-time SECONDS``, ``--connect-timeout SECONDS``, ``-I``/``--head``,
``-i``/``--include``, ``-X``/``--request METHOD``, ``-H``/``--header``,
``-A``/``--user-agent``, ``-L``/``--location`` and ``-f``/``--fail`` (the pod server
neither redirects nor fails: both change nothing, as with the real server), and
svclab's ``--trace`` (no argument: unlike real curl's ``--trace FILE``), which appends
the explanation as ``-v`` does. Time is simulated: 0.05 ms per link crossed; a
connection nothing answers fails after ``-m``/``--connect-timeout`` seconds, or after the
kernel's 127 s of SYN retransmissions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dataplane.podtools.explain import explain, refused_by_policy
from dataplane.podtools.net import SYN_GIVE_UP, Emulated, Exchange, lookup, tcp_exchange
from dataplane.podtools.target import PodTarget

VERSION = "7.88.1"
USER_AGENT = f"curl/{VERSION}"
METER_HEAD = (
    "  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"
    "                                 Dload  Upload   Total   Spent    Left  Speed\n"
)
TLS_ERROR = "OpenSSL/3.0.19: error:0A00010B:SSL routines::wrong version number"
Result = tuple[int, bytes, bytes]


class UsageError(Exception):
    """A command line the tool refuses: its message and exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class CurlArgs:
    url: str = ""
    silent: bool = False
    show_error: bool = False
    verbose: bool = False
    trace: bool = False
    output: str | None = None
    write_out: str | None = None
    max_time: float | None = None
    connect_timeout: float | None = None
    head: bool = False
    include: bool = False
    method: str | None = None
    headers: list[str] = field(default_factory=list)
    user_agent: str = USER_AGENT


_FLAGS = {
    "s": "silent", "silent": "silent", "S": "show_error", "show-error": "show_error",
    "v": "verbose", "verbose": "verbose", "I": "head", "head": "head", "i": "include",
    "include": "include", "L": None, "location": None, "f": None, "fail": None,
    "trace": "trace",
}  # fmt: skip
_VALUES = {
    "o": "output", "output": "output", "w": "write_out", "write-out": "write_out",
    "m": "max_time", "max-time": "max_time", "connect-timeout": "connect_timeout",
    "X": "method", "request": "method", "H": "headers", "header": "headers",
    "A": "user_agent", "user-agent": "user_agent",
}  # fmt: skip


def _bad(msg: str) -> UsageError:
    return UsageError(
        f"curl: {msg}\ncurl: try 'curl --help' or 'curl --manual' for more information\n", 2
    )


def _set(a: CurlArgs, attr: str, value: str, opt: str) -> None:
    if attr in ("max_time", "connect_timeout"):
        try:
            setattr(a, attr, float(value))
        except ValueError:
            raise _bad(f"option {opt}: expected a proper numerical parameter") from None
    elif attr == "headers":
        a.headers.append(value)
    elif attr == "output" and value not in ("/dev/null", "-"):
        raise UsageError(
            f"curl: svclab: -o {value}: an emulated pod has no file system "
            "(-o /dev/null or -o - only)\n",
            23,
        )
    else:
        setattr(a, attr, value)


def parse(argv: list[str]) -> CurlArgs:
    """curl's command line (see the module docstring); UsageError as curl words it."""
    a = CurlArgs()
    urls: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("--") and len(arg) > 2:
            name = arg[2:]
            if name in _FLAGS:
                attr = _FLAGS[name]
                if attr is not None:
                    setattr(a, attr, True)
            elif name in _VALUES:
                if i >= len(argv):
                    raise _bad(f"option {arg}: requires parameter")
                _set(a, _VALUES[name], argv[i], arg)
                i += 1
            else:
                raise _bad(f"option {arg}: is unknown")
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                c = arg[j]
                j += 1
                if c in _FLAGS:
                    attr = _FLAGS[c]
                    if attr is not None:
                        setattr(a, attr, True)
                elif c in _VALUES:
                    value = arg[j:]
                    if not value:
                        if i >= len(argv):
                            raise _bad(f"option -{c}: requires parameter")
                        value = argv[i]
                        i += 1
                    _set(a, _VALUES[c], value, f"-{c}")
                    break
                else:
                    raise _bad(f"option -{c}: is unknown")
        else:
            urls.append(arg)
    if not urls:
        raise _bad("no URL specified")
    if len(urls) > 1:
        raise UsageError("curl: svclab: one URL per command in an emulated pod\n", 2)
    a.url = urls[0]
    return a


def _max5(n: float) -> str:
    """A size or speed in five columns, as curl's meter prints it."""
    v = int(n)
    if v < 100000:
        return f"{v:5d}"
    if v < 10000 * 1024:
        return f"{v // 1024:4d}k"
    if v < 100 * 1024 * 1024:
        m = v / (1024 * 1024)
        return f"{int(m):2d}.{int(m * 10) % 10}M"
    return f"{v // (1024 * 1024):4d}M"


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def meter(total: int, received: int, speed: float, spent: float, current: float) -> str:
    """One line of curl's progress meter (after a carriage return)."""
    pct_total = 100 if total and received >= total else 0
    pct_rcvd = 100 * received // total if total else 0
    spent_text = _hms(spent) if spent >= 1 else "--:--:--"
    return (
        f"\r{pct_total:3d} {_max5(total)}  {pct_rcvd:3d} {_max5(received)}  {0:3d} {_max5(0)}"
        f"  {_max5(speed)}  {_max5(0)} --:--:-- {spent_text:>8s} --:--:-- {_max5(current)}"
    )


_ZERO = "\r  0     0    0     0    0     0      0      0 --:--:-- --:--:-- --:--:--     0"


@dataclass(slots=True)
class _Out:
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)

    def err(self, text: str) -> None:
        self.stderr += text.encode()


def _write_out(fmt: str, code: int, ex: Exchange | None, size: int, elapsed: float) -> str:
    values = {
        "http_code": f"{code:03d}",
        "response_code": f"{code:03d}",
        "remote_ip": ex.ip if ex and ex.verdict == "delivered" else "",
        "remote_port": str(ex.port) if ex and ex.verdict == "delivered" else "",
        "local_ip": ex.local[0] if ex and ex.verdict == "delivered" else "",
        "local_port": str(ex.local[1]) if ex and ex.verdict == "delivered" else "",
        "time_total": f"{elapsed:.6f}",
        "size_download": str(size),
    }
    out = []
    i = 0
    while i < len(fmt):
        if fmt.startswith("%{", i) and "}" in fmt[i:]:
            end = fmt.index("}", i)
            out.append(values.get(fmt[i + 2 : end], ""))
            i = end + 1
        elif fmt.startswith("\\n", i):
            out.append("\n")
            i += 2
        elif fmt.startswith("\\t", i):
            out.append("\t")
            i += 2
        elif fmt.startswith("%%", i):
            out.append("%")
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def curl(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    """Run ``curl ARGS`` in ``pod`` (``trace``: SVCLAB_TRACE is set)."""
    try:
        a = parse(argv)
    except UsageError as e:
        return e.code, b"", str(e).encode()
    out = _Out()
    loud = not a.silent  # the meter (stdout is no terminal under exec)
    errors = loud or a.show_error
    explained = a.verbose or a.trace or trace
    url = a.url if "://" in a.url else "http://" + a.url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        msg = f'Protocol "{scheme}" not supported or disabled in libcurl'
        if errors:
            out.err(f"curl: (1) {msg}\n")
        return 1, bytes(out.stdout), bytes(out.stderr)
    host = parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rsplit("@", 1)[-1]
    if loud:
        out.err(METER_HEAD + _ZERO)
    found = lookup(world, pod, host)
    code, ex, size = 0, None, 0
    elapsed = 0.0
    if not found.addresses:
        if a.verbose:
            out.err(f"* Could not resolve host: {host}\n* Closing connection 0\n")
        if errors:
            out.err(f"curl: (6) Could not resolve host: {host}\n")
        rc = 6
    else:
        ip = found.addresses[0]
        method = a.method or ("HEAD" if a.head else "GET")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}"]
        if a.user_agent:
            lines.append(f"User-Agent: {a.user_agent}")
        lines.append("Accept: */*")
        lines += a.headers
        request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        if a.verbose:
            out.err(f"*   Trying {ip}:{port}...\n")
        ex = tcp_exchange(world, pod, ip, port, b"" if scheme == "https" else request)
        rc, code, size, elapsed = _finish(a, out, ex, host, lines, scheme, loud, errors)
    if a.write_out is not None:
        out.stdout += _write_out(a.write_out, code, ex, size, elapsed).encode()
    out.err(explain(world, pod, found, ex) if explained else refused_by_policy(ex))
    return rc, bytes(out.stdout), bytes(out.stderr)


def _finish(
    a: CurlArgs,
    out: _Out,
    ex: Exchange,
    host: str,
    lines: list[str],
    scheme: str,
    loud: bool,
    errors: bool,
) -> tuple[int, int, int, float]:
    """The rest of the transfer once the connection is tried: (exit code, HTTP status,
    body size, seconds)."""
    limit = (
        min(t for t in (a.max_time, a.connect_timeout, None) if t is not None)
        if (a.max_time is not None or a.connect_timeout is not None)
        else None
    )
    elapsed = max(ex.rtt, 0.0)
    ms = int(elapsed * 1000)
    if ex.verdict == "timeout":
        wait = limit if limit is not None else SYN_GIVE_UP
        if limit is not None and limit == a.connect_timeout:
            msg = (
                f"Failed to connect to {host} port {ex.port} after {int(limit * 1000) + 1} ms: "
                "Timeout was reached"
            )
        elif limit is not None:
            msg = f"Connection timed out after {int(limit * 1000) + 1} milliseconds"
        else:
            msg = (
                f"Failed to connect to {host} port {ex.port} after {int(wait * 1000)} ms: "
                "Couldn't connect to server"
            )
        # the meter ticks once a second; -v's message comes before the last tick
        ticks = [meter(0, 0, 0, s, 0) for s in range(1, int(wait) + 1)]
        if a.verbose and loud:
            out.err("".join(ticks[:-1]) + f"* {msg}\n" + "".join(ticks[-1:]) + "\n")
        elif a.verbose:
            out.err(f"* {msg}\n")
        elif loud:
            out.err("".join(ticks) + "\n")
        if a.verbose:
            out.err("* Closing connection 0\n")
        if errors:
            out.err(f"curl: (28) {msg}\n")
        return 28, 0, 0, wait
    if ex.verdict != "delivered":
        why = "Connection refused" if ex.verdict == "refused" else "No route to host"
        msg = (
            f"Failed to connect to {host} port {ex.port} after {ms} ms: Couldn't connect to server"
        )
        if a.verbose:
            out.err(f"* connect to {ex.ip} port {ex.port} failed: {why}\n* {msg}\n")
        if loud:
            out.err(_ZERO + "\n")
        if a.verbose:
            out.err("* Closing connection 0\n")
        if errors:
            out.err(f"curl: (7) {msg}\n")
        return 7, 0, 0, elapsed
    if a.verbose:
        out.err(f"* Connected to {host} ({ex.ip}) port {ex.port} (#0)\n")
    if scheme == "https":
        if a.verbose:
            out.err(f"* {TLS_ERROR}\n* Closing connection 0\n")
        if loud:
            out.err(_ZERO + "\n")
        if errors:
            out.err(f"curl: (35) {TLS_ERROR}\n")
        return 35, 0, 0, elapsed
    if a.verbose:
        out.err("".join(f"> {ln}\r\n" for ln in lines) + "> \r\n")
    head, _, body = ex.answer.partition(b"\r\n\r\n")
    if a.head:
        body = b""
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    if a.verbose:
        out.err("".join(f"< {h}\r\n" for h in head.decode("latin-1").split("\r\n")) + "< \r\n")
        if body:
            out.err(f"{{ [{len(body)} bytes data]\n")
    if a.head or a.include:
        out.stdout += head + b"\r\n\r\n"
    if a.output is None or a.output == "-":
        out.stdout += body
    total = elapsed * 2 or 1e-3
    if loud:
        length = _content_length(head)
        if a.head:
            out.err(
                f"\r  0 {_max5(length)}    0     0    0     0      0      0 --:--:-- "
                "--:--:-- --:--:--     0\n"
            )
        else:
            speed = len(body) / total
            out.err(meter(length, len(body), speed, total, speed) + "\n")
    if a.verbose:
        out.err("* Closing connection 0\n")
    return 0, status, len(body), total


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def wget(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    """BusyBox ``wget``: ``-q`` and ``-O-``/``-O FILE`` (``-`` or ``/dev/null``),
    ``-T SECONDS``, ``--spider``; one URL."""
    quiet = spider = False
    output: str | None = None
    urls: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("--spider",):
            spider = True
        elif arg.startswith("-") and len(arg) > 1 and not arg.startswith("--"):
            j = 1
            while j < len(arg):
                c = arg[j]
                j += 1
                if c == "q":
                    quiet = True
                elif c in "OT":
                    value = arg[j:] or (argv[i] if i < len(argv) else "")
                    if not arg[j:]:
                        i += 1
                    if c == "O":
                        output = value
                    break
                else:
                    return 1, b"", f"wget: unrecognized option '-{c}'\n".encode()
        elif arg.startswith("--"):
            return 1, b"", f"wget: unrecognized option '{arg}'\n".encode()
        else:
            urls.append(arg)
    if len(urls) != 1:
        return (
            1,
            b"",
            b"BusyBox v1.35.0 multi-call binary.\n\nUsage: wget [-cqS] [--spider] [-O FILE] [-o LOGFILE] [--header STR]\n\t[--post-data STR | --post-file FILE] [-Y on/off]\n\t[-P DIR] [-U AGENT] [-T SEC] URL...\n",
        )
    if output not in (None, "-", "/dev/null"):
        return (
            1,
            b"",
            f"wget: svclab: -O {output}: an emulated pod has no file system (-O- or -O /dev/null only)\n".encode(),
        )
    if not quiet or output is None:
        return (
            1,
            b"",
            b"wget: svclab: an emulated pod's wget runs as -qO- (or -q -O /dev/null, --spider)\n",
        )
    url = urls[0] if "://" in urls[0] else "http://" + urls[0]
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    found = lookup(world, pod, host)
    if not found.addresses:
        return 1, b"", f"wget: bad address '{host}'\n".encode()
    ip = found.addresses[0]
    method = "HEAD" if spider else "GET"
    request = (
        f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: Wget\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    ex = tcp_exchange(world, pod, ip, port, request)
    err = (explain(world, pod, found, ex) if trace else refused_by_policy(ex)).encode()
    if ex.verdict == "timeout":
        return 1, b"", b"wget: download timed out\n" + err
    if ex.verdict != "delivered":
        why = ex.error
        return 1, b"", f"wget: can't connect to remote host ({ip}): {why}\n".encode() + err
    body = ex.answer.partition(b"\r\n\r\n")[2]
    return 0, b"" if output == "/dev/null" or spider else body, err
