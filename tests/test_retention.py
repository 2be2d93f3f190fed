"""Retention: closed runs older than the namespace keeps them are deleted with
everything they own, in small transactions; open runs never are; and a
week of a one-minute schedule keeps the database's size flat.

On the virtual clock of `TimeSkippingEnvironment`; SQLite and PostgreSQL,
asyncio and trio (the week-long soak: asyncio only, on both drivers; what it
measures is storage, which the host loop does not touch).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import durable
from durable import Overlap, ScheduleSpec, activity, workflow
from durable.driver import Program, Tx, placeholders, q, q1
from durable.store import retention
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

UTC = dt.UTC
START = dt.datetime(2026, 1, 1, tzinfo=UTC)
DAY = 24 * 3600.0


# ---------------------------------------------------------------- definitions


@activity.defn(name="ret_step")
async def step(key: str) -> str:
    return f"done {key}"


@workflow.defn(name="ret_rich")
class Rich:
    """Leaves rows in most of a run's tables: a remote activity (ops, attempts,
    events) and a signal (inbox)."""

    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self, key: str) -> str:
        result = await workflow.execute_activity(step, key)
        await workflow.wait_condition(lambda: self.go)
        return str(result)

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


@workflow.defn(name="ret_failing")
async def failing() -> None:
    raise durable.ApplicationError("it failed", non_retryable=True)


@workflow.defn(name="ret_tick")
async def tick(label: str) -> str:
    return label


@workflow.defn(name="ret_steps")
async def steps(n: int) -> int:
    for i in range(n):
        await workflow.execute_local_activity(step, str(i))
    return n


@workflow.defn(name="ret_chain")
class Chain:
    """Continues as new twice, then waits until told to finish."""

    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self, n: int) -> int:
        if n < 2:
            workflow.continue_as_new(n + 1)
        await workflow.wait_condition(lambda: self.done)
        return n

    @workflow.signal
    def finish(self) -> None:
        self.done = True


ALL_WORKFLOWS = [Rich, failing, tick, steps, Chain]


def memory_url(db_url: str) -> str:
    if db_url.startswith("sqlite:"):
        return "sqlite://:memory:"
    if db_url.startswith("sqlite-"):
        return db_url.split(":", 1)[0] + "://:memory:"
    return db_url


@pytest.fixture
async def env(db_url: str) -> AsyncIterator[TimeSkippingEnvironment]:
    async with TimeSkippingEnvironment(memory_url(db_url), start=START.timestamp()) as e:
        yield e


async def owned_rows(client: durable.Client, run_ids: list[str]) -> dict[str, int]:
    """Rows of each run table (and the runs themselves) belonging to `run_ids`."""

    def count(tx: Tx) -> Program[dict[str, int]]:
        out: dict[str, int] = {}
        marks = placeholders(len(run_ids))
        for table in [t for t, _ in retention.RUN_TABLES] + ["runs"]:
            row = yield q1(f"SELECT COUNT(*) AS n FROM {table} WHERE run_id IN ({marks})",
                           *run_ids)
            out[table] = int(row["n"])
        return out

    return await client.store.driver.run(count, write=False)


async def run_id(handle: durable.WorkflowHandle) -> str:
    return str((await handle.describe())["run"]["run_id"])


# ---------------------------------------------------------------- deleting


async def test_closed_runs_past_retention_go_with_everything_they_own(
    env: TimeSkippingEnvironment,
) -> None:
    client = env.client
    async with env.worker(workflows=ALL_WORKFLOWS, activities=[step],
                          retention=dt.timedelta(days=1)):
        rich = await client.start(Rich, "a", id="old-rich")
        await env.sleep(0)
        await rich.signal("proceed")
        await rich.result()
        failed = await client.start(failing, id="old-failed")
        with pytest.raises(durable.WorkflowFailed):
            await failed.result()
        still_open = await client.start(Rich, "b", id="old-open")
        old = [await run_id(rich), await run_id(failed)]
        before = await owned_rows(client, old)
        await env.sleep(DAY / 2)
        young = await client.start(tick, "y", id="young")
        await young.result()
        await env.sleep(DAY / 2 + 2 * 3600)  # the old ones closed > 1 day ago
        after = await owned_rows(client, old)
        kept = await owned_rows(client, [await run_id(still_open), await run_id(young)])
        stats = await client.get_retention()
    for table in ("events", "ops", "activity_tasks", "inbox", "failures", "runs"):
        assert before[table] > 0, table  # the old runs did own rows of every kind
    assert set(after.values()) == {0}
    assert kept["runs"] == 2 and kept["events"] > 0
    for gone in ("old-rich", "old-failed"):
        with pytest.raises(durable.WorkflowNotFound):
            await client.get_handle(gone).describe()
    assert (await client.get_handle("old-open").describe())["status"] == "running"
    assert stats["retention_seconds"] is None  # the worker's retention applied
    assert stats["pruned"]["runs"] == 2 and stats["pruned"]["workflows"] == 2
    assert stats["pruned"]["events"] == before["events"]
    assert stats["last_pruned_at"] is not None


async def test_the_namespace_setting_wins_and_can_be_cleared(
    env: TimeSkippingEnvironment,
) -> None:
    client = env.client
    async with env.worker(workflows=ALL_WORKFLOWS, retention=dt.timedelta(days=1)):
        await client.set_retention(days=3)
        await client.execute(tick, "a", id="a")
        await env.sleep(2 * DAY)
        assert (await client.get_handle("a").describe())["status"] == "completed"
        await env.sleep(1.5 * DAY)
        with pytest.raises(durable.WorkflowNotFound):
            await client.get_handle("a").describe()
        assert (await client.get_retention())["retention_seconds"] == 3 * DAY
        await client.set_retention(days=None)  # the worker's day applies again
        await client.execute(tick, "b", id="b")
        await env.sleep(1.5 * DAY)
        with pytest.raises(durable.WorkflowNotFound):
            await client.get_handle("b").describe()


async def test_no_retention_deletes_nothing(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=ALL_WORKFLOWS):
        await env.client.execute(tick, "a", id="kept")
        await env.sleep(30 * DAY)
    assert (await env.client.get_handle("kept").describe())["status"] == "completed"
    assert (await env.client.get_retention())["pruned"] == {}


async def test_prune_lists_with_dry_run_and_deletes_without(
    env: TimeSkippingEnvironment,
) -> None:
    client = env.client
    async with env.worker(workflows=ALL_WORKFLOWS):
        for i in range(3):
            await client.execute(tick, str(i), id=f"p{i}")
        await env.sleep(2 * 3600)
        await client.execute(tick, "new", id="p-new")
    listed = await client.prune(3600, dry_run=True)
    assert listed["dry_run"] and listed["runs_expired"] == 3
    assert sorted(r["workflow_id"] for r in listed["runs"]) == ["p0", "p1", "p2"]
    assert len(await client.list()) == 4  # nothing deleted
    report = await client.prune(dt.timedelta(hours=1))
    assert report["runs_deleted"] == 3 and report["deleted"]["runs"] == 3
    assert [r["workflow_id"] for r in await client.list()] == ["p-new"]
    assert (await client.prune(3600))["runs_deleted"] == 0


async def test_a_large_run_is_deleted_a_chunk_at_a_time(
    env: TimeSkippingEnvironment, monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = env.client
    async with env.worker(workflows=ALL_WORKFLOWS, activities=[step]):
        await client.execute(steps, 30, id="big")  # 60 events, 30 ops
        for i in range(6):
            await client.execute(tick, str(i), id=f"small{i}")
        await env.sleep(3600)
    monkeypatch.setattr(retention, "BATCH_ROWS", 40)
    monkeypatch.setattr(retention, "CHUNK_ROWS", 10)
    batches: list[retention.Pruned] = []
    prune_runs = client.store.prune_runs

    async def recording(*args: Any) -> retention.Pruned:
        batch = await prune_runs(*args)
        batches.append(batch)
        return batch

    monkeypatch.setattr(client.store, "prune_runs", recording)
    report = await client.prune(60)
    assert report["runs_deleted"] == 7
    assert await client.list() == []
    chunks = [b for b in batches if b.chunked]
    assert len(chunks) >= 6  # 60 events and 30 ops, 10 at a time
    for batch in batches:  # no transaction deleted much more than its budget
        assert sum(batch.rows.values()) <= 40 + 2 * len(batch.runs) + 10, batch.rows
    assert sum(sum(b.rows.values()) for b in batches) == sum(report["deleted"].values())


async def test_a_continued_chain_loses_its_old_runs_and_keeps_the_open_one(
    env: TimeSkippingEnvironment,
) -> None:
    client = env.client
    async with env.worker(workflows=ALL_WORKFLOWS, retention=dt.timedelta(days=1)):
        handle = await client.start(Chain, 0, id="chain")
        await env.sleep(2 * DAY)
        info = await client.get_handle("chain").describe()
        runs = await owned_rows(client, [handle.first_run_id or ""])
        assert info["status"] == "running" and info["run"]["run_number"] == 3
        assert runs["runs"] == 0  # the first run (continued) is gone; the instance stays
        await client.get_handle("chain").signal("finish")
        assert await client.get_handle("chain").result() == 2
        await env.sleep(2 * DAY)
    with pytest.raises(durable.WorkflowNotFound):
        await client.get_handle("chain").describe()


async def test_a_schedules_fire_whose_run_was_deleted_says_so(
    env: TimeSkippingEnvironment,
) -> None:
    async with env.worker(workflows=ALL_WORKFLOWS, retention=2 * 3600):
        handle = await env.client.create_schedule(
            "hourly", ScheduleSpec(every=3600), tick, "h")
        await env.sleep(DAY)
        info = await handle.describe()
    statuses = [(f["scheduled_at"], f["status"]) for f in info["recent"]]
    assert len(statuses) == 20
    hour = dt.timedelta(hours=1)
    # closed within the last two hours: kept; the older recent fires' runs are gone
    assert statuses[:3] == [((START + (24 - h) * hour).isoformat(), "completed")
                            for h in range(3)]
    assert {status for _, status in statuses[3:]} == {"deleted"}
    assert (await env.client.get_retention())["pruned"]["runs"] == 21
    # its id says what became of it, not only that there is no such workflow
    gone, fired = info["recent"][3]["workflow_id"], re.escape(info["recent"][3]["scheduled_at"])
    with pytest.raises(durable.WorkflowNotFound, match=(
            rf"no workflow '{gone}' in namespace 'default': schedule 'hourly' started it "
            rf"\(its fire at {fired}\) and retention has since "
            r"deleted it with its history \(a prune or a worker's retention deleted closed "
            r"runs here; last pass at .*, 21 runs deleted so far\)")):
        await env.client.get_handle(gone).result()


@workflow.defn(name="ret_kid")
async def kid() -> str:
    await workflow.sleep(3 * DAY)
    return "kid"


@workflow.defn(name="ret_mom")
async def mom() -> str:
    await workflow.start_child(kid, id="ret-kid", options=durable.ChildOptions(
        parent_close_policy=durable.ParentClosePolicy.ABANDON))
    return "mom"


async def test_an_open_child_of_a_deleted_parent_stays_and_says_its_parent_is_gone(
    env: TimeSkippingEnvironment,
) -> None:
    async with env.worker(workflows=[mom, kid]):
        assert await env.client.execute(mom, id="ret-mom") == "mom"
        child = env.client.get_handle("ret-kid")
        assert (await child.describe())["run"]["parent_deleted"] is False
        await env.sleep(2 * DAY)
        done = await env.client.prune(dt.timedelta(days=1))
        assert [r["workflow_id"] for r in done["runs"]] == ["ret-mom"]  # never the open child
        run = (await child.describe())["run"]
        assert (run["parent_workflow_id"], run["parent_deleted"]) == ("ret-mom", True)
        await env.sleep(2 * DAY)
        assert await child.result() == "kid"


async def test_an_unknown_id_says_nothing_of_retention_where_none_deleted(
    env: TimeSkippingEnvironment,
) -> None:
    with pytest.raises(durable.WorkflowNotFound) as caught:
        await env.client.get_handle("hourly-20260101T000000Z").describe()
    assert str(caught.value) == "no workflow 'hourly-20260101T000000Z' in namespace 'default'"


async def test_bad_retention_input_is_refused(env: TimeSkippingEnvironment) -> None:
    client = env.client
    with pytest.raises(durable.ConfigurationError, match="retention days must be"):
        await client.set_retention(days=0)
    with pytest.raises(durable.ConfigurationError, match="retention days must be a number"):
        await client.set_retention(days="30")  # type: ignore[arg-type]
    with pytest.raises(durable.ConfigurationError, match="older_than must be"):
        await client.prune(-1)
    with pytest.raises(durable.ConfigurationError, match="dry_run must be True or False"):
        await client.prune(60, dry_run="yes")  # type: ignore[arg-type]
    with pytest.raises(durable.ConfigurationError, match="Worker retention must be at least 1"):
        durable.Worker(client, workflows=[tick], retention=0)
    assert (await client.get_retention())["retention_seconds"] is None


# ---------------------------------------------------------------- the week-long soak


async def _size(client: durable.Client, path: Path | None) -> int:
    """The SQLite main file's size, or the PostgreSQL schema's (tables, their
    indexes and TOAST)."""
    if path is not None:
        return os.path.getsize(path)

    def schema_size(tx: Tx) -> Program[int]:
        row = yield q1(
            "SELECT sum(pg_total_relation_size(c.oid)) AS n FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'")
        return int(row["n"])

    return await client.store.driver.run(schema_size, write=False)


async def _relations(client: durable.Client) -> list[tuple[str, int]]:
    def sizes(tx: Tx) -> Program[list[tuple[str, int]]]:
        rows = yield q(
            "SELECT c.relname AS name, pg_total_relation_size(c.oid) AS n FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
            "AND c.relkind = 'r' ORDER BY 2 DESC")
        return [(r["name"], int(r["n"])) for r in rows]

    return await client.store.driver.run(sizes, write=False)


@pytest.fixture
def soak_env(db_url: str, driver_name: str, anyio_backend: str,
             tmp_path: Path) -> Callable[[], Any]:
    if driver_name == "stepwise" or anyio_backend != "asyncio":
        pytest.skip("the soak measures storage: SQLite's and PostgreSQL's, once (asyncio)")
    path = tmp_path / "soak.db" if driver_name == "sqlite" else None
    url = f"sqlite:///{path}" if path is not None else db_url

    @asynccontextmanager
    async def make() -> AsyncIterator[tuple[TimeSkippingEnvironment, Path | None]]:
        async with TimeSkippingEnvironment(url, start=START.timestamp(),
                                           auto_skip=False) as e:
            yield e, path

    return make


async def test_a_week_of_a_minute_schedule_keeps_the_database_flat(
    soak_env: Callable[[], Any],
) -> None:
    """10,080 fires, one-day retention: after the first day the database holds
    one day of runs, and its size stops growing. Time moves an hour at a time
    (each hour's sixty fires start together, inside the catch-up window: the
    same rows per run as one at a time, in a fraction of the test's time).
    SQLite runs the whole week; PostgreSQL, where each run costs round trips
    to a server, three days (4,320 fires): the second and third days end the
    same size, which is what flat means, and the suite stays within its time."""
    async with soak_env() as (env, path), env.worker(
            workflows=[tick], retention=dt.timedelta(days=1)):
        days = 7 if path is not None else 3
        client = env.client
        handle = await client.create_schedule(
            "every-minute", ScheduleSpec(every=60), tick, "m", overlap=Overlap.ALLOW_ALL)
        sizes: list[int] = []
        for hour in range(1, days * 24 + 1):
            env.clock.advance_to(START.timestamp() + hour * 3600)
            await env.sleep(0)
            if hour % 24 == 0:
                sizes.append(await _size(client, path))
        info = await handle.describe()
        stats = await client.get_retention()
        relations = await _relations(client) if path is None else []
    assert info["fires_count"] == days * 24 * 60 and info["skipped_count"] == 0
    assert stats["pruned"]["runs"] >= (days - 2) * 24 * 60  # days 1..days-2 are gone
    # flat after the first day: no later day ends bigger than the second did
    # (give or take a page per table's free-space bookkeeping)
    assert max(sizes[2:]) <= sizes[1] * 1.10, (sizes, relations)
