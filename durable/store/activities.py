"""Remote activities: claiming attempts, recording their outcomes, timing them out.

An attempt is fenced by (task id, attempt, owner): a result from an attempt
that is no longer current (timed out, retried, cancelled, its run closed) is
refused, visibly (``ActivityResultRefused``). Retries follow the policy that
was frozen when the activity was scheduled.
"""

from __future__ import annotations

from typing import Any

from ..clock import to_iso
from ..driver import Program, Row, Tx, ex, many, placeholders, q, q1
from ..errors import ConfigurationError
from ..failure import Failure
from ..options import RetryPolicy
from ..wakes import Wake
from . import cancellation, queues
from .claims import ready_count, share_limit
from .events import Event, append_events, record_failure
from .fastpath import append_events_of_runs
from .records import (
    TASK_COLUMNS,
    ActivityOutcome,
    ActivityTask,
    AttemptStatus,
    Claimed,
    HeartbeatAck,
    OpKind,
    OpRecord,
    OpStatus,
    dump_failure,
    earliest,
    loads,
    plus,
)

#: a claim of the attempts this process's runs scheduled takes at least this
#: many of them (its room allowing), even beyond its fair share of the queue's
#: ready attempts: below it, attempts of runs held here would go to other
#: processes (a wake-up and a read each); above, a fan-out is shared as before
OWN_AT_LEAST = 64


