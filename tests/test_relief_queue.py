"""A queue's max_running held by parents that wait for their children (decision (ao)).

`max_running` counts every run held under a live lease, waiting ones too
(decision (aa)): parents that start children on their own limited queue can
take every slot, and the children wait for a slot their ancestors hold
(describe(): "held by runs it descends from"); the queue deadlocked, however
many slots the workers had. Now a worker holding such a parent that only
waits trades it, in one transaction, for the ready run that descends from it
(durable/store/parked.py `trade_parked`): the parent is put down (claimable
again when its wait ends, as under worker pressure, decision (am)) and the
child claimed in the slot it freed, which no other claim can take meanwhile.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.store.parked import Parked, Traded
from tests.comparable_history import comparable_history

pytestmark = pytest.mark.anyio

QUEUE = "limited"


@workflow.defn(name="qrelief_child")
async def qrelief_child(n: int) -> int:
    return n * 2


@workflow.defn(name="qrelief_parent")
async def qrelief_parent(n: int) -> int:
    me = workflow.info().workflow_id
    options = durable.ChildOptions(task_queue=QUEUE)
    first: int = await workflow.execute_child(qrelief_child, n, id=f"{me}-a", options=options)
    second: int = await workflow.execute_child(qrelief_child, first, id=f"{me}-b",
                                               options=options)
    return second


@workflow.defn(name="qrelief_sleeper")
async def qrelief_sleeper() -> str:
    await workflow.sleep(3600)
    return "slept"


def released_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "'run_released_under_pressure'" in r.getMessage()]


async def start_parents(client: durable.Client, prefix: str, n: int) -> list[Any]:
    return [await client.start(qrelief_parent, i, id=f"{prefix}-{i}",
                               options=durable.StartOptions(task_queue=QUEUE))
            for i in range(n)]


def worker(client: durable.Client, **kw: Any) -> durable.Worker:
    return durable.Worker(client, workflows=[qrelief_parent, qrelief_child], task_queue=QUEUE,
                          **kw)


async def test_parents_holding_a_queues_slots_trade_them_for_their_children(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """The trial: max_running=2, 4 parents each starting two children in turn on
    the same queue, one worker with plenty of slots. Every run completes, the
    limit held throughout, and each history is the one an unlimited queue gives."""
    caplog.set_level(logging.INFO, logger="durable.worker")
    client = storage_client
    calm = await start_parents(client, "calm", 4)
    async with worker(client):
        with anyio.fail_after(30):
            assert [await h.result() for h in calm] == [i * 4 for i in range(4)]
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=2))
    busy = await start_parents(client, "busy", 4)
    most = 0
    async with worker(client) as w:
        real = w.store.trade_parked

        async def counted(*args: Any, **kw: Any) -> Traded:
            nonlocal most
            traded = await real(*args, **kw)
            running = (await client.describe_queue(QUEUE))["runs"]["running"]
            most = max(most, running)
            return traded

        w.store.trade_parked = counted  # type: ignore[method-assign]
        with anyio.fail_after(30):
            assert [await h.result() for h in busy] == [i * 4 for i in range(4)]
    assert w.failure is None
    assert most <= 2
    assert w.relief.traded >= 4 and w.relief.released >= 4, (w.relief.traded, w.relief.released)
    lines = released_lines(caplog)
    assert lines and all("reason='queue'" in line for line in lines), lines
    for i in range(4):
        for suffix in ("", "-a", "-b"):
            assert (await comparable_history(client.get_handle(f"busy-{i}{suffix}"), "busy")
                    == await comparable_history(client.get_handle(f"calm-{i}{suffix}"),
                                                "calm")), (i, suffix)


async def test_two_processes_each_holding_some_of_the_queues_parents_both_trade(
    storage_client: durable.Client, db_url: str,
) -> None:
    """Two workers, each on a client of its own (on PostgreSQL, two processes as
    far as wake-ups go), 4 slots each (never full: only the queue binds), on a
    queue of max_running=3: 6 parents, and whichever holds a parent trades it
    for its child. All complete; the queue never ran more than 3 at once."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=3))
    handles = await start_parents(client, "two", 6)
    most = 0
    async with durable.connect(db_url) as other:
        async with worker(client, max_concurrent_runs=4) as one, \
                worker(other, max_concurrent_runs=4) as two:
            with anyio.fail_after(30):
                for h in handles:
                    while True:
                        with anyio.move_on_after(0.05):
                            result = await h.result()
                            break
                        most = max(most, (await client.describe_queue(QUEUE))["runs"]["running"])
                    assert result == int(h.workflow_id.split("-")[1]) * 4
    assert most <= 3, most
    assert one.failure is None and two.failure is None
    assert one.relief.traded + two.relief.traded > 0  # the only relief here


