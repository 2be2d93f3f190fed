"""Reading runs for people: describe(), history, listing (the cancellation
cascade is `durable.store.cascade`).

Kept whole: describe() and the run list answer the same questions (what a
run waits for, who holds it, whether that worker is alive) from the same
rows; read in two modules, the two views could disagree about one run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..clock import to_datetime, to_iso
from ..driver import Program, placeholders, q, q1
from . import workers
from .cancellation import describe_cancellation
from .queues import LIMIT_COLUMNS, RUNNING_RUNS, token_bucket
from .records import (
    OPEN_SQL,
    OPEN_STATUSES,
    REVIEW_STATUSES,
    HistoryEvent,
    RecordedEvent,
    RunRecord,
    StorageSnapshot,
    listed_status,
    listed_status_sql,
    loads,
    refusing,
)
from .runs import get_run


def describe(
    namespace: str, workflow_id: str, run_id: str | None, now: float | None = None
) -> Program[dict[str, Any] | None]:
    """The instance and one run (the current one by default), as describe() shows them.

    With `now`, an open run no worker holds says what it waits for
    (``waiting_for``): a queue slot, a key slot or the rate (`queues.waiting_for`),
    or a worker, when no live worker of its queue registers its type."""
    wf = yield q1(
        "SELECT workflow_id, workflow_type, namespace, current_run_id, status, closed_reason, "
        "execution_timeout, execution_deadline_at, run_count, memo, created_at, closed_at "
        "FROM workflows WHERE namespace = ? AND workflow_id = ?",
        namespace, workflow_id,
    )
    if wf is None:
        return None
    run = yield from get_run(namespace, workflow_id, run_id or wf["current_run_id"])
    if run is None:
        return None
    failure_rows = yield q(
        "SELECT data FROM failures WHERE run_id = ? ORDER BY id", run.run_id
    )
    # the latest signals and updates, with who sent them ("who approved this?")
    received = yield q(
        "SELECT seq, kind, name, update_id, sender, received_at, status, delivered_at "
        "FROM inbox WHERE run_id = ? ORDER BY seq DESC LIMIT 20", run.run_id)
    open_ops = yield q(
        "SELECT o.op_id, o.kind, o.name, o.scheduled_at, o.fire_at, o.child_workflow_id, "
        "o.result, t.status AS task_status, t.attempt, t.heartbeat_details, t.last_failure, "
        "t.task_queue AS task_queue, t.available_at AS available_at, "
        "t.heartbeat_deadline AS heartbeat_deadline "
        "FROM ops o LEFT JOIN activity_tasks t ON t.task_id = o.task_id "
        "WHERE o.run_id = ? AND o.status = 'scheduled' ORDER BY o.scheduled_at, o.op_id",
        run.run_id,
    )
    pending = [dict(p) for p in open_ops if p["kind"] not in ("phase", "units")]
    for p in pending:
        if p["kind"] == "child" and p["child_workflow_id"]:
            # the child's own record: a closed parent hears nothing more from
            # it, so the op stays open here while the child may have ended
            # (a terminated parent's cancelled child is not "still open")
            child = yield q1(
                "SELECT status, closed_at FROM runs WHERE namespace = ? AND workflow_id = ? "
                "AND parent_run_id = ? ORDER BY run_number DESC LIMIT 1",
                namespace, p["child_workflow_id"], run.run_id)
            p["child_status"] = child["status"] if child is not None else None
            p["child_closed_at"] = child["closed_at"] if child is not None else None
    if now is not None:
        yield from _mark_clashes(namespace, pending, now)
    # a parent that retention deleted (it closed, abandoning this child): its
    # id leads nowhere, so the views say so beside it
    parent_deleted = run.parent_run_id is not None and (yield q1(
        "SELECT 1 AS found FROM runs WHERE run_id = ?", run.parent_run_id)) is None
    phases = [p for p in open_ops if p["kind"] == "phase"]
    batches = [p for p in open_ops if p["kind"] == "units"]
    progress = None
    if batches:
        batch = batches[-1]
        prefix = batch["op_id"] + "/"
        done = yield q1(
            "SELECT COUNT(*) AS n FROM ops WHERE run_id = ? AND substr(op_id, 1, ?) = ? "
            "AND status = 'completed'", run.run_id, len(prefix), prefix)
        progress = {"done": int(done["n"]) if done else 0,
                    "total": int((loads(batch["result"]) or {}).get("total", 0)),
                    "handler": batch["name"]}
    lease_expires_at = None
    if run.owner is not None and run.is_open:  # (not a RunRecord column: read here alone)
        leased = yield q1("SELECT lease_expires_at FROM runs WHERE run_id = ?", run.run_id)
        lease_expires_at = to_iso(leased["lease_expires_at"]) if leased is not None else None
    status = run.status if run_id else wf["status"]
    if run.needs_review and run.is_open:
        # the outcome is not known (units whose effect could not be confirmed)
        # or the code does not replay its history: either way a person decides
        status = run.listed_status
    waiting = None
    if now is not None and run.is_open and run.needs_review:
        waiting = {"kind": "review", "status": status,
                   "hint": f"durable retry-after-review {run.workflow_id}"
                           + (" --units rerun|confirm" if status == "unknown" else "")}
    elif now is not None and run.is_open:
        waiting = yield from _waiting_for(run, now)
        if waiting is None:
            waiting = yield from _waiting_on(run, pending, now)
    return {
        "workflow_id": wf["workflow_id"],
        "workflow_type": wf["workflow_type"],
        "waiting_for": waiting,
        "namespace": wf["namespace"],
        "status": status,
        "reason": _reason(run, status),
        "phase": {
            "name": phases[-1]["name"], "started_at": to_iso(phases[-1]["scheduled_at"]),
            "deadline_at": to_iso(phases[-1]["fire_at"]),
        } if phases else None,
        "progress": progress,
        "closed_reason": run.closed_reason if run_id else wf["closed_reason"],
        "execution_timeout_seconds": wf["execution_timeout"],
        "run_count": int(wf["run_count"]),
        "memo": loads(wf["memo"]),
        "schedule": None if run.schedule_id is None else {
            "schedule_id": run.schedule_id, "scheduled_at": to_iso(run.scheduled_at)},
        "run": {
            "run_id": run.run_id,
            "run_number": run.run_number,
            "status": run.status,
            "run_timeout_seconds": run.run_timeout,
            "execution_deadline_at": to_iso(run.execution_deadline_at),
            "run_deadline_at": to_iso(run.run_deadline_at),
            "started_at": to_iso(run.started_at),
            "closed_at": to_iso(run.closed_at),
            "task_queue": run.task_queue,
            "priority": run.priority,
            "concurrency_key": run.concurrency_key,
            "owner": run.owner,
            # until when the owner's lease on the run holds: a gone owner's run is
            # taken by another worker from then on
            "lease_expires_at": lease_expires_at,
            "epoch": run.epoch,
            "needs_review": run.needs_review,
            "parent_workflow_id": run.parent_workflow_id,
            "parent_run_id": run.parent_run_id,
            "parent_deleted": parent_deleted,
            "continued_run_id": run.continued_run_id,
            "started_build": run.started_build,
            "last_build": run.last_build,
            "reset_from_run_id": run.reset_from_run_id,
            "reset_from_op": run.reset_from_op,
            "reset_run_id": run.reset_run_id,
        },
        "blocked": blocked(run),
        "pending_operations": [
            {
                "op_id": p["op_id"], "kind": p["kind"], "name": p["name"],
                "scheduled_at": to_iso(p["scheduled_at"]), "fire_at": to_iso(p["fire_at"]),
                "child_workflow_id": p["child_workflow_id"], "task_status": p["task_status"],
                "attempt": p["attempt"], "heartbeat_details": loads(p["heartbeat_details"]),
                # the running attempt's heartbeat deadline as its last heartbeat
                # moved it (history records only the first one, at its start)
                "heartbeat_deadline": to_iso(p["heartbeat_deadline"])
                if p["task_status"] == "running" else None,
                "last_failure": loads(p["last_failure"]),
            } | ({"child_status": p["child_status"],
                  "child_closed_at": to_iso(p["child_closed_at"])} if "child_status" in p else {})
            | ({"definition_clash": p["definition_clash"]} if "definition_clash" in p else {})
            for p in pending
        ],
        "failures": [json.loads(r["data"]) for r in failure_rows],
        "received": [
            {"seq": r["seq"], "kind": r["kind"], "name": r["name"], "update_id": r["update_id"],
             "sender": loads(r["sender"]), "received_at": to_iso(r["received_at"]),
             "status": r["status"], "delivered_at": to_iso(r["delivered_at"])}
            for r in reversed(received)
        ],
        "cancellation": describe_cancellation(run.cancellation),
    }


def _mark_clashes(namespace: str, pending: list[dict[str, Any]], now: float) -> Program[None]:
    """A pending activity attempt whose name live workers of its queue register
    with different code gets ``definition_clash``: each definition and the
    workers that have it (whichever claims it runs its own code)."""
    waiting = [p for p in pending if p["kind"] == "activity" and p["task_status"] == "pending"
               and p["task_queue"]]
    if not waiting:
        return None
    rows = yield q("SELECT worker_id, task_queue, definitions FROM workers WHERE namespace = ? "
                   "AND expires_at >= ? AND stopped_at IS NULL ORDER BY worker_id",
                   namespace, now)
    for p in waiting:
        found: dict[str, dict[str, Any]] = {}
        for w in rows:
            if w["task_queue"] != p["task_queue"] or not w["definitions"]:
                continue
            d = (json.loads(w["definitions"]).get("activities") or {}).get(p["name"])
            if d is not None:
                entry = found.setdefault(str(d.get("fingerprint")), {
                    "definition": f"{d.get('module')}.{d.get('qualname')}{d.get('signature')}",
                    "workers": []})
                entry["workers"].append(w["worker_id"])
        if len(found) > 1:
            p["definition_clash"] = [found[k] for k in sorted(found)]
    return None


def _waiting_for(run: RunRecord, now: float) -> Program[dict[str, Any] | None]:
    """Why an open run is not held by a worker, when none holds it. None too
    for a run put down under pressure that waits on its ops (not claimable
    before one of them ends: `durable.store.parked`), which `_waiting_on` names.

    A run every live taker's build refused waits for a build first (no slot
    freed lets a refusing build take it); then for a queue's or key's slot or
    the queue's rate; then for a worker registering its type."""
    held = yield q1("SELECT 1 AS held FROM runs WHERE run_id = ? AND ((owner IS NOT NULL "
                    "AND lease_expires_at > ?) OR ready_at IS NULL OR ready_at > ?)",
                    run.run_id, now, now)
    if held is not None:
        return None
    serving = yield q("SELECT workflow_types, build_id FROM workers WHERE namespace = ? "
                      "AND task_queue = ? AND expires_at >= ?", run.namespace, run.task_queue,
                      now)
    takers = [w for w in serving if run.workflow_type in json.loads(w["workflow_types"])]
    if takers and run.blocked_build is not None:
        # every live worker that registers the type is of a build that refused
        # the run (the upgrade gate): none of them takes it, whatever arrives,
        # so this is what it waits for before a queue's or key's slot (a slot
        # freed, or a higher limit, would not let a refusing build take it)
        refused = refusing(run.blocked_build, run.blocked_builds)
        if all(w["build_id"] in refused for w in takers):
            return {"kind": "build", "queue": run.task_queue,
                    "workflow_type": run.workflow_type, "refused_builds": refused,
                    "live_workers": len(takers), "last_build": run.last_build}
    waiting = yield from _queue_waiting_for(run.namespace, run.task_queue, run.concurrency_key,
                                            now)
    if waiting is not None:
        if waiting["kind"] in ("queue_slot", "key_slot") and run.parent_run_id is not None:
            held = yield from _slots_of_ancestors(run, waiting["kind"] == "key_slot", now)
            if held:
                waiting["held_by_ancestors"] = held
        return waiting
    if not takers:
        return {"kind": "worker", "queue": run.task_queue, "workflow_type": run.workflow_type,
                "live_workers": len(serving)}
    return None


