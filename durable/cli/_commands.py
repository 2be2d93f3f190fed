"""The commands of ``durable``: each is one small function.

To add one, declare its click arguments, write an ``async def body(client)``
that calls the public client API and returns a JSON-able dict, and hand it to
``session.run``; print it with ``session.out.emit(data, view)``. Connecting,
--json, NO_COLOR and exit codes are handled around it (`_app`). The JSON shape
of a new read command goes in `schemas.py` and docs/cli.md.
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import click

import durable

from .. import present as _fmt
from . import _views
from ._app import EXIT_ERROR, EXIT_REFUSED, CliError, Output, Session, json_option
from ._params import (
    DURATION,
    complete_status,
    complete_workflow_id,
    parse_args_json,
)

pass_session = click.make_pass_decorator(Session)

workflow_id_argument = click.argument("workflow_id", metavar="ID",
                                      shell_complete=complete_workflow_id)
run_option = click.option("--run", "run_id", metavar="RUN",
                          help="A given run of the workflow (default: its current run).")

_FAILURES = (durable.WorkflowFailed, durable.WorkflowCancelled, durable.WorkflowTimedOut,
             durable.WorkflowTerminated)


def _requester() -> dict[str, Any]:
    """Who asked, for the audit trail of a cancellation made from this terminal."""
    try:
        user: str | None = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers) and no LOGNAME/USER
        user = None
    return {"type": "user", "id": user, "label": f"durable CLI on {socket.gethostname()}"}


def _run_shape(info: Mapping[str, Any]) -> dict[str, Any]:
    run = info.get("run") or {}
    return {
        "workflow_id": info.get("workflow_id"),
        "run_id": run.get("run_id"),
        "workflow_type": info.get("workflow_type"),
        "namespace": info.get("namespace"),
        "status": info.get("status"),
        "task_queue": run.get("task_queue"),
        "started_at": run.get("started_at"),
        "execution_timeout_seconds": info.get("execution_timeout_seconds"),
        "run_timeout_seconds": run.get("run_timeout_seconds"),
        "execution_deadline_at": run.get("execution_deadline_at"),
        "run_deadline_at": run.get("run_deadline_at"),
    }


def _event(event: Any) -> dict[str, Any]:
    return {"sequence": event.sequence, "type": event.type,
            "recorded_at": _fmt.jsonable(event.recorded_at), "data": _fmt.jsonable(event.data)}


# ---------------------------------------------------------------- start


@click.command(short_help="Start a workflow by type name.")
@click.argument("workflow_type", metavar="TYPE")
@click.option("--id", "workflow_id", required=True, metavar="ID",
              help="The workflow id (unique in the namespace).")
@click.option("--input", "input_json", metavar="JSON_ARRAY",
              help="The workflow's arguments as a JSON array, e.g. '[\"o-1\", 3]'.")
@click.option("--execution-timeout", type=DURATION, metavar="S",
              help="Bound on the whole instance, across continue-as-new (90, 5m, 2h).")
@click.option("--run-timeout", type=DURATION, metavar="S", help="Bound on each run.")
@click.option("--task-queue", metavar="Q", help="Task queue (default: 'default').")
@click.option("--id-reuse", type=click.Choice([p.value for p in durable.IdReusePolicy]),
              default=durable.IdReusePolicy.REJECT_DUPLICATE.value, show_default=True,
              help="What to do when the id is already in use.")
@click.option("--priority", type=click.IntRange(0, 9), default=5, show_default=True,
              help="Claims go by priority (0 first), then age.")
@click.option("--concurrency-key", metavar="KEY",
              help="Counted by the queue's max_running_per_key (docs/queues.md).")
@json_option
@pass_session
def start(session: Session, workflow_type: str, workflow_id: str, input_json: str | None,
          execution_timeout: float | None, run_timeout: float | None, task_queue: str | None,
          id_reuse: str, priority: int, concurrency_key: str | None) -> None:
    """Start a workflow of type TYPE by name.

    No workflow code is needed here: a live worker that registered TYPE in the
    namespace picks the run up (start one with `durable worker MODULE:ATTR`).
    """
    args = parse_args_json(input_json, "--input")
    try:
        options = durable.StartOptions(id_reuse=durable.IdReusePolicy(id_reuse),
                                       priority=priority, concurrency_key=concurrency_key)
    except durable.ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--concurrency-key") from exc
    if execution_timeout is not None:
        try:
            options = options.with_execution_timeout(execution_timeout)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--execution-timeout") from exc
    if run_timeout is not None:
        try:
            options = options.with_run_timeout(run_timeout)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--run-timeout") from exc

    async def body(client: durable.Client) -> dict[str, Any]:
        try:
            handle = await client.start(workflow_type, *args, id=workflow_id, options=options,
                                        task_queue=task_queue)
        except durable.NameNotRegistered as exc:
            raise CliError(
                f"no live worker in namespace {session.namespace!r} has registered workflow "
                f"type {workflow_type!r}",
                fix="start a worker that registers it with `durable worker MODULE:ATTR`, or "
                    "check the name and --namespace") from exc
        return _run_shape(await handle.describe())

    session.out.emit(session.run(body), _views.started)


# ---------------------------------------------------------------- list


@click.command("list", short_help="List runs, newest first.")
@click.option("--status", metavar="S", shell_complete=complete_status,
              help="Only runs with this status (running, completed, failed, timed_out, ...).")
@click.option("--type", "workflow_type", metavar="T", help="Only workflows of this type.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True,
              help="At most this many runs, newest first.")
@json_option
@pass_session
def list_(session: Session, status: str | None, workflow_type: str | None, limit: int) -> None:
    """List workflow runs, newest first."""

    async def body(client: durable.Client) -> dict[str, Any]:
        runs = await client.list(status=status, workflow_type=workflow_type, limit=limit + 1)
        keys = ("workflow_id", "run_id", "workflow_type", "status", "run_number",
                "task_queue", "created_at", "started_at", "closed_at", "closed_reason", "waiting")
        shaped = [{k: _fmt.jsonable(r.get(k)) for k in keys} for r in runs[:limit]]
        return {"runs": shaped, "count": len(shaped), "truncated": len(runs) > limit}

    session.out.emit(session.run(body), _views.run_list)


# ---------------------------------------------------------------- describe


@click.command(short_help="Show a run: status, deadlines, pending ops, failures.")
@workflow_id_argument
@run_option
@json_option
@pass_session
def describe(session: Session, workflow_id: str, run_id: str | None) -> None:
    """Show a run: status, timeouts and deadlines, pending operations, failures, cancellation."""

    async def body(client: durable.Client) -> dict[str, Any]:
        info = await client.get_handle(workflow_id, run_id=run_id).describe()
        return dict(_fmt.jsonable(info))

    session.out.emit(session.run(body), _views.describe)


# ---------------------------------------------------------------- history


@click.command(short_help="Print a run's history (--follow streams it).")
@workflow_id_argument
@run_option
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new events until the run closes (Ctrl-C stops).")
@json_option
@pass_session
def history(session: Session, workflow_id: str, run_id: str | None, follow: bool) -> None:
    """Print a run's history events.

    With --json: one object with every event; with --follow --json: one
    event per line (JSON Lines) as they are recorded.
    """
    out = session.out

    async def body(client: durable.Client) -> dict[str, Any] | None:
        info = await client.get_handle(workflow_id, run_id=run_id).describe()
        pinned = (info.get("run") or {}).get("run_id")
        handle = client.get_handle(workflow_id, run_id=pinned)
        events = [_event(e) for e in await handle.history()]
        data = {"workflow_id": info.get("workflow_id"), "run_id": pinned,
                "namespace": info.get("namespace"), "workflow_type": info.get("workflow_type"),
                "events": events}
        if not follow:
            return data
        started = _fmt.instant(events[0]["recorded_at"]) if events else None
        if out.json:
            for event in events:
                out.print_json(event, lines=True)
        else:
            _views.history(out, data)
        last = events[-1]["sequence"] if events else 0
        delay = 0.05
        status = (info.get("run") or {}).get("status")
        while True:
            still_open = status in _fmt.OPEN_STATUSES
            if still_open:
                await anyio.sleep(delay)
            new = [_event(e) for e in await handle.history() if e.sequence > last]
            if new:
                delay = 0.05
                last = new[-1]["sequence"]
                started = started or _fmt.instant(new[0]["recorded_at"])
                if out.json:
                    for event in new:
                        out.print_json(event, lines=True)
                else:
                    out.console.print(_views.history_table(new, started, header=False))
            else:
                delay = min(delay * 2, 1.0)
            if not still_open:
                break
            current = await handle.describe()
            status = (current.get("run") or {}).get("status")
        if not out.json:
            out.note(f"run {pinned} is {status}; no more events to follow")
        return None

    data = session.run(body)
    if data is not None:
        out.emit(data, _views.history)


# ---------------------------------------------------------------- result


@click.command(short_help="Print the workflow's result (--wait for it).")
@workflow_id_argument
@click.option("--wait", "-w", is_flag=True, help="Wait until the workflow closes.")
@json_option
@pass_session
def result(session: Session, workflow_id: str, wait: bool) -> None:
    """Print the workflow's result (following continue-as-new).

    Exits 0 with the result when it completed; 1 when it closed another way
    (failed, cancelled, timed out, terminated: the failure is shown) or is
    still open and --wait was not given.
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        handle = client.get_handle(workflow_id)
        if not wait:
            info = await handle.describe()
            if info.get("status") in _fmt.OPEN_STATUSES:
                return {"workflow_id": workflow_id, "run_id": (info.get("run") or {}).get("run_id"),
                        "status": info.get("status"), "result": None, "failure": None}
        value: Any = None
        failure: Any = None
        try:
            value = await handle.result()
        except _FAILURES as exc:
            failure = exc.failure
        info = await handle.describe()
        return {"workflow_id": workflow_id, "run_id": (info.get("run") or {}).get("run_id"),
                "status": info.get("status") if failure is not None else "completed",
                "result": _fmt.jsonable(value), "failure": _fmt.jsonable(failure)}

    data = session.run(body)
    status = data["status"]
    if status == "completed" or session.out.json:
        session.out.emit(data, _views.result)
    if status == "completed":
        return
    if status in _fmt.OPEN_STATUSES:
        raise CliError(f"workflow {workflow_id!r} is still {status}: it has no result yet",
                       EXIT_ERROR, fix="pass --wait to wait for it")
    message = str((data.get("failure") or {}).get("message") or status)
    if message.startswith(f"{status}: "):
        message = message[len(f"{status}: "):]
    raise CliError(f"workflow {workflow_id!r} is {status}: {message}", EXIT_ERROR,
                   label="no result")


