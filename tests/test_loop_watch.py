"""A blocked event loop is noticed and named (`durable._runtime.loop_watch`).

The case behind it: an ``async def`` activity called ``requests.get`` (or
``time.sleep``) in a worker embedded in a web app. The whole application
froze, deadlines fired seconds late, another worker took the runs over when
the leases lapsed, and neither the logs nor the views said why. Now the
worker logs ``event_loop_blocked`` while the loop is blocked, naming the
workflow or activity, its run and the line it is stuck on, then
``event_loop_unblocked`` with how long it lasted; and ``durable workers``,
the Workers page and ``/api/workers`` show the last block.

The blocking code below blocks until the watch has seen this very block
(naming its run), then raises the watch's threshold so that nothing else
counts as a block afterwards (explicit hooks): the tests hold on a loaded
machine, where the loop may also stall on its own for a tenth of a second.
They never bet on a sleep outlasting the watch's look.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from test_ui_http import VIEWER, Browserless, _app
from test_workers import run_cli

import durable
from durable import activity, workflow
from durable._runtime.loop_watch import LoopBlock, LoopWatch, codes_of, describe
from durable.errors import ConfigurationError
from durable.present import loop_blocked_text, utcnow
from durable.testing import isolated_definitions

pytestmark = pytest.mark.anyio

#: the watch of the worker under test (the blocking code waits until it has looked)
WATCHES: list[LoopWatch] = []


def seen(watch: LoopWatch, run_id: str) -> bool:
    last = watch.last
    return last is not None and last.run_id == run_id and not last.ended


#: runs whose code blocked once (a run taken again after its lease lapsed replays
#: its code: that replay does not block)
BLOCKED: set[str] = set()


def block_until_seen(run_id: str) -> None:
    """Block the calling thread (the event loop's) until the watch has reported
    this block (of `run_id`); after it, only this block counts."""
    if run_id in BLOCKED:
        return
    BLOCKED.add(run_id)
    watch = WATCHES[-1]
    give_up = time.monotonic() + 60
    while not seen(watch, run_id) and time.monotonic() < give_up:
        time.sleep(0.005)
    watch.threshold = 3600.0  # the loop may stall on a loaded box: not a block of ours


#: the worker whose leases the blocking code outlasts
LEASED: list[durable.Worker] = []


def block_past_the_lease(run_id: str) -> None:
    """Block the loop until the watch saw it and the worker's leases lapsed."""
    worker = LEASED[-1]
    if run_id in BLOCKED:
        return
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up and (
            time.monotonic() < worker.renewed_at + worker.lease_seconds + 0.05):
        time.sleep(0.005)
    block_until_seen(run_id)


with isolated_definitions():
    @workflow.defn(name="loop_outlasts_lease")
    async def outlasts_the_lease() -> str:
        block_past_the_lease(workflow.info().run_id)
        return "late"

    @workflow.defn(name="loop_blocker")
    async def loop_blocker() -> str:
        block_until_seen(workflow.info().run_id)
        return "unblocked"

    @activity.defn(name="loop_blocking_fetch")
    async def blocking_fetch(url: str) -> str:
        block_until_seen(activity.info().run_id)  # as a sync HTTP client in an async def would
        return url

    @workflow.defn(name="loop_fetcher")
    async def fetcher() -> str:
        result: str = await workflow.execute_activity(blocking_fetch, "https://example.test")
        return result

    @workflow.defn(name="loop_polite")
    async def polite() -> str:
        await workflow.sleep(0.01)
        return "polite"


@contextlib.asynccontextmanager
async def watched(client: durable.Client, **options: Any) -> AsyncIterator[durable.Worker]:
    """A worker whose loop watch looks after 0.3 s; the blocking code waits for it.

    Not 0.1 s: a stall of the loop's own on a loaded box (0.165 s in a CI run,
    anyio's trio test runner in its I/O wait) that runs straight into the
    blocking code is one block to the watch, reported once and named by where
    the loop was when it looked, not by the run; the run's code then waited
    for a report naming it that could not come (the watch reports a block
    once). A stall of its own rarely lasts 0.3 s."""
    async with durable.Worker(client, poll_interval=0.1, loop_block_warning=0.3,
                              **options) as worker:
        assert worker.loop_watch is not None
        WATCHES.append(worker.loop_watch)
        yield worker


def loop_lines(caplog: pytest.LogCaptureFixture, event: str, run_id: str) -> list[str]:
    """The lines of `event` about the block of `run_id` (a loaded box may log others)."""
    return [r.getMessage() for r in caplog.records
            if r.name == "durable.worker" and f"'{event}'" in r.getMessage()
            and run_id in r.getMessage()]


async def ended(watch: LoopWatch, run_id: str) -> LoopBlock:
    """The block of `run_id` once the loop has turned again (the beat ends it);
    no block is counted after it (`block_until_seen`)."""
    with anyio.fail_after(30):
        while watch.last_ended is None or watch.last_ended.run_id != run_id:
            await anyio.sleep(0.01)
    return watch.last_ended


async def test_a_workflow_that_blocks_the_loop_is_named_while_it_blocks(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    async with watched(storage_client, workflows=[loop_blocker]) as worker:
        assert worker.loop_watch is not None
        handle = await storage_client.start(loop_blocker, id="blocks-the-loop")
        assert await handle.result() == "unblocked"
        run_id = handle.run_id
        block = await ended(worker.loop_watch, run_id)
        [blocked] = loop_lines(caplog, "event_loop_blocked", run_id)
        [unblocked] = loop_lines(caplog, "event_loop_unblocked", run_id)
        for line in (blocked, unblocked):
            assert f"workflow 'loop_blocker' blocks-the-loop (run {run_id})" in line, line
            assert "test_loop_watch.py" in line and "in block_until_seen" in line, line
        assert "has been blocked for" in blocked and "anyio.to_thread.run_sync" in blocked
        assert "was blocked for" in unblocked
        # far shorter than a lease (15 s): nothing lapsed, and it says nothing of it
        assert "leases_lapsed=False" in unblocked and "lapsed meanwhile" not in unblocked
        assert (block.workflow_type, block.run_id, block.ended) == ("loop_blocker", run_id, True)
        count = worker.loop_watch.count  # 1, unless the loop stalled on its own before
        assert block.seconds >= 0.1 and count >= 1
        # recorded at the next renewal: what `durable workers` and the UI read
        await worker.presence.register(worker.lease_seconds * 2, worker.clock.now())
        [listed] = await storage_client.list_workers()
        recorded = listed["loop_blocked"]
        assert (recorded["count"], recorded["workflow_type"], recorded["run_id"]) == (
            count, "loop_blocker", run_id)
        assert "block_until_seen" in recorded["where"] and recorded["seconds"] >= 0.1
        assert recorded["started_at"].endswith("+00:00")


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_an_async_activity_that_blocks_is_named_with_its_run(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    async with watched(storage_client, workflows=[fetcher],
                       activities=[blocking_fetch]) as worker:
        assert worker.loop_watch is not None
        handle = await storage_client.start(fetcher, id="fetches-blocking")
        assert await handle.result() == "https://example.test"
        block = await ended(worker.loop_watch, handle.run_id)
    assert (block.activity_type, block.run_id) == ("loop_blocking_fetch", handle.run_id)
    [blocked] = loop_lines(caplog, "event_loop_blocked", handle.run_id)
    assert (f"activity 'loop_blocking_fetch' of workflow fetches-blocking (run {handle.run_id})"
            in blocked), blocked


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_loop_that_keeps_turning_reports_nothing(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    async with durable.Worker(storage_client, workflows=[polite], poll_interval=0.1,
                              loop_block_warning=5.0) as worker:
        handle = await storage_client.start(polite, id="polite")
        assert await handle.result() == "polite"
        assert worker.loop_watch is not None and worker.loop_watch.count == 0
        await worker.presence.register(worker.lease_seconds * 2, worker.clock.now())
        [listed] = await storage_client.list_workers()
    assert listed["loop_blocked"] is None
    assert loop_lines(caplog, "event_loop_blocked", "") == []


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_block_that_outlasts_the_leases_says_other_workers_may_take_its_runs(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    async with watched(storage_client, workflows=[outlasts_the_lease, polite],
                       lease_seconds=0.5) as worker:
        LEASED.append(worker)
        assert worker.loop_watch is not None
        handle = await storage_client.start(outlasts_the_lease, id="outlasts")
        await ended(worker.loop_watch, handle.run_id)
        await handle.result()
    [unblocked] = loop_lines(caplog, "event_loop_unblocked", handle.run_id)
    assert "its leases lapsed meanwhile (last renewed" in unblocked, unblocked
    assert ("a lease lasts 0.5s): other workers may have taken over the 1 run or activity "
            "attempt it held, which it then stops") in unblocked
    assert "leases_lapsed=True" in unblocked


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "durable-loop-watch"]


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_the_watch_thread_ends_with_the_worker_and_can_be_turned_off(
    storage_client: durable.Client,
) -> None:
    before = len(watch_threads())
    async with durable.Worker(storage_client, workflows=[polite], poll_interval=0.1):
        with anyio.fail_after(10):
            while len(watch_threads()) == before:
                await anyio.sleep(0.01)
    with anyio.fail_after(10):  # it ends at its next look (a quarter of a second)
        while len(watch_threads()) > before:
            await anyio.sleep(0.01)
    async with durable.Worker(storage_client, workflows=[polite], poll_interval=0.1,
                              loop_block_warning=None) as worker:
        assert worker.loop_watch is None
        await anyio.lowlevel.checkpoint()
        assert len(watch_threads()) == before


@pytest.mark.parametrize("driver_name", ["sqlite"])
@pytest.mark.parametrize("value", [0, -1, "2", True, float("nan")])
async def test_a_bad_threshold_is_refused_at_the_call(
    storage_client: durable.Client, value: Any,
) -> None:
    with pytest.raises(ConfigurationError, match="Worker loop_block_warning"):
        durable.Worker(storage_client, workflows=[polite], loop_block_warning=value)


@pytest.fixture
async def ui(storage_client: durable.Client) -> AsyncIterator[Browserless]:
    transport = httpx.ASGITransport(app=_app(storage_client), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        yield Browserless(http, storage_client)


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_the_views_show_the_last_block(
    storage_client: durable.Client, ui: Browserless, tmp_path: Path,
) -> None:
    await ui.login(VIEWER)
    async with watched(storage_client, workflows=[loop_blocker], identity="blocked") as worker:
        assert worker.loop_watch is not None
        handle = await storage_client.start(loop_blocker, id="blocks-for-the-views")
        await handle.result()
        await ended(worker.loop_watch, handle.run_id)
        times = "once" if worker.loop_watch.count == 1 else f"{worker.loop_watch.count} times"
        await worker.presence.register(worker.lease_seconds * 2, worker.clock.now())
        url = str(storage_client.driver.url)  # type: ignore[attr-defined]
        human = await anyio.to_thread.run_sync(run_cli, url, "workers")
        data = json.loads(await anyio.to_thread.run_sync(run_cli, url, "workers", "--json"))
        page = await ui.http.get("/ui/workers")
        as_viewer = {"Authorization": f"Bearer {VIEWER}"}
        api = (await ui.http.get("/api/workers", headers={
            **as_viewer, "X-Durable-Workflow-Control-Plane-Version": "2"})).json()
        metrics = (await ui.http.get("/metrics", headers=as_viewer)).text
        labels = f'namespace="default",queue="default",worker_id="{worker.worker_id}"'
    after = (await ui.http.get("/metrics", headers=as_viewer)).text
    flat = " ".join(human.split())
    assert f"event loop blocked {times}; last for" in flat, human
    assert f"by workflow 'loop_blocker' blocks-for-the-views (run {handle.run_id})" in flat, human
    assert data["workers"][0]["loop_blocked"]["run_id"] == handle.run_id
    assert "data-loop-blocked" in page.text and f"event loop blocked {times}" in page.text
    assert api["workers"][0]["loop_blocked"]["run_id"] == handle.run_id
    assert f"durable_worker_event_loop_blocks{{{labels}}} " in metrics, metrics
    assert f"durable_worker_event_loop_last_block_seconds{{{labels}}}" in metrics
    assert 'durable_workers{namespace="default",queue="default",state="alive"} 1.0' in metrics
    # stopped: gone, none alive, and no block series for a worker that is gone
    assert 'durable_workers{namespace="default",queue="default",state="alive"} 0.0' in after
    assert 'durable_workers{namespace="default",queue="default",state="gone"} 1.0' in after
    assert "durable_worker_event_loop_blocks{" not in after


def test_describe_names_the_innermost_frame_of_user_code_and_the_activity() -> None:
    def charge(amount: int) -> LoopBlock:
        return describe(sys._getframe(), 100.0, 2.5, codes_of({}, {"charge": Holder(charge)}))

    block = charge(3)
    assert block.activity_type == "charge" and block.workflow_type is None
    assert block.where is not None and "in charge" in block.where
    assert block.stack[0] == block.where and not block.ended


class Holder:
    def __init__(self, fn: Any) -> None:
        self.fn = fn


def test_the_text_of_a_block() -> None:
    now = utcnow()
    record = LoopBlock(started_at=now.timestamp() - 180, seconds=4.1, ended=True,
                       where="app.py:12 in order", workflow_type="order", run_id="r1",
                       workflow_id="o-1", activity_type="charge").as_record(2)
    assert loop_blocked_text(record | {"started_at": now.isoformat()}, now) == (
        "event loop blocked 2 times; last for 4.1s, now, by activity 'charge' of workflow "
        "o-1 (run r1) at app.py:12 in order")
    assert loop_blocked_text({**record, "activity_type": None}, now) == (
        "event loop blocked 2 times; last for 4.1s, 3m ago, by workflow 'order' o-1 (run r1) "
        "at app.py:12 in order")
    assert loop_blocked_text(None, now) is None
    alone = {"count": 1, "seconds": 0.25, "started_at": None, "where": None}
    assert loop_blocked_text(alone, now) == (
        "event loop blocked once; last for 250ms, by code outside the worker's workflows "
        "and activities")


def test_where_is_the_users_line_that_called_into_a_library() -> None:
    """A loop blocked inside a library (a socket read under an HTTP client) is
    placed at the user's line that called it; the stack keeps the rest."""
    captured: list[Any] = []

    def hook(value: Any) -> Any:
        captured.append(sys._getframe(1))  # json's own frame, as if it blocked there
        return value

    json.loads('{"a": 1}', object_hook=hook)
    block = describe(captured[0], 100.0, 2.5, {})
    assert "json" in block.stack[0] and "test_loop_watch.py" not in block.stack[0]
    assert block.where is not None
    assert block.where.endswith("in test_where_is_the_users_line_that_called_into_a_library")
