"""A worker's background duties that one worker per process does: one helper.

The scheduler (`_scheduler.Scheduler`) and retention (`_retention.RetentionKeeper`)
open the same way: take the process's turn for the duty in a namespace on a
storage (every worker of the process runs the duty; the first does it, the
others stand by and take over when it stops, so that they do not queue on
the same rows), listen to the storage's wake-ups while holding it, and
loop. `duty()` is that opening, written once.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .store import Store
from .wakes import Wake

_Key = tuple[str, str]  # (duty, namespace)
_held: weakref.WeakKeyDictionary[Any, dict[_Key, anyio.Event]] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def one_per_process(driver: Any, duty: str, namespace: str) -> AsyncIterator[None]:
    """Hold the process's turn for `duty` in `namespace` on `driver`: the first
    worker gets it, the others wait until it gives it back (when it stops)."""
    key = (duty, namespace)
    held = _held.setdefault(driver, {})
    while key in held:
        await held[key].wait()
    done = held[key] = anyio.Event()
    try:
        yield
    finally:
        del held[key]
        done.set()


@asynccontextmanager
async def duty(store: Store, name: str, namespace: str,
               on_wake: Callable[[Wake], None]) -> AsyncIterator[None]:
    """The process's turn for duty `name` in `namespace` on `store`, with
    `on_wake` told of the storage's wake-ups until the turn is given back."""
    async with one_per_process(store.driver, name, namespace):
        unsubscribe = store.hub.subscribe(on_wake)
        try:
            yield
        finally:
            unsubscribe()