@workflow.defn(name="qrelief_lonely")
async def qrelief_lonely() -> str:
    return "ran"


@activity.defn(name="qrelief_step")
def qrelief_step(done: int) -> int:
    return done + 1


@workflow.defn(name="qrelief_stepper")
async def qrelief_stepper(steps: int) -> int:
    """Parks at every local step: each park ends a spell of running."""
    done = 0
    while done < steps:
        done = await workflow.execute_local_activity(qrelief_step, done)
    return done


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_full_queue_of_unrelated_work_costs_no_claim_pass_per_step(
    storage_client: durable.Client,
) -> None:
    """max_running=1, held by a run of 60 local steps while an unrelated run
    waits: the held-back passes find nothing to trade and watch nothing, so
    the steps cost no claim passes (watching every run held for its next
    park, as a full worker does for runs it may put down, made one pass a
    step: 60 and more)."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=1))
    options = durable.StartOptions(task_queue=QUEUE)
    stepper = await client.start(qrelief_stepper, 60, id="stepper", options=options)
    async with durable.Worker(client, workflows=[qrelief_stepper, qrelief_lonely],
                              activities=[qrelief_step], task_queue=QUEUE) as w:
        with anyio.fail_after(10):
            while not w.executors:
                await w.runs.claim_now()
        lonely = await client.start(qrelief_lonely, id="lonely", options=options)
        await w.runs.claim_now()  # held back: nothing to trade for it
        before = w.runs.passes
        with anyio.fail_after(20):
            assert await stepper.result() == 60
            during = w.runs.passes - before
            assert await lonely.result() == "ran"  # claimed at the stepper's end
    assert during < 20, during
    assert (w.relief.traded, w.relief.released) == (0, 0)


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_ready_work_that_descends_from_no_run_held_waits_its_turn(
    storage_client: durable.Client,
) -> None:
    """max_running bounds runs in progress, waits included (decision (aa)): a
    sleeper holds the one slot and an unrelated run waits for it; nothing is
    traded (only runs that descend from the runs held are, decision (ao))."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=1))
    options = durable.StartOptions(task_queue=QUEUE)
    sleeper = await client.start(qrelief_sleeper, id="sleeper", options=options)
    async with durable.Worker(client, workflows=[qrelief_sleeper, qrelief_lonely],
                              task_queue=QUEUE) as w:
        with anyio.fail_after(10):
            while (await sleeper.describe()).get("waiting_for") is None:
                await anyio.sleep(0.01)
        lonely = await client.start(qrelief_lonely, id="lonely", options=options)
        for _ in range(5):
            await w.runs.claim_now()
        assert [e.run.workflow_id for e in w.executors.values()] == ["sleeper"]
        waiting = (await lonely.describe())["waiting_for"]
        assert waiting is not None and waiting["kind"] == "queue_slot", waiting
        assert (w.relief.traded, w.relief.released) == (0, 0)


@workflow.defn(name="qrelief_watchful")
async def qrelief_watchful() -> str:
    try:
        await workflow.execute_child(qrelief_child, 1, id="watched",
                                     options=durable.ChildOptions(task_queue=QUEUE))
    except durable.ChildWorkflowFailed:
        return "child ended"
    return "child ran"


