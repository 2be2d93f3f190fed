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

import sqlite3
import threading
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread

from durable.driver import Dialect, Program, ProgramFactory, Stmt, Tx, Wake, WakeHub
from durable.errors import ConfigurationError
from durable.store.migrations import migrate
from durable.store.schema import schema_statements

T = TypeVar("T")

__all__ = ["SQLiteDriver"]


def _parse(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme.split("+")[0] != "sqlite":
        raise ConfigurationError(f"not a sqlite URL: {url!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
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


def _run_program(conn: sqlite3.Connection, program: Program[T], write: bool) -> T:
    """Run a whole transaction program on this (database) thread."""
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        stmt = next(program)
        while True:
            stmt = program.send(_execute(conn, stmt))
    except StopIteration as done:
        conn.execute("COMMIT")
        value: T = done.value
        return value
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SQLiteDriver:
    """Storage on one SQLite file (or in memory), shared safely by processes."""

    def __init__(self, url: str, *, busy_timeout: float = 30.0, poll_interval: float = 0.05,
                 checkpoint_every: int = 200):
        self.hub = WakeHub()
        self.dialect = Dialect()
        self.url = url
        self.path, options = _parse(url)
        self.synchronous = options.get("synchronous", "NORMAL").upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(
                f"sqlite synchronous={self.synchronous!r} is not one of OFF, NORMAL, FULL, EXTRA"
            )
        self.busy_timeout = busy_timeout
        self.poll_interval = poll_interval
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)
        # WAL checkpoints run on a thread and connection of their own (see _checkpoint)
        self.checkpoint_every = checkpoint_every
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
            raise ConfigurationError("the SQLite driver is closed; open the client first")
        tx = Tx(self.dialect)
        result = await anyio.to_thread.run_sync(
            _run_program, conn, program(tx), write, limiter=self._limiter
        )
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
