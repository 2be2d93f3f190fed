"""Human views: rich tables, grids and trees built from the client's dicts.

Views read the documented keys of `describe()`, `history()`,
`cancellation_cascade()` and `list()` with ``.get`` so that a key added by a
newer engine never breaks them. Text from storage is wrapped in `Text`
objects, never interpreted as rich markup. Anything that only colour would
distinguish also carries a word or a glyph (``✗ NOT VERIFIED``), so that
NO_COLOR and pipes lose nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .. import present as _fmt
from .. import present_ops as _ops
from ..present import EVENT_SKIPPED_KEYS as _SKIPPED_KEYS
from ..present import EVENT_SUMMARY_KEYS as _SUMMARY_KEYS
from ..present import requester_text as _requester
from ..present import sender_text as sender_text  # re-exported: views elsewhere use them
from ._app import Output
from ._words import received_lines, run_tag
from ._words import waiting_text as waiting_text
from ._words import when as when

STATUS_STYLES = {
    "pending": "yellow",
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
    "timed_out": "red",
    "terminated": "red",
    "continued": "blue",
    "unknown": "bold red",
    "needs_review": "bold red",
}

LIFECYCLE_STYLES = {
    "not_requested": "dim",
    "requested": "yellow",
    "delivered": "cyan",
    "cleaning_up": "cyan",
    "cancelled": "green",
    "deadline_expired": "bold red",
    "terminated": "red",
    "failed": "red",
    "timed_out": "red",
}

NOT_VERIFIED_STYLE = "bold white on red"


def badge(value: Any, styles: Mapping[str, str]) -> Text:
    """``[cancelled]``: brackets keep it a badge without colour."""
    text = str(value) if value is not None else "-"
    return Text(f"[{text}]", style=styles.get(text, "bold"))


def status_badge(value: Any) -> Text:
    return badge(value, STATUS_STYLES)


def lifecycle_badge(value: Any) -> Text:
    return badge(value, LIFECYCLE_STYLES)


def not_verified(out: Output) -> Text:
    return Text(f"{out.glyph('✗', 'X')} NOT VERIFIED", style=NOT_VERIFIED_STYLE)


def verified(out: Output) -> Text:
    return Text(f"{out.glyph('✓', 'OK')} verified", style="bold green")


def deadline(value: Any, now: datetime, open_: bool, ended: Any = None, *,
             cleanup: Any = "", closed: Any = None, kind: str = "") -> Text:
    """A deadline with where it stands: ``in 4m 12s``, ``3s late`` (red); once
    closed, ``met, 29s to spare`` or ``missed by 3s`` (red) by `ended`. A
    cleanup deadline passes its `cleanup` outcome: a cleanup that did not run
    to its end never reads "met" (`durable.present.cleanup_deadline_state`); a
    run's (`kind`) is judged by how it `closed` (`durable.present.run_deadline_state`)."""
    moment = _fmt.instant(value)
    if moment is None:
        return Text("none", style="dim")
    text, state = _fmt.judged_deadline(moment, now, open_, _fmt.instant(ended),
                                       cleanup=cleanup, closed=closed, kind=kind)
    style = {"ahead": "green", "late": "bold red", "passed": "dim", "met": "green",
             "missed": "bold red", "cut": "yellow"}[state]
    return Text.assemble(_fmt.absolute(moment), " ", (f"({text})", style))


def progress_bar(out: Output, done: float, total: float, width: int = 30) -> Text:
    """``████████░░░░ 412/1000 (41%)``: the fill is in the glyphs, not only the colour.

    Both round down: 199/200 is 99% with one cell empty, never a full bar
    and 100% while work is left (issue 21)."""
    fraction = max(0.0, min(1.0, done / total))
    filled = math.floor(fraction * width)
    full, empty = (("█", "░") if out.unicode else ("#", "-"))
    number = f"{done:g}/{total:g}"
    return Text.assemble(
        (full * filled, "green"), (empty * (width - filled), "dim"),
        f" {number} ({math.floor(fraction * 100)}%)",
    )


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def short_id(value: Any, n: int = 12) -> str:
    """A run's or request's id cut to its last `n` digits. New ids are
    time-ordered (decision (af)): their first 12 digits are the millisecond
    they were made, shared by every id of that instant, so a head would show
    the same digits on every row of a list; the tail is the random part that
    tells them apart (as the web UI shows it)."""
    text = str(value or "-")
    return text if len(text) <= n else "…" + text[-n:]


# ---------------------------------------------------------------- start


