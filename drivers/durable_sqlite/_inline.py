"""Brief programs run on the event loop's own thread while SQLite is idle.

A worker's step commit (`durable.driver.brief`) used to go through the
database thread like every other program: queued, taken by the thread, run,
and its caller woken through the loop's wake-up file. With
``synchronous=NORMAL`` (or OFF) in WAL mode the commit itself appends a few
pages to the log and syncs nothing: some tens of microseconds, less than the
two wake-ups of the hand-over, which cross CPU cores (decision (aj)).

So a brief write runs on the caller's thread when all of this holds, and
goes to the database thread as before otherwise:

- the driver commits without an fsync (``synchronous`` NORMAL or OFF): a
  commit that syncs takes 0.2-0.4 ms on a local disk and milliseconds on a
  cloud volume, and the loop must not wait for it. Measured (12-07,
  docs/benchmarks.md, last section): at FULL this lane would save 12-15 %
  of a step, the hop only; the fsync's own CPU is the rest;
- nothing of this driver's is in flight on the loop (`Inline.queued`: no
  program call handed to the thread and not yet resumed), so the callers
  still resume in the order their transactions committed;
- the loop has nothing else ready to run: with other callbacks ready, the
  thread's group commit shares one transaction among them (workload (b)),
  and the loop runs their Python meanwhile. A brief read (a run by its id,
  which `result()` makes: decision (ba)) does not need this one: it has no
  commit to share, and in WAL mode it waits on no lock;
- the connection is free (`Writer.run_inline` takes its lock without
  waiting) and the write lock is (``busy_timeout`` 0 for that transaction:
  another process's writer sends the call to the thread, which waits).

Brief since decision (ba), beside a worker's step commit: a client's start
(one instance's rows by key) and a read of one run, so that an awaited start
and an awaited result, like the steps between them, wait for no thread.

The caller of such a commit does not suspend, where the hop it replaces
did. A local step that never suspends runs in the workflow's own task, so
a chain of such steps would hold the loop (its timers, its I/O) for as long
as it lasts: the caller yields to the loop once (`pause`) when one of the
loop's timers fell due (`timer_due`) or `PAUSE_EVERY` has passed since one
last did. Not after every commit: that turn of the loop (a cancel scope, a
``sleep(0)``, a poll for I/O) cost 25-30 µs of the loop's CPU per step,
a fifth of a step (docs/benchmarks.md). Shielded, as the wait for the thread
is: the transaction committed, and its caller gets the outcome before any
cancellation lands.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from durable._scopes import asyncio_scope

try:  # trio depends on sniffio; without it the host can only be asyncio
    import sniffio
except ImportError:  # pragma: no cover
    sniffio = None  # type: ignore[assignment]

#: the ``synchronous`` settings whose commit syncs nothing in WAL mode
UNSYNCED = ("OFF", "NORMAL")
#: seconds after which a commit on the loop's thread yields to the loop
PAUSE_EVERY = 0.001


class Inline:
    """One driver's brief writes on the loop's thread; see the module docstring."""

    __slots__ = ("deadline_at", "loop", "paused_at", "queued")

    def __init__(self) -> None:
        self.queued = 0  # program calls handed to the database thread, not yet resumed
        self.paused_at = 0.0  # monotonic time of the last `pause`
        # What `loop_idle` last read, for `pause_due` to reuse rather than
        # look again: on trio one statistics call costs ~1.7 µs, a step's
        # commit ~70 µs. trio: when the loop's next timer falls due
        # (monotonic; inf with none); asyncio: the running loop.
        self.deadline_at = float("inf")
        self.loop: Any = None

    def pause_due(self, backend: str) -> bool:
        """Whether a commit just made on the loop's thread should yield to the
        loop: a timer of the loop fell due (`timer_due`), or `PAUSE_EVERY`
        passed since one last did."""
        now = time.monotonic()
        if now - self.paused_at < PAUSE_EVERY and not self._timer_due(backend, now):
            return False
        self.paused_at = now
        return True

    def _timer_due(self, backend: str, now: float) -> bool:
        """`timer_due` from what `loop_idle` read before the commit: the
        commit runs no code of the loop's, so no timer came or went since."""
        if backend == "trio":
            return now >= self.deadline_at
        loop = self.loop
        return timer_due(backend) if loop is None else _asyncio_timer_due(loop)

    def loop_idle(self, *, reading: bool = False) -> str | None:
        """The running backend's name if the loop has nothing else ready to
        run (and this driver nothing in flight), else None. `reading`: a
        brief read, which only needs nothing of the driver's in flight: it
        has no commit to share with callers the loop is about to run, so
        they lose nothing by it, and waits on no lock in WAL mode."""
        if self.queued:
            return None
        if sniffio is not None and sniffio.current_async_library() == "trio":
            import trio

            stats = trio.lowlevel.current_statistics()
            if stats.tasks_runnable and not reading:
                return None
            # counted on `time.monotonic` from now: trio's system clock runs
            # at its pace (a test's frozen clock at worst yields once more)
            self.deadline_at = time.monotonic() + stats.seconds_to_next_deadline
            return "trio"
        self.loop = loop = asyncio.get_running_loop()
        ready: Any = getattr(loop, "_ready", None)  # (uvloop: none, never inline)
        return "asyncio" if ready is not None and (reading or not ready) else None


def timer_due(backend: str) -> bool:
    """Whether one of the running loop's timers has fallen due (a sleep ended,
    a deadline passed): the loop looks at its timers only when it gets its
    turn, which a chain of commits on its thread does not give it until it
    pauses. Measured (12-06 trial, a host's 10 ms ticker beside a workflow of
    sequential steps, 2 cores): the ticker fired 1.1-2.3 ms late at the
    median and 10-15 ms at p99 with the pause every `PAUSE_EVERY` only,
    against 0.14-0.45 ms and 4-8 ms through the database thread. A heap peek
    on asyncio (well under a microsecond); one statistics call on trio
    (~1.7 µs measured), which a commit's `Inline.pause_due` spares by reusing
    what `Inline.loop_idle` read."""
    if backend == "trio":
        import trio

        return trio.lowlevel.current_statistics().seconds_to_next_deadline <= 0
    return _asyncio_timer_due(asyncio.get_running_loop())


def _asyncio_timer_due(loop: Any) -> bool:
    """`timer_due` on asyncio: a peek at the loop's timer heap."""
    scheduled: Any = getattr(loop, "_scheduled", None)  # (uvloop: none, never inline)
    return bool(scheduled) and scheduled[0].when() <= loop.time()


async def pause(backend: str) -> None:
    """One shielded turn of the loop after a commit on its thread."""
    if backend == "trio":
        import trio

        # Twice: trio runs the tasks made runnable together as one batch in
        # random order, and `tasks_runnable` does not count the rest of the
        # batch being run. After one checkpoint this task ran before those
        # woken with it (a due timer's, a socket's) half the time, and its
        # next commit found the loop "idle": they waited for the next pause.
        await trio.lowlevel.cancel_shielded_checkpoint()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return
    with asyncio_scope(shield=True):
        await asyncio.sleep(0)
