"""Read-only replays: a run's code re-run against its records, recording nothing.

Two users: a worker answering a query for a run no live worker holds (an idle
or closed run: load it, replay it, answer from the state reached, drop it),
and `durable.testing.Replayer`, which replays a history against the current
code to find non-determinism before a deploy does.

The replay runs the ordinary executor with a *scratch committer*. Replay
itself records nothing; where the code would go past its history (record a
new op, fire a timer that has not fired), the scratch committer stops that
task there: the state reached is the run's state. In strict mode (the
Replayer, a closed history) going past the history is the divergence itself
and raises `NonDeterminismDetected` naming the op.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from .._registry import WorkflowDefn
from ..clock import Clock, VirtualClock
from ..converter import PayloadConverter
from ..errors import NonDeterminismDetected
from ..options import Limits
from ..store.records import CommitResult, InboxItem, OpRecord, RunRecord
from ..store.writes import (
    AcceptUpdate,
    CancelExternal,
    CancelTimer,
    CloseRun,
    CompleteUpdate,
    DeliverSignal,
    FireTimer,
    RecordLocalActivity,
    RecordMarker,
    RequestActivityStop,
    RequestChildCancellation,
    ResolveCondition,
    ScheduleActivity,
    ScheduleChild,
    ScheduleCondition,
    ScheduleTimer,
    SignalExternal,
    Write,
)
from .context import RunSetup, WorkerServices, WorkflowContext
from .executor import RunExecutor

T = TypeVar("T")

#: Checkpoints in a row with nothing runnable before a replay counts as settled.
_SETTLED_ROUNDS = 10


def describe_write(write: Write) -> str:
    """What a write asks for, as a non-determinism message names it."""
    match write:
        case ScheduleActivity():
            return f"activity {write.name!r} at {write.op_id}"
        case RecordLocalActivity():
            return f"local_activity {write.name!r} at {write.op_id}"
        case ScheduleTimer():
            return f"timer 'sleep' at {write.op_id}"
        case FireTimer():
            return f"the timer at {write.op_id} to fire"
        case ScheduleChild():
            return f"child workflow {write.request.workflow_type!r} at {write.op_id}"
        case ScheduleCondition():
            return f"condition 'wait_condition' at {write.op_id}"
        case SignalExternal():
            return f"a signal {write.name!r} to workflow {write.workflow_id!r} at {write.op_id}"
        case CancelExternal():
            return f"a cancellation of workflow {write.workflow_id!r} at {write.op_id}"
        case DeliverSignal():
            return f"a delivery of signal {write.name!r}"
        case AcceptUpdate() | CompleteUpdate():
            return f"update {write.name!r} to be recorded"
    return type(write).__name__


class ScratchCommitter:
    """Stands in for the group committer of a replay that must not record."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self.ctx: WorkflowContext | None = None
        self.went_past: str | None = None  # the first write past the history
        self.closed_with: CloseRun | None = None

    async def submit(self, run_id: str, epoch: int, writes: list[Write],
                     quiet: bool = False) -> CommitResult:
        ctx = self.ctx
        assert ctx is not None
        live = [w for w in writes if not isinstance(w, CloseRun | RecordMarker)
                and not self._annotates_recorded(w)]
        if not live:
            for write in writes:
                if isinstance(write, CloseRun):
                    self.closed_with = write
            return CommitResult(run_id, True)
        if self.went_past is None:
            self.went_past = describe_write(live[0])
        if self.strict:
            error = NonDeterminismDetected(
                f"workflow {ctx.run.workflow_type} (run {ctx.run.run_id}) asked for "
                f"{self.went_past}, which its history does not have (the history ended "
                f"{ctx.run.status}): the code changed in a way that does not replay"
            )
            ctx.fatal = ctx.fatal or error
            raise error
        ctx.parking.block()  # this task stops here: the run's state is what replay rebuilt
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    def _annotates_recorded(self, write: Write) -> bool:
        """A cancellation request for an op history has: the live run made it
        too (its effect is in the op's recorded outcome); nothing new."""
        ctx = self.ctx
        assert ctx is not None
        if isinstance(write, RequestActivityStop | RequestChildCancellation | CancelTimer):
            return write.op_id in ctx.recorded
        return isinstance(write, ResolveCondition) and write.satisfied is None and (
            write.op_id in ctx.recorded)


class NoStorage:
    """What a replay without storage (the Replayer) offers as its 'worker': the
    scratch executor never reaches storage (its inbox is loaded up front, it
    enforces no deadlines), so `store` is None."""

    capabilities: tuple[str, ...] = ()

    def __init__(self, activity_names: set[str]) -> None:
        self._names = activity_names
        self.store: Any = None

    async def known_activity_names(self) -> set[str]:
        return self._names

    async def crash_point(self, point: str) -> None:
        """No crash points in a replay without storage."""


@dataclass
class ReplayOutcome:
    """What a read-only replay reached."""

    ctx: WorkflowContext
    committer: ScratchCommitter
    finished: bool  # the code returned (or failed), as opposed to waiting
    answer: Any = None
    blocked_at: list[dict[str, str]] = field(default_factory=list)


async def replay_run(
    defn: WorkflowDefn,
    run: RunRecord,
    ops: dict[str, OpRecord],
    inbox: list[InboxItem],
    *,
    worker: WorkerServices,
    converter: PayloadConverter,
    limits: Limits,
    clock: Clock | None = None,
    strict: bool = False,
    then: Callable[[WorkflowContext], Awaitable[T]] | None = None,
) -> ReplayOutcome:
    """Replay a run read-only until its code returns or waits past its history;
    then call `then` with the context (a query's answer, say)."""
    committer = ScratchCommitter(strict=strict and not run.is_open)
    # A clock that never moves: timers that have not fired in history do not fire.
    setup = RunSetup(
        worker=worker, converter=converter, limits=limits, committer=committer,
        clock=clock or VirtualClock(run.closed_at or run.started_at or run.created_at),
    )
    executor = RunExecutor(run, dict(ops), defn, setup, lambda _: None, scratch=True)
    ctx = committer.ctx = executor.ctx
    executor.inbox().load(inbox, [], run)
    done = anyio.Event()
    outcome = ReplayOutcome(ctx, committer, finished=False)
    async with anyio.create_task_group() as tg:

        async def execute() -> None:
            try:
                await executor.execute()
            finally:
                done.set()

        tg.start_soon(execute)
        await _settled(executor, done)
        outcome.finished = done.is_set() and committer.closed_with is not None
        outcome.blocked_at = ctx.parking.frontier()
        if then is not None and ctx.fatal is None:
            outcome.answer = await then(ctx)
        executor.stop("the replay is done")
        tg.cancel_scope.cancel()
    return outcome


async def _settled(executor: RunExecutor, done: anyio.Event) -> None:
    """Until the replayed code returned, or has nothing left to run."""
    parking = executor.ctx.parking
    quiet_rounds = 0
    while quiet_rounds < _SETTLED_ROUNDS and not done.is_set():
        await anyio.lowlevel.checkpoint()
        busy = (parking.active > 0 or parking.gated or parking.replay_delivery_pending
                or executor.replay_due())
        quiet_rounds = 0 if busy else quiet_rounds + 1
