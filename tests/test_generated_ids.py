"""Ids durable makes itself stay ids: at most 255 characters on every driver.

A child's default id (``{parent}/{op}``) of a parent near the limit, and a
schedule trigger's workflow id (``{schedule}-{time with milliseconds}``),
went past 255: MariaDB's keys refused them (the parent failed; the trigger
raised the driver's own error) and SQLite stored runs no call could name (the
MariaDB audit, 12-07)."""

from __future__ import annotations

import pytest

import durable
from durable import workflow
from durable._runtime.ops import default_child_id

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The ids are storage's: the host loop does not change them."""
    return "asyncio"


@workflow.defn(name="gen-ids-child")
async def gen_child(x: int) -> int:
    return x * 2


@workflow.defn(name="gen-ids-parent")
async def gen_parent(x: int) -> str:
    handle = await workflow.start_child(gen_child, x)
    assert await handle.result() == x * 2
    return handle.workflow_id


def test_a_default_child_id_is_an_id_however_long_its_parents() -> None:
    assert default_child_id("order-7", "0:3") == "order-7/0:3"  # as before
    parent = "p" * 255
    child = default_child_id(parent, "0:1")
    assert len(child) == 255 and child.startswith("p" * 200) and child.endswith("/0:1")
    assert default_child_id(parent, "0:1") == child  # the same on every replay
    other = default_child_id("p" * 254 + "q", "0:1")
    assert other != child and len(other) == 255  # the digest is of the whole id
    assert len(default_child_id("é" * 255, "12:345")) == 255


async def test_a_parent_with_a_255_character_id_starts_its_default_child(
        storage_client: durable.Client) -> None:
    parent_id = "g" * 255
    async with durable.Worker(storage_client, workflows=[gen_parent, gen_child]):
        handle = await storage_client.start(gen_parent, 4, id=parent_id)
        child_id = await handle.result()
    op_id = child_id.rsplit("/", 1)[1]
    assert len(child_id) == 255 and child_id == default_child_id(parent_id, op_id)
    # the child is a run every call can name
    info = await storage_client.get_handle(child_id).describe()
    assert info["status"] == "completed" and info["run"]["parent_workflow_id"] == parent_id


async def test_a_schedule_id_leaves_room_for_a_triggers_milliseconds(
        storage_client: durable.Client) -> None:
    with pytest.raises(durable.ConfigurationError, match="at most 234 characters"):
        await storage_client.create_schedule("s" * 235, durable.ScheduleSpec(every=3600),
                                             gen_child, 1)
    schedule_id = "s" * 234
    schedule = await storage_client.create_schedule(
        schedule_id, durable.ScheduleSpec(every=3600), gen_child, 1)
    await schedule.trigger()
    [run] = [r for r in await storage_client.list(limit=10)
             if r["workflow_id"].startswith(schedule_id)]
    assert len(run["workflow_id"]) <= 255
    assert (await storage_client.get_handle(run["workflow_id"]).describe())["status"]
