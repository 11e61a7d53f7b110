"""``ipvsadm -L -n`` listings, as people paste them, into IPVS virtual servers.

::

    IP Virtual Server version 1.2.1 (size=4096)
    Prot LocalAddress:Port Scheduler Flags
      -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
    TCP  10.96.0.1:443 rr
      -> 192.168.0.10:6443            Masq    1      0          0
    UDP  10.96.0.10:53 rr persistent 10800

gives the same :class:`~.ipvs.VirtualServer` values as ``ipvsadm -Sn`` text
(:func:`~.ipvsadm.parse_ipvsadm`). Firewall-mark services (``FWM``) are refused: the
engine matches services by address, protocol and port. Errors are
:class:`~netmodel.errors.InputError` naming the source and line.
"""

from __future__ import annotations

from ipaddress import ip_address

from netmodel.errors import InputError

from .ipvs import SCHEDULERS, RealServer, VirtualServer
from .ipvsadm import parse_ipvsadm

__all__ = ["looks_like_ipvsadm_list", "parse_ipvs_any", "parse_ipvsadm_list"]

_PROTOS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}


def looks_like_ipvsadm_list(text: str) -> bool:
    """True when ``text`` is an ``ipvsadm -L -n`` listing rather than ``-Sn`` text."""
    for raw in text.splitlines():
        line = raw.strip()
        if line:
            return not line.startswith("-")
    return False


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def parse_ipvsadm_list(text: str, source: str = "<ipvsadm -L -n>") -> list[VirtualServer]:
    """Parse an ``ipvsadm -L -n`` listing."""
    out: list[VirtualServer] = []
    cur: VirtualServer | None = None
    reals: list[RealServer] = []

    def close() -> None:
        if cur is not None:
            out.append(
                VirtualServer(
                    cur.address,
                    cur.protocol,
                    cur.port,
                    cur.scheduler,
                    cur.persistent_timeout,
                    tuple(reals),
                )
            )

    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split()
        if not words:
            continue
        where = f"{source}:{n}"
        if words[0] == "IP" or words[0] == "Prot" or words[:2] == ["->", "RemoteAddress:Port"]:
            continue
        try:
            if words[0] == "->":
                if cur is None:
                    raise ValueError("real server before any virtual service")
                if len(words) < 4:
                    raise ValueError("expected '-> ADDR:PORT FORWARD WEIGHT ...'")
                if words[2] != "Masq":
                    raise ValueError(f"forwarding method {words[2]} is not modelled (only Masq)")
                ip, port = _host_port(words[1])
                reals.append(RealServer(ip_address(ip), port, int(words[3])))
            elif words[0] in _PROTOS:
                if len(words) < 3:
                    raise ValueError("expected 'PROT ADDR:PORT SCHEDULER [persistent N]'")
                close()
                reals = []
                ip, port = _host_port(words[1])
                sched = words[2]
                if sched not in SCHEDULERS:
                    raise ValueError(f"unsupported scheduler {sched!r}")
                timeout = 0
                if "persistent" in words:
                    timeout = int(words[words.index("persistent") + 1])
                cur = VirtualServer(ip_address(ip), _PROTOS[words[0]], port, sched, timeout)
            elif words[0] == "FWM":
                raise ValueError("firewall-mark services (FWM) are not modelled")
            else:
                raise ValueError("cannot parse")
        except (ValueError, IndexError) as e:
            raise InputError(f"{where}: {raw.strip()}: {e}") from None
    close()
    return out


def parse_ipvs_any(text: str, source: str) -> list[VirtualServer]:
    """``ipvsadm -Sn`` text or an ``ipvsadm -L -n`` listing, whichever ``text`` is."""
    if looks_like_ipvsadm_list(text):
        return parse_ipvsadm_list(text, source)
    return parse_ipvsadm(text, source=source)
