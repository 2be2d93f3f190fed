"""Records: the one home of "open" for a run's (and an activity task's) status."""

from __future__ import annotations

import time
import uuid

import pytest

from durable.driver import Dialect
from durable.store import Store
from durable.store.records import (
    OPEN_STATUSES,
    AttemptStatus,
    RunStatus,
    new_id,
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


def test_ids_are_time_ordered_uuid7_hex_and_unique() -> None:
    """Ids keep their form (32 lowercase hex digits, a UUID) and are ordered by
    the millisecond they were made in: the rows of runs alive together share
    index pages (docs/benchmarks.md,
    "SQLite concurrent steps: time-ordered ids")."""
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(2000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    for text in ids[:50]:
        assert len(text) == 32 and text == text.lower()
        parsed = uuid.UUID(hex=text)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert before <= int(text[:12], 16) <= after
    stamps = [int(text[:12], 16) for text in ids]
    assert stamps == sorted(stamps)  # across milliseconds; random within one
    # the random part varies (74 bits): the last 8 digits (what the UI shows) differ
    assert len({text[-8:] for text in ids[:100]}) == 100
