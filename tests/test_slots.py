"""A full worker whose runs only wait says so (durable/_runtime/slots.py).

Parents waiting on their children hold every slot of the worker: the
children, on the same queue, are never claimed unless the worker puts a
parent down (tests/test_relief.py). When it cannot (here: told not to,
``release_waiting_runs=False``) it logs ``worker_slots_all_waiting`` once,
with a hint, instead of staying silent.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

import durable
from durable import workflow
from durable._runtime.slots import SlotWatch, releasable

pytestmark = pytest.mark.anyio


@workflow.defn(name="slots_child")
async def slots_child() -> str:
    return "child"


@workflow.defn(name="slots_parent")
async def slots_parent(key: str) -> str:
    result: str = await workflow.execute_child(slots_child, id=f"{key}-child")
    return result


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "durable.worker" and "'worker_slots_all_waiting'" in r.getMessage()]


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_parents_waiting_on_children_in_every_slot_are_reported_once(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="durable.worker")
    for key in ("a", "b"):
        await storage_client.start(slots_parent, key, id=f"slots-{key}")
    async with durable.Worker(storage_client, workflows=[slots_parent, slots_child],
                              max_concurrent_runs=2, release_waiting_runs=False) as worker:
        with anyio.fail_after(10):
            while not warnings(caplog):
                await worker.runs.claim_now()  # a pass: the watch looks again
                if not warnings(caplog):
                    await anyio.sleep(0.01)
        for _ in range(3):  # still deadlocked: said once
            await worker.runs.claim_now()
        [line] = warnings(caplog)
        assert "max_concurrent_runs=2" in line and "held_runs=2" in line, line
        assert "waiting_on_children=2" in line and "run children on another" in line, line
        assert len(worker.executors) == 2  # neither child was claimed


class _Log:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})


def test_the_warning_comes_again_only_after_the_condition_cleared() -> None:
    log = _Log()
    watch = SlotWatch(log, 2)
    watch.check(0, False, [], 0)  # full, nothing announced: no work it lacks room for
    assert not log.lines and not watch.wanted
    watch.check(0, True, [], 0)  # nothing held (the upgrade gate's only): not waiting runs
    watch.check(0, True, [], 1)
    assert not log.lines
    parent, timer = _run({"c1": "child"}), _run({"t1": "timer"})
    watch.check(0, True, [parent, timer], 0)
    watch.check(0, False, [parent, timer], 0)  # the same: said once
    assert [(x["held_runs"], x["waiting_on_children"]) for x in log.lines] == [(2, 1)]
    timer.ctx.parking.active = 1  # one runs again: cleared
    watch.check(0, False, [parent, timer], 0)
    timer.ctx.parking.active = 0
    timer.ctx.parking.parked = {"a1": "activity"}  # an attempt in flight: not only waiting
    watch.check(0, False, [parent, timer], 0)
    assert len(log.lines) == 1
    timer.ctx.parking.parked = {"t1": "timer"}
    watch.check(0, False, [parent, timer], 0)  # all wait again: said again
    assert len(log.lines) == 2
    watch.check(1, False, [parent], 0)  # room again: cleared, and nothing is wanted
    watch.check(0, False, [parent, timer], 0)
    assert (watch.wanted, watch.warned, len(log.lines)) == (False, False, 2)


def _run(parked: dict[str, str]) -> Any:
    parking = SimpleNamespace(active=0, committing=0, parked=parked)
    return SimpleNamespace(code_started=True,
                           ctx=SimpleNamespace(parking=parking, running_local={}))


def test_a_worker_that_can_put_a_run_down_does_not_warn() -> None:
    """With ``release_waiting_runs`` (the default) the warning is for a full
    worker none of whose waiting runs can be put down now (`releasable`)."""
    log = _Log()
    watch = SlotWatch(log, 2, release=True)
    parent, other = _releasable({"c1": "child"}), _releasable({"t1": "timer"})
    assert releasable(parent) == {"child"}
    watch.check(0, True, [parent, other], 0)
    assert not log.lines  # the worker puts one down and takes the work
    parent.ctx.running_handlers = 1  # a handler runs, parked: its state is not recorded yet
    other.ctx.deferred = ["a marker"]  # a write kept for the run's next commit
    assert releasable(parent) is None and releasable(other) is None
    watch.check(0, False, [parent, other], 0)
    assert [(x["held_runs"], x["waiting_on_children"]) for x in log.lines] == [(2, 1)]
    other.ctx.deferred = []
    for busy in ({"a1": "activity"}, {"c1": "child", "x": "external"}):
        other.ctx.parking.parked = busy  # an attempt in flight; an op of another kind
        assert releasable(other) is None


def _releasable(parked: dict[str, str]) -> Any:
    run = _run(parked)
    run.ctx.parking.gated = False
    run.ctx.parking.holding = {}
    run.ctx.parking.replay_delivery_pending = False
    for name in ("hard_stop", "closing", "failing", "delivering"):
        setattr(run.ctx, name, False)
    run.ctx.broken = None
    run.ctx.deferred = []
    run.ctx.batched = 0
    run.ctx.pending_counts = {"activity": 0}
    run.ctx.running_handlers = 0
    run.stop_reason = None
    run.delivery_lock = anyio.Lock()
    run.delivering_cancellation = False
    run.inbox_idle = lambda: True
    return run
