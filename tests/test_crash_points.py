"""`durable.testing` crash points: stop a worker abruptly at a named point and resume."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.testing import crash_at, crashed, declare_dead

pytestmark = pytest.mark.anyio

EFFECTS: dict[str, list[str]] = {}


@activity.defn(name="cp_effect")
async def effect(key: str, what: str) -> str:
    EFFECTS.setdefault(key, []).append(what)
    return what


@workflow.defn(name="cp_flow")
async def flow(key: str, local: bool) -> list[str]:
    out = []
    async with workflow.phase("first"):
        if local:
            out.append(await workflow.execute_local_activity(effect, key, "a"))
        else:
            out.append(await workflow.execute_activity(effect, key, "a"))
    async with workflow.phase("second"):
        out.append(await workflow.execute_activity(effect, key, "b"))
    return out


@workflow.defn(name="cp_cleanup")
async def cleanup_flow(key: str) -> str:
    try:
        await workflow.sleep(3600)
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(effect, key, "cleanup")
    return "not cancelled"


async def resume(client: durable.Client, make_worker: Any, handle: Any) -> Any:
    async with make_worker(workflows=[flow, cleanup_flow], activities=[effect]):
        with anyio.fail_after(30):
            return await handle.result()


@pytest.mark.parametrize("local", [False, True])
async def test_a_crash_after_the_effect_runs_the_step_once_more(
    client: durable.Client, make_worker: Any, local: bool,
) -> None:
    key = f"after-effect-{local}-{id(client)}"
    worker = crash_at(make_worker(workflows=[flow, cleanup_flow], activities=[effect]),
                      "after_effect")
    async with worker:
        handle = await client.start(flow, key, local, id=key)
        assert await crashed(worker) == "after_effect"
    assert worker.crashed_at == "after_effect"
    assert EFFECTS[key] == ["a"]  # the effect happened; its result was never recorded
    await declare_dead(client, worker)
    assert await resume(client, make_worker, handle) == ["a", "b"]
    assert EFFECTS[key] == ["a", "a", "b"]  # at least once: "a" ran again, "b" once


async def test_a_crash_between_phases_resumes_with_the_next_phase(
    client: durable.Client, make_worker: Any,
) -> None:
    key = f"between-{id(client)}"
    worker = crash_at(make_worker(workflows=[flow, cleanup_flow], activities=[effect]),
                      "between_phases")
    async with worker:
        handle = await client.start(flow, key, False, id=key)
        await crashed(worker)
    await declare_dead(client, worker)
    assert await resume(client, make_worker, handle) == ["a", "b"]
    assert EFFECTS[key] == ["a", "b"]  # nothing ran twice: phase one was recorded
    types = [e.type for e in await handle.history()]
    assert types.count("PhaseStarted") == 2 and types.count("PhaseCompleted") == 2


async def test_a_crash_during_shielded_cleanup_finishes_the_cleanup_once_resumed(
    client: durable.Client, make_worker: Any,
) -> None:
    key = f"cleanup-{id(client)}"
    worker = crash_at(make_worker(workflows=[flow, cleanup_flow], activities=[effect]),
                      "cleanup")
    async with worker:
        handle = await client.start(cleanup_flow, key, id=key)
        with anyio.fail_after(20):
            while "TimerScheduled" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.02)
        await handle.request_cancellation(reason="stop", cleanup_timeout=60)
        await crashed(worker)
    assert EFFECTS.get(key) is None  # crashed before the cleanup activity was sent
    await declare_dead(client, worker)
    with pytest.raises(durable.WorkflowCancelled):
        await resume(client, make_worker, handle)
    assert EFFECTS[key] == ["cleanup"]


async def test_a_crash_before_the_close_replays_to_the_same_result(
    client: durable.Client, make_worker: Any,
) -> None:
    key = f"close-{id(client)}"
    worker = crash_at(make_worker(workflows=[flow, cleanup_flow], activities=[effect]),
                      "before_close")
    async with worker:
        handle = await client.start(flow, key, False, id=key)
        await crashed(worker)
    assert (await handle.describe())["status"] == "running"
    await declare_dead(client, worker)
    assert await resume(client, make_worker, handle) == ["a", "b"]
    assert EFFECTS[key] == ["a", "b"]


async def test_unknown_crash_points_are_refused(client: durable.Client) -> None:
    worker = durable.Worker(client, workflows=[flow])
    with pytest.raises(durable.ConfigurationError, match="crash points must be some of"):
        crash_at(worker, "somewhere")