def started(out: Output, data: Mapping[str, Any]) -> None:
    now = _fmt.utcnow()
    out.console.print(Text.assemble(
        "Started ", (str(data.get("workflow_id")), "bold"), f" ({data.get('workflow_type')}) ",
        status_badge(data.get("status")),
    ), soft_wrap=True)
    grid = _grid()
    grid.add_row("run", Text(str(data.get("run_id"))))
    grid.add_row("namespace", Text(str(data.get("namespace"))))
    grid.add_row("task queue", Text(str(data.get("task_queue") or "-")))
    open_ = data.get("status") in _fmt.OPEN_STATUSES
    if data.get("execution_timeout_seconds") is not None:
        grid.add_row("execution deadline", Text.assemble(
            deadline(data.get("execution_deadline_at"), now, open_, data.get("closed_at")),
            f"  timeout {_fmt.seconds_text(data['execution_timeout_seconds'])}"))
    if data.get("run_timeout_seconds") is not None:
        grid.add_row("run deadline", Text.assemble(
            deadline(data.get("run_deadline_at"), now, open_, data.get("closed_at")),
            f"  timeout {_fmt.seconds_text(data['run_timeout_seconds'])}"))
    out.console.print(grid)


# ---------------------------------------------------------------- list


def run_list(out: Output, data: Mapping[str, Any]) -> None:
    """A page of the wire (`durable.http.model.list_to_wire`) as a table; the
    status shown is ours (``durable_status``: timed_out, needs_review, ...)."""
    runs = [{**run, "status": run.get("durable_status", run.get("status"))}
            for run in data.get("workflows") or []]
    if not runs:
        out.console.print(Text("No workflow runs match.", style="dim"))
        return
    now = _fmt.utcnow()
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("WORKFLOW ID", overflow="fold", min_width=11)
    table.add_column("TYPE", overflow="fold", min_width=4)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("RUN", no_wrap=True)
    table.add_column("STARTED", no_wrap=True)
    table.add_column("TOOK", no_wrap=True)
    held = [_fmt.holder_text(run.get("holder"), now) for run in runs]
    if any(held):  # who holds each run at work, and whether it is presumed gone
        table.add_column("HELD BY", overflow="fold", min_width=12)
    for run, holder in zip(runs, held, strict=True):
        # a run no worker started yet (pending) was shown "started 21m ago, 21m so far"
        started_at = _fmt.instant(run.get("started_at"))
        closed_at = _fmt.instant(run.get("closed_at"))
        created = _fmt.instant(run.get("created_at"))
        if started_at is None:
            took = Text("never started" if closed_at is not None else "-", style="dim")
        elif closed_at is not None:
            took = Text(_fmt.duration((closed_at - started_at).total_seconds()))
        else:
            took = Text(f"{_fmt.duration((now - started_at).total_seconds())} so far",
                        style="dim")
        gone = _fmt.holder_gone(run.get("holder"))
        table.add_row(
            Text(str(run.get("workflow_id"))), Text(str(run.get("workflow_type"))),
            Text.assemble(status_badge(run.get("status")), run_tag(run)),
            Text(f"{run.get('run_number') or '-'} {short_id(run.get('run_id'), 8)}"),
            when(started_at, now) if started_at is not None or created is None else
            Text.assemble(("not started", "dim"), ", created ", when(created, now)), took,
            *([Text(holder or "-", style="bold yellow" if gone else "dim")] if any(held) else []),
        )
    out.console.print(table)
    if data.get("next_page_token"):
        out.console.print(Text(f"(first {len(runs)} shown: raise --limit, or pass "
                               f"--next-page-token {data['next_page_token']} for the next page)",
                               style="dim"))


# ---------------------------------------------------------------- describe


def describe(out: Output, info: Mapping[str, Any]) -> None:
    now = _fmt.utcnow()
    out.console.print(describe_renderable(out, info, now))


