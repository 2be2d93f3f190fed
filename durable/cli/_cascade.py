"""``durable cascade``: a cancellation's cascade as a tree (the command and its view).

What a cancellation request (or a closing parent) did to a run and its
children, run by run, each stop judged by its evidence: a stop confirmed by
a receipt says so, one that is not says ``NOT VERIFIED`` and why. It reads
`cancellation_cascade()` (`durable/store/cascade.py`, the one view of storage
that judges evidence) and so is a view of its own, beside the generic ones in
`_views`; like `_queues` and `_schedules`, the command lives with its view.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text
from rich.tree import Tree

import durable

from .. import present as _fmt
from .. import present_ops as _ops
from ..present import requester_text as _requester
from ._app import Output, Session, json_option
from ._params import run_option, workflow_id_argument
from ._views import (
    boundary_text,
    deadline,
    lifecycle_badge,
    not_verified,
    outcome_style,
    short_id,
    status_badge,
    verified,
    when,
)

pass_session = click.make_pass_decorator(Session)


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

    session.out.emit(session.run(body), print_cascade)


def print_cascade(out: Output, data: Mapping[str, Any]) -> None:
    view = cascade_tree(out, data, _fmt.utcnow())
    out.console.print(view, soft_wrap=isinstance(view, Text))


def cascade_tree(out: Output, data: Mapping[str, Any], now: datetime) -> RenderableType:
    root = data.get("root")
    workflow_id = data.get("workflow_id")
    runs = [r for r in data.get("runs") or [] if isinstance(r, Mapping)]
    if not isinstance(root, Mapping) and runs:  # a closed parent: its close reached children
        tree = Tree(Text.assemble(
            ("What closing ", "bold"), (str(workflow_id), "bold"), " (",
            status_badge(runs[0].get("status")), ") did to its children "
            "(no cancellation request: its parent-close policy applied)"))
        for finding in data.get("findings") or []:
            if isinstance(finding, Mapping):
                tree.add(Text.assemble(not_verified(out), " ",
                                       (f"{finding.get('workflow_id')}: ", "bold red"),
                                       (str(finding.get("finding")), "red")))
        _cascade_runs(out, tree, data, runs, now)
        return tree
    if not isinstance(root, Mapping):
        return Text(f"Workflow {workflow_id} has no cancellation request: there is no cascade "
                    "to show (durable request-cancellation ID --reason R asks for one).")
    tree = Tree(Text.assemble(("Cancellation cascade of ", "bold"),
                              (str(root.get("root_workflow_id") or workflow_id), "bold"),
                              f": \"{root.get('reason')}\""))
    tree.add(Text.assemble(
        f"request {root.get('request_id')} by {_requester(root.get('requester'))}"
        f" via {root.get('source')}, requested ", when(root.get("requested_at"), now)))
    runs = [r for r in data.get("runs") or [] if isinstance(r, Mapping)]
    any_open = bool(_ops.cascade_going(runs))  # (not an abandoned child: by design)
    tree.add(Text.assemble(
        "cleanup deadline ", deadline(root.get("deadline_at"), now, any_open,
                                      runs[0].get("cleanup_closed_at") if runs else None,
                                      cleanup=_fmt.cleanup_of(runs[0]) if runs else None),
        f"  cleanup timeout {_fmt.seconds_text(root.get('cleanup_timeout_seconds'))}"
        if root.get("cleanup_timeout_seconds") is not None else ""))
    findings = [f for f in data.get("findings") or [] if isinstance(f, Mapping)]
    progress = _ops.cascade_in_progress(data)
    if progress is not None and not findings:
        tree.add(Text(f"{out.glyph('…', '...')} {progress}", style="bold yellow"))
    elif data.get("inspection_complete") and not findings:
        tree.add(Text.assemble(verified(out), ": inspection complete, every stop is confirmed "
                               "by a receipt"))
    else:
        branch = tree.add(Text.assemble(
            not_verified(out),
            (f": inspection incomplete, {len(findings)} "
             f"{'finding' if len(findings) == 1 else 'findings'}: could not verify",
             "bold red")))
        for finding in findings:
            branch.add(Text.assemble(not_verified(out), " ",
                                     (f"{finding.get('workflow_id')}: ", "bold red"),
                                     (str(finding.get("finding")), "red")))
    _cascade_runs(out, tree, data, runs, now)
    return tree


def _cascade_runs(out: Output, tree: Tree, data: Mapping[str, Any],
                  runs: list[Mapping[str, Any]], now: datetime) -> None:
    if data.get("truncated"):
        tree.add(Text(f"truncated: only the first {len(runs)} runs of the tree are shown",
                      style="bold yellow"))
    by_run, edges = _fmt.cascade_links(data)
    shown: set[Any] = set()
    if runs:
        _run_node(out, tree, runs[0], by_run, edges, shown, now)
    for run in runs:
        if run.get("run_id") not in shown:
            _run_node(out, tree, run, by_run, edges, shown, now)


def _run_node(out: Output, parent: Tree, run: Mapping[str, Any], by_run: Mapping[Any, Any],
              edges: Mapping[Any, list[Mapping[str, Any]]], shown: set[Any],
              now: datetime) -> None:
    shown.add(run.get("run_id"))
    open_ = run.get("status") in _fmt.OPEN_STATUSES
    node = parent.add(Text.assemble(
        (str(run.get("workflow_id")), "bold"), f" ({run.get('workflow_type')}) run "
        f"{short_id(run.get('run_id'))}  status ", status_badge(run.get("status")),
        "  lifecycle ", lifecycle_badge(run.get("lifecycle")),
        *(("  cleanup ", Text(str(run.get("cleanup_outcome")),
                              style=outcome_style(run.get("cleanup_outcome"))))
          if run.get("cleanup_outcome") else ()),
    ))
    request = run.get("request")
    if isinstance(request, Mapping) and request.get("parent_request_id"):
        node.add(Text(f"request {request.get('request_id')} from parent request "
                      f"{request.get('parent_request_id')} via {request.get('source')}"))
    if run.get("deadline_at"):
        cleanup_open = open_ and run.get("lifecycle") in ("requested", "delivered", "cleaning_up")
        node.add(Text.assemble("cleanup deadline ",
                               deadline(run.get("deadline_at"), now, cleanup_open,
                                        run.get("cleanup_closed_at"),
                                        cleanup=_fmt.cleanup_of(run))))
    delivery = run.get("delivery")
    if isinstance(delivery, Mapping) and delivery.get("delivered_at"):
        node.add(Text.assemble("delivered ", when(delivery.get("delivered_at"), now),
                               f" at {boundary_text(delivery.get('boundary'))}"))
    elif run.get("lifecycle") == "requested":
        node.add(Text("not delivered yet: no worker has taken the request", style="yellow"))
    for stop in run.get("activity_stops") or []:
        if isinstance(stop, Mapping):
            node.add(_stop_text(out, stop, now))
    propagation = run.get("child_propagation") or {}
    linked: set[Any] = set()
    for edge in edges.get(run.get("run_id"), []):
        child_id = edge.get("child_workflow_id")
        linked.add(child_id)
        item = propagation.get(child_id, {}) if isinstance(propagation, Mapping) else {}
        branch = node.add(_propagation_text(child_id, edge.get("policy"), item))
        child = by_run.get(edge.get("child_run_id"))
        if child is not None and child.get("run_id") not in shown:
            _run_node(out, branch, child, by_run, edges, shown, now)
    if isinstance(propagation, Mapping):
        for child_id, item in propagation.items():
            if child_id not in linked and isinstance(item, Mapping):
                node.add(_propagation_text(child_id, item.get("policy"), item))


def _propagation_text(child_id: Any, policy: Any, item: Mapping[str, Any]) -> Text:
    text = Text.assemble("child ", (str(child_id), "bold"), f"  policy {policy or '-'}")
    if item.get("parent_close_policy"):
        text.append(f"  parent close {item.get('parent_close_policy')}")
    if item.get("request_id"):
        text.append(f"  request {short_id(item.get('request_id'))}")
    if item.get("waited") is False:
        text.append("  not waited for (abandoned)", style="yellow")
    if item.get("outcome"):
        text.append("  outcome ")
        text.append_text(status_badge(item.get("outcome")))
    return text


def _stop_text(out: Output, stop: Mapping[str, Any], now: datetime) -> Text:
    fence = stop.get("fence") or {}
    state = stop.get("state")
    text = Text.assemble(
        "activity ", (str(stop.get("activity_type")), "bold"),
        f" op {stop.get('op_id')} attempt {fence.get('attempt', '-')}"
        f"  policy {stop.get('policy') or '-'}  ")
    if state == "completed":
        text.append(f"{out.glyph('✓', 'OK')} completed before the stop landed "
                    "(its effect happened)", style="bold green")
    elif state == "stopped":
        text.append(f"{out.glyph('✓', 'OK')} stopped", style="bold green")
    elif state == "signalled":
        text.append(f"{out.glyph('⚠', '!')} SIGNALLED, NOT CONFIRMED", style="bold yellow")
    elif state == "stopping":
        text.append(f"{out.glyph('…', '...')} stopping (no receipt yet, worker alive)",
                    style="yellow")
    else:
        text.append_text(not_verified(out))
        text.append(" no stop receipt", style="bold red")
    receipt = stop.get("stop_receipt")
    if isinstance(receipt, Mapping):
        text.append(f"  receipt {receipt.get('kind')}")
        if receipt.get("worker_id"):
            text.append(f" by {receipt.get('worker_id')}")
        if receipt.get("exit_code") is not None:
            text.append(f" exit code {receipt.get('exit_code')}")
        if stop.get("acknowledged_at"):
            text.append(" ")
            text.append_text(when(stop.get("acknowledged_at"), now))
        if stop.get("received_after_deadline"):
            text.append("  received after the cleanup deadline", style="bold red")
    else:
        text.append(f"  worker {fence.get('owner') or '-'}, attempt {fence.get('status')}")
    return text
