"""Starting instances (id reuse policies) and reading runs back."""

from __future__ import annotations

import pytest

from durable import WorkflowAlreadyStarted, WorkflowNotFound
from durable.store import Store
from durable.store.records import OpStatus, RunStatus
from durable.store.writes import CloseRun, FireTimer, ScheduleTimer
from durable.wakes import Wake

from ._support import (
    NS,
    T0,
    WF,
    Wakes,
    commit,
    current,
    events_of,
    request,
    row,
    start,
    started_and_claimed,
)

pytestmark = pytest.mark.anyio


async def test_start_records_a_pending_run_and_its_started_event(store: Store) -> None:
    wakes = Wakes(store)
    result = await store.start_workflow(
        request("order-1", input='[{"sku":"a"}]', execution_timeout=3600.0, run_timeout=600.0,
                memo='{"customer":"c-9"}'), T0)
    assert result.created and result.status == RunStatus.PENDING
    run = await current(store, "order-1")
    assert (run.run_id, run.status, run.run_number, run.epoch) == (
        result.run_id, RunStatus.PENDING, 1, 0)
    assert (run.workflow_type, run.task_queue, run.input) == (WF, "default", '[{"sku":"a"}]')
    assert run.execution_deadline_at == T0 + 3600 and run.run_deadline_at == T0 + 600
    assert run.deadlines.earliest == T0 + 600
    assert run.owner is None and run.failure is None
    [started] = await events_of(store, run.run_id, "WorkflowStarted")
    assert started == {
        "workflow_type": WF, "task_queue": "default", "run_number": 1,
        "input": [{"sku": "a"}],
        "execution_timeout_seconds": 3600.0, "execution_deadline_at": "2023-11-14T23:13:20+00:00",
        "run_timeout_seconds": 600.0, "run_deadline_at": "2023-11-14T22:23:20+00:00",
    }
    assert ("runs", NS, "default") in wakes.keys()  # workers polling the queue look now
    instance = await row(store, "SELECT * FROM workflows WHERE workflow_id = 'order-1'")
    assert (instance["current_run_id"], instance["run_count"], instance["memo"]) == (
        run.run_id, 1, '{"customer":"c-9"}')


async def test_reject_duplicate_refuses_any_used_id(store: Store) -> None:
    run_id = await start(store, "dup")
    with pytest.raises(WorkflowAlreadyStarted) as err:
        await start(store, "dup")
    assert (err.value.workflow_id, err.value.run_id) == ("dup", run_id)
    run = await started_and_claimed(store, "closed")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    with pytest.raises(WorkflowAlreadyStarted):
        await start(store, "closed")


async def test_return_existing_active_returns_the_open_run(store: Store) -> None:
    run_id = await start(store, "wf")
    again = await store.start_workflow(request("wf", id_reuse="return_existing_active"), T0 + 1)
    assert (again.run_id, again.created, again.status) == (run_id, False, RunStatus.PENDING)
    assert (await current(store, "wf")).run_id == run_id


async def test_return_existing_active_refuses_a_closed_instance(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="null"))
    with pytest.raises(WorkflowAlreadyStarted):
        await store.start_workflow(request("wf", id_reuse="return_existing_active"), T0 + 1)


async def test_allow_duplicate_failed_only_starts_anew_after_a_failure(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    policy = "allow_duplicate_failed_only"
    with pytest.raises(WorkflowAlreadyStarted):  # still open
        await store.start_workflow(request("wf", id_reuse=policy), T0)
    await commit(store, run, CloseRun(RunStatus.FAILED))
    again = await store.start_workflow(request("wf", id_reuse=policy, input="[2]"), T0 + 5)
    assert again.created and again.run_id != run.run_id
    fresh = await current(store, "wf")
    assert (fresh.run_id, fresh.run_number, fresh.input, fresh.status) == (
        again.run_id, 1, "[2]", RunStatus.PENDING)
    assert (await current(store, "wf", run.run_id)).status == RunStatus.FAILED  # kept


async def test_allow_duplicate_failed_only_refuses_after_completion(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    with pytest.raises(WorkflowAlreadyStarted):
        await store.start_workflow(request("wf", id_reuse="allow_duplicate_failed_only"), T0)


async def test_get_run_by_instance_or_by_run(store: Store) -> None:
    run_id = await start(store, "a")
    await start(store, "b")
    assert (await current(store, "a")).run_id == run_id
    assert (await current(store, "a", run_id)).workflow_id == "a"
    assert await store.get_run(NS, "b", run_id) is None  # a run of another instance
    assert await store.get_run(NS, "missing") is None
    assert await store.get_run("other-namespace", "a") is None


async def test_clear_review_lets_a_marked_run_be_claimed_again(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await store.clear_review(NS, "missing", T0)
    run = await started_and_claimed(store, "wf")
    assert await store.clear_review(NS, "wf", T0) is False  # not marked
    await commit(store, run, CloseRun(RunStatus.FAILED, needs_review=True))
    marked = await current(store, "wf")
    assert marked.needs_review and marked.owner is None
    assert marked.status == RunStatus.RUNNING and marked.epoch == run.epoch + 1
    assert await store.claim_runs(NS, "wf", "w2", (WF,), 10, 30.0, T0 + 1) == []
    assert await store.clear_review(NS, "wf", T0 + 2) is True
    assert await events_of(store, run.run_id, "WorkflowReviewCleared") == [{}]
    [again] = await store.claim_runs(NS, "wf", "w2", (WF,), 10, 30.0, T0 + 3)
    assert again.run.run_id == run.run_id and not again.run.needs_review


@pytest.mark.parametrize("limited", [True, False])
async def test_a_run_marked_for_review_frees_its_slot_of_a_limited_queue(
        store: Store, limited: bool) -> None:
    """A run marked for review is no longer held: on a queue a claim here found
    limited by slots, its commit wakes the queue's claimers (decision (at));
    on any other queue it wakes no one more."""
    run = await started_and_claimed(store, "wf")
    store.hub.limit_slots(NS, run.task_queue, limited)
    wakes = Wakes(store)
    await commit(store, run, CloseRun(RunStatus.FAILED, needs_review=True))
    wakes.unsubscribe()
    freed = [w for w in wakes.seen if w.key == Wake.runs(NS, run.task_queue).key]
    assert len(freed) == (1 if limited else 0)


async def test_resync_reads_runs_and_the_closed_ops_they_wait_on(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    other = await started_and_claimed(store, "other")
    await commit(store, run, ScheduleTimer("t1", T0 + 5, 5.0), ScheduleTimer("t2", T0 + 9, 9.0))
    await commit(store, run, FireTimer("t1"), now=T0 + 5)
    runs, closed = await store.resync([run.run_id, other.run_id, "gone"],
                                      {run.run_id: ["t1", "t2"]})
    assert set(runs) == {run.run_id, other.run_id}
    assert [(r, op.op_id, op.status) for r, op in closed] == [
        (run.run_id, "t1", OpStatus.COMPLETED)]
