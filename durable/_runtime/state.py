"""Per-task replay state: which task of which run is calling, and its op counter.

An op's identity is (task path, sequence). The root task has path ``0``; a
task spawned through `workflow.task_group()` gets a child path assigned at
``start_soon()`` in its parent (deterministic under any scheduler, trio's
randomised one included); within a task, ops are numbered in call order.
"""

from __future__ import annotations

import contextvars
import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import WorkflowAPIOutsideWorkflow

if TYPE_CHECKING:
    from .context import WorkflowContext


@dataclass
class TaskState:
    """Per-task replay state: the deterministic path, op counter, clock and RNG."""

    path: str
    task: int
    ctx: WorkflowContext
    seq: int = 0
    children: int = 0
    clock: float = 0.0
    replaying: bool = True
    rng: random.Random = field(default_factory=random.Random)
    # durable phases this task runs inside, outermost first (see phases.py)
    phases: list[Any] = field(default_factory=list)

    def next_op_id(self) -> str:
        self.seq += 1
        return f"{self.path}:{self.seq}"

    def child_path(self) -> str:
        self.children += 1
        return f"{self.path}.{self.children}"

    def new_uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)


_task_state: contextvars.ContextVar[TaskState | None] = contextvars.ContextVar(
    "durable_task_state", default=None
)


def current_task_state() -> TaskState:
    """The calling task's state; raise a clear error outside a workflow."""
    state = _task_state.get()
    if state is None:
        raise WorkflowAPIOutsideWorkflow(
            "this durable.workflow function can only be called from inside a workflow "
            "(a function decorated with @durable.workflow.defn that a Worker runs)"
        )
    if state.task != anyio.get_current_task().id:
        raise WorkflowAPIOutsideWorkflow(
            "durable operations must run in the workflow's own task or in a task spawned "
            "with `async with workflow.task_group() as tg: tg.start_soon(...)`; tasks started "
            "any other way would not replay deterministically"
        )
    return state


def enter_task(ctx: WorkflowContext, path: str, clock: float) -> TaskState:
    """Make the calling task a workflow task with this path.

    It replays (its log lines stay silent) while history holds ops of this
    task or of tasks it spawned; a task with none runs live from the start.
    """
    state = TaskState(path=path, task=anyio.get_current_task().id, ctx=ctx, clock=clock,
                      replaying=path in ctx.recorded_paths)
    state.rng.seed(f"{ctx.run.run_id}/{path}")
    _task_state.set(state)
    return state
