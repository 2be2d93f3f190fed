"""``durable check-upgrade`` (a deploy gate) and ``durable reset`` (repair after a fix).

``check-upgrade``: would this code take every open run?
It loads the worker MODULE:ATTR names (as ``durable worker`` does, without
starting it) and replays every open run of its task queue against that code,
read-only (`durable._runtime.upgrade.check_open_runs`): nothing is claimed,
executed or recorded. Exit 0 when every run replays; exit 1 listing the runs
the code cannot take, each with its first diverging op, so that a pipeline
stops before it ships a build that would leave runs blocked. It reads the
database itself (``--db``), like a worker.

``reset ID --to-op OP --reason R``: `WorkflowHandle.reset`, over ``--db`` or
``--server``. See docs/deploying.md.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

import durable

from ._app import EXIT_ERROR, Output, Session, json_option

pass_session = click.make_pass_decorator(Session)


@click.command("check-upgrade",
             short_help="Replay every open run against a build's code; exit 1 if any diverge.")
@click.option("--worker", "target", required=True, metavar="MODULE:ATTR",
              help="The worker spec or factory of the build to check (as `durable worker`).")
@click.option("--build-id", metavar="ID", envvar="DURABLE_BUILD_ID", show_envvar=True,
              help="Override the spec's build_id, as `durable worker --build-id` does.")
@click.option("--db", metavar="URL", help="Storage URL (or the global --db / DURABLE_DB_URL).")
@json_option
@pass_session
def check_upgrade(session: Session, target: str, build_id: str | None, db: str | None) -> None:
    """Replay every open run of the worker's task queue against the code
    MODULE:ATTR names, recording nothing, and list the runs it cannot take
    (the first op where each diverges). Exit 1 when there is one: a worker of
    this build would leave those runs blocked (they stay with the build that
    runs them now). Run it in CI against a copy of production's database, or
    against production itself: it only reads.
    """
    from .._runtime.upgrade import check_open_runs
    from . import _worker

    if db:
        session.db = db
    if session.server:
        raise click.UsageError("check-upgrade replays runs from the database itself: give "
                               "--db URL (or DURABLE_DB_URL), not --server")
    loaded = _worker.load_target(target)

    async def body(client: durable.Client) -> dict[str, Any]:
        worker = await _worker.build_worker(client, loaded, target, {"build_id": build_id})
        report = await check_open_runs(
            client.store, worker.namespace, worker.task_queue, worker.workflows,
            activity_names=await worker.known_activity_names(), converter=client.converter,
            limits=client.limits)
        found = report.as_dict(worker.build_id) | {"task_queue": worker.task_queue,
                                                    "namespace": worker.namespace}
        if not report.checked and not (await client.list_page(limit=1)).items:
            # nothing checked where nothing ever ran: a gate pointed at the wrong
            # database or namespace passes without checking anything
            found["note"] = (f"namespace {worker.namespace!r} of this database has no run at "
                             "all, so nothing was checked: is --db (DURABLE_DB_URL) "
                             "production's database, and -n/--namespace its namespace?")
        return found

    result = session.run(body)
    session.out.emit(result, _report)
    if result["cannot_take"]:
        raise click.exceptions.Exit(EXIT_ERROR)


@click.command(short_help="Continue a failed or stuck run as a new run from an op.")
@click.argument("workflow_id", metavar="ID")
@click.option("--to-op", required=True, metavar="OP",
              help="The op to continue from, e.g. 0:5 (`durable history ID` shows op ids); "
                   "results recorded before it are kept.")
@click.option("--reason", default="reset after a fix", show_default=True,
              help="Why (recorded in both runs' history).")
@click.option("--run-id", metavar="RUN", help="The run to reset (default: the current run).")
@json_option
@pass_session
def reset(session: Session, workflow_id: str, to_op: str, reason: str,
          run_id: str | None) -> None:
    """Repair a failed, timed-out, terminated, cancelled or stuck run after a
    fix: it continues as a new run of the same workflow id that keeps the
    results recorded before OP (nothing before it runs again) and runs the
    rest with the code workers run now. A stuck (open) run is terminated
    first. The old and the new run name each other (`durable describe`).
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        return await client.control.reset(workflow_id, run_id, to_op=to_op, reason=reason)

    session.out.emit(session.run(body), _reset)


def _reset(out: Output, data: Any) -> None:
    out.console.print(Text(
        f"workflow {data['workflow_id']} continues as run {data['run_id']} from op "
        f"{data['to_op']}, keeping {data['kept_ops']} recorded op(s) of run "
        f"{data['reset_from_run_id']}", style="green"))


def _report(out: Output, data: Any) -> None:
    build = data.get("build_id") or "(no build id)"
    blocked = data.get("cannot_take") or []
    if not blocked:
        out.console.print(Text(f"ok: build {build} replays all {data['checked']} open run(s) "
                               f"of task queue {data['task_queue']!r} in namespace "
                               f"{data['namespace']!r}", style="green"))
        if data.get("note"):
            out.console.print(Text(f"note: {data['note']}", style="bold yellow"))
        return
    table = Table(box=None, pad_edge=False)
    for column in ("WORKFLOW ID", "RUN", "TYPE", "LAST BUILD", "DIVERGES AT"):
        table.add_column(column, overflow="fold")
    for row in blocked:
        table.add_row(str(row["workflow_id"]), str(row["run_id"]), str(row["workflow_type"]),
                      str(row["last_build"] or "-"), str(row["divergence"]))
    out.console.print(table)
    out.console.print(Text(
        f"build {build} cannot take {len(blocked)} of {data['checked']} open run(s): they "
        "stay with the build that runs them now (deploy alongside it, or patch the change "
        "with workflow.patched())", style="bold red"))
