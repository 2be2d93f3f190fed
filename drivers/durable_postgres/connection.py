"""Talking to one asyncpg connection: statements, programs, failures.

A program's statements are sent one by one on the connection (asyncpg keeps
them prepared), their results fed back; several rows of one INSERT go as one
statement of arrays (`_insert_rows`). The error tuples say which failures
leave a transaction safe to retry (the server rolled it back) and which mean
the connection is gone.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import asyncpg.exceptions as pgerr

from durable.driver import Program, Stmt
from durable.driver import drive as core_drive

T = TypeVar("T")
if TYPE_CHECKING:  # asyncpg's classes are generic only in its stubs
    from asyncpg.pool import PoolConnectionProxy

    Pool = asyncpg.Pool[asyncpg.Record]
    # a pooled connection comes wrapped in a proxy with the same interface
    Connection = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]

# Errors after which the connection is gone: nothing the server did in an open
# transaction survives it (the server rolls back), so retrying is safe unless
# COMMIT was already on the wire.
CONNECTION_LOST: tuple[type[BaseException], ...] = (
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
CONFLICT: tuple[type[BaseException], ...] = (
    pgerr.DeadlockDetectedError,
    pgerr.SerializationError,
    pgerr.UniqueViolationError,
    # another process migrated the schema under our prepared statements;
    # asyncpg has dropped them, the next attempt prepares afresh
    pgerr.InvalidCachedStatementError,
    # a statement cancelled by the server (a DBA's pg_cancel_backend, a
    # statement_timeout): the connection lives and the transaction is rolled
    # back whole, so nothing of it committed; a worker's claim that met it
    # stopped the worker. (asyncpg's own command timeout is a TimeoutError:
    # CONNECTION_LOST, outcome unknown.)
    pgerr.QueryCanceledError,
)



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


#: an INSERT whose values are all parameters (several rows of it: one statement)
_INSERT_VALUES = re.compile(r"INSERT INTO (\w+) \(([\w, ]+)\) VALUES \(\?(?:, \?)*\)")
#: such an INSERT's form with arrays, by its text (found by `_insert_rows`)
_UNNEST: dict[str, str] = {}


@functools.lru_cache(maxsize=1024)
def _inserts_values(sql: str) -> bool:
    return _INSERT_VALUES.fullmatch(sql) is not None


async def _insert_rows(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert `rows` with one statement: ``INSERT ... SELECT * FROM unnest($1::t[],
    ...)``, each column an array. ``executemany`` binds and executes the INSERT
    once a row (one round trip, but the server starts and ends a statement per
    row, the client encodes a message per row); this form is one of each. The
    columns' types are read once per text from the INSERT prepared."""
    unnest = _UNNEST.get(sql)
    if unnest is None:
        match = _INSERT_VALUES.fullmatch(sql)
        assert match is not None
        prepared = await conn.prepare(_numbered(sql))
        arrays = ", ".join(f"${n}::{t.name}[]"
                           for n, t in enumerate(prepared.get_parameters(), start=1))
        unnest = _UNNEST[sql] = (f"INSERT INTO {match[1]} ({match[2]}) "
                                 f"SELECT * FROM unnest({arrays})")
    await conn.execute(unnest, *(list(column) for column in zip(*rows, strict=True)))


async def execute(conn: Connection, stmt: Stmt) -> Any:
    sql = _numbered(stmt.sql)
    if stmt.mode == "all":
        return await conn.fetch(sql, *stmt.params)
    if stmt.mode == "one":
        return await conn.fetchrow(sql, *stmt.params)
    if stmt.mode == "many":
        if len(stmt.params_seq) > 1 and _inserts_values(stmt.sql):
            await _insert_rows(conn, stmt.sql, stmt.params_seq)
        elif stmt.params_seq:
            await conn.executemany(sql, stmt.params_seq)
        return None
    return _rowcount(await conn.execute(sql, *stmt.params))


async def drive(conn: Connection, program: Program[T], first: Stmt | None = None) -> T:
    """Send a program's statements on `conn`, feeding each result back
    (`durable.driver.drive`); a statement's error propagates unchanged."""
    return await core_drive(program, functools.partial(execute, conn), first)


async def no_reset(conn: Connection) -> None:
    """Pool release hook: asyncpg already rolled back any open transaction, and
    our transactions leave no other session state worth a round trip to reset."""


def discard(conn: Connection) -> None:
    """Close a broken connection at once; the pool opens a new one. (A lost
    connection may already be detached from its pool proxy, which then
    refuses every call: nothing is left to close.)"""
    with contextlib.suppress(Exception):
        conn.terminate()
