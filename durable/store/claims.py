"""Ownership of runs: claiming runnable runs, renewing leases, handing runs back.

A claim bumps the run's epoch, so every write the previous owner still makes
is refused (fencing). Leases are renewed in one statement for all of a
worker's runs. Lock order on PostgreSQL, everywhere in the store: activity
attempts before runs, each in id order; two transactions that lock rows in
different orders deadlock, and each deadlock costs the server's
deadlock_timeout (1 s).
"""

from __future__ import annotations

import json

from ..driver import Program, Tx, ex, many, placeholders, q
from .events import append_events
from .records import (
    OP_COLUMNS,
    RUN_COLUMNS,
    ClaimedRun,
    OpRecord,
    earliest,
    op_from_row,
    run_from_row,
)


def claim_runs(
    tx: Tx,
    namespace: str,
    task_queue: str,
    worker_id: str,
    types: tuple[str, ...],
    limit: int,
    lease_seconds: float,
    now: float,
    capabilities: tuple[str, ...] = (),
) -> Program[list[ClaimedRun]]:
    """Take up to `limit` runnable runs of these types, with their recorded ops."""
    if limit <= 0 or not types:
        return []
    rows = yield q(
        "SELECT run_id FROM runs WHERE namespace = ? AND task_queue = ? "
        "AND status IN ('pending', 'running') AND ready_at <= ? AND needs_review = 0 "
        "AND (owner IS NULL OR lease_expires_at <= ?) "
        f"AND workflow_type IN ({placeholders(len(types))}) "
        "ORDER BY ready_at LIMIT ?" + tx.skip_locked,
        namespace, task_queue, now, now, *types, limit,
    )
    if not rows:
        return []
    ids = [r["run_id"] for r in rows]
    claimed = yield q(
        "UPDATE runs SET owner = ?, epoch = epoch + 1, lease_expires_at = ?, "
        "status = 'running', started_at = COALESCE(started_at, ?), claim_capabilities = ? "
        f"WHERE run_id IN ({placeholders(len(ids))}) RETURNING {RUN_COLUMNS}",
        worker_id, now + lease_seconds, now, json.dumps(list(capabilities)), *ids,
    )
    yield ex(
        "UPDATE workflows SET status = 'running' WHERE status = 'pending' AND current_run_id IN "
        f"({placeholders(len(ids))})",
        *ids,
    )
    op_rows = yield q(
        f"SELECT run_id, {OP_COLUMNS} FROM ops WHERE run_id IN ({placeholders(len(ids))})",
        *ids,
    )
    ops: dict[str, dict[str, OpRecord]] = {i: {} for i in ids}
    for row in op_rows:
        ops[row["run_id"]][row["op_id"]] = op_from_row(row)
    return [ClaimedRun(run_from_row(r), ops[r["run_id"]]) for r in claimed]


def renew_leases(
    tx: Tx, worker_id: str, run_ids: list[str], lease_seconds: float, now: float
) -> Program[set[str]]:
    """Extend the leases of the worker's running attempts and of the given runs
    it executes; the run ids it still owns."""
    tasks = yield q(
        "SELECT task_id, start_to_close_deadline, heartbeat_deadline, "
        "schedule_to_close_deadline FROM activity_tasks WHERE owner = ? AND status = 'running' "
        "ORDER BY task_id" + tx.lock,
        worker_id,
    )
    if tasks:
        lease = now + lease_seconds
        yield many(
            "UPDATE activity_tasks SET lease_expires_at = ?, deadline_at = ? WHERE task_id = ?",
            [
                (lease, earliest(t["start_to_close_deadline"], t["heartbeat_deadline"],
                                 t["schedule_to_close_deadline"], lease), t["task_id"])
                for t in tasks
            ],
        )
    # Only the runs the worker executes: a run it claimed a moment ago (its
    # executor not started yet) keeps its fresh lease and is never "stray".
    owned: set[str] = set()
    ordered = sorted(run_ids)
    for start in range(0, len(ordered), 400):
        chunk = ordered[start:start + 400]
        rows = yield q(
            "UPDATE runs SET lease_expires_at = ? WHERE run_id IN (SELECT run_id FROM runs "
            f"WHERE owner = ? AND run_id IN ({placeholders(len(chunk))}) "
            "AND status IN ('pending', 'running') ORDER BY run_id" + tx.lock
            + ") RETURNING run_id",
            now + lease_seconds, worker_id, *chunk,
        )
        owned.update(r["run_id"] for r in rows)
    return owned


def release_runs(
    tx: Tx, worker_id: str, run_ids: list[str], now: float, attempts: bool = True
) -> Program[None]:
    """A stopping worker hands its runs and running attempts back at once.

    Attempts go back to pending without using up a retry (the worker, not the
    activity, stopped); a late result from the old attempt is refused.
    """
    if run_ids:
        yield ex(
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE owner = ? AND "
            f"run_id IN ({placeholders(len(run_ids))})",
            worker_id, *run_ids,
        )
    if not attempts:
        return None
    tasks = yield q(
        "UPDATE activity_tasks SET status = 'pending', owner = NULL, available_at = ?, "
        "claimed_at = NULL, start_to_close_deadline = NULL, heartbeat_deadline = NULL, "
        "lease_expires_at = NULL, deadline_at = schedule_to_close_deadline "
        "WHERE owner = ? AND status = 'running' "
        "RETURNING task_id, run_id, op_id, attempt, namespace, task_queue",
        now, worker_id,
    )
    for task in tasks:
        yield from append_events(task["run_id"], [("ActivityAttemptReleased", {
            "op_id": task["op_id"], "task_id": task["task_id"], "attempt": task["attempt"],
            "worker_id": worker_id, "reason": "worker shutdown",
        })], now)
        tx.wake("activities", task["namespace"], task["task_queue"])
    return None


def expire_leases(tx: Tx, worker_id: str, now: float) -> Program[int]:
    """Declare a worker gone now: its runs may be claimed and its running
    attempts are timed out (worker_lost) at once, instead of when their leases
    would have expired. What a lease expiry does, brought forward."""
    runs = yield q(
        "UPDATE runs SET lease_expires_at = ? WHERE owner = ? AND status IN "
        "('pending', 'running') RETURNING namespace, task_queue", now, worker_id)
    tasks = yield q(
        "UPDATE activity_tasks SET lease_expires_at = ?, deadline_at = ? WHERE owner = ? "
        "AND status = 'running' RETURNING namespace, task_queue", now, now, worker_id)
    for row in [*runs, *tasks]:
        tx.wake("runs", row["namespace"], row["task_queue"])
        tx.wake("activities", row["namespace"], row["task_queue"])
    return len(runs) + len(tasks)