def describe_renderable(out: Output, info: Mapping[str, Any], now: datetime) -> RenderableType:
    run = info.get("run") or {}
    open_ = info.get("status") in _fmt.OPEN_STATUSES
    title = Text.assemble(
        ("Workflow ", "bold"), (str(info.get("workflow_id")), "bold"),
        f" ({info.get('workflow_type')}) ", status_badge(info.get("status")),
    )
    grid = _grid()
    grid.add_row("namespace", Text(str(info.get("namespace"))))
    if info.get("reason"):
        grid.add_row("reason", Text(str(info.get("reason"))))
    elif info.get("closed_reason"):
        grid.add_row("closed reason", Text(str(info.get("closed_reason"))))
    grid.add_row("run", Text(f"{run.get('run_id')} (run {run.get('run_number')} of "
                             f"{info.get('run_count')})"))
    if run.get("task_queue"):
        grid.add_row("task queue", Text(str(run.get("task_queue"))))
    if "owner" in run:
        presence = info.get("owner_presence")
        grid.add_row("owner", Text(_ops.owner_text(run.get("owner"), presence, now),
                                   style="bold yellow" if _fmt.holder_gone(presence) else ""))
    grid.add_row("started", when(run.get("started_at"), now))
    if open_ and "waiting_for" in info:
        grid.add_row("waiting for", waiting_text(info.get("waiting_for"), now,
                                                 info.get("holder")))
    started_at, closed_at = _fmt.instant(run.get("started_at")), _fmt.instant(run.get("closed_at"))
    if closed_at is not None:
        took = f" after {_fmt.duration((closed_at - started_at).total_seconds())}" \
            if started_at else ""
        grid.add_row("closed", Text.assemble(when(closed_at, now), (took, "dim")))
    elif started_at is not None:
        grid.add_row("running for", Text(_fmt.duration((now - started_at).total_seconds())))
    grid.add_row("execution timeout",
                 Text(_fmt.seconds_text(info.get("execution_timeout_seconds"))))
    closed = (run.get("status"), info.get("closed_reason"))
    grid.add_row("execution deadline", deadline(run.get("execution_deadline_at"), now, open_,
                                                run.get("closed_at"), closed=closed,
                                                kind="execution_timeout"))
    grid.add_row("run timeout", Text(_fmt.seconds_text(run.get("run_timeout_seconds"))))
    grid.add_row("run deadline", deadline(run.get("run_deadline_at"), now, open_,
                                          run.get("closed_at"), closed=closed,
                                          kind="run_timeout"))
    if info.get("status") == "unknown":
        grid.add_row("needs review", Text(
            "yes: units whose effect could not be confirmed; check them, then `durable "
            "retry-after-review ID --units rerun|confirm`", style="bold red"))
    elif run.get("needs_review"):
        grid.add_row("needs review", Text(
            "yes: replay failed (non-determinism); deploy code that replays it, then "
            "`durable retry-after-review ID`", style="bold red"))
    phase = info.get("phase")
    if isinstance(phase, Mapping):
        grid.add_row("phase", phase_text(phase, now, open_))
    progress = _fmt.progress_of(info.get("progress"))
    if progress is not None:
        grid.add_row("progress", progress_bar(out, *progress))
    if run.get("parent_workflow_id"):
        grid.add_row("parent", Text(f"{run.get('parent_workflow_id')} "
                                    f"run {run.get('parent_run_id')}"
                                    + (" (deleted by retention)" if run.get("parent_deleted")
                                       else "")))
    if run.get("continued_run_id"):
        grid.add_row("continued as", Text(str(run.get("continued_run_id"))))
    if run.get("started_build") or run.get("last_build"):
        grid.add_row("build", Text(f"started by {run.get('started_build') or 'none'}, last "
                                   f"taken by {run.get('last_build') or 'none'}"))
    blocked = info.get("blocked")
    if isinstance(blocked, Mapping):
        grid.add_row("blocked", Text(_fmt.blocked_text(blocked), style="bold yellow"))
    parts: list[RenderableType] = [title, grid]
    pending = info.get("pending_operations") or []
    if pending:
        heading = "Pending operations" if open_ else "Operations open when the run closed"
        parts += [Text(""), Text(heading, style="bold"), pending_table(out, pending, now)]
    parts += received_lines(info, now)
    failures = info.get("failures") or []
    if failures:
        parts += [Text(""), Text("Failures", style="bold")]
        for failure in failures:
            parts.append(failure_text(failure, now))
    cancellation = info.get("cancellation")
    if isinstance(cancellation, Mapping):
        parts += [Text(""), Text("Cancellation", style="bold"),
                  cancellation_grid(cancellation, now, open_)]
    return Group(*parts)


def phase_text(phase: Mapping[str, Any], now: datetime, open_: bool) -> Text:
    text = Text.assemble((str(phase.get("name")), "bold"), " started ",
                         when(phase.get("started_at"), now))
    if phase.get("deadline_at"):
        text.append("  deadline ")
        text.append_text(deadline(phase.get("deadline_at"), now, open_))
    return text