def claim_activities(
    tx: Tx,
    namespace: str,
    task_queue: str,
    worker_id: str,
    names: tuple[str, ...],
    limit: int,
    lease_seconds: float,
    now: float,
    task_ids: tuple[str, ...] = (),
    available_by: float | None = None,
) -> Program[Claimed[ActivityTask]]:
    """Start up to `limit` pending attempts of these activities on this worker,
    by priority then age, at most its fair share of the ready ones
    (`claims.fair_limit`) and within the queue's limits (`durable.store.queues`).

    `task_ids`: only among these (attempts this process's runs just
    scheduled: run where their run runs, their outcome reaches it in process),
    at most the fair share of all the queue's ready attempts but at least
    `OWN_AT_LEAST`, so that a large fan-out is still shared; `left` then
    counts those ids left ready. `available_by`: only attempts available since
    then (a fallback poll's claim leaves attempts just scheduled elsewhere to
    the process that scheduled them)."""
    if limit <= 0 or not names:
        return Claimed()
    queue = yield from queues.read_limits(tx, namespace, task_queue, "activities")
    bucket = None
    if queue is not None:
        room, bucket = yield from queues.activity_room(tx, queue, namespace, task_queue, limit,
                                                       now)
        limit = min(limit, room)
        if limit <= 0:
            held: Claimed[ActivityTask] = Claimed()
            held.limited = True
            held.limits = str(queue["limits"])
            held.next_at = None if bucket is None or bucket.tokens >= 1 else (
                bucket.next_token_at())
            return held
    ready_sql = (
        "activity_tasks WHERE namespace = ? AND task_queue = ? AND status = 'pending' "
        "AND available_at <= ? AND (deadline_at IS NULL OR deadline_at > ?) AND activity_name "
        f"IN ({placeholders(len(names))}) ")
    ready_params = (namespace, task_queue, now if available_by is None else min(now, available_by),
                    now, *names)
    share, share_params = yield from share_limit(
        tx, ready_sql, ready_params, limit, namespace, task_queue, now, "activity_names")
    if task_ids:
        ready_sql += f"AND task_id IN ({placeholders(len(task_ids))}) "
        ready_params = (*ready_params, *task_ids)
        # its own: at least OWN_AT_LEAST of them, whatever the fair share
        floor = min(limit, OWN_AT_LEAST)
        if share == "?":
            share_params = (max(int(share_params[0]), floor),)
        else:
            share = (f"(SELECT CASE WHEN s.f < ? THEN ? ELSE s.f END FROM (SELECT {share} AS f) "
                     "AS s)")
            share_params = (floor, floor, *share_params)
    counted, counted_params = ready_count(ready_sql, ready_params, limit, namespace, task_queue,
                                          now, "activity_names")
    rows = yield q(
        "SELECT task_id, run_id, workflow_id, op_id, activity_name, input, attempt, options, "
        f"scheduled_at, schedule_to_close_deadline, heartbeat_details, {counted} "
        f"FROM {ready_sql}ORDER BY priority, available_at LIMIT {share}" + tx.skip_locked,
        *counted_params, *ready_params, *share_params,
    )
    tasks: Claimed[ActivityTask] = Claimed()
    updates: list[tuple[Any, ...]] = []
    started: list[Event] = []
    for row in rows:
        try:
            opts = loads(row["options"])
            s2c = row["schedule_to_close_deadline"]
            stc = plus(now, opts.get("start_to_close_timeout"))
            hb = plus(now, opts.get("heartbeat_timeout"))
            lease = now + lease_seconds
            event: Event = ("ActivityStarted", {
                "op_id": row["op_id"], "activity_type": row["activity_name"],
                "task_id": row["task_id"], "attempt": int(row["attempt"]),
                "worker_id": worker_id, "start_to_close_deadline": to_iso(stc),
                "heartbeat_deadline": to_iso(hb),
            })
        except (ValueError, TypeError, OverflowError, KeyError, AttributeError) as exc:
            # A task that cannot be started must not block the queue behind it
            # (it would be picked first again and again): fail it, saying why.
            yield from _quarantine(tx, row, exc, now)
            continue
        updates.append((worker_id, now, stc, hb, lease, earliest(stc, hb, s2c, lease),
                        row["task_id"]))
        started.append(event)
        tasks.append(ActivityTask(
            task_id=row["task_id"], namespace=namespace, task_queue=task_queue,
            name=row["activity_name"], run_id=row["run_id"], workflow_id=row["workflow_id"],
            op_id=row["op_id"], input=row["input"], attempt=int(row["attempt"]), options=opts,
            scheduled_at=row["scheduled_at"], claimed_at=now,
            heartbeat_details=row["heartbeat_details"], start_to_close_deadline=stc,
            schedule_to_close_deadline=s2c, heartbeat_deadline=hb,
        ))
    if updates:
        yield many(
            "UPDATE activity_tasks SET status = 'running', owner = ?, claimed_at = ?, "
            "start_to_close_deadline = ?, heartbeat_deadline = ?, lease_expires_at = ?, "
            "deadline_at = ?, schedule_to_start_deadline = NULL WHERE task_id = ?",
            updates,
        )
        yield from append_events_of_runs(
            tx, [(task.run_id, event) for task, event in zip(tasks, started, strict=True)], now)
    if rows:
        tasks.left = max(0, int(rows[0]["ready"]) - len(rows))
        tasks.live = int(rows[0]["live"])
    if queue is not None:
        yield from queues.spend_activity_tokens(namespace, task_queue, bucket, len(updates))
        tasks.limited = True
        tasks.limits = str(queue["limits"])
    return tasks


def _quarantine(tx: Tx, row: Row, exc: BaseException, now: float) -> Program[None]:
    """Fail a task that cannot be started (its stored options are unusable)."""
    failure = Failure("invalid_task", f"activity {row['activity_name']} could not be started: "
                      f"{type(exc).__name__}: {exc}", "durable.ActivityFailed",
                      details={"attempt": int(row["attempt"]), "non_retryable": True})
    yield ex(
        "UPDATE activity_tasks SET status = 'failed', closed_at = ?, deadline_at = NULL, "
        "last_failure = ? WHERE task_id = ?", now, dump_failure(failure), row["task_id"],
    )
    yield from _resolve_op(tx, row, OpStatus.FAILED, None, failure, ("ActivityFailed", {
        "op_id": row["op_id"], "activity_type": row["activity_name"],
        "task_id": row["task_id"], "attempt": int(row["attempt"]),
        "failure": failure.to_dict(),
    }), now)
    return None


