"""Per-task replay state: which task of which run is calling, and its op counter.

An op's identity is (task path, sequence). The root task has path ``0``; a
task spawned through `workflow.task_group()` gets a child path assigned at
``start_soon()`` in its parent (deterministic under any scheduler, trio's
randomised one included); within a task, ops are numbered in call order.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    #: what the task's RNG is seeded with (its run's id and its path): made at
    #: first use (`rng`), as most tasks never draw from it; seeding a fresh
    #: ``Random()`` from the OS first, then again from this, was ~15 µs of
    #: every run's start (issue 26)
    seed: str = ""
    _rng: random.Random | None = None
    # durable phases this task runs inside, outermost first (see phases.py)
    phases: list[Any] = field(default_factory=list)
    #: what `durable.workflow`'s functions call in this task (a `runtime.Runtime`:
    #: the run's, or a query's read-only one); typed loosely because the runtime
    #: sits above this module
    runtime: Any = None
    #: the host loop's "current task" (asyncio's or trio's): its id() is `task`
    current_task: Callable[[], object | None] = asyncio.current_task

    @property
    def rng(self) -> random.Random:
        """The task's deterministic RNG (seeded with `seed`)."""
        rng = self._rng
        if rng is None:
            rng = self._rng = random.Random(self.seed)
        return rng

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
    # id() of the host's task object, as anyio's TaskInfo.id is, without building
    # a TaskInfo: this runs twice per durable op
    if state.task != id(state.current_task()):
        raise WorkflowAPIOutsideWorkflow(
            "durable operations must run in the workflow's own task or in a task spawned "
            "with `async with workflow.task_group() as tg: tg.start_soon(...)`; tasks started "
            "any other way would not replay deterministically"
        )
    return state


def enter_task(ctx: WorkflowContext, path: str, clock: float, runtime: Any) -> TaskState:
    """Make the calling task a workflow task with this path, calling `runtime`.

    It replays (its log lines stay silent) while history holds ops of this
    task or of tasks it spawned; a task with none runs live from the start.
    """
    current_task = _host_current_task()
    state = TaskState(path=path, task=id(current_task()), ctx=ctx, clock=clock,
                      replaying=path in ctx.recorded_paths, runtime=runtime,
                      current_task=current_task, seed=f"{ctx.run.run_id}/{path}")
    _task_state.set(state)
    return state


def new_task_state(ctx: WorkflowContext, path: str, clock: float, *, replaying: bool,
                   runtime: Any) -> TaskState:
    """State for code that runs as workflow task `path` in the calling anyio task
    (a handler run by the engine's own task; see `as_task`)."""
    current_task = _host_current_task()
    state = TaskState(path=path, task=id(current_task()), ctx=ctx, clock=clock,
                      replaying=replaying, runtime=runtime, current_task=current_task,
                      seed=f"{ctx.run.run_id}/{path}")
    return state


def _host_current_task() -> Callable[[], object | None]:
    """The host loop's own "current task" function (what anyio's get_current_task wraps)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop in this thread: the host is trio
        import trio

        return trio.lowlevel.current_task
    return asyncio.current_task


@contextmanager
def as_task(state: TaskState) -> Iterator[TaskState]:
    """Let the calling anyio task act as workflow task `state` for a while (a
    plain-function handler runs this way, without a task of its own)."""
    token = _task_state.set(state)
    try:
        yield state
    finally:
        _task_state.reset(token)
