"""Read a namespace's iptables-legacy rules and counters back through libiptc.

The legacy back end (x_tables) is the one many real nodes still run: kube-proxy picks
whichever of legacy and nf_tables holds more rules. Rules reach it with
``iptables-legacy-restore`` (:func:`dataplane.linux.rules.load_iptables` with
``backend="legacy"``), so the kernel loads the very bytes the emulator evaluates; this
module reads them back with python-iptables (``iptc``, ctypes over libiptc and
libxtables) instead of parsing ``iptables-legacy-save`` output.

:func:`save_text` renders what libiptc returns in ``iptables-save`` form, line for line
what ``iptables-legacy-save [-c] [-t TABLE]`` prints (without its ``# Generated`` and
``# Completed`` comment lines): per table ``*TABLE``, one ``:CHAIN POLICY [p:b]`` line per
chain, the ``-A`` lines, ``COMMIT``. The matches' and targets' option text comes from the
same libxtables ``save`` functions iptables-save calls. So the rest of svclab
(:func:`dataplane.linux.rules.parse_counters`, the kernel-holds check) reads either back
end the same way.

How libiptc is used here:

* libiptc works on the network namespace of the *calling thread*: ``iptc_init`` opens
  the raw socket it reads (and would commit) through. Each read enters the namespace on
  the current thread (:func:`dataplane.linux.nsenter.entered`), takes a fresh snapshot
  (``Table.refresh``) and frees it (``Table.close``) before leaving, all under one
  process-wide lock: python-iptables keeps one ``Table`` object per table *name*, shared
  by every namespace.
* Nothing is ever committed: the tables are opened with ``autocommit=False`` and only
  read. Only the tables the namespace already has (``/proc/thread-self/net/
  ip_tables_names``) are opened, because opening one registers it in the namespace.
  python-iptables, decoding a rule whose target is an extension (``NFLOG``, ``CT``...),
  asks every table it believes exists whether a chain has that name, opening the ones
  it has not opened yet (in whatever namespace, with autocommit) and querying ones that
  may be closed; during a read its table-availability cache says "none", so decoding
  opens nothing (an extension target is never a chain: chain jumps are standard
  targets).
* libxtables' ``save`` functions print to C's stdout; python-iptables captures them by
  pointing file descriptor 1 at a pipe for the duration of each call. Another thread of
  this process writing to fd 1 at that instant would have its bytes mixed in; svclab
  writes nothing from other threads while it reads rules.
"""

from __future__ import annotations

import threading
from functools import cache
from ipaddress import IPv4Network
from types import ModuleType
from typing import Any

from dataplane.linux import nsenter
from netmodel.errors import BackendError

#: ipt_ip.invflags (linux/netfilter_ipv4/ip_tables.h)
_INV_VIA_IN = 0x01
_INV_VIA_OUT = 0x02
_INV_SRCIP = 0x08
_INV_DSTIP = 0x10
_INV_FRAG = 0x20
_INV_PROTO = 0x40
#: ipt_ip.flags
_F_FRAG = 0x01
_F_GOTO = 0x02
#: what libxtables names protocols /etc/protocols does not know (xtables_chain_protos)
_CHAIN_PROTOS = {
    6: "tcp",
    132: "sctp",
    17: "udp",
    136: "udplite",
    1: "icmp",
    58: "ipv6-icmp",
    50: "esp",
    51: "ah",
    135: "mh",
}

_lock = threading.Lock()


@cache
def _iptc() -> ModuleType:
    """python-iptables, loaded on first use (it loads libiptc and libxtables)."""
    try:
        import iptc
    except (ImportError, OSError) as e:  # pragma: no cover - scripts/install provides it
        raise BackendError(
            f"python-iptables cannot load libiptc/libxtables ({e}); the iptables legacy "
            "back end needs the Debian package iptables (scripts/install)"
        ) from e
    return iptc


@cache
def _protocols() -> dict[int, str]:
    """Protocol number -> name as ``getprotobynumber(3)`` answers (/etc/protocols), which
    iptables-save asks first."""
    out: dict[int, str] = {}
    try:
        with open("/etc/protocols") as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if len(words) >= 2 and words[1].isdigit():
                    out.setdefault(int(words[1]), words[0])
    except OSError:
        pass
    return out


def _proto_name(proto: int) -> str:
    return _protocols().get(proto) or _CHAIN_PROTOS.get(proto) or str(proto)