def _resolve_op(
    tx: Tx,
    task: Row,
    status: str,
    result: str | None,
    failure: Failure | None,
    event: Event,
    now: float,
) -> Program[None]:
    """Record an activity's terminal outcome on its op and wake the run.

    An op closed already keeps its outcome and nobody is woken: the stop a
    TRY_CANCEL asked for (it closed the op when asked) is recorded as the
    attempt's ``ActivityStopReceipt``, any other late outcome is refused,
    visibly (``ActivityResultRefused``, with its attempt).
    """
    count = yield ex(
        "UPDATE ops SET status = ?, result = ?, failure = ?, closed_at = ? "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        status, result, dump_failure(failure), now, task["run_id"], task["op_id"],
    )
    if not count:
        data = event[1] if isinstance(event[1], dict) else {}
        attempt = data.get("attempt", task["attempt"])
        if event[0] == "ActivityCancelled" and data.get("stop_receipt") is not None:
            # the stop a TRY_CANCEL asked for, done: nothing came too late (the
            # op closed when the stop was asked); the attempt's end is its receipt
            yield from append_events(tx, task["run_id"], [("ActivityStopReceipt", {
                "op_id": task["op_id"], "task_id": task["task_id"], "attempt": attempt,
                "stop_receipt": data["stop_receipt"],
            })], now)
            return None
        yield from append_events(tx, task["run_id"], [("ActivityResultRefused", {
            "op_id": task["op_id"], "task_id": task["task_id"], "attempt": attempt,
            "reason": f"the operation was already closed; this {event[0]} came too late",
        })], now)
        return None
    yield from append_events(tx, task["run_id"], [event], now)
    if failure is not None:
        yield from record_failure(task["run_id"], failure, now)
    yield ex(
        "UPDATE runs SET ready_at = ? WHERE run_id = ? AND ready_at IS NULL", now, task["run_id"]
    )
    op = OpRecord(task["op_id"], OpKind.ACTIVITY, task["activity_name"], status, result,
                  failure, None, now, task_id=task["task_id"])
    tx.wake(Wake.run(task["run_id"], op))
    _attempt_notice(tx, task, event[0], failure, now)
    return None


def _attempt_notice(tx: Tx, task: Row, outcome: str, failure: Failure | None,
                    now: float) -> None:
    """What the logs and metrics say of an attempt that ended (in-process only)."""
    claimed = _column(task, "claimed_at")
    tx.wake(Wake.attempt_ended(task["task_id"], {
        "task_id": task["task_id"], "activity_type": task["activity_name"],
        "run_id": task["run_id"], "attempt": int(_column(task, "attempt") or 0),
        "outcome": outcome, "started_at": claimed, "ended_at": now,
        "failure_category": failure.category if failure else None,
        "timeout_kind": failure.timeout_kind if failure else None,
    }))


def _column(row: Row, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, IndexError):
        return None


