"""Faults a worker meets inside someone else's application (issue [2/8]).

Each test pins one behaviour: the worker and its host survive what happens
around them (storage outages, a closed client, bad input, a bug), one bad
run never stalls the others, every bad option is refused at the call with
nothing half-written, and what users meet first is true. They run on every
driver and host loop where the behaviour applies.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import drop_postgres_schema, new_postgres_url, require_postgres

import durable
from durable import activity, workflow
from durable._runtime.committer import Committer
from durable.store.writes import ScheduleTimer
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

SEEN: dict[str, list[str]] = {}
GATES: dict[str, threading.Event] = {}


def seen(key: str, what: str) -> None:
    SEEN.setdefault(key, []).append(what)


# ---------------------------------------------------------------- definitions


@activity.defn(name="faults_echo")
async def echo(value: str) -> str:
    return value


@activity.defn(name="faults_effect")
async def effect(key: str, what: str) -> str:
    seen(key, what)
    return what


@activity.defn(name="faults_bad_heartbeat")
async def bad_heartbeat(key: str) -> str:
    activity.heartbeat({"handle": object()})  # not JSON: refused at this call
    return "unreachable"


@activity.defn(name="faults_cooperative")
def cooperative(key: str) -> str:
    seen(key, "started")
    for _ in range(2000):
        activity.heartbeat({"tick": 1})
        time.sleep(0.01)
    return "finished"


@activity.defn(name="faults_deaf")
def deaf(key: str, seconds: float) -> str:
    seen(key, "started")
    time.sleep(seconds)  # never checks for a stop
    return "done"


@activity.defn(name="faults_gated")
def gated(key: str) -> str:
    seen(key, "started")
    GATES[key].wait(30)
    return "released"


@workflow.defn(name="faults_steps")
async def steps(key: str, n: int) -> list[str]:
    out = []
    for i in range(n):
        out.append(await workflow.execute_activity(
            effect, key, f"step-{i}", options=durable.ActivityOptions(max_attempts=5)))
    return out


@workflow.defn(name="faults_call")
async def call(name: str, args: list[Any], max_attempts: int = 1) -> Any:
    try:
        return await workflow.execute_activity(
            name, *args, options=durable.ActivityOptions(max_attempts=max_attempts))
    except durable.ActivityFailed as exc:
        return {"failed": exc.failure.get("failure_category"),
                "cause": exc.failure.get("cause_type"), "message": str(exc)}


@workflow.defn(name="faults_sleep_forever")
async def sleep_bad(duration: str) -> str:
    try:
        # "inf", "nan", "1e12"; "none": None, which failed the run with a bare AssertionError
        await workflow.sleep(None if duration == "none" else float(duration))  # type: ignore[arg-type]
    except durable.ConfigurationError as exc:
        return f"refused: {exc}"
    return "slept"


@workflow.defn(name="faults_big_continue")
async def big_continue(size: int) -> None:
    workflow.continue_as_new("x" * size)


@workflow.defn(name="faults_child_taken")
async def child_taken(child_id: str) -> str:
    await workflow.start_child(echo_wf, "first", id=child_id)
    try:
        await workflow.start_child(echo_wf, "second", id=child_id)
    except durable.WorkflowAlreadyStarted:
        return "refused at the call"
    return "not refused"


@workflow.defn(name="faults_echo_wf")
async def echo_wf(value: str) -> str:
    return value


@workflow.defn(name="faults_unsent")
async def unsent(key: str) -> str:
    try:
        await workflow.sleep(3600)
    finally:
        if workflow.cancellation() is not None:
            try:  # outside the shield: never sent, its body never runs
                await workflow.execute_activity(effect, key, "unshielded")
            except BaseException:
                pass
            with workflow.cancellation_shield():
                await workflow.execute_activity(effect, key, "shielded")
    return "not cancelled"


SKIP_SECOND = {"on": False}


@workflow.defn(name="faults_changing")
async def changing(key: str) -> str:
    await workflow.execute_activity(effect, key, "one")
    if SKIP_SECOND["on"]:
        return "skipped"  # a code change: the recorded second op is never asked for
    await workflow.execute_activity(effect, key, "two")
    await workflow.sleep(3600)
    return "done"


@workflow.defn(name="faults_logs")
async def logs_something(marker: str) -> str:
    workflow.logger.info("faults_visible_line", marker=marker)
    return marker


@workflow.defn(name="faults_fail")
async def fail_wf(message: str) -> None:
    raise ValueError(message)


@workflow.defn(name="faults_wait")
async def wait_wf(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "woke"


ALL_ACTIVITIES = [echo, effect, bad_heartbeat, cooperative, deaf, gated]


def events(history: list[durable.HistoryEvent], etype: str) -> list[durable.HistoryEvent]:
    return [e for e in history if e.type == etype]


# ------------------------------------------------ 1. surviving what happens around it


async def test_worker_rides_out_a_locked_sqlite_database(
    driver_name: str, db_url: str, tmp_path: Path
) -> None:
    """Another process holds SQLite's write lock longer than busy_timeout: the
    worker's commits fail with StorageUnavailable, are retried, and the run
    completes once the lock is gone; the host never sees an error."""
    if driver_name != "sqlite":
        pytest.skip("SQLite's write lock")
    key = f"locked-{id(db_url)}"
    path = db_url.removeprefix("sqlite:///")
    async with durable.connect(db_url, busy_timeout=0.1) as client:
        async with durable.Worker(client, workflows=[steps], activities=[effect],
                                  poll_interval=0.1, lease_seconds=30):
            handle = await client.start(steps, key, 1, id=key)
            blocker = sqlite3.connect(path, isolation_level=None, timeout=5)
            blocker.execute("BEGIN IMMEDIATE")
            await anyio.sleep(1.0)  # every write meanwhile hits the lock
            blocker.execute("ROLLBACK")
            blocker.close()
            with anyio.fail_after(20):
                assert await handle.result() == ["step-0"]


async def test_worker_rides_out_a_full_database(driver_name: str, db_url: str) -> None:
    """SQLite reports 'database or disk is full' (a real SQLITE_FULL, forced with
    max_page_count): writes are retried until there is room again."""
    if driver_name != "sqlite":
        pytest.skip("SQLite's page limit")
    key = f"full-{id(db_url)}"
    async with durable.connect(db_url) as client:
        conn = client.driver._conn  # type: ignore[attr-defined]
        async with durable.Worker(client, workflows=[steps], activities=[effect],
                                  poll_interval=0.1):
            handle = await client.start(steps, key, 3, id=key)
            pages = await client.driver.run(lambda tx: _page_count())
            await anyio.to_thread.run_sync(conn.execute, f"PRAGMA max_page_count={pages}")
            await anyio.sleep(1.0)
            await anyio.to_thread.run_sync(conn.execute, "PRAGMA max_page_count=1073741823")
            with anyio.fail_after(20):
                assert await handle.result() == ["step-0", "step-1", "step-2"]


def _page_count() -> Any:
    row = yield durable.driver.q1("PRAGMA page_count")
    return int(row[0])


async def test_a_lost_commit_is_resolved_by_reading_not_guessing(
    client: durable.Client,
) -> None:
    """The commit of an activity's result is acknowledged by nobody (the
    connection died during COMMIT, outcome unknown): the worker reads the
    attempt back, sees it recorded, and neither records it twice nor retries."""
    key = f"unknown-{uuid.uuid4().hex[:10]}"
    real = client.store.complete_activity
    calls = {"n": 0}

    async def lost_ack(*args: Any) -> Any:
        calls["n"] += 1
        outcome = await real(*args)
        if calls["n"] == 1:
            raise durable.StorageUnavailable("connection lost during COMMIT",
                                             outcome_unknown=True)
        return outcome

    client.store.complete_activity = lost_ack  # type: ignore[method-assign]
    async with durable.Worker(client, workflows=[steps], activities=[effect],
                              poll_interval=0.1):
        with anyio.fail_after(20):
            assert await client.execute(steps, key, 2, id=key) == ["step-0", "step-1"]
    history = await client.get_handle(key).history()
    assert len(events(history, "ActivityCompleted")) == 2
    assert SEEN[key] == ["step-0", "step-1"]  # the first activity ran once


async def test_unencodable_heartbeat_details_fail_the_attempt_not_the_worker(
    client: durable.Client, make_worker: Any,
) -> None:
    async with make_worker(workflows=[call, steps], activities=ALL_ACTIVITIES):
        out = await client.execute(call, "faults_bad_heartbeat", ["k"], id="bad-hb")
        assert out["failed"] == "application" and out["cause"] == "PayloadRejected"
        assert "heartbeat details cannot be serialised" in out["message"]
        # the worker goes on serving
        assert await client.execute(steps, "after-bad-hb", 1, id="after") == ["step-0"]


async def test_an_unreadable_stored_retry_policy_fails_the_activity_instead_of_the_worker(
    client: durable.Client, make_worker: Any,
) -> None:
    """A stored policy this version cannot read (written by another version, or
    edited by hand) means no retry: the activity fails, the worker keeps going."""
    handle = await client.start(call, "faults_always_fails", ["pol"], 3, id="policy")
    async with make_worker(workflows=[call]):  # no activity worker yet: the task waits
        with anyio.fail_after(10):
            while not await client.driver.run(lambda tx: _task_count()):
                await anyio.sleep(0.05)

    def corrupt(tx: durable.driver.Tx) -> Any:
        yield durable.driver.ex(
            "UPDATE activity_tasks SET options = '{\"retry\": {\"max_attempts\": \"lots\"}}'")

    await client.driver.run(corrupt)
    async with make_worker(workflows=[call, steps], activities=[always_fails, effect]):
        with anyio.fail_after(20):
            out = await handle.result()
        assert out["failed"] == "application" and out["cause"] == "RuntimeError"
        assert await client.execute(steps, "after-policy", 1, id="after-policy") == ["step-0"]
    assert not events(await handle.history(), "ActivityRetryScheduled")


@activity.defn(name="faults_always_fails")
async def always_fails(key: str) -> str:
    raise RuntimeError("activity blew up")


def _task_count() -> Any:
    row = yield durable.driver.q1("SELECT COUNT(*) AS n FROM activity_tasks")
    return int(row["n"])


async def test_closing_the_client_under_a_running_worker_stops_it_quietly(
    db_url: str,
) -> None:
    client = await durable.connect(db_url)
    worker = durable.Worker(client, workflows=[wait_wf], poll_interval=0.05)
    async with worker:
        await client.start(wait_wf, 3600, id="closed-under")
        await anyio.sleep(0.2)
        await client.close()
        with anyio.fail_after(10):
            while not worker._stopped.is_set():
                await anyio.sleep(0.05)
        host_still_running = True
    assert host_still_running and worker.failure is None


@pytest.mark.postgres
async def test_closing_a_postgres_client_under_its_watch_never_reconnects_the_listener(
) -> None:
    """The LISTEN connection goes with the pool: the watch loop (a worker's)
    ends with `StorageClosed` instead of opening a new one for a closed
    client. Such a connect was cut short when the worker stopped, and
    asyncpg, cancelled while its TCP connect completed, left a future whose
    error nobody read: "Future exception was never retrieved" in the host's
    log (and `test_closing_the_client_under_a_running_worker_stops_it_quietly`
    failed on it one run in five under load)."""
    require_postgres()
    url = new_postgres_url()
    try:
        client = await durable.connect(url)
        driver: Any = client.driver
        connects: list[bool] = []
        real = driver._listener._connect_one

        async def counted() -> Any:
            connects.append(driver._pool is None)
            return await real()

        driver._listener._connect_one = counted
        ended: list[BaseException] = []

        async def watch() -> None:
            try:
                await driver.watch()
            except* durable.StorageClosed as group:  # (from its task group)
                ended.append(group)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            with anyio.fail_after(10):
                while not connects:  # it listens
                    await anyio.sleep(0.01)
            await client.close()
            with anyio.fail_after(10):
                while not ended:
                    await anyio.sleep(0.01)
        assert connects == [False]  # never once the pool was closed
    finally:
        drop_postgres_schema(url)


async def test_an_internal_error_stops_the_worker_and_is_raised_at_exit(
    client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in durable (here: a store call that raises something unexpected) is
    logged once with its traceback, stops the worker, never interrupts the host's
    code, and surfaces as WorkerFailed where the host leaves the worker."""
    async def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in durable")

    client.store.watchdog_pass = broken  # type: ignore[method-assign]  # every pass calls it
    caplog.set_level(logging.ERROR, logger="durable.worker")
    body_finished = False
    with pytest.raises(durable.WorkerFailed) as err:
        async with durable.Worker(client, workflows=[wait_wf], poll_interval=0.05):
            await anyio.sleep(0.5)  # the host's code runs on, uninterrupted
            body_finished = True
    assert body_finished
    assert isinstance(err.value.__cause__, RuntimeError)
    failures = [r for r in caplog.records if "worker_failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None


async def test_the_body_exception_comes_out_of_async_with_unchanged(
    client: durable.Client, make_worker: Any,
) -> None:
    async with make_worker(workflows=[echo_wf]):
        await client.execute(echo_wf, "x", id="taken")
    with pytest.raises(durable.WorkflowAlreadyStarted):
        async with make_worker(workflows=[echo_wf]):
            await client.start(echo_wf, "again", id="taken")
    with pytest.raises(KeyError):
        async with make_worker(workflows=[echo_wf]):
            raise KeyError("mine")


# ------------------------------------------------ 2-4. bad writes stay with their run


async def test_an_unrepresentable_sleep_is_refused_at_the_call(
    client: durable.Client, make_worker: Any,
) -> None:
    async with make_worker(workflows=[sleep_bad, echo_wf]):
        for duration, ident in (("inf", "inf"), ("1e12", "huge"), ("nan", "nan"),
                                ("none", "none")):
            out = await client.execute(sleep_bad, duration, id=f"sleep-{ident}")
            assert out.startswith("refused: sleep duration must be")
        assert await client.execute(echo_wf, "still fine", id="after-sleeps") == "still fine"


async def test_one_runs_poisoned_write_does_not_drag_down_the_group(
    client: durable.Client,
) -> None:
    """Two runs' writes in one group commit, one of them unrepresentable (a timer
    at infinity): the healthy one is recorded, the poisoned one's caller gets
    WriteRejected, and nothing of it is written."""
    good = await client.start(wait_wf, 3600, id="good")
    bad = await client.start(wait_wf, 3600, id="bad")
    claimed = {c.run.workflow_id: c.run for c in await client.store.claim_runs(
        client.namespace, "default", "w", ("faults_wait",), 10, 60.0, client.clock.now())}
    committer = Committer(client.store.commit, client.clock)
    outcomes: dict[str, Any] = {}

    async def submit(name: str, fire_at: float) -> None:
        run = claimed[name]
        try:
            outcomes[name] = await committer.submit(
                run.run_id, run.epoch, [ScheduleTimer(op_id="0:9", fire_at=fire_at, duration=1)])
        except durable.WriteRejected as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(submit, "good", client.clock.now() + 60)
        tg.start_soon(submit, "bad", math.inf)
    assert outcomes["good"].committed
    assert isinstance(outcomes["bad"], durable.WriteRejected)
    assert any(e.data.get("op_id") == "0:9" for e in await good.history())
    assert not any(e.data.get("op_id") == "0:9" for e in await bad.history())


async def test_continue_as_new_over_the_payload_limit_fails_the_run(db_url: str) -> None:
    limits = durable.Limits(payload_bytes=1000)
    async with durable.connect(db_url, limits=limits) as client:
        async with durable.Worker(client, workflows=[big_continue], poll_interval=0.1):
            with pytest.raises(durable.WorkflowFailed) as err, anyio.fail_after(10):
                await client.execute(big_continue, 5000, id="big-can")
    assert err.value.failure["failure_category"] == "structural_limit"
    assert err.value.failure["kind"] == "payload_bytes"


async def test_a_task_that_cannot_start_is_failed_and_the_queue_moves_on(
    client: durable.Client, make_worker: Any,
) -> None:
    """An attempt whose stored options make its deadlines unrepresentable is
    failed (quarantined) when claimed, instead of being picked first forever."""
    poisoned = await client.start(call, "faults_echo", ["p"], id="poisoned")
    async with make_worker(workflows=[call]):
        with anyio.fail_after(10):
            while not await client.driver.run(lambda tx: _task_count()):
                await anyio.sleep(0.05)

    def poison(tx: durable.driver.Tx) -> Any:
        yield durable.driver.ex(
            "UPDATE activity_tasks SET options = "
            "'{\"start_to_close_timeout\": 1e300, \"retry\": {\"max_attempts\": 1, "
            "\"initial_interval\": 1, \"backoff_coefficient\": 2, \"maximum_interval\": 1}}'")

    await client.driver.run(poison)
    healthy = await client.start(call, "faults_echo", ["h"], id="healthy")
    async with make_worker(workflows=[call], activities=[echo]):
        with anyio.fail_after(20):
            assert await healthy.result() == "h"
            out = await poisoned.result()
    assert out["failed"] == "invalid_task"


async def test_infinite_or_huge_activity_timeouts_are_refused_when_built() -> None:
    for bad in (math.inf, 1e12, math.nan, -1, 0, "30", True):
        with pytest.raises(durable.ConfigurationError, match="start_to_close_timeout"):
            durable.ActivityOptions(start_to_close_timeout=bad)


# ---------------------------------------------------------------- 5-8. incarnations and stopping


async def test_a_restarted_worker_does_not_renew_its_dead_incarnations_attempts(
    client: durable.Client,
) -> None:
    """A worker process dies holding an attempt; a new process starts with the same
    identity. Its lease renewals must not keep the dead process's attempt alive:
    leases belong to an incarnation, so the attempt expires and is retried."""
    key = f"incarnation-{uuid.uuid4().hex[:10]}"
    GATES[key] = threading.Event()
    handle = await client.start(call, "faults_gated", [key], 2, id=key)
    dead = durable.Worker(client, workflows=[call], activities=[gated], identity="node-1",
                          poll_interval=0.05, lease_seconds=1.0, shutdown_grace=0.1)
    real_release = client.store.release_runs

    async def crash_without_release(*args: Any, **kwargs: Any) -> None:
        return None  # a killed process hands nothing back

    client.store.release_runs = crash_without_release  # type: ignore[method-assign]
    try:
        async with dead:
            with anyio.fail_after(20):
                while SEEN.get(key) != ["started"]:
                    await anyio.sleep(0.05)
    finally:
        client.store.release_runs = real_release  # type: ignore[method-assign]
    assert dead.worker_id.startswith("node-1#")
    GATES[key].set()  # the abandoned thread ends; its late result is refused
    async with durable.Worker(client, workflows=[call], activities=[gated], identity="node-1",
                              poll_interval=0.05, lease_seconds=1.0) as restarted:
        assert restarted.worker_id != dead.worker_id
        with anyio.fail_after(20):
            assert await handle.result() == "released"
    retries = [e.data["failure"]["failure_category"]
               for e in await handle.history() if e.type == "ActivityRetryScheduled"]
    assert retries == ["worker_lost"]


@pytest.mark.parametrize("kind", ["cooperative", "process"])
async def test_a_graceful_stop_hands_sync_attempts_back_without_using_a_retry(
    client: durable.Client, kind: str,
) -> None:
    key = f"handback-{kind}-{uuid.uuid4().hex[:10]}"
    name = "faults_cooperative" if kind == "cooperative" else "faults_isolated"
    handle = await client.start(call, name, [key], 1, id=key)  # max_attempts=1
    async with durable.Worker(client, workflows=[call], activities=[cooperative, isolated],
                              poll_interval=0.1):
        with anyio.fail_after(20):
            while not any(e.type == "ActivityStarted" for e in await handle.history()):
                await anyio.sleep(0.05)
        await anyio.sleep(0.3)
    released = events(await handle.history(), "ActivityAttemptReleased")
    assert len(released) == 1
    assert not events(await handle.history(), "ActivityFailed")
    info = await handle.describe()
    assert info["status"] == "running"
    assert info["pending_operations"][0]["attempt"] == 1  # no retry used


@activity.defn(name="faults_isolated", process_isolated=True)
def isolated(key: str) -> str:
    time.sleep(60)
    return "finished"


async def test_leaving_the_worker_does_not_wait_forever_for_a_deaf_thread(
    client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    key = f"deaf-{uuid.uuid4().hex[:10]}"
    handle = await client.start(call, "faults_deaf", [key, 30.0], 1, id=key)
    caplog.set_level(logging.WARNING, logger="durable.worker")
    worker = durable.Worker(client, workflows=[call], activities=[deaf], poll_interval=0.1,
                            shutdown_grace=0.5)
    started = 0.0
    async with worker:
        with anyio.fail_after(20):
            while SEEN.get(key) != ["started"]:
                await anyio.sleep(0.05)
        started = time.monotonic()
    assert time.monotonic() - started < 10  # not the 30 s the thread sleeps
    assert any("activity_thread_abandoned" in r.getMessage() for r in caplog.records)
    assert handle.workflow_id == key


async def test_a_graceful_stop_with_a_claim_in_flight_logs_no_internal_error(
    client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    real = client.store.claim_runs
    in_flight = anyio.Event()

    async def slow_claim(*args: Any, **kwargs: Any) -> Any:
        in_flight.set()
        await anyio.sleep(0.3)
        return await real(*args, **kwargs)

    client.store.claim_runs = slow_claim  # type: ignore[method-assign]
    handle = await client.start(echo_wf, "x", id="in-flight")
    caplog.set_level(logging.DEBUG)
    async with durable.Worker(client, workflows=[echo_wf], poll_interval=0.05):
        await in_flight.wait()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "AssertionError" not in text and "worker_failed" not in text
    client.store.claim_runs = real  # type: ignore[method-assign]
    async with durable.Worker(client, workflows=[echo_wf], poll_interval=0.05):
        with anyio.fail_after(10):
            assert await handle.result() == "x"  # the run was handed back


# ---------------------------------------------------------------- 9-14. correct results


async def test_a_replay_that_skips_recorded_ops_is_non_deterministic(
    client: durable.Client,
) -> None:
    key = f"skips-{uuid.uuid4().hex[:10]}"
    handle = await client.start(changing, key, id=key)
    async with durable.Worker(client, workflows=[changing], activities=[effect],
                              poll_interval=0.05):
        with anyio.fail_after(20):
            while not any(e.type == "TimerScheduled" for e in await handle.history()):
                await anyio.sleep(0.05)
    SKIP_SECOND["on"] = True
    try:
        async with durable.Worker(client, workflows=[changing], activities=[effect],
                                  poll_interval=0.05):
            with anyio.fail_after(20):
                while not (await handle.describe())["run"]["needs_review"]:
                    await anyio.sleep(0.05)
    finally:
        SKIP_SECOND["on"] = False
    info = await handle.describe()
    assert info["status"] == "needs_review" and info["run"]["needs_review"]
    review = events(await handle.history(), "WorkflowNeedsReview")
    assert "without asking again for the recorded operations" in review[0].data["message"]
    assert "WorkflowCompleted" not in [e.type for e in await handle.history()]


async def test_a_wall_clock_step_neither_fires_a_deadline_early_nor_delays_it(
    client: durable.Client, make_worker: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within a process deadlines follow a clock that never steps: moving the wall
    clock an hour forward or back changes nothing. (A deadline that followed the
    stepped clock would fire at once, or an hour late: a one-second timeout
    tells both apart from on time.)"""
    real_time = time.time
    for step in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda s=step, t=real_time: t() + s)
        async with make_worker(workflows=[wait_wf]):
            handle = await client.start(
                wait_wf, 30, id=f"step-{int(step)}",
                options=durable.StartOptions().with_run_timeout(1))
            began = time.monotonic()
            with pytest.raises(durable.WorkflowTimedOut), anyio.fail_after(15):
                await handle.result()
        took = time.monotonic() - began
        assert took > 0.75, f"a {step:+.0f} s wall-clock step fired the deadline after {took} s"
        monkeypatch.undo()


async def test_a_start_handle_stays_with_its_run_after_the_id_is_reused(
    client: durable.Client, make_worker: Any,
) -> None:
    async with make_worker(workflows=[fail_wf, wait_wf]):
        old = await client.start(fail_wf, "first", id="reused")
        with pytest.raises(durable.WorkflowFailed):
            await old.result()
        new = await client.start(
            wait_wf, 3600, id="reused",
            options=durable.StartOptions(id_reuse=durable.IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY))
        assert new.run_id != old.run_id
        with pytest.raises(durable.WorkflowFailed):  # the old run's outcome, not the new one's
            await old.result()
        await old.terminate(reason="meant for the old run")  # it is closed: nothing happens
        assert (await new.describe())["run"]["status"] in ("pending", "running")
        with pytest.raises(durable.RunNotCurrent):
            await old.request_cancellation(reason="too late")
        assert (await client.get_handle("reused").describe())["run"]["run_id"] == new.run_id
        await new.terminate()


async def test_start_child_with_a_taken_id_raises_at_the_call(
    client: durable.Client, make_worker: Any,
) -> None:
    async with make_worker(workflows=[child_taken, echo_wf]):
        assert await client.execute(child_taken, "kid", id="parent-taken") == (
            "refused at the call")


async def test_an_op_started_after_delivery_outside_a_shield_is_never_sent(
    client: durable.Client, make_worker: Any,
) -> None:
    key = f"unsent-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[unsent], activities=[effect]):
        handle = await client.start(unsent, key, id=key)
        with anyio.fail_after(10):
            while not any(e.type == "TimerScheduled" for e in await handle.history()):
                await anyio.sleep(0.05)
        await handle.request_cancellation(reason="stop", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled), anyio.fail_after(20):
            await handle.result()
    assert SEEN[key] == ["shielded"]
    scheduled = events(await handle.history(), "ActivityScheduled")
    assert len(scheduled) == 1


async def test_virtual_time_never_expires_a_live_workers_leases() -> None:
    """An activity blocked in real time while the environment skips virtual time:
    its attempt is not declared lost at the (far) lease expiry."""
    key = f"vt-lease-{time.monotonic_ns()}"
    GATES[key] = threading.Event()
    async with TimeSkippingEnvironment() as env:
        async with env.worker(workflows=[call], activities=[gated]):
            handle = await env.client.start(call, "faults_gated", [key], 1, id=key)
            await anyio.sleep(0.5)  # idle from the environment's view: it may skip
            GATES[key].set()
            with anyio.fail_after(20):
                assert await handle.result() == "released"
        history = await handle.history()
    assert not events(history, "ActivityRetryScheduled")
    assert SEEN[key] == ["started"]


# ------------------------------------------------ 15-17. bad input, nothing half-written


@pytest.mark.parametrize("bad_id", ["", "a\x00b", "bad\ud800", "x" * 256, "line\nbreak", 7])
async def test_bad_workflow_ids_are_refused_before_anything_is_written(
    client: durable.Client, bad_id: Any,
) -> None:
    with pytest.raises(durable.ConfigurationError, match="workflow id"):
        await client.start(echo_wf, "x", id=bad_id)
    assert await client.list() == []


@pytest.mark.parametrize(("build", "field"), [
    (lambda: durable.RetryPolicy(max_attempts=0), "RetryPolicy.max_attempts"),
    (lambda: durable.RetryPolicy(initial_interval=math.nan), "RetryPolicy.initial_interval"),
    (lambda: durable.RetryPolicy(backoff_coefficient=math.inf), "backoff_coefficient"),
    (lambda: durable.ActivityOptions(max_attempts=1.5), "ActivityOptions.max_attempts"),
    (lambda: durable.ActivityOptions(cancellation="sometimes"), "ActivityOptions.cancellation"),
    (lambda: durable.ActivityOptions(task_queue="q\x00"), "ActivityOptions.task_queue"),
    (lambda: durable.ChildOptions(parent_close_policy="nope"), "parent_close_policy"),
    (lambda: durable.ChildOptions(cleanup_timeout=-1), "cleanup_timeout"),
    (lambda: durable.StartOptions(execution_timeout=math.inf), "execution"),
    (lambda: durable.StartOptions(id_reuse="whatever"), "StartOptions.id_reuse"),
    (lambda: durable.Limits(payload_bytes=0), "Limits.payload_bytes"),
])
def test_every_option_is_validated_when_built(build: Any, field: str) -> None:
    with pytest.raises(durable.ConfigurationError, match=field):
        build()


def test_a_bare_string_of_non_retryable_types_is_one_name() -> None:
    policy = durable.RetryPolicy(non_retryable_error_types="PaymentDeclined")  # type: ignore[arg-type]
    assert policy.non_retryable_error_types == ("PaymentDeclined",)


async def test_worker_and_cancellation_arguments_are_validated(client: durable.Client) -> None:
    for kwargs, field in (({"lease_seconds": "x"}, "lease_seconds"),
                          ({"max_concurrent_runs": 0}, "max_concurrent_runs"),
                          ({"poll_interval": math.inf}, "poll_interval"),
                          ({"task_queue": ""}, "task_queue"),
                          ({"capabilities": ("telepathy",)}, "capabilities"),
                          ({"workflows": "faults_echo_wf"}, "workflows")):
        with pytest.raises(durable.ConfigurationError, match=field):
            durable.Worker(client, **{"workflows": [echo_wf], **kwargs})
    handle = await client.start(wait_wf, 3600, id="validate-cancel")
    for bad in (math.nan, math.inf, 0, -5):
        with pytest.raises(durable.ConfigurationError, match="cleanup_timeout"):
            await handle.request_cancellation(cleanup_timeout=bad)
    assert (await handle.describe())["cancellation"] is None


async def test_connect_refuses_unknown_options_and_malformed_urls(tmp_path: Path) -> None:
    with pytest.raises(durable.ConfigurationError, match="sqlite:///relative"):
        await durable.connect("sqlite:/bad")
    assert not Path("bad").exists()
    with pytest.raises(durable.ConfigurationError, match="does not take"):
        await durable.connect(f"sqlite:///{tmp_path / 'x.db'}", pool_size=3)
    with pytest.raises(durable.ConfigurationError, match="unknown options"):
        await durable.connect(f"sqlite:///{tmp_path / 'y.db'}?journal=off")


async def test_the_sqlite_files_are_private_to_their_owner(tmp_path: Path) -> None:
    path = tmp_path / "private.db"
    async with durable.connect(f"sqlite:///{path}") as client:
        async with durable.Worker(client, workflows=[echo_wf], poll_interval=0.05):
            assert await client.execute(echo_wf, "x", id="p") == "x"
            modes = {f.name: f.stat().st_mode & 0o777 for f in tmp_path.iterdir()}
    assert modes["private.db"] == 0o600
    assert all(mode == 0o600 for name, mode in modes.items() if name.startswith("private.db"))
    assert {"private.db-wal", "private.db-shm"} <= set(modes)


# ---------------------------------------------------------------- 18-22. what users meet first


async def test_the_time_skipping_environment_never_drops_a_schema_it_did_not_create() -> None:
    require_postgres()
    url = new_postgres_url()
    try:
        async with durable.connect(url) as keep:
            await keep.start(wait_wf, 60, id="kept")
        async with TimeSkippingEnvironment(url) as env:
            async with env.worker(workflows=[wait_wf]):
                assert await env.client.execute(wait_wf, 3600, id="virtual") == "woke"
        async with durable.connect(url) as keep:
            assert [r["workflow_id"] for r in await keep.list()] == ["kept"]
        base = url.split("?", 1)[0]
        async with TimeSkippingEnvironment(base) as env:  # no ?schema= at all
            async with env.worker(workflows=[wait_wf]):
                assert await env.client.execute(wait_wf, 60, id="bare") == "woke"
    finally:
        drop_postgres_schema(url)


async def test_workflow_logger_lines_are_visible_by_default(
    client: durable.Client, make_worker: Any, capfd: pytest.CaptureFixture[str],
) -> None:
    async with make_worker(workflows=[logs_something]):
        await client.execute(logs_something, "marker-42", id="logs")
    out = capfd.readouterr().out
    assert "faults_visible_line" in out and "marker-42" in out


async def test_timed_out_deadline_is_a_datetime(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[wait_wf]):
        handle = await client.start(wait_wf, 30, id="dl",
                                    options=durable.StartOptions().with_run_timeout(1))
        with pytest.raises(durable.WorkflowTimedOut) as err, anyio.fail_after(15):
            await handle.result()
    assert err.value.deadline_at is not None and err.value.deadline_at.tzinfo is not None


def test_the_order_example_refuses_a_second_start_as_it_says(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'orders.db'}"
    example = Path(__file__).parent.parent / "examples" / "order.py"
    first = subprocess.run([sys.executable, str(example), url], capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([sys.executable, str(example), url], capture_output=True,
                            text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "was started before" in second.stdout and "result:" in second.stdout
    assert os.path.exists(tmp_path / "orders.db")


async def test_a_loop_stopped_while_storage_closes_under_its_task_group_stops_quietly(
) -> None:
    """A worker loop with a task group of its own (the PostgreSQL listener's)
    can end with the client's closing and the worker's stopping it at once:
    its group then holds the closed storage and the cancellation. On trio the
    loop's scope took the cancellation and let the rest escape, and the host's
    `async with` raised a group of `StorageClosed` (seen once in 30 runs of
    the test above on PostgreSQL). Explicitly here: the loop's storage closes
    while the worker stops it."""
    async with durable.connect("sqlite://:memory:") as client:
        worker = durable.Worker(client, workflows=[wait_wf], poll_interval=0.05)
        async with worker:

            async def listener_like() -> None:
                async with anyio.create_task_group() as tg:
                    async def closes() -> None:
                        raise durable.StorageClosed("the client was closed")

                    tg.start_soon(closes)
                    try:
                        await anyio.sleep_forever()
                    finally:  # as its group unwinds, the worker stops this loop
                        worker._stop_serving(None)

            assert worker._tg is not None
            worker._tg.start_soon(worker._guarded, listener_like)
            with anyio.fail_after(10):
                await worker._stopped.wait()
        assert worker.failure is None
