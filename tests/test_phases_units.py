"""Durable phases and idempotent units (issue [8/8]) on every driver and host."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

HOUR = 3600.0
RUNS: dict[str, list[str]] = {}
GATES: dict[str, threading.Event] = {}
FIXED = {"on": False}  # a code fix deployed between two workers


def ran(key: str, what: str) -> None:
    RUNS.setdefault(key, []).append(what)


@pytest.fixture
async def env(db_url: str) -> AsyncIterator[TimeSkippingEnvironment]:
    if db_url.startswith("sqlite:"):
        url = "sqlite://:memory:"
    elif db_url.startswith("sqlite-"):
        url = db_url.split(":", 1)[0] + "://:memory:"
    else:
        url = db_url
    async with TimeSkippingEnvironment(url) as environment:
        yield environment


# ---------------------------------------------------------------- definitions


@activity.defn(name="pu_slow")
async def slow(key: str, seconds: float) -> str:
    await activity.sleep(seconds)  # virtual time under the environment
    ran(key, "slow")
    return "slow done"


@activity.defn(name="pu_step")
def step(item: dict[str, Any]) -> str:
    ran(item["run"], item["id"])
    if item.get("gate"):
        while not GATES[item["gate"]].wait(0.02):
            activity.check_cancelled()
    while item.get("hang") and not FIXED["on"]:
        time.sleep(0.02)  # past its start-to-close: its effect cannot be confirmed
        activity.check_cancelled()
    return f"done {item['id']}"


@workflow.defn(name="pu_phases")
async def phases(key: str, work: float, limit: float, catch: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with workflow.phase("read", limit=HOUR) as read:
        out["read_deadline"] = read.deadline is not None
        await workflow.sleep(60)
    try:
        async with workflow.phase("import", limit=limit):
            out["import"] = await workflow.execute_activity(slow, key, work)
    except durable.PhaseTimedOut as exc:
        if not catch:
            raise
        out["import"] = f"timed out in {exc.phase}"
    async with workflow.phase("write"):
        out["write"] = "ok"
    return out


@workflow.defn(name="pu_sleepy_phase")
async def sleepy_phase(limit: float, sleep: float) -> str:
    try:
        async with workflow.phase("wait", limit=limit):
            await workflow.sleep(sleep)
    except durable.PhaseTimedOut:
        return "capped"
    return "slept"


@workflow.defn(name="pu_nested")
async def nested() -> list[Any]:
    async with workflow.phase("outer", limit=100):
        async with workflow.phase("inner", limit=HOUR) as inner:
            left = workflow.remaining()
            return [inner.limit, left <= 100]


@workflow.defn(name="pu_held")
async def held(key: str) -> str:
    async with workflow.phase("hold", limit=HOUR):
        await workflow.sleep(HOUR / 2)
    return "released"


@workflow.defn(name="pu_no_phase_when_cancelled")
async def no_phase_when_cancelled() -> str:
    try:
        await workflow.sleep(HOUR)
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                try:
                    async with workflow.phase("late"):
                        pass
                except durable.BudgetCancelled:
                    await workflow.sleep(1)  # proof the refusal left the shield usable
    return "not cancelled"


@workflow.defn(name="pu_units")
async def units_wf(run: str, ids: list[str], gate: str | None, hang: list[str],
                   concurrency: int, stc: float = 2.0) -> dict[str, Any]:
    items = [{"run": run, "id": i, "gate": gate if i == "u3" else None, "hang": i in hang}
             for i in ids]
    result = await workflow.units(
        items, key=lambda item: item["id"], handler=step, concurrency=concurrency,
        options=durable.ActivityOptions(start_to_close_timeout=stc, max_attempts=3))
    return {"done": result.done, "failed": sorted(result.failed)}


@workflow.defn(name="pu_dup_units")
async def dup_units() -> str:
    try:
        await workflow.units([1, 2, 1], key=str, handler=step)
    except durable.ConfigurationError as exc:
        return f"refused: {exc}"
    return "accepted"


async def history_types(handle: durable.WorkflowHandle) -> list[str]:
    return [e.type for e in await handle.history()]


# ---------------------------------------------------------------- phases


async def test_phases_record_their_start_and_outcome(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[phases], activities=[slow]):
        out = await env.client.execute(phases, "p1", 10.0, 600.0, True, id="p1")
    assert out == {"read_deadline": True, "import": "slow done", "write": "ok"}
    history = await env.client.get_handle("p1").history()
    started = [e.data["phase"] for e in history if e.type == "PhaseStarted"]
    assert started == ["read", "import", "write"]
    assert [e.type for e in history].count("PhaseCompleted") == 3
    info = await env.client.get_handle("p1").describe()
    assert info["phase"] is None and info["status"] == "completed"


async def test_an_op_inside_a_phase_gets_only_the_time_the_phase_has_left(
    env: TimeSkippingEnvironment,
) -> None:
    """The activity has no timeout of its own; inside a 10-minute phase it gets 10
    minutes: it times out there and the phase raises PhaseTimedOut, which the
    workflow catches and goes on with the next phase."""
    async with env.worker(workflows=[phases], activities=[slow]):
        out = await env.client.execute(phases, "p2", 2 * HOUR, 600.0, True, id="p2")
    assert out["import"] == "timed out in import" and out["write"] == "ok"
    history = await env.client.get_handle("p2").history()
    scheduled = next(e for e in history if e.type == "ActivityScheduled")
    assert scheduled.data["schedule_to_close_timeout"] <= 600.0
    timed_out = [e for e in history if e.type == "PhaseTimedOut"]
    assert timed_out and timed_out[0].data["phase"] == "import"
    assert timed_out[0].data["failure"]["timeout_kind"] == "phase"


async def test_an_uncaught_phase_time_out_ends_the_run_timed_out_with_kind_phase(
    env: TimeSkippingEnvironment,
) -> None:
    async with env.worker(workflows=[phases], activities=[slow]):
        handle = await env.client.start(phases, "p3", 2 * HOUR, 600.0, False, id="p3")
        with pytest.raises(durable.WorkflowTimedOut) as err:
            await handle.result()
    assert err.value.timeout_kind == "phase"
    assert err.value.failure["phase"] == "import"
    info = await handle.describe()
    assert info["status"] == "timed_out"
    assert "import" in info["reason"] and "phase" in info["reason"]


async def test_a_durable_sleep_never_outlasts_its_phase(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[sleepy_phase]):
        assert await env.client.execute(sleepy_phase, 60.0, HOUR, id="capped") == "capped"
        assert await env.client.execute(sleepy_phase, HOUR, 60.0, id="fits") == "slept"
    history = await env.client.get_handle("capped").history()
    fired = next(e for e in history if e.type == "TimerScheduled")
    started = next(e for e in history if e.type == "PhaseStarted")
    assert fired.data["fire_at"] == started.data["deadline_at"]


async def test_an_inner_phase_never_outlasts_the_outer_one(
    env: TimeSkippingEnvironment,
) -> None:
    async with env.worker(workflows=[nested]):
        assert await env.client.execute(nested, id="nested") == [HOUR, True]
    history = await env.client.get_handle("nested").history()
    outer, inner = [e.data for e in history if e.type == "PhaseStarted"]
    assert inner["deadline_at"] <= outer["deadline_at"]


async def test_describe_shows_the_running_phase_and_its_deadline(
    env: TimeSkippingEnvironment,
) -> None:
    env.auto_skip = False
    async with env.worker(workflows=[held]):
        handle = await env.client.start(held, "h", id="held")
        with anyio.fail_after(20):
            while (await handle.describe())["phase"] is None:
                await anyio.sleep(0.02)
        phase = (await handle.describe())["phase"]
        assert phase["name"] == "hold" and phase["deadline_at"] is not None
        await env.sleep(HOUR)
        assert await handle.result() == "released"


async def test_no_phase_starts_after_a_delivered_cancellation(
    env: TimeSkippingEnvironment,
) -> None:
    env.auto_skip = False
    async with env.worker(workflows=[no_phase_when_cancelled]):
        handle = await env.client.start(no_phase_when_cancelled, id="late-phase")
        with anyio.fail_after(20):
            while "TimerScheduled" not in await history_types(handle):
                await anyio.sleep(0.02)
        await handle.request_cancellation(reason="stop", cleanup_timeout=600)
        with pytest.raises(durable.WorkflowCancelled):
            await env.run(handle.result)
    assert "PhaseStarted" not in await history_types(handle)


async def test_phases_replay_the_same_after_a_restart(client: durable.Client,
                                                      make_worker: Any) -> None:
    """A worker stops in the middle of a phase; the next one replays the recorded
    phase (same deadline, no second PhaseStarted) and finishes it."""
    async with make_worker(workflows=[sleepy_phase]):
        handle = await client.start(sleepy_phase, 600.0, 1.0, id="replayed-phase")
        with anyio.fail_after(20):
            while "TimerScheduled" not in await history_types(handle):
                await anyio.sleep(0.02)
    async with make_worker(workflows=[sleepy_phase]):
        with anyio.fail_after(20):
            assert await handle.result() == "slept"
    types = await history_types(handle)
    assert types.count("PhaseStarted") == 1 and types.count("PhaseCompleted") == 1


# ---------------------------------------------------------------- units


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_units_run_once_each_and_come_back_by_key(
    client: durable.Client, make_worker: Any, concurrency: int,
) -> None:
    run = f"units-{concurrency}-{id(client)}"
    ids = ["u1", "u2", "u3", "u4"]
    async with make_worker(workflows=[units_wf], activities=[step]):
        out = await client.execute(units_wf, run, ids, None, [], concurrency, id=run)
    assert out["done"] == {i: f"done {i}" for i in ids} and out["failed"] == []
    assert sorted(RUNS[run]) == ids
    history = await client.get_handle(run).history()
    assert [e.data["total"] for e in history if e.type == "UnitsStarted"] == [4]
    assert any(e.type == "UnitsCompleted" for e in history)


async def test_a_restart_skips_confirmed_units_and_shows_progress(
    client: durable.Client, make_worker: Any,
) -> None:
    run = f"restart-{id(client)}"
    gate = f"gate-{run}"
    GATES[gate] = threading.Event()
    ids = ["u1", "u2", "u3", "u4", "u5"]
    handle = await client.start(units_wf, run, ids, gate, [], 1, 60.0, id=run)
    async with make_worker(workflows=[units_wf], activities=[step], shutdown_grace=0.2):
        with anyio.fail_after(20):
            while RUNS.get(run, []) != ["u1", "u2", "u3"]:
                await anyio.sleep(0.02)
        progress = (await handle.describe())["progress"]
        assert progress == {"done": 2, "total": 5, "handler": "pu_step"}
    GATES[gate].set()
    async with make_worker(workflows=[units_wf], activities=[step]):
        with anyio.fail_after(20):
            out = await handle.result()
    assert sorted(out["done"]) == ids
    assert RUNS[run].count("u1") == 1 and RUNS[run].count("u2") == 1  # never run again
    assert RUNS[run].count("u4") == 1 and RUNS[run].count("u5") == 1
    assert (await handle.describe())["progress"] is None


async def test_a_unit_whose_effect_cannot_be_confirmed_sends_the_run_to_review(
    client: durable.Client, make_worker: Any,
) -> None:
    """u2's call runs past its start-to-close timeout: nobody knows whether it took
    effect, so it is not retried; the run waits for an operator (status unknown),
    who confirms it; the run then completes without running u2 again."""
    run = f"unknown-{id(client)}"
    handle = await client.start(units_wf, run, ["u1", "u2", "u3"], None, ["u2"], 1, id=run)
    async with make_worker(workflows=[units_wf], activities=[step]):
        with anyio.fail_after(30):
            while (await handle.describe())["status"] != "unknown":
                await anyio.sleep(0.05)
        info = await handle.describe()
        assert "u2" in info["reason"] and "could not be confirmed" in info["reason"]
        with pytest.raises(durable.ConfigurationError, match="units='rerun'"):
            await handle.retry_after_review()
        assert await handle.retry_after_review(units="confirm")
        with anyio.fail_after(30):
            out = await handle.result()
    assert out["done"] == {"u1": "done u1", "u2": None, "u3": "done u3"}
    assert RUNS[run].count("u2") == 1  # confirmed, never run again
    types = await history_types(handle)
    assert "UnitConfirmed" in types and "ActivityRetryScheduled" not in types


async def test_an_operator_may_have_unknown_units_run_again(
    client: durable.Client, make_worker: Any,
) -> None:
    run = f"rerun-{id(client)}"
    handle = await client.start(units_wf, run, ["u1", "u2"], None, ["u2"], 1, id=run)
    async with make_worker(workflows=[units_wf], activities=[step]):
        with anyio.fail_after(30):
            while (await handle.describe())["status"] != "unknown":
                await anyio.sleep(0.05)
    # the operator found that u2 had no effect, and the fixed code no longer hangs
    FIXED["on"] = True
    try:
        async with make_worker(workflows=[units_wf], activities=[step]):
            assert await handle.retry_after_review(units="rerun")
            with anyio.fail_after(30):
                out = await handle.result()
    finally:
        FIXED["on"] = False
    assert out["done"]["u2"] == "done u2"
    assert RUNS[run].count("u2") == 2 and RUNS[run].count("u1") == 1
    assert "UnitRerunApproved" in await history_types(handle)


async def test_unit_keys_must_be_unique(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[dup_units], activities=[step]):
        out = await client.execute(dup_units, id="dups")
    assert out.startswith("refused: unit keys must be unique")
