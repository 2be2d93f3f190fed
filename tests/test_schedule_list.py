"""The schedule list's order and paging in storage, on every driver.

Newest first by ``created_at``; schedules created at the same instant (a
virtual clock makes them) by schedule id, as the reference engine's list.
Paging is keyset paging on (created_at, schedule_id): a page that ends inside
a group of equal created_at goes on inside it, and schedules created or
deleted between two pages make no other one listed twice or missed; a cursor
whose last schedule the filters no longer keep is stale (`StaleCursor`, the
reference's 409). The ``query`` is the reference's grammar. The same list over
HTTP: tests/test_reference_schedules.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import durable
from durable import ScheduleSpec, workflow
from durable.clock import VirtualClock
from durable.store import schedule_reads

pytestmark = pytest.mark.anyio
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() + 0.123456
NEVER = "0 2 1 1 *"


@workflow.defn(name="sched_list_noop")
async def noop() -> None:
    return None


@workflow.defn(name="sched_list_other")
async def other() -> None:
    return None


async def _ids(client: durable.Client, limit: int, **filters: Any) -> tuple[list[str], int]:
    """Every page of `limit`, and how many pages."""
    ids: list[str] = []
    cursor, pages = None, 0
    while True:
        page = await client.list_schedules_page(limit=limit, cursor=cursor, **filters)
        ids += [s["schedule_id"] for s in page.items]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            return ids, pages


async def test_newest_first_ties_by_id_and_pages_that_neither_skip_nor_repeat(
        db_url: str) -> None:
    clock = VirtualClock(T0)
    async with durable.connect(db_url, clock=clock) as client:
        async def create(schedule_id: str, paused: bool = False) -> None:
            await client.create_schedule(schedule_id, ScheduleSpec(cron=NEVER), noop,
                                         paused=paused)

        for name in ("b", "a", "c"):  # three at T0, created out of id order
            await create(name, paused=name != "b")
        clock.advance_to(T0 + 1e-6)  # a microsecond later: still apart
        await create("d")
        clock.advance_to(T0 + 60)
        for name in ("f", "e"):
            await create(name, paused=True)
        assert (await _ids(client, 100))[0] == ["e", "f", "d", "a", "b", "c"]
        for limit in (1, 2, 4):  # pages ending inside a group of ties and between
            assert (await _ids(client, limit))[0] == ["e", "f", "d", "a", "b", "c"], limit
        assert await _ids(client, 2, status="paused") == (["e", "f", "a", "c"], 2)
        assert await _ids(client, 1, status="active") == (["d", "b"], 2)

        first = await client.list_schedules_page(limit=2)
        assert [s["schedule_id"] for s in first.items] == ["e", "f"]
        clock.advance_to(T0 + 120)
        await create("new")  # newer than every page read: not on the next ones
        await client.get_schedule("a").delete()  # one not read yet: not listed
        second = await client.list_schedules_page(limit=2, cursor=first.next_cursor)
        assert [s["schedule_id"] for s in second.items] == ["d", "b"]
        await client.get_schedule("b").delete()  # the page's last one: the cursor is stale
        with pytest.raises(durable.StaleCursor, match="list again from the first page"):
            await client.list_schedules_page(limit=2, cursor=second.next_cursor)
        assert (await _ids(client, 100))[0] == ["new", "e", "f", "d", "c"]


async def test_a_cursor_is_stale_once_its_last_schedule_leaves_the_filtered_list(
        db_url: str) -> None:
    """The reference's rule: the cursor's schedule must still be one the same
    filters keep, created when it was. Paused under ``status="active"``, or
    deleted and made again under its id, it is not; changed in a way the
    filters do not see, it is."""
    clock = VirtualClock(T0)
    async with durable.connect(db_url, clock=clock) as client:
        for n in range(4):
            clock.advance_to(T0 + n)
            await client.create_schedule(f"s{n}", ScheduleSpec(cron=NEVER), noop)
        first = await client.list_schedules_page(limit=1, status="active")
        assert [s["schedule_id"] for s in first.items] == ["s3"]
        await client.get_schedule("s3").update(note="still active")
        second = await client.list_schedules_page(limit=1, status="active",
                                                  cursor=first.next_cursor)
        assert [s["schedule_id"] for s in second.items] == ["s2"]
        await client.get_schedule("s2").pause()
        with pytest.raises(durable.StaleCursor):
            await client.list_schedules_page(limit=1, status="active",
                                             cursor=second.next_cursor)
        # without the filter the paused one is still listed: its cursor holds there
        unfiltered = await client.list_schedules_page(limit=2, cursor=first.next_cursor)
        assert [s["schedule_id"] for s in unfiltered.items] == ["s2", "s1"]
        await client.get_schedule("s1").delete()
        await client.create_schedule("s1", ScheduleSpec(cron=NEVER), noop)  # made anew
        with pytest.raises(durable.StaleCursor):
            await client.list_schedules_page(limit=2, cursor=unfiltered.next_cursor)


async def test_the_query_is_the_reference_grammar(db_url: str) -> None:
    """``Field = literal`` joined by AND on ScheduleId, Status, WorkflowType,
    TaskQueue and Note, exact matches; what does not fit is refused with the
    reference's reasons."""
    async with durable.connect(db_url, clock=VirtualClock(T0)) as client:
        await client.create_schedule("eu-orders", ScheduleSpec(cron=NEVER), noop,
                                     note="research AND development OR archived")
        await client.create_schedule("us-orders", ScheduleSpec(cron=NEVER), noop,
                                     task_queue="us", paused=True)
        await client.create_schedule("eu-reports", ScheduleSpec(cron=NEVER), other)

        async def ids(query: str, **filters: Any) -> list[str]:
            page = await client.list_schedules_page(query=query, **filters)
            return sorted(s["schedule_id"] for s in page.items)

        assert await ids('WorkflowType = "sched_list_noop"') == ["eu-orders", "us-orders"]
        assert await ids("WorkflowType = 'x' and ScheduleId = 'x'") == []
        assert await ids("TaskQueue = 'us' and Status = \"paused\"") == ["us-orders"]
        assert await ids('Status = "active" AND WorkflowType = "sched_list_noop"') == [
            "eu-orders"]
        assert await ids('Note = "research AND development OR archived"') == ["eu-orders"]
        assert await ids('ScheduleId = "eu"') == []  # equality, not a part of the id
        assert await ids('ScheduleId = "eu-reports"', status="active") == ["eu-reports"]
        assert await ids('ScheduleId = "eu-reports"', workflow_type="sched_list_noop") == []
        refused = {
            'ScheduleId STARTS_WITH "eu"': "unsupported_schedule_visibility_predicate",
            'ScheduleId != "eu"': "unsupported_schedule_visibility_predicate",
            'ScheduleId = "a" OR Status = "paused"': "unsupported_schedule_visibility_predicate",
            'Region = "eu"': "unsupported_schedule_visibility_field",
            'Status = "deleted"': "invalid_schedule_visibility_query",
            "ScheduleId = 3": "invalid_schedule_visibility_query",
            'ScheduleId = "open': "invalid_schedule_visibility_query",
            'ScheduleId = "a" AND': "invalid_schedule_visibility_query",
            "eu-orders": "invalid_schedule_visibility_query",
            "   ": "invalid_schedule_visibility_query",
        }
        for query, reason in refused.items():
            with pytest.raises(durable.InvalidScheduleQuery) as caught:
                await client.list_schedules_page(query=query)
            assert caught.value.reason == reason, query


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_page_seeks_the_index_without_sorting_the_namespace(
        db_url: str, tmp_path: Path) -> None:
    """SQLite's plan for a page after a cursor: a search of schedules_created
    in its order, no temporary sort of the namespace's schedules."""
    async with durable.connect(db_url):
        pass  # the schema, with its indexes
    program = schedule_reads.list_schedules("default", 50, (T0, "a"), paused=True, now=T0)
    next(program)  # whether the cursor's schedule is still listed: by its key
    statement = program.send({"created_at": T0})
    with contextlib.closing(sqlite3.connect(tmp_path / "durable.db")) as db:
        plan = " | ".join(row[-1] for row in db.execute(
            "EXPLAIN QUERY PLAN " + statement.sql, statement.params))
    assert "USING INDEX schedules_created (namespace=? AND created_at<?)" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
