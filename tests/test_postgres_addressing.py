"""Starts addressed to one process on PostgreSQL (`durable_postgres.addressing`).

A client's start is told to one process of the queue in turn, not to all of
them: that process claims it, the others do not even wake. A process that
cannot take it passes the baton to all; a process that is gone is not
addressed. Each "process" here is a client of its own (its own driver,
origin and LISTEN connection) on one real server; the workers poll once a
minute, so whatever claims a run in time was woken by a notification.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from crash_app import kill9, logs, spawn_worker

import durable
from durable import activity, workflow
from durable.store.records import Claimed
from durable.store.start_statement import start_in_one

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: no fallback poll within a test: a run claimed in time was claimed on a wake-up
SLOW_POLL = 60.0


@workflow.defn(name="addr_quick")
async def quick(i: int) -> int:
    return i


@workflow.defn(name="addr_hold")
async def hold() -> str:
    await workflow.wait_condition(lambda: False, timeout=30)
    return "held"


@workflow.defn(name="addr_parent")
async def parent(tag: str, n: int, gate: bool, queue: str | None = None) -> list[int]:
    """Starts `n` children on `queue` (the parent's by default), one commit
    each, after the signal "go" when `gate`."""
    go: list[bool] = []
    workflow.on_signal("go", lambda: go.append(True))
    if gate:
        await workflow.wait_condition(lambda: bool(go), timeout=30)
    options = durable.ChildOptions(task_queue=queue)
    children = [await workflow.start_child(quick, i, id=f"{tag}-{i}", options=options)
                for i in range(n)]
    return [await child.result() for child in children]


@workflow.defn(name="addr_again")
async def again(n: int) -> int:
    if n > 0:
        workflow.continue_as_new(n - 1)
    return n


@activity.defn(name="addr_never")
async def never() -> None:
    """No worker of these tests runs it (its queue has none)."""


@workflow.defn(name="addr_nap")
async def nap(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "rested"


@workflow.defn(name="addr_stuck")
async def stuck() -> None:
    """Waits on an activity attempt that nobody runs: a run not put down."""
    await workflow.execute_activity(never, options=durable.ActivityOptions(
        task_queue="nowhere", schedule_to_close_timeout=60))


#: every process of these tests registers the same types (so each is a member)
WORKFLOWS = [quick, hold, parent, again, nap, stuck]


class Claims:
    """A client's run claims (what each took), and the ``RUNS`` wake-ups its
    hub heard from other processes (to whom each was addressed)."""

    def __init__(self, client: durable.Client) -> None:
        self.took: list[int] = []
        self.heard: list[str | None] = []
        original = client.store.claim_runs

        async def counted(*args: Any, **kwargs: Any) -> Claimed[Any]:
            claimed = await original(*args, **kwargs)
            self.took.append(len(claimed))
            return claimed

        client.store.claim_runs = counted  # type: ignore[method-assign]
        client.store.hub.subscribe(
            lambda wake: self.heard.append(wake.to)
            if wake.remote and wake.key[0] == "runs" else None)


async def _listening(client: durable.Client) -> None:
    """Until the client's LISTEN connection listens on its own channel (a start
    addressed to it before that would wait for the poll)."""
    driver: Any = client.driver
    with anyio.fail_after(20):
        while driver.own_channel not in driver._listener.channels:
            await anyio.sleep(0.01)


@asynccontextmanager
async def _process(url: str, **worker: Any) -> AsyncIterator[tuple[durable.Client, Claims,
                                                                  durable.Worker]]:
    """A client with a worker, listening (its LISTEN connection's start has
    been published: `Wake.any()`); claims and wake-ups counted after."""
    async with durable.connect(url, poll_interval=SLOW_POLL) as client:
        connected = anyio.Event()
        unsubscribe = client.store.hub.subscribe(
            lambda wake: connected.set() if wake.key == ("any",) else None)
        claims = Claims(client)
        async with durable.Worker(client, workflows=WORKFLOWS, poll_interval=SLOW_POLL,
                                  **worker) as running:
            await _listening(client)
            with anyio.fail_after(20):
                await connected.wait()
                # the worker's first claim pass (at its start) is behind it: on a
                # loaded box it came after the test's first start, addressed to
                # the other process, and took it (CI 12-07)
                while not claims.took:
                    await anyio.sleep(0.01)
            unsubscribe()
            claims.took.clear()
            claims.heard.clear()
            yield client, claims, running


async def test_starts_go_to_one_process_in_turn_and_wake_no_other(pg_url: str) -> None:
    async with (_process(pg_url) as (a, claims_a, _), _process(pg_url) as (b, claims_b, _),
                durable.connect(pg_url) as starter):
        for i in range(6):
            handle = await starter.start(quick, i, id=f"quick-{i}")
            with anyio.fail_after(20):  # long before either worker's poll
                assert await handle.result() == i
        driver: Any = starter.driver
        assert driver.addressing.reads == 1  # the queue's members, once
    # each start woke one process, in turn, which took it; none heard another's
    assert claims_a.heard == [a.driver.origin] * 3  # type: ignore[attr-defined]
    assert claims_b.heard == [b.driver.origin] * 3  # type: ignore[attr-defined]
    assert sum(claims_a.took) == sum(claims_b.took) == 3
    assert {a.driver.origin, b.driver.origin} == set(  # type: ignore[attr-defined]
        driver.addressing._known[(starter.namespace, "default")][1])


async def test_a_full_process_passes_its_addressed_start_to_the_others(pg_url: str) -> None:
    # full for good: it keeps its waiting run (no putting it down to take the work)
    async with _process(pg_url, max_concurrent_runs=1, release_waiting_runs=False) as (
            a, _, worker_a):
        # the queue's only member yet: its own start is its own, claimed here
        blocker = await a.start(hold, id="blocker")
        with anyio.fail_after(20):
            while "blocker" not in {r.workflow_id for r in _held(worker_a)}:
                await anyio.sleep(0.01)
        async with _process(pg_url) as (_, claims_b, _), durable.connect(pg_url) as starter:
            await _full_then_passed(a, worker_a, claims_b, starter, blocker)


async def _full_then_passed(a: durable.Client, worker_a: durable.Worker, claims_b: Claims,
                            starter: durable.Client, blocker: durable.WorkflowHandle) -> None:
    handles = [await starter.start(quick, i, id=f"quick-{i}") for i in range(4)]
    with anyio.fail_after(20):  # the two addressed to the full one came by the baton
        assert [await h.result() for h in handles] == [0, 1, 2, 3]
    driver: Any = starter.driver  # both were members: half went to the full one
    assert a.driver.origin in driver.addressing._known[  # type: ignore[attr-defined]
        (starter.namespace, "default")][1]
    assert worker_a.runs.spread >= 1  # it passed the baton
    assert sum(claims_b.took) == 4
    await blocker.cancel()


def _held(worker: durable.Worker) -> list[Any]:
    return [executor.run for executor in worker.executors.values()]


async def test_a_process_that_is_gone_is_not_addressed(pg_url: str) -> None:
    """Killed without deregistering (its registration still looks alive), its
    connections closed with it: the next read of the members leaves it out."""
    async with _process(pg_url) as (b, claims_b, _), durable.connect(pg_url) as starter:
        gone = await durable.connect(pg_url, poll_interval=SLOW_POLL)
        worker = durable.Worker(gone, workflows=WORKFLOWS, poll_interval=SLOW_POLL)
        await worker.__aenter__()
        await _listening(gone)
        worker._crash_now("after_effect")  # as SIGKILL would: nothing handed back
        await worker.__aexit__(None, None, None)
        gone_origin = gone.driver.origin  # type: ignore[attr-defined]
        await gone.close()
        listed = await starter.list_workers()
        assert any(w["worker_id"] == worker.worker_id and w["alive"] for w in listed)
        # the server drops a closed connection's backend a moment later (as after
        # a SIGKILL): until then the process still counts as connected, and a start
        # addressed to it waits for the others' poll (the documented window, at
        # most one refresh long), which this test is not about
        driver: Any = starter.driver
        with anyio.fail_after(20):
            while any(row["address"] == gone_origin and row["live"] for row in await
                      driver._members(starter.namespace, "default", starter.clock.now())):
                await anyio.sleep(0.01)
        handles = [await starter.start(quick, i, id=f"quick-{i}") for i in range(4)]
        with anyio.fail_after(20):
            assert [await h.result() for h in handles] == [0, 1, 2, 3]
        assert driver.addressing._known[(starter.namespace, "default")][1] == (
            b.driver.origin,)  # type: ignore[attr-defined]
        assert gone_origin != b.driver.origin  # type: ignore[attr-defined]
    assert sum(claims_b.took) == 4


async def test_a_start_addressed_where_no_worker_takes_it_is_passed_on(pg_url: str) -> None:
    """A start addressed to a process whose worker of the queue stopped since
    the starter read the members: that process, still listening (another of
    its workers watches), tells the queue's processes."""
    async with (durable.connect(pg_url, poll_interval=SLOW_POLL) as left,
                durable.Worker(left, workflows=[quick], task_queue="elsewhere",
                               poll_interval=SLOW_POLL),
                _process(pg_url) as (_, claims_b, _),
                durable.connect(pg_url) as starter):
        await _listening(left)
        to = left.driver.origin  # type: ignore[attr-defined]
        request = starter._start_request("addr_quick", [7], "passed", durable.StartOptions(),
                                         None)
        await starter.driver.run(lambda tx: start_in_one(tx, request, "run-passed",
                                                         starter.clock.now(), to))
        with anyio.fail_after(20):
            assert await starter.get_handle("passed").result() == 7
    assert sum(claims_b.took) == 1
    assert claims_b.heard == [None]  # the baton: the queue's wake-up, to everyone


