"""Parking: where a run's tasks are decides where (and whether) a delivery is made."""

from __future__ import annotations

import anyio
import pytest

from durable._runtime.parking import Parking
from durable.store.records import OpKind, OpRecord, OpStatus

pytestmark = pytest.mark.anyio


class Calls:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def parking(self) -> Parking:
        return Parking(on_stop=lambda: self.seen.append("stop"),
                       on_quiet=lambda: self.seen.append("quiet"),
                       redeliver=lambda: self.seen.append("redeliver"))


def test_the_run_is_quiet_when_every_task_waits_on_an_op_and_the_frontier_says_where() -> None:
    calls = Calls()
    parking = calls.parking()
    parking.task_started()
    parking.task_started()
    parking.park("0:2", OpKind.TIMER)
    assert not parking.quiet.is_set()  # one task still runs
    parking.park("0.1:1", OpKind.ACTIVITY)
    assert parking.quiet.is_set()
    assert parking.frontier() == [{"op_id": "0.1:1", "kind": "activity"},
                                  {"op_id": "0:2", "kind": "timer"}]  # sorted: replayable
    parking.unpark("0:2")
    assert not parking.quiet.is_set() and parking.frontier() == [
        {"op_id": "0.1:1", "kind": "activity"}]
    assert calls.seen == ["stop", "quiet", "stop"]  # quiet once the last task parked


def test_a_blocked_task_is_not_running_but_is_not_at_a_boundary_either() -> None:
    parking = Calls().parking()
    parking.task_started()
    parking.block()  # a task group's end
    assert parking.quiet.is_set() and parking.frontier() == []
    parking.unblock()
    assert parking.active == 1


async def test_a_task_whose_op_completes_during_a_delivery_stays_at_its_op() -> None:
    parking = Calls().parking()
    parking.task_started()
    parking.close_gate()
    moved_on: list[str] = []
    async with anyio.create_task_group() as tg:
        async def task() -> None:
            await parking.hold("0:1", OpKind.TIMER, parked=False)
            moved_on.append("0:1")

        tg.start_soon(task)
        await anyio.wait_all_tasks_blocked()
        assert moved_on == [] and parking.frontier() == [{"op_id": "0:1", "kind": "timer"}]
        parking.open_gate()  # the handler has run
    assert moved_on == ["0:1"] and parking.frontier() == []


async def test_replay_holds_a_task_at_an_op_until_the_delivery_recorded_there_is_made() -> None:
    parking = Calls().parking()
    parking.holding["0:3"] = 1  # history delivered a signal while a task waited at 0:3
    assert parking.must_hold("0:3") and not parking.must_hold("0:4")
    moved_on: list[str] = []
    async with anyio.create_task_group() as tg:
        async def task() -> None:
            await parking.hold("0:3", OpKind.TIMER, parked=False)
            moved_on.append("0:3")

        tg.start_soon(task)
        await anyio.wait_all_tasks_blocked()
        parking.release_held()  # another delivery was made: it looks again, and stays
        await anyio.wait_all_tasks_blocked()
        assert moved_on == []
        del parking.holding["0:3"]  # the one recorded there is made again
        parking.release_held()
    assert moved_on == ["0:3"]


def test_a_cancellation_is_redelivered_at_its_boundary_after_the_same_deliveries() -> None:
    calls = Calls()
    parking = calls.parking()
    parking.expect_redelivery(["0:1", "0.1:1"], after=1)
    interrupted = OpRecord("0:9", OpKind.TIMER, "sleep", OpStatus.CANCELLED, None, None,
                           0.0, 1.0, interrupted=True)
    assert parking.must_block(None, "0:1") and parking.must_block(interrupted, "0:9")
    assert not parking.must_block(None, "0:2")
    parking.task_started()
    parking.task_started()
    parking.park("0:1", OpKind.TIMER)
    parking.park("0.1:1", OpKind.ACTIVITY)  # the boundary is reached ...
    assert "redeliver" not in calls.seen  # ... but the signal delivered before it is not
    parking.deliveries = 1
    parking.check_redelivery()
    assert calls.seen.count("redeliver") == 1 and not parking.replay_delivery_pending
    parking.check_redelivery()
    assert calls.seen.count("redeliver") == 1  # once
