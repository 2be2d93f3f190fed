"""The watchdog's programs: the next deadline, and enforcing every kind that expired."""

from __future__ import annotations

import json

import pytest

from durable import RetryPolicy
from durable.failure import Failure
from durable.store import Store
from durable.store.records import AttemptStatus, OpStatus, RunStatus

from ._support import (
    NS,
    T0,
    commit,
    current,
    events_of,
    op_of,
    schedule,
    start,
    started_and_claimed,
    task_of,
)

pytestmark = pytest.mark.anyio


async def test_nothing_due_in_an_empty_namespace(store: Store) -> None:
    assert await store.next_deadline(NS, T0) == (None, None)
    assert await store.enforce_expired(NS, T0) == {}


async def test_next_deadline_is_the_earliest_of_runs_attempts_retries_and_leases(
    store: Store,
) -> None:
    await start(store, "bounded", run_timeout=500.0)
    assert await store.next_deadline(NS, T0) == (T0 + 500, None)
    run = await started_and_claimed(store, "leased")  # a 30 s lease: apart from deadlines
    assert await store.next_deadline(NS, T0) == (T0 + 500, T0 + 30)
    await commit(store, run, schedule("0:1", schedule_to_close_timeout=20))
    assert await store.next_deadline(NS, T0) == (T0 + 20, T0 + 30)
    assert await store.next_deadline("other", T0) == (None, None)


async def test_an_attempt_lease_is_a_lease_not_a_deadline(store: Store) -> None:
    """A virtual clock must never skip to a lease expiry (it would declare a live
    worker lost): an attempt bounded only by its lease reports it as a lease."""
    run = await started_and_claimed(store, "wf")
    await store.release_runs("w1", [run.run_id], T0, attempts=False)
    await commit(store, run, schedule("0:1"))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 100.0, T0)
    assert await store.next_deadline(NS, T0) == (None, T0 + 100)


