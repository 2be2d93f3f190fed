"""The workflow side of the API: module-level functions that act on the running workflow.

User code reads ``await workflow.sleep(5)``: each function finds the calling
workflow task's runtime (a contextvar) and asks it. Every function here that
performs a durable operation records it (or replays its recorded outcome);
everything else is deterministic: `now()`, `random()`, `uuid4()`,
`deadline()` and `remaining()` return the same values when a run is
replayed after a crash.
"""

from __future__ import annotations

import dataclasses
import uuid as _uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Any, Generic, Never, ParamSpec, Protocol, TypeVar, cast, overload

import anyio

from . import _validate
from ._registry import define_workflow
from ._runtime.caps import PhaseInfo
from ._runtime.handlers import RUN_ATTR, declare
from ._runtime.interact import ActivityHandle, ExternalWorkflowHandle
from ._runtime.ops import Acknowledgement, ChildHandle
from ._runtime.runtime import TaskGroup, WorkflowInfo, current
from ._runtime.state import current_task_state
from ._runtime.units import UnitsResult
from .cancellation import CancellationContext
from .clock import to_datetime
from .options import ActivityOptions, CancellationPolicy, ChildOptions, Seconds

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R", covariant=True)
V = TypeVar("V", bound=Callable[..., Any])

__all__ = [
    "Acknowledgement",
    "ActivityHandle",
    "ChildHandle",
    "ExternalWorkflowHandle",
    "PhaseInfo",
    "TaskGroup",
    "UnitsResult",
    "UpdateMethod",
    "WorkflowInfo",
    "all_handlers_finished",
    "cancellation",
    "cancellation_shield",
    "continue_as_new",
    "deadline",
    "defn",
    "deprecate_patch",
    "execute_activity",
    "execute_child",
    "execute_local_activity",
    "get_external_handle",
    "info",
    "logger",
    "now",
    "on_query",
    "on_signal",
    "on_update",
    "patched",
    "phase",
    "query",
    "random",
    "remaining",
    "run",
    "signal",
    "sleep",
    "start_activity",
    "start_child",
    "task_group",
    "units",
    "update",
    "uuid4",
    "wait_condition",
]

_DEFAULT_ACTIVITY_OPTIONS = ActivityOptions()
_DEFAULT_CHILD_OPTIONS = ChildOptions()


@overload
def defn(fn: F, /) -> F: ...


@overload
def defn(*, name: str | None = None) -> Callable[[F], F]: ...


