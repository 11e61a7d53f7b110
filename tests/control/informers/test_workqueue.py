"""The rate-limited work queue: collapse, never twice at once, backoff on a fake clock."""

from __future__ import annotations

import pytest

from control.clock import FakeClock
from control.informers import ExponentialBackoff, NoDelay, WorkQueue


def test_duplicates_collapse_and_order_is_fifo() -> None:
    q = WorkQueue()
    for k in ["a", "b", "a", "c", "b", "a"]:
        q.add(k)
    assert len(q) == 3
    assert [q.get() for _ in range(3)] == ["a", "b", "c"]
    with pytest.raises(IndexError):
        q.get()


def test_a_key_is_never_handed_out_twice_at_once() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get() == "a"
    q.add("a")  # while processing: dirty, not queued
    assert len(q) == 0 and "a" not in q
    q.done("a")
    assert len(q) == 1
    assert q.get() == "a"
    q.done("a")
    assert len(q) == 0  # done without a new add does not re-queue


def test_retries_back_off_exponentially_on_the_injected_clock() -> None:
    clock = FakeClock()
    q = WorkQueue(ExponentialBackoff(base=1.0, cap=8.0), clock)
    delays = []
    for _ in range(5):
        n = q.requeue("k")
        assert len(q) == 0  # not before its time
        wait = q.next_ready_in()
        assert wait is not None
        delays.append(wait)
        clock.advance(wait - 0.001)
        assert len(q) == 0
        clock.advance(0.001)
        assert len(q) == 1 and q.num_requeues("k") == n
        assert q.get() == "k"
        q.done("k")
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]  # capped
    q.forget("k")
    assert q.num_requeues("k") == 0
    q.requeue("k")
    assert q.next_ready_in() == 1.0  # forget resets the backoff


def test_delayed_add_collapses_with_an_add_meanwhile() -> None:
    clock = FakeClock()
    q = WorkQueue(ExponentialBackoff(base=5.0), clock)
    q.requeue("k")
    q.add("k")  # an event arrives before the retry is due: processed at once
    assert len(q) == 1 and q.get() == "k"
    q.done("k")
    clock.advance(5.0)
    assert len(q) == 1  # the retry still comes (level-triggered: harmless)
    assert q.get() == "k"
    q.done("k")
    assert len(q) == 0


def test_no_delay_limiter_retries_in_the_next_round() -> None:
    q = WorkQueue(NoDelay(), FakeClock())
    q.requeue("k")
    assert len(q) == 1 and q.next_ready_in() is None


def test_clear_drops_delayed_keys() -> None:
    clock = FakeClock()
    q = WorkQueue(ExponentialBackoff(base=1.0), clock)
    q.requeue("k")
    q.clear()
    clock.advance(10)
    assert len(q) == 0


def test_bad_backoff_is_refused() -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(base=2.0, cap=1.0)
