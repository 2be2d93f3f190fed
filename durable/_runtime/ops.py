"""Durable operations: remote activities, timers, child workflows, and what they share.

Every op follows the same steps. It takes the next op id of its task; if
history has a record for that id, the record's kind and name must match
(else `NonDeterminismDetected`) and a closed record's outcome is returned or
raised at once, without yielding. Otherwise the op goes live: it records its
"scheduled" write and awaits its completion. The await is *interruptible*:
when a cooperative cancellation is delivered, the op's `CancellationPolicy`
is applied under a shield bounded by the cleanup deadline, and the host's
cancellation exception continues. Replay interrupts the same awaits again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from .. import _validate
from .._registry import activity_defn_of, workflow_defn_of, workflow_name
from ..errors import NameNotRegistered, PolicyRejected, WorkflowAlreadyStarted
from ..failure import Failure
from ..options import ActivityOptions, CancellationPolicy, ChildOptions, Seconds
from ..store.records import OpKind, OpRecord, OpStatus, StartRequest
from ..store.writes import (
    CancelTimer,
    FireTimer,
    RequestActivityStop,
    RequestChildCancellation,
    ScheduleActivity,
    ScheduleChild,
    ScheduleTimer,
)
from . import caps
from .context import WorkflowContext
from .state import TaskState, current_task_state


def advance(ctx: WorkflowContext, state: TaskState, op: OpRecord) -> None:
    """Workflow time moves to a closed op's instant (never back)."""
    at = op.closed_at
    if at is not None:  # (comparisons: max() is a call, at every op)
        if at > state.clock:
            state.clock = at
        if at > ctx.latest:
            ctx.latest = at


def outcome(ctx: WorkflowContext, state: TaskState, op: OpRecord, hint: Any = None) -> Any:
    """Return or raise a closed op's recorded outcome (replay and live alike)."""
    advance(ctx, state, op)
    if op.status == OpStatus.COMPLETED:
        return ctx.converter.decode(op.result, hint)
    failure = op.failure or Failure(op.status)
    if op.kind == OpKind.CHILD:
        if failure.category == "child_start":
            raise WorkflowAlreadyStarted(op.child_workflow_id or "?", child=True)
        raise failure.to_child_error()
    raise failure.to_activity_error()


def go_live(state: TaskState) -> None:
    """From here on this task runs new code: its log lines are no longer replays."""
    state.replaying = False


async def live_gate(ctx: WorkflowContext) -> None:
    """Before an op goes live: re-deliver a recorded cancellation (replay), and
    never send an op whose task is already cancelled.

    An op started by code that is being cancelled (after a delivered
    cancellation, outside a shield; in a cancelled task group) is not
    scheduled at all: the host's cancellation exception is raised here, before
    anything is recorded, so its activity body never runs (Temporal's "cancel
    unsent"). Inside `cancellation_shield()` ops go ahead.
    """
    if ctx.parking.replay_delivery_pending:
        ctx.parking.redeliver()
        await anyio.lowlevel.checkpoint()
    check = ctx.checkpoint_if_cancelled
    if check is None:
        check = ctx.checkpoint_if_cancelled = host_checkpoint_if_cancelled()
    await check()
    if ctx.cancellation is not None:
        await ctx.worker.crash_point("cleanup")  # an op of the shielded cleanup


def host_checkpoint_if_cancelled() -> Callable[[], Awaitable[None]]:
    """What `anyio.lowlevel.checkpoint_if_cancelled` calls on the running loop,
    looked up once per run instead of at every op (`live_gate`).

    anyio's function finds the host's backend at every call, which took
    about half of its 1-2 µs (12-06): on trio this is trio's own check, which
    anyio's trio backend awaits; on asyncio anyio's backend method. Should
    anyio's layout differ, anyio's function.
    """
    try:
        from anyio._core._eventloop import get_async_backend

        backend = get_async_backend()
        if backend.__module__ == "anyio._backends._trio":
            import trio

            check: Callable[[], Awaitable[None]] = trio.lowlevel.checkpoint_if_cancelled
            return check
        check = backend.checkpoint_if_cancelled
        return check
    except Exception:  # pragma: no cover - another anyio layout: the public function
        return anyio.lowlevel.checkpoint_if_cancelled


@contextmanager
def tracked_shield(ctx: WorkflowContext) -> Iterator[anyio.CancelScope]:
    """A shield bounded by the cleanup deadline (cancelled when it expires)."""
    scope = ctx.shield()
    ctx.shields.add(scope)
    try:
        with scope:
            yield scope
    finally:
        ctx.shields.discard(scope)


