"""Local activities: run inside this worker, supervised, recorded by one write.

A local activity needs no queue round trip: the workflow's own op runs the
attempts (with the shared attempt runner) and records the outcome once.
Timeouts are enforced here on the engine clock; retries follow the same
`RetryPolicy` rules as remote attempts. A crash before the record re-runs
the activity (at least once, as activities promise).

With ``record="batched"`` a successful outcome is not written at once: it is
kept with the run (`WorkflowContext.record_batched`) and recorded with the
run's next commit (the next durable op, a delivery, the close), when the
run yields, before a retry's backoff, or every `local_batch` outcomes. A
crash re-runs at most those unrecorded steps; a recorded one never re-runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from .. import _validate
from .._registry import ActivityDefn, require_activity
from ..clock import to_datetime, to_iso
from ..converter import JSONConverter, rebuild
from ..errors import ActivityStopRequested, PolicyRejected, StructuralLimitExceeded
from ..failure import Failure, leaf_exceptions, not_an_exception
from ..options import ActivityOptions, CancellationPolicy
from ..store.records import OpKind, RunRecord
from ..store.writes import RecordLocalActivity
from . import attempts, caps
from .context import WorkflowContext
from .ops import advance, go_live, interruptible, leave, live_gate, outcome, tracked_shield
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
    if record is not None and not ctx.parking.must_block(record, op_id):
        await leave(ctx, op_id, OpKind.LOCAL_ACTIVITY)
        return outcome(ctx, state, record, defn.return_hint)
    started = ctx.clock.now()
    policy = options.cancellation
    if ctx.parking.must_block(record, op_id):
        # Replay of an op the live run interrupted: interrupt it again, do not re-run it.
        await interruptible(
            ctx, op_id, OpKind.LOCAL_ACTIVITY, anyio.sleep_forever,
            lambda: _record_interrupt(ctx, op_id, defn, started, policy,
                                      {"kind": "not_restarted", "confirmed": True}, 0),
        )
    # inside a phase: never past its deadline
    left = caps.time_left(ctx, state) if state.phases else None
    await live_gate(ctx)
    go_live(state)
    if defn.arity is not None:
        defn.arity.check(f"local activity {defn.name!r}", len(args))
    facts = _facts(defn)
    call_args = _plain_arguments(ctx, defn, args, facts)
    if call_args is None:
        payload = ctx.encode(list(args), f"the arguments of activity {defn.name!r}")
        call_args = attempts.arguments(defn, ctx.converter, payload)
    batched = (options.record or ctx.local_record) == "batched" and not ctx.scratch
    # validated (to float seconds) when the options were built
    s2c = options.schedule_to_close_timeout
    if s2c is not None:
        s2c = _validate.optional_duration(s2c, "duration")
    if left is not None and (s2c is None or s2c > left):
        s2c = left
    stc = options.start_to_close_timeout
    if stc is not None:
        stc = _validate.optional_duration(stc, "duration")
    overall = started + s2c if s2c is not None else None
    running_local = ctx.running_local
    attempt = 0
    scalar = False
    failure: Failure | None = None
    result: str | None = None
    value: Any = None
    actx: attempts.ActivityContext | None = None
    details = ctx.details_encoder
    if details is None:  # the converter and the limit are the run's: made once
        details = ctx.details_encoder = attempts.details_encoder(ctx.converter,
                                                                 ctx.limits.payload_bytes)
    ctx.parking.park(op_id, OpKind.LOCAL_ACTIVITY)
    try:
        while True:
            attempt += 1
            attempt_start = ctx.clock.now()
            deadline_at = overall
            if stc:
                ends = attempt_start + stc
                if ends and (not deadline_at or ends < deadline_at):
                    deadline_at = ends
            if not deadline_at:  # as before: an instant of 0 is no deadline
                deadline_at = None
            actx = attempts.ActivityContext(
                partial(_local_info, defn.name, op_id, attempt, ctx.run, started,
                        attempt_start, deadline_at),
                ctx.clock, deadline_at, encode_details=details, stop_grace=ctx.stop_grace,
                activity_type=defn.name, attempt=attempt)
            running_local[op_id] = actx
            timed_out: list[str] = []
            try:
                if (deadline_at is None and defn.is_async
                        and attempts.never_suspends(defn.fn)):  # the synchronous lane, inline
                    begun = attempts.begin(actx, defn.fn, call_args)
                    value = begun.value if begun.done else await attempts.finish(actx, begun)
                else:
                    value = await _attempt(ctx, actx, defn, call_args, deadline_at, overall,
                                           timed_out, policy)
                if timed_out:
                    raise ActivityStopRequested(timed_out[0])
                await ctx.worker.crash_point("after_effect")
                result = _scalar_text(value, ctx)  # a scalar: its text, and its own copy
                scalar = result is not None
                if not scalar:
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
            except BaseException as exc:
                error = exc if isinstance(exc, Exception) else not_an_exception(
                    exc, f"local activity {defn.name!r}")
                if error is None:  # a cancellation, a KeyboardInterrupt: not ours to keep
                    raise
                failure = attempts.attempt_failure(error, actx, defn)
                retryable = True
            finally:
                running_local.pop(op_id, None)
            next_at = options.retry_policy.next_attempt_at(
                failure, attempt, ctx.clock.now(), overall, retryable=retryable)
            if next_at is None:
                break
            if ctx.batched:  # the backoff is a wait: what the run did so far is recorded
                await ctx.flush()
            await ctx.clock.sleep_until(next_at)
        if ctx.parking.must_hold(op_id):  # a signal or update is being delivered here
            await ctx.parking.hold(op_id, OpKind.LOCAL_ACTIVITY, parked=True)
    except anyio.get_cancelled_exc_class():
        if ctx.may_act_on_interrupt():
            with tracked_shield(ctx):
                await _record_interrupt(ctx, op_id, defn, started, policy,
                                        _stop_receipt(ctx, defn, actx, policy, attempt), attempt)
        raise
    finally:
        ctx.parking.unpark(op_id)
    if failure is None:
        write = RecordLocalActivity.succeeded(op_id, defn.name, started, attempt, result)
    else:
        write = RecordLocalActivity(op_id=op_id, name=defn.name, started_at=started,
                                    attempts=attempt, result=result, failure=failure)
    if batched and failure is None:
        # Kept for the run's next commit; a failure is recorded at once (it is
        # rare, and describe() shows it), carrying the outcomes kept so far.
        record = ctx.record_batched(write, ctx.clock.now())
        if ctx.batched >= ctx.local_batch:
            await ctx.flush()
    else:
        await ctx.commit([write])
        record = ctx.recorded[op_id]
    if failure is None and facts.return_as_is and type(ctx.converter) is JSONConverter:
        # What decoding the recorded result would give, without decoding it:
        # a plain value's copy (replay decodes the record to the same value).
        plain = value if scalar else _plain_copy(value, [ctx.limits.payload_bytes])
        if plain is not _NOT_PLAIN:
            advance(ctx, state, record)
            return plain
    return outcome(ctx, state, record, defn.return_hint)


async def _record_interrupt(ctx: WorkflowContext, op_id: str, defn: ActivityDefn,
                            started: float, policy: CancellationPolicy,
                            receipt: dict[str, Any], attempts_made: int) -> None:
    """Record a local activity stopped by cancellation (unless recorded already).

    A function of its own, not a closure: a closure would make the step's
    variables cells, read more slowly on every step that is never interrupted."""
    if ctx.recorded.get(op_id) is not None:
        return
    await ctx.commit([RecordLocalActivity(
        op_id=op_id, name=defn.name, started_at=started, attempts=attempts_made,
        interrupted=True, failure=Failure.activity_cancelled(
            f"local activity {defn.name} stopped by cancellation",
            policy=policy.value, stop_receipt=receipt, interrupted=True,
        ),
    )])


_SCALARS = (str, int, float, bool, type(None))


class _Facts:
    """What a local step asks of its activity's definition every time, found
    once per definition (`_facts`)."""

    __slots__ = ("params_as_is", "return_as_is")

    def __init__(self, defn: ActivityDefn) -> None:
        #: `rebuild` returns plain arguments, and a plain result, unchanged
        self.params_as_is = all(_as_is(hint) for hint in defn.param_hints)
        self.return_as_is = _as_is(defn.return_hint)


#: by definition identity (a definition holds a list, so it has no hash); holding
#: it keeps its id
_FACTS: dict[int, tuple[ActivityDefn, _Facts]] = {}


def _facts(defn: ActivityDefn) -> _Facts:
    known = _FACTS.get(id(defn))
    if known is None or known[0] is not defn:
        known = _FACTS[id(defn)] = (defn, _Facts(defn))
    return known[1]


def _local_info(name: str, op_id: str, attempt: int, run: RunRecord, scheduled_at: float,
                started_at: float, deadline: float | None) -> attempts.ActivityInfo:
    """A local attempt's `ActivityInfo`, built only if its code asks for it
    (the same as `attempts.new_context` builds, from a closure of its arguments)."""
    return attempts.ActivityInfo(
        activity_id=op_id, activity_type=name, attempt=attempt, workflow_id=run.workflow_id,
        run_id=run.run_id, task_queue=run.task_queue, local=True,
        scheduled_at=to_datetime(scheduled_at), started_at=to_datetime(started_at),
        deadline=to_datetime(deadline), heartbeat_timeout=None, heartbeat_details=None,
    )


def _scalar_text(value: Any, ctx: WorkflowContext) -> str | None:
    """The JSON text the default converter writes for a scalar result, without
    calling it (None, a bool, an int of at most 18 digits, a finite float, a
    string of printable ASCII without a quote or a backslash: text JSON writes
    as it is, and the size stays under the payload limit); None otherwise,
    and for another converter: `ctx.encode` then decides (and raises)."""
    if type(ctx.converter) is not JSONConverter:
        return None
    kind = type(value)
    if kind is int:
        if not -_INT_BOUND < value < _INT_BOUND:
            return None
        text = str(value)
    elif value is None:
        text = "null"
    elif kind is bool:
        text = "true" if value else "false"
    elif kind is str:
        if not (value.isascii() and value.isprintable() and '"' not in value
                and "\\" not in value):
            return None
        text = f'"{value}"'
    elif kind is float and math.isfinite(value):
        text = repr(value)  # what json writes for a finite float (float.__repr__)
    else:
        return None
    return text if len(text) <= ctx.limits.payload_bytes else None


_INT_BOUND = 10**18


def _plain_arguments(ctx: WorkflowContext, defn: ActivityDefn,
                     args: tuple[Any, ...], facts: _Facts | None = None) -> list[Any] | None:
    """The arguments as the activity would get them after a JSON round trip,
    without one, when they are plain (str, int, float, bool, None, lists and
    str-keyed dicts of them) and the converter is the default one; None otherwise.

    A local activity's arguments are not recorded: encoding them only checked
    they could be and rebuilt fresh copies by type hint. Plain values are
    copied (the activity must not share the workflow's lists) and rebuilt the
    same way; anything else, or a value that might reach the payload limit,
    takes the encoding path, which raises the same errors as before.
    """
    if type(ctx.converter) is not JSONConverter:
        return None
    budget = [ctx.limits.payload_bytes // 8]  # a bound on the encoded size, conservatively
    copied: list[Any] = []
    for value in args:
        plain = _plain_copy(value, budget)
        if plain is _NOT_PLAIN:
            return None
        copied.append(plain)
    if facts is not None and facts.params_as_is:
        return copied
    hints = defn.param_hints
    for i, value in enumerate(copied):
        hint = hints[i] if i < len(hints) else None
        if not _as_is(hint):
            copied[i] = rebuild(value, hint)
    return copied


def _as_is(hint: Any) -> bool:
    """Whether `rebuild` would return a plain value unchanged under this hint."""
    try:
        return hint in _AS_IS
    except TypeError:  # an unhashable hint: let rebuild decide
        return False


#: Hints under which `rebuild` returns a plain value unchanged (not worth calling it).
_AS_IS: frozenset[Any] = frozenset({None, Any, object, int, str, float, bool, list, dict})


_NOT_PLAIN: Any = object()


def _plain_copy(value: Any, budget: list[int]) -> Any:
    """A copy of a plain JSON value (tuples become lists, as in JSON), or _NOT_PLAIN."""
    kind = type(value)
    if kind is str:
        budget[0] -= len(value) + 2
    elif kind is int:
        if value.bit_length() > 14_000:
            return _NOT_PLAIN  # past int's str() digit limit: the encoding path says so
        budget[0] -= value.bit_length() // 3 + 2
    elif kind is float:
        if not math.isfinite(value):
            return _NOT_PLAIN  # JSON refuses it: the encoding path says so
        budget[0] -= 26
    elif kind is bool or value is None:
        budget[0] -= 5
    elif kind is list or kind is tuple:
        budget[0] -= 2 + len(value)
        items = []
        for item in value:
            copy = _plain_copy(item, budget)
            if copy is _NOT_PLAIN:
                return _NOT_PLAIN
            items.append(copy)
        value = items
    elif kind is dict:
        budget[0] -= 2 + 2 * len(value)
        entries = {}
        for key, item in value.items():
            if type(key) is not str:
                return _NOT_PLAIN  # JSON would turn it into a string
            budget[0] -= len(key) + 2
            copy = _plain_copy(item, budget)
            if copy is _NOT_PLAIN:
                return _NOT_PLAIN
            entries[key] = copy
        value = entries
    else:
        return _NOT_PLAIN
    return _NOT_PLAIN if budget[0] < 0 else value


async def _attempt(ctx: WorkflowContext, actx: attempts.ActivityContext,
                   defn: ActivityDefn, call_args: list[Any], deadline_at: float | None,
                   overall: float | None, timed_out: list[str],
                   policy: CancellationPolicy) -> Any:
    """One attempt, stopped at its deadline (the kind that expired goes in `timed_out`)."""
    lane = defn.is_async and attempts.never_suspends(defn.fn)
    if deadline_at is None:  # the common case: no watcher task needed
        if lane:  # the synchronous lane (attempts.call_activity takes it alike)
            begun = attempts.begin(actx, defn.fn, call_args)
            return begun.value if begun.done else await attempts.finish(actx, begun)
        return await attempts.run_attempt(actx, defn, call_args,
                                          abandon_on_cancel=policy is CancellationPolicy.TRY_CANCEL)
    abandon = policy is CancellationPolicy.TRY_CANCEL
    started: attempts.Started | None = None
    if lane:
        # The synchronous lane (attempts.begin): an attempt that cannot suspend
        # needs no watcher, since its deadline could only have stopped it at
        # an await that suspends (should it suspend, the watcher starts then).
        started = attempts.begin(actx, defn.fn, call_args)
        if started.done:
            return started.value
    try:
        async with anyio.create_task_group() as tg:

            async def expire() -> None:
                await ctx.clock.sleep_until(deadline_at)
                timed_out.append("schedule_to_close" if overall is not None
                                 and deadline_at >= overall else "start_to_close")
                actx.request_stop(f"{timed_out[0]} timeout")

            tg.start_soon(expire)
            try:
                if started is not None:
                    return await attempts.finish(actx, started)
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
    finally:
        if started is not None:
            started.close()  # a no-op unless the task group failed to start


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
