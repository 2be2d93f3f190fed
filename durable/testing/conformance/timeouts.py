"""Timeouts (seed 000): workflow execution/run timeouts, the four activity
timeouts, continue-as-new, the watchdog; on virtual time, plus a few real-time
tests with short timeouts.

Part of the conformance suite (`durable.testing.conformance`): import the
tests into a test module of your own, ``from durable.testing.conformance.timeouts import *``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.store.records import Claimed
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

HOUR = 3600.0
ATTEMPTS: dict[str, int] = {}


def attempt_of(key: str) -> int:
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    return ATTEMPTS[key]


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


@workflow.defn
async def sleeper(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "woke"


@workflow.defn
async def looping(n: int, pause: float) -> int:
    await workflow.sleep(pause)
    workflow.continue_as_new(n + 1, pause)
    return n


@activity.defn
async def hang(key: str, hang_attempts: int) -> str:
    n = attempt_of(key)
    if n <= hang_attempts:
        await activity.sleep(10 * HOUR)
    return f"attempt {n}"


@activity.defn
async def on_nobodys_queue() -> str:
    return "never"


@activity.defn
async def beating(key: str, beats: int, gap: float, then_hang: bool) -> Any:
    info = activity.info()
    start = (info.heartbeat_details or {}).get("i", 0)
    for i in range(start, beats):
        activity.heartbeat({"i": i + 1, "attempt": info.attempt})
        await activity.sleep(gap)
    if then_hang and info.attempt == 1:
        await activity.sleep(10 * HOUR)
    return {"attempt": info.attempt, "resumed_from": start}


@activity.defn
async def exactly_at(seconds: float) -> str:
    await activity.sleep(seconds)
    return "late by zero"


@workflow.defn
async def call_activity(name: str, args: list[Any], opts: dict[str, Any]) -> Any:
    options = durable.ActivityOptions(
        retry=durable.RetryPolicy(initial_interval=1.0, max_attempts=opts.pop("max_attempts", 3)),
        task_queue=opts.pop("task_queue", None),
        **opts,
    )
    try:
        return await workflow.execute_activity(name, *args, options=options)
    except durable.ActivityTimedOut as exc:
        return {"timed_out": exc.timeout_kind, "attempt": exc.failure.get("attempt")}


@workflow.defn
async def parent_of_slow_child(run_timeout: float) -> Any:
    try:
        await workflow.execute_child(
            sleeper, 2 * HOUR, options=durable.ChildOptions(run_timeout=run_timeout)
        )
    except durable.ChildWorkflowFailed as exc:
        cause = exc.__cause__
        assert isinstance(cause, durable.WorkflowTimedOut)
        return {"child": "timed_out", "kind": cause.timeout_kind}
    return "completed"


@workflow.defn
async def parent_with_children() -> None:
    for policy in (durable.ParentClosePolicy.TERMINATE, durable.ParentClosePolicy.ABANDON,
                   durable.ParentClosePolicy.REQUEST_CANCEL):
        await workflow.start_child(
            sleeper, 10 * HOUR, id=f"child-{policy.value}",
            options=durable.ChildOptions(parent_close_policy=policy),
        )
    await workflow.sleep(10 * HOUR)


@workflow.defn
async def waits_on_activity() -> str:
    result: str = await workflow.execute_activity(
        on_nobodys_queue, options=durable.ActivityOptions(task_queue="nobody")
    )
    return result


# ---------------------------------------------------------------- validation


def test_timeouts_under_one_second_are_refused_where_set() -> None:
    with pytest.raises(ValueError, match="execution timeout must be at least 1 second"):
        durable.StartOptions.reject_duplicate().with_execution_timeout(0)
    with pytest.raises(ValueError, match="run timeout must be at least 1 second"):
        durable.StartOptions.reject_duplicate().with_run_timeout(0.5)
    with pytest.raises(ValueError, match="execution timeout must be at least 1 second"):
        durable.StartOptions().with_execution_timeout(-5)
    options = durable.StartOptions.reject_duplicate().with_execution_timeout(
        timedelta(hours=2)).with_run_timeout(3600)
    assert (options.execution_timeout, options.run_timeout) == (7200, 3600)
    with pytest.raises(durable.ConfigurationError, match="start_to_close_timeout"):
        durable.ActivityOptions(start_to_close_timeout=0)
    with pytest.raises(durable.ConfigurationError, match="heartbeat_timeout"):
        durable.ActivityOptions(heartbeat_timeout=-1)


# ---------------------------------------------------------------- workflow timeouts


async def test_execution_timeout_on_virtual_time(env: TimeSkippingEnvironment) -> None:
    started = time.monotonic()
    async with env.worker(workflows=[sleeper]):
        handle = await env.client.start(
            sleeper, 3 * HOUR, id="exec",
            options=durable.StartOptions.reject_duplicate().with_execution_timeout(2 * HOUR),
        )
        with pytest.raises(durable.WorkflowTimedOut) as err:
            await handle.result()
    assert time.monotonic() - started < 10
    assert err.value.timeout_kind == "execution_timeout"
    info = await handle.describe()
    assert info["status"] == "timed_out"
    assert info["execution_timeout_seconds"] == 2 * HOUR
    failure = info["failures"][-1]
    assert failure["failure_category"] == "timeout"
    assert failure["propagation_kind"] == "timeout"
    assert failure["exception_class"] == "durable.WorkflowTimedOut"
    assert failure["timeout_kind"] == "execution_timeout"
    assert failure["deadline_at"] == info["run"]["execution_deadline_at"]
    events = await handle.history()
    started_event = events[0]
    assert started_event.type == "WorkflowStarted"
    assert started_event.data["execution_timeout_seconds"] == 2 * HOUR
    assert started_event.data["execution_deadline_at"] == info["run"]["execution_deadline_at"]
    types = [e.type for e in events]
    assert "TimerCancelled" in types
    assert types[-1] == "WorkflowTimedOut"
    assert events[-1].data["timeout_kind"] == "execution_timeout"


async def test_continue_as_new_carries_execution_deadline_and_renews_run_deadline(
    env: TimeSkippingEnvironment,
) -> None:
    async with env.worker(workflows=[looping]):
        handle = await env.client.start(
            looping, 0, 0.4 * HOUR, id="loop",
            options=durable.StartOptions.reject_duplicate()
            .with_execution_timeout(2 * HOUR).with_run_timeout(HOUR),
        )
        with pytest.raises(durable.WorkflowTimedOut) as err:
            await handle.result()
    assert err.value.timeout_kind == "execution_timeout"
    runs = sorted(await env.client.list(), key=lambda r: r["run_number"])
    assert len(runs) >= 5
    infos = [await env.client.get_handle("loop", run_id=r["run_id"]).describe() for r in runs]
    execution_deadlines = {i["run"]["execution_deadline_at"] for i in infos}
    run_deadlines = [i["run"]["run_deadline_at"] for i in infos]
    assert len(execution_deadlines) == 1
    assert len(set(run_deadlines)) == len(infos)
    assert all(i["run"]["run_timeout_seconds"] == HOUR for i in infos)
    assert [i["run"]["status"] for i in infos[:-1]] == ["continued"] * (len(infos) - 1)
    assert infos[-1]["run"]["status"] == "timed_out"


async def test_run_timeout_fences_open_activity(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[waits_on_activity]):
        handle = await env.client.start(
            waits_on_activity, id="run-timeout",
            options=durable.StartOptions().with_run_timeout(60),
        )
        with pytest.raises(durable.WorkflowTimedOut) as err:
            await handle.result()
    assert err.value.timeout_kind == "run_timeout"
    events = await handle.history()
    cancelled = [e for e in events if e.type == "ActivityCancelled"]
    assert len(cancelled) == 1
    assert events[-1].type == "WorkflowTimedOut"
    assert events[-1].data["timeout_kind"] == "run_timeout"


async def test_timeout_enforced_when_no_worker_is_alive(env: TimeSkippingEnvironment) -> None:
    env.auto_skip = False  # time must not move while the worker holds the run
    async with env.worker(workflows=[sleeper]):
        handle = await env.client.start(
            sleeper, 5 * HOUR, id="orphan",
            options=durable.StartOptions().with_execution_timeout(HOUR),
        )
        while (await handle.describe())["status"] != "running":
            await anyio.sleep(0.01)
    await env.sleep(2 * HOUR)
    assert (await handle.describe())["status"] == "running"  # nobody has enforced it yet
    counts = await env.client.repair_pass()
    assert counts == {"execution_timeout": 1}
    assert await env.client.repair_pass() == {}  # idempotent
    with pytest.raises(durable.WorkflowTimedOut):
        await handle.result()


async def test_next_workers_watchdog_enforces_an_orphaned_timeout(
    env: TimeSkippingEnvironment,
) -> None:
    env.auto_skip = False  # time must not move while the worker holds the run
    async with env.worker(workflows=[sleeper]):
        handle = await env.client.start(
            sleeper, 5 * HOUR, id="orphan2",
            options=durable.StartOptions().with_run_timeout(HOUR),
        )
        while (await handle.describe())["status"] != "running":
            await anyio.sleep(0.01)
    await env.sleep(2 * HOUR)
    env.auto_skip = True
    async with env.worker(activities=[on_nobodys_queue]):  # runs no workflows, only a watchdog
        with pytest.raises(durable.WorkflowTimedOut) as err:
            await handle.result()
    assert err.value.timeout_kind == "run_timeout"


async def test_timed_out_child_notifies_parent(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[parent_of_slow_child, sleeper]):
        result = await env.client.execute(parent_of_slow_child, 60, id="parent")
    assert result == {"child": "timed_out", "kind": "run_timeout"}


async def test_parent_close_policies_apply_on_timeout(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[parent_with_children, sleeper]):
        handle = await env.client.start(
            parent_with_children, id="pcp", options=durable.StartOptions().with_run_timeout(HOUR)
        )
        with pytest.raises(durable.WorkflowTimedOut):
            await handle.result()
        statuses = {
            p: (await env.client.get_handle(f"child-{p}").describe())["status"]
            for p in ("terminate", "abandon", "request_cancel")
        }
    assert statuses == {"terminate": "terminated", "abandon": "running",
                        "request_cancel": "cancelled"}
    applied = [e.data["policy"] for e in await handle.history()
               if e.type == "ParentClosePolicyApplied"]
    assert sorted(applied) == ["abandon", "request_cancel", "terminate"]


# ---------------------------------------------------------------- activity timeouts


async def test_schedule_to_start_retries_with_fresh_windows(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[call_activity]):
        result = await env.client.execute(
            call_activity, "on_nobodys_queue", [],
            {"schedule_to_start_timeout": 30, "max_attempts": 2, "task_queue": "nobody"},
            id="s2s",
        )
    assert result == {"timed_out": "schedule_to_start", "attempt": 2}
    events = await env.client.get_handle("s2s").history()
    retry = next(e for e in events if e.type == "ActivityRetryScheduled")
    assert retry.data["timeout_kind"] == "schedule_to_start"
    assert retry.data["schedule_to_start_deadline"] is not None
    scheduled = next(e for e in events if e.type == "ActivityScheduled")
    assert scheduled.data["schedule_to_start_timeout"] == 30
    assert scheduled.data["retry_policy"]["max_attempts"] == 2
    timed_out = next(e for e in events if e.type == "ActivityTimedOut")
    assert timed_out.data["timeout_kind"] == "schedule_to_start"


async def test_start_to_close_closes_attempt_and_retries(env: TimeSkippingEnvironment) -> None:
    key = f"stc-{id(env)}"
    async with env.worker(workflows=[call_activity], activities=[hang]):
        result = await env.client.execute(
            call_activity, "hang", [key, 1], {"start_to_close_timeout": 300}, id="stc"
        )
    assert result == "attempt 2"
    events = await env.client.get_handle("stc").history()
    retry = next(e for e in events if e.type == "ActivityRetryScheduled")
    assert retry.data["timeout_kind"] == "start_to_close"
    refused = [e for e in events if e.type == "ActivityResultRefused"]
    assert all(e.data["attempt"] == 1 for e in refused)


async def test_schedule_to_close_is_terminal_with_attempts_left(
    env: TimeSkippingEnvironment,
) -> None:
    key = f"s2c-{id(env)}"
    async with env.worker(workflows=[call_activity], activities=[hang]):
        result = await env.client.execute(
            call_activity, "hang", [key, 99],
            {"start_to_close_timeout": 60, "schedule_to_close_timeout": 100, "max_attempts": 10},
            id="s2c",
        )
    assert result == {"timed_out": "schedule_to_close", "attempt": 2}
    info = await env.client.get_handle("s2c").describe()
    failure = next(f for f in info["failures"] if f.get("timeout_kind") == "schedule_to_close")
    assert failure["failure_category"] == "timeout"
    assert failure["propagation_kind"] == "timeout"


async def test_heartbeats_extend_the_heartbeat_timeout(env: TimeSkippingEnvironment) -> None:
    key = f"hb-{id(env)}"
    async with env.worker(workflows=[call_activity], activities=[beating]):
        result = await env.client.execute(
            call_activity, "beating", [key, 6, 5.0, False], {"heartbeat_timeout": 10},
            id="hb-ok",
        )
    assert result == {"attempt": 1, "resumed_from": 0}


async def test_heartbeat_timeout_retries_with_details(env: TimeSkippingEnvironment) -> None:
    key = f"hb2-{id(env)}"
    async with env.worker(workflows=[call_activity], activities=[beating]):
        result = await env.client.execute(
            call_activity, "beating", [key, 3, 1.0, True], {"heartbeat_timeout": 10},
            id="hb-retry",
        )
    assert result == {"attempt": 2, "resumed_from": 3}
    events = await env.client.get_handle("hb-retry").history()
    retry = next(e for e in events if e.type == "ActivityRetryScheduled")
    assert retry.data["timeout_kind"] == "heartbeat"


async def test_heartbeat_timeout_terminal(env: TimeSkippingEnvironment) -> None:
    key = f"hb3-{id(env)}"
    async with env.worker(workflows=[call_activity], activities=[beating]):
        result = await env.client.execute(
            call_activity, "beating", [key, 1, 1.0, True],
            {"heartbeat_timeout": 10, "max_attempts": 1}, id="hb-terminal",
        )
    assert result == {"timed_out": "heartbeat", "attempt": 1}


async def test_result_exactly_at_the_deadline_is_refused(env: TimeSkippingEnvironment) -> None:
    async with env.worker(workflows=[call_activity], activities=[exactly_at]):
        result = await env.client.execute(
            call_activity, "exactly_at", [60.0],
            {"start_to_close_timeout": 60, "max_attempts": 1}, id="edge",
        )
    assert result == {"timed_out": "start_to_close", "attempt": 1}


# ---------------------------------------------------------------- real time


async def test_real_time_execution_timeout(client: durable.Client, make_worker: Any) -> None:
    started = time.monotonic()
    async with make_worker(workflows=[sleeper]):
        handle = await client.start(
            sleeper, 30, id="real-exec", options=durable.StartOptions().with_execution_timeout(1)
        )
        with pytest.raises(durable.WorkflowTimedOut) as err:
            await handle.result()
    elapsed = time.monotonic() - started
    assert err.value.timeout_kind == "execution_timeout"
    assert 0.9 < elapsed < 5


async def test_real_time_heartbeat_timeout(client: durable.Client, make_worker: Any) -> None:
    key = f"real-hb-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[call_activity], activities=[beating]):
        result = await client.execute(
            call_activity, "beating", [key, 1, 0.1, True],
            {"heartbeat_timeout": 1, "max_attempts": 1}, id="real-hb",
        )
    assert result == {"timed_out": "heartbeat", "attempt": 1}


# ---------------------------------------------------------------- virtual time and threads


@activity.defn(name="tt_real_work")
def real_work(seconds: float) -> str:
    time.sleep(seconds)  # real work in a thread: virtual time cannot see it
    return "worked"


@workflow.defn(name="tt_quick_sync")
async def quick_sync(seconds: float) -> str:
    result: str = await workflow.execute_activity(
        real_work, seconds,
        options=durable.ActivityOptions(start_to_close_timeout=60, max_attempts=1))
    return result


async def test_virtual_time_holds_still_while_a_sync_activity_works(
    env: TimeSkippingEnvironment,
) -> None:
    """A timer due an hour later would otherwise be skipped to at once, and the
    attempt's 60 s start-to-close with it, while the thread sleeps 0.3 real s."""
    async with env.worker(workflows=[quick_sync, sleeper], activities=[real_work]):
        await env.client.start(sleeper, HOUR, id="elsewhere")  # something to skip to
        before = env.now()
        assert await env.client.execute(quick_sync, 0.3, id="quick") == "worked"
    assert env.now() - before < 60


