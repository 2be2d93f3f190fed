"""The owner's commit: each write type's handler, the fence, the deadline check."""

from __future__ import annotations

import typing

import pytest

from durable.failure import Failure
from durable.store import Store
from durable.store.commit import HANDLERS
from durable.store.records import AttemptStatus, OpKind, OpStatus, RunStatus
from durable.store.writes import (
    FireTimer,
    RecordLocalActivity,
    RunWrites,
    ScheduleChild,
    ScheduleTimer,
    Write,
)

from ._support import (
    NS,
    T0,
    Wakes,
    claim_one,
    commit,
    current,
    events_of,
    op_of,
    request,
    rows,
    schedule,
    start,
    started_and_claimed,
    task_of,
    types,
)

pytestmark = pytest.mark.anyio


def test_every_write_type_has_exactly_one_handler() -> None:
    assert set(HANDLERS) == set(typing.get_args(Write))


async def test_scheduling_an_activity_creates_its_op_and_first_attempt(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    wakes = Wakes(store)
    result = await commit(store, run, schedule(
        "0:1", "ship", "task-1", "shipping", schedule_to_start_timeout=10,
        schedule_to_close_timeout=100, start_to_close_timeout=30), now=T0 + 1)
    assert result.committed and result.ops == {}  # nothing closed yet
    op = await op_of(store, run.run_id, "0:1")
    assert (op["kind"], op["name"], op["status"], op["task_id"]) == (
        OpKind.ACTIVITY, "ship", OpStatus.SCHEDULED, "task-1")
    task = await task_of(store, "task-1")
    assert (task["status"], task["attempt"], task["task_queue"], task["input"]) == (
        AttemptStatus.PENDING, 1, "shipping", '["box"]')
    assert task["schedule_to_start_deadline"] == T0 + 11
    assert task["schedule_to_close_deadline"] == T0 + 101
    assert task["deadline_at"] == T0 + 11
    [event] = await events_of(store, run.run_id, "ActivityScheduled")
    assert (event["op_id"], event["task_queue"], event["local"]) == ("0:1", "shipping", False)
    assert event["start_to_close_timeout"] == 30.0
    assert event["retry_policy"]["max_attempts"] == 3
    assert ("activities", NS, "shipping") in wakes.keys()


async def test_a_local_activity_records_its_outcome_in_one_write(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    result = await commit(store, run, RecordLocalActivity("0:1", "charge", T0, 2, '"ok"'),
                          now=T0 + 3)
    op = result.ops["0:1"]
    assert (op.kind, op.status, op.result, op.scheduled_at, op.closed_at) == (
        OpKind.LOCAL_ACTIVITY, OpStatus.COMPLETED, '"ok"', T0, T0 + 3)
    assert (await types(store, run.run_id))[-2:] == ["ActivityScheduled", "ActivityCompleted"]
    [done] = await events_of(store, run.run_id, "ActivityCompleted")
    assert done == {"op_id": "0:1", "activity_type": "charge", "local": True, "attempt": 2,
                    "result": "ok"}


async def test_a_failed_local_activity_is_recorded_and_listed_as_a_failure(
    store: Store,
) -> None:
    run = await started_and_claimed(store, "wf")
    failure = Failure.from_exception(RuntimeError("card declined"))
    timeout = Failure.local_timeout("start_to_close", "slow", 1)
    result = await commit(store, run, RecordLocalActivity("0:1", "charge", T0, 3, None, failure),
                          RecordLocalActivity("0:2", "slow", T0, 1, None, timeout))
    assert result.ops["0:1"].status == OpStatus.FAILED
    assert result.ops["0:1"].failure == failure
    [failed] = await events_of(store, run.run_id, "ActivityFailed")
    assert failed["failure"] == failure.to_dict() and failed["attempt"] == 3
    [timed_out] = await events_of(store, run.run_id, "ActivityTimedOut")
    assert timed_out["timeout_kind"] == "start_to_close"
    info = await store.describe(NS, "wf", None)
    assert info is not None
    assert [f["message"] for f in info["failures"]] == [
        "card declined", "local activity slow timed out (start_to_close)"]


async def test_an_interrupted_local_activity_is_cancelled(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    stopped = Failure.activity_cancelled("stopped", policy="try_cancel",
                                         stop_receipt={"kind": "cancel_scope"})
    result = await commit(store, run, RecordLocalActivity("0:1", "charge", T0, 1, None, stopped,
                                                          interrupted=True))
    assert (result.ops["0:1"].status, result.ops["0:1"].interrupted) == (
        OpStatus.CANCELLED, True)
    [event] = await events_of(store, run.run_id, "ActivityCancelled")
    assert (event["policy"], event["stop_receipt"]) == ("try_cancel", {"kind": "cancel_scope"})


async def test_timers_are_scheduled_then_fired(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, ScheduleTimer("0:1", T0 + 60, 60.0))
    op = await op_of(store, run.run_id, "0:1")
    assert (op["kind"], op["status"], op["fire_at"]) == (OpKind.TIMER, OpStatus.SCHEDULED,
                                                         T0 + 60)
    await commit(store, run, FireTimer("0:1"), now=T0 + 60)
    op = await op_of(store, run.run_id, "0:1")
    assert (op["status"], op["closed_at"]) == (OpStatus.COMPLETED, T0 + 60)
    assert await events_of(store, run.run_id, "TimerScheduled") == [
        {"op_id": "0:1", "duration_seconds": 60.0, "fire_at": "2023-11-14T22:14:20+00:00"}]
    assert await events_of(store, run.run_id, "TimerFired") == [{"op_id": "0:1"}]


async def test_scheduling_a_child_starts_its_run_in_the_same_transaction(store: Store) -> None:
    run = await started_and_claimed(store, "parent")
    child_request = request("kid", parent_run_id=run.run_id, parent_workflow_id="parent",
                            parent_op_id="0:1", parent_close_policy="terminate",
                            execution_timeout=120.0, input='["x"]')
    await commit(store, run, ScheduleChild("0:1", child_request, {"cancellation": "abandon"}))
    op = await op_of(store, run.run_id, "0:1")
    child = await current(store, "kid")
    assert (op["kind"], op["status"], op["child_workflow_id"], op["child_run_id"]) == (
        OpKind.CHILD, OpStatus.SCHEDULED, "kid", child.run_id)
    assert (child.status, child.parent_run_id, child.parent_op_id, child.input) == (
        RunStatus.PENDING, run.run_id, "0:1", '["x"]')
    assert child.execution_deadline_at == T0 + 120
    [event] = await events_of(store, run.run_id, "ChildWorkflowScheduled")
    assert (event["child_run_id"], event["cancellation"]) == (child.run_id, "abandon")


async def test_a_child_id_in_use_fails_the_op_at_once(store: Store) -> None:
    await start(store, "taken")
    run = await started_and_claimed(store, "parent")
    result = await commit(store, run, ScheduleChild("0:1", request("taken"), {}))
    op = result.ops["0:1"]
    assert (op.status, op.child_workflow_id) == (OpStatus.FAILED, "taken")
    assert op.failure == Failure.child_start("taken")
    [event] = await events_of(store, run.run_id, "ChildWorkflowFailed")
    assert event["failure"]["failure_category"] == "child_start"


async def test_a_stale_epoch_is_refused_and_records_nothing(store: Store) -> None:
    await start(store, "wf")
    first = (await claim_one(store, "w1", T0, lease=5.0)).run
    second = await claim_one(store, "w2", T0 + 6)  # the first owner's lease ran out
    before = await types(store, first.run_id)
    result = await commit(store, first, ScheduleTimer("0:1", T0 + 60, 60.0), now=T0 + 7)
    assert result.committed is False
    assert await types(store, first.run_id) == before
    assert await rows(store, "SELECT * FROM ops") == []
    assert (await commit(store, second.run, FireTimer("x"), now=T0 + 7)).committed


async def test_batches_of_one_commit_are_fenced_one_by_one(store: Store) -> None:
    good = await started_and_claimed(store, "good")
    stale = await started_and_claimed(store, "stale")
    results = await store.commit([
        RunWrites(stale.run_id, stale.epoch - 1, [ScheduleTimer("0:1", T0 + 5, 5.0)]),
        RunWrites(good.run_id, good.epoch, [ScheduleTimer("0:1", T0 + 5, 5.0)]),
    ], T0 + 1)
    assert [(r.run_id, r.committed) for r in results] == [
        (stale.run_id, False), (good.run_id, True)]


async def test_a_run_past_its_deadline_is_refused_and_timed_out(store: Store) -> None:
    run = await started_and_claimed(store, "wf", run_timeout=10.0)
    result = await commit(store, run, ScheduleTimer("0:1", T0 + 99, 99.0), now=T0 + 10)
    assert result.committed is False
    timed_out = await current(store, "wf")
    assert (timed_out.status, timed_out.closed_reason) == (RunStatus.TIMED_OUT, "run_timeout")
    assert timed_out.failure is not None and timed_out.failure.timeout_kind == "run_timeout"
    [event] = await events_of(store, run.run_id, "WorkflowTimedOut")
    assert (event["timeout_kind"], event["deadline_at"]) == (
        "run_timeout", "2023-11-14T22:13:30+00:00")
    assert await rows(store, "SELECT * FROM ops") == []
