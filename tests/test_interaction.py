"""Talking to running workflows, on every driver and host loop: the conformance
suite's interaction tests (`durable.testing.conformance.interaction`), and the
schema upgrade of a version-1 database, which is this repository's own (it
rewrites the schema with SQLite's and PostgreSQL's DDL)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import durable
from durable.store.migrations import SCHEMA_VERSION, UPGRADES
from durable.store.schema import LATE_INDEXES
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


#: what an upgrade step may do, and so what `_downgrade` knows how to undo
ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+) .*")
#: version 4 replaced version 1's claim index (by LATE_INDEXES' runs_claim_order)
V1_CLAIM_INDEX = ("CREATE INDEX runs_claim ON runs (namespace, task_queue, ready_at) "
                  "WHERE status IN ('pending', 'running')")


def _downgrade(tx: Any) -> Any:
    """Make a current database look like version 1: undo every upgrade step,
    newest first, as read from `UPGRADES`. A hand-kept list of columns broke
    this test twice on 12-06, each time a version added a column the list did
    not drop (the upgrade then added it again: "duplicate column"); a step of a
    kind not undone here fails with what to do."""
    from durable.driver import ex

    for statement in LATE_INDEXES:  # made after the upgrades: on columns they add
        yield ex(f"DROP INDEX {statement.split()[5]}")
    yield ex("DROP TABLE inbox")  # version 2's tables
    yield ex("DROP TABLE requests")
    for version in sorted(UPGRADES, reverse=True):
        for statement in reversed(UPGRADES[version]):
            added = ADD_COLUMN.fullmatch(statement)
            if added is not None:
                yield ex(f"ALTER TABLE {added[1]} DROP COLUMN {added[2]}")
            elif statement == "DROP INDEX IF EXISTS runs_claim":
                yield ex(V1_CLAIM_INDEX)
            else:
                raise AssertionError(f"version {version}'s {statement!r}: teach "
                                     "tests/test_interaction.py's _downgrade to undo it")
    yield ex("UPDATE durable_meta SET value = '1' WHERE key = 'schema_version'")


def _version(tx: Any) -> Any:
    from durable.driver import q1

    row = yield q1("SELECT value FROM durable_meta WHERE key = 'schema_version'")
    return row["value"]
