"""Programs: what a domain transaction is, as a driver sees it.

A program is a generator that yields statements (`Stmt`, made with `q`,
`q1`, `ex` and `many`; ``?`` placeholders) and receives each one's result:
rows (`Row`, indexable by column name), one row or None, a row count. The
store's domain transactions (`durable.store`) are written once as programs;
a driver runs one as one transaction (`durable.driver.Driver.run`). This
vocabulary sits below both, so that the records the store builds from rows
and the driver that runs programs do not need each other; driver authors
import it from `durable.driver`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

StmtMode = Literal["all", "one", "exec", "many"]


@dataclass(frozen=True)
class Stmt:
    """One statement of a program and how to run it.

    mode ``all`` returns the rows, ``one`` the first row or None, ``exec`` the
    row count, ``many`` runs `sql` once per entry of `params_seq` (None).
    `autocommit` marks a program's only statement as self-contained: a driver
    may send it without BEGIN/COMMIT (one round trip). Its connection lost
    once it may have been sent is then an unknown outcome, as a lost COMMIT
    is (`StorageUnavailable(outcome_unknown=True)`), never a silent retry.
    """

    sql: str
    params: Sequence[Any] = ()
    mode: StmtMode = "all"
    params_seq: Sequence[Sequence[Any]] = ()
    autocommit: bool = False


Row = Any  # a row indexable by column name (sqlite3.Row, asyncpg.Record, ...)
Program = Generator[Stmt, Any, T]


_new = object.__new__


def _stmt(sql: str, params: Sequence[Any], mode: StmtMode,
          params_seq: Sequence[Sequence[Any]] = ()) -> Stmt:
    """``Stmt(sql, params, mode, params_seq)`` without the frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` per field: 1.2 µs of the 0.5 µs
    this takes; three statements per sequential step on the database thread,
    issue 26). The same fields, still frozen, equal and hashed alike."""
    stmt: Stmt = _new(Stmt)
    stmt.__dict__.update(sql=sql, params=params, mode=mode, params_seq=params_seq,
                         autocommit=False)
    return stmt


def q(sql: str, *params: Any) -> Stmt:
    """A query returning all rows."""
    return _stmt(sql, params, "all")


def q1(sql: str, *params: Any) -> Stmt:
    """A query returning its first row, or None."""
    return _stmt(sql, params, "one")


def ex(sql: str, *params: Any) -> Stmt:
    """A statement returning its row count."""
    return _stmt(sql, params, "exec")


def many(sql: str, params_seq: Sequence[Sequence[Any]]) -> Stmt:
    """One statement run for each parameter tuple (executemany)."""
    return _stmt(sql, (), "many", params_seq)


def placeholders(n: int) -> str:
    """``?, ?, ...`` for an IN list of n values."""
    return ",".join("?" * n)


def drive_sync(program: Program[T], execute: Callable[[Stmt], Any],
               first: Stmt | None = None) -> T:
    """Run a program's statements with `execute`, feeding each result back; its value.

    What every executor does (a driver supplies only how to execute one
    statement): `first` is a statement already taken from the program. An
    error raised by `execute` closes the program and propagates unchanged;
    programs do not handle statement errors (the transaction is rolled back
    whole), so none is thrown into them.
    """
    try:
        stmt = next(program) if first is None else first
        while True:
            try:
                result = execute(stmt)
            except BaseException:
                program.close()
                raise
            stmt = program.send(result)
    except StopIteration as done:
        value: T = done.value
        return value


async def drive(program: Program[T], execute: Callable[[Stmt], Awaitable[Any]],
                first: Stmt | None = None) -> T:
    """`drive_sync` for an executor whose statements are awaited."""
    try:
        stmt = next(program) if first is None else first
        while True:
            try:
                result = await execute(stmt)
            except BaseException:
                program.close()
                raise
            stmt = program.send(result)
    except StopIteration as done:
        value: T = done.value
        return value
