"""The domain transactions of the driver Protocol, written once for SQL drivers.

A transaction is a *program*: a generator that yields statements and receives
their results. A driver decides how to run it: the SQLite driver runs the whole
program on its database thread in one hop (one round trip per transaction);
the PostgreSQL driver sends each statement on one connection inside a
transaction. The logic, and therefore the behaviour, is the same on both,
which is what the conformance suite checks.

Statements use ``?`` placeholders; a driver rewrites them for its dialect.
Times are UTC epoch seconds (REAL / DOUBLE PRECISION); JSON is stored as text
so that an operator can read it with any SQL client.
"""

from __future__ import annotations

import abc
import json
import uuid
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .clock import to_datetime, to_iso
from .driver import (
    OPEN_STATUSES,
    ActivityOutcome,
    ActivityTask,
    CancelTimer,
    ClaimedRun,
    CloseRun,
    CommitResult,
    DeliverCancellation,
    FireTimer,
    HeartbeatAck,
    HistoryEvent,
    OpRecord,
    RecordedEvent,
    RecordEvent,
    RecordLocalActivity,
    RequestActivityStop,
    RequestChildCancellation,
    RunRecord,
    RunWrites,
    ScheduleActivity,
    ScheduleChild,
    ScheduleTimer,
    StartRequest,
    StartResult,
    StorageSnapshot,
    Wake,
    WakeHub,
    WorkerRegistration,
)
from .errors import ConfigurationError, WorkflowAlreadyStarted, WorkflowNotFound
from .options import RetryPolicy

SCHEMA_VERSION = 1

T = TypeVar("T")


@dataclass(frozen=True)
class Stmt:
    """One statement: mode is 'all' (rows), 'one' (row or None), 'exec'
    (rowcount) or 'many' (executemany over params_seq)."""

    sql: str
    params: Sequence[Any] = ()
    mode: str = "all"
    params_seq: Sequence[Sequence[Any]] = ()
    autocommit: bool = False  # the program's only statement: no BEGIN/COMMIT needed


Row = Any  # sqlite3.Row or asyncpg.Record: both index by column name
Program = Generator[Stmt, Any, T]


@dataclass
class Tx:
    """Per-transaction context handed to programs: dialect and wake-ups."""

    dialect: str  # "sqlite" | "postgres"
    wakes: list[Wake] = field(default_factory=list)

    @property
    def skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED" if self.dialect == "postgres" else ""

    @property
    def lock(self) -> str:
        return " FOR UPDATE" if self.dialect == "postgres" else ""

    def wake(self, *key: str, op: OpRecord | None = None) -> None:
        self.wakes.append(Wake(tuple(key), op))


def q(sql: str, *params: Any) -> Stmt:
    return Stmt(sql, params, "all")


def q1(sql: str, *params: Any) -> Stmt:
    return Stmt(sql, params, "one")


def ex(sql: str, *params: Any) -> Stmt:
    return Stmt(sql, params, "exec")


def many(sql: str, params_seq: Sequence[Sequence[Any]]) -> Stmt:
    return Stmt(sql, (), "many", params_seq)


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), default=str)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def new_id() -> str:
    return uuid.uuid4().hex


# ---------------------------------------------------------------- schema

_SCHEMA = """
CREATE TABLE IF NOT EXISTS durable_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS workflows (
    namespace TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    current_run_id TEXT NOT NULL,
    status TEXT NOT NULL,
    closed_reason TEXT,
    execution_timeout {real},
    execution_deadline_at {real},
    run_count {int} NOT NULL,
    memo TEXT,
    created_at {real} NOT NULL,
    closed_at {real},
    PRIMARY KEY (namespace, workflow_id)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    run_number {int} NOT NULL,
    task_queue TEXT NOT NULL,
    status TEXT NOT NULL,
    closed_reason TEXT,
    input TEXT NOT NULL,
    result TEXT,
    failure TEXT,
    parent_run_id TEXT,
    parent_workflow_id TEXT,
    parent_op_id TEXT,
    parent_close_policy TEXT,
    cleanup_timeout {real},
    run_timeout {real},
    execution_timeout {real},
    execution_deadline_at {real},
    run_deadline_at {real},
    cleanup_deadline_at {real},
    deadline_at {real},
    created_at {real} NOT NULL,
    started_at {real},
    closed_at {real},
    owner TEXT,
    epoch {int} NOT NULL DEFAULT 0,
    lease_expires_at {real},
    ready_at {real},
    event_seq {int} NOT NULL DEFAULT 0,
    cancellation TEXT,
    claim_capabilities TEXT,
    continued_run_id TEXT,
    needs_review {int} NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_claim ON runs (namespace, task_queue, ready_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS runs_deadline ON runs (namespace, deadline_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner) WHERE owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_workflow ON runs (namespace, workflow_id, run_number);
CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_status ON runs (namespace, status, created_at);
CREATE TABLE IF NOT EXISTS ops (
    run_id TEXT NOT NULL,
    op_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    failure TEXT,
    scheduled_at {real},
    closed_at {real},
    fire_at {real},
    child_workflow_id TEXT,
    child_run_id TEXT,
    task_id TEXT,
    interrupted {int} NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, op_id)
);
CREATE TABLE IF NOT EXISTS activity_tasks (
    task_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    activity_name TEXT NOT NULL,
    run_id TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    op_id TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt {int} NOT NULL,
    options TEXT NOT NULL,
    scheduled_at {real} NOT NULL,
    available_at {real} NOT NULL,
    schedule_to_start_deadline {real},
    schedule_to_close_deadline {real},
    start_to_close_deadline {real},
    heartbeat_deadline {real},
    lease_expires_at {real},
    deadline_at {real},
    owner TEXT,
    claimed_at {real},
    heartbeat_details TEXT,
    last_failure TEXT,
    stop_requested {int} NOT NULL DEFAULT 0,
    stop_requested_at {real},
    stop_receipt TEXT,
    closed_at {real}
);
CREATE INDEX IF NOT EXISTS activity_claim ON activity_tasks (namespace, task_queue, available_at)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS activity_deadline ON activity_tasks (namespace, deadline_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS activity_run ON activity_tasks (run_id);
CREATE TABLE IF NOT EXISTS events (
    id {serial} PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq {int} NOT NULL,
    type TEXT NOT NULL,
    recorded_at {real} NOT NULL,
    data TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_run_seq ON events (run_id, seq);
CREATE TABLE IF NOT EXISTS failures (
    id {serial} PRIMARY KEY,
    run_id TEXT NOT NULL,
    recorded_at {real} NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS failures_run ON failures (run_id);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_types TEXT NOT NULL,
    activity_names TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    heartbeat_at {real} NOT NULL,
    expires_at {real} NOT NULL
);
"""


def schema_statements(dialect: str) -> list[str]:
    """The DDL for a dialect, one statement per entry."""
    if dialect == "sqlite":
        subs = {"real": "REAL", "int": "INTEGER", "serial": "INTEGER"}
    else:
        subs = {"real": "DOUBLE PRECISION", "int": "BIGINT", "serial": "BIGSERIAL"}
    text = _SCHEMA.format(**subs)
    return [s.strip() for s in text.split(";") if s.strip()]


def migrate() -> Program[int]:
    """Create or check the schema; refuse a schema written by a newer version."""
    row = yield q1("SELECT value FROM durable_meta WHERE key = 'schema_version'")
    if row is None:
        yield ex("INSERT INTO durable_meta (key, value) VALUES ('schema_version', ?)",
                 str(SCHEMA_VERSION))
        return SCHEMA_VERSION
    found = int(row["value"])
    if found > SCHEMA_VERSION:
        raise ConfigurationError(
            f"the database schema is version {found}, newer than this durable's "
            f"({SCHEMA_VERSION}); upgrade durable-sdk before connecting to it"
        )
    return found


# ---------------------------------------------------------------- row mapping

_RUN_COLUMNS = (
    "run_id, namespace, workflow_id, workflow_type, run_number, task_queue, status, "
    "closed_reason, input, result, failure, parent_run_id, parent_workflow_id, parent_op_id, "
    "run_timeout, execution_timeout, execution_deadline_at, run_deadline_at, "
    "cleanup_deadline_at, created_at, started_at, closed_at, owner, epoch, cancellation, "
    "continued_run_id, needs_review, parent_close_policy, event_seq, deadline_at, cleanup_timeout"
)

_OP_COLUMNS = (
    "op_id, kind, name, status, result, failure, scheduled_at, closed_at, fire_at, "
    "child_workflow_id, child_run_id, task_id, interrupted"
)


