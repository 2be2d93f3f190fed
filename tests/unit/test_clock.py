"""Clocks: virtual time wakes sleepers in deadline order and never moves back."""

from __future__ import annotations

import datetime
import time

import anyio
import pytest

from durable import SystemClock, VirtualClock
from durable.clock import to_datetime, to_iso

pytestmark = pytest.mark.anyio


async def test_advance_to_wakes_every_due_sleeper_and_no_other() -> None:
    clock = VirtualClock(start=1000.0)
    woken: list[tuple[str, float]] = []

    async def sleeper(name: str, until: float) -> None:
        await clock.sleep_until(until)
        woken.append((name, clock.now()))

    async with anyio.create_task_group() as tg:
        for name, until in (("c", 1030.0), ("a", 1010.0), ("b", 1020.0), ("a2", 1010.0)):
            tg.start_soon(sleeper, name, until)
        await anyio.wait_all_tasks_blocked()
        assert clock.next_wakeup() == 1010.0
        clock.advance_to(1025.0)
        await anyio.wait_all_tasks_blocked()
        # the host loop picks the order of tasks woken together; the set is exact
        assert sorted(woken) == [("a", 1025.0), ("a2", 1025.0), ("b", 1025.0)]
        assert clock.now() == 1025.0
        assert clock.next_wakeup() == 1030.0
        clock.advance_to(1030.0)
    assert sorted(n for n, _ in woken) == ["a", "a2", "b", "c"]
    assert clock.next_wakeup() is None


async def test_stepping_through_next_wakeup_wakes_sleepers_in_deadline_order() -> None:
    """What durable.testing does: advance to each next wake-up in turn."""
    clock = VirtualClock(start=0.0)
    woken: list[tuple[float, str]] = []

    async def sleeper(name: str, until: float) -> None:
        await clock.sleep_until(until)
        woken.append((clock.now(), name))

    async with anyio.create_task_group() as tg:
        for name, until in (("d", 40.0), ("b", 20.0), ("a", 10.0), ("c", 30.0)):
            tg.start_soon(sleeper, name, until)
        await anyio.wait_all_tasks_blocked()
        while (instant := clock.next_wakeup()) is not None:
            clock.advance_to(instant)
            await anyio.wait_all_tasks_blocked()
    assert woken == [(10.0, "a"), (20.0, "b"), (30.0, "c"), (40.0, "d")]


async def test_time_never_moves_back() -> None:
    clock = VirtualClock(start=50.0)
    clock.advance_to(60.0)
    clock.advance_to(55.0)
    assert clock.now() == 60.0


async def test_sleeping_until_a_past_instant_returns_at_once() -> None:
    clock = VirtualClock(start=100.0)
    with anyio.fail_after(5):
        await clock.sleep_until(100.0)
        await clock.sleep_until(10.0)
    assert clock.next_wakeup() is None


async def test_a_sleeper_not_yet_due_keeps_sleeping() -> None:
    clock = VirtualClock(start=0.0)
    done = anyio.Event()

    async def sleeper() -> None:
        await clock.sleep_until(10.0)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await anyio.wait_all_tasks_blocked()
        clock.advance_to(9.999)
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()
        clock.advance_to(10.0)
    assert done.is_set()


async def test_a_cancelled_sleeper_is_no_wake_up_any_more() -> None:
    """A sleep cancelled before its instant (a timer that lost a race to a
    signal) leaves nothing behind: a time-skipping environment asks
    `next_wakeup` where to move time, and must not be sent to an instant
    nobody awaits; the live sleeper after it is still woken at its own."""
    clock = VirtualClock(start=0.0)
    woken: list[float] = []

    async def sleeper(until: float) -> None:
        await clock.sleep_until(until)
        woken.append(clock.now())

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as raced:
            tg.start_soon(clock.sleep_until, 3600.0)  # (outside the scope: stays)
            async with anyio.create_task_group() as inner:
                inner.start_soon(clock.sleep_until, 10.0)
                await anyio.wait_all_tasks_blocked()
                assert clock.next_wakeup() == 10.0
                raced.cancel()
        assert clock.next_wakeup() == 3600.0
        tg.start_soon(sleeper, 20.0)
        await anyio.wait_all_tasks_blocked()
        assert clock.next_wakeup() == 20.0
        clock.advance_to(3600.0)
    assert woken == [3600.0] and clock.next_wakeup() is None


async def test_many_cancelled_sleepers_do_not_grow_the_heap() -> None:
    """A test that races thousands of timers keeps a heap of the live ones."""
    clock = VirtualClock(start=0.0)
    for i in range(2000):
        with anyio.move_on_after(0):
            await clock.sleep_until(100.0 + i)
    assert len(clock._sleepers) <= 130
    assert clock.next_wakeup() is None


async def test_virtual_clock_starts_at_the_wall_clock_by_default() -> None:
    before = time.time()
    assert before <= VirtualClock().now() <= time.time()


async def test_system_clock_sleeps_until_a_wall_clock_instant() -> None:
    clock = SystemClock()
    target = clock.now() + 0.02
    await clock.sleep_until(target)
    assert clock.now() >= target - 0.005  # monotonic vs wall clock: allow their drift
    await clock.sleep_until(0.0)  # the past: returns after a checkpoint


def test_instants_convert_to_aware_utc() -> None:
    assert to_datetime(0.0) == datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    assert to_iso(86400.5) == "1970-01-02T00:00:00.500000+00:00"
    assert to_datetime(None) is None and to_iso(None) is None
