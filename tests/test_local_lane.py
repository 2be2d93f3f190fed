"""The synchronous lane of local activities, side by side with the supervised one.

An ``async def`` activity without an await runs on the workflow's own task
with no cancel scope and no deadline watcher (`attempts.begin`); any other
runs supervised as before. Each test runs the same workflow on both lanes
in one test (the supervised lane forced by making `never_suspends` answer
False) and compares what storage recorded, what a replay reaches, and how
cancellation and timeouts end it, on every driver and host loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from comparable_history import comparable_history

import durable
from durable import activity, workflow
from durable._runtime import attempts
from durable.clock import SystemClock
from durable.testing import Replayer

pytestmark = pytest.mark.anyio

#: per test key: for each call, whether it ran on the synchronous lane (no scope)
SEEN: dict[str, list[bool]] = {}
CALLS: dict[str, int] = {}


def _note(key: str) -> None:
    SEEN.setdefault(key, []).append(attempts.current().scope is None)


@activity.defn(name="lane_double")
async def double(key: str, i: int) -> int:
    _note(key)
    return 2 * i


@activity.defn(name="lane_flaky")
async def flaky(key: str, fail_times: int) -> int:
    _note(key)
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] <= fail_times:
        raise RuntimeError(f"failure {CALLS[key]}")
    return CALLS[key]


@activity.defn(name="lane_rich")
async def rich(key: str, value: dict[str, Any]) -> dict[str, Any]:
    _note(key)
    return {"echo": value, "list": [1, 2.5, None, "x"]}


@activity.defn(name="lane_fails")
async def fails(key: str) -> None:
    _note(key)
    raise ValueError("always")


@activity.defn(name="lane_slow")
async def slow(key: str) -> str:
    _note(key)
    # waits without a cancel scope of its own (trio's sleep opens one): the
    # synchronous lane is only ever taken for code that cannot suspend, and
    # a coroutine suspended inside its own scope could not be handed on
    await anyio.Event().wait()
    return "never"


TIMED = durable.ActivityOptions(start_to_close_timeout=30, schedule_to_close_timeout=60)
RETRY = durable.ActivityOptions(
    start_to_close_timeout=30,
    retry=durable.RetryPolicy(max_attempts=3, initial_interval=0.01))
ONCE = durable.ActivityOptions(retry=durable.RetryPolicy(max_attempts=2, initial_interval=0.01))


@workflow.defn(name="lane_steps")
async def steps(key: str) -> list[Any]:
    out: list[Any] = []
    for i in range(3):
        out.append(await workflow.execute_local_activity(double, key, i))
    out.append(await workflow.execute_local_activity(double, key, 10, options=TIMED))
    out.append(await workflow.execute_local_activity(flaky, key, 2, options=RETRY))
    out.append(await workflow.execute_local_activity(rich, key, {"a": [1, {"b": None}]}))
    try:
        await workflow.execute_local_activity(fails, key, options=ONCE)
    except durable.ActivityFailed as exc:
        out.append(type(exc).__name__)
    return out


@workflow.defn(name="lane_cancelled")
async def cancelled(key: str) -> str:
    try:
        await workflow.execute_local_activity(double, key, 1)
        await workflow.wait_condition(lambda: False)
        return "never"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_local_activity(double, key, 2, options=TIMED)


@workflow.defn(name="lane_timed_out")
async def timed_out(key: str) -> str:
    await workflow.execute_local_activity(double, key, 1, options=TIMED)
    try:
        await workflow.execute_local_activity(slow, key, options=durable.ActivityOptions(
            start_to_close_timeout=0.2, retry=durable.RetryPolicy(max_attempts=1)))
    except durable.ActivityFailed as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'timeout_kind', None)}"
    return "never"


ACTIVITIES = [double, flaky, rich, fails, slow]
WORKFLOWS = [steps, cancelled, timed_out]


@contextmanager
def supervised(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every activity takes the supervised lane (as before the synchronous one)."""
    with monkeypatch.context() as m:
        m.setattr(attempts, "never_suspends", lambda fn: False)
        yield


@contextmanager
def forced_lane(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every async activity starts on the synchronous lane, even one that
    suspends (it is then handed to the supervised lane: `attempts.finish`)."""
    with monkeypatch.context() as m:
        m.setattr(attempts, "never_suspends", lambda fn: True)
        yield


async def _run(client: durable.Client, wf: Any, key: str) -> tuple[Any, Any]:
    handle = await client.start(wf, key, id=key)
    with anyio.fail_after(30):
        try:
            result: Any = await handle.result()
        except durable.WorkflowFailed as exc:  # a cancelled run: its error type
            result = type(exc).__name__
    return result, handle


async def _waiting(handle: durable.WorkflowHandle) -> None:
    """Until the run's condition is recorded: it waits, after its first step."""
    with anyio.fail_after(30):
        while not any(e.type == "ConditionScheduled" for e in await handle.history()):
            await anyio.sleep(0.02)


def _keys(prefix: str) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"{prefix}-sync-{tag}", f"{prefix}-slow-{tag}"


async def test_both_lanes_record_the_same_history_and_replay_alike(
        client: durable.Client, make_worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fast_key, slow_key = _keys("steps")
    async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES):
        fast, fast_handle = await _run(client, steps, fast_key)
    with supervised(monkeypatch):
        async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES):
            slow_, slow_handle = await _run(client, steps, slow_key)
    assert fast == slow_ == [0, 2, 4, 20, 3, {"echo": {"a": [1, {"b": None}]},
                                               "list": [1, 2.5, None, "x"]}, "ActivityFailed"]
    assert SEEN[fast_key] and all(SEEN[fast_key])  # every call on the synchronous lane
    assert SEEN[slow_key] and not any(SEEN[slow_key])
    assert len(SEEN[fast_key]) == len(SEEN[slow_key]) == 3 + 1 + 3 + 1 + 2
    fast_events = await comparable_history(fast_handle, fast_key)
    assert fast_events == await comparable_history(slow_handle, slow_key)
    # each history replays on either lane, to the same end
    for handle in (fast_handle, slow_handle):
        events = await handle.history()
        result = await Replayer(workflows=[steps]).replay(events)
        with supervised(monkeypatch):
            again = await Replayer(workflows=[steps]).replay(events)
        assert result == again
        assert result.finished and result.status == "completed" and result.ops == 7


