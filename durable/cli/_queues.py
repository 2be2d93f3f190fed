"""``durable workers`` and ``durable queue ...``: who serves the namespace, and
how much of each queue may run at once (docs/cli.md, docs/queues.md).

Each command is one small function as in `_commands`; its human view is
describe-style (a block per worker or queue), ``--json`` prints the client's
dicts with instants as ISO 8601 strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.table import Table
from rich.text import Text

import durable

from .. import present as _fmt
from .. import present_ops as _ops
from ._app import Output, Session, json_option

pass_session = click.make_pass_decorator(Session)


@click.command(short_help="List the workers of the namespace: alive, then stopped or gone.")
@click.option("--all", "show_all", is_flag=True,
              help="Also workers stopped or gone in the last hour.")
@json_option
@pass_session
def workers(session: Session, show_all: bool) -> None:
    """List workers: identity, host, pid, build, queue, what each serves and holds.

    A worker that stopped (gracefully: it said so) shows as stopped, one that
    stopped renewing its registration without a word (killed, cut off) as
    gone; both are kept an hour (--all lists them). A name two live workers of one queue
    register with different code is flagged: either may run it.
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        found = await client.list_workers()
        listed = [w for w in found if show_all or w["alive"]]
        alive = sum(1 for w in found if w["alive"])
        return {"workers": _fmt.jsonable(listed), "count": len(listed),
                "alive": alive, "gone": len(found) - alive,
                # of the gone: those that stopped gracefully (the others went silent)
                "stopped": sum(1 for w in found if not w["alive"] and w.get("stopped_at")),
                "clashes": clashes(found)}

    session.out.emit(session.run(body), worker_list)