async def test_a_scheduled_retry_is_a_deadline_of_its_own(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await store.release_runs("w1", [run.run_id], T0, attempts=False)  # no run lease
    await commit(store, run, schedule("0:1", retry=RetryPolicy(initial_interval=7.0)))
    [task] = await store.claim_activities(NS, "default", "a1", ("ship",), 1, 100.0, T0)
    await store.complete_activity(task.task_id, 1, "a1", None,
                                  Failure.from_exception(RuntimeError("x")), T0 + 1)
    assert await store.next_deadline(NS, T0 + 1) == (T0 + 8, None)  # when the retry may start


@pytest.mark.parametrize(("timeouts", "kind"), [
    ({"run_timeout": 10.0}, "run_timeout"),
    ({"execution_timeout": 10.0, "run_timeout": 20.0}, "execution_timeout"),
])
async def test_an_expired_run_is_timed_out(store: Store, timeouts: dict[str, float],
                                           kind: str) -> None:
    run_id = await start(store, "wf", **timeouts)
    assert await store.enforce_expired(NS, T0 + 9.9) == {}
    assert await store.enforce_expired(NS, T0 + 10) == {kind: 1}
    run = await current(store, "wf")
    assert (run.status, run.closed_reason) == (RunStatus.TIMED_OUT, kind)
    assert run.failure is not None and run.failure.timeout_kind == kind
    [event] = await events_of(store, run_id, "WorkflowTimedOut")
    assert event["timeout_kind"] == kind
    assert await store.enforce_expired(NS, T0 + 11) == {}  # idempotent


async def test_an_expired_cleanup_deadline_cancels_the_run(store: Store) -> None:
    await start(store, "wf")
    await store.request_cancellation(NS, "wf", None, "stop", 5.0, None, "client", T0)
    assert await store.enforce_expired(NS, T0 + 5) == {"cleanup_deadline": 1}
    run = await current(store, "wf")
    assert (run.status, run.closed_reason) == (RunStatus.CANCELLED, "deadline_expired")
    assert run.failure is not None and run.failure.get("lifecycle") == "deadline_expired"
    assert run.cancellation is not None
    assert run.cancellation["cleanup_outcome"] == "deadline_expired"
    # never delivered (no worker): it said "did not finish its cleanup"
    assert "wf never received its cancellation (no worker ran it)" in str(run.failure), run.failure


async def test_enforcing_for_one_run_leaves_the_others(store: Store) -> None:
    first = await start(store, "first", run_timeout=10.0)
    await start(store, "second", run_timeout=10.0)
    assert await store.enforce_expired(NS, T0 + 10, first) == {"run_timeout": 1}
    assert (await current(store, "second")).status == RunStatus.PENDING


async def test_schedule_to_start_times_out_a_pending_attempt(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", schedule_to_start_timeout=5, max_attempts=1))
    assert await store.enforce_expired(NS, T0 + 5) == {"schedule_to_start": 1}
    assert (await task_of(store, "task-0:1"))["status"] == AttemptStatus.TIMED_OUT
    op = await op_of(store, run.run_id, "0:1")
    assert op["status"] == OpStatus.FAILED
    assert json.loads(op["failure"])["timeout_kind"] == "schedule_to_start"


@pytest.mark.parametrize(("options", "at", "kind"), [
    ({"start_to_close_timeout": 5}, 5, "start_to_close"),
    ({"heartbeat_timeout": 3, "start_to_close_timeout": 60}, 3, "heartbeat"),
    ({"schedule_to_close_timeout": 4}, 4, "schedule_to_close"),
])
async def test_a_running_attempt_times_out_by_its_earliest_deadline(
    store: Store, options: dict[str, float], at: float, kind: str
) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", max_attempts=1, **options))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 100.0, T0)
    assert await store.enforce_expired(NS, T0 + at - 0.5) == {}
    assert await store.enforce_expired(NS, T0 + at) == {kind: 1}
    [event] = await events_of(store, run.run_id, "ActivityTimedOut")
    assert event["timeout_kind"] == kind


async def test_a_watchdog_pass_enforces_at_the_instant_its_transaction_runs(
    store: Store,
) -> None:
    """The pass reads its clock inside the transaction: a deadline that passed
    while the pass waited for its turn is enforced by that pass, recorded at
    that instant, and the next deadline comes back from the same transaction."""
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", max_attempts=1, heartbeat_timeout=3,
                                      start_to_close_timeout=60))
    await commit(store, run, schedule("0:2", max_attempts=1, heartbeat_timeout=9,
                                      start_to_close_timeout=60))
    await store.claim_activities(NS, "default", "a1", ("ship",), 2, 100.0, T0)
    reads: list[float] = []

    def clock() -> float:
        reads.append(T0 + 3.25)
        return reads[-1]

    done = await store.watchdog_pass(NS, clock)
    assert reads == [T0 + 3.25]
    assert done == (T0 + 3.25, {"heartbeat": 1}, T0 + 9, T0 + 30)  # 30: the run's lease
    [event] = await events_of(store, run.run_id, "ActivityTimedOut")
    assert event["timeout_kind"] == "heartbeat"
    again = await store.watchdog_pass(NS, lambda: T0 + 4)
    assert again.counts == {}  # recorded once
    assert len(await events_of(store, run.run_id, "ActivityTimedOut")) == 1


