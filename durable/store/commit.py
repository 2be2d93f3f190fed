"""The owner's commit: a group of runs' writes in one transaction, each run fenced.

Every run's batch is checked against the run's lease epoch, status and
deadline; a stale or expired batch is refused on its own (the others still
commit). Each write type has one handler (`HANDLERS`), which records it and
collects the run's history events; a dialect may record a batch of
successful local steps in one statement (`Dialect.local_steps`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..clock import to_iso
from ..driver import Program, Tx, ex, many, placeholders, q, q1
from ..failure import Failure
from ..wakes import Wake
from . import cancellation, interaction
from .closing import close_owned_in_one, close_run
from .deadlines import enforce_expired
from .events import Event, append_events, local_step_events, record_failure
from .fastpath import LOCAL_OP_INSERT, local_op_row, local_steps_in_group
from .records import (
    OP_COLUMNS,
    OPEN_STATUSES,
    RUN_COLUMNS,
    CommitResult,
    OpKind,
    OpRecord,
    OpStatus,
    RunRecord,
    RunStatus,
    dump_failure,
    dumps,
    earliest,
    loads,
    new_id,
    op_from_row,
    plus,
    run_from_row,
)
from .runs import insert_run
from .writes import (
    CancelTimer,
    CloseRun,
    DeliverCancellation,
    EndPhase,
    EndUnits,
    FireTimer,
    RecordBatchedLocalActivity,
    RecordLocalActivity,
    RequestActivityStop,
    RequestChildCancellation,
    RunWrites,
    ScheduleActivity,
    ScheduleChild,
    ScheduleTimer,
    StartPhase,
    StartUnits,
    Write,
)


@dataclass
class _RunCommit:
    """One run's share of a commit, as its writes are recorded."""

    tx: Tx
    run: RunRecord
    now: float
    events: list[Event] = field(default_factory=list)
    ops: dict[str, OpRecord] = field(default_factory=dict)
    next_run_id: str | None = None
    #: `run` is the run's row as locked and fenced in this transaction: no
    #: write recorded so far changed a column of it but its event counter
    #: (a close need not read it again, `close_run`'s `locked`)
    fresh: bool = True

    def flush(self) -> Program[None]:
        events, self.events = self.events, []
        yield from append_events(self.tx, self.run.run_id, events, self.now)
        return None


def _record_local_activity(c: _RunCommit, w: RecordLocalActivity) -> Program[None]:
    if w.failure is None:
        status = OpStatus.COMPLETED
    else:
        status = OpStatus.CANCELLED if w.interrupted else OpStatus.FAILED
    yield ex(LOCAL_OP_INSERT, *local_op_row(c.run.run_id, w, status, c.now))
    c.ops[w.op_id] = OpRecord(w.op_id, OpKind.LOCAL_ACTIVITY, w.name, status, w.result,
                              w.failure, w.started_at, c.now, interrupted=w.interrupted)
    if w.failure is None:
        c.events.extend(local_step_events(w))  # the same text as a dialect's fast path
        return None
    scheduled = {"op_id": w.op_id, "activity_type": w.name, "local": True}
    c.events.append(("ActivityScheduled", scheduled))
    if w.interrupted:
        c.events.append(("ActivityCancelled", {
            **scheduled, "attempt": w.attempts, "policy": w.failure.get("policy"),
            "stop_receipt": w.failure.get("stop_receipt"),
        }))
        return None
    kind = w.failure.timeout_kind
    c.events.append((
        "ActivityTimedOut" if kind else "ActivityFailed",
        {**scheduled, "attempt": w.attempts, "failure": w.failure.to_dict(),
         **({"timeout_kind": kind} if kind else {})},
    ))
    yield from record_failure(c.run.run_id, w.failure, c.now)
    return None