def run_from_row(row: Row) -> RunRecord:
    return RunRecord(
        run_id=row["run_id"],
        namespace=row["namespace"],
        workflow_id=row["workflow_id"],
        workflow_type=row["workflow_type"],
        run_number=int(row["run_number"]),
        task_queue=row["task_queue"],
        status=row["status"],
        input=row["input"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        closed_at=row["closed_at"],
        closed_reason=row["closed_reason"],
        result=row["result"],
        failure=loads(row["failure"]),
        parent_run_id=row["parent_run_id"],
        parent_workflow_id=row["parent_workflow_id"],
        parent_op_id=row["parent_op_id"],
        run_timeout=row["run_timeout"],
        execution_timeout=row["execution_timeout"],
        execution_deadline_at=row["execution_deadline_at"],
        run_deadline_at=row["run_deadline_at"],
        cleanup_deadline_at=row["cleanup_deadline_at"],
        owner=row["owner"],
        epoch=int(row["epoch"]),
        cancellation=loads(row["cancellation"]),
        continued_run_id=row["continued_run_id"],
        needs_review=bool(row["needs_review"]),
    )


def op_from_row(row: Row) -> OpRecord:
    return OpRecord(
        op_id=row["op_id"],
        kind=row["kind"],
        name=row["name"],
        status=row["status"],
        result=row["result"],
        failure=loads(row["failure"]),
        scheduled_at=row["scheduled_at"],
        closed_at=row["closed_at"],
        fire_at=row["fire_at"],
        child_workflow_id=row["child_workflow_id"],
        child_run_id=row["child_run_id"],
        task_id=row["task_id"],
        interrupted=bool(row["interrupted"]),
    )


def _min(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _plus(base: float, seconds: float | None) -> float | None:
    return None if seconds is None else base + seconds


# ---------------------------------------------------------------- events


def append_events(
    tx: Tx, run_id: str, events: Iterable[tuple[str, dict[str, Any]]], now: float
) -> Program[None]:
    """Append history events to a run (numbered by the run's event counter)."""
    events = list(events)
    if not events:
        return None
    row = yield q1(
        "UPDATE runs SET event_seq = event_seq + ? WHERE run_id = ? RETURNING event_seq",
        len(events), run_id,
    )
    if row is None:
        return None
    last = int(row["event_seq"])
    first = last - len(events) + 1
    yield many(
        "INSERT INTO events (run_id, seq, type, recorded_at, data) VALUES (?, ?, ?, ?, ?)",
        [
            (run_id, first + i, etype, now, json.dumps(data, default=str))
            for i, (etype, data) in enumerate(events)
        ],
    )
    return None


def record_failure(run_id: str, failure: dict[str, Any], now: float) -> Program[None]:
    yield ex(
        "INSERT INTO failures (run_id, recorded_at, data) VALUES (?, ?, ?)",
        run_id, now, json.dumps(failure, default=str),
    )
    return None


# ---------------------------------------------------------------- start


def start_workflow(tx: Tx, req: StartRequest, now: float) -> Program[StartResult]:
    existing = yield q1(
        "SELECT workflow_id, current_run_id, status FROM workflows "
        "WHERE namespace = ? AND workflow_id = ?" + tx.lock,
        req.namespace, req.workflow_id,
    )
    if existing is not None:
        is_open = existing["status"] in OPEN_STATUSES
        if is_open and req.id_reuse == "return_existing_active":
            return StartResult(existing["current_run_id"], False, existing["status"])
        if is_open or req.id_reuse != "allow_duplicate_failed_only" or existing["status"] in (
            "completed",
        ):
            raise WorkflowAlreadyStarted(req.workflow_id, existing["current_run_id"])
    run_id = new_id()
    execution_deadline = _plus(now, req.execution_timeout)
    yield from insert_run(tx, req, run_id, 1, now, execution_deadline, replace=existing is not None)
    return StartResult(run_id, True, "pending")


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
) -> Program[None]:
    """Insert a run (and its instance when new) plus its WorkflowStarted event."""
    run_deadline = _plus(now, req.run_timeout)
    cleanup_deadline = None
    if req.cancellation is not None:
        cleanup_deadline = req.cancellation.get("deadline_at")
    if new_instance:
        if replace:
            yield ex(
                "DELETE FROM workflows WHERE namespace = ? AND workflow_id = ?",
                req.namespace, req.workflow_id,
            )
        yield ex(
            "INSERT INTO workflows (namespace, workflow_id, workflow_type, current_run_id, "
            "status, execution_timeout, execution_deadline_at, run_count, memo, created_at) "
            "VALUES (?, ?, ?, ?, 'pending', ?, ?, 1, ?, ?)",
            req.namespace, req.workflow_id, req.workflow_type, run_id,
            req.execution_timeout, execution_deadline, req.memo, now,
        )
    else:
        yield ex(
            "UPDATE workflows SET current_run_id = ?, run_count = run_count + 1, "
            "status = 'pending' WHERE namespace = ? AND workflow_id = ?",
            run_id, req.namespace, req.workflow_id,
        )
    yield ex(
        "INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, run_number, "
        "task_queue, status, input, parent_run_id, parent_workflow_id, parent_op_id, "
        "parent_close_policy, cleanup_timeout, run_timeout, execution_timeout, "
        "execution_deadline_at, run_deadline_at, cleanup_deadline_at, deadline_at, created_at, "
        "ready_at, cancellation) "
        "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        run_id, req.namespace, req.workflow_id, req.workflow_type, run_number,
        req.task_queue, req.input, req.parent_run_id, req.parent_workflow_id, req.parent_op_id,
        req.parent_close_policy, req.cleanup_timeout, req.run_timeout, req.execution_timeout,
        execution_deadline,
        run_deadline, cleanup_deadline, _min(execution_deadline, run_deadline, cleanup_deadline),
        now, now, dumps(req.cancellation),
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
    yield from append_events(tx, run_id, [("WorkflowStarted", data)], now)
    tx.wake("runs", req.namespace, req.task_queue)
    return None


# ---------------------------------------------------------------- reads


def get_run(namespace: str, workflow_id: str, run_id: str | None) -> Program[RunRecord | None]:
    if run_id is None:
        row = yield q1(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = (SELECT current_run_id FROM "
            "workflows WHERE namespace = ? AND workflow_id = ?)",
            namespace, workflow_id,
        )
    else:
        row = yield q1(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ? AND namespace = ? "
            "AND workflow_id = ?",
            run_id, namespace, workflow_id,
        )
    return None if row is None else run_from_row(row)


def load_ops(run_id: str, op_ids: Sequence[str] | None = None) -> Program[dict[str, OpRecord]]:
    if op_ids is None:
        rows = yield q(f"SELECT {_OP_COLUMNS} FROM ops WHERE run_id = ?", run_id)
    elif not op_ids:
        return {}
    else:
        rows = yield q(
            f"SELECT {_OP_COLUMNS} FROM ops WHERE run_id = ? AND op_id IN "
            f"({placeholders(len(op_ids))})",
            run_id, *op_ids,
        )
    return {row["op_id"]: op_from_row(row) for row in rows}


def resync(
    run_ids: list[str], waiting: dict[str, list[str]]
) -> Program[tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]]]:
    """The state of many owned runs and the closed ops they wait on, in one read."""
    runs: dict[str, RunRecord] = {}
    closed: list[tuple[str, OpRecord]] = []
    for start in range(0, len(run_ids), 400):
        chunk = run_ids[start:start + 400]
        rows = yield q(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id IN ({placeholders(len(chunk))})",
            *chunk,
        )
        for row in rows:
            runs[row["run_id"]] = run_from_row(row)
        op_ids = sorted({op for r in chunk for op in waiting.get(r, ())})
        if not op_ids:
            continue
        op_rows = yield q(
            f"SELECT run_id, {_OP_COLUMNS} FROM ops WHERE run_id IN "
            f"({placeholders(len(chunk))}) AND op_id IN ({placeholders(len(op_ids))}) "
            "AND status <> 'scheduled'",
            *chunk, *op_ids,
        )
        for row in op_rows:
            if row["op_id"] in waiting.get(row["run_id"], ()):
                closed.append((row["run_id"], op_from_row(row)))
    return runs, closed


# ---------------------------------------------------------------- runs: claim, lease


def claim_runs(
    tx: Tx,
    namespace: str,
    task_queue: str,
    worker_id: str,
    types: tuple[str, ...],
    limit: int,
    lease_seconds: float,
    now: float,
    capabilities: tuple[str, ...] = (),
) -> Program[list[ClaimedRun]]:
    if limit <= 0 or not types:
        return []
    rows = yield q(
        "SELECT run_id FROM runs WHERE namespace = ? AND task_queue = ? "
        "AND status IN ('pending', 'running') AND ready_at <= ? AND needs_review = 0 "
        "AND (owner IS NULL OR lease_expires_at <= ?) "
        f"AND workflow_type IN ({placeholders(len(types))}) "
        "ORDER BY ready_at LIMIT ?" + tx.skip_locked,
        namespace, task_queue, now, now, *types, limit,
    )
    if not rows:
        return []
    ids = [r["run_id"] for r in rows]
    claimed = yield q(
        "UPDATE runs SET owner = ?, epoch = epoch + 1, lease_expires_at = ?, "
        "status = 'running', started_at = COALESCE(started_at, ?), claim_capabilities = ? "
        f"WHERE run_id IN ({placeholders(len(ids))}) RETURNING {_RUN_COLUMNS}",
        worker_id, now + lease_seconds, now, json.dumps(list(capabilities)), *ids,
    )
    yield ex(
        "UPDATE workflows SET status = 'running' WHERE status = 'pending' AND current_run_id IN "
        f"({placeholders(len(ids))})",
        *ids,
    )
    op_rows = yield q(
        f"SELECT run_id, {_OP_COLUMNS} FROM ops WHERE run_id IN ({placeholders(len(ids))})",
        *ids,
    )
    ops: dict[str, dict[str, OpRecord]] = {i: {} for i in ids}
    for row in op_rows:
        ops[row["run_id"]][row["op_id"]] = op_from_row(row)
    return [ClaimedRun(run_from_row(r), ops[r["run_id"]]) for r in claimed]


def renew_leases(
    tx: Tx, worker_id: str, run_ids: list[str], lease_seconds: float, now: float
) -> Program[set[str]]:
    # Lock order, on PostgreSQL: activity attempts before runs (as completing
    # or timing out an attempt does), each in id order (as commit, claims and
    # enforcement do). Two transactions that lock rows in different orders
    # deadlock, and each deadlock costs the server's deadlock_timeout (1 s).
    tasks = yield q(
        "SELECT task_id, start_to_close_deadline, heartbeat_deadline, "
        "schedule_to_close_deadline FROM activity_tasks WHERE owner = ? AND status = 'running' "
        "ORDER BY task_id" + tx.lock,
        worker_id,
    )
    if tasks:
        lease = now + lease_seconds
        yield many(
            "UPDATE activity_tasks SET lease_expires_at = ?, deadline_at = ? WHERE task_id = ?",
            [
                (lease, _min(t["start_to_close_deadline"], t["heartbeat_deadline"],
                             t["schedule_to_close_deadline"], lease), t["task_id"])
                for t in tasks
            ],
        )
    # Only the runs the worker executes: a run it claimed a moment ago (its
    # executor not started yet) keeps its fresh lease and is never "stray".
    owned: set[str] = set()
    ordered = sorted(run_ids)
    for start in range(0, len(ordered), 400):
        chunk = ordered[start:start + 400]
        rows = yield q(
            "UPDATE runs SET lease_expires_at = ? WHERE run_id IN (SELECT run_id FROM runs "
            f"WHERE owner = ? AND run_id IN ({placeholders(len(chunk))}) "
            "AND status IN ('pending', 'running') ORDER BY run_id" + tx.lock
            + ") RETURNING run_id",
            now + lease_seconds, worker_id, *chunk,
        )
        owned.update(r["run_id"] for r in rows)
    return owned


def release_runs(
    tx: Tx, worker_id: str, run_ids: list[str], now: float, attempts: bool = True
) -> Program[None]:
    """A stopping worker hands its runs and running attempts back at once.

    Attempts go back to pending without using up a retry (the worker, not the
    activity, stopped); a late result from the old attempt is refused.
    """
    if run_ids:
        yield ex(
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE owner = ? AND "
            f"run_id IN ({placeholders(len(run_ids))})",
            worker_id, *run_ids,
        )
    if not attempts:
        return None
    tasks = yield q(
        "UPDATE activity_tasks SET status = 'pending', owner = NULL, available_at = ?, "
        "claimed_at = NULL, start_to_close_deadline = NULL, heartbeat_deadline = NULL, "
        "lease_expires_at = NULL, deadline_at = schedule_to_close_deadline "
        "WHERE owner = ? AND status = 'running' "
        "RETURNING task_id, run_id, op_id, attempt, namespace, task_queue",
        now, worker_id,
    )
    for task in tasks:
        yield from append_events(tx, task["run_id"], [("ActivityAttemptReleased", {
            "op_id": task["op_id"], "task_id": task["task_id"], "attempt": task["attempt"],
            "worker_id": worker_id, "reason": "worker shutdown",
        })], now)
        tx.wake("activities", task["namespace"], task["task_queue"])
    return None


# ---------------------------------------------------------------- the owner's commits


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
    yield q(
        f"SELECT task_id FROM activity_tasks WHERE task_id IN (SELECT task_id FROM ops "
        f"WHERE {match}) ORDER BY task_id" + tx.lock,
        *(value for pair in pairs for value in pair),
    )
    return None


def _local_steps_only(batch: RunWrites) -> bool:
    return batch.quiet and all(
        isinstance(w, RecordLocalActivity) and w.failure is None and not w.interrupted
        for w in batch.writes
    )


def _commit_local_steps(
    batch: RunWrites, now: float, *, autocommit: bool = True
) -> Program[list[CommitResult]]:
    """The hot path on PostgreSQL: fence, ops and events in ONE statement.

    A data-modifying CTE commits on its own (autocommit), so recording a local
    activity's outcome costs one round trip instead of six. SQLite has no DML
    in CTEs and needs none: its whole program is one thread hop anyway.
    """
    writes = [w for w in batch.writes if isinstance(w, RecordLocalActivity)]
    n_events = 2 * len(writes)
    op_values = ", ".join(
        "(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION))"
        for _ in writes
    )
    event_values = ", ".join(
        "(CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT))" for _ in range(n_events)
    )
    op_params: list[Any] = []
    event_params: list[Any] = []
    for i, w in enumerate(writes):
        op_params += [w.op_id, w.name, w.result, w.started_at]
        event_params += [2 * i + 1, "ActivityScheduled", json.dumps({
            "op_id": w.op_id, "activity_type": w.name, "local": True,
        }), 2 * i + 2, "ActivityCompleted", json.dumps({
            "op_id": w.op_id, "activity_type": w.name, "local": True,
            "attempt": w.attempts, "result": loads(w.result),
        }, default=str)]
    row = yield Stmt(
        "WITH fence AS (UPDATE runs SET event_seq = event_seq + CAST(? AS BIGINT) "
        "WHERE run_id = ? AND epoch = CAST(? AS BIGINT) AND status IN ('pending', 'running') "
        "AND (deadline_at IS NULL OR deadline_at > CAST(? AS DOUBLE PRECISION)) "
        "RETURNING event_seq), "
        "new_ops AS (INSERT INTO ops (run_id, op_id, kind, name, status, result, "
        "scheduled_at, closed_at) SELECT CAST(? AS TEXT), v.op_id, 'local_activity', v.name, "
        "'completed', v.result, v.started_at, CAST(? AS DOUBLE PRECISION) "
        f"FROM (VALUES {op_values}) "
        "AS v(op_id, name, result, started_at), fence), "
        "new_events AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
        "SELECT ?, fence.event_seq - CAST(? AS BIGINT) + e.n, e.type, "
        f"CAST(? AS DOUBLE PRECISION), e.data FROM (VALUES {event_values}) "
        "AS e(n, type, data), fence) "
        "SELECT event_seq FROM fence",
        (n_events, batch.run_id, batch.epoch, now, batch.run_id, now, *op_params,
         batch.run_id, n_events, now, *event_params),
        "one",
        autocommit=autocommit,
    )
    if row is None:
        return [CommitResult(batch.run_id, False)]
    ops = {
        w.op_id: OpRecord(w.op_id, "local_activity", w.name, "completed", w.result, None,
                          w.started_at, now)
        for w in writes
    }
    return [CommitResult(batch.run_id, True, ops)]


def commit(tx: Tx, batches: list[RunWrites], now: float) -> Program[list[CommitResult]]:
    if tx.dialect == "postgres" and len(batches) == 1 and _local_steps_only(batches[0]):
        return (yield from _commit_local_steps(batches[0], now))
    results: list[CommitResult | None] = [None] * len(batches)
    order = sorted(range(len(batches)), key=lambda i: batches[i].run_id)  # lock order
    yield from _lock_attempts_to_stop(tx, batches)
    for index in order:
        batch = batches[index]
        if tx.dialect == "postgres" and _local_steps_only(batch):
            # one statement for this run's local steps, inside the group's transaction
            results[index] = (yield from _commit_local_steps(batch, now, autocommit=False))[0]
            continue
        fence = yield q1(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?" + tx.lock,
                         batch.run_id)
        if (
            fence is None
            or int(fence["epoch"]) != batch.epoch
            or fence["status"] not in OPEN_STATUSES
        ):
            results[index] = CommitResult(batch.run_id, False)
            continue
        if fence["deadline_at"] is not None and now >= fence["deadline_at"]:
            # Storage is the source of truth for deadlines: nothing is recorded for
            # a run past its deadline; it is timed out (or its cleanup expires) now.
            yield from enforce_expired(tx, fence["namespace"], now, batch.run_id)
            results[index] = CommitResult(batch.run_id, False)
            continue
        ops: dict[str, OpRecord] = {}
        events: list[tuple[str, dict[str, Any]]] = []
        next_run_id: str | None = None
        run = run_from_row(fence)
        if not all(isinstance(w, DeliverCancellation) for w in batch.writes):
            yield from sqlcancel.mark_cleaning_up(run)
        for write in batch.writes:
            if isinstance(write, RecordLocalActivity):
                yield from _record_local_activity(batch.run_id, write, now, events, ops)
            elif isinstance(write, ScheduleActivity):
                yield from _schedule_activity(tx, fence, batch.run_id, write, now, events)
            elif isinstance(write, ScheduleTimer):
                yield ex(
                    "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, fire_at) "
                    "VALUES (?, ?, 'timer', 'sleep', 'scheduled', ?, ?)",
                    batch.run_id, write.op_id, now, write.fire_at,
                )
                events.append(("TimerScheduled", {
                    "op_id": write.op_id, "duration_seconds": write.duration,
                    "fire_at": to_iso(write.fire_at),
                }))
            elif isinstance(write, FireTimer):
                yield ex(
                    "UPDATE ops SET status = 'completed', closed_at = ? "
                    "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
                    now, batch.run_id, write.op_id,
                )
                events.append(("TimerFired", {"op_id": write.op_id}))
            elif isinstance(write, ScheduleChild):
                op = yield from _schedule_child(tx, fence, batch.run_id, write, now, events)
                if op is not None:
                    ops[op.op_id] = op
            elif isinstance(write, RecordEvent):
                events.append((write.type, write.data))
            elif isinstance(write, DeliverCancellation):
                yield from sqlcancel.deliver(tx, run, write, now, events)
            elif isinstance(write, RequestActivityStop):
                yield from sqlcancel.request_activity_stop(tx, run, write, now, events, ops)
            elif isinstance(write, CancelTimer):
                yield from sqlcancel.cancel_timer(run, write.op_id, now, events, ops)
            elif isinstance(write, RequestChildCancellation):
                yield from sqlcancel.request_child_cancellation(tx, run, write, now, events, ops)
            elif isinstance(write, CloseRun):
                yield from append_events(tx, batch.run_id, events, now)
                events = []
                next_run_id = yield from close_run(
                    tx, batch.run_id, write.status, now,
                    result=write.result, failure=write.failure,
                    continue_input=write.continue_input, needs_review=write.needs_review,
                )
        yield from append_events(tx, batch.run_id, events, now)
        results[index] = CommitResult(batch.run_id, True, ops, next_run_id)
    return [r for r in results if r is not None]


def _record_local_activity(
    run_id: str,
    write: RecordLocalActivity,
    now: float,
    events: list[tuple[str, dict[str, Any]]],
    ops: dict[str, OpRecord],
) -> Program[None]:
    status = "completed" if write.failure is None else (
        "cancelled" if write.interrupted else "failed")
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, result, failure, scheduled_at, "
        "closed_at, interrupted) VALUES (?, ?, 'local_activity', ?, ?, ?, ?, ?, ?, ?)",
        run_id, write.op_id, write.name, status, write.result, dumps(write.failure),
        write.started_at, now, int(write.interrupted),
    )
    events.append(("ActivityScheduled", {
        "op_id": write.op_id, "activity_type": write.name, "local": True,
    }))
    if write.failure is None:
        events.append(("ActivityCompleted", {
            "op_id": write.op_id, "activity_type": write.name, "local": True,
            "attempt": write.attempts, "result": loads(write.result),
        }))
    elif write.interrupted:
        events.append(("ActivityCancelled", {
            "op_id": write.op_id, "activity_type": write.name, "local": True,
            "attempt": write.attempts, "policy": write.failure.get("policy"),
            "stop_receipt": write.failure.get("stop_receipt"),
        }))
    else:
        kind = write.failure.get("timeout_kind")
        events.append((
            "ActivityTimedOut" if kind else "ActivityFailed",
            {"op_id": write.op_id, "activity_type": write.name, "local": True,
             "attempt": write.attempts, "failure": write.failure,
             **({"timeout_kind": kind} if kind else {})},
        ))
        yield from record_failure(run_id, write.failure, now)
    ops[write.op_id] = OpRecord(
        write.op_id, "local_activity", write.name, status, write.result, write.failure,
        write.started_at, now, interrupted=write.interrupted,
    )
    return None


