"""A full worker puts down runs that only wait (durable/_runtime/relief.py).

Parents awaiting children on their own task queue filled every slot of every
worker and nothing progressed (decision (ak): 8 parents on 2 workers x 2
slots completed no run). Now a full worker with ready work hands such a run
back, claimable again only once something it waits on happened
(durable/store/parked.py), and takes the ready run in its slot. On every
driver (the release is one program above the driver seam): SQLite,
PostgreSQL, the stepwise test driver and MariaDB (asyncio; tests/conftest.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest

import durable
from durable import workflow
from durable._runtime.claiming import Trigger
from durable.driver import ex, q1
from durable.errors import StorageUnavailable
from durable.present import holder
from durable.store.parked import Parked, Released
from durable.testing import TimeSkippingEnvironment
from tests.comparable_history import comparable_history

pytestmark = pytest.mark.anyio

@workflow.defn(name="relief_child")
async def relief_child(n: int) -> int:
    return n * 2


@workflow.defn(name="relief_parent")
async def relief_parent(n: int) -> int:
    me = workflow.info().workflow_id
    first: int = await workflow.execute_child(relief_child, n, id=f"{me}-a")
    second: int = await workflow.execute_child(relief_child, first, id=f"{me}-b")
    return second


@workflow.defn(name="relief_gated_child")
class GatedChild:
    """Waits for a signal: a run put down on its child stays down meanwhile."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def open(self) -> None:
        self.go = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.go)
        return "opened"


@workflow.defn(name="relief_gated_parent")
async def relief_gated_parent() -> str:
    result: str = await workflow.execute_child(GatedChild, id="gate")
    return f"parent of {result}"


@workflow.defn(name="relief_side_parent")
async def relief_side_parent() -> str:
    result: str = await workflow.execute_child(
        GatedChild, id="gate", options=durable.ChildOptions(task_queue="side"))
    return f"parent of {result}"


@workflow.defn(name="relief_quick")
async def relief_quick() -> str:
    return "quick"


@workflow.defn(name="relief_waiter")
class Waiter:
    """Waits for a signal (a condition): what a delivery racing its release reaches."""

    def __init__(self) -> None:
        self.got: list[str] = []

    @workflow.signal
    def note(self, text: str) -> None:
        self.got.append(text)

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: bool(self.got))
        return self.got


@workflow.defn(name="relief_sleeper")
async def relief_sleeper(n: int) -> int:
    await workflow.sleep(60)
    await workflow.sleep(30)
    return n


async def until_waiting(handle: durable.WorkflowHandle) -> None:
    """Until the run waits on an op (its describe() names it): a poll of storage."""
    while (await handle.describe()).get("waiting_for") is None:
        await anyio.sleep(0.01)


def released_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "'run_released_under_pressure'" in r.getMessage()]


async def _row(client: durable.Client, workflow_id: str) -> dict[str, Any]:
    """The run's owner and ready_at, as storage has them."""
    run_id = (await client.get_handle(workflow_id).describe())["run"]["run_id"]

    def read(tx: Any) -> Any:
        row = yield q1("SELECT owner, ready_at, epoch FROM runs WHERE run_id = ?", run_id)
        return dict(row)

    result: dict[str, Any] = await client.store.driver.run(read, write=False)
    return result


