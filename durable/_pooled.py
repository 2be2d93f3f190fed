"""A driver on a pool of asyncio connections: what PostgreSQL's and MariaDB's share.

Both drivers run `durable.store`'s programs as transactions on pooled
connections of an asyncio library (asyncpg, asyncmy) and differ only in the
library and the database: how to open and close a pool, take a connection,
run one transaction, tell a lost connection from a conflict, and wake other
processes. What they do alike lives here once (`PooledDriver`):

- the host bridge: on asyncio the library runs in the host's loop; on trio
  on a loop thread of its own (`durable._bridge.LoopThread`), and every call
  hops there, shielded (a transaction, once started, runs to its end, so a
  cancelled caller never leaves a claim committed but unseen);
- the lifecycle: open (pick the loop, open the pool, check or create the
  schema on one connection, turn a failure into a `ConfigurationError` that
  says what to fix), close, and the pool guard (`StorageClosed` once closed).
  Opening is not shielded: a caller cancelled while the pool opens (a
  server that does not answer, a schema lock another process holds) is
  cancelled at once, and what was opened is closed before `open` returns
  (`_abandon`: within `ABANDON_WITHIN` seconds, so the server ends the
  sessions, a statement waiting for a lock told to stop);
- `run()`: a program as one transaction, retried whole while nothing can
  have been committed (a lost connection before COMMIT, a conflict the
  server rolled back), with backoff; a connection lost during COMMIT, or
  during a statement that commits on its own (PostgreSQL's one-statement
  programs, `durable.program.Stmt.autocommit`), is
  `StorageUnavailable(outcome_unknown=True)`: its caller reads back. The wake-ups of a committed
  transaction are published on the host, where the engine listens. An
  outage is logged once (`transaction_retried`, then `storage_reconnected`),
  not once per transaction retried.

A subclass says what differs by the hooks marked below. Not a public seam:
an outside driver implements `durable.driver.Driver` in its own way.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import ClassVar, Generic, Literal, TypeVar

import anyio
import sniffio

from ._bridge import LoopThread
from ._log import get_logger
from .driver import Dialect, Program, ProgramFactory, Tx, Wake, WakeHub
from .errors import ConfigurationError, DurableError, StorageClosed, StorageUnavailable

T = TypeVar("T")
PoolT = TypeVar("PoolT")
ConnT = TypeVar("ConnT")

#: what went wrong with a transaction, as far as retrying it goes: the
#: connection is gone ("lost"), or the server rolled it back because of
#: another transaction ("conflict"); either way nothing was committed
Failure = Literal["lost", "conflict"]


class CommitOutcomeUnknown(Exception):
    """The connection broke while COMMIT was on the wire, or a statement that
    commits on its own: the server may have committed it. Never retried here
    (a blind re-send could apply it twice); the caller reads back."""


class PooledDriver(ABC, Generic[PoolT, ConnT]):
    """The shared part of a pooled asyncio driver (see the module docstring).

    `masked` is the URL to show (no password); `retries` how often a
    transaction is retried after a lost connection or a conflict before
    `StorageUnavailable`.
    """

    #: `run` is shielded whole, from before its first await (durable.driver.Driver)
    runs_shielded: ClassVar[bool] = True
    #: the database's name in messages ("PostgreSQL")
    engine: ClassVar[str]
    #: retry n (from 2) waits min(retry_base * 2**n, 2) seconds; the first, none
    retry_base: ClassVar[float]
    #: the library's errors that opening a pool or a connection may raise
    connect_errors: ClassVar[tuple[type[BaseException], ...]]
    #: seconds between two `transaction_retried` warnings (`_retrying_lost`)
    LOST_WARNING_EVERY: ClassVar[float] = 60.0
    #: seconds `close` waits for the pool's connections to close gracefully
    CLOSE_WITHIN: ClassVar[float] = 10.0
    #: seconds an open that failed or was cancelled spends closing what it
    #: opened gracefully (a statement in flight is stopped on the server, which
    #: a dropped socket does not do while it waits for a lock: PostgreSQL's
    #: cancel request, MariaDB's KILL) before dropping the connections (`_abandon`)
    ABANDON_WITHIN: ClassVar[float] = 1.0

    def __init__(self, url: str, masked: str, dialect: Dialect, *, min_pool: int,
                 max_pool: int, connect_timeout: float, retries: int, logger: str) -> None:
        if min_pool < 0 or max_pool < 1 or min_pool > max_pool:
            raise ConfigurationError(
                f"min_pool={min_pool}, max_pool={max_pool}: need 0 <= min_pool <= max_pool "
                "and max_pool >= 1")
        if not connect_timeout > 0:
            raise ConfigurationError(
                f"connect_timeout={connect_timeout!r}: give the seconds to wait for a "
                "connection, a positive number")
        if retries < 0:
            raise ConfigurationError(
                f"retries={retries!r}: give how often a transaction is retried, 0 or more")
        self.hub = WakeHub()
        self.dialect = dialect
        self.url = url
        self.masked = masked
        self.min_pool = min_pool
        self.max_pool = max_pool
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.origin = uuid.uuid4().hex[:16]
        self.log = get_logger(logger).bind(url=masked)
        self._pool: PoolT | None = None
        #: the pool `open` is opening (closed by `_abandon` if the open fails)
        self._opening: PoolT | None = None
        self._thread: LoopThread | None = None
        self._bridged = False  # the library runs on a LoopThread (a trio host)
        self._watch_lock: anyio.Lock | None = None
        #: the host's cancel scope class (`open`): ``anyio.CancelScope`` until then
        self._scope: Callable[..., anyio.CancelScope] = anyio.CancelScope
        #: `Tx.notices` of this driver's transactions (None: a statement cannot notify)
        self._tx_notices: Callable[[Iterable[Wake]], tuple[list[str], list[str]]] | None = None
        #: `Tx.addressee` of this driver's transactions (None: nothing is addressed)
        self._tx_addressee: Callable[[str, str, float], str | None] | None = None
        #: when (time.monotonic) the outage in progress began: the first lost
        #: connection retried since the last transaction that went through
        self._lost_since: float | None = None
        #: when (time.monotonic) `transaction_retried` was last a warning, and
        #: whether the outage in progress was warned of
        self._warned_at: float | None = None
        self._said_lost = False

    # ---------------------------------------------------------------- what differs

    @abstractmethod
    def _new_pool(self) -> PoolT:
        """The library's pool, made on its loop with no connection open yet."""

    @abstractmethod
    async def _fill_pool(self, pool: PoolT) -> None:
        """Open the pool's first connections (`min_pool`)."""

    @abstractmethod
    async def _close_pool(self, pool: PoolT, within: float = CLOSE_WITHIN) -> None:
        """Close a pool, opened or not (and whatever else the driver opened on
        its loop): gracefully for `within` seconds, then by dropping every
        connection."""

    @abstractmethod
    def _acquire(self, pool: PoolT) -> AbstractAsyncContextManager[ConnT]:
        """Take a connection from the pool for one transaction."""

    @abstractmethod
    async def _prepare(self, conn: ConnT) -> None:
        """Check or create the schema, on the first connection of a new pool."""

    @abstractmethod
    async def _transaction(self, conn: ConnT, program: Program[T], tx: Tx, write: bool) -> T:
        """Run one program on `conn` (`write`: in a transaction that wakes
        others on commit); raise `CommitOutcomeUnknown` from the error when
        the connection broke during COMMIT (or during a self-committing
        statement)."""

    @abstractmethod
    def _failure(self, exc: BaseException) -> Failure | None:
        """Whether `exc` means a lost connection or a conflict (None: neither,
        the error is the program's outcome)."""

    @abstractmethod
    def _discard(self, conn: ConnT) -> None:
        """Close a broken connection at once, so the pool opens a new one."""

    @abstractmethod
    def _connect_error(self, exc: BaseException) -> ConfigurationError:
        """Why connecting failed and what to fix, from the library's error."""

    def _prepare_timeout_error(self, exc: TimeoutError) -> ConfigurationError:
        """Why checking or creating the schema timed out, the server having
        answered: not "no server answered" (`_connect_error` says that of an
        OSError, and a TimeoutError is one)."""
        return ConfigurationError(
            f"cannot use {self.masked!r}: the {self.engine} server answered, but checking "
            f"or upgrading durable's schema timed out ({exc!r}); a statement most likely "
            "waited for a lock another session holds on durable's tables (an upgrade waits "
            "for the transactions of workers still running an older durable): let them "
            "end or stop those workers, then connect again")

    async def _connection_lost(self, pool: PoolT, exc: BaseException) -> None:
        """A connection was lost (`exc`): what else to do before a retry."""

    # ---------------------------------------------------------------- host bridge

    @property
    def calls_ending(self) -> int:
        """Calls still ending on the library's loop whose caller was cancelled
        (`LoopThread.ending`; 0 on an asyncio host, where the caller itself
        awaits the cancelled call)."""
        return self._thread.ending if self._thread is not None else 0

    async def _call(self, fn: Callable[[], Awaitable[T]], *, shield: bool = True) -> T:
        """Run `fn` where the library lives; shielded by default (see the module
        docstring)."""
        if self._thread is not None:
            return await self._thread.run(fn, shield=shield)
        if self._bridged:  # on trio, after close: the library's loop is gone
            raise StorageClosed(f"the {self.engine} driver for {self.masked!r} is closed "
                                "(the client was closed); nothing more can be recorded "
                                "through it")
        with self._scope(shield=shield):
            result = await fn()
        return result

    # ---------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        if self._pool is not None:
            return
        self._watch_lock = anyio.Lock()
        host = sniffio.current_async_library()
        if host == "trio":
            self._thread = LoopThread(f"the {self.engine} driver")
            self._bridged = True
        elif host != "asyncio":
            raise ConfigurationError(
                f"the {self.engine} driver runs under asyncio or trio, not {host!r}")
        else:
            # anyio's class for this host, found once: ``anyio.CancelScope()``
            # looks the host up at every call (sniffio, then a table), about a
            # third of the shield's cost, and `_call` enters one per
            # transaction (issue 26). The same class, made the same way.
            self._scope = type(anyio.CancelScope())
        try:
            # Not shielded (see the module docstring): the library's waits for
            # a server (connecting, a lock) end at the caller's cancellation.
            await self._call(self._open_pool, shield=False)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._abandon()
            raise

    async def _open_pool(self) -> None:
        self._opening = pool = self._new_pool()
        try:
            await self._fill_pool(pool)
        except self.connect_errors as exc:
            raise self._connect_error(exc) from exc
        try:
            async with self._acquire(pool) as conn:
                await self._prepare(conn)
        except ConfigurationError as exc:
            raise ConfigurationError(f"cannot use {self.masked!r}: {exc}") from exc
        except TimeoutError as exc:  # an OSError, but the server did answer
            raise self._prepare_timeout_error(exc) from exc
        except self.connect_errors as exc:
            raise self._connect_error(exc) from exc
        self._pool, self._opening = pool, None

    async def _abandon(self) -> None:
        """Close what an open that failed or was cancelled opened: the pool
        (gracefully for `ABANDON_WITHIN` seconds) and the loop thread (call
        shielded). The open's own task has ended by now (on trio the bridge
        waits for it), so nothing of it is left running."""
        pools = [p for p in (self._opening, self._pool) if p is not None]
        self._opening = self._pool = None
        try:
            for pool in pools:
                await self._call(functools.partial(self._close_pool, pool, self.ABANDON_WITHIN))
        except Exception as exc:  # the open's own error is the one to raise
            self.log.debug("abandon_failed", error=repr(exc))
        finally:
            if self._thread is not None:
                thread, self._thread = self._thread, None
                await thread.stop()

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await self._call(lambda: self._close_pool(pool, self.CLOSE_WITHIN))
            if self._thread is not None:
                thread, self._thread = self._thread, None
                await thread.stop()

    def _require_pool(self) -> PoolT:
        if self._pool is None:
            raise self._closed_error()
        return self._pool

    def _closed_error(self) -> StorageClosed:
        return StorageClosed(f"the {self.engine} connection pool for {self.masked!r} "
                             "is closed (the client was closed); nothing more can be "
                             "recorded through it")

    async def _on_pool(self, fn: Callable[[ConnT], Awaitable[T]]) -> T:
        """`fn` on a pooled connection, where the library lives (outside `run`:
        the schema's upkeep, the wake log, a baton's notification).

        A lost connection is `StorageUnavailable` (`StorageClosed` once the
        client closed), as from `run`: the library's own error reached a
        worker's loop as a bug, and stopped the worker (a baton's NOTIFY,
        `announce`, sent while the server restarted)."""

        async def call() -> T:
            async with self._acquire(self._require_pool()) as conn:
                try:
                    return await fn(conn)
                except BaseException as exc:
                    if self._failure(exc) == "lost":
                        self._discard(conn)
                    raise

        try:
            return await self._call(call)
        except StorageClosed:
            raise
        except Exception as exc:
            if self._pool is None and not isinstance(exc, DurableError):
                raise self._closed_error() from exc  # closed meanwhile (`_run_on_loop`)
            if self._failure(exc) != "lost":
                raise
            raise StorageUnavailable(
                f"lost the connection to {self.engine} at {self.masked!r} ({exc!r}); "
                "what was sent may or may not have taken effect",
                outcome_unknown=True,
            ) from exc

    # ---------------------------------------------------------------- transactions

    async def run(self, program: ProgramFactory[T], *, write: bool = True) -> T:
        """Run the program as one transaction (see the module docstring)."""
        self._require_pool()
        result, tx = await self._call(lambda: self._run_on_loop(program, write))
        self.hub.publish(tx.wakes)
        return result

    async def _run_on_loop(self, build: ProgramFactory[T], write: bool) -> tuple[T, Tx]:
        """Run a program, retrying it whole while nothing can have been committed."""
        attempt = 0
        while True:
            pool = self._require_pool()
            tx = Tx(self.dialect, notices=self._tx_notices, addressee=self._tx_addressee,
                    slot_limited=self.hub.slot_limited,
                    activity_slot_limited=self.hub.activity_slot_limited)
            try:
                async with self._acquire(pool) as conn:
                    try:
                        result = await self._transaction(conn, build(tx), tx, write)
                    except BaseException as exc:
                        if (isinstance(exc, CommitOutcomeUnknown)
                                or self._failure(exc) == "lost"):
                            self._discard(conn)
                        raise
                if self._lost_since is not None:
                    self._reconnected()
                return result, tx
            except CommitOutcomeUnknown as unknown:
                cause = unknown.__cause__
                await self._connection_lost(pool, unknown)
                raise StorageUnavailable(
                    f"lost the connection to {self.engine} at {self.masked!r} while "
                    f"committing ({cause!r}); the transaction may or may not have been "
                    "recorded: read the state back from storage before acting on it",
                    outcome_unknown=True,
                ) from cause
            except Exception as exc:
                if self._pool is None and not isinstance(exc, DurableError):
                    # the client closed meanwhile: whatever the library said of it
                    # ("pool is closing", a connection closed under a query) means
                    # that, not a bug (a program's own outcome is kept)
                    raise self._closed_error() from exc
                failure = self._failure(exc)
                if failure is None:
                    raise
                lost = failure == "lost"
                if attempt >= self.retries:
                    what = ("is unavailable" if lost else
                            "kept colliding with other transactions")
                    fix = "check that the server is up and reachable; " if lost else ""
                    raise StorageUnavailable(
                        f"{self.engine} at {self.masked!r} {what} after {attempt + 1} "
                        f"attempts ({exc!r}); {fix}nothing was recorded",
                        outcome_unknown=False,
                    ) from exc
                attempt += 1
                if lost:
                    self._retrying_lost(exc, attempt)
                    await self._connection_lost(pool, exc)
                else:
                    self.log.debug("transaction_conflict", error=repr(exc), attempt=attempt)
                # asyncio's sleep: this runs where the library lives (a loop thread on trio)
                await asyncio.sleep(0 if attempt == 1 else min(self.retry_base * 2 ** attempt,
                                                               2.0))

    def _retrying_lost(self, exc: BaseException, attempt: int) -> None:
        """A transaction is retried after a lost connection: a warning for the
        first of an outage, the rest at debug. Every transaction in flight
        retried, each with its own warning: a five-second server restart
        wrote hundreds of lines per worker process. Losses that come and go
        (a server at its connection limit refuses one connection in a few)
        warn at most once a `LOST_WARNING_EVERY`."""
        now = time.monotonic()
        if self._lost_since is None:
            self._lost_since = now
        hint = self._lost_hint(exc)
        fields = {"hint": hint} if hint else {}
        if self._warned_at is None or now - self._warned_at >= self.LOST_WARNING_EVERY:
            self._warned_at = now
            self._said_lost = True
            self.log.warning("transaction_retried", error=repr(exc), attempt=attempt, **fields)
        else:
            self.log.debug("transaction_retried", error=repr(exc), attempt=attempt, **fields)

    def _reconnected(self) -> None:
        """A transaction went through after an outage: said once, with its
        length, when the outage was warned of."""
        if self._lost_since is not None:
            seconds = time.monotonic() - self._lost_since
            self._lost_since = None
            if self._said_lost:
                self._said_lost = False
                self.log.info("storage_reconnected", seconds=round(seconds, 3))

    def _lost_hint(self, exc: BaseException) -> str | None:
        """What to do about a lost connection, when the error says (a hook)."""
        return None

    def remote_keys(self, tx: Tx) -> list[tuple[str, ...]]:
        """The keys of a transaction's wake-ups that other processes must hear."""
        return list(dict.fromkeys(wake.key for wake in tx.wakes if self.hub.for_others(wake)))

