"""The workflow side of the API: module-level functions that read the running
workflow from a contextvar, so user code reads ``await workflow.sleep(5)``.

Every function here that performs a durable operation records it (or replays
its recorded outcome); everything else is deterministic: `now()`, `random()`,
`uuid4()`, `deadline()` and `remaining()` return the same values when a run
is replayed after a crash.
"""

from __future__ import annotations

import math
import uuid as _uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import anyio
import anyio.abc

from . import _activities
from ._registry import (
    activity_defn_of,
    define_workflow,
    require_activity,
    workflow_defn_of,
    workflow_name,
)
from ._runtime import (
    TaskState,
    WorkflowContext,
    current_task_state,
    enter_task,
    failure_from_exception,
    leaf_exceptions,
    new_uuid,
)
from .cancellation import CancellationContext
from .clock import to_datetime
from .driver import (
    CancelTimer,
    FireTimer,
    OpRecord,
    RecordLocalActivity,
    RequestActivityStop,
    RequestChildCancellation,
    ScheduleActivity,
    ScheduleChild,
    ScheduleTimer,
    StartRequest,
)
from .errors import (
    ActivityStopRequested,
    ChildWorkflowFailed,
    ContinueAsNew,
    NotRegistered,
    PolicyRejected,
    StructuralLimitExceeded,
    WorkflowAlreadyStarted,
    activity_error_from_failure,
    error_from_failure,
)
from .options import ActivityOptions, CancellationPolicy, ChildOptions, Seconds, to_seconds

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
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
    "random",
    "remaining",
    "sleep",
    "start_child",
    "task_group",
    "uuid4",
]


@overload
def defn(fn: F, /) -> F: ...


@overload
def defn(*, name: str | None = None) -> Callable[[F], F]: ...