async def test_virtual_time_waits_for_a_run_a_claim_passed_by(
    env: TimeSkippingEnvironment,
) -> None:
    """A claim that ran while another transaction held the new run's row
    skipped it (``SKIP LOCKED``) and waits for its real-time poll; virtual time
    must not jump to the hour-long timer meanwhile (it did, once in CI, on
    MariaDB). The pass-by is made deterministic: the first claim after the
    start returns nothing. (The worker claims: one taking its process's
    starts as they commit, `eager_starts`, has no claim to pass them by.)"""
    if not getattr(env.client.store.driver.dialect, "skip_locked", ""):
        pytest.skip("this driver's claims wait for each other: none passes a ready row by")
    async with env.worker(workflows=[quick_sync, sleeper], activities=[real_work],
                          eager_starts=False) as worker:
        await env.client.start(sleeper, HOUR, id="elsewhere")  # something to skip to
        await worker.runs.claim_now()  # elsewhere is claimed: the next claim is quick's
        claim = worker.runs._claim
        passed_by: list[int] = []

        async def passes_the_first_by(n: int) -> Any:
            if not passed_by:
                passed_by.append(n)
                return Claimed()
            return await claim(n)

        worker.runs._claim = passes_the_first_by
        before = env.now()
        assert await env.client.execute(quick_sync, 0.01, id="quick") == "worked"
    assert passed_by and env.now() - before < 60
    # The worker stopped: nothing waits, so time has nowhere to skip to. The
    # stopped run's hour-long timer stayed an instant to skip to, and time
    # went there while the worker stopped whenever every task looked blocked
    # (its watch in a storage call the environment does not count): seen once
    # on trio and PostgreSQL under load.
    assert env.clock.next_wakeup() is None


def test_a_hold_longer_than_its_limit_lets_virtual_time_move() -> None:
    clock = durable.VirtualClock(0)
    clock.hold_limit = 0.05
    with clock.hold():
        assert clock.holding()
        time.sleep(0.06)
        assert not clock.holding()  # a call that never returns cannot stop time forever
    assert not clock.holding()
