"""``durable watch``: one run live until it closes (the command and its frame).

A frame is what is happening now and how long is left: elapsed time, the
phase, progress bars from reported units and heartbeat details, what the run
waits for, pending ops with their deadlines, the cancellation and the last
failure. The command redraws it (rich's Live) on each change of the run and
at least every ``--interval``; ``--once`` prints one frame. Like `_queues`
and `_schedules`, the command lives with its view; the pieces it shares with
``durable describe`` come from `_views`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import anyio
import click
from rich.console import Group, RenderableType
from rich.text import Text

import durable

from .. import present as _fmt
from ..http import model
from ._app import Output, Session, json_option
from ._params import run_option, workflow_id_argument
from ._views import (
    _grid,
    deadline,
    failure_text,
    lifecycle_badge,
    phase_text,
    progress_bar,
    short_id,
    status_badge,
    waiting_text,
)

pass_session = click.make_pass_decorator(Session)


@click.command(short_help="Watch one run live until it closes.")
@workflow_id_argument
@run_option
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and tests).")
@click.option("--interval", type=click.FloatRange(0.05, 60), default=1.0, show_default=True,
              metavar="S", help="Longest wait between two reads of the run.")
@json_option
@pass_session
def watch(session: Session, workflow_id: str, run_id: str | None, once: bool,
          interval: float) -> None:
    """Watch one run live until it closes.

    Status, current phase, current activity with its heartbeat progress (a
    bar when the details carry {"done": n, "total": m}) and deadlines
    counting down. With --json: the wire's run description (as describe
    --json), one per line, each time the run changes.
    """
    out = session.out

    async def body(client: durable.Client) -> None:
        handle = client.get_handle(workflow_id, run_id=run_id)
        info = await handle.describe()

        async def wire() -> dict[str, Any] | None:
            return await model.read_run_description(
                client.control, workflow_id, (info.get("run") or {}).get("run_id"))

        if once:
            out.emit(info, lambda o, i: o.console.print(watch_frame(o, i, _fmt.utcnow())),
                     wire=await wire() if out.json else None)
            return
        # follow the run that is current now, not a later one after continue-as-new
        handle = client.get_handle(workflow_id, run_id=(info.get("run") or {}).get("run_id"))
        live_view = out.console.is_terminal and not out.json
        if live_view:
            await _watch_live(out, handle, info, interval)
            return
        shown = ""
        delay = 0.1
        while True:
            snapshot = _fmt.dumps(info)
            if snapshot != shown:
                shown, delay = snapshot, 0.1
                if out.json:
                    out.print_json(await wire(), lines=True)
                else:
                    out.console.print(watch_frame(out, info, _fmt.utcnow()))
                    out.console.print()
            else:
                delay = min(delay * 2, interval)
            if info.get("status") not in _fmt.OPEN_STATUSES:
                return
            await anyio.sleep(delay)
            info = await handle.describe()

    session.run(body)


async def _watch_live(out: Output, handle: durable.WorkflowHandle, info: dict[str, Any],
                      interval: float) -> None:
    from rich.live import Live

    with Live(watch_frame(out, info, _fmt.utcnow()), console=out.console,
              refresh_per_second=4, transient=False) as live:
        delay = 0.1
        previous = _fmt.dumps(info)
        while info.get("status") in _fmt.OPEN_STATUSES:
            await anyio.sleep(delay)
            info = await handle.describe()
            snapshot = _fmt.dumps(info)
            delay = 0.1 if snapshot != previous else min(delay * 2, interval)
            previous = snapshot
            live.update(watch_frame(out, info, _fmt.utcnow()))


def watch_frame(out: Output, info: Mapping[str, Any], now: datetime) -> RenderableType:
    """One frame of `durable watch`: what is happening now, and how long is left."""
    run = info.get("run") or {}
    open_ = info.get("status") in _fmt.OPEN_STATUSES
    title = Text.assemble(
        (str(info.get("workflow_id")), "bold"), f" ({info.get('workflow_type')}) run "
        f"{short_id(run.get('run_id'))} ", status_badge(info.get("status")),
        (f"   at {now.strftime('%H:%M:%S')} UTC", "dim"))
    grid = _grid()
    started_at, closed_at = _fmt.instant(run.get("started_at")), _fmt.instant(run.get("closed_at"))
    if started_at is not None:
        end = closed_at or now
        grid.add_row("elapsed", Text(_fmt.duration((end - started_at).total_seconds())))
    if info.get("reason"):
        grid.add_row("reason", Text(str(info.get("reason"))))
    elif info.get("closed_reason"):
        grid.add_row("closed reason", Text(str(info.get("closed_reason"))))
    phase = info.get("phase")
    if isinstance(phase, Mapping):
        grid.add_row("phase", phase_text(phase, now, open_))
    elif "phase" in info:
        grid.add_row("phase", Text("none", style="dim"))
    progress = _fmt.progress_of(info.get("progress"))
    if progress is not None:
        grid.add_row("units", progress_bar(out, *progress))
    if open_ and "waiting_for" in info:
        grid.add_row("waiting for", waiting_text(info.get("waiting_for"), now))
    pending = [op for op in info.get("pending_operations") or [] if isinstance(op, Mapping)]
    activities = [op for op in pending if op.get("kind") in ("activity", "local_activity")]
    if not pending:
        grid.add_row("current", Text("nothing pending" if open_ else "-", style="dim"))
    for op in activities:
        grid.add_row("activity", Text(
            f"{op.get('name')} (op {op.get('op_id')}) attempt {op.get('attempt') or '-'} "
            f"{op.get('task_status') or ''}".rstrip()))
        op_progress = _fmt.progress_of(op.get("heartbeat_details"))
        if op_progress is not None:
            grid.add_row("progress", progress_bar(out, *op_progress))
        elif op.get("heartbeat_details") is not None:
            grid.add_row("heartbeat", Text(_fmt.compact(op.get("heartbeat_details"), 80)))
    for op in pending:
        if op in activities:
            continue
        label = str(op.get("kind") or "op")
        name = op.get("name") or op.get("child_workflow_id") or ""
        detail = Text(f"{name} (op {op.get('op_id')})")
        if op.get("fire_at"):
            detail.append("  times out " if op.get("kind") == "condition" else "  fires ")
            detail.append_text(deadline(op.get("fire_at"), now, open_))
        grid.add_row(label, detail)
    grid.add_row("run deadline", deadline(run.get("run_deadline_at"), now, open_,
                                          run.get("closed_at")))
    grid.add_row("execution deadline", deadline(run.get("execution_deadline_at"), now, open_,
                                                run.get("closed_at")))
    cancellation = info.get("cancellation")
    if isinstance(cancellation, Mapping):
        cleanup_open = open_ and cancellation.get("lifecycle") in (
            "requested", "delivered", "cleaning_up")
        grid.add_row("cancellation", Text.assemble(
            lifecycle_badge(cancellation.get("lifecycle")), f" \"{cancellation.get('reason')}\""
            "  cleanup deadline ", deadline(cancellation.get("deadline_at"), now, cleanup_open,
                                            cancellation.get("closed_at"),
                                            cleanup=_fmt.cleanup_of(cancellation))))
    for failure in (info.get("failures") or [])[-1:]:
        if isinstance(failure, Mapping):
            grid.add_row("last failure", failure_text(failure, now))
    return Group(title, grid)
