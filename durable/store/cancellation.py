"""Cooperative cancellation as domain transactions (seed 002).

A request is recorded once on the run it targets (a duplicate returns the
original identity and deadline; a new timeout never extends the budget). The
run's owner records the delivery boundary and interrupts the code; operation
policies then ask activity attempts and children to stop, and every stop is
acknowledged by a fenced stop receipt. The cascade view
(`durable.store.inspection`) is read from these records alone.
"""

from __future__ import annotations

from typing import Any

from ..clock import to_iso
from ..driver import Program, Row, Tx, ex, q, q1
from ..errors import (
    CapabilityUnsupported,
    RunAlreadyClosed,
    RunNotCurrent,
    WorkflowNotFound,
)
from ..failure import Failure
from ..wakes import Wake
from .events import Event, append_events
from .records import (
    OP_COLUMNS,
    OPEN_SQL,
    RUN_COLUMNS,
    OpRecord,
    RunRecord,
    dump_failure,
    dumps,
    loads,
    new_id,
    op_from_row,
    run_from_row,
)
from .writes import DeliverCancellation, RequestActivityStop, RequestChildCancellation

DEFAULT_CHILD_CLEANUP = 30.0
CAPABILITY = "cooperative_cancellation"


def _claim_supports(run_row: Row, now: float) -> bool:
    """Whether the worker holding the run's claim (if any) can take a cooperative request.

    The capabilities are those the worker declared when it claimed the run, so
    upgrading its registration later does not upgrade the claim it holds.
    """
    owner = run_row["owner"]
    lease = run_row["lease_expires_at"]
    if owner is None or lease is None or lease <= now:
        return True
    caps = loads(run_row["claim_capabilities"]) or []
    return CAPABILITY in caps


def new_context(
    *,
    run: RunRecord,
    reason: str,
    requester: dict[str, Any] | None,
    source: str,
    now: float,
    deadline: float,
    cleanup_timeout: float | None,
    parent: dict[str, Any] | None,
) -> dict[str, Any]:
    request_id = new_id()
    lineage = list(parent["lineage"]) if parent else []
    lineage.append([request_id, run.workflow_id, run.run_id])
    return {
        "request_id": request_id,
        "root_request_id": parent["root_request_id"] if parent else request_id,
        "parent_request_id": parent["request_id"] if parent else None,
        "root_workflow_id": parent["root_workflow_id"] if parent else run.workflow_id,
        "root_run_id": parent["root_run_id"] if parent else run.run_id,
        "reason": reason,
        "requester": requester or {"type": "client", "id": None, "label": None},
        "source": source,
        "requested_at": now,
        "deadline_at": deadline,
        "cleanup_timeout_seconds": cleanup_timeout,
        "lineage": lineage,
        "lifecycle": "requested",
        "delivered_at": None,
        "boundary": None,
        "cleanup_outcome": None,
    }


def _record_request(tx: Tx, run: RunRecord, ctx: dict[str, Any], now: float) -> Program[None]:
    yield ex(
        "UPDATE runs SET cancellation = ?, cleanup_deadline_at = ?, deadline_at = ?, "
        "ready_at = COALESCE(ready_at, ?) WHERE run_id = ?",
        dumps(ctx), ctx["deadline_at"], run.deadlines.with_cleanup(ctx["deadline_at"]).earliest,
        now, run.run_id,
    )
    yield from append_events(tx, run.run_id, [("CancellationRequested", public_context(ctx))],
                             now)
    tx.wake(Wake.run(run.run_id))
    if run.owner is None:  # no worker holds it (one put it down under pressure: store.parked)
        tx.wake(Wake.runs(run.namespace, run.task_queue))
    return None


