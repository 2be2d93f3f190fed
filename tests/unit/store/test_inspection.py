"""Reading runs for people: describe(), history, listing pages, the cancellation cascade."""

from __future__ import annotations

import datetime

import pytest

from durable import WorkflowNotFound
from durable.failure import Failure
from durable.store import Store
from durable.store.records import RunStatus, WorkerRegistration
from durable.store.writes import (
    CloseRun,
    DeliverCancellation,
    RequestActivityStop,
    ScheduleTimer,
)

from ._support import (
    NS,
    T0,
    WF,
    commit,
    current,
    request,
    schedule,
    start,
    started_and_claimed,
)

pytestmark = pytest.mark.anyio

RUN_KEYS = {"run_id", "run_number", "status", "run_timeout_seconds", "execution_deadline_at",
            "run_deadline_at", "started_at", "closed_at", "task_queue", "owner",
            "lease_expires_at", "epoch",
            "needs_review", "parent_workflow_id", "parent_run_id", "parent_deleted",
            "continued_run_id",
            "started_build", "last_build", "priority", "concurrency_key", "reset_from_run_id",
            "reset_from_op", "reset_run_id"}
PENDING_KEYS = {"op_id", "kind", "name", "scheduled_at", "fire_at", "child_workflow_id",
                "task_status", "attempt", "heartbeat_details", "heartbeat_deadline", "last_failure"}


async def test_describe_shows_the_instance_its_run_and_pending_operations(store: Store) -> None:
    await store.start_workflow(request("wf", task_queue="wf", memo='{"customer":"c-9"}',
                                       execution_timeout=7200.0, run_timeout=3600.0), T0)
    [claimed] = await store.claim_runs(NS, "wf", "w1", (WF,), 1, 30.0, T0 + 1)
    run = claimed.run
    await commit(store, run, ScheduleTimer("0:1", T0 + 60, 59.0), schedule("0:2", "ship"),
                 now=T0 + 1)
    info = await store.describe(NS, "wf", None)
    assert info is not None
    assert set(info) == {"workflow_id", "workflow_type", "namespace", "status", "closed_reason",
                         "execution_timeout_seconds", "run_count", "memo", "run",
                         "pending_operations", "failures", "cancellation", "reason",
                         "phase", "progress", "schedule", "blocked", "waiting_for",
                         "received"}
    assert (info["workflow_id"], info["workflow_type"], info["status"], info["run_count"]) == (
        "wf", WF, RunStatus.RUNNING, 1)
    assert (info["memo"], info["execution_timeout_seconds"]) == ({"customer": "c-9"}, 7200.0)
    assert set(info["run"]) == RUN_KEYS
    assert info["run"]["owner"] == "w1" and info["run"]["epoch"] == 1
    assert info["run"]["run_deadline_at"] == "2023-11-14T23:13:20+00:00"
    assert info["run"]["started_at"] == "2023-11-14T22:13:21+00:00"
    assert [set(p) for p in info["pending_operations"]] == [PENDING_KEYS, PENDING_KEYS]
    assert [(p["op_id"], p["kind"], p["task_status"]) for p in info["pending_operations"]] == [
        ("0:1", "timer", None), ("0:2", "activity", "pending")]
    assert info["failures"] == [] and info["cancellation"] is None


async def test_describe_a_given_run_shows_that_runs_status(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, CloseRun(RunStatus.CONTINUED, continue_input="[]"))
    by_instance = await store.describe(NS, "wf", None)
    by_run = await store.describe(NS, "wf", run.run_id)
    assert by_instance is not None and by_run is not None
    assert by_instance["status"] == RunStatus.PENDING  # the new run
    assert (by_run["status"], by_run["closed_reason"]) == (RunStatus.CONTINUED, "continued")
    assert by_run["run"]["continued_run_id"] == by_instance["run"]["run_id"]
    assert await store.describe(NS, "missing", None) is None
    assert await store.describe(NS, "wf", "no-such-run") is None