def pending_table(out: Output, pending: Iterable[Mapping[str, Any]], now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("OP", "KIND", "NAME", "STATE", "ATTEMPT", "DETAILS"):
        table.add_column(name, overflow="fold", min_width=len(name))
    for op in pending:
        details: Text
        progress = _fmt.progress_of(op.get("heartbeat_details"))
        if progress is not None:
            details = progress_bar(out, *progress, width=20)
        elif op.get("heartbeat_details") is not None:
            details = Text("heartbeat " + _fmt.compact(op.get("heartbeat_details"), 60))
        elif op.get("fire_at") and op.get("kind") == "condition":
            details = Text.assemble("times out ", when(op.get("fire_at"), now))
        elif op.get("fire_at"):
            details = Text.assemble("fires ", when(op.get("fire_at"), now))
        elif op.get("child_workflow_id"):
            details = Text(f"child {op.get('child_workflow_id')}")
            if op.get("child_closed_at"):
                details.append(f"  ended {op.get('child_status')} ")
                details.append_text(when(op.get("child_closed_at"), now))
            elif op.get("child_status"):
                details.append(f"  {op.get('child_status')}")
        else:
            details = Text("")
        if op.get("last_failure"):
            details.append(f"  last failure: {_failure_message(op['last_failure'])}", style="red")
        table.add_row(Text(str(op.get("op_id"))), Text(str(op.get("kind"))),
                      Text(str(op.get("name") or "-")), Text(str(op.get("task_status") or "-")),
                      Text(str(op.get("attempt") or "-")), details)
    return table


def _failure_message(failure: Any) -> str:
    if isinstance(failure, Mapping):
        return str(failure.get("message") or failure.get("failure_category") or "failed")
    return str(failure)


def failure_text(failure: Mapping[str, Any], now: datetime) -> Text:
    text = Text.assemble((f"  {failure.get('exception_class') or failure.get('failure_category')}",
                          "red"), f": {_failure_message(failure)}")
    if failure.get("timeout_kind"):
        text.append(f"  timeout kind {failure['timeout_kind']}")
    if failure.get("deadline_at"):
        text.append("  deadline ")
        text.append_text(when(failure.get("deadline_at"), now))
    return text


def cancellation_grid(c: Mapping[str, Any], now: datetime, open_: bool) -> Table:
    grid = _grid()
    grid.add_row("lifecycle", lifecycle_badge(c.get("lifecycle")))
    grid.add_row("reason", Text(str(c.get("reason"))))
    grid.add_row("request", Text(str(c.get("request_id"))))
    if c.get("root_request_id") and c.get("root_request_id") != c.get("request_id"):
        grid.add_row("root request", Text(f"{c.get('root_request_id')} (from "
                                          f"{c.get('root_workflow_id')})"))
    grid.add_row("requested by", Text(f"{_requester(c.get('requester'))} via {c.get('source')}"))
    grid.add_row("requested", when(c.get("requested_at"), now))
    cleanup_open = open_ and c.get("lifecycle") in ("requested", "delivered", "cleaning_up")
    grid.add_row("cleanup deadline", Text.assemble(
        deadline(c.get("deadline_at"), now, cleanup_open, c.get("closed_at"),
                 cleanup=_fmt.cleanup_of(c)),
        f"  cleanup timeout {_fmt.seconds_text(c.get('cleanup_timeout_seconds'))}"
        if c.get("cleanup_timeout_seconds") is not None else ""))
    if c.get("delivered_at"):
        grid.add_row("delivered", Text.assemble(when(c.get("delivered_at"), now),
                                                f"  at {boundary_text(c.get('boundary'))}"))
    if c.get("closed_at") and not cleanup_open:
        grid.add_row(_fmt.cleanup_end_label(_fmt.cleanup_of(c)),
                     when(c.get("closed_at"), now))
    if c.get("cleanup_outcome"):
        grid.add_row("cleanup outcome", Text(str(c.get("cleanup_outcome")),
                                             style=outcome_style(c.get("cleanup_outcome"))))
    return grid


def outcome_style(outcome: Any) -> str:
    return "green" if outcome == "completed" else "red"


def boundary_text(boundary: Any) -> str:
    if not boundary:
        return "no pending op"
    return ", ".join(f"{b.get('op_id')} ({b.get('kind')})" for b in boundary
                     if isinstance(b, Mapping))


# ---------------------------------------------------------------- history


def _value(value: Any, day: datetime | None = None) -> str:
    """An event field for a table cell. Instants are cut to the second, and to the
    time alone on the day of the event itself (``14:00:00Z``), which keeps rows short."""
    if isinstance(value, str) and len(value) >= 25 and value[10:11] == "T":
        moment = _fmt.instant(value)
        if moment is not None:
            if day is not None and moment.date() == day.date():
                return moment.strftime("%H:%M:%SZ")
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return _fmt.compact(value, 48)


def event_summary(data: Mapping[str, Any], limit: int = 200,
                  day: datetime | None = None) -> str:
    """The fields of an event that say what happened, ``key=value``, one line."""
    parts = [f"{k}={_value(data[k], day)}" for k in _SUMMARY_KEYS
             if data.get(k) not in (None, "", [], {})]
    for key, value in data.items():
        if key in _SUMMARY_KEYS or key in _SKIPPED_KEYS or value in (None, "", [], {}):
            continue
        if key == "failure" and isinstance(value, Mapping):
            parts.append(f"failure={_fmt.compact(_failure_message(value), 50)}")
        elif key == "sender":
            parts.append(f"sent by {sender_text(value)}")
        elif key == "stop_receipt" and isinstance(value, Mapping):
            parts.append(f"stop_receipt={value.get('kind')}"
                         f"{'' if value.get('confirmed', True) else ' (NOT confirmed)'}")
        else:
            parts.append(f"{key}={_value(value, day)}")
    return _fmt.compact(" ".join(parts), limit)


def history_table(events: Iterable[Mapping[str, Any]], started: datetime | None,
                  header: bool = True) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, show_header=header)
    # fixed widths: the batches that `history --follow` prints line up
    table.add_column("#", justify="right", no_wrap=True, width=4)
    table.add_column("RECORDED (UTC)", no_wrap=True, width=14)
    table.add_column("+ELAPSED", justify="right", no_wrap=True, width=9)
    table.add_column("EVENT", no_wrap=True, overflow="ellipsis", width=26)
    table.add_column("DETAILS", overflow="fold")
    for event in events:
        recorded = _fmt.instant(event.get("recorded_at"))
        elapsed = (f"+{(recorded - started).total_seconds():.3f}s"
                   if recorded is not None and started is not None else "")
        event_type = str(event.get("type"))
        style = ("red" if event_type.endswith(("Failed", "TimedOut", "Terminated", "Refused"))
                 else "bold" if event_type.startswith("Workflow") else "")
        table.add_row(
            str(event.get("sequence")),
            recorded.strftime("%H:%M:%S.%f")[:-3] if recorded else "-",
            elapsed, Text(event_type, style=style),
            Text(event_summary(event.get("data") or {}, day=recorded)),
        )
    return table


