"""What the pages show, built from the control plane's documented JSON shapes.

Pure functions from `describe()`, `history()` events (wire form: ISO 8601
instants) and run summaries to plain dicts the templates render (the
cascade's tree is `cascade.py`). They read keys with ``.get`` so that a key a newer engine
adds never breaks a page, and they never turn missing evidence into a
reassuring value: an attempt without an outcome is "running" only while
describe() lists it as pending, a stop without a receipt is "not verified".

Time is always shown twice, as in the CLI (`durable.present`, shared): the
absolute UTC instant and where it stands relative to now ("in 4m 12s",
"3s late"); the page's script keeps the relative part current.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from markupsafe import Markup

from ... import present as _fmt
from ... import present_ops as _ops
from ...store.records import LISTED_STATUSES
from ...store.workers import HOLDER_KEYS

OPEN_STATUSES = _fmt.OPEN_STATUSES
STATUSES = LISTED_STATUSES
LIFECYCLES = tuple("requested delivered cleaning_up cancelled deadline_expired terminated".split())
# The four activity timeouts, in the order they can fire.
ACTIVITY_TIMEOUTS = (
    ("schedule_to_start", "Schedule-to-start",
     "from scheduling (or a retry becoming available) until a worker claims the attempt; "
     "restarts for each retry"),
    ("start_to_close", "Start-to-close",
     "one attempt, from claim to result; restarts for each retry"),
    ("schedule_to_close", "Schedule-to-close",
     "everything, all attempts and the waits between them; never restarts, always terminal"),
    ("heartbeat", "Heartbeat",
     "the longest gap between heartbeats; extended by each recorded heartbeat"),
)
_TERMINAL_ACTIVITY = {"ActivityCompleted": "completed", "ActivityFailed": "failed",
                      "ActivityTimedOut": "timed_out", "ActivityCancelled": "cancelled"}


def is_open(status: Any) -> bool:
    return status in OPEN_STATUSES


def filled(data: Any, keys: Iterable[str]) -> dict[str, Any]:
    """A copy of a mapping with each of `keys` present (None when absent), so
    templates can read every documented key of a shape an older or newer
    engine returned without one."""
    out = dict(data) if isinstance(data, Mapping) else {}
    for key in keys:
        out.setdefault(key, None)
    return out


SUMMARY_KEYS: tuple[str, ...] = (  # blocked_build: waiting for a build that replays it
    "workflow_id", "run_id", "workflow_type", "status", "run_number", "task_queue", "created_at",
    "started_at", "closed_at", "closed_reason", "waiting", "holder", "blocked_build")
_RUN_KEYS = ("run_id", "run_number", "status", "run_timeout_seconds", "execution_deadline_at",
             "run_deadline_at", "started_at", "closed_at", "task_queue", "owner", "epoch",
             "needs_review", "parent_workflow_id", "parent_run_id", "parent_deleted",
             "continued_run_id", "started_build", "last_build", "reset_from_run_id",
             "reset_from_op", "reset_run_id")
_REQUEST_KEYS = ("request_id", "root_request_id", "parent_request_id", "root_workflow_id",
                 "root_run_id", "reason", "requester", "source", "requested_at", "deadline_at",
                 "cleanup_timeout_seconds", "lifecycle", "delivered_at", "boundary",
                 "cleanup_outcome", "closed_at")
_INFO_KEYS = ("workflow_id", "workflow_type", "namespace", "status", "reason", "closed_reason",
              "execution_timeout_seconds", "run_count", "memo")
_OP_KEYS = ("op_id", "kind", "name", "scheduled_at", "fire_at", "child_workflow_id",
            "task_status", "attempt", "heartbeat_details", "last_failure", "child_status",
            "child_closed_at")
_RECEIVED_KEYS = ("seq", "kind", "name", "update_id", "sender", "received_at", "status",
                  "delivered_at")
_RECEIPT_KEYS = ("kind", "worker_id", "attempt", "acknowledged_at", "confirmed", "exit_code",
                 "received_after_deadline", "at")


#: the run page's Worker line, in `durable describe`'s words (one source)
owner_text = _ops.owner_text


def with_holder(info: dict[str, Any], holder: Any, owner: Any = None) -> dict[str, Any]:
    """``info["holder"]``: the wire's record of the worker that holds an open
    run that waits for nothing while none of its activities runs (its code is
    due to run on that worker; `durable.present.holder`, whose keys it has),
    the id None when no worker holds it yet; None otherwise. "It is busy" was
    said even when the worker holding it had been killed: the page says when
    that worker was last seen instead. ``info["owner_presence"]``: the wire's
    record of the run's owner, None when the wire has none (the page then
    names the owner alone)."""
    info["holder"] = filled(holder, HOLDER_KEYS) if isinstance(holder, Mapping) else None
    info["owner_presence"] = filled(owner, _ops.OWNER_KEYS) if isinstance(owner, Mapping) else None
    return info


def describe_view(info: Mapping[str, Any]) -> dict[str, Any]:
    """describe() with every key the pages read (phase and progress stay optional:
    their absence means the engine does not report them)."""
    out = filled(info, _INFO_KEYS)
    out["run"] = filled(info.get("run"), _RUN_KEYS)
    # open by the run's own status: a run waiting for review ("needs_review",
    # "unknown") is still open, and can still be cancelled or terminated
    out["open"] = is_open(out["run"]["status"]) or is_open(out["status"])
    cancellation = info.get("cancellation")
    out["cancellation"] = filled(cancellation, _REQUEST_KEYS) \
        if isinstance(cancellation, Mapping) else None
    out["pending_operations"] = [filled(op, _OP_KEYS) for op in
                                 info.get("pending_operations") or [] if isinstance(op, Mapping)]
    out["failures"] = [f for f in info.get("failures") or [] if isinstance(f, Mapping)]
    blocked = info.get("blocked")
    out["blocked"] = filled(blocked, ("build_id", "divergence", "build_ids", "last_build")) \
        if isinstance(blocked, Mapping) else None
    phase = info.get("phase")
    if isinstance(phase, Mapping):
        out["phase"] = filled(phase, ("name", "started_at", "deadline_at"))
    out["received"] = [filled(r, _RECEIVED_KEYS) for r in info.get("received") or []
                       if isinstance(r, Mapping)]
    if "waiting_for" in info:  # absent: the engine does not report it
        waiting = info.get("waiting_for")
        out["waiting_for"] = dict(waiting) if isinstance(waiting, Mapping) else None
    return out



# ---------------------------------------------------------------- time


def when(value: Any, now: datetime) -> Markup:
    """``<time>`` with the UTC instant and ``(4m ago)``; the script refreshes the latter."""
    moment = _fmt.instant(value)
    if moment is None:
        return Markup('<span class="none">-</span>')
    return Markup('<time datetime="{iso}" data-when>{text} <span class="rel">({rel})</span>'
                  "</time>").format(iso=moment.isoformat(), text=_fmt.absolute(moment),
                                    rel=_fmt.relative(moment, now))


def deadline(value: Any, now: datetime, open_: bool, ended: Any = None,
             cleanup: Any = "", attempt: Mapping[str, Any] | None = None,
             kind: str = "", closed: Any = None, claimed: Any = None) -> Markup:
    """A deadline and where it stands: ``in 4m 12s`` (ahead), ``3s late`` (still open
    past it: marked with a word and a sign, not only red); once closed, ``met,
    29s to spare`` or ``missed by 3s`` by `ended` (fixed: the script leaves it).
    A cleanup deadline passes its `cleanup` outcome: a cleanup that did not run
    to its end never reads "met" (`durable.present.cleanup_deadline_state`); one
    of an activity `attempt` (its `kind`) by how the attempt ended, a run's
    (`kind`) by how the run `closed` (``(status, closed_reason)``), an activity's
    schedule-to-start by when a worker `claimed` the attempt it awaited."""
    moment = _fmt.instant(value)
    if moment is None:
        return Markup('<span class="none">none</span>')
    end = _fmt.instant(attempt.get("ended_at")) if attempt is not None else None
    claim = _fmt.instant(claimed)
    if claim is not None:
        text, state = _fmt.claim_deadline_state(moment, claim)
    elif attempt is not None:
        text, state = _fmt.attempt_deadline_state(
            moment, now, open_, end, kind, attempt.get("timeout_kind"),
            current=bool(attempt.get("heartbeat_deadline_current")),
            what=str(attempt.get("what") or "attempt"))
    else:
        text, state = _fmt.judged_deadline(moment, now, open_, _fmt.instant(ended),
                                           cleanup=cleanup, closed=closed, kind=kind)
    sign = Markup('<span class="sign" aria-hidden="true">⚠ </span>') if state in (
        "late", "missed", "cut") else ""
    judged = end if closed is None else _fmt.instant(ended)  # what the script must leave
    # an attempt's heartbeat deadline moves with each heartbeat, which the page
    # does not see: the script must not count it down to "late"
    extended = attempt is not None and kind == "heartbeat"  # (current or first)
    if state in ("met", "missed", "cut") or (judged is not None and not open_) or extended:
        return Markup(
            '<time datetime="{iso}" class="deadline {state}">{text} <span class="rel">{sign}'
            '({rel})</span></time>'
        ).format(iso=moment.isoformat(), state=state, text=_fmt.absolute(moment), sign=sign,
                 rel=text)
    return Markup(
        '<time datetime="{iso}" data-deadline data-open="{open}" class="deadline {state}">'
        '{text} <span class="rel">{sign}({rel})</span></time>'
    ).format(iso=moment.isoformat(), open="1" if open_ else "0", state=state,
             text=_fmt.absolute(moment), sign=sign, rel=text)


def seconds_text(value: Any) -> str:
    return "not set" if value is None else _fmt.seconds_text(value)


def took(start: Any, end: Any, now: datetime) -> str:
    """How long something ran (``so far`` while it has no end: then a ``<time
    data-since>`` the page's script counts up with the deadlines, so every
    time on the page ticks together)."""
    a, b = _fmt.instant(start), _fmt.instant(end)
    if a is None:
        return "-"
    if b is None:
        return Markup('<time datetime="{iso}" data-since>{text} so far</time>').format(
            iso=a.isoformat(), text=_fmt.duration((now - a).total_seconds()))
    return _fmt.duration((b - a).total_seconds())


def pretty(value: Any) -> str:
    """JSON for a ``<pre>`` block (autoescaped by the template)."""
    return json.dumps(_fmt.jsonable(value), indent=2, ensure_ascii=False, sort_keys=False)


def compact(value: Any, limit: int = 120) -> str:
    return _fmt.compact(value, limit)


# ---------------------------------------------------------------- failures


def failure_chain(failure: Any) -> list[dict[str, Any]]:
    """A failure and its causes (``cause`` nests), outermost first, as rows:
    the exception type, category, message, timeout kind and deadline, the
    other recorded details, and the traceback when one was kept."""
    chain: list[dict[str, Any]] = []
    seen = 0
    while isinstance(failure, Mapping) and seen < 32:
        seen += 1
        known = {"failure_category", "exception_class", "message", "cause", "traceback",
                 "cause_type", "cause_message", "timeout_kind", "deadline_at"}
        chain.append({
            "exception_class": failure.get("exception_class") or failure.get("cause_type")
            or "-",
            "category": failure.get("failure_category"),
            "message": failure.get("message") or failure.get("cause_message") or "",
            "timeout_kind": failure.get("timeout_kind"),
            "deadline_at": failure.get("deadline_at"),
            "details": {k: v for k, v in failure.items() if k not in known},
            "traceback": failure.get("traceback"),
        })
        failure = failure.get("cause")
    return chain


def failure_message(failure: Any) -> str:
    if isinstance(failure, Mapping):
        return str(failure.get("message") or failure.get("failure_category") or "failed")
    return str(failure or "")


# ---------------------------------------------------------------- run


def run_timeouts(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's configured time limits with their computed deadlines."""
    run = info.get("run") or {}
    rows = [
        {"name": "Execution timeout", "configured": info.get("execution_timeout_seconds"),
         "deadline": run.get("execution_deadline_at"), "kind": "execution_timeout",
         "scope": "the whole workflow instance, across continue-as-new (computed once, at "
                  "the start)"},
        {"name": "Run timeout", "configured": run.get("run_timeout_seconds"),
         "deadline": run.get("run_deadline_at"), "kind": "run_timeout",
         "scope": "this run (computed again for each run)"},
    ]
    cancellation = info.get("cancellation")
    if isinstance(cancellation, Mapping):
        rows.append({"name": "Cleanup timeout",
                     "configured": cancellation.get("cleanup_timeout_seconds"),
                     "deadline": cancellation.get("deadline_at"),
                     "scope": "the cooperative cancellation's cleanup (never extended)",
                     "open": bool(info.get("open", is_open(info.get("status"))))
                     and cancellation.get("lifecycle") in ("requested", "delivered",
                                                           "cleaning_up")})
    if isinstance(cancellation, Mapping):
        rows[-1]["ended"] = cancellation.get("closed_at")
        rows[-1]["cleanup"] = _fmt.cleanup_of(cancellation)
        if rows[-1]["configured"] is None and cancellation.get("parent_request_id"):
            rows[-1]["configured"] = "its parent's request's deadline"  # was "not set"
    for row in rows:
        row.setdefault("open", bool(info.get("open", is_open(info.get("status")))))
        row.setdefault("ended", run.get("closed_at"))
        row.setdefault("cleanup", "")
        row.setdefault("kind", "")  # the cleanup's is judged by its outcome instead
        row["closed"] = (run.get("status"), info.get("closed_reason")) if row["kind"] else None
    return rows


