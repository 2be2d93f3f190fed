"""A key's slot held by a parent that waits for its child of the same key (decision (aw)).

`max_running_per_key` counts every run of a key held under a live lease,
waiting ones too (decision (aa)). A parent started with key K on a queue
with ``max_running_per_key=1`` that starts a child on the same queue with
the same key (explicitly: children do not inherit keys) and awaits it held
K's only slot while it waited, and the child could never be claimed: the
run never ended. Now the trade of decision (ao) covers it: the worker
holding the parent puts it down and claims the child in K's slot, in one
transaction under the queue's lock (durable/store/parked.py `trade_parked`).
Only for runs that descend from the run holding the key's slot: unrelated
work of the key waits its turn.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import durable
from durable import workflow
from durable._runtime.slots import releasable
from durable.store.parked import Traded
from tests.comparable_history import comparable_history
from tests.test_relief_queue import qrelief_child, qrelief_lonely, qrelief_sleeper

pytestmark = pytest.mark.anyio

QUEUE = "keyed"


@workflow.defn(name="krelief_parent")
async def krelief_parent(n: int, key: str) -> int:
    """Starts two children in turn on its own queue, with its own key."""
    me = workflow.info().workflow_id
    options = durable.ChildOptions(task_queue=QUEUE, concurrency_key=key)
    first: int = await workflow.execute_child(qrelief_child, n, id=f"{me}-a", options=options)
    second: int = await workflow.execute_child(qrelief_child, first, id=f"{me}-b",
                                               options=options)
    return second


def worker(client: durable.Client, **kw: Any) -> durable.Worker:
    return durable.Worker(client, workflows=[krelief_parent, qrelief_child], task_queue=QUEUE,
                          **kw)


async def start_parent(client: durable.Client, wid: str, n: int, key: str) -> Any:
    return await client.start(krelief_parent, n, key, id=wid,
                              options=durable.StartOptions(task_queue=QUEUE,
                                                           concurrency_key=key))


def after_each_trade(w: durable.Worker, client: durable.Client) -> list[dict[str, Any]]:
    """The queue's ``runs`` (what runs, in all and per key) read after each
    trade of `w` (`Store.trade_parked`), appended as they come."""
    seen: list[dict[str, Any]] = []
    real = w.store.trade_parked

    async def recorded(*args: Any, **kw: Any) -> Traded:
        traded = await real(*args, **kw)
        seen.append((await client.describe_queue(QUEUE))["runs"])
        return traded

    w.store.trade_parked = recorded  # type: ignore[method-assign]
    return seen


def most_per_key(seen: list[dict[str, Any]]) -> int:
    return max((int(n) for runs in seen for n in dict(runs["running_by_key"]).values()),
               default=0)


async def test_a_parent_holding_its_keys_only_slot_trades_it_for_its_child(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """max_running_per_key=1; a parent of key "k" starts two children of key
    "k" in turn and awaits each. It completes (it waited forever before), the
    key never ran more than one run at once, and every history is the one an
    unlimited queue gives."""
    caplog.set_level(logging.INFO, logger="durable.worker")
    client = storage_client
    calm = await start_parent(client, "calm", 3, "k")
    async with worker(client):
        with anyio.fail_after(30):
            assert await calm.result() == 12
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running_per_key=1))
    busy = await start_parent(client, "busy", 3, "k")
    async with worker(client) as w:
        seen = after_each_trade(w, client)
        with anyio.fail_after(30):
            assert await busy.result() == 12
    assert w.failure is None
    assert seen and most_per_key(seen) <= 1, seen
    assert w.relief.traded >= 2 and w.relief.released >= 2, (w.relief.traded, w.relief.released)
    lines = [r.getMessage() for r in caplog.records
             if "'run_released_under_pressure'" in r.getMessage()]
    assert lines and all("reason='queue'" in line for line in lines), lines
    for suffix in ("", "-a", "-b"):
        assert (await comparable_history(client.get_handle(f"busy{suffix}"), "busy")
                == await comparable_history(client.get_handle(f"calm{suffix}"), "calm")), suffix


async def test_parents_of_several_keys_and_a_queue_limit_all_complete(
    storage_client: durable.Client,
) -> None:
    """max_running=2 and max_running_per_key=1: four parents, two of key "a"
    and two of key "b", each starting children of its own key. Every run
    completes; neither limit was ever exceeded after a trade."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=2,
                                                              max_running_per_key=1))
    handles = [await start_parent(client, f"p-{i}", i, "ab"[i % 2]) for i in range(4)]
    async with worker(client) as w:
        seen = after_each_trade(w, client)
        with anyio.fail_after(30):
            assert [await h.result() for h in handles] == [i * 4 for i in range(4)]
    assert w.failure is None
    assert seen and max(int(runs["running"]) for runs in seen) <= 2, seen
    assert most_per_key(seen) <= 1, seen
    assert w.relief.traded >= 8, w.relief.traded


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres"])
async def test_ready_work_of_the_key_that_descends_from_no_run_held_waits_its_turn(
    storage_client: durable.Client,
) -> None:
    """A sleeper of key "k" holds the key's one slot and an unrelated run of
    key "k" waits for it: nothing is traded (only runs that descend from the
    run holding the key's slot are); the queue's other keys still run."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running_per_key=1))
    keyed = durable.StartOptions(task_queue=QUEUE, concurrency_key="k")
    sleeper = await client.start(qrelief_sleeper, id="sleeper", options=keyed)
    async with durable.Worker(client, workflows=[qrelief_sleeper, qrelief_lonely],
                              task_queue=QUEUE) as w:
        with anyio.fail_after(10):
            while (await sleeper.describe()).get("waiting_for") is None:
                await anyio.sleep(0.01)
        lonely = await client.start(qrelief_lonely, id="lonely", options=keyed)
        other = await client.start(qrelief_lonely, id="other", options=durable.StartOptions(
            task_queue=QUEUE, concurrency_key="j"))
        with anyio.fail_after(10):
            assert await other.result() == "ran"
        for _ in range(5):
            await w.runs.claim_now()
        assert [e.run.workflow_id for e in w.executors.values()] == ["sleeper"]
        waiting = (await lonely.describe())["waiting_for"]
        assert waiting is not None and waiting["kind"] == "key_slot", waiting
        assert not waiting.get("held_by_ancestors"), waiting
        assert (w.relief.traded, w.relief.released) == (0, 0)


@workflow.defn(name="krelief_crossed")
async def krelief_crossed() -> str:
    """Of key "j" itself, its child of key "k"."""
    await workflow.execute_child(qrelief_lonely, id="crossed-child", options=durable.ChildOptions(
        task_queue=QUEUE, concurrency_key="k"))
    return "crossed"


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres", "mariadb"])
async def test_a_parent_of_another_key_is_not_stopped_for_a_child_an_unrelated_run_holds(
    storage_client: durable.Client,
) -> None:
    """A parent of key "j" waits for its child of key "k", whose one slot an
    unrelated sleeper holds: putting the parent down frees no slot of "k",
    so claim passes neither trade it nor stop it for nothing (before, each
    pass could stop it and claim it again, a replay a pass). When the sleeper
    ends, the child runs and the parent completes."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running_per_key=1))
    sleeper = await client.start(qrelief_sleeper, id="sleeper", options=durable.StartOptions(
        task_queue=QUEUE, concurrency_key="k"))
    async with durable.Worker(client, workflows=[qrelief_sleeper, qrelief_lonely,
                                                 krelief_crossed], task_queue=QUEUE) as w:
        with anyio.fail_after(10):
            while (await sleeper.describe()).get("waiting_for") is None:
                await anyio.sleep(0.01)
        parent = await client.start(krelief_crossed, id="crossed", options=durable.StartOptions(
            task_queue=QUEUE, concurrency_key="j"))
        with anyio.fail_after(10):
            while True:
                try:
                    waiting = (await client.get_handle("crossed-child").describe())["waiting_for"]
                except durable.WorkflowNotFound:
                    waiting = None
                executor = next((e for e in w.executors.values()
                                 if e.run.workflow_id == "crossed"), None)
                if (waiting is not None and waiting["kind"] == "key_slot"
                        and executor is not None and releasable(executor) is not None):
                    break
                await anyio.sleep(0.01)
        for _ in range(5):
            await w.runs.claim_now()
        assert not waiting.get("held_by_ancestors"), waiting
        assert (w.relief.traded, w.relief.released, w.relief.kept) == (0, 0, 0)
        assert sorted(e.run.workflow_id for e in w.executors.values()) == ["crossed", "sleeper"]
        await sleeper.terminate("done sleeping")
        with anyio.fail_after(20):
            assert await parent.result() == "crossed"
    assert w.failure is None


