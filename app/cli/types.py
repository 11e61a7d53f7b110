"""The command line's parameter types: values are checked where they enter, so misuse is
a usage error (exit 2, one line) before any cluster is opened.

* :data:`PORT` — a TCP/UDP port, 1-65535 (what ``bind``/``connect`` accept as a port);
* :data:`COUNT` — a count of packets or connections, at least 1;
* :class:`Endpoint` — ``pod/NAME``, ``pod/NS/NAME``, ``node/NAME``, ``svc/NS/NAME[:PORT]``
  (``service/`` too; PORT a number or a port name), an IP, ``IP:PORT`` or ``[IPv6]:PORT``,
  or a DNS name ``NAME[:PORT]`` (resolved from the source pod by cluster DNS); the text
  is returned unchanged (the session resolves it), only its form is checked;
* :class:`NodeRef` — ``node/NAME`` (``--at``); :class:`ClusterId` — ``up --cluster-id``;
* :class:`Ipv4` — an IPv4 address (``dig --server``: a name there would have to be
  looked up by the host's resolver, which svclab never asks; the clusters are IPv4);
* :class:`Selector` — a ``-l`` label selector, checked as kubectl checks it;
* :data:`READABLE_FILE` / :class:`NewFile` — a file to read that exists and is no
  directory; a file to write whose directory exists.

:func:`check_endpoint` is the same check for values that do not come through click
(``trace --flows`` entries): it raises ValueError with the reason.
"""

from __future__ import annotations

import os
import re
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import click

PORT = click.IntRange(1, 65535)
COUNT = click.IntRange(min=1)
READABLE_FILE = click.Path(exists=True, dir_okay=False, readable=True)

#: a DNS-1123 label (pod, node, namespace and Service names are subdomains of these)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
#: an IANA service name, what a Service port's ``name`` may be
_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

FORMS = "pod/NS/NAME, node/NAME, svc/NS/NAME:PORT, an IP or IP:PORT, a DNS NAME[:PORT]"
#: a host name (labels of letters, digits, ``-`` and ``_``; at least one not all digits)
_HOST = re.compile(r"^(?=.*[A-Za-z_-])[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$")


def check_port(text: str) -> int:
    """``text`` as a port number 1-65535; ValueError otherwise."""
    if not text.isdigit():
        raise ValueError(f"port {text!r} is not a number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is out of range (1-65535)")
    return port


def _check_names(parts: list[str], what: str) -> None:
    for p in parts:
        if not _NAME.match(p):
            raise ValueError(f"{what}: {p!r} is not a valid name")


def _check_ip(text: str) -> None:
    try:
        ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not one of {FORMS}") from None


def _check_host(text: str) -> None:
    """An IP, or a DNS name (at most 253 characters)."""
    if _HOST.match(text) and len(text.rstrip(".")) <= 253:
        return
    _check_ip(text)


def check_endpoint(text: str) -> str:
    """Check the form of a source or destination (see the module docstring); returns
    ``text``. Raises ValueError saying what is wrong."""
    kind, slash, rest = text.partition("/")
    if slash:
        if kind == "pod":
            parts = rest.split("/")
            if len(parts) not in (1, 2):
                raise ValueError(f"{text!r}: want pod/NAME or pod/NS/NAME")
            _check_names(parts, text)
        elif kind == "node":
            _check_names([rest], text)
        elif kind in ("svc", "service"):
            path, colon, port = rest.partition(":")
            parts = path.split("/")
            if len(parts) not in (1, 2):
                raise ValueError(f"{text!r}: want svc/NS/NAME:PORT")
            _check_names(parts, text)
            if colon:
                if port.isdigit():
                    check_port(port)
                elif not _PORT_NAME.match(port):
                    raise ValueError(f"{text!r}: {port!r} is neither a port number nor a name")
        else:
            raise ValueError(f"{text!r} is not one of {FORMS}")
        return text
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        if not port.startswith(":"):
            raise ValueError(f"{text!r}: want [IPv6]:PORT")
        _check_ip(host)
        check_port(port[1:])
        return text
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        _check_host(host)
        check_port(port)
        return text
    _check_host(text)
    return text


def endpoint_port(text: str) -> str | None:
    """The port an endpoint of a checked form names (a number or, for a Service, a port
    name), or None when it names none."""
    if text.startswith(("svc/", "service/")):
        return text.partition(":")[2] or None
    if "/" in text:
        return None
    if text.startswith("["):
        return text.rpartition(":")[2]
    return text.partition(":")[2] if text.count(":") == 1 else None


