"""Closing a run and everything that hangs off it, in the caller's transaction.

Closing revokes the run's authority (epoch bump), fences its open activity
attempts, cancels its timers, applies the parent close policy to its open
children, resolves the parent's child op, and starts the next run for
continue-as-new.
"""

from __future__ import annotations

from typing import Any

from ..driver import Program, Row, Stmt, Tx, ex, q, q1
from ..errors import WorkflowNotFound
from ..failure import Failure
from ..wakes import Wake
from . import cancellation
from .events import (
    EVENT_INSERT,
    Event,
    append_events,
    event_text,
    insert_events,
    record_failure,
)
from .fastpath import fence
from .records import (
    OP_COLUMNS,
    OPEN_SQL,
    OPEN_STATUSES,
    RUN_COLUMNS,
    OpKind,
    OpRecord,
    OpStatus,
    RunRecord,
    RunStatus,
    StartRequest,
    dump_failure,
    dumps,
    loads,
    new_id,
    op_from_row,
    run_from_row,
)
from .returning import update_one_returning
from .runs import get_run, insert_run, slot_freed, slot_freed_by_other, unheld_wake

_CLOSE_EVENT = {
    RunStatus.COMPLETED: "WorkflowCompleted",
    RunStatus.FAILED: "WorkflowFailed",
    RunStatus.CANCELLED: "WorkflowCancelled",
    RunStatus.TERMINATED: "WorkflowTerminated",
    RunStatus.TIMED_OUT: "WorkflowTimedOut",
    RunStatus.CONTINUED: "WorkflowContinuedAsNew",
}


def _cancellation_outcome(cancellation: dict[str, Any], status: str, closed_reason: str,
                          reason: str | None, now: float) -> dict[str, Any]:
    """The cancellation record as the run closes: its lifecycle and cleanup outcome."""
    if closed_reason == "deadline_expired":
        lifecycle = outcome = "deadline_expired"
    elif not cancellation.get("delivered_at"):
        # closed (completed, failed, timed out, terminated, cancelled) before
        # any worker delivered the request: no cleanup ran, so it neither
        # "completed" nor was "cut short" (a run that completed while the
        # request waited read "cleanup completed, deadline met")
        lifecycle = "cancelled" if status == RunStatus.CANCELLED else status
        outcome = "not_delivered"
    elif status == RunStatus.TERMINATED:
        lifecycle = outcome = "terminated"
    elif status == RunStatus.CANCELLED:
        lifecycle = "cancelled"
        if reason is None:  # the run's own code closed it: cleanup finished
            outcome = "completed"
        else:  # cancel() cut the cleanup short
            outcome = "interrupted"
    else:
        lifecycle, outcome = status, status
    return dict(cancellation, lifecycle=lifecycle, cleanup_outcome=outcome, closed_at=now)


_SETTLED_KINDS = "('phase', 'units', 'activity', 'timer', 'condition')"
#: a closing run's open attempts, the open ops `_cancel_open_work` settles, its
#: open children (the same conditions as the reads that settle them)
_OPEN_TASKS = f"SELECT 1 FROM activity_tasks WHERE run_id = ? AND status IN {OPEN_SQL}"
_OPEN_OPS = (f"SELECT 1 FROM ops WHERE run_id = ? AND status = 'scheduled' "
             f"AND kind IN {_SETTLED_KINDS}")
_OPEN_CHILDREN = f"SELECT 1 FROM runs WHERE parent_run_id = ? AND status IN {OPEN_SQL}"
#: whether a closing run has open work of each kind, in one read
_OPEN_WORK = (f"SELECT EXISTS ({_OPEN_TASKS}) AS tasks, EXISTS ({_OPEN_OPS}) AS ops, "
              f"EXISTS ({_OPEN_CHILDREN}) AS children")
#: what every close sets on the run's row (its parameters: status, result,
#: failure, closed_at, closed_reason)
_CLOSED_SET = ("status = ?, result = ?, failure = ?, closed_at = ?, closed_reason = ?, "
               "owner = NULL, epoch = epoch + 1, lease_expires_at = NULL, deadline_at = NULL")
