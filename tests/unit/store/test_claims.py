"""Ownership: claiming runs (epoch bump, lease, capabilities), renewing, releasing."""

from __future__ import annotations

import json

import pytest

from durable.store import Store
from durable.store.records import AttemptStatus, RunStatus
from durable.store.writes import CloseRun, ScheduleTimer

from ._support import (
    CAPS,
    NS,
    T0,
    WF,
    claim_one,
    commit,
    current,
    events_of,
    row,
    schedule,
    start,
    started_and_claimed,
    task_of,
)

pytestmark = pytest.mark.anyio


async def test_a_claim_bumps_the_epoch_and_takes_a_lease(store: Store) -> None:
    run_id = await start(store, "wf")
    claimed = await claim_one(store, "w1", T0 + 1, lease=30.0)
    run = claimed.run
    assert (run.run_id, run.owner, run.epoch, run.status) == (
        run_id, "w1", 1, RunStatus.RUNNING)
    assert run.started_at == T0 + 1
    assert claimed.ops == {}
    stored = await row(store, "SELECT lease_expires_at, claim_capabilities FROM runs")
    assert stored["lease_expires_at"] == T0 + 31
    assert json.loads(stored["claim_capabilities"]) == list(CAPS)
    instance = await row(store, "SELECT status FROM workflows WHERE workflow_id = 'wf'")
    assert instance["status"] == RunStatus.RUNNING


async def test_a_leased_run_is_not_claimed_again_until_the_lease_expires(store: Store) -> None:
    await start(store, "wf")
    await claim_one(store, "w1", T0, lease=30.0)
    assert await store.claim_runs(NS, "default", "w2", (WF,), 10, 30.0, T0 + 29.9) == []
    taken = await claim_one(store, "w2", T0 + 30.0)
    assert (taken.run.owner, taken.run.epoch) == ("w2", 2)
    assert taken.run.started_at == T0  # first start kept


async def test_claims_take_only_matching_runnable_runs_up_to_the_limit(store: Store) -> None:
    for i in range(3):
        await start(store, f"wf-{i}", T0 + i)
    await start(store, "other-type", workflow_type="another_flow")
    await start(store, "other-queue", task_queue="elsewhere")
    assert await store.claim_runs(NS, "default", "w", (WF,), 0, 30.0, T0 + 9) == []
    assert await store.claim_runs(NS, "default", "w", (), 5, 30.0, T0 + 9) == []
    assert await store.claim_runs(NS, "default", "w", (WF,), 5, 30.0, T0 - 1) == []  # not ready
    assert await store.claim_runs("other-ns", "default", "w", (WF,), 5, 30.0, T0 + 9) == []
    first = await store.claim_runs(NS, "default", "w", (WF,), 2, 30.0, T0 + 9)
    assert [c.run.workflow_id for c in first] == ["wf-0", "wf-1"]  # oldest ready first
    rest = await store.claim_runs(NS, "default", "w", (WF, "another_flow"), 5, 30.0, T0 + 9)
    assert sorted(c.run.workflow_id for c in rest) == ["other-type", "wf-2"]


async def test_a_claim_carries_the_runs_recorded_ops_for_replay(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, ScheduleTimer("0:1", T0 + 60, 60.0))
    taken = await claim_one(store, "w2", T0 + 100, task_queue="wf")  # the lease ran out
    assert list(taken.ops) == ["0:1"]
    assert (taken.ops["0:1"].kind, taken.ops["0:1"].fire_at) == ("timer", T0 + 60)


async def test_renewing_extends_the_leases_the_worker_still_holds(store: Store) -> None:
    mine = await started_and_claimed(store, "mine", worker="w1")
    theirs = await started_and_claimed(store, "theirs", worker="w2")
    await commit(store, mine, schedule("0:1"))
    [task] = await store.claim_activities(NS, "default", "w1", ("ship",), 1, 10.0, T0)
    owned = await store.renew_leases("w1", [mine.run_id, theirs.run_id, "gone"], 30.0, T0 + 20)
    assert owned == {mine.run_id}
    lease = await row(store, "SELECT lease_expires_at FROM runs WHERE run_id = ?", mine.run_id)
    assert lease["lease_expires_at"] == T0 + 50
    other = await row(store, "SELECT lease_expires_at FROM runs WHERE run_id = ?",
                      theirs.run_id)
    assert other["lease_expires_at"] == T0 + 30  # untouched
    attempt = await task_of(store, task.task_id)
    assert attempt["lease_expires_at"] == T0 + 50  # running attempts renew with the runs
    assert attempt["deadline_at"] == T0 + 50


