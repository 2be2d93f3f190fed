"""The cancellation cascade, read from records alone: what a request (or a
parent's close) did across the tree of runs, run by run, with findings where
evidence is missing.

A view for people, like `durable.store.inspection`, kept apart because it
walks a tree of runs and judges each stop's evidence, which no other view does.
"""

from __future__ import annotations

import json
from typing import Any

from ..clock import to_iso
from ..driver import Program, q, q1
from ..errors import WorkflowNotFound
from .cancellation import public_context
from .records import RUN_COLUMNS, RunRecord, loads, run_from_row
from .runs import get_run


def cascade(
    namespace: str, workflow_id: str, run_id: str | None, now: float, limit: int = 200
) -> Program[dict[str, Any]]:
    """What a cancellation did across the tree of runs, read from records alone.

    Where evidence is missing (an attempt without a stop receipt whose worker
    is gone) the view says so in `findings` and `inspection_complete` is
    False: missing evidence is never shown as success.
    """
    root = yield from get_run(namespace, workflow_id, run_id)
    if root is None:
        raise WorkflowNotFound(f"no workflow {workflow_id!r} in namespace {namespace!r}")
    root_ctx = root.cancellation
    view: dict[str, Any] = {
        "root": public_context(root_ctx) if root_ctx else None,
        "inspection_complete": True,
        "truncated": False,
        "findings": [],
        "runs": [],
        "edges": [],
    }
    if root_ctx is None:
        # no cancellation request; a closed parent's children still show what
        # its parent-close policy did to them (a terminated parent, issue 21)
        child = yield q1("SELECT run_id FROM runs WHERE parent_run_id = ? LIMIT 1",
                         root.run_id)
        if root.is_open or child is None:
            return view
    live_workers = yield q("SELECT worker_id FROM workers WHERE expires_at >= ?", now)
    alive = {w["worker_id"] for w in live_workers}
    queue = [root]
    seen: set[str] = set()
    while queue:
        run = queue.pop(0)
        if run.run_id in seen:
            continue
        seen.add(run.run_id)
        if len(view["runs"]) >= limit:
            view["truncated"] = True
            break
        entry = yield from _cascade_run(run, now, alive, view["findings"])
        view["runs"].append(entry)
        children = yield q(f"SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = ?",
                           run.run_id)
        for child_row in children:
            child = run_from_row(child_row)
            propagation = entry["child_propagation"].get(child.workflow_id, {})
            view["edges"].append({
                "parent_workflow_id": run.workflow_id, "parent_run_id": run.run_id,
                "child_workflow_id": child.workflow_id, "child_run_id": child.run_id,
                "policy": propagation.get("policy"),
            })
            queue.append(child)
    view["inspection_complete"] = not view["findings"]
    return view


def _cascade_run(
    run: RunRecord, now: float, alive: set[str], findings: list[dict[str, Any]]
) -> Program[dict[str, Any]]:
    ctx = run.cancellation or {}
    lifecycle = ctx.get("lifecycle")
    if lifecycle is None:
        lifecycle = {"terminated": "terminated", "cancelled": "cancelled"}.get(
            run.status, "not_requested")
    tasks = yield q(
        "SELECT task_id, op_id, activity_name, attempt, status, owner, options, "
        "stop_requested, stop_requested_at, stop_receipt, closed_at FROM activity_tasks "
        "WHERE run_id = ? AND (stop_requested = 1 OR status = 'cancelled')",
        run.run_id,
    )
    stops = []
    for t in tasks:
        receipt = loads(t["stop_receipt"])
        policy = (loads(t["options"]) or {}).get("cancellation")
        if receipt is not None and receipt.get("kind") == "completed":
            # it finished its work before the stop landed: its effect happened,
            # and calling it stopped would tell the cleanup a lie (issue 21)
            state = "completed"
        elif receipt is not None:
            state = "stopped" if receipt.get("confirmed", True) else "signalled"
        elif t["status"] == "running" and t["owner"] in alive:
            state = "stopping"
        else:
            state = "unverified"
            findings.append({
                "workflow_id": run.workflow_id, "run_id": run.run_id, "task_id": t["task_id"],
                "finding": f"attempt {t['attempt']} of {t['activity_name']} has no stop receipt "
                           f"and its worker ({t['owner']}) is gone or it was fenced; it is not "
                           "verified as stopped",
            })
        stops.append({
            "task_id": t["task_id"], "op_id": t["op_id"], "activity_type": t["activity_name"],
            "policy": policy, "fence": {"attempt": t["attempt"], "status": t["status"],
                                         "owner": t["owner"]},
            "stop_requested_at": to_iso(t["stop_requested_at"]), "stop_receipt": receipt,
            "acknowledged_at": receipt.get("acknowledged_at") if receipt else None,
            "received_after_deadline": (receipt or {}).get("received_after_deadline"),
            "state": state,
        })
    events = yield q(
        "SELECT type, data FROM events WHERE run_id = ? AND type IN "
        "('ChildCancellationRequested', 'ParentClosePolicyApplied', 'ChildWorkflowScheduled', "
        "'CancellationDelivered') ORDER BY seq",
        run.run_id,
    )
    propagation: dict[str, dict[str, Any]] = {}
    delivery = None
    for e in events:
        data = json.loads(e["data"])
        if e["type"] == "CancellationDelivered":
            delivery = data
            continue
        child_id = data.get("child_workflow_id")
        if child_id is None:
            continue
        item = propagation.setdefault(child_id, {"child_workflow_id": child_id})
        if e["type"] == "ChildWorkflowScheduled":
            item["cancellation_policy"] = data.get("cancellation")
            item["parent_close_policy"] = data.get("parent_close_policy")
        elif e["type"] == "ChildCancellationRequested":
            item["policy"] = data["policy"]  # the operation's policy comes first
            item["request_id"] = data.get("request_id")
        else:
            item["parent_close_policy_applied"] = data["policy"]
            item.setdefault("policy", f"parent_close:{data['policy']}")
    for child_id, item in propagation.items():
        child_row = yield q1(
            "SELECT status, cancellation FROM runs WHERE namespace = ? AND workflow_id = ? "
            "ORDER BY run_number DESC LIMIT 1", run.namespace, child_id,
        )
        if child_row is not None:
            child_ctx = loads(child_row["cancellation"]) or {}
            item["outcome"] = child_row["status"]
            item["child_lifecycle"] = child_ctx.get("lifecycle")
        item.setdefault("policy", item.get("cancellation_policy"))
        if item.get("policy") == "abandon":
            item["waited"] = False
    return {
        "workflow_id": run.workflow_id, "run_id": run.run_id, "workflow_type": run.workflow_type,
        "status": run.status, "lifecycle": lifecycle,
        "request": public_context(ctx) if ctx else None,
        "delivery": {"delivered_at": to_iso(ctx.get("delivered_at")),
                     "boundary": ctx.get("boundary")} if ctx.get("delivered_at") else delivery,
        "cleanup_outcome": ctx.get("cleanup_outcome"),
        "deadline_at": to_iso(ctx.get("deadline_at")) if ctx else None,
        "cleanup_closed_at": to_iso(ctx.get("closed_at")) if ctx else None,
        "activity_stops": stops,
        "child_propagation": propagation,
    }