async def _members(client: durable.Client) -> tuple[str, ...]:
    """The queue's members as a starter reads them now (`addressing.members`)."""
    from durable_postgres.addressing import members

    driver: Any = client.driver
    return members(await driver._members(client.namespace, "default", client.clock.now()))


async def test_a_sigkilled_worker_process_is_no_longer_addressed(
        pg_url: str, tmp_path: Path) -> None:
    """Two real worker processes; one gets SIGKILL. Its registration still
    looks alive (a 60 s lease), but its connections closed with it: the next
    read of the members leaves it out, and every start goes to the survivor
    and runs long before the survivor's 30 s fallback poll could find it."""
    procs = [spawn_worker(pg_url, tmp_path, name=f"w{i}", lease=30.0, poll=30.0)
             for i in range(2)]
    try:
        async with durable.connect(pg_url) as starter:
            with anyio.fail_after(60):
                while len(await _members(starter)) < 2:  # registered and connected
                    await anyio.sleep(0.05)
            handle = await starter.start("crash_local_run", "warm", 1, "step", id="warm")
            with anyio.fail_after(25):  # addressed to one of the two, which takes it
                assert await handle.result() == ["s0:warm"], logs(tmp_path)
            kill9(procs[0])
            with anyio.fail_after(20):  # its connections close with it
                while len(await _members(starter)) > 1:
                    await anyio.sleep(0.05)
            assert any(w["alive"] for w in await starter.list_workers()
                       if w["pid"] == procs[0].pid)  # its registration does not know
            driver: Any = starter.driver
            driver.addressing.forget()  # read the members at the next start (else: 1 s)
            handles = [await starter.start("crash_local_run", f"k{i}", 1, "step", id=f"k{i}")
                       for i in range(4)]
            with anyio.fail_after(20):
                for i, h in enumerate(handles):
                    assert await h.result() == [f"s0:k{i}"], logs(tmp_path)
            assert driver.addressing._known[(starter.namespace, "default")][1] == (
                await _members(starter))
    finally:
        for proc in procs:
            kill9(proc)