# ---------------------------------------------------------------- steering


@click.command("request-cancellation", short_help="Ask a run to stop cooperatively, with cleanup.")
@workflow_id_argument
@click.option("--reason", required=True, metavar="R", help="Why (kept in every view).")
@click.option("--cleanup-timeout", type=DURATION, default=30.0, show_default=True,
              metavar="S", help="How long the workflow's cleanup may take (30, 2m).")
@run_option
@json_option
@pass_session
def request_cancellation(session: Session, workflow_id: str, reason: str,
                         cleanup_timeout: float, run_id: str | None) -> None:
    """Ask a workflow to stop cooperatively: its cleanup code runs, bounded in time.

    A repeat returns the original request and deadline (never extended).
    """
    if cleanup_timeout <= 0:
        raise click.BadParameter("must be greater than 0 seconds", param_hint="--cleanup-timeout")

    async def body(client: durable.Client) -> dict[str, Any]:
        handle = client.get_handle(workflow_id, run_id=run_id)
        answer = await handle.request_cancellation(reason, cleanup_timeout=cleanup_timeout,
                                                   requester=_requester(), source="cli")
        context = dataclasses.asdict(answer.context)
        return {"workflow_id": workflow_id, "accepted": answer.accepted,
                "context": _fmt.jsonable(context)}

    session.out.emit(session.run(body), _views.cancellation_requested)


