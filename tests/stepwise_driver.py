"""A third-party-style driver for the conformance suite: SQLite, stepwise.

It proves the seam: a driver is a dialect plus an executor, and nothing
else. This one uses SQLite's dialect (the base `Dialect`) with an executor
deliberately unlike the shipped one: every statement is its own thread hop
(the way aiosqlite works) on a connection opened per driver, transactions
serialised by an anyio lock instead of a capacity limiter, BEGIN/COMMIT as
separate hops. It knows nothing of runs, ops or policies; if the engine's
behaviour depended on how the shipped driver executes, the conformance
suite would fail here.

URL: ``sqlite-stepwise:///path.db`` or ``sqlite-stepwise://:memory:``
(registered in tests/conftest.py with `durable.driver.register_driver`).
"""

from __future__ import annotations

import sqlite3
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from durable.driver import Dialect, Program, ProgramFactory, Stmt, Tx, Wake, WakeHub, drive
from durable.errors import ConfigurationError, StorageClosed
from durable.store.migrations import migrate
from durable.store.schema import schema_statements

T = TypeVar("T")
SCHEME = "sqlite-stepwise"


class StepwiseSQLiteDriver:
    """SQLite with one thread hop per statement (see the module docstring)."""

    def __init__(self, url: str, **options: Any) -> None:
        if options:
            raise ConfigurationError(f"{SCHEME} takes no options, got {sorted(options)}")
        prefix = f"{SCHEME}://"
        if not url.startswith(prefix):
            raise ConfigurationError(f"not a {SCHEME} URL: {url!r}")
        rest = url[len(prefix):]
        self.path = ":memory:" if rest in (":memory:", "/:memory:") else rest.removeprefix("/")
        self.hub = WakeHub()
        self.dialect = Dialect()
        self._conn: sqlite3.Connection | None = None
        self._lock = anyio.Lock()

    # -- the executor: each step is a hop ------------------------------------

    async def _hop(self, sql: str, params: Any = (), mode: str = "exec",
                   params_seq: Any = ()) -> Any:
        conn = self._conn
        if conn is None:
            raise StorageClosed(f"the {SCHEME} driver is closed")

        def step() -> Any:
            if mode == "many":
                conn.executemany(sql, params_seq)
                return None
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall()
            if mode == "all":
                return rows
            if mode == "one":
                return rows[0] if rows else None
            return cursor.rowcount

        return await anyio.to_thread.run_sync(step)

    async def _statement(self, stmt: Stmt) -> Any:
        return await self._hop(stmt.sql, stmt.params, stmt.mode, stmt.params_seq)

    async def _transaction(self, program: Program[T], write: bool) -> T:
        await self._hop("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            value = await drive(program, self._statement)
        except BaseException:
            await self._hop("ROLLBACK")
            raise
        await self._hop("COMMIT")
        return value

    async def run(self, program: ProgramFactory[T], *, write: bool = True) -> T:
        tx = Tx(self.dialect, slot_limited=self.hub.slot_limited)
        # A transaction, once begun, runs to its end: a cancelled caller must
        # never leave a claim committed but unseen (or a transaction open).
        with anyio.CancelScope(shield=True):
            async with self._lock:
                result = await self._transaction(program(tx), write)
        self.hub.publish(tx.wakes)
        return result

    # -- lifecycle -------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30)
            conn.row_factory = sqlite3.Row
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            # one transaction: in autocommit each of the ~50 statements was a
            # commit of its own, an fsync each (~0.1 s a test)
            conn.execute("BEGIN IMMEDIATE")
            for ddl in schema_statements(self.dialect):
                conn.execute(ddl)
            conn.execute("COMMIT")
            return conn

        self._conn = await anyio.to_thread.run_sync(connect)
        await self.run(lambda tx: migrate())

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    await anyio.to_thread.run_sync(conn.close)

    async def watch(self) -> None:
        """Other processes' commits: PRAGMA data_version, polled."""
        last: int | None = None
        while True:
            if self._conn is not None and self.path != ":memory:":
                async with self._lock:
                    row = await self._hop("PRAGMA data_version", (), "one")
                version = int(row[0])
                if last is not None and version != last:
                    self.hub.publish([Wake.any()])
                last = version
            await anyio.sleep(0.05)