async def test_parents_awaiting_children_on_a_full_queue_all_complete(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """The trial of decision (ak): 8 parents, 2 workers x 2 slots; every run
    completes, and each run's history is the one it has without pressure."""
    caplog.set_level(logging.INFO, logger="durable.worker")
    calm = [await storage_client.start(relief_parent, i, id=f"calm-{i}") for i in range(8)]
    async with durable.Worker(storage_client, workflows=[relief_parent, relief_child],
                              max_concurrent_runs=100):
        with anyio.fail_after(30):
            assert [await h.result() for h in calm] == [i * 4 for i in range(8)]
    busy = [await storage_client.start(relief_parent, i, id=f"busy-{i}") for i in range(8)]
    held: list[int] = []
    workers = [durable.Worker(storage_client, workflows=[relief_parent, relief_child],
                              max_concurrent_runs=2) for _ in range(2)]
    async with workers[0], workers[1]:
        with anyio.fail_after(60):
            results = []
            for h in busy:
                results.append(await h.result())
                held.extend(len(w.executors) for w in workers)
    assert results == [i * 4 for i in range(8)]
    assert max(held) <= 2
    assert sum(w.relief.released for w in workers) > 0
    assert released_lines(caplog)
    assert not [r for r in caplog.records if "worker_slots_all_waiting" in r.getMessage()]
    for i in range(8):
        for suffix in ("", "-a", "-b"):
            calm_handle = storage_client.get_handle(f"calm-{i}{suffix}")
            busy_handle = storage_client.get_handle(f"busy-{i}{suffix}")
            assert (await comparable_history(busy_handle, "busy")
                    == await comparable_history(calm_handle, "calm")), (i, suffix)


async def test_a_pass_puts_several_runs_down_at_once(storage_client: durable.Client) -> None:
    """One worker, 4 slots, 20 parents: passes put down several runs together
    (their executors end in any order), and the runs that turn ready together
    are taken without waiting for a fallback poll (slow polls here)."""
    handles = [await storage_client.start(relief_parent, i, id=f"many-{i}") for i in range(20)]
    async with durable.Worker(storage_client, workflows=[relief_parent, relief_child],
                              max_concurrent_runs=4, poll_interval=60) as worker:
        most = 0
        real = worker.store.release_parked

        async def counted(worker_id: str, runs: list[Parked], now: float) -> list[Released]:
            nonlocal most
            most = max(most, len(runs))
            return await real(worker_id, runs, now)

        worker.store.release_parked = counted  # type: ignore[method-assign]
        with anyio.fail_after(30):
            assert [await h.result() for h in handles] == [i * 4 for i in range(20)]
    assert worker.failure is None
    assert most > 1


async def test_a_run_put_down_is_not_claimed_again_before_its_wait_ends(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """A parent put down on its child stays unclaimable, and the views say it
    waits on its child with no worker holding it, until the child closes."""
    caplog.set_level(logging.INFO, logger="durable.worker")
    parent = await storage_client.start(relief_gated_parent, id="parent")
    async with durable.Worker(storage_client,
                              workflows=[relief_gated_parent, GatedChild],
                              max_concurrent_runs=1) as worker:
        with anyio.fail_after(20):
            while worker.relief.released < 1 or "gate" not in {
                    e.run.workflow_id for e in worker.executors.values()}:
                await worker.runs.claim_now()
                await anyio.sleep(0.01)
            # the child holds the one slot, parked on its condition; the parent is down
            child = storage_client.get_handle("gate")
            await until_waiting(child)
        row = await _row(storage_client, "parent")
        assert row["owner"] is None and row["ready_at"] is None, row
        for _ in range(5):  # claim passes: nothing claims the parent
            await worker.runs.claim_now()
            assert [e.run.workflow_id for e in worker.executors.values()] == ["gate"]
        info = await parent.describe()
        assert info["status"] == "running"
        assert info["run"]["owner"] is None
        assert info["waiting_for"]["kind"] == "child", info["waiting_for"]
        assert info["waiting_for"]["child_workflow_id"] == "gate"
        assert await holder(info, storage_client.list_workers) is None  # no "held by"
        [gauges] = await storage_client.store.queue_gauges(storage_client.clock.now())
        assert (gauges["runs_parked"], gauges["runs_running"], gauges["runs_waiting"]) == (
            1, 1, 0), gauges
        [line] = released_lines(caplog)
        assert "waiting_on=['child']" in line and "when an op it waits on ends" in line, line
        await child.signal("open")
        with anyio.fail_after(20):
            assert await parent.result() == "parent of opened"


async def test_a_signal_that_races_the_release_is_not_lost(
    storage_client: durable.Client,
) -> None:
    """A signal recorded after the worker stopped the run's executor and before
    its hand-back committed: the hand-back sees it and leaves the run
    claimable at once; the run takes the signal and completes."""
    waiter = await storage_client.start(Waiter, id="waiter")
    seen: list[Released] = []
    async with durable.Worker(storage_client, workflows=[Waiter, relief_quick],
                              max_concurrent_runs=1) as worker:
        real = worker.store.release_parked

        async def racing(worker_id: str, runs: list[Parked], now: float) -> list[Released]:
            await waiter.signal("note", "raced")  # committed before the hand-back
            result = await real(worker_id, runs, now)
            seen.extend(result)
            return result

        worker.store.release_parked = racing  # type: ignore[method-assign]
        with anyio.fail_after(20):
            await until_waiting(waiter)
            quick = await storage_client.start(relief_quick, id="quick")
            assert await quick.result() == "quick"
            assert await waiter.result() == ["raced"]
    assert [(r.run_id, r.because) for r in seen] == [(waiter.run_id, "signal")]
    types = [e.type for e in await waiter.history()]
    assert "SignalReceived" in types and "SignalDelivered" in types


async def test_a_child_that_closes_during_the_release_is_not_lost(
    storage_client: durable.Client,
) -> None:
    """The child (on another queue) closes after the executor stopped and before
    the hand-back: the hand-back finds its op closed and leaves the parent
    claimable at once; it completes."""
    parent = await storage_client.start(relief_side_parent, id="parent")
    seen: list[Released] = []
    async with durable.Worker(storage_client, workflows=[GatedChild], task_queue="side"), \
            durable.Worker(storage_client, workflows=[relief_side_parent, relief_quick],
                           max_concurrent_runs=1) as worker:
        child = storage_client.get_handle("gate")
        with anyio.fail_after(20):
            await until_waiting(parent)
        real = worker.store.release_parked

        async def racing(worker_id: str, runs: list[Parked], now: float) -> list[Released]:
            await child.signal("open")
            await child.result()  # the child closed, and the parent's op with it
            result = await real(worker_id, runs, now)
            seen.extend(result)
            return result

        worker.store.release_parked = racing  # type: ignore[method-assign]
        with anyio.fail_after(20):
            quick = await storage_client.start(relief_quick, id="quick")
            assert await quick.result() == "quick"
            assert await parent.result() == "parent of opened"
    assert [(r.run_id, r.because) for r in seen] == [(parent.run_id, "op_closed")]


async def test_storage_failing_during_the_release_leaves_the_run_to_be_taken_again(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """The hand-back's transaction fails: the run is handed back as after an
    error (claimable at once once storage answers), never left owned by an
    executor that is gone; it completes."""
    caplog.set_level(logging.WARNING, logger="durable.worker")
    waiter = await storage_client.start(Waiter, id="waiter")
    async with durable.Worker(storage_client, workflows=[Waiter, relief_quick],
                              max_concurrent_runs=1) as worker:
        real = worker.store.release_parked
        failed = anyio.Event()

        async def failing(worker_id: str, runs: list[Parked], now: float) -> list[Released]:
            if not failed.is_set():
                failed.set()
                raise StorageUnavailable("the database went away (test)")
            return await real(worker_id, runs, now)

        worker.store.release_parked = failing  # type: ignore[method-assign]
        with anyio.fail_after(20):
            await until_waiting(waiter)
            quick = await storage_client.start(relief_quick, id="quick")
            assert await quick.result() == "quick"
            await failed.wait()
            await waiter.signal("note", "after")
            assert await waiter.result() == ["after"]
    assert worker.relief.failed == 1
    assert any("run_release_failed" in r.getMessage() for r in caplog.records)


async def test_runs_put_down_on_timers_are_taken_again_when_they_fall_due(
    db_url: str,
) -> None:
    """Virtual time: three sleepers on one slot. Each is put down on its timer
    for the next, claimable at the timer's instant (which the watchdog of the
    worker that put it down wakes for), and all complete."""
    async with TimeSkippingEnvironment(db_url) as env:
        worker = env.worker(workflows=[relief_sleeper], max_concurrent_runs=1)
        async with worker:
            handles = [await env.client.start(relief_sleeper, i, id=f"sleeper-{i}")
                       for i in range(3)]
            with anyio.fail_after(30):
                assert [await env.run(h.result) for h in handles] == [0, 1, 2]
        assert worker.relief.released >= 2


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_the_release_can_be_turned_off(storage_client: durable.Client) -> None:
    """``release_waiting_runs=False``: a full worker keeps its waiting runs."""
    parent = await storage_client.start(relief_gated_parent, id="parent")
    async with durable.Worker(storage_client, workflows=[relief_gated_parent, GatedChild],
                              max_concurrent_runs=1, release_waiting_runs=False) as worker:
        with anyio.fail_after(10):
            while not worker.slots.wanted:
                await worker.runs.claim_now()
        for _ in range(3):
            await worker.runs.claim_now()
        assert [e.run.workflow_id for e in worker.executors.values()] == ["parent"]
        assert worker.relief.released == 0
    assert (await parent.describe())["status"] == "running"
    with pytest.raises(durable.ConfigurationError, match="release_waiting_runs"):
        durable.Worker(storage_client, workflows=[relief_quick],
                       release_waiting_runs="yes")  # type: ignore[arg-type]


async def test_the_hand_back_leaves_a_run_claimable_exactly_when_its_wait_ends(
    storage_client: durable.Client,
) -> None:
    """`Store.release_parked` on its own: a run that waits for an event is not
    claimable until it comes; one whose op closed, or that has a signal, an
    update or a cancellation waiting, is claimable at once; one with a timer
    is claimable at its instant; a run another worker or epoch holds is left
    alone."""
    store, clock, ns = storage_client.store, storage_client.clock, storage_client.namespace

    async def claim(workflow_id: str) -> list[Any]:
        claimed = await store.claim_runs(ns, "default", "w", ("relief_quick",), 10, 30.0,
                                         clock.now())
        return [c for c in claimed if c.run.workflow_id == workflow_id]

    async def put_down(run: Any, waits_on: tuple[str, ...] = (),
                       worker_id: str = "w") -> Released:
        [result] = await store.release_parked(worker_id, [Parked(run.run_id, run.epoch,
                                                                 waits_on)], clock.now())
        return result

    await storage_client.start(relief_quick, id="plain")
    [c] = await claim("plain")
    assert (await put_down(c.run, worker_id="other")).lost
    assert (await put_down(replace(c.run, epoch=c.run.epoch + 1))).lost
    waits = await put_down(c.run)
    assert (waits.lost, waits.ready_at, waits.because) == (False, None, None)
    assert not await claim("plain")  # nothing it waits on happened
    row = await _row(storage_client, "plain")
    assert (row["owner"], row["ready_at"], row["epoch"]) == (None, None, c.run.epoch + 1)
    await store.send_signal(ns, "plain", None, "note", '["x"]', clock.now())
    [c] = await claim("plain")  # the signal made it claimable
    assert (await put_down(c.run, ("0:1",))).because == "op_closed"  # an op not open
    [c] = await claim("plain")
    assert (await put_down(c.run)).because == "signal"  # still to be delivered

    await storage_client.start(relief_quick, id="updated")
    [c] = await claim("updated")
    await put_down(c.run)
    await store.submit_request(ns, "updated", None, "update", "set", "[]", "u-1", clock.now())
    [c] = await claim("updated")
    assert (await put_down(c.run)).because == "update"

    await storage_client.start(relief_quick, id="cancelled")
    [c] = await claim("cancelled")
    await put_down(c.run)
    await store.request_cancellation(ns, "cancelled", None, "test", 30.0, None, "client",
                                     clock.now())
    [c] = await claim("cancelled")
    assert (await put_down(c.run)).because == "cancellation"

    await storage_client.start(relief_quick, id="sleeping")
    [c] = await claim("sleeping")
    fire_at = clock.now() + 3600

    def timer(tx: Any) -> Any:
        yield ex("INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, fire_at) "
                 "VALUES (?, '0:1', 'timer', 'sleep', 'scheduled', ?, ?)",
                 c.run.run_id, clock.now(), fire_at)

    await storage_client.store.driver.run(timer)
    due = await put_down(c.run, ("0:1",))
    assert (due.because, due.ready_at) == ("due", fire_at)
    assert not await claim("sleeping")  # not before the timer's instant


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres"])
async def test_operators_see_the_runs_a_worker_put_down_and_it_claims_for_them_only_recently(
    db_url: str,
) -> None:
    """``durable workers``, ``/api/workers``, the UI's Workers page and /metrics
    show per worker the runs it put down, in all and in the last `RECENT`
    seconds, and when last, from its registry row (written at its renewal).
    While it put runs down recently a run's end makes it claim again when its
    last claim left ready work; a minute later not (that work is others': on
    PostgreSQL addressed to another process). The lifetime count said yes for
    ever after one put-down."""
    from test_ui_http import VIEWER, Browserless, _app
    from test_workers import run_cli

    from durable._runtime.relief import RECENT
    from durable.clock import VirtualClock
    from durable.present import runs_released_text, utcnow

    clock = VirtualClock()
    async with durable.connect(db_url, clock=clock) as client:
        parent = await client.start(relief_gated_parent, id="parent")
        async with durable.Worker(client, workflows=[relief_gated_parent, GatedChild],
                                  max_concurrent_runs=1, identity="relieving") as worker:
            with anyio.fail_after(20):
                while worker.relief.released < 1 or "gate" not in {
                        e.run.workflow_id for e in worker.executors.values()}:
                    await worker.runs.claim_now()
                    await anyio.sleep(0.01)
            await worker.presence.register(worker.lease_seconds * 2, clock.now())
            [listed] = await client.list_workers()
            assert listed["runs_released"] == {
                "count": 1, "recent": 1, "window_seconds": RECENT, "failed": 0,
                "last_at": listed["runs_released"]["last_at"]}
            assert listed["runs_released"]["last_at"] == durable.clock.to_iso(
                worker.relief.last_at)
            url = str(client.driver.url)  # type: ignore[attr-defined]
            human = " ".join((await anyio.to_thread.run_sync(run_cli, url, "workers")).split())
            transport = httpx.ASGITransport(app=_app(client), raise_app_exceptions=False)
            as_viewer = {"Authorization": f"Bearer {VIEWER}"}
            async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
                api = (await http.get("/api/workers", headers={
                    **as_viewer, "X-Durable-Workflow-Control-Plane-Version": "2"})).json()
                metrics = (await http.get("/metrics", headers=as_viewer)).text
                await Browserless(http, client).login(VIEWER)
                page = (await http.get("/ui/workers")).text
            assert "put down 1 run in all, 1 in the last 1m before its last renewal; last " in (
                human), human
            assert api["workers"][0]["runs_released"]["count"] == 1
            labels = f'namespace="default",queue="default",worker_id="{worker.worker_id}"'
            assert f"durable_worker_runs_released_total{{{labels}}} 1.0" in metrics, metrics
            assert 'data-runs-released="1" data-released-recently="1"' in page, page

            # a run's end, with room (not "it was full") and ready work its last
            # claim left: it claims again (the claim loop's own trigger is kept
            # aside meanwhile, so that what sets this one is only the run's end)
            loop_trigger, worker.max_concurrent_runs = worker.runs.trigger, 3
            worker.runs.left = 2
            gone = SimpleNamespace(run=SimpleNamespace(run_id="elsewhere"), needs_release=False,
                                   stop_reason=None)
            worker.runs.trigger = Trigger()
            worker._run_done(gone)  # type: ignore[arg-type]
            assert worker.runs.trigger.pending
            # a minute later: put down long ago, it leaves that work to others
            clock.advance_to(clock.now() + RECENT + 1)
            worker.runs.trigger = Trigger()
            worker._run_done(gone)  # type: ignore[arg-type]
            assert not worker.runs.trigger.pending
            worker.runs.trigger, worker.max_concurrent_runs = loop_trigger, 1
            worker.runs.left = 0
            await worker.presence.register(worker.lease_seconds * 2, clock.now())
            [listed] = await client.list_workers()
            assert (listed["runs_released"]["count"], listed["runs_released"]["recent"]) == (1, 0)
            assert runs_released_text(listed["runs_released"], utcnow()).startswith(
                "1 run in all, none in the last 1m before its last renewal; last ")
            await client.get_handle("gate").signal("open")
            with anyio.fail_after(20):
                assert await parent.result() == "parent of opened"
