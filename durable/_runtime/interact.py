"""The workflow side of interaction: condition waits, patches, handles, other workflows.

- `wait_condition` waits until a predicate over the workflow's state holds,
  re-evaluated whenever workflow code stops running (a task waits on an op or
  finishes, a handler returns). It is an op of its own (``condition``), so a
  delivery can name it in its frontier; its optional timeout is a durable
  timer whose outcome (satisfied or timed out) is recorded.
- `patched` / `deprecate_patch` record a *marker* op where new code branches,
  so runs recorded by the old code replay the old branch.
- `start_activity` runs an activity in a task of its own (a child path of the
  caller's) and returns a handle: awaiting it gives the result, and
  `request_cancellation()` applies the op's cancellation policy to that op alone.
- External workflow handles signal or ask to cancel another workflow; each
  call is an op of this run (sent once, its outcome recorded).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any

import anyio

from .. import _validate
from .._registry import activity_defn_of
from ..cancellation import CancellationContext, CancellationRequestResult
from ..errors import ActivityCancelled, ConfigurationError, PolicyRejected
from ..failure import Failure
from ..options import ActivityOptions, CancellationPolicy, Seconds
from ..store.records import OpKind, OpRecord, OpStatus
from ..store.writes import (
    CancelExternal,
    RecordMarker,
    RequestActivityStop,
    ResolveCondition,
    ScheduleCondition,
    SignalExternal,
)
from .context import Condition, WorkflowContext
from .handlers import make_handler
from .ops import (
    Acknowledgement,
    engine_call,
    execute_activity,
    go_live,
    interruptible,
    leave,
    live_gate,
    require_writable,
)
from .state import TaskState, current_task_state

# ---------------------------------------------------------------- handlers


def register_handler(ctx: WorkflowContext, kind: str, name: str, fn: Callable[..., Any],
                     validator: Callable[..., Any] | None) -> None:
    """Register (or replace) a handler; signals kept for its name reach it now."""
    handler = make_handler(kind, name, fn, validator)
    kept = ctx.handlers.add(handler)
    if kept:
        ctx.host.deliver_buffered(handler, kept)


# ---------------------------------------------------------------- condition waits


def _not_a_predicate(predicate: Any) -> ConfigurationError:
    return ConfigurationError(
        f"wait_condition needs a plain function that says whether to go on, such as "
        f"`lambda: self.approved`, got {predicate!r}: it is called, never awaited, each time "
        "the workflow's state may have changed (an async one would always be true)")


async def wait_condition(ctx: WorkflowContext, state: TaskState, predicate: Callable[[], Any],
                         timeout: Seconds | None) -> bool:  # noqa: ASYNC109
    """Wait until `predicate()` is true (True) or the timeout passes (False)."""
    seconds = _validate.optional_duration(timeout, "wait_condition timeout")
    if not callable(predicate) or inspect.iscoroutinefunction(predicate):
        raise _not_a_predicate(predicate)
    now = predicate()
    if inspect.isawaitable(now):  # a lambda that calls an async function
        getattr(now, "close", lambda: None)()
        raise _not_a_predicate(predicate)
    if now:
        return True
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, OpKind.CONDITION, "wait_condition")
    if record is not None and record.closed and not ctx.parking.must_block(record, op_id):
        return await _replay_condition(ctx, state, op_id, record, predicate)
    if record is None:
        await live_gate(ctx)
        go_live(state)
        fire_at = None if seconds is None else ctx.clock.now() + seconds
        await ctx.commit([ScheduleCondition(op_id, fire_at, seconds)])
    else:
        fire_at = record.fire_at
    cond = Condition(predicate)
    ctx.conditions[op_id] = cond

    async def wait() -> bool:
        if fire_at is None:
            await cond.event.wait()
            return True
        fired = False
        async with anyio.create_task_group() as race:

            async def timer() -> None:
                nonlocal fired
                await ctx.clock.sleep_until(fire_at)
                # signals received before the timeout fell due come first, as for
                # a timer (a worker resuming the run late finds both due at once)
                await ctx.host.deliver_received_by(fire_at)
                fired = True
                race.cancel_scope.cancel()

            race.start_soon(timer)
            await cond.event.wait()
            race.cancel_scope.cancel()
        return not fired

    async def on_interrupt() -> None:
        known = ctx.recorded.get(op_id)
        if known is None or not known.interrupted:
            await ctx.commit([ResolveCondition(op_id, None)])

    try:
        satisfied: bool = await interruptible(ctx, op_id, OpKind.CONDITION, wait, on_interrupt)
    finally:
        ctx.conditions.pop(op_id, None)
    if cond.error is not None:
        raise cond.error
    if not satisfied:  # timed out: a delivery made at this very point may satisfy it still
        satisfied = bool(predicate())
    await ctx.commit([ResolveCondition(op_id, satisfied)])
    closed = ctx.recorded.get(op_id)
    _advance(ctx, state, closed.closed_at if closed is not None else None)
    return satisfied


async def _replay_condition(ctx: WorkflowContext, state: TaskState, op_id: str,
                            record: OpRecord, predicate: Callable[[], Any]) -> bool:
    """A recorded condition wait. Satisfied: wait until the state that satisfied
    it is rebuilt (by the deliveries and ops replayed meanwhile). Timed out:
    return False once the deliveries recorded at this op are made again."""
    satisfied = record.result == "true"
    if satisfied and not predicate():
        cond = Condition(predicate)
        ctx.conditions[op_id] = cond

        async def nothing() -> None:
            return None

        try:
            await interruptible(ctx, op_id, OpKind.CONDITION, cond.event.wait, nothing)
        finally:
            ctx.conditions.pop(op_id, None)
        if cond.error is not None:
            raise cond.error
    else:
        await leave(ctx, op_id, OpKind.CONDITION)
    _advance(ctx, state, record.closed_at)
    return satisfied


def _advance(ctx: WorkflowContext, state: TaskState, closed_at: float | None) -> None:
    if closed_at is not None:
        state.clock = max(state.clock, closed_at)
        ctx.latest = max(ctx.latest, closed_at)


# ---------------------------------------------------------------- versioning


def patched(ctx: WorkflowContext, state: TaskState, patch_id: str) -> bool:
    """True where this run takes the new code (see the module docstring)."""
    if not isinstance(patch_id, str) or not patch_id:
        raise TypeError(f"a patch id must be a non-empty string, got {patch_id!r}")
    known = ctx.patches.get(patch_id)
    if known is not None:
        return known
    name = f"patch:{patch_id}"
    op_id = f"{state.path}:{state.seq + 1}"
    record = ctx.recorded.get(op_id)
    if record is not None:  # history has an op here: a marker of this patch, or old code's op
        taken = record.kind == OpKind.MARKER and record.name == name
        if taken:
            state.next_op_id()
            ctx.asked.add(op_id)
    elif ctx.scratch and not ctx.run.is_open:
        taken = False  # a closed run's history ended before this point: old code
    else:  # new code reaches this point for the first time: record the branch taken
        state.next_op_id()
        ctx.asked.add(op_id)
        taken = True
        ctx.deferred.append(RecordMarker(op_id, name, {"patch_id": patch_id}))
        ctx.recorded[op_id] = OpRecord(op_id, OpKind.MARKER, name, OpStatus.COMPLETED,
                                       closed_at=state.clock)
    ctx.patches[patch_id] = taken
    return taken


def deprecate_patch(ctx: WorkflowContext, state: TaskState, patch_id: str) -> None:
    """The old branch is gone: skip the patch's marker where history has one."""
    name = f"patch:{patch_id}"
    op_id = f"{state.path}:{state.seq + 1}"
    record = ctx.recorded.get(op_id)
    if record is not None and record.kind == OpKind.MARKER and record.name == name:
        state.next_op_id()
        ctx.asked.add(op_id)
    ctx.patches[patch_id] = True


