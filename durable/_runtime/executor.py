"""Executing one claimed run: replay, continue live, deliver cancellation, close.

The executor runs the workflow's coroutine in the worker's task group, in
the host event loop. It bounds the run by its earliest deadline on the engine
clock (storage is the source of truth; this makes enforcement prompt), and it
delivers a cooperative cancellation at a recorded boundary: once every
workflow task waits on a durable op, it records that set of ops and cancels
the code's scope, so the workflow sees the host's native cancellation
exception at those awaits. Replay re-delivers at the same boundary.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

import anyio
import anyio.abc

from .._registry import WorkflowDefn
from ..cancellation import CancellationContext
from ..converter import decode_args
from ..errors import (
    AuthorityLost,
    ContinueAsNew,
    NonDeterminismDetected,
    PayloadRejected,
    PhaseTimedOut,
    StructuralLimitExceeded,
    UnitOutcomeUnknown,
    WriteRejected,
)
from ..failure import (
    Failure,
    cancel_request_left,
    leaf_exceptions,
    not_an_exception,
    receive_cancel_request,
    safe_repr,
)
from ..store.records import ClientRequest, InboxItem, OpRecord, RunRecord, RunStatus
from ..store.writes import CloseRun, DeliverCancellation, Write
from .context import RunHost, RunSetup, WorkflowContext
from .handlers import Handler
from .inbox import Inbox
from .phases import phase_failure
from .runtime import Runtime, WorkflowRuntime
from .state import enter_task


class RunExecutor:
    """Owns one claimed run: replays it, continues it live, closes it.

    It also delivers a cooperative cancellation: once every workflow task waits
    on a durable op, it records that set of ops (the delivery boundary) and
    cancels the code's scope, so the workflow sees the host's native
    cancellation exception at those awaits. Replay re-delivers at the same
    boundary.
    """

    def __init__(self, run: RunRecord, ops: dict[str, OpRecord], defn: WorkflowDefn,
                 setup: RunSetup, on_done: Callable[[RunExecutor], None], *,
                 scratch: bool = False) -> None:
        # scratch: a read-only replay (a query of an idle run, the Replayer): no
        # deadlines, no new cancellation, nothing recorded (its committer sees to that)
        self.scratch = scratch
        self.ctx = ctx = WorkflowContext(run=run, ops=ops, defn=defn, setup=setup, host=self)
        ctx.scratch = scratch
        self.run = run
        self.runtime: Runtime = WorkflowRuntime(ctx)
        self._inbox: Inbox | None = None
        self.scope: anyio.CancelScope | None = None
        self.code_scope: anyio.CancelScope | None = None
        self.stop_reason: str | None = None
        self.needs_release = False
        self._on_done = on_done
        self._guard: anyio.abc.TaskGroup | None = None
        #: a task was started in `_guard` (`_beside`): only then is it cancelled
        #: when the code returns (cancelling a scope formats its task's repr
        #: for anyio's reason: ~11 µs of every run, issue 26)
        self._guard_used = False
        self._interrupt_pending = False
        self._delivery_started = False
        self.delivery_lock = anyio.Lock()  # one delivery (cancellation, signal, update) at a time
        self.code_started = False  # the workflow's own code runs (deliveries may be made)
        #: called when the code stops running (a task parked, blocked, finished),
        #: while the worker is full and none of its runs can be put down now
        #: (`durable._runtime.relief`)
        self.on_wait: Callable[[], None] | None = None

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
        """Interrupt the code at its awaits: the main task and the handler and
        op tasks running now (ones started later are not interrupted)."""
        if self.code_scope is None:
            self._interrupt_pending = True
        else:
            self.code_scope.cancel()
        for scope in list(self.ctx.task_scopes):
            scope.cancel()

    # ---------------------------------------------------------------- tasks beside the code

    def spawn_task(self, path: str, clock: float, replaying: bool | None,
                   body: Callable[[], Awaitable[None]],
                   on_interrupt: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run `body` as workflow task `path` (an async handler, an op started
        with a handle) beside the code: interrupted with it by a delivered
        cancellation, stopped when the code returns. `replaying` (its log lines
        silent) is, when None, whether history holds ops of the task."""
        ctx = self.ctx
        assert self._guard is not None, "workflow tasks start while the code runs"
        ctx.parking.task_started()  # running from now on, so no delivery is made before it waits

        async def run() -> None:
            state = enter_task(ctx, path, clock, self.runtime)
            if replaying is not None:
                state.replaying = replaying
            scope = anyio.CancelScope()
            ctx.task_scopes.add(scope)
            try:
                with scope:
                    await body()
                if scope.cancelled_caught and on_interrupt is not None:
                    await on_interrupt()
            except Exception as exc:
                self.task_failed(exc)
            finally:
                ctx.task_scopes.discard(scope)
                ctx.parking.task_finished()

        self._beside(run, name=f"workflow-task {path}")

    def spawn_engine(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `work` for the run in the background (not workflow code: it is
        never part of a delivery boundary)."""
        assert self._guard is not None, "engine work runs while the code runs"
        self._beside(work)

    def _beside(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any,
                name: str | None = None) -> None:
        """Start `fn` in the run's guard (beside its code, stopped when it returns)."""
        assert self._guard is not None
        self._guard_used = True
        self._guard.start_soon(fn, *args, name=name)

    def task_failed(self, exc: BaseException) -> None:
        """A task beside the code raised: storage trouble stops the run here;
        anything else (a signal handler's error, non-determinism) fails it."""
        if isinstance(exc, AuthorityLost) or self.ctx.broken is not None:
            self.stop("storage refused or failed a commit")
        else:
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Fail the run with `exc` (recording nothing more on the way out).

        Only the engine's own verdicts (non-determinism, a structural limit)
        are `ctx.fatal`: queries and the Replayer read `fatal` as "this code
        does not replay this history". A handler's error is the run's
        failure, which a replay reaches again as it did live, so it is
        `ctx.failed_with` (issue 21: a run failed by its signal handler could
        not be queried or replayed).
        """
        ctx = self.ctx
        if isinstance(exc, NonDeterminismDetected | StructuralLimitExceeded):
            if ctx.fatal is None:
                ctx.fatal = exc
        elif ctx.failed_with is None:
            ctx.failed_with = exc
        ctx.failing = True
        self.interrupt_code()

    # ---------------------------------------------------------------- signals, queries, updates

    @property
    def delivering_cancellation(self) -> bool:
        """A cancellation request is being delivered (not recorded yet)."""
        return self._delivery_started and self.ctx.cancellation is None

    def inbox_idle(self) -> bool:
        """Nothing waits in the inbox: no signal or request to deliver or answer,
        no recorded delivery still to make again, nothing to fetch."""
        inbox = self._inbox
        return inbox is None or not (inbox.signals or inbox.requests or inbox.replay
                                     or inbox.wanted is not None)

    def inbox(self) -> Inbox:
        """The run's signals, queries and updates (made on the first one)."""
        if self._inbox is None:
            self._inbox = Inbox(self)
            if self._guard is not None:
                self._beside(self._inbox.serve)
        return self._inbox

    def replay_due(self) -> bool:
        """A delivery recorded in history is to be made again now (replay)."""
        return self._inbox is not None and self._inbox.replay_due()

    def poke(self) -> None:
        if self._inbox is not None:
            self._inbox.poke()
        if self.on_wait is not None:  # a full worker waits for a run it can put down
            self.on_wait()

    def deliver_buffered(self, handler: Handler, deliveries: list[Any]) -> None:
        self.inbox().deliver_buffered(handler, deliveries)

    async def deliver_received_by(self, instant: float) -> None:
        if self._inbox is not None:
            await self._inbox.deliver_received_by(instant)

    def on_interaction(self, item: InboxItem | ClientRequest) -> None:
        """A signal, query or update for this run arrived (an in-process wake-up)."""
        self.inbox().receive(item)

    def on_run_state(self, run: RunRecord) -> None:
        """The run's stored counters (a resync): fetch what arrived from elsewhere."""
        if run.inbox_seq or run.request_seq or self._inbox is not None:
            self.inbox().notice(run)

    def on_request(self, record: dict[str, Any]) -> None:
        """A cancellation request was recorded for this run: deliver it."""
        ctx = self.ctx
        if (ctx.cancellation is not None or self._delivery_started or self._guard is None
                or self.scratch):
            return
        if record.get("delivered_at") is not None:
            return
        self._delivery_started = True
        self.run.cleanup_deadline_at = float(record["deadline_at"])
        self._beside(self._deliver, record)
        self._beside(self._watch_deadline, float(record["deadline_at"]))

    async def _deliver(self, record: dict[str, Any]) -> None:
        async with self.delivery_lock:  # not in the middle of a signal's or update's
            await self._deliver_now(record)

    async def _deliver_now(self, record: dict[str, Any]) -> None:
        ctx = self.ctx
        # Deliver where every task waits on a durable op, so replay finds the same
        # boundary; a task stuck in a non-durable await is not waited for long.
        with anyio.move_on_after(0.25):
            while ctx.parking.active > 0 or self.code_scope is None:
                with anyio.move_on_after(0.01):
                    await ctx.parking.quiet.wait()
        boundary = ctx.parking.frontier()
        ctx.delivering = True
        delivered_at = ctx.clock.now()
        try:
            await ctx.commit([DeliverCancellation(record["request_id"], boundary, delivered_at,
                                                  deliveries=ctx.parking.deliveries)])
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
            interrupt, rest = (None, None) if rest is None else rest.split(KeyboardInterrupt)
            if rest is not None:
                self._dropped(rest)
            if interrupt is not None:  # the operator's Ctrl-C: the host stops
                raise leaf_exceptions(interrupt)[0] from None
            if cancelled is not None:
                raise leaf_exceptions(cancelled)[0] from None
        except Exception as exc:
            self._dropped(exc)
        finally:
            self._on_done(self)
            if not self.scratch:  # a read-only replay's owner still reads its context
                self._release()

    def _release(self) -> None:
        """Nothing runs for this run any more (the code, its tasks, its
        inbox all ended in `execute`, and the worker dropped it): cut the
        back-references that make the executor, its context, runtime and inbox
        a reference cycle, so reference counting frees them at once. A cycle
        that lived past a few collections is only freed by a full garbage
        collection, which stops the process for tens of milliseconds
        (docs/benchmarks.md, "One transaction a watchdog pass")."""
        self.ctx.host = cast(RunHost, weakref.proxy(self))
        self.ctx.parking.detach()
        self._inbox = None
        self._on_done = _done_already

    def _dropped(self, exc: BaseException) -> None:
        leaves = leaf_exceptions(exc)
        if all(isinstance(e, AuthorityLost) for e in leaves):
            self.ctx.log.info("run_dropped", reason="lost authority")
            return
        if self.scratch:  # the replay's owner reads what happened from the context
            return
        if self.stop_reason == "crash":  # killed on purpose (durable.testing): silent
            return
        # A storage error (not the workflow's own): drop the run locally and hand
        # it back; whoever claims it next replays it from storage.
        self.ctx.log.warning("run_execution_error", error=safe_repr(exc))
        self.needs_release = True

    async def _execute(self) -> None:
        ctx = self.ctx
        run = self.run
        deadline = None if self.scratch else run.deadlines.earliest
        if deadline is not None and ctx.clock.now() >= deadline:
            await self._enforce_deadline()
            return
        if (run.inbox_seq or run.request_seq) and not self.scratch:
            # Even when an early wake-up already made the inbox (an interaction
            # that arrived between the claim and now): what is stored (deliveries
            # to replay, signals received before the claim) is only read here.
            # (A read-only replay is handed its inbox by its caller.)
            items, requests = await ctx.worker.store.load_inbox(run.run_id)
            self.inbox().load(items, requests, run)
        outcome: CloseRun | None = None
        async with anyio.create_task_group() as guard:
            self._guard = guard
            if deadline is not None:
                self._beside(self._watch_deadline, deadline)
            if (
                run.cancellation is not None
                and run.cancellation.get("delivered_at") is None
                and "cooperative_cancellation" in getattr(ctx.worker, "capabilities", ())
            ):
                self.on_request(run.cancellation)
            if self._inbox is not None:
                self._beside(self._inbox.serve)
            try:
                outcome = await self._run_code()
            finally:
                ctx.closing = True  # handlers stop now; what they leave is settled below
                self._guard = None
                if self._guard_used:  # (else nothing to stop: no scope to cancel)
                    guard.cancel_scope.cancel()
        if self.stop_reason == "deadline":
            await self._enforce_deadline()
            return
        if ctx.broken is not None:
            raise ctx.broken
        if outcome is None or self.stop_reason is not None:
            return
        await ctx.worker.crash_point("before_close")
        skipped = ctx.unreplayed_ops() if not outcome.needs_review else []
        if skipped:
            outcome = self._non_deterministic(NonDeterminismDetected(
                f"workflow {self.run.workflow_type} (run {self.run.run_id}) closed "
                f"{outcome.status} without asking again for the recorded operations "
                f"{', '.join(skipped[:5])}{'...' if len(skipped) > 5 else ''}: the code "
                "changed in a way that skips part of its history. The run is marked for "
                "review; deploy the old code or terminate the run"))
        writes: list[Write] = [outcome]
        if self._inbox is not None and not outcome.needs_review:
            # updates still running fail with the run's close
            writes = [*self._inbox.unfinished_updates(outcome.status), outcome]
        try:
            await ctx.commit(writes)
        except WriteRejected as exc:
            # The close itself could not be stored (its result or failure):
            # close the run failed with a failure that can be, saying why.
            ctx.log.error("run_close_rejected", error=str(exc))
            outcome = CloseRun(RunStatus.FAILED, failure=Failure(
                "storage_rejected", str(exc), "durable.WriteRejected"))
            await ctx.commit([outcome])

    async def _run_code(self) -> CloseRun | None:
        ctx = self.ctx
        state = enter_task(ctx, "0", self.run.started_at or self.run.created_at, self.runtime)
        ctx.parking.task_started()
        try:
            args = decode_args(ctx.converter, self.run.input, ctx.defn.param_hints)
            with anyio.CancelScope() as code_scope:
                self.code_scope = code_scope
                if self._interrupt_pending:
                    code_scope.cancel()
                main = self._start()
                if self._inbox is not None:
                    await self._inbox.at_start()
                self.code_started = True
                self.poke()
                value = await main(*args)
                if cancel_request_left():  # the code cancelled its own task, then returned
                    await receive_cancel_request()
                if self._inbox is not None:
                    self._inbox.check_finished()
            if ctx.fatal is not None:
                raise ctx.fatal
            if ctx.failed_with is not None:
                raise ctx.failed_with
            if ctx.cancellation is not None and not ctx.hard_stop:
                return self._cancelled(None if code_scope.cancelled_caught else value)
            if code_scope.cancelled_caught:
                return None
            return CloseRun(RunStatus.COMPLETED,
                            result=ctx.encode(value, "the workflow's result"))
        except BaseExceptionGroup as group:
            special = [
                e for e in leaf_exceptions(group)
                if isinstance(e, ContinueAsNew | AuthorityLost | NonDeterminismDetected)
            ]
            if not special:
                if group.subgroup(Exception) is None:
                    error = not_an_exception(group, self._what())
                    if error is None:  # a cancellation, a KeyboardInterrupt
                        raise
                    return self._failed(error)
                return self._failed(group)
            exc0 = special[0]
            if isinstance(exc0, AuthorityLost):
                raise exc0 from None
            if isinstance(exc0, ContinueAsNew):
                return self._continue(exc0)
            return self._non_deterministic(exc0)
        except ContinueAsNew as can:
            return self._continue(can)
        except NonDeterminismDetected as exc:
            return self._non_deterministic(exc)
        except AuthorityLost:
            raise
        except Exception as exc:
            return self._failed(exc)
        except BaseException as exc:
            error = not_an_exception(exc, self._what())
            if error is None:  # a cancellation, a KeyboardInterrupt
                raise
            return self._failed(error)
        finally:
            ctx.parking.task_finished()
            del state

    def _what(self) -> str:
        return f"workflow {self.run.workflow_type!r} (run {self.run.run_id})"

    def _start(self) -> Callable[..., Any]:
        """What the run executes: the workflow function, or the run method of a
        fresh instance of its class, whose handler methods become the run's
        handlers."""
        ctx = self.ctx
        spec = ctx.defn.spec
        if spec is None:
            return ctx.defn.fn
        instance = spec.cls()
        ctx.instance = instance
        ctx.handlers.bind_class(spec, instance)
        run: Callable[..., Any] = getattr(instance, spec.run_method)
        return run

    def _cancelled(self, value: Any) -> CloseRun:
        ctx = self.ctx
        assert ctx.cancellation is not None
        failure = Failure.cancelled_workflow(ctx.cancellation.reason,
                                             ctx.cancellation.request_id,
                                             ctx.cancellation.root_request_id)
        result = None if value is None else ctx.encode(value, "the workflow's result")
        return CloseRun(RunStatus.CANCELLED, result=result, failure=failure)

    def _continue(self, can: ContinueAsNew) -> CloseRun:
        try:
            payload = self.ctx.encode(list(can.new_args), "continue_as_new arguments")
        except (StructuralLimitExceeded, PayloadRejected) as exc:
            # The next run cannot start with these arguments: this run fails,
            # saying so (it would otherwise be replayed forever).
            return self._failed(exc)
        return CloseRun(RunStatus.CONTINUED, continue_input=payload)

    def _non_deterministic(self, exc: BaseException) -> CloseRun:
        if not self.scratch:
            self.ctx.log.error("non_determinism", error=str(exc))
        return CloseRun(RunStatus.FAILED, failure=Failure.from_exception(exc, "non_determinism"),
                        needs_review=True)

    def _failed(self, exc: BaseException) -> CloseRun:
        ctx = self.ctx
        if isinstance(ctx.fatal, NonDeterminismDetected):
            return self._non_deterministic(ctx.fatal)
        if ctx.fatal is not None:
            exc = ctx.fatal
        elif ctx.failed_with is not None:
            exc = ctx.failed_with
        leaves = leaf_exceptions(exc)
        unknown = next((e for e in leaves if isinstance(e, UnitOutcomeUnknown)), None)
        if unknown is not None:
            ctx.log.warning("units_outcome_unknown", units=unknown.keys)
            return CloseRun(RunStatus.FAILED, needs_review=True, failure=Failure.units_unknown(
                unknown.keys, unknown.handler, self.run.workflow_id))
        phase = next((e for e in leaves if isinstance(e, PhaseTimedOut)), None)
        if phase is not None and len(leaves) == 1:
            ctx.log.info("run_timed_out_in_phase", phase=phase.phase)
            return CloseRun(RunStatus.TIMED_OUT,
                            failure=phase_failure(phase, self.run.workflow_id))
        category = "structural_limit" if any(
            isinstance(e, StructuralLimitExceeded) for e in leaves) else "application"
        ctx.log.info("run_failed", error=safe_repr(exc))
        return CloseRun(RunStatus.FAILED, failure=Failure.from_exception(exc, category))

    async def _watch_deadline(self, deadline: float) -> None:
        await self.ctx.clock.sleep_until(deadline)
        self.stop_reason = self.stop_reason or "deadline"
        self._hard_stop()

    async def _enforce_deadline(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.ctx.worker.store.enforce_expired(
                self.run.namespace, self.ctx.clock.now(), self.run.run_id
            )


def _done_already(executor: RunExecutor) -> None:
    """A released executor's `on_done` (the worker was told already)."""
