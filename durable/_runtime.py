"""Replay by memoization: how one workflow run executes inside a worker.

A run is an ordinary anyio task running the user's coroutine. Every durable
operation ("op") has an identity made of its task path and its sequence within
that task. When a run is (re)claimed, its recorded ops are loaded once; an op
whose outcome is recorded returns it at once, without yielding to the event
loop, and the first op with no record continues live. The recorded kind and
name are checked on every replayed op: a mismatch is a `NonDeterminismError`,
the run is marked for review and never continues silently.
"""

from __future__ import annotations

import contextvars
import math
import random
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ._log import get_logger
from .cancellation import CancellationContext
from .clock import Clock
from .converter import PayloadConverter, check_size
from .driver import (
    CloseRun,
    CommitResult,
    DeliverCancellation,
    OpRecord,
    RunRecord,
    RunWrites,
    Write,
)
from .errors import (
    ContinueAsNew,
    LostAuthority,
    NonDeterminismError,
    StructuralLimitExceeded,
    WorkflowAPIOutsideWorkflow,
)
from .options import Limits

if TYPE_CHECKING:
    from ._registry import WorkflowDefn




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

    def next_op_id(self) -> str:
        self.seq += 1
        return f"{self.path}:{self.seq}"

    def child_path(self) -> str:
        self.children += 1
        return f"{self.path}.{self.children}"


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
    state = TaskState(path=path, task=anyio.get_current_task().id, ctx=ctx, clock=clock)
    state.rng.seed(f"{ctx.run.run_id}/{path}")
    _task_state.set(state)
    return state


class _Waiter:
    __slots__ = ("event", "record")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.record: OpRecord | None = None


class Committer:
    """Group commit: writes submitted while a commit is in flight go together.

    One transaction carries the writes of many runs (each fenced by its own
    epoch), so under load a step costs a fraction of a round trip.
    """

    def __init__(self, commit: Callable[[list[RunWrites], float], Awaitable[list[CommitResult]]],
                 clock: Clock) -> None:
        self._commit = commit
        self._clock = clock
        self._queue: list[tuple[RunWrites, list[Any]]] = []
        self._busy = False
        self._idle = anyio.Event()

    async def submit(self, run_id: str, epoch: int, writes: list[Write],
                     quiet: bool = False) -> CommitResult:
        slot: list[Any] = []
        self._queue.append((RunWrites(run_id, epoch, list(writes), quiet), slot))
        while not slot:
            if self._busy:
                await self._idle.wait()
                continue
            self._busy = True
            batch, self._queue = self._queue, []
            try:
                merged: dict[tuple[str, int], RunWrites] = {}
                for entry, _ in batch:
                    target = merged.get((entry.run_id, entry.epoch))
                    if target is None:
                        merged[(entry.run_id, entry.epoch)] = RunWrites(
                            entry.run_id, entry.epoch, list(entry.writes), entry.quiet)
                    else:
                        target.writes.extend(entry.writes)
                        target.quiet = target.quiet and entry.quiet
                keys = list(merged)
                with anyio.CancelScope(shield=True):
                    results = await self._commit([merged[k] for k in keys], self._clock.now())
                by_key = dict(zip(keys, results, strict=True))
                for entry, out in batch:
                    out.append(by_key[(entry.run_id, entry.epoch)])
            except BaseException as exc:
                for _, out in batch:
                    if not out:
                        out.append(exc)
                raise
            finally:
                self._busy = False
                idle, self._idle = self._idle, anyio.Event()
                idle.set()
        outcome = slot[0]
        if isinstance(outcome, BaseException):
            raise outcome
        result: CommitResult = outcome
        return result


