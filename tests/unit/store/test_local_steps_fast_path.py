"""SQLite's fast path for local steps stores what the general commit path stores.

Every scenario runs twice, on two fresh databases: once with
`SQLiteDialect` (the fence and event counter in one ``UPDATE ... RETURNING``,
ops and events in bulk) and once with the base `Dialect` (the general path:
read the run row, fence in Python, one handler per write). The two must
leave the same rows in every table and return the same results, refusals
included (a stale epoch, a closed run, a passed deadline).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from durable_sqlite.dialect import HAS_RETURNING, SQLiteDialect

import durable
from durable import activity, workflow
from durable.driver import Dialect, Program, q
from durable.failure import Failure
from durable.store import Store, fastpath
from durable.store import commit as commit_module
from durable.store.records import CommitResult, RunRecord, RunStatus
from durable.store.writes import CloseRun, RecordLocalActivity, RunWrites, ScheduleTimer

from ._support import NS, T0, claim_one, start, started_and_claimed

pytestmark = pytest.mark.anyio

TABLES = ("runs", "workflows", "ops", "events", "failures", "activity_tasks")


@dataclass
class SpyDialect(SQLiteDialect):
    """SQLite's dialect, counting what its fast path decided."""

    recorded: list[str] = field(default_factory=list)  # run ids recorded by the fast path
    declined: list[str] = field(default_factory=list)  # fence missed: general path asked

    def local_steps(self, batch: RunWrites, now: float, *,
                    autocommit: bool) -> Program[CommitResult | None] | None:
        program = super().local_steps(batch, now, autocommit=autocommit)
        if program is None:
            return None
        inner = program

        def counted() -> Program[CommitResult | None]:
            result = yield from inner
            (self.declined if result is None else self.recorded).append(batch.run_id)
            return result

        return counted()

    def local_steps_group(self, batches: list[RunWrites], now: float
                          ) -> Program[Sequence[CommitResult | None]] | None:
        program = super().local_steps_group(batches, now)
        if program is None:
            return None
        inner = program

        def counted() -> Program[Sequence[CommitResult | None]]:
            results = yield from inner
            for batch, result in zip(batches, results, strict=True):
                (self.declined if result is None else self.recorded).append(batch.run_id)
            self.groups += 1
            return results

        return counted()

    groups: int = 0  # group programs run (`fastpath.local_steps_group_returning`)


@pytest.fixture
async def stores() -> AsyncIterator[tuple[Store, Store]]:
    """(fast, general): the same schema, two dialects."""
    async with durable.connect("sqlite://:memory:") as fast, \
            durable.connect("sqlite://:memory:") as general:
        fast.store.driver.dialect = SpyDialect()
        general.store.driver.dialect = Dialect()
        yield fast.store, general.store


def spy(store: Store) -> SpyDialect:
    dialect = store.driver.dialect
    assert isinstance(dialect, SpyDialect)
    return dialect


def step(op_id: str, result: str | None = "1", name: str = "double",
         started: float = T0, attempts: int = 1) -> RecordLocalActivity:
    return RecordLocalActivity(op_id, name, started, attempts, result)


def quiet(run: RunRecord, *writes: RecordLocalActivity, epoch: int | None = None) -> RunWrites:
    """A batch the owner marks as needing no cancellation bookkeeping (the
    fast path's precondition, as the committer sets it)."""
    return RunWrites(run.run_id, run.epoch if epoch is None else epoch, list(writes), quiet=True)