def _queue_waiting_for(namespace: str, name: str, run_concurrency_key: str | None,
                now: float) -> Program[dict[str, Any] | None]:
    """Why a ready, unowned run of this queue is held back, if a limit holds it:
    ``{"kind": "queue_slot" | "key_slot" | "rate", "queue", "running", "limit", ...}``."""
    row = yield q1(f"SELECT {LIMIT_COLUMNS} FROM task_queues WHERE namespace = ? AND name = ?",
                   namespace, name)
    if row is None or not int(row["runs_limited"]):
        return None
    limits = json.loads(row["limits"])
    if limits.get("max_running") is not None:
        running = yield q1(f"SELECT count(*) AS n FROM {RUNNING_RUNS}", namespace, name, now)
        if int(running["n"]) >= int(limits["max_running"]):
            held = yield from _holders("", namespace, name, now)
            return {"kind": "queue_slot", "queue": name, "running": int(running["n"]),
                    "limit": int(limits["max_running"]), "held_by": held}
    if limits.get("max_running_per_key") is not None and run_concurrency_key is not None:
        running = yield q1(f"SELECT count(*) AS n FROM {RUNNING_RUNS}AND concurrency_key = ?",
                           namespace, name, now, run_concurrency_key)
        if int(running["n"]) >= int(limits["max_running_per_key"]):
            held = yield from _holders("AND concurrency_key = ? ", namespace, name, now,
                                       run_concurrency_key)
            return {"kind": "key_slot", "queue": name, "concurrency_key": run_concurrency_key,
                    "running": int(running["n"]), "limit": int(limits["max_running_per_key"]),
                    "held_by": held}
    bucket = token_bucket(limits.get("rate"), row["run_tokens"], row["run_refilled_at"], now)
    if bucket is not None and bucket.tokens < 1:
        return {"kind": "rate", "queue": name, "rate": limits["rate"],
                "next_start_at": to_iso(bucket.next_token_at())}
    return None