def defn(fn: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Declare a workflow (an ``async def``); its name defaults to the function's."""

    def decorate(f: F) -> F:
        define_workflow(f, name)
        return f

    return decorate(fn) if fn is not None else decorate


@dataclass(frozen=True)
class WorkflowInfo:
    workflow_id: str
    run_id: str
    workflow_type: str
    namespace: str
    task_queue: str
    run_number: int
    parent_workflow_id: str | None
    parent_run_id: str | None
    execution_deadline: Any
    run_deadline: Any


def _ctx() -> tuple[WorkflowContext, TaskState]:
    state = current_task_state()
    return state.ctx, state


def _outcome(ctx: WorkflowContext, state: TaskState, op: OpRecord, hint: Any = None) -> Any:
    """Return or raise a closed op's recorded outcome (replay and live alike)."""
    if op.closed_at is not None:
        state.clock = max(state.clock, op.closed_at)
    if op.status == "completed":
        return ctx.converter.decode(op.result, hint)
    failure = op.failure or {}
    if op.kind == "child":
        cause = failure.get("cause")
        exc = ChildWorkflowFailed(str(failure.get("message", "child workflow failed")), failure)
        if failure.get("failure_category") == "child_start":
            raise WorkflowAlreadyStarted(op.child_workflow_id or "?")
        if isinstance(cause, dict):
            raise exc from error_from_failure(cause)
        raise exc
    raise activity_error_from_failure(failure)


def _live(state: TaskState) -> None:
    state.replaying = False


async def _live_gate(ctx: WorkflowContext) -> None:
    """Before an op goes live in replay, re-deliver a recorded cancellation."""
    if ctx.replay_delivery_pending:
        ctx.redeliver()
        await anyio.lowlevel.checkpoint()


@contextmanager
def _tracked_shield(ctx: WorkflowContext) -> Iterator[anyio.CancelScope]:
    scope = ctx.shield()
    ctx.shields.add(scope)
    try:
        with scope:
            yield scope
    finally:
        ctx.shields.discard(scope)


async def _interruptible(
    ctx: WorkflowContext,
    op_id: str,
    kind: str,
    wait: Callable[[], Awaitable[Any]],
    on_interrupt: Callable[[], Awaitable[None]],
) -> Any:
    """Await a durable op; when a cancellation interrupts the await, apply the
    op's cancellation policy under a shield bounded by the cleanup deadline,
    then let the host's cancellation exception continue."""
    block = ctx.must_block(ctx.recorded.get(op_id), op_id)
    ctx.park(op_id, kind)
    try:
        if block:
            await anyio.sleep_forever()
        result = await wait()
        if ctx.delivering:
            await anyio.sleep_forever()  # delivery is being recorded: this is the boundary
        return result
    except anyio.get_cancelled_exc_class():
        if ctx.may_act_on_interrupt():
            with _tracked_shield(ctx):
                await on_interrupt()
        raise
    finally:
        ctx.unpark(op_id)


# ---------------------------------------------------------------- activities


async def execute_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
) -> Any:
    """Run an activity on any worker that has it registered (a remote activity).

    At least once; its recorded outcome exactly once.
    """
    ctx, state = _ctx()
    options = options or ActivityOptions()
    defn = activity_defn_of(activity)
    name = defn.name if defn is not None else str(activity)
    if options.cancellation is CancellationPolicy.ABANDON and (
        options.schedule_to_close_timeout is None
    ):
        raise PolicyRejected(
            "CancellationPolicy.ABANDON leaves the activity running on its own; it needs a "
            "finite schedule_to_close_timeout so that it cannot run forever"
        )
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, "activity", name)
    hint = defn.return_hint if defn is not None else None
    if record is not None and record.closed and not ctx.must_block(record, op_id):
        return _outcome(ctx, state, record, hint)
    if record is None:
        await _live_gate(ctx)
        _live(state)
        if defn is None and name not in await ctx.worker.known_activity_names():
            raise NotRegistered(
                f"unknown activity {name!r}: no @activity.defn with this name is imported here "
                "and no live worker has registered it; check the name or start a worker that "
                "has it"
            )
        payload = ctx.encode(list(args), f"the arguments of activity {name!r}")
    policy = options.cancellation

    async def on_interrupt() -> None:
        known = ctx.recorded.get(op_id)
        if known is None or not known.interrupted:
            await ctx.commit([RequestActivityStop(op_id, policy.value)])
        if policy is CancellationPolicy.WAIT_CANCELLATION_COMPLETED:
            await ctx.wait_op(op_id)

    ctx.reserve("activity")
    try:
        if record is None:
            ctx.waiter(op_id)
            await ctx.commit([ScheduleActivity(
                op_id=op_id, name=name, task_id=_uuid.uuid4().hex,
                task_queue=options.task_queue or ctx.run.task_queue, input=payload,
                options=options.snapshot(),
            )])
        done = await _interruptible(ctx, op_id, "activity", lambda: ctx.wait_op(op_id),
                                    on_interrupt)
    finally:
        ctx.release("activity")
    return _outcome(ctx, state, done, hint)


