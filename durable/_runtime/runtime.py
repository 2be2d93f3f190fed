"""The interface between `durable.workflow`'s functions and the running workflow.

`durable.workflow` is module-level functions (``await workflow.sleep(5)``);
each asks `current()` for the runtime of the calling workflow task and calls
the matching method. `WorkflowRuntime` is the runtime of a run a worker
executes: durable ops record and replay through its `WorkflowContext`. The
interface is what another runtime implements to run workflow code under
other rules.
"""

from __future__ import annotations

import abc
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import anyio.abc

from ..cancellation import CancellationContext
from ..clock import to_datetime
from ..errors import ContinueAsNew
from ..options import ActivityOptions, ChildOptions, Seconds
from ..store.records import earliest
from . import caps, interact
from .caps import PhaseInfo
from .context import WorkflowContext
from .interact import ActivityHandle
from .local import execute_local_activity
from .ops import ChildHandle, execute_activity, sleep, start_child, tracked_shield
from .phases import Phase
from .state import TaskState, current_task_state, enter_task
from .units import UnitsResult, run_units


@dataclass(frozen=True)
class WorkflowInfo:
    """Identity and deadlines of the running workflow (`workflow.info()`)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    namespace: str
    task_queue: str
    run_number: int
    parent_workflow_id: str | None
    parent_run_id: str | None
    execution_deadline: datetime | None
    run_deadline: datetime | None
    #: the schedule whose fire started this instance, and that fire's time
    #: (None for a run started otherwise); see durable.schedules
    schedule_id: str | None = None
    scheduled_at: datetime | None = None


class TaskGroup:
    """A workflow task group: children get deterministic paths at `start_soon`."""

    def __init__(self, tg: anyio.abc.TaskGroup, parent: TaskState) -> None:
        self._tg = tg
        self._parent = parent

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any,
                   name: str | None = None) -> None:
        """Run ``fn(*args)`` as a workflow task (its ops get this task's child path)."""
        parent = self._parent
        path = parent.child_path()
        ctx = parent.ctx

        phases = list(parent.phases)  # a task started inside a phase runs in it

        async def child() -> None:
            state = enter_task(ctx, path, parent.clock, parent.runtime)
            state.phases = phases
            ctx.parking.task_started()
            try:
                await fn(*args)
            finally:
                ctx.parking.task_finished()

        self._tg.start_soon(child, name=name or f"workflow-task {path}")

    @property
    def cancel_scope(self) -> anyio.CancelScope:
        return self._tg.cancel_scope


class Runtime(abc.ABC):
    """What `durable.workflow`'s functions ask of the running workflow."""

    @abc.abstractmethod
    async def execute_activity(self, activity: Callable[..., Any] | str, args: tuple[Any, ...],
                               options: ActivityOptions) -> Any:
        """A remote activity's result (or its failure raised)."""

    @abc.abstractmethod
    async def execute_local_activity(self, activity: Callable[..., Any] | str,
                                     args: tuple[Any, ...], options: ActivityOptions,
                                     state: TaskState | None = None) -> Any:
        """A local activity's result (or its failure raised); `state` is the
        calling task's, when the caller has it at hand."""

    @abc.abstractmethod
    async def sleep(self, duration: Seconds) -> None:
        """A durable timer."""

    @abc.abstractmethod
    async def start_child(self, workflow: Callable[..., Any] | str, args: tuple[Any, ...],
                          child_id: str | None, options: ChildOptions) -> ChildHandle:
        """A started child workflow's handle."""

    @abc.abstractmethod
    def phase(self, name: str, limit: Seconds | None) -> AbstractAsyncContextManager[PhaseInfo]:
        """A durable phase of the workflow, bounded by `limit` and the time left."""

    @abc.abstractmethod
    async def units(self, items: Iterable[Any], key: Callable[[Any], str],
                    handler: Callable[..., Any] | str, options: ActivityOptions,
                    concurrency: int) -> UnitsResult:
        """Run `handler` once per item, each recorded by its stable key."""

    @abc.abstractmethod
    def task_group(self) -> AbstractAsyncContextManager[TaskGroup]:
        """A deterministic task group for concurrent durable ops."""

    @abc.abstractmethod
    def cancellation_shield(self) -> AbstractContextManager[anyio.CancelScope]:
        """A shield for cleanup, bounded by the cleanup deadline."""

    @abc.abstractmethod
    def cancellation(self) -> CancellationContext | None:
        """The delivered cancellation, if any."""

    @abc.abstractmethod
    def deadline(self) -> float | None:
        """The binding deadline (epoch seconds), deterministic."""

    @abc.abstractmethod
    def now(self) -> float:
        """Deterministic workflow time (epoch seconds)."""

    @abc.abstractmethod
    def random(self) -> float:
        """A deterministic random float in [0, 1)."""

    @abc.abstractmethod
    def uuid4(self) -> uuid.UUID:
        """A deterministic UUID4."""

    @abc.abstractmethod
    def info(self) -> WorkflowInfo:
        """Identity and deadlines of the run."""

    @abc.abstractmethod
    def log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        """Log through the run's bound logger, silently while replaying."""

    @abc.abstractmethod
    def register_handler(self, kind: str, name: str, fn: Callable[..., Any],
                         validator: Callable[..., Any] | None) -> None:
        """Register a signal, query or update handler for the rest of the run."""

    @abc.abstractmethod
    async def wait_condition(self, predicate: Callable[[], Any],
                             timeout: Seconds | None) -> bool:  # noqa: ASYNC109
        """Wait until `predicate()` holds (True) or the durable timeout passes (False)."""

    @abc.abstractmethod
    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the code after `patch_id` (recorded as a marker)."""

    @abc.abstractmethod
    def deprecate_patch(self, patch_id: str) -> None:
        """The code before `patch_id` is gone; skip its marker where history has one."""

    @abc.abstractmethod
    def start_activity(self, activity: Callable[..., Any] | str, args: tuple[Any, ...],
                       options: ActivityOptions) -> ActivityHandle:
        """Start a remote activity; a handle to await or cancel it."""

    @abc.abstractmethod
    def all_handlers_finished(self) -> bool:
        """Whether no signal or update handler task is running."""

    def continue_as_new(self, args: tuple[Any, ...]) -> None:
        """End this run; the next run of the same id starts with `args`."""
        raise ContinueAsNew(args)

    def remaining(self) -> float:
        """Seconds until `deadline()` from `now()`; inf when unbounded."""
        limit = self.deadline()
        return math.inf if limit is None else max(0.0, limit - self.now())


class WorkflowRuntime(Runtime):
    """The runtime of a run executed by a worker: ops record and replay."""

    def __init__(self, ctx: WorkflowContext) -> None:
        self.ctx = ctx

    def continue_as_new(self, args: tuple[Any, ...]) -> None:
        arity = self.ctx.defn.arity
        if arity is not None:  # else the next run would fail at its start, far from here
            arity.check(f"workflow.continue_as_new() of workflow {self.ctx.defn.name!r}",
                        len(args))
        super().continue_as_new(args)

    async def execute_activity(self, activity: Callable[..., Any] | str, args: tuple[Any, ...],
                               options: ActivityOptions) -> Any:
        return await execute_activity(self.ctx, current_task_state(), activity, args, options)

    def execute_local_activity(self, activity: Callable[..., Any] | str,
                               args: tuple[Any, ...], options: ActivityOptions,
                               state: TaskState | None = None) -> Coroutine[Any, Any, Any]:
        # the op's coroutine itself (one await layer less on a local step's
        # every suspension and resume); the task's state is read here, where
        # the caller awaits it at once (durable.workflow), unless it was given
        return execute_local_activity(self.ctx, state or current_task_state(), activity, args,
                                      options)

    async def sleep(self, duration: Seconds) -> None:
        await sleep(self.ctx, current_task_state(), duration)

    async def start_child(self, workflow: Callable[..., Any] | str, args: tuple[Any, ...],
                          child_id: str | None, options: ChildOptions) -> ChildHandle:
        return await start_child(self.ctx, current_task_state(), workflow, args, child_id,
                                 options)

    def phase(self, name: str, limit: Seconds | None) -> Phase:
        return Phase(self.ctx, current_task_state(), name, limit)

    async def units(self, items: Iterable[Any], key: Callable[[Any], str],
                    handler: Callable[..., Any] | str, options: ActivityOptions,
                    concurrency: int) -> UnitsResult:
        return await run_units(self.ctx, current_task_state(), items, key, handler, options,
                               concurrency)

    @asynccontextmanager
    async def task_group(self) -> AsyncIterator[TaskGroup]:
        state = current_task_state()
        blocked = False
        try:
            async with anyio.create_task_group() as tg:
                yield TaskGroup(tg, state)
                # the body is done: this task now only waits for its children
                self.ctx.parking.block()
                blocked = True
        finally:
            if blocked:
                self.ctx.parking.unblock()

    @contextmanager
    def cancellation_shield(self) -> Iterator[anyio.CancelScope]:
        current_task_state()
        with tracked_shield(self.ctx) as scope:
            yield scope

    def cancellation(self) -> CancellationContext | None:
        return self.ctx.cancellation

    def deadline(self) -> float | None:
        frame = caps.innermost(current_task_state())
        return earliest(self.ctx.binding_deadline(), frame.deadline if frame else None)

    def now(self) -> float:
        return max(current_task_state().clock, self.ctx.delivered_at)

    def random(self) -> float:
        return current_task_state().rng.random()

    def uuid4(self) -> uuid.UUID:
        return current_task_state().new_uuid()

    def info(self) -> WorkflowInfo:
        return run_info(self.ctx)

    def log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if current_task_state().replaying:
            return
        getattr(self.ctx.user_log, level)(event, **fields)

    def register_handler(self, kind: str, name: str, fn: Callable[..., Any],
                         validator: Callable[..., Any] | None) -> None:
        current_task_state()
        interact.register_handler(self.ctx, kind, name, fn, validator)

    async def wait_condition(self, predicate: Callable[[], Any],
                             timeout: Seconds | None) -> bool:  # noqa: ASYNC109
        return await interact.wait_condition(self.ctx, current_task_state(), predicate, timeout)

    def patched(self, patch_id: str) -> bool:
        return interact.patched(self.ctx, current_task_state(), patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        interact.deprecate_patch(self.ctx, current_task_state(), patch_id)

    def start_activity(self, activity: Callable[..., Any] | str, args: tuple[Any, ...],
                       options: ActivityOptions) -> ActivityHandle:
        return interact.start_activity(self.ctx, current_task_state(), activity, args, options)

    def all_handlers_finished(self) -> bool:
        return self.ctx.running_handlers == 0


def run_info(ctx: WorkflowContext) -> WorkflowInfo:
    run = ctx.run
    return WorkflowInfo(
        workflow_id=run.workflow_id, run_id=run.run_id, workflow_type=run.workflow_type,
        namespace=run.namespace, task_queue=run.task_queue, run_number=run.run_number,
        parent_workflow_id=run.parent_workflow_id, parent_run_id=run.parent_run_id,
        execution_deadline=to_datetime(run.execution_deadline_at),
        run_deadline=to_datetime(run.run_deadline_at),
        schedule_id=run.schedule_id, scheduled_at=to_datetime(run.scheduled_at),
    )


def current() -> Runtime:
    """The runtime of the calling workflow task (a query's read-only one while a
    query runs); a clear error anywhere else."""
    runtime: Runtime = current_task_state().runtime
    return runtime
