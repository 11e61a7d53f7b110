"""The command layer of an emulated pod: ``run(world, pod, argv, env)`` answers the
network tools people debug with, through the emulated dataplane (see the package
docstring for the list and the contract)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping

from dataplane.podtools import curl as curl_
from dataplane.podtools import dnstools, iproute, nodetools
from dataplane.podtools import nc as nc_
from dataplane.podtools.net import Emulated
from dataplane.podtools.target import PodTarget

Result = tuple[int, bytes, bytes]
Tool = Callable[[Emulated, PodTarget, list[str], bool], Result]

POD_TOOLS = ("curl", "wget", "nc", "ping", "nslookup", "dig", "getent", "ip", "cat", "hostname")
NODE_TOOLS = ("iptables-save", "nft", "ipvsadm", "ipset", "conntrack")
NOT_FOUND = (
    "sh: {cmd}: not found in an emulated pod (svclab: the network tools are "
    + ", ".join(POD_TOOLS)
    + "; on hostNetwork pods also "
    + ", ".join(NODE_TOOLS)
    + ")\n"
)
#: what ``sh -c`` refuses: svclab's shell runs one simple command
SHELL_SYNTAX = ("|", ";", "&", ">", "<", "`", "$(", "${", "\n")
FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/hostname")


def _cat(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if not argv:
        return 1, b"", b"cat: svclab: give a file (stdin is empty in an emulated exec)\n"
    out = b""
    for path in argv:
        if path == "/etc/resolv.conf":
            out += pod.resolv_conf.render().encode()
        elif path == "/etc/hosts":
            out += pod.hosts.encode()
        elif path == "/etc/hostname":
            out += f"{pod.hostname}\n".encode()
        else:
            return (
                1,
                out,
                (f"cat: {path}: svclab: an emulated pod's files are {', '.join(FILES)}\n").encode(),
            )
    return 0, out, b""


def _hostname(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if not argv:
        return 0, f"{pod.hostname}\n".encode(), b""
    if argv == ["-i"]:
        return 0, f"{pod.ip}\n".encode(), b""
    return 1, b"", f"hostname: svclab: hostname {' '.join(argv)} is not emulated\n".encode()


_IP_OBJECTS = {
    "addr": ("a", "ad", "add", "addr", "addre", "addres", "address"),
    "route": ("r", "ro", "rou", "rout", "route"),
    "neigh": ("n", "ne", "nei", "neig", "neigh", "neighbor", "neighbour"),
    "rule": ("ru", "rul", "rule"),
}


def _ip(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if not argv:
        return 255, b"", b"Usage: ip [ OPTIONS ] OBJECT { COMMAND | help }\n"
    obj = next((k for k, names in _IP_OBJECTS.items() if argv[0] in names), None)
    if obj is None:
        return 255, b"", f'Object "{argv[0]}" is unknown, try "ip help".\n'.encode()
    rest = argv[1:]
    if rest not in ([], ["show"], ["list"], ["ls"]):
        return 255, b"", f"ip: svclab: ip {' '.join(argv)} is not emulated (show only)\n".encode()
    network = world.cluster.network
    if obj == "addr":
        text = iproute.ip_addr(network, pod.netns)
    elif obj == "route":
        text = iproute.ip_route(network.namespaces[pod.netns])
    elif obj == "neigh":
        text = iproute.ip_neigh(world.cluster.hosts[pod.netns])
    else:
        text = iproute.ip_rule()
    return 0, text.encode(), b""


TOOLS: dict[str, Tool] = {
    "curl": curl_.curl,
    "wget": curl_.wget,
    "nc": nc_.nc,
    "ping": nc_.ping,
    "nslookup": dnstools.nslookup,
    "dig": dnstools.dig,
    "getent": dnstools.getent,
    "ip": _ip,
    "cat": _cat,
    "hostname": _hostname,
    "iptables-save": nodetools.iptables_save,
    "nft": nodetools.nft,
    "ipvsadm": nodetools.ipvsadm,
    "ipset": nodetools.ipset,
    "conntrack": nodetools.conntrack,
}


def run(
    world: Emulated, pod: PodTarget, argv: list[str], env: Mapping[str, str] | None = None
) -> Result:
    """Run ``argv`` in ``pod``: (exit code, stdout, stderr). ``env``: the command's
    environment (``SVCLAB_TRACE=1`` appends svclab's explanation to stderr)."""
    env = dict(env or {})
    if not argv:
        return 127, b"", NOT_FOUND.format(cmd="").encode()
    cmd = argv[0].rsplit("/", 1)[-1]
    if cmd in ("sh", "bash", "ash") and len(argv) >= 3 and argv[1] == "-c":
        return _shell(world, pod, argv[2], env)
    tool = TOOLS.get(cmd)
    if tool is None:
        return 127, b"", NOT_FOUND.format(cmd=cmd).encode()
    return tool(world, pod, list(argv[1:]), env.get("SVCLAB_TRACE") == "1")


def _shell(world: Emulated, pod: PodTarget, line: str, env: dict[str, str]) -> Result:
    """``sh -c LINE``: one simple command, with leading ``NAME=value`` assignments."""
    if any(s in line for s in SHELL_SYNTAX):
        return (
            2,
            b"",
            (
                b"sh: svclab: an emulated pod's shell runs one simple command "
                b"(no pipes, lists, redirections or substitutions)\n"
            ),
        )
    try:
        words = shlex.split(line)
    except ValueError as e:
        return 2, b"", f"sh: 1: Syntax error: {e}\n".encode()
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        return 0, b"", b""
    return run(world, pod, words, env)