def _schedule_activity(c: _RunCommit, w: ScheduleActivity) -> Program[None]:
    opts = w.options
    now, run = c.now, c.run
    s2s = plus(now, opts.get("schedule_to_start_timeout"))
    s2c = plus(now, opts.get("schedule_to_close_timeout"))
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, task_id) "
        "VALUES (?, ?, 'activity', ?, 'scheduled', ?, ?)",
        run.run_id, w.op_id, w.name, now, w.task_id,
    )
    yield ex(
        "INSERT INTO activity_tasks (task_id, namespace, task_queue, activity_name, run_id, "
        "workflow_id, op_id, input, status, attempt, options, scheduled_at, available_at, "
        "schedule_to_start_deadline, schedule_to_close_deadline, deadline_at, priority) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 1, ?, ?, ?, ?, ?, ?, ?)",
        w.task_id, run.namespace, w.task_queue, w.name, run.run_id,
        run.workflow_id, w.op_id, w.input, dumps(opts), now, now, s2s, s2c,
        earliest(s2s, s2c), opts.get("priority", run.priority),
    )
    c.events.append(("ActivityScheduled", {
        "op_id": w.op_id, "activity_type": w.name, "task_id": w.task_id,
        "task_queue": w.task_queue, "local": False,
        "schedule_to_start_timeout": opts.get("schedule_to_start_timeout"),
        "start_to_close_timeout": opts.get("start_to_close_timeout"),
        "schedule_to_close_timeout": opts.get("schedule_to_close_timeout"),
        "heartbeat_timeout": opts.get("heartbeat_timeout"),
        "retry_policy": opts.get("retry"),
        "cancellation": opts.get("cancellation"),
        "schedule_to_start_deadline": to_iso(s2s),
        "schedule_to_close_deadline": to_iso(s2c),
    }))
    # its task id: a worker of this process claims it first (`RemoteActivities.claim`)
    c.tx.wake(Wake.activities(run.namespace, w.task_queue, w.task_id))
    return None


def _schedule_timer(c: _RunCommit, w: ScheduleTimer) -> Program[None]:
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, fire_at) "
        "VALUES (?, ?, 'timer', 'sleep', 'scheduled', ?, ?)",
        c.run.run_id, w.op_id, c.now, w.fire_at,
    )
    c.events.append(("TimerScheduled", {
        "op_id": w.op_id, "duration_seconds": w.duration, "fire_at": to_iso(w.fire_at),
    }))
    return None


def _fire_timer(c: _RunCommit, w: FireTimer) -> Program[None]:
    yield ex(
        "UPDATE ops SET status = 'completed', closed_at = ? "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        c.now, c.run.run_id, w.op_id,
    )
    c.events.append(("TimerFired", {"op_id": w.op_id}))
    return None


def _schedule_child(c: _RunCommit, w: ScheduleChild) -> Program[None]:
    req, now, run_id = w.request, c.now, c.run.run_id
    existing = yield q1(
        "SELECT current_run_id FROM workflows WHERE namespace = ? AND workflow_id = ?",
        req.namespace, req.workflow_id,
    )
    if existing is not None:
        failure = Failure.child_start(req.workflow_id)
        yield ex(
            "INSERT INTO ops (run_id, op_id, kind, name, status, failure, scheduled_at, "
            "closed_at, child_workflow_id) VALUES (?, ?, 'child', ?, 'failed', ?, ?, ?, ?)",
            run_id, w.op_id, req.workflow_type, dump_failure(failure), now, now,
            req.workflow_id,
        )
        c.events.append(("ChildWorkflowFailed", {
            "op_id": w.op_id, "child_workflow_id": req.workflow_id,
            "workflow_type": req.workflow_type, "failure": failure.to_dict(),
        }))
        c.ops[w.op_id] = OpRecord(w.op_id, OpKind.CHILD, req.workflow_type, OpStatus.FAILED,
                                  None, failure, now, now, child_workflow_id=req.workflow_id)
        return None
    child_run_id = new_id()
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, child_workflow_id, "
        "child_run_id) VALUES (?, ?, 'child', ?, 'scheduled', ?, ?, ?)",
        run_id, w.op_id, req.workflow_type, now, req.workflow_id, child_run_id,
    )
    c.events.append(("ChildWorkflowScheduled", {
        "op_id": w.op_id, "child_workflow_id": req.workflow_id,
        "child_run_id": child_run_id, "workflow_type": req.workflow_type, **w.options,
    }))
    yield from insert_run(c.tx, req, child_run_id, 1, now, plus(now, req.execution_timeout))
    return None


