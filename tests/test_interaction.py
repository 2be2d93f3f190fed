"""Talking to running workflows, on every driver and host loop: the conformance
suite's interaction tests (`durable.testing.conformance.interaction`), and the
schema upgrade of a version-1 database, which is this repository's own (it
rewrites the schema with SQLite's and PostgreSQL's DDL)."""

from __future__ import annotations

import functools
import re
from typing import Any

import anyio
import pytest

import durable
from durable.store.migrations import SCHEMA_VERSION, UPGRADES
from durable.store.records import WorkerRegistration
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


# ---------------------------------------------------------------- a query's taker gone


async def test_a_query_whose_taker_stopped_before_answering_is_answered_by_another_worker(
        db_url: str) -> None:
    """A worker takes a query of a closed run to answer it by a replay and is
    gone before it answers (here: stopped while its replay hangs; a crashed one
    is gone once its registration lapses): the query is offered again, and
    another worker answers it, within the caller's wait."""
    answers: list[Any] = []
    taken, answered = anyio.Event(), anyio.Event()

    async def hang(request: Any) -> dict[str, Any]:
        taken.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with durable.connect(db_url) as c, anyio.create_task_group() as tg:
        handle = None
        async with durable.Worker(c, workflows=[Approval], activities=[double],
                                  poll_interval=0.05) as first:
            handle = await c.start(Approval, "o-71", 60, id=new_id("taker-gone"))
            await handle.signal("approve", "ann")
            await handle.result()
            first.idle_queries._replay_and_ask = hang  # type: ignore[method-assign]

            async def ask() -> None:
                answers.append(await handle.query("status", timeout=60))
                answered.set()

            tg.start_soon(ask)
            await taken.wait()
        # the first worker is gone (stopped) with the query taken, unanswered
        async with durable.Worker(c, workflows=[Approval], activities=[double],
                                  poll_interval=0.05):
            await answered.wait()
    assert answers == [{"approved": True, "approvers": ["ann"], "limit": 5}]


#: how long the crashed taker's registration lasts after it took the query
TAKER_TTL = 1.5


def _slow_watch(db_url: str) -> dict[str, float]:
    """The driver's own look at everything (which also looks for queries) 30 s
    apart, where it has one: only the taker's lapse may bring the answer sooner."""
    if db_url.startswith("postgres"):
        return {"poll_interval": 30.0}
    if db_url.startswith(("mysql", "mariadb")):
        return {"any_interval": 30.0}
    return {}


async def test_a_query_whose_taker_crashed_is_answered_just_after_its_registration_lapses(
        db_url: str) -> None:
    """A worker took a query of a closed run to answer it by a replay and was
    SIGKILLed (here: registered until `TAKER_TTL` from now, and never answers):
    the query is offered again once its registration lapses, an instant no
    commit announces. A worker that answers queries looks again just after it
    (`Store.queries_due`), and looks at once when it starts; its polls are 30 s
    apart here (the query loop's fallback 150 s), so the answer can come within
    the bound only so. Before, it came at the next fallback poll."""
    async with durable.connect(db_url, **_slow_watch(db_url)) as c:
        async with durable.Worker(c, workflows=[Approval], activities=[double],
                                  poll_interval=0.05):
            handle = await c.start(Approval, "o-72", 60, id=new_id("taker-crashed"))
            await handle.signal("approve", "ann")
            await handle.result()
        await c.store.register_worker(WorkerRegistration(
            "crashed", c.namespace, "default", ("ia_approval",), (), ()), TAKER_TTL,
            c.clock.now())
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                answers.append(await handle.query("status", timeout=60))

            tg.start_soon(ask)
            with anyio.fail_after(10):
                while not (waiting := await c.store.idle_requests(
                        c.namespace, "default", ("ia_approval",), 10, c.clock.now())):
                    await anyio.sleep(0.01)
            assert len(await c.store.take_requests(waiting, "crashed", c.clock.now())) == 1
            async with durable.Worker(c, workflows=[Approval], activities=[double],
                                      poll_interval=30):
                with anyio.fail_after(10):  # the next fallback poll: 150 s away
                    while not answers:
                        await anyio.sleep(0.01)
    assert answers == [{"approved": True, "approvers": ["ann"], "limit": 5}]


# ---------------------------------------------------------------- an update id, two updates


def _pending_updates(run_id: str, tx: Any) -> Any:
    from durable.driver import q

    rows = yield q("SELECT name, update_id FROM requests WHERE run_id = ? AND kind = 'update' "
                   "AND status <> 'answered'", run_id)
    return [(r["name"], r["update_id"]) for r in rows]


async def test_an_update_id_waiting_for_a_worker_names_that_update_only(db_url: str) -> None:
    """An update still waiting for a worker holds its id: another update sent with
    that id is refused at once (it used to wait with the first and answer its
    outcome as its own), and the first, once a worker runs, completes alone."""
    async with durable.connect(db_url) as c:
        handle = await c.start(Approval, "o-72", 60, id=new_id("one-id"))
        run_id = (await handle.describe())["run"]["run_id"]
        results: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                results.append(await handle.update("set_limit", 3, update_id="early",
                                                   timeout=30))

            tg.start_soon(first)  # no worker yet: the update waits for one
            with anyio.fail_after(10):
                while await c.driver.run(functools.partial(_pending_updates, run_id),
                                         write=False) != [("set_limit", "early")]:
                    await anyio.sleep(0.02)
            with pytest.raises(durable.ConfigurationError,
                               match="already names update 'set_limit'"):
                await handle.update("explode", update_id="early", timeout=5)
            async with durable.Worker(c, workflows=[Approval], activities=[double],
                                      poll_interval=0.05):
                with anyio.fail_after(20):
                    while not results:
                        await anyio.sleep(0.02)
                await handle.signal("approve", "ann")
                await handle.result()
        history = await handle.history()
    assert results == [6]
    assert [e.data["update_id"] for e in history if e.type == "UpdateAccepted"] == ["early"]
    assert not any(e.type == "UpdateFailed" for e in history)