@click.command("retry-after-review", short_help="Let a run marked for review replay again.")
@workflow_id_argument
@click.option("--units", type=click.Choice(["rerun", "confirm"]),
              help="For a run whose units' outcome is unknown (status unknown): run them "
                   "again, or record them done after checking their effect.")
@json_option
@pass_session
def retry_after_review(session: Session, workflow_id: str, units: str | None) -> None:
    """Clear a run's review mark so that a worker claims and replays it.

    A run is marked after a replay mismatch (status needs_review: deploy code
    that replays its history first) or when idempotent units could not be
    confirmed (status unknown: check their effect, then --units rerun or
    --units confirm). Prints whether a mark was cleared.
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        handle = client.get_handle(workflow_id)
        cleared = await handle.retry_after_review(units=units)
        return {"workflow_id": workflow_id, "cleared": cleared, "units": units}

    session.out.emit(session.run(body), _views.reviewed)


args_option = click.option(
    "--args", "args_json", metavar="JSON_ARRAY",
    help="The handler's arguments as a JSON array, e.g. '[\"ann\", 3]'.")


@click.command(short_help="Send a running workflow a signal.")
@workflow_id_argument
@click.argument("name")
@args_option
@run_option
@json_option
@pass_session
def signal(session: Session, workflow_id: str, name: str, args_json: str | None,
           run_id: str | None) -> None:
    """Send the workflow's signal NAME; returns once it is recorded.

    The workflow's handler gets it in the order signals were sent, exactly
    once. A closed run refuses it (exit 4).
    """
    args = parse_args_json(args_json, "--args", "handler's")

    async def body(client: durable.Client) -> dict[str, Any]:
        await client.get_handle(workflow_id, run_id=run_id).signal(
            name, *args, requester=_requester(), source="cli")
        return {"workflow_id": workflow_id, "run_id": run_id, "signal": name,
                "recorded": True}

    session.out.emit(session.run(body), _views.signalled)


@click.command(short_help="Ask a workflow a query (read-only).")
@workflow_id_argument
@click.argument("name")
@args_option
@click.option("--timeout", type=DURATION, default=10.0, show_default=True, metavar="S",
              help="How long to wait for a worker's answer.")
@run_option
@json_option
@pass_session
def query(session: Session, workflow_id: str, name: str, args_json: str | None,
          timeout: float, run_id: str | None) -> None:
    """Ask the workflow's query NAME and print the answer.

    A worker holding the run answers from memory; a run no worker holds
    (closed ones too) is answered by a worker of its type replaying it.
    Nothing is recorded.
    """
    args = parse_args_json(args_json, "--args", "handler's")
    if timeout <= 0:
        raise click.BadParameter("must be greater than 0 seconds", param_hint="--timeout")

    async def body(client: durable.Client) -> dict[str, Any]:
        answer = await client.get_handle(workflow_id, run_id=run_id).query(
            name, *args, timeout=timeout)
        return {"workflow_id": workflow_id, "query": name, "result": _fmt.jsonable(answer)}

    session.out.emit(session.run(body), _views.answered)


@click.command(short_help="Run a workflow's update and print its result.")
@workflow_id_argument
@click.argument("name")
@args_option
@click.option("--update-id", metavar="ID",
              help="Makes it idempotent: the same id again prints the recorded result.")
@click.option("--timeout", type=DURATION, metavar="S",
              help="Stop waiting after this long (the update goes on once accepted).")
@run_option
@json_option
@pass_session
def update(session: Session, workflow_id: str, name: str, args_json: str | None,
           update_id: str | None, timeout: float | None, run_id: str | None) -> None:
    """Run the workflow's update NAME: validated, recorded, run as workflow code.

    A validator's refusal exits 4 with nothing recorded; a handler that
    raised exits 1.
    """
    args = parse_args_json(args_json, "--args", "handler's")
    if timeout is not None and timeout <= 0:
        raise click.BadParameter("must be greater than 0 seconds", param_hint="--timeout")
    chosen = update_id or uuid.uuid4().hex

    async def body(client: durable.Client) -> dict[str, Any]:
        result = await client.get_handle(workflow_id, run_id=run_id).update(
            name, *args, update_id=chosen, timeout=timeout, requester=_requester(), source="cli")
        return {"workflow_id": workflow_id, "update": name, "update_id": chosen,
                "result": _fmt.jsonable(result)}

    session.out.emit(session.run(body), _views.updated)


def _close(session: Session, workflow_id: str, run_id: str | None, action: str,
           reason: str) -> None:
    async def body(client: durable.Client) -> dict[str, Any]:
        handle = client.get_handle(workflow_id, run_id=run_id)
        before = await handle.describe()
        run = (before.get("run") or {}).get("run_id")
        if before.get("status") not in _fmt.OPEN_STATUSES:
            raise CliError(
                f"workflow {workflow_id!r} run {run} is already {before.get('status')}; nothing "
                f"was {action}", EXIT_REFUSED, label="refused")
        if action == "cancelled":
            await handle.cancel(reason)
        else:
            await handle.terminate(reason)
        after = await client.get_handle(workflow_id, run_id=run).describe()
        return {"workflow_id": workflow_id, "run_id": run, "action": action,
                "status": after.get("status"), "reason": reason}

    session.out.emit(session.run(body), _views.closed)


@click.command(short_help="Close a run now as cancelled; no cleanup runs.")
@workflow_id_argument
@click.option("--reason", default="cancelled with the durable CLI", show_default=True,
              metavar="R")
@run_option
@json_option
@pass_session
def cancel(session: Session, workflow_id: str, reason: str, run_id: str | None) -> None:
    """Close a run at once as cancelled: no cleanup code runs (see request-cancellation)."""
    _close(session, workflow_id, run_id, "cancelled", reason)


@click.command(short_help="Close a run now as terminated.")
@workflow_id_argument
@click.option("--reason", default="terminated with the durable CLI", show_default=True,
              metavar="R")
@run_option
@json_option
@pass_session
def terminate(session: Session, workflow_id: str, reason: str, run_id: str | None) -> None:
    """Close a run at once as terminated, revoking all its authority."""
    _close(session, workflow_id, run_id, "terminated", reason)


# ---------------------------------------------------------------- cascade and watch


@click.command(short_help="Show a cancellation's cascade as a tree.")
@workflow_id_argument
@run_option
@json_option
@pass_session
def cascade(session: Session, workflow_id: str, run_id: str | None) -> None:
    """Show what a cancellation did across the tree of runs.

    Runs, lifecycles, policies, stop receipts, deadlines, cleanup outcomes, and
    every stop that could not be verified (marked NOT VERIFIED).
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        view = await client.get_handle(workflow_id, run_id=run_id).cancellation_cascade()
        return {"workflow_id": workflow_id, **_fmt.jsonable(view)}

    session.out.emit(session.run(body), _views.cascade)


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
    counting down. With --json: describe() objects, one per line, each time
    the run changes.
    """
    out = session.out

    async def body(client: durable.Client) -> None:
        handle = client.get_handle(workflow_id, run_id=run_id)
        info = await handle.describe()
        if once:
            out.emit(info, lambda o, i: o.console.print(_views.watch_frame(o, i, _fmt.utcnow())))
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
                    out.print_json(info, lines=True)
                else:
                    out.console.print(_views.watch_frame(out, info, _fmt.utcnow()))
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

    with Live(_views.watch_frame(out, info, _fmt.utcnow()), console=out.console,
              refresh_per_second=4, transient=False) as live:
        delay = 0.1
        previous = _fmt.dumps(info)
        while info.get("status") in _fmt.OPEN_STATUSES:
            await anyio.sleep(delay)
            info = await handle.describe()
            snapshot = _fmt.dumps(info)
            delay = 0.1 if snapshot != previous else min(delay * 2, interval)
            previous = snapshot
            live.update(_views.watch_frame(out, info, _fmt.utcnow()))


# ---------------------------------------------------------------- operations


@click.command("repair-pass", short_help="Enforce every deadline that is due, once.")
@json_option
@pass_session
def repair_pass(session: Session) -> None:
    """Enforce every deadline that is due now, once (works with no worker running)."""

    async def body(client: durable.Client) -> dict[str, Any]:
        counts = await client.repair_pass()
        return {"repaired": dict(counts), "total": sum(counts.values())}

    session.out.emit(session.run(body), _views.repair)


@click.command(short_help="Run a worker for what MODULE:ATTR lists.")
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--task-queue", metavar="Q", help="Override the spec's task queue.")
@click.option("--identity", metavar="NAME", help="Worker id shown in describe() and receipts.")
@click.option("--backend", type=click.Choice(["asyncio", "trio"]), default="asyncio",
              show_default=True, help="Event loop to run the worker on.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                               case_sensitive=False),
              default="INFO", show_default=True, help="Level of the worker's log on stderr.")
@pass_session
def worker(session: Session, target: str, task_queue: str | None, identity: str | None,
           backend: str, log_level: str) -> None:
    """Run a worker for the workflows and activities MODULE:ATTR names.

    ATTR is a spec, a dict or object listing them:

    \b
        WORKER = {"workflows": [order], "activities": [charge], "task_queue": "orders"}

    or a factory: a function taking the client and returning a durable.Worker.
    MODULE is imported from the current directory too. SIGINT/SIGTERM stop
    the worker gracefully; a second signal exits at once.
    """
    from . import _worker

    if session.server:
        raise click.UsageError(
            "a worker reads and writes the database itself: give --db URL (or DURABLE_DB_URL), "
            "not --server")
    loaded = _worker.load_target(target)
    _worker.configure_logging(log_level)
    overrides = {"task_queue": task_queue, "identity": identity}
    session.run(lambda client: _worker.serve(client, loaded, target, overrides, session.out),
                create_database=True, backend=backend)



@click.command(short_help="Serve the HTTP control plane (and, optionally, a worker).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but loopback needs tokens.")
@click.option("--port", type=click.IntRange(0, 65535), default=8233, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--worker", "worker_targets", metavar="MODULE:ATTR", multiple=True,
              help="Also run a worker in this process (a spec or factory, as `durable "
                   "worker`); repeat for several (e.g. one per task queue).")
@click.option("--loop", type=click.Choice(["asyncio", "trio"]), default="asyncio",
              show_default=True, help="asyncio runs uvicorn; trio runs hypercorn.")
@click.option("--tokens-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Bearer tokens, one `token:role` per line (also DURABLE_TOKENS).")
@click.option("--max-wait", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              help="The longest long poll a request may ask for, in seconds.")
@click.option("--public-metrics", is_flag=True, help="Serve /metrics without a token.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A name clients reach the server by (the Host header; *.example.com for "
                   "subdomains, * for any); repeat for several. Others are refused (DNS "
                   "rebinding). Default: loopback names without tokens, any host with them.")
@click.option("--max-auth-failures", type=click.IntRange(0), default=10, show_default=True,
              help="Failed authentications per client address within a minute before it is "
                   "refused (429) for a while; 0: no limit (e.g. behind a proxy that limits).")
@click.option("--ui/--no-ui", default=True, show_default=True,
              help="Serve the web UI at /ui (the API is the same either way).")
@pass_session
def serve(session: Session, host: str, port: int, worker_targets: tuple[str, ...], loop: str,
          tokens_file: str | None, max_wait: float, public_metrics: bool, ui: bool,
          allowed_hosts: tuple[str, ...], max_auth_failures: int) -> None:
    """Serve the control plane for the database of --db (DURABLE_DB_URL).

    Operators and tools (curl, `durable --server URL ...`, the web UI at /ui)
    then reach the runs over HTTP. Tokens come from DURABLE_TOKENS
    ("tok1:operator,tok2:viewer") or --tokens-file; without tokens only a
    loopback address is allowed. The UI's session key comes from
    DURABLE_UI_SECRET (several servers behind one address need the same).
    Ctrl-C stops it.
    """
    if session.server or not session.db:
        raise click.UsageError(
            "serve needs the database itself: give --db URL (or DURABLE_DB_URL)")
    try:
        from ..http.serve import serve as serve_http
    except ImportError as exc:
        raise CliError(f"the control plane is not installed ({exc.name} is missing)",
                       fix="pip install 'durable-sdk[server]'") from None
    from ..http.serve import urls
    from . import _worker

    specs: list[Any] = []
    for target in worker_targets:
        loaded = _worker.load_target(target)
        specs.append(_worker.spec_kwargs(loaded, target) if _worker.is_spec(loaded) else loaded)

    def ready(bound: int) -> None:
        api, web = urls(host, bound)
        session.out.note(f"durable serve: the API at {api}"
                         + (f", the web UI at {web}" if ui else "")
                         + (f"; {len(specs)} worker(s) in this process" if specs else "")
                         + " (Ctrl-C stops it)")

    _worker.configure_logging("INFO")
    try:
        serve_http(session.db, host, port, tokens_file=tokens_file, worker=specs or None,
                   loop=loop, max_wait=max_wait, public_metrics=public_metrics, ui=ui,
                   allowed_hosts=list(allowed_hosts) or None,
                   max_auth_failures=max_auth_failures, on_ready=ready)
    except KeyboardInterrupt:
        session.out.note("durable serve stopped")