def _schedule_activity(
    tx: Tx,
    fence: Row,
    run_id: str,
    write: ScheduleActivity,
    now: float,
    events: list[tuple[str, dict[str, Any]]],
) -> Program[None]:
    opts = write.options
    s2s = _plus(now, opts.get("schedule_to_start_timeout"))
    s2c = _plus(now, opts.get("schedule_to_close_timeout"))
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, task_id) "
        "VALUES (?, ?, 'activity', ?, 'scheduled', ?, ?)",
        run_id, write.op_id, write.name, now, write.task_id,
    )
    yield ex(
        "INSERT INTO activity_tasks (task_id, namespace, task_queue, activity_name, run_id, "
        "workflow_id, op_id, input, status, attempt, options, scheduled_at, available_at, "
        "schedule_to_start_deadline, schedule_to_close_deadline, deadline_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 1, ?, ?, ?, ?, ?, ?)",
        write.task_id, fence["namespace"], write.task_queue, write.name, run_id,
        fence["workflow_id"], write.op_id, write.input, dumps(opts), now, now, s2s, s2c,
        _min(s2s, s2c),
    )
    events.append(("ActivityScheduled", {
        "op_id": write.op_id, "activity_type": write.name, "task_id": write.task_id,
        "task_queue": write.task_queue, "local": False,
        "schedule_to_start_timeout": opts.get("schedule_to_start_timeout"),
        "start_to_close_timeout": opts.get("start_to_close_timeout"),
        "schedule_to_close_timeout": opts.get("schedule_to_close_timeout"),
        "heartbeat_timeout": opts.get("heartbeat_timeout"),
        "retry_policy": opts.get("retry"),
        "cancellation": opts.get("cancellation"),
        "schedule_to_start_deadline": to_iso(s2s),
        "schedule_to_close_deadline": to_iso(s2c),
    }))
    tx.wake("activities", fence["namespace"], write.task_queue)
    return None