def _start_phase(c: _RunCommit, w: StartPhase) -> Program[None]:
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, fire_at) "
        "VALUES (?, ?, 'phase', ?, 'scheduled', ?, ?)",
        c.run.run_id, w.op_id, w.name, c.now, w.deadline,
    )
    c.events.append(("PhaseStarted", {
        "op_id": w.op_id, "phase": w.name, "limit_seconds": w.limit,
        "deadline_at": to_iso(w.deadline),
    }))
    return None


_PHASE_EVENTS = {"completed": "PhaseCompleted", "timed_out": "PhaseTimedOut",
                 "cancelled": "PhaseCancelled", "failed": "PhaseFailed"}


def _end_phase(c: _RunCommit, w: EndPhase) -> Program[None]:
    status = OpStatus.COMPLETED if w.outcome == "completed" else (
        OpStatus.CANCELLED if w.outcome == "cancelled" else OpStatus.FAILED)
    row = yield q1("SELECT name FROM ops WHERE run_id = ? AND op_id = ? AND status = "
                   "'scheduled'", c.run.run_id, w.op_id)
    if row is None:
        return None
    yield ex(
        "UPDATE ops SET status = ?, failure = ?, closed_at = ? WHERE run_id = ? AND op_id = ?",
        status, dump_failure(w.failure), c.now, c.run.run_id, w.op_id,
    )
    data: dict[str, Any] = {"op_id": w.op_id, "phase": row["name"], "outcome": w.outcome}
    if w.failure is not None:
        data["failure"] = w.failure.to_dict()
    c.events.append((_PHASE_EVENTS.get(w.outcome, "PhaseFailed"), data))
    c.ops[w.op_id] = OpRecord(w.op_id, OpKind.PHASE, row["name"], status, None, w.failure,
                              None, c.now)
    return None


def _start_units(c: _RunCommit, w: StartUnits) -> Program[None]:
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, result, scheduled_at) "
        "VALUES (?, ?, 'units', ?, 'scheduled', ?, ?)",
        c.run.run_id, w.op_id, w.handler, dumps({"total": w.total}), c.now,
    )
    c.events.append(("UnitsStarted", {"op_id": w.op_id, "handler": w.handler,
                                      "total": w.total}))
    return None


def _end_units(c: _RunCommit, w: EndUnits) -> Program[None]:
    row = yield q1("SELECT name, result FROM ops WHERE run_id = ? AND op_id = ? AND status = "
                   "'scheduled'", c.run.run_id, w.op_id)
    if row is None:
        return None
    summary = dict(loads(row["result"]) or {}, done=w.done, unknown=list(w.unknown))
    status = OpStatus.COMPLETED if w.outcome == "completed" else OpStatus.FAILED
    yield ex("UPDATE ops SET status = ?, result = ?, closed_at = ? WHERE run_id = ? "
             "AND op_id = ?", status, dumps(summary), c.now, c.run.run_id, w.op_id)
    c.events.append(("UnitsCompleted" if w.outcome == "completed" else "UnitsUnknown", {
        "op_id": w.op_id, "handler": row["name"], **summary}))
    c.ops[w.op_id] = OpRecord(w.op_id, OpKind.UNITS, row["name"], status, dumps(summary),
                              None, None, c.now)
    return None


def _deliver(c: _RunCommit, w: DeliverCancellation) -> Program[None]:
    yield from cancellation.deliver(c.run, w, c.now, c.events)
    return None


def _request_activity_stop(c: _RunCommit, w: RequestActivityStop) -> Program[None]:
    yield from cancellation.request_activity_stop(c.tx, c.run, w, c.now, c.events, c.ops)
    return None