async def execute_local_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    options: ActivityOptions | None = None,
) -> Any:
    """Run an activity in this worker, supervised, without a queue round trip.

    One write records its outcome; a crash before that write re-runs it.
    """
    ctx, state = _ctx()
    options = options or ActivityOptions()
    if options.cancellation is CancellationPolicy.ABANDON:
        raise PolicyRejected(
            "CancellationPolicy.ABANDON is not allowed for local activities: they run inside "
            "this worker and cannot outlive their workflow; use TRY_CANCEL or "
            "WAIT_CANCELLATION_COMPLETED, or a remote activity"
        )
    defn = require_activity(activity)
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, "local_activity", defn.name)
    if record is not None and not ctx.must_block(record, op_id):
        return _outcome(ctx, state, record, defn.return_hint)
    started = ctx.clock.now()
    policy = options.cancellation

    async def record_interrupt(receipt: dict[str, Any], attempts: int) -> None:
        known = ctx.recorded.get(op_id)
        if known is not None:
            return
        await ctx.commit([RecordLocalActivity(
            op_id=op_id, name=defn.name, started_at=started, attempts=attempts,
            interrupted=True, failure={
                "failure_category": "cancelled", "exception_class": "durable.ActivityCancelled",
                "policy": policy.value, "stop_receipt": receipt, "interrupted": True,
                "message": f"local activity {defn.name} stopped by cancellation",
            },
        )])

    if ctx.must_block(record, op_id):
        # Replay of an op the live run interrupted: interrupt it again, do not re-run it.
        await _interruptible(
            ctx, op_id, "local_activity", anyio.sleep_forever,
            lambda: record_interrupt({"kind": "not_restarted", "confirmed": True}, 0),
        )
    await _live_gate(ctx)
    _live(state)
    payload = ctx.encode(list(args), f"the arguments of activity {defn.name!r}")
    decoded = ctx.converter.decode(payload)
    from .converter import rebuild

    call_args = [
        rebuild(a, defn.param_hints[i] if i < len(defn.param_hints) else None)
        for i, a in enumerate(decoded)
    ]
    retry = options.retry_policy
    s2c = to_seconds(options.schedule_to_close_timeout, "schedule_to_close_timeout")
    overall = started + s2c if s2c is not None else None
    attempt = 0
    failure: dict[str, Any] | None = None
    result: str | None = None
    actx: Any = None
    ctx.park(op_id, "local_activity")
    try:
        while True:
            attempt += 1
            attempt_start = ctx.clock.now()
            stc = to_seconds(options.start_to_close_timeout, "start_to_close_timeout")
            deadlines = [d for d in (overall, attempt_start + stc if stc else None) if d]
            deadline_at = min(deadlines) if deadlines else None
            actx = _activities.ActivityContext(
                _activities.make_info(
                    activity_id=op_id, activity_type=defn.name, attempt=attempt,
                    workflow_id=ctx.run.workflow_id, run_id=ctx.run.run_id,
                    task_queue=ctx.run.task_queue, local=True, scheduled_at=started,
                    started_at=attempt_start, deadline=deadline_at,
                    heartbeat_timeout=None, heartbeat_details=None,
                ),
                ctx.clock, deadline_at,
            )
            ctx.running_local[op_id] = actx
            timed_out: str | None = None
            try:
                if deadline_at is None:  # the common case: no watcher task needed
                    value = await _activities.call_activity(
                        actx, defn.fn, defn.is_async, call_args,
                        abandon_on_cancel=policy is CancellationPolicy.TRY_CANCEL,
                        process_isolated=defn.process_isolated,
                    )
                else:
                    try:
                        async with anyio.create_task_group() as tg:
                            async def _expire(d: float = deadline_at, a: Any = actx) -> None:
                                await ctx.clock.sleep_until(d)
                                nonlocal timed_out
                                timed_out = (
                                    "schedule_to_close" if overall is not None and d >= overall
                                    else "start_to_close"
                                )
                                a.request_stop(f"{timed_out} timeout")

                            tg.start_soon(_expire)
                            try:
                                value = await _activities.call_activity(
                                    actx, defn.fn, defn.is_async, call_args,
                                    abandon_on_cancel=policy is CancellationPolicy.TRY_CANCEL,
                                    process_isolated=defn.process_isolated,
                                )
                            finally:
                                tg.cancel_scope.cancel()
                    except BaseExceptionGroup as group:
                        # trio groups the attempt's own stop with the run's cancellation;
                        # the cancellation is what this await must report.
                        leaves = leaf_exceptions(group)
                        cancelled = anyio.get_cancelled_exc_class()
                        first = next((e for e in leaves if isinstance(e, cancelled)), None)
                        if first is None and len(leaves) == 1:
                            first = leaves[0]
                        if first is not None:
                            raise first from None
                        raise
                if timed_out is not None:
                    raise ActivityStopRequested(timed_out)
                result = ctx.encode(value, f"the result of activity {defn.name!r}")
                failure = None
                break
            except StructuralLimitExceeded:
                raise
            except ActivityStopRequested:
                if timed_out is None:
                    # Stopped because the run's code is being cancelled (delivery or a
                    # worker stop): wait for that cancellation to reach this await.
                    await anyio.sleep_forever()
                failure = {
                    "failure_category": "timeout", "propagation_kind": "timeout",
                    "exception_class": "durable.ActivityTimedOut", "timeout_kind": timed_out,
                    "attempt": attempt,
                    "message": f"local activity {defn.name} timed out ({timed_out})",
                }
                retryable = timed_out != "schedule_to_close"
            except Exception as exc:
                failure = failure_from_exception(exc)
                retryable = not getattr(exc, "non_retryable", False) and (
                    type(exc).__name__ not in retry.non_retryable_error_types
                    and failure["exception_class"] not in retry.non_retryable_error_types
                )
            finally:
                ctx.running_local.pop(op_id, None)
            if not retryable or attempt >= retry.max_attempts:
                break
            next_at = ctx.clock.now() + retry.delay_before(attempt + 1)
            if overall is not None and next_at >= overall:
                break
            await ctx.clock.sleep_until(next_at)
    except anyio.get_cancelled_exc_class():
        if ctx.may_act_on_interrupt():
            abandoned = policy is CancellationPolicy.TRY_CANCEL and not (
                defn.is_async or defn.process_isolated)
            receipt: dict[str, Any] = {
                "kind": "abandoned_thread" if abandoned else (
                    "cancel_scope" if defn.is_async else "cooperative"),
                "confirmed": not abandoned, "attempt": attempt,
                "at": _iso_now(ctx),
            }
            stop = getattr(actx, "process_stop", None)
            if defn.process_isolated:
                receipt.update(kind="process_killed",
                               confirmed=bool(stop and stop["confirmed"]),
                               exit_code=stop["exit_code"] if stop else None)
            with _tracked_shield(ctx):
                await record_interrupt(receipt, attempt)
        raise
    finally:
        ctx.unpark(op_id)
    await ctx.commit([RecordLocalActivity(
        op_id=op_id, name=defn.name, started_at=started, attempts=attempt,
        result=result, failure=failure,
    )])
    return _outcome(ctx, state, ctx.recorded[op_id], defn.return_hint)


