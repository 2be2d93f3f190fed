"""The worker's watchdog: which transactions it queues between two deadlines.

Why it matters (issue 26, docs/benchmarks.md "Heartbeat-timeout lateness
tail"): each of the watchdog's transactions waits behind the worker's
others on the database thread, and a deadline is recorded at the instant
the transaction that enforces it runs. A wake-up (new work anywhere) makes
the watchdog gather wake-ups for `WATCHDOG_COALESCE` and then re-read the
next deadline; a deadline that falls while it gathers must be enforced at
once, not after that re-read (at 100 deadlines/s and ~200 wake-ups/s,
most passes paid one more transaction in the queue).

On virtual time, with the gathering made endless, so that the order of
things is the test's own and nothing depends on how fast the machine is.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable import worker as worker_module
from durable._runtime.claiming import Trigger
from durable.store.deadlines import WatchPass
from durable.testing import isolated_definitions

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000.0
HOUR = 3600.0

with isolated_definitions():
    @workflow.defn(name="watchdog_test_sleeper")
    async def sleeper() -> None:
        await workflow.sleep(10 * HOUR)

    @activity.defn(name="watchdog_test_unused")
    async def unused() -> None:
        return None


class SeenTrigger(Trigger):
    """The watchdog's trigger, telling the test when a wait consumed it."""

    def __init__(self) -> None:
        super().__init__()
        self.consumed = anyio.Event()

    async def wait(self, at_most: float, gather: float = 0.0) -> str | None:
        how = await super().wait(at_most, gather)
        self.consumed.set()
        return how


async def test_a_deadline_that_falls_while_wake_ups_are_gathered_is_enforced_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "WATCHDOG_COALESCE", 10 * HOUR)  # never ends by itself
    clock = durable.VirtualClock(T0)
    async with durable.connect("sqlite://:memory:", clock=clock) as client:
        # a run nobody claims (another queue): only its run timeout is due
        handle = await client.start(sleeper, id="timed", task_queue="nobody",
                                    options=durable.StartOptions().with_run_timeout(HOUR))
        store: Any = client.store
        calls: list[str] = []
        enforced = anyio.Event()
        next_deadline, watchdog_pass = store.next_deadline, store.watchdog_pass

        async def seen_next_deadline(*args: Any) -> Any:
            calls.append("next_deadline")
            return await next_deadline(*args)

        async def seen_watchdog_pass(*args: Any) -> WatchPass:
            done: WatchPass = await watchdog_pass(*args)
            calls.append(f"watchdog_pass {done.counts}")
            if done.counts:
                enforced.set()
            return done

        store.next_deadline, store.watchdog_pass = seen_next_deadline, seen_watchdog_pass
        worker = durable.Worker(client, activities=[unused], poll_interval=HOUR)
        trigger = worker._watchdog_trigger = SeenTrigger()
        async with worker:
            await worker.watchdog_poked.wait()  # its first pass read the run's deadline
            trigger.set()  # new work somewhere: the watchdog gathers wake-ups
            await trigger.consumed.wait()
            calls.clear()
            clock.advance_to(T0 + HOUR)  # the deadline falls while it gathers
            await enforced.wait()
        assert calls == ["watchdog_pass {'run_timeout': 1}"]  # no re-read before it
        with pytest.raises(durable.WorkflowTimedOut):
            await handle.result()


class CountedTrigger(Trigger):
    """The watchdog's trigger, counting who set it."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self, remote: bool = False) -> None:
        self.sets += 1
        super().set(remote)


@pytest.mark.parametrize("run_timeout", [None, HOUR], ids=["no timeout", "run timeout"])
async def test_a_start_without_timeouts_does_not_make_the_watchdog_look_again(
        run_timeout: float | None) -> None:
    """A start's wake-up makes the queue's workers claim; it made the watchdog
    re-read the next deadline too, in case the run brought an earlier one.
    A start without timeouts brings none (`durable.wakes.NO_DEADLINE`): no
    re-read (on PostgreSQL every process's watchdog heard every start)."""
    clock = durable.VirtualClock(T0)
    async with durable.connect("sqlite://:memory:", clock=clock) as client:
        worker = durable.Worker(client, activities=[unused], poll_interval=HOUR)
        trigger = worker._watchdog_trigger = CountedTrigger()
        async with worker:
            await worker.watchdog_poked.wait()
            before = trigger.sets
            options = durable.StartOptions(run_timeout=run_timeout)
            handle = await client.start(sleeper, id="started", options=options)
            assert trigger.sets - before == (0 if run_timeout is None else 1)
            await handle.terminate("done")