def defn(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Declare a workflow: an ``async def``, or a class with one `@workflow.run`
    method (a fresh instance per run; its `@workflow.signal` / `query` /
    `update` methods are the run's handlers). The name defaults to the
    function's or the class's.

    Raises `ConfigurationError` when another workflow already has the name, or
    the class has no (or more than one) run method.
    """

    def decorate(f: F) -> F:
        define_workflow(f, name)
        return f

    return decorate(fn) if fn is not None else decorate


def run(fn: F) -> F:
    """Mark the method of a workflow class that runs the workflow (an ``async def``;
    it takes the workflow's arguments)."""
    setattr(fn, RUN_ATTR, True)
    return fn


@overload
def signal(fn: F, /) -> F: ...


@overload
def signal(*, name: str | None = None) -> Callable[[F], F]: ...


def signal(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark a method of a workflow class as a signal handler (``def`` or ``async
    def``; named after the method unless `name` is given). Signals are
    recorded before they are delivered and delivered in the order received."""

    def decorate(f: F) -> F:
        return cast(F, declare("signal", f, name))

    return decorate(fn) if fn is not None else decorate


@overload
def query(fn: F, /) -> F: ...


@overload
def query(*, name: str | None = None) -> Callable[[F], F]: ...


def query(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark a method of a workflow class as a query handler: it reads the
    workflow's state and returns a value; it records nothing (a durable op in
    it fails with `QueryFailed`)."""

    def decorate(f: F) -> F:
        return cast(F, declare("query", f, name))

    return decorate(fn) if fn is not None else decorate


class UpdateMethod(Protocol, Generic[P, R]):
    """An update handler method; ``@method.validator`` declares its validator."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def validator(self, fn: V, /) -> V:
        """Declare the validator: a plain ``def`` with the handler's parameters,
        run before anything is recorded; raising rejects the update."""
        ...


@overload
def update(fn: Callable[P, R], /) -> UpdateMethod[P, R]: ...


@overload
def update(*, name: str | None = None) -> Callable[[Callable[P, R]], UpdateMethod[P, R]]: ...


def update(
    fn: Callable[P, R] | None = None, /, *, name: str | None = None
) -> UpdateMethod[P, R] | Callable[[Callable[P, R]], UpdateMethod[P, R]]:
    """Mark a method of a workflow class as an update handler: validated first
    (``@handler.validator``), then recorded (``UpdateAccepted``), run as workflow
    code that may await durable ops, and its result recorded (``UpdateCompleted``)
    and returned to the caller."""

    def decorate(f: Callable[P, R]) -> UpdateMethod[P, R]:
        return cast(UpdateMethod[P, R], declare("update", f, name))

    return decorate(fn) if fn is not None else decorate


def on_signal(name: str, handler: Callable[..., Any]) -> None:
    """Register (or replace) the run's signal handler for `name`, from workflow
    code. Signals received before it was registered are delivered to it now."""
    current().register_handler("signal", name, handler, None)


def on_query(name: str, handler: Callable[..., Any]) -> None:
    """Register (or replace) the run's query handler for `name`."""
    current().register_handler("query", name, handler, None)


def on_update(name: str, handler: Callable[..., Any],
              validator: Callable[..., Any] | None = None) -> None:
    """Register (or replace) the run's update handler for `name`; `validator`
    (a plain ``def`` with the same parameters) rejects an update by raising."""
    current().register_handler("update", name, handler, validator)


async def wait_condition(
    predicate: Callable[[], Any],
    timeout: Seconds | None = None,  # noqa: ASYNC109 (a durable timer, not a cancel scope)
) -> bool:
    """Wait until ``predicate()`` is true; False if `timeout` passed first.

    The predicate is checked again whenever the workflow's state may have
    changed (a signal or update was handled, an op completed). The timeout is
    a durable timer; replay returns the same answer at the same point.
    """
    return await current().wait_condition(predicate, timeout)


def all_handlers_finished() -> bool:
    """No signal or update handler is running (``await wait_condition(
    workflow.all_handlers_finished)`` before returning lets updates finish)."""
    return current().all_handlers_finished()


def patched(patch_id: str) -> bool:
    """Whether this run takes the code written after the change `patch_id`.

    A run that reaches this point for the first time takes it (True, recorded
    as a marker); a run whose history was recorded by the old code replays
    the old branch (False). ``if workflow.patched("x"): new() else: old()``.
    """
    return current().patched(patch_id)


def deprecate_patch(patch_id: str) -> None:
    """Every run that took the old branch of `patch_id` has closed: keep only
    the new code, and call this where `patched(patch_id)` was."""
    current().deprecate_patch(patch_id)


def start_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
    **misplaced: Never,
) -> ActivityHandle:
    """Start a remote activity and return at once with its handle: ``await
    handle`` for the result, ``handle.request_cancellation()`` to cancel this
    one activity under its `ActivityOptions.cancellation` policy."""
    if misplaced:
        raise _validate.misplaced_keywords(
            "workflow.start_activity()", misplaced, ActivityOptions, "the activity's")
    return current().start_activity(activity, args, _validate.options(
        options, _DEFAULT_ACTIVITY_OPTIONS, "workflow.start_activity(options=...)"))


def get_external_handle(workflow_id: str, *, run_id: str | None = None) -> ExternalWorkflowHandle:
    """Another workflow: ``await handle.signal(name, *args)``, ``await
    handle.request_cancellation(reason=...)``; each is an op of this run."""
    current()
    return ExternalWorkflowHandle(workflow_id, run_id)


async def execute_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
    **misplaced: Never,
) -> Any:
    """Run an activity on any worker that has it registered (a remote activity).

    At least once; its recorded outcome exactly once. Raises `ActivityFailed`
    (`ActivityTimedOut`, `ActivityCancelled`) when it did not complete.
    """
    if misplaced:
        raise _validate.misplaced_keywords(
            "workflow.execute_activity()", misplaced, ActivityOptions, "the activity's")
    return await current().execute_activity(activity, args, _validate.options(
        options, _DEFAULT_ACTIVITY_OPTIONS, "workflow.execute_activity(options=...)"))


async def execute_local_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
    **misplaced: Never,
) -> Any:
    """Run an activity in this worker, supervised, without a queue round trip.

    One write records its outcome; a crash before that write re-runs it.
    """
    if misplaced:
        raise _validate.misplaced_keywords(
            "workflow.execute_local_activity()", misplaced, ActivityOptions, "the activity's")
    state = current_task_state()  # once: the runtime is told it (as the op needs it)
    return await state.runtime.execute_local_activity(activity, args, _validate.options(
        options, _DEFAULT_ACTIVITY_OPTIONS, "workflow.execute_local_activity(options=...)"),
        state)


async def sleep(duration: Seconds) -> None:
    """A durable timer: survives crashes and restarts; fires once."""
    await current().sleep(duration)


async def start_child(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    options: ChildOptions | None = None,
    **misplaced: Never,
) -> ChildHandle:
    """Start a child workflow and return its handle once the start is recorded."""
    if misplaced:
        raise _validate.misplaced_keywords(
            "workflow.start_child()", misplaced, ChildOptions, "the child workflow's")
    return await current().start_child(workflow, args, id, _validate.options(
        options, _DEFAULT_CHILD_OPTIONS, "workflow.start_child(options=...)"))


async def execute_child(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    options: ChildOptions | None = None,
    **misplaced: Never,
) -> Any:
    """Start a child workflow and wait for its result.

    Raises `ChildWorkflowFailed` (its ``__cause__`` is the child's own error,
    e.g. `WorkflowTimedOut`) when the child does not complete.
    """
    if misplaced:
        raise _validate.misplaced_keywords(
            "workflow.execute_child()", misplaced, ChildOptions, "the child workflow's")
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
    cancellation: CancellationPolicy | None = None,
) -> UnitsResult:
    """Run the activity `handler` once per item, each recorded by ``key(item)``.

    A restart skips the units already confirmed and runs the rest. A unit
    whose effect cannot be confirmed (its worker died mid-call, the call ran
    past its start-to-close or heartbeat timeout) is not retried: the run goes
    to review (`UnitOutcomeUnknown`; describe() status ``unknown``) and an
    operator decides with ``handle.retry_after_review(units="rerun" or
    "confirm")``. Returns the results (and clean failures) by key;
    `describe()["progress"]` is ``{"done", "total"}`` while units run.

    When the run is cancelled, the units in flight are asked to stop and,
    by default, waited for (`CancellationPolicy.WAIT_CANCELLATION_COMPLETED`):
    a unit is an external effect, so the cleanup that runs next must see
    every unit either finished (recorded completed) or stopped, never one
    still writing. `cancellation` (or an `options.cancellation` other than
    the activity default, TRY_CANCEL) chooses otherwise; TRY_CANCEL stops
    waiting at once and the cleanup may race the unit in flight.
    """
    opts = options or _DEFAULT_ACTIVITY_OPTIONS
    policy = cancellation if cancellation is not None else (
        opts.cancellation if opts.cancellation is not CancellationPolicy.TRY_CANCEL
        else CancellationPolicy.WAIT_CANCELLATION_COMPLETED)
    if policy is not opts.cancellation:
        opts = dataclasses.replace(opts, cancellation=policy)
    return await current().units(items, key, handler, opts, concurrency)


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