async def dump(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables a commit touches, run ids replaced by workflow ids
    (they are random per database), sorted; without the serial ``id`` of
    events and failures (a group commit writes runs in run-id order)."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    ids: dict[str, str] = {}

    def read() -> Program[None]:
        for run in (yield q("SELECT run_id, workflow_id FROM runs")):
            ids[run["run_id"]] = f"<run of {run['workflow_id']}>"
        for table in TABLES:
            rows = yield q(f"SELECT * FROM {table}")
            tables[table] = [tuple(r[k] for k in r.keys() if k != "id") for r in rows]
        return None

    await store.driver.run(lambda tx: read(), write=False)

    def norm(value: Any) -> Any:
        if isinstance(value, str):
            for run_id, name in ids.items():
                value = value.replace(run_id, name)
        return value

    return {t: sorted((tuple(norm(v) for v in r) for r in rows), key=repr)
            for t, rows in tables.items()}


def same_results(fast: list[CommitResult], general: list[CommitResult],
                 fast_runs: list[RunRecord], general_runs: list[RunRecord]) -> None:
    rename = {f.run_id: g.run_id for f, g in zip(fast_runs, general_runs, strict=True)}
    assert [CommitResult(rename[r.run_id], r.committed, r.ops, r.next_run_id) for r in fast] \
        == general


Scenario = Callable[[Store], Awaitable[tuple[list[RunRecord], list[CommitResult]]]]


async def both(stores: tuple[Store, Store], scenario: Scenario) -> list[CommitResult]:
    """Run `scenario` on both databases; assert identical rows and results."""
    fast, general = stores
    fast_runs, fast_results = await scenario(fast)
    general_runs, general_results = await scenario(general)
    same_results(fast_results, general_results, fast_runs, general_runs)
    assert await dump(fast) == await dump(general)
    return fast_results


needs_returning = pytest.mark.skipif(not HAS_RETURNING, reason="SQLite < 3.35: no RETURNING")


@needs_returning
async def test_a_batch_of_steps_stores_the_general_paths_rows(
    stores: tuple[Store, Store],
) -> None:
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        run = await started_and_claimed(store, "wf")
        results = [*await store.commit([quiet(run, step("0:1", "3"))], T0 + 1)]
        results += await store.commit([quiet(
            run,
            step("0:2", '{"total":12.5,"items":[1,2,3],"note":"d\\u00e9j\\u00e0 vu"}',
                 name="price", started=T0 + 1.5, attempts=3),
            step("0:3", None, name="notify"),
            step("1:1", "[null,true,18446744073709551616,1e-07]", name="mixed"),
        )], T0 + 2)
        return [run, run], results

    results = await both(stores, scenario)
    assert all(r.committed for r in results)
    assert spy(stores[0]).recorded and not spy(stores[0]).declined
    assert len(spy(stores[0]).recorded) == 2


@needs_returning
async def test_a_group_of_runs_takes_the_fast_path_run_by_run(
    stores: tuple[Store, Store],
) -> None:
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        a = await started_and_claimed(store, "a")
        b = await started_and_claimed(store, "b")
        c = await started_and_claimed(store, "c")
        results = await store.commit([
            quiet(b, step("0:1", '"b"')),
            RunWrites(a.run_id, a.epoch, [ScheduleTimer("0:1", T0 + 60, 59.0)]),
            quiet(c, step("0:1", '"c"'), step("0:2", '"c2"')),
        ], T0 + 1)
        return [b, a, c], results

    await both(stores, scenario)
    assert len(spy(stores[0]).recorded) == 2  # b and c; a's timer took the general path
    assert spy(stores[0]).groups == 1  # b and c in one group program, beside a's timer


@needs_returning
@pytest.mark.parametrize("refusal", ["stale_epoch", "passed_deadline", "closed"])
async def test_a_run_refused_in_a_mixed_group_takes_the_general_path_in_the_transaction(
    stores: tuple[Store, Store], refusal: str,
) -> None:
    """A group commit holding local-steps runs and a run with other writes: the
    steps go through one group program; a run of it whose fence fails has
    nothing written there and gets the general path's precise outcome in the
    same transaction (a passed deadline is enforced at once), as run by run."""
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        a = await started_and_claimed(store, "a")
        b = await started_and_claimed(store, "b", run_timeout=10.0)
        await start(store, "c", task_queue="c")
        c = (await claim_one(store, "w1", T0, lease=5.0, task_queue="c")).run
        if refusal == "stale_epoch":
            await claim_one(store, "w2", T0 + 6, task_queue="c")
        if refusal == "closed":
            await store.close_run_externally(NS, "c", None, RunStatus.TERMINATED, "test", T0 + 1)
        now = T0 + 11 if refusal == "passed_deadline" else T0 + 4
        results = await store.commit([
            quiet(c, step("0:1", '"c"')),
            RunWrites(a.run_id, a.epoch, [ScheduleTimer("0:1", T0 + 60, 59.0)]),
            quiet(b, step("0:1", '"b"'), step("0:2", '"b2"')),
        ], now)
        return [c, a, b], results

    results = await both(stores, scenario)
    refused = {"stale_epoch": "c", "closed": "c", "passed_deadline": "b"}[refusal]
    committed = [r.committed for r in results]
    assert committed == [refused != "c", True, refused != "b"]
    assert len(spy(stores[0]).declined) == 1 and spy(stores[0]).groups == 1
    if refusal == "passed_deadline":
        timed_out = await stores[0].get_run(NS, "b")
        assert timed_out is not None and timed_out.status == RunStatus.TIMED_OUT


class GroupDialect(SQLiteDialect):
    """SQLite with the portable group path (`fastpath.local_steps_group` without
    CTEs: the one MariaDB takes)."""

    groups: int = 0

    def local_steps_group(self, batches: list[RunWrites],
                          now: float) -> Program[list[CommitResult]] | None:
        GroupDialect.groups += 1
        return fastpath.local_steps_group(self, batches, now)


async def test_a_group_commit_in_five_statements_stores_the_general_paths_rows() -> None:
    """Three runs' local steps at once, one of them fenced out (a stale epoch):
    the same rows and results as run by run on the general path."""
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        a = await started_and_claimed(store, "a")
        b = await started_and_claimed(store, "b")
        await start(store, "c", task_queue="c")
        stale = (await claim_one(store, "w1", T0, lease=5.0, task_queue="c")).run
        await claim_one(store, "w2", T0 + 6, task_queue="c")
        results = await store.commit([
            quiet(b, step("0:1", '"b"'), step("0:2", '"b2"')),
            quiet(stale, step("0:1", '"c"')),
            quiet(a, step("0:1", '"a"')),
        ], T0 + 7)
        return [b, stale, a], results

    GroupDialect.groups = 0
    async with durable.connect("sqlite://:memory:") as fast, \
            durable.connect("sqlite://:memory:") as general:
        fast.store.driver.dialect = GroupDialect()
        general.store.driver.dialect = Dialect()
        results = await both((fast.store, general.store), scenario)
    assert [r.committed for r in results] == [True, False, True]
    assert GroupDialect.groups == 1


@needs_returning
async def test_a_stale_epoch_is_refused_as_on_the_general_path(
    stores: tuple[Store, Store],
) -> None:
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        await start(store, "wf")
        first = (await claim_one(store, "w1", T0, lease=5.0)).run
        await claim_one(store, "w2", T0 + 6)  # the first owner's lease ran out
        results = await store.commit([quiet(first, step("0:1"))], T0 + 7)
        return [first], results

    [result] = await both(stores, scenario)
    assert result.committed is False
    assert spy(stores[0]).declined and not spy(stores[0]).recorded


@needs_returning
async def test_a_closed_run_is_refused_as_on_the_general_path(
    stores: tuple[Store, Store],
) -> None:
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        run = await started_and_claimed(store, "wf")
        await store.close_run_externally(NS, "wf", None, RunStatus.TERMINATED, "test", T0 + 1)
        results = await store.commit([quiet(run, step("0:1"))], T0 + 2)
        return [run], results

    [result] = await both(stores, scenario)
    assert result.committed is False
    assert spy(stores[0]).declined == [result.run_id]


@needs_returning
@pytest.mark.parametrize("late", [0.0, 5.0], ids=["at_the_deadline", "after_it"])
async def test_a_passed_deadline_is_refused_and_enforced_as_on_the_general_path(
    stores: tuple[Store, Store], late: float,
) -> None:
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        run = await started_and_claimed(store, "wf", run_timeout=10.0)
        results = await store.commit([quiet(run, step("0:1"))], T0 + 10 + late)
        return [run], results

    [result] = await both(stores, scenario)
    assert result.committed is False
    timed_out = await stores[0].get_run(NS, "wf")
    assert timed_out is not None and timed_out.status == RunStatus.TIMED_OUT


@needs_returning
async def test_a_step_just_before_the_deadline_is_recorded(stores: tuple[Store, Store]) -> None:
    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        run = await started_and_claimed(store, "wf", run_timeout=10.0)
        results = await store.commit([quiet(run, step("0:1"))], T0 + 9.999)
        return [run], results

    [result] = await both(stores, scenario)
    assert result.committed
    assert spy(stores[0]).recorded


@needs_returning
async def test_an_invalid_step_fails_the_whole_transaction_as_on_the_general_path(
    stores: tuple[Store, Store],
) -> None:
    """A duplicate op id violates the ops key: nothing of the batch is kept
    (not even the event counter the fast path bumped first)."""
    outcomes = []
    for store in stores:
        run = await started_and_claimed(store, "wf")
        await store.commit([quiet(run, step("0:1"))], T0 + 1)
        with pytest.raises(Exception) as err:
            await store.commit([quiet(run, step("0:2"), step("0:1"))], T0 + 2)
        outcomes.append(type(err.value))
    assert outcomes[0] is outcomes[1]
    assert await dump(stores[0]) == await dump(stores[1])


async def test_a_batch_that_is_not_only_successful_local_steps_skips_the_fast_path(
    stores: tuple[Store, Store],
) -> None:
    fast = stores[0]
    run = await started_and_claimed(fast, "wf")
    await fast.commit([RunWrites(run.run_id, run.epoch, [step("0:1")])], T0 + 1)  # not quiet
    await fast.commit([quiet(run, RecordLocalActivity(
        "0:2", "x", T0, 1, failure=Failure("boom", "boom")))], T0 + 2)
    assert spy(fast).recorded == [] and spy(fast).declined == []


async def test_the_sqlite_driver_uses_the_fast_path_dialect() -> None:
    async with durable.connect("sqlite://:memory:") as client:
        assert isinstance(client.store.driver.dialect, SQLiteDialect)


async def test_a_worker_records_its_local_steps_through_the_fast_path(tmp_path: Any) -> None:
    """End to end: a workflow of sequential local steps is recorded by the
    fast path (spied), and its result and history are the usual ones."""

    @activity.defn(name="fast_path_double")
    async def double(i: int) -> int:
        return i * 2 + 1

    @workflow.defn(name="fast_path_steps")
    async def steps(n: int) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_local_activity(double, i)
        return total

    async with durable.connect(f"sqlite:///{tmp_path / 'fast.db'}") as client:
        dialect = SpyDialect()
        client.store.driver.dialect = dialect
        async with durable.Worker(client, workflows=[steps], activities=[double]):
            handle = await client.start(steps, 5, id="five")
            assert await handle.result() == sum(i * 2 + 1 for i in range(5))
        history = await handle.history()
    assert len(dialect.recorded) >= 1 and not dialect.declined
    completed = [e.data for e in history if e.type == "ActivityCompleted"]
    assert [e["result"] for e in completed] == [1, 3, 5, 7, 9]


async def test_without_returning_the_general_path_records_the_steps(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite before 3.35 has no RETURNING: the dialect offers no fast path."""
    monkeypatch.setattr("durable_sqlite.dialect.HAS_RETURNING", False)
    fast = stores[0]
    run = await started_and_claimed(fast, "wf")
    [result] = await fast.commit([quiet(run, step("0:1"))], T0 + 1)
    assert result.committed and set(result.ops) == {"0:1"}
    assert spy(fast).recorded == [] and spy(fast).declined == []


@needs_returning
@pytest.mark.parametrize("case", ["completed", "failed", "stale_epoch", "passed_deadline",
                                  "open_work", "with_steps"])
async def test_the_owners_close_stores_the_general_paths_rows(
    stores: tuple[Store, Store], case: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite's close by the owner (`closing.close_owned_in_one`: a fenced
    UPDATE ... RETURNING of the run's row, its close event, its instance's
    row) stores what the general close stores and publishes the same
    wake-ups; a run it cannot close so (a stale epoch, a passed deadline,
    open work) has nothing written by it and gets the general path's
    outcome in the same transaction."""
    owned: list[bool] = []
    inner = commit_module.close_owned_in_one

    def counted(*args: Any) -> Program[bool]:
        done = yield from inner(*args)
        owned.append(done)
        return done

    monkeypatch.setattr(commit_module, "close_owned_in_one", counted)

    async def scenario(store: Store) -> tuple[list[RunRecord], list[CommitResult]]:
        wakes: list[Any] = []
        unsubscribe = store.hub.subscribe(wakes.append)
        if case in ("stale_epoch", "passed_deadline"):
            await start(store, "wf", run_timeout=10.0 if case == "passed_deadline" else None)
            run = (await claim_one(store, "w1", T0, lease=5.0)).run
            if case == "stale_epoch":
                await claim_one(store, "w2", T0 + 6)
        else:
            run = await started_and_claimed(store, "wf")
        if case == "open_work":
            await store.commit([RunWrites(run.run_id, run.epoch,
                                          [ScheduleTimer("0:1", T0 + 60, 59.0)])], T0 + 1)
        if case == "with_steps":
            await store.commit([quiet(run, step("0:1", "3"))], T0 + 1)
        close = (CloseRun(RunStatus.FAILED, failure=Failure("boom", "it broke", "ValueError"))
                 if case == "failed" else CloseRun(RunStatus.COMPLETED, result='{"sum":7}'))
        results = await store.commit([RunWrites(run.run_id, run.epoch, [close])], T0 + 12)
        unsubscribe()
        seen[id(store)] = sorted(repr((w.kind, w.key, w.data)).replace(run.run_id, "<run>")
                                 for w in wakes)
        return [run], results

    seen: dict[int, list[str]] = {}
    [result] = await both(stores, scenario)
    fast, general = stores
    assert seen[id(fast)] == seen[id(general)]
    assert result.committed is (case not in ("stale_epoch", "passed_deadline"))
    # the fast store took the owned close where it could; the general store never asks
    assert owned[0] is (case in ("completed", "failed", "with_steps"))
    assert len(owned) == 1
