"""Cooperative cancellation as transactions: requests, delivery, stops, child budgets."""

from __future__ import annotations

import pytest

from durable import (
    CapabilityUnsupported,
    RunAlreadyClosed,
    RunNotCurrent,
    WorkflowNotFound,
)
from durable.store import Store
from durable.store.records import AttemptStatus, OpStatus, RunRecord, RunStatus
from durable.store.writes import (
    CancelTimer,
    CloseRun,
    DeliverCancellation,
    RequestActivityStop,
    RequestChildCancellation,
    ScheduleChild,
    ScheduleTimer,
)

from ._support import (
    NS,
    T0,
    claim_one,
    commit,
    current,
    events_of,
    op_of,
    request,
    schedule,
    start,
    started_and_claimed,
    task_of,
)

pytestmark = pytest.mark.anyio


async def ask(store: Store, workflow_id: str = "wf", cleanup: float = 30.0,
              now: float = T0, run_id: str | None = None,
              reason: str = "withdrawn") -> tuple[bool, dict[str, object]]:
    return await store.request_cancellation(NS, workflow_id, run_id, reason, cleanup,
                                            {"type": "user", "id": "u-1", "label": "Ada"},
                                            "client", now)


async def test_a_request_is_recorded_once_with_its_deadline(store: Store) -> None:
    run_id = await start(store, "wf", run_timeout=100.0)
    accepted, ctx = await ask(store, cleanup=30.0, now=T0 + 1)
    assert accepted
    assert ctx["request_id"] == ctx["root_request_id"] and ctx["parent_request_id"] is None
    assert (ctx["deadline_at"], ctx["cleanup_timeout_seconds"]) == (T0 + 31, 30.0)
    assert ctx["lineage"] == [[ctx["request_id"], "wf", run_id]]
    assert (ctx["lifecycle"], ctx["source"], ctx["reason"]) == ("requested", "client", "withdrawn")
    run = await current(store, "wf")
    assert run.cleanup_deadline_at == T0 + 31
    assert run.deadlines.earliest == T0 + 31  # the cleanup deadline now binds
    [event] = await events_of(store, run_id, "CancellationRequested")
    assert event["request_id"] == ctx["request_id"]
    assert event["deadline_at"] == "2023-11-14T22:13:51+00:00"
    assert event["requester"] == {"type": "user", "id": "u-1", "label": "Ada"}


async def test_a_repeat_returns_the_original_and_never_extends_the_budget(
    store: Store,
) -> None:
    run_id = await start(store, "wf")
    _, first = await ask(store, cleanup=5.0, reason="first")
    accepted, again = await ask(store, cleanup=500.0, now=T0 + 2, reason="second")
    assert accepted is False
    assert again == first
    assert (await current(store, "wf")).cleanup_deadline_at == T0 + 5
    assert len(await events_of(store, run_id, "CancellationRequested")) == 1