def _schedule_child(
    tx: Tx,
    fence: Row,
    run_id: str,
    write: ScheduleChild,
    now: float,
    events: list[tuple[str, dict[str, Any]]],
) -> Program[OpRecord | None]:
    req = write.request
    existing = yield q1(
        "SELECT current_run_id FROM workflows WHERE namespace = ? AND workflow_id = ?",
        req.namespace, req.workflow_id,
    )
    if existing is not None:
        failure = {
            "failure_category": "child_start",
            "exception_class": "durable.WorkflowAlreadyStarted",
            "message": f"child workflow id {req.workflow_id!r} is already in use",
        }
        yield ex(
            "INSERT INTO ops (run_id, op_id, kind, name, status, failure, scheduled_at, "
            "closed_at, child_workflow_id) VALUES (?, ?, 'child', ?, 'failed', ?, ?, ?, ?)",
            run_id, write.op_id, req.workflow_type, dumps(failure), now, now, req.workflow_id,
        )
        events.append(("ChildWorkflowFailed", {
            "op_id": write.op_id, "child_workflow_id": req.workflow_id, "failure": failure,
        }))
        return OpRecord(write.op_id, "child", req.workflow_type, "failed", None, failure, now, now,
                        child_workflow_id=req.workflow_id)
    child_run_id = new_id()
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, child_workflow_id, "
        "child_run_id) VALUES (?, ?, 'child', ?, 'scheduled', ?, ?, ?)",
        run_id, write.op_id, req.workflow_type, now, req.workflow_id, child_run_id,
    )
    events.append(("ChildWorkflowScheduled", {
        "op_id": write.op_id, "child_workflow_id": req.workflow_id,
        "child_run_id": child_run_id, "workflow_type": req.workflow_type, **write.options,
    }))
    yield from insert_run(tx, req, child_run_id, 1, now, _plus(now, req.execution_timeout))
    return None


# ---------------------------------------------------------------- closing runs

_CLOSE_EVENT = {
    "completed": "WorkflowCompleted",
    "failed": "WorkflowFailed",
    "cancelled": "WorkflowCancelled",
    "terminated": "WorkflowTerminated",
    "timed_out": "WorkflowTimedOut",
    "continued": "WorkflowContinuedAsNew",
}


