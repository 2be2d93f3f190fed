"""Remote activities: claiming attempts, completing them, retries, refusals, heartbeats."""

from __future__ import annotations

import json

import pytest

from durable import RetryPolicy
from durable.clock import to_iso
from durable.failure import Failure
from durable.store import Store
from durable.store.records import ActivityTask, AttemptStatus, OpStatus, RunRecord
from durable.store.writes import RequestActivityStop

from ._support import (
    NS,
    T0,
    Wakes,
    commit,
    events_of,
    op_of,
    schedule,
    started_and_claimed,
    task_of,
)

pytestmark = pytest.mark.anyio

BOOM = Failure.from_exception(RuntimeError("warehouse offline"))


async def scheduled(store: Store, **options: object) -> RunRecord:
    """A run owned by w1 with activity "ship" (op 0:1, task "task-0:1") scheduled."""
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", "ship", **options))
    return run


async def claim(store: Store, worker: str = "a1", now: float = T0,
                lease: float = 10.0) -> ActivityTask:
    [task] = await store.claim_activities(NS, "default", worker, ("ship",), 5, lease, now)
    return task


async def test_claiming_starts_an_attempt_with_its_deadlines(store: Store) -> None:
    run = await scheduled(store, start_to_close_timeout=30, heartbeat_timeout=5,
                          schedule_to_close_timeout=100)
    task = await claim(store, "a1", T0 + 1)
    assert (task.name, task.run_id, task.op_id, task.attempt, task.input) == (
        "ship", run.run_id, "0:1", 1, '["box"]')
    assert task.start_to_close_deadline == T0 + 31
    assert task.heartbeat_deadline == T0 + 6
    assert task.schedule_to_close_deadline == T0 + 100
    stored = await task_of(store, task.task_id)
    assert (stored["status"], stored["owner"], stored["lease_expires_at"]) == (
        AttemptStatus.RUNNING, "a1", T0 + 11)
    assert stored["deadline_at"] == T0 + 6  # the earliest of them
    [started] = await events_of(store, run.run_id, "ActivityStarted")
    assert (started["attempt"], started["worker_id"]) == (1, "a1")
    assert await store.claim_activities(NS, "default", "a2", ("ship",), 5, 10.0, T0 + 2) == []


async def test_claims_take_only_the_named_activities_that_are_available(store: Store) -> None:
    await scheduled(store)
    assert await store.claim_activities(NS, "default", "a1", ("other",), 5, 10.0, T0) == []
    assert await store.claim_activities(NS, "default", "a1", ("ship",), 0, 10.0, T0) == []
    assert await store.claim_activities(NS, "default", "a1", ("ship",), 5, 10.0, T0 - 1) == []
    assert await store.claim_activities(NS, "elsewhere", "a1", ("ship",), 5, 10.0, T0) == []


async def test_a_pending_attempt_past_its_deadline_is_not_claimed(store: Store) -> None:
    await scheduled(store, schedule_to_start_timeout=5)
    assert await store.claim_activities(NS, "default", "a1", ("ship",), 5, 10.0, T0 + 5) == []


async def test_completing_records_the_result_and_wakes_the_run(store: Store) -> None:
    run = await scheduled(store)
    task = await claim(store)
    wakes = Wakes(store)
    outcome = await store.complete_activity(task.task_id, 1, "a1", '"shipped"', None, T0 + 2)
    assert (outcome.status, outcome.reason) == ("recorded", None)
    op = await op_of(store, run.run_id, "0:1")
    assert (op["status"], op["result"], op["closed_at"]) == (
        OpStatus.COMPLETED, '"shipped"', T0 + 2)
    assert (await task_of(store, task.task_id))["status"] == AttemptStatus.COMPLETED
    [event] = await events_of(store, run.run_id, "ActivityCompleted")
    assert event == {"op_id": "0:1", "activity_type": "ship", "task_id": task.task_id,
                     "attempt": 1, "result": "shipped"}
    [wake] = [w for w in wakes.seen if w.key == ("run", run.run_id)]
    assert (wake.data.op_id, wake.data.status) == ("0:1", OpStatus.COMPLETED)