def _retry_or_fail(
    tx: Tx,
    task: Row,
    failure: Failure,
    retryable: bool,
    now: float,
    terminal_event: str,
) -> Program[str]:
    """Schedule the next attempt if the frozen policy allows it, else fail terminally."""
    opts = loads(task["options"])
    attempt = int(task["attempt"])
    s2c = task["schedule_to_close_deadline"]
    try:
        policy: RetryPolicy | None = RetryPolicy.from_dict(opts["retry"])
    except (ConfigurationError, KeyError, TypeError, ValueError):
        policy = None  # a policy that cannot be read back is not retried on
    if opts.get("unit") and _unconfirmed(failure):
        # an idempotent unit whose effect may or may not have happened: never
        # guess by running it again; the run goes to review (workflow.units)
        policy = None
        failure = failure.with_details(unit_outcome="unknown")
    available = None if policy is None else policy.next_attempt_at(
        failure, attempt, now, s2c, retryable=retryable)
    if available is not None:
        s2s = plus(available, opts.get("schedule_to_start_timeout"))
        yield ex(
            "UPDATE activity_tasks SET status = 'pending', attempt = attempt + 1, "
            "owner = NULL, available_at = ?, schedule_to_start_deadline = ?, "
            "start_to_close_deadline = NULL, heartbeat_deadline = NULL, "
            "lease_expires_at = NULL, deadline_at = ?, last_failure = ?, claimed_at = NULL "
            "WHERE task_id = ?",
            available, s2s, earliest(s2s, s2c), dump_failure(failure), task["task_id"],
        )
        data: dict[str, Any] = {
            "op_id": task["op_id"], "activity_type": task["activity_name"],
            "task_id": task["task_id"], "failed_attempt": attempt,
            "next_attempt": attempt + 1, "next_attempt_at": to_iso(available),
            "schedule_to_start_deadline": to_iso(s2s), "failure": failure.to_dict(),
        }
        if failure.timeout_kind is not None:
            data["timeout_kind"] = failure.timeout_kind
        yield from append_events(tx, task["run_id"], [("ActivityRetryScheduled", data)], now)
        tx.wake(Wake.activities(task["namespace"], task["task_queue"]))
        _attempt_notice(tx, task, "ActivityRetryScheduled", failure, now)
        return "retry_scheduled"
    final_status = (AttemptStatus.TIMED_OUT if terminal_event == "ActivityTimedOut"
                    else AttemptStatus.FAILED)
    yield ex(
        "UPDATE activity_tasks SET status = ?, closed_at = ?, deadline_at = NULL, "
        "last_failure = ? WHERE task_id = ?",
        final_status, now, dump_failure(failure), task["task_id"],
    )
    event: dict[str, Any] = {
        "op_id": task["op_id"], "activity_type": task["activity_name"],
        "task_id": task["task_id"], "attempt": attempt, "failure": failure.to_dict(),
    }
    if failure.timeout_kind is not None:
        event["timeout_kind"] = failure.timeout_kind
    yield from _resolve_op(tx, task, OpStatus.FAILED, None, failure, (terminal_event, event), now)
    return "recorded"


def _unconfirmed(failure: Failure) -> bool:
    """A failure after which nobody knows whether the attempt's effect happened:
    its worker was lost, or it ran past its start-to-close or heartbeat timeout."""
    if failure.category == "worker_lost":
        return True
    return failure.category == "timeout" and failure.timeout_kind in (
        "start_to_close", "heartbeat")


def task_expiry(task: Row, now: float) -> tuple[str, float] | None:
    """Which of an open attempt's deadlines has passed at `now`, and when it
    fell due (the one `time_out_task` applies); None when none has."""
    s2c = task["schedule_to_close_deadline"]
    if s2c is not None and now >= s2c:
        return "schedule_to_close", s2c
    if task["status"] == AttemptStatus.PENDING:
        s2s = task["schedule_to_start_deadline"]
        return ("schedule_to_start", s2s) if s2s is not None and now >= s2s else None
    candidates = ((task["start_to_close_deadline"], "start_to_close"),
                  (task["heartbeat_deadline"], "heartbeat"),
                  (task["lease_expires_at"], "worker_lost"))
    expired = sorted((d, k) for d, k in candidates if d is not None and now >= d)
    return (expired[0][1], expired[0][0]) if expired else None


def time_out_task(tx: Tx, task: Row, now: float) -> Program[str | None]:
    """Apply whichever of the task's timeouts has expired; None when none has."""
    name, attempt = task["activity_name"], int(task["attempt"])
    expiry = task_expiry(task, now)
    if expiry is None:
        return None
    kind, deadline = expiry
    if kind in ("schedule_to_close", "schedule_to_start"):
        failure = Failure.activity_timeout(kind, deadline, name, attempt)
        yield from _retry_or_fail(tx, task, failure, kind == "schedule_to_start", now,
                                  "ActivityTimedOut")
        return kind
    if kind == "worker_lost":
        failure = Failure.worker_lost(name, attempt, deadline)
        yield from _retry_or_fail(tx, task, failure, True, now, "ActivityFailed")
        return kind
    failure = Failure.activity_timeout(kind, deadline, name, attempt)
    tx.wake(Wake.activity_stop(task["task_id"]))
    yield from _retry_or_fail(tx, task, failure, True, now, "ActivityTimedOut")
    return kind


