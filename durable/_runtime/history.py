"""A run's records rebuilt from its history alone (for `durable.testing.Replayer`).

The history events carry every outcome replay needs: each op's kind, name and
result or failure, timers' fire times, where signals and updates were
delivered, where a cancellation was delivered. This module turns a list of
events (as `WorkflowHandle.history()` returns them, or their JSON export)
back into the run, op and inbox records the engine replays from storage.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..failure import Failure
from ..store.cancellation import child_cancelled_failure
from ..store.records import (
    HistoryEvent,
    InboxItem,
    OpKind,
    OpRecord,
    OpStatus,
    RunRecord,
    RunStatus,
    dumps,
)

_CLOSED = {
    "WorkflowCompleted": RunStatus.COMPLETED,
    "WorkflowFailed": RunStatus.FAILED,
    "WorkflowCancelled": RunStatus.CANCELLED,
    "WorkflowTerminated": RunStatus.TERMINATED,
    "WorkflowTimedOut": RunStatus.TIMED_OUT,
    "WorkflowContinuedAsNew": RunStatus.CONTINUED,
}

HistoryLike = (
    Sequence[HistoryEvent] | Sequence[Mapping[str, Any]] | Mapping[str, Any] | str | Path
)


def history_to_json(events: Iterable[HistoryEvent], *, indent: int | None = 2) -> str:
    """A history as JSON: a list of ``{"sequence", "type", "recorded_at", "data"}``
    (instants as ISO 8601), which `load_history` (and the Replayer) reads back."""
    return json.dumps([
        {"sequence": e.sequence, "type": e.type,
         "recorded_at": e.recorded_at.isoformat() if isinstance(e.recorded_at, datetime.datetime)
         else e.recorded_at, "data": e.data}
        for e in events
    ], indent=indent, default=str)


def load_history(history: HistoryLike) -> list[HistoryEvent]:
    """History events from `handle.history()`, their JSON export (text, a parsed
    list, or ``{"events": [...]}``), or the path of a file holding that JSON."""
    if isinstance(history, Path) or (isinstance(history, str)
                                     and not history.lstrip().startswith(("[", "{"))):
        path = Path(history)
        if not path.exists():
            raise ConfigurationError(
                f"no history file at {str(path)!r}: pass a path to a JSON export, the JSON "
                "text itself, or the list `await handle.history()` returned"
            )
        history = path.read_text()
    if isinstance(history, str):
        try:
            history = json.loads(history)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"the history is not valid JSON: {exc}") from exc
    if isinstance(history, Mapping):
        if "events" not in history:
            raise ConfigurationError(
                "a history given as a JSON object needs an 'events' list of "
                "{'sequence', 'type', 'recorded_at', 'data'} objects"
            )
        history = history["events"]
    assert not isinstance(history, str | Path)
    events: list[HistoryEvent] = []
    for raw in history:
        if isinstance(raw, HistoryEvent):
            events.append(raw)
            continue
        if not isinstance(raw, Mapping) or "type" not in raw:
            raise ConfigurationError(
                f"a history event must have 'sequence', 'type', 'recorded_at' and 'data', "
                f"got {raw!r}"
            )
        events.append(HistoryEvent(int(raw.get("sequence", len(events) + 1)), str(raw["type"]),
                                   _instant(raw.get("recorded_at")), dict(raw.get("data") or {})))
    if not events or events[0].type != "WorkflowStarted":
        raise ConfigurationError(
            "a history starts with its WorkflowStarted event; this one does not (pass a "
            "whole run's history)"
        )
    return sorted(events, key=lambda e: e.sequence)


def _instant(value: Any) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, int | float):
        return datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    if isinstance(value, str):
        return datetime.datetime.fromisoformat(value)
    raise ConfigurationError(f"recorded_at must be an ISO 8601 instant, got {value!r}")


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return _instant(value).timestamp()


@dataclass
class HistoryRecords:
    """What replay needs, rebuilt from a history."""

    run: RunRecord
    ops: dict[str, OpRecord] = field(default_factory=dict)
    inbox: list[InboxItem] = field(default_factory=list)
    close_type: str | None = None  # the event that closed the run, if it closed
    closed_by_code: bool = False  # the code's own return (or failure) closed it


def records_from_history(events: Sequence[HistoryEvent]) -> HistoryRecords:
    """Rebuild the run, its ops and its inbox from its history events."""
    start = events[0]
    data = start.data
    started = start.recorded_at.timestamp()
    run = RunRecord(
        run_id=str(data.get("run_id") or "replayed-run"), namespace="default",
        workflow_id=str(data.get("workflow_id") or "replayed-workflow"),
        workflow_type=str(data["workflow_type"]), run_number=int(data.get("run_number") or 1),
        task_queue=str(data.get("task_queue") or "default"), status=RunStatus.RUNNING,
        input=dumps(data.get("input") or []) or "[]", created_at=started, started_at=started,
        parent_workflow_id=data.get("parent_workflow_id"),
        parent_run_id=data.get("parent_run_id"),
        schedule_id=data.get("schedule_id"), scheduled_at=_epoch(data.get("scheduled_at")),
    )
    out = HistoryRecords(run)
    builder = _Builder(out)
    for event in events[1:]:
        builder.apply(event)
    return out


class _Builder:
    def __init__(self, out: HistoryRecords) -> None:
        self.out = out
        self.ops = out.ops
        self.delivered = False  # a cancellation was delivered
        self.signals: dict[int, InboxItem] = {}
        self.updates: dict[str, InboxItem] = {}

    def op(self, op_id: str, kind: str, name: str, at: float, **fields: Any) -> OpRecord:
        record = self.ops.get(op_id)
        if record is None:
            record = self.ops[op_id] = OpRecord(op_id, kind, name, OpStatus.SCHEDULED,
                                                scheduled_at=at, **fields)
        return record

    def close(self, op_id: str, status: str, at: float, *, result: Any = None,
              failure: Failure | None = None, interrupted: bool = False) -> None:
        record = self.ops.get(op_id)
        if record is None or record.closed:  # a late report: the first outcome counts
            return
        record.status = status
        record.result = dumps(result) if status == OpStatus.COMPLETED else None
        record.failure = failure
        record.closed_at = at
        record.interrupted = record.interrupted or interrupted

    def interrupt(self, op_id: str) -> None:
        record = self.ops.get(op_id)
        if record is not None:
            record.interrupted = True

    def apply(self, event: HistoryEvent) -> None:
        t, d, at = event.type, event.data, event.recorded_at.timestamp()
        op_id = str(d.get("op_id"))
        per_op = d.get("scope") == "operation"
        if t == "ActivityScheduled":
            kind = OpKind.LOCAL_ACTIVITY if d.get("local") else OpKind.ACTIVITY
            self.op(op_id, kind, d["activity_type"], at, task_id=d.get("task_id"))
        elif t == "ActivityCompleted":
            self.close(op_id, OpStatus.COMPLETED, at, result=d.get("result"))
        elif t in ("ActivityFailed", "ActivityTimedOut"):
            self.close(op_id, OpStatus.FAILED, at, failure=Failure.maybe(d.get("failure")))
        elif t == "ActivityCancelled":
            details = {k: d[k] for k in ("policy", "stop_receipt", "scope") if d.get(k)}
            failure = Failure.activity_cancelled(
                f"activity {d.get('activity_type')} cancelled", **details)
            # the run's cancellation closed it here (a local or not-yet-started
            # activity); a stop receipt after a request (no policy) closes it as the
            # request left it, and a run's close fences it (fenced)
            run_level = not per_op and not d.get("fenced") and "policy" in d
            self.close(op_id, OpStatus.CANCELLED, at, failure=failure, interrupted=run_level)
        elif t == "ActivityCancelRequested":
            if not per_op:
                self.interrupt(op_id)
            if d.get("policy") == "try_cancel":  # the await ended here, not at the receipt
                details = {k: d[k] for k in ("policy", "scope") if d.get(k)}
                self.close(op_id, OpStatus.CANCELLED, at, interrupted=not per_op,
                           failure=Failure.activity_cancelled(
                               f"activity {d.get('activity_type')} cancelled", **details))
        elif t == "TimerScheduled":
            self.op(op_id, OpKind.TIMER, "sleep", at, fire_at=_epoch(d.get("fire_at")))
        elif t == "TimerFired":
            self.close(op_id, OpStatus.COMPLETED, at)
        elif t == "TimerCancelled":
            self.close(op_id, OpStatus.CANCELLED, at, failure=Failure("cancelled", "timer "
                       "cancelled"), interrupted=d.get("reason") == "cancellation delivered")
        elif t == "ChildWorkflowScheduled":
            self.op(op_id, OpKind.CHILD, d["workflow_type"], at,
                    child_workflow_id=d.get("child_workflow_id"),
                    child_run_id=d.get("child_run_id"))
        elif t == "ChildWorkflowCompleted":
            self.close(op_id, OpStatus.COMPLETED, at, result=d.get("result"))
        elif t == "ChildWorkflowFailed":
            if op_id not in self.ops:  # the child's id was taken: never scheduled
                self.op(op_id, OpKind.CHILD, str(d.get("workflow_type")), at,
                        child_workflow_id=d.get("child_workflow_id"))
            self.close(op_id, OpStatus.FAILED, at, failure=Failure.maybe(d.get("failure")))
        elif t == "ChildCancellationRequested":
            self._child_cancellation(op_id, d, at, per_op)
        elif t == "ConditionScheduled":
            self.op(op_id, OpKind.CONDITION, "wait_condition", at,
                    fire_at=_epoch(d.get("fire_at")))
        elif t in ("ConditionSatisfied", "ConditionTimedOut"):
            record = self.ops.get(op_id)
            if record is not None and not record.closed:
                record.status, record.closed_at = OpStatus.COMPLETED, at
                record.result = "true" if t == "ConditionSatisfied" else "false"
        elif t == "ConditionCancelled":
            self.close(op_id, OpStatus.CANCELLED, at, failure=Failure("cancelled", "condition "
                       "wait cancelled"), interrupted=True)
        elif t == "MarkerRecorded":
            self.op(op_id, OpKind.MARKER, d["name"], at)
            self.close(op_id, OpStatus.COMPLETED, at)
        elif t in ("ExternalSignalSent", "ExternalCancellationRequested"):
            name = (f"signal:{d['name']}" if t == "ExternalSignalSent"
                    else "request_cancellation")
            self.op(op_id, OpKind.EXTERNAL, name, at)
            refusal = Failure.maybe(d.get("failure"))
            if refusal is not None:
                self.close(op_id, OpStatus.FAILED, at, failure=refusal)
            elif t == "ExternalSignalSent":
                self.close(op_id, OpStatus.COMPLETED, at, result={"run_id": d.get("run_id")})
            else:
                self.close(op_id, OpStatus.COMPLETED, at,
                           result={"accepted": d.get("accepted"), "request": d.get("request")})
        else:
            self._run_event(t, d, at)

    def _child_cancellation(self, op_id: str, d: Mapping[str, Any], at: float,
                            per_op: bool) -> None:
        record = self.ops.get(op_id)
        if record is None:
            return
        policy = d.get("policy")
        if per_op:
            if policy in ("try_cancel", "abandon"):
                self.close(op_id, OpStatus.CANCELLED, at,
                           failure=child_cancelled_failure(record, str(policy)))
            return
        self.interrupt(op_id)
        if policy == "try_cancel":
            self.close(op_id, OpStatus.CANCELLED, at, interrupted=True, failure=Failure(
                "cancelled", f"child {record.child_workflow_id} asked to cancel; not waited for",
                "durable.ChildWorkflowFailed", details={"policy": "try_cancel"}))

    def _run_event(self, t: str, d: Mapping[str, Any], at: float) -> None:
        run = self.out.run
        if t == "CancellationRequested":
            run.cancellation = dict(d, requested_at=_epoch(d.get("requested_at")),
                                    deadline_at=_epoch(d.get("deadline_at")))
        elif t == "CancellationDelivered" and run.cancellation is not None:
            self.delivered = True
            run.cancellation.update(delivered_at=_epoch(d.get("delivered_at")) or at,
                                    boundary=d.get("boundary") or [],
                                    deliveries_before=d.get("deliveries_before") or 0)
        elif t == "SignalReceived":
            item = InboxItem(run.run_id, int(d["seq"]), "signal", str(d["name"]),
                             dumps(d.get("args") or []) or "[]", at, "received")
            self.signals[item.seq] = item
            self.out.inbox.append(item)
        elif t == "SignalDelivered":
            signal = self.signals.get(int(d["seq"]))
            if signal is not None:
                signal.status, signal.delivery = "delivered", int(d["delivery"])
                signal.frontier = list(d.get("frontier") or [])
                signal.delivered_at = _epoch(d.get("delivered_at")) or at
        elif t == "UpdateAccepted":
            item = InboxItem(run.run_id, int(d.get("seq") or 0), "update", str(d["name"]),
                             dumps(d.get("args") or []) or "[]", at, "accepted",
                             update_id=d.get("update_id"), delivery=int(d["delivery"]),
                             frontier=list(d.get("frontier") or []),
                             delivered_at=_epoch(d.get("delivered_at")) or at)
            self.updates[str(d.get("update_id"))] = item
            self.out.inbox.append(item)
        elif t == "UpdateCompleted":
            update = self.updates.get(str(d.get("update_id")))
            if update is not None:
                update.status = str(d.get("status") or "completed")
                update.result = dumps(d.get("result"))
                update.failure = Failure.maybe(d.get("failure"))
        elif t == "WorkflowNeedsReview":
            run.needs_review = True
        elif t in _CLOSED:
            run.status = _CLOSED[t]
            run.closed_at = at
            self.out.close_type = t
            reason = d.get("reason")
            self.out.closed_by_code = t in ("WorkflowCompleted", "WorkflowContinuedAsNew") or (
                t == "WorkflowFailed" and reason == "failed") or (
                t == "WorkflowCancelled" and self.delivered and reason == "cancelled")
