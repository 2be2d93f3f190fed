"""How a caller of the database thread waits for its call, on each backend.

One event per call, set on the caller's loop by a callback the database
thread schedules there (asyncio: `_wake.notify_of`, an eventfd; trio: the
run's ``TrioToken.run_sync_soon``), and the loop's own "call soon" by which
resumed callers hand the turn on (`_writer.Call.pass_turn`). Each is the
cheapest native form of its backend: these are paid on every commit that
goes through the thread (issue 26).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from ._wake import notify_of
from ._writer import Notify

try:  # trio depends on sniffio; without it the host can only be asyncio
    import sniffio
except ImportError:  # pragma: no cover
    sniffio = None  # type: ignore[assignment]


def _no_wait(*args: Any) -> None:  # pragma: no cover - never called
    raise AssertionError("a call run on the loop's thread waits for nobody")


_NO_WAIT: Any = _no_wait


def _waiter() -> tuple[Any, Notify, Notify]:
    """An event for one caller, its loop's thread-safe "call soon" (for the
    database thread) and its plain one (for the loop itself).

    asyncio: `_wake.notify_of` / ``loop.call_soon``; trio: the run's
    ``TrioToken.run_sync_soon`` / the run's `_TrioSoon`. Native events: they
    are set from those callbacks, on the loop."""
    if sniffio is not None and sniffio.current_async_library() == "trio":
        return _trio_waiter()
    loop = asyncio.get_running_loop()
    return _Once(loop), notify_of(loop), loop.call_soon


class _Once:
    """asyncio.Event's ``set()`` and ``wait()`` for the one caller of a call,
    on a bare future: an Event keeps a queue of waiters and makes a future
    per wait, which a sequential step paid for every commit (issue 26)."""

    __slots__ = ("_future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._future: asyncio.Future[None] = loop.create_future()

    def set(self) -> None:
        if not self._future.done():  # its waiter may have been cancelled
            self._future.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        return self._future


_trio_soon: Any = None  # trio.lowlevel.RunVar[_TrioSoon], made on first use


def _trio_waiter() -> tuple[Any, Notify, Notify]:
    global _trio_soon
    import trio

    token = trio.lowlevel.current_trio_token()
    if _trio_soon is None:
        _trio_soon = trio.lowlevel.RunVar("durable_sqlite_soon")
    try:
        soon: _TrioSoon = _trio_soon.get()
    except LookupError:
        soon = _TrioSoon(token)
        _trio_soon.set(soon)
        trio.lowlevel.spawn_system_task(soon.serve, name="durable-sqlite turns")
    return _TrioOnce(trio.lowlevel), token.run_sync_soon, soon


class _TrioOnce:
    """trio.Event's ``set()`` and ``wait()`` for the one caller of a call,
    parked with trio's low-level wait. ``shielded()`` waits through a
    cancellation as under a shielded cancel scope (the abort fails: the
    cancellation is raised at the caller's next checkpoint; a
    KeyboardInterrupt still gets through, as it does through a shield)
    without entering a scope or an Event's parking lot, which a sequential
    step paid for every commit (issue 26)."""

    __slots__ = ("_lowlevel", "_set", "_task")

    def __init__(self, lowlevel: Any) -> None:
        self._lowlevel = lowlevel  # trio.lowlevel (trio is imported only when used)
        self._set = False
        self._task: Any = None  # the waiting task, while it waits

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        task, self._task = self._task, None
        if task is not None:
            self._lowlevel.reschedule(task)

    async def wait(self) -> None:
        """As ``trio.Event.wait()``: a checkpoint, cancellable."""
        await self._park(shielded=False)

    async def shielded(self) -> None:
        """As ``trio.Event.wait()`` under a shielded cancel scope."""
        await self._park(shielded=True)

    async def _park(self, *, shielded: bool) -> None:
        lowlevel = self._lowlevel
        if self._set:
            if shielded:
                await lowlevel.cancel_shielded_checkpoint()
            else:
                await lowlevel.checkpoint()
            return
        self._task = lowlevel.current_task()

        def abort(raise_cancel: Callable[[], object]) -> Any:
            if shielded:
                try:
                    raise_cancel()  # no side effect but raising, for a cancellation
                except KeyboardInterrupt:
                    pass  # trio delivers it through a shielded scope too
                except BaseException:
                    return lowlevel.Abort.FAILED
            self._task = None
            return lowlevel.Abort.SUCCEEDED

        await lowlevel.wait_task_rescheduled(abort)


class _TrioSoon:
    """trio's "call soon" from inside the run, one scheduling round later,
    without crossing the wake-up socket.

    Why: the turn passes from one resumed caller to the next (`Call.pass_turn`)
    once per program caller. ``TrioToken.run_sync_soon`` is meant for other
    threads: every call writes to the run's wake-up socket, and the run's
    entry-queue task reads it back after an I/O poll, so a drain of N callers
    cost N socket round trips on top of its one hand-over from the database
    thread. Here a system task of the run (one per run) is parked and
    rescheduled, which is a list append in trio's scheduler; the callbacks
    run in the task's next step, one scheduling round later as before, so
    what a resumed caller's continuation started still runs before the next
    caller resumes. Once the run ends the task is gone and calls fall back
    to the token (which then refuses them, as it did before)."""

    __slots__ = ("ended", "parked", "pending", "task", "token")

    def __init__(self, token: Any) -> None:
        self.token = token
        self.pending: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self.task: Any = None
        self.parked = False
        self.ended = False

    def __call__(self, fn: Callable[..., object], *args: Any) -> None:
        if self.ended:
            self.token.run_sync_soon(fn, *args)
            return
        self.pending.append((fn, args))
        if self.parked:
            import trio

            self.parked = False
            trio.lowlevel.reschedule(self.task)

    def _abort(self, _: Any) -> Any:
        import trio

        self.parked = False
        return trio.lowlevel.Abort.SUCCEEDED

    async def serve(self) -> None:
        """The system task: run what was scheduled before this step, then park."""
        import trio

        self.task = trio.lowlevel.current_task()
        try:
            while True:
                # only what was there when this step began: a callback that
                # schedules another gets it a round later, not in this round
                for _ in range(len(self.pending)):
                    fn, args = self.pending.popleft()
                    fn(*args)
                if self.pending:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    continue
                self.parked = True
                await trio.lowlevel.wait_task_rescheduled(self._abort)
        finally:
            self.ended = True
            rest, self.pending = list(self.pending), deque()
            for fn, args in rest:
                try:
                    self.token.run_sync_soon(fn, *args)
                except trio.RunFinishedError:
                    pass
