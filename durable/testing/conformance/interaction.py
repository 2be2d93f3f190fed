"""Talking to running workflows, on every driver and host loop: signals, queries,
updates, condition waits, per-operation cancellation, versioning, replay.

Part of the conformance suite (`durable.testing.conformance`): import the
tests into a test module of your own, ``from durable.testing.conformance.interaction import *``.

Kept whole: one behaviour's tests, scenario by scenario, with the workflows
and activities they share; a driver's author runs them as one suite.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

import durable
import durable.testing
from durable import activity, workflow

pytestmark = pytest.mark.anyio

RUNS: dict[str, int] = {}  # how many times a handler really ran, by key
GATES: dict[str, anyio.Event] = {}
STARTED: dict[str, anyio.Event] = {}  # set by `hold` once its attempt runs, by key


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def until(condition: Callable[[], Any], what: str, within: float = 10.0) -> Any:
    """Poll an async condition until it returns something truthy."""
    with anyio.fail_after(within):
        while True:
            value = await condition()
            if value:
                return value
            await anyio.sleep(0.02)
    raise AssertionError(what)  # pragma: no cover


async def waiting_on(handle: durable.WorkflowHandle, kind: str) -> dict[str, Any]:
    """Until the run waits on an op of `kind` (its scheduling point)."""

    async def check() -> dict[str, Any] | None:
        info = await handle.describe()
        ops = [p for p in info["pending_operations"] if p["kind"] == kind]
        return ops[0] if ops else None

    found: dict[str, Any] = await until(check, f"a pending {kind}")
    return found


def types(events: Sequence[durable.HistoryEvent]) -> list[str]:
    return [e.type for e in events]


async def replays_offline(handle: durable.WorkflowHandle, *workflows: Any) -> None:
    """The run's history alone replays against this code (durable.testing.Replayer)."""
    result = await durable.testing.Replayer(workflows=list(workflows)).replay(
        await handle.history())
    assert result.finished


@activity.defn(name="ia_double")
async def double(x: int) -> int:
    return 2 * x


@activity.defn(name="ia_hold")
async def hold(key: str) -> str:
    if key in STARTED:
        STARTED[key].set()
    await GATES[key].wait()
    return f"held {key}"


# ---------------------------------------------------------------- class-based workflows