def _cancel_timer(c: _RunCommit, w: CancelTimer) -> Program[None]:
    yield from cancellation.cancel_timer(c.run, w.op_id, c.now, c.events, c.ops)
    return None


def _request_child_cancellation(c: _RunCommit, w: RequestChildCancellation) -> Program[None]:
    yield from cancellation.request_child_cancellation(c.tx, c.run, w, c.now, c.events, c.ops)
    return None


def _close(c: _RunCommit, w: CloseRun) -> Program[None]:
    # the run's last events come before its close event, appended with it
    events, c.events = c.events, []
    c.next_run_id = yield from close_run(
        c.tx, c.run.run_id, w.status, c.now, result=w.result, failure=w.failure,
        continue_input=w.continue_input, needs_review=w.needs_review,
        locked=c.run if c.fresh else None, events=events, by_owner=True,
    )
    return None


Handler = Callable[[_RunCommit, Any], Program[None]]

#: One handler per write type: what recording that write means.
def _record_batched_local_activity(c: _RunCommit, w: RecordBatchedLocalActivity
                                   ) -> Program[None]:
    """A local activity's outcome kept in memory (``record="batched"``) and recorded
    with a later commit: recorded exactly as a per-step outcome, but as of its own
    `closed_at`, the instant the live run saw it (its replay sees the same
    `workflow.now()`), not the instant of the commit that carries it."""
    at = _RunCommit(c.tx, c.run, w.closed_at, c.events, c.ops)
    yield from _record_local_activity(at, w.step)
    return None


def _record_kept(c: _RunCommit, kept: list[RecordBatchedLocalActivity]) -> Program[None]:
    """Consecutive successful batched outcomes: the rows and events
    `_record_batched_local_activity` gives each, its op rows in one
    ``executemany`` (a flush carries up to `local_batch` of them, and a
    statement each was most of its time on the database thread, issue 26).

    Their records are not returned in the result's `ops`: the run's context
    made each when it kept the outcome (`WorkflowContext.record_batched`,
    the same fields), and resolving them again on the loop changed nothing
    (no task waits on a local op)."""
    if len(kept) == 1:
        yield from _record_batched_local_activity(c, kept[0])
        return None
    run_id = c.run.run_id
    yield many(LOCAL_OP_INSERT, [local_op_row(run_id, w.step, OpStatus.COMPLETED, w.closed_at)
                                 for w in kept])
    events = c.events
    for w in kept:
        events.extend(local_step_events(w.step))
    return None


HANDLERS: dict[type[Write], Handler] = {
    RecordLocalActivity: _record_local_activity,
    RecordBatchedLocalActivity: _record_batched_local_activity,
    ScheduleActivity: _schedule_activity,
    ScheduleTimer: _schedule_timer,
    FireTimer: _fire_timer,
    ScheduleChild: _schedule_child,
    DeliverCancellation: _deliver,
    RequestActivityStop: _request_activity_stop,
    CancelTimer: _cancel_timer,
    RequestChildCancellation: _request_child_cancellation,
    StartPhase: _start_phase,
    EndPhase: _end_phase,
    StartUnits: _start_units,
    EndUnits: _end_units,
    CloseRun: _close,
    **interaction.HANDLERS,  # signals, updates, conditions, markers, external ops
}


#: the writes whose handlers change no column of the run's row but its event
#: counter (`_RunCommit.fresh`)
_KEEPS_RUN_ROW = frozenset({RecordLocalActivity, RecordBatchedLocalActivity})


