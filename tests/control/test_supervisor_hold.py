"""The supervisor keeps a held process stopped (``svclab kubelet stop`` with
``--components processes``): it kills it as a crash would, does not restart it while
held, and starts it at once when released; the other processes are untouched."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from control.supervisor import Supervisor


@pytest.fixture
def sup() -> Iterator[Supervisor]:
    s = Supervisor(lambda group, nodes: ["sleep", "60"])
    try:
        yield s
    finally:
        s.stop()


def test_a_held_kubelet_is_killed_kept_down_and_started_when_released(sup: Supervisor) -> None:
    sup.set_nodes(["node-1", "node-2"])
    sup.tick()
    before = sup.pids()
    assert {"kubelet/node-1", "kubelet/node-2", "kube-proxy/node-1"} <= set(before)
    held = sup.children["kubelet/node-2"].proc
    assert held is not None

    sup.hold(["kubelet/node-2"])
    sup.tick()
    assert held.poll() == -9, "killed as a crash (SIGKILL)"
    for _ in range(3):  # never restarted while held, back-off or not
        sup.tick()
    after = sup.pids()
    assert "kubelet/node-2" not in after
    assert {k: v for k, v in after.items()} == {
        k: v for k, v in before.items() if k != "kubelet/node-2"
    }, "the other processes run on"

    sup.hold([])
    sup.tick()
    again = sup.pids()
    assert "kubelet/node-2" in again and again["kubelet/node-2"] != before["kubelet/node-2"]