def close_run(
    tx: Tx,
    run_id: str,
    status: str,
    now: float,
    *,
    result: str | None = None,
    failure: dict[str, Any] | None = None,
    continue_input: str | None = None,
    needs_review: bool = False,
    reason: str | None = None,
) -> Program[str | None]:
    """Close a run and everything that hangs off it, in the caller's transaction.

    Revokes authority (epoch bump), cancels open activity attempts and timers,
    applies the parent close policy to open children, notifies the parent, and
    starts the next run for continue-as-new. Returns the next run's id.
    """
    row = yield q1(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?" + tx.lock, run_id)
    if row is None or row["status"] not in OPEN_STATUSES:
        return None
    run = run_from_row(row)
    if needs_review:
        yield ex(
            "UPDATE runs SET needs_review = 1, owner = NULL, epoch = epoch + 1, "
            "failure = ? WHERE run_id = ?",
            dumps(failure), run_id,
        )
        yield from append_events(tx, run_id, [("WorkflowNeedsReview", failure or {})], now)
        if failure:
            yield from record_failure(run_id, failure, now)
        return None
    closed_reason = reason or status
    cancellation = run.cancellation
    if cancellation is not None and status != "continued":
        if closed_reason == "deadline_expired":
            lifecycle = outcome = "deadline_expired"
        elif status == "terminated":
            lifecycle = outcome = "terminated"
        elif status == "cancelled":
            lifecycle = "cancelled"
            if not cancellation.get("delivered_at"):
                outcome = "not_delivered"
            elif reason is None:  # the run's own code closed it: cleanup finished
                outcome = "completed"
            else:  # cancel() cut the cleanup short
                outcome = "interrupted"
        else:
            lifecycle, outcome = status, ("failed" if status == "failed" else status)
        cancellation = dict(cancellation, lifecycle=lifecycle, cleanup_outcome=outcome,
                            closed_at=now)
    yield ex(
        "UPDATE runs SET status = ?, result = ?, failure = ?, closed_at = ?, closed_reason = ?, "
        "owner = NULL, epoch = epoch + 1, lease_expires_at = NULL, deadline_at = NULL, "
        "cancellation = ? WHERE run_id = ?",
        status, result, dumps(failure), now, closed_reason, dumps(cancellation), run_id,
    )
    events: list[tuple[str, dict[str, Any]]] = []
    # Cancel open work: activity attempts are fenced, timers cancelled.
    cancel_failure = {
        "failure_category": "cancelled", "exception_class": "durable.ActivityCancelled",
        "message": f"cancelled because the workflow run closed ({status})",
    }
    tasks = yield q(
        "SELECT task_id, op_id, activity_name, options FROM activity_tasks "
        "WHERE run_id = ? AND status IN ('pending', 'running')", run_id,
    )
    for task in tasks:
        if (loads(task["options"]) or {}).get("cancellation") == "abandon":
            continue  # an abandoned activity has its own lifetime
        yield ex(
            "UPDATE activity_tasks SET status = 'cancelled', closed_at = ?, deadline_at = NULL, "
            "stop_requested = 1, stop_requested_at = COALESCE(stop_requested_at, ?) "
            "WHERE task_id = ?",
            now, now, task["task_id"],
        )
        events.append(("ActivityCancelled", {
            "op_id": task["op_id"], "activity_type": task["activity_name"],
            "task_id": task["task_id"], "reason": f"workflow {status}", "fenced": True,
        }))
        tx.wake("activity_stop", task["task_id"])
    open_ops = yield q(
        f"SELECT {_OP_COLUMNS} FROM ops WHERE run_id = ? AND status = 'scheduled' "
        "AND kind IN ('activity', 'timer')", run_id
    )
    fenced = {t["task_id"] for t in tasks}
    for op_row in open_ops:
        op = op_from_row(op_row)
        if op.kind == "activity" and op.task_id not in fenced:
            continue  # abandoned
        if op.kind == "timer":
            events.append(("TimerCancelled", {"op_id": op.op_id, "reason": f"workflow {status}"}))
        yield ex(
            "UPDATE ops SET status = 'cancelled', failure = ?, closed_at = ? "
            "WHERE run_id = ? AND op_id = ?",
            dumps(cancel_failure), now, run_id, op.op_id,
        )
    data: dict[str, Any] = {"reason": closed_reason}
    if result is not None:
        data["result"] = loads(result)
    if failure is not None:
        data["failure"] = failure
        if "timeout_kind" in failure:
            data["timeout_kind"] = failure["timeout_kind"]
            data["deadline_at"] = failure.get("deadline_at")
    next_run_id: str | None = None
    if status == "continued":
        next_run_id = new_id()
        data["new_run_id"] = next_run_id
    events.append((_CLOSE_EVENT[status], data))
    yield from append_events(tx, run_id, events, now)
    if failure is not None and status != "continued":
        yield from record_failure(run_id, failure, now)

    # Open children: the parent close policy.
    if status != "continued":
        children = yield q(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE parent_run_id = ? "
            "AND status IN ('pending', 'running')",
            run_id,
        )
        for child_row in children:
            yield from apply_parent_close_policy(tx, run, run_from_row(child_row), child_row, now)

    if status == "continued":
        assert next_run_id is not None
        req = StartRequest(
            namespace=run.namespace, workflow_id=run.workflow_id,
            workflow_type=run.workflow_type, task_queue=run.task_queue,
            input=continue_input or "[]", id_reuse="", execution_timeout=run.execution_timeout,
            run_timeout=run.run_timeout, parent_run_id=run.parent_run_id,
            parent_workflow_id=run.parent_workflow_id, parent_op_id=run.parent_op_id,
            parent_close_policy=row["parent_close_policy"],
            cleanup_timeout=row["cleanup_timeout"],
            cancellation=None if run.cancellation is None else dict(
                run.cancellation, lifecycle="requested", delivered_at=None, boundary=None,
                cleanup_outcome=None),
        )
        yield ex(
            "UPDATE runs SET continued_run_id = ? WHERE run_id = ?", next_run_id, run_id
        )
        yield from insert_run(
            tx, req, next_run_id, run.run_number + 1, now, run.execution_deadline_at,
            new_instance=False,
        )
        if run.parent_run_id is not None:
            yield ex(
                "UPDATE ops SET child_run_id = ? WHERE run_id = ? AND op_id = ?",
                next_run_id, run.parent_run_id, run.parent_op_id,
            )
    else:
        yield ex(
            "UPDATE workflows SET status = ?, closed_reason = ?, closed_at = ? "
            "WHERE namespace = ? AND workflow_id = ? AND current_run_id = ?",
            status, closed_reason, now, run.namespace, run.workflow_id, run_id,
        )
        if run.parent_run_id is not None:
            yield from notify_parent(tx, run, status, result, failure, now)
    tx.wake("run", run_id)
    return next_run_id


def apply_parent_close_policy(
    tx: Tx, parent: RunRecord, child: RunRecord, child_row: Row, now: float
) -> Program[None]:
    policy = child_row["parent_close_policy"] or "terminate"
    yield from append_events(tx, parent.run_id, [("ParentClosePolicyApplied", {
        "child_workflow_id": child.workflow_id, "child_run_id": child.run_id, "policy": policy,
    })], now)
    reason = f"parent {parent.workflow_id} closed"
    if policy == "terminate":
        yield from close_run(
            tx, child.run_id, "terminated", now, reason=reason,
            failure={"failure_category": "terminated", "message": reason,
                     "exception_class": "durable.WorkflowTerminated"},
        )
    elif policy == "request_cancellation":
        child_full = yield q1(
            f"SELECT {_RUN_COLUMNS}, lease_expires_at, claim_capabilities "
            "FROM runs WHERE run_id = ?", child.run_id,
        )
        yield from sqlcancel.request_child(tx, parent, child_full, reason,
                                           child_full["cleanup_timeout"],
                                           "parent_close_policy", now)
    elif policy == "request_cancel":
        yield from close_run(
            tx, child.run_id, "cancelled", now, reason=reason,
            failure={"failure_category": "cancelled", "message": reason,
                     "exception_class": "durable.WorkflowCancelled"},
        )
    return None


def notify_parent(
    tx: Tx,
    child: RunRecord,
    status: str,
    result: str | None,
    failure: dict[str, Any] | None,
    now: float,
) -> Program[None]:
    """Resolve the parent's child op with the child's terminal outcome."""
    parent = yield q1(
        "SELECT status FROM runs WHERE run_id = ?" + tx.lock, child.parent_run_id
    )
    if parent is None or parent["status"] not in OPEN_STATUSES:
        return None
    if status == "completed":
        op_status, op_failure, etype = "completed", None, "ChildWorkflowCompleted"
    else:
        op_status, etype = "failed", "ChildWorkflowFailed"
        op_failure = {
            "failure_category": "child_workflow",
            "exception_class": "durable.ChildWorkflowFailed",
            "message": f"child workflow {child.workflow_id} {status}",
            "child_status": status,
            "cause": failure or {"failure_category": status},
        }
    count = yield ex(
        "UPDATE ops SET status = ?, result = ?, failure = ?, closed_at = ? "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        op_status, result, dumps(op_failure), now, child.parent_run_id, child.parent_op_id,
    )
    if not count:
        return None
    assert child.parent_run_id is not None and child.parent_op_id is not None
    data: dict[str, Any] = {
        "op_id": child.parent_op_id, "child_workflow_id": child.workflow_id,
        "child_run_id": child.run_id, "status": status,
    }
    if op_failure is not None:
        data["failure"] = op_failure
    yield from append_events(tx, child.parent_run_id, [(etype, data)], now)
    yield ex(
        "UPDATE runs SET ready_at = ? WHERE run_id = ? AND ready_at IS NULL",
        now, child.parent_run_id,
    )
    op = OpRecord(child.parent_op_id, "child", child.workflow_type, op_status, result, op_failure,
                  None, now, child_workflow_id=child.workflow_id, child_run_id=child.run_id)
    tx.wake("run", child.parent_run_id, op=op)
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
    run = yield from get_run(namespace, workflow_id, run_id)
    if run is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} (run {run_id}) in {namespace!r}")
    if run.is_open:
        category = {"terminated": "terminated", "cancelled": "cancelled"}[status]
        failure = {
            "failure_category": category,
            "exception_class": f"durable.Workflow{category.capitalize()}",
            "message": reason,
        }
        yield from close_run(tx, run.run_id, status, now, failure=failure, reason=reason)
        run = yield from get_run(namespace, workflow_id, run.run_id)
        assert run is not None
    return run


def clear_review(tx: Tx, namespace: str, workflow_id: str, now: float) -> Program[bool]:
    """Let a run marked for review be claimed and replayed again (after a fix)."""
    run = yield from get_run(namespace, workflow_id, None)
    if run is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} in {namespace!r}")
    if not run.needs_review:
        return False
    yield ex(
        "UPDATE runs SET needs_review = 0, ready_at = ?, owner = NULL WHERE run_id = ?",
        now, run.run_id,
    )
    yield from append_events(tx, run.run_id, [("WorkflowReviewCleared", {})], now)
    tx.wake("runs", run.namespace, run.task_queue)
    return True


# ---------------------------------------------------------------- activities


def _task_failure(kind: str, deadline: float | None, name: str, attempt: int) -> dict[str, Any]:
    return {
        "failure_category": "timeout",
        "propagation_kind": "timeout",
        "exception_class": "durable.ActivityTimedOut",
        "timeout_kind": kind,
        "deadline_at": to_iso(deadline),
        "attempt": attempt,
        "message": f"activity {name} timed out ({kind}) on attempt {attempt}",
    }


def claim_activities(
    tx: Tx,
    namespace: str,
    task_queue: str,
    worker_id: str,
    names: tuple[str, ...],
    limit: int,
    lease_seconds: float,
    now: float,
) -> Program[list[ActivityTask]]:
    if limit <= 0 or not names:
        return []
    rows = yield q(
        "SELECT task_id, run_id, workflow_id, op_id, activity_name, input, attempt, options, "
        "scheduled_at, schedule_to_close_deadline, heartbeat_details FROM activity_tasks "
        "WHERE namespace = ? AND task_queue = ? AND status = 'pending' AND available_at <= ? "
        f"AND (deadline_at IS NULL OR deadline_at > ?) AND activity_name IN "
        f"({placeholders(len(names))}) ORDER BY available_at LIMIT ?" + tx.skip_locked,
        namespace, task_queue, now, now, *names, limit,
    )
    tasks: list[ActivityTask] = []
    updates: list[tuple[Any, ...]] = []
    for row in rows:
        opts = loads(row["options"])
        s2c = row["schedule_to_close_deadline"]
        stc = _plus(now, opts.get("start_to_close_timeout"))
        hb = _plus(now, opts.get("heartbeat_timeout"))
        lease = now + lease_seconds
        updates.append((worker_id, now, stc, hb, lease, _min(stc, hb, s2c, lease), row["task_id"]))
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
        for task in sorted(tasks, key=lambda t: t.run_id):  # lock order: see renew_leases
            yield from append_events(tx, task.run_id, [("ActivityStarted", {
                "op_id": task.op_id, "activity_type": task.name, "task_id": task.task_id,
                "attempt": task.attempt, "worker_id": worker_id,
                "start_to_close_deadline": to_iso(task.start_to_close_deadline),
                "heartbeat_deadline": to_iso(task.heartbeat_deadline),
            })], now)
    return tasks


