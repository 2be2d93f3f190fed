"""The executor: one claimed run replayed, continued live and closed, with no worker."""

from __future__ import annotations

import pytest

from durable import VirtualClock, workflow
from durable._runtime.executor import RunExecutor
from durable.store import Store
from durable.store.records import OpKind, OpRecord, OpStatus, RunStatus
from durable.store.writes import CloseRun, ScheduleTimer

from ._support import T0, Recorder, claimed, executor, run_record, run_to_end, setup

pytestmark = pytest.mark.anyio


@workflow.defn(name="unit_rt_sum")
async def add(a: int, b: int) -> int:
    return a + b


@workflow.defn(name="unit_rt_nap")
async def nap(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "rested"


@workflow.defn(name="unit_rt_broken")
async def broken() -> None:
    raise LookupError("no such order")


@workflow.defn(name="unit_rt_counter")
class Counter:
    """A class-based workflow: a fresh instance per run, its methods the handlers."""

    def __init__(self) -> None:
        self.count = 0

    @workflow.run
    async def run(self, start: int) -> int:
        self.count = start
        return self.count

    @workflow.query
    def current(self) -> int:
        return self.count


async def test_a_run_executes_and_is_closed_with_its_result(store: Store) -> None:
    async with claimed(store, add, 2, 3) as ex:
        await run_to_end(ex)
    run = await store.get_run("default", "wf-1")
    assert run is not None and run.status == RunStatus.COMPLETED and run.result == "5"
    assert not ex.needs_release and ex.stop_reason is None


async def test_a_timer_is_recorded_then_fired_at_its_time_on_the_engine_clock(
        store: Store) -> None:
    clock = VirtualClock(T0)
    async with claimed(store, nap, 30.0, clock=clock) as ex:
        await run_to_end(ex, clock)
    run = await store.get_run("default", "wf-1")
    assert run is not None and run.result == '"rested"'
    assert run.closed_at == T0 + 30.0  # workflow time moved exactly to the timer
    kinds = [e.type for e in await store.history(run.run_id)]
    assert kinds.index("TimerScheduled") < kinds.index("TimerFired") < kinds.index(
        "WorkflowCompleted")


async def test_the_workflows_own_error_closes_the_run_failed(store: Store) -> None:
    async with claimed(store, broken) as ex:
        await run_to_end(ex)
    run = await store.get_run("default", "wf-1")
    assert run is not None and run.status == RunStatus.FAILED
    assert run.failure is not None and run.failure.category == "application"
    assert "no such order" in (run.failure.message or "")


async def test_each_run_of_a_class_workflow_gets_a_fresh_instance_and_its_handlers() -> None:
    recorder = Recorder()
    instances = []
    for run_id in ("r1", "r2"):
        ex = executor(Counter, run_record("unit_rt_counter", "[7]", run_id=run_id),
                      setup(recorder))
        await run_to_end(ex)
        instances.append(ex.ctx.instance)
        assert ex.ctx.handlers.get("query", "current") is not None
    assert isinstance(instances[0], Counter) and instances[0] is not instances[1]
    closes = [w for batch in recorder.submitted for w in batch if isinstance(w, CloseRun)]
    assert [c.result for c in closes] == ["7", "7"]


async def test_a_run_stopped_before_it_starts_runs_no_code_and_records_nothing() -> None:
    recorder = Recorder()
    done: list[RunExecutor] = []
    ex = executor(add, run_record("unit_rt_sum", "[1, 2]"), setup(recorder), done=done)
    ex.stop("lease lost")
    await ex.execute()  # returns at once: its own scope is cancelled
    assert recorder.submitted == [] and done == [ex]
    assert ex.ctx.parking.active == 0 and ex.stop_reason == "lease lost"


async def test_a_run_past_its_deadline_is_enforced_without_running_its_code(
        store: Store) -> None:
    clock = VirtualClock(T0)
    async with claimed(store, add, 1, 1, clock=clock, execution_timeout=5.0) as ex:
        clock.advance_to(T0 + 10)
        await run_to_end(ex)
    run = await store.get_run("default", "wf-1")
    assert run is not None and run.status == RunStatus.TIMED_OUT
    assert "WorkflowCompleted" not in [e.type for e in await store.history(run.run_id)]


async def test_history_that_the_code_does_not_ask_for_again_parks_the_run_for_review() -> None:
    """A recorded op of another kind where the code now asks for a timer."""
    recorder = Recorder()
    recorded = {"0:1": OpRecord("0:1", OpKind.LOCAL_ACTIVITY, "charge", OpStatus.COMPLETED,
                                "1", None, T0, T0)}
    ex = executor(nap, run_record("unit_rt_nap", "[5]"), setup(recorder), ops=recorded)
    await run_to_end(ex)
    [[close]] = recorder.submitted
    assert isinstance(close, CloseRun) and close.needs_review
    assert close.failure is not None and close.failure.category == "non_determinism"
    assert "asked for timer 'sleep' at 0:1" in (close.failure.message or "")
    assert not any(isinstance(w, ScheduleTimer) for b in recorder.submitted for w in b)
