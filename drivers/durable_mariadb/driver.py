"""The MariaDB executor: programs as READ COMMITTED transactions on pooled asyncmy
connections, and a wake log instead of NOTIFY.

Each program runs on one pooled connection: ``BEGIN``, one round trip per
statement, ``COMMIT``; programs that only read run without ``BEGIN`` (each
statement its own snapshot, as under READ COMMITTED anyway). A transaction
that certainly did not commit (a deadlock, a lock wait past
``lock_wait_timeout``, a duplicate key raced in by another transaction, a
statement stopped by ``KILL QUERY`` or ``max_statement_time``, a connection
lost before COMMIT) is re-run whole; a connection lost during
COMMIT raises `StorageUnavailable(outcome_unknown=True)`.

MariaDB has no LISTEN/NOTIFY. A transaction whose wake-ups must reach other
processes inserts one row into ``durable_wakes`` (its keys, as PostgreSQL's
driver sends them in a NOTIFY) before COMMIT: a row appears only if the
transaction committed. `watch()` reads the rows after the last one it saw,
every `poll_interval`, publishes their keys as remote wake-ups and, every
`any_interval`, `Wake.any()` (an auto-increment id committed after a higher
one can be skipped: that costs latency, never a lost wake-up). What it
costs: one extra INSERT per committing transaction that wakes another
process, one indexed read per `poll_interval` per watching process, and a
delete of rows older than `wake_retention` every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import time
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio
import asyncmy.errors as myerr
from asyncmy.connection import connect
from asyncmy.constants import CLIENT
from asyncmy.cursors import DictCursor
from asyncmy.pool import Pool

from durable._pooled import CommitOutcomeUnknown, Failure, PooledDriver
from durable.driver import Program, Stmt, Tx, Wake, drive
from durable.errors import ConfigurationError, WriteRejected
from durable.store.migrations import SCHEMA_VERSION, migrate
from durable.store.schema import schema_statements

from .dialect import MariaDBDialect
from .url import parse_url, quote_ident

T = TypeVar("T")

#: the session every connection runs in: READ COMMITTED (what the store's
#: programs assume with row locks), standard SQL (``"`` quotes identifiers,
#: ``||`` concatenates, an UPDATE's assignments all see the row as it was),
#: strict types, UTC
_SQL_MODE = ("STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION,ANSI_QUOTES,"
             "PIPES_AS_CONCAT,SIMULTANEOUS_ASSIGNMENT")
# the wake log: see the module docstring
_WAKES_DDL = (
    "CREATE TABLE IF NOT EXISTS durable_wakes (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
    "origin VARCHAR(32) NOT NULL, wake_keys LONGTEXT NOT NULL, at DOUBLE NOT NULL)"
    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"
)
_MAX_PAYLOAD = 60_000
#: seconds a migration waits for another process migrating the same database
_DDL_LOCK_TAKE = 60
#: seconds a migration's DDL waits for the tables' metadata locks
_DDL_LOCK_WAIT = 120

# server error codes (https://mariadb.com/kb/en/mariadb-error-codes/)
#: the transaction was rolled back, or may be, because of another one: retry it
_CONFLICT_CODES = frozenset({
    1213,  # ER_LOCK_DEADLOCK
    1205,  # ER_LOCK_WAIT_TIMEOUT
    1062,  # ER_DUP_ENTRY: a row another transaction inserted meanwhile
    1020,  # ER_CHECKREAD: the record changed since it was read
    # the statement was stopped, not the connection: an operator's KILL QUERY,
    # the server's max_statement_time; the transaction is rolled back whole
    # here, so nothing of it was committed (except when it was the COMMIT)
    1317,  # ER_QUERY_INTERRUPTED
    1969,  # ER_STATEMENT_TIMEOUT
})
#: the server refused a value it cannot store: a write rejected (`WriteRejected`),
#: not the library's own error, and never retried (it would be refused again)
_REJECTED_CODES = frozenset({
    1153,  # ER_NET_PACKET_TOO_LARGE: a statement past max_allowed_packet
    1406,  # ER_DATA_TOO_LONG: a value past its column (a key's 255 characters)
    1366,  # ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: text the column cannot hold
    1264,  # ER_WARN_DATA_OUT_OF_RANGE: a number past its column
})
#: a statement stopped by the server (subset of _CONFLICT_CODES): when it was
#: the COMMIT, whether the transaction committed is not known
_INTERRUPTED_CODES = frozenset({1317, 1969})
#: the connection is gone (the server rolls back what was open)
_LOST_CODES = frozenset({
    2002, 2003, 2006, 2013, 2055,  # client: cannot connect, server gone, lost
    1040,  # ER_CON_COUNT_ERROR: too many connections
    1053,  # ER_SERVER_SHUTDOWN
    1927,  # ER_CONNECTION_KILLED
    4031,  # the server closed an idle connection
})


def _code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, OSError | myerr.InterfaceError):
        return True
    return isinstance(exc, myerr.MySQLError) and _code(exc) in _LOST_CODES


def _conflict(exc: BaseException) -> bool:
    return isinstance(exc, myerr.MySQLError) and _code(exc) in _CONFLICT_CODES


@functools.lru_cache(maxsize=4096)
def _format(sql: str) -> str:
    """``?`` placeholders as asyncmy's ``%s`` (a literal ``%`` doubled); the
    store's SQL has no literal ``?``."""
    return sql.replace("%", "%%").replace("?", "%s")