class WorkflowContext:
    """Everything a running workflow's code reaches through `durable.workflow`."""

    def __init__(
        self,
        *,
        run: RunRecord,
        ops: dict[str, OpRecord],
        defn: WorkflowDefn,
        worker: Any,
        clock: Clock,
        converter: PayloadConverter,
        limits: Limits,
        committer: Committer,
    ) -> None:
        self.run = run
        self.recorded = ops
        self.defn = defn
        self.worker = worker
        self.clock = clock
        self.converter = converter
        self.limits = limits
        self.committer = committer
        self.waiters: dict[str, _Waiter] = {}
        self.pending_counts: dict[str, int] = {"activity": 0, "child": 0, "timer": 0}
        self.open_children: set[str] = set()
        self.fatal: BaseException | None = None
        self.broken: Exception | None = None
        # cancellation: see RunExecutor.deliver and workflow._interruptible
        self.cancellation: CancellationContext | None = None
        self.delivered_at = 0.0  # workflow time never runs behind the recorded delivery
        self.delivering = False
        self.hard_stop = False
        self.active = 0
        self.parked: dict[str, str] = {}
        self.quiet = anyio.Event()
        self.replay_boundary: set[str] = set()
        self.replay_delivery_pending = False
        self.shields: set[anyio.CancelScope] = set()
        self.running_local: dict[str, Any] = {}
        self.executor: RunExecutor | None = None
        delivered = (run.cancellation or {}).get("boundary")
        if delivered is not None and (run.cancellation or {}).get("delivered_at") is not None:
            self.replay_boundary = {b["op_id"] for b in delivered}
            self.replay_delivery_pending = True
            self.cancellation = CancellationContext.from_record(run.cancellation or {})
            self.delivered_at = float((run.cancellation or {})["delivered_at"])
        self.log = get_logger("durable.workflow").bind(
            workflow_id=run.workflow_id, run_id=run.run_id, workflow_type=run.workflow_type
        )

    # -- ops -------------------------------------------------------------

    def recorded_op(self, op_id: str, kind: str, name: str) -> OpRecord | None:
        """The record of this op if it exists; check it is the same op."""
        record = self.recorded.get(op_id)
        if record is None:
            return None
        if record.kind != kind or record.name != name:
            self.fatal = NonDeterminismError(
                f"workflow {self.run.workflow_type} (run {self.run.run_id}) asked for "
                f"{kind} {name!r} at {op_id}, but history recorded {record.kind} "
                f"{record.name!r} there: the code changed in a way that does not replay. "
                "The run is marked for review; deploy the old code or terminate the run"
            )
            raise self.fatal  # fatal even if the workflow code catches it
        return record

    def reserve(self, kind: str) -> None:
        """Count one more pending op of `kind`; over the structural limit, fail the run."""
        limit = {
            "activity": self.limits.pending_activities,
            "child": self.limits.pending_children,
            "timer": self.limits.pending_timers,
        }[kind]
        value = self.pending_counts[kind] + 1
        if value > limit:
            exc = StructuralLimitExceeded(
                f"pending_{'children' if kind == 'child' else kind + 's'}", value, limit
            )
            self.fatal = exc
            raise exc
        self.pending_counts[kind] = value

    def release(self, kind: str) -> None:
        self.pending_counts[kind] -= 1

    def encode(self, value: Any, what: str) -> str:
        text = self.converter.encode(value, what)
        try:
            check_size(text, self.limits.payload_bytes, what)
        except StructuralLimitExceeded as exc:
            self.fatal = exc
            raise
        return text

    async def commit(self, writes: list[Write]) -> CommitResult:
        if self.broken is not None:
            raise self.broken
        try:
            result = await self.committer.submit(
                self.run.run_id, self.run.epoch, writes, quiet=self.cancellation is None
            )
        except Exception as exc:
            # Whatever the workflow code does with this error, the run must not
            # go on from an unknown state: it is replayed from storage instead.
            self.broken = exc
            raise
        if not result.committed:
            self.broken = LostAuthority(f"run {self.run.run_id} is no longer owned here")
            raise self.broken
        for op in result.ops.values():
            self.resolve(op)
        return result

    def waiter(self, op_id: str) -> _Waiter:
        waiter = self.waiters.get(op_id)
        if waiter is None:
            waiter = self.waiters[op_id] = _Waiter()
        return waiter

    def resolve(self, op: OpRecord) -> None:
        """Deliver an op's closed record to whoever awaits it."""
        if not op.closed:
            return
        self.recorded[op.op_id] = op
        if op.op_id in self.open_children:
            self.open_children.discard(op.op_id)
            self.release("child")
        waiter = self.waiters.get(op.op_id)
        if waiter is not None and waiter.record is None:
            waiter.record = op
            waiter.event.set()

    async def wait_op(self, op_id: str) -> OpRecord:
        waiter = self.waiter(op_id)
        record = self.recorded.get(op_id)
        if record is not None and record.closed:
            self.resolve(record)
        await waiter.event.wait()
        self.waiters.pop(op_id, None)
        assert waiter.record is not None
        return waiter.record

    def open_waiters(self) -> list[str]:
        return [op_id for op_id, w in self.waiters.items() if w.record is None]

    # -- cancellation bookkeeping ---------------------------------------------

    def task_started(self) -> None:
        self.active += 1

    def task_finished(self) -> None:
        self.active -= 1
        self._check_quiet()

    def park(self, op_id: str, kind: str) -> None:
        """The calling task now waits on a durable op (a possible delivery boundary)."""
        self.parked[op_id] = kind
        self.active -= 1
        self._check_quiet()
        if self.replay_delivery_pending and self.replay_boundary <= set(self.parked):
            self.redeliver()

    def unpark(self, op_id: str) -> None:
        self.parked.pop(op_id, None)
        self.active += 1

    def _check_quiet(self) -> None:
        if self.active <= 0:
            self.quiet.set()
        elif self.quiet.is_set():
            self.quiet = anyio.Event()

    def must_block(self, record: OpRecord | None, op_id: str) -> bool:
        """Replay interrupts an op again where the live run interrupted it."""
        if record is not None and record.interrupted:
            return True
        return self.replay_delivery_pending and op_id in self.replay_boundary

    def before_live_op(self) -> None:
        """Replay reached new code before the recorded boundary: deliver now."""
        if self.replay_delivery_pending:
            self.redeliver()

    def redeliver(self) -> None:
        self.replay_delivery_pending = False
        if self.executor is not None:
            self.executor.interrupt_code()

    def may_act_on_interrupt(self) -> bool:
        """Whether an interrupted op should apply its cancellation policy.

        Not when the worker itself stops the run (shutdown, lost lease, a
        deadline that revoked authority): then nothing may be recorded.
        """
        return not self.hard_stop and self.broken is None

    def shield(self) -> anyio.CancelScope:
        """A shielded scope bounded by the cleanup deadline (tracked for expiry)."""
        # The cleanup deadline is enforced by the executor's deadline watcher on
        # the engine clock, which first revokes authority and then cancels the
        # shields: an interrupted op then records nothing.
        scope = anyio.CancelScope(shield=True)
        if self.hard_stop:
            scope.cancel()
        return scope


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(leaf_exceptions(inner))
        return leaves
    return [exc]


