"""The schema's version: recorded when created, checked and upgraded on every connect.

A database written by a newer durable is refused rather than misread. The
schema statements themselves are idempotent (`durable.store.schema`) and run
before `migrate()`: new tables and indexes appear by themselves, so a
migration only has to change existing tables, guarded by the recorded version.
"""

from __future__ import annotations

from ..driver import Dialect, Program, ex, q1
from ..errors import ConfigurationError

SCHEMA_VERSION = 3

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
}


def migrate(dialect: Dialect | None = None) -> Program[int]:
    """Record the version of a fresh schema, or check an existing one and upgrade
    it in place; the version. (`dialect` quotes the column ``key``, a keyword
    in MariaDB; the SQL standard's quotes by default.)"""
    key = (dialect or Dialect()).quote("key")
    row = yield q1(f"SELECT value FROM durable_meta WHERE {key} = 'schema_version'")
    if row is None:
        yield ex(f"INSERT INTO durable_meta ({key}, value) VALUES ('schema_version', ?)",
                 str(SCHEMA_VERSION))
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
    return SCHEMA_VERSION