async def test_a_closed_run_is_no_longer_owned(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    assert await store.renew_leases("w1", [run.run_id], 30.0, T0 + 1) == set()


async def test_releasing_hands_runs_and_attempts_back_without_using_a_retry(
    store: Store,
) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", start_to_close_timeout=60))
    [task] = await store.claim_activities(NS, "default", "w1", ("ship",), 1, 10.0, T0)
    await store.release_runs("w1", [run.run_id], T0 + 5)
    released = await current(store, "wf")
    assert released.owner is None and released.epoch == 1
    attempt = await task_of(store, task.task_id)
    assert (attempt["status"], attempt["attempt"], attempt["owner"]) == (
        AttemptStatus.PENDING, 1, None)
    assert attempt["available_at"] == T0 + 5 and attempt["start_to_close_deadline"] is None
    [event] = await events_of(store, run.run_id, "ActivityAttemptReleased")
    assert event == {"op_id": "0:1", "task_id": task.task_id, "attempt": 1,
                     "worker_id": "w1", "reason": "worker shutdown"}
    late = await store.complete_activity(task.task_id, 1, "w1", '"x"', None, T0 + 6)
    assert late.status == "refused"  # the old attempt's result no longer counts
    again = await claim_one(store, "w2", T0 + 6, task_queue="wf")  # no lease to wait out
    assert again.run.epoch == 2


async def test_releasing_runs_only_can_leave_attempts_running(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1"))
    [task] = await store.claim_activities(NS, "default", "w1", ("ship",), 1, 10.0, T0)
    await store.release_runs("w1", [run.run_id], T0 + 1, attempts=False)
    assert (await task_of(store, task.task_id))["status"] == AttemptStatus.RUNNING


# ---------------------------------------------------------------- builds (the upgrade gate)


async def test_the_first_claim_records_its_build_a_later_one_leaves_it(store: Store) -> None:
    await start(store, "wf")
    [first] = await store.claim_runs(NS, "default", "w1", (WF,), 1, 30.0, T0, build_id="v1")
    assert (first.run.started_build, first.run.last_build) == ("v1", "v1")
    [again] = await store.claim_runs(NS, "default", "w2", (WF,), 1, 30.0, T0 + 31,
                                     build_id="v2")
    # another build's claim: recorded only once its replay check passed
    assert (again.run.epoch, again.run.started_build, again.run.last_build) == (2, "v1", "v1")
    assert await store.take_for_build(again.run.run_id, 2, "v2")
    stored = await row(store, "SELECT started_build, last_build, blocked_build FROM runs")
    assert stored == {"started_build": "v1", "last_build": "v2", "blocked_build": None}
    assert not await store.take_for_build(again.run.run_id, 1, "v3")  # a stale claim


async def test_a_blocked_run_is_handed_back_and_not_claimed_by_that_build(store: Store) -> None:
    await start(store, "wf")
    await store.claim_runs(NS, "default", "w1", (WF,), 1, 30.0, T0, build_id="v1")
    [claimed] = await store.claim_runs(NS, "default", "w2", (WF,), 1, 30.0, T0 + 31,
                                       build_id="v2")
    run = claimed.run
    assert not await store.block_run(run.run_id, run.epoch, "w-other", "v2", "x", [])  # not owner
    assert await store.block_run(run.run_id, run.epoch, "w2", "v2", "asked for b at 0:1", [])
    stored = await row(store, "SELECT owner, lease_expires_at, blocked_build, blocked_divergence "
                              "FROM runs")
    assert stored == {"owner": None, "lease_expires_at": None, "blocked_build": "v2",
                      "blocked_divergence": "asked for b at 0:1"}
    assert await store.claim_runs(NS, "default", "w3", (WF,), 1, 30.0, T0 + 32,
                                  build_id="v2") == []
    [old] = await store.claim_runs(NS, "default", "w4", (WF,), 1, 30.0, T0 + 32, build_id="v1")
    assert old.run.blocked_build == "v2"  # still refused by v2 while v1 runs it
    info = await store.describe(NS, "wf", None)
    assert info is not None and info["blocked"] == {
        "build_id": "v2", "divergence": "asked for b at 0:1", "build_ids": ["v2"],
        "last_build": "v1"}
    await store.release_runs("w4", [old.run.run_id], T0 + 33)
    # another build refuses it too: it joins the refusals, it does not replace v2's
    [v4] = await store.claim_runs(NS, "default", "w6", (WF,), 1, 30.0, T0 + 33,
                                  build_id="v4")
    assert v4.run.blocked_builds == "\nv2\n"
    assert await store.block_run(v4.run.run_id, v4.run.epoch, "w6", "v4", "asked for c at 0:1",
                                 ["v2"])
    for build in ("v2", "v4"):
        assert await store.claim_runs(NS, "default", "w7", (WF,), 1, 30.0, T0 + 34,
                                      build_id=build) == []
    info = await store.describe(NS, "wf", None)
    assert info is not None and info["blocked"] == {
        "build_id": "v4", "divergence": "asked for c at 0:1", "build_ids": ["v2", "v4"],
        "last_build": "v1"}
    # a worker of an older durable (schema 12's code) records only the last
    # refusal: it is one of them too, and the next refusal keeps it
    await store.driver.run(lambda tx: _last_refusal("v5"))
    info = await store.describe(NS, "wf", None)
    assert info is not None and info["blocked"]["build_ids"] == ["v2", "v4", "v5"]
    [v6] = await store.claim_runs(NS, "default", "w8", (WF,), 1, 30.0, T0 + 35, build_id="v6")
    assert await store.block_run(v6.run.run_id, v6.run.epoch, "w8", "v6", "d",
                                 ["v2", "v4", "v5"])
    stored = await row(store, "SELECT blocked_build, blocked_builds FROM runs")
    assert stored == {"blocked_build": "v6", "blocked_builds": "\nv2\nv4\nv5\nv6\n"}
    [v3] = await store.claim_runs(NS, "default", "w5", (WF,), 1, 30.0, T0 + 34, build_id="v3")
    assert await store.take_for_build(v3.run.run_id, v3.run.epoch, "v3")  # v3 replays it
    info = await store.describe(NS, "wf", None)
    assert info is not None and info["blocked"] is None


def _last_refusal(build: str):  # type: ignore[no-untyped-def]
    """What a worker of schema 12's code writes when it refuses a run."""
    from durable.driver import ex

    yield ex("UPDATE runs SET blocked_build = ?, blocked_divergence = 'x', owner = NULL", build)