async def test_a_run_taken_on_by_the_other_lane_is_cancelled_alike(
        client: durable.Client, make_worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run waits after a step; a new worker on the other lane replays the
    step, records the cancellation and runs the cleanup (a local step in
    the shield). Each run has a task queue of its own, so that each worker
    takes only the run meant for it."""
    fast_key, slow_key = _keys("cancel")
    handles = {}
    for key, lane in ((fast_key, as_is), (slow_key, supervised)):
        with lane(monkeypatch):
            async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES, task_queue=key):
                handles[key] = await client.start(cancelled, key, id=key, task_queue=key)
                await _waiting(handles[key])
    for key, lane in ((fast_key, supervised), (slow_key, as_is)):
        with lane(monkeypatch):
            async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES, task_queue=key):
                await handles[key].request_cancellation(reason="stop", cleanup_timeout=30)
                with anyio.fail_after(30), pytest.raises(durable.WorkflowCancelled):
                    await handles[key].result()
    assert (await comparable_history(handles[fast_key], fast_key)
            == await comparable_history(handles[slow_key], slow_key))
    assert SEEN[fast_key] == [True, False]  # the cleanup ran on the supervised lane
    assert SEEN[slow_key] == [False, True]


@contextmanager
def as_is(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The lanes as they are (the synchronous one for these activities)."""
    yield


async def test_a_cancelled_run_records_its_cleanup_step_alike_on_both_lanes(
        client: durable.Client, make_worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fast_key, slow_key = _keys("cleanup")
    handles = []
    for key, lane in ((fast_key, as_is), (slow_key, supervised)):
        with lane(monkeypatch):
            async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES):
                handle = await client.start(cancelled, key, id=key)
                await _waiting(handle)
                await handle.request_cancellation(reason="stop", cleanup_timeout=30)
                with anyio.fail_after(30), pytest.raises(durable.WorkflowCancelled):
                    await handle.result()
        handles.append(handle)
    assert (await comparable_history(handles[0], fast_key)
            == await comparable_history(handles[1], slow_key))
    assert SEEN[fast_key] == [True, True] and SEEN[slow_key] == [False, False]


async def test_an_attempt_that_suspends_is_handed_on_and_its_timeout_holds(
        client: durable.Client, make_worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Started on the synchronous lane, an attempt that suspends goes on
    supervised: it runs once, its start-to-close timeout stops it, and the
    records are those of the supervised lane."""
    fast_key, slow_key = _keys("timeout")
    with forced_lane(monkeypatch):
        async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES):
            fast, fast_handle = await _run(client, timed_out, fast_key)
    with supervised(monkeypatch):
        async with make_worker(workflows=WORKFLOWS, activities=ACTIVITIES):
            slow_, slow_handle = await _run(client, timed_out, slow_key)
    assert fast == slow_ == "ActivityTimedOut: start_to_close"
    assert SEEN[fast_key] == [True, True]  # the slow attempt began on the lane, once
    assert SEEN[slow_key] == [False, False]
    assert (await comparable_history(fast_handle, fast_key)
            == await comparable_history(slow_handle, slow_key))


def test_never_suspends_reads_the_code() -> None:
    async def plain(i: int) -> int:
        return i

    async def awaits() -> None:
        await anyio.lowlevel.checkpoint()

    async def with_block() -> None:
        async with anyio.create_task_group():
            pass

    async def loops(items: Any) -> None:
        async for _ in items:
            pass

    assert attempts.never_suspends(plain)
    assert attempts.never_suspends(double)
    for fn in (awaits, with_block, loops, print, len, object()):
        assert not attempts.never_suspends(fn)


@pytest.mark.parametrize("suspend", [0, 1, 3])
async def test_begin_and_finish_run_a_coroutine_once_whatever_it_does(suspend: int) -> None:
    """The hand-over: what the loop sends back reaches the coroutine, nothing
    runs twice, and an exception raised after a suspension arrives."""
    ran: list[str] = []

    async def body(n: int) -> int:
        ran.append("start")
        for _ in range(n):
            await anyio.lowlevel.checkpoint()
        ran.append("end")
        return n * 10

    actx = attempts.ActivityContext(lambda: None, SystemClock(), None)  # type: ignore[arg-type]
    started = attempts.begin(actx, body, [suspend])
    value = started.value if started.done else await attempts.finish(actx, started)
    assert value == suspend * 10 and ran == ["start", "end"]
    assert started.done is (suspend == 0)

    async def raises(n: int) -> None:
        for _ in range(n):
            await anyio.lowlevel.checkpoint()
        raise KeyError("late")

    with pytest.raises(KeyError):
        started = attempts.begin(actx, raises, [suspend])
        if not started.done:
            await attempts.finish(actx, started)
    assert attempts._current.get() is None  # the attempt's context is reset