async def test_a_timed_out_attempt_with_attempts_left_is_retried(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", start_to_close_timeout=5, max_attempts=2))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 100.0, T0)
    assert await store.enforce_expired(NS, T0 + 5) == {"start_to_close": 1}
    stored = await task_of(store, "task-0:1")
    assert (stored["status"], stored["attempt"]) == (AttemptStatus.PENDING, 2)
    [retry] = await events_of(store, run.run_id, "ActivityRetryScheduled")
    assert retry["timeout_kind"] == "start_to_close"


async def test_an_attempt_whose_worker_stopped_renewing_is_worker_lost(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", max_attempts=1))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 10.0, T0)
    assert await store.enforce_expired(NS, T0 + 10) == {"worker_lost": 1}
    op = await op_of(store, run.run_id, "0:1")
    failure = json.loads(op["failure"])
    assert (failure["failure_category"], failure["exception_class"]) == (
        "worker_lost", "durable.WorkerLost")


async def test_overdue_reads_what_a_pass_would_enforce_and_enforces_nothing(
        store: Store) -> None:
    """`overdue` (``durable repair-pass --dry-run``, ``GET /api/system/repair``):
    the deadlines passed and not enforced, by kind, oldest first, and how late
    the oldest is; reading it changes nothing."""
    assert (await store.overdue(NS, T0))["runs"] == {}
    await start(store, "slow", run_timeout=10.0)
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", max_attempts=1, start_to_close_timeout=5))
    await commit(store, run, schedule("0:2", max_attempts=1, schedule_to_start_timeout=3))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 100.0, T0)  # takes 0:1
    assert (await store.overdue(NS, T0 + 2.9))["activity_attempts"] == {}
    seen = await store.overdue(NS, T0 + 12)
    assert seen["runs"] == {"run_timeout": 1}
    assert seen["activity_attempts"] == {"schedule_to_start": 1, "start_to_close": 1}
    assert seen["attempt_ids"] == ["task-0:2", "task-0:1"]  # oldest due first
    assert seen["oldest_overdue_seconds"] == pytest.approx(9.0)  # 0:2's, due at T0 + 3
    assert (seen["scan_limit"], seen["scan_pressure"]) == (100, False)
    assert (await store.overdue(NS, T0 + 12, limit=1))["scan_pressure"] is True
    assert (await store.overdue("other", T0 + 12))["attempt_ids"] == []
    assert await store.overdue(NS, T0 + 12) == seen  # read only
    assert await store.overdue_counts([NS, "other"], T0 + 12) == {
        (NS, "runs"): (1, T0 + 10), (NS, "activity_attempts"): (2, T0 + 3)}
    # the activity-timeout pass: the ids asked for, each once
    results = await store.enforce_attempts(NS, ["task-0:1", "task-0:9"], T0 + 12)
    assert results == [
        {"execution_id": "task-0:1", "outcome": "enforced", "kind": "start_to_close",
         "has_retry": False},
        {"execution_id": "task-0:9", "outcome": "skipped", "reason": "not_found"}]
    assert (await task_of(store, "task-0:1"))["status"] == AttemptStatus.TIMED_OUT
    assert await store.enforce_attempts(NS, ["task-0:2"], T0 + 1) == [
        {"execution_id": "task-0:2", "outcome": "skipped", "reason": "not_expired"}]
    after = await store.overdue(NS, T0 + 12)
    assert after["activity_attempts"] == {"schedule_to_start": 1}
    assert await store.enforce_expired(NS, T0 + 12) == {"run_timeout": 1,
                                                        "schedule_to_start": 1}
    assert (await store.overdue(NS, T0 + 12))["attempt_ids"] == []


async def test_an_activity_pass_says_when_it_scheduled_a_retry(store: Store) -> None:
    run = await started_and_claimed(store, "wf")
    await commit(store, run, schedule("0:1", start_to_close_timeout=5, max_attempts=2))
    await store.claim_activities(NS, "default", "a1", ("ship",), 1, 100.0, T0)
    assert await store.enforce_attempts(NS, ["task-0:1"], T0 + 5) == [
        {"execution_id": "task-0:1", "outcome": "enforced", "kind": "start_to_close",
         "has_retry": True}]


async def test_metrics_count_deadlines_passed_and_not_enforced(store: Store) -> None:
    """``durable_deadlines_overdue`` and ``durable_deadline_oldest_overdue_seconds``:
    what an operator alerts on when no watchdog runs (T0 is long past)."""
    pytest.importorskip("prometheus_client")
    from durable.http.metrics import Metrics

    await start(store, "slow", run_timeout=10.0)
    text, _ = await Metrics(store).render()
    lines = {x.split(" ")[0]: float(x.split(" ")[1]) for x in text.decode().splitlines()
             if x.startswith("durable_deadline")}
    assert lines[f'durable_deadlines_overdue{{namespace="{NS}",of="runs"}}'] == 1.0
    assert lines[f'durable_deadline_oldest_overdue_seconds{{namespace="{NS}"}}'] > 60
    await store.enforce_expired(NS, T0 + 10)
    text, _ = await Metrics(store).render()
    assert "durable_deadlines_overdue{" not in text.decode()
