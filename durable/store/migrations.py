"""The schema's version: recorded when created, checked and upgraded on every connect.

A database written by a newer durable is refused rather than misread. The
schema statements themselves are idempotent (`durable.store.schema`) and run
before `migrate()`: new tables and indexes appear by themselves, so a
migration only has to change existing tables, guarded by the recorded version.
"""

from __future__ import annotations

from ..driver import Dialect, Program, ex, q1
from ..errors import ConfigurationError
from .schema import late_indexes

SCHEMA_VERSION = 15

#: Statements that bring a database from version N - 1 to version N.
#: (BIGINT and DOUBLE PRECISION are integer and real columns on SQLite and PostgreSQL alike.)
UPGRADES: dict[int, tuple[str, ...]] = {
    # 2: signals, queries and updates (the inbox and requests tables are new)
    2: (
        "ALTER TABLE runs ADD COLUMN inbox_seq BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN request_seq BIGINT NOT NULL DEFAULT 0",
    ),
    # 3: schedules and retention (their tables are new): the fire that started a run
    3: (
        "ALTER TABLE runs ADD COLUMN schedule_id TEXT",
        "ALTER TABLE runs ADD COLUMN scheduled_at DOUBLE PRECISION",
    ),
    # 4: queue limits, priorities, workers you can see (the task_queues table is
    # new): a run's priority and concurrency key, claimed by priority then age;
    # what each worker is and serves
    4: (
        "ALTER TABLE runs ADD COLUMN priority BIGINT NOT NULL DEFAULT 5",
        "ALTER TABLE runs ADD COLUMN concurrency_key TEXT",
        "DROP INDEX IF EXISTS runs_claim",  # replaced by LATE_INDEXES' runs_claim_order
        "ALTER TABLE activity_tasks ADD COLUMN priority BIGINT NOT NULL DEFAULT 5",
        "ALTER TABLE workers ADD COLUMN identity TEXT",
        "ALTER TABLE workers ADD COLUMN host TEXT",
        "ALTER TABLE workers ADD COLUMN pid BIGINT",
        "ALTER TABLE workers ADD COLUMN build_id TEXT",
        "ALTER TABLE workers ADD COLUMN definitions TEXT",
        "ALTER TABLE workers ADD COLUMN started_at DOUBLE PRECISION",
        "ALTER TABLE workers ADD COLUMN stopped_at DOUBLE PRECISION",
    ),
    # 5: builds and the upgrade gate: the build that started a run, the one that
    # last took it, and the build that cannot replay it (with the first diverging op)
    5: (
        "ALTER TABLE runs ADD COLUMN started_build TEXT",
        "ALTER TABLE runs ADD COLUMN last_build TEXT",
        "ALTER TABLE runs ADD COLUMN blocked_build TEXT",
        "ALTER TABLE runs ADD COLUMN blocked_divergence TEXT",
    ),
    # 6: reset: the run a reset continued (and from which op), and the run it became
    6: (
        "ALTER TABLE runs ADD COLUMN reset_from_run_id TEXT",
        "ALTER TABLE runs ADD COLUMN reset_from_op TEXT",
        "ALTER TABLE runs ADD COLUMN reset_run_id TEXT",
    ),
    # 7: who sent an update (the request_senders table is new; an update's
    # sender is kept there until the update is accepted into the inbox)
    7: (),
    # 8: namespaces created before use (POST /api/namespaces): a description
    # and a creation time beside the namespace's retention
    8: (
        "ALTER TABLE namespace_settings ADD COLUMN description TEXT",
        "ALTER TABLE namespace_settings ADD COLUMN created_at DOUBLE PRECISION",
    ),
    # 9: a count of the claims of a limited queue that took runs: a one-statement
    # limited claim compares the count its snapshot saw with the locked row's
    # (`durable.store.queues.claim_limited_in_one`)
    9: ("ALTER TABLE task_queues ADD COLUMN claims BIGINT NOT NULL DEFAULT 0",),
    # 10: the runs under a lease per queue and key (LATE_INDEXES' runs_running):
    # a limited claim counts what runs from it, not from the queue's waiting runs
    10: (),
    # 11: nothing. A build of main on 12-06 (c29cbd9) rebuilt SQLite's ops
    # table WITHOUT ROWID at this version; that was taken back (rows with
    # results of 1-2.5 kB spilled to overflow pages: docs/design/decisions.md
    # (ae)). A database it made keeps that table, which works the same.
    11: (),
    # 12: where a start may be addressed to a worker's process (PostgreSQL:
    # its driver's notification address, `durable_postgres.addressing`)
    12: ("ALTER TABLE workers ADD COLUMN address TEXT",),
    # 13: every build that refused a run (blocked_build is only the last): two
    # builds that both refuse it no longer take it from each other in turn
    13: ("ALTER TABLE runs ADD COLUMN blocked_builds TEXT",),
    # 14: the last time something blocked a worker's event loop, and how often
    # (`durable._runtime.loop_watch`): ``durable workers`` shows it
    14: ("ALTER TABLE workers ADD COLUMN loop_blocks TEXT",),
    # 15: the runs a worker put down under pressure, in all and recently
    # (`durable._runtime.relief.Relief.record`): ``durable workers`` shows it
    15: ("ALTER TABLE workers ADD COLUMN runs_released TEXT",),
}


def migrate(dialect: Dialect | None = None) -> Program[int]:
    """Record the version of a fresh schema, or check an existing one and upgrade
    it in place; the version. (`dialect` quotes the column ``key``, a keyword
    in some SQL dialects, and shapes the late indexes; SQLite's by default.)"""
    dialect = dialect or Dialect()
    key = dialect.quote("key")
    row = yield q1(f"SELECT value FROM durable_meta WHERE {key} = 'schema_version'")
    if row is None:
        yield ex(f"INSERT INTO durable_meta ({key}, value) VALUES ('schema_version', ?)",
                 str(SCHEMA_VERSION))
        for statement in late_indexes(dialect):
            yield ex(statement)
        return SCHEMA_VERSION
    found = int(row["value"])
    if found > SCHEMA_VERSION:
        raise ConfigurationError(
            f"the database schema is version {found}, newer than this durable's "
            f"({SCHEMA_VERSION}); upgrade durable-sdk before connecting to it"
        )
    for version in range(found + 1, SCHEMA_VERSION + 1):
        for statement in UPGRADES.get(version, ()):
            yield ex(statement)
        yield ex(f"UPDATE durable_meta SET value = ? WHERE {key} = 'schema_version'",
                 str(version))
    if found < SCHEMA_VERSION:
        for statement in late_indexes(dialect):
            yield ex(statement)
    return SCHEMA_VERSION