#: the runs holding a limit's slots that `waiting_for` names (the count says how many)
HOLDERS_SHOWN = 5


def _holders(where: str, namespace: str, name: str, now: float,
             *args: Any) -> Program[list[dict[str, Any]]]:
    """The first HOLDERS_SHOWN runs holding a slot the waiting run needs, the
    worker holding each and until when its lease runs (a killed worker's slot
    comes back then): who to look at (or wait for) when a run waits."""
    rows = yield q(f"SELECT workflow_id, owner, lease_expires_at FROM {RUNNING_RUNS}{where}"
                   "ORDER BY workflow_id LIMIT ?", namespace, name, now, *args, HOLDERS_SHOWN)
    return [{"workflow_id": r["workflow_id"], "worker_id": r["owner"],
             "lease_expires_at": to_iso(r["lease_expires_at"])} for r in rows]


#: how far up a child's parents `_slots_of_ancestors` looks
_ANCESTORS_AT_MOST = 32


def _slots_of_ancestors(run: RunRecord, same_key: bool, now: float) -> Program[list[str]]:
    """The workflow ids of the run's parents, grandparents..., that hold a slot
    of the limit it waits for (running on its queue, under a live lease; of its
    key for `same_key`). A run holds its slot while it waits on a child, so a
    child started on its parent's queue at ``max_running=1`` waits for a slot
    its own parent holds: if the parent waits for it, it never starts
    (docs/queues.md). Read only for a run that waits for a slot, one row per
    generation."""
    held: list[str] = []
    parent = run.parent_run_id
    for _ in range(_ANCESTORS_AT_MOST):
        if parent is None:
            break
        row = yield q1("SELECT workflow_id, parent_run_id, namespace, task_queue, "
                       "concurrency_key, owner, lease_expires_at, status FROM runs "
                       "WHERE run_id = ?", parent)
        if row is None:
            break
        if (row["namespace"] == run.namespace and row["task_queue"] == run.task_queue
                and row["owner"] is not None and row["lease_expires_at"] is not None
                and float(row["lease_expires_at"]) > now
                and str(row["status"]) in OPEN_STATUSES
                and (not same_key or row["concurrency_key"] == run.concurrency_key)):
            held.append(str(row["workflow_id"]))
        parent = row["parent_run_id"]
    return held