# ---------------------------------------------------------------- activity handles


class ActivityHandle:
    """An activity started with `workflow.start_activity`.

    ``await handle`` (or ``await handle.result()``) gives its result or raises
    its failure; `request_cancellation()` cancels this one activity under its
    `ActivityOptions.cancellation` policy, after which awaiting it raises
    `ActivityCancelled` (unless it completed first).
    """

    def __init__(self, ctx: WorkflowContext, op_id: str, activity_type: str,
                 options: ActivityOptions) -> None:
        self._ctx = ctx
        self.op_id = op_id
        self.activity_type = activity_type
        self._options = options
        self._done = anyio.Event()
        self._scheduled = anyio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"ActivityHandle(op_id={self.op_id!r}, activity_type={self.activity_type!r})"

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    def done(self) -> bool:
        """Whether the activity's outcome is known (awaiting returns at once)."""
        return self._done.is_set()

    async def result(self) -> Any:
        if not self._done.is_set():
            ctx = current_task_state().ctx
            ctx.parking.block()
            try:
                await self._done.wait()
            finally:
                ctx.parking.unblock()
        if self._error is not None:
            raise self._error
        return self._value

    def request_cancellation(self) -> Acknowledgement:
        """Cancel this activity alone, under its cancellation policy.

        TRY_CANCEL: a running attempt is asked to stop and the await ends at
        once; WAIT_CANCELLATION_COMPLETED: the await ends when the attempt has
        stopped (or returned anyway); ABANDON: the await ends at once and the
        attempt is left to finish within its schedule-to-close timeout.
        Returns at once; ``await`` the result to wait until it is recorded.
        """
        require_writable("ActivityHandle.request_cancellation")
        ctx, op_id, policy = self._ctx, self.op_id, self._options.cancellation

        async def send() -> None:
            await self._scheduled.wait()
            record = ctx.recorded.get(op_id)
            if self._done.is_set() or (record is not None and record.closed):
                return
            await ctx.commit([RequestActivityStop(op_id, policy.value, scope="operation")])

        return engine_call(ctx, send)


