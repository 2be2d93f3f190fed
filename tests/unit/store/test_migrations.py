"""The schema's version: recorded, checked on every connect, a newer one refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import durable
from durable import ConfigurationError
from durable.driver import ex
from durable.store.migrations import SCHEMA_VERSION

from ._support import row, rows

pytestmark = pytest.mark.anyio


async def test_a_fresh_database_records_the_current_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    for _ in range(2):  # connecting again finds it and changes nothing
        async with durable.connect(url) as client:
            found = await row(client.store, "SELECT value FROM durable_meta "
                              "WHERE key = 'schema_version'")
            assert found["value"] == str(SCHEMA_VERSION)


async def test_a_database_of_a_newer_durable_is_refused_not_misread(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    async with durable.connect(url) as client:
        await client.driver.run(lambda tx: _set_version(SCHEMA_VERSION + 1))
    with pytest.raises(ConfigurationError, match=f"schema is version {SCHEMA_VERSION + 1}, "
                                                 f"newer than this durable's"):
        await durable.connect(url)


def _set_version(version: int):  # type: ignore[no-untyped-def]
    yield ex("UPDATE durable_meta SET value = ? WHERE key = 'schema_version'", str(version))


def _as_version_10():  # type: ignore[no-untyped-def]
    """A fresh database as version 10 made it (versions 12 to 15 added a column each)."""
    yield ex("ALTER TABLE workers DROP COLUMN runs_released")
    yield ex("ALTER TABLE workers DROP COLUMN loop_blocks")
    yield ex("ALTER TABLE workers DROP COLUMN address")
    yield ex("ALTER TABLE runs DROP COLUMN blocked_builds")
    yield from _set_version(10)


def _ops_without_rowid():  # type: ignore[no-untyped-def]
    """What an interim build (c29cbd9, 12-06) made of SQLite's ops at version 11."""
    yield ex("ALTER TABLE ops RENAME TO ops_rowid")
    yield ex("CREATE TABLE ops (run_id TEXT NOT NULL, op_id TEXT NOT NULL, kind TEXT NOT NULL, "
             "name TEXT NOT NULL, status TEXT NOT NULL, result TEXT, failure TEXT, "
             "scheduled_at REAL, closed_at REAL, fire_at REAL, child_workflow_id TEXT, "
             "child_run_id TEXT, task_id TEXT, interrupted INTEGER NOT NULL DEFAULT 0, "
             "PRIMARY KEY (run_id, op_id)) WITHOUT ROWID")
    yield ex("INSERT INTO ops SELECT * FROM ops_rowid")
    yield ex("DROP TABLE ops_rowid")


async def test_version_11_keeps_ops_as_they_are_in_either_layout(tmp_path: Path) -> None:
    """A version-10 database upgrades to 11 with its ops untouched (a rowid
    table), and one whose ops an interim build made WITHOUT ROWID goes on
    working as it is: the same rows, and runs go on in both."""
    from durable import activity, workflow

    @activity.defn(name="mig_step")
    async def mig_step(i: int) -> int:
        return i + 1

    @workflow.defn(name="mig_flow")
    async def mig_flow(n: int) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_local_activity(mig_step, i)
        return total

    url = f"sqlite:///{tmp_path / 'v10.db'}"
    ops_table = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'ops'"
    version = "SELECT value FROM durable_meta WHERE key = 'schema_version'"
    async with durable.connect(url) as client:
        assert not (await row(client.store, ops_table))["sql"].endswith("WITHOUT ROWID")
        async with durable.Worker(client, workflows=[mig_flow], activities=[mig_step]):
            assert await (await client.start(mig_flow, 5, id="before")).result() == 15
        await client.driver.run(lambda tx: _as_version_10())
        before = await rows(client.store, "SELECT * FROM ops ORDER BY run_id, op_id")
    assert len(before) == 5
    async with durable.connect(url) as client:
        assert (await row(client.store, version))["value"] == str(SCHEMA_VERSION)
        assert not (await row(client.store, ops_table))["sql"].endswith("WITHOUT ROWID")
        assert await rows(client.store, "SELECT * FROM ops ORDER BY run_id, op_id") == before
        await client.driver.run(lambda tx: _ops_without_rowid())
    async with durable.connect(url) as client:
        assert (await row(client.store, ops_table))["sql"].endswith("WITHOUT ROWID")
        assert await rows(client.store, "SELECT * FROM ops ORDER BY run_id, op_id") == before
        async with durable.Worker(client, workflows=[mig_flow], activities=[mig_step]):
            assert await (await client.start(mig_flow, 3, id="after")).result() == 6
        assert len(await rows(client.store, "SELECT * FROM ops")) == 8


def _as_version_13():  # type: ignore[no-untyped-def]
    """A fresh database as version 13 made it (versions 14 and 15 added a column each)."""
    yield ex("DELETE FROM workers")
    yield ex("ALTER TABLE workers DROP COLUMN runs_released")
    yield ex("ALTER TABLE workers DROP COLUMN loop_blocks")
    yield from _set_version(13)


async def test_versions_14_and_15_record_loop_blocks_and_runs_put_down(
        tmp_path: Path) -> None:
    """A version-13 database gains the workers' ``loop_blocks`` and
    ``runs_released`` columns: a worker registers, and is listed with no block
    and no run put down, as before."""
    from durable import workflow

    @workflow.defn(name="mig_v13")
    async def mig_v13() -> int:
        return 13

    url = f"sqlite:///{tmp_path / 'v13.db'}"
    async with durable.connect(url) as client:
        await client.driver.run(lambda tx: _as_version_13())
    async with durable.connect(url) as client:
        assert (await row(client.store, "SELECT value FROM durable_meta "
                                        "WHERE key = 'schema_version'"))["value"] == str(
            SCHEMA_VERSION)
        async with durable.Worker(client, workflows=[mig_v13]):
            [worker] = await client.list_workers()
            assert worker["loop_blocked"] is None and worker["alive"]
            assert worker["runs_released"] is None  # (version 15's column)