async def test_a_child_that_closes_while_the_trade_stops_its_parent_leaves_it_kept(
    storage_client: durable.Client,
) -> None:
    """The parent's executor is stopped for a trade and, before the trade's
    transaction, its child is terminated: nothing descends from the parent any
    more, so it is not put down but claimed again by its worker (epoch bumped)
    and replayed; it sees its child's end and completes. No slot came free
    for anyone else meanwhile."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=1))
    parent = await client.start(qrelief_watchful, id="watchful",
                                options=durable.StartOptions(task_queue=QUEUE))
    seen: list[Traded] = []
    async with durable.Worker(client, workflows=[qrelief_watchful, qrelief_child],
                              task_queue=QUEUE) as w:
        real = w.store.trade_parked

        async def racing(namespace: str, task_queue: str, worker_id: str, types: Any,
                         runs: list[Parked], *args: Any) -> Traded:
            await client.get_handle("watched").terminate("raced")
            traded = await real(namespace, task_queue, worker_id, types, runs, *args)
            seen.append(traded)
            return traded

        w.store.trade_parked = racing  # type: ignore[method-assign]
        with anyio.fail_after(20):
            assert await parent.result() == "child ended"
    assert [(t.kept, t.taken, t.released) for t in seen] == [([parent.run_id], 0, [])]
    assert (w.relief.kept, w.relief.released, w.relief.traded) == (1, 0, 0)
    assert (await client.get_handle("watched").describe())["status"] == "terminated"


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres"])
async def test_storage_failing_during_a_trade_hands_the_parents_back(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """The trade's transaction fails (its outcome unknown): the stopped parents
    are handed back as after an error (claimable at once) and whatever the
    trade may have claimed is handed back before the next claim
    (`Store.release_strays`); every run completes."""
    caplog.set_level(logging.WARNING, logger="durable.worker")
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=2))
    handles = await start_parents(client, "failing", 3)
    async with worker(client) as w:
        real = w.store.trade_parked
        failed = 0

        async def failing(*args: Any, **kw: Any) -> Traded:
            nonlocal failed
            if not failed:
                failed += 1
                await real(*args, **kw)  # it committed, and the answer was lost
                raise durable.StorageUnavailable("the answer was lost (test)",
                                                 outcome_unknown=True)
            return await real(*args, **kw)

        w.store.trade_parked = failing  # type: ignore[method-assign]
        with anyio.fail_after(30):
            assert [await h.result() for h in handles] == [0, 4, 8]
    assert failed == 1 and w.relief.failed >= 1
    assert any("run_release_failed" in r.getMessage() for r in caplog.records)


@workflow.defn(name="qrelief_listening")
class Listening:
    """Waits on its child and takes notes meanwhile."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.signal
    def note(self, text: str) -> None:
        self.notes.append(text)

    @workflow.run
    async def run(self) -> list[Any]:
        child: int = await workflow.execute_child(
            qrelief_child, 5, id="listened", options=durable.ChildOptions(task_queue=QUEUE))
        await workflow.wait_condition(lambda: bool(self.notes))
        return [child, self.notes]


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres", "mariadb"])
async def test_a_signal_that_races_the_trade_is_not_lost(
    storage_client: durable.Client,
) -> None:
    """A signal to the parent recorded after its executor stopped for a trade
    and before the trade's transaction: the trade puts it down claimable at
    once (it has a signal to take) and takes its child in its slot; the
    parent gets the slot back when the child closes, takes the signal, and
    completes."""
    client = storage_client
    await client.set_queue_limits(QUEUE, durable.QueueLimits(max_running=1))
    parent = await client.start(Listening, id="listening",
                                options=durable.StartOptions(task_queue=QUEUE))
    seen: list[Traded] = []
    async with durable.Worker(client, workflows=[Listening, qrelief_child],
                              task_queue=QUEUE) as w:
        real = w.store.trade_parked

        async def racing(*args: Any) -> Traded:
            await parent.signal("note", "raced")
            traded = await real(*args)
            seen.append(traded)
            return traded

        w.store.trade_parked = racing  # type: ignore[method-assign]
        with anyio.fail_after(20):
            assert await parent.result() == [10, ["raced"]]
    assert [[(r.run_id, r.because) for r in t.released] for t in seen][:1] == [
        [(parent.run_id, "signal")]]
    assert seen[0].taken == 1 and not seen[0].kept
