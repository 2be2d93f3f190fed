"""The PostgreSQL driver (``postgresql://user[:password]@host[:port]/db[?schema=NAME]``).

PostgreSQL is where work goes when it outgrows one machine: many worker
processes on many hosts share one database, claims skip each other's locked
rows (``FOR UPDATE SKIP LOCKED``), and a commit in one process wakes the
others through LISTEN/NOTIFY, with a bounded poll behind it for a lost
notification.

Each domain transaction of `durable.sqlstore` runs on one pooled asyncpg
connection. A step's cost is its round trips, so the driver spends as few as
the protocol allows: ``BEGIN``, one per statement (asyncpg keeps them
prepared), and one for ``NOTIFY`` + ``COMMIT`` sent together; programs that
only read skip ``BEGIN``/``COMMIT`` (under READ COMMITTED each statement has
its own snapshot either way); a released connection is not reset (our
transactions leave no session state), which asyncpg would otherwise do with
a round trip of its own.

asyncpg is an asyncio library. On an asyncio host it runs in the host's loop;
on a trio host the driver runs its own asyncio loop on a daemon thread and the
engine awaits each call there without blocking trio (see `_LoopThread`).
Wake-ups are always published on the host loop, where the engine's callbacks
expect them.

``?schema=NAME`` (ours; not passed to asyncpg) keeps the tables in a schema
of their own, created on connect: tests and side-by-side deployments use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.to_thread
import asyncpg
import asyncpg.exceptions as pgerr
import sniffio

from durable._log import get_logger
from durable.driver import Wake
from durable.errors import ConfigurationError, StorageUnavailable
from durable.sqlstore import (
    SCHEMA_VERSION,
    Program,
    SQLDriverBase,
    Stmt,
    Tx,
    migrate,
    schema_statements,
)

__all__ = ["PostgresDriver"]

T = TypeVar("T")
if TYPE_CHECKING:  # asyncpg's classes are generic only in its stubs
    from asyncpg.pool import PoolConnectionProxy

    Pool = asyncpg.Pool[asyncpg.Record]
    # a pooled connection comes wrapped in a proxy with the same interface
    Connection = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]

# pg_advisory_xact_lock(class, key): the class names "durable schema DDL", the
# key the schema, so processes migrating different schemas do not queue.
_DDL_LOCK_CLASS = 0x64757261
# pg_notify payloads must stay under 8000 bytes; a larger set of keys is sent
# as ("any",), which every listener treats as "look at everything".
_MAX_PAYLOAD = 7000
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_USAGE = "postgresql://user[:password]@host[:port]/database[?schema=NAME]"

# Errors after which the connection is gone: nothing the server did in an open
# transaction survives it (the server rolls back), so retrying is safe unless
# COMMIT was already on the wire.
_CONNECTION_LOST: tuple[type[BaseException], ...] = (
    OSError,  # includes TimeoutError (a command or acquire timeout)
    pgerr.PostgresConnectionError,
    pgerr.AdminShutdownError,
    pgerr.CrashShutdownError,
    pgerr.CannotConnectNowError,
    pgerr.TooManyConnectionsError,
    # the server's FATAL arrived but the socket is not closed yet: asyncpg
    # refuses the next statement before sending it
    pgerr.InternalClientError,
)
# Errors the server raises when concurrent transactions collide; the
# transaction was rolled back and a fresh run of the program sees the winner's
# rows (e.g. two starts of one workflow id: the second becomes "already started").
_CONFLICT: tuple[type[BaseException], ...] = (
    pgerr.DeadlockDetectedError,
    pgerr.SerializationError,
    pgerr.UniqueViolationError,
    # another process migrated the schema under our prepared statements;
    # asyncpg has dropped them, the next attempt prepares afresh
    pgerr.InvalidCachedStatementError,
)


# ---------------------------------------------------------------- URL


@dataclass(frozen=True)
class _Target:
    """A parsed URL: what to give asyncpg and what to show people."""

    dsn: str
    masked: str
    schema: str | None
    database: str
    address: str
    application_name: str | None


def _mask(url: str) -> str:
    """The URL with its password replaced, fit for error messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def _parse_url(url: str) -> _Target:
    masked = _mask(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(
            f"invalid PostgreSQL URL {masked!r} ({exc}); expected {_USAGE}"
        ) from exc
    if parts.scheme.split("+", 1)[0].lower() not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {masked!r}; expected {_USAGE}")
    if not parts.hostname and "host=" not in parts.query:
        raise ConfigurationError(f"PostgreSQL URL {masked!r} names no host; expected {_USAGE}")
    schema: str | None = None
    rest: list[tuple[str, str]] = []
    application_name: str | None = None
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        else:
            if key == "application_name":
                application_name = value
            rest.append((key, value))
    if schema is not None and not _IDENTIFIER.match(schema):
        raise ConfigurationError(
            f"schema={schema!r} in {masked!r} is not a plain SQL identifier (letters, digits "
            "and _, not starting with a digit, at most 63 characters)"
        )
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    database = parts.path.lstrip("/") or (parts.username or "")
    address = f"{parts.hostname or 'localhost'}:{port or 5432}"
    return _Target(dsn, masked, schema, database, address, application_name)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_literal(text: str) -> str:
    # standard_conforming_strings is forced on for our sessions: backslashes
    # are plain characters and a doubled quote is the only escape.
    return "'" + text.replace("'", "''") + "'"


def _channel(schema: str | None) -> str:
    """The NOTIFY channel of one durable database (a schema is one database)."""
    name = f"durable_{schema}" if schema else "durable"
    if len(name) > 63:
        import hashlib

        name = "durable_" + hashlib.sha1(name.encode()).hexdigest()[:24]
    return name


# ---------------------------------------------------------------- statements


@functools.lru_cache(maxsize=4096)
def _numbered(sql: str) -> str:
    """Rewrite ``?`` placeholders as ``$1..$n`` (our SQL has no literal '?')."""
    pieces = sql.split("?")
    out = [pieces[0]]
    for n, piece in enumerate(pieces[1:], start=1):
        out.append(f"${n}")
        out.append(piece)
    return "".join(out)


def _rowcount(status: str) -> int:
    """The row count in a command tag ("UPDATE 3", "INSERT 0 1"); 0 if none."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


async def _execute(conn: Connection, stmt: Stmt) -> Any:
    sql = _numbered(stmt.sql)
    if stmt.mode == "all":
        return await conn.fetch(sql, *stmt.params)
    if stmt.mode == "one":
        return await conn.fetchrow(sql, *stmt.params)
    if stmt.mode == "many":
        if stmt.params_seq:
            await conn.executemany(sql, stmt.params_seq)
        return None
    return _rowcount(await conn.execute(sql, *stmt.params))


async def _drive(conn: Connection, program: Program[T], first: Stmt | None = None) -> T:
    """Send a program's statements on `conn`, feeding each result back."""
    try:
        stmt = next(program) if first is None else first
        while True:
            stmt = program.send(await _execute(conn, stmt))
    except StopIteration as done:
        result: T = done.value
        return result


async def _no_reset(conn: Connection) -> None:
    """Pool release hook: asyncpg already rolled back any open transaction, and
    our transactions leave no other session state worth a round trip to reset."""


def _discard(conn: Connection) -> None:
    """Close a broken connection at once; the pool opens a new one. (A lost
    connection may already be detached from its pool proxy, which then
    refuses every call: nothing is left to close.)"""
    with contextlib.suppress(Exception):
        conn.terminate()


class _CommitOutcomeUnknown(Exception):
    """The connection broke while COMMIT was on the wire."""


# ---------------------------------------------------------------- the trio bridge


class _LoopThread:
    """An asyncio event loop on a daemon thread, for hosts that are not asyncio.

    Each call is submitted with `asyncio.run_coroutine_threadsafe`; its
    completion wakes the trio task through `TrioToken.run_sync_soon`, which
    never blocks the asyncio thread (a blocking hand-back, like
    `anyio.from_thread.run_sync`, would stall every other query until trio
    next got round to it).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._main, name="durable-postgres-asyncio", daemon=True
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
        import trio

        token = trio.lowlevel.current_trio_token()
        done = anyio.Event()

        async def call() -> T:
            return await fn()

        future = asyncio.run_coroutine_threadsafe(call(), self.loop)

        def wake(_: object) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        future.add_done_callback(wake)
        try:
            with anyio.CancelScope(shield=shield):
                await done.wait()
        finally:
            if not future.done():
                future.cancel()
        return future.result()

    async def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        await anyio.to_thread.run_sync(self._thread.join)


# ---------------------------------------------------------------- LISTEN


class _Listener:
    """The LISTEN connection; lives on the asyncpg loop.

    Notifications land in a queue that the host's `watch()` drains in
    batches, so that wake-ups are published on the host loop.
    """

    def __init__(self, driver: PostgresDriver) -> None:
        self._driver = driver
        self._conn: Connection | None = None
        self._queue: asyncio.Queue[tuple[str, ...] | None] | None = None
        self._failures = 0

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        assert self._queue is not None
        try:
            message = json.loads(str(payload))
            if message.get("o") == self._driver.origin:
                return  # our own commit: already published, with its op records
            keys = [tuple(str(part) for part in key) for key in message["k"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            keys = [("any",)]
        for key in keys:
            self._queue.put_nowait(key)

    def _on_terminated(self, conn: object) -> None:
        if self._queue is not None:
            self._queue.put_nowait(None)

    async def _connect(self) -> None:
        self._queue = asyncio.Queue()
        conn = await self._driver._connect_one()
        try:
            await conn.add_listener(self._driver.channel, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn

    async def next_batch(self, wait: float) -> tuple[list[tuple[str, ...]], bool]:
        """Keys notified within `wait` seconds, and whether we (re)connected, in which
        case notifications may have been missed and the caller says ("any",)."""
        if self._conn is None or self._conn.is_closed():
            self._conn = None
            try:
                await self._connect()
            except Exception as exc:
                self._failures += 1
                self._driver.log.warning("listen_failed", error=repr(exc),
                                         attempt=self._failures)
                await asyncio.sleep(min(wait, 0.1 * 2 ** min(self._failures, 6)))
                return [], False
            self._failures = 0
            return [], True  # say so at once, without waiting for a notification
        assert self._queue is not None
        try:
            first = await asyncio.wait_for(self._queue.get(), wait)
        except TimeoutError:
            return [], False
        items = [first]
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        if None in items:  # the connection dropped: reconnect on the next call
            if self._conn is not None:
                self._conn.terminate()
            self._conn = None
        return [key for key in items if key is not None], False

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 5)
            except Exception:
                conn.terminate()


# ---------------------------------------------------------------- the driver


class PostgresDriver(SQLDriverBase):
    """Storage on PostgreSQL, shared by any number of worker processes.

    `min_pool`/`max_pool` bound the connection pool (plus one LISTEN
    connection while a worker watches); `poll_interval` is how often a
    watching worker looks at everything even without a notification;
    `retries` is how often a transaction is retried after a lost connection
    or a conflict before `StorageUnavailable` is raised; `command_timeout`
    bounds each statement, so a vanished server cannot hang a worker.
    """

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        min_pool: int = 1,
        max_pool: int = 10,
        poll_interval: float = 1.0,
        connect_timeout: float = 10.0,
        command_timeout: float | None = 60.0,
        retries: int = 5,
        statement_cache_size: int = 512,
    ) -> None:
        super().__init__()
        if min_pool < 0 or max_pool < 1 or min_pool > max_pool:
            raise ConfigurationError(
                f"min_pool={min_pool}, max_pool={max_pool}: need 0 <= min_pool <= max_pool "
                "and max_pool >= 1"
            )
        if poll_interval <= 0:
            raise ConfigurationError("poll_interval must be positive")
        self.url = url
        self._target = _parse_url(url)
        self.schema = self._target.schema
        self.channel = _channel(self.schema)
        self.min_pool = min_pool
        self.max_pool = max_pool
        self.poll_interval = poll_interval
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.retries = retries
        self.statement_cache_size = statement_cache_size
        self.origin = uuid.uuid4().hex[:16]
        self.application_name = self._target.application_name or f"durable:{self.origin}"
        self.log = get_logger("durable.postgres").bind(url=self._target.masked)
        self._pool: Pool | None = None
        self._thread: _LoopThread | None = None
        self._listener = _Listener(self)
        self._watch_lock: anyio.Lock | None = None

    # ---------------------------------------------------------------- host bridge

    async def _call(self, fn: Callable[[], Awaitable[T]], *, shield: bool = True) -> T:
        """Run `fn` where asyncpg lives. Shielded by default: a transaction, once
        started, runs to its end like the SQLite driver's thread hop, so a
        cancelled caller never leaves a claim committed but unseen."""
        if self._thread is not None:
            return await self._thread.run(fn, shield=shield)
        with anyio.CancelScope(shield=shield):
            result = await fn()
        return result

    # ---------------------------------------------------------------- lifecycle

    def _server_settings(self) -> dict[str, str]:
        settings = {"standard_conforming_strings": "on"}
        if self._target.application_name is None:
            settings["application_name"] = self.application_name
        if self.schema is not None:
            settings["search_path"] = _quote_ident(self.schema)
        return settings

    async def _connect_one(self) -> Connection:
        """A connection outside the pool (the LISTEN connection)."""
        conn: Connection = await asyncpg.connect(
            self._target.dsn, timeout=self.connect_timeout,
            server_settings=self._server_settings(),
        )
        return conn

    def _connect_error(self, exc: BaseException) -> ConfigurationError:
        t = self._target
        where = f"PostgreSQL at {t.masked!r}"
        if isinstance(exc, pgerr.InvalidCatalogNameError):
            hint = (f"database {t.database!r} does not exist on {t.address}; create it "
                    f"(createdb {t.database}) or fix the database name in the URL")
        elif isinstance(exc, pgerr.InvalidAuthorizationSpecificationError):
            hint = ("the server refused the login; check the user and password in the URL "
                    "and the server's pg_hba.conf")
        elif isinstance(exc, pgerr.InsufficientPrivilegeError):
            hint = (f"the user may not create schema {self.schema!r} or its tables; grant "
                    "CREATE on the database or create the schema beforehand")
        elif isinstance(exc, OSError):
            hint = (f"no server answered at {t.address}; check that PostgreSQL is running, "
                    "listens on that host and port (listen_addresses, port) and that no "
                    "firewall is in the way")
        else:
            hint = "check the URL and the server's log"
        return ConfigurationError(f"cannot connect to {where}: {exc}; {hint}")

    async def open(self) -> None:
        if self._pool is not None:
            return
        self._watch_lock = anyio.Lock()
        host = sniffio.current_async_library()
        if host == "trio":
            self._thread = _LoopThread()
        elif host != "asyncio":
            raise ConfigurationError(
                f"the PostgreSQL driver runs under asyncio or trio, not {host!r}"
            )
        try:
            await self._call(self._open_pool)
        except BaseException:
            if self._thread is not None:
                await self._thread.stop()
                self._thread = None
            raise

    async def _open_pool(self) -> None:
        try:
            pool = await asyncpg.create_pool(
                self._target.dsn,
                min_size=self.min_pool,
                max_size=self.max_pool,
                timeout=self.connect_timeout,
                command_timeout=self.command_timeout,
                statement_cache_size=self.statement_cache_size,
                server_settings=self._server_settings(),
                reset=_no_reset,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise self._connect_error(exc) from exc
        try:
            async with pool.acquire() as conn:
                await self._migrate(conn)
        except ConfigurationError as exc:
            await pool.close()
            raise ConfigurationError(f"cannot use {self._target.masked!r}: {exc}") from exc
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await pool.close()
            raise self._connect_error(exc) from exc
        self._pool = pool

    async def _migrate(self, conn: Connection) -> None:
        """Create or check the schema under an advisory lock, so that processes
        starting together on a fresh database do not race their DDL.

        A schema that is already current is only checked: even a no-op
        ``CREATE INDEX IF NOT EXISTS`` takes a SHARE lock on its table, which
        would stall (and deadlock with) the workers already running on it.
        """
        async with conn.transaction():
            if await conn.fetchval("SELECT to_regclass('durable_meta') IS NOT NULL"):
                found = await conn.fetchval(
                    "SELECT value FROM durable_meta WHERE key = 'schema_version'"
                )
                if found is not None and int(found) >= SCHEMA_VERSION:
                    await _drive(conn, migrate())  # refuses a newer schema
                    return
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                _DDL_LOCK_CLASS, self.schema or "",
            )
            if self.schema is not None:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(self.schema)}")
            await conn.execute(";\n".join(schema_statements("postgres")))
            await _drive(conn, migrate())

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._pool is not None:
                pool, self._pool = self._pool, None
                await self._call(lambda: self._close_on_loop(pool))
            if self._thread is not None:
                thread, self._thread = self._thread, None
                await thread.stop()

    async def _close_on_loop(self, pool: Pool) -> None:
        await self._listener.close()
        try:
            await asyncio.wait_for(pool.close(), 10)
        except Exception:
            pool.terminate()

    async def drop_schema(self) -> None:
        """Drop this URL's schema and everything in it (tests clean up with it)."""
        if self.schema is None:
            raise ConfigurationError(
                f"{self._target.masked!r} names no schema; drop_schema() only drops a "
                "schema given with ?schema=NAME"
            )
        statement = f"DROP SCHEMA IF EXISTS {_quote_ident(self.schema)} CASCADE"

        async def drop() -> None:
            async with self._require_pool().acquire() as conn:
                await conn.execute(statement)

        await self._call(drop)

    def _require_pool(self) -> Pool:
        if self._pool is None:
            raise ConfigurationError("the PostgreSQL driver is closed; open the client first")
        return self._pool

    # ---------------------------------------------------------------- transactions

    async def _run(self, build: Callable[[Tx], Program[Any]], *, write: bool = True) -> Any:
        self._require_pool()
        result, tx = await self._call(lambda: self._run_on_loop(build, write))
        self.hub.publish(tx.wakes)
        return result

    async def _run_on_loop(
        self, build: Callable[[Tx], Program[Any]], write: bool
    ) -> tuple[Any, Tx]:
        """Run a program, retrying it whole while nothing can have been committed."""
        pool = self._require_pool()
        attempt = 0
        while True:
            tx = self._tx()
            try:
                async with pool.acquire(timeout=self.connect_timeout) as conn:
                    try:
                        result = await self._transaction(conn, build(tx), tx, write)
                    except _CONNECTION_LOST:
                        _discard(conn)
                        raise
                return result, tx
            except _CommitOutcomeUnknown as unknown:
                cause = unknown.__cause__
                await pool.expire_connections()
                raise StorageUnavailable(
                    f"lost the connection to PostgreSQL at {self._target.masked!r} while "
                    f"committing ({cause!r}); the transaction may or may not have been "
                    "recorded: read the state back from storage before acting on it",
                    outcome_unknown=True,
                ) from cause
            except (*_CONNECTION_LOST, *_CONFLICT) as exc:
                lost = isinstance(exc, _CONNECTION_LOST)
                if attempt >= self.retries:
                    if not lost:
                        raise
                    raise StorageUnavailable(
                        f"PostgreSQL at {self._target.masked!r} is unavailable after "
                        f"{attempt + 1} attempts ({exc!r}); check that the server is up and "
                        "reachable; nothing was recorded",
                        outcome_unknown=False,
                    ) from exc
                attempt += 1
                if lost:
                    self.log.warning("transaction_retried", error=repr(exc), attempt=attempt)
                    if not isinstance(exc, TimeoutError):
                        # The pool's other connections likely died with this one
                        # (a restart, a failover): replace them all, not one by one.
                        await pool.expire_connections()
                await asyncio.sleep(0 if attempt == 1 else min(0.05 * 2 ** attempt, 2.0))

    async def _transaction(
        self, conn: Connection, program: Program[Any], tx: Tx, write: bool
    ) -> Any:
        if not write:
            return await _drive(conn, program)
        try:
            first = next(program)
        except StopIteration as done:
            empty: Any = done.value
            return empty
        if first.autocommit and not tx.wakes:
            # A single self-contained statement commits on its own: one round trip.
            try:
                program.send(await _execute(conn, first))
            except StopIteration as done:
                single: Any = done.value
                return single
            raise RuntimeError("an autocommit statement must be its program's only statement")
        await conn.execute("BEGIN")
        try:
            result = await _drive(conn, program, first)
        except BaseException as exc:
            await self._rollback(conn, exc)
            raise
        # NOTIFY travels in the transaction, so listeners hear of a commit only
        # if it happened, and in the same round trip as COMMIT.
        commit = "COMMIT"
        if tx.wakes:
            commit = f"NOTIFY {_quote_ident(self.channel)}, {_quote_literal(self._payload(tx))};"
            commit += " COMMIT"
        try:
            await conn.execute(commit)
        except _CONNECTION_LOST as exc:
            _discard(conn)
            raise _CommitOutcomeUnknown() from exc
        except BaseException as exc:
            await self._rollback(conn, exc)
            raise
        return result

    @staticmethod
    async def _rollback(conn: Connection, cause: BaseException) -> None:
        """Roll back, never masking the error that brought us here. After a
        lost connection there is nothing to roll back (the server did it) and
        waiting for an answer could hang: the connection is discarded."""
        if isinstance(cause, _CONNECTION_LOST):
            _discard(conn)
            return
        try:
            await conn.execute("ROLLBACK")
        except Exception:
            _discard(conn)

    def _payload(self, tx: Tx) -> str:
        keys = list(dict.fromkeys(wake.key for wake in tx.wakes))
        text = json.dumps({"o": self.origin, "k": keys}, separators=(",", ":"))
        if len(text) > _MAX_PAYLOAD:
            text = json.dumps({"o": self.origin, "k": [["any"]]}, separators=(",", ":"))
        return text

    # ---------------------------------------------------------------- wake-ups

    async def watch(self) -> None:
        """Publish other processes' commits (LISTEN), and ``("any",)`` every
        `poll_interval` so that a lost notification delays work, never loses it."""
        assert self._watch_lock is not None, "open the driver first"
        # One listener per driver however many workers share it; a second
        # watch() takes over when the first is cancelled.
        async with self._watch_lock:
            next_any = anyio.current_time() + self.poll_interval
            while True:
                wait = max(0.0, next_any - anyio.current_time())
                keys, fresh = await self._call(
                    functools.partial(self._listener.next_batch, wait), shield=False
                )
                wakes = [Wake(key) for key in dict.fromkeys(keys)]
                now = anyio.current_time()
                if fresh or now >= next_any:
                    wakes.append(Wake(("any",)))
                    next_any = now + self.poll_interval
                self.hub.publish(wakes)
