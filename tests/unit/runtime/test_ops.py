"""Durable ops: record once, wait for the outcome, replay it without going live again."""

from __future__ import annotations

import anyio
import pytest

from durable import ActivityFailed, ActivityOptions, RetryPolicy, VirtualClock, activity, workflow
from durable.store import Store
from durable.store.records import OpKind, OpRecord, OpStatus, RunStatus
from durable.store.writes import CloseRun, ScheduleChild

from ._support import T0, Recorder, claimed, executor, run_record, run_to_end, setup

pytestmark = pytest.mark.anyio


@activity.defn(name="unit_ops_charge")
async def charge(amount: int) -> str:
    return f"charged {amount}"


@workflow.defn(name="unit_ops_pay")
async def pay(amount: int) -> str:
    opts = ActivityOptions(retry=RetryPolicy(max_attempts=1))
    result: str = await workflow.execute_activity(charge, amount, options=opts)
    return result


@workflow.defn(name="unit_ops_napper")
async def napper() -> float:
    await workflow.sleep(60)
    return workflow.now().timestamp()


@workflow.defn(name="unit_ops_parent")
async def parent() -> str:
    handle = await workflow.start_child("unit_ops_kid", 1)
    return handle.workflow_id


async def complete_attempts(store: Store, queue: str, *, fail: bool = False) -> int:
    """Play the remote worker: claim the attempts of `queue` and record outcomes."""
    from durable.failure import Failure

    done = 0
    for task in await store.claim_activities("default", queue, "w2", ("unit_ops_charge",),
                                             10, 60.0, T0):
        failure = Failure("application", "card declined") if fail else None
        await store.complete_activity(task.task_id, task.attempt, "w2",
                                      None if fail else '"charged 5"', failure, T0 + 1)
        done += 1
    return done


async def test_an_activity_is_scheduled_once_and_its_recorded_result_returned(
        store: Store) -> None:
    async with claimed(store, pay, 5, workflow_id="pay-1") as ex:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_to_end, ex)
            with anyio.fail_after(10):
                while not await complete_attempts(store, "pay-1"):
                    await anyio.sleep(0.01)
    run = await store.get_run("default", "pay-1")
    assert run is not None and run.result == '"charged 5"'
    kinds = [e.type for e in await store.history(run.run_id)]
    assert kinds.count("ActivityScheduled") == 1 and "ActivityCompleted" in kinds


async def test_an_activitys_recorded_failure_is_raised_at_its_await(store: Store) -> None:
    async with claimed(store, pay, 5, workflow_id="pay-2") as ex:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_to_end, ex)
            with anyio.fail_after(10):
                while not await complete_attempts(store, "pay-2", fail=True):
                    await anyio.sleep(0.01)
    run = await store.get_run("default", "pay-2")
    assert run is not None and run.status == RunStatus.FAILED
    assert run.failure is not None and run.failure.exception_class == (
        f"{ActivityFailed.__module__}.ActivityFailed")


async def test_replay_returns_recorded_outcomes_without_recording_them_again() -> None:
    recorder = Recorder()
    history = {"0:1": OpRecord("0:1", OpKind.TIMER, "sleep", OpStatus.COMPLETED, None, None,
                               T0, T0 + 60)}
    clock = VirtualClock(T0)  # the engine clock has not moved: only the record says when
    ex = executor(napper, run_record("unit_ops_napper"), setup(recorder, clock=clock),
                  ops=history)
    await run_to_end(ex)
    [[close]] = recorder.submitted  # no ScheduleTimer, no FireTimer: only the close
    assert isinstance(close, CloseRun) and close.result == str(T0 + 60)  # recorded time


async def test_a_child_gets_a_deterministic_id_from_its_parent_and_op() -> None:
    recorder = Recorder()
    ex = executor(parent, run_record("unit_ops_parent", workflow_id="order-7"),
                  setup(recorder))
    async with anyio.create_task_group() as tg:
        tg.start_soon(ex.execute)
        with anyio.fail_after(10):
            while not recorder.submitted:
                await anyio.wait_all_tasks_blocked()
        ex.stop("done looking")
    [[schedule]] = recorder.submitted[:1]
    assert isinstance(schedule, ScheduleChild)
    assert schedule.request.workflow_id == "order-7/0:1"
    assert schedule.request.parent_run_id == "r1" and schedule.request.parent_op_id == "0:1"