async def interruptible(
    ctx: WorkflowContext,
    op_id: str,
    kind: str,
    wait: Callable[[], Awaitable[Any]],
    on_interrupt: Callable[[], Awaitable[None]],
) -> Any:
    """Await a durable op; when a cancellation interrupts the await, apply the
    op's cancellation policy under a shield bounded by the cleanup deadline,
    then let the host's cancellation exception continue."""
    block = ctx.parking.must_block(ctx.recorded.get(op_id), op_id)
    ctx.parking.park(op_id, kind)
    try:
        if block:
            await anyio.sleep_forever()
        result = await wait()
        if ctx.delivering:
            await anyio.sleep_forever()  # delivery is being recorded: this is the boundary
        if ctx.parking.must_hold(op_id):  # a signal or update is being delivered here
            await ctx.parking.hold(op_id, kind, parked=True)
        return result
    except anyio.get_cancelled_exc_class():
        if ctx.may_act_on_interrupt():
            with tracked_shield(ctx):
                await on_interrupt()
                if ctx.parking.must_hold(op_id):
                    await ctx.parking.hold(op_id, kind, parked=True)
        raise
    finally:
        ctx.parking.unpark(op_id)


async def leave(ctx: WorkflowContext, op_id: str, kind: str) -> None:
    """Before a replayed op returns its recorded outcome: stay while deliveries
    recorded at this op are made again (see durable/_runtime/inbox.py)."""
    if ctx.parking.must_hold(op_id):
        await ctx.parking.hold(op_id, kind, parked=False)


# ---------------------------------------------------------------- remote activities


async def execute_activity(ctx: WorkflowContext, state: TaskState,
                           activity: Callable[..., Any] | str, args: tuple[Any, ...],
                           options: ActivityOptions,
                           scheduled: anyio.Event | None = None, *, op_id: str | None = None,
                           unit: bool = False) -> Any:
    """A remote activity: any worker with it registered may run it.

    `scheduled` (an activity handle's) is set once the op's record exists.
    `op_id` names the op explicitly (an idempotent unit's stable key) instead
    of the task's next sequence number; `unit` marks an attempt whose failure
    to confirm its effect (its worker lost, a call past its start-to-close)
    is recorded as unknown instead of retried.
    """
    defn = activity_defn_of(activity)
    name = defn.name if defn is not None else str(activity)
    if options.cancellation is CancellationPolicy.ABANDON and (
        options.schedule_to_close_timeout is None
    ):
        raise PolicyRejected(
            "CancellationPolicy.ABANDON leaves the activity running on its own; it needs a "
            "finite schedule_to_close_timeout so that it cannot run forever"
        )
    op_id = op_id or state.next_op_id()
    record = ctx.recorded_op(op_id, OpKind.ACTIVITY, name)
    hint = defn.return_hint if defn is not None else None
    if record is not None and scheduled is not None:
        scheduled.set()
    if record is not None and record.closed and not ctx.parking.must_block(record, op_id):
        await leave(ctx, op_id, OpKind.ACTIVITY)
        return outcome(ctx, state, record, hint)
    if record is None:
        left = caps.time_left(ctx, state)
        own = _validate.optional_duration(options.schedule_to_close_timeout, "duration")
        if left is not None and (own is None or own > left):
            options = dataclasses.replace(options, schedule_to_close_timeout=left)
        await live_gate(ctx)
        go_live(state)
        if defn is None and name not in await ctx.worker.known_activity_names():
            raise NameNotRegistered(
                f"unknown activity {name!r}: no @activity.defn with this name is imported here "
                "and no live worker has registered it; check the name or start a worker that "
                "has it"
            )
        if defn is not None and defn.arity is not None:
            defn.arity.check(f"activity {name!r}", len(args))
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
            snapshot = options.snapshot()
            if unit:
                snapshot["unit"] = True
            await ctx.commit([ScheduleActivity(
                op_id=op_id, name=name, task_id=uuid.uuid4().hex,
                task_queue=options.task_queue or ctx.run.task_queue, input=payload,
                options=snapshot,
            )])
            if scheduled is not None:
                scheduled.set()
        done = await interruptible(ctx, op_id, OpKind.ACTIVITY, lambda: ctx.wait_op(op_id),
                                   on_interrupt)
    finally:
        ctx.release("activity")
    return outcome(ctx, state, done, hint)


# ---------------------------------------------------------------- timers


