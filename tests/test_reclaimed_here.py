"""A run claimed again by the very worker that still runs it.

A worker's leases lapse when no renewal came for a whole lease (a loop
blocked that long, or a virtual clock moved past them), and its claim loop
can then claim a run it still executes, reading the run's counters before a
signal that arrives next. That signal's in-process wake-up went to the
executor in the worker's map, the old one: being put down under pressure to
make room for the claim (relief), or about to be replaced by it in the map
and left running, fenced. The new executor started from the stale counters
and waited for ever for a signal already recorded (seen: test_relief.py's
"claims for them only recently" under load, about one run in twenty).

Now a claim of a run still executed here stops the old executor, and an
executor that stops (put down, lease lost, replaced) leaves word that a
successor started here soon after re-reads the run (a resync) and fetches
what its predecessor heard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

import durable
from durable._runtime.executor import RunExecutor
from durable.clock import VirtualClock
from durable.store.records import Claimed, ClaimedRun
from tests.test_relief import GatedChild, until_waiting

pytestmark = pytest.mark.anyio

Claim = Callable[[int], Awaitable[Claimed[ClaimedRun]]]


def signal_after_claim(client: durable.Client, claim: Claim, sent: list[str]) -> Claim:
    """A claim that, once it took the gate (its counters read), records the
    signal before the claimed run starts: the window, made certain."""

    async def claiming(n: int) -> Claimed[ClaimedRun]:
        claimed = await claim(n)
        if not sent and any(c.run.workflow_id == "gate" for c in claimed):
            sent.append("open")
            await client.get_handle("gate").signal("open")
        return claimed

    return claiming


def signal_before_it_ends(client: durable.Client, executor: RunExecutor,
                          tg: anyio.abc.TaskGroup, sent: list[str]) -> None:
    """The stopped executor's end waits until the signal is recorded and its
    wake-up went to that executor, still in the worker's map: the window
    between a put-down's stop and its end, made certain."""
    done = executor._on_done

    def ending(ex: RunExecutor) -> None:
        async def signal_then_end() -> None:
            sent.append("open")
            await client.get_handle("gate").signal("open")
            done(ex)

        tg.start_soon(signal_then_end)

    executor._on_done = ending


@pytest.mark.parametrize("driver_name", ["sqlite", "postgres"])
@pytest.mark.parametrize("slots", [1, 2], ids=["put_down_for_it", "beside_it"])
async def test_a_signal_heard_by_the_executor_its_own_claim_replaces_is_delivered(
        db_url: str, slots: int) -> None:
    """One slot: the full worker puts its own executor down to take the run in
    its slot (relief), and the signal arrives while that executor ends. Two:
    the claim loop takes the run beside the old executor, which went on
    running (fenced, never stopped) while the map forgot it."""
    clock = VirtualClock()
    async with durable.connect(db_url, clock=clock) as client:
        gate = await client.start(GatedChild, id="gate")
        async with anyio.create_task_group() as tg, durable.Worker(
                client, workflows=[GatedChild], max_concurrent_runs=slots,
                identity="reclaiming") as worker:
            with anyio.fail_after(20):
                await until_waiting(gate)
            [first] = worker.executors.values()
            sent: list[str] = []
            if slots == 1:
                signal_before_it_ends(client, first, tg, sent)
            else:  # the claim loop's own claim (bound when the worker was made)
                worker.runs._claim = signal_after_claim(client, worker.runs._claim, sent)
            # past the lease, before the lease loop renewed it: the run is claimable
            clock.advance_to(clock.now() + worker.lease_seconds + 1)
            with anyio.fail_after(20):
                while not sent:
                    await worker.runs.claim_now()
                    await anyio.sleep(0.01)
                assert await gate.result() == "opened"
            assert first.stop_reason is not None, "the replaced executor still runs"
            if slots == 1:
                assert first.stop_reason == "put down under pressure"
