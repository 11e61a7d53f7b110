"""The live plane's window of node starts in flight (control.startwindow.StartWindow)."""

from __future__ import annotations

import threading

import pytest

from control.informers.informer import SharedInformer
from control.informers.listwatch import Listing
from control.startwindow import StartWindow


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _listed(inf: SharedInformer) -> None:
    """The informer's first LIST came back (what a reflector does with it)."""
    inf.replace(Listing([], 7))


def test_a_start_stays_in_flight_until_every_informer_has_listed() -> None:
    window = StartWindow(2, wait=5.0, clock=_Clock())
    node_a = [SharedInformer("Node", field_selector="metadata.name=a"), SharedInformer("Pod")]
    node_b = [SharedInformer("Node", field_selector="metadata.name=b")]
    window.admit(node_a)
    window.admit(node_b)
    assert window.in_flight() == 2
    _listed(node_a[0])
    assert window.in_flight() == 2  # its Pod informer has not listed yet
    _listed(node_a[1])
    assert window.in_flight() == 1
    _listed(node_b[0])
    assert window.in_flight() == 0


def test_a_full_window_holds_the_next_start_until_one_lists() -> None:
    window = StartWindow(2, wait=5.0, clock=_Clock())
    first, second = SharedInformer("Pod"), SharedInformer("Node")
    window.admit([first])
    window.admit([second])
    stop = threading.Event()
    stop.set()
    assert window.wait_for_room(stop) is False  # full: only the stop ends the wait
    got: list[bool] = []
    waiter = threading.Thread(
        target=lambda: got.append(window.wait_for_room(threading.Event())), daemon=True
    )
    waiter.start()
    _listed(second)
    waiter.join(timeout=30)
    assert got == [True]


def test_a_start_whose_informers_never_list_leaves_the_window_after_wait() -> None:
    clock = _Clock()
    window = StartWindow(1, wait=5.0, clock=clock)
    window.admit([SharedInformer("Pod")])
    clock.t += 4.9
    assert window.in_flight() == 1
    clock.t += 0.2
    assert window.in_flight() == 0
    assert window.wait_for_room(threading.Event()) is True


def test_room_below_size_returns_at_once() -> None:
    window = StartWindow(3, wait=5.0, clock=_Clock())
    window.admit([SharedInformer("Pod")])
    window.admit([SharedInformer("Pod")])
    assert window.wait_for_room(threading.Event()) is True


def test_a_window_without_room_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one start, not 0"):
        StartWindow(0, wait=5.0)
