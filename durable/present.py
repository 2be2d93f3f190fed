"""Plain formatting shared by every view: instants, durations, JSON.

The one presentation module, without a framework: the CLI (rich) and the
web UI (HTML) both read it, so neither imports the other's helpers.

Everything an operator reads about time is shown twice: the absolute instant
(UTC, so it means the same on every machine) and where it stands relative to
now ("in 4m 12s", "3s late", "2m ago"), because a bare timestamp makes the
reader do the arithmetic that decides whether something is overdue.

Kept whole: it is the one set of words every view uses for a fact (a
deadline met or missed, who holds a run, why it waits); split by view, the
CLI and the UI would drift into saying the same fact two ways, which is
what the views' audits keep finding.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from . import _statuses
from .store.workers import holder_of

#: the statuses of an open run as views read them, review included (`_statuses.OPEN`)
OPEN_STATUSES = _statuses.OPEN


def utcnow() -> datetime:
    return datetime.now(UTC)


def instant(value: Any) -> datetime | None:
    """An aware UTC datetime from what the client returns (datetime or ISO string)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def duration(seconds: float | None) -> str:
    """A compact human duration: ``850ms``, ``12s``, ``4m 12s``, ``2h 05m``, ``3d 4h``."""
    if seconds is None:
        return "-"
    if math.isinf(seconds):
        return "unbounded"
    s = abs(seconds)
    if s < 1:
        return f"{round(s * 1000)}ms"
    if s < 10:
        return f"{s:.1f}s".replace(".0s", "s")
    total = round(s)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s" if secs else f"{minutes}m"
    return f"{secs}s"