def _waiting_on(run: RunRecord, pending: list[dict[str, Any]],
               now: float) -> Program[dict[str, Any] | None]:
    """What the run's code waits for, from its open ops; None while it is busy
    (an activity attempt runs, or nothing is open: the code runs).

    An activity no live worker of its queue registers comes first (it would
    wait forever), then a running attempt (busy), then the first open op: a
    timer (``fire_at``), a condition (``timeout_at``, None: only a signal or
    an update can end it), a child, an activity waiting to be picked up.
    """
    activities = [p for p in pending if p["kind"] == "activity"]
    for p in activities:
        if p["task_status"] != "pending" or not p["task_queue"]:
            continue
        serving = yield q("SELECT activity_names FROM workers WHERE namespace = ? AND "
                          "task_queue = ? AND expires_at >= ?", run.namespace,
                          p["task_queue"], now)
        if not any(p["name"] in json.loads(w["activity_names"]) for w in serving):
            return {"kind": "activity_worker", "op_id": p["op_id"], "activity": p["name"],
                    "queue": p["task_queue"], "live_workers": len(serving)}
    if any(p["task_status"] == "running" for p in activities):
        return None
    for p in pending:
        if p["kind"] == "timer":
            return {"kind": "timer", "op_id": p["op_id"], "fire_at": to_iso(p["fire_at"])}
        if p["kind"] == "condition":
            return {"kind": "condition", "op_id": p["op_id"],
                    "timeout_at": to_iso(p["fire_at"])}
        if p["kind"] == "child":
            return {"kind": "child", "op_id": p["op_id"],
                    "child_workflow_id": p["child_workflow_id"],
                    "child_status": p.get("child_status")}
        if p["kind"] == "activity" and p["task_status"] == "pending":
            return {"kind": "activity", "op_id": p["op_id"], "activity": p["name"],
                    "queue": p["task_queue"], "attempt": p["attempt"],
                    "available_at": to_iso(p["available_at"])}
    return None


