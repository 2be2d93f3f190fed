"""Time: wall-clock instants for storage, monotonic waiting for enforcement.

Deadlines are stored as UTC epoch seconds so they mean the same thing on every
machine. Waiting for one converts it once to the host's monotonic clock
(anyio's `current_time()`), so a wall-clock jump neither fires a deadline early
nor delays it. Every wait in the engine goes through a `Clock`, which is what
lets `durable.testing` substitute virtual time.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import heapq
import itertools
import time
from collections.abc import Iterator
from typing import Protocol

import anyio


class Clock(Protocol):
    """The engine's source of time."""

    def now(self) -> float:
        """Wall-clock UTC epoch seconds."""

    async def sleep_until(self, instant: float, *, background: bool = False) -> None:
        """Return once `now() >= instant` (cancellable).

        `background` marks a wait for something that should not happen while
        all is well (a lease expiring): a virtual clock never skips ahead to it.
        """


def _steady() -> float:
    """A clock that never steps: CLOCK_BOOTTIME where there is one (it also
    counts time suspended), else the monotonic clock."""
    return time.clock_gettime(_STEADY_ID)


_STEADY_ID = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
# The wall clock, read once per process (see SystemClock): every SystemClock
# in the process agrees with every other.
_WALL_AT_STEADY_ZERO = time.time() - _steady()


class SystemClock:
    """Real time, on the monotonic clock.

    `now()` is the wall clock read once, when durable is imported, advanced
    by a clock that never steps ever since: instants are UTC epoch seconds that mean
    the same on every machine, yet a step of the wall clock (NTP, a manual
    change, a VM resume) neither fires a deadline early nor delays it in this
    process. Two processes agree to within their wall clocks' difference at
    the moments they started; docs/deployment.md says what that means.
    """

    def now(self) -> float:
        # `_steady()` inline: read several times per step (issue 26)
        return _WALL_AT_STEADY_ZERO + time.clock_gettime(_STEADY_ID)

    async def sleep_until(self, instant: float, *, background: bool = False) -> None:
        delay = instant - self.now()
        if delay <= 0:
            await anyio.lowlevel.checkpoint()
            return
        await anyio.sleep_until(anyio.current_time() + delay)


class VirtualClock:
    """Time that moves only when told to (see `durable.testing`).

    Sleepers are kept in a heap; `advance_to` wakes them in deadline order.
    """

    #: Real seconds that work virtual time cannot see (a sync activity in a
    #: thread, a child process) holds time still: a quick call finishes
    #: before a virtual timeout can pass it by; one that runs longer (a call
    #: that never returns, under test) lets time move again.
    hold_limit = 1.0

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._background: list[tuple[float, int, anyio.Event]] = []
        self._counter = itertools.count()
        self._dead: set[int] = set()  # cancelled sleepers still in a heap
        self._holds: list[tuple[float, float]] = []  # (began, limit), real seconds

    @contextlib.contextmanager
    def hold(self, limit: float | None = None) -> Iterator[None]:
        """Keep time from being skipped while real work runs, for at most `limit`
        real seconds (default `hold_limit`)."""
        entry = (time.monotonic(), self.hold_limit if limit is None else limit)
        self._holds.append(entry)
        try:
            yield
        finally:
            self._holds.remove(entry)

    def holding(self) -> bool:
        """Whether real work still runs that began less than its limit ago."""
        now = time.monotonic()
        return any(now - started < limit for started, limit in self._holds)

    def now(self) -> float:
        return self._now

    async def sleep_until(self, instant: float, *, background: bool = False) -> None:
        if instant <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        heap = self._background if background else self._sleepers
        entry = (instant, next(self._counter), event)
        heapq.heappush(heap, entry)
        try:
            await event.wait()
        finally:
            if not event.is_set():  # cancelled (a race lost, a scope ended)
                self._forget(entry[1])

    def _forget(self, seq: int) -> None:
        """Drop a cancelled sleeper: nobody waits for its instant any more, so
        `next_wakeup` must not offer it (a time-skipping environment would
        move time to an instant nothing awaits), and a test that races many
        timers must not grow the heap. Marked and skipped lazily; the heaps
        are rebuilt once most of them is dead."""
        self._dead.add(seq)
        if len(self._dead) > 64 and len(self._dead) * 2 > len(self._sleepers) + len(
            self._background
        ):
            for heap in (self._sleepers, self._background):
                heap[:] = [e for e in heap if e[1] not in self._dead]
                heapq.heapify(heap)
            self._dead.clear()

    def next_wakeup(self) -> float | None:
        """The earliest instant a (foreground) sleeper waits for, or None."""
        heap = self._sleepers
        while heap and (heap[0][2].is_set() or heap[0][1] in self._dead):
            self._dead.discard(heapq.heappop(heap)[1])
        return heap[0][0] if heap else None

    def advance_to(self, instant: float) -> None:
        """Move time forward (never back) and wake every sleeper now due."""
        self._now = max(self._now, instant)
        for heap in (self._sleepers, self._background):
            while heap and heap[0][0] <= self._now:
                _, seq, event = heapq.heappop(heap)
                if seq in self._dead:
                    self._dead.discard(seq)
                else:
                    event.set()


def held(clock: Clock, limit: float | None = None) -> contextlib.AbstractContextManager[None]:
    """Keep virtual time still while a worker is expected to answer at once (a
    query, for as long as its caller waits; an update until it is accepted):
    the caller waits in real time, and a jump meanwhile would pass the run by
    (its condition timed out before the query that precedes the approval was
    even answered). `VirtualClock.hold`; real time: nothing to hold."""
    hold = getattr(clock, "hold", None)
    if hold is None:
        return contextlib.nullcontext()
    manager: contextlib.AbstractContextManager[None] = hold(limit)
    return manager


def to_datetime(instant: float | None) -> datetime.datetime | None:
    """Epoch seconds to an aware UTC datetime (None stays None)."""
    if instant is None:
        return None
    return datetime.datetime.fromtimestamp(instant, tz=datetime.UTC)


@functools.lru_cache(maxsize=4096)
def to_iso(instant: float | None) -> str | None:
    """Epoch seconds to ISO 8601 with an explicit +00:00 offset (cached: a
    scheduler pass's fires share their fire time, due time and clock reading)."""
    value = to_datetime(instant)
    return value.isoformat() if value is not None else None
