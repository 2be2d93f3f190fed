"""Idempotent units: a batch whose every item is recorded by its stable key.

``await workflow.units(items, key=..., handler=activity)`` runs the activity
once per item as an op named by the item's key (``<batch op>/<key>``), not by
its position: a restart skips every unit already confirmed and runs the
rest, and reordering the items between deploys changes nothing. A unit
whose effect cannot be confirmed (its worker died mid-call, the call ran
past its start-to-close or heartbeat timeout) is not retried: its outcome is
recorded ``unknown`` and, once the other units are done, the run goes to
review (`describe()["status"] == "unknown"`) instead of guessing; an
operator decides with ``handle.retry_after_review(units="rerun" |
"confirm")``. `describe()["progress"]` shows ``{"done", "total"}`` while the
units run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import _validate
from .._registry import activity_defn_of
from ..errors import ActivityFailed, ConfigurationError, UnitOutcomeUnknown
from ..failure import Failure
from ..options import ActivityOptions
from ..store.records import OpKind
from ..store.writes import EndUnits, StartUnits
from . import caps
from .context import WorkflowContext
from .ops import execute_activity, go_live, live_gate
from .state import TaskState


@dataclass
class UnitsResult:
    """What a batch of units did: results by key, and failures by key.

    A unit that raised (its handler said it failed: nothing happened) is in
    `failed`; units whose outcome is unknown never come back here: the run
    goes to review first.
    """

    done: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, ActivityFailed] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.done) + len(self.failed)


async def run_units(ctx: WorkflowContext, state: TaskState, items: Iterable[Any],
                    key: Callable[[Any], str], handler: Callable[..., Any] | str,
                    options: ActivityOptions, concurrency: int) -> UnitsResult:
    """Run `handler(item)` for every item, each recorded by `key(item)`."""
    items = list(items)
    keys = [_validate.name(key(item), "unit key") for item in items]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ConfigurationError(
            f"unit keys must be unique within a batch; {duplicates[:5]} appear more than once")
    _validate.integer(concurrency, "units concurrency", maximum=10_000)
    defn = activity_defn_of(handler)
    name = defn.name if defn is not None else str(handler)
    batch = state.next_op_id()
    record = ctx.recorded_op(batch, OpKind.UNITS, name)
    if record is None:
        caps.time_left(ctx, state)  # no batch starts past its phase's deadline
        await live_gate(ctx)
        go_live(state)
        await ctx.commit([StartUnits(batch, name, len(items))])
    result = UnitsResult()
    unknown: list[str] = []
    limiter = anyio.Semaphore(concurrency)

    async def one(item: Any, unit_key: str) -> None:
        async with limiter:
            try:
                result.done[unit_key] = await execute_activity(
                    ctx, state, handler, (item,), options, op_id=f"{batch}/{unit_key}",
                    unit=True)
            except ActivityFailed as exc:
                if exc.failure.get("unit_outcome") == "unknown":
                    unknown.append(unit_key)
                else:
                    result.failed[unit_key] = exc

    async def tracked(item: Any, unit_key: str) -> None:
        ctx.parking.task_started()  # counted like a workflow task for cancellation delivery
        try:
            await one(item, unit_key)
        finally:
            ctx.parking.task_finished()

    if concurrency == 1:
        for item, unit_key in zip(items, keys, strict=True):
            await one(item, unit_key)
    else:
        async with anyio.create_task_group() as tg:
            for item, unit_key in zip(items, keys, strict=True):
                tg.start_soon(tracked, item, unit_key)
        # the same order whatever order the units finished in
        result.done = {k: result.done[k] for k in keys if k in result.done}
        result.failed = {k: result.failed[k] for k in keys if k in result.failed}
    if unknown:
        unknown.sort()
        raise UnitOutcomeUnknown(
            Failure.units_unknown(unknown, name, ctx.run.workflow_id).message or "", unknown,
            name)
    known = ctx.recorded.get(batch)
    if known is None or not known.closed:
        await ctx.commit([EndUnits(batch, "completed", len(result.done))])
    return result