def history(out: Output, data: Mapping[str, Any]) -> None:
    events = data.get("events") or []
    started = _fmt.instant(events[0].get("recorded_at")) if events else None
    out.console.print(Text.assemble(
        ("History of ", "bold"), (str(data.get("workflow_id")), "bold"),
        f" run {data.get('run_id')} ({len(events)} events",
        f", first at {_fmt.absolute(started)})" if started else ")"), soft_wrap=True)
    out.console.print(history_table(events, started))


# ---------------------------------------------------------------- result


def result(out: Output, data: Mapping[str, Any]) -> None:
    status = data.get("status")
    if status == "completed":
        out.console.print(Text(_fmt.dumps(data.get("result")), style="green"), soft_wrap=True)
        return
    out.console.print(Text.assemble(
        "Workflow ", (str(data.get("workflow_id")), "bold"), " ", status_badge(status),
        f": {_failure_message(data.get('failure'))}" if data.get("failure") else
        ": no result yet"))


# ---------------------------------------------------------------- control


def cancellation_requested(out: Output, data: Mapping[str, Any]) -> None:
    now = _fmt.utcnow()
    ctx = data.get("context") or {}
    status = data.get("status")
    closed_now = status is not None and status not in _fmt.OPEN_STATUSES
    head = (Text("Cancellation requested", style="bold green") if data.get("accepted") else
            Text("Already requested: the original request stands (its deadline is not "
                 "extended)", style="bold yellow"))
    out.console.print(Text.assemble(
        head, " for ", (str(data.get("workflow_id")), "bold"),
        *((", now closed ", status_badge(status)) if closed_now else ())), soft_wrap=True)
    grid = _grid()
    grid.add_row("request", Text(str(ctx.get("request_id"))))
    grid.add_row("reason", Text(str(ctx.get("reason"))))
    grid.add_row("requested", when(ctx.get("requested_at"), now))
    record = data.get("cancellation") or {}
    if closed_now:  # not "5m late": judged by how and when the run closed
        grid.add_row("cleanup deadline", deadline(
            ctx.get("deadline"), now, False, record.get("closed_at"),
            cleanup=_fmt.cleanup_of(record)))
    else:
        grid.add_row("cleanup deadline", deadline(ctx.get("deadline"), now, True))
    out.console.print(grid)