# -- a process's own commits of new work (`Addressing.peek`, `Tx.addressee`) --


async def _known(*clients: durable.Client, queue: str = "default") -> None:
    """As the watching driver's upkeep does once a commit found the queue's
    members unknown (`Addressing.refresh_due`), now: each client knows every
    process of the queue."""
    for client in clients:
        driver: Any = client.driver
        driver.addressing.forget()  # (what a start read before may be a member short)
        assert driver.addressing.peek(client.namespace, queue, client.clock.now()) is None
        await driver.addressing.refresh_due()
        assert driver.addressing._known[(client.namespace, queue)][1]


def _origin(client: durable.Client) -> str:
    driver: Any = client.driver
    return str(driver.origin)


async def test_a_parents_children_stay_with_its_process_and_wake_no_other(
        pg_url: str) -> None:
    """Each child's start is committed by a process whose worker takes the
    queue's runs: it is addressed there (no notification at all), so the
    other process hears nothing of it; without addressing it heard each."""
    async with (_process(pg_url) as (a, claims_a, worker_a),
                _process(pg_url) as (b, claims_b, worker_b),
                durable.connect(pg_url) as starter):
        await _known(a, b)
        handle = await starter.start(parent, "kids", 6, False, id="parent")
        with anyio.fail_after(20):  # long before either worker's poll
            assert await handle.result() == list(range(6))
        batons = worker_a.runs.spread + worker_b.runs.spread
    assert set(claims_a.heard) <= {_origin(a), None} and set(claims_b.heard) <= {_origin(b), None}
    assert len([to for to in claims_a.heard + claims_b.heard if to is not None]) == 1  # its start
    assert (claims_a.heard + claims_b.heard).count(None) <= batons  # a burst's baton only
    assert sum(claims_a.took) + sum(claims_b.took) == 7  # each run claimed once


