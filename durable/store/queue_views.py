"""What a task queue's limits let through, seen from outside: `describe_queue`
(one queue: limits, what runs and waits, the rate left, who serves it) and
`gauges` (every queue, for /metrics), read from the same rows and columns
the claims of `durable.store.queues` write.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..clock import to_iso
from ..driver import Program, q, q1
from .queues import LIMIT_COLUMNS, RUNNING_RUNS, RUNNING_TASKS, token_bucket
from .records import OPEN_SQL, refusing

#: how many leases of each kind (runs, attempts) `describe_queue` lists
LEASES_SHOWN = 100


def describe_queue(namespace: str, name: str, now: float, *,
                   leases: bool = True) -> Program[dict[str, Any]]:
    """The queue's limits, what runs and waits, the rate left, and (with
    `leases`; a list of every queue leaves them out) the leases held now."""
    row = yield q1(f"SELECT {LIMIT_COLUMNS} FROM task_queues WHERE namespace = ? AND name = ?",
                   namespace, name)
    limits = json.loads(row["limits"]) if row is not None else {}
    running = yield q1(f"SELECT count(*) AS n FROM {RUNNING_RUNS}", namespace, name, now)
    waiting = yield q1(
        "SELECT count(*) AS n, min(ready_at) AS oldest FROM runs WHERE namespace = ? AND "
        f"task_queue = ? AND status IN {OPEN_SQL} AND needs_review = 0 AND "
        "ready_at <= ? AND (owner IS NULL OR lease_expires_at <= ?)", namespace, name, now, now)
    tasks_running = yield q1(f"SELECT count(*) AS n FROM {RUNNING_TASKS}", namespace, name, now)
    tasks_waiting = yield q1(
        "SELECT count(*) AS n, min(available_at) AS oldest FROM activity_tasks WHERE "
        "namespace = ? AND task_queue = ? AND status = 'pending' AND available_at <= ?",
        namespace, name, now)
    keys = yield q(f"SELECT concurrency_key, count(*) AS n FROM {RUNNING_RUNS}"
                   "AND concurrency_key IS NOT NULL GROUP BY concurrency_key "
                   "ORDER BY count(*) DESC, concurrency_key LIMIT 20", namespace, name, now)
    held = (yield from _leases(namespace, name, now)) if leases else None
    workers = yield q1("SELECT count(*) AS n FROM workers WHERE namespace = ? AND task_queue = ? "
                       "AND expires_at >= ? AND stopped_at IS NULL", namespace, name, now)
    run_bucket = token_bucket(limits.get("rate"), row["run_tokens"] if row else None,
                              row["run_refilled_at"] if row else None, now)
    task_bucket = token_bucket(limits.get("activity_rate"),
                               row["activity_tokens"] if row else None,
                               row["activity_refilled_at"] if row else None, now)
    # no live worker and no open work: a name nobody uses (a misspelt one, say);
    # the queues in use are named, so the caller sees which it meant
    used = int(workers["n"]) > 0 or (yield from _has_open_work(namespace, name))
    known = [] if used else [n for n in (yield from queue_names(namespace, now)) if n != name]
    oldest = waiting["oldest"]
    oldest_task = tasks_waiting["oldest"]
    return {
        "name": name,
        "namespace": namespace,
        "limits": public_limits(limits),
        "runs": {
            "running": int(running["n"]), "waiting": int(waiting["n"]),
            "oldest_waiting_at": to_iso(oldest),
            "oldest_waiting_seconds": None if oldest is None else max(0.0, now - oldest),
            "rate_left": None if run_bucket is None else math.floor(run_bucket.tokens + 1e-9),
            "running_by_key": {r["concurrency_key"]: int(r["n"]) for r in keys},
        },
        "activities": {
            "running": int(tasks_running["n"]), "waiting": int(tasks_waiting["n"]),
            "oldest_waiting_at": to_iso(oldest_task),
            "oldest_waiting_seconds": None if oldest_task is None else max(0.0,
                                                                           now - oldest_task),
            "rate_left": None if task_bucket is None else math.floor(task_bucket.tokens + 1e-9),
        },
        "workers": int(workers["n"]),
        **({} if held is None else {"leases": held}),
        "updated_at": to_iso(row["updated_at"]) if row is not None else None,
        "idle": not used,
        **({} if used else {"queues_in_use": known}),
    }


def _leases(namespace: str, name: str, now: float) -> Program[list[dict[str, Any]]]:
    """Who holds what right now: the leases behind the running counts (the
    reference's ``current_leases``), the first LEASES_SHOWN of each kind."""
    runs = yield q(f"SELECT workflow_id, run_id, owner, lease_expires_at FROM {RUNNING_RUNS}"
                   f"ORDER BY lease_expires_at LIMIT {LEASES_SHOWN}", namespace, name, now)
    tasks = yield q(
        "SELECT task_id, workflow_id, run_id, activity_name, attempt, owner, lease_expires_at "
        f"FROM {RUNNING_TASKS}ORDER BY lease_expires_at LIMIT {LEASES_SHOWN}",
        namespace, name, now)
    return [
        *({"kind": "workflow", "workflow_id": r["workflow_id"], "run_id": r["run_id"],
           "worker_id": r["owner"], "lease_expires_at": to_iso(r["lease_expires_at"])}
          for r in runs),
        *({"kind": "activity", "task_id": r["task_id"], "workflow_id": r["workflow_id"],
           "run_id": r["run_id"], "activity_type": r["activity_name"],
           "attempt": int(r["attempt"]), "worker_id": r["owner"],
           "lease_expires_at": to_iso(r["lease_expires_at"])} for r in tasks),
    ]


def _has_open_work(namespace: str, name: str) -> Program[bool]:
    """Whether an open run or activity attempt is on the queue (waiting or not)."""
    row = yield q1(
        f"SELECT (SELECT 1 FROM runs WHERE namespace = ? AND task_queue = ? AND status IN "
        f"{OPEN_SQL} LIMIT 1) AS r, (SELECT 1 FROM activity_tasks WHERE namespace = ? AND "
        f"task_queue = ? AND status IN {OPEN_SQL} LIMIT 1) AS a", namespace, name,
        namespace, name)
    return row is not None and (row["r"] is not None or row["a"] is not None)


def public_limits(limits: dict[str, Any]) -> dict[str, Any]:
    """Every limit, None where unset."""
    return {k: limits.get(k) for k in ("max_running", "max_running_activities", "rate",
                                        "activity_rate", "max_running_per_key")}


def queue_names(namespace: str, now: float) -> Program[list[str]]:
    """The queues anyone knows of: limited, served by a live worker, or holding open work."""
    rows = yield q(
        "SELECT name FROM task_queues WHERE namespace = ? UNION "
        "SELECT task_queue FROM workers WHERE namespace = ? AND expires_at >= ? UNION "
        "SELECT DISTINCT task_queue FROM runs WHERE namespace = ? AND status IN "
        f"{OPEN_SQL} UNION SELECT DISTINCT task_queue FROM activity_tasks WHERE "
        f"namespace = ? AND status IN {OPEN_SQL}",
        namespace, namespace, now, namespace, namespace)
    return sorted({r["name"] for r in rows})


def gauges(now: float) -> Program[list[dict[str, Any]]]:
    """Per (namespace, queue), for /metrics: runs and activity attempts running
    (under a live lease) and waiting (ready, no live owner), runs parked (put
    down under pressure until their wait ends), the limits, and the rate
    left; one read of a few grouped counts."""
    found: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(namespace: str, name: str) -> dict[str, Any]:
        return found.setdefault((namespace, name), {
            "namespace": namespace, "queue": name, "runs_running": 0, "runs_waiting": 0,
            "runs_parked": 0,
            "activities_running": 0, "activities_waiting": 0, "limits": {},
            "rate_left": {}})

    counts = (
        ("runs_running", "SELECT namespace, task_queue, count(*) AS n FROM runs WHERE status IN "
         f"{OPEN_SQL} AND owner IS NOT NULL AND lease_expires_at > ? "
         "GROUP BY namespace, task_queue", (now,)),
        ("runs_waiting", "SELECT namespace, task_queue, count(*) AS n FROM runs WHERE status IN "
         f"{OPEN_SQL} AND needs_review = 0 AND ready_at <= ? AND (owner IS NULL OR "
         "lease_expires_at <= ?) GROUP BY namespace, task_queue", (now, now)),
        # put down under pressure, not claimable before their wait ends (store.parked)
        ("runs_parked", "SELECT namespace, task_queue, count(*) AS n FROM runs WHERE status IN "
         f"{OPEN_SQL} AND owner IS NULL AND (ready_at IS NULL OR ready_at > ?) "
         "GROUP BY namespace, task_queue", (now,)),
        ("activities_running", "SELECT namespace, task_queue, count(*) AS n FROM activity_tasks "
         "WHERE status = 'running' AND lease_expires_at > ? GROUP BY namespace, task_queue",
         (now,)),
        ("activities_waiting", "SELECT namespace, task_queue, count(*) AS n FROM activity_tasks "
         "WHERE status = 'pending' AND available_at <= ? GROUP BY namespace, task_queue",
         (now,)),
    )
    for key, sql, params in counts:
        for r in (yield q(sql, *params)):
            entry(str(r["namespace"]), str(r["task_queue"]))[key] = int(r["n"])
    for r in (yield q(f"SELECT namespace, name, {LIMIT_COLUMNS} FROM task_queues")):
        limits = json.loads(r["limits"])
        e = entry(str(r["namespace"]), str(r["name"]))
        e["limits"] = limits
        for kind, rate, tokens, at in (("runs", "rate", "run_tokens", "run_refilled_at"),
                                       ("activities", "activity_rate", "activity_tokens",
                                        "activity_refilled_at")):
            bucket = token_bucket(limits.get(rate), r[tokens], r[at], now)
            if bucket is not None:
                e["rate_left"][kind] = bucket.tokens
    return [found[k] for k in sorted(found)]


def build_runs(namespace: str, name: str) -> Program[dict[str | None, dict[str, int]]]:
    """The queue's open runs by build (None: workers without a build id), for
    the build rollout (`durable._builds`): ``open_runs`` a build last took
    (advanced), ``refused_elsewhere`` those of them another build refused (its
    code does not replay them: only this build, or a patched one, continues
    them), ``blocked_runs`` open runs this build refused. A run no worker ever
    claimed (``epoch = 0``) belongs to no build yet."""
    rows = yield q(
        "SELECT last_build, blocked_build, blocked_builds, count(*) AS n FROM runs "
        f"WHERE namespace = ? AND task_queue = ? AND status IN {OPEN_SQL} AND epoch > 0 "
        "GROUP BY last_build, blocked_build, blocked_builds", namespace, name)
    out: dict[str | None, dict[str, int]] = {}

    def entry(build: str | None) -> dict[str, int]:
        return out.setdefault(build, {"open_runs": 0, "refused_elsewhere": 0,
                                      "blocked_runs": 0})

    for r in rows:
        n, last = int(r["n"]), r["last_build"]
        refused = refusing(r["blocked_build"], r["blocked_builds"])
        entry(last)["open_runs"] += n
        if refused and last not in refused:
            entry(last)["refused_elsewhere"] += n
        for build in refused:
            entry(build)["blocked_runs"] += n
    return out