_TASK_COLUMNS = (
    "task_id, namespace, task_queue, activity_name, run_id, workflow_id, op_id, status, attempt, "
    "options, available_at, schedule_to_start_deadline, schedule_to_close_deadline, "
    "start_to_close_deadline, heartbeat_deadline, owner, heartbeat_details, lease_expires_at, "
    "stop_requested, stop_receipt"
)


def _resolve_op(
    tx: Tx,
    task: Row,
    status: str,
    result: str | None,
    failure: dict[str, Any] | None,
    event: tuple[str, dict[str, Any]],
    now: float,
) -> Program[None]:
    """Record an activity's terminal outcome on its op and wake the run."""
    yield ex(
        "UPDATE ops SET status = ?, result = ?, failure = ?, closed_at = ? "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        status, result, dumps(failure), now, task["run_id"], task["op_id"],
    )
    yield from append_events(tx, task["run_id"], [event], now)
    if failure is not None:
        yield from record_failure(task["run_id"], failure, now)
    yield ex(
        "UPDATE runs SET ready_at = ? WHERE run_id = ? AND ready_at IS NULL", now, task["run_id"]
    )
    op = OpRecord(task["op_id"], "activity", task["activity_name"], status, result, failure,
                  None, now, task_id=task["task_id"])
    tx.wake("run", task["run_id"], op=op)
    return None


def _retry_or_fail(
    tx: Tx,
    task: Row,
    failure: dict[str, Any],
    retryable: bool,
    now: float,
    terminal_event: str,
) -> Program[str]:
    """Schedule the next attempt if the frozen policy allows it, else fail terminally."""
    opts = loads(task["options"])
    policy = RetryPolicy.from_dict(opts["retry"])
    attempt = int(task["attempt"])
    s2c = task["schedule_to_close_deadline"]
    if (
        retryable
        and attempt < policy.max_attempts
        and failure.get("exception_class") not in policy.non_retryable_error_types
        and failure.get("cause_type") not in policy.non_retryable_error_types
    ):
        available = now + policy.delay_before(attempt + 1)
        if s2c is None or available < s2c:
            s2s = _plus(available, opts.get("schedule_to_start_timeout"))
            yield ex(
                "UPDATE activity_tasks SET status = 'pending', attempt = attempt + 1, "
                "owner = NULL, available_at = ?, schedule_to_start_deadline = ?, "
                "start_to_close_deadline = NULL, heartbeat_deadline = NULL, "
                "lease_expires_at = NULL, deadline_at = ?, last_failure = ?, claimed_at = NULL "
                "WHERE task_id = ?",
                available, s2s, _min(s2s, s2c), dumps(failure), task["task_id"],
            )
            yield from append_events(tx, task["run_id"], [("ActivityRetryScheduled", {
                "op_id": task["op_id"], "activity_type": task["activity_name"],
                "task_id": task["task_id"], "failed_attempt": attempt,
                "next_attempt": attempt + 1, "next_attempt_at": to_iso(available),
                "schedule_to_start_deadline": to_iso(s2s), "failure": failure,
                **({"timeout_kind": failure["timeout_kind"]} if "timeout_kind" in failure else {}),
            })], now)
            tx.wake("activities", task["namespace"], task["task_queue"])
            return "retry_scheduled"
    final_status = "timed_out" if terminal_event == "ActivityTimedOut" else "failed"
    yield ex(
        "UPDATE activity_tasks SET status = ?, closed_at = ?, deadline_at = NULL, "
        "last_failure = ? WHERE task_id = ?",
        final_status, now, dumps(failure), task["task_id"],
    )
    data = {
        "op_id": task["op_id"], "activity_type": task["activity_name"],
        "task_id": task["task_id"], "attempt": attempt, "failure": failure,
    }
    if "timeout_kind" in failure:
        data["timeout_kind"] = failure["timeout_kind"]
    yield from _resolve_op(tx, task, "failed", None, failure, (terminal_event, data), now)
    return "recorded"


def _time_out_task(tx: Tx, task: Row, now: float) -> Program[str | None]:
    """Apply whichever of the task's timeouts has expired; None when none has."""
    status = task["status"]
    s2c = task["schedule_to_close_deadline"]
    name, attempt = task["activity_name"], int(task["attempt"])
    if s2c is not None and now >= s2c:
        failure = _task_failure("schedule_to_close", s2c, name, attempt)
        yield from _retry_or_fail(tx, task, failure, False, now, "ActivityTimedOut")
        return "schedule_to_close"
    if status == "pending":
        s2s = task["schedule_to_start_deadline"]
        if s2s is not None and now >= s2s:
            failure = _task_failure("schedule_to_start", s2s, name, attempt)
            yield from _retry_or_fail(tx, task, failure, True, now, "ActivityTimedOut")
            return "schedule_to_start"
        return None
    stc, hb = task["start_to_close_deadline"], task["heartbeat_deadline"]
    lease = task["lease_expires_at"]
    candidates = [
        (d, k)
        for d, k in ((stc, "start_to_close"), (hb, "heartbeat"), (lease, "worker_lost"))
        if d is not None
    ]
    expired = sorted((d, k) for d, k in candidates if now >= d)
    if not expired:
        return None
    deadline, kind = expired[0]
    if kind == "worker_lost":
        failure = {
            "failure_category": "worker_lost", "exception_class": "durable.WorkerLost",
            "attempt": attempt, "deadline_at": to_iso(deadline),
            "message": f"the worker running attempt {attempt} of {name} stopped renewing its lease",
        }
        yield from _retry_or_fail(tx, task, failure, True, now, "ActivityFailed")
        return kind
    failure = _task_failure(kind, deadline, name, attempt)
    tx.wake("activity_stop", task["task_id"])
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


def complete_activity(
    tx: Tx,
    task_id: str,
    attempt: int,
    worker_id: str,
    result: str | None,
    failure: dict[str, Any] | None,
    now: float,
) -> Program[ActivityOutcome]:
    task = yield q1(f"SELECT {_TASK_COLUMNS} FROM activity_tasks WHERE task_id = ?" + tx.lock,
                    task_id)
    if task is None:
        return (yield from _refuse(tx, None, task_id, attempt, worker_id, "unknown task", now))
    if (task["stop_requested"] and task["stop_receipt"] is None and task["owner"] == worker_id
            and int(task["attempt"]) == attempt and task["status"] in ("running", "cancelled")):
        receipt = yield from sqlcancel.stop_receipt(tx, task, worker_id, result, failure, now)
        if task["status"] == "cancelled" or failure is not None:
            status = "completed" if failure is None and task["status"] == "running" else (
                "cancelled")
            if task["status"] == "running":
                yield ex(
                    "UPDATE activity_tasks SET status = ?, closed_at = ?, deadline_at = NULL "
                    "WHERE task_id = ?", status, now, task_id,
                )
                stop_failure = {
                    "failure_category": "cancelled", "exception_class": "durable.ActivityCancelled",
                    "message": f"activity {task['activity_name']} stopped on request",
                    "stop_receipt": receipt,
                }
                yield from _resolve_op(tx, task, "cancelled", None, stop_failure, (
                    "ActivityCancelled", {"op_id": task["op_id"], "task_id": task_id,
                                          "activity_type": task["activity_name"],
                                          "attempt": attempt, "stop_receipt": receipt}), now)
            else:
                late: list[tuple[str, dict[str, Any]]] = [("ActivityStopReceipt", {
                    "op_id": task["op_id"], "task_id": task_id, "attempt": attempt,
                    "stop_receipt": receipt,
                })]
                if failure is None:
                    late.append(("ActivityResultRefused", {
                        "op_id": task["op_id"], "task_id": task_id, "attempt": attempt,
                        "worker_id": worker_id,
                        "reason": "the attempt was fenced before its result arrived",
                    }))
                yield from append_events(tx, task["run_id"], late, now)
            return ActivityOutcome("recorded" if task["status"] == "running" else "refused",
                                   "stop receipt recorded")
    if task["status"] != "running" or int(task["attempt"]) != attempt or task["owner"] != worker_id:
        reason = (
            f"attempt {attempt} is no longer current (task is {task['status']}, "
            f"attempt {task['attempt']})"
        )
        return (yield from _refuse(tx, task, task_id, attempt, worker_id, reason, now))
    kind = yield from _time_out_task(tx, task, now)
    if kind is not None:
        reason = f"the attempt's {kind} deadline passed before the result arrived"
        return (yield from _refuse(tx, task, task_id, attempt, worker_id, reason, now))
    if failure is None:
        yield ex(
            "UPDATE activity_tasks SET status = 'completed', closed_at = ?, deadline_at = NULL "
            "WHERE task_id = ?",
            now, task_id,
        )
        yield from _resolve_op(tx, task, "completed", result, None, ("ActivityCompleted", {
            "op_id": task["op_id"], "activity_type": task["activity_name"], "task_id": task_id,
            "attempt": attempt, "result": loads(result),
        }), now)
        return ActivityOutcome("recorded")
    outcome = yield from _retry_or_fail(
        tx, task, failure, not failure.get("non_retryable", False), now, "ActivityFailed"
    )
    return ActivityOutcome(outcome)


def heartbeat_activity(
    tx: Tx, task_id: str, attempt: int, worker_id: str, details: str | None, now: float
) -> Program[HeartbeatAck]:
    task = yield q1(f"SELECT {_TASK_COLUMNS} FROM activity_tasks "
                    "WHERE task_id = ?" + tx.lock, task_id)
    if task is None or task["status"] != "running" or int(task["attempt"]) != attempt or (
        task["owner"] != worker_id
    ):
        return HeartbeatAck(False, True, "attempt is no longer current")
    kind = yield from _time_out_task(tx, task, now)
    if kind is not None:
        return HeartbeatAck(False, True, f"{kind} timeout")
    opts = loads(task["options"])
    hb = _plus(now, opts.get("heartbeat_timeout"))
    yield ex(
        "UPDATE activity_tasks SET heartbeat_details = COALESCE(?, heartbeat_details), "
        "heartbeat_deadline = ?, deadline_at = ? WHERE task_id = ?",
        details, hb,
        _min(hb, task["start_to_close_deadline"], task["schedule_to_close_deadline"],
             task["lease_expires_at"]),
        task_id,
    )
    return HeartbeatAck(True, bool(task["stop_requested"]))


