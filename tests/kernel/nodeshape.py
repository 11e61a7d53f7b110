"""Build a real network namespace shaped like a node dump, and ask its kernel where
flows go (the reference ``trace --node-dump`` is compared with).

``shaped_node(dump)`` creates two namespaces: the *node* (every interface of
``ip-addr.json`` (or ``ip-addr.txt``) as a veth with the dump's name and addresses, the dump's routes, policy
rules, sysctls, ipsets, iptables rules and nft ruleset) and the *world* (the far end of
every veth: it sends the flows that arrive from outside, with any source address, on the
interface the node's own routing names for that source). ``kernel_outcomes`` sends a
flow's first packets (TCP SYN or UDP datagram, from consecutive source ports) and reads
the node's conntrack events: a new (confirmed) entry means the node accepted the packet; its
reply tuple gives the DNAT destination and the source address the destination sees.
Nothing is sent outside these two namespaces.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dataplane.linux import netns as ns
from dataplane.linux.conntrack import parse_line

FAKE_GW = "169.254.254.1"
_XT = ("filter", "nat", "mangle", "raw", "security")


def run(name: str, *argv: str, input: str | None = None) -> str:
    return ns.run_in(name, list(argv), input=input).stdout


@dataclass
class ShapedNode:
    node: str
    world: str
    peers: dict[str, str]  # node interface -> world peer name
    macs: dict[str, str]


def _ipset_save_text(text: str) -> str:
    """An ``ipset -L`` listing as ``ipset restore`` input (the loader's job in tests)."""
    if not text.lstrip().startswith("Name:"):
        return text
    out: list[str] = []
    name = stype = header = ""
    members = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Name:"):
            name, members = line.split(":", 1)[1].strip(), False
        elif line.startswith("Type:"):
            stype = line.split(":", 1)[1].strip()
        elif line.startswith("Header:"):
            header = line.split(":", 1)[1].strip()
            out.append(f"create {name} {stype} {header}")
        elif line.startswith("Members:"):
            members = True
        elif members and line:
            out.append(f"add {name} {line}")
    return "\n".join(out) + "\n"


def _route_args(r: dict[str, object]) -> list[str] | None:
    if r.get("protocol") == "kernel" or r.get("type") in ("broadcast", "multicast"):
        return None
    if str(r.get("table", "main")) == "local" and r.get("type") == "local" and r.get("dev") != "lo":
        return None
    args = [str(r.get("type", "unicast")), str(r["dst"])]
    if r.get("gateway"):
        args += ["via", str(r["gateway"])]
    if r.get("dev"):
        args += ["dev", str(r["dev"])]
    if r.get("gateway"):
        args.append("onlink")
    for key, opt in (("table", "table"), ("metric", "metric"), ("prefsrc", "src")):
        if r.get(key) is not None:
            args += [opt, str(r[key])]
    if r.get("scope") and not r.get("gateway"):
        args += ["scope", str(r["scope"])]
    return args


def _has_ip(dump: Path, what: str) -> bool:
    return (dump / f"ip-{what}.json").exists() or (dump / f"ip-{what}.txt").exists()


def _ip_records(dump: Path, what: str) -> list[dict[str, object]]:
    """``ip-WHAT.json``, else the pasted ``ip WHAT`` text read into the same records
    (svclab's reader, which tests/kernel/test_ip_text.py checks against ``ip -j``)."""
    from dataplane.nodedump import iptext

    js = dump / f"ip-{what}.json"
    if js.exists():
        return list(json.loads(js.read_text()))
    txt = dump / f"ip-{what}.txt"
    reader = {"addr": iptext.addr_text, "route": iptext.route_text, "rule": iptext.rule_text}
    return reader[what](txt.read_text(), str(txt))


def _is_listing(text: str) -> bool:
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("#")]
    return bool(lines) and lines[0].startswith("-")


def _replay_listing(node: str, text: str) -> None:
    """An ``iptables -S`` listing loaded as its author would: each line given back to
    ``iptables -t TABLE`` as a command, the table named by the ``# iptables -S [-t T]``
    line that printed it (the dumps with a listing keep those lines)."""
    table = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            m = re.search(r"iptables\b.*-S", line)
            if m:
                t = re.search(r"-t\s*(\w+)", line)
                table = t.group(1) if t else "filter"
            continue
        if not line:
            continue
        assert table is not None, f"no '# iptables -S' line before {line!r}"
        run(node, "iptables-nft", "-t", table, *shlex.split(line))


