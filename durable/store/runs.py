"""Runs: starting an instance, inserting a run, and reading runs back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from ..clock import to_iso
from ..deadlines import Deadlines
from ..driver import Program, Row, Tx, ex, placeholders, q, q1
from ..errors import ConfigurationError, WorkflowAlreadyStarted, WorkflowNotFound
from ..wakes import Wake
from .events import EVENT_INSERT, append_events, event_text
from .queues import counts_slots, limited_guard
from .records import (
    OP_COLUMNS,
    OPEN_SQL,
    OPEN_STATUSES,
    RUN_COLUMNS,
    ClaimedRun,
    OpRecord,
    RunRecord,
    RunStatus,
    StartRequest,
    StartResult,
    dumps,
    loads,
    new_id,
    op_from_row,
    plus,
    run_from_row,
)

#: a new instance's row. Every value is a parameter (no literal in VALUES), so
#: that a driver's ``executemany`` may send many rows as one multi-row INSERT
#: (the scheduler's pass sends its runs so, `durable.store.schedule_pass`)
WORKFLOW_INSERT = (
    "INSERT INTO workflows (namespace, workflow_id, workflow_type, current_run_id, status, "
    "execution_timeout, execution_deadline_at, run_count, memo, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: a new run's row, every value a parameter (see `WORKFLOW_INSERT`)
RUN_INSERT = (
    "INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, run_number, "
    "task_queue, status, input, parent_run_id, parent_workflow_id, parent_op_id, "
    "parent_close_policy, cleanup_timeout, run_timeout, execution_timeout, "
    "execution_deadline_at, run_deadline_at, cleanup_deadline_at, deadline_at, created_at, "
    "ready_at, cancellation, schedule_id, scheduled_at, priority, concurrency_key, "
    "event_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
    "?, ?, ?, ?)"
)
#: a new run taken by a worker as it starts (`Taker`): `RUN_INSERT`'s columns
#: and those a claim sets (`durable.store.claims.claim_sql`)
RUN_INSERT_TAKEN = RUN_INSERT.replace(
    "event_seq) VALUES (", "event_seq, owner, epoch, lease_expires_at, started_at, "
    "started_build, last_build, claim_capabilities) VALUES (?, ?, ?, ?, ?, ?, ?, ")


@dataclass(frozen=True)
class Taker:
    """A worker of this process that takes a run in its start's transaction
    (an eager start: `durable._runtime.eager`), as its claim would have: the
    same owner, lease, builds and capabilities (`claims.claim_sql`), epoch 1.

    Why (issue 26): each awaited start woke the worker, whose claim of that
    one run was a transaction of its own (the fair share's counts, the
    queue's limits, an UPDATE) and a pass of its claim loop: 10-15 µs of the
    database thread per step of a ten-step workflow (docs/benchmarks.md).
    Taken here, the run costs its INSERT's columns and one read back."""

    worker_id: str
    lease_seconds: float
    build_id: str | None
    capabilities: tuple[str, ...]

    def columns(self, now: float) -> tuple[Any, ...]:
        """The claim's values, in `RUN_INSERT_TAKEN`'s order after `RUN_INSERT`'s."""
        return (self.worker_id, 1, now + self.lease_seconds, now, self.build_id,
                self.build_id, json.dumps(list(self.capabilities)))


class StartTakers(Protocol):
    """A worker's side of eager starts (`durable._runtime.eager.EagerStarts`)."""

    def offer(self, request: StartRequest, run_id: str) -> Taker | None:
        """Its `Taker` if it has a free slot for this start's run, reserved until
        `settle`; None if it does not take this start."""

    def settle(self, run_id: str, taken: ClaimedRun | None, failed: bool) -> None:
        """The start it was offered ended: the run it took, or None (`failed`:
        the start raised, and may have committed a run it owns)."""


def start_workflow(tx: Tx, req: StartRequest, now: float,
                   run_id: str | None = None, to: str | None = None,
                   taker: Taker | None = None) -> Program[StartResult]:
    """Start an instance, honouring its id-reuse policy. `run_id`: the new
    run's id, fixed by the caller across retries (`reuse`); `to`: the process
    its wake-up is addressed to (`start_wake`); `taker`: the worker that takes
    the new run in this transaction if the queue has no limits (`may_take`)."""
    existing = yield q1(
        "SELECT workflow_id, current_run_id, status FROM workflows "
        "WHERE namespace = ? AND workflow_id = ?" + tx.lock,
        req.namespace, req.workflow_id,
    )
    run_id = run_id or new_id()
    if existing is not None:
        known = reuse(req, run_id, existing)
        if known is not None:
            return known
    execution_deadline = plus(now, req.execution_timeout)
    if taker is not None and not (yield from may_take(tx, req)):
        taker = None
    yield from insert_run(tx, req, run_id, 1, now, execution_deadline,
                          replace=existing is not None, to=to, taker=taker)
    if taker is None:
        return StartResult(run_id, True, RunStatus.PENDING)
    row = yield q1(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", run_id)
    assert row is not None  # inserted above, in this transaction
    return StartResult(run_id, True, RunStatus.RUNNING, ClaimedRun(run_from_row(row), {}))


def may_take(tx: Tx, req: StartRequest) -> Program[bool]:
    """Whether a worker may take this start's run in its transaction (`Taker`):
    not with a concurrency key (its slots are counted by a claim), and not on
    a queue that limits its runs (``max_running``, a rate, per-key slots:
    only a claim honours them, `durable.store.queues`). One read of the
    queue's row by its key, the guard a claim of an unlimited queue carries
    (`queues.limited_guard`)."""
    if req.concurrency_key is not None:
        return False
    guard, params = limited_guard(req.namespace, req.task_queue, "runs")
    row = yield q1(f"SELECT {guard} AS n", *params)
    return row is not None and int(row["n"]) == 0


def reuse(req: StartRequest, run_id: str, existing: Row) -> StartResult | None:
    """What an instance already there (its row: ``current_run_id``, ``status``)
    means for a start of run `run_id`: its answer, or None when the start may
    replace it (`req.id_reuse`); raises `WorkflowAlreadyStarted` when the
    policy refuses the id.

    An instance whose current run is `run_id` is this very start, recorded by
    an attempt whose answer was lost (a self-committing statement whose
    connection broke, `durable.store.start_statement.start_in_one`): it started.
    """
    if existing["current_run_id"] == run_id:
        return StartResult(run_id, True, existing["status"])
    is_open = existing["status"] in OPEN_STATUSES
    if is_open and req.id_reuse == "return_existing_active":
        return StartResult(existing["current_run_id"], False, existing["status"])
    if is_open or req.id_reuse != "allow_duplicate_failed_only" or (
        existing["status"] == RunStatus.COMPLETED
    ):
        raise WorkflowAlreadyStarted(req.workflow_id, existing["current_run_id"],
                                     status=str(existing["status"]))
    return None


def insert_run(
    tx: Tx,
    req: StartRequest,
    run_id: str,
    run_number: int,
    now: float,
    execution_deadline: float | None,
    *,
    replace: bool = False,
    new_instance: bool = True,
    to: str | None = None,
    taker: Taker | None = None,
) -> Program[None]:
    """Insert a run (and its instance when new) plus its WorkflowStarted event.
    Its wake-up goes `to` one process (see `start_wake`): the one a client's
    start chose, else the one the driver picks by what it knows
    (`addressee`: a child's start, a continued run, a schedule's fire, a
    reset's new run are each one run any member of the queue can take).
    A run a `taker` took is inserted running and owned, and announced to no
    claimer: the taker starts it (and watches its deadlines) itself."""
    workflow_row, run_row, started = new_run_rows(req, run_id, run_number, now,
                                                  execution_deadline, taken=taker is not None)
    if new_instance:
        if replace:
            yield ex(
                "DELETE FROM workflows WHERE namespace = ? AND workflow_id = ?",
                req.namespace, req.workflow_id,
            )
        yield ex(WORKFLOW_INSERT, *workflow_row)
    else:
        yield ex(
            "UPDATE workflows SET current_run_id = ?, run_count = run_count + 1, "
            "status = 'pending' WHERE namespace = ? AND workflow_id = ?",
            run_id, req.namespace, req.workflow_id,
        )
    if taker is None:
        yield ex(RUN_INSERT, *run_row)
    else:
        yield ex(RUN_INSERT_TAKEN, *run_row, *taker.columns(now))
    # the new run's first event: its counter was inserted at 1 above (one round
    # trip less than append_events' counter update, on every start)
    yield ex(EVENT_INSERT, run_id, 1, "WorkflowStarted", now, started)
    if taker is not None:
        return None
    if to is None:
        to = addressee(tx, req.namespace, req.task_queue, now)
    tx.wake(start_wake(req, now, execution_deadline, to))
    return None


def addressee(tx: Tx, namespace: str, task_queue: str, now: float) -> str | None:
    """The process that a ``RUNS`` wake-up of one run's worth of new work on
    this queue is addressed to (`durable.wakes.Wake.to`), by what the driver
    knows without a read (`Tx.addressee`; PostgreSQL: this process when its
    worker takes the queue's runs, else a member of the queue in turn);
    None: every process of the queue hears it (SQLite, MariaDB, members
    unknown or stale).

    Why (issue 26): a worker's commit of such work (a child's start above
    all) told every process of the queue, and each claimed, all but one for
    nothing. Only for work that any member can take: a run that a build
    refused (``blocked_build``) must reach a worker of another build, which
    the members do not tell apart, so its wake-ups still go to everybody."""
    choose = tx.addressee
    return None if choose is None else choose(namespace, task_queue, now)


def live_owner(row: Row, now: float) -> bool:
    """Whether a run's row (``owner``, ``lease_expires_at``) names a worker
    whose lease on it runs."""
    return row["owner"] is not None and row["lease_expires_at"] is not None and (
        row["lease_expires_at"] > now)


def slot_freed(tx: Tx, namespace: str, task_queue: str) -> None:
    """A run of this queue that held a slot closed or was handed back: when the
    queue is limited by a count of slots (`Tx.slot_limited`: a claim of this
    process found ``max_running`` or ``max_running_per_key``), wake its
    claimers, here and in every other process of the queue, in this commit.

    Why: a run waiting for the slot was otherwise claimed by the closing
    worker only (it claims again when a run ends while held back, decision
    (ao)); a worker of another process learnt of the slot at its next poll,
    so a queue limited to N runs across processes stayed below N for up to
    a poll interval after each close. Not addressed to one process (as a
    start is): the closing process's own workers would then be the only ones
    told, and they may not take the runs waiting (other types, no room).
    ``deadline=False``: a free slot brings no new deadline. A queue with no
    such limit gets nothing: its closes notify no one more than before
    (decision (at)). For a queue this process never claimed from, a close
    by someone other than the owner reads its limits (`slot_freed_by_other`)."""
    if (namespace, task_queue) in tx.slot_limited:
        tx.wake(Wake.runs(namespace, task_queue, deadline=False))


def slot_freed_by_other(tx: Tx, namespace: str, task_queue: str) -> Program[None]:
    """`slot_freed` for a close of a held run by someone other than its owner
    (a client's terminate or cancel, the control plane, the CLI, a deadline,
    a parent's close policy, a reset, a schedule's overlap): when this process
    does not know the queue to count slots (`Tx.slot_limited`: it never
    claimed from it), ONE read of the queue's limits row in the same
    transaction says whether to wake the queue's claimers.

    Why: such a process (a ``durable.connect`` with no worker, ``durable
    serve``, the CLI) never claims, so it never learns a queue's limits, and
    its close of a held run woke no one: the other processes took the freed
    slot only at their poll (decision (at)). Only on these rare paths: the
    owner's close (`slot_freed`) and a step's commit read nothing more."""
    if (namespace, task_queue) in tx.slot_limited:
        slot_freed(tx, namespace, task_queue)
        return None
    row = yield q1("SELECT runs_limited, limits FROM task_queues WHERE namespace = ? "
                   "AND name = ?", namespace, task_queue)
    if row is not None and int(row["runs_limited"]) and counts_slots(
            None if row["limits"] is None else str(row["limits"])):
        tx.wake(Wake.runs(namespace, task_queue, deadline=False))
    return None


def unheld_wake(tx: Tx, row: Row, now: float) -> Wake:
    """The ``RUNS`` wake-up for a run that no live worker holds and that has
    news (a signal, a query, an op of a run put down under pressure that
    closed): one run, so addressed to one member of its queue (`addressee`)
    unless a build refused it (``blocked_build``: a worker of another build
    must take it, and the members do not say which). `row`: the run's
    ``namespace``, ``task_queue`` and ``blocked_build``."""
    if row["blocked_build"] is not None:
        return Wake.runs(row["namespace"], row["task_queue"])
    return Wake.runs(row["namespace"], row["task_queue"],
                     to=addressee(tx, row["namespace"], row["task_queue"], now))


def start_wake(req: StartRequest, now: float, execution_deadline: float | None,
               to: str | None = None) -> Wake:
    """The ``RUNS`` wake-up of a start: `NO_DEADLINE` when the new run has no
    deadline (`Deadlines.earliest` of `new_run_rows` is None), so that no
    watchdog re-reads for it (`durable.wakes.NO_DEADLINE`); addressed `to` one
    process of the queue when the driver chose one (`unknown.start_workflow`)."""
    return Wake.runs(req.namespace, req.task_queue,
                     deadline=_deadlines(req, now, execution_deadline).earliest is not None,
                     to=to)


def _deadlines(req: StartRequest, now: float, execution_deadline: float | None) -> Deadlines:
    """A new run's deadlines: execution, run (from its timeout) and cleanup (a
    child started under a parent's cooperative cancellation request)."""
    cleanup_deadline = None
    if req.cancellation is not None:
        cleanup_deadline = req.cancellation.get("deadline_at")
    return Deadlines(execution_deadline, plus(now, req.run_timeout), cleanup_deadline)


def new_run_rows(
    req: StartRequest, run_id: str, run_number: int, now: float,
    execution_deadline: float | None, taken: bool = False,
) -> tuple[tuple[Any, ...], tuple[Any, ...], str]:
    """A new run's rows: the parameters of `WORKFLOW_INSERT` (its instance's,
    when new) and of `RUN_INSERT`, and its WorkflowStarted event's data (the
    event is numbered 1). Every path that starts a run stores these.
    `taken`: a worker takes it as it starts (`Taker`): running, not pending."""
    deadlines = _deadlines(req, now, execution_deadline)
    run_deadline, cleanup_deadline = deadlines.run, deadlines.cleanup
    status = (RunStatus.RUNNING if taken else RunStatus.PENDING).value
    workflow_row = (
        req.namespace, req.workflow_id, req.workflow_type, run_id, status,
        req.execution_timeout, execution_deadline, 1, req.memo, now,
    )
    run_row = (
        run_id, req.namespace, req.workflow_id, req.workflow_type, run_number,
        req.task_queue, status, req.input, req.parent_run_id,
        req.parent_workflow_id, req.parent_op_id,
        req.parent_close_policy, req.cleanup_timeout, req.run_timeout, req.execution_timeout,
        execution_deadline, run_deadline, cleanup_deadline, deadlines.earliest,
        now, now, dumps(req.cancellation), req.schedule_id, req.scheduled_at, req.priority,
        req.concurrency_key, 1,
    )
    data: dict[str, Any] = {
        "workflow_type": req.workflow_type,
        "task_queue": req.task_queue,
        "run_number": run_number,
        "input": loads(req.input),
    }
    if req.execution_timeout is not None:
        data["execution_timeout_seconds"] = req.execution_timeout
        data["execution_deadline_at"] = to_iso(execution_deadline)
    if req.run_timeout is not None:
        data["run_timeout_seconds"] = req.run_timeout
        data["run_deadline_at"] = to_iso(run_deadline)
    if req.parent_run_id is not None:
        data["parent_workflow_id"] = req.parent_workflow_id
        data["parent_run_id"] = req.parent_run_id
    if req.schedule_id is not None:
        data["schedule_id"] = req.schedule_id
        data["scheduled_at"] = to_iso(req.scheduled_at)
    return workflow_row, run_row, event_text(data)


def get_run(namespace: str, workflow_id: str, run_id: str | None) -> Program[RunRecord | None]:
    """A run of the instance (its current run when `run_id` is None), or None."""
    if run_id is None:
        row = yield q1(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = (SELECT current_run_id FROM "
            "workflows WHERE namespace = ? AND workflow_id = ?)",
            namespace, workflow_id,
        )
    else:
        row = yield q1(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ? AND namespace = ? "
            "AND workflow_id = ?",
            run_id, namespace, workflow_id,
        )
    return None if row is None else run_from_row(row)


def resync(
    run_ids: list[str], waiting: dict[str, list[str]]
) -> Program[tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]]]:
    """The state of many owned runs and the closed ops they wait on, in one read."""
    runs: dict[str, RunRecord] = {}
    closed: list[tuple[str, OpRecord]] = []
    for start in range(0, len(run_ids), 400):
        chunk = run_ids[start:start + 400]
        rows = yield q(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id IN ({placeholders(len(chunk))})",
            *chunk,
        )
        for row in rows:
            runs[row["run_id"]] = run_from_row(row)
        op_ids = sorted({op for r in chunk for op in waiting.get(r, ())})
        if not op_ids:
            continue
        op_rows = yield q(
            f"SELECT run_id, {OP_COLUMNS} FROM ops WHERE run_id IN "
            f"({placeholders(len(chunk))}) AND op_id IN ({placeholders(len(op_ids))}) "
            "AND status <> 'scheduled'",
            *chunk, *op_ids,
        )
        for row in op_rows:
            if row["op_id"] in waiting.get(row["run_id"], ()):
                closed.append((row["run_id"], op_from_row(row)))
    return runs, closed


def clear_review(tx: Tx, namespace: str, workflow_id: str, now: float,
                 units: str | None = None) -> Program[bool]:
    """Let a run marked for review be claimed and replayed again (after a fix, or
    after an operator decided what became of units whose outcome is unknown)."""
    run = yield from get_run(namespace, workflow_id, None)
    if run is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} in {namespace!r}")
    if not run.needs_review:
        return False
    unknown = run.failure is not None and run.failure.category == "unknown"
    if unknown and units is None:
        raise ConfigurationError(
            f"run {run.run_id} of {workflow_id!r} waits for a decision on units whose outcome "
            f"is unknown: `durable retry-after-review {workflow_id} --units rerun` (or "
            "retry_after_review(units='rerun')) runs them again, `--units confirm` "
            "(units='confirm') records them done")
    if unknown:
        yield from _decide_units(tx, run.run_id, units == "rerun", now)
    yield ex(
        "UPDATE runs SET needs_review = 0, ready_at = ?, owner = NULL WHERE run_id = ?",
        now, run.run_id,
    )
    yield from append_events(tx, run.run_id, [("WorkflowReviewCleared", {})], now)
    tx.wake(Wake.runs(run.namespace, run.task_queue, to=None if run.blocked_build else
                      addressee(tx, run.namespace, run.task_queue, now)))
    return True


