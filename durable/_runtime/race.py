"""Waiting for the first of several things, leaving no cyclic garbage.

The usual race (a task group whose first finisher cancels the group's scope)
ends the losers cancelled, and a task that ends cancelled leaves its
exception in a reference cycle with its traceback (anyio's `task_done`
frame) that only a full garbage collection frees; a full collection stops
the process for tens of milliseconds (docs/benchmarks.md, "One transaction a
watchdog pass"). Here each waiter runs in a cancel scope of its own, which
the first to finish cancels, so every task returns normally.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio


async def first_of(*waits: Callable[[], Awaitable[object]]) -> None:
    """Run `waits` side by side; return once the first has returned (and the
    others have stopped at their awaits)."""
    scopes = [anyio.CancelScope() for _ in waits]

    async def wait(fn: Callable[[], Awaitable[object]], scope: anyio.CancelScope) -> None:
        with scope:
            await fn()
            for other in scopes:
                other.cancel()

    async with anyio.create_task_group() as tg:
        for fn, scope in zip(waits, scopes, strict=True):
            tg.start_soon(wait, fn, scope)
