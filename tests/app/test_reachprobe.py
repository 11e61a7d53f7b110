"""app.reachprobe.probe_matrix on the emulator: which (protocol, port)s a connection
from each pod to each pod's IP succeeds on, and the refusals of bad input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.reachprobe import probe_matrix
from netmodel.errors import InputError
from tests.netpol_e2e import PODS, Harness


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    h = Harness(tmp_path_factory.mktemp("reachprobe") / "state")
    h.create()
    yield h.state


def test_served_ports_succeed_and_unserved_ones_fail(state: Path) -> None:
    # every pod serves 80 and 81 on TCP, UDP and SCTP; nobody serves 82: refused (a
    # reset, ICMP port unreachable, an SCTP ABORT), not reached
    ports = [("TCP", 80), ("udp", 81), ("SCTP", 80), ("TCP", 82), ("UDP", 82), ("SCTP", 82)]
    m = probe_matrix(state, ports=ports)
    assert set(m) == {(s, d) for s in PODS for d in PODS}
    assert all(v == {("TCP", 80), ("UDP", 81), ("SCTP", 80)} for v in m.values()), m


def test_namespaces_select_both_ends(state: Path) -> None:
    m = probe_matrix(state, ports=[("TCP", 80)], namespaces=["y"])
    assert set(m) == {(f"y/{s}", f"y/{d}") for s in "abc" for d in "abc"}


@pytest.mark.parametrize(
    ("ports", "namespaces", "message"),
    [
        ([("ICMP", 80)], None, "unsupported protocol 'ICMP'"),
        ([("TCP", 0)], None, "port 0 is not in 1-65535"),
        ([("TCP", "80")], None, "port '80' is not in 1-65535"),
        ([("TCP",)], None, "expected (protocol, port)"),
        ([], None, "no (protocol, port) to probe"),
        ([("TCP", 80)], ["x", "nowhere"], "namespace nowhere not found"),
    ],
)
def test_bad_input_is_refused(
    state: Path, ports: list[tuple[str, int]], namespaces: list[str] | None, message: str
) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        probe_matrix(state, ports=ports, namespaces=namespaces)
