"""The cancellation cascade page's view: a cascade as a tree of runs.

What a cancellation request (or a closing parent) did to a run and its
children, node by node, each activity stop judged by its evidence
(`STOP_STATES`): a stop confirmed by a receipt says so, one without says
"NOT VERIFIED" and why. It reads `cancellation_cascade()` (from
`durable/store/cascade.py`, the one view of storage that judges evidence), so
it is a view of its own beside the run's (`views.py`), as the CLI's
``durable cascade`` is (`durable/cli/_cascade.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import present as _fmt
from ... import present_ops as _ops
from .views import _RECEIPT_KEYS, _REQUEST_KEYS, filled, is_open

STOP_STATES = {
    "completed": ("✓", "completed before the stop landed",
                  "the attempt finished its work: its effect happened"),
    "stopped": ("✓", "stopped", "confirmed by a stop receipt"),
    "signalled": ("⚠", "SIGNALLED, NOT CONFIRMED", "a receipt exists but does not confirm "
                                                   "the stop"),
    "stopping": ("…", "stopping", "no receipt yet; the attempt's worker is alive"),
    "unverified": ("✗", "NOT VERIFIED", "no stop receipt, and the attempt's worker is gone "
                                        "or the attempt was fenced"),
}


def _stop(stop: Mapping[str, Any]) -> dict[str, Any]:
    state = str(stop.get("state"))
    if state not in STOP_STATES:
        state = "unverified"  # an unknown state is not evidence of a stop
    icon, label, meaning = STOP_STATES[state]
    receipt = stop.get("stop_receipt")
    return {**filled(stop, ("task_id", "op_id", "activity_type", "policy", "stop_requested_at",
                            "acknowledged_at", "received_after_deadline")),
            "state": state, "icon": icon, "label": label, "meaning": meaning,
            "fence": filled(stop.get("fence"), ("attempt", "status", "owner")),
            "stop_receipt": filled(receipt, _RECEIPT_KEYS) if isinstance(receipt, Mapping)
            else None}


_PROPAGATION_KEYS = ("child_workflow_id", "cancellation_policy", "parent_close_policy",
                     "policy", "request_id", "outcome", "child_lifecycle", "waited")


def cascade_tree(data: Mapping[str, Any]) -> dict[str, Any]:
    """The cascade as a tree of runs: each node with its lifecycle, request,
    delivery, cleanup outcome and deadline, activity stops, and its children
    (with the policy that reached them); runs no edge reaches are listed too."""
    runs = [r for r in data.get("runs") or [] if isinstance(r, Mapping)]
    by_run, edges = _fmt.cascade_links(data)
    shown: set[Any] = set()

    def node(run: Mapping[str, Any], depth: int) -> dict[str, Any]:
        shown.add(run.get("run_id"))
        propagation = run.get("child_propagation") or {}
        if not isinstance(propagation, Mapping):
            propagation = {}
        kids = []
        linked: set[Any] = set()
        for edge in edges.get(run.get("run_id"), []):
            child_id = edge.get("child_workflow_id")
            linked.add(child_id)
            child = by_run.get(edge.get("child_run_id"))
            kids.append({
                "workflow_id": child_id, "run_id": edge.get("child_run_id"),
                "policy": edge.get("policy"),
                "propagation": filled(propagation.get(child_id), _PROPAGATION_KEYS),
                "node": node(child, depth + 1) if child is not None
                and child.get("run_id") not in shown and depth < 64 else None,
            })
        for child_id, item in propagation.items():
            if child_id not in linked and isinstance(item, Mapping):
                kids.append({"workflow_id": child_id, "run_id": None,
                             "policy": item.get("policy"),
                             "propagation": filled(item, _PROPAGATION_KEYS), "node": None})
        request = filled(run.get("request"), _REQUEST_KEYS) \
            if isinstance(run.get("request"), Mapping) else None
        delivery = filled(run.get("delivery"), ("delivered_at", "boundary")) \
            if isinstance(run.get("delivery"), Mapping) else None
        status = run.get("status")
        return {
            "workflow_id": run.get("workflow_id"), "run_id": run.get("run_id"),
            "workflow_type": run.get("workflow_type"), "status": status,
            "lifecycle": run.get("lifecycle") or "not_requested",
            "cleanup_outcome": run.get("cleanup_outcome"), "request": request,
            "cleanup_judged": _fmt.cleanup_of(run),
            "delivery": delivery, "deadline_at": run.get("deadline_at"),
            "cleanup_closed_at": run.get("cleanup_closed_at"),
            "cleanup_open": is_open(status) and run.get("lifecycle") in (
                "requested", "delivered", "cleaning_up"),
            "stops": [_stop(s) for s in run.get("activity_stops") or []
                      if isinstance(s, Mapping)],
            "children": kids,
        }

    roots = []
    if runs:
        roots.append(node(runs[0], 0))
    for run in runs:
        if run.get("run_id") not in shown:
            roots.append(node(run, 0))
    findings = [filled(f, ("workflow_id", "run_id", "finding"))
                for f in data.get("findings") or [] if isinstance(f, Mapping)]
    return {
        "root": filled(data.get("root"), _REQUEST_KEYS)
        if isinstance(data.get("root"), Mapping) else None,
        # still under way: nothing to call verified yet (_ops.cascade_in_progress)
        "in_progress": _ops.cascade_in_progress(data),
        "verified": bool(data.get("inspection_complete")) and not findings
        and _ops.cascade_in_progress(data) is None,
        "findings": findings, "truncated": bool(data.get("truncated")),
        "nodes": roots, "run_count": len(runs),
        "any_open": bool(_ops.cascade_going(runs)),  # (not an abandoned child)
        "root_cleanup_closed_at": runs[0].get("cleanup_closed_at") if runs else None,
        "root_cleanup_outcome": _fmt.cleanup_of(runs[0]) if runs else None,
    }
