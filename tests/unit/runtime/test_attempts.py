"""Activity attempts: one runner for local and remote, stoppable, with a recorded failure."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
from typing import Any

import anyio
import pytest

import durable
from durable import (
    JSONConverter,
    PayloadRejected,
    StructuralLimitExceeded,
    VirtualClock,
    activity,
)
from durable._registry import activity_defn_of
from durable._runtime import attempts

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000.0


@dataclasses.dataclass
class Parcel:
    sku: str
    grams: int


@activity.defn(name="unit_attempt_weigh")
async def weigh(parcel: Parcel) -> int:
    activity.heartbeat({"weighing": parcel.sku})
    return parcel.grams


STARTED = threading.Event()


@activity.defn(name="unit_attempt_grind")
def grind(rounds: int) -> int:
    STARTED.set()
    for i in range(rounds):
        activity.heartbeat(i)  # raises once the attempt must stop
        threading.Event().wait(0.01)
    return rounds


def context(name: str, **fields: Any) -> attempts.ActivityContext:
    defn = activity_defn_of(name)
    assert defn is not None
    values: dict[str, Any] = {
        "activity_id": "t1", "attempt": 1, "workflow_id": "wf", "run_id": "r1",
        "task_queue": "q", "local": False, "scheduled_at": T0, "started_at": T0,
        "deadline": None, "heartbeat_timeout": None, "heartbeat_details": None,
        "clock": VirtualClock(T0),
        "encode_details": attempts.details_encoder(JSONConverter(), 64),
    }
    values.update(fields)
    return attempts.new_context(defn, **values)


async def test_arguments_are_rebuilt_by_type_hint_and_heartbeats_kept_for_the_supervisor(
        ) -> None:
    defn = activity_defn_of(weigh)
    assert defn is not None
    args = attempts.arguments(defn, JSONConverter(), '[{"sku": "a-1", "grams": 250}]')
    assert args == [Parcel("a-1", 250)]
    actx = context("unit_attempt_weigh")
    assert await attempts.run_attempt(actx, defn, args) == 250
    assert actx.take_details() == (True, '{"weighing":"a-1"}')
    assert actx.take_details() == (False, '{"weighing":"a-1"}')  # flushed once
    assert actx.info.activity_type == "unit_attempt_weigh" and actx.info.attempt == 1


def test_heartbeat_details_are_checked_at_the_call() -> None:
    encode = attempts.details_encoder(JSONConverter(), 64)
    assert encode({"i": 1}) == '{"i":1}'
    with pytest.raises(StructuralLimitExceeded):
        encode("x" * 100)  # over the payload limit: refused where it was made
    with pytest.raises(PayloadRejected):
        encode(object())


async def test_a_stop_ends_a_sync_attempt_at_its_next_heartbeat_and_says_how() -> None:
    STARTED.clear()
    defn = activity_defn_of(grind)
    assert defn is not None
    actx = context("unit_attempt_grind")
    failure = None
    async with anyio.create_task_group() as tg:
        async def run() -> None:
            nonlocal failure
            try:
                await attempts.run_attempt(actx, defn, [10**6])
            except Exception as exc:
                failure = attempts.attempt_failure(exc, actx, defn)

        tg.start_soon(run)
        await anyio.to_thread.run_sync(STARTED.wait, 10)
        actx.request_stop("the attempt was fenced")
    assert failure is not None and failure.category == "stopped"
    assert failure.get("stop_kind") == "cooperative" and failure.get("stop_confirmed") is not False
    assert failure.get("stop_reason") == "the attempt was fenced"
    assert not actx.abandoned


RAN = threading.Event()


@activity.defn(name="unit_attempt_unstarted")
def unstarted() -> str:
    RAN.set()
    return "ran"


async def test_a_stop_before_the_thread_began_ends_the_attempt_at_once_unrun() -> None:
    """Every thread token held (here: one, by a thread that waits for the end
    of the test): the attempt waits for a token when its stop comes. It ends
    at once, stopped and confirmed, and its function never runs. It waited
    for the whole grace (30 s here; under load, seen: 10 s for a 1 s activity)
    and said the function ignored its stop, and a grace wait of its own in a
    thread waited for a token, without bound."""
    RAN.clear()
    defn = activity_defn_of(unstarted)
    assert defn is not None
    actx = context("unit_attempt_unstarted", stop_grace=30.0)
    limiter = anyio.to_thread.current_default_thread_limiter()
    tokens, limiter.total_tokens = limiter.total_tokens, 1
    release = threading.Event()
    failure = None
    ended = anyio.Event()

    async def run() -> None:
        nonlocal failure
        try:
            await attempts.run_attempt(actx, defn, [])
        except Exception as exc:
            failure = attempts.attempt_failure(exc, actx, defn)
        finally:
            ended.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(anyio.to_thread.run_sync, release.wait,
                                            abandon_on_cancel=True))
            with anyio.fail_after(10):
                while limiter.borrowed_tokens < 1:  # the one token is taken
                    await anyio.sleep(0.005)
                tg.start_soon(run)
                while limiter.statistics().tasks_waiting < 1:  # the attempt waits for it
                    await anyio.sleep(0.005)
                actx.request_stop("the attempt was fenced")
                await ended.wait()  # not the grace's 30 s
            release.set()
    finally:
        release.set()
        limiter.total_tokens = tokens
    assert failure is not None and failure.category == "stopped", failure
    assert failure.get("stop_confirmed") is not False and not actx.abandoned
    assert not RAN.is_set(), "the function ran after its attempt was stopped"


def test_a_result_over_the_payload_limit_is_not_retried() -> None:
    defn = activity_defn_of(weigh)
    assert defn is not None
    failure = attempts.attempt_failure(StructuralLimitExceeded("payload_bytes", 10, 5),
                                       context("unit_attempt_weigh"), defn)
    assert failure.non_retryable


def test_a_heartbeat_from_a_thread_never_waits_for_a_loop_that_stopped() -> None:
    """A sync activity's thread can outlive the loop it was started from (a
    thread cannot be stopped; a worker abandons one that ignores a stop). Its
    heartbeat woke the supervisor by waiting on the loop
    (`anyio.from_thread.run_sync`): with the loop stopped it waited forever,
    and the interpreter could not exit (CI: pytest hung after its summary).
    Now the wake-up is sent without waiting, and a stopped attempt's
    heartbeat raises before it."""
    loop = asyncio.new_event_loop()
    release = threading.Event()
    beats: list[str] = []
    made: list[attempts.ActivityContext] = []
    running = threading.Event()

    def body() -> None:  # the attempt's thread
        running.set()
        release.wait(10)
        ctx = made[0]
        ctx.heartbeat(None)
        beats.append("recorded")
        ctx.request_stop("the worker left")
        try:
            ctx.heartbeat(None)
        except durable.ActivityStopRequested:
            beats.append("stopped")

    async def start() -> None:  # the worker: starts the thread, then leaves it
        ctx = attempts.ActivityContext(lambda: None, VirtualClock(T0), None)  # type: ignore[arg-type]
        ctx.call_soon_threadsafe = attempts._thread_safe_soon()  # as `_run_in_thread`
        made.append(ctx)
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(anyio.to_thread.run_sync, body,
                                            abandon_on_cancel=True))
            while not running.is_set():  # the thread runs the activity
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()  # abandoned: the thread runs on

    try:
        loop.run_until_complete(start())  # the loop stops here, and stays open
        release.set()
        deadline = time.monotonic() + 10
        while len(beats) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beats == ["recorded", "stopped"]
        assert made[0].take_details()[0]  # the heartbeat was recorded all the same
    finally:
        release.set()
        loop.close()