async def test_a_failure_schedules_a_retry_per_the_frozen_policy(store: Store) -> None:
    run = await scheduled(store, retry=RetryPolicy(max_attempts=3, initial_interval=2.0,
                                                   backoff_coefficient=3.0),
                          schedule_to_start_timeout=50)
    task = await claim(store)
    outcome = await store.complete_activity(task.task_id, 1, "a1", None, BOOM, T0 + 1)
    assert outcome.status == "retry_scheduled"
    stored = await task_of(store, task.task_id)
    assert (stored["status"], stored["attempt"], stored["owner"]) == (
        AttemptStatus.PENDING, 2, None)
    assert stored["available_at"] == T0 + 3
    assert stored["schedule_to_start_deadline"] == T0 + 53
    assert (await op_of(store, run.run_id, "0:1"))["status"] == OpStatus.SCHEDULED
    [retry] = await events_of(store, run.run_id, "ActivityRetryScheduled")
    assert (retry["failed_attempt"], retry["next_attempt"], retry["failure"]) == (
        1, 2, BOOM.to_dict())
    assert await store.claim_activities(NS, "default", "a1", ("ship",), 5, 10.0, T0 + 2) == []
    second = await claim(store, "a2", T0 + 3)
    assert second.attempt == 2
    again = await store.complete_activity(second.task_id, 2, "a2", None, BOOM, T0 + 4)
    assert again.status == "retry_scheduled"
    assert (await task_of(store, task.task_id))["available_at"] == T0 + 10  # 2 s x 3


async def test_the_last_attempts_failure_fails_the_op(store: Store) -> None:
    run = await scheduled(store, max_attempts=1)
    task = await claim(store)
    outcome = await store.complete_activity(task.task_id, 1, "a1", None, BOOM, T0 + 1)
    assert outcome.status == "recorded"
    op = await op_of(store, run.run_id, "0:1")
    assert op["status"] == OpStatus.FAILED
    assert Failure.from_dict(json.loads(op["failure"])) == BOOM
    assert (await task_of(store, task.task_id))["status"] == AttemptStatus.FAILED
    [event] = await events_of(store, run.run_id, "ActivityFailed")
    assert (event["attempt"], event["failure"]) == (1, BOOM.to_dict())


async def test_a_non_retryable_failure_fails_at_once(store: Store) -> None:
    run = await scheduled(store, max_attempts=5)
    task = await claim(store)
    fatal = BOOM.with_details(non_retryable=True)
    assert (await store.complete_activity(task.task_id, 1, "a1", None, fatal, T0)).status == (
        "recorded")
    assert (await op_of(store, run.run_id, "0:1"))["status"] == OpStatus.FAILED


async def test_results_from_attempts_that_are_not_current_are_refused_visibly(
    store: Store,
) -> None:
    run = await scheduled(store)
    task = await claim(store)
    unknown = await store.complete_activity("no-such-task", 1, "a1", "1", None, T0)
    assert (unknown.status, unknown.reason) == ("refused", "unknown task")
    wrong_worker = await store.complete_activity(task.task_id, 1, "a2", "1", None, T0)
    assert wrong_worker.status == "refused"
    await store.complete_activity(task.task_id, 1, "a1", None, BOOM, T0 + 1)  # retry
    late = await store.complete_activity(task.task_id, 1, "a1", '"late"', None, T0 + 2)
    assert late.status == "refused"
    assert "attempt 1 is no longer current (task is pending, attempt 2)" in str(late.reason)
    refused = await events_of(store, run.run_id, "ActivityResultRefused")
    assert [r["worker_id"] for r in refused] == ["a2", "a1"]
    assert (await op_of(store, run.run_id, "0:1"))["status"] == OpStatus.SCHEDULED


