"""A run's context: recorded ops, structural limits, commits and batched outcomes.

The context reaches its executor only through `RunHost`; these tests give it
a host that records what it was asked, and a committer that records writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from durable import Limits, NonDeterminismDetected, StructuralLimitExceeded
from durable._registry import WorkflowDefn
from durable._runtime.context import WorkflowContext
from durable._runtime.handlers import Handler
from durable.errors import AuthorityLost
from durable.store.records import OpKind, OpRecord, OpStatus
from durable.store.writes import (
    FireTimer,
    RecordBatchedLocalActivity,
    RecordLocalActivity,
    ScheduleTimer,
)

from ._support import T0, Recorder, run_record, setup

pytestmark = pytest.mark.anyio


class Host:
    """A `RunHost` that records what the context asks of it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.engine: list[Callable[[], Coroutine[Any, Any, None]]] = []

    def spawn_task(self, path: str, clock: float, replaying: bool | None,
                   body: Callable[[], Awaitable[None]],
                   on_interrupt: Callable[[], Awaitable[None]] | None = None) -> None:
        self.asked.append(f"task {path}")

    def spawn_engine(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.engine.append(work)

    def stop(self, reason: str) -> None:
        self.asked.append(f"stop: {reason}")

    def interrupt_code(self) -> None:
        self.asked.append("interrupt")

    def poke(self) -> None:
        self.asked.append("poke")

    def deliver_buffered(self, handler: Handler, deliveries: list[Any]) -> None:
        self.asked.append("buffered")


async def noop() -> None:
    """A workflow function (these tests never run it)."""


def context(committer: Recorder | None = None, ops: dict[str, OpRecord] | None = None,
            host: Host | None = None, **options: Any) -> WorkflowContext:
    return WorkflowContext(run=run_record("unit_ctx"), ops=dict(ops or {}),
                           defn=WorkflowDefn("unit_ctx", noop),
                           setup=setup(committer or Recorder(), **options),
                           host=host or Host())


def timer_record(op_id: str, status: str = OpStatus.COMPLETED) -> OpRecord:
    return OpRecord(op_id, OpKind.TIMER, "sleep", status, None, None, T0, T0 + 1)


def test_a_recorded_op_is_returned_when_the_code_asks_for_the_same_op() -> None:
    ctx = context(ops={"0:1": timer_record("0:1")})
    assert ctx.recorded_op("0:1", OpKind.TIMER, "sleep") == timer_record("0:1")
    assert ctx.recorded_op("0:2", OpKind.TIMER, "sleep") is None
    assert ctx.fatal is None


def test_asking_for_another_op_than_history_recorded_is_fatal_whatever_the_code_does() -> None:
    ctx = context(ops={"0:1": timer_record("0:1")})
    with pytest.raises(NonDeterminismDetected, match="asked for activity 'charge' at 0:1, "
                                                     "but history recorded timer 'sleep'"):
        ctx.recorded_op("0:1", OpKind.ACTIVITY, "charge")
    assert isinstance(ctx.fatal, NonDeterminismDetected)  # even if the code catches it


def test_ops_of_the_main_task_that_the_code_skipped_are_named() -> None:
    ctx = context(ops={op: timer_record(op) for op in ("0:1", "0:2", "0.1:1")})
    ctx.recorded_op("0:1", OpKind.TIMER, "sleep")
    # a task-group task may legitimately not reach its ops again; the main task must
    assert ctx.unreplayed_ops() == ["0:2"]


def test_one_pending_op_over_a_structural_limit_fails_the_run() -> None:
    ctx = context(limits=Limits(pending_timers=2))
    ctx.reserve("timer")
    ctx.reserve("timer")
    with pytest.raises(StructuralLimitExceeded) as err:
        ctx.reserve("timer")
    assert (err.value.kind, err.value.value, err.value.limit) == ("pending_timers", 3, 2)
    assert ctx.fatal is err.value
    ctx.release("timer")
    assert ctx.pending_counts["timer"] == 1


async def test_a_commit_resolves_the_ops_it_closed() -> None:
    recorder = Recorder()
    ctx = context(recorder)
    waiter = ctx.waiter("0:1")
    await ctx.commit([ScheduleTimer("0:1", T0 + 5, 5.0)])
    assert recorder.submitted == [[ScheduleTimer("0:1", T0 + 5, 5.0)]]
    ctx.resolve(timer_record("0:1"))
    assert waiter.event.is_set() and waiter.record == timer_record("0:1")
    assert ctx.recorded["0:1"] == timer_record("0:1")


async def test_a_refused_commit_breaks_the_run_for_good() -> None:
    """Lost authority: nothing more may be recorded by this owner, whatever the code does."""
    ctx = context(Recorder(committed=False))
    with pytest.raises(AuthorityLost):
        await ctx.commit([FireTimer("0:1")])
    assert isinstance(ctx.broken, AuthorityLost)
    with pytest.raises(AuthorityLost):
        await ctx.commit([FireTimer("0:2")])


async def test_batched_outcomes_ride_ahead_of_the_runs_next_commit() -> None:
    recorder = Recorder()
    host = Host()
    ctx = context(recorder, host=host)
    write = RecordLocalActivity(op_id="0:1", name="double", started_at=T0, attempts=1,
                                result="2")
    record = ctx.record_batched(write, T0 + 0.5)
    assert record.status == OpStatus.COMPLETED and ctx.recorded["0:1"] is record
    assert recorder.submitted == [] and ctx.batched == 1
    assert len(host.engine) == 1  # an engine task records them when the run yields
    await ctx.commit([ScheduleTimer("0:2", T0 + 5, 5.0)])
    [[kept, timer]] = recorder.submitted
    assert kept == RecordBatchedLocalActivity(write, T0 + 0.5) and isinstance(timer,
                                                                              ScheduleTimer)
    assert ctx.batched == 0 and ctx.deferred == []


async def test_a_flush_records_batched_outcomes_only_when_some_wait() -> None:
    recorder = Recorder()
    ctx = context(recorder)
    await ctx.flush()
    assert recorder.submitted == []
    ctx.record_batched(RecordLocalActivity(op_id="0:1", name="d", started_at=T0, attempts=1,
                                           result="1"), T0)
    assert ctx.wants_flush()  # no task runs: the run has yielded
    await ctx.flush()
    assert len(recorder.submitted) == 1 and not ctx.wants_flush()


def test_the_code_sees_the_cleanup_deadline_only_once_delivered() -> None:
    """Deterministic on replay: the delivery is recorded, the request alone is not
    something the code could have seen."""
    request = {"request_id": "c1", "root_request_id": "c1", "reason": "stop",
               "source": "client", "requested_at": T0, "deadline_at": T0 + 10}
    fields = {"execution_deadline_at": T0 + 100, "cleanup_deadline_at": T0 + 10}
    requested = WorkflowContext(
        run=run_record("unit_ctx", cancellation=request, **fields), ops={},
        defn=WorkflowDefn("unit_ctx", noop), setup=setup(Recorder()), host=Host())
    assert requested.binding_deadline() == T0 + 100
    delivered = WorkflowContext(
        run=run_record("unit_ctx", cancellation={**request, "delivered_at": T0 + 1,
                                                  "boundary": [{"op_id": "0:1",
                                                                "kind": "timer"}]},
                       **fields),
        ops={}, defn=WorkflowDefn("unit_ctx", noop), setup=setup(Recorder()), host=Host())
    assert delivered.binding_deadline() == T0 + 10
    # replay re-delivers it where it was delivered: at op 0:1
    assert delivered.parking.must_block(None, "0:1") and not delivered.parking.must_block(
        None, "0:2")


def test_a_state_change_pokes_the_inbox_through_the_host() -> None:
    host = Host()
    ctx = context(host=host)
    ctx.parking.task_started()
    ctx.parking.park("0:1", OpKind.TIMER)  # the task stopped running
    assert host.asked == ["poke"]
