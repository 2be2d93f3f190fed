"""The trio bridge: an asyncio database library's loop on a thread of its own.

asyncpg (PostgreSQL) and asyncmy (MariaDB) are asyncio libraries. On an
asyncio host a driver runs them in the host's loop; on a trio host it runs
its calls on this loop thread and the engine awaits them without blocking
trio. Shared by the drivers, so it lives in core (it names no database).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from durable.errors import StorageClosed

T = TypeVar("T")

#: Python's default thread switch interval (`sys.getswitchinterval`), and the
#: one a bridge sets instead (see `shorten_switch_interval`).
DEFAULT_SWITCH_INTERVAL = 0.005
BRIDGED_SWITCH_INTERVAL = 0.001


def shorten_switch_interval() -> bool:
    """Make the GIL change hands every 1 ms instead of every 5 (process-wide),
    unless the application chose an interval of its own; True if it did.

    Every call through a bridge needs both threads: the loop thread reads the
    database's socket, the trio thread runs the engine. When one is woken
    while the other runs Python code, it waits for the GIL until the other
    blocks or the switch interval runs out: up to 5 ms per hand-over with
    the default, and a call hands over at least twice. Measured on 100
    updates to one run on PostgreSQL (7 alternated pairs on a loaded
    machine, docs/benchmarks.md): about 20% less time per update on trio.
    An application that sets its own interval (before or after connecting)
    keeps it."""
    if sys.getswitchinterval() != DEFAULT_SWITCH_INTERVAL:
        return False
    sys.setswitchinterval(BRIDGED_SWITCH_INTERVAL)
    return True


class LoopThread:
    """An asyncio event loop on a daemon thread, for hosts that are not asyncio.

    Each call is a task made on the loop (`loop.call_soon_threadsafe`); its
    completion wakes the trio task through `TrioToken.run_sync_soon`, which
    never blocks the asyncio thread (a blocking hand-back, like
    `anyio.from_thread.run_sync`, would stall every other query until trio
    next got round to it). Starting one shortens the interpreter's thread
    switch interval (`shorten_switch_interval`).
    """

    def __init__(self, what: str) -> None:
        #: the driver, as error messages name it ("the PostgreSQL driver")
        self.what = what
        shorten_switch_interval()
        self.loop = asyncio.new_event_loop()
        self._stopping = False
        #: calls whose caller was cancelled and waits for the loop's task to
        #: end (`run`): real work in flight, though the caller looks blocked
        #: (the time-skipping environment must not take that for idle)
        self.ending = 0
        self._thread = threading.Thread(
            target=self._main, name=f"durable-{what.split()[-2].lower()}-asyncio", daemon=True
        )
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def run(self, fn: Callable[[], Awaitable[T]], *, shield: bool) -> T:
        """`fn()` as a task on the loop; its result or error here.

        `shield`: the caller's cancellation waits for the call to end (a
        transaction runs to its end). Unshielded, a cancelled caller cancels
        the loop's task and returns once that task has ended, never before: a
        call that opens something (a pool, a connection) has closed it again
        by then, and nothing of the call runs on behind the caller's back."""
        import trio

        if self._stopping:
            raise StorageClosed(f"{self.what} was closed (the client was closed); "
                                "nothing more can be recorded through it")
        token = trio.lowlevel.current_trio_token()
        done = anyio.Event()
        started: list[asyncio.Task[T]] = []  # the loop's task, once made there

        async def call() -> T:
            return await fn()

        def ended(_: object) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        def start() -> None:  # on the loop
            task = self.loop.create_task(call())
            task.add_done_callback(ended)
            started.append(task)

        def cancel() -> None:  # on the loop, after `start` (the loop runs callbacks in order)
            started[0].cancel()

        self.loop.call_soon_threadsafe(start)
        try:
            with anyio.CancelScope(shield=shield):
                await done.wait()
        except BaseException:
            if not done.is_set():
                self.loop.call_soon_threadsafe(cancel)
                self.ending += 1
                try:
                    with anyio.CancelScope(shield=True):
                        await done.wait()
                finally:
                    self.ending -= 1
            raise
        task = started[0]
        if task.cancelled():  # by `stop` (the caller's cancellation raised above)
            raise StorageClosed(f"{self.what} was closed while this call waited "
                                "(the client was closed)")
        return task.result()

    async def stop(self) -> None:
        """Cancel what still runs on the loop (a listener's wait: its caller gets
        `StorageClosed`, never a hang), then stop the loop and its thread."""
        self._stopping = True

        async def wind_down() -> None:
            current = asyncio.current_task()
            others = [t for t in asyncio.all_tasks() if t is not current]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            asyncio.get_running_loop().stop()

        asyncio.run_coroutine_threadsafe(wind_down(), self.loop)
        await anyio.to_thread.run_sync(self._thread.join)
