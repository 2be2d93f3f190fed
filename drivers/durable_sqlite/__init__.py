"""The embedded SQLite driver (``sqlite:///path.db``, ``sqlite://:memory:``).

An executor for `durable.store`'s programs with SQLite's dialect (the base
`Dialect`: no row locks, ``BEGIN IMMEDIATE`` takes the write lock up front).
One connection, used by one thread at a time: each domain transaction runs as
a whole on a worker thread (``anyio.to_thread.run_sync`` with a limiter of
one), so a transaction costs one thread hop however many statements it has.
That is the cost that matters on SQLite (measured: the hop, not the disk,
bounds commits per second), and it works the same under asyncio and trio
without an event-loop portal. See docs/design/sqlite-driver.md for why this is
not built on aiosqlite.

WAL mode and ``BEGIN IMMEDIATE`` let several processes on one machine share a
file; another process's commits are noticed through ``PRAGMA data_version``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread

from durable import _validate
from durable.driver import Dialect, Program, ProgramFactory, Stmt, Tx, Wake, WakeHub
from durable.errors import ConfigurationError, StorageClosed, StorageUnavailable
from durable.store.migrations import migrate
from durable.store.schema import schema_statements

T = TypeVar("T")

__all__ = ["SQLiteDriver"]


_FORMS = ("sqlite:///relative/path.db, sqlite:////absolute/path.db or sqlite://:memory:, "
          "optionally with ?synchronous=OFF|NORMAL|FULL|EXTRA")
_QUERY_OPTIONS = ("synchronous",)


def _parse(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme.split("+")[0] != "sqlite":
        raise ConfigurationError(f"not a sqlite URL: {url!r}; use {_FORMS}")
    if not url.split(":", 1)[1].startswith("//"):
        raise ConfigurationError(
            f"malformed sqlite URL {url!r} (it needs '//' after 'sqlite:'); use {_FORMS}")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_QUERY_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"sqlite URL {url!r} has unknown options {unknown}; the URL takes only "
            f"{list(_QUERY_OPTIONS)} (driver options such as busy_timeout go to "
            "durable.connect as keywords)")
    options = {k: v[-1] for k, v in query.items()}
    if parts.netloc == ":memory:" or parts.path in ("/:memory:", ":memory:"):
        return ":memory:", options
    if parts.netloc:
        raise ConfigurationError(
            f"sqlite URL {url!r} has a host part ({parts.netloc!r}); use sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise ConfigurationError(f"sqlite URL {url!r} names no file; e.g. sqlite:///app.db")
    return path, options


def _execute(conn: sqlite3.Connection, stmt: Stmt) -> Any:
    if stmt.mode == "many":
        conn.executemany(stmt.sql, stmt.params_seq)
        return None
    cursor = conn.execute(stmt.sql, stmt.params)
    if stmt.mode == "all":
        return cursor.fetchall()
    if stmt.mode == "one":
        row = cursor.fetchone()
        cursor.fetchall()
        return row
    cursor.fetchall()
    return cursor.rowcount


# SQLite errors that say storage cannot be used right now (another process
# holds the lock past busy_timeout, the disk is full or failing, the file is
# gone or read-only): the transaction did not commit and may be retried.
_UNAVAILABLE = (
    "database is locked",
    "database table is locked",
    "disk i/o error",
    "database or disk is full",
    "unable to open database file",
    "attempt to write a readonly database",
)


def storage_failure(exc: BaseException) -> bool:
    """Whether `exc` means storage is unavailable (retry), not a bad statement."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        text in str(exc).lower() for text in _UNAVAILABLE)


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back, never masking the error that brought us here (after some
    errors SQLite has rolled back already and there is nothing to undo)."""
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _run_program(conn: sqlite3.Connection, program: Program[T], write: bool) -> T:
    """Run a whole transaction program on this (database) thread.

    A statement that fails for its own reasons (a value SQLite cannot store,
    a constraint) is thrown into the program at its ``yield``, so a program
    may handle it (roll back to a savepoint); storage failures are not.
    """
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        stmt = next(program)
        while True:
            try:
                result = _execute(conn, stmt)
            except Exception as exc:
                if storage_failure(exc):
                    raise
                stmt = program.throw(exc)
                continue
            stmt = program.send(result)
    except StopIteration as done:
        conn.execute("COMMIT")
        value: T = done.value
        return value
    except BaseException:
        _rollback(conn)
        raise


class SQLiteDriver:
    """Storage on one SQLite file (or in memory), shared safely by processes."""

    def __init__(self, url: str, *, busy_timeout: float = 30.0, poll_interval: float = 0.05,
                 checkpoint_every: int = 200, file_mode: int = 0o600):
        self.hub = WakeHub()
        from .dialect import SQLiteDialect  # (here: this one line is this change's footprint)
        self.dialect: Dialect = SQLiteDialect()
        self.url = url
        self.path, options = _parse(url)
        self.synchronous = options.get("synchronous", "NORMAL").upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(
                f"sqlite synchronous={self.synchronous!r} is not one of OFF, NORMAL, FULL, EXTRA"
            )
        self.busy_timeout = _validate.duration(busy_timeout, "busy_timeout", maximum=3600)
        self.poll_interval = _validate.duration(poll_interval, "poll_interval",
                                                inclusive=False, maximum=60)
        self.checkpoint_every = _validate.integer(checkpoint_every, "checkpoint_every")
        if isinstance(file_mode, bool) or not isinstance(file_mode, int) or not (
                0 <= file_mode <= 0o777):
            raise ConfigurationError(
                f"file_mode must be permission bits such as 0o600, got {file_mode!r}")
        self.file_mode = file_mode
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)
        # WAL checkpoints run on a thread and connection of their own (see _checkpoint)
        self._writes = 0
        self._checkpointer: threading.Thread | None = None
        self._checkpoint_uri: str | None = None

    @property
    def shared(self) -> bool:
        """Whether other processes may use the same database."""
        return self.path != ":memory:"

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            parent = Path(self.path).resolve().parent
            if not parent.is_dir():
                raise ConfigurationError(
                    f"cannot open {self.url!r}: directory {str(parent)!r} does not exist"
                )
            self._create_private()
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA wal_autocheckpoint=0")  # see _checkpoint
                # mode=rw: a checkpoint never creates a file that was removed
                self._checkpoint_uri = Path(self.path).resolve().as_uri() + "?mode=rw"
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for ddl in schema_statements(self.dialect):
                    conn.execute(ddl)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"cannot open SQLite database {self.url!r}: {exc}") from exc
        _run_program(conn, migrate(), True)
        return conn

    def _create_private(self) -> None:
        """Create the database file readable by its owner only (`file_mode`,
        0600 by default): payloads are stored in clear. SQLite gives the -wal
        and -shm files it creates the database file's permissions."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, self.file_mode)
        except FileExistsError:
            return
        except OSError as exc:
            raise ConfigurationError(f"cannot create the SQLite file {self.path!r}: {exc}") from exc
        os.close(fd)
        os.chmod(self.path, self.file_mode)  # whatever the umask

    async def open(self) -> None:
        if self._conn is None:
            self._conn = await anyio.to_thread.run_sync(self._connect, limiter=self._limiter)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)
                if self._checkpointer is not None:
                    await anyio.to_thread.run_sync(self._checkpointer.join)

    async def run(self, program: ProgramFactory[T], *, write: bool = True) -> T:
        """Run the program whole on the database thread: one hop per transaction."""
        conn = self._conn
        if conn is None:
            raise StorageClosed(f"the SQLite database {self.url!r} is closed (the client was "
                                "closed); nothing more can be recorded through it")
        tx = Tx(self.dialect)
        try:
            result = await anyio.to_thread.run_sync(
                _run_program, conn, program(tx), write, limiter=self._limiter
            )
        except sqlite3.Error as exc:
            if not storage_failure(exc):
                raise
            raise StorageUnavailable(
                f"SQLite at {self.url!r} cannot be used right now ({exc}); nothing was "
                "recorded. Another process may hold the write lock longer than busy_timeout "
                f"({self.busy_timeout:g} s), or the disk is full or failing",
                outcome_unknown=False,
            ) from exc
        if write and self._checkpoint_uri is not None:
            self._count_write()
        self.hub.publish(tx.wakes)
        return result

    def _count_write(self) -> None:
        self._writes += 1
        if self._writes < self.checkpoint_every:
            return
        if self._checkpointer is not None and self._checkpointer.is_alive():
            return
        self._writes = 0
        self._checkpointer = threading.Thread(
            target=self._checkpoint, name="durable-sqlite-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _checkpoint(self) -> None:
        """Copy the WAL back into the database file, off the engine's connection.

        SQLite's automatic checkpoint runs inside whichever COMMIT takes the WAL
        past 1000 pages, and its fsync (tens of ms) then stalls every transaction
        queued behind that commit on our one connection: measured, it made most
        of the p99 of cancellation latency. A PASSIVE checkpoint on a connection
        of its own runs beside our writers and readers instead; one that cannot
        finish now (a reader in another process) is completed by a later one.
        """
        assert self._checkpoint_uri is not None
        try:
            conn = sqlite3.connect(self._checkpoint_uri, uri=True, timeout=self.busy_timeout)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            pass

    def _data_version(self) -> int:
        assert self._conn is not None
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    async def watch(self) -> None:
        if not self.shared:
            await anyio.sleep_forever()
        last: int | None = None
        while True:
            if self._conn is not None:
                version = await anyio.to_thread.run_sync(self._data_version, limiter=self._limiter)
                if last is not None and version != last:
                    self.hub.publish([Wake(("any",))])
                last = version
            await anyio.sleep(self.poll_interval)