def _refuse(tx: Tx, task: Row | None, task_id: str, attempt: int, worker_id: str,
            reason: str, now: float) -> Program[ActivityOutcome]:
    if task is not None:
        yield from append_events(tx, task["run_id"], [("ActivityResultRefused", {
            "op_id": task["op_id"], "task_id": task_id, "attempt": attempt,
            "worker_id": worker_id, "reason": reason,
        })], now)
    return ActivityOutcome("refused", reason)


def _record_stop(tx: Tx, task: Row, task_id: str, attempt: int, worker_id: str,
                 failure: Failure | None, now: float) -> Program[ActivityOutcome]:
    """An attempt that was asked to stop reports back having stopped (or, fenced
    already, with anything): its stop receipt, and the op's cancellation."""
    receipt = yield from cancellation.stop_receipt(task, worker_id, failure, now)
    if task["status"] == AttemptStatus.RUNNING:  # it stopped (failure) before completing
        yield ex(
            "UPDATE activity_tasks SET status = 'cancelled', closed_at = ?, deadline_at = NULL "
            "WHERE task_id = ?", now, task_id,
        )
        stop_failure = Failure.activity_cancelled(
            f"activity {task['activity_name']} stopped on request", stop_receipt=receipt)
        yield from _resolve_op(tx, task, OpStatus.CANCELLED, None, stop_failure, (
            "ActivityCancelled", {"op_id": task["op_id"], "task_id": task_id,
                                  "activity_type": task["activity_name"],
                                  "attempt": attempt, "stop_receipt": receipt}), now)
        return ActivityOutcome("recorded", "stop receipt recorded")
    late: list[Event] = [("ActivityStopReceipt", {
        "op_id": task["op_id"], "task_id": task_id, "attempt": attempt,
        "stop_receipt": receipt,
    })]
    if failure is None:
        late.append(("ActivityResultRefused", {
            "op_id": task["op_id"], "task_id": task_id, "attempt": attempt,
            "worker_id": worker_id, "completed_after_stop": True,
            "reason": "the attempt completed its work (its effect happened) after the "
                      "workflow had stopped waiting for it; its result is not delivered",
        }))
    yield from append_events(tx, task["run_id"], late, now)
    return ActivityOutcome("refused", "stop receipt recorded")


def activity_slot_freed(tx: Tx, namespace: str, task_queue: str) -> None:
    """An attempt of this queue stopped running: when the queue limits its
    attempts by a count (``max_running_activities``, as a claim of this
    process found: `Tx.activity_slot_limited`), wake its activity claimers,
    here and in the other processes, in this commit. Without it a worker
    whose claim found the queue full learnt of the slot at its next poll
    (`Worker(poll_interval)`), so a queue at ``max_running_activities=N``
    ran below N for up to a poll after each attempt (the runs' equivalent:
    `durable.store.runs.slot_freed`, decision (at))."""
    if (namespace, task_queue) in tx.activity_slot_limited:
        tx.wake(Wake.activities(namespace, task_queue))