def _iso_now(ctx: WorkflowContext) -> str | None:
    value = to_datetime(ctx.clock.now())
    return value.isoformat() if value else None


# ---------------------------------------------------------------- timers


async def sleep(duration: Seconds) -> None:
    """A durable timer: survives crashes and restarts; fires once."""
    ctx, state = _ctx()
    seconds = to_seconds(duration, "sleep duration")
    assert seconds is not None
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, "timer", "sleep")
    if record is not None and record.closed and not ctx.must_block(record, op_id):
        _outcome(ctx, state, record)
        return
    ctx.reserve("timer")
    try:
        if record is None:
            await _live_gate(ctx)
            _live(state)
            fire_at = ctx.clock.now() + seconds
            await ctx.commit([ScheduleTimer(op_id=op_id, fire_at=fire_at, duration=seconds)])
        else:
            assert record.fire_at is not None
            fire_at = record.fire_at

        async def on_interrupt() -> None:
            known = ctx.recorded.get(op_id)
            if known is None or not known.interrupted:
                await ctx.commit([CancelTimer(op_id)])

        await _interruptible(ctx, op_id, "timer", lambda: ctx.clock.sleep_until(fire_at),
                             on_interrupt)
    finally:
        ctx.release("timer")
    await ctx.commit([FireTimer(op_id=op_id)])
    state.clock = max(state.clock, fire_at)


# ---------------------------------------------------------------- children