async def test_describe_lists_failures_and_the_cancellation(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    _, ctx = await store.request_cancellation(NS, "wf", None, "stop", 30.0, None, "client",
                                              T0 + 1)
    failure = Failure.from_exception(ValueError("bad"))
    await commit(store, run, CloseRun(RunStatus.FAILED, failure=failure), now=T0 + 2)
    info = await store.describe(NS, "wf", None)
    assert info is not None
    assert info["failures"] == [failure.to_dict()]
    cancellation = info["cancellation"]
    assert cancellation["request_id"] == ctx["request_id"]
    # the run failed before any worker delivered the request: no cleanup ran
    assert (cancellation["lifecycle"], cancellation["cleanup_outcome"]) == (
        "failed", "not_delivered")
    assert cancellation["deadline_at"] == "2023-11-14T22:13:51+00:00"
    assert cancellation["closed_at"] == "2023-11-14T22:13:22+00:00"


async def test_history_pages_by_sequence(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, *(ScheduleTimer(f"0:{i}", T0 + 60, 60.0) for i in range(5)))
    events = await store.history(run.run_id)
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5, 6]
    assert events[0].type == "WorkflowStarted"
    assert events[0].recorded_at == datetime.datetime.fromtimestamp(T0, datetime.UTC)
    page = await store.history(run.run_id, after_sequence=2, limit=2)
    assert [(e.sequence, e.data["op_id"]) for e in page] == [(3, "0:1"), (4, "0:2")]
    assert await store.history(run.run_id, after_sequence=6) == []
    assert await store.history("no-such-run") == []


async def test_listing_pages_newest_first_with_a_stable_cursor(store: Store) -> None:
    for i in range(5):
        await start(store, f"wf-{i}", T0 + i)
    await start(store, "same-time-a", T0 + 2)  # ties on created_at: ordered by run id
    first, key = await store.list_runs(NS, None, None, 3)
    assert [r["workflow_id"] for r in first][:1] == ["wf-4"]
    assert key is not None
    await start(store, "newer", T0 + 10)  # added between pages: pages already cut are stable
    seen = [r["run_id"] for r in first]
    while key is not None:
        page, key = await store.list_runs(NS, None, None, 3, key)
        seen.extend(r["run_id"] for r in page)
    assert len(seen) == len(set(seen)) == 6  # every run once, "newer" not among them
    everything, last_key = await store.list_runs(NS, None, None, 100)
    assert last_key is None
    assert [r["run_id"] for r in everything[1:]] == seen
    created = [r["created_at"] for r in everything]
    assert created == sorted(created, reverse=True)
    assert everything[0]["created_at"] == datetime.datetime.fromtimestamp(T0 + 10, datetime.UTC)


async def test_listing_filters_by_status_and_type(store: Store) -> None:
    run = await started_and_claimed(store, "done")
    await commit(store, run, CloseRun(RunStatus.COMPLETED, result="1"))
    await start(store, "open")
    await start(store, "other", workflow_type="another_flow")
    completed, _ = await store.list_runs(NS, "completed", None, 10)
    assert [r["workflow_id"] for r in completed] == ["done"]
    typed, _ = await store.list_runs(NS, None, "another_flow", 10)
    assert [r["workflow_id"] for r in typed] == ["other"]
    assert (await store.list_runs("elsewhere", None, None, 10)) == ([], None)