async def execute(conn: Any, stmt: Stmt) -> Any:
    """One statement on `conn`, its result as `durable.driver.Stmt` says."""
    sql = _format(stmt.sql)
    async with conn.cursor(DictCursor) as cur:
        if stmt.mode == "many":
            if stmt.params_seq:
                await cur.executemany(sql, [tuple(p) for p in stmt.params_seq])
            return None
        await cur.execute(sql, tuple(stmt.params))
        if stmt.mode == "all":
            return await cur.fetchall()
        if stmt.mode == "one":
            return await cur.fetchone()
        return cur.rowcount


class MariaDBDriver(PooledDriver[Any, Any]):
    """Storage on MariaDB 10.6+ (10.11 tested), shared by any number of worker
    processes.

    `min_pool`/`max_pool` bound the connection pool; `poll_interval` is how
    often a watching worker reads the wake log, `any_interval` how often it
    looks at everything; `retries` is how often a transaction is retried after
    a conflict or a lost connection before `StorageUnavailable`;
    `wake_retention` is how long (seconds) the wake log keeps a row;
    `command_timeout` bounds the wait for each answer of the server (longer
    than the URL's ``lock_wait_timeout``): past it the connection counts as
    lost.

    The pool, the trio bridge, open/close and the retried transaction are
    `durable._pooled.PooledDriver`'s; this class says what is MariaDB's.
    """

    engine = "MariaDB"
    retry_base = 0.01
    connect_errors = (OSError, myerr.MySQLError)

    def __init__(
        self,
        url: str,
        *,
        min_pool: int = 1,
        max_pool: int = 10,
        poll_interval: float = 0.05,
        any_interval: float = 1.0,
        connect_timeout: float = 10.0,
        retries: int = 8,
        wake_retention: float = 60.0,
        command_timeout: float = 60.0,
    ) -> None:
        if poll_interval <= 0 or any_interval <= 0:
            raise ConfigurationError("poll_interval and any_interval must be positive")
        if wake_retention < 1:
            raise ConfigurationError("wake_retention must be at least 1 second")
        self._target = parse_url(url)
        if not command_timeout > self._target.lock_wait_timeout:
            raise ConfigurationError(
                f"command_timeout={command_timeout!r} must be longer than the URL's "
                f"lock_wait_timeout ({self._target.lock_wait_timeout} s): a statement "
                "waiting for a row lock would be taken for a lost server")
        self.command_timeout = command_timeout
        super().__init__(url, self._target.masked, MariaDBDialect(), min_pool=min_pool,
                         max_pool=max_pool, connect_timeout=connect_timeout, retries=retries,
                         logger="durable.mariadb")
        self.poll_interval = poll_interval
        self.any_interval = any_interval
        self.wake_retention = wake_retention
        #: the server's ids of sessions whose statement was cut short while the
        #: pool opened (the open cancelled, or the answer awaited past
        #: command_timeout): `_close_pool` ends them on the server
        self._cut_short: list[int] = []

    # ---------------------------------------------------------------- lifecycle

    def _connect_kwargs(self) -> dict[str, Any]:
        t = self._target
        kwargs: dict[str, Any] = dict(
            user=t.user, password=t.password, database=t.database, charset="utf8mb4",
            # seconds, fractions kept (int() made 0.5 asyncmy's ValueError)
            autocommit=True, connect_timeout=self.connect_timeout,
            # an UPDATE's row count is the rows it matched, not those it changed
            # (`durable.store.returning` reads it to know whether a row matched)
            client_flag=CLIENT.FOUND_ROWS,
            # every answer (the login's too) within command_timeout, so a server
            # that stopped answering cannot hang a worker: without it a
            # statement waited forever, shielded from any cancellation
            read_timeout=self.command_timeout,
            init_command=(
                "SET SESSION tx_isolation = 'READ-COMMITTED', "
                f"sql_mode = '{_SQL_MODE}', time_zone = '+00:00', "
                f"innodb_lock_wait_timeout = {t.lock_wait_timeout}, "
                # a table's metadata lock too (LOCK TABLES, a backup's FLUSH
                # TABLES WITH READ LOCK, DDL): the server waits a year for it
                f"lock_wait_timeout = {t.lock_wait_timeout}"),
        )
        if t.unix_socket:
            kwargs["unix_socket"] = t.unix_socket
        else:
            kwargs.update(host=t.host, port=t.port)
        return kwargs

    def _connect_error(self, exc: BaseException) -> ConfigurationError:
        t = self._target
        code = _code(exc)
        if code == 1049:
            hint = (f"database {t.database!r} does not exist on {t.address}; create it "
                    f"(CREATE DATABASE {quote_ident(t.database)}) or fix the database "
                    "name in the URL")
        elif code in (1045, 1698):
            hint = "the server refused the login; check the user and password in the URL"
        elif code in (1044, 1142):
            hint = (f"the user may not create tables in {t.database!r}; grant it CREATE, "
                    "INDEX, SELECT, INSERT, UPDATE, DELETE on the database")
        elif isinstance(exc, TimeoutError):
            hint = (f"no answer from {t.address} within connect_timeout="
                    f"{self.connect_timeout:g} s; check that the host and port are "
                    "MariaDB's (not another service's), that the server is not hung or "
                    "overloaded and that no firewall drops packets (or pass a larger "
                    "connect_timeout)")
        elif _lost(exc) and t.unix_socket:
            hint = (f"no server answered on the socket {t.unix_socket}; check that MariaDB "
                    "is running and that the path is its socket (SELECT @@socket), or "
                    "leave unix_socket out to connect by host and port")
        elif _lost(exc):
            hint = (f"no server answered at {t.address}; check that MariaDB is running, "
                    "listens on that host and port and that no firewall is in the way")
        else:
            hint = "check the URL and the server's log"
        detail = str(exc) or type(exc).__name__
        return ConfigurationError(f"cannot connect to MariaDB at {t.masked!r}: {detail}; {hint}")

    def _new_pool(self) -> Any:
        # what asyncmy.create_pool makes before it connects: a pool it fills
        # drops every connection it opened when a later one fails or the open
        # is cancelled (asyncmy's own lost them with its pool, open: min_pool > 1)
        return Pool(minsize=self.min_pool, maxsize=self.max_pool, pool_recycle=3600,
                    **self._connect_kwargs())

    async def _fill_pool(self, pool: Any) -> None:
        # asyncmy's connect_timeout bounds the TCP connect only, and then the
        # server's greeting is awaited for read_timeout (command_timeout, 60 s
        # by default): a port that accepts and never answers (a hung server,
        # another service) held `durable.connect` for a minute. (asyncio's own
        # timeout: this runs on an asyncio loop, a thread of its own under trio.)
        async with asyncio.timeout(self.connect_timeout):
            async with pool.cond:
                await pool.fill_free_pool(False)

    async def _prepare(self, conn: Any) -> None:
        try:
            await self._migrate(conn)
        except BaseException:
            # its statement may still run, or wait for a lock, on the server
            self._cut_short.append(conn.thread_id())
            raise

    async def _migrate(self, conn: Any) -> None:
        """Create or check the schema under a named lock (GET_LOCK), so that
        processes starting together on a fresh database do not race their DDL.
        A current schema is only checked: DDL on a table in use waits for its
        metadata lock behind every open transaction on it."""
        version = await self._schema_version(conn)
        if version is not None and version >= SCHEMA_VERSION:
            await self._drive_tx(conn, migrate(self.dialect))  # refuses a newer schema
            return
        lock = ddl_lock(self._target.database)
        got = await execute(conn, Stmt("SELECT GET_LOCK(?, ?) AS got", (lock, _DDL_LOCK_TAKE),
                                       "one"))
        if got is None or got["got"] != 1:  # 0: still held; NULL: an error
            raise ConfigurationError(
                f"cannot create or upgrade durable's tables in MariaDB database "
                f"{self._target.database!r} at {self._target.masked!r}: another session "
                f"has held its schema lock (GET_LOCK({lock!r})) for {_DDL_LOCK_TAKE} s, "
                "most likely another process creating or upgrading the same tables; "
                "connect again once it is done (SELECT IS_USED_LOCK(...) names the "
                "holder's connection id)")
        # DDL waits for every transaction open on its table (older processes'
        # workers during an upgrade): longer than a statement's lock wait
        await execute(conn, Stmt(f"SET SESSION lock_wait_timeout = {_DDL_LOCK_WAIT}", (),
                                 "exec"))
        try:
            for statement in (*schema_statements(self.dialect), _WAKES_DDL):
                await execute(conn, Stmt(statement, (), "exec"))
            await self._drive_tx(conn, migrate(self.dialect))
        finally:
            await execute(conn, Stmt(
                f"SET SESSION lock_wait_timeout = {self._target.lock_wait_timeout}", (), "exec"))
            await execute(conn, Stmt("SELECT RELEASE_LOCK(?)", (lock,), "one"))

    async def _schema_version(self, conn: Any) -> int | None:
        exists = await execute(conn, Stmt(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() "
            "AND table_name = 'durable_meta'", (), "one"))
        if exists is None:
            return None
        row = await execute(conn, Stmt(
            "SELECT value FROM durable_meta WHERE `key` = 'schema_version'", (), "one"))
        return None if row is None else int(row["value"])

    async def _drive_tx(self, conn: Any, program: Program[T]) -> T:
        await conn.begin()
        try:
            result = await drive(program, functools.partial(execute, conn))
        except BaseException:
            await conn.rollback()
            raise
        await conn.commit()
        return result

    async def _close_pool(self, pool: Any, within: float = PooledDriver.CLOSE_WITHIN) -> None:
        if self._cut_short:
            sessions, self._cut_short = self._cut_short, []
            with contextlib.suppress(Exception):  # (the server away: nothing runs there)
                await asyncio.wait_for(self._end_sessions(sessions), within)
        pool.close()
        try:
            await asyncio.wait_for(pool.wait_closed(), within)
        except Exception:
            pool.terminate()  # closes the connections in use only: the free ones too
            while pool._free:
                pool._free.popleft().close()

    async def _end_sessions(self, sessions: list[int]) -> None:
        """End these sessions on the server (KILL, from a connection of its own):
        the server ends a session whose client left only at its next look at
        the socket (about a second into a lock wait; an InnoDB row lock wait not
        before its timeout)."""
        conn = await connect(**self._connect_kwargs())
        try:
            for session in sessions:
                with contextlib.suppress(myerr.MySQLError):  # (ended already)
                    await execute(conn, Stmt(f"KILL {int(session)}", (), "exec"))
        finally:
            conn.close()

    async def drop_database(self) -> None:
        """Drop this URL's database and everything in it (tests clean up with it)."""
        statement = f"DROP DATABASE IF EXISTS {quote_ident(self._target.database)}"

        async def drop(conn: Any) -> None:
            await execute(conn, Stmt(statement, (), "exec"))

        await self._on_pool(drop)

    # ---------------------------------------------------------------- transactions

    def _acquire(self, pool: Any) -> AbstractAsyncContextManager[Any]:
        acquired: AbstractAsyncContextManager[Any] = pool.acquire()
        return acquired

    def _failure(self, exc: BaseException) -> Failure | None:
        if _lost(exc):
            return "lost"
        return "conflict" if _conflict(exc) else None

    def _lost_hint(self, exc: BaseException) -> str | None:
        if _code(exc) == 1040:
            return (f"the server at {self._target.address} is at its max_connections: "
                    f"each process may hold max_pool={self.max_pool} connections; raise "
                    "max_connections (SET GLOBAL max_connections = ...) to cover every "
                    "process's max_pool and other clients, or lower max_pool")
        return None

    def _discard(self, conn: Any) -> None:
        conn.close()  # the pool drops a closed connection

    async def _transaction(self, conn: Any, program: Program[T], tx: Tx, write: bool) -> T:
        statement = functools.partial(execute, conn)
        if not write:
            return await drive(program, statement)
        await conn.begin()
        try:
            result = await drive(program, statement)
            if any(not wake.local for wake in tx.wakes):
                await execute(conn, Stmt(
                    "INSERT INTO durable_wakes (origin, wake_keys, at) VALUES (?, ?, ?)",
                    (self.origin, self._payload(tx), time.time()), "exec"))
        except BaseException as exc:
            await self._rollback(conn, exc)
            if isinstance(exc, myerr.MySQLError) and _code(exc) in _REJECTED_CODES:
                raise self._rejected(exc) from exc
            raise
        try:
            await conn.commit()
        except BaseException as exc:
            if _lost(exc) or (isinstance(exc, myerr.MySQLError)
                              and _code(exc) in _INTERRUPTED_CODES):
                raise CommitOutcomeUnknown() from exc
            await self._rollback(conn, exc)
            raise
        return result

    def _rejected(self, exc: BaseException) -> WriteRejected:
        hint = ""
        if _code(exc) == 1153:
            hint = ("; a statement is bounded by the server's max_allowed_packet (SELECT "
                    "@@max_allowed_packet): raise it (SET GLOBAL max_allowed_packet = ..., and "
                    "in the server's configuration) above durable.Limits' payload_bytes, or "
                    "keep payloads smaller")
        return WriteRejected(f"{self.engine} at {self.masked!r} refused the write: "
                             f"{exc!r}{hint}; nothing of it was recorded")

    @staticmethod
    async def _rollback(conn: Any, cause: BaseException) -> None:
        """Roll back, never masking the error that brought us here; after a lost
        connection there is nothing to roll back (the server did)."""
        if _lost(cause):
            return
        try:
            await conn.rollback()
        except Exception:
            conn.close()

    def _payload(self, tx: Tx) -> str:
        keys = self.remote_keys(tx)
        text = json.dumps(keys, separators=(",", ":"))
        return text if len(text) <= _MAX_PAYLOAD else json.dumps([Wake.any().key])

    # ---------------------------------------------------------------- wake-ups

    async def watch(self) -> None:
        """Publish other processes' commits, read from the wake log every
        `poll_interval`, and `Wake.any()` every `any_interval` (see the module
        docstring).

        While the server is away the log is read less often (the wait doubles
        up to `any_interval`) and the outage is logged once when it starts
        (``wake_log_unreadable``) and once when a read succeeds again
        (``wake_log_readable_again``, with its length): it was a warning and
        a connection attempt every 50 ms, a hundred lines a worker for a
        five-second restart. It never raises the library's errors: a server
        away when it starts is that outage too."""
        assert self._watch_lock is not None, "open the driver first"
        async with self._watch_lock:  # one reader per driver however many workers
            # where the log ends, read in the loop below: read here, a server
            # away when a worker started raised asyncmy's own error from this
            # call, and the worker stopped (worker_failed)
            last: int | None = None
            next_any = anyio.current_time() + self.any_interval
            next_prune = anyio.current_time()
            down_since: float | None = None  # the outage's start (anyio's clock)
            wait = self.poll_interval
            while True:
                keys: dict[tuple[str, ...], None] = {}
                try:
                    if last is None:
                        last = await self._call(self._last_wake_id, shield=False)
                    rows = await self._call(functools.partial(self._wakes_after, last),
                                            shield=False)
                    if anyio.current_time() >= next_prune:
                        await self._call(self._prune_wakes, shield=False)
                        next_prune = anyio.current_time() + min(10.0, self.wake_retention / 2)
                except (OSError, myerr.MySQLError) as exc:
                    # the server is away: the engine's own calls report it; look
                    # at everything once it answers again
                    if down_since is None:
                        down_since = anyio.current_time()
                        self.log.warning("wake_log_unreadable", error=repr(exc))
                    rows, next_any = [], anyio.current_time()
                    wait = min(wait * 2, max(self.any_interval, self.poll_interval))
                else:
                    if down_since is not None:
                        self.log.info("wake_log_readable_again",
                                      seconds=round(anyio.current_time() - down_since, 3))
                        down_since = None
                    wait = self.poll_interval
                for row in rows:
                    last = max(last or 0, int(row["id"]))
                    if row["origin"] == self.origin:
                        continue
                    try:
                        keys.update(dict.fromkeys(tuple(k) for k in json.loads(row["wake_keys"])))
                    except (ValueError, TypeError):
                        keys[Wake.any().key] = None
                wakes = [Wake(key, remote=True) for key in keys]
                now = anyio.current_time()
                if now >= next_any and down_since is None:
                    wakes.append(Wake.any())
                    next_any = now + self.any_interval
                if wakes:
                    self.hub.publish(wakes)
                await anyio.sleep(wait)

    async def _last_wake_id(self) -> int:
        async with self._require_pool().acquire() as conn:
            row = await execute(conn, Stmt("SELECT MAX(id) AS id FROM durable_wakes", (), "one"))
        return int(row["id"]) if row and row["id"] is not None else 0

    async def _wakes_after(self, last: int) -> list[Any]:
        async with self._require_pool().acquire() as conn:
            rows: list[Any] = await execute(conn, Stmt(
                "SELECT id, origin, wake_keys FROM durable_wakes WHERE id > ? ORDER BY id "
                "LIMIT 1000", (last,), "all"))
        return rows

    async def _prune_wakes(self) -> None:
        async with self._require_pool().acquire() as conn:
            await execute(conn, Stmt("DELETE FROM durable_wakes WHERE at < ?",
                                     (time.time() - self.wake_retention,), "exec"))


def ddl_lock(database: str) -> str:
    """The GET_LOCK name under which processes migrating `database` take turns.

    Per database: GET_LOCK's names are the whole server's, and one name for
    every database made a process creating its tables wait for another
    creating tables in another database (a minute, then it went ahead
    without the lock). Hashed, because a name is at most 64 characters."""
    return "durable_ddl_" + hashlib.sha1(database.encode()).hexdigest()
