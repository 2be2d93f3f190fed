"""The workflow side of the API: module-level functions that act on the running workflow.

User code reads ``await workflow.sleep(5)``: each function finds the calling
workflow task's runtime (a contextvar) and asks it. Every function here that
performs a durable operation records it (or replays its recorded outcome);
everything else is deterministic: `now()`, `random()`, `uuid4()`,
`deadline()` and `remaining()` return the same values when a run is
replayed after a crash.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Any, TypeVar, overload

import anyio

from ._registry import define_workflow
from ._runtime.caps import PhaseInfo
from ._runtime.ops import ChildHandle
from ._runtime.runtime import TaskGroup, WorkflowInfo, current
from ._runtime.units import UnitsResult
from .cancellation import CancellationContext
from .clock import to_datetime
from .options import ActivityOptions, ChildOptions, Seconds

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "ChildHandle",
    "PhaseInfo",
    "TaskGroup",
    "UnitsResult",
    "WorkflowInfo",
    "cancellation",
    "cancellation_shield",
    "continue_as_new",
    "deadline",
    "defn",
    "execute_activity",
    "execute_child",
    "execute_local_activity",
    "info",
    "logger",
    "now",
    "phase",
    "random",
    "remaining",
    "sleep",
    "start_child",
    "task_group",
    "units",
    "uuid4",
]

_DEFAULT_ACTIVITY_OPTIONS = ActivityOptions()
_DEFAULT_CHILD_OPTIONS = ChildOptions()


@overload
def defn(fn: F, /) -> F: ...


@overload
def defn(*, name: str | None = None) -> Callable[[F], F]: ...


def defn(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Declare a workflow (an ``async def``); its name defaults to the function's.

    Raises `ConfigurationError` when another workflow already has the name.
    """

    def decorate(f: F) -> F:
        define_workflow(f, name)
        return f

    return decorate(fn) if fn is not None else decorate


async def execute_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
) -> Any:
    """Run an activity on any worker that has it registered (a remote activity).

    At least once; its recorded outcome exactly once. Raises `ActivityFailed`
    (`ActivityTimedOut`, `ActivityCancelled`) when it did not complete.
    """
    return await current().execute_activity(activity, args,
                                            options or _DEFAULT_ACTIVITY_OPTIONS)


async def execute_local_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
) -> Any:
    """Run an activity in this worker, supervised, without a queue round trip.

    One write records its outcome; a crash before that write re-runs it.
    """
    return await current().execute_local_activity(activity, args,
                                                  options or _DEFAULT_ACTIVITY_OPTIONS)


async def sleep(duration: Seconds) -> None:
    """A durable timer: survives crashes and restarts; fires once."""
    await current().sleep(duration)


async def start_child(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    options: ChildOptions | None = None,
) -> ChildHandle:
    """Start a child workflow and return its handle once the start is recorded."""
    return await current().start_child(workflow, args, id, options or _DEFAULT_CHILD_OPTIONS)


async def execute_child(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    options: ChildOptions | None = None,
) -> Any:
    """Start a child workflow and wait for its result.

    Raises `ChildWorkflowFailed` (its ``__cause__`` is the child's own error,
    e.g. `WorkflowTimedOut`) when the child does not complete.
    """
    handle = await start_child(workflow, *args, id=id, options=options)
    return await handle.result()


def phase(name: str, limit: Seconds | None = None) -> AbstractAsyncContextManager[PhaseInfo]:
    """``async with workflow.phase("import", limit=600) as p:`` a durable phase.

    Its deadline is min(`limit`, the time the run has left); every durable op
    inside gets min(its own timeout, the phase's time left). It refuses to
    start after the run's deadline (`BudgetExhausted`) or a delivered
    cancellation (`BudgetCancelled`). Overrunning it raises `PhaseTimedOut`
    from the ``async with``: caught, the workflow goes on; uncaught, the run
    ends ``timed_out`` with ``timeout_kind = "phase"``. Recorded as
    PhaseStarted / PhaseCompleted / PhaseTimedOut / PhaseCancelled /
    PhaseFailed; `describe()["phase"]` shows the phase while it runs.
    """
    return current().phase(name, limit)


async def units(
    items: Iterable[Any],
    *,
    key: Callable[[Any], str],
    handler: Callable[..., Any] | str,
    options: ActivityOptions | None = None,
    concurrency: int = 1,
) -> UnitsResult:
    """Run the activity `handler` once per item, each recorded by ``key(item)``.

    A restart skips the units already confirmed and runs the rest. A unit
    whose effect cannot be confirmed (its worker died mid-call, the call ran
    past its start-to-close or heartbeat timeout) is not retried: the run goes
    to review (`UnitOutcomeUnknown`; describe() status ``unknown``) and an
    operator decides with ``handle.retry_after_review(units="rerun" or
    "confirm")``. Returns the results (and clean failures) by key;
    `describe()["progress"]` is ``{"done", "total"}`` while units run.
    """
    return await current().units(items, key, handler, options or _DEFAULT_ACTIVITY_OPTIONS,
                                 concurrency)


def continue_as_new(*args: Any) -> None:
    """Close this run and start the next run of the same workflow id with `args`.

    The execution deadline carries over unchanged; the run deadline is renewed.
    """
    current().continue_as_new(args)


def task_group() -> AbstractAsyncContextManager[TaskGroup]:
    """``async with workflow.task_group() as tg: tg.start_soon(fn, ...)``.

    The only way to run durable operations concurrently: each task gets a path
    assigned in the parent at spawn time, so replay finds the same ops under
    any scheduler (trio randomises its scheduling).
    """
    return current().task_group()


def cancellation_shield() -> AbstractContextManager[anyio.CancelScope]:
    """Shield cleanup from the delivered cancellation, bounded by the cleanup deadline.

    Durable activities, timers and child calls work inside it. When the
    original deadline passes, the shield is cancelled and the run closes as
    cancelled with ``deadline_expired``.
    """
    return current().cancellation_shield()


def cancellation() -> CancellationContext | None:
    """The delivered `CancellationContext`, or None if none was delivered."""
    return current().cancellation()


def deadline() -> datetime | None:
    """The earliest binding deadline (cleanup, run, execution) as a UTC datetime, or None.

    Deterministic: the cleanup deadline counts once the cancellation is delivered.
    """
    return to_datetime(current().deadline())


def remaining() -> float:
    """Seconds until `deadline()` measured from `now()`; `math.inf` when unbounded.

    Deterministic: computed from recorded times, never the host clock.
    """
    return current().remaining()


def now() -> datetime:
    """Deterministic workflow time: advances with recorded op completions."""
    value = to_datetime(current().now())
    assert value is not None
    return value


def random() -> float:
    """A deterministic random float in [0, 1)."""
    return current().random()


def uuid4() -> _uuid.UUID:
    """A deterministic UUID4."""
    return current().uuid4()


def info() -> WorkflowInfo:
    """Identity and deadlines of the running workflow."""
    return current().info()


class _ReplaySafeLogger:
    """A structlog logger bound to the run; silent while the run replays."""

    def debug(self, event: str, **kw: Any) -> None:
        current().log("debug", event, kw)

    def info(self, event: str, **kw: Any) -> None:
        current().log("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        current().log("warning", event, kw)

    def error(self, event: str, **kw: Any) -> None:
        current().log("error", event, kw)

    def exception(self, event: str, **kw: Any) -> None:
        current().log("exception", event, kw)


logger = _ReplaySafeLogger()