class ChildHandle:
    """A started child workflow; `await handle.result()` for its outcome."""

    def __init__(self, ctx: WorkflowContext, state: TaskState, op_id: str, workflow_id: str,
                 hint: Any, options: ChildOptions) -> None:
        self._ctx = ctx
        self._state = state
        self.op_id = op_id
        self.workflow_id = workflow_id
        self._hint = hint
        self._options = options

    async def result(self) -> Any:
        ctx, op_id, options = self._ctx, self.op_id, self._options
        record = ctx.recorded.get(op_id)
        if record is not None and record.closed and not ctx.must_block(record, op_id):
            return _outcome(ctx, self._state, record, self._hint)
        policy = options.cancellation

        async def on_interrupt() -> None:
            known = ctx.recorded.get(op_id)
            if known is None or not known.interrupted:
                await ctx.commit([RequestChildCancellation(
                    op_id, policy.value, _float(options.cleanup_timeout))])
            if policy is CancellationPolicy.WAIT_CANCELLATION_COMPLETED:
                await ctx.wait_op(op_id)

        record = await _interruptible(ctx, op_id, "child", lambda: ctx.wait_op(op_id),
                                      on_interrupt)
        return _outcome(ctx, self._state, record, self._hint)


async def start_child(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    options: ChildOptions | None = None,
) -> ChildHandle:
    """Start a child workflow and return its handle once the start is recorded."""
    ctx, state = _ctx()
    options = options or ChildOptions()
    wf_type = workflow_name(workflow)
    defn = workflow_defn_of(workflow)
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, "child", wf_type)
    child_id = id or f"{ctx.run.workflow_id}/{op_id}"
    hint = defn.return_hint if defn is not None else None
    if record is not None:
        if not record.closed:
            ctx.reserve("child")
            ctx.open_children.add(op_id)
        return ChildHandle(ctx, state, op_id, record.child_workflow_id or child_id, hint,
                           options)
    await _live_gate(ctx)
    _live(state)
    ctx.reserve("child")
    ctx.open_children.add(op_id)
    payload = ctx.encode(list(args), f"the arguments of child workflow {wf_type!r}")
    request = StartRequest(
        namespace=ctx.run.namespace, workflow_id=child_id, workflow_type=wf_type,
        task_queue=options.task_queue or ctx.run.task_queue, input=payload,
        id_reuse="reject_duplicate",
        execution_timeout=_float(options.execution_timeout),
        run_timeout=_float(options.run_timeout),
        parent_run_id=ctx.run.run_id, parent_workflow_id=ctx.run.workflow_id,
        parent_op_id=op_id, parent_close_policy=options.parent_close_policy.value,
        cleanup_timeout=_float(options.cleanup_timeout),
    )
    ctx.waiter(op_id)
    await ctx.commit([ScheduleChild(op_id=op_id, request=request, options={
        "cancellation": options.cancellation.value,
        "parent_close_policy": options.parent_close_policy.value,
        "execution_timeout_seconds": request.execution_timeout,
        "run_timeout_seconds": request.run_timeout,
    })])
    return ChildHandle(ctx, state, op_id, child_id, hint, options)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


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


def continue_as_new(*args: Any) -> None:
    """Close this run and start the next run of the same workflow id with `args`.

    The execution deadline carries over unchanged; the run deadline is renewed.
    """
    current_task_state()
    raise ContinueAsNew(args)


# ---------------------------------------------------------------- structured concurrency


class TaskGroup:
    """A workflow task group: children get deterministic paths at `start_soon`."""

    def __init__(self, tg: anyio.abc.TaskGroup, parent: TaskState) -> None:
        self._tg = tg
        self._parent = parent

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any,
                   name: str | None = None) -> None:
        parent = self._parent
        path = parent.child_path()
        ctx = parent.ctx

        async def child() -> None:
            state = enter_task(ctx, path, parent.clock)
            state.replaying = parent.replaying
            ctx.task_started()
            try:
                await fn(*args)
            finally:
                ctx.task_finished()

        self._tg.start_soon(child, name=name or f"workflow-task {path}")

    @property
    def cancel_scope(self) -> anyio.CancelScope:
        return self._tg.cancel_scope