async def test_a_result_after_the_start_to_close_deadline_is_refused_and_timed_out(
    store: Store,
) -> None:
    run = await scheduled(store, start_to_close_timeout=5, max_attempts=1)
    task = await claim(store)
    outcome = await store.complete_activity(task.task_id, 1, "a1", '"late"', None, T0 + 6)
    assert outcome.status == "refused"
    assert outcome.reason == "the attempt's start_to_close deadline passed before the result " \
                             "arrived"
    op = await op_of(store, run.run_id, "0:1")
    assert op["status"] == OpStatus.FAILED
    assert json.loads(op["failure"])["timeout_kind"] == "start_to_close"
    assert (await task_of(store, task.task_id))["status"] == AttemptStatus.TIMED_OUT


async def test_a_heartbeat_records_details_and_extends_its_deadline(store: Store) -> None:
    await scheduled(store, heartbeat_timeout=5, start_to_close_timeout=60)
    task = await claim(store, lease=100.0)
    ack = await store.heartbeat_activity(task.task_id, 1, "a1", '{"done":3}', T0 + 4)
    assert (ack.accepted, ack.stop_requested) == (True, False)
    stored = await task_of(store, task.task_id)
    assert (stored["heartbeat_deadline"], stored["heartbeat_details"]) == (T0 + 9, '{"done":3}')
    assert stored["deadline_at"] == T0 + 9
    await store.heartbeat_activity(task.task_id, 1, "a1", None, T0 + 8)  # keeps the details
    assert (await task_of(store, task.task_id))["heartbeat_details"] == '{"done":3}'
    info = await store.describe(NS, "wf", None)
    assert info is not None and info["pending_operations"][0]["heartbeat_details"] == {"done": 3}
    # the deadline as the last heartbeat moved it (history has only the first)
    assert info["pending_operations"][0]["heartbeat_deadline"] == to_iso(T0 + 13)


async def test_a_late_or_stale_heartbeat_tells_the_attempt_to_stop(store: Store) -> None:
    await scheduled(store, heartbeat_timeout=5)
    task = await claim(store)
    stale = await store.heartbeat_activity(task.task_id, 1, "someone-else", None, T0 + 1)
    assert (stale.accepted, stale.stop_requested, stale.reason) == (
        False, True, "attempt is no longer current")
    late = await store.heartbeat_activity(task.task_id, 1, "a1", None, T0 + 5)
    assert (late.accepted, late.stop_requested, late.reason) == (False, True, "heartbeat timeout")
    stored = await task_of(store, task.task_id)
    assert (stored["status"], stored["attempt"]) == (AttemptStatus.PENDING, 2)  # retried


async def test_an_attempt_asked_to_stop_reports_a_stop_receipt(store: Store) -> None:
    run = await scheduled(store)
    task = await claim(store)
    await commit(store, run, RequestActivityStop("0:1", "wait_cancellation_completed"),
                 now=T0 + 1)
    assert await store.stop_requests("a1") == [task.task_id]
    assert (await store.heartbeat_activity(task.task_id, 1, "a1", None, T0 + 2)).stop_requested
    stopped = Failure.from_exception(RuntimeError("stopped")).with_details(
        stop_kind="cancel_scope", stop_confirmed=True)
    outcome = await store.complete_activity(task.task_id, 1, "a1", None, stopped, T0 + 3)
    assert (outcome.status, outcome.reason) == ("recorded", "stop receipt recorded")
    op = await op_of(store, run.run_id, "0:1")
    assert op["status"] == OpStatus.CANCELLED
    receipt = json.loads((await task_of(store, task.task_id))["stop_receipt"])
    assert receipt == {"kind": "cancel_scope", "worker_id": "a1", "attempt": 1,
                       "acknowledged_at": "2023-11-14T22:13:23+00:00", "confirmed": True,
                       "received_after_deadline": False}
    [event] = await events_of(store, run.run_id, "ActivityCancelled")
    assert event["stop_receipt"] == receipt
    assert await store.stop_requests("a1") == []


