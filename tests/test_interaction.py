"""Talking to running workflows, on every driver and host loop: the conformance
suite's interaction tests (`durable.testing.conformance.interaction`), and the
schema upgrade of a version-1 database, which is this repository's own (it
rewrites the schema with SQLite's and PostgreSQL's DDL)."""

from __future__ import annotations

from typing import Any

import pytest

import durable
from durable.store.migrations import SCHEMA_VERSION
from durable.testing.conformance.interaction import *  # noqa: F403
from durable.testing.conformance.interaction import Approval, double, new_id

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- schema upgrade


async def test_a_version_1_database_is_upgraded_in_place(db_url: str) -> None:
    if db_url.startswith(("mysql", "mariadb")):
        pytest.skip("a MariaDB database starts at the current schema version (the driver "
                    "is new): there is no older one to upgrade")
    async with durable.connect(db_url) as c:  # make it look like version 1
        await c.driver.run(_downgrade)
    async with durable.connect(db_url) as c, durable.Worker(
        c, workflows=[Approval], activities=[double], poll_interval=0.1
    ):
        version = await c.driver.run(_version, write=False)
        handle = await c.start(Approval, "o-11", 60, id=new_id("approval"))
        await handle.signal("approve", "ann")
        assert (await handle.result())["approvers"] == ["ann"]
    assert version == str(SCHEMA_VERSION)
    if db_url.startswith("postgres"):
        async with durable.connect(db_url) as c:
            drop = getattr(c.driver, "drop_schema", None)
            if drop is not None:
                await drop()


def _downgrade(tx: Any) -> Any:
    from durable.driver import ex

    yield ex("DROP INDEX runs_running")  # version 10's index (on version 4's column)
    yield ex("DROP TABLE inbox")
    yield ex("DROP TABLE requests")
    yield ex("ALTER TABLE runs DROP COLUMN inbox_seq")
    yield ex("ALTER TABLE runs DROP COLUMN request_seq")
    yield ex("ALTER TABLE runs DROP COLUMN schedule_id")  # version 3's columns
    yield ex("ALTER TABLE runs DROP COLUMN scheduled_at")
    yield ex("DROP INDEX runs_claim_order")  # version 4's index and columns
    yield ex("CREATE INDEX runs_claim ON runs (namespace, task_queue, ready_at) "
             "WHERE status IN ('pending', 'running')")
    yield ex("ALTER TABLE runs DROP COLUMN priority")
    yield ex("ALTER TABLE runs DROP COLUMN concurrency_key")
    yield ex("ALTER TABLE activity_tasks DROP COLUMN priority")
    for column in ("identity", "host", "pid", "build_id", "definitions", "started_at",
                   "stopped_at", "address", "loop_blocks"):  # version 4's, 12's and 14's
        yield ex(f"ALTER TABLE workers DROP COLUMN {column}")
    for column in ("started_build", "last_build", "blocked_build", "blocked_divergence"):
        yield ex(f"ALTER TABLE runs DROP COLUMN {column}")  # version 5's
    for column in ("reset_from_run_id", "reset_from_op", "reset_run_id"):
        yield ex(f"ALTER TABLE runs DROP COLUMN {column}")  # version 6's
    for column in ("description", "created_at"):
        yield ex(f"ALTER TABLE namespace_settings DROP COLUMN {column}")  # version 8's
    yield ex("ALTER TABLE task_queues DROP COLUMN claims")  # version 9's
    yield ex("ALTER TABLE runs DROP COLUMN blocked_builds")  # version 13's
    yield ex("UPDATE durable_meta SET value = '1' WHERE key = 'schema_version'")


def _version(tx: Any) -> Any:
    from durable.driver import q1

    row = yield q1("SELECT value FROM durable_meta WHERE key = 'schema_version'")
    return row["value"]
