"""The tables durable keeps, for every dialect.

Times are UTC epoch seconds (REAL / DOUBLE PRECISION); JSON is stored as text
so an operator can read it with any SQL client. Type names come from the
driver's `Dialect`; the statements are idempotent (IF NOT EXISTS), and
`durable.store.migrations` records and checks the version.
"""

from __future__ import annotations

from ..driver import Dialect

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
    needs_review {int} NOT NULL DEFAULT 0,
    inbox_seq {int} NOT NULL DEFAULT 0,
    request_seq {int} NOT NULL DEFAULT 0,
    schedule_id TEXT,
    scheduled_at {real},
    priority {int} NOT NULL DEFAULT 5,
    concurrency_key TEXT,
    started_build TEXT,
    last_build TEXT,
    blocked_build TEXT,
    blocked_divergence TEXT
);
CREATE INDEX IF NOT EXISTS runs_deadline ON runs (namespace, deadline_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner) WHERE owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_workflow ON runs (namespace, workflow_id, run_number);
CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_status ON runs (namespace, status, created_at);
CREATE INDEX IF NOT EXISTS runs_closed ON runs (namespace, closed_at);
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
    closed_at {real},
    priority {int} NOT NULL DEFAULT 5
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
CREATE TABLE IF NOT EXISTS inbox (
    run_id TEXT NOT NULL,
    seq {int} NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    update_id TEXT,
    sender TEXT,
    received_at {real} NOT NULL,
    status TEXT NOT NULL,
    delivery {int},
    frontier TEXT,
    delivered_at {real},
    result TEXT,
    failure TEXT,
    completed_at {real},
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS inbox_update ON inbox (run_id, update_id)
    WHERE update_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    update_id TEXT,
    status TEXT NOT NULL,
    answer TEXT,
    taken_by TEXT,
    created_at {real} NOT NULL,
    answered_at {real}
);
CREATE INDEX IF NOT EXISTS requests_run ON requests (run_id, status);
CREATE INDEX IF NOT EXISTS requests_pending ON requests (namespace, task_queue, status, created_at);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_types TEXT NOT NULL,
    activity_names TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    heartbeat_at {real} NOT NULL,
    expires_at {real} NOT NULL,
    identity TEXT,
    host TEXT,
    pid {int},
    build_id TEXT,
    definitions TEXT,
    started_at {real},
    stopped_at {real}
);
CREATE TABLE IF NOT EXISTS task_queues (
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    limits TEXT NOT NULL,
    runs_limited {int} NOT NULL DEFAULT 0,
    activities_limited {int} NOT NULL DEFAULT 0,
    run_tokens {real},
    run_refilled_at {real},
    activity_tokens {real},
    activity_refilled_at {real},
    updated_at {real} NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS schedules (
    namespace TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    input TEXT NOT NULL,
    start_options TEXT NOT NULL,
    spec TEXT NOT NULL,
    overlap TEXT NOT NULL,
    jitter {real} NOT NULL,
    catchup_window {real} NOT NULL,
    paused {int} NOT NULL,
    note TEXT,
    max_runs {int},
    remaining_actions {int},
    next_fire_at {real},
    due_at {real},
    last_fired_at {real},
    fires_count {int} NOT NULL,
    skipped_count {int} NOT NULL,
    buffered {int} NOT NULL,
    fire_seq {int} NOT NULL,
    last_skip_reason TEXT,
    last_skipped_at {real},
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    PRIMARY KEY (namespace, schedule_id)
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (namespace, due_at);
CREATE INDEX IF NOT EXISTS schedules_buffered ON schedules (namespace, buffered);
CREATE TABLE IF NOT EXISTS schedule_fires (
    namespace TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    scheduled_at {real} NOT NULL,
    seq {int} NOT NULL,
    origin TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT,
    workflow_id TEXT,
    run_id TEXT,
    due_at {real} NOT NULL,
    fired_at {real} NOT NULL,
    started_at {real},
    run_open {int} NOT NULL,
    PRIMARY KEY (namespace, schedule_id, scheduled_at)
);
CREATE TABLE IF NOT EXISTS namespace_settings (
    namespace TEXT PRIMARY KEY,
    retention_seconds {real},
    pruned TEXT NOT NULL,
    last_pruned_at {real},
    updated_at {real} NOT NULL
);
"""

#: Indexes on columns that a migration adds: created by `migrate()` (for a new
#: database, and by the upgrade that adds their columns), because the schema
#: statements run before the upgrades, on tables that may still lack them.
LATE_INDEXES = (
    # claims go by priority, then age (docs/queues.md)
    "CREATE INDEX IF NOT EXISTS runs_claim_order ON runs (namespace, task_queue, priority, "
    "ready_at) WHERE status IN ('pending', 'running')",
)


def schema_statements(dialect: Dialect) -> list[str]:
    """The DDL for a dialect, one statement per entry."""
    text = _SCHEMA.format(real=dialect.real, int=dialect.integer, serial=dialect.serial)
    return [s.strip() for s in text.split(";") if s.strip()]


def table_names() -> list[str]:
    """Every table the schema creates (what a vacuum covers)."""
    return [line.split()[5] for line in _SCHEMA.splitlines()
            if line.startswith("CREATE TABLE IF NOT EXISTS")]
