"""An offline, in-process time-skipping environment for tests.

    async with durable.testing.TimeSkippingEnvironment() as env:
        async with env.worker(workflows=[order], activities=[charge]):
            handle = await env.client.start(order, "o-1", id="o-1",
                options=durable.StartOptions().with_execution_timeout(7200))
            with pytest.raises(durable.WorkflowTimedOut):
                await handle.result()          # two virtual hours, milliseconds of real time

Time is a `VirtualClock` that timers, timeouts, leases and the watchdog all
follow. With ``auto_skip=True`` (the default) the environment jumps the clock
to the next thing anyone waits for whenever the whole program is idle: every
task blocked and no storage call in flight. ``await env.sleep(s)`` moves time
by hand. No server is downloaded or started (Temporal's equivalent needs one).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, cast

import anyio
import anyio.abc

from ._registry import isolated_definitions
from .client import Client
from .clock import VirtualClock
from .driver import Driver, driver_factory
from .errors import ConfigurationError
from .worker import Worker

__all__ = ["TimeSkippingEnvironment", "isolated_definitions"]

_FOREVER = 10 * 365 * 24 * 3600.0


class _CountingDriver:
    """Wraps a driver to know whether any storage call is in flight."""

    def __init__(self, inner: Driver) -> None:
        self._inner = inner
        self.inflight = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name == "watch" or not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.inflight += 1
            try:
                return await attr(*args, **kwargs)
            finally:
                self.inflight -= 1

        return counted


class TimeSkippingEnvironment:
    """A client and workers on a virtual clock; see the module docstring."""

    def __init__(
        self,
        url: str = "sqlite://:memory:",
        *,
        start: float | None = None,
        auto_skip: bool = True,
        namespace: str = "default",
    ) -> None:
        self.url = url
        self.clock = VirtualClock(start)
        self.auto_skip = auto_skip
        self.namespace = namespace
        self._client: Client | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._paused = 0

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ConfigurationError("use `async with TimeSkippingEnvironment() as env` first")
        return self._client

    async def __aenter__(self) -> TimeSkippingEnvironment:
        driver = driver_factory(self.url)(self.url)
        await driver.open()
        self._counting = _CountingDriver(driver)
        self._client = Client(cast(Driver, self._counting), namespace=self.namespace,
                              clock=self.clock)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._skip_when_idle)  # it skips only while auto_skip is True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None and self._client is not None
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            drop = getattr(self._counting._inner, "drop_schema", None)
            if drop is not None:
                await drop()
            await self._client.close()

    def worker(self, **kwargs: Any) -> Worker:
        """A Worker on this environment's client; leases never expire in virtual time."""
        kwargs.setdefault("lease_seconds", _FOREVER)
        kwargs.setdefault("poll_interval", 0.05)
        return Worker(self.client, **kwargs)

    def now(self) -> float:
        return self.clock.now()

    async def sleep(self, seconds: float) -> None:
        """Advance virtual time by `seconds`, waking everything due on the way in order."""
        target = self.clock.now() + seconds
        self._paused += 1
        try:
            while True:
                await self._idle()
                next_at = self.clock.next_wakeup()
                if next_at is None or next_at > target:
                    break
                self.clock.advance_to(next_at)
            self.clock.advance_to(target)
            await self._idle()
        finally:
            self._paused -= 1

    async def run(self, awaitable: Callable[[], Awaitable[Any]]) -> Any:
        """Await `awaitable()` with time skipping on, then restore the setting."""
        previous, self.auto_skip = self.auto_skip, True
        try:
            return await awaitable()
        finally:
            self.auto_skip = previous

    async def _idle(self) -> None:
        """Return once every task is blocked and no storage call is in flight."""
        stable = 0
        while stable < 3:
            await anyio.wait_all_tasks_blocked()
            if self._counting.inflight == 0:
                stable += 1
                await anyio.lowlevel.checkpoint()
            else:
                stable = 0
                await anyio.sleep(0.001)

    async def _skip_when_idle(self) -> None:
        while True:
            await self._idle()
            next_at = self.clock.next_wakeup()
            if self._paused or not self.auto_skip or next_at is None:
                await anyio.sleep(0.005)
                continue
            self.clock.advance_to(next_at)