# ---------------------------------------------------------------- the watchdog


def next_deadline(namespace: str, now: float) -> Program[float | None]:
    row = yield q1(
        "SELECT "
        "(SELECT MIN(deadline_at) FROM runs WHERE namespace = ? "
        " AND status IN ('pending', 'running')) AS run_deadline, "
        "(SELECT MIN(deadline_at) FROM activity_tasks WHERE namespace = ? "
        " AND status IN ('pending', 'running')) AS task_deadline, "
        "(SELECT MIN(available_at) FROM activity_tasks WHERE namespace = ? "
        " AND status = 'pending' AND available_at > ?) AS task_available, "
        "(SELECT MIN(lease_expires_at) FROM runs WHERE namespace = ? "
        " AND status IN ('pending', 'running') AND owner IS NOT NULL) AS lease_expiry",
        namespace, namespace, namespace, now, namespace,
    )
    if row is None:
        return None
    return _min(row["run_deadline"], row["task_deadline"], row["task_available"],
                row["lease_expiry"])


def enforce_expired(
    tx: Tx, namespace: str, now: float, run_id: str | None = None, limit: int = 500
) -> Program[dict[str, int]]:
    counts: dict[str, int] = {}
    run_filter = " AND run_id = ?" if run_id is not None else ""
    extra: tuple[Any, ...] = (run_id,) if run_id is not None else ()
    runs = yield q(
        f"SELECT {_RUN_COLUMNS} FROM runs WHERE namespace = ? AND status IN "
        f"('pending', 'running') AND deadline_at <= ?{run_filter} ORDER BY deadline_at LIMIT ?"
        + tx.skip_locked,
        namespace, now, *extra, limit,
    )
    for row in runs:
        run = run_from_row(row)
        kind, deadline = _expired_run_deadline(run, now)
        if kind is None:
            continue
        if kind == "cleanup_deadline":
            failure = {
                "failure_category": "cancelled",
                "exception_class": "durable.WorkflowCancelled",
                "lifecycle": "deadline_expired",
                "deadline_at": to_iso(deadline),
                "message": f"workflow {run.workflow_id} did not finish its cleanup before the "
                           "cancellation deadline; its authority is revoked",
            }
            yield from close_run(tx, run.run_id, "cancelled", now, failure=failure,
                                 reason="deadline_expired")
            counts[kind] = counts.get(kind, 0) + 1
            continue
        failure = {
            "failure_category": "timeout",
            "propagation_kind": "timeout",
            "exception_class": "durable.WorkflowTimedOut",
            "timeout_kind": kind,
            "deadline_at": to_iso(deadline),
            "message": f"workflow {run.workflow_id} exceeded its {kind.replace('_', ' ')}",
        }
        yield from close_run(tx, run.run_id, "timed_out", now, failure=failure, reason=kind)
        counts[kind] = counts.get(kind, 0) + 1
    if run_id is not None:
        return counts
    tasks = yield q(
        f"SELECT {_TASK_COLUMNS} FROM activity_tasks WHERE namespace = ? AND status IN "
        "('pending', 'running') AND deadline_at <= ? ORDER BY deadline_at LIMIT ?"
        + tx.skip_locked,
        namespace, now, limit,
    )
    for task in sorted(tasks, key=lambda t: str(t["run_id"])):  # lock order: see renew_leases
        kind = yield from _time_out_task(tx, task, now)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _expired_run_deadline(run: RunRecord, now: float) -> tuple[str | None, float | None]:
    candidates = [
        (d, k)
        for d, k in (
            (run.execution_deadline_at, "execution_timeout"),
            (run.run_deadline_at, "run_timeout"),
            (run.cleanup_deadline_at, "cleanup_deadline"),
        )
        if d is not None and now >= d
    ]
    if not candidates:
        return None, None
    deadline, kind = min(candidates)
    return kind, deadline


# ---------------------------------------------------------------- inspection


def describe(
    namespace: str, workflow_id: str, run_id: str | None
) -> Program[dict[str, Any] | None]:
    wf = yield q1(
        "SELECT workflow_id, workflow_type, namespace, current_run_id, status, closed_reason, "
        "execution_timeout, execution_deadline_at, run_count, memo, created_at, closed_at "
        "FROM workflows WHERE namespace = ? AND workflow_id = ?",
        namespace, workflow_id,
    )
    if wf is None:
        return None
    run = yield from get_run(namespace, workflow_id, run_id or wf["current_run_id"])
    if run is None:
        return None
    failure_rows = yield q(
        "SELECT data FROM failures WHERE run_id = ? ORDER BY id", run.run_id
    )
    pending = yield q(
        "SELECT o.op_id, o.kind, o.name, o.scheduled_at, o.fire_at, o.child_workflow_id, "
        "t.status AS task_status, t.attempt, t.heartbeat_details, t.last_failure "
        "FROM ops o LEFT JOIN activity_tasks t ON t.task_id = o.task_id "
        "WHERE o.run_id = ? AND o.status = 'scheduled' ORDER BY o.scheduled_at",
        run.run_id,
    )
    return {
        "workflow_id": wf["workflow_id"],
        "workflow_type": wf["workflow_type"],
        "namespace": wf["namespace"],
        "status": run.status if run_id else wf["status"],
        "closed_reason": run.closed_reason if run_id else wf["closed_reason"],
        "execution_timeout_seconds": wf["execution_timeout"],
        "run_count": int(wf["run_count"]),
        "memo": loads(wf["memo"]),
        "run": {
            "run_id": run.run_id,
            "run_number": run.run_number,
            "status": run.status,
            "run_timeout_seconds": run.run_timeout,
            "execution_deadline_at": to_iso(run.execution_deadline_at),
            "run_deadline_at": to_iso(run.run_deadline_at),
            "started_at": to_iso(run.started_at),
            "closed_at": to_iso(run.closed_at),
            "task_queue": run.task_queue,
            "owner": run.owner,
            "epoch": run.epoch,
            "needs_review": run.needs_review,
            "parent_workflow_id": run.parent_workflow_id,
            "parent_run_id": run.parent_run_id,
            "continued_run_id": run.continued_run_id,
        },
        "pending_operations": [
            {
                "op_id": p["op_id"], "kind": p["kind"], "name": p["name"],
                "scheduled_at": to_iso(p["scheduled_at"]), "fire_at": to_iso(p["fire_at"]),
                "child_workflow_id": p["child_workflow_id"], "task_status": p["task_status"],
                "attempt": p["attempt"], "heartbeat_details": loads(p["heartbeat_details"]),
                "last_failure": loads(p["last_failure"]),
            }
            for p in pending
        ],
        "failures": [json.loads(r["data"]) for r in failure_rows],
        "cancellation": sqlcancel.describe_cancellation(run.cancellation),
    }


def history(
    run_id: str, after_sequence: int = 0, limit: int | None = None
) -> Program[list[HistoryEvent]]:
    sql = ("SELECT seq, type, recorded_at, data FROM events WHERE run_id = ? AND seq > ? "
           "ORDER BY seq")
    params: list[Any] = [run_id, after_sequence]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    rows = yield q(sql, *params)
    return [
        HistoryEvent(int(r["seq"]), r["type"], to_datetime(r["recorded_at"]), json.loads(r["data"]))
        for r in rows
    ]


def observe(
    after_event_id: int | None, limit: int, recheck: tuple[int, ...] = ()
) -> Program[StorageSnapshot]:
    """Run counts by status, open cancellations by lifecycle, and an event tail.

    Counting runs walks the (namespace, status, created_at) index; open
    cancellations are read from open runs only; the tail is a primary-key
    range (plus the ids the caller re-checks: on PostgreSQL a transaction may
    commit a lower id after a higher one was read).
    """
    runs: dict[tuple[str, str], int] = {}
    for r in (yield q("SELECT namespace, status, COUNT(*) AS n FROM runs "
                      "GROUP BY namespace, status")):
        runs[(str(r["namespace"]), str(r["status"]))] = int(r["n"])
    cancellations: dict[tuple[str, str], int] = {}
    for r in (yield q("SELECT namespace, cancellation FROM runs WHERE status IN "
                      "('pending', 'running') AND cancellation IS NOT NULL")):
        key = (str(r["namespace"]), str(loads(r["cancellation"]).get("lifecycle")))
        cancellations[key] = cancellations.get(key, 0) + 1
    if after_event_id is None:
        row = yield q1("SELECT MAX(id) AS last FROM events")
        last = int(row["last"] or 0) if row is not None else 0
        return StorageSnapshot(runs, cancellations, [], last)
    sql = ("SELECT e.id, e.run_id, e.type, e.recorded_at, e.data, r.namespace FROM events e "
           "JOIN runs r ON r.run_id = e.run_id WHERE e.id > ?")
    params: list[Any] = [after_event_id]
    if recheck:
        sql += f" OR e.id IN ({placeholders(len(recheck))})"
        params.extend(recheck)
    rows = yield q(sql + " ORDER BY e.id LIMIT ?", *params, limit)
    events = [
        RecordedEvent(int(r["id"]), str(r["namespace"]), str(r["run_id"]), str(r["type"]),
                      float(r["recorded_at"]), json.loads(r["data"]))
        for r in rows
    ]
    last = max([after_event_id, *(e.event_id for e in events)])
    return StorageSnapshot(runs, cancellations, events, last)


