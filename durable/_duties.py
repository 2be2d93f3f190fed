"""A worker's background duties that one worker per process does: one helper.

The scheduler (`_scheduler.Scheduler`) and retention (`_retention.RetentionKeeper`)
open the same way: take the process's turn for the duty in a namespace on a
storage (every worker of the process runs the duty; the first does it, the
others stand by and take over when it stops, so that they do not queue on
the same rows), listen to the storage's wake-ups while holding it, and
loop. `duty()` is that opening, written once, and `Duty` the class both
build on (what they hold, and `run()`: take the turn, listen, loop).
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio

from ._log import get_logger
from .clock import Clock
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


class Duty:
    """A worker's share of a duty in its namespace: subclasses say its `name`,
    what a wake-up means to it (`_on_wake`) and what it does while it holds
    the process's turn (`_loop`)."""

    #: the duty's name (its turn's key, its logger ``durable.<name>``)
    name: ClassVar[str]

    def __init__(self, store: Store, clock: Clock, namespace: str, *, poll_interval: float,
                 worker_id: str) -> None:
        self.store = store
        self.clock = clock
        self.namespace = namespace
        self.poll_interval = poll_interval
        self.log = get_logger(f"durable.{self.name}").bind(namespace=namespace,
                                                         worker_id=worker_id)

    async def run(self) -> None:
        async with duty(self.store, self.name, self.namespace, self._on_wake):
            await self._loop()

    def _on_wake(self, wake: Wake) -> None:
        raise NotImplementedError

    async def _loop(self) -> None:
        raise NotImplementedError
