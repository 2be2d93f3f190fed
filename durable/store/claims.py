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
from typing import Any

from ..driver import Program, Stmt, Tx, ex, many, placeholders, q
from ..wakes import Wake
from . import queues
from .events import append_events
from .records import (
    OP_COLUMNS,
    RUN_COLUMNS,
    Claimed,
    ClaimedRun,
    OpRecord,
    earliest,
    op_from_row,
    run_from_row,
)

#: a claim counts at most this many times its limit of ready rows (the count
#: only decides a fair share; a bounded count keeps a deep queue cheap)
COUNT_CAP = 8

_READY_RUNS = (
    "namespace = ? AND task_queue = ? AND status IN ('pending', 'running') AND ready_at <= ? "
    "AND needs_review = 0 AND (owner IS NULL OR lease_expires_at <= ?) "
)


def _live(registered: str) -> str:
    return ("(SELECT count(*) FROM workers WHERE namespace = ? AND task_queue = ? "
            f"AND expires_at >= ? AND {registered} <> '[]')")


def _ready(ready_sql: str) -> str:
    return f"(SELECT count(*) FROM (SELECT 1 FROM {ready_sql} LIMIT ?) AS ready)"


def fair_limit(ready_sql: str, ready_params: tuple[Any, ...], limit: int, namespace: str,
               task_queue: str, now: float, registered: str) -> tuple[str, tuple[Any, ...]]:
    """A claim's LIMIT: at most `limit` (the worker's free capacity) and at most
    its fair share of the ready work, ``ceil(ready / live workers)``.

    Why: without it the first worker to wake takes everything (a batch of
    100) and the others idle while it works through it (measured: with 4
    processes only 2 closed any run). Live workers are those whose
    registration has not expired and that run this kind of work
    (`registered`: their list of workflow types or activity names is not
    empty). The ready count is capped (`COUNT_CAP` x limit) and includes rows
    other claimers hold locked: a share is an estimate, never a reservation.
    """
    sql = (f"(SELECT CASE WHEN s.fair < ? THEN s.fair ELSE ? END FROM (SELECT CASE "
           f"WHEN w.n < 1 THEN r.n ELSE (r.n + w.n - 1) / w.n END AS fair FROM "
           f"(SELECT {_ready(ready_sql)} AS n) AS r, (SELECT {_live(registered)} AS n) AS w) "
           "AS s)")
    params = (limit, limit, *ready_params, limit * COUNT_CAP, namespace, task_queue, now)
    return sql, params


def ready_count(ready_sql: str, ready_params: tuple[Any, ...], limit: int, namespace: str,
                task_queue: str, now: float, registered: str) -> tuple[str, tuple[Any, ...]]:
    """Select-list columns ``ready`` (the capped count of ready rows) and ``live``
    (live workers), as `fair_limit` counts them: what `Claimed.backlog` needs."""
    return (f"{_ready(ready_sql)} AS ready, {_live(registered)} AS live",
            (*ready_params, limit * COUNT_CAP, namespace, task_queue, now))


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
    limited: bool = False,
) -> Program[Claimed[ClaimedRun]]:
    """Take up to `limit` runnable runs of these types, with their recorded ops,
    by priority then age; at most this worker's fair share of the ready runs
    (`fair_limit`), and within the queue's limits (`durable.store.queues`).

    Where the dialect has writable CTEs (PostgreSQL) and the queue is not
    known to be `limited`, the claim and the workflows' status are ONE
    self-committing statement, and the ops of runs that had an owner before
    are read after it (`read_claimed_ops`); if the queue turns out limited it
    claims nothing and says so (`Claimed.limited`), and the caller claims
    again with `limited=True`. Elsewhere a transaction that first reads the
    queue's limits (locking its row when it has some).
    """
    if limit <= 0 or not types:
        return Claimed()
    ready_sql = f"runs WHERE {_READY_RUNS}AND workflow_type IN ({placeholders(len(types))}) "
    ready_params = (namespace, task_queue, now, now, *types)
    share, share_params = fair_limit(ready_sql, ready_params, limit, namespace, task_queue, now,
                                     "workflow_types")
    counted, counted_params = ready_count(ready_sql, ready_params, limit, namespace, task_queue,
                                          now, "workflow_types")
    claim = ("UPDATE runs SET owner = ?, epoch = epoch + 1, lease_expires_at = ?, "
             "status = 'running', started_at = COALESCE(started_at, ?), "
             "claim_capabilities = ? ")
    claim_params = (worker_id, now + lease_seconds, now, json.dumps(list(capabilities)))
    if tx.dialect.writable_cte and not limited:
        guard, guard_params = queues.limited_guard(namespace, task_queue, "runs")
        pick = (f"SELECT run_id FROM {ready_sql}AND {guard} = 0 ORDER BY priority, ready_at "
                f"LIMIT {share}" + tx.skip_locked)
        return (yield from _claim_runs_in_one(
            claim, claim_params, pick, (*ready_params, *guard_params, *share_params), counted,
            counted_params, guard, guard_params))
    queue = yield from queues.read_limits(tx, namespace, task_queue, "runs")
    next_at = None
    if queue is not None:
        chosen = yield from queues.pick_runs(tx, queue, namespace, task_queue, ready_sql,
                                             ready_params, counted, counted_params, limit, now)
        ids, ready, live, next_at = chosen.ids, chosen.ready, chosen.live, chosen.next_at
    else:
        pick = (f"SELECT run_id, {counted} FROM {ready_sql}ORDER BY priority, ready_at "
                f"LIMIT {share}" + tx.skip_locked)
        rows = yield q(pick, *counted_params, *ready_params, *share_params)
        ids = [r["run_id"] for r in rows]
        ready, live = (int(rows[0]["ready"]), int(rows[0]["live"])) if rows else (0, 0)
    claimed = yield from _claim_ids(claim, claim_params, ids, ready, live)
    claimed.limited = queue is not None
    claimed.next_at = next_at
    return claimed