#: `close_run`'s writes in one statement (`Dialect.writable_cte`), when the run
#: has no open work: the run's row with its event counter, its events, its
#: instance's row (`_close_in_one`)
_CLOSE_SQL = (
    f"WITH closed AS (UPDATE runs SET {_CLOSED_SET}, cancellation = ?, "
    "event_seq = event_seq + CAST(? AS BIGINT) "
    f"WHERE run_id = ? AND NOT EXISTS ({_OPEN_TASKS}) AND NOT EXISTS ({_OPEN_OPS}) "
    f"AND NOT EXISTS ({_OPEN_CHILDREN}) RETURNING event_seq), "
    "new_events AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
    "SELECT CAST(? AS TEXT), closed.event_seq - CAST(? AS BIGINT) + e.n, e.type, "
    "CAST(? AS DOUBLE PRECISION), e.data FROM closed, unnest(CAST(? AS TEXT[]), "
    "CAST(? AS TEXT[])) WITH ORDINALITY AS e(type, data, n)), "
    "instance AS (UPDATE workflows SET status = ?, closed_reason = ?, closed_at = ? "
    "FROM closed WHERE namespace = ? AND workflow_id = ? AND current_run_id = ?) "
    "SELECT event_seq FROM closed"
)
#: the owner's close in one statement (`close_owned_in_one`): fenced as its
#: commit fences (`durable.store.fastpath.fence`), and only for a run whose
#: close needs nothing of its row but its identity and has no open work
_OWNED_CLOSE_SQL = (
    f"WITH closed AS (UPDATE runs SET {_CLOSED_SET}, event_seq = event_seq + 1 "
    "WHERE run_id = ? AND "
    + fence(epoch="CAST(? AS BIGINT)", now="CAST(? AS DOUBLE PRECISION)")
    + " AND cancellation IS NULL AND parent_run_id IS NULL AND schedule_id IS NULL "
    f"AND NOT EXISTS ({_OPEN_TASKS}) AND NOT EXISTS ({_OPEN_OPS}) "
    f"AND NOT EXISTS ({_OPEN_CHILDREN}) RETURNING {RUN_COLUMNS}), "
    "new_event AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
    "SELECT closed.run_id, closed.event_seq, CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION), "
    "CAST(? AS TEXT) FROM closed), "
    "instance AS (UPDATE workflows w SET status = ?, closed_reason = ?, closed_at = ? "
    "FROM closed WHERE w.namespace = closed.namespace AND w.workflow_id = closed.workflow_id "
    "AND w.current_run_id = closed.run_id) "
    "SELECT * FROM closed"
)


#: `_OWNED_CLOSE_SQL`'s fenced UPDATE alone, where UPDATE returns but no CTE
#: writes (SQLite): the close event and the instance's row follow it
_OWNED_CLOSE_UPDATE = (
    f"UPDATE runs SET {_CLOSED_SET}, event_seq = event_seq + 1 WHERE run_id = ? AND "
    + fence() + " AND cancellation IS NULL AND parent_run_id IS NULL AND schedule_id IS NULL "
    f"AND NOT EXISTS ({_OPEN_TASKS}) AND NOT EXISTS ({_OPEN_OPS}) "
    f"AND NOT EXISTS ({_OPEN_CHILDREN}) RETURNING {RUN_COLUMNS}"
)
#: a closed run's instance (its current run's close)
_INSTANCE_CLOSED = ("UPDATE workflows SET status = ?, closed_reason = ?, closed_at = ? "
                    "WHERE namespace = ? AND workflow_id = ? AND current_run_id = ?")


