"""The timeline chart and the tree of runs on a run's Timeline tab.

One bar per activity, timer, child workflow and phase (by op id), and one for
the cleanup (from the cancellation's delivery to the run's close), placed on
the axis from the run's start to its close (or now, while it is open); a bar
still open runs to the axis's end. A failed or timed-out step is drawn in the
failure colour and every failed attempt is marked ✗ where it failed, so a
retry storm shows as a row of marks. Rendered server-side as inline SVG (the
page's CSP allows no script but ours, and the chart reads without one).
Beside it, the parent/child tree the run belongs to, from its root down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from starlette.requests import Request

from ... import present as _fmt
from .. import model
from ..errors import HTTPError
from . import views

# The SVG's geometry (user units; the SVG scales to the page's width).
WIDTH = 1000
LABEL = 260
ROW = 22
BAR = 14
TOP = 6
AXIS = 24
# At most this many bars (a long history keeps its first ones and says so).
MAX_ROWS = 200

_KINDS = {"Activity": "activity", "Timer": "timer", "ChildWorkflow": "child",
          "Phase": "phase"}
_ENDS = {
    "ActivityCompleted": "completed", "ActivityFailed": "failed",
    "ActivityTimedOut": "timed_out", "ActivityCancelled": "cancelled",
    "TimerFired": "completed", "TimerCancelled": "cancelled",
    "ChildWorkflowCompleted": "completed", "ChildWorkflowFailed": "failed",
    "PhaseCompleted": "completed", "PhaseFailed": "failed", "PhaseTimedOut": "timed_out",
    "PhaseCancelled": "cancelled",
}
_FAILED_ATTEMPT = ("ActivityRetryScheduled", "ActivityFailed", "ActivityTimedOut")
_CLOSES = ("WorkflowCompleted", "WorkflowFailed", "WorkflowCancelled", "WorkflowTimedOut",
           "WorkflowTerminated", "WorkflowContinuedAsNew")
_RUN_ENDS = {"WorkflowFailed": "failed", "WorkflowTimedOut": "timed_out",
             "WorkflowTerminated": "terminated"}
BAD = ("failed", "timed_out", "terminated")


def _kind(event_type: str) -> str | None:
    for prefix, kind in _KINDS.items():
        if event_type.startswith(prefix) and not event_type.startswith("ChildCancellation"):
            return kind
    return None


def spans(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The steps of a run's history as spans: kind, label, start, end (None while
    open), status, failed-attempt instants, and the op id or child to link to."""
    found: dict[str, dict[str, Any]] = {}
    cleanup: dict[str, Any] | None = None
    for event in events:
        kind_name = str(event.get("type"))
        data = event.get("data") or {}
        at = _fmt.instant(event.get("recorded_at"))
        if at is None:
            continue
        if kind_name == "CancellationDelivered" and cleanup is None:
            cleanup = {"kind": "cleanup", "label": "cleanup (after the cancellation)",
                       "start": at, "end": None, "status": "running", "marks": [],
                       "op_id": None, "child": None}
        elif kind_name in _CLOSES and cleanup is not None and cleanup["end"] is None:
            cleanup["end"] = at
            if kind_name == "WorkflowCancelled":  # the cleanup finished, or ran out of time
                expired = data.get("reason") == "deadline_expired"
                cleanup["status"] = "timed_out" if expired else "completed"
            else:
                cleanup["status"] = _RUN_ENDS.get(kind_name, "completed")
        kind = _kind(kind_name)
        op_id = data.get("op_id")
        if kind is None or not op_id:
            continue
        span = found.get(str(op_id))
        if span is None:
            if not kind_name.endswith(("Scheduled", "Started")):
                continue
            label = {
                "activity": f"activity {data.get('activity_type') or ''}",
                "timer": f"timer {_fmt.duration(data.get('duration_seconds'))}"
                         if data.get("duration_seconds") is not None else "timer",
                "child": f"child {data.get('child_workflow_id') or ''}",
                "phase": f"phase {data.get('phase') or ''}",
            }[kind]
            span = found[str(op_id)] = {
                "kind": kind, "label": f"{label.strip()} ({op_id})", "start": at, "end": None,
                "status": "running", "marks": [], "op_id": op_id if kind == "activity" else None,
                "child": (data.get("child_workflow_id"), data.get("child_run_id"))
                if kind == "child" else None}
            continue
        if kind_name in _FAILED_ATTEMPT:  # a retry, or the last attempt's failure
            span["marks"].append(at)
        if kind_name in _ENDS and span["end"] is None:
            span["end"] = at
            span["status"] = data.get("status") if kind == "child" and data.get("status") \
                else _ENDS[kind_name]
    rows = list(found.values())
    if cleanup is not None:
        rows.append(cleanup)
    return rows