@contextmanager
def shaped_node(dump: Path) -> Iterator[ShapedNode]:
    node, world = ns.unique_name("nd"), ns.unique_name("nw")
    try:
        ns.create(node)
        ns.create(world)
        links = _ip_records(dump, "addr")
        peers: dict[str, str] = {}
        macs: dict[str, str] = {}
        for i, link in enumerate(links):
            name = link["ifname"]
            if name == "lo":
                continue
            peer = f"p{i}"
            run(node, "ip", "link", "add", name, "type", "veth", "peer", "name", peer)
            run(node, "ip", "link", "set", peer, "netns", world)
            run(world, "ip", "link", "set", peer, "up")
            run(node, "ip", "link", "set", name, "up")
            peers[name] = peer
            for a in link.get("addr_info", []):
                if a.get("family") != "inet":
                    continue
                run(node, "ip", "addr", "add", f"{a['local']}/{a['prefixlen']}", "dev", name)
            macs[name] = json.loads(run(node, "ip", "-j", "link", "show", name))[0]["address"]
        if _has_ip(dump, "route"):
            for r in _ip_records(dump, "route"):
                args = _route_args(r)
                if args is not None:
                    run(node, "ip", "route", "replace", *args)
        if _has_ip(dump, "rule"):
            for r in _ip_records(dump, "rule"):
                if r.get("table") in ("local", "main", "default") and len(r) <= 3:
                    if r.get("table") == "local" and r.get("priority", 0) != 0:
                        # the local table moved after other rules (Cilium, the AWS VPC CNI)
                        prio = str(r["priority"])
                        run(node, "ip", "rule", "add", "priority", prio, "table", "local")
                        run(node, "ip", "rule", "del", "priority", "0", "table", "local")
                    continue
                args = ["ip", "rule", "add", "priority", str(r["priority"])]
                if "not" in r and r["not"] is not False:
                    args.append("not")
                if r.get("src") not in (None, "all"):
                    args += ["from", f"{r['src']}/{r.get('srclen', 32)}"]
                if r.get("dst") not in (None, "all"):
                    args += ["to", f"{r['dst']}/{r.get('dstlen', 32)}"]
                if "fwmark" in r:
                    args += ["fwmark", f"{r['fwmark']}/{r.get('fwmask', '0xffffffff')}"]
                if "iif" in r:
                    args += ["iif", r["iif"]]
                args += ["table", str(r["table"])] if "table" in r else [str(r["action"])]
                run(node, *args)
        sysctl = {"net.ipv4.ip_forward": "1"}
        spath = dump / "sysctl.txt"
        if spath.exists():
            for line in spath.read_text().splitlines():
                k, sep, v = line.partition("=")
                if sep and k.strip().startswith(("net.ipv4.ip_forward", "net.ipv4.conf.")):
                    sysctl[k.strip()] = v.strip()
        for k, v in sysctl.items():
            if Path("/proc/sys", *k.split(".")).exists() or k.split(".")[3:4] in (["all"],):
                ns.run_in(node, ["sysctl", "-qw", f"{k}={v}"], check=False)
        ipset = dump / "ipset.txt"
        if ipset.exists():
            run(node, "ipset", "restore", input=_ipset_save_text(ipset.read_text()))
        for fname, tool in (
            ("iptables-save.txt", "iptables-nft-restore"),
            ("iptables-nft-save.txt", "iptables-nft-restore"),
            ("iptables-legacy-save.txt", "iptables-legacy-restore"),
        ):
            p = dump / fname
            if p.exists() and _is_listing(p.read_text()):
                _replay_listing(node, p.read_text())
            elif p.exists():
                run(node, tool, "-c", input=p.read_text())
        nftp = dump / "nft-ruleset.txt"
        if nftp.exists():
            run(node, "nft", "-f", "-", input=nftp.read_text())
        yield ShapedNode(node, world, peers, macs)
    finally:
        for name in (node, world):
            ns.remove(name)


_SENDER = textwrap.dedent(
    """
    import ipaddress, socket, sys, time
    src, dst, dport, proto, sport, count, dev = sys.argv[1:8]
    socks = []
    for i in range(int(count)):
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dev and ipaddress.ip_address(dst).is_multicast:
            # multicast ignores the /32 route: the group is sent out of the device
            # the socket is bound to (else out of lo, where the source address is)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
        s.bind((src, int(sport) + i))
        s.setblocking(False)
        if proto == "tcp":
            s.connect_ex((dst, int(dport)))
        else:
            try:
                s.sendto(b"x", (dst, int(dport)))
            except OSError:
                pass
        socks.append(s)
    time.sleep(0.2)
    """
)


def kernel_outcomes(
    shaped: ShapedNode,
    src: str,
    dst: str,
    dport: int,
    proto: str,
    *,
    local: bool,
    in_iface: str | None,
    sport: int = 41000,
    count: int = 24,
) -> set[tuple[str, str]]:
    """Send ``count`` new connections and return the set of (destination ``ip:port`` after
    DNAT, source address the destination sees) over those the node accepted."""
    import sys

    peer = ""
    if local:
        where = shaped.node
    else:
        assert in_iface is not None
        where = shaped.world
        peer = shaped.peers[in_iface]
        run(where, "ip", "neigh", "replace", FAKE_GW, "lladdr", shaped.macs[in_iface], "dev", peer)
        run(where, "ip", "route", "replace", f"{dst}/32", "via", FAKE_GW, "dev", peer, "onlink")
        run(where, "ip", "addr", "add", f"{src}/32", "dev", "lo", "noprefixroute")
    events = subprocess.Popen(
        ["ip", "netns", "exec", shaped.node, "conntrack", "-E", "-e", "NEW", "-p", proto],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        time.sleep(0.3)  # subscribed before the first packet
        args = [src, dst, str(dport), proto, str(sport), str(count), peer]
        subprocess.run(
            ["ip", "netns", "exec", where, sys.executable, "-c", _SENDER, *args],
            check=True,
            timeout=30,
        )
    finally:
        time.sleep(0.2)
        events.terminate()
        text, _ = events.communicate(timeout=10)
        if not local:
            run(where, "ip", "addr", "del", f"{src}/32", "dev", "lo")
            run(where, "ip", "route", "del", f"{dst}/32")
    out: set[tuple[str, str]] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("[NEW]"):
            continue
        e = parse_line(line[len("[NEW]") :].strip())
        if e.proto != proto or e.field("orig", "src") != src:
            continue
        sp = int(e.field("orig", "sport") or 0)
        if not sport <= sp < sport + count or e.field("orig", "dst") != dst:
            continue
        target = f"{e.field('reply', 'src')}:{e.field('reply', 'sport')}"
        out.add((target, str(e.field("reply", "dst"))))
    return out