def _claim_ids(claim: str, claim_params: tuple[Any, ...], ids: list[str], ready: int,
               live: int) -> Program[Claimed[ClaimedRun]]:
    """Claim the chosen runs (epochs bumped, workflows running) with their ops."""
    if not ids:
        return Claimed()
    claimed = yield q(
        f"{claim}WHERE run_id IN ({placeholders(len(ids))}) RETURNING {RUN_COLUMNS}",
        *claim_params, *ids,
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
    return Claimed.of([ClaimedRun(run_from_row(r), ops[r["run_id"]]) for r in claimed], ready,
                       live)


def _claim_runs_in_one(claim: str, claim_params: tuple[Any, ...], pick: str,
                       pick_params: tuple[Any, ...], counted: str,
                       counted_params: tuple[Any, ...], guard: str,
                       guard_params: tuple[Any, ...]) -> Program[Claimed[ClaimedRun]]:
    """The claim as one self-committing data-modifying CTE: lock (SKIP LOCKED),
    bump the epochs, mark the workflows running, in one round trip.

    It claims nothing from a limited queue (`guard`), and always returns a
    row saying whether the queue is limited (`Claimed.limited`).

    The claimed runs' ops are NOT read here: this statement's snapshot
    predates its own locks, so it could miss an op that the run's previous
    owner (its lease expired) committed a moment before the claim. A run
    claimed for the first time (epoch 1 now) has no ops (only an owner
    writes them); the others are listed in `Claimed.unread`, and
    `read_claimed_ops` reads them after the claim has committed, when every
    later write of the previous owner is refused by its stale epoch.
    """
    rows = yield Stmt(
        f"WITH claimed AS ({claim}WHERE run_id IN ({pick}) RETURNING {RUN_COLUMNS}), "
        "started AS (UPDATE workflows SET status = 'running' WHERE status = 'pending' "
        "AND current_run_id IN (SELECT run_id FROM claimed)) "
        f"SELECT claimed.*, {counted}, g.limited FROM (SELECT {guard} AS limited) AS g "
        "LEFT JOIN claimed ON TRUE",
        (*claim_params, *pick_params, *counted_params, *guard_params), "all", autocommit=True,
    )
    limited = bool(rows and int(rows[0]["limited"]))
    rows = [r for r in rows if r["run_id"] is not None]
    if not rows:
        claimed: Claimed[ClaimedRun] = Claimed()
        claimed.limited = limited
        return claimed
    claimed = Claimed.of([ClaimedRun(run_from_row(r), {}) for r in rows], int(rows[0]["ready"]),
                         int(rows[0]["live"]))
    claimed.unread = [c.run.run_id for c in claimed if c.run.epoch > 1]
    claimed.limited = limited
    return claimed


def read_claimed_ops(claimed: Claimed[ClaimedRun]) -> Program[None]:
    """Fill in the ops of the runs a one-statement claim left unread."""
    ids = claimed.unread
    if not ids:
        return None
    op_rows = yield q(
        f"SELECT run_id, {OP_COLUMNS} FROM ops WHERE run_id IN ({placeholders(len(ids))})",
        *ids,
    )
    by_run = {c.run.run_id: c for c in claimed}
    for row in op_rows:
        by_run[row["run_id"]].ops[row["op_id"]] = op_from_row(row)
    claimed.unread = []
    return None


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
        tx.wake(Wake.activities(task["namespace"], task["task_queue"]))
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
        tx.wake(Wake.runs(row["namespace"], row["task_queue"]))
        tx.wake(Wake.activities(row["namespace"], row["task_queue"]))
    return len(runs) + len(tasks)