@workflow.defn(name="krelief_middle")
async def krelief_middle(key: str) -> int:
    """Of no key itself; its child of `key`."""
    return int(await workflow.execute_child(qrelief_child, 5, id="grandchild",
                                            options=durable.ChildOptions(task_queue=QUEUE,
                                                                         concurrency_key=key)))


@workflow.defn(name="krelief_top")
async def krelief_top(key: str) -> int:
    return int(await workflow.execute_child(krelief_middle, key, id="middle",
                                            options=durable.ChildOptions(task_queue=QUEUE)))


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres", "mariadb"])
async def test_a_grandparent_holding_the_keys_slot_is_traded_for_its_grandchild(
    storage_client: durable.Client,
) -> None:
    """A run of key "k" starts a middle run of no key, which starts a child of
    key "k": the grandparent holds the key's one slot, both wait. The
    grandparent is put down for the grandchild (the middle run, which holds
    no slot of "k", is not), and all three complete."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running_per_key=1))
    top = await client.start(krelief_top, "k", id="top", options=durable.StartOptions(
        task_queue=QUEUE, concurrency_key="k"))
    async with durable.Worker(client, workflows=[krelief_top, krelief_middle, qrelief_child],
                              task_queue=QUEUE) as w:
        seen = after_each_trade(w, client)
        real = w.store.trade_parked
        offered: list[list[str]] = []

        async def offer(*args: Any) -> Traded:
            offered.append(sorted(p.run_id for p in args[4]))
            return await real(*args)

        w.store.trade_parked = offer  # type: ignore[method-assign]
        with anyio.fail_after(30):
            assert await top.result() == 10
    assert w.failure is None
    assert offered and all(ids == [top.run_id] for ids in offered), offered
    assert w.relief.traded >= 1 and most_per_key(seen) <= 1, (w.relief.traded, seen)