def children(events: Iterable[Mapping[str, Any]],
             pending: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Child workflows the run started (ChildWorkflowScheduled) and how they ended:
    from the history, or, for a child whose end the parent never heard (the
    parent closed first), from the child's own record (`pending`)."""
    found: dict[str, dict[str, Any]] = {}
    for event in events:
        data = event.get("data") or {}
        child_id = data.get("child_workflow_id")
        if not child_id:
            continue
        kind = event.get("type")
        if kind == "ChildWorkflowScheduled":
            found[child_id] = {
                "workflow_id": child_id, "run_id": data.get("child_run_id"),
                "workflow_type": data.get("workflow_type"),
                "cancellation": data.get("cancellation"),
                "parent_close_policy": data.get("parent_close_policy"),
                "outcome": None, "scheduled_at": event.get("recorded_at"),
            }
        elif kind in ("ChildWorkflowCompleted", "ChildWorkflowFailed") and child_id in found:
            found[child_id]["outcome"] = data.get("status") or (
                "completed" if kind == "ChildWorkflowCompleted" else "failed")
            if data.get("child_run_id"):
                found[child_id]["run_id"] = data.get("child_run_id")
    for op in pending:
        child = found.get(str(op.get("child_workflow_id")))
        if child is not None and child["outcome"] is None and op.get("child_closed_at"):
            child["outcome"] = op.get("child_status")
    return list(found.values())


def activities(events: Iterable[Mapping[str, Any]],
               pending: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """One row per activity the run scheduled: its attempts and how it stands."""
    rows: dict[str, dict[str, Any]] = {}
    for event in events:
        data = event.get("data") or {}
        op_id = data.get("op_id")
        kind = str(event.get("type"))
        if not op_id or not kind.startswith("Activity"):
            continue
        if kind == "ActivityScheduled":
            rows[op_id] = {"op_id": op_id, "activity_type": data.get("activity_type"),
                           "local": bool(data.get("local")), "attempts": 0,
                           "status": "scheduled", "timeout_kind": None,
                           "scheduled_at": event.get("recorded_at"), "closed_at": None}
            continue
        row = rows.get(op_id)
        if row is None:
            continue
        attempt = data.get("attempt")
        if isinstance(attempt, int):
            row["attempts"] = max(row["attempts"], attempt)
        if kind == "ActivityStarted":
            row["status"] = "running"
        elif kind == "ActivityRetryScheduled":
            row["status"] = "retrying"
        elif kind in _TERMINAL_ACTIVITY:
            row["status"] = _TERMINAL_ACTIVITY[kind]
            row["timeout_kind"] = data.get("timeout_kind")
            row["closed_at"] = event.get("recorded_at")
        elif _closed_by_request(kind, data):
            row["status"], row["closed_at"] = "cancelled", event.get("recorded_at")
    for op in pending:
        row = rows.get(str(op.get("op_id")))
        if row is not None and op.get("task_status"):
            row["status"] = str(op.get("task_status"))
    return list(rows.values())


def _closed_by_request(kind: Any, data: Mapping[str, Any]) -> bool:
    """A stop asked with the try_cancel policy closes the activity's op there
    (the workflow stops waiting); its attempt may still be stopping."""
    return kind == "ActivityCancelRequested" and data.get("policy") == "try_cancel"


_ACTIVITY_ENDS = ("ActivityCompleted", "ActivityFailed", "ActivityTimedOut", "ActivityCancelled")


def activity_detail(events: Sequence[Mapping[str, Any]], op_id: str,
                    pending: Sequence[Mapping[str, Any]], now: datetime,
                    ) -> dict[str, Any] | None:
    """Everything recorded about one activity: its options (retry policy, the four
    timeouts and their deadlines, cancellation policy) and each attempt, with its
    worker, deadlines, outcome, failure, stop receipt and heartbeat details."""
    mine = [e for e in events if (e.get("data") or {}).get("op_id") == op_id]
    scheduled = next((e for e in mine if e.get("type") == "ActivityScheduled"), None)
    if scheduled is None:
        return None
    sdata = scheduled.get("data") or {}
    attempts: dict[int, dict[str, Any]] = {}

    def attempt(n: Any) -> dict[str, Any]:
        number = n if isinstance(n, int) else max(attempts, default=1)
        return attempts.setdefault(number, {
            "attempt": number, "started_at": None, "worker_id": None,
            "start_to_close_deadline": None, "heartbeat_deadline": None, "ended_at": None,
            "outcome": None, "timeout_kind": None, "failure": None, "result": None,
            "has_result": False, "next_attempt_at": None, "stop_requested_at": None,
            "stop_receipt": None, "refused": None, "released": None,
            "heartbeat_details": None, "notes": [],
        })

    schedule_to_start_deadline = sdata.get("schedule_to_start_deadline")
    outcome: str = "scheduled"
    final_failure: Any = None
    claimed_at: Any = None  # when a worker claimed the attempt awaited last (schedule-to-start)
    for event in mine:
        kind, data, at = event.get("type"), event.get("data") or {}, event.get("recorded_at")
        if kind == "ActivityStarted":
            claimed_at = at
            a = attempt(data.get("attempt"))
            a.update(started_at=at, worker_id=data.get("worker_id"),
                     start_to_close_deadline=data.get("start_to_close_deadline"),
                     heartbeat_deadline=data.get("heartbeat_deadline"))
            outcome = "running"
        elif kind == "ActivityRetryScheduled":
            claimed_at = None  # the next attempt awaits a worker
            a = attempt(data.get("failed_attempt"))
            a.update(ended_at=at, failure=data.get("failure"),
                     timeout_kind=data.get("timeout_kind"),
                     outcome="timed_out" if data.get("timeout_kind") else "failed",
                     next_attempt_at=data.get("next_attempt_at"))
            if data.get("schedule_to_start_deadline"):
                schedule_to_start_deadline = data.get("schedule_to_start_deadline")
            outcome = "retrying"
        elif kind in ("ActivityTimedOut", "ActivityFailed", "ActivityCompleted"):
            a = attempt(data.get("attempt"))
            a.update(ended_at=at, outcome=_TERMINAL_ACTIVITY[str(kind)])
            if kind == "ActivityCompleted":
                a.update(result=data.get("result"), has_result=True)
            else:
                a.update(failure=data.get("failure"), timeout_kind=data.get("timeout_kind"))
                final_failure = data.get("failure")
            outcome = _TERMINAL_ACTIVITY[str(kind)]
        elif kind == "ActivityCancelled":
            a = attempt(data.get("attempt"))
            if a["outcome"] is None:
                a.update(ended_at=at, outcome="cancelled")
            if isinstance(data.get("stop_receipt"), Mapping):
                a["stop_receipt"] = filled(data.get("stop_receipt"), _RECEIPT_KEYS)
            if data.get("reason"):
                a["notes"].append(f"cancelled: {data.get('reason')}"
                                  + (" (attempt fenced)" if data.get("fenced") else ""))
            outcome = "cancelled"
        elif kind == "ActivityCancelRequested":
            attempt(data.get("attempt"))["stop_requested_at"] = at
            if _closed_by_request(kind, data):
                outcome = "cancelled"
        elif kind == "ActivityStopReceipt" and isinstance(data.get("stop_receipt"), Mapping):
            a = attempt(data.get("attempt"))
            a["stop_receipt"] = filled(data.get("stop_receipt"), _RECEIPT_KEYS)
            if a["outcome"] is None:  # it stopped as asked (try_cancel closed the op)
                a.update(ended_at=at, outcome="cancelled")
        elif kind == "ActivityResultRefused":
            attempt(data.get("attempt"))["refused"] = data.get("reason")
        elif kind == "ActivityAttemptReleased":
            a = attempt(data.get("attempt"))
            a.update(ended_at=at, outcome="released", released=data.get("reason"))
    op = next((p for p in pending if p.get("op_id") == op_id), None)
    if op is not None:
        if op.get("attempt"):
            a = attempt(op.get("attempt"))
            a["heartbeat_details"] = op.get("heartbeat_details")
            if op.get("heartbeat_deadline"):  # where its heartbeats have moved it now
                a["heartbeat_deadline"] = op.get("heartbeat_deadline")
                a["heartbeat_deadline_current"] = True
            if a["outcome"] is None:
                a["outcome"] = str(op.get("task_status") or "running")
        if op.get("task_status"):
            outcome = str(op.get("task_status"))
    for a in attempts.values():
        if a["outcome"] is None:
            # no outcome recorded and describe() does not list it as running
            a["outcome"] = "running" if op is not None else "unknown"
        # an attempt of unknown outcome has no end to count to ("so far" would grow forever)
        a["duration"] = (took(a["started_at"], a["ended_at"], now)
                         if a["started_at"] and a["outcome"] != "unknown" else "-")
    policy = sdata.get("retry_policy") if isinstance(sdata.get("retry_policy"), Mapping) else None
    deadlines = {"schedule_to_start": schedule_to_start_deadline,
                 "schedule_to_close": sdata.get("schedule_to_close_deadline")}
    timeouts = []
    latest = attempts[max(attempts)] if attempts else None
    if latest is not None:
        deadlines["start_to_close"] = latest["start_to_close_deadline"]
        deadlines["heartbeat"] = latest["heartbeat_deadline"]
    for key, label, scope in ACTIVITY_TIMEOUTS:
        timeouts.append({"kind": key, "name": label, "scope": scope,
                         "configured": sdata.get(f"{key}_timeout"),
                         "deadline": deadlines.get(key),
                         "deadline_of": "latest attempt" if key in ("start_to_close", "heartbeat")
                         else "activity"})
    # how the activity ended (its last of `_ACTIVITY_ENDS`): its own deadlines go by it
    closing = next((e for e in reversed(mine) if e.get("type") in _ACTIVITY_ENDS), None)
    ended = None if closing is None or op is not None else {
        "what": "activity", "ended_at": closing.get("recorded_at"),
        "timeout_kind": (closing.get("data") or {}).get("timeout_kind")
        or ((closing.get("data") or {}).get("failure") or {}).get("timeout_kind")}
    return {
        "ended": ended, "claimed_at": claimed_at,
        "op_id": op_id, "activity_type": sdata.get("activity_type"),
        "local": bool(sdata.get("local")), "task_id": sdata.get("task_id"),
        "task_queue": sdata.get("task_queue"), "cancellation": sdata.get("cancellation"),
        "scheduled_at": scheduled.get("recorded_at"), "retry_policy": policy,
        "timeouts": timeouts, "attempts": [attempts[k] for k in sorted(attempts)],
        "status": outcome, "failure": final_failure, "pending": op,
        "open": op is not None or outcome in ("scheduled", "running", "retrying"),
        "events": mine,
    }


# ---------------------------------------------------------------- timeline

_SUMMARY_KEYS = _fmt.EVENT_SUMMARY_KEYS
_SKIPPED_KEYS = _fmt.EVENT_SKIPPED_KEYS | {"traceback"}  # the failure panel shows it
_BAD = ("Failed", "TimedOut", "Terminated", "Refused", "NeedsReview")


def _field(value: Any) -> str:
    if isinstance(value, str) and len(value) >= 25 and value[10:11] == "T":
        moment = _fmt.instant(value)
        if moment is not None:
            return moment.strftime("%Y-%m-%d %H:%M:%SZ")
    return _fmt.compact(value, 60)


def event_details(data: Mapping[str, Any], limit: int = 300) -> str:
    """The fields of an event that say what happened, ``key=value``, one line."""
    parts = [f"{k}={_field(data[k])}" for k in _SUMMARY_KEYS
             if k != "timeout_kind" and data.get(k) not in (None, "", [], {})]
    for key, value in data.items():
        if key in _SUMMARY_KEYS or key in _SKIPPED_KEYS or value in (None, "", [], {}):
            continue
        if key == "failure" and isinstance(value, Mapping):
            parts.append(f"failure={_fmt.compact(failure_message(value), 80)}")
        elif key == "stop_receipt" and isinstance(value, Mapping):
            parts.append(f"stop_receipt={value.get('kind')}"
                         f"{'' if value.get('confirmed', True) else ' (NOT confirmed)'}")
        else:
            parts.append(f"{key}={_field(value)}")
    return _fmt.compact(" ".join(parts), limit)


def headline(kind: str, data: Mapping[str, Any]) -> str:
    """A sentence for the events an operator looks for first."""
    name = data.get("activity_type") or "activity"
    if kind == "ActivityTimedOut":
        return (f"Activity {name} timed out: {data.get('timeout_kind')} timeout "
                f"(attempt {data.get('attempt')})")
    if kind == "WorkflowTimedOut":
        return f"Workflow timed out: {data.get('timeout_kind')} timeout"
    if kind == "ActivityRetryScheduled":
        why = (f"timed out ({data.get('timeout_kind')} timeout)" if data.get("timeout_kind")
               else f"failed: {failure_message(data.get('failure'))}")
        return (f"Attempt {data.get('failed_attempt')} of {name} {why}; attempt "
                f"{data.get('next_attempt')} scheduled")
    if kind == "ActivityStarted":
        return f"Attempt {data.get('attempt')} of {name} started on {data.get('worker_id')}"
    if kind == "ActivityScheduled":
        return f"Activity {name} scheduled" + (" (local)" if data.get("local") else "")
    if kind == "ActivityFailed":
        return f"Activity {name} failed: {failure_message(data.get('failure'))}"
    if kind == "ActivityCompleted":
        return f"Activity {name} completed (attempt {data.get('attempt')})"
    if kind == "ChildWorkflowScheduled":
        return f"Child {data.get('child_workflow_id')} ({data.get('workflow_type')}) started"
    if kind == "CancellationRequested":
        return f"Cancellation requested: {data.get('reason')}"
    if kind == "WorkflowFailed":
        return f"Workflow failed: {failure_message(data.get('failure'))}"
    return ""


def timeline(events: Sequence[Mapping[str, Any]], started: Any) -> list[dict[str, Any]]:
    """Every event in order with its time since the run started: since its
    WorkflowStarted event when that is in `events`, else since `started`."""
    first = events[0] if events else None
    origin = _fmt.instant(first.get("recorded_at")) if first is not None and first.get(
        "type") == "WorkflowStarted" else _fmt.instant(started)
    rows = []
    for event in events:
        data = event.get("data") or {}
        kind = str(event.get("type"))
        recorded = _fmt.instant(event.get("recorded_at"))
        if origin is None and recorded is not None:
            origin = recorded
        elapsed = (recorded - origin).total_seconds() if recorded and origin else None
        rows.append({
            "sequence": event.get("sequence"), "type": kind,
            "recorded_at": event.get("recorded_at"),
            "time": recorded.strftime("%H:%M:%S.%f")[:-3] if recorded else "-",
            "elapsed": "-" if elapsed is None else f"{elapsed:+.3f}s",
            "tone": "bad" if kind.endswith(_BAD) else
                    "workflow" if kind.startswith("Workflow") else "",
            "timeout_kind": data.get("timeout_kind"),
            "headline": headline(kind, data), "details": event_details(data),
            "op_id": data.get("op_id") if kind.startswith("Activity") else None,
            "child": (data.get("child_workflow_id"), data.get("child_run_id"))
            if kind.startswith("Child") and data.get("child_workflow_id") else None,
            "data": data,
        })
    return rows


# ---------------------------------------------------------------- cancellation



def boundary_text(boundary: Any) -> str:
    if not boundary:
        return "no pending operation"
    return ", ".join(f"{b.get('op_id')} ({b.get('kind')})" for b in boundary
                     if isinstance(b, Mapping))
