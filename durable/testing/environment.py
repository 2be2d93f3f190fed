"""The time-skipping environment: a client and workers on a virtual clock.

`TimeSkippingEnvironment` (re-exported by `durable.testing`, whose docstring
shows it in use) and what it is made of: storage of its own (`_own_storage`:
a PostgreSQL schema it creates and drops, else the SQLite URL as given), a
driver that counts storage calls in flight, and the check that every task
waits. Its own module so that crash exploration (`crashes.py`), which runs
in it, imports it rather than the package face that re-exports crashes.
"""

from __future__ import annotations

import functools
import inspect
import uuid
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.abc

try:  # trio depends on sniffio; without it the host can only be asyncio
    import sniffio
except ImportError:  # pragma: no cover - a core install: recent anyio does not bring it
    sniffio = None  # type: ignore[assignment]

from ..client import Client
from ..clock import VirtualClock
from ..driver import Driver, driver_factory, url_scheme
from ..errors import ConfigurationError
from ..worker import Worker

_FOREVER = 10 * 365 * 24 * 3600.0


def _own_storage(url: str) -> tuple[str, str | None]:
    """The URL the environment uses, and the PostgreSQL schema it creates for
    itself (to drop on exit): it never drops data it did not create. SQLite
    URLs are used as given (the default is a private in-memory database)."""
    if url_scheme(url) not in ("postgresql", "postgres"):
        return url, None
    schema = f"durable_env_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    query.append(("schema", schema))
    return urlunsplit(parts._replace(query=urlencode(query))), schema


class _CountingDriver:
    """Wraps a driver to know whether any storage call is in flight (a task
    waiting on the database thread looks blocked, yet something will happen)."""

    def __init__(self, inner: Driver) -> None:
        self._inner = inner
        self.inflight = 0
        self.settled = anyio.Event()

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
                if self.inflight == 0:
                    self.settled.set()
                    self.settled = anyio.Event()

        return counted

    def quiet(self) -> bool:
        """No storage call in flight: none counted here, and none that a
        cancelled caller waits for on the driver's own event loop (`watch`, not
        counted, waits that way when a worker stops it: trio sees its task
        blocked while asyncpg or asyncmy still winds the call down)."""
        return self.inflight == 0 and not getattr(self._inner, "calls_ending", 0)


async def _all_tasks_blocked() -> None:
    """Return once every other task of the event loop waits on something.

    anyio's `wait_all_tasks_blocked` polls every 0.1 s on asyncio, which made
    each virtual timer cost a tenth of a second of real time; this yields to
    the loop instead, backing off only while tasks keep running. trio's own
    check is exact and cheap.
    """
    if sniffio is not None and sniffio.current_async_library() != "asyncio":
        await anyio.wait_all_tasks_blocked()
        return
    import asyncio

    this = asyncio.current_task()
    spins = 0
    while True:
        await asyncio.sleep(0 if spins < 50 else 0.001)
        if all(
            task is this or (
                (waiter := getattr(task, "_fut_waiter", None)) is not None and not waiter.done()
            )
            for task in asyncio.all_tasks()
        ):
            return
        spins += 1


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
        #: the workers of `worker()`: each makes a claim pass before time moves
        self._workers: weakref.WeakSet[Worker] = weakref.WeakSet()

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ConfigurationError("use `async with TimeSkippingEnvironment() as env` first")
        return self._client

    async def __aenter__(self) -> TimeSkippingEnvironment:
        url, self._own_schema = _own_storage(self.url)
        driver = driver_factory(url)(url)
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
            with anyio.CancelScope(shield=True):
                if self._own_schema is not None:
                    await self._counting._inner.drop_schema()  # type: ignore[attr-defined]
                await self._client.close()

    def worker(self, **kwargs: Any) -> Worker:
        """A Worker on this environment's client; leases never expire in virtual time."""
        kwargs.setdefault("lease_seconds", _FOREVER)
        kwargs.setdefault("poll_interval", 0.05)
        worker = Worker(self.client, **kwargs)
        self._workers.add(worker)
        return worker

    def now(self) -> float:
        return self.clock.now()

    async def sleep(self, seconds: float) -> None:
        """Advance virtual time by `seconds`, waking everything due on the way in order."""
        target = self.clock.now() + seconds
        self._paused += 1
        try:
            while True:
                await self._settled()
                next_at = self.clock.next_wakeup()
                if next_at is None or next_at > target:
                    break
                self.clock.advance_to(next_at)
            self.clock.advance_to(target)
            await self._settled()
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
        """Return once every task is blocked, no storage call is in flight and no
        sync activity's thread (or child process) has just started working."""
        stable = 0
        while stable < 3:
            await _all_tasks_blocked()
            if self._counting.quiet() and not self.clock.holding():
                stable += 1
                await anyio.lowlevel.checkpoint()
            else:
                stable = 0
                with anyio.move_on_after(0.05):
                    await self._counting.settled.wait()

    async def _settled(self) -> None:
        """`_idle`, and then no worker's claim pass finds work: time may move.

        Idle tasks alone are not enough: a claim that ran while another
        transaction held a ready row skipped it (``SKIP LOCKED``) and waits
        for its real-time fallback poll, so a jump now would pass that work by
        (a sync activity's 60 s timeout skipped over before it even started).
        """
        while True:
            await self._idle()
            if not await self._claims_found_work():
                await self._idle()  # what the passes started (nothing) has settled too
                return

    async def _claims_found_work(self) -> bool:
        if not getattr(getattr(self._counting._inner, "dialect", None), "skip_locked", ""):
            return False  # claims wait for each other (SQLite): none passes a ready row by
        found = False
        for worker in list(self._workers):
            if worker._tg is None or worker.stopping or worker.crashed_at is not None:
                continue  # a worker killed on purpose claims nothing more
            before = worker.runs.claimed + worker.remote.claims.claimed
            if worker.workflows:  # a loop that never runs would never pass
                await worker.runs.claim_now()
            if worker.activities:
                await worker.remote.claims.claim_now()
            found = found or worker.runs.claimed + worker.remote.claims.claimed > before
        return found

    async def _skip_when_idle(self) -> None:
        while True:
            if self._paused or not self.auto_skip:
                # no idle check while it could not skip: one beside `sleep`'s
                # own made each wait for the other (a task spinning in
                # `_all_tasks_blocked` is not blocked), and with skipping off
                # it ran every 5 ms for nothing
                await anyio.sleep(0.005)
                continue
            await self._idle()
            next_at = self.clock.next_wakeup()
            if self._paused or not self.auto_skip or next_at is None:
                await anyio.sleep(0.005)
                continue
            await self._settled()
            next_at = self.clock.next_wakeup()
            if self._paused or not self.auto_skip or next_at is None:
                continue
            self.clock.advance_to(next_at)


#: The named points where `crash_at` can stop a worker: right after an
#: activity's function returned (its external effect happened) and before its
#: result is recorded; at a durable op of the shielded cleanup after a
#: cancellation was delivered; right after a phase completed, before the next
#: op; right before a run's close is recorded.