def _lock_attempts_to_stop(tx: Tx, batches: list[RunWrites]) -> Program[None]:
    """Lock the attempts this commit asks to stop before any run's fence.

    Lock order on PostgreSQL is activity attempts before runs (renew_leases,
    complete_activity); a stop request would otherwise lock its attempt after
    its run, and deadlock (1 s of deadlock_timeout, then a retry) with a lease
    renewal or a completion of that attempt. SQLite's write lock covers all.
    """
    pairs = [(b.run_id, w.op_id) for b in batches for w in b.writes
             if isinstance(w, RequestActivityStop)]
    if not pairs or not tx.lock:
        return None
    match = " OR ".join("(run_id = ? AND op_id = ?)" for _ in pairs)
    # The ids first, then the lock by primary key: a locking read whose plan
    # scans (a semi-join may) waits for every row lock it meets on some engines.
    ops = yield q(f"SELECT task_id FROM ops WHERE {match}",
                  *(value for pair in pairs for value in pair))
    ids = sorted({r["task_id"] for r in ops if r["task_id"] is not None})
    if ids:
        yield q(f"SELECT task_id FROM activity_tasks WHERE task_id IN ({placeholders(len(ids))}) "
                "ORDER BY task_id" + tx.lock, *ids)
    return None


def _fast_local_steps(tx: Tx, batch: RunWrites, now: float,
                      autocommit: bool) -> Program[CommitResult | None]:
    """The dialect's one-statement (or few-statement) path for a batch of
    successful local steps, if it has one and the batch qualifies; None when
    the general path must record it.

    A fast program returns None when its fence matched no row, having written
    nothing: the general path then runs in the same transaction and gives the
    precise outcome (lost authority, closed run, a deadline to enforce now).
    """
    if not batch.local_steps_only():
        return None
    program = tx.dialect.local_steps(batch, now, autocommit=autocommit)
    if program is None:
        return None
    result: CommitResult | None = yield from program
    return result


def _commit_run(tx: Tx, batch: RunWrites, now: float, *,
                fast: bool = True) -> Program[CommitResult]:
    if fast:
        result = yield from _fast_local_steps(tx, batch, now, autocommit=False)
        if result is not None:
            return result
    dialect = tx.dialect
    if (dialect.writable_cte or (dialect.owned_close_returning and dialect.returning)) \
            and len(batch.writes) == 1:
        w = batch.writes[0]
        if (type(w) is CloseRun and w.status != RunStatus.CONTINUED and not w.needs_review
                and (yield from close_owned_in_one(tx, batch.run_id, batch.epoch, w.status,
                                                   w.result, w.failure, now))):
            return CommitResult(batch.run_id, True, {})  # (else: nothing written)
    fence = yield q1(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?" + tx.lock,
                     batch.run_id)
    if (
        fence is None
        or int(fence["epoch"]) != batch.epoch
        or fence["status"] not in OPEN_STATUSES
    ):
        return CommitResult(batch.run_id, False)
    if fence["deadline_at"] is not None and now >= fence["deadline_at"]:
        # Storage is the source of truth for deadlines: nothing is recorded for
        # a run past its deadline; it is timed out (or its cleanup expires) now.
        yield from enforce_expired(tx, fence["namespace"], now, batch.run_id)
        return CommitResult(batch.run_id, False)
    c = _RunCommit(tx, run_from_row(fence), now)
    if not all(isinstance(w, DeliverCancellation) for w in batch.writes):
        yield from cancellation.mark_cleaning_up(c.run)
    kept: list[RecordBatchedLocalActivity] = []
    for write in batch.writes:
        if type(write) is RecordBatchedLocalActivity and write.step.failure is None:
            kept.append(write)  # recorded together, in order, at the next other write
            continue
        if kept:
            yield from _record_kept(c, kept)
            kept = []
        yield from HANDLERS[type(write)](c, write)
        c.fresh = c.fresh and type(write) in _KEEPS_RUN_ROW
    if kept:
        yield from _record_kept(c, kept)
    yield from c.flush()
    return CommitResult(batch.run_id, True, c.ops, c.next_run_id)


