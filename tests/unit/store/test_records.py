"""Records: the one home of "open" for a run's (and an activity task's) status."""

from __future__ import annotations

import pytest

from durable.driver import Dialect
from durable.store import Store
from durable.store.records import (
    OPEN_STATUSES,
    AttemptStatus,
    RunStatus,
    open_status_sql,
)
from durable.store.schema import schema_statements

from ._support import rows

pytestmark = pytest.mark.anyio


def test_a_run_is_open_while_pending_or_running_and_closed_after() -> None:
    assert [s for s in RunStatus if s.is_open] == [RunStatus.PENDING, RunStatus.RUNNING]
    assert set(OPEN_STATUSES) == {"pending", "running"}
    # a status read back from storage is a plain str: it compares equal to its member
    assert "running" in OPEN_STATUSES and "completed" not in OPEN_STATUSES
    # an activity task is open in the same two states
    assert {AttemptStatus.PENDING, AttemptStatus.RUNNING} == set(OPEN_STATUSES)


def test_the_sql_of_open_is_the_partial_indexes_predicate() -> None:
    """Written as literals, exactly as the schema's partial indexes are, so that
    the planner can match a query's predicate to them."""
    assert open_status_sql() == "status IN ('pending', 'running')"
    assert open_status_sql("u.status") == "u.status IN ('pending', 'running')"
    schema = "\n".join(schema_statements(Dialect()))
    assert f"WHERE {open_status_sql()}" in schema


async def test_the_sql_of_open_selects_exactly_the_open_runs(store: Store) -> None:
    found = await rows(store, "SELECT s FROM (" + " UNION ALL ".join(
        f"SELECT '{s.value}' AS s" for s in RunStatus) + f") WHERE {open_status_sql('s')}")
    assert sorted(r["s"] for r in found) == ["pending", "running"]