def _decide_units(tx: Tx, run_id: str, rerun: bool, now: float) -> Program[None]:
    """Apply an operator's decision to the units whose outcome is unknown."""
    rows = yield q(
        f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ? AND kind = 'activity' AND status = "
        "'failed'", run_id)
    events: list[tuple[str, dict[str, Any]]] = []
    for row in rows:
        op = op_from_row(row)
        if op.failure is None or op.failure.get("unit_outcome") != "unknown":
            continue
        unit = op.op_id.split("/", 1)[-1]
        if rerun:  # forget the attempt: replay sends the unit again
            yield ex("DELETE FROM ops WHERE run_id = ? AND op_id = ?", run_id, op.op_id)
            yield ex("DELETE FROM activity_tasks WHERE task_id = ?", op.task_id)
            events.append(("UnitRerunApproved", {"op_id": op.op_id, "unit": unit}))
        else:  # its effect happened: record it done, with no result
            yield ex("UPDATE ops SET status = 'completed', result = NULL, failure = NULL, "
                     "closed_at = ? WHERE run_id = ? AND op_id = ?", now, run_id, op.op_id)
            events.append(("UnitConfirmed", {"op_id": op.op_id, "unit": unit}))
    yield from append_events(tx, run_id, events, now)
    return None



def open_runs(namespace: str, task_queue: str, after_run_id: str,
              limit: int) -> Program[list[dict[str, Any]]]:
    """Open runs of a task queue, by run id after `after_run_id` (a page): what
    `durable check-upgrade` replays."""
    rows = yield q(
        "SELECT run_id, workflow_id, workflow_type, last_build, blocked_build FROM runs "
        f"WHERE namespace = ? AND task_queue = ? AND status IN {OPEN_SQL} "
        "AND run_id > ? ORDER BY run_id LIMIT ?",
        namespace, task_queue, after_run_id, limit)
    return [dict(r) for r in rows]


def started_run(run_id: str, taker: Taker | None = None) -> Program[StartResult | None]:
    """A start's run read back by its id (fixed for every attempt of the start):
    the start's answer if the run is there (it started), else None. A run
    its `taker` took (its first owner, epoch 1) is handed to it as taken."""
    row = yield q1(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", run_id)
    if row is None:
        return None
    taken = None
    if taker is not None and row["owner"] == taker.worker_id and int(row["epoch"]) == 1:
        taken = ClaimedRun(run_from_row(row), {})
    return StartResult(run_id, True, row["status"], taken)
