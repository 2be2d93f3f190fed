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

from . import _fmt
from ._app import Output, Session, cli, json_option

pass_session = click.make_pass_decorator(Session)


@cli.command(short_help="List the workers of the namespace: alive, then gone.")
@click.option("--all", "show_all", is_flag=True, help="Also workers gone in the last hour.")
@json_option
@pass_session
def workers(session: Session, show_all: bool) -> None:
    """List workers: identity, host, pid, build, queue, what each serves and holds.

    A worker that stopped or stopped renewing its registration shows as gone
    (kept an hour; --all lists them). A name two live workers of one queue
    register with different code is flagged: either may run it.
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        found = await client.list_workers()
        listed = [w for w in found if show_all or w["alive"]]
        return {"workers": _fmt.jsonable(listed), "count": len(listed),
                "alive": sum(1 for w in found if w["alive"]),
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


def worker_list(out: Output, data: Mapping[str, Any]) -> None:
    found = data.get("workers") or []
    if not found:
        out.console.print(Text("No workers are registered in this namespace.", style="dim"))
        return
    now = _fmt.utcnow()
    for worker in found:
        alive = worker.get("alive")
        out.console.print(Text.assemble(
            ("Worker ", "bold"), (str(worker.get("identity")), "bold"), " ",
            ("alive", "green") if alive else ("gone", "red")))
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
        grid.add_row("holds", f"{worker.get('runs_held', 0)} runs, "
                              f"{worker.get('activities_held', 0)} activity attempts")
        out.console.print(grid)
        out.console.print()
    for clash in data.get("clashes") or []:
        shown = "; ".join(f"{d['definition']} ({', '.join(d['workers'])})"
                          for d in clash["definitions"])
        out.console.print(Text(
            f"warning: {clash['kind']} {clash['name']!r} on queue {clash['task_queue']!r} "
            f"has different code on live workers: {shown}", style="yellow"), soft_wrap=True)
