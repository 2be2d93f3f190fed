"""Reset: repair a run after a fix by continuing it as a new run from a chosen op.

`handle.reset(to_op=..., reason=...)` (Temporal's reset, DBOS's
``fork_workflow``). A failed, timed-out, terminated or cancelled run, or an
open one that is stuck (it is terminated first), continues as a new run of
the same workflow id: the new run gets a copy of every op the old one had
recorded before ``to_op`` was scheduled (their results or failures: a
worker replays them, nothing runs again) and the history events that
recorded them, so its code runs live from ``to_op`` on, with today's code.
Signals delivered before that point are kept as delivered; the others are
delivered again. The old run names the new one (``reset_run_id``) and the
new one names the old one and the op (``reset_from_run_id``,
``reset_from_op``): describe() shows both ways.

Refused: a completed or continued run (nothing to repair: reset the run it
continued as), a run that is not its instance's current one, a child run
(its parent awaits it: reset the parent), an op the run never recorded.
"""

from __future__ import annotations

import json
from typing import Any

from ..driver import Program, Tx, ex, many, placeholders, q, q1
from ..errors import ConfigurationError, RunNotCurrent, WorkflowNotFound
from ..failure import Failure
from ..wakes import Wake
from .closing import close_run
from .events import append_events
from .records import (
    OP_COLUMNS,
    RunStatus,
    StartRequest,
    new_id,
    op_from_row,
    plus,
)
from .runs import get_run, insert_run

#: statuses a run may be reset from (open runs: stuck ones, terminated first)
RESETTABLE = ("pending", "running", "failed", "timed_out", "terminated", "cancelled")


