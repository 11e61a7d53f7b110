"""Client sockets give their source ports back as the kernel's do: UDP at close, TCP
after TIME_WAIT (60 s of the emulator's clock) for the same 4-tuple; a namespace with no
port left gets EADDRNOTAVAIL instead of looking for one forever."""

from __future__ import annotations

import errno
from ipaddress import IPv4Address
from random import Random

import pytest
from emu_helpers import LISTENERS, RULES, B, C, network

from dataplane.emulator import EmulatedCluster, IptablesRules
from dataplane.emulator.ports import TIME_WAIT_SECONDS, AddressNotAvailable, EphemeralPorts
from dataplane.netfilter.conntrack import SimClock
from netmodel.errors import InputError

POD = "pod/default/a"
WEB = "10.96.0.10"  # ClusterIP :80/tcp -> c:8080 (emu_helpers.RULES)


def small(lo: int, hi: int, clock: SimClock | None = None) -> EmulatedCluster:
    """The emu_helpers cluster with ``ip_local_port_range`` ``lo``-``hi``."""
    return EmulatedCluster(
        network(),
        rulesets={n: IptablesRules(RULES) for n in ("n1", "n2")},
        listeners=LISTENERS,
        clock=clock,
        port_range=(lo, hi),
    )


def test_udp_ports_come_back_when_the_socket_closes() -> None:
    """Four ports, a thousand questions: every datagram's socket closes after its
    answer, so the next one finds its port free again."""
    c = small(40000, 40003)
    sports = set()
    for _ in range(1000):
        t = c.trace(POD, f"{C}:53", "udp", payload=b"x")
        assert t.verdict == "delivered"
        sports.add(t.packet.sport)
    assert sports <= set(range(40000, 40004))
    assert c.ports.in_use(POD, "udp") == 0


def test_udp_connections_on_a_full_range_still_open_when_closed() -> None:
    c = small(40000, 40001)
    results = list(c.iter_connect(POD, f"{C}:53", "udp", None, 500, record=False))
    assert all(r.established for r in results)
    assert {r.sport for r in results} == {40000, 40001}


def test_held_open_tcp_sockets_exhaust_the_range_with_eaddrnotavail() -> None:
    """Connections left open keep their ports; the next connect to the same
    destination finds none and fails as connect() does; a port given back (here: the
    connection forgotten) is taken again."""
    c = small(40000, 40002)
    held = c.connect(POD, WEB, "tcp", 80, 3, record=False)
    assert all(r.established for r in held)
    with pytest.raises(AddressNotAvailable) as info:
        c.connect(POD, WEB, "tcp", 80, 1, record=False)
    e = info.value
    assert e.errno == errno.EADDRNOTAVAIL
    msg = str(e)
    assert "\n" not in msg
    assert msg.startswith(f"{POD}: connect to {WEB}:80/tcp: Cannot assign requested address")
    assert "40000-40002" in msg
    # UDP has its own port space
    assert c.trace(POD, f"{C}:53", "udp").verdict == "delivered"


def test_tcp_time_wait_holds_the_4_tuple_for_60_seconds_of_the_clock() -> None:
    clock = SimClock()
    c = small(40000, 40001, clock)
    done = c.connect(POD, WEB, "tcp", 80, 2, close=True, record=False)
    assert all(r.established for r in done)
    assert c.ports.in_use(POD, "tcp") == 2  # both 4-tuples in TIME_WAIT
    with pytest.raises(AddressNotAvailable):
        c.connect(POD, WEB, "tcp", 80, 1, record=False)
    # another destination is another 4-tuple: the same ports serve it
    other = c.connect(POD, f"{B}:8080", "tcp", None, 1, close=True, record=False)
    assert other[0].established and other[0].sport in (40000, 40001)
    clock.advance(TIME_WAIT_SECONDS - 0.5)
    with pytest.raises(AddressNotAvailable):
        c.connect(POD, WEB, "tcp", 80, 1, record=False)
    clock.advance(0.5)
    [again] = c.connect(POD, WEB, "tcp", 80, 1, close=True, record=False)
    assert again.established and again.sport in (40000, 40001)


def test_a_tcp_connection_that_never_established_frees_its_port_at_once() -> None:
    """A refused SYN (REJECT of 10.96.0.11 answers port unreachable) leaves no
    TIME_WAIT: the socket closes in SYN_SENT."""
    c = small(40000, 40000)
    for _ in range(3):
        [r] = c.connect(POD, "10.96.0.11", "tcp", 80, 1, close=True, record=False)
        assert not r.established and r.sport == 40000
    assert c.ports.in_use(POD, "tcp") == 0


def test_trace_all_gives_its_port_back() -> None:
    c = small(40000, 40000)
    for _ in range(3):
        t = c.trace_all(POD, "10.96.0.20", "tcp", 80)
        assert t.packet.sport == 40000
    assert c.ports.in_use(POD, "tcp") == 0


def test_dns_over_tcp_stream_closes_into_time_wait() -> None:
    clock = SimClock()
    c = small(40000, 40000, clock)
    _, second = c.stream(POD, f"{C}:8080", None, b"hello")
    assert second is not None
    with pytest.raises(AddressNotAvailable):
        c.stream(POD, f"{C}:8080", None, b"hello")
    clock.advance(TIME_WAIT_SECONDS)
    assert c.stream(POD, f"{C}:8080", None, b"hello")[1] is not None


def test_the_allocator_is_seeded_and_never_loops_on_a_full_range() -> None:
    """The same seed gives the same ports; a full UDP range answers EADDRNOTAVAIL at
    once, and every port closed is found again however full the range is."""
    src, dst = IPv4Address("10.0.0.1"), IPv4Address("10.0.0.2")

    def fill(seed: int) -> list[int]:
        p = EphemeralPorts(Random(seed), lambda: 0.0, (1000, 1999))
        return [p.connect("ns", "udp", src, dst, 53) for _ in range(1000)]

    ports = fill(5)
    assert sorted(ports) == list(range(1000, 2000)) and fill(5) == ports
    p = EphemeralPorts(Random(5), lambda: 0.0, (1000, 1999))
    for _ in range(1000):
        p.connect("ns", "udp", src, dst, 53)
    with pytest.raises(AddressNotAvailable):
        p.connect("ns", "udp", src, dst, 53)
    for port in (1500, 1000, 1999):
        p.close("ns", "udp", src, port, dst, 53)
    assert sorted(p.connect("ns", "udp", src, dst, 53) for _ in range(3)) == [1000, 1500, 1999]
    # a close for a port it did not hand out to that socket changes nothing
    p.close("ns", "udp", src, 1500, IPv4Address("10.0.0.9"), 53)
    assert p.in_use("ns", "udp") == 1000


def test_a_bad_port_range_is_refused() -> None:
    with pytest.raises(InputError, match="port_range: bad port range 5-4"):
        small(5, 4)
