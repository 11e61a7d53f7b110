"""Ephemeral source ports of the emulated client sockets, handed out and given back as
the kernel does.

* A namespace's ports come from ``net.ipv4.ip_local_port_range`` (default 32768-60999,
  :data:`EPHEMERAL_PORTS`); TCP and UDP have separate port spaces.
* **UDP** (``connect()`` on an unbound socket autobinds it): a port belongs to one socket
  until that socket closes; then it is free at once.
* **TCP** (``connect()``, ``__inet_hash_connect``): a port may be shared by sockets whose
  4-tuples (source address, port, destination address, port) differ; a 4-tuple is taken
  while its socket is open and, after the socket closed a connection it had established
  (the active close: the client's FIN went first), for TIME_WAIT — ``TCP_TIMEWAIT_LEN``,
  60 s of the emulator's clock — before it can be used again. An unshared port is
  preferred; a shared one is used only when every port of the range is taken.
* When no port can be had (UDP: every port's socket open; TCP: every port taken for the
  4-tuple asked for) ``connect()`` fails with ``EADDRNOTAVAIL`` ("Cannot assign
  requested address"): :class:`AddressNotAvailable`.

Choice: a port is drawn uniformly from the range with the cluster's seeded generator, as
before; while the range is mostly free a draw hits a free port within a few tries. When
it does not (the range filling up), the free ports are kept in a list indexed by port
and one is drawn from that list: one draw, whatever the fill. Deterministic for a seed.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable
from random import Random

from netmodel.errors import SvclabError
from netmodel.ip import IPAddress

#: ``net.ipv4.ip_local_port_range``'s default, inclusive
EPHEMERAL_PORTS = (32768, 60999)
#: ``TCP_TIMEWAIT_LEN``: how long a closed connection's 4-tuple stays in TIME_WAIT (s)
TIME_WAIT_SECONDS = 60.0
#: draws from the whole range before falling back to the list of free ports
_TRIES = 8

#: what a socket is connected to: (source address, destination address, port)
Peer = tuple[IPAddress, IPAddress, int]


class AddressNotAvailable(SvclabError):
    """``connect()`` found no source port (``EADDRNOTAVAIL``, "Cannot assign requested
    address"): every ephemeral port of the namespace is held by an open socket or, for
    TCP, its 4-tuple is in TIME_WAIT. ``errno`` is :data:`errno.EADDRNOTAVAIL`."""

    errno = errno.EADDRNOTAVAIL


class _Pool:
    """The ports of one namespace and protocol: which are bound, to which peers.

    ``bound``: port -> the peers it is taken for (UDP: exactly one, its socket's).
    ``per_peer``: for TCP, how many ports a peer has taken (so a full peer fails at
    once). ``waits``: TIME_WAIT 4-tuples, (expiry, port, peer), oldest first."""

    __slots__ = ("_free", "_index", "bound", "hi", "lo", "per_peer", "shared", "waits")

    def __init__(self, lo: int, hi: int, *, shared: bool) -> None:
        self.lo, self.hi, self.shared = lo, hi, shared
        self.bound: dict[int, set[Peer]] = {}
        self.per_peer: dict[Peer, int] = {}
        self.waits: deque[tuple[float, int, Peer]] = deque()
        self._free: list[int] | None = None
        self._index: dict[int, int] | None = None

    def copy(self) -> _Pool:
        out = _Pool(self.lo, self.hi, shared=self.shared)
        out.bound = {p: set(v) for p, v in self.bound.items()}
        out.per_peer = dict(self.per_peer)
        out.waits = deque(self.waits)
        if self._free is not None and self._index is not None:
            out._free, out._index = list(self._free), dict(self._index)
        return out

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def reap(self, now: float) -> None:
        """Give back the TIME_WAIT 4-tuples whose time is up."""
        waits = self.waits
        while waits and waits[0][0] <= now:
            _, port, peer = waits.popleft()
            self.unbind(port, peer)

    def take(self, rng: Random, peer: Peer) -> int | None:
        """A port for a socket connected to ``peer``, bound to it; None when none is left."""
        port = self._unbound(rng)
        if port is None and self.shared and self.per_peer.get(peer, 0) < self.size:
            port = self._shared(rng, peer)
        if port is None:
            return None
        self.bound.setdefault(port, set()).add(peer)
        if self.shared:
            self.per_peer[peer] = self.per_peer.get(peer, 0) + 1
        return port

    def _unbound(self, rng: Random) -> int | None:
        bound = self.bound
        if len(bound) >= self.size:
            return None
        if self._free is None:
            for _ in range(_TRIES):
                port = rng.randint(self.lo, self.hi)
                if port not in bound:
                    return port
            # the range is filling: keep its free ports in a list from now on
            self._free = [p for p in range(self.lo, self.hi + 1) if p not in bound]
            self._index = {p: i for i, p in enumerate(self._free)}
        free, index = self._free, self._index
        assert index is not None
        i = rng.randrange(len(free))
        port, last = free[i], free[-1]
        free[i] = last
        index[last] = i
        free.pop()
        del index[port]
        return port

    def _shared(self, rng: Random, peer: Peer) -> int | None:
        """A port bound for other peers only (every port is bound): from a seeded
        offset, the first that is not taken for ``peer``."""
        start = rng.randrange(self.size)
        for k in range(self.size):
            port = self.lo + (start + k) % self.size
            if peer not in self.bound[port]:
                return port
        return None

    def unbind(self, port: int, peer: Peer) -> None:
        peers = self.bound.get(port)
        if peers is None or peer not in peers:
            return
        peers.discard(peer)
        if self.shared:
            left = self.per_peer[peer] - 1
            if left:
                self.per_peer[peer] = left
            else:
                del self.per_peer[peer]
        if not peers:
            del self.bound[port]
            if self._free is not None and self._index is not None:
                self._index[port] = len(self._free)
                self._free.append(port)


class EphemeralPorts:
    """Every namespace's ephemeral ports (see the module docstring). ``clock`` is the
    emulator's (TIME_WAIT is counted on it); ``rng`` the cluster's seeded generator."""

    __slots__ = ("_clock", "_pools", "_rng", "range")

    def __init__(
        self,
        rng: Random,
        clock: Callable[[], float],
        port_range: tuple[int, int] = EPHEMERAL_PORTS,
    ) -> None:
        lo, hi = port_range
        if not 1 <= lo <= hi <= 65535:
            raise ValueError(f"bad port range {lo}-{hi}")
        self.range = (lo, hi)
        self._rng = rng
        self._clock = clock
        self._pools: dict[tuple[str, str], _Pool] = {}

    def copy(self) -> dict[tuple[str, str], _Pool]:
        """The pools' state (for :meth:`restore`)."""
        return {k: p.copy() for k, p in self._pools.items()}

    def restore(self, state: dict[tuple[str, str], _Pool]) -> None:
        self._pools = {k: p.copy() for k, p in state.items()}

    def _pool(self, netns: str, proto: str) -> _Pool:
        pool = self._pools.get((netns, proto))
        if pool is None:
            pool = self._pools[(netns, proto)] = _Pool(*self.range, shared=proto == "tcp")
        return pool

    def connect(
        self, netns: str, proto: str, src: IPAddress, dst: IPAddress, dport: int
    ) -> int:
        """A source port for a ``proto`` socket of ``netns`` from address ``src`` to
        ``dst``:``dport``, held until :meth:`close`. Raises
        :class:`AddressNotAvailable` when there is none."""
        pool = self._pool(netns, proto)
        if pool.waits:
            pool.reap(self._clock())
        port = pool.take(self._rng, (src, dst, dport))
        if port is None:
            lo, hi = self.range
            held = "held by open sockets or in TIME_WAIT" if proto == "tcp" else "held by open sockets"
            raise AddressNotAvailable(
                f"{netns}: connect to {dst}:{dport}/{proto}: Cannot assign requested "
                f"address (EADDRNOTAVAIL): every ephemeral port {lo}-{hi} is {held}"
            )
        return port

    def close(
        self, netns: str, proto: str, src: IPAddress, port: int, dst: IPAddress, dport: int, *,
        time_wait: bool = False,
    ) -> None:
        """The socket bound by :meth:`connect` closed. ``time_wait`` (TCP, after an
        active close of an established connection): its 4-tuple stays taken for
        :data:`TIME_WAIT_SECONDS` of the clock; otherwise the port is free at once.
        A port :meth:`connect` did not hand out for that peer is left alone."""
        pool = self._pools.get((netns, proto))
        if pool is None:
            return
        peer = (src, dst, dport)
        if port not in pool.bound or peer not in pool.bound[port]:
            return
        if time_wait and proto == "tcp":
            pool.waits.append((self._clock() + TIME_WAIT_SECONDS, port, peer))
        else:
            pool.unbind(port, peer)

    def in_use(self, netns: str, proto: str) -> int:
        """How many ports of ``netns`` are bound (open sockets, TIME_WAIT included,
        as the clock now stands)."""
        pool = self._pools.get((netns, proto))
        if pool is None:
            return 0
        pool.reap(self._clock())
        return len(pool.bound)