async def sleep(ctx: WorkflowContext, state: TaskState, duration: Seconds) -> None:
    """A durable timer: survives crashes and restarts; fires once."""
    seconds = _validate.duration(duration, "sleep duration")  # None too: no "forever" here
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, OpKind.TIMER, "sleep")
    if record is not None and record.closed and not ctx.parking.must_block(record, op_id):
        await leave(ctx, op_id, OpKind.TIMER)
        outcome(ctx, state, record)
        return
    ctx.reserve("timer")
    try:
        if record is None:
            left = caps.time_left(ctx, state)
            await live_gate(ctx)
            go_live(state)
            fire_at = ctx.clock.now() + seconds
            frame = caps.innermost(state)
            if left is not None and frame is not None and frame.deadline is not None:
                fire_at = min(fire_at, frame.deadline)  # never past the phase's deadline
            await ctx.commit([ScheduleTimer(op_id=op_id, fire_at=fire_at, duration=seconds)])
        else:
            assert record.fire_at is not None
            fire_at = record.fire_at

        async def on_interrupt() -> None:
            known = ctx.recorded.get(op_id)
            if known is None or not known.interrupted:
                await ctx.commit([CancelTimer(op_id)])

        async def wait() -> None:
            await ctx.clock.sleep_until(fire_at)
            # signals received before the timer fell due come first (a worker
            # resuming the run late finds both due at once)
            await ctx.host.deliver_received_by(fire_at)

        await interruptible(ctx, op_id, OpKind.TIMER, wait, on_interrupt)
    finally:
        ctx.release("timer")
    await ctx.commit([FireTimer(op_id=op_id)])
    state.clock = max(state.clock, fire_at)
    caps.raise_if_capped(ctx, state, fire_at)


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
        self._cleanup = _validate.optional_duration(options.cleanup_timeout, "duration")

    async def result(self) -> Any:
        """The child's result; raises `ChildWorkflowFailed` (caused by the child's
        own terminal error) when it did not complete."""
        ctx, op_id, options = self._ctx, self.op_id, self._options
        record = ctx.recorded.get(op_id)
        if record is not None and record.closed and not ctx.parking.must_block(record, op_id):
            await leave(ctx, op_id, OpKind.CHILD)
            return outcome(ctx, self._state, record, self._hint)
        policy = options.cancellation

        async def on_interrupt() -> None:
            known = ctx.recorded.get(op_id)
            if known is None or not known.interrupted:
                await ctx.commit([RequestChildCancellation(op_id, policy.value, self._cleanup)])
            if policy is CancellationPolicy.WAIT_CANCELLATION_COMPLETED:
                await ctx.wait_op(op_id)

        record = await interruptible(ctx, op_id, OpKind.CHILD, lambda: ctx.wait_op(op_id),
                                     on_interrupt)
        return outcome(ctx, self._state, record, self._hint)

    def request_cancellation(self, reason: str | None = None) -> Acknowledgement:
        """Cancel this one child, applying its `ChildOptions.cancellation` policy.

        TRY_CANCEL and ABANDON end the await at once (`ChildWorkflowFailed`
        caused by `WorkflowCancelled`); WAIT_CANCELLATION_COMPLETED sends the
        child a cooperative request and the await ends when the child has
        closed. Returns at once; ``await`` the returned value to wait until
        the request is recorded.
        """
        ctx, op_id, options = self._ctx, self.op_id, self._options
        require_writable("ChildHandle.request_cancellation")

        async def send() -> None:
            record = ctx.recorded.get(op_id)
            if record is not None and record.closed:
                return
            await ctx.commit([RequestChildCancellation(
                op_id, options.cancellation.value, self._cleanup, scope="operation",
                reason=reason or "cancelled by its parent")])

        return engine_call(ctx, send)


class Acknowledgement:
    """Something the engine does on the workflow's behalf, in the background;
    ``await`` it to wait until it is done (its error, if any, is raised there)."""

    def __init__(self) -> None:
        self._done = anyio.Event()
        self._error: BaseException | None = None

    def _finish(self, error: BaseException | None) -> None:
        self._error = error
        self._done.set()

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        if not self._done.is_set():
            state = current_task_state()
            state.ctx.parking.block()
            try:
                await self._done.wait()
            finally:
                state.ctx.parking.unblock()
        if self._error is not None:
            raise self._error


def engine_call(ctx: WorkflowContext, work: Callable[[], Awaitable[None]]) -> Acknowledgement:
    """Run `work` in the run's engine task group; the acknowledgement reports it."""
    ack = Acknowledgement()

    async def run() -> None:
        try:
            await work()
        except Exception as exc:
            ack._finish(exc)
            if ctx.broken is not None:  # storage refused it
                ctx.host.stop("storage refused or failed a commit")
            return
        ack._finish(None)

    ctx.host.spawn_engine(run)
    return ack


