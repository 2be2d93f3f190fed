"""Cooperative cancellation (seed 002): requests, delivery, policies, shielded
cleanup, deadlines, capability refusal and the cascade view.

Part of the conformance suite (`durable.testing.conformance`): import the
tests into a test module of your own, ``from durable.testing.conformance.cancellation import *``.

Kept whole: one behaviour's tests, scenario by scenario, with the workflows
and activities they share; a driver's author runs them as one suite.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import anyio
import pytest

import durable
from durable import CancellationPolicy as P
from durable import activity, workflow

pytestmark = pytest.mark.anyio

EFFECTS: dict[str, list[str]] = {}


def effect(key: str, what: str) -> None:
    EFFECTS.setdefault(key, []).append(what)


def opts(policy: P = P.TRY_CANCEL, **kw: Any) -> durable.ActivityOptions:
    kw.setdefault("schedule_to_close_timeout", 120)
    kw.setdefault("retry", durable.RetryPolicy(max_attempts=1))
    return durable.ActivityOptions(cancellation=policy, **kw)


@activity.defn
async def never_heartbeats(key: str) -> str:
    effect(key, "started")
    try:
        await anyio.sleep(60)
    finally:
        effect(key, "stopped")
    return "finished"


@activity.defn
def thread_loop(key: str) -> str:
    effect(key, "started")
    for _ in range(6000):
        activity.heartbeat()
        time.sleep(0.01)
    return "finished"


#: a `cleanup` for one of these keys returns once the test sets its event (at
#: the latest after its `seconds`), not after a fixed time
RELEASE: dict[str, threading.Event] = {}


@activity.defn
def cleanup(key: str, seconds: float) -> str:
    release = RELEASE.get(key)
    if release is None:
        time.sleep(seconds)  # deliberately deaf to stop requests
    else:
        release.wait(seconds)  # as deaf, until the test has seen what it waits for
    effect(key, "cleanup")
    return "cleaned"


@activity.defn
async def note(value: Any) -> Any:
    return value


@workflow.defn
async def guarded(key: str, kind: str, policy: str, cleanup_seconds: float) -> str:
    pol = P(policy)
    try:
        if kind == "activity":
            await workflow.execute_activity(never_heartbeats, key, options=opts(pol))
        elif kind == "thread":
            await workflow.execute_activity(thread_loop, key, options=opts(pol))
        elif kind == "local":
            await workflow.execute_local_activity(never_heartbeats, key, options=opts(pol))
        elif kind == "local_thread":
            await workflow.execute_local_activity(thread_loop, key, options=opts(pol))
        elif kind == "timer":
            await workflow.sleep(3600)
        elif kind == "child":
            await workflow.execute_child(
                cleaning_child, key, id=f"{key}-child",
                options=durable.ChildOptions(cancellation=pol),
            )
        return "not cancelled"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(cleanup, key, cleanup_seconds)


@workflow.defn
async def cleaning_child(key: str) -> str:
    try:
        await workflow.sleep(3600)
        return "slept"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(cleanup, f"{key}-child", 0.2)


ALL_ACTIVITIES = [never_heartbeats, thread_loop, cleanup, note]


async def started(handle: durable.WorkflowHandle, event: str = "ActivityStarted") -> None:
    with anyio.fail_after(10):
        while not any(e.type == event for e in await handle.history()):
            await anyio.sleep(0.02)


async def types_of(handle: durable.WorkflowHandle) -> list[str]:
    return [e.type for e in await handle.history()]


async def child_waiting_on_its_timer(child: durable.WorkflowHandle) -> None:
    """Wait until the child exists and sleeps on its durable timer."""
    with anyio.fail_after(10):
        while True:
            try:
                if "TimerScheduled" in await types_of(child):
                    return
            except durable.WorkflowNotFound:
                pass
            await anyio.sleep(0.02)


@pytest.mark.parametrize("policy", [P.TRY_CANCEL, P.WAIT_CANCELLATION_COMPLETED, P.ABANDON])
async def test_remote_async_activity_without_heartbeats_is_stopped(
    client: durable.Client, make_worker: Any, policy: P
) -> None:
    key = f"remote-{policy.value}-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded, cleaning_child], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "activity", policy.value, 0.0, id=key)
        await started(handle)
        began = time.monotonic()
        request = await handle.request_cancellation(reason="Order withdrawn", cleanup_timeout=30)
        assert request.accepted
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
        assert time.monotonic() - began < 10
        if policy is not P.ABANDON:
            with anyio.fail_after(10):
                while "stopped" not in EFFECTS.get(key, []):
                    await anyio.sleep(0.02)
    assert "cleanup" in EFFECTS[key]
    info = await handle.describe()
    assert info["status"] == "cancelled"
    assert info["cancellation"]["lifecycle"] == "cancelled"
    assert info["cancellation"]["cleanup_outcome"] == "completed"
    events = await handle.history()
    types = [e.type for e in events]
    delivered = next(e for e in events if e.type == "CancellationDelivered")
    assert [b["kind"] for b in delivered.data["boundary"]] == ["activity"]
    assert "WorkflowCancelled" in types
    if policy is P.ABANDON:
        assert "ActivityCancelRequested" not in types
    else:
        assert "ActivityCancelRequested" in types
        cascade = await handle.cancellation_cascade()
        stops = cascade["runs"][0]["activity_stops"]
        assert stops and stops[0]["policy"] == policy.value
        with anyio.fail_after(10):
            while (await handle.cancellation_cascade())["runs"][0]["activity_stops"][0][
                    "state"] != "stopped":
                await anyio.sleep(0.05)
    if policy is P.WAIT_CANCELLATION_COMPLETED:
        # the workflow waited for the durable stop receipt before cleaning up
        assert types.index("ActivityCancelled") < types.index("WorkflowCancelled")
        receipt = next(e for e in events if e.type == "ActivityCancelled").data["stop_receipt"]
        assert receipt["kind"] == "cancel_scope"


async def test_sync_thread_activity_stops_cooperatively(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"thread-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "thread", "wait_cancellation_completed", 0.0,
                                    id=key)
        await started(handle)
        await handle.request_cancellation(reason="stop", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    receipt = next(e for e in await handle.history()
                   if e.type == "ActivityCancelled").data["stop_receipt"]
    assert receipt["kind"] == "cooperative"
    assert receipt["confirmed"] is True


@pytest.mark.parametrize("kind", ["local", "local_thread"])
@pytest.mark.parametrize("policy", [P.TRY_CANCEL, P.WAIT_CANCELLATION_COMPLETED])
async def test_local_activity_is_stopped(
    client: durable.Client, make_worker: Any, kind: str, policy: P
) -> None:
    key = f"{kind}-{policy.value}-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, kind, policy.value, 0.0, id=key)
        with anyio.fail_after(10):
            while "started" not in EFFECTS.get(key, []):
                await anyio.sleep(0.02)
        await handle.request_cancellation(reason="stop", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    events = await handle.history()
    cancelled = next(e for e in events if e.type == "ActivityCancelled")
    assert cancelled.data["local"] is True
    assert cancelled.data["policy"] == policy.value
    expected = {"local": "cancel_scope", "local_thread": (
        "abandoned_thread" if policy is P.TRY_CANCEL else "cooperative")}[kind]
    assert cancelled.data["stop_receipt"]["kind"] == expected


async def test_abandon_is_refused_for_local_activities_at_the_call(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[abandon_local], activities=ALL_ACTIVITIES):
        result = await client.execute(abandon_local, id="abandon-local")
    assert "not allowed for local activities" in result
    assert "ActivityScheduled" not in await types_of(client.get_handle("abandon-local"))


@workflow.defn
async def abandon_local() -> str:
    try:
        await workflow.execute_local_activity(note, 1, options=durable.ActivityOptions(
            cancellation=P.ABANDON))
    except durable.PolicyRejected as exc:
        return str(exc)
    return "accepted"


async def test_abandon_without_schedule_to_close_is_refused(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[abandon_unbounded], activities=ALL_ACTIVITIES):
        result = await client.execute(abandon_unbounded, id="abandon-unbounded")
    assert "schedule_to_close_timeout" in result


@workflow.defn
async def abandon_unbounded() -> str:
    try:
        await workflow.execute_activity(note, 1, options=durable.ActivityOptions(
            cancellation=P.ABANDON))
    except durable.PolicyRejected as exc:
        return str(exc)
    return "accepted"


@pytest.mark.remote_client
async def test_timer_is_cancelled_and_cleanup_runs(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"timer-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "timer", "try_cancel", 0.0, id=key)
        await started(handle, "TimerScheduled")
        await handle.request_cancellation(reason="stop")
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    types = await types_of(handle)
    assert types.index("CancellationDelivered") < types.index("TimerCancelled")
    assert EFFECTS[key] == ["cleanup"]


@pytest.mark.parametrize("policy", [P.TRY_CANCEL, P.WAIT_CANCELLATION_COMPLETED, P.ABANDON])
async def test_child_policies(client: durable.Client, make_worker: Any, policy: P) -> None:
    key = f"child-{policy.value}-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded, cleaning_child], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "child", policy.value, 0.0, id=key)
        child = client.get_handle(f"{key}-child")
        await child_waiting_on_its_timer(child)
        await handle.request_cancellation(reason="stop", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
        child_info = await child.describe()
        if policy is P.ABANDON:
            assert child_info["status"] == "running"
            await child.terminate("test over")
        else:
            with pytest.raises(durable.WorkflowCancelled):
                await child.result()
            child_info = await child.describe()
            ctx = child_info["cancellation"]
            parent_ctx = (await handle.describe())["cancellation"]
            assert ctx["root_request_id"] == parent_ctx["root_request_id"]
            assert ctx["parent_request_id"] == parent_ctx["request_id"]
            assert ctx["deadline_at"] <= parent_ctx["deadline_at"]
    types = await types_of(handle)
    if policy is P.WAIT_CANCELLATION_COMPLETED:
        assert "ChildWorkflowFailed" in types
        assert types.index("ChildWorkflowFailed") < types.index("WorkflowCancelled")
    assert EFFECTS[key] == ["cleanup"]


@pytest.mark.remote_client
async def test_duplicate_request_keeps_original_deadline(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"dup-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "timer", "try_cancel", 0.0, id=key)
        await started(handle, "TimerScheduled")
        first = await handle.request_cancellation(reason="first", cleanup_timeout=5)
        second = await handle.request_cancellation(reason="second", cleanup_timeout=500)
        assert first.accepted and not second.accepted
        assert second.context == first.context
        assert second.context.reason == "first"
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    third = await handle.request_cancellation(reason="third")
    assert not third.accepted and third.context.request_id == first.context.request_id
    assert (await types_of(handle)).count("CancellationRequested") == 1


@pytest.mark.remote_client
async def test_request_for_an_old_run_is_refused(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[twice], activities=ALL_ACTIVITIES):
        handle = await client.start(twice, 0, id="twice")
        with anyio.fail_after(10):
            while (await handle.describe())["run"]["run_number"] < 2:
                await anyio.sleep(0.02)
        runs = sorted(await client.list(), key=lambda r: r["run_number"])
        old = client.get_handle("twice", run_id=runs[0]["run_id"])
        with pytest.raises(durable.RunNotCurrent):
            await old.request_cancellation(reason="too late")
        await handle.terminate("done")
    with pytest.raises(durable.RunAlreadyClosed):
        await handle.request_cancellation(reason="after the end")


@workflow.defn
async def twice(n: int) -> None:
    if n == 0:
        workflow.continue_as_new(1)
    await workflow.sleep(3600)


@pytest.mark.remote_client
async def test_cancel_is_immediate_and_runs_no_cleanup(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"immediate-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES) as worker:
        handle = await client.start(guarded, key, "timer", "try_cancel", 0.0, id=key)
        await started(handle, "TimerScheduled")
        await handle.cancel(reason="now")
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
        other = await client.start(guarded, key + "-t", "timer", "try_cancel", 0.0,
                                   id=key + "-t")
        await started(other, "TimerScheduled")
        await other.terminate(reason="now")
        with pytest.raises(durable.WorkflowTerminated):
            await other.result()
        # closing a closed run changes nothing and raises nothing, on every client
        # (the HTTP plane refuses it with 409 run_not_active; the remote client
        # reads that as the no-op the embedded one makes)
        await handle.terminate(reason="again")
        await other.cancel(reason="again")
        assert [(await h.describe())["status"] for h in (handle, other)] == [
            "cancelled", "terminated"]
        with anyio.fail_after(10):  # the code of both has stopped: nothing more can run
            while worker.executors:
                await anyio.sleep(0.01)
    assert key not in EFFECTS
    assert "CancellationDelivered" not in await types_of(handle)


@pytest.mark.remote_client
async def test_delivery_while_no_worker_is_alive(client: durable.Client, make_worker: Any) -> None:
    key = f"offline-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "timer", "try_cancel", 0.0, id=key)
        await started(handle, "TimerScheduled")
    request = await handle.request_cancellation(reason="while down", cleanup_timeout=30)
    assert request.accepted
    assert (await handle.describe())["cancellation"]["lifecycle"] == "requested"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    assert EFFECTS[key] == ["cleanup"]


@pytest.mark.remote_client
async def test_cleanup_deadline_expiry_revokes_authority(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"expiry-{uuid.uuid4().hex[:10]}"
    # the cleanup outlasts its 1 s deadline: it returns only once the run closed
    # on it (it slept a fixed 3 s)
    RELEASE[key] = threading.Event()
    try:
        async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
            handle = await client.start(guarded, key, "timer", "try_cancel", 60.0, id=key)
            await started(handle, "TimerScheduled")
            await handle.request_cancellation(reason="hurry", cleanup_timeout=1)
            with pytest.raises(durable.WorkflowCancelled):
                await handle.result()
            info = await handle.describe()
            assert info["closed_reason"] == "deadline_expired"
            assert info["cancellation"]["lifecycle"] == "deadline_expired"
            assert "cleanup" not in EFFECTS.get(key, [])
            RELEASE[key].set()
            # the cleanup attempt was fenced; its late result is refused, visibly
            with anyio.fail_after(10):
                while "ActivityResultRefused" not in await types_of(handle):
                    await anyio.sleep(0.05)
    finally:
        RELEASE.pop(key).set()
    assert "cleanup" in EFFECTS[key]  # the external effect happened: the app reconciles it


async def test_capability_refusal_records_nothing(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"legacy-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES, capabilities=()) as w:
        handle = await client.start(guarded, key, "timer", "try_cancel", 0.0, id=key)
        await started(handle, "TimerScheduled")
        before = await types_of(handle)
        with pytest.raises(durable.CapabilityUnsupported):
            await handle.request_cancellation(reason="no")
        assert await types_of(handle) == before
        assert (await handle.describe())["cancellation"] is None
        # upgrading the registration does not upgrade the claim already held
        from durable.store.records import WorkerRegistration

        await client.store.register_worker(WorkerRegistration(
            w.worker_id, client.namespace, "default", ("guarded",), (), (
                "cooperative_cancellation",)), 60, client.clock.now())
        with pytest.raises(durable.CapabilityUnsupported):
            await handle.request_cancellation(reason="still no")
        await handle.terminate("test over")


@workflow.defn
async def budgeted(key: str, child_cleanup: float) -> Any:
    try:
        await workflow.execute_child(
            cleaning_child, key, id=f"{key}-child",
            options=durable.ChildOptions(cleanup_timeout=child_cleanup),
        )
    finally:
        ctx = workflow.cancellation()
        if ctx is not None:
            with workflow.cancellation_shield():
                deadline = workflow.deadline()  # a cleanup always has one
                assert deadline is not None
                await workflow.execute_local_activity(
                    note, [workflow.remaining(), deadline.isoformat()])
    return None


async def test_child_never_gets_a_longer_budget(client: durable.Client, make_worker: Any) -> None:
    key = f"budget-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[budgeted, cleaning_child], activities=ALL_ACTIVITIES):
        handle = await client.start(budgeted, key, 3600.0, id=key)
        child = client.get_handle(f"{key}-child")
        await child_waiting_on_its_timer(child)
        request = await handle.request_cancellation(reason="budget", cleanup_timeout=20)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    child_ctx = (await child.describe())["cancellation"]
    assert child_ctx["deadline_at"] == request.context.deadline.isoformat()
    noted = next(e for e in await handle.history()
                 if e.type == "ActivityCompleted" and e.data.get("local"))
    remaining, deadline_iso = noted.data["result"]
    assert 0 < remaining <= 20
    assert deadline_iso == request.context.deadline.isoformat()


@workflow.defn
async def level(key: str, depth: int) -> None:
    try:
        async with workflow.task_group() as tg:
            if depth > 0:
                tg.start_soon(workflow.execute_child, level, f"{key}-wait", depth - 1)
                tg.start_soon(lambda: workflow.execute_child(
                    level, f"{key}-try", 0, id=f"{key}-try",
                    options=durable.ChildOptions(cancellation=P.TRY_CANCEL)))
            tg.start_soon(lambda: workflow.execute_activity(
                never_heartbeats, key, options=opts(P.WAIT_CANCELLATION_COMPLETED)))
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(cleanup, key, 0.0)


@pytest.mark.remote_client
async def test_three_level_tree_cascade(client: durable.Client, make_worker: Any) -> None:
    key = f"tree-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[level], activities=ALL_ACTIVITIES,
                           max_concurrent_activities=20):
        handle = await client.start(level, key, 2, id=key)
        with anyio.fail_after(15):
            while len([r for r in await client.list(status="running")]) < 5:
                await anyio.sleep(0.05)
            while sum(v.count("started") for k, v in EFFECTS.items() if k.startswith(key)) < 5:
                await anyio.sleep(0.05)
        await handle.request_cancellation(reason="tree", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
        with anyio.fail_after(15):
            while True:
                cascade = await handle.cancellation_cascade()
                states = [s["state"] for r in cascade["runs"] for s in r["activity_stops"]]
                if len(cascade["runs"]) == 5 and states and all(
                        x == "stopped" for x in states):
                    break
                await anyio.sleep(0.1)
    assert cascade["root"]["reason"] == "tree"
    assert cascade["inspection_complete"] is True
    assert len(cascade["edges"]) == 4
    roots = {r["request"]["root_request_id"] for r in cascade["runs"] if r["request"]}
    assert roots == {cascade["root"]["request_id"]}
    lifecycles = {r["workflow_id"]: r["lifecycle"] for r in cascade["runs"]}
    assert set(lifecycles.values()) == {"cancelled"}
    policies = sorted(e["policy"] for e in cascade["edges"])
    assert policies == ["try_cancel", "try_cancel", "wait_cancellation_completed",
                        "wait_cancellation_completed"]


async def test_lost_worker_leaves_the_stop_unverified(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"unverified-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[guarded], activities=ALL_ACTIVITIES):
        handle = await client.start(guarded, key, "activity", "try_cancel", 0.0, id=key)
        await started(handle)
    # the attempt's worker is gone (its attempt was handed back), then a request
    # stops what is left; nobody ever confirmed that the first attempt stopped
    async with make_worker(workflows=[guarded], activities=[cleanup]):
        await handle.request_cancellation(reason="stop", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    cascade = await handle.cancellation_cascade()
    stops = cascade["runs"][0]["activity_stops"]
    assert stops[0]["state"] in ("stopped", "unverified")
    if stops[0]["state"] == "unverified":
        assert cascade["inspection_complete"] is False
        assert cascade["findings"]


@activity.defn(process_isolated=True)
def stubborn(pid_file: str) -> str:
    """Ignores every stop request: only killing its process stops it."""
    import os
    from pathlib import Path

    Path(pid_file).write_text(str(os.getpid()))
    while True:
        time.sleep(0.5)


@workflow.defn
async def isolated(kind: str, pid_file: str) -> str:
    options = opts(P.WAIT_CANCELLATION_COMPLETED)
    if kind == "local":
        await workflow.execute_local_activity(stubborn, pid_file, options=options)
    else:
        await workflow.execute_activity(stubborn, pid_file, options=options)
    return "finished"


@pytest.mark.parametrize("kind", ["remote", "local"])
async def test_process_isolated_activity_is_killed_and_confirmed(
    client: durable.Client, make_worker: Any, kind: str, tmp_path: Any
) -> None:
    import os

    pid_file = tmp_path / "pid"
    async with make_worker(workflows=[isolated], activities=[stubborn]):
        handle = await client.start(isolated, kind, str(pid_file), id=f"isolated-{kind}")
        with anyio.fail_after(20):
            while not pid_file.exists() or not pid_file.read_text():
                await anyio.sleep(0.05)
        pid = int(pid_file.read_text())
        await handle.request_cancellation(reason="kill it", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    receipt = next(e for e in await handle.history()
                   if e.type == "ActivityCancelled").data["stop_receipt"]
    assert receipt["kind"] == "process_killed"
    assert receipt["confirmed"] is True
    assert receipt["exit_code"] is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@workflow.defn
async def two_steps_with_a_pause(key: str) -> str:
    try:
        await workflow.execute_local_activity(note, "step 1")
        await anyio.sleep(5)  # not a durable op: code "between steps"
        await workflow.execute_local_activity(note, "step 2")
        return "done"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(cleanup, key, 0.0)


@pytest.mark.remote_client
async def test_cancellation_between_steps(client: durable.Client, make_worker: Any) -> None:
    key = f"between-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[two_steps_with_a_pause], activities=ALL_ACTIVITIES):
        handle = await client.start(two_steps_with_a_pause, key, id=key)
        await started(handle, "ActivityCompleted")
        await handle.request_cancellation(reason="between")
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    events = await handle.history()
    delivered = next(e for e in events if e.type == "CancellationDelivered")
    assert delivered.data["boundary"] == []
    completed = [e.data["result"] for e in events if e.type == "ActivityCompleted"]
    assert completed == ["step 1", "cleaned"]
    assert EFFECTS[key] == ["cleanup"]


#: set once `deaf` runs in its thread: "ActivityStarted" is recorded at the
#: claim, and a cancellation before the thread began stops it unrun
DEAF_RUNNING = threading.Event()


@activity.defn
def deaf(seconds: float) -> str:
    DEAF_RUNNING.set()
    time.sleep(seconds)  # cannot be stopped: only its return ends it
    return "returned"


@workflow.defn
async def waits_for_deaf() -> str:
    try:
        return str(await workflow.execute_activity(
            deaf, 1.0, options=opts(P.WAIT_CANCELLATION_COMPLETED)))
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_local_activity(note, "after the receipt")


async def test_wait_policy_waits_for_an_operation_that_only_stops_when_it_returns(
    client: durable.Client, make_worker: Any
) -> None:
    DEAF_RUNNING.clear()
    async with make_worker(workflows=[waits_for_deaf], activities=[deaf, note]):
        handle = await client.start(waits_for_deaf, id="deaf")
        await started(handle)
        with anyio.fail_after(10):  # its thread runs it (a loaded box starts it late)
            while not DEAF_RUNNING.is_set():
                await anyio.sleep(0.01)
        began = time.monotonic()
        await handle.request_cancellation(reason="stop")
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
        waited = time.monotonic() - began
    assert 0.5 < waited < 5
    events = await handle.history()
    types = [e.type for e in events]
    assert types.index("ActivityCompleted") < types.index("WorkflowCancelled")
    cascade = await handle.cancellation_cascade()
    stop = cascade["runs"][0]["activity_stops"][0]
    assert stop["stop_receipt"]["kind"] == "completed"
    assert stop["state"] == "completed"  # it finished its work: never "stopped" (issue 21)


@workflow.defn
async def leaves_a_child(key: str) -> str:
    await workflow.start_child(
        cleaning_child, key, id=f"{key}-child",
        options=durable.ChildOptions(cleanup_timeout=5),
    )
    return "parent done"


async def test_parent_close_request_cancellation_uses_the_childs_cleanup_timeout(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"pclose-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[leaves_a_child, cleaning_child],
                           activities=ALL_ACTIVITIES):
        assert await client.execute(leaves_a_child, key, id=key) == "parent done"
        child = client.get_handle(f"{key}-child")
        with pytest.raises(durable.WorkflowCancelled):
            await child.result()
    ctx = (await child.describe())["cancellation"]
    assert ctx["source"] == "parent_close_policy"
    assert ctx["cleanup_timeout_seconds"] == 5
    requested = ctx["requested_at"]
    from datetime import datetime

    budget = (datetime.fromisoformat(ctx["deadline_at"])
              - datetime.fromisoformat(requested)).total_seconds()
    assert budget == pytest.approx(5, abs=0.01)
    assert EFFECTS[f"{key}-child"] == ["cleanup"]