def blocked(run: RunRecord) -> dict[str, Any] | None:
    """describe()["blocked"]: the build that last found it cannot take this
    open run (its code does not replay the run's history), the first diverging
    op, every build that refused it (``build_ids``: none of them takes it
    again) and the build that last took it (``last_build``: it replays the
    run, whether it is older or newer, as after a rollback); None when no
    build was refused, or the run closed (nothing is left to take)."""
    if run.blocked_build is None or not run.is_open:
        return None
    return {"build_id": run.blocked_build, "divergence": run.blocked_divergence or "",
            "build_ids": refusing(run.blocked_build, run.blocked_builds),
            "last_build": run.last_build}


def _reason(run: RunRecord, status: str) -> str | None:
    """Why the run is where it is, in words (describe()["reason"])."""
    failure = run.failure
    if status in ("needs_review", "unknown"):
        return failure.message if failure is not None else "marked for review"
    if run.is_open:
        return None
    if status == "completed":
        return "completed"
    if status == "continued":
        return f"continued as new as run {run.continued_run_id}"
    if failure is not None and failure.message:
        if failure.timeout_kind:
            return f"{failure.message} ({failure.timeout_kind})"
        return failure.message
    return run.closed_reason


def history(
    run_id: str, after_sequence: int = 0, limit: int | None = None
) -> Program[list[HistoryEvent]]:
    """A run's events after `after_sequence`, oldest first."""
    sql = ("SELECT seq, type, recorded_at, data FROM events WHERE run_id = ? AND seq > ? "
           "ORDER BY seq")
    params: list[Any] = [run_id, after_sequence]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    rows = yield q(sql, *params)
    return [
        HistoryEvent(int(r["seq"]), r["type"], to_datetime(r["recorded_at"]), json.loads(r["data"]))
        for r in rows
    ]


