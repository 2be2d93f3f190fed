"""Ordering bugs found by scenarios ported from peers' test suites (issue 21):
each runs on SQLite and PostgreSQL, on asyncio and trio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import durable
import durable.testing
from durable import activity, workflow
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

CALLS: dict[str, int] = {}


@pytest.fixture
async def env(db_url: str, driver_name: str) -> AsyncIterator[TimeSkippingEnvironment]:
    if driver_name == "stepwise":
        pytest.skip("engine ordering, not the driver seam: SQLite and PostgreSQL suffice")
    url = "sqlite://:memory:" if db_url.startswith("sqlite") else db_url
    async with TimeSkippingEnvironment(url) as environment:
        yield environment


@activity.defn
async def flaky_once(key: str) -> str:
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] == 1:
        raise RuntimeError("first attempt fails")
    return f"attempt {CALLS[key]}"


@workflow.defn
async def retried(key: str, interval: float, s2s: float) -> Any:
    options = durable.ActivityOptions(
        retry=durable.RetryPolicy(initial_interval=interval, max_attempts=3),
        schedule_to_start_timeout=s2s)
    try:
        return await workflow.execute_activity(flaky_once, key, options=options)
    except durable.ActivityTimedOut as exc:
        return {"timed_out": exc.timeout_kind}


async def test_retry_available_on_virtual_time_is_claimed_before_its_deadline(
        env: TimeSkippingEnvironment) -> None:
    """The retry becomes available 60 s after the failure and may wait 30 s
    to start: a worker serving the queue claims it at once, on virtual time."""
    key = f"retry-{id(env)}"
    async with env.worker(workflows=[retried], activities=[flaky_once]):
        result = await env.client.execute(retried, key, 60.0, 30.0, id=key)
    assert result == "attempt 2"


@workflow.defn
class StrictOrder:
    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: len(self.notes) >= 5)
        return self.notes

    @workflow.signal
    def note(self, text: str) -> None:
        if text == "bad":
            raise ValueError("a bad note fails the run")
        self.notes.append(text)

    @workflow.query
    def seen(self) -> list[str]:
        return self.notes


async def test_a_run_failed_by_its_signal_handler_can_be_queried_and_replayed(
        env: TimeSkippingEnvironment) -> None:
    """The handler's error is the run's failure, not a divergence: a query
    replays the closed run and answers, and the Replayer accepts its history."""
    async with env.worker(workflows=[StrictOrder]):
        handle = await env.client.start(StrictOrder, id=f"strict-{id(env)}")
        await handle.signal("note", "first")
        await handle.signal("note", "bad")
        with pytest.raises(durable.WorkflowFailed) as failed:
            await handle.result()
        assert "a bad note fails the run" in str(failed.value)
        assert await handle.query("seen") == ["first"]
    result = await durable.testing.Replayer(workflows=[StrictOrder]).replay(
        await handle.history())
    assert result.finished


@workflow.defn
class Napper:
    def __init__(self) -> None:
        self.got: list[str] = []

    @workflow.run
    async def run(self, how: str) -> dict[str, Any]:
        if how == "sleep":
            await workflow.sleep(60)
        else:
            await workflow.wait_condition(lambda: False, timeout=60)
        return {"at_wake": list(self.got)}

    @workflow.signal
    def poke(self, text: str) -> None:
        self.got.append(text)


async def until_pending(handle: durable.WorkflowHandle, kind: str) -> None:
    """Until the run waits on an op of `kind` (polling storage; real time)."""
    import anyio
    with anyio.fail_after(10):
        while not any(p["kind"] == kind for p in
                      (await handle.describe())["pending_operations"]):
            await anyio.sleep(0.01)


@pytest.mark.parametrize("how", ["sleep", "condition"])
async def test_a_signal_received_while_no_worker_ran_beats_a_timer_due_later(
        env: TimeSkippingEnvironment, how: str) -> None:
    """Signal at +10 s, timer due at +60 s, no worker until +100 s: the
    signal is delivered first (history: SignalReceived, SignalDelivered,
    then the timer's end), as the peers do."""
    env.auto_skip = False
    handle = await env.client.start(Napper, how, id=f"napper-{how}-{id(env)}")
    async with env.worker(workflows=[Napper]):
        await until_pending(handle, "timer" if how == "sleep" else "condition")
    await env.sleep(10)
    await handle.signal("poke", "early")
    await env.sleep(90)
    async with env.worker(workflows=[Napper]):
        result = await env.run(handle.result)
    assert result == {"at_wake": ["early"]}
    order = [e.type for e in await handle.history()
             if e.type in ("SignalReceived", "SignalDelivered", "TimerFired",
                           "ConditionTimedOut", "ConditionSatisfied", "ConditionResolved")]
    assert order[:2] == ["SignalReceived", "SignalDelivered"], order
    result2 = await durable.testing.Replayer(workflows=[Napper]).replay(await handle.history())
    assert result2.finished


@pytest.mark.parametrize("how", ["sleep", "condition"])
async def test_a_resumed_run_replays_its_deliveries_before_a_due_timer_takes_a_signal(
        env: TimeSkippingEnvironment, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, but a signal was already delivered at the timer: the worker
    that resumes the run has that delivery to make again first. The signal
    received before the timer fell due still beats it, whichever of the timer
    and the replay the loop runs first; here the timer looks first (the
    hook), as the approval example's crash exploration found on trio and
    PostgreSQL under load (its approval came after the timeout)."""
    import anyio

    from durable._runtime.inbox import Inbox

    env.auto_skip = False
    handle = await env.client.start(Napper, how, id=f"napper-replay-{how}-{id(env)}")
    async with env.worker(workflows=[Napper]):
        await until_pending(handle, "timer" if how == "sleep" else "condition")
        await handle.signal("poke", "delivered")
        with anyio.fail_after(10):
            while "SignalDelivered" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.01)
    await env.sleep(10)
    await handle.signal("poke", "early")
    await env.sleep(90)

    looked = anyio.Event()  # the due timer has looked for the signals received by then
    deliver_received_by, replay_next = Inbox.deliver_received_by, Inbox._replay_next

    async def timer_looks(inbox: Inbox, instant: float) -> None:
        looked.set()
        await deliver_received_by(inbox, instant)

    async def replay_after_it(inbox: Inbox) -> None:
        await looked.wait()
        await replay_next(inbox)

    monkeypatch.setattr(Inbox, "deliver_received_by", timer_looks)
    monkeypatch.setattr(Inbox, "_replay_next", replay_after_it)
    async with env.worker(workflows=[Napper]):
        with anyio.fail_after(30):
            result = await env.run(handle.result)
    assert result == {"at_wake": ["delivered", "early"]}
    order = [e.type for e in await handle.history()
             if e.type in ("SignalReceived", "SignalDelivered", "TimerFired",
                           "ConditionTimedOut", "ConditionSatisfied")]
    assert order == ["SignalReceived", "SignalDelivered"] * 2 + [order[-1]], order
    replayed = await durable.testing.Replayer(workflows=[Napper]).replay(await handle.history())
    assert replayed.finished


@workflow.defn
class Ledger:
    def __init__(self) -> None:
        self.log: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        return self.log  # no waiting point: what was sent before the start is seen here

    @workflow.signal
    def add(self, text: str) -> None:
        self.log.append(f"signal {text}")

    @workflow.update
    def put(self, text: str) -> int:
        self.log.append(f"update {text}")
        return len(self.log)


async def test_an_update_sent_before_any_worker_is_delivered_at_the_start_in_order(
        env: TimeSkippingEnvironment) -> None:
    """Signal a, update b, signal c, all before a worker: delivered before the
    code starts, in the order sent, and the update gets its result. (Order is
    the instant storage received each; virtual time moves between them here,
    as real time always does.)"""
    import anyio
    env.auto_skip = False
    handle = await env.client.start(Ledger, id=f"ledger-{id(env)}")
    run_id = handle.run_id
    assert run_id is not None
    answers: list[int] = []
    async with anyio.create_task_group() as tg:
        await handle.signal("add", "a")
        await env.sleep(1)

        async def put() -> None:
            answers.append(await handle.update("put", "b"))

        tg.start_soon(put)
        with anyio.fail_after(10):
            while not (await env.client.store.load_inbox(run_id))[1]:
                await anyio.sleep(0.01)
        await env.sleep(1)
        await handle.signal("add", "c")
        async with env.worker(workflows=[Ledger]):
            result = await env.run(handle.result)
    assert result == ["signal a", "update b", "signal c"]
    assert answers == [2]
    order = [(e.type, e.data.get("delivery")) for e in await handle.history()
             if e.type in ("SignalDelivered", "UpdateAccepted")]
    assert order == [("SignalDelivered", 1), ("UpdateAccepted", 2), ("SignalDelivered", 3)]
    replayed = await durable.testing.Replayer(workflows=[Ledger]).replay(await handle.history())
    assert replayed.finished