def public_context(ctx: dict[str, Any]) -> dict[str, Any]:
    """The request as shown to people: ISO instants, no engine bookkeeping."""
    return {
        "request_id": ctx["request_id"],
        "root_request_id": ctx["root_request_id"],
        "parent_request_id": ctx["parent_request_id"],
        "root_workflow_id": ctx.get("root_workflow_id"),
        "root_run_id": ctx.get("root_run_id"),
        "reason": ctx["reason"],
        "requester": ctx["requester"],
        "source": ctx["source"],
        "requested_at": to_iso(ctx["requested_at"]),
        "deadline_at": to_iso(ctx["deadline_at"]),
        "cleanup_timeout_seconds": ctx.get("cleanup_timeout_seconds"),
        "lineage": ctx["lineage"],
    }


def describe_cancellation(ctx: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request and its lifecycle, as describe() shows them."""
    if ctx is None:
        return None
    return {
        **public_context(ctx),
        "lifecycle": ctx.get("lifecycle"),
        "delivered_at": to_iso(ctx.get("delivered_at")),
        "boundary": ctx.get("boundary"),
        "cleanup_outcome": ctx.get("cleanup_outcome"),
        "closed_at": to_iso(ctx.get("closed_at")),
    }


def request_cancellation(
    tx: Tx,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    reason: str,
    cleanup_timeout: float,
    requester: dict[str, Any] | None,
    source: str,
    now: float,
) -> Program[tuple[bool, dict[str, Any]]]:
    wf = yield q1(
        "SELECT current_run_id FROM workflows WHERE namespace = ? AND workflow_id = ?",
        namespace, workflow_id,
    )
    if wf is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} in namespace {namespace!r}")
    if run_id is not None and run_id != wf["current_run_id"]:
        raise RunNotCurrent(
            f"run {run_id} is not the current run of {workflow_id!r} "
            f"(that is {wf['current_run_id']}); cancellation targets the current run"
        )
    row = yield q1(
        f"SELECT {RUN_COLUMNS}, lease_expires_at, claim_capabilities FROM runs "
        "WHERE run_id = ?" + tx.lock,
        wf["current_run_id"],
    )
    run = run_from_row(row)
    if run.cancellation is not None:
        return False, run.cancellation
    if not run.is_open:
        raise RunAlreadyClosed(
            f"workflow {workflow_id!r} run {run.run_id} is already {run.status}; "
            "there is nothing to cancel"
        )
    if not _claim_supports(row, now):
        raise CapabilityUnsupported(
            f"the worker {row['owner']} holding run {run.run_id} claimed it without support "
            "for cooperative cancellation; nothing was recorded. Use cancel() or terminate(), "
            "or wait until a cancellation-capable worker holds the run"
        )
    ctx = new_context(run=run, reason=reason, requester=requester, source=source, now=now,
                      deadline=now + cleanup_timeout, cleanup_timeout=cleanup_timeout, parent=None)
    yield from _record_request(tx, run, ctx, now)
    return True, ctx


def request_child(
    tx: Tx,
    parent: RunRecord,
    child_row: Row,
    reason: str,
    cleanup_timeout: float | None,
    source: str,
    now: float,
) -> Program[dict[str, Any] | None]:
    """A cooperative request to a child, inheriting the parent's root and budget."""
    child = run_from_row(child_row)
    if not child.is_open:
        return None
    if child.cancellation is not None:
        return child.cancellation
    if not _claim_supports(child_row, now):
        yield from append_events(tx, parent.run_id, [("ChildCancellationRefused", {
            "child_workflow_id": child.workflow_id, "child_run_id": child.run_id,
            "reason": "the worker holding the child does not support cooperative cancellation",
        })], now)
        return None
    parent_ctx = parent.cancellation
    if parent_ctx is not None:
        deadline = float(parent_ctx["deadline_at"])
        if cleanup_timeout is not None:
            deadline = min(deadline, now + cleanup_timeout)
    else:
        deadline = now + (cleanup_timeout if cleanup_timeout is not None else DEFAULT_CHILD_CLEANUP)
    ctx = new_context(run=child, reason=reason, requester={
        "type": "workflow", "id": parent.workflow_id, "label": parent.workflow_type,
    }, source=source, now=now, deadline=deadline, cleanup_timeout=cleanup_timeout,
        parent=parent_ctx)
    if parent_ctx is None:
        ctx["lineage"] = [[None, parent.workflow_id, parent.run_id], *ctx["lineage"]]
    yield from _record_request(tx, child, ctx, now)
    return ctx


def _update_context(run_id: str, ctx: dict[str, Any]) -> Program[None]:
    yield ex("UPDATE runs SET cancellation = ? WHERE run_id = ?", dumps(ctx), run_id)
    return None


def deliver(
    run: RunRecord, write: DeliverCancellation, now: float,
    events: list[Event],
) -> Program[None]:
    ctx = run.cancellation
    if ctx is None or ctx.get("delivered_at") is not None:
        return None
    ctx = dict(ctx, lifecycle="delivered", delivered_at=write.delivered_at,
               boundary=write.boundary, deliveries_before=write.deliveries)
    yield from _update_context(run.run_id, ctx)
    events.append(("CancellationDelivered", {
        "request_id": ctx["request_id"], "root_request_id": ctx["root_request_id"],
        "boundary": write.boundary, "deadline_at": to_iso(ctx["deadline_at"]),
        "delivered_at": to_iso(write.delivered_at), "deliveries_before": write.deliveries,
    }))
    return None


def mark_cleaning_up(run: RunRecord) -> Program[None]:
    ctx = run.cancellation
    if ctx is not None and ctx.get("lifecycle") == "delivered":
        yield from _update_context(run.run_id, dict(ctx, lifecycle="cleaning_up"))
        run.cancellation = dict(ctx, lifecycle="cleaning_up")
    return None


def request_activity_stop(
    tx: Tx, run: RunRecord, write: RequestActivityStop, now: float,
    events: list[Event], ops: dict[str, OpRecord],
) -> Program[None]:
    per_op = write.scope == "operation"
    if per_op:  # workflow code cancelled this op: no replay interruption mark
        op_row = yield q1(f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ? AND op_id = ?",
                          run.run_id, write.op_id)
    else:
        op_row = yield from _interrupt_once(run.run_id, write.op_id)
    if op_row is None or op_row["status"] != "scheduled":
        return None
    op = op_from_row(op_row)
    if write.policy == "abandon":
        if per_op:  # the await ends now; the attempt runs on within its own timeouts
            failure = Failure.activity_cancelled(
                f"activity {op.name} cancelled (abandon): it may still be running",
                policy="abandon", scope="operation")
            yield from _close_op(run.run_id, op, failure, now, ops, interrupted=False)
            events.append(("ActivityCancelled", {
                "op_id": op.op_id, "activity_type": op.name, "task_id": op.task_id,
                "policy": "abandon", "scope": "operation",
            }))
        return None
    task = yield q1(
        "SELECT task_id, status, attempt, owner, namespace, stop_requested FROM activity_tasks "
        "WHERE task_id = ?" + tx.lock, op.task_id,
    )
    if task is None:
        return None
    details: dict[str, Any] = {"policy": write.policy}
    if per_op:
        details["scope"] = "operation"
    failure = Failure.activity_cancelled(f"activity {op.name} cancelled ({write.policy})",
                                         **details)
    if task["status"] == "pending":
        receipt = not_started_receipt(task["attempt"], now)
        yield ex(
            "UPDATE activity_tasks SET status = 'cancelled', closed_at = ?, deadline_at = NULL, "
            "stop_requested = 1, stop_requested_at = ?, stop_receipt = ? WHERE task_id = ?",
            now, now, dumps(receipt), op.task_id,
        )
        yield from _close_op(run.run_id, op, failure, now, ops, interrupted=not per_op)
        events.append(("ActivityCancelled", {
            "op_id": op.op_id, "activity_type": op.name, "task_id": op.task_id,
            "policy": write.policy, "stop_receipt": receipt, **details,
        }))
        return None
    if task["status"] != "running":
        return None
    if not task["stop_requested"]:  # a repeated request (a replayed handle) asks once
        yield ex(
            "UPDATE activity_tasks SET stop_requested = 1, stop_requested_at = ? "
            "WHERE task_id = ?", now, op.task_id,
        )
        events.append(("ActivityCancelRequested", {
            "op_id": op.op_id, "activity_type": op.name, "task_id": op.task_id,
            "attempt": task["attempt"], "worker_id": task["owner"], **details,
        }))
        tx.wake(Wake.activity_stop(op.task_id or ""))
    if write.policy == "try_cancel":
        yield from _close_op(run.run_id, op, failure, now, ops, interrupted=not per_op)
    return None


def _close_op(run_id: str, op: OpRecord, failure: Failure, now: float,
              ops: dict[str, OpRecord], *, interrupted: bool = True) -> Program[None]:
    """Close an op as cancelled; `interrupted` when the run's cancellation did it
    (replay interrupts the same await again), not when its own handle did."""
    if interrupted:
        failure = failure.with_details(interrupted=True)
    yield ex(
        "UPDATE ops SET status = 'cancelled', failure = ?, closed_at = ?, "
        "interrupted = CASE WHEN ? = 1 THEN 1 ELSE interrupted END "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        dump_failure(failure), now, int(interrupted), run_id, op.op_id,
    )
    ops[op.op_id] = OpRecord(op.op_id, op.kind, op.name, "cancelled", None, failure,
                             op.scheduled_at, now, op.fire_at, op.child_workflow_id,
                             op.child_run_id, op.task_id, interrupted=interrupted)
    return None


def _interrupt_once(run_id: str, op_id: str) -> Program[Row | None]:
    """The op's row, marked interrupted (so replay interrupts the same await
    again); None if it does not exist or was marked already (idempotent)."""
    op_row = yield q1(f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ? AND op_id = ?",
                      run_id, op_id)
    if op_row is None or op_row["interrupted"]:
        return None
    yield ex("UPDATE ops SET interrupted = 1 WHERE run_id = ? AND op_id = ?", run_id, op_id)
    return op_row


def cancel_timer(run: RunRecord, op_id: str, now: float,
                 events: list[Event],
                 ops: dict[str, OpRecord]) -> Program[None]:
    op_row = yield from _interrupt_once(run.run_id, op_id)
    if op_row is None:
        return None
    if op_row["status"] != "scheduled":
        return None
    failure = Failure("cancelled", "timer cancelled")
    yield from _close_op(run.run_id, op_from_row(op_row), failure, now, ops)
    events.append(("TimerCancelled", {"op_id": op_id, "reason": "cancellation delivered"}))
    return None


def request_child_cancellation(
    tx: Tx, run: RunRecord, write: RequestChildCancellation, now: float,
    events: list[Event], ops: dict[str, OpRecord],
) -> Program[None]:
    per_op = write.scope == "operation"
    if per_op:  # workflow code cancelled this child through its handle
        op_row = yield q1(f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ? AND op_id = ?",
                          run.run_id, write.op_id)
    else:
        op_row = yield from _interrupt_once(run.run_id, write.op_id)
    if op_row is None:
        return None
    if op_row["status"] != "scheduled":
        return None
    op = op_from_row(op_row)
    scope: dict[str, Any] = {"scope": "operation"} if per_op else {}
    if write.policy == "abandon":
        # The child is left independent: the parent's close will not reach it.
        yield ex(
            "UPDATE runs SET parent_close_policy = 'abandon' WHERE namespace = ? "
            f"AND workflow_id = ? AND status IN {OPEN_SQL}",
            run.namespace, op.child_workflow_id,
        )
        events.append(("ChildCancellationRequested", {
            "op_id": op.op_id, "child_workflow_id": op.child_workflow_id,
            "child_run_id": op.child_run_id, "policy": "abandon", "request_id": None, **scope,
        }))
        if per_op:  # the await ends now; the child runs on
            yield from _close_op(run.run_id, op, child_cancelled_failure(op, "abandon"), now, ops,
                                 interrupted=False)
        return None
    child_row = yield q1(
        f"SELECT {RUN_COLUMNS}, lease_expires_at, claim_capabilities FROM runs WHERE run_id = "
        "(SELECT current_run_id FROM workflows WHERE namespace = ? AND workflow_id = ?)" + tx.lock,
        run.namespace, op.child_workflow_id,
    )
    if per_op and child_row is not None and child_row["cancellation"] is not None:
        return None  # asked already (a replayed handle asks once)
    ctx = None
    if child_row is not None:
        reason = write.reason or (run.cancellation["reason"] if run.cancellation
                                  else "cancelled")
        ctx = yield from request_child(
            tx, run, child_row, reason, write.cleanup_timeout,
            "operation_cancellation" if per_op else "parent_cancellation", now,
        )
    events.append(("ChildCancellationRequested", {
        "op_id": op.op_id, "child_workflow_id": op.child_workflow_id,
        "child_run_id": child_row["run_id"] if child_row is not None else None,
        "policy": write.policy, "request_id": ctx["request_id"] if ctx else None,
        "deadline_at": to_iso(ctx["deadline_at"]) if ctx else None, **scope,
    }))
    if write.policy == "try_cancel":
        if per_op:
            failure = child_cancelled_failure(op, "try_cancel")
        else:
            failure = Failure("cancelled", f"child {op.child_workflow_id} asked to cancel; not "
                              "waited for", "durable.ChildWorkflowFailed",
                              details={"policy": "try_cancel"})
        yield from _close_op(run.run_id, op, failure, now, ops, interrupted=not per_op)
    return None


def child_cancelled_failure(op: OpRecord, policy: str) -> Failure:
    """What awaiting a child cancelled through its handle raises, without waiting
    for it: ChildWorkflowFailed caused by WorkflowCancelled."""
    cause = Failure("cancelled", f"child workflow {op.child_workflow_id} was asked to cancel "
                    f"({policy}); not waited for", "durable.WorkflowCancelled")
    return Failure.child_failed(op.child_workflow_id or "?", "cancelled", cause).with_details(
        policy=policy, scope="operation")


def stop_receipt(
    task: Row, worker_id: str, failure: Failure | None, now: float,
) -> Program[dict[str, Any]]:
    """Record a fenced stop receipt for an attempt that was asked to stop."""
    run = yield q1("SELECT cleanup_deadline_at FROM runs WHERE run_id = ?", task["run_id"])
    deadline = run["cleanup_deadline_at"] if run is not None else None
    kind = "completed" if failure is None else str(failure.get("stop_kind") or "stopped")
    receipt: dict[str, Any] = {
        "kind": kind, "worker_id": worker_id, "attempt": int(task["attempt"]),
        "acknowledged_at": to_iso(now),
        "confirmed": bool(failure.get("stop_confirmed", True)) if failure else True,
        "received_after_deadline": bool(deadline is not None and now > deadline),
    }
    if failure is not None and "exit_code" in failure.details:
        receipt["exit_code"] = failure.get("exit_code")
    yield ex("UPDATE activity_tasks SET stop_receipt = ? WHERE task_id = ?", dumps(receipt),
             task["task_id"])
    return receipt


def not_started_receipt(attempt: int, now: float) -> dict[str, Any]:
    """The stop receipt of an attempt no worker had claimed, cancelled in
    storage (an op policy's cancel, the run's close): nothing can run it."""
    return {"kind": "not_started", "confirmed": True, "at": to_iso(now), "attempt": attempt}


def stop_requests(worker_id: str) -> Program[list[str]]:
    """Attempts this worker runs that were asked to stop: those still running,
    and those fenced by their run's close (cancel, terminate, an expired cleanup
    deadline: `closing` marks them cancelled) whose stop receipt has not come.
    A close made by another process reaches the worker only through this read
    (its wake-up stays in that process): a fenced attempt ran to its end."""
    rows = yield q(
        "SELECT task_id FROM activity_tasks WHERE owner = ? AND stop_requested = 1 "
        "AND (status = 'running' OR (status = 'cancelled' AND stop_receipt IS NULL))",
        worker_id,
    )
    return [r["task_id"] for r in rows]
