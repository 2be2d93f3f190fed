"""Reading back a write whose outcome is unknown (its connection lost while it
was on the wire: PostgreSQL's self-committing statements, a lost COMMIT).

`Store.settle_commit` tells a batch of local steps that landed from one that
did not by its ops, and sends the latter again; `runs.started_run` finds a
start's run by its fixed id; `claims.release_strays` hands back what a worker
owns but does not run.
tests/test_postgres.py cuts a real connection for each; these pin the
read-backs themselves on SQLite.
"""

from __future__ import annotations

import pytest

from durable.driver import Program, Row, Tx, q
from durable.store import Store, runs
from durable.store.records import OpStatus, RunRecord
from durable.store.writes import RecordLocalActivity, RunWrites, ScheduleTimer

from ._support import T0, claim_one, started_and_claimed

pytestmark = pytest.mark.anyio


def steps(run: RunRecord, *op_ids: str, epoch: int | None = None) -> RunWrites:
    writes = [RecordLocalActivity(op_id, "step", T0, 1, f'"{op_id}"') for op_id in op_ids]
    return RunWrites(run.run_id, run.epoch if epoch is None else epoch, list(writes), quiet=True)


async def column(store: Store, sql: str, *params: object) -> list[object]:
    def program(tx: Tx) -> Program[list[Row]]:
        rows: list[Row] = yield q(sql, *params)
        return rows

    return [r[0] for r in await store.driver.run(program, write=False)]


async def ops_of(store: Store, run_id: str) -> list[object]:
    return await column(store, "SELECT op_id FROM ops WHERE run_id = ? ORDER BY op_id", run_id)


async def test_a_batch_that_landed_is_reported_landed_and_not_sent_again(store: Store) -> None:
    run = await started_and_claimed(store)
    batch = steps(run, "a", "b")
    [sent] = await store.commit([batch], T0)
    assert sent.committed
    # the answer was lost: read back
    settled = await store.settle_commit([batch], T0 + 1)
    assert settled is not None
    [result] = settled
    assert result.committed and sorted(result.ops) == ["a", "b"]
    assert result.ops["a"].status == OpStatus.COMPLETED and result.ops["a"].result == '"a"'
    assert await ops_of(store, run.run_id) == ["a", "b"]  # once
    assert await column(store, "SELECT type FROM events WHERE run_id = ? ORDER BY seq",
                        run.run_id) == ["WorkflowStarted", *["ActivityScheduled",
                                                             "ActivityCompleted"] * 2]


async def test_a_batch_that_did_not_land_is_sent_again(store: Store) -> None:
    run = await started_and_claimed(store)
    batch = steps(run, "a")
    settled = await store.settle_commit([batch], T0)
    assert settled is not None and settled[0].committed and list(settled[0].ops) == ["a"]
    assert await ops_of(store, run.run_id) == ["a"]


async def test_a_run_taken_over_meanwhile_is_refused(store: Store) -> None:
    run = await started_and_claimed(store)
    settled = await store.settle_commit([steps(run, "a", epoch=run.epoch - 1)], T0)
    assert settled is not None and not settled[0].committed
    assert await ops_of(store, run.run_id) == []


async def test_what_cannot_be_told_apart_stays_unknown(store: Store) -> None:
    run = await started_and_claimed(store)
    other = RunWrites(run.run_id, run.epoch, [ScheduleTimer("t", T0 + 10, 10.0)], quiet=True)
    assert await store.settle_commit([other], T0) is None  # not local steps only
    [done] = await store.commit([steps(run, "a")], T0)
    assert done.committed
    # part of a batch there: not something one statement leaves
    assert await store.settle_commit([steps(run, "a", "b")], T0) is None


async def test_a_start_is_found_by_its_run_id(store: Store) -> None:
    run = await started_and_claimed(store)
    found = await store.driver.run(lambda tx: runs.started_run(run.run_id), write=False)
    assert found is not None and found.run_id == run.run_id and found.created
    assert await store.driver.run(lambda tx: runs.started_run("no-such-run"),
                                  write=False) is None


async def test_runs_owned_but_not_running_are_handed_back(store: Store) -> None:
    running = await started_and_claimed(store, "wf-1", worker="w9")
    stray = await started_and_claimed(store, "wf-2", worker="w9")
    other = await started_and_claimed(store, "wf-3", worker="w-other")
    assert await store.release_strays("w9", frozenset({running.run_id})) == [stray.run_id]
    owners = await column(store, "SELECT owner FROM runs WHERE run_id IN (?, ?, ?) "
                          "ORDER BY workflow_id", running.run_id, stray.run_id, other.run_id)
    assert owners == ["w9", None, "w-other"]
    # claimable at once (its lease gone with its owner), epoch bumped again
    again = await claim_one(store, "w1", task_queue="wf-2")
    assert again.run.run_id == stray.run_id and again.run.epoch == stray.epoch + 1
    assert await store.release_strays("w9", frozenset({running.run_id})) == []


async def test_a_group_is_settled_run_by_run(store: Store) -> None:
    one = await started_and_claimed(store, "wf-1")
    two = await started_and_claimed(store, "wf-2")
    landed, lost = steps(one, "a"), steps(two, "b")
    [done] = await store.commit([landed], T0)
    assert done.committed
    # a group of both whose answer was lost: the first landed, the second did not
    settled = await store.settle_commit([landed, lost], T0)
    assert settled is not None and [r.run_id for r in settled] == [one.run_id, two.run_id]
    assert all(r.committed for r in settled) and list(settled[1].ops) == ["b"]
    assert await ops_of(store, one.run_id) == ["a"] and await ops_of(store, two.run_id) == ["b"]