def reset_run(tx: Tx, namespace: str, workflow_id: str, run_id: str | None, to_op: str,
              reason: str, now: float) -> Program[dict[str, Any]]:
    """Continue the run as a new run from `to_op` (see the module docstring)."""
    wf = yield q1("SELECT current_run_id FROM workflows WHERE namespace = ? AND workflow_id = ?"
                  + tx.lock, namespace, workflow_id)
    if wf is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} in namespace {namespace!r}")
    run = yield from get_run(namespace, workflow_id, run_id or wf["current_run_id"])
    if run is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} run {run_id!r} in {namespace!r}")
    if run.run_id != wf["current_run_id"]:
        raise RunNotCurrent(
            f"run {run.run_id} of workflow {workflow_id!r} is not its current run "
            f"({wf['current_run_id']}); reset the current run")
    if run.status not in RESETTABLE:
        hint = (f"reset run {run.continued_run_id}, which it continued as"
                if run.status == RunStatus.CONTINUED else "it has nothing to repair")
        raise ConfigurationError(
            f"workflow {workflow_id!r} run {run.run_id} is {run.status}: only a failed, "
            f"timed-out, terminated, cancelled or stuck (open) run can be reset; {hint}")
    if run.parent_run_id is not None:
        raise ConfigurationError(
            f"workflow {workflow_id!r} is a child of {run.parent_workflow_id!r}, which awaits "
            "this run: reset the parent instead")
    rows = yield q(f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ?", run.run_id)
    ops = {r["op_id"]: op_from_row(r) for r in rows}
    target = ops.get(to_op)
    if target is None or target.scheduled_at is None:
        main = sorted((o for o in ops if o.startswith("0:") and "/" not in o),
                      key=lambda o: int(o.rpartition(":")[2]) if o.rpartition(":")[2].isdigit()
                      else 0)
        raise ConfigurationError(
            f"run {run.run_id} of workflow {workflow_id!r} recorded no op {to_op!r}; its "
            f"main ops are {', '.join(main[:20]) or 'none'}{'...' if len(main) > 20 else ''} "
            "(`durable history ID` shows each op's id)")
    cutoff = target.scheduled_at
    kept = sorted(o.op_id for o in ops.values()
                  if o.op_id != to_op and o.closed and o.closed_at is not None
                  and o.closed_at <= cutoff and not o.op_id.startswith(to_op + "/"))
    what = f"reset to {to_op}: {reason}"
    if run.is_open:  # stuck: revoke its owner's authority first
        yield from close_run(tx, run.run_id, RunStatus.TERMINATED, now, reason=what,
                             failure=Failure.closed_by_request(RunStatus.TERMINATED, what))
    new_run_id = new_id()
    req = StartRequest(
        namespace=run.namespace, workflow_id=run.workflow_id, workflow_type=run.workflow_type,
        task_queue=run.task_queue, input=run.input, id_reuse="",
        execution_timeout=run.execution_timeout, run_timeout=run.run_timeout,
        schedule_id=run.schedule_id, scheduled_at=run.scheduled_at)
    # a fresh execution budget: the old one may be what the run ran out of
    yield from insert_run(tx, req, new_run_id, run.run_number + 1, now,
                          plus(now, run.execution_timeout), new_instance=False)
    yield ex("UPDATE workflows SET closed_reason = NULL, closed_at = NULL, "
             "execution_deadline_at = ? WHERE namespace = ? AND workflow_id = ?",
             plus(now, run.execution_timeout), namespace, workflow_id)
    # the kept history is the old run's builds' record: a worker of another
    # build replays it before taking the new run (the upgrade gate), instead
    # of failing it for review in its executor
    yield ex("UPDATE runs SET reset_from_run_id = ?, reset_from_op = ?, last_build = ? "
             "WHERE run_id = ?", run.run_id, to_op, run.last_build if kept else None,
             new_run_id)
    yield ex("UPDATE runs SET reset_run_id = ? WHERE run_id = ?", new_run_id, run.run_id)
    for start in range(0, len(kept), 400):
        chunk = kept[start:start + 400]
        yield ex(
            "INSERT INTO ops (run_id, op_id, kind, name, status, result, failure, scheduled_at, "
            "closed_at, fire_at, child_workflow_id, child_run_id, interrupted) SELECT ?, op_id, "
            "kind, name, status, result, failure, scheduled_at, closed_at, fire_at, "
            "child_workflow_id, child_run_id, interrupted FROM ops WHERE run_id = ? AND op_id "
            f"IN ({placeholders(len(chunk))})", new_run_id, run.run_id, *chunk)
    inbox_seq = yield from _copy_signals(run.run_id, new_run_id, cutoff)
    if inbox_seq:
        yield ex("UPDATE runs SET inbox_seq = ? WHERE run_id = ?", inbox_seq, new_run_id)
    yield from _copy_events(tx, run.run_id, new_run_id, set(kept), cutoff, now)
    info = {"workflow_id": workflow_id, "run_id": new_run_id, "reset_from_run_id": run.run_id,
            "to_op": to_op, "kept_ops": len(kept), "reason": reason}
    yield from append_events(tx, new_run_id, [("WorkflowReset", dict(info))], now)
    yield from append_events(tx, run.run_id, [("WorkflowResetAsNew", dict(info))], now)
    tx.wake(Wake.runs(run.namespace, run.task_queue))
    return info


def _copy_signals(old: str, new: str, cutoff: float) -> Program[int]:
    """Signals the old run received: those delivered by `cutoff` stay delivered
    where they were (replay delivers them there again); the rest are delivered
    again, live. Updates are not copied (their callers had their answer, or
    an error when the run closed). The highest sequence number copied."""
    rows = yield q("SELECT seq, kind, name, input, sender, received_at, status, delivery, "
                   "frontier, delivered_at FROM inbox WHERE run_id = ? AND kind = 'signal' "
                   "ORDER BY seq", old)
    if not rows:
        return 0
    copied = []
    for r in rows:
        kept = r["delivered_at"] is not None and r["delivered_at"] <= cutoff
        copied.append((new, r["seq"], r["kind"], r["name"], r["input"], r["sender"],
                       r["received_at"], "delivered" if kept else "received",
                       r["delivery"] if kept else None, r["frontier"] if kept else None,
                       r["delivered_at"] if kept else None))
    yield many("INSERT INTO inbox (run_id, seq, kind, name, input, sender, received_at, status, "
               "delivery, frontier, delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               copied)
    return max(int(r["seq"]) for r in rows)


def _copy_events(tx: Tx, old: str, new: str, kept: set[str], cutoff: float,
                 now: float) -> Program[None]:
    """The old run's events up to `cutoff` about what the new run keeps (its ops,
    signals), so that its history replays on its own (`durable.testing.Replayer`)."""
    rows = yield q("SELECT type, recorded_at, data FROM events WHERE run_id = ? AND seq > 1 "
                   "AND recorded_at <= ? ORDER BY seq", old, cutoff)
    events = []
    for r in rows:
        data = json.loads(r["data"])
        op_id = data.get("op_id") if isinstance(data, dict) else None
        if (op_id is None and not r["type"].startswith("Signal")) or (
                op_id is not None and op_id not in kept):
            continue
        events.append((r["type"], data))
    if events:
        yield from append_events(tx, new, events, now)
    return None