async def test_requests_for_unknown_old_or_closed_runs_are_refused(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await ask(store, "missing")
    run = await started_and_claimed(store, "wf")
    await commit(store, run, CloseRun(RunStatus.CONTINUED, continue_input="[]"))
    with pytest.raises(RunNotCurrent, match="not the current run"):
        await ask(store, run_id=run.run_id)
    done = await started_and_claimed(store, "done")
    await commit(store, done, CloseRun(RunStatus.COMPLETED, result="1"))
    with pytest.raises(RunAlreadyClosed, match="already completed"):
        await ask(store, "done")


async def test_a_worker_without_the_capability_gets_no_request_recorded(store: Store) -> None:
    await start(store, "wf")
    await claim_one(store, "old-worker", T0, lease=30.0, capabilities=())
    with pytest.raises(CapabilityUnsupported, match="old-worker"):
        await ask(store, now=T0 + 1)
    run = await current(store, "wf")
    assert run.cancellation is None and run.cleanup_deadline_at is None
    assert await events_of(store, run.run_id, "CancellationRequested") == []
    accepted, _ = await ask(store, now=T0 + 30)  # its lease ran out: no one holds the run
    assert accepted


async def requested_and_claimed(store: Store, cleanup: float = 30.0) -> tuple[RunRecord, str]:
    run = await started_and_claimed(store, "wf")
    _, ctx = await ask(store, cleanup=cleanup)
    run = await current(store, "wf")
    return run, str(ctx["request_id"])


async def test_delivery_records_the_boundary_then_cleanup_begins(store: Store) -> None:
    run, request_id = await requested_and_claimed(store)
    boundary = [{"op_id": "0:1", "kind": "timer"}]
    await commit(store, run, DeliverCancellation(request_id, boundary, T0 + 1), now=T0 + 1)
    ctx = (await current(store, "wf")).cancellation
    assert ctx is not None
    assert (ctx["lifecycle"], ctx["delivered_at"], ctx["boundary"]) == (
        "delivered", T0 + 1, boundary)
    [event] = await events_of(store, run.run_id, "CancellationDelivered")
    assert (event["request_id"], event["boundary"]) == (request_id, boundary)
    await commit(store, run, DeliverCancellation(request_id, [], T0 + 2), now=T0 + 2)
    assert len(await events_of(store, run.run_id, "CancellationDelivered")) == 1  # once
    await commit(store, run, ScheduleTimer("1:1", T0 + 9, 7.0), now=T0 + 2)
    ctx = (await current(store, "wf")).cancellation
    assert ctx is not None and ctx["lifecycle"] == "cleaning_up"


@pytest.mark.parametrize(("close", "outcome"), [
    ("code", "completed"), ("cancel", "interrupted"), ("undelivered", "not_delivered"),
])
async def test_the_cleanup_outcome_says_how_the_run_closed(store: Store, close: str,
                                                           outcome: str) -> None:
    run, request_id = await requested_and_claimed(store)
    if close != "undelivered":
        await commit(store, run, DeliverCancellation(request_id, [], T0 + 1), now=T0 + 1)
    if close == "code":
        await commit(store, run, CloseRun(RunStatus.CANCELLED), now=T0 + 2)
    else:
        await store.close_run_externally(NS, "wf", None, RunStatus.CANCELLED, "enough", T0 + 2)
    ctx = (await current(store, "wf")).cancellation
    assert ctx is not None
    assert (ctx["lifecycle"], ctx["cleanup_outcome"], ctx["closed_at"]) == (
        "cancelled", outcome, T0 + 2)


async def test_cancelling_a_timer_is_idempotent(store: Store) -> None:
    run, _ = await requested_and_claimed(store)
    await commit(store, run, ScheduleTimer("0:1", T0 + 60, 60.0))
    result = await commit(store, run, CancelTimer("0:1"), now=T0 + 1)
    op = result.ops["0:1"]
    assert (op.status, op.interrupted) == (OpStatus.CANCELLED, True)
    again = await commit(store, run, CancelTimer("0:1"), now=T0 + 2)
    assert again.ops == {}
    assert await events_of(store, run.run_id, "TimerCancelled") == [
        {"op_id": "0:1", "reason": "cancellation delivered"}]


async def test_an_attempt_not_yet_claimed_is_cancelled_at_once(store: Store) -> None:
    run, _ = await requested_and_claimed(store)
    await commit(store, run, schedule("0:1", cancellation="wait_cancellation_completed"))
    result = await commit(store, run, RequestActivityStop("0:1", "wait_cancellation_completed"),
                          now=T0 + 1)
    assert result.ops["0:1"].status == OpStatus.CANCELLED
    task = await task_of(store, "task-0:1")
    assert task["status"] == AttemptStatus.CANCELLED
    [event] = await events_of(store, run.run_id, "ActivityCancelled")
    assert event["stop_receipt"] == {"kind": "not_started", "confirmed": True,
                                     "at": "2023-11-14T22:13:21+00:00", "attempt": 1}


async def test_an_abandoned_activity_is_left_running(store: Store) -> None:
    run, _ = await requested_and_claimed(store)
    await commit(store, run, schedule("0:1", cancellation="abandon", schedule_to_close_timeout=60))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 10.0, T0)
    result = await commit(store, run, RequestActivityStop("0:1", "abandon"), now=T0 + 1)
    assert result.ops == {}
    task = await task_of(store, "task-0:1")
    assert (task["status"], task["stop_requested"]) == (AttemptStatus.RUNNING, 0)
    assert (await op_of(store, run.run_id, "0:1"))["interrupted"] == 1  # replay knows