async def test_an_attempt_that_completes_before_it_stops_counts(store: Store) -> None:
    run = await scheduled(store)
    task = await claim(store)
    await commit(store, run, RequestActivityStop("0:1", "wait_cancellation_completed"))
    outcome = await store.complete_activity(task.task_id, 1, "a1", '"done"', None, T0 + 1)
    assert outcome.status == "recorded"
    assert (await op_of(store, run.run_id, "0:1"))["status"] == OpStatus.COMPLETED
    receipt = json.loads((await task_of(store, task.task_id))["stop_receipt"])
    assert receipt["kind"] == "completed"


async def test_try_cancel_closes_the_op_and_a_late_result_only_adds_a_receipt(
    store: Store,
) -> None:
    run = await scheduled(store)
    task = await claim(store)
    result = await commit(store, run, RequestActivityStop("0:1", "try_cancel"), now=T0 + 1)
    assert (result.ops["0:1"].status, result.ops["0:1"].interrupted) == (
        OpStatus.CANCELLED, True)  # the workflow does not wait
    await store.complete_activity(task.task_id, 1, "a1", '"late"', None, T0 + 2)
    assert (await op_of(store, run.run_id, "0:1"))["status"] == OpStatus.CANCELLED  # unchanged
    receipt = json.loads((await task_of(store, task.task_id))["stop_receipt"])
    assert (receipt["kind"], receipt["attempt"]) == ("completed", 1)
    assert (await events_of(store, run.run_id, "ActivityCancelRequested"))[0]["policy"] == (
        "try_cancel")


async def test_a_try_cancel_stop_done_is_the_attempts_receipt_not_a_late_result(
    store: Store,
) -> None:
    # the stop try_cancel asked for, confirmed: before, history said "the operation
    # was already closed; this ActivityCancelled came too late" and kept no receipt
    run = await scheduled(store)
    task = await claim(store)
    await commit(store, run, RequestActivityStop("0:1", "try_cancel"), now=T0 + 1)
    stopped = Failure.from_exception(RuntimeError("stopped")).with_details(
        stop_kind="cancel_scope", stop_confirmed=True)
    outcome = await store.complete_activity(task.task_id, 1, "a1", None, stopped, T0 + 2)
    assert outcome.status == "recorded"
    assert await events_of(store, run.run_id, "ActivityResultRefused") == []
    [event] = await events_of(store, run.run_id, "ActivityStopReceipt")
    assert (event["op_id"], event["attempt"], event["stop_receipt"]["kind"]) == (
        "0:1", 1, "cancel_scope")
    assert (await task_of(store, task.task_id))["status"] == AttemptStatus.CANCELLED


async def test_an_attempt_fenced_by_its_runs_close_is_a_stop_request(store: Store) -> None:
    # a run closed by another process (`durable cancel`, another worker's
    # watchdog expiring the cleanup deadline): the wake-up stays in that
    # process, and the worker running the attempt reads its stop requests
    # (`stop_requests`). The fenced attempt (cancelled) was not among them: a
    # cleanup activity ran to its end, and the cascade said "NOT VERIFIED ...
    # its worker is gone" while that worker was alive and running it.
    run = await scheduled(store)
    task = await claim(store)
    await store.close_run_externally(NS, run.workflow_id, None, "cancelled", "enough", T0 + 1)
    assert (await task_of(store, task.task_id))["status"] == "cancelled"
    assert await store.stop_requests("a1") == [task.task_id]
    assert await store.stop_requests("a2") == []
    stopped = Failure.from_exception(RuntimeError("stopped")).with_details(
        stop_kind="cancel_scope", stop_confirmed=True)
    await store.complete_activity(task.task_id, 1, "a1", None, stopped, T0 + 2)
    assert json.loads((await task_of(store, task.task_id))["stop_receipt"])["kind"] == (
        "cancel_scope")
    assert await store.stop_requests("a1") == []  # stopped: not asked again
