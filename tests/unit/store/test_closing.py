"""Closing a run: its outcome, its open work, its parent, the next run."""

from __future__ import annotations

import json

import pytest

from durable.failure import Failure
from durable.store import Store
from durable.store.records import AttemptStatus, OpStatus, RunStatus
from durable.store.writes import (
    CloseRun,
    ScheduleChild,
    ScheduleTimer,
)
from durable.wakes import Wake, WakeKind

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
    row,
    schedule,
    started_and_claimed,
    task_of,
)

pytestmark = pytest.mark.anyio


async def test_closing_completed_revokes_the_runs_authority(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    wakes = Wakes(store)
    result = await commit(store, run, CloseRun(RunStatus.COMPLETED, result='{"n":1}'),
                          now=T0 + 2)
    assert result.committed and result.next_run_id is None
    closed = await current(store, "wf")
    assert (closed.status, closed.result, closed.closed_at, closed.closed_reason) == (
        RunStatus.COMPLETED, '{"n":1}', T0 + 2, "completed")
    assert closed.owner is None and closed.epoch == run.epoch + 1
    assert (await events_of(store, run.run_id, "WorkflowCompleted")) == [
        {"reason": "completed", "result": {"n": 1}}]
    instance = await row(store, "SELECT status, closed_at FROM workflows")
    assert (instance["status"], instance["closed_at"]) == (RunStatus.COMPLETED, T0 + 2)
    assert ("run", run.run_id) in wakes.keys()
    late = await commit(store, run, ScheduleTimer("0:9", T0 + 9, 9.0), now=T0 + 3)
    assert late.committed is False  # the old epoch, on a closed run


async def test_closing_failed_records_the_failure(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    failure = Failure.from_exception(ValueError("bad"))
    await commit(store, run, CloseRun(RunStatus.FAILED, failure=failure))
    assert (await current(store, "wf")).failure == failure
    [event] = await events_of(store, run.run_id, "WorkflowFailed")
    assert event == {"reason": "failed", "failure": failure.to_dict()}
    info = await store.describe(NS, "wf", None)
    assert info is not None and info["failures"] == [failure.to_dict()]


async def test_continue_as_new_closes_the_run_and_starts_the_next(store: Store) -> None:
    run = await started_and_claimed(store, "wf", execution_timeout=3600.0, run_timeout=60.0)
    result = await commit(store, run, ScheduleTimer("0:1", T0 + 99, 99.0),
                          CloseRun(RunStatus.CONTINUED, continue_input="[2]"), now=T0 + 10)
    assert result.committed and result.next_run_id is not None
    old = await current(store, "wf", run.run_id)
    new = await current(store, "wf")
    assert (old.status, old.continued_run_id) == (RunStatus.CONTINUED, new.run_id)
    assert (new.run_id, new.run_number, new.input, new.status) == (
        result.next_run_id, 2, "[2]", RunStatus.PENDING)
    assert new.execution_deadline_at == T0 + 3600  # the instance's deadline carries over
    assert new.run_deadline_at == T0 + 70  # the run's is renewed
    assert (await op_of(store, run.run_id, "0:1"))["status"] == OpStatus.CANCELLED
    [closing] = await events_of(store, run.run_id, "WorkflowContinuedAsNew")
    assert closing == {"reason": "continued", "new_run_id": new.run_id}
    assert (await events_of(store, new.run_id, "WorkflowStarted"))[0]["run_number"] == 2
    instance = await row(store, "SELECT current_run_id, run_count, status FROM workflows")
    assert instance == {"current_run_id": new.run_id, "run_count": 2, "status": "pending"}


async def test_a_child_closing_resolves_its_parents_op(store: Store) -> None:
    parent = await started_and_claimed(store, "parent")
    await commit(store, parent, ScheduleChild("0:1", request(
        "kid", parent_run_id=parent.run_id, parent_workflow_id="parent", parent_op_id="0:1",
        task_queue="kids"), {}))
    child = (await claim_one(store, "w2", T0 + 1, task_queue="kids")).run
    wakes = Wakes(store)
    await commit(store, child, CloseRun(RunStatus.COMPLETED, result='"shipped"'), now=T0 + 2)
    op = await op_of(store, parent.run_id, "0:1")
    assert (op["status"], op["result"]) == (OpStatus.COMPLETED, '"shipped"')
    [event] = await events_of(store, parent.run_id, "ChildWorkflowCompleted")
    assert event == {"op_id": "0:1", "child_workflow_id": "kid", "child_run_id": child.run_id,
                     "status": "completed", "result": "shipped"}  # so a history alone replays
    [wake] = [w for w in wakes.seen if w.key == ("run", parent.run_id)]
    assert wake.data.status == OpStatus.COMPLETED  # the owner needs no extra read


async def test_a_failed_child_fails_its_parents_op_with_the_childs_failure(
    store: Store,
) -> None:
    parent = await started_and_claimed(store, "parent")
    await commit(store, parent, ScheduleChild("0:1", request(
        "kid", parent_run_id=parent.run_id, parent_workflow_id="parent", parent_op_id="0:1",
        task_queue="kids"), {}))
    child = (await claim_one(store, "w2", T0 + 1, task_queue="kids")).run
    failure = Failure.from_exception(ValueError("child broke"))
    await commit(store, child, CloseRun(RunStatus.FAILED, failure=failure), now=T0 + 2)
    op = await op_of(store, parent.run_id, "0:1")
    assert op["status"] == OpStatus.FAILED
    recorded = Failure.from_dict(json.loads(op["failure"]))
    assert recorded == Failure.child_failed("kid", "failed", failure)


async def test_closing_a_parent_applies_the_parent_close_policy(store: Store) -> None:
    parent = await started_and_claimed(store, "parent")
    await commit(store, parent, ScheduleChild("0:1", request(
        "kid", parent_run_id=parent.run_id, parent_workflow_id="parent", parent_op_id="0:1",
        parent_close_policy="terminate"), {}))
    await commit(store, parent, CloseRun(RunStatus.COMPLETED, result="1"), now=T0 + 1)
    child = await current(store, "kid")
    assert (child.status, child.closed_reason) == (RunStatus.TERMINATED, "parent parent closed")
    assert await events_of(store, parent.run_id, "ParentClosePolicyApplied") == [
        {"child_workflow_id": "kid", "child_run_id": child.run_id, "policy": "terminate"}]


async def test_closing_fences_open_attempts_and_cancels_timers(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", "ship", "t-fenced"),
                 schedule("0:2", "ship", "t-abandoned", schedule_to_close_timeout=60,
                          cancellation="abandon"),
                 ScheduleTimer("0:3", T0 + 60, 60.0))
    wakes = Wakes(store)
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"), now=T0 + 1)
    assert (await task_of(store, "t-fenced"))["status"] == AttemptStatus.CANCELLED
    assert (await task_of(store, "t-fenced"))["stop_requested"] == 1
    assert (await task_of(store, "t-abandoned"))["status"] == AttemptStatus.PENDING
    assert (await op_of(store, run.run_id, "0:3"))["status"] == OpStatus.CANCELLED
    assert (await op_of(store, run.run_id, "0:2"))["status"] == OpStatus.SCHEDULED
    [fenced] = await events_of(store, run.run_id, "ActivityCancelled")
    assert (fenced["task_id"], fenced["fenced"]) == ("t-fenced", True)
    assert await events_of(store, run.run_id, "TimerCancelled") == [
        {"op_id": "0:3", "reason": "workflow completed"}]
    assert ("activity_stop", "t-fenced") in wakes.keys()


async def test_every_close_publishes_one_stop_notice_for_this_process_only(store: Store) -> None:
    """The notice `durable.observe` logs: carried by a local wake-up, never sent to
    other processes, published once by whoever recorded the close."""
    run = await started_and_claimed(store, "noticed")
    wakes = Wakes(store)
    await commit(store, run, CloseRun(RunStatus.FAILED, failure=Failure("application", "x")),
                 now=T0 + 2)
    [stop] = [w for w in wakes.seen if w.kind is WakeKind.STOPPED]
    assert stop.local and stop.subject == run.run_id
    assert stop.data["status"] == "failed" and stop.data["failure_category"] == "application"
    assert stop.data["closed_at"] == T0 + 2
    assert Wake.run(run.run_id) in wakes.seen  # and the run's own wake-up for its owner


async def test_terminating_closes_the_run_now_and_revokes_its_authority(store: Store) -> None:
    run = await started_and_claimed(store, "terminated")
    await commit(store, run, schedule("0:1"))
    closed = await store.close_run_externally(NS, "terminated", None, RunStatus.TERMINATED,
                                              "operator said so", T0 + 1)
    assert closed.status == RunStatus.TERMINATED and closed.epoch > run.epoch
    assert (await task_of(store, "task-0:1"))["status"] == AttemptStatus.CANCELLED
    refused = await commit(store, run, ScheduleTimer("0:2", T0 + 9, 8.0), now=T0 + 2)
    assert not refused.committed  # the old owner records nothing more
    again = await store.close_run_externally(NS, "terminated", None, RunStatus.CANCELLED,
                                             "too late", T0 + 3)
    assert again.status == RunStatus.TERMINATED  # a closed run stays as it closed