async def with_child(store: Store, parent: RunRecord, **child: object) -> RunRecord:
    req = request("kid", parent_run_id=parent.run_id, parent_workflow_id=parent.workflow_id,
                  parent_op_id="0:1", task_queue="kids", **child)
    await commit(store, parent, ScheduleChild("0:1", req, {}))
    return (await claim_one(store, "w2", T0, task_queue="kids")).run


async def test_a_childs_budget_is_capped_by_the_parents_deadline(store: Store) -> None:
    parent, request_id = await requested_and_claimed(store, cleanup=20.0)  # deadline T0 + 20
    child = await with_child(store, parent)
    await commit(store, parent, RequestChildCancellation("0:1", "wait_cancellation_completed",
                                                         cleanup_timeout=100.0), now=T0 + 1)
    ctx = (await current(store, "kid")).cancellation
    assert ctx is not None
    assert ctx["deadline_at"] == T0 + 20  # not T0 + 101
    assert (ctx["parent_request_id"], ctx["root_request_id"]) == (request_id, request_id)
    assert ctx["source"] == "parent_cancellation"
    assert [entry[1] for entry in ctx["lineage"]] == ["wf", "kid"]
    assert ctx["requester"] == {"type": "workflow", "id": "wf", "label": parent.workflow_type}
    [event] = await events_of(store, parent.run_id, "ChildCancellationRequested")
    assert (event["child_run_id"], event["request_id"]) == (child.run_id, ctx["request_id"])


async def test_a_shorter_child_cleanup_timeout_shortens_the_budget(store: Store) -> None:
    parent, _ = await requested_and_claimed(store, cleanup=20.0)
    await with_child(store, parent)
    await commit(store, parent, RequestChildCancellation("0:1", "try_cancel", cleanup_timeout=5),
                 now=T0 + 1)
    ctx = (await current(store, "kid")).cancellation
    assert ctx is not None and ctx["deadline_at"] == T0 + 6
    assert (await op_of(store, parent.run_id, "0:1"))["status"] == OpStatus.CANCELLED


async def test_a_child_on_a_worker_without_the_capability_is_not_asked(store: Store) -> None:
    parent, _ = await requested_and_claimed(store)
    req = request("kid", parent_run_id=parent.run_id, parent_workflow_id="wf",
                  parent_op_id="0:1", task_queue="kids")
    await commit(store, parent, ScheduleChild("0:1", req, {}))
    await claim_one(store, "old-worker", T0, task_queue="kids", capabilities=())
    await commit(store, parent, RequestChildCancellation("0:1", "wait_cancellation_completed"),
                 now=T0 + 1)
    assert (await current(store, "kid")).cancellation is None
    [refused] = await events_of(store, parent.run_id, "ChildCancellationRefused")
    assert refused["child_workflow_id"] == "kid"


async def test_an_abandoned_child_outlives_its_parent(store: Store) -> None:
    parent, _ = await requested_and_claimed(store)
    await with_child(store, parent, parent_close_policy="terminate")
    await commit(store, parent, RequestChildCancellation("0:1", "abandon"), now=T0 + 1)
    await commit(store, parent, CloseRun(RunStatus.CANCELLED), now=T0 + 2)
    child = await current(store, "kid")
    assert (child.status, child.parent_close_policy, child.cancellation) == (
        RunStatus.RUNNING, "abandon", None)


async def test_closing_externally_is_a_no_op_on_a_closed_run(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await store.close_run_externally(NS, "missing", None, "terminated", "r", T0)
    await start(store, "wf")
    first = await store.close_run_externally(NS, "wf", None, "terminated", "bad deploy", T0 + 1)
    assert (first.status, first.closed_reason) == (RunStatus.TERMINATED, "bad deploy")
    again = await store.close_run_externally(NS, "wf", None, "cancelled", "later", T0 + 2)
    assert (again.status, again.closed_at) == (RunStatus.TERMINATED, T0 + 1)