def complete_activity(
    tx: Tx,
    task_id: str,
    attempt: int,
    worker_id: str,
    result: str | None,
    failure: Failure | None,
    now: float,
) -> Program[ActivityOutcome]:
    """Record an attempt's result or failure (or refuse it, visibly)."""
    task = yield q1(f"SELECT {TASK_COLUMNS} FROM activity_tasks WHERE task_id = ?" + tx.lock,
                    task_id)
    if task is None:
        return (yield from _refuse(tx, None, task_id, attempt, worker_id, "unknown task", now))
    if (task["status"] == AttemptStatus.RUNNING and task["owner"] == worker_id
            and int(task["attempt"]) == attempt):
        # whatever is recorded below (a result, a failure, a stop, a time-out),
        # the attempt stops running here: its slot of the queue comes free
        activity_slot_freed(tx, task["namespace"], task["task_queue"])
    if (task["stop_requested"] and task["stop_receipt"] is None and task["owner"] == worker_id
            and int(task["attempt"]) == attempt
            and task["status"] in (AttemptStatus.RUNNING, AttemptStatus.CANCELLED)):
        if task["status"] == AttemptStatus.CANCELLED or failure is not None:
            return (yield from _record_stop(tx, task, task_id, attempt, worker_id, failure, now))
        # asked to stop, but it completed first: the receipt says so and the result counts
        yield from cancellation.stop_receipt(task, worker_id, None, now)
    if (task["status"] != AttemptStatus.RUNNING or int(task["attempt"]) != attempt
            or task["owner"] != worker_id):
        reason = (
            f"attempt {attempt} is no longer current (task is {task['status']}, "
            f"attempt {task['attempt']})"
        )
        return (yield from _refuse(tx, task, task_id, attempt, worker_id, reason, now))
    kind = yield from time_out_task(tx, task, now)
    if kind is not None:
        reason = f"the attempt's {kind} deadline passed before the result arrived"
        return (yield from _refuse(tx, task, task_id, attempt, worker_id, reason, now))
    if failure is None:
        yield ex(
            "UPDATE activity_tasks SET status = 'completed', closed_at = ?, deadline_at = NULL "
            "WHERE task_id = ?",
            now, task_id,
        )
        yield from _resolve_op(tx, task, OpStatus.COMPLETED, result, None, ("ActivityCompleted", {
            "op_id": task["op_id"], "activity_type": task["activity_name"], "task_id": task_id,
            "attempt": attempt, "result": loads(result),
        }), now)
        return ActivityOutcome("recorded")
    outcome = yield from _retry_or_fail(
        tx, task, failure, not failure.non_retryable, now, "ActivityFailed"
    )
    return ActivityOutcome(outcome)


def attempt_state(task_id: str) -> Program[tuple[str, int, str | None] | None]:
    """(status, attempt, owner) of an activity task, or None."""
    row = yield q1("SELECT status, attempt, owner FROM activity_tasks WHERE task_id = ?",
                   task_id)
    return None if row is None else (str(row["status"]), int(row["attempt"]), row["owner"])


def heartbeat_activity(
    tx: Tx, task_id: str, attempt: int, worker_id: str, details: str | None, now: float
) -> Program[HeartbeatAck]:
    """Record progress details and extend the heartbeat deadline; say whether to stop."""
    task = yield q1(f"SELECT {TASK_COLUMNS} FROM activity_tasks "
                    "WHERE task_id = ?" + tx.lock, task_id)
    if task is None or task["status"] != AttemptStatus.RUNNING or (
        int(task["attempt"]) != attempt or task["owner"] != worker_id
    ):
        return HeartbeatAck(False, True, "attempt is no longer current")
    kind = yield from time_out_task(tx, task, now)
    if kind is not None:
        return HeartbeatAck(False, True, f"{kind} timeout")
    opts = loads(task["options"])
    hb = plus(now, opts.get("heartbeat_timeout"))
    yield ex(
        "UPDATE activity_tasks SET heartbeat_details = COALESCE(?, heartbeat_details), "
        "heartbeat_deadline = ?, deadline_at = ? WHERE task_id = ?",
        details, hb,
        earliest(hb, task["start_to_close_deadline"], task["schedule_to_close_deadline"],
                 task["lease_expires_at"]),
        task_id,
    )
    return HeartbeatAck(True, bool(task["stop_requested"]))
