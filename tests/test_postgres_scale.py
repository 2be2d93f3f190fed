"""PostgreSQL at scale: set-based group commits, one-statement claims and
starts, fair claims.

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

import anyio
import pytest
from conftest import drop_postgres_schema, new_postgres_url, require_postgres

import durable
import durable.store.commit
from durable import activity, workflow
from durable.driver import Program, Stmt, Tx
from durable.failure import Failure
from durable.store.records import CommitResult, StartRequest, StartResult, WorkerRegistration
from durable.store.start_statement import start_in_one
from durable.store.writes import CloseRun, RecordLocalActivity, RunWrites, ScheduleTimer

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


async def test_a_claim_takes_no_more_than_its_limit_after_the_runs_table_was_emptied(
        pg_urls: tuple[str, str]) -> None:
    """The one-statement claim picks its runs (LIMIT, FOR UPDATE SKIP LOCKED)
    once. It read ``UPDATE runs ... WHERE run_id IN (pick)``: once the runs
    table had been emptied and analyzed (retention's pruning, autovacuum), the
    planner guessed one row and ran the pick again for every row it scanned,
    each time skipping the rows the statement had just updated, so a claim of
    2 took all 30 ready runs (a worker's capacity and fair share overrun)."""
    async with durable.connect(pg_urls[0]) as client:
        for i in range(200):
            await client.start(flow, 1, id=f"pruned-{i}", task_queue="old")
        await rows(client, "DELETE FROM runs")
        await rows(client, "DELETE FROM workflows")
        await rows(client, "ANALYZE runs")
        for i in range(30):
            await client.start(flow, 1, id=f"ready-{i}")
        store, now = client.store, client.clock.now()
        got = await store.claim_runs(client.namespace, "default", "w0", ("scale_flow",), 2,
                                     30.0, now)
        assert len(got) == 2
        owned = await rows(client, "SELECT count(*) AS n FROM runs WHERE owner = 'w0'")
        assert owned == [{"n": 2}]


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


# ---------------------------------------------------------------- one-statement starts


def _request(wid: str, **options: Any) -> StartRequest:
    options = {"execution_timeout": None, "run_timeout": None, **options}
    return StartRequest(namespace="default", workflow_id=wid, workflow_type="scale_flow",
                        task_queue="default", input="[3]", id_reuse="reject_duplicate",
                        **options)


_STARTS = [
    _request("plain"),
    _request("timed", execution_timeout=30.0, run_timeout=10.0, memo='{"k": "v"}',
             priority=2, concurrency_key="key-1"),
    _request("scheduled", schedule_id="every-minute", scheduled_at=_NOW - 60,
             cancellation={"deadline_at": _NOW + 5, "lifecycle": "requested"},
             cleanup_timeout=4.0),
]


async def _started(url: str, one_statement: bool) -> dict[str, Any]:
    """Start `_STARTS` at `_NOW`; what was stored, run ids replaced by workflow ids."""
    async with durable.connect(url) as client:
        client.driver.dialect.writable_cte = one_statement  # type: ignore[misc]
        results = [await client.store.start_workflow(r, _NOW) for r in _STARTS]
        wid_of = {s.run_id: r.workflow_id for s, r in zip(results, _STARTS, strict=True)}
        workflows = await rows(client, "SELECT * FROM workflows")
        runs = await rows(client, "SELECT * FROM runs")
        events = await rows(client, "SELECT * FROM events")
    for row in workflows:
        row["current_run_id"] = wid_of[row["current_run_id"]]
    for row in [*runs, *events]:
        row["run_id"] = wid_of[row["run_id"]]
        row.pop("id", None)
    return {"results": [(wid_of[s.run_id], s.created, s.status) for s in results],
            "workflows": {r["workflow_id"]: r for r in workflows},
            "runs": {r["run_id"]: r for r in runs},
            "events": {(r["run_id"], r["seq"]): r for r in events}}


async def test_a_one_statement_start_stores_what_the_general_start_stores(
        pg_urls: tuple[str, str]) -> None:
    one = await _started(pg_urls[0], True)
    assert one == await _started(pg_urls[1], False)
    assert [r[1:] for r in one["results"]] == [(True, "pending")] * 3
    assert len(one["events"]) == 3


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the test's own asyncpg connection
async def test_a_start_is_one_round_trip_that_wakes_the_queues_listeners(
        pg_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch, anyio_backend: str) -> None:
    """BEGIN, a locking read, three INSERTs and NOTIFY + COMMIT were six round
    trips: one statement now, which sends the queue's notification itself, to
    a process that listens on the queue's channel (no worker of the queue
    can be addressed: `durable_postgres.addressing`). The queue's members
    are read at most once a second, by the first start here."""
    import asyncpg
    import asyncpg.connection
    from durable_postgres.listener import channel_for

    from durable.wakes import Wake, address

    async with durable.connect(pg_urls[0]) as client:
        driver: Any = client.driver
        channel = channel_for(driver.channel, address(Wake.runs(client.namespace, "default").key))
        heard: list[Any] = []
        listener = await asyncpg.connect(pg_urls[0].split("?")[0])
        await listener.add_listener(channel, lambda *args: heard.append(json.loads(args[3])))
        monkeypatch.setattr("durable_postgres.addressing.REFRESH", 600.0)  # a slow box
        await client.start(flow, 3, id="first")  # reads the queue's members
        assert driver.addressing.reads == 1
        with anyio.fail_after(5):
            while not heard:
                await anyio.sleep(0.01)
        heard.clear()
        sent: list[str] = []
        for name in ("execute", "fetch", "fetchrow", "fetchval", "executemany", "prepare"):
            original = getattr(asyncpg.connection.Connection, name)

            def counted(self: Any, query: str, *args: Any, _original: Any = original,
                        **kwargs: Any) -> Any:
                sent.append(query)
                return _original(self, query, *args, **kwargs)

            monkeypatch.setattr(asyncpg.connection.Connection, name, counted)
        try:
            await client.start(flow, 3, id="once")
            monkeypatch.undo()
            with anyio.fail_after(5):
                while not heard:
                    await anyio.sleep(0.01)
        finally:
            await listener.close()
    assert len(sent) == 1 and sent[0].startswith("WITH existing AS")
    # "n": the start brings no deadline (durable.wakes.NO_DEADLINE)
    assert heard == [{"o": driver.origin, "k": [["runs", client.namespace, "default"]],
                      "n": [0]}]


async def test_a_start_tells_the_other_processes_whether_it_brings_a_deadline(
        pg_urls: tuple[str, str], anyio_backend: str) -> None:
    """Every process of a queue hears every start, and its watchdog re-read the
    namespace's next deadline for each (N processes, N reads a start). A start
    without timeouts says it brings none, so they do not; one with a timeout
    does not say so, and they still look."""
    from durable.wakes import Wake, WakeKind

    async with durable.connect(pg_urls[0]) as starter, durable.connect(pg_urls[0]) as other:
        heard: list[Wake] = []
        connected = anyio.Event()

        def on_wake(wake: Wake) -> None:
            if wake.kind is WakeKind.ANY:
                connected.set()  # its listener is connected: LISTENs sent
            elif wake.kind is WakeKind.RUNS and wake.remote:
                heard.append(wake)

        other.driver.hub.subscribe(on_wake)
        stop_wanting = other.driver.hub.want([Wake.runs(other.namespace, "default").key])
        async with anyio.create_task_group() as tg:
            tg.start_soon(other.driver.watch)
            with anyio.fail_after(10):
                await connected.wait()
                await starter.start(flow, 1, id="no-deadline")
                while len(heard) < 1:
                    await anyio.sleep(0.01)
                await starter.start(flow, 1, id="timed", options=durable.StartOptions(
                    execution_timeout=3600))
                while len(heard) < 2:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        stop_wanting()
    assert [w.key for w in heard] == [("runs", other.namespace, "default")] * 2
    assert [w.brings_deadline for w in heard] == [False, True]


async def test_an_outcome_for_a_run_executed_here_is_not_sent_to_other_processes(
        pg_urls: tuple[str, str], anyio_backend: str) -> None:
    """A remote activity's outcome is news for its run's executor: while that
    runs in this process, no NOTIFY (one per step before, read by nobody,
    waking every listening backend, queueing every notifying commit on the
    server's notification lock). The run's close is still sent: a waiter in
    another process hears it."""
    from durable.wakes import WakeKind

    async with (durable.connect(pg_urls[0]) as here,
                durable.connect(pg_urls[0], poll_interval=60) as elsewhere):
        driver: Any = here.driver
        sent: list[tuple[str, ...]] = []
        notifications = driver._notifications

        def counted(wakes: Any) -> Any:
            wakes = list(wakes)
            sent.extend(w.key for w in wakes)
            return notifications(wakes)

        driver._notifications = counted
        async with durable.Worker(here, workflows=[flow], activities=[step]):
            handle = await here.start(flow, 3, id="steps")
            with anyio.fail_after(20):  # the close reaches the other process's waiter
                assert await elsewhere.get_handle("steps").result() == 6
    run_keys = [k for k in sent if k[0] == WakeKind.RUN]
    assert run_keys == [("run", handle.run_id)]  # the close only, not the 3 outcomes


async def test_a_one_statement_start_keeps_every_id_reuse_policy(
        pg_urls: tuple[str, str]) -> None:
    async with durable.connect(pg_urls[0]) as client:
        first = await client.start(flow, 1, id="again")
        with pytest.raises(durable.WorkflowAlreadyStarted):
            await client.start(flow, 1, id="again")
        same = await client.start(flow, 1, id="again",
                                  options=durable.StartOptions.return_existing_active())
        assert same.run_id == first.run_id
        await first.terminate("to start it again")
        with pytest.raises(durable.WorkflowAlreadyStarted):  # reject_duplicate, closed
            await client.start(flow, 1, id="again")
        policy = durable.StartOptions(id_reuse=durable.IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY)
        second = await client.start(flow, 1, id="again", options=policy)  # the general path
        assert second.run_id != first.run_id
        assert (await client.store.get_run(client.namespace, "again")).run_id == second.run_id


async def test_a_start_retried_after_its_answer_was_lost_finds_its_own_run(
        pg_urls: tuple[str, str]) -> None:
    """The statement commits on its own: when its connection breaks after the
    commit, the driver retries it, and the retry finds the instance there.
    With the same run id (fixed per start), that is this start: started, not
    WorkflowAlreadyStarted."""
    async with durable.connect(pg_urls[0]) as client:
        request = _request("lost")
        first = await client.driver.run(lambda tx: start_in_one(tx, request, "run-lost", _NOW))
        again = await client.driver.run(lambda tx: start_in_one(tx, request, "run-lost", _NOW))
        assert first == again == StartResult("run-lost", True, "pending")
        with pytest.raises(durable.WorkflowAlreadyStarted):
            await client.driver.run(lambda tx: start_in_one(tx, request, "run-other", _NOW))


# ---------------------------------------------------------------- one-statement closes


async def _closed(url: str, one_statement: bool) -> dict[str, Any]:
    """Runs closed by their owner's commits at `_NOW`: completed alone (the
    owner's one-statement close) and after a last local step (its events go
    with the close's), failed, one with a timer open (the one-statement
    closes write nothing for it: the general close settles the timer), one
    continued as new and one with a cancellation record (always the general
    close), one whose owner is stale, one past its deadline (refused, the
    general path says why). What was stored and the commits' outcomes, run
    ids replaced by workflow ids (and the next run's by "next")."""
    async with durable.connect(url) as client:
        ids = ["plain", "done", "failed", "timer", "continued", "cancelling", "stale", "late"]
        for wid in ids:
            await client.store.start_workflow(_request(wid), _NOW - 10)
        claimed = await client.store.claim_runs(
            client.namespace, "default", "tester", ("scale_flow",), 10, 60.0, _NOW - 1)
        client.driver.dialect.writable_cte = one_statement  # type: ignore[misc]
        run_of = {c.run.workflow_id: c.run for c in claimed}
        await rows(client, "UPDATE runs SET cancellation = ? WHERE run_id = ? RETURNING run_id",
                   '{"lifecycle": "requested", "reason": "asked"}', run_of["cancelling"].run_id)
        await rows(client, "UPDATE runs SET deadline_at = ? WHERE run_id = ? RETURNING run_id",
                   _NOW - 5, run_of["late"].run_id)
        failure = Failure.from_exception(ValueError("no"))
        writes: dict[str, list[Any]] = {
            "plain": [CloseRun("completed", '"p"')],
            "done": [RecordLocalActivity("0.0", "scale_step", _NOW - 0.5, 1, "1"),
                     CloseRun("completed", "1")],
            "failed": [CloseRun("failed", None, failure)],
            "timer": [ScheduleTimer("0.1", _NOW + 60, 60.0), CloseRun("completed", "2")],
            "continued": [CloseRun("continued", continue_input="[2]")],
            "cancelling": [CloseRun("cancelled", None, failure)],
            "stale": [CloseRun("completed", "3")],
            "late": [CloseRun("completed", "4")],
        }
        committed = {}
        for wid in ids:  # one commit each: a close alone or with its run's last writes
            run = run_of[wid]
            [result] = await client.store.commit(
                [RunWrites(run.run_id, run.epoch - (wid == "stale"), writes[wid])], _NOW)
            committed[wid] = result.committed
        wid_of = {run.run_id: wid for wid, run in run_of.items()}
        for row in await rows(client, "SELECT run_id FROM runs WHERE run_number = 2"):
            wid_of[row["run_id"]] = "next"
        tables = {t: await rows(client, f"SELECT * FROM {t}")
                  for t in ("workflows", "runs", "events", "ops", "failures")}
    for table in tables.values():
        for row in table:
            row.pop("id", None)
            for column in ("run_id", "current_run_id", "continued_run_id"):
                if row.get(column) is not None:
                    row[column] = wid_of[row[column]]
            if row.get("data") and "new_run_id" in row["data"]:
                row["data"] = row["data"].replace(row["data"].split('"new_run_id":"')[1][:32],
                                                  "next")
    return {"committed": committed,
            **{name: sorted(sorted((k, str(v)) for k, v in r.items()) for r in table)
               for name, table in tables.items()}}


async def test_a_one_statement_close_stores_what_the_general_close_stores(
        pg_urls: tuple[str, str]) -> None:
    one = await _closed(pg_urls[0], True)
    assert one == await _closed(pg_urls[1], False)
    status = {dict(r)["workflow_id"]: dict(r)["status"] for r in one["workflows"]}
    assert status == {"plain": "completed", "done": "completed", "failed": "failed",
                      "timer": "completed", "continued": "pending", "cancelling": "cancelled",
                      "stale": "running", "late": status["late"]}
    assert one["committed"] == {**{wid: True for wid in status}, "stale": False, "late": False}
    assert ("type", "TimerCancelled") in {pair for e in one["events"] for pair in e}


# ---------------------------------------------------------------- groups with other writes


async def _mixed(client: durable.Client, per_run: bool,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], dict[str, Any]]:
    """Seven runs in one group commit: two record local steps, one is stale,
    one past its deadline, one closed, one closes now after a last step, one schedules
    a timer. `per_run`: the group's one statement records nothing (every run
    by the general path, as before it). What was stored, by workflow id."""
    ids = [f"m-{i}" for i in range(7)]
    for wid in ids:
        await client.store.start_workflow(_request(wid), _NOW - 10)
    claimed = await client.store.claim_runs(
        client.namespace, "default", "tester", ("scale_flow",), 10, 60.0, _NOW - 1)
    run_of = {c.run.workflow_id: c.run for c in claimed}
    wid_of = {run.run_id: wid for wid, run in run_of.items()}
    await rows(client, "UPDATE runs SET deadline_at = ? WHERE run_id = ? RETURNING run_id",
               _NOW - 5, run_of["m-3"].run_id)
    await rows(client, "UPDATE runs SET status = 'completed' WHERE run_id = ? RETURNING run_id",
               run_of["m-4"].run_id)

    def step_of(wid: str, k: int) -> RecordLocalActivity:
        return RecordLocalActivity(f"0.{k}", "scale_step", _NOW - 0.5 + k / 10, 1, f'"{wid}"')

    writes: dict[str, list[Any]] = {wid: [step_of(wid, 0), step_of(wid, 1)] for wid in ids}
    writes["m-5"] = [step_of("m-5", 0), CloseRun("completed", '"m-5"')]
    writes["m-6"] = [ScheduleTimer("0.9", _NOW + 60, 60.0)]
    batches = [RunWrites(run_of[wid].run_id, run_of[wid].epoch - (wid == "m-2"), writes[wid],
                         quiet=True) for wid in ids]
    grouped: list[int] = []
    original = durable.store.commit.local_steps_in_group

    def spy(batches: list[RunWrites], now: float, others: list[str]
            ) -> Program[list[CommitResult]]:
        grouped.append(len(batches))
        if not per_run:
            return (yield from original(batches, now, others))
        return [CommitResult(b.run_id, False) for b in batches]  # nothing recorded

    monkeypatch.setattr(durable.store.commit, "local_steps_in_group", spy)
    results = await client.store.commit(batches, _NOW)
    monkeypatch.undo()
    assert grouped == [5]  # m-0 .. m-4: the steps-only batches
    stored = {t: sorted(sorted((k, str(wid_of.get(v, v))) for k, v in r.items() if k != "id")
                        for r in await rows(client, f"SELECT * FROM {t}"))
              for t in ("runs", "ops", "events", "workflows")}
    return [(wid_of[r.run_id], r.committed, r.ops) for r in results], stored


async def test_a_group_with_other_writes_stores_what_run_by_run_stores(
        pg_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    async with durable.connect(pg_urls[0]) as grouped, durable.connect(pg_urls[1]) as single:
        results, stored = await _mixed(grouped, False, monkeypatch)
        expected_results, expected_stored = await _mixed(single, True, monkeypatch)
    assert results == expected_results
    assert stored == expected_stored
    assert [committed for _, committed, _ in results] == [True, True, False, False, False,
                                                          True, True]
    statuses = {dict(r)["workflow_id"]: dict(r)["status"] for r in stored["runs"]}
    assert statuses["m-5"] == "completed" and statuses["m-0"] == "running"