async def test_new_work_from_a_process_without_the_queues_worker_goes_to_its_members_in_turn(
        pg_url: str) -> None:
    """The parent's process has no worker of the children's queue: each child
    goes to one of that queue's processes in turn, which hears only its own."""
    async with (durable.connect(pg_url, poll_interval=SLOW_POLL) as home,
                durable.Worker(home, workflows=[parent], poll_interval=SLOW_POLL),
                _process(pg_url, task_queue="kids") as (a, claims_a, _),
                _process(pg_url, task_queue="kids") as (b, claims_b, _)):
        await _listening(home)
        await _known(home, queue="kids")
        handle = await home.start(parent, "turns", 6, False, "kids", id="parent")
        with anyio.fail_after(20):  # long before either worker's poll
            assert await handle.result() == list(range(6))
        driver: Any = home.driver
        assert set(driver.addressing._known[(home.namespace, "kids")][1]) == {
            _origin(a), _origin(b)}
    assert claims_a.heard == [_origin(a)] * 3  # in turn: half each, none to the other
    assert claims_b.heard == [_origin(b)] * 3
    assert sum(claims_a.took) + sum(claims_b.took) == 6


async def test_a_full_process_passes_the_children_it_keeps_to_the_others(
        pg_url: str) -> None:
    """Its one slot holds the parent: the children it addresses to itself
    are passed to the other process by the baton, long before any poll (it
    keeps the parent: no putting it down to take the children)."""
    async with _process(pg_url, max_concurrent_runs=1, release_waiting_runs=False) as (
            a, _, worker_a):
        handle = await a.start(parent, "passed", 2, True, id="parent")
        with anyio.fail_after(20):  # the queue's only member yet: held here
            while "parent" not in {r.workflow_id for r in _held(worker_a)}:
                await anyio.sleep(0.01)
        async with _process(pg_url) as (b, claims_b, _):
            await _known(a, b)
            spread = worker_a.runs.spread
            await handle.signal("go")
            with anyio.fail_after(20):
                assert await handle.result() == [0, 1]
            assert worker_a.runs.spread > spread  # it passed the baton
            assert sum(claims_b.took) == 2  # and the other took both