def absolute(value: datetime) -> str:
    """``2026-04-12 14:00:00 UTC`` (whole seconds: the relative part carries precision)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(value: datetime, now: datetime) -> str:
    """``in 4m 12s`` for the future, ``4m 12s ago`` for the past."""
    delta = (value - now).total_seconds()
    if abs(delta) < 0.5:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def deadline_state(value: datetime, now: datetime, open_: bool,
                   ended: datetime | None = None) -> tuple[str, str]:
    """(text, state) for a deadline; state is ``ahead``, ``late``, ``met``,
    ``missed`` or ``passed``.

    A deadline behind us is "late" only while the thing it bounds is still
    open. Once it is closed, `ended` (when it ended: the run's close, the
    cleanup's end) says whether the deadline was met, and by how much:
    "passed 3m ago" read as an overrun when the cleanup had finished in
    milliseconds (issue 21). Without `ended`, a closed thing's deadline
    "passed" or was "not reached".
    """
    if not open_ and ended is not None:
        margin = (value - ended).total_seconds()
        if margin >= 0:
            return f"met, {duration(margin)} to spare", "met"
        return f"missed by {duration(margin)}", "missed"
    delta = (value - now).total_seconds()
    if delta >= 0:
        return (f"in {duration(delta)}", "ahead") if open_ else ("not reached", "passed")
    if open_:
        return f"{duration(delta)} late", "late"
    return f"passed {duration(delta)} ago", "passed"


async def holder(info: Mapping[str, Any],
                 list_workers: Callable[[], Awaitable[Sequence[Mapping[str, Any]]]],
                 ) -> dict[str, Any] | None:
    """For an open run that waits for nothing while none of its activities
    runs (describe()'s ``waiting_for`` None): the record of the worker that
    holds it (its code is due to run there: ``worker_id``, ``alive``,
    ``last_seen_at``, ``expires_at``), ``{"worker_id": owner, "alive": False}``
    for a worker no longer registered, ``{"worker_id": None}`` when no worker
    holds it yet; None otherwise. "It is busy" was said for a run held by a
    SIGKILLed worker whose activity had timed out."""
    run = info.get("run") or {}
    pending = info.get("pending_operations") or []
    if (info.get("status") not in OPEN_STATUSES or info.get("waiting_for") is not None
            or any(op.get("task_status") == "running" for op in pending)):
        return None
    owner = run.get("owner")
    found = next((w for w in await list_workers() if w.get("worker_id") == owner),
                 None) if owner else None
    return holder_of(owner, found, run.get("lease_expires_at"))


def holder_text(holder: Any, now: datetime) -> str | None:
    """A run list's words for the worker that holds a run at work (a run
    summary's ``holder``, `holder_of`'s shape, with the ``activity`` whose
    attempt runs there); None without one. The run page's facts in one line:
    who, when last seen, and until when presumed alive, or presumed gone
    (the list said "busy" for a run held by a SIGKILLed worker)."""
    if not isinstance(holder, Mapping):
        return None
    worker = holder.get("worker_id")
    if worker is None:
        return "waiting for a worker: none holds it"
    activity = holder.get("activity")
    what = (f"activity {activity} runs on worker {worker}" if activity
            else f"held by worker {worker}")
    seen = instant(holder.get("last_seen_at"))
    last = f"last seen {relative(seen, now)}" if seen else "no longer registered"
    until = instant(holder.get("expires_at"))
    if holder.get("alive") and until is not None:
        return f"{what}, {last}, presumed alive until {absolute(until)} ({relative(until, now)})"
    then = ("the attempt ends when it times out" if activity
            else taken_text(holder.get("lease_expires_at"), now))
    return f"{what}, {last}, presumed gone: {then}"


def taken_text(lease_expires_at: Any, now: datetime) -> str:
    """When another worker takes a run whose holder is gone: once the holder's
    lease on it lapses, with that instant where it is known (the run's
    ``lease_expires_at``): ``... (lease end: 2026-12-08 10:00:30 UTC, in 12s)``."""
    said = "another worker takes the run once that worker's lease on it has lapsed"
    until = instant(lease_expires_at)
    if until is None:
        return said
    return f"{said} (lease end: {absolute(until)}, {relative(until, now)})"


def holder_gone(holder: Any) -> bool:
    """Whether a run summary's ``holder`` is a worker presumed gone (not one
    that none is: that run waits to be taken)."""
    return (isinstance(holder, Mapping) and holder.get("worker_id") is not None
            and not holder.get("alive"))


#: how a run's close reads against its run or execution deadline
_CLOSED_AS = {"failed": "failed", "cancelled": "cancelled", "terminated": "terminated",
              "timed_out": "timed out"}


def run_deadline_state(value: datetime, now: datetime, open_: bool, ended: datetime | None,
                       closed: Any, kind: str) -> tuple[str, str]:
    """`deadline_state` for a run's ``run_timeout`` or ``execution_timeout``
    deadline (`kind`), by how the run closed: `closed` is ``(status,
    closed_reason)``. "met, 9m 58s to spare" only for a run that completed (or,
    for its run deadline, continued as new): a run terminated, cancelled or
    failed before it did not meet it (``not reached: terminated 9m 58s before
    it``), the deadline that timed the run out was ``reached``, and a run that
    continued as new hands its execution deadline on to the next run."""
    status, reason = (*closed, None, None)[:2] if closed else (None, None)
    if open_ or ended is None or status is None:
        return deadline_state(value, now, open_, ended)
    if status == "timed_out" and reason == kind:
        return "reached: the run timed out", "missed"
    margin = (value - ended).total_seconds()
    if status == "continued" and kind == "execution_timeout":
        return f"handed on to the next run, {duration(margin)} left", "passed"
    if status in ("completed", "continued"):
        return deadline_state(value, now, False, ended)
    closed_as = _CLOSED_AS.get(str(status), str(status))
    if margin >= 0:
        return f"not reached: {closed_as} {duration(margin)} before it", "passed"
    return f"passed: {closed_as} {duration(margin)} after it", "passed"


def attempt_deadline_state(value: datetime, now: datetime, open_: bool, ended: datetime | None,
                           kind: str, timed_out: Any = None, *,
                           current: bool = False, what: str = "attempt") -> tuple[str, str]:
    """`deadline_state` for a deadline that bounds one activity attempt (`kind`:
    ``start_to_close`` or ``heartbeat``), by when the attempt `ended` and the
    kind of timeout that ended it (`timed_out`). Never "met" (it reads as done
    in time, for an attempt that failed or was cancelled), and never "passed
    6m ago" for an attempt that ended 30s before it. A heartbeat deadline as
    recorded at the start moves with each heartbeat, so once it is behind us it
    is neither "late" (the attempt heartbeated: the watchdog times out one that
    does not) nor "passed" (the attempt ended in time): it was extended. A
    running attempt's `current` heartbeat deadline (storage's, as its last
    heartbeat moved it: `describe()`'s pending operation) is judged as it
    stands: past it, the attempt is late for real (the watchdog is about to
    time it out, or is not running)."""
    if current and open_:
        return deadline_state(value, now, open_)
    if kind == "heartbeat" and timed_out != kind and value < (
            now if open_ or ended is None else ended):
        return "extended by the attempt's heartbeats (the first was due then)", "passed"
    if open_ or ended is None:
        return deadline_state(value, now, open_)
    margin = (value - ended).total_seconds()
    if timed_out == kind:
        return f"reached: the {what} timed out", "missed"
    if margin >= 0:
        return f"not reached: the {what} ended {duration(margin)} before it", "passed"
    return f"passed: the {what} ended {duration(margin)} after it", "passed"


def claim_deadline_state(value: datetime, claimed: datetime) -> tuple[str, str]:
    """(text, state) for an activity's schedule-to-start deadline once a worker
    `claimed` the attempt it awaited: that deadline is over then, however long
    the attempt runs (it read "⚠ 9.7s late", counting up, for an attempt claimed
    at once that ran longer than it; "passed: the activity ended 10m after it"
    once it completed)."""
    margin = (value - claimed).total_seconds()
    if margin >= 0:
        return f"met: a worker claimed it {duration(margin)} before it", "met"
    return f"missed: a worker claimed it {duration(margin)} after it", "missed"


#: how a cancellation's cleanup ended when something other than the run's own
#: code closed the run (`durable.store.closing`'s ``cleanup_outcome``): the
#: cleanup did not run to its end, so its deadline was neither met nor missed
#: by a cleanup, and the close is not the cleanup's end
CLEANUP_CUT_SHORT = {
    "not_delivered": "no cleanup ran",
    "interrupted": "cleanup cut short by cancel",
    "terminated": "cleanup cut short by terminate",
    "timed_out": "cleanup cut short by the run's timeout",
    "deadline_expired": "cleanup cut short by it",
    "deadline_expired_undelivered": "never delivered: no worker ran the run before it",
}


def cleanup_of(record: Any) -> Any:
    """A cancellation record's ``cleanup_outcome`` as the views judge it: a
    deadline that expired before any worker took the request (no
    ``delivered_at``; a cascade run's ``delivery``) is
    ``deadline_expired_undelivered``: no cleanup ran, so none was "cut short"
    (a run held by a SIGKILLed worker read so)."""
    if not isinstance(record, Mapping):
        return None
    outcome = record.get("cleanup_outcome")
    delivery = record.get("delivery")
    delivered = record.get("delivered_at") or (
        delivery.get("delivered_at") if isinstance(delivery, Mapping) else None)
    if outcome == "deadline_expired" and not delivered:
        return "deadline_expired_undelivered"
    return outcome


def cleanup_deadline_state(value: datetime, now: datetime, open_: bool,
                           ended: datetime | None, outcome: Any) -> tuple[str, str]:
    """`deadline_state` for a cancellation's cleanup deadline, which knows how
    the cleanup ended (`outcome`, the record's ``cleanup_outcome``).

    "met, 28s to spare" only for a cleanup that ran to its end (the run's own
    code closed the run). A run closed by an operator's cancel before any
    cleanup ran, or whose cleanup a terminate, the run's timeout or the
    deadline itself cut short, did not meet the deadline: the view says what
    happened instead, and when, against the deadline (state ``cut``; ``missed``
    when the deadline is what cut it)."""
    cut = None if open_ else CLEANUP_CUT_SHORT.get(str(outcome))
    if cut is None or ended is None:
        return deadline_state(value, now, open_, ended)
    margin = (value - ended).total_seconds()
    if outcome in ("deadline_expired", "deadline_expired_undelivered"):
        late = f", closed {duration(margin)} after it" if margin < 0 else ""
        return f"missed: {cut}{late}", "missed"
    when = (f"closed {duration(margin)} before it" if margin >= 0
            else f"closed {duration(margin)} after it")
    return f"{cut}: {when}", "cut"


def judged_deadline(value: datetime, now: datetime, open_: bool, ended: datetime | None, *,
                    cleanup: Any = "", closed: Any = None, kind: str = "") -> tuple[str, str]:
    """(text, state) for a deadline, judged by what it bounds: a run's by how
    the run `closed` (`run_deadline_state`), a cancellation's cleanup by its
    `cleanup` outcome (`cleanup_deadline_state`; "" for none), anything else
    by when it `ended` (`deadline_state`). The one choice the CLI and the web
    UI both make, so that they never judge one deadline two ways."""
    if closed is not None:
        return run_deadline_state(value, now, open_, ended, closed, kind)
    if cleanup != "":
        return cleanup_deadline_state(value, now, open_, ended, cleanup)
    return deadline_state(value, now, open_, ended)


def cleanup_end_label(outcome: Any) -> str:
    """What a cancellation's ``closed_at`` is the instant of: the cleanup's end
    only when the cleanup ran to its end (`CLEANUP_CUT_SHORT`)."""
    if outcome in ("not_delivered", "deadline_expired_undelivered"):
        return "closed without cleanup"
    if outcome in CLEANUP_CUT_SHORT:
        return "cleanup cut short"
    return "cleanup finished"


def seconds_text(seconds: Any) -> str:
    """A configured timeout: ``3600s (1h 00m)``."""
    if seconds is None:
        return "-"
    value = float(seconds)
    plain = f"{value:g}s"
    pretty = duration(value)
    return plain if pretty == plain else f"{plain} ({pretty})"


def jsonable(value: Any) -> Any:
    """Turn client results into JSON values: datetimes as ISO 8601, tuples as lists."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """`text` with each surrogate code point written as its escape ``\\udcff``.

    Python strings may hold lone surrogates (``os.fsdecode(b"\\xff")``), which
    payloads carry and storage keeps (JSON escapes them), but which no UTF-8
    output can encode. Every view (the CLI's tables and ``--json``, the web
    UI) shows them escaped rather than failing: inside a JSON string the
    escape stands for the very same value, so ``--json`` stays valid JSON
    (decisions.md (t))."""
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(value: Any, *, indent: int | None = 2) -> str:
    return json.dumps(jsonable(value), indent=indent, ensure_ascii=False)


def compact(value: Any, limit: int = 80) -> str:
    """A one-line rendering of a value for table cells, cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(jsonable(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def progress_of(details: Any) -> tuple[float, float] | None:
    """``(done, total)`` when heartbeat details (or a progress dict) carry them."""
    if not isinstance(details, Mapping):
        return None
    done, total = details.get("done"), details.get("total")
    numbers = (int, float)
    if (isinstance(done, numbers) and isinstance(total, numbers)
            and not isinstance(done, bool) and not isinstance(total, bool) and total > 0):
        return float(done), float(total)
    return None


#: our ``waiting_for`` kinds (describe()) as the reference engine's ``wait_kind``:
#: its words where it has one (a run held back before a worker takes it is a
#: workflow task that waits, in its terms)
_WAIT_KINDS = {"timer": "timer", "condition": "condition", "child": "child",
               "activity": "activity", "activity_worker": "activity",
               "worker": "workflow-task", "queue_slot": "workflow-task",
               "key_slot": "workflow-task", "rate": "workflow-task",
               "review": "workflow-task", "build": "workflow-task"}


def blocked_text(blocked: Mapping[str, Any]) -> str:
    """describe()["blocked"] in words, one place for the CLI and the web UI: the
    builds that cannot take the run, the last one's first diverging op, and
    who continues it."""
    last = str(blocked.get("build_id"))
    refused = [str(b) for b in blocked.get("build_ids") or [last]]
    which = (f"build {last}" if refused == [last]
             else "builds " + ", ".join(refused) + f" (build {last}, the last to try)")
    divergence = str(blocked.get("divergence") or "").rstrip(". ")
    return f"{which} cannot take it: {divergence}. {_who_continues(blocked)} continues it"


def _who_continues(facts: Mapping[str, Any]) -> str:
    """Who can take a blocked run: the build that last took it (older or newer:
    a rollback blocks runs the newer build advanced), or a patched one."""
    last = facts.get("last_build")
    if last:
        return f"A worker of build {last} (which last took it) or of a patched build"
    return "A worker of a build that replays it (the old one, or a patched one)"


def build_wait_text(waiting: Mapping[str, Any]) -> str:
    """A blocked run's wait (``waiting_for`` kind ``build``), in words: every
    live worker that could take it is of a build that cannot replay it."""
    refused = [str(b) for b in waiting.get("refused_builds") or []]
    which = f"build {refused[0]}" if len(refused) == 1 else "builds " + ", ".join(refused)
    return (f"a worker of a build that replays it: the {waiting.get('live_workers')} live "
            f"worker(s) of queue {waiting.get('queue')} that register "
            f"{waiting.get('workflow_type')} are of {which}, which cannot (see blocked); "
            "start " + _who_continues(waiting).replace("A ", "a ", 1))


def holders_text(waiting: Mapping[str, Any]) -> str:
    """Who holds the slots a run waits for (``held_by``: the first few runs, their
    workers and until when their leases run: a killed worker's slots come back
    then), so that an operator knows what to look at; "" when not told."""
    held = [h for h in waiting.get("held_by") or [] if isinstance(h, Mapping)]
    if not held:
        return ""
    def one(h: Mapping[str, Any]) -> str:
        until = instant(h.get("lease_expires_at"))
        leased = f", leased to {absolute(until)}" if until else ""
        return f"{h.get('workflow_id')} (worker {h.get('worker_id')}{leased})"

    names = ", ".join(one(h) for h in held)
    more = int(waiting.get("running") or 0) - len(held)
    return f"; held by {names}" + (f" and {more} more" if more > 0 else "")


def ancestors_text(waiting: Mapping[str, Any]) -> str:
    """For a run waiting for a slot runs it descends from hold (``held_by_ancestors``):
    if they wait for it, it never starts, unless (a queue's) they are traded for it."""
    held = [str(h) for h in waiting.get("held_by_ancestors") or []]
    if not held:
        return ""
    names = ", ".join(held)
    if len(held) < int(waiting.get("limit") or 0):
        return (f"; {len(held)} of them held by runs it descends from ({names}), which hold "
                "their slots while they wait")
    fix = " (raise the limit, or start the child on another queue or key)"
    single = len(held) == 1
    cond = "if "
    if waiting.get("kind") == "queue_slot":  # traded for once they only wait (decision (ao))
        cond = (f"{'its worker puts ' + names if single else 'their workers put one'} down "
                f"for it once {names if single else 'it'} only waits (release_waiting_runs, "
                f"the default); if {'it' if single else 'they'} cannot and ")
    if single:
        return (f"; the slot is held by {names}, which it descends from and which holds it "
                f"while it waits: {cond}{names} waits for it, it never starts{fix}")
    return (f"; all {len(held)} are held by runs it descends from ({names}), which hold them "
            f"while they wait: {cond}they wait for it, it never starts{fix}")


def wait_of(waiting: Any, holder: Any = None) -> tuple[str | None, str | None]:
    """The reference's ``(wait_kind, wait_reason)`` for describe()["waiting_for"];
    ``(None, None)`` when nothing is waited for (busy, closed). One place for the
    words, so the HTTP wire, and whatever reads it, say the same as the CLI.
    With nothing waited for and a `holder` (`holder`) presumed gone, or none:
    a workflow task waiting for a worker (it read as running on a worker that
    had been SIGKILLed)."""
    if not isinstance(waiting, Mapping):
        if holder_gone(holder):
            h = holder.get
            return "workflow-task", (
                f"Workflow task waiting for a worker: worker {h('worker_id')}, which holds it, "
                f"was last seen at {h('last_seen_at') or 'an unknown time'} and is presumed "
                f"gone (presumed alive until {h('expires_at') or 'its record expired'})"
                + (f"; its lease on the run ends at {h('lease_expires_at')}"
                   if h("lease_expires_at") else ""))
        if isinstance(holder, Mapping) and holder.get("worker_id") is None:
            return "workflow-task", "Workflow task waiting for a worker to take it"
        return None, None
    kind = str(waiting.get("kind"))
    w = waiting.get
    if kind == "timer":
        reason = f"Waiting for timer (fires at {w('fire_at')})"
    elif kind == "condition":
        reason = ("Waiting for condition" + (f" (times out at {w('timeout_at')})"
                                             if w("timeout_at") else " (no timeout)"))
    elif kind == "child":
        reason = (f"Waiting for child workflow {w('child_workflow_id')} "
                  f"({w('child_status') or 'not started'})")
    elif kind == "activity":
        reason = (f"Waiting for activity {w('activity')} to be picked up on queue "
                  f"{w('queue')} (attempt {w('attempt')})")
    elif kind == "activity_worker":
        reason = (f"Waiting for activity {w('activity')}: no live worker of queue "
                  f"{w('queue')} registers it")
    elif kind == "worker":
        reason = (f"Workflow task waiting for a worker: no live worker of queue {w('queue')} "
                  f"registers {w('workflow_type')}")
    elif kind in ("queue_slot", "key_slot"):
        which = "a slot" if kind == "queue_slot" else f"a slot of key {w('concurrency_key')}"
        reason = (f"Workflow task waiting for {which} on queue {w('queue')} "
                  f"({w('running')} of {w('limit')} running)" + holders_text(waiting)
                  + ancestors_text(waiting))
    elif kind == "rate":
        reason = (f"Workflow task waiting for the rate limit of queue {w('queue')} "
                  f"(next start at {w('next_start_at')})")
    elif kind == "review":
        reason = f"Waiting for a person to review it: {w('hint')}"
    elif kind == "build":
        reason = "Workflow task waiting for " + build_wait_text(waiting)
    else:
        reason = compact(dict(waiting), 120)
    return _WAIT_KINDS.get(kind, kind), reason


def cascade_links(data: Mapping[str, Any]
                  ) -> tuple[dict[Any, Mapping[str, Any]], dict[Any, list[Mapping[str, Any]]]]:
    """A `cancellation_cascade()` view's runs by run id, and its edges (parent
    to child) by parent run id: what the CLI's and the UI's trees walk."""
    runs = [r for r in data.get("runs") or [] if isinstance(r, Mapping)]
    edges: dict[Any, list[Mapping[str, Any]]] = {}
    for edge in data.get("edges") or []:
        if isinstance(edge, Mapping):
            edges.setdefault(edge.get("parent_run_id"), []).append(edge)
    return {r.get("run_id"): r for r in runs}, edges


# ---------------------------------------------------------------- who, and what an event says


def requester_text(requester: Any) -> str:
    """Who asked: ``user ana (durable CLI on h)``; ``-`` when not recorded."""
    if isinstance(requester, Mapping):
        text = str(requester.get("type") or "-")
        if requester.get("id"):
            text += f" {requester.get('id')}"
        if requester.get("label"):
            text += f" ({requester.get('label')})"
        return text
    return str(requester or "-")


def sender_text(sender: Any) -> str:
    """Who sent a signal or an update: ``user ana (durable CLI on h) via cli``, or
    the workflow whose code signalled (an external signal)."""
    if not isinstance(sender, Mapping):
        return "unknown (not recorded)"
    if sender.get("workflow_id"):
        return f"workflow {sender.get('workflow_id')} (op {sender.get('op_id')})"
    return f"{requester_text(sender.get('requester'))} via {sender.get('source') or '-'}"


#: an event's fields that say what happened, shown first and in this order
#: by the CLI's history and the UI's timeline
EVENT_SUMMARY_KEYS = (
    "activity_type", "workflow_type", "op_id", "attempt", "timeout_kind", "policy", "reason",
    "child_workflow_id", "fire_at", "next_attempt_at", "deadline_at", "worker_id",
)
#: an event's fields neither shows in an event's one line (they are plumbing,
#: or shown elsewhere: lineage in the tree, the requester on the request)
EVENT_SKIPPED_KEYS = frozenset({
    "task_id", "retry_policy", "lineage", "requester", "root_request_id", "root_workflow_id",
    "root_run_id", "parent_request_id", "task_queue", "schedule_to_start_timeout",
    "start_to_close_timeout", "schedule_to_close_timeout", "heartbeat_timeout", "local",
})


def loop_blocked_text(blocked: Mapping[str, Any] | None, now: datetime) -> str | None:
    """What a worker's record says of the times its event loop was blocked
    (``loop_blocked`` of `Client.list_workers`), or None if it never was:
    ``blocked 2 times; last for 4.1s, 3m ago, by workflow 'order' (run ...)
    at app.py:12 in order``. Durations only: a blocked loop stopped every run,
    lease renewal and deadline of the worker meanwhile."""
    if not blocked:
        return None
    count = int(blocked.get("count") or 0)
    times = "once" if count == 1 else f"{count} times"
    started = instant(blocked.get("started_at"))
    ago = f", {relative(started, now)}" if started is not None else ""
    who = loop_culprit(blocked)
    where = f" at {blocked['where']}" if blocked.get("where") else ""
    return (f"event loop blocked {times}; last for {duration(blocked.get('seconds'))}{ago}, "
            f"by {who}{where}")


def runs_released_text(released: Mapping[str, Any] | None, now: datetime) -> str | None:
    """What a worker's record says of the runs it put down under pressure
    (``runs_released`` of `Client.list_workers`), or None if it put none down:
    ``12 runs in all, 3 in the last 1m before its last renewal; last 4s ago``.
    A worker putting runs down is full of runs that only wait while others are
    ready (decision (am)); each costs a replay."""
    if not released:
        return None
    count = int(released.get("count") or 0)
    runs = "1 run" if count == 1 else f"{count} runs"
    recent = int(released.get("recent") or 0)
    window = duration(released.get("window_seconds"))
    last = instant(released.get("last_at"))
    ago = f"; last {relative(last, now)}" if last is not None else ""
    failed = int(released.get("failed") or 0)
    failures = f"; {failed} hand-back{'s' if failed != 1 else ''} failed" if failed else ""
    return (f"{runs} in all, {recent or 'none'} in the last {window} before its last "
            f"renewal{ago}{failures}")


def loop_culprit(blocked: Mapping[str, Any]) -> str:
    """Whose code blocked an event loop, in words: ``activity 'charge' of
    workflow o-1 (run ...)``, ``workflow 'order' o-1 (run ...)``: the type and
    the ids an operator looks a run up by."""
    ids = " ".join(part for part in (
        blocked.get("workflow_id"),
        f"(run {blocked['run_id']})" if blocked.get("run_id") else None) if part)
    if blocked.get("activity_type"):
        of = f" of workflow {ids}" if blocked.get("workflow_id") else (f" {ids}" if ids else "")
        return f"activity {blocked['activity_type']!r}{of}"
    if blocked.get("workflow_type"):
        return f"workflow {blocked['workflow_type']!r}" + (f" {ids}" if ids else "")
    return "code outside the worker's workflows and activities"