def start_activity(ctx: WorkflowContext, state: TaskState, activity: Callable[..., Any] | str,
                   args: tuple[Any, ...], options: ActivityOptions) -> ActivityHandle:
    """Start a remote activity in a task of its own; its handle."""
    if options.cancellation is CancellationPolicy.ABANDON and (
        options.schedule_to_close_timeout is None
    ):
        raise PolicyRejected(
            "CancellationPolicy.ABANDON leaves the activity running on its own; it needs a "
            "finite schedule_to_close_timeout so that it cannot run forever"
        )
    defn = activity_defn_of(activity)
    name = defn.name if defn is not None else str(activity)
    path = state.child_path()
    handle = ActivityHandle(ctx, f"{path}:1", name, options)
    phases = list(state.phases)  # started inside a phase, the activity is bounded by it

    async def body() -> None:
        task = current_task_state()
        task.phases = phases
        try:
            handle._value = await execute_activity(ctx, task, activity, args,
                                                   options, scheduled=handle._scheduled)
        except anyio.get_cancelled_exc_class():
            handle._error = ActivityCancelled(
                f"activity {name} was interrupted by the workflow's cancellation",
                Failure.activity_cancelled("interrupted").to_dict())
            raise
        except Exception as exc:
            handle._error = exc
            if ctx.fatal is exc:  # non-determinism, a structural limit: the run fails
                raise
        finally:
            handle._scheduled.set()
            handle._done.set()

    ctx.host.spawn_task(path, state.clock, None, body)
    return handle


# ---------------------------------------------------------------- other workflows


async def _external(ctx: WorkflowContext, state: TaskState, name: str,
                    write: Callable[[str], Any]) -> OpRecord:
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, OpKind.EXTERNAL, name)
    if record is None:
        await live_gate(ctx)
        go_live(state)
        await ctx.commit([write(op_id)])
        record = ctx.recorded[op_id]
    _advance(ctx, state, record.closed_at)
    if record.failure is not None:
        raise record.failure.to_error()
    return record


class ExternalWorkflowHandle:
    """Another workflow, seen from workflow code (`workflow.get_external_handle`)."""

    def __init__(self, workflow_id: str, run_id: str | None = None) -> None:
        self.workflow_id = _validate.name(workflow_id, "workflow id")
        self.run_id = _validate.optional_name(run_id, "run_id")

    def __repr__(self) -> str:
        return f"ExternalWorkflowHandle({self.workflow_id!r}, run_id={self.run_id!r})"

    async def signal(self, name: str, *args: Any) -> None:
        """Send it a signal (recorded once: replay does not send it again).

        Raises `WorkflowNotFound`, or `RunAlreadyClosed` when it is closed.
        """
        state = require_writable("ExternalWorkflowHandle.signal")
        ctx = state.ctx
        payload = ctx.encode(list(args), f"the arguments of signal {name!r}")
        await _external(ctx, state, f"signal:{name}", lambda op_id: SignalExternal(
            op_id, self.workflow_id, self.run_id, name, payload))

    async def request_cancellation(self, reason: str = "cancellation requested", *,
                                   cleanup_timeout: Seconds = 30) -> CancellationRequestResult:
        """Ask it to cancel cooperatively (recorded once). As the client's
        `request_cancellation`: the first request is accepted, a repeat returns
        the original. Raises `WorkflowNotFound`, `RunAlreadyClosed`,
        `CapabilityUnsupported`."""
        state = require_writable("ExternalWorkflowHandle.request_cancellation")
        seconds = _validate.optional_duration(cleanup_timeout, "cleanup_timeout")
        if seconds is None or seconds <= 0:
            raise ConfigurationError("cleanup_timeout must be greater than 0 seconds")
        record = await _external(state.ctx, state, "request_cancellation",
                                 lambda op_id: CancelExternal(op_id, self.workflow_id,
                                                              self.run_id, reason, seconds))
        data = state.ctx.converter.decode(record.result) or {}
        return CancellationRequestResult(bool(data.get("accepted")),
                                         CancellationContext.from_record(data["request"]))

