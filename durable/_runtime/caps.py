"""The time a phase leaves its ops: every op inside a phase gets min(its own
timeout, the phase's time left), decided on workflow time (see phases.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..errors import ActivityTimedOut, BudgetExhausted, ChildWorkflowFailed, PhaseTimedOut
from .context import WorkflowContext
from .state import TaskState


@dataclass
class PhaseFrame:
    """A phase the calling task runs inside."""

    name: str
    op_id: str
    deadline: float | None
    limit: float | None


@dataclass(frozen=True)
class PhaseInfo:
    """What ``async with workflow.phase(...) as p`` gives: its name and deadline."""

    name: str
    deadline: datetime | None
    limit: float | None


def workflow_time(ctx: WorkflowContext, state: TaskState) -> float:
    return max(state.clock, ctx.delivered_at)


def innermost(state: TaskState) -> PhaseFrame | None:
    return state.phases[-1] if state.phases else None


def time_left(ctx: WorkflowContext, state: TaskState) -> float | None:
    """Seconds the innermost phase has left for a new op (None: no phase, or no limit).

    Raises `PhaseTimedOut` when none is left: an op is not started past its
    phase's deadline.
    """
    frame = innermost(state)
    if frame is None or frame.deadline is None:
        return None
    left = frame.deadline - workflow_time(ctx, state)
    if left <= 0:
        raise timed_out(ctx, frame, workflow_time(ctx, state))
    return left


def raise_if_capped(ctx: WorkflowContext, state: TaskState, instant: float) -> None:
    """An op that ended at `instant`, at or past its phase's deadline, ran into it."""
    frame = innermost(state)
    if frame is not None and frame.deadline is not None and instant >= frame.deadline:
        raise timed_out(ctx, frame, instant)


def timed_out(ctx: WorkflowContext, frame: PhaseFrame, now: float) -> PhaseTimedOut:
    late = max(0.0, now - (frame.deadline or now))
    return PhaseTimedOut(
        f"phase {frame.name!r} of workflow {ctx.run.workflow_id} reached its deadline "
        f"({frame.limit:g} s limit)" if frame.limit else
        f"phase {frame.name!r} of workflow {ctx.run.workflow_id} reached its deadline",
        budget=f"workflow {ctx.run.workflow_type}", phase=frame.name, limit=frame.limit,
        deadline=frame.deadline, late_by=late,
    )


def is_deadline_error(exc: BaseException) -> bool:
    """A timeout an op raised because it was capped at the phase's deadline."""
    if isinstance(exc, ActivityTimedOut | BudgetExhausted):
        return True
    if isinstance(exc, ChildWorkflowFailed):
        cause = exc.__cause__
        return cause is not None and type(cause).__name__ == "WorkflowTimedOut"
    return False