class Endpoint(click.ParamType):
    """A source or destination (see the module docstring)."""

    name = "endpoint"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_endpoint(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class NodeRef(click.ParamType):
    """``node/NAME``."""

    name = "node/NAME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.startswith("node/") or not _NAME.match(text[5:]):
            self.fail(f"{text!r}: want node/NAME", param, ctx)
        return text


class Ipv4(click.ParamType):
    """An IPv4 address in dotted-quad form, returned normalised."""

    name = "IPv4"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            ip = ip_address(text)
        except ValueError:
            self.fail(f"{text!r}: want an IPv4 address", param, ctx)
        if ip.version != 4:
            self.fail(f"{text!r}: want an IPv4 address (the cluster is IPv4)", param, ctx)
        return str(ip)


#: :data:`dataplane.linux.names.CLUSTER_ID_RE`, repeated so that ``--help`` does not
#: import the real backend (a test checks that the two agree)
CLUSTER_ID_PATTERN = r"^[a-z0-9]{1,12}$"


class ClusterId(click.ParamType):
    """A real cluster's id: 1-12 of ``[a-z0-9]`` (it goes into every kernel name)."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not re.match(CLUSTER_ID_PATTERN, text):
            self.fail(f"{text!r}: use 1-12 characters [a-z0-9]", param, ctx)
        return text


#: a label key: an optional DNS subdomain prefix and ``/``, then a name of 1-63
#: characters (alphanumerics, ``-``, ``_``, ``.``, alphanumeric at both ends)
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(
    rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}$"
)
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")


def check_selector(text: str) -> str:
    """Check a ``-l`` label selector as kubectl does: every requirement well formed
    (no empty one), keys and values valid label keys and values. Returns ``text``;
    raises ValueError."""
    from netmodel.selectors import parse_selector

    if not text.strip():
        raise ValueError("empty label selector")
    depth, parts, cur = 0, [], ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            raise ValueError(f"label selector {text!r}: unbalanced ')'")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    if depth != 0:
        raise ValueError(f"label selector {text!r}: unbalanced '('")
    if any(not p.strip() for p in parts):
        raise ValueError(f"label selector {text!r}: an empty requirement")
    sel = parse_selector(text)
    keys = [*sel.match_labels, *(e.key for e in sel.match_expressions)]
    values = [*sel.match_labels.values(), *(v for e in sel.match_expressions for v in e.values)]
    for k in keys:
        if not _LABEL_KEY.match(k) or len(k) > 253 + 1 + 63:
            raise ValueError(f"label selector {text!r}: {k!r} is not a valid label key")
    for v in values:
        if not _LABEL_VALUE.match(v):
            raise ValueError(f"label selector {text!r}: {v!r} is not a valid label value")
    return text


class Selector(click.ParamType):
    """A label selector (:func:`check_selector`)."""

    name = "selector"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_selector(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class NewFile(click.ParamType):
    """A file to write: not a directory, in a directory that exists and is writable."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        p = Path(str(value))
        parent = p.parent if str(p.parent) else Path(".")
        if p.is_dir():
            self.fail(f"{str(p)!r} is a directory", param, ctx)
        if not parent.is_dir():
            self.fail(f"{str(p)!r}: directory {str(parent)!r} does not exist", param, ctx)
        if not os.access(parent, os.W_OK):
            self.fail(f"{str(p)!r}: directory {str(parent)!r} is not writable", param, ctx)
        return str(p)


class PictureFile(NewFile):
    """A picture to write (a :class:`NewFile`) whose suffix names a format svclab draws."""

    def __init__(self, *suffixes: str) -> None:
        self.suffixes = suffixes

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        path = super().convert(value, param, ctx)
        suffix = Path(path).suffix.lower()
        if suffix not in self.suffixes:
            self.fail(
                f"{path!r}: unknown picture format {suffix or '(none)'!r}; use one of "
                + ", ".join(self.suffixes),
                param,
                ctx,
            )
        return path


ENDPOINT = Endpoint()
NODE_REF = NodeRef()
IPV4 = Ipv4()
SELECTOR = Selector()
CLUSTER_ID = ClusterId()
NEW_FILE = NewFile()
GRAPH_FILE = PictureFile(".svg", ".png")
TIMELINE_FILE = PictureFile(".svg", ".png", ".mmd")
HTML_FILE = PictureFile(".html", ".htm")