async def test_counts_by_status_count_a_run_in_review_as_the_list_shows_it(
        store: Store) -> None:
    """`durable_runs{status}` reads these: a run in review is not counted
    running, where `durable list --status running` does not find it."""
    await started_and_claimed(store, "busy")
    for workflow_id, failure in (
            ("mismatch", Failure("non_determinism", "another op")),
            ("doubt", Failure.units_unknown(["u1"], "step", "doubt"))):
        run = await started_and_claimed(store, workflow_id)
        await commit(store, run, CloseRun(RunStatus.FAILED, needs_review=True, failure=failure))
    done = await started_and_claimed(store, "done")
    await commit(store, done, CloseRun(RunStatus.COMPLETED, result="1"))
    await start(store, "waiting")
    counted = (await store.observe(None, 10)).runs
    assert counted == {(NS, "running"): 1, (NS, "needs_review"): 1, (NS, "unknown"): 1,
                       (NS, "completed"): 1, (NS, "pending"): 1}
    listed, _ = await store.list_runs(NS, None, None, 100)
    assert counted == {(NS, status): sum(1 for r in listed if r["status"] == status)
                       for status in {r["status"] for r in listed}}


async def test_the_cascade_without_a_request_is_empty_and_complete(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await store.cancellation_cascade(NS, "missing", None, T0)
    await start(store, "wf")
    view = await store.cancellation_cascade(NS, "wf", None, T0)
    assert view == {"root": None, "inspection_complete": True, "truncated": False,
                    "findings": [], "runs": [], "edges": []}


async def cascade_with_a_stopping_attempt(store: Store) -> str:
    """A requested, delivered run whose running attempt (on worker a1) was asked to stop."""
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", cancellation="wait_cancellation_completed"))
    [task] = await store.claim_activities(NS, "default", "a1", ("ship",), 1, 30.0, T0)
    _, ctx = await store.request_cancellation(NS, "wf", None, "stop", 60.0, None, "client", T0)
    run = await current(store, "wf")
    await commit(store, run, DeliverCancellation(str(ctx["request_id"]),
                                                 [{"op_id": "0:1", "kind": "activity"}], T0 + 1),
                 RequestActivityStop("0:1", "wait_cancellation_completed"), now=T0 + 1)
    return task.task_id


async def test_an_attempt_whose_worker_is_alive_is_shown_stopping(store: Store) -> None:
    task_id = await cascade_with_a_stopping_attempt(store)
    await store.register_worker(WorkerRegistration("a1", NS, "default", (), ("ship",), ()),
                                60.0, T0)
    view = await store.cancellation_cascade(NS, "wf", None, T0 + 2)
    assert view["inspection_complete"] is True and view["findings"] == []
    [entry] = view["runs"]
    assert (entry["workflow_id"], entry["lifecycle"]) == ("wf", "delivered")
    [stop] = entry["activity_stops"]
    assert (stop["task_id"], stop["state"], stop["policy"]) == (
        task_id, "stopping", "wait_cancellation_completed")
    assert entry["delivery"]["boundary"] == [{"op_id": "0:1", "kind": "activity"}]


async def test_an_attempt_without_receipt_whose_worker_is_gone_is_unverified(
    store: Store,
) -> None:
    task_id = await cascade_with_a_stopping_attempt(store)  # worker a1 never registered
    view = await store.cancellation_cascade(NS, "wf", None, T0 + 2)
    assert view["inspection_complete"] is False  # missing evidence is never success
    [finding] = view["findings"]
    assert (finding["workflow_id"], finding["task_id"]) == ("wf", task_id)
    assert "not verified as stopped" in finding["finding"]
    assert view["runs"][0]["activity_stops"][0]["state"] == "unverified"


async def test_a_receipt_turns_the_stop_into_evidence(store: Store) -> None:
    task_id = await cascade_with_a_stopping_attempt(store)
    stopped = Failure.from_exception(RuntimeError("stopped")).with_details(
        stop_kind="cancel_scope")
    await store.complete_activity(task_id, 1, "a1", None, stopped, T0 + 3)
    view = await store.cancellation_cascade(NS, "wf", None, T0 + 4)
    assert view["inspection_complete"] is True
    [stop] = view["runs"][0]["activity_stops"]
    assert stop["state"] == "stopped" and stop["stop_receipt"]["kind"] == "cancel_scope"
