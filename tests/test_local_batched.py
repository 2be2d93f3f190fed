"""Batched recording of local activities (`ActivityOptions(record="batched")`).

A batched outcome is kept with the run and recorded with the run's next
commit (a durable op, a delivery, the close), when the run yields, before a
retry's backoff, or every `Worker(local_activity_batch=)` outcomes. These
tests pin where the outcomes land in storage, that replay sees what the live
run saw, and the lean path's argument handling. The SIGKILL crash tests of
both modes are in tests/test_crash.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.store.writes import RecordBatchedLocalActivity, RecordLocalActivity, RunWrites

pytestmark = pytest.mark.anyio

BATCHED = durable.ActivityOptions(record="batched")
FAST_RETRY = durable.ActivityOptions(
    record="batched", retry=durable.RetryPolicy(max_attempts=3, initial_interval=0.01))

GATES: dict[str, anyio.Event] = {}
CALLS: dict[str, int] = {}


def gate(key: str) -> anyio.Event:
    return GATES.setdefault(key, anyio.Event())


@activity.defn(name="batched_double")
async def double(i: int) -> int:
    return 2 * i


@activity.defn(name="batched_held")
async def held(key: str) -> str:
    await gate(key).wait()
    return key


@activity.defn(name="batched_flaky")
async def flaky(key: str, fail_times: int) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] <= fail_times:
        raise RuntimeError(f"failure {CALLS[key]}")
    return CALLS[key]


@activity.defn(name="batched_received")
async def received(values: list[Any], mapping: dict[str, Any], pair: tuple[int, int]
                   ) -> list[Any]:
    values.append("mutated by the activity")
    return [type(pair).__name__, mapping]


@workflow.defn(name="batched_steps")
async def steps(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(double, i, options=BATCHED)
    return total


@workflow.defn(name="batched_steps_then_hold")
async def steps_then_hold(key: str, n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(double, i, options=BATCHED)
    await workflow.execute_local_activity(held, key, options=BATCHED)
    return total


@workflow.defn(name="batched_steps_then_remote")
async def steps_then_remote(key: str, n: int) -> int:
    handle = workflow.start_activity(held, key)
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(double, i, options=BATCHED)
    await handle  # the run yields here: what it did so far is recorded
    return total


@workflow.defn(name="batched_times")
async def times(key: str) -> bool:
    await workflow.execute_local_activity(double, 1, options=BATCHED)
    first = workflow.now().isoformat()
    await workflow.execute_local_activity(double, 2, options=BATCHED)
    second = workflow.now().isoformat()
    live = await workflow.execute_local_activity(echo, [first, second], options=BATCHED)
    await workflow.execute_activity(held, key)  # the worker restarts while this waits
    return bool(live == [first, second])


@activity.defn(name="batched_echo")
async def echo(value: Any) -> Any:
    return value


@workflow.defn(name="batched_with_patch")
async def with_patch() -> bool:
    await workflow.execute_local_activity(double, 1, options=BATCHED)
    taken = workflow.patched("new-branch")
    await workflow.execute_local_activity(double, 2, options=BATCHED)
    return taken


@workflow.defn(name="batched_retries_and_failures")
async def retries_and_failures(key: str) -> list[Any]:
    first = await workflow.execute_local_activity(double, 1, options=BATCHED)
    retried = await workflow.execute_local_activity(flaky, key, 2, options=FAST_RETRY)
    try:
        await workflow.execute_local_activity(flaky, key + "-never", 99, options=FAST_RETRY)
    except durable.ActivityFailed as exc:
        failed = type(exc).__name__
    last = await workflow.execute_local_activity(double, 3, options=BATCHED)
    return [first, retried, failed, last]


@workflow.defn(name="batched_plain_arguments")
async def plain_arguments() -> list[Any]:
    values = [1, 2.5, "x", None, True]
    result = await workflow.execute_local_activity(received, values, {"a": [1, {"b": 2}]},
                                                   (3, 4))
    return [values, result]


@workflow.defn(name="batched_counter")
class Counter:
    def __init__(self) -> None:
        self.done = 0

    @workflow.run
    async def run(self, key: str, n: int) -> int:
        for i in range(n):
            await workflow.execute_local_activity(double, i, options=BATCHED)
            self.done += 1
        await workflow.execute_local_activity(held, key, options=BATCHED)
        return self.done

    @workflow.query
    def progress(self) -> int:
        return self.done


def completed(events: list[durable.HistoryEvent]) -> list[durable.HistoryEvent]:
    return [e for e in events if e.type == "ActivityCompleted" and e.data.get("local")]


async def until(predicate: Any, within: float = 10.0) -> None:
    with anyio.fail_after(within):
        while not await predicate():
            await anyio.sleep(0.02)


# ---------------------------------------------------------------- configuration


def test_record_other_than_step_or_batched_is_refused_at_the_call() -> None:
    with pytest.raises(durable.ConfigurationError, match="'step', 'batched'"):
        durable.ActivityOptions(record="bulk")
    with pytest.raises(durable.ConfigurationError, match="'step', 'batched'"):
        durable.ActivityOptions(record=1)  # type: ignore[arg-type]
    assert durable.ActivityOptions(record="step").record == "step"


async def test_worker_settings_are_validated(client: durable.Client) -> None:
    with pytest.raises(durable.ConfigurationError, match="local_activity_record"):
        durable.Worker(client, workflows=[steps], local_activity_record="sometimes")
    with pytest.raises(durable.ConfigurationError, match="local_activity_batch"):
        durable.Worker(client, workflows=[steps], local_activity_batch=0)


# ---------------------------------------------------------------- where outcomes land


async def test_batched_outcomes_are_recorded_in_the_close_transaction(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[steps], activities=[double]):
        handle = await client.start(steps, 5, id=f"close-{uuid.uuid4().hex[:8]}")
        assert await handle.result() == 20
    events = await handle.history()
    steps_done = completed(events)
    assert [e.data["result"] for e in steps_done] == [0, 2, 4, 6, 8]
    close = next(e for e in events if e.type == "WorkflowCompleted")
    # one commit: the outcomes and the close share its instant
    assert {e.recorded_at for e in steps_done} == {close.recorded_at}


async def test_a_window_of_n_outcomes_is_recorded_every_n_steps(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"window-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[steps_then_hold], activities=[double, held],
                           local_activity_batch=3):
        handle = await client.start(steps_then_hold, key, 7, id=key)

        async def six_recorded() -> bool:
            return len(completed(await handle.history())) >= 6

        await until(six_recorded)
        while key not in GATES:  # the held step runs: the 7th outcome is in memory only
            await anyio.sleep(0.01)
        assert len(completed(await handle.history())) == 6
        gate(key).set()
        assert await handle.result() == 42
    assert len(completed(await handle.history())) == 8


async def test_outcomes_are_recorded_when_the_workflow_yields(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"yield-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[steps_then_remote], activities=[double, held]):
        handle = await client.start(steps_then_remote, key, 3, id=key)

        async def three_recorded() -> bool:
            return len(completed(await handle.history())) == 3

        await until(three_recorded)  # waiting on the remote activity: nothing unrecorded
        gate(key).set()
        assert await handle.result() == 6


async def test_worker_setting_makes_batched_the_default(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"default-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[plain_steps], activities=[double],
                           local_activity_record="batched"):
        handle = await client.start(plain_steps, 3, id=key)
        assert await handle.result() == 6
    events = await handle.history()
    close = next(e for e in events if e.type == "WorkflowCompleted")
    assert {e.recorded_at for e in completed(events)} == {close.recorded_at}


@workflow.defn(name="batched_plain_steps")
async def plain_steps(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(double, i)
    return total


async def test_a_query_is_answered_only_from_recorded_outcomes(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"query-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[Counter], activities=[double, held]):
        handle = await client.start(Counter, key, 3, id=key)

        async def three_done() -> bool:
            return bool(await handle.query("progress") == 3)

        await until(three_done)
        assert len(completed(await handle.history())) == 3
        gate(key).set()
        assert await handle.result() == 3


# ---------------------------------------------------------------- replay, patches, failures


async def test_replay_sees_the_workflow_time_the_live_run_saw(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"times-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[times], activities=[double, echo, held]):
        handle = await client.start(times, key, id=key)

        async def waiting() -> bool:
            return any(e.type == "ActivityScheduled" and not e.data.get("local")
                       for e in await handle.history())

        await until(waiting)
    gate(key).set()  # a new worker replays the batched steps from their records
    async with make_worker(workflows=[times], activities=[double, echo, held]):
        assert await handle.result() is True


async def test_a_patch_marker_and_batched_outcomes_are_recorded_together(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[with_patch], activities=[double]):
        handle = await client.start(with_patch, id=f"patch-{uuid.uuid4().hex[:8]}")
        assert await handle.result() is True
    events = await handle.history()
    assert len(completed(events)) == 2
    assert any(e.type == "MarkerRecorded" for e in events), [e.type for e in events]


async def test_retries_and_failures_in_batched_mode(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"retry-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[retries_and_failures], activities=[double, flaky]):
        handle = await client.start(retries_and_failures, key, id=key)
        assert await handle.result() == [2, 3, "ActivityFailed", 6]
    events = await handle.history()
    assert len(completed(events)) == 3
    failed = [e for e in events if e.type == "ActivityFailed" and e.data.get("local")]
    assert len(failed) == 1
    # the first step was recorded before the retry's backoff, not at the close
    close = next(e for e in events if e.type == "WorkflowCompleted")
    assert completed(events)[0].recorded_at < close.recorded_at


async def test_plain_arguments_reach_the_activity_as_fresh_copies(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[plain_arguments], activities=[received]):
        result = await client.execute(plain_arguments, id=f"args-{uuid.uuid4().hex[:8]}")
    values, (pair_type, mapping) = result
    assert values == [1, 2.5, "x", None, True]  # the activity's append did not reach it
    assert pair_type == "tuple"  # rebuilt from the hint, as after a JSON round trip
    assert mapping == {"a": [1, {"b": 2}]}


# ---------------------------------------------------------------- fencing


async def test_a_batch_from_a_stale_epoch_is_refused(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"fence-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[steps_then_hold], activities=[double, held]):
        handle = await client.start(steps_then_hold, key, 0, id=key)

        async def claimed() -> bool:
            run = await client.store.get_run(client.namespace, key)
            return run is not None and run.epoch > 0

        await until(claimed)
        run = await client.store.get_run(client.namespace, key)
        assert run is not None
        stale = RecordBatchedLocalActivity(RecordLocalActivity(
            op_id="0:99", name="double", started_at=1.0, attempts=1, result="0"), 2.0)
        results = await client.store.commit([RunWrites(run.run_id, run.epoch - 1, [stale])],
                                            3.0)
        assert not results[0].committed
        gate(key).set()
        assert await handle.result() == 0
    assert [e for e in await handle.history() if e.data.get("op_id") == "0:99"] == []


async def test_an_owner_that_lost_its_lease_records_none_of_its_batch(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"lost-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[steps_then_hold], activities=[double, held],
                           lease_seconds=1.0) as worker:
        handle = await client.start(steps_then_hold, key, 3, id=key)
        while key not in GATES:  # three outcomes in memory, the held step running
            await anyio.sleep(0.02)

        def steal(tx: Any) -> Any:  # another owner took the run over
            yield durable.driver.ex("UPDATE runs SET epoch = epoch + 1 WHERE workflow_id = ?",
                                    key)
            return None

        await client.driver.run(steal)
        gate(key).set()  # the old owner's close (carrying the batch) is refused
        with anyio.fail_after(10):  # ... and it drops the run
            while worker.executors:
                await anyio.sleep(0.01)
        assert completed(await handle.history()) == []
    async with make_worker(workflows=[steps_then_hold], activities=[double, held],
                           lease_seconds=1.0):
        assert await handle.result() == 6  # the next owner re-ran the unrecorded steps
    assert len(completed(await handle.history())) == 4