#: Statuses describe() derives for an open run a person must decide about.


def _review_status(needs_review: Any, status: str, failure: str | None) -> str:
    """The status a person reads: needs_review / unknown for an open run marked
    for review (a replay mismatch / units whose effect is unknown), else the run's."""
    if not needs_review or status not in OPEN_STATUSES:
        return status
    category = (json.loads(failure) or {}).get("failure_category") if failure else None
    return listed_status(status, bool(needs_review), category)


#: the columns a run list's `matching` may compare
MATCHABLE = frozenset({"workflow_id", "workflow_type", "task_queue"})


def list_runs(
    namespace: str, status: str | None, workflow_type: str | None, limit: int,
    before: tuple[float, str] | None = None, *, statuses: tuple[str, ...] | None = None,
    id_contains: str | None = None, now: float | None = None,
    matching: Sequence[tuple[str, str]] = (),
) -> Program[tuple[list[dict[str, Any]], tuple[float, str] | None]]:
    """Run summaries, newest first, and the key of the next page (None on the last).

    `before` is the key a previous page returned: (created_at, run_id) of its
    last row (keyset pagination: stable while new runs are added). `status`
    keeps the runs listed with that status, `statuses` those listed with any of
    them (both: those listed with one of `statuses` that is `status`). A
    listed status is the row's, one of `LISTED_STATUSES`: a run marked for
    review is listed ``needs_review`` or ``unknown``, not as its stored
    ``running``, so it is kept for those and for no other (`listed_status_sql`):
    what a row shows is what a filter finds (the control plane's status
    buckets and ``ExecutionStatus``, `durable._statuses`). `id_contains`
    keeps workflow ids holding that text; `matching` runs whose columns
    (`MATCHABLE`) equal the values given (a parsed ``query``,
    `durable._visibility_query.WORKFLOWS`). With
    `now`, a run at work names its ``holder`` (`workers.holder_of`, and the
    ``activity`` whose attempt that worker runs, None for the run's own code):
    a run held by a SIGKILLed worker was listed as busy.
    """
    wanted: tuple[str, ...] | None = statuses
    if status is not None:
        wanted = (status,) if wanted is None or status in wanted else ()
    if wanted is not None and not wanted:  # no run is listed with none of the statuses
        return [], None
    sql = (
        "SELECT workflow_id, run_id, workflow_type, status, run_number, created_at, started_at, "
        "closed_at, closed_reason, task_queue, needs_review, failure, owner, lease_expires_at, "
        "blocked_build FROM runs "
        "WHERE namespace = ?"
    )
    params: list[Any] = [namespace]
    if wanted is not None:
        where, values = listed_status_sql(wanted)
        sql += f" AND {where}"
        params.extend(values)
    if id_contains:
        escaped = id_contains.replace("!", "!!").replace("%", "!%").replace("_", "!_")
        sql += " AND workflow_id LIKE ? ESCAPE '!'"
        params.append(f"%{escaped}%")
    if workflow_type is not None:
        sql += " AND workflow_type = ?"
        params.append(workflow_type)
    for column, value in matching:
        if column not in MATCHABLE:
            raise ValueError(f"runs cannot be matched on {column!r}")
        sql += f" AND {column} = ?"
        params.append(value)
    if before is not None:
        sql += " AND (created_at < ? OR (created_at = ? AND run_id < ?))"
        params.extend([before[0], before[0], before[1]])
    sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
    params.append(limit + 1)
    rows = yield q(sql, *params)
    more = len(rows) > limit
    rows = rows[:limit]
    next_key = (float(rows[-1]["created_at"]), str(rows[-1]["run_id"])) if more else None
    summaries = [
        {
            "workflow_id": r["workflow_id"], "run_id": r["run_id"],
            "workflow_type": r["workflow_type"],
            "status": _review_status(r["needs_review"], r["status"], r["failure"]),
            "run_number": int(r["run_number"]), "task_queue": r["task_queue"],
            "created_at": to_datetime(r["created_at"]), "started_at": to_datetime(r["started_at"]),
            "closed_at": to_datetime(r["closed_at"]), "closed_reason": r["closed_reason"],
        }
        for r in rows
    ]
    if wanted is not None:  # the two review statuses share a column: told apart by the failure
        summaries = [r for r in summaries if r["status"] in wanted]
    busy = yield from _busy_runs([r["run_id"] for r in rows if r["status"] == "running"
                                  and not r["needs_review"]])
    held = {r["run_id"]: busy[r["run_id"]][1] or r["owner"] for r in rows if r["run_id"] in busy}
    leases = {r["run_id"]: r["lease_expires_at"] for r in rows if r["owner"] is not None}
    blocked_builds = {r["run_id"]: r["blocked_build"] for r in rows if r["blocked_build"]}
    seen = ((yield from workers.presences(namespace, {w for w in held.values() if w}, now))
            if now is not None else {})
    for summary in summaries:
        open_ = summary["status"] in (*OPEN_STATUSES, *REVIEW_STATUSES)
        run_id = summary["run_id"]
        holder = None
        if run_id in held and now is not None:
            activity = busy[run_id][0]  # (its attempt's worker holds its own lease)
            holder = workers.holder_of(held[run_id], seen.get(held[run_id] or ""),
                                       None if activity else leases.get(run_id))
            holder["activity"] = activity
        summary["holder"] = holder
        # a run whose holder is presumed gone (or that none holds) waits for a worker
        summary["waiting"] = (run_id not in busy or (holder is not None and not holder["alive"])
                              ) if open_ else None
        # waiting for a build that replays it: the build that last refused it (the
        # list said "waiting", as for a timer, of a run no live build will take)
        summary["blocked_build"] = blocked_builds.get(run_id) if summary["waiting"] else None
    return summaries, next_key