def clashes(found: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Names that live workers of one queue register with different code."""
    seen: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for worker in found:
        if not worker.get("alive"):
            continue
        defs = worker.get("definitions") or {}
        for queue in worker.get("task_queues") or []:
            for kind in ("workflows", "activities"):
                for name, d in (defs.get(kind) or {}).items():
                    by_print = seen.setdefault((queue, kind, name), {})
                    shown = f"{d.get('module')}.{d.get('qualname')}{d.get('signature')}"
                    by_print.setdefault(shown, []).append(str(worker["worker_id"]))
    return [{"task_queue": q, "kind": k[:-1] if k == "workflows" else "activity", "name": n,
             "definitions": [{"definition": d, "workers": ws} for d, ws in sorted(v.items())]}
            for (q, k, n), v in sorted(seen.items()) if len(v) > 1]


def worker_state(worker: Mapping[str, Any]) -> str:
    """``alive``; ``stopped`` (it stopped gracefully and said so: `stopped_at`);
    or ``gone`` (it stopped renewing without a word: killed, or cut off)."""
    if worker.get("alive"):
        return "alive"
    return "stopped" if worker.get("stopped_at") else "gone"


def _not_alive(stopped: int, gone: int) -> str:
    """``2 stopped``, ``1 gone``, ``1 stopped and 1 gone``."""
    return " and ".join(f"{n} {word}" for n, word in ((stopped, "stopped"), (gone, "gone"))
                        if n > 0)


def worker_list(out: Output, data: Mapping[str, Any]) -> None:
    found = data.get("workers") or []
    # the ones not alive and not listed (without --all): "no workers" after a
    # crash would hide that one was there and stopped renewing
    listed = [worker_state(w) for w in found]
    stopped = max(0, int(data.get("stopped") or 0) - listed.count("stopped"))
    hidden = int(data.get("gone") or 0) - listed.count("stopped") - listed.count("gone")
    silent = max(0, hidden - stopped)
    if not found:
        if hidden > 0:
            out.console.print(Text(
                f"No live workers in this namespace: {_not_alive(stopped, silent)} in the "
                "last hour (durable workers --all lists them).", style="yellow"),
                soft_wrap=True)
        else:
            out.console.print(Text("No workers are registered in this namespace.",
                                   style="dim"))
        return
    now = _fmt.utcnow()
    for worker in found:
        alive = worker.get("alive")
        state = worker_state(worker)
        out.console.print(Text.assemble(
            ("Worker ", "bold"), (str(worker.get("identity")), "bold"), " ",
            (state, {"alive": "green", "stopped": "yellow", "gone": "red"}[state])))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("worker id", str(worker.get("worker_id")))
        grid.add_row("host / pid", f"{worker.get('host') or '-'} / {worker.get('pid') or '-'}")
        grid.add_row("build", str(worker.get("build_id") or "-"))
        grid.add_row("task queues", ", ".join(worker.get("task_queues") or []))
        grid.add_row("workflows", ", ".join(worker.get("workflows") or []) or "-")
        grid.add_row("activities", ", ".join(worker.get("activities") or []) or "-")
        seen = _fmt.instant(worker.get("last_seen_at"))
        grid.add_row("last seen", _fmt.relative(seen, now) if seen else "-")
        until = _fmt.instant(worker.get("expires_at"))
        if alive and until is not None:
            # a SIGKILLed worker reads alive until its registration lapses:
            # say on what evidence, as the web UI's Workers page does
            grid.add_row("presumed", Text(
                f"alive until {_fmt.absolute(until)} ({_fmt.relative(until, now)}) unless "
                "seen again (a killed worker looks alive until then)", style="dim"))
        stopped_at = _fmt.instant(worker.get("stopped_at"))
        if state == "stopped" and stopped_at is not None:
            grid.add_row("stopped", f"{_fmt.absolute(stopped_at)} "
                                    f"({_fmt.relative(stopped_at, now)}): it stopped itself")
        elif state == "gone":
            grid.add_row("presumed", Text(
                "gone: it stopped renewing without saying it stopped (killed, or cut off)"
                + (f"; presumed gone since {_fmt.absolute(until)}" if until else ""),
                style="red"))
        grid.add_row("holds", f"{worker.get('runs_held', 0)} runs, "
                              f"{worker.get('activities_held', 0)} activity attempts")
        blocked = _fmt.loop_blocked_text(worker.get("loop_blocked"), now)
        if blocked is not None:
            grid.add_row("event loop", Text(blocked, style="yellow"))
        released = _fmt.runs_released_text(worker.get("runs_released"), now)
        if released is not None:
            recent = (worker.get("runs_released") or {}).get("recent")
            grid.add_row("put down", Text(released, style="yellow" if recent else ""))
        out.console.print(grid)
        out.console.print()
    if hidden > 0:
        out.console.print(Text(f"({_not_alive(stopped, silent)} more in the last hour: "
                               "--all lists them)", style="dim"))
    for clash in data.get("clashes") or []:
        shown = "; ".join(f"{d['definition']} ({', '.join(d['workers'])})"
                          for d in clash["definitions"])
        out.console.print(Text(
            f"warning: {clash['kind']} {clash['name']!r} on queue {clash['task_queue']!r} "
            f"has different code on live workers: {shown}", style="yellow"), soft_wrap=True)


# ---------------------------------------------------------------- durable queue


@click.group(short_help="See task queues and their builds, and set their limits.")
def queue() -> None:
    """Task queues: what runs and waits on each, and how much may run at once
    across every worker (docs/queues.md)."""


@queue.command("list", short_help="List the queues: limits, running, waiting.")
@json_option
@pass_session
def queue_list(session: Session) -> None:
    """Every queue that has limits, a live worker, or open work."""

    async def body(client: durable.Client) -> dict[str, Any]:
        found = await client.list_queues()
        return {"queues": _fmt.jsonable(found), "count": len(found)}

    session.out.emit(session.run(body), queue_table)


@queue.command("describe", short_help="Show a queue: limits, running, waiting, rate left.")
@click.argument("name", metavar="QUEUE")
@json_option
@pass_session
def queue_describe(session: Session, name: str) -> None:
    """Limits, runs and activity attempts running and waiting (the oldest's
    age), the rate left, and the keys holding the most slots."""

    async def body(client: durable.Client) -> dict[str, Any]:
        return dict(_fmt.jsonable(await client.describe_queue(name)))

    session.out.emit(session.run(body), queue_view)


def _rate(text: str | None) -> durable.Rate | None:
    """``100/60`` (100 starts per 60 s) or ``100`` (per second)."""
    if text is None or text.lower() == "none":
        return None
    count, _, per = text.partition("/")
    try:
        return durable.Rate(int(count), per=float(per) if per else 1.0)
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r} is not a rate; write COUNT/SECONDS, e.g. 100/60 ({exc})") from exc


@queue.command("set-limits", short_help="Set how much of a queue may run at once.")
@click.argument("name", metavar="QUEUE")
@click.option("--max-running", type=click.IntRange(1), metavar="N",
              help="Runs of the queue held by workers at once, across all workers.")
@click.option("--max-running-activities", type=click.IntRange(1), metavar="N",
              help="Remote activity attempts of the queue running at once.")
@click.option("--rate", metavar="N/S", help="First starts of runs per period: 100/60.")
@click.option("--activity-rate", metavar="N/S", help="Activity attempts started per period.")
@click.option("--max-running-per-key", type=click.IntRange(1), metavar="N",
              help="Runs per concurrency key at once.")
@click.option("--clear", is_flag=True, help="Remove every limit first (then apply the others).")
@json_option
@pass_session
def queue_set_limits(session: Session, name: str, max_running: int | None,
                     max_running_activities: int | None, rate: str | None,
                     activity_rate: str | None, max_running_per_key: int | None,
                     clear: bool) -> None:
    """Set the queue's limits; the limits not given keep their value (unless
    --clear). Workers hold to them from their next claim."""
    run_rate, attempt_rate = _rate(rate), _rate(activity_rate)

    async def body(client: durable.Client) -> dict[str, Any]:
        current = (await client.describe_queue(name))["limits"]
        merged = {} if clear else {k: v for k, v in current.items() if v is not None}
        given = {"max_running": max_running, "max_running_activities": max_running_activities,
                 "max_running_per_key": max_running_per_key,
                 "rate": run_rate.to_dict() if run_rate else None,
                 "activity_rate": attempt_rate.to_dict() if attempt_rate else None}
        merged.update({k: v for k, v in given.items() if v is not None})
        await client.set_queue_limits(name, durable.QueueLimits.from_dict(merged))
        return dict(_fmt.jsonable(await client.describe_queue(name)))

    session.out.emit(session.run(body), queue_view)


def _limit_text(limits: Mapping[str, Any]) -> str:
    parts = []
    for key, label in (("max_running", "running"), ("max_running_per_key", "per key"),
                       ("max_running_activities", "activities")):
        if limits.get(key) is not None:
            parts.append(f"{label} <= {limits[key]}")
    for key, label in (("rate", "rate"), ("activity_rate", "activity rate")):
        if limits.get(key):
            parts.append(f"{label} {limits[key]['count']}/{limits[key]['per']:g}s")
    return ", ".join(parts) or "none"


def queue_table(out: Output, data: Mapping[str, Any]) -> None:
    found = data.get("queues") or []
    if not found:
        out.console.print(Text("No task queues have limits, workers or open work.",
                               style="dim"))
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("QUEUE", "RUNNING", "WAITING", "OLDEST", "ACTIVITIES", "WORKERS", "LIMITS"):
        table.add_column(column, overflow="fold")
    for q in found:
        runs, acts = q["runs"], q["activities"]
        oldest = runs.get("oldest_waiting_seconds")
        table.add_row(q["name"], str(runs["running"]), str(runs["waiting"]),
                      _fmt.duration(oldest) if oldest is not None else "-",
                      f"{acts['running']} running, {acts['waiting']} waiting",
                      str(q["workers"]), _limit_text(q["limits"]))
    out.console.print(table)


def queue_view(out: Output, q: Mapping[str, Any]) -> None:
    runs, acts, limits = q["runs"], q["activities"], q["limits"]
    out.console.print(Text.assemble(("Queue ", "bold"), (str(q["name"]), "bold")))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("namespace", str(q.get("namespace")))
    grid.add_row("limits", _limit_text(limits))
    of = f" of {limits['max_running']}" if limits.get("max_running") else ""
    grid.add_row("runs", f"{runs['running']} running{of}, {runs['waiting']} waiting")
    if runs.get("oldest_waiting_seconds") is not None:
        grid.add_row("oldest waiting", _fmt.duration(runs["oldest_waiting_seconds"]))
    if runs.get("rate_left") is not None:
        grid.add_row("rate left", f"{runs['rate_left']} starts")
    of = (f" of {limits['max_running_activities']}"
          if limits.get("max_running_activities") else "")
    grid.add_row("activities", f"{acts['running']} running{of}, {acts['waiting']} waiting")
    if acts.get("rate_left") is not None:
        grid.add_row("activity rate left", f"{acts['rate_left']} starts")
    if runs.get("running_by_key"):
        grid.add_row("busiest keys", ", ".join(
            f"{k} ({n})" for k, n in runs["running_by_key"].items()))
    grid.add_row("live workers", str(q["workers"]))
    out.console.print(grid)
    idle = _ops.idle_queue(q)
    if idle:
        out.console.print(Text(idle, style="bold yellow"))


@queue.command("builds", short_help="Show a queue's builds during a deploy.")
@click.argument("name", metavar="QUEUE")
@json_option
@pass_session
def queue_builds(session: Session, name: str) -> None:
    """Each build serving the queue (or still named by its open runs): its live
    and stale workers, the open runs it last advanced, how many of those other
    builds refused (only it, or a patched build, continues them), and the open
    runs it refused itself. Read it before stopping an old build's last
    workers (docs/deploying.md)."""

    in_use: list[str] = []

    async def body(client: durable.Client) -> dict[str, Any]:
        found = dict(_fmt.jsonable(await client.queue_builds(name)))
        if not found["build_ids"]:  # a misspelt queue, say: name the ones in use
            in_use.extend(q["name"] for q in await client.list_queues())
        return found

    data = session.run(body)
    session.out.emit(data, lambda out, shown: builds_view(out, shown, in_use))


def _build_name(build_id: str | None) -> str:
    return "(no build id)" if build_id is None else str(build_id)


def builds_view(out: Output, data: Mapping[str, Any],
                queues_in_use: Sequence[str] = ()) -> None:
    entries = data.get("build_ids") or []
    queue = data.get("task_queue")
    if not entries:
        others = [q for q in queues_in_use if q != queue]
        out.console.print(Text(
            f"No worker serves queue {queue!r} and no open run of it has been taken by a "
            "worker yet." + (f" Queues in use: {', '.join(others)}." if others else ""),
            style="dim"), soft_wrap=True)
        return
    out.console.print(Text.assemble(("Builds of queue ", "bold"), (str(queue), "bold")))
    table = Table(box=None, padding=(0, 2))
    for column in ("build", "workers", "open runs", "others refused", "it refused"):
        table.add_column(column, justify="left" if column in ("build", "workers") else "right")
    for e in entries:
        live, stale = e["active_worker_count"], e["stale_worker_count"]
        workers = (f"{live} live" + (f", {stale} stale" if stale else "") if live or stale
                   else "none")
        table.add_row(_build_name(e["build_id"]),
                      Text(workers, style="" if live else "yellow"),
                      str(e["open_runs"]), str(e["refused_elsewhere"]), str(e["blocked_runs"]))
    out.console.print(table)
    for e in entries:
        build = _build_name(e["build_id"])
        if e["refused_elsewhere"] and not e["active_worker_count"]:
            out.console.print(Text(
                f"warning: {e['refused_elsewhere']} open run(s) that other builds cannot "
                f"replay wait for build {build}, and no live worker runs it: start one, "
                "deploy a patched build, or reset them (docs/deploying.md)",
                style="bold yellow"), soft_wrap=True)
        elif e["refused_elsewhere"]:
            out.console.print(Text(
                f"{e['refused_elsewhere']} open run(s) only build {build} (or a patched "
                "build) can continue: keep a worker of it until they close", style="yellow"),
                soft_wrap=True)
        for clash in e["workflow_definition_fingerprint_conflicts"]:
            out.console.print(Text(
                f"warning: the workers of build {build} register workflow "
                f"{clash['workflow_type']!r} with {clash['fingerprint_count']} different "
                "definitions: one build id for different code hides which runs it cannot "
                "replay", style="yellow"), soft_wrap=True)