def commit(tx: Tx, batches: list[RunWrites], now: float) -> Program[list[CommitResult]]:
    """Record many runs' writes in one transaction; one result per batch, in order."""
    alone = len(batches) == 1
    if alone:
        # A dialect may make this whole transaction one self-committing statement.
        result = yield from _fast_local_steps(tx, batches[0], now, autocommit=True)
        if result is not None:
            return [result]
    results: list[CommitResult | None] = [None] * len(batches)
    fast = not alone  # (a lone batch has had its fast path tried above)
    steps = [i for i, b in enumerate(batches) if b.local_steps_only()]
    grouped_here = False
    if len(steps) > 1 and (len(steps) == len(batches) or tx.dialect.steps_group_mixed):
        group = tx.dialect.local_steps_group([batches[i] for i in steps], now)
        if group is not None:  # the runs' steps, each fenced, in a few statements
            grouped = yield from group
            if len(steps) == len(batches) and all(r is not None for r in grouped):
                return [r for r in grouped if r is not None]  # (all of them)
            # the others, and a run whose fence failed in the group (None:
            # nothing of it written; the general path below gives the precise
            # outcome), in this transaction
            for index, result in zip(steps, grouped, strict=True):
                results[index] = result
            grouped_here, fast = True, False
    yield from _lock_attempts_to_stop(tx, batches)
    if len(steps) > 1 and tx.dialect.writable_cte and not grouped_here:
        # a group with other writes: its runs' local steps in one statement,
        # which locks every run of the group first (the others' too, in order)
        chosen = set(steps)
        in_group = yield from local_steps_in_group(
            [batches[i] for i in steps], now,
            [b.run_id for i, b in enumerate(batches) if i not in chosen])
        for index, result in zip(steps, in_group, strict=True):
            if result.committed:  # (else: the general path below says why not)
                results[index] = result
        fast = False
    for index in sorted(range(len(batches)), key=lambda i: batches[i].run_id):  # lock order
        if results[index] is None:
            results[index] = yield from _commit_run(tx, batches[index], now, fast=fast)
    return [r for r in results if r is not None]


def landed_steps(batches: list[RunWrites]) -> Program[list[CommitResult | None] | None]:
    """After a commit of these batches whose outcome is unknown (the connection
    was lost during COMMIT, or during the one self-committing statement of
    their fast path, `durable.store.fastpath`): which of them landed, read back.

    Only batches of successful local steps can be told apart, and exactly: all
    of a batch is written in one statement or one transaction (the fenced
    bump of the run's event counter, its ops, its events) or none of it, and
    each step's op id is unique in its run. A batch whose ops are all there
    landed: its result, with the ops as stored. None of them there: it did
    not land (or its fence refused it, writing nothing), so the caller sends
    it again, which cannot apply it twice. A run whose epoch moved on was
    taken over: refused (`committed=False`) whatever landed, as a fresh
    commit would say. One result per batch (None: commit it again), or None
    for all when any batch is not local steps only, or only part of a
    batch's ops is there: the caller cannot tell, and replays the run.
    """
    if not batches or not all(b.local_steps_only() for b in batches):
        return None
    ids = sorted({b.run_id for b in batches})
    runs = yield q(f"SELECT run_id, epoch FROM runs WHERE run_id IN ({placeholders(len(ids))})",
                   *ids)
    epochs = {r["run_id"]: int(r["epoch"]) for r in runs}
    wanted = sorted({w.op_id for b in batches for w in b.writes
                     if isinstance(w, RecordLocalActivity)})
    rows = yield q(f"SELECT run_id, {OP_COLUMNS} FROM ops WHERE run_id IN "
                   f"({placeholders(len(ids))}) AND op_id IN ({placeholders(len(wanted))})",
                   *ids, *wanted)
    found: dict[str, dict[str, OpRecord]] = {}
    for row in rows:
        found.setdefault(row["run_id"], {})[row["op_id"]] = op_from_row(row)
    results: list[CommitResult | None] = []
    for batch in batches:
        if epochs.get(batch.run_id) != batch.epoch:
            results.append(CommitResult(batch.run_id, False))
            continue
        mine = [w.op_id for w in batch.writes if isinstance(w, RecordLocalActivity)]
        stored = found.get(batch.run_id, {})
        there = [op_id for op_id in mine if op_id in stored]
        if not there:
            results.append(None)
        elif len(there) == len(mine):
            results.append(CommitResult(batch.run_id, True,
                                        {op_id: stored[op_id] for op_id in mine}))
        else:
            return None
    return results