def closed(out: Output, data: Mapping[str, Any]) -> None:
    out.console.print(Text.assemble(
        f"{str(data.get('action')).capitalize()} ", (str(data.get("workflow_id")), "bold"),
        f" run {data.get('run_id')}: now ", status_badge(data.get("status")),
        f" (reason: {data.get('reason')})"), soft_wrap=True)


def reviewed(out: Output, data: Mapping[str, Any]) -> None:
    if not data.get("cleared"):
        blocked = data.get("blocked")
        out.console.print(Text.assemble(
            (str(data.get("workflow_id")), "bold"), " was not marked for review: nothing to do",
            *(("; it is blocked by a deploy: ", _fmt.blocked_text(blocked),
               " (start a worker of a build that replays it, or reset it: "
               "docs/deploying.md)") if isinstance(blocked, Mapping) else ())),
            soft_wrap=True)
        return
    units = data.get("units")
    how = {"rerun": ": its unconfirmed units run again",
           "confirm": ": its unconfirmed units are recorded as done"}.get(str(units), "")
    out.console.print(Text.assemble(
        "Review cleared for ", (str(data.get("workflow_id")), "bold"),
        f"{how}; a worker replays it now"), soft_wrap=True)


def signalled(out: Output, data: Mapping[str, Any]) -> None:
    what = " recorded for " if data.get("recorded", True) else " was already recorded for "
    out.console.print(Text.assemble(
        "Signal ", (str(data.get("signal")), "bold"), what,
        (str(data.get("workflow_id")), "bold")), soft_wrap=True)


def answered(out: Output, data: Mapping[str, Any]) -> None:
    out.console.print(_fmt.dumps(data.get("result"), indent=2), markup=False,
                      highlight=False, soft_wrap=True)


def updated(out: Output, data: Mapping[str, Any]) -> None:
    out.console.print(Text.assemble(
        "Update ", (str(data.get("update")), "bold"), f" (id {data.get('update_id')}) of ",
        (str(data.get("workflow_id")), "bold"), " completed: ",
        _fmt.dumps(data.get("result"))), soft_wrap=True)


def overdue(out: Output, data: Mapping[str, Any]) -> None:
    """`durable repair-pass --dry-run`: the deadlines passed and not enforced."""
    runs, attempts = data.get("runs") or {}, data.get("activity_attempts") or {}
    if not runs and not attempts:
        out.console.print("No deadline has passed without being enforced.")
        return
    total = sum(runs.values()) + sum(attempts.values())
    late = float(data.get("oldest_overdue_seconds") or 0.0)
    more = " or more (the scan stops at the limit)" if data.get("scan_pressure") else ""
    out.console.print(Text(
        f"{total}{more} {'deadline has' if total == 1 else 'deadlines have'} passed without "
        f"being enforced; the oldest is {_fmt.duration(late)} late", style="bold"),
        soft_wrap=True)
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("OF")
    table.add_column("KIND")
    table.add_column("COUNT", justify="right")
    for of, counts in (("runs", runs), ("activity attempts", attempts)):
        for kind, count in sorted(counts.items()):
            table.add_row(of, kind, str(count))
    out.console.print(table)
    if late >= 5.0:  # a watchdog enforces within milliseconds
        out.console.print(Text(
            "No worker's watchdog seems to run in this namespace (each enforces deadlines as "
            "they fall due): start a worker, or run `durable repair-pass` to enforce these "
            "once.", style="yellow"), soft_wrap=True)


def repair(out: Output, data: Mapping[str, Any]) -> None:
    counts = data.get("repaired") or {}
    if not counts:
        out.console.print("Repair pass: nothing was due.")
        return
    total = int(data.get("total") or 0)
    out.console.print(Text(f"Repair pass: {total} expired "
                           f"{'deadline' if total == 1 else 'deadlines'} enforced", style="bold"),
                      soft_wrap=True)
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("KIND")
    table.add_column("COUNT", justify="right")
    for kind, count in sorted(counts.items()):
        table.add_row(kind, str(count))
    out.console.print(table)
