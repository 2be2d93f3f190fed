"""The tables durable keeps, for every dialect.

Times are UTC epoch seconds (REAL / DOUBLE PRECISION); JSON is stored as text
so an operator can read it with any SQL client. Type names come from the
driver's `Dialect`; the statements are idempotent (IF NOT EXISTS), and
`durable.store.migrations` records and checks the version.

Every locking read (``FOR UPDATE``) has an index to go by (``activity_owner``
for a worker's attempts): some engines wait for every row lock a locking scan
meets, matching or not, where PostgreSQL locks only the rows that match.
"""

from __future__ import annotations

import re

from ..driver import Dialect

#: an index's WHERE clause (to the end of its statement)
_PARTIAL = re.compile(r"\s+WHERE\s.*\Z", re.S)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS durable_meta (
    {quoted_key} {key} PRIMARY KEY,
    value {text} NOT NULL
){options};
CREATE TABLE IF NOT EXISTS workflows (
    namespace {key} NOT NULL,
    workflow_id {key} NOT NULL,
    workflow_type {text} NOT NULL,
    current_run_id {text} NOT NULL,
    status {text} NOT NULL,
    closed_reason {text},
    execution_timeout {real},
    execution_deadline_at {real},
    run_count {int} NOT NULL,
    memo {text},
    created_at {real} NOT NULL,
    closed_at {real},
    PRIMARY KEY (namespace, workflow_id)
){options};
CREATE TABLE IF NOT EXISTS runs (
    run_id {key} PRIMARY KEY,
    namespace {key} NOT NULL,
    workflow_id {key} NOT NULL,
    workflow_type {text} NOT NULL,
    run_number {int} NOT NULL,
    task_queue {key} NOT NULL,
    status {key} NOT NULL,
    closed_reason {text},
    input {text} NOT NULL,
    result {text},
    failure {text},
    parent_run_id {key},
    parent_workflow_id {text},
    parent_op_id {text},
    parent_close_policy {text},
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
    owner {key},
    epoch {int} NOT NULL DEFAULT 0,
    lease_expires_at {real},
    ready_at {real},
    event_seq {int} NOT NULL DEFAULT 0,
    cancellation {text},
    claim_capabilities {text},
    continued_run_id {text},
    needs_review {int} NOT NULL DEFAULT 0,
    inbox_seq {int} NOT NULL DEFAULT 0,
    request_seq {int} NOT NULL DEFAULT 0,
    schedule_id {text},
    scheduled_at {real},
    priority {int} NOT NULL DEFAULT 5,
    concurrency_key {text},
    started_build {text},
    last_build {text},
    blocked_build {text},
    blocked_divergence {text},
    blocked_builds {text},
    reset_from_run_id {text},
    reset_from_op {text},
    reset_run_id {text}
){options};
CREATE INDEX IF NOT EXISTS runs_deadline ON runs (namespace, deadline_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner) WHERE owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_workflow ON runs (namespace, workflow_id, run_number);
CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_status ON runs (namespace, status, created_at);
CREATE INDEX IF NOT EXISTS runs_closed ON runs (namespace, closed_at);
CREATE TABLE IF NOT EXISTS ops (
    run_id {key} NOT NULL,
    op_id {long_key} NOT NULL,
    kind {text} NOT NULL,
    name {text} NOT NULL,
    status {text} NOT NULL,
    result {text},
    failure {text},
    scheduled_at {real},
    closed_at {real},
    fire_at {real},
    child_workflow_id {text},
    child_run_id {text},
    task_id {text},
    interrupted {int} NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, op_id)
){options};
CREATE TABLE IF NOT EXISTS activity_tasks (
    task_id {key} PRIMARY KEY,
    namespace {key} NOT NULL,
    task_queue {key} NOT NULL,
    activity_name {text} NOT NULL,
    run_id {key} NOT NULL,
    workflow_id {text} NOT NULL,
    op_id {text} NOT NULL,
    input {text} NOT NULL,
    status {key} NOT NULL,
    attempt {int} NOT NULL,
    options {text} NOT NULL,
    scheduled_at {real} NOT NULL,
    available_at {real} NOT NULL,
    schedule_to_start_deadline {real},
    schedule_to_close_deadline {real},
    start_to_close_deadline {real},
    heartbeat_deadline {real},
    lease_expires_at {real},
    deadline_at {real},
    owner {key},
    claimed_at {real},
    heartbeat_details {text},
    last_failure {text},
    stop_requested {int} NOT NULL DEFAULT 0,
    stop_requested_at {real},
    stop_receipt {text},
    closed_at {real},
    priority {int} NOT NULL DEFAULT 5
){options};
CREATE INDEX IF NOT EXISTS activity_claim ON activity_tasks (namespace, task_queue, available_at)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS activity_deadline ON activity_tasks (namespace, deadline_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS activity_run ON activity_tasks (run_id);
CREATE INDEX IF NOT EXISTS activity_owner ON activity_tasks (owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS events (
    id {serial} PRIMARY KEY,
    run_id {key} NOT NULL,
    seq {int} NOT NULL,
    type {text} NOT NULL,
    recorded_at {real} NOT NULL,
    data {text} NOT NULL
){options};
CREATE UNIQUE INDEX IF NOT EXISTS events_run_seq ON events (run_id, seq);
CREATE TABLE IF NOT EXISTS failures (
    id {serial} PRIMARY KEY,
    run_id {key} NOT NULL,
    recorded_at {real} NOT NULL,
    data {text} NOT NULL
){options};
CREATE INDEX IF NOT EXISTS failures_run ON failures (run_id);
CREATE TABLE IF NOT EXISTS inbox (
    run_id {key} NOT NULL,
    seq {int} NOT NULL,
    kind {text} NOT NULL,
    name {text} NOT NULL,
    input {text} NOT NULL,
    update_id {key},
    sender {text},
    received_at {real} NOT NULL,
    status {text} NOT NULL,
    delivery {int},
    frontier {text},
    delivered_at {real},
    result {text},
    failure {text},
    completed_at {real},
    PRIMARY KEY (run_id, seq)
){options};
CREATE UNIQUE INDEX IF NOT EXISTS inbox_update ON inbox (run_id, update_id)
    WHERE update_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS requests (
    request_id {key} PRIMARY KEY,
    namespace {key} NOT NULL,
    workflow_id {text} NOT NULL,
    run_id {key} NOT NULL,
    workflow_type {text} NOT NULL,
    task_queue {key} NOT NULL,
    kind {text} NOT NULL,
    name {text} NOT NULL,
    input {text} NOT NULL,
    update_id {text},
    status {key} NOT NULL,
    answer {text},
    taken_by {text},
    created_at {real} NOT NULL,
    answered_at {real}
){options};
CREATE INDEX IF NOT EXISTS requests_run ON requests (run_id, status);
CREATE INDEX IF NOT EXISTS requests_pending ON requests (namespace, task_queue, status, created_at);
CREATE TABLE IF NOT EXISTS request_senders (
    request_id {key} PRIMARY KEY,
    run_id {key} NOT NULL,
    sender {text} NOT NULL
){options};
CREATE TABLE IF NOT EXISTS workers (
    worker_id {key} PRIMARY KEY,
    namespace {text} NOT NULL,
    task_queue {text} NOT NULL,
    workflow_types {text} NOT NULL,
    activity_names {text} NOT NULL,
    capabilities {text} NOT NULL,
    heartbeat_at {real} NOT NULL,
    expires_at {real} NOT NULL,
    identity {text},
    host {text},
    pid {int},
    build_id {text},
    definitions {text},
    started_at {real},
    stopped_at {real},
    address {text},
    loop_blocks {text},
    runs_released {text}
){options};
CREATE TABLE IF NOT EXISTS task_queues (
    namespace {key} NOT NULL,
    name {key} NOT NULL,
    limits {text} NOT NULL,
    runs_limited {int} NOT NULL DEFAULT 0,
    activities_limited {int} NOT NULL DEFAULT 0,
    run_tokens {real},
    run_refilled_at {real},
    activity_tokens {real},
    activity_refilled_at {real},
    updated_at {real} NOT NULL,
    claims {int} NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, name)
){options};
CREATE TABLE IF NOT EXISTS schedules (
    namespace {key} NOT NULL,
    schedule_id {key} NOT NULL,
    workflow_type {text} NOT NULL,
    task_queue {text} NOT NULL,
    input {text} NOT NULL,
    start_options {text} NOT NULL,
    spec {text} NOT NULL,
    overlap {text} NOT NULL,
    jitter {real} NOT NULL,
    catchup_window {real} NOT NULL,
    paused {int} NOT NULL,
    note {text},
    max_runs {int},
    remaining_actions {int},
    next_fire_at {real},
    due_at {real},
    last_fired_at {real},
    fires_count {int} NOT NULL,
    skipped_count {int} NOT NULL,
    buffered {int} NOT NULL,
    fire_seq {int} NOT NULL,
    last_skip_reason {text},
    last_skipped_at {real},
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    PRIMARY KEY (namespace, schedule_id)
){options};
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (namespace, due_at);
CREATE INDEX IF NOT EXISTS schedules_buffered ON schedules (namespace, buffered);
CREATE INDEX IF NOT EXISTS schedules_created ON schedules (namespace, created_at DESC, schedule_id);
CREATE TABLE IF NOT EXISTS schedule_fires (
    namespace {key} NOT NULL,
    schedule_id {key} NOT NULL,
    scheduled_at {real} NOT NULL,
    seq {int} NOT NULL,
    origin {text} NOT NULL,
    outcome {text} NOT NULL,
    reason {text},
    workflow_id {text},
    run_id {text},
    due_at {real} NOT NULL,
    fired_at {real} NOT NULL,
    started_at {real},
    run_open {int} NOT NULL,
    PRIMARY KEY (namespace, schedule_id, scheduled_at)
){options};
CREATE TABLE IF NOT EXISTS namespace_settings (
    namespace {key} PRIMARY KEY,
    retention_seconds {real},
    pruned {text} NOT NULL,
    last_pruned_at {real},
    updated_at {real} NOT NULL,
    description {text},
    created_at {real}
){options};
"""

#: Indexes on columns that a migration adds: created by `migrate()` (for a new
#: database, and by the upgrade that adds their columns), because the schema
#: statements run before the upgrades, on tables that may still lack them.
LATE_INDEXES = (
    # claims go by priority, then age (docs/queues.md)
    "CREATE INDEX IF NOT EXISTS runs_claim_order ON runs (namespace, task_queue, priority, "
    "ready_at) WHERE status IN ('pending', 'running')",
    # what runs under a lease, per queue and key: a limited claim counts it
    # (`durable.store.queues`) without reading the queue's waiting runs
    "CREATE INDEX IF NOT EXISTS runs_running ON runs (namespace, task_queue, "
    "{concurrency_key}, lease_expires_at) WHERE owner IS NOT NULL "
    "AND status IN ('pending', 'running')",
)


def schema_statements(dialect: Dialect) -> list[str]:
    """The DDL for a dialect, one statement per entry.

    Key columns (in a primary key or an index) take the dialect's key type,
    the others its text type; without partial indexes an index covers every
    row (the store's queries name the same conditions either way).
    """
    text = _SCHEMA.format(
        real=dialect.real, int=dialect.integer, serial=dialect.serial,
        key=dialect.key_type(255), long_key=dialect.key_type(512), text=dialect.text,
        options=dialect.table_options, quoted_key=dialect.quote("key"))
    return [for_dialect(dialect, s.strip()) for s in text.split(";") if s.strip()]


def for_dialect(dialect: Dialect, statement: str) -> str:
    """A schema statement as the dialect takes it: an index without its WHERE
    clause where indexes cannot be partial."""
    if not dialect.partial_indexes and statement.startswith("CREATE ") and " INDEX " in statement:
        return _PARTIAL.sub("", statement)
    return statement


def late_indexes(dialect: Dialect) -> list[str]:
    """`LATE_INDEXES` as the dialect takes them (a text column as it may be
    indexed: `Dialect.index_text`)."""
    return [for_dialect(dialect, s.format(concurrency_key=dialect.index_text("concurrency_key")))
            for s in LATE_INDEXES]


def table_names() -> list[str]:
    """Every table the schema creates (what a vacuum covers)."""
    return [line.split()[5] for line in _SCHEMA.splitlines()
            if line.startswith("CREATE TABLE IF NOT EXISTS")]