async def test_a_continued_run_stays_with_its_process(pg_url: str) -> None:
    async with (_process(pg_url) as (a, claims_a, worker_a),
                _process(pg_url) as (b, claims_b, worker_b)):
        await _known(a, b)
        handle = await a.start(again, 5, id="again")
        with anyio.fail_after(20):  # six runs, each woken at once
            assert await handle.result() == 0
        batons = worker_a.runs.spread + worker_b.runs.spread
    heard = claims_a.heard + claims_b.heard
    assert set(claims_a.heard) <= {_origin(a), None} and set(claims_b.heard) <= {_origin(b), None}
    assert len([to for to in heard if to is not None]) <= 1  # its start, if it went over
    assert heard.count(None) <= batons


async def test_a_schedules_fires_stay_with_the_process_that_fires_them(pg_url: str) -> None:
    from durable.schedules import Overlap, ScheduleSpec

    async with (_process(pg_url) as (a, claims_a, worker_a),
                _process(pg_url) as (b, claims_b, worker_b)):
        await _known(a, b)
        schedule = await a.create_schedule("addr-fires", ScheduleSpec(every=86400), quick, 1,
                                           overlap=Overlap.ALLOW_ALL)
        fired = []
        for _ in range(4):
            fired.append((await schedule.trigger())["workflow_id"])
            await anyio.sleep(0.002)  # a trigger a millisecond apart is another fire
        with anyio.fail_after(20):
            for workflow_id in fired:
                assert await a.get_handle(workflow_id).result() == 1
        await schedule.delete()
        batons = worker_a.runs.spread + worker_b.runs.spread
    assert claims_a.heard == []  # its own commits
    assert claims_b.heard.count(None) <= batons  # nothing, but a baton
    assert set(claims_b.heard) <= {None}


async def test_the_watching_driver_reads_the_members_a_commit_found_unknown(
        pg_url: str) -> None:
    """Off the step's path: a commit that found them unknown told everybody,
    and the watching driver's upkeep reads them (`KEEP_EVERY`) for the next."""
    async with _process(pg_url) as (a, _, _):
        driver: Any = a.driver
        driver.addressing.forget()
        reads = driver.addressing.reads
        assert driver.addressing.peek(a.namespace, "default", a.clock.now()) is None
        with anyio.fail_after(20):
            while (a.namespace, "default") not in driver.addressing._known:
                await anyio.sleep(0.01)
        assert driver.addressing.reads == reads + 1
        assert driver.addressing.peek(a.namespace, "default", a.clock.now()) == _origin(a)


async def test_a_run_put_down_on_a_timer_is_announced_when_it_falls_due(pg_url: str) -> None:
    """A full process put a run down on its timer (durable/_runtime/relief.py)
    and cannot take it back when the timer falls due (its one slot holds a run
    it cannot put down: an activity attempt is its wait): its watchdog tells
    the other processes of the queue, and one takes it long before its poll."""
    async with _process(pg_url, max_concurrent_runs=1) as (a, _, worker_a):
        napping = await a.start(nap, 2.0, id="nap")
        with anyio.fail_after(20):
            while (await napping.describe()).get("waiting_for") is None:
                await anyio.sleep(0.01)
        blocker = await a.start(stuck, id="stuck")
        with anyio.fail_after(20):  # it took the blocker and put the napping run down
            while worker_a.relief.released < 1 or "stuck" not in {
                    r.workflow_id for r in _held(worker_a)}:
                await anyio.sleep(0.01)
        async with _process(pg_url) as (_, claims_b, _):
            with anyio.fail_after(10):  # announced at its instant: no poll (60 s) comes first
                assert await napping.result() == "rested"
            assert sum(claims_b.took) >= 1
        assert [r.workflow_id for r in _held(worker_a)] == ["stuck"]
        await blocker.terminate()
