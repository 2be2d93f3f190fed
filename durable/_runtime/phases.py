"""Durable phases: named parts of a workflow sharing the run's time budget.

``async with workflow.phase("import", limit=600):`` records `PhaseStarted`
with the phase's deadline: its limit, capped by every deadline around it (the
run's, an enclosing phase's, a delivered cancellation's). No phase starts
after the run's deadline or a delivered cancellation. Inside it, every
durable op gets min(its own timeout, the time the phase has left) — the
article's rule that each dependency is given the time that remains — so a
phase can never wait past its deadline on an op. An op that hits that cap
(or a result that arrives at or after the deadline) raises `PhaseTimedOut`
from the phase; the phase records its outcome (`PhaseCompleted`,
`PhaseTimedOut`, `PhaseCancelled`, `PhaseFailed`). Caught, the workflow goes
on with the time left; uncaught, the run ends ``timed_out`` with
``timeout_kind = "phase"`` and the phase's name.

Everything here is decided on workflow time (recorded instants), never the
host clock, so a replay takes the same path.
"""

from __future__ import annotations

import math
from types import TracebackType

import anyio

from .. import _validate
from ..clock import to_datetime
from ..errors import (
    BudgetCancelled,
    BudgetExhausted,
    NonDeterminismDetected,
    PhaseTimedOut,
    UnitOutcomeUnknown,
)
from ..failure import Failure
from ..options import Seconds
from ..store.records import OpKind, earliest
from ..store.writes import EndPhase, StartPhase
from . import caps
from .context import WorkflowContext
from .ops import go_live, live_gate, tracked_shield
from .state import TaskState


class Phase:
    """The context manager behind `workflow.phase` (see the module docstring)."""

    def __init__(self, ctx: WorkflowContext, state: TaskState, name: str,
                 limit: Seconds | None) -> None:
        self._ctx = ctx
        self._state = state
        self._name = _validate.name(name, "phase name")
        self._limit = _validate.optional_duration(limit, f"the limit of phase {name!r}",
                                                  inclusive=False)
        self._frame: caps.PhaseFrame | None = None

    async def __aenter__(self) -> caps.PhaseInfo:
        ctx, state, name = self._ctx, self._state, self._name
        op_id = state.next_op_id()
        record = ctx.recorded_op(op_id, OpKind.PHASE, name)
        if record is not None:
            deadline = record.fire_at
        else:
            now = caps.workflow_time(ctx, state)
            if ctx.cancellation is not None:
                raise BudgetCancelled(
                    f"phase {name!r} not started: the workflow is being cancelled "
                    f"({ctx.cancellation.reason}); no new phase starts after a cancellation",
                    budget=f"workflow {ctx.run.workflow_type}",
                    reason=ctx.cancellation.reason, phase=name)
            outer = caps.innermost(state)
            bound = earliest(ctx.binding_deadline(), outer.deadline if outer else None)
            if bound is not None and now >= bound:
                raise BudgetExhausted(
                    f"phase {name!r} not started: the deadline passed "
                    f"{now - bound:.3f} s ago; no new phase starts after the deadline",
                    budget=f"workflow {ctx.run.workflow_type}", phase=name, deadline=bound,
                    late_by=now - bound)
            deadline = earliest(now + self._limit if self._limit else None, bound)
            await live_gate(ctx)
            go_live(state)
            await ctx.commit([StartPhase(op_id, name, deadline, self._limit)])
        self._frame = caps.PhaseFrame(name, op_id, deadline, self._limit)
        state.phases.append(self._frame)
        return caps.PhaseInfo(name, to_datetime(deadline), self._limit)

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool:
        ctx, state, frame = self._ctx, self._state, self._frame
        assert frame is not None
        if frame in state.phases:
            state.phases.remove(frame)
        if isinstance(exc, UnitOutcomeUnknown | NonDeterminismDetected):
            # the run parks for a person's decision, not ended: the phase stays
            # open (describe() shows it) and ends when the run resumes
            return False
        now = caps.workflow_time(ctx, state)
        over = frame.deadline is not None and now >= frame.deadline
        raise_instead: BaseException | None = None
        if exc is None:
            outcome = "completed"
            if over:  # a result at or after the deadline does not count
                outcome, raise_instead = "timed_out", caps.timed_out(ctx, frame, now)
        elif isinstance(exc, PhaseTimedOut) and exc.phase == frame.name:
            outcome = "timed_out"
        elif over and caps.is_deadline_error(exc):
            outcome, raise_instead = "timed_out", caps.timed_out(ctx, frame, now)
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            outcome = "cancelled"
        else:
            outcome = "failed"
        await self._record_end(frame, outcome, raise_instead or exc)
        if outcome == "completed":
            await ctx.worker.crash_point("between_phases")
        if raise_instead is not None:
            raise raise_instead from exc
        return False

    async def _record_end(self, frame: caps.PhaseFrame, outcome: str,
                          exc: BaseException | None) -> None:
        ctx = self._ctx
        known = ctx.recorded.get(frame.op_id)
        if known is not None and known.closed:
            return  # replay: the end is recorded
        failure = None
        if outcome == "timed_out":
            failure = Failure.phase_timeout(frame.name, frame.deadline, frame.limit,
                                            ctx.run.workflow_id)
        elif outcome == "failed" and exc is not None:
            failure = Failure.from_exception(exc)
        write = EndPhase(frame.op_id, outcome, failure)
        if outcome == "cancelled":
            if ctx.may_act_on_interrupt():
                with tracked_shield(ctx):
                    await ctx.commit([write])
            return
        await ctx.commit([write])


def remaining_in_phase(ctx: WorkflowContext, state: TaskState) -> float:
    """Seconds until the innermost phase's deadline (inf when unbounded)."""
    frame = caps.innermost(state)
    if frame is None or frame.deadline is None:
        return math.inf
    return max(0.0, frame.deadline - caps.workflow_time(ctx, state))


def phase_failure(exc: PhaseTimedOut, workflow_id: str) -> Failure:
    """How an uncaught phase time-out closes the run."""
    phase = exc.phase or "?"
    limit = getattr(exc, "limit", None)
    deadline = exc.deadline
    return Failure.phase_timeout(phase, deadline, limit, workflow_id)