def chart(rows: Sequence[Mapping[str, Any]], start: Any, end: Any,
          now: datetime) -> dict[str, Any] | None:
    """The SVG's geometry: the axis from `start` to `end` (now while open), a bar
    per row, the failure marks and a few ticks. None without a start."""
    t0 = _fmt.instant(start) or min((r["start"] for r in rows), default=None)
    if t0 is None:
        return None
    t1 = _fmt.instant(end) or now
    span = max((t1 - t0).total_seconds(), 0.001)
    scale = (WIDTH - LABEL - 10) / span

    def x(at: datetime) -> float:
        seconds = min(max((at - t0).total_seconds(), 0.0), span)
        return round(LABEL + seconds * scale, 1)

    bars = []
    for i, row in enumerate(rows[:MAX_ROWS]):
        left, right = x(row["start"]), x(row["end"] or t1)
        y = TOP + i * ROW
        bars.append({
            **row, "x": left, "y": y, "w": max(round(right - left, 1), 2.0), "h": BAR,
            "text_y": y + BAR - 3, "open": row["end"] is None,
            "bad": row["status"] in BAD,
            "took": _fmt.duration(((row["end"] or t1) - row["start"]).total_seconds()),
            "marks": [x(m) for m in row["marks"]],
        })
    height = TOP + len(bars) * ROW + AXIS
    ticks = [{"x": round(LABEL + f * (WIDTH - LABEL - 10), 1),
              "text": "0" if f == 0 else "+" + _fmt.duration(span * f)}
             for f in (0, 0.25, 0.5, 0.75, 1)]
    return {"bars": bars, "height": height, "axis_y": height - AXIS + 4,
            "ticks": ticks, "width": WIDTH, "label": LABEL, "open_end": end is None,
            "more": max(len(rows) - MAX_ROWS, 0), "total": _fmt.duration(span)}


# The most runs the parent/child tree shows, and how far up it looks for the root.
TREE_NODES = 60
TREE_HOPS = 10


class Reader(Protocol):
    """What the tree reads through (`pages.WebUI`; not imported: pages imports us)."""

    async def perform(self, request: Request, visitor: Any, operation_id: str,
                      params: Mapping[str, Any], body: Any = None) -> tuple[int, Any]: ...

    async def _history(self, request: Request, visitor: Any, workflow_id: str,
                       run_id: str) -> tuple[list[dict[str, Any]], bool]: ...


async def run_tree(ui: Reader, request: Request, visitor: Any,
                   info: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tree of runs this run belongs to: up to its root through the parent
    links, then down through each run's ChildWorkflowScheduled events (each
    read through the API's describe and history operations). None when the
    run has no parent and started no child."""
    async def describe(workflow_id: str, run_id: str | None) -> dict[str, Any] | None:
        try:
            if run_id:
                _, body = await ui.perform(request, visitor, "describeWorkflowRun",
                                           {"workflowId": workflow_id, "runId": run_id})
            else:
                _, body = await ui.perform(request, visitor, "describeWorkflow",
                                           {"workflowId": workflow_id})
        except HTTPError:  # gone (retention) or not visible: shown as unknown
            return None
        return views.describe_view(model.describe_from_wire(body))

    root: Mapping[str, Any] = info
    for _ in range(TREE_HOPS):
        run = root.get("run") or {}
        if not run.get("parent_workflow_id"):
            break
        parent = await describe(run["parent_workflow_id"], run.get("parent_run_id"))
        if parent is None:
            break
        root = parent
    here = (info.get("run") or {}).get("run_id")
    budget = [TREE_NODES]

    async def node(d: Mapping[str, Any]) -> dict[str, Any]:
        run = d.get("run") or {}
        budget[0] -= 1
        out: dict[str, Any] = {
            "workflow_id": d.get("workflow_id"), "run_id": run.get("run_id"),
            "workflow_type": d.get("workflow_type"), "status": d.get("status"),
            "current": run.get("run_id") == here, "children": [], "more": 0}
        events, _ = await ui._history(request, visitor, str(d.get("workflow_id")),
                                      str(run.get("run_id")))
        for child in views.children(events, d.get("pending_operations") or []):
            if budget[0] <= 0:
                out["more"] += 1
                continue
            found = await describe(str(child["workflow_id"]), child.get("run_id"))
            if found is None:
                budget[0] -= 1
                out["children"].append({
                    "workflow_id": child["workflow_id"], "run_id": child.get("run_id"),
                    "workflow_type": child.get("workflow_type"), "status": "unknown",
                    "current": False, "children": [], "more": 0})
            else:
                out["children"].append(await node(found))
        return out

    tree = await node(root)
    if not tree["children"] and not tree["more"]:
        return None
    return tree