@workflow.defn(name="ia_approval")
class Approval:
    def __init__(self) -> None:
        self.approved: bool | None = None
        self.approvers: list[str] = []
        self.limit = 5

    @workflow.run
    async def run(self, order_id: str, wait: float) -> dict[str, Any]:
        ok = await workflow.wait_condition(lambda: self.approved is not None, timeout=wait)
        doubled = await workflow.execute_activity(double, self.limit)
        return {"order": order_id, "ok": ok, "approvers": self.approvers, "limit": self.limit,
                "doubled": doubled}

    @workflow.signal
    def approve(self, by: str) -> None:
        self.approvers.append(by)
        self.approved = True

    @workflow.signal(name="reject")
    async def deny(self, by: str) -> None:
        self.approvers.append(f"not {by}")
        self.approved = False

    @workflow.query
    def status(self) -> dict[str, Any]:
        return {"approved": self.approved, "approvers": self.approvers, "limit": self.limit}

    @workflow.query
    async def sneaky(self) -> None:
        await workflow.sleep(1)  # a durable op: queries cannot

    @workflow.query
    def broken(self) -> None:
        raise KeyError("no such thing")

    @workflow.update
    async def set_limit(self, limit: int) -> int:
        RUNS[f"set_limit-{workflow.info().workflow_id}"] = RUNS.get(
            f"set_limit-{workflow.info().workflow_id}", 0) + 1
        self.limit = await workflow.execute_activity(double, limit)
        return self.limit

    @set_limit.validator
    def _check_limit(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be at least 0, got {limit}")

    @workflow.update
    def explode(self) -> None:
        raise RuntimeError("the update handler failed")


@pytest.mark.remote_client
async def test_class_workflow_takes_signals_queries_and_updates(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-1", 60, id=new_id("approval"))
        await waiting_on(handle, "condition")
        assert await handle.query("status") == {"approved": None, "approvers": [], "limit": 5}
        assert await handle.update("set_limit", 7) == 14
        await handle.signal("approve", "ann")
        result = await handle.result()
        # the closed run answers from its final state (replayed by a worker)
        final = await handle.query("status")
    assert result == {"order": "o-1", "ok": True, "approvers": ["ann"], "limit": 14,
                      "doubled": 28}
    assert final == {"approved": True, "approvers": ["ann"], "limit": 14}
    events = await handle.history()
    names = types(events)
    assert names.count("SignalReceived") == names.count("SignalDelivered") == 1
    assert names.count("UpdateAccepted") == names.count("UpdateCompleted") == 1
    assert names.index("SignalReceived") < names.index("SignalDelivered")
    delivered = next(e for e in events if e.type == "SignalDelivered")
    assert delivered.data["frontier"] == [{"op_id": "0:1", "kind": "condition"}]
    completed = next(e for e in events if e.type == "UpdateCompleted")
    assert completed.data["result"] == 14 and completed.data["status"] == "completed"
    await replays_offline(handle, Approval)


@workflow.defn(name="ia_early_signal")
class EarlySignal:
    """Waits, with no timer, for one signal."""

    def __init__(self) -> None:
        self.got: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: bool(self.got))
        return self.got

    @workflow.signal
    def poke(self, value: str) -> None:
        self.got.append(value)


async def test_a_signal_recorded_between_a_claim_and_its_executor_is_delivered(
    client: durable.Client, make_worker: Callable[..., durable.Worker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim read the run's inbox counter before the signal was recorded, and
    the signal's wake-up came before the run's executor existed: the worker must
    still fetch it at once (not at a periodic resync: the poll is 30 s here)."""
    handle = await client.start(EarlySignal, id=new_id("early"))  # no worker yet
    worker = make_worker(workflows=[EarlySignal], poll_interval=30.0)
    claim_runs = worker.store.claim_runs

    async def claim_then_signal(*args: Any, **kwargs: Any) -> Any:
        claimed = await claim_runs(*args, **kwargs)
        if any(item.run.workflow_id == handle.workflow_id for item in claimed):
            await handle.signal("poke", "early")  # recorded after the claim's read
        return claimed

    monkeypatch.setattr(worker.store, "claim_runs", claim_then_signal)
    async with worker:
        with anyio.fail_after(10):
            assert await handle.result() == ["early"]


@pytest.mark.remote_client
async def test_query_errors_are_query_failed_and_record_nothing(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-2", 60, id=new_id("approval"))
        await waiting_on(handle, "condition")
        before = len(await handle.history())
        with pytest.raises(durable.QueryFailed, match=r"read-only.*workflow\.sleep"):
            await handle.query("sneaky")
        with pytest.raises(durable.QueryFailed, match="no query handler named 'nope'") as nope:
            await handle.query("nope")
        assert "status" in str(nope.value)
        with pytest.raises(durable.QueryFailed, match="KeyError") as broken:
            await handle.query("broken")
        assert broken.value.failure["cause_type"] == "KeyError"
        assert len(await handle.history()) == before
        await handle.signal("reject", "bob")
        result = await handle.result()
    assert result["approvers"] == ["not bob"] and result["ok"] is True


@pytest.mark.remote_client
async def test_update_rejected_by_its_validator_leaves_no_trace(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-3", 60, id=new_id("approval"))
        await waiting_on(handle, "condition")
        before = await handle.history()
        with pytest.raises(durable.UpdateRejected, match="limit must be at least 0") as err:
            await handle.update("set_limit", -1)
        assert isinstance(err.value.__cause__, durable.ApplicationError)
        with pytest.raises(durable.UpdateRejected, match="no update handler named 'nope'"):
            await handle.update("nope")
        assert types(await handle.history()) == types(before)
        with pytest.raises(durable.UpdateFailed, match="the update handler failed") as failed:
            await handle.update("explode")
        assert failed.value.failure["cause_type"] == "RuntimeError"
        await handle.signal("approve", "ann")
        assert (await handle.result())["limit"] == 5
    names = types(await handle.history())
    assert names.count("UpdateAccepted") == 1 and names.count("UpdateCompleted") == 1


@pytest.mark.remote_client
async def test_update_runs_once_per_update_id(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    workflow_id = new_id("approval")
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-4", 60, id=workflow_id)
        await waiting_on(handle, "condition")
        first = await handle.update("set_limit", 3, update_id="limit-3")
        again = await handle.update("set_limit", 3, update_id="limit-3")
        other = await handle.update("set_limit", 4)
        await handle.signal("approve", "ann")
        await handle.result()
    assert (first, again, other) == (6, 6, 8)
    assert RUNS[f"set_limit-{workflow_id}"] == 2
    accepted = [e.data["update_id"] for e in await handle.history() if e.type == "UpdateAccepted"]
    assert accepted.count("limit-3") == 1 and len(accepted) == 2


@pytest.mark.remote_client
async def test_an_update_id_names_one_update_only(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    """An update id already given to another update of the run is refused, as a
    signal's is: it used to answer the other update's recorded outcome as this
    one's (`explode` "returned" 6 and never ran)."""
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-4b", 60, id=new_id("approval"))
        await waiting_on(handle, "condition")
        assert await handle.update("set_limit", 3, update_id="limit-3") == 6
        with pytest.raises(durable.RequestIdConflict, match="already names update 'set_limit'"):
            await handle.update("explode", update_id="limit-3", timeout=5)
        assert await handle.update("set_limit", 3, update_id="limit-3") == 6  # a retry still is
        await handle.signal("approve", "ann")
        await handle.result()
    history = await handle.history()
    assert [e.data["update_id"] for e in history if e.type == "UpdateAccepted"] == ["limit-3"]
    assert not any(e.type == "UpdateFailed" for e in history)


@pytest.mark.remote_client
async def test_signal_to_a_closed_run_or_an_unknown_workflow_is_refused(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-5", 60, id=new_id("approval"))
        await handle.signal("approve", "ann")
        await handle.result()
    with pytest.raises(durable.RunAlreadyClosed, match="already completed"):
        await handle.signal("approve", "late")
    with pytest.raises(durable.RunAlreadyClosed):
        await handle.update("set_limit", 1)
    with pytest.raises(durable.WorkflowNotFound):
        await client.get_handle("no-such-workflow").signal("approve", "x")
    assert types(await handle.history()).count("SignalReceived") == 1


@pytest.mark.remote_client
async def test_a_retried_signal_with_the_same_request_id_is_recorded_once(
    client: durable.Client,
) -> None:
    # no worker: the signals stay received, so what the history holds is what was sent
    handle = await client.start(Approval, "o-6", 60, id=new_id("approval"))
    assert await handle.signal("approve", "ann", request_id="approve-ann") is True
    assert await handle.signal("approve", "ann", request_id="approve-ann") is False
    assert await handle.signal("approve", "ann") is True  # no request id: a new signal
    with pytest.raises(durable.RequestIdConflict, match="already names signal 'approve'") as no:
        await handle.signal("reject", "ann", request_id="approve-ann")
    # (HTTP 409 request_id_conflict; the remote client rebuilds its fields)
    assert (no.value.request_id, no.value.retained_command_type, no.value.retained_name) == (
        "approve-ann", "signal", "approve")
    assert isinstance(no.value, durable.ConfigurationError)
    with pytest.raises(durable.RequestIdConflict, match="already names signal 'approve'"):
        await handle.update("set_limit", 1, update_id="approve-ann", timeout=5)
    await handle.terminate("done")
    # a retry after the run closed still learns its signal arrived
    assert await handle.signal("approve", "ann", request_id="approve-ann") is False
    received = [e.data for e in await handle.history() if e.type == "SignalReceived"]
    assert [d.get("request_id") for d in received] == ["approve-ann", None]


# ---------------------------------------------------------------- function workflows


@workflow.defn(name="ia_counter")
async def counter(expected: int) -> dict[str, Any]:
    seen: list[int] = []
    limit = {"value": 0}

    def on_add(n: int) -> None:
        seen.append(n)

    async def on_set(value: int) -> int:
        limit["value"] = await workflow.execute_activity(double, value)
        return limit["value"]

    def check_set(value: int) -> None:
        if value > 100:
            raise ValueError("too big")

    workflow.on_query("seen", lambda: list(seen))
    workflow.on_update("set", on_set, validator=check_set)
    await workflow.sleep(0.05)
    workflow.on_signal("add", on_add)  # signals sent before this are kept until now
    await workflow.wait_condition(lambda: len(seen) >= expected)
    return {"seen": seen, "limit": limit["value"]}


async def test_function_workflow_registers_handlers_and_gets_early_signals_in_order(
    client: durable.Client, make_worker: Callable[..., durable.Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.workflow")
    handle = await client.start(counter, 25, id=new_id("counter"))
    for n in range(5):  # before any worker: recorded, delivered later in this order
        await handle.signal("add", n)
    async with make_worker(workflows=[counter], activities=[double]):
        await until(lambda: handle.query("seen"), "the first signals delivered")
        with pytest.raises(durable.UpdateRejected, match="too big"):
            await handle.update("set", 101)
        assert await handle.update("set", 21) == 42
        for n in range(5, 25):
            await handle.signal("add", n)
        result = await handle.result()
    assert result == {"seen": list(range(25)), "limit": 42}
    assert "SignalNotHandled" in caplog.text
    events = await handle.history()
    assert [e.data["seq"] for e in events if e.type == "SignalDelivered"] == [
        e.data["seq"] for e in events if e.type == "SignalReceived"]
    deliveries = [e.data["delivery"] for e in events
                  if e.type in ("SignalDelivered", "UpdateAccepted")]
    assert deliveries == list(range(1, len(deliveries) + 1))
    await replays_offline(handle, counter)


@pytest.mark.remote_client
async def test_signal_with_start_starts_the_instance_or_signals_the_running_one(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    workflow_id = new_id("sws")
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.signal_with_start(Approval, "o-6", 60, id=workflow_id,
                                                signal="reject", signal_args=("eve",))
        assert (await handle.result())["approvers"] == ["not eve"]
        events = await handle.history()
        # delivered before the code started: an empty frontier
        assert next(e for e in events if e.type == "SignalDelivered").data["frontier"] == []
        with pytest.raises(durable.WorkflowAlreadyStarted):  # closed, reject_duplicate
            await client.signal_with_start(Approval, "o-6", 60, id=workflow_id,
                                           signal="approve", signal_args=("x",))
        running = await client.start(Approval, "o-7", 60, id=new_id("sws"))
        await waiting_on(running, "condition")
        again = await client.signal_with_start(Approval, "ignored", 60, id=running.workflow_id,
                                               signal="approve", signal_args=("ann",))
        assert (await again.result())["order"] == "o-7"


# ---------------------------------------------------------------- queries of idle runs


@pytest.mark.remote_client
async def test_query_with_no_worker_fails_after_its_timeout(client: durable.Client) -> None:
    handle = await client.start(Approval, "o-8", 60, id=new_id("approval"))
    with pytest.raises(durable.QueryFailed, match=r"no worker answered.*'ia_approval'"):
        await handle.query("status", timeout=0.3)


async def test_query_of_a_run_no_worker_holds_is_answered_by_replaying_it(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    blocker = await client.start(sleeper, 600, id=new_id("blocker"))  # ready first
    async with make_worker(workflows=[Approval], activities=[double]):
        handle = await client.start(Approval, "o-9", 60, id=new_id("approval"))
        await waiting_on(handle, "condition")
        assert await handle.update("set_limit", 10) == 20
    # the run is released; this worker is full (it holds the blocker, and keeps it:
    # it puts no waiting run down), so it cannot claim the run, but it answers the
    # query by replaying it
    async with make_worker(workflows=[Approval, sleeper], activities=[double],
                           max_concurrent_runs=1, release_waiting_runs=False):
        await waiting_on(blocker, "timer")
        assert await handle.query("status") == {"approved": None, "approvers": [],
                                                 "limit": 20}
        assert (await handle.describe())["run"]["owner"] is None
        await blocker.terminate()
        await handle.signal("approve", "ann")
        assert (await handle.result())["limit"] == 20


# ---------------------------------------------------------------- replay across restarts


@workflow.defn(name="ia_tally")
class Tally:
    """Each signal adds to a total; each addition is followed by an activity, so
    deliveries and op completions interleave."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.total = 0

    @workflow.run
    async def run(self, count: int) -> dict[str, Any]:
        steps: list[int] = []
        for _ in range(count):
            await workflow.wait_condition(lambda: bool(self.pending))
            value = self.pending.pop(0)
            steps.append(await workflow.execute_activity(double, value))
            self.total += value
        return {"steps": steps, "total": self.total}

    @workflow.signal
    def add(self, value: int) -> None:
        self.pending.append(value)

    @workflow.query
    def total_so_far(self) -> int:
        return self.total


async def test_signals_replay_at_their_recorded_points_after_a_restart(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    handle = await client.start(Tally, 6, id=new_id("tally"))
    async with make_worker(workflows=[Tally], activities=[double]):
        for value in (1, 2, 3):
            await handle.signal("add", value)
        await until(lambda: _equals(handle.query("total_so_far"), 6), "three signals handled")
    # the next worker replays the three deliveries where they were made
    async with make_worker(workflows=[Tally], activities=[double]):
        assert await handle.query("total_so_far") == 6  # answered after replay caught up
        for value in (4, 5, 6):
            await handle.signal("add", value)
        result = await handle.result()
    assert result == {"steps": [2, 4, 6, 8, 10, 12], "total": 21}
    events = await handle.history()
    assert types(events).count("SignalDelivered") == 6
    assert "WorkflowNeedsReview" not in types(events)
    await replays_offline(handle, Tally)


async def _equals(query: Any, expected: Any) -> bool:
    return bool(await query == expected)


# ---------------------------------------------------------------- wait_condition


@workflow.defn(name="ia_deadline")
class Deadline:
    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self, wait: float) -> dict[str, Any]:
        first = await workflow.wait_condition(lambda: self.done, timeout=wait)
        second = await workflow.wait_condition(lambda: self.done, timeout=60)
        return {"first": first, "second": second}

    @workflow.signal
    def finish(self) -> None:
        self.done = True


async def test_wait_condition_returns_false_when_its_durable_timeout_passes(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    handle = await client.start(Deadline, 0.3, id=new_id("deadline"))
    async with make_worker(workflows=[Deadline]):
        await until(lambda: _has(handle, "ConditionTimedOut"), "the first wait timed out")
    async with make_worker(workflows=[Deadline]):  # replays the timeout, then waits again
        await waiting_on(handle, "condition")
        await handle.signal("finish")
        assert await handle.result() == {"first": False, "second": True}
    names = types(await handle.history())
    assert names.count("ConditionTimedOut") == 1 and names.count("ConditionSatisfied") == 1
    await replays_offline(handle, Deadline)


async def _has(handle: durable.WorkflowHandle, event_type: str) -> bool:
    return event_type in types(await handle.history())


# ---------------------------------------------------------------- per-operation cancellation


@workflow.defn(name="ia_cancel_one")
async def cancel_one(key: str, policy: str) -> dict[str, Any]:
    running: list[bool] = []
    workflow.on_signal("running", lambda: running.append(True))
    options = durable.ActivityOptions(cancellation=durable.CancellationPolicy(policy),
                                      schedule_to_close_timeout=30)
    handle = workflow.start_activity(hold, key, options=options)
    # the test says when the attempt runs: a time waited instead (0.05 s) passed,
    # under load, before any worker claimed it, and a pending attempt's receipt
    # is `not_started`
    await workflow.wait_condition(lambda: bool(running))
    await handle.request_cancellation()
    try:
        return {"result": await handle}
    except durable.ActivityCancelled:
        other = await workflow.execute_activity(double, 4)
        return {"cancelled": True, "then": other}


@pytest.mark.parametrize("policy", ["try_cancel", "wait_cancellation_completed", "abandon"])
async def test_an_activity_handle_cancels_that_activity_under_its_policy(
    client: durable.Client, make_worker: Callable[..., durable.Worker], policy: str
) -> None:
    key = new_id("hold")
    GATES[key], STARTED[key] = anyio.Event(), anyio.Event()
    async with make_worker(workflows=[cancel_one], activities=[hold, double]):
        handle = await client.start(cancel_one, key, policy, id=new_id("cancel-one"))
        await STARTED[key].wait()
        await handle.signal("running")
        result = await handle.result()
        GATES[key].set()
    assert result == {"cancelled": True, "then": 8}
    events = await handle.history()
    asked = [e for e in events if e.type in ("ActivityCancelRequested", "ActivityCancelled")]
    assert asked and asked[0].data["scope"] == "operation"
    assert "CancellationDelivered" not in types(events)
    if policy == "wait_cancellation_completed":  # the await ended with the stop receipt
        cancelled = next(e for e in events if e.type == "ActivityCancelled")
        assert cancelled.data["stop_receipt"]["kind"] == "cancel_scope"
    await replays_offline(handle, cancel_one)


@workflow.defn(name="ia_sleeper")
async def sleeper(seconds: float) -> str:
    try:
        await workflow.sleep(seconds)
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(double, 1)
    return "slept"


@workflow.defn(name="ia_parent")
async def parent_of_one(child_id: str) -> str:
    child = await workflow.start_child(sleeper, 600, id=child_id)
    await workflow.sleep(0.05)
    await child.request_cancellation(reason="not needed any more")
    try:
        await child.result()
    except durable.ChildWorkflowFailed as exc:
        assert isinstance(exc.__cause__, durable.WorkflowCancelled)
        return "child cancelled"
    return "child finished"


async def test_a_child_handle_cancels_that_child_cooperatively(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    child_id = new_id("child")
    async with make_worker(workflows=[parent_of_one, sleeper], activities=[double]):
        handle = await client.start(parent_of_one, child_id, id=new_id("parent"))
        assert await handle.result() == "child cancelled"
        child = client.get_handle(child_id)
        with pytest.raises(durable.WorkflowCancelled):
            await child.result()
    info = await child.describe()
    assert info["cancellation"]["source"] == "operation_cancellation"
    assert info["cancellation"]["reason"] == "not needed any more"
    assert info["cancellation"]["cleanup_outcome"] == "completed"
    await replays_offline(handle, parent_of_one)
    await replays_offline(child, sleeper)


@workflow.defn(name="ia_messenger")
async def messenger(target: str, victim: str) -> dict[str, Any]:
    other = workflow.get_external_handle(target)
    await other.signal("approve", "messenger")
    request = await workflow.get_external_handle(victim).request_cancellation(
        reason="the messenger says so", cleanup_timeout=30)
    try:
        await workflow.get_external_handle("nobody-here").signal("approve", "x")
    except durable.WorkflowNotFound:
        missing = True
    return {"accepted": request.accepted, "reason": request.context.reason, "missing": missing}


async def test_a_workflow_signals_and_cancels_other_workflows_through_external_handles(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[messenger, Approval, sleeper], activities=[double]):
        target = await client.start(Approval, "o-10", 60, id=new_id("approval"))
        victim = await client.start(sleeper, 600, id=new_id("victim"))
        await waiting_on(victim, "timer")
        handle = await client.start(messenger, target.workflow_id, victim.workflow_id,
                                    id=new_id("messenger"))
        assert await handle.result() == {"accepted": True, "reason": "the messenger says so",
                                         "missing": True}
        assert (await target.result())["approvers"] == ["messenger"]
        with pytest.raises(durable.WorkflowCancelled):
            await victim.result()
    received = next(e for e in await target.history() if e.type == "SignalReceived")
    assert received.data["sender"]["workflow_id"] == handle.workflow_id
    sent = [e.type for e in await handle.history()]
    assert sent.count("ExternalSignalSent") == 2
    assert sent.count("ExternalCancellationRequested") == 1
    await replays_offline(handle, messenger)


# ---------------------------------------------------------------- during cancellation cleanup


@workflow.defn(name="ia_careful")
class Careful:
    """Cleanup waits for a human to confirm, and takes a note through an update."""

    def __init__(self) -> None:
        self.confirmed = False
        self.notes: list[str] = []

    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.sleep(600)
            return "not cancelled"
        finally:
            if workflow.cancellation() is not None:
                with workflow.cancellation_shield():
                    await workflow.wait_condition(lambda: self.confirmed, timeout=30)
                    await workflow.execute_activity(double, len(self.notes))

    @workflow.signal
    def confirm(self) -> None:
        self.confirmed = True

    @workflow.update
    async def note(self, text: str) -> int:
        self.notes.append(text)
        doubled: int = await workflow.execute_activity(double, len(self.notes))
        return doubled


async def test_signals_and_updates_reach_a_workflow_during_its_cancellation_cleanup(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[Careful], activities=[double]):
        handle = await client.start(Careful, id=new_id("careful"))
        await waiting_on(handle, "timer")
        await handle.request_cancellation(reason="stop", cleanup_timeout=30)
        await waiting_on(handle, "condition")  # the cleanup waits for confirmation
        assert await handle.update("note", "cleaning up") == 2
        await handle.signal("confirm")
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    events = await handle.history()
    names = types(events)
    assert names.index("CancellationDelivered") < names.index("UpdateAccepted")
    assert names.index("UpdateCompleted") < names.index("SignalDelivered")
    assert names.count("ConditionSatisfied") == 1
    info = await handle.describe()
    assert info["cancellation"]["cleanup_outcome"] == "completed"
    await replays_offline(handle, Careful)


# ---------------------------------------------------------------- versioning


@workflow.defn(name="ia_versioned")
async def versioned_v1(key: str) -> list[str]:
    steps = [f"v1:{await workflow.execute_activity(double, 1)}"]
    await workflow.sleep(0.5)
    steps.append(f"v1:{await workflow.execute_activity(double, 2)}")
    return steps


with durable.testing.isolated_definitions():  # the next deploy: same name, changed code

    @workflow.defn(name="ia_versioned")
    async def versioned_v2(key: str) -> list[str]:
        steps = [f"v1:{await workflow.execute_activity(double, 1)}"]
        if workflow.patched("add-audit-step"):
            steps.append(f"v2:{await workflow.execute_activity(double, 10)}")
        await workflow.sleep(0.5)
        steps.append(f"v1:{await workflow.execute_activity(double, 2)}")
        return steps


async def test_a_patch_deployed_while_runs_sleep_keeps_old_runs_on_the_old_branch(
    client: durable.Client, make_worker: Callable[..., durable.Worker]
) -> None:
    async with make_worker(workflows=[versioned_v1], activities=[double]):
        old = await client.start(versioned_v1, "old", id=new_id("versioned"))
        await waiting_on(old, "timer")  # the old code is past its first step, asleep
    async with make_worker(workflows=[versioned_v2], activities=[double]):  # new deploy
        new = await client.start(versioned_v2, "new", id=new_id("versioned"))
        assert await old.result() == ["v1:2", "v1:4"]
        assert await new.result() == ["v1:2", "v2:20", "v1:4"]
    assert "MarkerRecorded" not in types(await old.history())
    marker = next(e for e in await new.history() if e.type == "MarkerRecorded")
    assert marker.data == {"op_id": "0:2", "name": "patch:add-audit-step",
                           "patch_id": "add-audit-step"}
    await replays_offline(old, versioned_v2)  # the new code replays the old run, too
    await replays_offline(new, versioned_v2)
