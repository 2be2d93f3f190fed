"""The commands of ``durable`` about runs (start, list, describe, history, result,
and steering one): each is one small function.

Commands of other concepts live beside it, each with its views: `_watch`,
`_cascade`, `_operations` (worker, serve, repair-pass), `_queues`,
`_schedules`, `_upgrade`; `_group` adds them all to the ``durable`` group.

To add one, declare its click arguments, write an ``async def body(client)``
that calls the public client API and returns a JSON-able dict, and hand it to
``session.run``; print it with ``session.out.emit(data, view)``. Connecting,
--json, NO_COLOR and exit codes are handled around it (`_app`). The JSON shape
of a new read command goes in `schemas.py` and docs/cli.md; the command
joins the group in `_group`. A run, a page of runs and a history event print
as the HTTP wire carries them (`durable.http.model`), so a script reads the
same JSON from ``durable --json`` and from ``/api``.
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
from .. import present_ops as _ops
from ..http import model
from . import _views
from ._app import EXIT_ERROR, EXIT_REFUSED, CliError, Session, json_option
from ._params import (
    DURATION,
    complete_status,
    parse_args_json,
    run_option,
    workflow_id_argument,
)

pass_session = click.make_pass_decorator(Session)

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

    async def body(client: durable.Client) -> tuple[dict[str, Any], dict[str, Any] | None]:
        try:
            handle = await client.start(workflow_type, *args, id=workflow_id, options=options,
                                        task_queue=task_queue)
        except durable.NameNotRegistered as exc:
            raise CliError(
                f"no live worker in namespace {session.namespace!r} has registered workflow "
                f"type {workflow_type!r}",
                fix="start a worker that registers it with `durable worker MODULE:ATTR`, or "
                    "check the name and --namespace") from exc
        info = await handle.describe()
        wire = await model.read_run_description(client.control, workflow_id,
                                                (info.get("run") or {}).get("run_id"))
        return _run_shape(info), wire

    human, wire = session.run(body)
    session.out.emit(human, _views.started, wire=wire)


# ---------------------------------------------------------------- list


@click.command("list", short_help="List runs, newest first.")
@click.option("--status", metavar="S", shell_complete=complete_status,
              help="Only runs with this status (running, completed, failed, timed_out, ...).")
@click.option("--type", "workflow_type", metavar="T", help="Only workflows of this type.")
@click.option("--query", metavar="Q",
              help="Only runs the reference engine's visibility query keeps: "
                   "Field = 'literal' joined by AND, on WorkflowId, WorkflowType, TaskQueue, "
                   "ExecutionStatus (its status words: pending, running, completed, failed, "
                   "cancelled, terminated); or text of the workflow id.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True,
              help="At most this many runs, newest first.")
@click.option("--next-page-token", "token", metavar="TOKEN",
              help="The next page: the next_page_token of the previous page (--json).")
@json_option
@pass_session
def list_(session: Session, status: str | None, workflow_type: str | None,
          query: str | None, limit: int, token: str | None) -> None:
    """List workflow runs, newest first.

    With --json: the wire's page, ``{workflows, workflow_count,
    next_page_token}``; pass --next-page-token (and the same filters) for
    the page after.
    """

    async def body(client: durable.Client) -> dict[str, Any]:
        page = await client.list_page(status=status, workflow_type=workflow_type,
                                      limit=limit, cursor=token, query=query)
        return model.list_to_wire(page)

    session.out.emit(session.run(body), _views.run_list)


# ---------------------------------------------------------------- describe


@click.command(short_help="Show a run: status, deadlines, pending ops, failures.")
@workflow_id_argument
@run_option
@json_option
@pass_session
def describe(session: Session, workflow_id: str, run_id: str | None) -> None:
    """Show a run: status, timeouts and deadlines, pending operations, failures, cancellation."""

    async def body(client: durable.Client) -> tuple[dict[str, Any], dict[str, Any] | None]:
        info = await client.get_handle(workflow_id, run_id=run_id).describe()
        info["holder"] = await _fmt.holder(info, client.list_workers)
        info["owner_presence"] = await _ops.owner_presence(info, client.list_workers)
        wire = None
        if session.out.json:
            wire = await model.read_run_description(client.control, workflow_id,
                                                    (info.get("run") or {}).get("run_id"),
                                                    client.list_workers)
        return dict(_fmt.jsonable(info)), wire

    human, wire = session.run(body)
    session.out.emit(human, _views.describe, wire=wire)


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

    With --json: the wire's history page with every event (``{workflow_id,
    run_id, events, next_page_token: null, last_sequence}``); with --follow
    --json: one wire event per line (JSON Lines) as they are recorded.
    """
    out = session.out

    async def body(client: durable.Client) -> tuple[dict[str, Any], dict[str, Any]] | None:
        info = await client.get_handle(workflow_id, run_id=run_id).describe()
        pinned = (info.get("run") or {}).get("run_id")
        handle = client.get_handle(workflow_id, run_id=pinned)
        recorded = await handle.history()
        events = [_event(e) for e in recorded]
        data = {"workflow_id": info.get("workflow_id"), "run_id": pinned,
                "namespace": info.get("namespace"), "workflow_type": info.get("workflow_type"),
                "events": events}
        if not follow:
            return data, model.history_to_wire(workflow_id, str(pinned), recorded, more=False)
        started = _fmt.instant(events[0]["recorded_at"]) if events else None
        if out.json:
            for event in recorded:
                out.print_json(model.event_to_wire(event), lines=True)
        else:
            _views.history(out, data)
        last = events[-1]["sequence"] if events else 0
        delay = 0.05
        status = (info.get("run") or {}).get("status")
        while True:
            still_open = status in _fmt.OPEN_STATUSES
            if still_open:
                await anyio.sleep(delay)
            fresh = [e for e in await handle.history() if e.sequence > last]
            new = [_event(e) for e in fresh]
            if new:
                delay = 0.05
                last = new[-1]["sequence"]
                started = started or _fmt.instant(new[0]["recorded_at"])
                if out.json:
                    for event in fresh:
                        out.print_json(model.event_to_wire(event), lines=True)
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

    shown = session.run(body)
    if shown is not None:
        out.emit(shown[0], _views.history, wire=shown[1])


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
        status = cancellation = None
        if not answer.accepted:
            # a repeat: the run may have closed since the original request, and
            # its deadline is then not "late" (one more read, for repeats only)
            info = await handle.describe()
            status, cancellation = info.get("status"), info.get("cancellation")
        return {"workflow_id": workflow_id, "accepted": answer.accepted,
                "context": _fmt.jsonable(context), "status": status,
                "cancellation": _fmt.jsonable(cancellation)}

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
        found: dict[str, Any] = {"workflow_id": workflow_id, "cleared": cleared, "units": units}
        if not cleared:  # why it does not go on, when that is a deploy, not a review
            found["blocked"] = (await handle.describe()).get("blocked")
        return found

    session.out.emit(session.run(body), _views.reviewed)


args_option = click.option(
    "--args", "args_json", metavar="JSON_ARRAY",
    help="The handler's arguments as a JSON array, e.g. '[\"ann\", 3]'.")


@click.command(short_help="Send a running workflow a signal.")
@workflow_id_argument
@click.argument("name")
@args_option
@click.option("--request-id", metavar="ID",
              help="Idempotency key: the same id again is recorded once (safe to retry).")
@run_option
@json_option
@pass_session
def signal(session: Session, workflow_id: str, name: str, args_json: str | None,
           request_id: str | None, run_id: str | None) -> None:
    """Send the workflow's signal NAME; returns once it is recorded.

    The workflow's handler gets it in the order signals were sent, exactly
    once. A closed run refuses it (exit 4). With --request-id, sending again
    (a retry after a lost answer) records nothing new: `recorded` is false.
    """
    args = parse_args_json(args_json, "--args", "handler's")

    async def body(client: durable.Client) -> dict[str, Any]:
        recorded = await client.get_handle(workflow_id, run_id=run_id).signal(
            name, *args, requester=_requester(), source="cli", request_id=request_id)
        return {"workflow_id": workflow_id, "run_id": run_id, "signal": name,
                "recorded": recorded}

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
