"""`durable.driver.drive` / `drive_sync`: the one loop every executor runs."""

from __future__ import annotations

from typing import Any

import pytest

from durable.driver import Program, Stmt, drive, drive_sync, ex, q1

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def program(log: list[str]) -> Program[tuple[Any, Any]]:
    try:
        first = yield q1("SELECT 1")
        second = yield ex("UPDATE t SET x = 1")
        return first, second
    finally:
        log.append("closed")


def results(stmt: Stmt) -> Any:
    return {"one": {"x": 1}, "exec": 3}[stmt.mode]


def test_each_result_is_fed_back_and_the_value_returned() -> None:
    log: list[str] = []
    assert drive_sync(program(log), results) == ({"x": 1}, 3)
    assert log == ["closed"]


async def test_the_async_loop_does_the_same() -> None:
    async def execute(stmt: Stmt) -> Any:
        return results(stmt)

    log: list[str] = []
    assert await drive(program(log), execute) == ({"x": 1}, 3)


def test_a_statement_error_closes_the_program_and_propagates_unchanged() -> None:
    """Not thrown into the program: its own handlers never see it (no program
    handles a statement's error; the transaction rolls back whole)."""
    seen: list[BaseException] = []

    def guarded() -> Program[str]:
        try:
            yield ex("UPDATE t SET x = 1")
        except ValueError as exc:  # would swallow it if the error were thrown in
            seen.append(exc)
            return "swallowed"
        return "done"

    def failing(stmt: Stmt) -> Any:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        drive_sync(guarded(), failing)
    assert seen == []


def test_a_first_statement_already_taken_is_executed_first() -> None:
    log: list[str] = []
    gen = program(log)
    first = next(gen)
    assert drive_sync(gen, results, first) == ({"x": 1}, 3)


def test_the_statement_helpers_make_the_dataclass_own_values() -> None:
    """`q`, `q1`, `ex` and `many` build `Stmt` without its ``__init__`` (issue
    26): the same fields, equal and hashed as the dataclass makes them, and
    still frozen."""
    import dataclasses

    from durable.driver import many, q

    made = [q("SELECT ?", 1), q1("SELECT ?", 2), ex("UPDATE t SET x = ?", 3),
            many("INSERT INTO t VALUES (?)", [(1,), (2,)])]
    expected = [Stmt("SELECT ?", (1,), "all"), Stmt("SELECT ?", (2,), "one"),
                Stmt("UPDATE t SET x = ?", (3,), "exec"),
                Stmt("INSERT INTO t VALUES (?)", (), "many", [(1,), (2,)])]
    assert made == expected
    assert [repr(s) for s in made] == [repr(s) for s in expected]
    assert hash(made[0]) == hash(expected[0])
    assert all(s.autocommit is False for s in made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].sql = "DELETE FROM t"  # type: ignore[misc]