def list_runs(
    namespace: str, status: str | None, workflow_type: str | None, limit: int,
    before: tuple[float, str] | None = None,
) -> Program[tuple[list[dict[str, Any]], tuple[float, str] | None]]:
    """Run summaries, newest first, and the key of the next page (None on the last).

    `before` is the key a previous page returned: (created_at, run_id) of its
    last row (keyset pagination: stable while new runs are added).
    """
    sql = (
        "SELECT workflow_id, run_id, workflow_type, status, run_number, created_at, started_at, "
        "closed_at, closed_reason, task_queue FROM runs WHERE namespace = ?"
    )
    params: list[Any] = [namespace]
    if status is not None:
        sql += " AND status = ?"
        params.append(status)
    if workflow_type is not None:
        sql += " AND workflow_type = ?"
        params.append(workflow_type)
    if before is not None:
        sql += " AND (created_at < ? OR (created_at = ? AND run_id < ?))"
        params.extend([before[0], before[0], before[1]])
    sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
    params.append(limit + 1)
    rows = yield q(sql, *params)
    more = len(rows) > limit
    rows = rows[:limit]
    next_key = (float(rows[-1]["created_at"]), str(rows[-1]["run_id"])) if more else None
    return [
        {
            "workflow_id": r["workflow_id"], "run_id": r["run_id"],
            "workflow_type": r["workflow_type"], "status": r["status"],
            "run_number": int(r["run_number"]), "task_queue": r["task_queue"],
            "created_at": to_datetime(r["created_at"]), "started_at": to_datetime(r["started_at"]),
            "closed_at": to_datetime(r["closed_at"]), "closed_reason": r["closed_reason"],
        }
        for r in rows
    ], next_key


# ---------------------------------------------------------------- workers


def register_worker(reg: WorkerRegistration, ttl: float, now: float) -> Program[None]:
    yield ex("DELETE FROM workers WHERE worker_id = ?", reg.worker_id)
    yield ex(
        "INSERT INTO workers (worker_id, namespace, task_queue, workflow_types, activity_names, "
        "capabilities, heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        reg.worker_id, reg.namespace, reg.task_queue, json.dumps(list(reg.workflow_types)),
        json.dumps(list(reg.activity_names)), json.dumps(list(reg.capabilities)), now, now + ttl,
    )
    yield ex("DELETE FROM workers WHERE expires_at < ?", now - 3600)
    return None


def deregister_worker(worker_id: str) -> Program[None]:
    yield ex("DELETE FROM workers WHERE worker_id = ?", worker_id)
    return None


def registered_names(namespace: str, now: float) -> Program[tuple[set[str], set[str]]]:
    rows = yield q(
        "SELECT workflow_types, activity_names FROM workers WHERE namespace = ? "
        "AND expires_at >= ?",
        namespace, now,
    )
    types: set[str] = set()
    names: set[str] = set()
    for r in rows:
        types.update(json.loads(r["workflow_types"]))
        names.update(json.loads(r["activity_names"]))
    return types, names


class SQLDriverBase(abc.ABC):
    """Implements the Driver Protocol by running the programs above.

    Subclasses provide `_run(program_factory, write)`; everything else is here,
    so SQL drivers differ only in how they talk to their database.
    """

    dialect = "sqlite"

    def __init__(self) -> None:
        self.hub = WakeHub()

    @abc.abstractmethod
    async def _run(self, build: Any, *, write: bool = True) -> Any:
        """Run the transaction program `build(tx)` and publish its wake-ups."""

    def _tx(self) -> Tx:
        return Tx(self.dialect)

    async def start_workflow(self, request: StartRequest, now: float) -> StartResult:
        result: StartResult = await self._run(lambda tx: start_workflow(tx, request, now))
        return result

    async def get_run(
        self, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunRecord | None:
        result: RunRecord | None = await self._run(
            lambda tx: get_run(namespace, workflow_id, run_id), write=False
        )
        return result

    async def claim_runs(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        workflow_types: tuple[str, ...],
        limit: int,
        lease_seconds: float,
        now: float,
        capabilities: tuple[str, ...] = (),
    ) -> list[ClaimedRun]:
        result: list[ClaimedRun] = await self._run(
            lambda tx: claim_runs(
                tx, namespace, task_queue, worker_id, workflow_types, limit, lease_seconds, now,
                capabilities,
            )
        )
        return result

    async def renew_leases(
        self, worker_id: str, run_ids: list[str], lease_seconds: float, now: float
    ) -> set[str]:
        result: set[str] = await self._run(
            lambda tx: renew_leases(tx, worker_id, run_ids, lease_seconds, now)
        )
        return result

    async def release_runs(
        self, worker_id: str, run_ids: list[str], now: float, attempts: bool = True
    ) -> None:
        await self._run(lambda tx: release_runs(tx, worker_id, run_ids, now, attempts))

    async def commit(self, batches: list[RunWrites], now: float) -> list[CommitResult]:
        result: list[CommitResult] = await self._run(lambda tx: commit(tx, batches, now))
        return result

    async def resync(
        self, run_ids: list[str], waiting: dict[str, list[str]]
    ) -> tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]]:
        result: tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]] = await self._run(
            lambda tx: resync(run_ids, waiting), write=False
        )
        return result

    async def load_ops(self, run_id: str, op_ids: list[str]) -> dict[str, OpRecord]:
        result: dict[str, OpRecord] = await self._run(
            lambda tx: load_ops(run_id, op_ids), write=False
        )
        return result

    async def claim_activities(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        names: tuple[str, ...],
        limit: int,
        lease_seconds: float,
        now: float,
    ) -> list[ActivityTask]:
        result: list[ActivityTask] = await self._run(
            lambda tx: claim_activities(
                tx, namespace, task_queue, worker_id, names, limit, lease_seconds, now
            )
        )
        return result

    async def complete_activity(
        self,
        task_id: str,
        attempt: int,
        worker_id: str,
        result: str | None,
        failure: dict[str, Any] | None,
        now: float,
    ) -> ActivityOutcome:
        outcome: ActivityOutcome = await self._run(
            lambda tx: complete_activity(tx, task_id, attempt, worker_id, result, failure, now)
        )
        return outcome

    async def heartbeat_activity(
        self, task_id: str, attempt: int, worker_id: str, details: str | None, now: float
    ) -> HeartbeatAck:
        ack: HeartbeatAck = await self._run(
            lambda tx: heartbeat_activity(tx, task_id, attempt, worker_id, details, now)
        )
        return ack

    async def next_deadline(self, namespace: str, now: float) -> float | None:
        result: float | None = await self._run(
            lambda tx: next_deadline(namespace, now), write=False
        )
        return result

    async def enforce_expired(
        self, namespace: str, now: float, run_id: str | None = None
    ) -> dict[str, int]:
        result: dict[str, int] = await self._run(
            lambda tx: enforce_expired(tx, namespace, now, run_id)
        )
        return result

    async def close_run_externally(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        status: str,
        reason: str,
        now: float,
    ) -> RunRecord:
        result: RunRecord = await self._run(
            lambda tx: close_run_externally(tx, namespace, workflow_id, run_id, status, reason,
                                            now)
        )
        return result

    async def clear_review(self, namespace: str, workflow_id: str, now: float) -> bool:
        result: bool = await self._run(lambda tx: clear_review(tx, namespace, workflow_id, now))
        return result

    async def describe(
        self, namespace: str, workflow_id: str, run_id: str | None
    ) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._run(
            lambda tx: describe(namespace, workflow_id, run_id), write=False
        )
        return result

    async def history(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> list[HistoryEvent]:
        result: list[HistoryEvent] = await self._run(
            lambda tx: history(run_id, after_sequence, limit), write=False)
        return result

    async def list_runs(
        self, namespace: str, status: str | None, workflow_type: str | None, limit: int,
        before: tuple[float, str] | None = None,
    ) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
        result: tuple[list[dict[str, Any]], tuple[float, str] | None] = await self._run(
            lambda tx: list_runs(namespace, status, workflow_type, limit, before), write=False
        )
        return result

    async def observe(
        self, after_event_id: int | None, limit: int, recheck: tuple[int, ...] = ()
    ) -> StorageSnapshot:
        result: StorageSnapshot = await self._run(
            lambda tx: observe(after_event_id, limit, recheck), write=False
        )
        return result

    async def register_worker(
        self, registration: WorkerRegistration, ttl: float, now: float
    ) -> None:
        await self._run(lambda tx: register_worker(registration, ttl, now))

    async def deregister_worker(self, worker_id: str) -> None:
        await self._run(lambda tx: deregister_worker(worker_id))

    async def request_cancellation(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        reason: str,
        cleanup_timeout: float,
        requester: dict[str, Any] | None,
        source: str,
        now: float,
    ) -> tuple[bool, dict[str, Any]]:
        result: tuple[bool, dict[str, Any]] = await self._run(
            lambda tx: sqlcancel.request_cancellation(
                tx, namespace, workflow_id, run_id, reason, cleanup_timeout, requester, source,
                now,
            )
        )
        return result

    async def cancellation_cascade(
        self, namespace: str, workflow_id: str, run_id: str | None, now: float
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._run(
            lambda tx: sqlcancel.cascade(namespace, workflow_id, run_id, now), write=False
        )
        return result

    async def stop_requests(self, worker_id: str) -> list[str]:
        result: list[str] = await self._run(
            lambda tx: sqlcancel.stop_requests(worker_id), write=False
        )
        return result

    async def registered_names(self, namespace: str, now: float) -> tuple[set[str], set[str]]:
        result: tuple[set[str], set[str]] = await self._run(
            lambda tx: registered_names(namespace, now), write=False
        )
        return result


from . import sqlcancel  # noqa: E402  (cancellation programs build on the above)
