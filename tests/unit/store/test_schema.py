"""The schema: idempotent statements, one per entry, in each dialect's column types."""

from __future__ import annotations

import sqlite3

from durable.driver import Dialect
from durable.store.schema import schema_statements


class Wide(Dialect):
    name = "wide"
    real, integer, serial = "DOUBLE PRECISION", "BIGINT", "BIGSERIAL"


def test_every_statement_can_run_again_on_an_existing_schema() -> None:
    statements = schema_statements(Dialect())
    assert statements and all(" IF NOT EXISTS " in s for s in statements)
    conn = sqlite3.connect(":memory:")
    for _ in range(2):
        for statement in statements:
            conn.execute(statement)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"durable_meta", "workflows", "runs", "ops", "activity_tasks", "events",
            "inbox", "requests"} <= tables


def test_column_types_come_from_the_dialect() -> None:
    default, wide = "\n".join(schema_statements(Dialect())), "\n".join(schema_statements(Wide()))
    assert "DOUBLE PRECISION" in wide and "DOUBLE PRECISION" not in default
    assert wide.count("BIGINT") > default.count("BIGINT")