def _address(flag: str, spec: str) -> str:
    """`` -s A/P`` as iptables-save prints it from python-iptables' ``[!]ADDR/MASK``."""
    invert = spec.startswith("!")
    addr, mask = spec.lstrip("!").split("/")
    if addr == "0.0.0.0" and mask == "0.0.0.0" and not invert:
        return ""
    try:
        suffix = str(IPv4Network(f"0.0.0.0/{mask}").prefixlen)
    except ValueError:  # a non-contiguous mask is printed as it is
        suffix = mask
    return f"{' !' if invert else ''} {flag} {addr}/{suffix}"


def _interface(flag: str, spec: str | None) -> str:
    if not spec:
        return ""
    invert = spec.startswith("!")
    return f"{' !' if invert else ''} {flag} {spec.lstrip('!')}"


def _saved(module: Any, ip: Any) -> str:
    """The extension's ``save`` text (`` --opt value ...``), as iptables-save prints it."""
    buf = module._get_saved_buf(ip)
    return "" if buf is None else buf.decode().rstrip("\n")


def rule_line(chain: str, rule: Any) -> str:
    """One python-iptables rule as iptables-save's ``-A`` line (iptables' print_rule4:
    addresses, interfaces, protocol, fragment flag, ``-m`` matches with their saved
    options, then ``-j``/``-g`` and the target's options)."""
    ip = rule.get_ip()
    parts = [f"-A {chain}"]
    parts.append(_address("-s", rule.src))
    parts.append(_address("-d", rule.dst))
    parts.append(_interface("-i", rule.in_interface))
    parts.append(_interface("-o", rule.out_interface))
    if ip.proto:
        parts.append(f"{' !' if ip.invflags & _INV_PROTO else ''} -p {_proto_name(ip.proto)}")
    if ip.flags & _F_FRAG:
        parts.append(f"{' !' if ip.invflags & _INV_FRAG else ''} -f")
    for m in rule.matches:
        parts.append(f" -m {m.name}{_saved(m, ip)}")
    t = rule.target
    if t is not None:
        standard = t._module.name in (b"standard", b"")
        if standard:
            if t.name:
                parts.append(f" -{'g' if ip.flags & _F_GOTO else 'j'} {t.name}")
        else:
            parts.append(f" -j {t.name}{_saved(t, ip)}")
    return "".join(parts)


def _tables_here() -> list[str]:
    """The x_tables the current thread's namespace has, in iptables-save's order."""
    try:
        with open("/proc/thread-self/net/ip_tables_names") as f:
            return f.read().split()
    except FileNotFoundError:  # no x_tables support at all
        return []


def _dump_table(iptc: ModuleType, name: str, counters: bool) -> list[str]:
    table = iptc.Table(name, autocommit=False)
    table.refresh()  # a snapshot of this namespace, not of the last one read
    try:
        lines = [f"*{name}"]
        chains = table.chains
        for chain in chains:
            if table.builtin_chain(chain.name):
                policy, (packets, nbytes) = table.get_policy(chain.name)
                lines.append(f":{chain.name} {policy.name} [{packets}:{nbytes}]")
            else:
                lines.append(f":{chain.name} - [0:0]")
        for chain in chains:
            for rule in chain.rules:
                line = rule_line(chain.name, rule)
                if counters:
                    packets, nbytes = rule.counters
                    line = f"[{packets}:{nbytes}] {line}"
                lines.append(line)
        lines.append("COMMIT")
        return lines
    finally:
        table.close()


def save_text(netns: str, *, counters: bool = True, table: str | None = None) -> str:
    """The x_tables (legacy) rules of ``netns`` through libiptc, in the form of
    ``iptables-legacy-save [-c] [-t TABLE]`` (module docstring). A table the namespace
    does not have is left out (``table`` given: empty text), as iptables-save does."""
    iptc = _iptc()
    with _lock, nsenter.entered(netns):
        names = _tables_here()
        if table is not None:
            names = [table] if table in names else []
        known = dict(iptc.Table.existing_table_names)
        iptc.Table.existing_table_names.update({t: False for t in iptc.Table.ALL})
        try:
            lines = [line for name in names for line in _dump_table(iptc, name, counters)]
        except (iptc.IPTCError, iptc.XTablesError) as e:
            raise BackendError(f"netns {netns}: libiptc: {e}") from e
        finally:
            iptc.Table.existing_table_names.clear()
            iptc.Table.existing_table_names.update(known)
    return "\n".join(lines) + "\n" if lines else ""
