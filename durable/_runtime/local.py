"""Local activities: run inside this worker, supervised, recorded by one write.

A local activity needs no queue round trip: the workflow's own op runs the
attempts (with the shared attempt runner) and records the outcome once.
Timeouts are enforced here on the engine clock; retries follow the same
`RetryPolicy` rules as remote attempts. A crash before the record re-runs
the activity (at least once, as activities promise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from .._registry import ActivityDefn, require_activity
from ..clock import to_iso
from ..errors import ActivityStopRequested, PolicyRejected, StructuralLimitExceeded
from ..failure import Failure, leaf_exceptions
from ..options import ActivityOptions, CancellationPolicy, to_seconds
from ..store.records import OpKind
from ..store.writes import RecordLocalActivity
from . import attempts, caps
from .context import WorkflowContext
from .ops import go_live, interruptible, live_gate, outcome, tracked_shield
from .state import TaskState


async def execute_local_activity(ctx: WorkflowContext, state: TaskState,
                                 activity: Callable[..., Any] | str, args: tuple[Any, ...],
                                 options: ActivityOptions) -> Any:
    """Run an activity in this worker (see the module docstring)."""
    if options.cancellation is CancellationPolicy.ABANDON:
        raise PolicyRejected(
            "CancellationPolicy.ABANDON is not allowed for local activities: they run inside "
            "this worker and cannot outlive their workflow; use TRY_CANCEL or "
            "WAIT_CANCELLATION_COMPLETED, or a remote activity"
        )
    defn = require_activity(activity)
    op_id = state.next_op_id()
    record = ctx.recorded_op(op_id, OpKind.LOCAL_ACTIVITY, defn.name)
    if record is not None and not ctx.must_block(record, op_id):
        return outcome(ctx, state, record, defn.return_hint)
    started = ctx.clock.now()
    policy = options.cancellation

    async def record_interrupt(receipt: dict[str, Any], attempts_made: int) -> None:
        if ctx.recorded.get(op_id) is not None:
            return
        await ctx.commit([RecordLocalActivity(
            op_id=op_id, name=defn.name, started_at=started, attempts=attempts_made,
            interrupted=True, failure=Failure.activity_cancelled(
                f"local activity {defn.name} stopped by cancellation",
                policy=policy.value, stop_receipt=receipt, interrupted=True,
            ),
        )])

    if ctx.must_block(record, op_id):
        # Replay of an op the live run interrupted: interrupt it again, do not re-run it.
        await interruptible(
            ctx, op_id, OpKind.LOCAL_ACTIVITY, anyio.sleep_forever,
            lambda: record_interrupt({"kind": "not_restarted", "confirmed": True}, 0),
        )
    left = caps.time_left(ctx, state)  # inside a phase: never past its deadline
    await live_gate(ctx)
    go_live(state)
    payload = ctx.encode(list(args), f"the arguments of activity {defn.name!r}")
    call_args = attempts.arguments(defn, ctx.converter, payload)
    retry = options.retry_policy
    s2c = to_seconds(options.schedule_to_close_timeout, "schedule_to_close_timeout")
    if left is not None and (s2c is None or s2c > left):
        s2c = left
    stc = to_seconds(options.start_to_close_timeout, "start_to_close_timeout")
    overall = started + s2c if s2c is not None else None
    attempt = 0
    failure: Failure | None = None
    result: str | None = None
    actx: attempts.ActivityContext | None = None
    ctx.park(op_id, OpKind.LOCAL_ACTIVITY)
    try:
        while True:
            attempt += 1
            attempt_start = ctx.clock.now()
            deadlines = [d for d in (overall, attempt_start + stc if stc else None) if d]
            deadline_at = min(deadlines) if deadlines else None
            actx = attempts.new_context(
                defn, activity_id=op_id, attempt=attempt, workflow_id=ctx.run.workflow_id,
                run_id=ctx.run.run_id, task_queue=ctx.run.task_queue, local=True,
                scheduled_at=started, started_at=attempt_start, deadline=deadline_at,
                heartbeat_timeout=None, heartbeat_details=None, clock=ctx.clock,
                encode_details=ctx.details_encoder(), stop_grace=ctx.stop_grace,
            )
            ctx.running_local[op_id] = actx
            timed_out: list[str] = []
            try:
                value = await _attempt(ctx, actx, defn, call_args, deadline_at, overall,
                                       timed_out, policy)
                if timed_out:
                    raise ActivityStopRequested(timed_out[0])
                await ctx.worker.crash_point("after_effect")
                result = ctx.encode(value, f"the result of activity {defn.name!r}")
                failure = None
                break
            except StructuralLimitExceeded:
                raise
            except ActivityStopRequested:
                if not timed_out:
                    # Stopped because the run's code is being cancelled (delivery or a
                    # worker stop): wait for that cancellation to reach this await.
                    await anyio.sleep_forever()
                failure = Failure.local_timeout(timed_out[0], defn.name, attempt)
                retryable = timed_out[0] != "schedule_to_close"
            except Exception as exc:
                failure = attempts.attempt_failure(exc, actx, defn)
                retryable = True
            finally:
                ctx.running_local.pop(op_id, None)
            next_at = retry.next_attempt_at(failure, attempt, ctx.clock.now(), overall,
                                            retryable=retryable)
            if next_at is None:
                break
            await ctx.clock.sleep_until(next_at)
    except anyio.get_cancelled_exc_class():
        if ctx.may_act_on_interrupt():
            with tracked_shield(ctx):
                await record_interrupt(_stop_receipt(ctx, defn, actx, policy, attempt), attempt)
        raise
    finally:
        ctx.unpark(op_id)
    await ctx.commit([RecordLocalActivity(
        op_id=op_id, name=defn.name, started_at=started, attempts=attempt,
        result=result, failure=failure,
    )])
    return outcome(ctx, state, ctx.recorded[op_id], defn.return_hint)


async def _attempt(ctx: WorkflowContext, actx: attempts.ActivityContext,
                   defn: ActivityDefn, call_args: list[Any], deadline_at: float | None,
                   overall: float | None, timed_out: list[str],
                   policy: CancellationPolicy) -> Any:
    """One attempt, stopped at its deadline (the kind that expired goes in `timed_out`)."""
    abandon = policy is CancellationPolicy.TRY_CANCEL
    if deadline_at is None:  # the common case: no watcher task needed
        return await attempts.run_attempt(actx, defn, call_args, abandon_on_cancel=abandon)
    try:
        async with anyio.create_task_group() as tg:

            async def expire() -> None:
                await ctx.clock.sleep_until(deadline_at)
                timed_out.append("schedule_to_close" if overall is not None
                                 and deadline_at >= overall else "start_to_close")
                actx.request_stop(f"{timed_out[0]} timeout")

            tg.start_soon(expire)
            try:
                return await attempts.run_attempt(actx, defn, call_args,
                                                  abandon_on_cancel=abandon)
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


def _stop_receipt(ctx: WorkflowContext, defn: ActivityDefn,
                  actx: attempts.ActivityContext | None, policy: CancellationPolicy,
                  attempt: int) -> dict[str, Any]:
    """How a local attempt stopped when its workflow was cancelled."""
    abandoned = (policy is CancellationPolicy.TRY_CANCEL or (
        actx is not None and actx.abandoned)) and not (defn.is_async or defn.process_isolated)
    receipt: dict[str, Any] = {
        "kind": "abandoned_thread" if abandoned else (
            "cancel_scope" if defn.is_async else "cooperative"),
        "confirmed": not abandoned, "attempt": attempt, "at": to_iso(ctx.clock.now()),
    }
    if defn.process_isolated:
        stop = actx.process_stop if actx is not None else None
        receipt.update(kind="process_killed", confirmed=bool(stop and stop["confirmed"]),
                       exit_code=stop["exit_code"] if stop else None)
    return receipt
