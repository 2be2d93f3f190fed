"""What an open run waits for (issue 21): describe()["waiting_for"] and the
CLI's words for it; progress that rounds down."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from rich.console import Console

import durable
from durable import activity, workflow
from durable import present as _fmt
from durable.cli import _views
from durable.cli._app import Output
from durable.http.model import describe_to_wire
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

GATE: dict[str, anyio.Event] = {}


@pytest.fixture
async def env(db_url: str, driver_name: str) -> AsyncIterator[TimeSkippingEnvironment]:
    if driver_name != "sqlite":
        pytest.skip("describe reads storage alike on every driver: SQLite suffices")
    async with TimeSkippingEnvironment("sqlite://:memory:", auto_skip=False) as environment:
        yield environment


@activity.defn(name="wf-held")
async def held(key: str) -> str:
    await GATE[key].wait()
    return key


@workflow.defn(name="wf-waits")
async def waits(how: str, key: str) -> Any:
    if how == "timer":
        await workflow.sleep(3600)
    elif how == "condition":
        await workflow.wait_condition(lambda: False, timeout=600)
    elif how == "forever":
        await workflow.wait_condition(lambda: False)
    elif how == "nobody":
        await workflow.execute_activity("wf-held", key, options=durable.ActivityOptions(
            task_queue="nobody-serves-this", start_to_close_timeout=60))
    else:
        await workflow.execute_activity(held, key, options=durable.ActivityOptions(
            start_to_close_timeout=60))
    return how


async def waiting(env: TimeSkippingEnvironment, handle: durable.WorkflowHandle,
                  kind: str | None) -> dict[str, Any]:
    """Until describe() says the run waits for `kind` (None: busy); polls storage."""
    with anyio.fail_after(10):
        while True:
            info = await handle.describe()
            found = info["waiting_for"]
            if (found is None and kind is None and info["pending_operations"]) or (
                    found is not None and found.get("kind") == kind):
                return info
            await anyio.sleep(0.01)


def shown(info: dict[str, Any]) -> str:
    console = Console(width=220, record=True, file=__import__("io").StringIO())
    console.print(_views.describe_renderable(Output(), info, _fmt.utcnow()))
    return console.export_text()


@pytest.mark.parametrize("how, kind, words", [
    ("timer", "timer", "a timer, which fires"),
    ("condition", "condition", "or its timeout"),
    ("forever", "condition", "with no timeout"),
    ("nobody", "activity_worker", "which no live worker serves"),
])
async def test_describe_says_what_an_open_run_waits_for(
        env: TimeSkippingEnvironment, how: str, kind: str, words: str) -> None:
    async with env.worker(workflows=[waits], activities=[held]):
        handle = await env.client.start(waits, how, "k", id=f"waits-{how}")
        info = await waiting(env, handle, kind)
    found = info["waiting_for"]
    if how == "timer":
        assert found["fire_at"] == info["pending_operations"][0]["fire_at"]
    if how == "condition":
        assert found["timeout_at"] is not None
    if how == "forever":
        assert found["timeout_at"] is None
    if how == "nobody":
        assert (found["activity"], found["queue"]) == ("wf-held", "nobody-serves-this")
    text = shown(info)
    assert words in text, text
    # the reference's fields on the HTTP wire say the same
    wire = describe_to_wire(info)
    assert wire["wait_kind"] == {"timer": "timer", "condition": "condition",
                                 "forever": "condition", "nobody": "activity"}[how]
    assert isinstance(wire["wait_reason"], str) and wire["wait_reason"].startswith("Waiting for")
    if how == "condition":  # a condition's timeout does not "fire"
        assert "times out" in text and "fires" not in text


async def test_a_run_whose_activity_runs_is_busy_not_waiting(
        env: TimeSkippingEnvironment) -> None:
    GATE["busy"] = anyio.Event()
    async with env.worker(workflows=[waits], activities=[held]):
        handle = await env.client.start(waits, "busy", "busy", id="waits-busy")
        with anyio.fail_after(10):
            while not any(op.get("task_status") == "running" for op in
                          (await handle.describe())["pending_operations"]):
                await anyio.sleep(0.01)
        info = await handle.describe()
        assert info["waiting_for"] is None
        assert "nothing: it is busy" in shown(info)
        assert (describe_to_wire(info)["wait_kind"], describe_to_wire(info)["wait_reason"]) == (
            None, None)
        GATE["busy"].set()
        assert await env.run(handle.result) == "busy"


def test_progress_rounds_down() -> None:
    console = Console(width=120, record=True, file=__import__("io").StringIO())
    console.print(_views.progress_bar(Output(), 199, 200, width=20))
    text = console.export_text()
    assert "199/200 (99%)" in text and ("░" in text or "-" in text)


async def test_the_runs_list_tells_waiting_from_busy(env: TimeSkippingEnvironment) -> None:
    GATE["list"] = anyio.Event()
    async with env.worker(workflows=[waits], activities=[held]):
        sleeper = await env.client.start(waits, "timer", "x", id="list-timer")
        worker = await env.client.start(waits, "busy", "list", id="list-busy")
        await waiting(env, sleeper, "timer")
        with anyio.fail_after(10):
            while not any(op.get("task_status") == "running" for op in
                          (await worker.describe())["pending_operations"]):
                await anyio.sleep(0.01)
        runs = {r["workflow_id"]: r["waiting"] for r in await env.client.list()}
        assert runs == {"list-timer": True, "list-busy": False}
        GATE["list"].set()
        await env.run(worker.result)
    assert {r["workflow_id"]: r["waiting"] for r in await env.client.list()}[
        "list-busy"] is None  # closed: neither


async def test_a_worker_logs_the_runs_it_resumed(
        env: TimeSkippingEnvironment, caplog: pytest.LogCaptureFixture) -> None:
    """An application restarted (under uvicorn, say) says it took up its
    unfinished runs: one `run_resumed` line per run started before."""
    import logging
    caplog.set_level(logging.INFO, logger="durable.worker")
    handle = await env.client.start(waits, "timer", "r", id="resumed-1")
    async with env.worker(workflows=[waits], activities=[held]):
        await waiting(env, handle, "timer")
    assert "run_resumed" not in caplog.text  # a fresh run is not a resumed one
    async with env.worker(workflows=[waits], activities=[held]):
        with anyio.fail_after(10):
            while "run_resumed" not in caplog.text:
                await anyio.sleep(0.01)
    line = next(r.getMessage() for r in caplog.records if "run_resumed" in r.getMessage())
    assert "resumed-1" in line and "recorded_ops" in line


@pytest.mark.parametrize("waiting, kind, words", [
    ({"kind": "queue_slot", "queue": "pay", "running": 3, "limit": 3}, "workflow-task",
     "a slot on queue pay (3 of 3 running)"),
    ({"kind": "key_slot", "queue": "pay", "concurrency_key": "c-1", "running": 1, "limit": 1},
     "workflow-task", "a slot of key c-1 on queue pay"),
    ({"kind": "rate", "queue": "pay", "rate": {"count": 1, "per": 60},
      "next_start_at": "2026-01-01T00:00:00+00:00"}, "workflow-task",
     "the rate limit of queue pay"),
    ({"kind": "worker", "queue": "q", "workflow_type": "t", "live_workers": 0}, "workflow-task",
     "no live worker of queue q registers t"),
    ({"kind": "child", "op_id": "1", "child_workflow_id": "c", "child_status": None}, "child",
     "child workflow c (not started)"),
    ({"kind": "review", "status": "needs_review", "hint": "durable retry-after-review x"},
     "workflow-task", "review"),
    (None, None, None),
])
def test_wait_kind_and_reason_on_the_wire_come_from_waiting_for(
        waiting: dict[str, Any] | None, kind: str | None, words: str | None) -> None:
    found = _fmt.wait_of(waiting)
    assert found[0] == kind
    assert (found[1] is None) if words is None else (words in str(found[1])), found