def close_run(
    tx: Tx,
    run_id: str,
    status: str,
    now: float,
    *,
    result: str | None = None,
    failure: Failure | None = None,
    continue_input: str | None = None,
    needs_review: bool = False,
    reason: str | None = None,
    locked: RunRecord | None = None,
    events: list[Event] | None = None,
    by_owner: bool = False,
) -> Program[str | None]:
    """Close a run (see the module docstring); the next run's id for continue-as-new.

    `by_owner`: its owner's commit closes it (this process claimed from its
    queue, so knows whether the queue counts slots: `slot_freed`); any other
    close of a held run may read the queue's limits (`slot_freed_by_other`).

    `locked`: the run as the caller read it, locked, in this transaction, and
    open (the owner's commit, which fenced it): not read again. `events`: the
    run's events of this transaction not yet appended, which come before the
    close's own (appended with them: one counter update for all).
    """
    events = list(events or ())
    if locked is not None:
        run = locked
    else:
        row = yield q1(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?" + tx.lock, run_id)
        if row is None or row["status"] not in OPEN_STATUSES:
            yield from append_events(tx, run_id, events, now)
            return None
        run = run_from_row(row)
    if needs_review:
        yield ex(
            "UPDATE runs SET needs_review = 1, owner = NULL, epoch = epoch + 1, "
            "failure = ? WHERE run_id = ?",
            dump_failure(failure), run_id,
        )
        events.append(("WorkflowNeedsReview", failure.to_dict() if failure else {}))
        yield from append_events(tx, run_id, events, now)
        if failure is not None:
            yield from record_failure(run_id, failure, now)
        if run.owner is not None:  # no longer held: its slot is free
            yield from _slot_freed(tx, run, by_owner)
        return None
    closed_reason = reason or status
    cancellation_record = run.cancellation
    if cancellation_record is not None and status != RunStatus.CONTINUED:
        cancellation_record = _cancellation_outcome(cancellation_record, status, closed_reason,
                                                    reason, now)
    next_run_id = new_id() if status == RunStatus.CONTINUED else None
    close_event = _close_event(status, closed_reason, result, failure, next_run_id)
    if tx.dialect.writable_cte and status != RunStatus.CONTINUED:
        row = yield Stmt(_CLOSE_SQL, (
            status, result, dump_failure(failure), now, closed_reason,
            dumps(cancellation_record), len(events) + 1, run_id, run_id, run_id, run_id,
            run_id, len(events) + 1, now, [etype for etype, _ in [*events, close_event]],
            [event_text(d) for _, d in [*events, close_event]],
            status, closed_reason, now, run.namespace, run.workflow_id, run_id), "one")
        if row is not None:  # closed: no open work (most runs; else nothing was written)
            if failure is not None:
                yield from record_failure(run_id, failure, now)
            return (yield from _closed(tx, run, status, result, failure, closed_reason, now,
                                       held=run.owner is not None, by_owner=by_owner))
    # What the close settles (open attempts, open ops, open children), asked in
    # one read: there is none for most runs, and a read per kind costs a round
    # trip each on a server (issue 26). Asked first, so that the close's events
    # are all known when the run's row is updated: its counter goes with it.
    found = yield q1(_OPEN_WORK, run_id, run_id, run_id)
    assert found is not None  # (a SELECT of three EXISTS always has its row)
    if found["tasks"] or found["ops"]:
        yield from _cancel_open_work(tx, run_id, status, now, events)
    events.append(close_event)
    closed = yield from update_one_returning(
        tx.dialect, "runs",
        f"{_CLOSED_SET}, cancellation = ?, event_seq = event_seq + ?",
        (status, result, dump_failure(failure), now, closed_reason, dumps(cancellation_record),
         len(events)), "run_id = ?", (run_id,), "event_seq", key="run_id", value=run_id)
    assert closed is not None  # (the run's row is locked in this transaction)
    yield from insert_events(run_id, int(closed["event_seq"]), events, now)
    if failure is not None and status != RunStatus.CONTINUED:
        yield from record_failure(run_id, failure, now)

    if status == RunStatus.CONTINUED:
        assert next_run_id is not None
        yield from _continue(tx, run, next_run_id, continue_input, now)
    else:
        children: list[Row] = []
        if found["children"]:
            children = yield q(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = ? "
                f"AND status IN {OPEN_SQL}",
                run_id,
            )
        for child_row in children:
            yield from apply_parent_close_policy(tx, run, child_row, now)
        yield ex(_INSTANCE_CLOSED, status, closed_reason, now, run.namespace,
                 run.workflow_id, run_id)
    return (yield from _closed(tx, run, status, result, failure, closed_reason, now,
                               next_run_id, held=run.owner is not None, by_owner=by_owner))


def _close_event(status: str, closed_reason: str, result: str | None,
                 failure: Failure | None, next_run_id: str | None) -> Event:
    """A run's close event (WorkflowCompleted, ...), as every close path writes it."""
    data: dict[str, Any] = {"reason": closed_reason}
    if result is not None:
        data["result"] = loads(result)
    if failure is not None:
        data["failure"] = failure.to_dict()
        if failure.timeout_kind is not None:
            data["timeout_kind"] = failure.timeout_kind
            data["deadline_at"] = failure.get("deadline_at")
    if next_run_id is not None:
        data["new_run_id"] = next_run_id
    return _CLOSE_EVENT[RunStatus(status)], data


def close_owned_in_one(tx: Tx, run_id: str, epoch: int, status: str, result: str | None,
                       failure: Failure | None, now: float) -> Program[bool]:
    """The owner's close of its run, fenced, in ONE statement of its commit
    (`Dialect.writable_cte`), or three (`Dialect.owned_close_returning`: the
    fenced ``UPDATE ... RETURNING`` of the run's row, its close event, its
    instance's row): what `close_run` writes, without the commit's locking
    read of the run first, nor the read of its open work. Only for a close
    that `close_run` would write so (the run has no open work) and that
    needs nothing of the run's row but its identity: no cancellation record,
    no parent, no schedule; the UPDATE checks all that with the fence, and
    nothing is written otherwise (False: the general path, in the same
    transaction, then gives the precise outcome). Not for a continue-as-new
    or a review."""
    closed_reason = status
    etype, data = _close_event(status, closed_reason, result, failure, None)
    if tx.dialect.writable_cte:
        row = yield q1(_OWNED_CLOSE_SQL, status, result, dump_failure(failure), now,
                       closed_reason, run_id, epoch, now, run_id, run_id, run_id, etype, now,
                       event_text(data), status, closed_reason, now)
        if row is None:
            return False
    else:
        row = yield q1(_OWNED_CLOSE_UPDATE, status, result, dump_failure(failure), now,
                       closed_reason, run_id, epoch, now, run_id, run_id, run_id)
        if row is None:
            return False
        yield ex(EVENT_INSERT, run_id, int(row["event_seq"]), etype, now, event_text(data))
        yield ex(_INSTANCE_CLOSED, status, closed_reason, now, row["namespace"],
                 row["workflow_id"], run_id)
    if failure is not None:
        yield from record_failure(run_id, failure, now)
    yield from _closed(tx, run_from_row(row), status, result, failure, closed_reason, now,
                       held=True, by_owner=True)  # (its owner's close: it held a slot)
    return True


def _closed(tx: Tx, run: RunRecord, status: str, result: str | None, failure: Failure | None,
            closed_reason: str, now: float, next_run_id: str | None = None, *,
            held: bool, by_owner: bool) -> Program[str | None]:
    """A closed run's last steps: its parent's child op, and the wake-ups
    (`held`: a worker held the run, so its queue has a slot free now;
    `by_owner`: that worker's own commit closes it, see `_slot_freed`)."""
    run_id = run.run_id
    if run.parent_run_id is not None and status != RunStatus.CONTINUED:
        yield from notify_parent(tx, run, status, result, failure, now)
    tx.wake(Wake.run(run_id))
    if held:
        yield from _slot_freed(tx, run, by_owner)
    if run.schedule_id is not None and status != RunStatus.CONTINUED:
        tx.wake(Wake.schedule_run_closed(run.namespace))  # a fire may wait for it
    tx.wake(Wake.stopped(run_id, _stop_notice(run, status, closed_reason, failure, now)))
    return next_run_id


def _slot_freed(tx: Tx, run: RunRecord, by_owner: bool) -> Program[None]:
    """A held run closed, so its slot is free: its owner's commit knows without
    a read whether the queue counts slots (`slot_freed`); a close by anyone else
    (terminate, cancel, a deadline, ...) may have to read the queue's limits
    (`slot_freed_by_other`, decision (at))."""
    if by_owner:
        slot_freed(tx, run.namespace, run.task_queue)
    else:
        yield from slot_freed_by_other(tx, run.namespace, run.task_queue)
    return None


def _stop_notice(run: RunRecord, status: str, reason: str, failure: Failure | None,
                 now: float) -> dict[str, Any]:
    """What the logs and metrics say of a run that stopped (see `durable.observe`)."""
    notice: dict[str, Any] = {
        "workflow_id": run.workflow_id, "run_id": run.run_id,
        "workflow_type": run.workflow_type, "namespace": run.namespace,
        "status": str(status), "reason": str(reason),
        # (a float: SQLite's RETURNING gives a REAL column's whole value as an int)
        "started_at": float(run.started_at or run.created_at), "closed_at": now,
    }
    if failure is not None:
        notice["failure_category"] = failure.category
        notice["timeout_kind"] = failure.timeout_kind
        notice["phase"] = failure.get("phase")
    return notice


def _cancel_open_work(tx: Tx, run_id: str, status: str, now: float,
                      events: list[Event]) -> Program[None]:
    """Fence the run's open activity attempts and cancel its timers."""
    cancel_failure = Failure.activity_cancelled(
        f"cancelled because the workflow run closed ({status})")
    tasks = yield q(
        "SELECT task_id, op_id, activity_name, options, status, attempt FROM activity_tasks "
        f"WHERE run_id = ? AND status IN {OPEN_SQL}", run_id,
    )
    fenced: set[str] = set()
    for task in tasks:
        if (loads(task["options"]) or {}).get("cancellation") == "abandon":
            continue  # an abandoned activity has its own lifetime
        fenced.add(task["task_id"])
        # an attempt no worker had claimed stops here, for sure: its receipt
        # says so (the cascade read it "NOT VERIFIED ... its worker is gone")
        receipt = (cancellation.not_started_receipt(task["attempt"], now)
                   if task["status"] == "pending" else None)
        yield ex(
            "UPDATE activity_tasks SET status = 'cancelled', closed_at = ?, deadline_at = NULL, "
            "stop_requested = 1, stop_requested_at = COALESCE(stop_requested_at, ?), "
            "stop_receipt = COALESCE(?, stop_receipt) WHERE task_id = ?",
            now, now, dumps(receipt) if receipt is not None else None, task["task_id"],
        )
        data: dict[str, Any] = {
            "op_id": task["op_id"], "activity_type": task["activity_name"],
            "task_id": task["task_id"], "reason": f"workflow {status}", "fenced": True,
        }
        if receipt is not None:
            data["stop_receipt"] = receipt
        if task["status"] == "running":
            # the run stopped waiting; the attempt may still finish its work:
            # its stop receipt, recorded later, says whether it did (issue 21)
            data["attempt_running"] = True
        events.append(("ActivityCancelled", data))
        tx.wake(Wake.activity_stop(task["task_id"]))
    # the run's open ops of every kind settled here, in one read (one round
    # trip less per close than a read for markers and one for the rest)
    scheduled = yield q(
        f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ? AND status = 'scheduled' "
        f"AND kind IN {_SETTLED_KINDS}", run_id)
    phases = [row for row in scheduled if row["kind"] in (OpKind.PHASE, OpKind.UNITS)]
    open_ops = [row for row in scheduled if row["kind"] not in (OpKind.PHASE, OpKind.UNITS)]
    for marker in phases:
        yield ex("UPDATE ops SET status = 'cancelled', closed_at = ? WHERE run_id = ? AND "
                 "op_id = ?", now, run_id, marker["op_id"])
        if marker["kind"] == OpKind.PHASE:
            events.append(("PhaseCancelled", {
                "op_id": marker["op_id"], "phase": marker["name"], "outcome": "cancelled",
                "reason": f"workflow {status}"}))
    for op_row in open_ops:
        op = op_from_row(op_row)
        if op.kind == OpKind.ACTIVITY and op.task_id not in fenced:
            continue  # abandoned
        if op.kind == OpKind.TIMER:
            events.append(("TimerCancelled", {"op_id": op.op_id, "reason": f"workflow {status}"}))
        yield ex(
            "UPDATE ops SET status = 'cancelled', failure = ?, closed_at = ? "
            "WHERE run_id = ? AND op_id = ?",
            dump_failure(cancel_failure), now, run_id, op.op_id,
        )
    return None


def _continue(tx: Tx, run: RunRecord, next_run_id: str, continue_input: str | None,
              now: float) -> Program[None]:
    """Start the next run of a continued instance (same id, same parent)."""
    req = StartRequest(
        namespace=run.namespace, workflow_id=run.workflow_id,
        workflow_type=run.workflow_type, task_queue=run.task_queue,
        input=continue_input or "[]", id_reuse="", execution_timeout=run.execution_timeout,
        run_timeout=run.run_timeout, parent_run_id=run.parent_run_id,
        parent_workflow_id=run.parent_workflow_id, parent_op_id=run.parent_op_id,
        parent_close_policy=run.parent_close_policy,
        cleanup_timeout=run.cleanup_timeout,
        cancellation=None if run.cancellation is None else dict(
            run.cancellation, lifecycle="requested", delivered_at=None, boundary=None,
            cleanup_outcome=None),
        schedule_id=run.schedule_id, scheduled_at=run.scheduled_at,
        priority=run.priority, concurrency_key=run.concurrency_key,
    )
    yield ex("UPDATE runs SET continued_run_id = ? WHERE run_id = ?", next_run_id, run.run_id)
    yield from insert_run(
        tx, req, next_run_id, run.run_number + 1, now, run.execution_deadline_at,
        new_instance=False,
    )
    if run.parent_run_id is not None:
        yield ex(
            "UPDATE ops SET child_run_id = ? WHERE run_id = ? AND op_id = ?",
            next_run_id, run.parent_run_id, run.parent_op_id,
        )
    return None


def apply_parent_close_policy(tx: Tx, parent: RunRecord, child_row: Row,
                              now: float) -> Program[None]:
    """What happens to an open child when its parent closes."""
    child = run_from_row(child_row)
    policy = child.parent_close_policy or "terminate"
    yield from append_events(tx, parent.run_id, [("ParentClosePolicyApplied", {
        "child_workflow_id": child.workflow_id, "child_run_id": child.run_id, "policy": policy,
    })], now)
    reason = f"parent {parent.workflow_id} closed"
    if policy == "terminate":
        yield from close_run(tx, child.run_id, RunStatus.TERMINATED, now, reason=reason,
                             failure=Failure.closed_by_request(RunStatus.TERMINATED, reason))
    elif policy == "request_cancellation":
        child_full = yield q1(
            f"SELECT {RUN_COLUMNS}, lease_expires_at, claim_capabilities "
            "FROM runs WHERE run_id = ?", child.run_id,
        )
        yield from cancellation.request_child(tx, parent, child_full, reason,
                                              child_full["cleanup_timeout"],
                                              "parent_close_policy", now)
    elif policy == "request_cancel":
        yield from close_run(tx, child.run_id, RunStatus.CANCELLED, now, reason=reason,
                             failure=Failure.closed_by_request(RunStatus.CANCELLED, reason))
    return None


def notify_parent(
    tx: Tx,
    child: RunRecord,
    status: str,
    result: str | None,
    failure: Failure | None,
    now: float,
) -> Program[None]:
    """Resolve the parent's child op with the child's terminal outcome."""
    parent = yield q1(
        "SELECT status, owner, lease_expires_at, namespace, task_queue, blocked_build "
        "FROM runs WHERE run_id = ?" + tx.lock, child.parent_run_id
    )
    if parent is None or parent["status"] not in OPEN_STATUSES:
        return None
    op_failure: Failure | None
    if status == RunStatus.COMPLETED:
        op_status, op_failure, etype = OpStatus.COMPLETED, None, "ChildWorkflowCompleted"
    else:
        op_status, etype = OpStatus.FAILED, "ChildWorkflowFailed"
        op_failure = Failure.child_failed(child.workflow_id, status, failure)
    count = yield ex(
        "UPDATE ops SET status = ?, result = ?, failure = ?, closed_at = ? "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        op_status, result, dump_failure(op_failure), now, child.parent_run_id,
        child.parent_op_id,
    )
    if not count:
        return None
    assert child.parent_run_id is not None and child.parent_op_id is not None
    data: dict[str, Any] = {
        "op_id": child.parent_op_id, "child_workflow_id": child.workflow_id,
        "child_run_id": child.run_id, "status": status,
    }
    if op_failure is not None:
        data["failure"] = op_failure.to_dict()
    elif result is not None:
        data["result"] = loads(result)  # so a history alone replays (durable.testing.Replayer)
    yield from append_events(tx, child.parent_run_id, [(etype, data)], now)
    yield ex(
        "UPDATE runs SET ready_at = ? WHERE run_id = ? AND ready_at IS NULL",
        now, child.parent_run_id,
    )
    if parent["owner"] is None:  # put down under pressure (store.parked): claimable now
        tx.wake(unheld_wake(tx, parent, now))
    op = OpRecord(child.parent_op_id, OpKind.CHILD, child.workflow_type, op_status, result,
                  op_failure, None, now, child_workflow_id=child.workflow_id,
                  child_run_id=child.run_id)
    tx.wake(Wake.run(child.parent_run_id, op))
    return None


def close_run_externally(
    tx: Tx,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    status: str,
    reason: str,
    now: float,
) -> Program[RunRecord]:
    """cancel() / terminate(): close the run now, whoever owns it."""
    run = yield from get_run(namespace, workflow_id, run_id)
    if run is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} (run {run_id}) in {namespace!r}")
    if run.is_open:
        yield from close_run(tx, run.run_id, status, now,
                             failure=Failure.closed_by_request(status, reason), reason=reason)
        run = yield from get_run(namespace, workflow_id, run.run_id)
        assert run is not None
    return run
