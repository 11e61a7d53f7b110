"""Packet is a frozen value whose __init__ is written out (for speed): it must be the
one the dataclass would generate."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from netmodel.packet import Packet


def test_init_takes_every_field_in_order_with_its_default() -> None:
    params = list(inspect.signature(Packet.__init__).parameters.values())[1:]
    fields = dataclasses.fields(Packet)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        want = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == want, f.name
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


def test_constructed_packets_are_frozen_values() -> None:
    p = Packet.make("10.0.0.1", "10.0.0.2", "tcp", 1234, 80, flags=frozenset({"SYN"}))
    values = [getattr(p, f.name) for f in dataclasses.fields(Packet)]
    assert Packet(*values) == p
    assert hash(Packet(*values)) == hash(p)
    assert dataclasses.replace(p, ttl=3) == Packet(*values[:5], 3, *values[6:])  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.ttl = 1  # type: ignore[misc]


def test_hash_follows_equality_over_every_field() -> None:
    """The hand-written __hash__ (address integers instead of address objects) agrees
    with equality: equal packets hash alike, built separately, v4 and v6, with an
    inner packet; a change of any one field makes an unequal packet."""
    inner = Packet.make("10.0.0.2", "10.0.0.1", "udp", 53, 4000)
    base = {
        "src": "10.0.0.1",
        "dst": "10.0.0.2",
        "proto": "icmp",
        "icmp_type": 3,
        "icmp_code": 3,
        "inner": inner,
    }
    for src, dst in (("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")):
        a = Packet.make(**{**base, "src": src, "dst": dst})  # type: ignore[arg-type]
        b = Packet.make(**{**base, "src": src, "dst": dst})  # type: ignore[arg-type]
        assert a == b and a is not b and hash(a) == hash(b)
        assert {a: 1}[b] == 1
        for name, other in (("ttl", 3), ("mark", 0x4000), ("sport", 9), ("df", False)):
            c = dataclasses.replace(a, **{name: other})
            assert c != a and {a: 1}.get(c) is None, name