def run_ids(namespace: str, workflow_id: str) -> Program[list[str]]:
    """The ids of every run of a workflow id, oldest first (a continue-as-new chain)."""
    rows = yield q("SELECT run_id FROM runs WHERE namespace = ? AND workflow_id = ? "
                   "ORDER BY created_at, run_number", namespace, workflow_id)
    return [str(r["run_id"]) for r in rows]


def _busy_runs(run_ids: list[str]) -> Program[dict[str, tuple[str | None, str | None]]]:
    """Of these open runs, those at work, each with the activity attempt that
    runs (``(name, its worker)``; ``(None, None)``: the run's own holder runs
    its code or a local activity, or is due to): an attempt or a local
    activity runs, or no op is open (the code runs, or waits to be taken:
    told apart by describe's waiting_for). The rest wait (a timer, a
    condition, a child, an attempt not yet picked up). One read per page."""
    if not run_ids:
        return {}
    rows = yield q(
        "SELECT o.run_id, o.kind, o.name, t.status AS task_status, t.owner AS task_owner "
        "FROM ops o LEFT JOIN activity_tasks t ON t.task_id = o.task_id "
        f"WHERE o.run_id IN ({placeholders(len(run_ids))}) AND o.status = 'scheduled' "
        "AND o.kind NOT IN ('phase', 'units') ORDER BY o.op_id", *run_ids)
    waiting_on: dict[str, bool] = {}
    attempts: dict[str, tuple[str | None, str | None]] = {}
    for r in rows:
        working = r["kind"] == "local_activity" or r["task_status"] == "running"
        waiting_on[r["run_id"]] = waiting_on.get(r["run_id"], True) and not working
        if r["task_status"] == "running" and r["task_owner"] is not None:
            attempts.setdefault(r["run_id"], (r["name"], r["task_owner"]))
    return {run_id: attempts.get(run_id, (None, None)) for run_id in run_ids
            if not waiting_on.get(run_id, False)}


