"""PostgreSQL at scale: set-based group commits, one-statement claims, fair claims.

A group commit of several runs' local steps is ONE statement on PostgreSQL
(`PostgresDialect.local_steps_group`); it must store exactly what the
run-by-run path stores, and fence each run on its own. Claims take at most a
worker's free capacity and at most its fair share of the ready work, so that
every live worker gets some. All on a real server (skipped without one,
unless DURABLE_REQUIRE_POSTGRES=1).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import drop_postgres_schema, new_postgres_url, require_postgres

import durable
from durable import activity, workflow
from durable.driver import Program, Stmt, Tx
from durable.store.records import CommitResult, WorkerRegistration
from durable.store.writes import RecordLocalActivity, RunWrites

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def pg_urls() -> Iterator[tuple[str, str]]:
    """Two fresh schemas, dropped afterwards."""
    require_postgres()
    urls = (new_postgres_url(), new_postgres_url())
    yield urls
    for url in urls:
        drop_postgres_schema(url)


async def rows(client: durable.Client, statement: str, *params: Any) -> list[dict[str, Any]]:
    def program(tx: Tx) -> Program[Any]:
        return (yield Stmt(statement, params, "all"))

    return [dict(r) for r in await client.driver.run(program)]


@activity.defn(name="scale_step")
async def step(i: int) -> int:
    return i + 1


@workflow.defn(name="scale_flow")
async def flow(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_activity(step, i)
    return total


@workflow.defn(name="scale_local_flow")
async def local_flow(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(step, i)
    return total


# ---------------------------------------------------------------- set-based group commits

_NOW = 1_900_000_000.0


async def _group(client: durable.Client, per_run: bool) -> tuple[list[Any], dict[str, Any]]:
    """Six runs; one group commit of their local steps: two go through (one of
    them with a None result), one is stale (an older epoch), one is past its
    deadline, one is closed, one is not there at all. What was stored, with
    run ids replaced by workflow ids so that two schemas compare."""
    ids = [f"wf-{i}" for i in range(5)]
    for wid in ids:
        await client.start(local_flow, 3, id=wid)
    claimed = await client.store.claim_runs(
        client.namespace, "default", "tester", ("scale_local_flow",), 10, 60.0, _NOW - 1)
    run_of = {c.run.workflow_id: c.run for c in claimed}
    assert sorted(run_of) == ids
    wid_of = {run.run_id: wid for wid, run in run_of.items()}
    await rows(client, "UPDATE runs SET deadline_at = ? WHERE run_id = ? RETURNING run_id",
               _NOW - 5, run_of["wf-3"].run_id)
    await rows(client, "UPDATE runs SET status = 'completed' WHERE run_id = ? RETURNING run_id",
               run_of["wf-4"].run_id)

    def steps(wid: str, count: int) -> list[RecordLocalActivity]:
        return [RecordLocalActivity(f"0.{k}", "scale_step", _NOW - 0.5 + k / 10, 1,
                                    None if (wid, k) == ("wf-1", 1) else f'"{wid}-{k}"')
                for k in range(count)]

    batches = [
        RunWrites(run_of["wf-0"].run_id, run_of["wf-0"].epoch, steps("wf-0", 3), quiet=True),
        RunWrites(run_of["wf-1"].run_id, run_of["wf-1"].epoch, steps("wf-1", 2), quiet=True),
        RunWrites(run_of["wf-2"].run_id, run_of["wf-2"].epoch - 1, steps("wf-2", 2), quiet=True),
        RunWrites(run_of["wf-3"].run_id, run_of["wf-3"].epoch, steps("wf-3", 1), quiet=True),
        RunWrites(run_of["wf-4"].run_id, run_of["wf-4"].epoch, steps("wf-4", 1), quiet=True),
        RunWrites("no-such-run", 1, steps("ghost", 1), quiet=True),
    ]
    wid_of["no-such-run"] = "ghost"
    dialect = client.driver.dialect
    calls: list[int] = []
    original = dialect.local_steps_group

    def spy(batches: list[RunWrites], now: float) -> Program[list[CommitResult]] | None:
        calls.append(len(batches))
        return None if per_run else original(batches, now)

    dialect.local_steps_group = spy  # type: ignore[method-assign]
    try:
        results = await client.store.commit(batches, _NOW)
    finally:
        del dialect.local_steps_group
    assert calls == [6]
    stored: dict[str, Any] = {
        "ops": sorted(
            (wid_of[r.pop("run_id")], *sorted(r.items())) for r in await rows(
                client, "SELECT * FROM ops")),
        "events": sorted(
            (wid_of[r.pop("run_id")], r.pop("seq"), *sorted(
                (k, v) for k, v in r.items() if k != "id")) for r in await rows(
                client, "SELECT * FROM events WHERE type LIKE 'Activity%'")),
        "runs": sorted((r["workflow_id"], r["event_seq"], r["status"]) for r in await rows(
            client, "SELECT workflow_id, event_seq, status FROM runs")),
    }
    normal = [(wid_of[r.run_id], r.committed, r.ops, r.next_run_id) for r in results]
    return normal, stored


async def test_a_group_commit_stores_what_run_by_run_commits_store(
        pg_urls: tuple[str, str]) -> None:
    async with durable.connect(pg_urls[0]) as grouped, durable.connect(pg_urls[1]) as single:
        results, stored = await _group(grouped, per_run=False)
        expected_results, expected_stored = await _group(single, per_run=True)
    assert results == expected_results
    assert stored == expected_stored
    assert [committed for _, committed, _, _ in results] == [True, True, False, False, False,
                                                             False]
    assert len([op for op in stored["ops"] if op[0] in ("wf-0", "wf-1")]) == 5
    assert {op[0] for op in stored["ops"]} == {"wf-0", "wf-1"}  # nothing of the fenced runs


async def test_one_stale_run_in_a_group_leaves_the_others_recorded(
        pg_urls: tuple[str, str]) -> None:
    async with durable.connect(pg_urls[0]) as client:
        for i in range(20):
            await client.start(local_flow, 1, id=f"many-{i}")
        claimed = await client.store.claim_runs(
            client.namespace, "default", "tester", ("scale_local_flow",), 50, 60.0, _NOW - 1)
        assert len(claimed) == 20
        stale = claimed[7].run.run_id
        batches = [RunWrites(c.run.run_id, c.run.epoch - (c.run.run_id == stale),
                             [RecordLocalActivity("0.0", "scale_step", _NOW, 1, "1")], quiet=True)
                   for c in claimed]
        results = await client.store.commit(batches, _NOW)
        assert [r.run_id for r in results] == [b.run_id for b in batches]
        assert {r.run_id for r in results if not r.committed} == {stale}
        recorded = await rows(client, "SELECT run_id FROM ops")
        assert sorted(r["run_id"] for r in recorded) == sorted(
            c.run.run_id for c in claimed if c.run.run_id != stale)


async def test_concurrent_local_steps_through_group_commits_complete(pg_urls: tuple[str, str],
                                                                     ) -> None:
    async with durable.connect(pg_urls[0]) as client:
        handles = [await client.start(local_flow, 5, id=f"c-{i}") for i in range(30)]
        async with durable.Worker(client, workflows=[local_flow], activities=[step]):
            assert [await h.result() for h in handles] == [15] * 30
        history = await rows(client, "SELECT run_id, seq FROM events ORDER BY run_id, seq")
        by_run: dict[str, list[int]] = {}
        for r in history:
            by_run.setdefault(r["run_id"], []).append(r["seq"])
        assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_run.values())


# ---------------------------------------------------------------- fair claims


class Tally:
    """Which worker started which runs and attempts, and the most each held at once."""

    def __init__(self, worker: durable.Worker) -> None:
        self.runs: set[str] = set()
        self.attempts = 0
        self.most_runs = 0
        self.most_attempts = 0
        start_run, start_activity = worker._start_run, worker.remote.start

        def on_run(claimed: Any) -> None:
            start_run(claimed)
            self.runs.add(claimed.run.run_id)
            self.most_runs = max(self.most_runs, len(worker.executors))

        def on_activity(task: Any) -> None:
            start_activity(task)
            self.attempts += 1
            self.most_attempts = max(self.most_attempts, len(worker.remote.running))

        worker._start_run = on_run  # type: ignore[method-assign]
        worker.remote.start = on_activity  # type: ignore[method-assign]


async def test_two_workers_on_one_schema_share_the_runs_within_their_capacity(
        pg_urls: tuple[str, str]) -> None:
    async with durable.connect(pg_urls[0]) as starter, durable.connect(pg_urls[0]) as other:
        handles = [await starter.start(flow, 3, id=f"fair-{i}") for i in range(40)]
        first = durable.Worker(starter, workflows=[flow], activities=[step],
                               max_concurrent_runs=8, max_concurrent_activities=4)
        second = durable.Worker(other, workflows=[flow], activities=[step],
                                max_concurrent_runs=8, max_concurrent_activities=4)
        tallies = [Tally(first), Tally(second)]
        async with first, second:
            assert [await h.result() for h in handles] == [6] * 40
    assert all(t.runs for t in tallies), "each live worker closes runs"
    assert all(t.attempts for t in tallies), "each live worker runs attempts"
    assert all(t.most_runs <= 8 and t.most_attempts <= 4 for t in tallies)
    # a run that moved between workers shows up in both sets, never one in neither
    assert len(tallies[0].runs | tallies[1].runs) == 40


async def test_a_claim_takes_a_fair_share_of_the_ready_runs(pg_urls: tuple[str, str]) -> None:
    async with durable.connect(pg_urls[0]) as client:
        for i in range(10):
            await client.start(flow, 1, id=f"share-{i}")
        store, now = client.store, client.clock.now()
        for n in range(4):  # four live workers registered on the queue
            await store.register_worker(WorkerRegistration(
                worker_id=f"w{n}", namespace=client.namespace, task_queue="default",
                workflow_types=("scale_flow",), activity_names=(), capabilities=()), 60.0, now)
        got = await store.claim_runs(client.namespace, "default", "w0", ("scale_flow",), 100,
                                     30.0, now)
        assert (len(got), got.left) == (3, 7)  # ceil(10 / 4)
        got = await store.claim_runs(client.namespace, "default", "w1", ("scale_flow",), 2,
                                     30.0, now)
        assert (len(got), got.left) == (2, 5)  # its capacity is smaller than its share
        await store.deregister_worker("w2", now)
        await store.deregister_worker("w3", now)
        got = await store.claim_runs(client.namespace, "default", "w0", ("scale_flow",), 100,
                                     30.0, now)
        assert (len(got), got.left) == (3, 2)  # ceil(5 / 2)


async def _history(url: str, one_statement: bool) -> list[tuple[Any, ...]]:
    async with durable.connect(url) as client:
        client.driver.dialect.writable_cte = one_statement  # type: ignore[misc]
        handles = [await client.start(flow, 3, id=f"h-{i}") for i in range(6)]
        async with durable.Worker(client, workflows=[flow], activities=[step],
                                  max_concurrent_activities=3):
            assert [await h.result() for h in handles] == [6] * 6
        events = await rows(client, "SELECT r.workflow_id, e.seq, e.type, e.data FROM events e "
                                    "JOIN runs r ON r.run_id = e.run_id")
    return sorted((e["workflow_id"], e["seq"], e["type"], sorted(json.loads(e["data"])))
                  for e in events)


async def test_one_statement_claims_write_the_history_the_general_path_writes(
        pg_urls: tuple[str, str]) -> None:
    """Claims of runs and attempts (one statement each on PostgreSQL) number and
    fill the history as the statement-by-statement path does."""
    assert await _history(pg_urls[0], True) == await _history(pg_urls[1], False)