def require_writable(what: str) -> TaskState:
    """The calling task's state; a call that records something is refused
    from read-only code (a query, a validator)."""
    state = current_task_state()
    if getattr(state.runtime, "read_only", False):
        state.runtime.refuse(what)
    return state


def default_child_id(parent_id: str, op_id: str) -> str:
    """A child's workflow id when the code gives none: ``{parent}/{op}``, an
    id like any other of at most 255 characters. A parent id near the limit
    keeps its start and gains a digest of the whole (``{start}~{12 hex}/{op}``),
    the same on every replay. Unshortened, a parent of 255 characters made a
    259-character child: MariaDB's keys refused it (the parent failed) and
    SQLite stored a run no call could name (the MariaDB audit)."""
    full = f"{parent_id}/{op_id}"
    if len(full) <= _validate.MAX_NAME_LENGTH:
        return full
    digest = hashlib.sha256(parent_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    keep = _validate.MAX_NAME_LENGTH - len(op_id) - len(digest) - 2
    return f"{parent_id[:keep]}~{digest}/{op_id}"


async def start_child(ctx: WorkflowContext, state: TaskState,
                      workflow: Callable[..., Any] | str, args: tuple[Any, ...],
                      child_id: str | None, options: ChildOptions) -> ChildHandle:
    """Start a child workflow and return its handle once the start is recorded."""
    wf_type = workflow_name(workflow)
    defn = workflow_defn_of(workflow)
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, OpKind.CHILD, wf_type)
    given, child_id = child_id, child_id or default_child_id(ctx.run.workflow_id, op_id)
    hint = defn.return_hint if defn is not None else None
    if record is not None:
        _refuse_taken_id(record)
        if not record.closed:
            ctx.reserve("child")
            ctx.open_children.add(op_id)
        return ChildHandle(ctx, state, op_id, record.child_workflow_id or child_id, hint,
                           options)
    left = caps.time_left(ctx, state)
    if left is not None:
        if left < 1:  # a child's execution timeout is at least 1 s
            caps.raise_if_capped(ctx, state, caps.workflow_time(ctx, state) + left)
        own_timeout = _validate.optional_duration(options.execution_timeout, "duration")
        if own_timeout is None or own_timeout > left:
            options = dataclasses.replace(options, execution_timeout=left)
    await live_gate(ctx)
    go_live(state)
    if defn is not None and defn.arity is not None:
        defn.arity.check(f"child workflow {wf_type!r}", len(args))
    if given is not None:  # a NUL, 300 characters: refused here, not by storage
        _validate.name(given, "child workflow id")
    ctx.reserve("child")
    ctx.open_children.add(op_id)
    payload = ctx.encode(list(args), f"the arguments of child workflow {wf_type!r}")
    request = StartRequest(
        namespace=ctx.run.namespace, workflow_id=child_id, workflow_type=wf_type,
        task_queue=options.task_queue or ctx.run.task_queue, input=payload,
        id_reuse="reject_duplicate",
        execution_timeout=_validate.optional_duration(options.execution_timeout, "duration"),
        run_timeout=_validate.optional_duration(options.run_timeout, "duration"),
        parent_run_id=ctx.run.run_id, parent_workflow_id=ctx.run.workflow_id,
        parent_op_id=op_id, parent_close_policy=options.parent_close_policy.value,
        cleanup_timeout=_validate.optional_duration(options.cleanup_timeout, "duration"),
        priority=ctx.run.priority if options.priority is None else options.priority,
        concurrency_key=options.concurrency_key,
    )
    ctx.waiter(op_id)
    await ctx.commit([ScheduleChild(op_id=op_id, request=request, options={
        "cancellation": options.cancellation.value,
        "parent_close_policy": options.parent_close_policy.value,
        "execution_timeout_seconds": request.execution_timeout,
        "run_timeout_seconds": request.run_timeout,
    })])
    recorded = ctx.recorded.get(op_id)
    if recorded is not None:
        _refuse_taken_id(recorded)
    return ChildHandle(ctx, state, op_id, child_id, hint, options)


def _refuse_taken_id(record: OpRecord) -> None:
    """A child whose id was taken is refused at the start_child call itself."""
    if record.failure is not None and record.failure.category == "child_start":
        raise WorkflowAlreadyStarted(record.child_workflow_id or "?", child=True)
