"""The runtime of a query handler or an update validator: it reads, never records.

Queries are answered from the run's state without changing it, so anything
that would record an op, start a task or move the run's deterministic state
(its random generator, its patches) fails with `QueryFailed`, naming the call.
Reading works: `workflow.info()`, `now()`, `cancellation()`, `deadline()`,
`remaining()`, and the instance's own attributes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, NoReturn

import anyio

from ..cancellation import CancellationContext
from ..errors import QueryFailed
from ..options import ActivityOptions, ChildOptions, Seconds
from .caps import PhaseInfo
from .context import WorkflowContext
from .interact import ActivityHandle
from .ops import ChildHandle
from .runtime import Runtime, TaskGroup, WorkflowInfo, run_info
from .state import TaskState, current_task_state
from .units import UnitsResult


class QueryRuntime(Runtime):
    """Read-only access to a run (see the module docstring)."""

    read_only = True

    def __init__(self, ctx: WorkflowContext, what: str) -> None:
        self.ctx = ctx
        self.what = what

    def refuse(self, call: str) -> NoReturn:
        raise QueryFailed(
            f"{self.what} is read-only and cannot call {call}: queries and update validators "
            "must not record anything or change the workflow's state (an update handler can)"
        )

    async def execute_activity(self, activity: Callable[..., Any] | str, args: tuple[Any, ...],
                               options: ActivityOptions) -> Any:
        self.refuse("workflow.execute_activity()")

    async def execute_local_activity(self, activity: Callable[..., Any] | str,
                                     args: tuple[Any, ...], options: ActivityOptions,
                                     state: TaskState | None = None) -> Any:
        self.refuse("workflow.execute_local_activity()")

    async def sleep(self, duration: Seconds) -> None:
        self.refuse("workflow.sleep()")

    async def start_child(self, workflow: Callable[..., Any] | str, args: tuple[Any, ...],
                          child_id: str | None, options: ChildOptions) -> ChildHandle:
        self.refuse("workflow.start_child()")

    def task_group(self) -> AbstractAsyncContextManager[TaskGroup]:
        self.refuse("workflow.task_group()")

    def phase(self, name: str, limit: Seconds | None) -> AbstractAsyncContextManager[PhaseInfo]:
        self.refuse("workflow.phase()")

    async def units(self, items: Iterable[Any], key: Callable[[Any], str],
                    handler: Callable[..., Any] | str, options: ActivityOptions,
                    concurrency: int) -> UnitsResult:
        self.refuse("workflow.units()")

    @contextmanager
    def cancellation_shield(self) -> Iterator[anyio.CancelScope]:
        self.refuse("workflow.cancellation_shield()")
        yield anyio.CancelScope()  # not reached: refuse() raises

    def cancellation(self) -> CancellationContext | None:
        return self.ctx.cancellation

    def deadline(self) -> float | None:
        return self.ctx.binding_deadline()

    def now(self) -> float:
        return max(current_task_state().clock, self.ctx.delivered_at)

    def random(self) -> float:
        self.refuse("workflow.random()")

    def uuid4(self) -> uuid.UUID:
        self.refuse("workflow.uuid4()")

    def info(self) -> WorkflowInfo:
        return run_info(self.ctx)

    def log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        getattr(self.ctx.log, level)(event, **fields)

    def continue_as_new(self, args: tuple[Any, ...]) -> None:
        self.refuse("workflow.continue_as_new()")

    def register_handler(self, kind: str, name: str, fn: Callable[..., Any],
                         validator: Callable[..., Any] | None) -> None:
        self.refuse(f"workflow.on_{kind}()")

    async def wait_condition(self, predicate: Callable[[], Any],
                             timeout: Seconds | None) -> bool:  # noqa: ASYNC109
        self.refuse("workflow.wait_condition()")

    def patched(self, patch_id: str) -> bool:
        known = self.ctx.patches.get(patch_id)
        if known is None:
            self.refuse("workflow.patched() for a patch the run has not reached")
        return known

    def deprecate_patch(self, patch_id: str) -> None:
        self.refuse("workflow.deprecate_patch()")

    def start_activity(self, activity: Callable[..., Any] | str, args: tuple[Any, ...],
                       options: ActivityOptions) -> ActivityHandle:
        self.refuse("workflow.start_activity()")

    def all_handlers_finished(self) -> bool:
        return self.ctx.running_handlers == 0