def failure_from_exception(exc: BaseException, category: str = "application") -> dict[str, Any]:
    """The recorded form of an exception raised by workflow or activity code."""
    leaves = leaf_exceptions(exc)
    if len(leaves) == 1:
        exc = leaves[0]
    cls = type(exc)
    tb = "".join(traceback.format_exception(exc))[-8000:]
    failure: dict[str, Any] = {
        "failure_category": category,
        "exception_class": f"{cls.__module__}.{cls.__qualname__}",
        "cause_type": cls.__name__,
        "message": str(exc) or cls.__name__,
        "cause_message": str(exc),
        "traceback": tb,
    }
    if isinstance(exc, StructuralLimitExceeded):
        failure.update(
            failure_category="structural_limit", kind=exc.kind, value=exc.value, limit=exc.limit
        )
    if getattr(exc, "non_retryable", False):
        failure["non_retryable"] = True
    inner = getattr(exc, "failure", None)
    if isinstance(inner, dict) and inner:
        failure["cause"] = inner
    return failure


class RunExecutor:
    """Owns one claimed run: replays it, continues it live, closes it.

    It also delivers a cooperative cancellation: once every workflow task waits
    on a durable op, it records that set of ops (the delivery boundary) and
    cancels the code's scope, so the workflow sees the host's native
    cancellation exception at those awaits. Replay re-delivers at the same
    boundary.
    """

    def __init__(self, ctx: WorkflowContext, on_done: Callable[[RunExecutor], None]) -> None:
        self.ctx = ctx
        self.run = ctx.run
        ctx.executor = self
        self.scope: anyio.CancelScope | None = None
        self.code_scope: anyio.CancelScope | None = None
        self.stop_reason: str | None = None
        self.needs_release = False
        self._on_done = on_done
        self._guard: anyio.abc.TaskGroup | None = None
        self._interrupt_pending = False
        self._delivery_started = False

    def stop(self, reason: str) -> None:
        """Stop executing this run locally (lost lease, shutdown, closed elsewhere)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._hard_stop()
        if self.scope is not None:
            self.scope.cancel()

    def _hard_stop(self) -> None:
        self.ctx.hard_stop = True
        for shield in list(self.ctx.shields):
            shield.cancel()
        for actx in list(self.ctx.running_local.values()):
            actx.request_stop("the run stopped on this worker")
        self.interrupt_code()

    def interrupt_code(self) -> None:
        if self.code_scope is None:
            self._interrupt_pending = True
        else:
            self.code_scope.cancel()

    def on_request(self, record: dict[str, Any]) -> None:
        """A cancellation request was recorded for this run: deliver it."""
        ctx = self.ctx
        if ctx.cancellation is not None or self._delivery_started or self._guard is None:
            return
        if record.get("delivered_at") is not None:
            return
        self._delivery_started = True
        self.run.cleanup_deadline_at = float(record["deadline_at"])
        self._guard.start_soon(self._deliver, record)
        self._guard.start_soon(self._watch_deadline, float(record["deadline_at"]))

    async def _deliver(self, record: dict[str, Any]) -> None:
        ctx = self.ctx
        # Deliver where every task waits on a durable op, so replay finds the same
        # boundary; a task stuck in a non-durable await is not waited for long.
        with anyio.move_on_after(0.25):
            while ctx.active > 0 or self.code_scope is None:
                with anyio.move_on_after(0.01):
                    await ctx.quiet.wait()
        boundary = [{"op_id": op_id, "kind": kind} for op_id, kind in sorted(ctx.parked.items())]
        ctx.delivering = True
        delivered_at = ctx.clock.now()
        try:
            await ctx.commit([DeliverCancellation(record["request_id"], boundary, delivered_at)])
        except Exception:
            self.stop("delivery could not be recorded")
            return
        ctx.cancellation = CancellationContext.from_record(record)
        ctx.delivered_at = delivered_at
        ctx.log.info("cancellation_delivered", request_id=record["request_id"],
                     boundary=[b["op_id"] for b in boundary])
        for actx in list(ctx.running_local.values()):
            actx.request_stop("the workflow is being cancelled")
        ctx.delivering = False
        self.interrupt_code()

    async def execute(self) -> None:
        try:
            with anyio.CancelScope() as scope:
                self.scope = scope
                if self.stop_reason is not None:
                    scope.cancel()
                await self._execute()
        except BaseExceptionGroup as group:
            # Task groups bundle a run's cancellation with the error that ended
            # it; handle the error here and let only a cancellation go on.
            cancelled, rest = group.split(anyio.get_cancelled_exc_class())
            if rest is not None:
                self._dropped(rest)
            if cancelled is not None:
                raise leaf_exceptions(cancelled)[0] from None
        except Exception as exc:
            self._dropped(exc)
        finally:
            self._on_done(self)

    def _dropped(self, exc: BaseException) -> None:
        leaves = leaf_exceptions(exc)
        if all(isinstance(e, LostAuthority) for e in leaves):
            self.ctx.log.info("run_dropped", reason="lost authority")
            return
        # A storage error (not the workflow's own): drop the run locally and hand
        # it back; whoever claims it next replays it from storage.
        self.ctx.log.warning("run_execution_error", error=repr(exc))
        self.needs_release = True

    async def _execute(self) -> None:
        ctx = self.ctx
        run = self.run
        deadline = _min_deadline(run)
        if deadline is not None and ctx.clock.now() >= deadline:
            await self._enforce_deadline()
            return
        outcome: CloseRun | None = None
        async with anyio.create_task_group() as guard:
            self._guard = guard
            if deadline is not None:
                guard.start_soon(self._watch_deadline, deadline)
            if (
                run.cancellation is not None
                and run.cancellation.get("delivered_at") is None
                and "cooperative_cancellation" in getattr(ctx.worker, "capabilities", ())
            ):
                self.on_request(run.cancellation)
            try:
                outcome = await self._run_code()
            finally:
                self._guard = None
                guard.cancel_scope.cancel()
        if self.stop_reason == "deadline":
            await self._enforce_deadline()
            return
        if ctx.broken is not None:
            raise ctx.broken
        if outcome is None or self.stop_reason is not None:
            return
        await ctx.commit([outcome])
        ctx.log.info("run_closed", status=outcome.status)

    async def _run_code(self) -> CloseRun | None:
        ctx = self.ctx
        state = enter_task(ctx, "0", self.run.started_at or self.run.created_at)
        ctx.task_started()
        try:
            args = ctx.converter.decode(self.run.input)
            hints = ctx.defn.param_hints
            if isinstance(args, list):
                from .converter import rebuild

                args = [rebuild(a, hints[i] if i < len(hints) else None)
                        for i, a in enumerate(args)]
            else:
                args = [args]
            with anyio.CancelScope() as code_scope:
                self.code_scope = code_scope
                if self._interrupt_pending:
                    code_scope.cancel()
                value = await ctx.defn.fn(*args)
            if ctx.fatal is not None:
                raise ctx.fatal
            if ctx.cancellation is not None and not ctx.hard_stop:
                return self._cancelled(None if code_scope.cancelled_caught else value)
            if code_scope.cancelled_caught:
                return None
            return CloseRun("completed", result=ctx.encode(value, "the workflow's result"))
        except BaseExceptionGroup as group:
            special = [
                e for e in leaf_exceptions(group)
                if isinstance(e, ContinueAsNew | LostAuthority | NonDeterminismError)
            ]
            if not special:
                if group.subgroup(Exception) is None:
                    raise
                return self._failed(group)
            exc0 = special[0]
            if isinstance(exc0, LostAuthority):
                raise exc0 from None
            if isinstance(exc0, ContinueAsNew):
                return self._continue(exc0)
            return self._non_deterministic(exc0)
        except ContinueAsNew as can:
            return self._continue(can)
        except NonDeterminismError as exc:
            return self._non_deterministic(exc)
        except LostAuthority:
            raise
        except Exception as exc:
            return self._failed(exc)
        finally:
            ctx.task_finished()
            del state

    def _cancelled(self, value: Any) -> CloseRun:
        ctx = self.ctx
        assert ctx.cancellation is not None
        failure = {
            "failure_category": "cancelled",
            "exception_class": "durable.WorkflowCancelled",
            "message": f"cancelled: {ctx.cancellation.reason}",
            "request_id": ctx.cancellation.request_id,
            "root_request_id": ctx.cancellation.root_request_id,
        }
        result = None if value is None else ctx.encode(value, "the workflow's result")
        return CloseRun("cancelled", result=result, failure=failure)

    def _continue(self, can: ContinueAsNew) -> CloseRun:
        payload = self.ctx.encode(list(can.new_args), "continue_as_new arguments")
        return CloseRun("continued", continue_input=payload)

    def _non_deterministic(self, exc: BaseException) -> CloseRun:
        self.ctx.log.error("non_determinism", error=str(exc))
        return CloseRun("failed", failure=failure_from_exception(exc, "non_determinism"),
                        needs_review=True)

    def _failed(self, exc: BaseException) -> CloseRun:
        ctx = self.ctx
        if isinstance(ctx.fatal, NonDeterminismError):
            return self._non_deterministic(ctx.fatal)
        if ctx.fatal is not None:
            exc = ctx.fatal
        leaves = leaf_exceptions(exc)
        category = "structural_limit" if any(
            isinstance(e, StructuralLimitExceeded) for e in leaves) else "application"
        ctx.log.info("run_failed", error=repr(exc))
        return CloseRun("failed", failure=failure_from_exception(exc, category))

    async def _watch_deadline(self, deadline: float) -> None:
        await self.ctx.clock.sleep_until(deadline)
        self.stop_reason = self.stop_reason or "deadline"
        self._hard_stop()

    async def _enforce_deadline(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.ctx.worker.driver.enforce_expired(
                self.run.namespace, self.ctx.clock.now(), self.run.run_id
            )


def _min_deadline(run: RunRecord) -> float | None:
    values = [
        v for v in (run.execution_deadline_at, run.run_deadline_at, run.cleanup_deadline_at)
        if v is not None
    ]
    return min(values) if values else None


def new_uuid(state: TaskState) -> uuid.UUID:
    return uuid.UUID(int=state.rng.getrandbits(128), version=4)


def remaining_until(deadline: float | None, now: float) -> float:
    if deadline is None:
        return math.inf
    return max(0.0, deadline - now)