@asynccontextmanager
async def _task_group() -> Any:
    state = current_task_state()
    async with anyio.create_task_group() as tg:
        yield TaskGroup(tg, state)


def task_group() -> Any:
    """``async with workflow.task_group() as tg: tg.start_soon(fn, ...)``.

    The only way to run durable operations concurrently: each task gets a path
    assigned in the parent at spawn time, so replay finds the same ops under
    any scheduler (trio randomises its scheduling).
    """
    return _task_group()


# ---------------------------------------------------------------- cancellation, time


@contextmanager
def cancellation_shield() -> Iterator[anyio.CancelScope]:
    """Shield cleanup from the delivered cancellation, bounded by the cleanup deadline.

    Durable activities, timers and child calls work inside it. When the
    original deadline passes, the shield is cancelled and the run closes as
    cancelled with ``deadline_expired``.
    """
    ctx, _ = _ctx()
    with _tracked_shield(ctx) as scope:
        yield scope


def cancellation() -> CancellationContext | None:
    """The delivered `CancellationContext`, or None if none was delivered."""
    ctx, _ = _ctx()
    return ctx.cancellation


def _binding_deadline(ctx: WorkflowContext) -> float | None:
    run = ctx.run
    cleanup = ctx.cancellation.deadline.timestamp() if ctx.cancellation is not None else None
    values = [
        v for v in (cleanup, run.run_deadline_at, run.execution_deadline_at) if v is not None
    ]
    return min(values) if values else None


def deadline() -> Any:
    """The earliest binding deadline (cleanup, run, execution) as a UTC datetime, or None.

    Deterministic: the cleanup deadline counts once the cancellation is delivered.
    """
    ctx, _ = _ctx()
    return to_datetime(_binding_deadline(ctx))


def remaining() -> float:
    """Seconds until `deadline()` measured from `now()`; `math.inf` when unbounded.

    Deterministic: computed from recorded times, never the host clock.
    """
    ctx, state = _ctx()
    limit = _binding_deadline(ctx)
    if limit is None:
        return math.inf
    return max(0.0, limit - max(state.clock, ctx.delivered_at))


def now() -> Any:
    """Deterministic workflow time: advances with recorded op completions."""
    ctx, state = _ctx()
    return to_datetime(max(state.clock, ctx.delivered_at))


def random() -> float:
    """A deterministic random float in [0, 1)."""
    _, state = _ctx()
    return state.rng.random()


def uuid4() -> _uuid.UUID:
    """A deterministic UUID4."""
    _, state = _ctx()
    return new_uuid(state)


def info() -> WorkflowInfo:
    """Identity and deadlines of the running workflow."""
    ctx, _ = _ctx()
    run = ctx.run
    return WorkflowInfo(
        workflow_id=run.workflow_id, run_id=run.run_id, workflow_type=run.workflow_type,
        namespace=run.namespace, task_queue=run.task_queue, run_number=run.run_number,
        parent_workflow_id=run.parent_workflow_id, parent_run_id=run.parent_run_id,
        execution_deadline=to_datetime(run.execution_deadline_at),
        run_deadline=to_datetime(run.run_deadline_at),
    )


class _ReplaySafeLogger:
    """A structlog logger bound to the run; silent while the run replays."""

    def _emit(self, level: str, event: str, **kw: Any) -> None:
        ctx, state = _ctx()
        if state.replaying:
            return
        getattr(ctx.log, level)(event, **kw)

    def debug(self, event: str, **kw: Any) -> None:
        self._emit("debug", event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._emit("info", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._emit("warning", event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._emit("error", event, **kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._emit("exception", event, **kw)


logger = _ReplaySafeLogger()