def observe(
    after_event_id: int | None, limit: int, recheck: tuple[int, ...] = ()
) -> Program[StorageSnapshot]:
    """Run counts by status, open cancellations by lifecycle, and an event tail.

    Counting runs walks the (namespace, status, created_at) index; a run in
    review counts under the status a list shows (`_review_status`), as
    `durable list --status` finds it, not as its stored running; open
    cancellations are read from open runs only; the tail is a primary-key
    range (plus the ids the caller re-checks: on PostgreSQL a transaction may
    commit a lower id after a higher one was read).
    """
    runs: dict[tuple[str, str], int] = {}
    for r in (yield q("SELECT namespace, status, COUNT(*) AS n FROM runs "
                      "GROUP BY namespace, status")):
        runs[(str(r["namespace"]), str(r["status"]))] = int(r["n"])
    for r in (yield q("SELECT namespace, status, failure FROM runs WHERE needs_review = 1 "
                      f"AND status IN {OPEN_SQL}")):
        stored, shown = (str(r["namespace"]), str(r["status"])), (
            str(r["namespace"]), _review_status(1, str(r["status"]), r["failure"]))
        runs[stored] = runs.get(stored, 0) - 1  # (a read apart from the count's)
        runs[shown] = runs.get(shown, 0) + 1
    runs = {key: n for key, n in runs.items() if n > 0}
    cancellations: dict[tuple[str, str], int] = {}
    for r in (yield q("SELECT namespace, cancellation FROM runs WHERE status IN "
                      f"{OPEN_SQL} AND cancellation IS NOT NULL")):
        key = (str(r["namespace"]), str(loads(r["cancellation"]).get("lifecycle")))
        cancellations[key] = cancellations.get(key, 0) + 1
    blocked: dict[tuple[str, str], int] = {}
    # a run counts for every build that refused it (a run two builds refuse
    # waits for a third; a database of schema 12 knows only the last refusal)
    for r in (yield q("SELECT namespace, blocked_build, blocked_builds, COUNT(*) AS n FROM runs "
                      f"WHERE status IN {OPEN_SQL} AND blocked_build IS NOT NULL "
                      "GROUP BY namespace, blocked_build, blocked_builds")):
        for build in refusing(r["blocked_build"], r["blocked_builds"]):
            key = (str(r["namespace"]), build)
            blocked[key] = blocked.get(key, 0) + int(r["n"])
    if after_event_id is None:
        row = yield q1("SELECT MAX(id) AS last FROM events")
        last = int(row["last"] or 0) if row is not None else 0
        return StorageSnapshot(runs, cancellations, [], last, blocked)
    sql = ("SELECT e.id, e.run_id, e.type, e.recorded_at, e.data, r.namespace FROM events e "
           "JOIN runs r ON r.run_id = e.run_id WHERE e.id > ?")
    params: list[Any] = [after_event_id]
    if recheck:
        sql += f" OR e.id IN ({placeholders(len(recheck))})"
        params.extend(recheck)
    rows = yield q(sql + " ORDER BY e.id LIMIT ?", *params, limit)
    events = [
        RecordedEvent(int(r["id"]), str(r["namespace"]), str(r["run_id"]), str(r["type"]),
                      float(r["recorded_at"]), json.loads(r["data"]))
        for r in rows
    ]
    last = max([after_event_id, *(e.event_id for e in events)])
    return StorageSnapshot(runs, cancellations, events, last, blocked)
