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
from dataclasses import dataclass
from typing import Any

from ..driver import Program, Tx, ex, many, placeholders, q, q1
from ..wakes import Wake
from . import fastpath, queues
from .events import append_events
from .records import (
    OP_COLUMNS,
    OPEN_SQL,
    RUN_COLUMNS,
    Claimed,
    ClaimedRun,
    OpRecord,
    earliest,
    op_from_row,
    open_status_sql,
    refusal_needle,
    refusal_text,
    run_from_row,
)
from .returning import update_one_returning, update_returning
from .runs import slot_freed

#: a claim counts at most this many times its limit of ready rows (the count
#: only decides a fair share; a bounded count keeps a deep queue cheap)
COUNT_CAP = 8

_READY_RUNS = (
    f"namespace = ? AND task_queue = ? AND status IN {OPEN_SQL} AND ready_at <= ? "
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


def share_limit(tx: Tx, ready_sql: str, ready_params: tuple[Any, ...], limit: int,
                namespace: str, task_queue: str, now: float,
                registered: str) -> Program[tuple[str, tuple[Any, ...]]]:
    """A claim's LIMIT as SQL and its parameters: `fair_limit`'s subquery where a
    LIMIT may be one (`Dialect.limit_subquery`); elsewhere the same share,
    counted by one read first and bound as ``LIMIT ?``."""
    if tx.dialect.limit_subquery:
        return fair_limit(ready_sql, ready_params, limit, namespace, task_queue, now,
                          registered)
    counted, counted_params = ready_count(ready_sql, ready_params, limit, namespace,
                                          task_queue, now, registered)
    row = yield q1(f"SELECT {counted}", *counted_params)
    ready, live = int(row["ready"]), int(row["live"])
    fair = ready if live < 1 else (ready + live - 1) // live
    return "?", (min(fair, limit),)


@dataclass(frozen=True)
class ClaimSql:
    """A claim of runs by one worker in SQL: the runs ready for it (`ready_sql`,
    a ``FROM`` clause with its ``WHERE``), the select-list counts of its fair
    share (`counted`: ``ready`` and ``live``) and its ``SET`` clause (`claim`)."""

    ready_sql: str
    ready_params: tuple[Any, ...]
    counted: str
    counted_params: tuple[Any, ...]
    claim: str
    claim_params: tuple[Any, ...]


def claim_sql(namespace: str, task_queue: str, worker_id: str, types: tuple[str, ...],
              limit: int, lease_seconds: float, now: float,
              capabilities: tuple[str, ...] = (), build_id: str | None = None) -> ClaimSql:
    """The SQL of a claim of runs (`claim_runs`; a trade's, `parked.trade_parked`)."""
    ready_sql = (f"runs WHERE {_READY_RUNS}AND workflow_type IN ({placeholders(len(types))}) "
                 "AND (blocked_build IS NULL OR blocked_build <> ?) "
                 "AND (blocked_builds IS NULL OR REPLACE(blocked_builds, ?, '') = blocked_builds) ")
    # no build is never a blocked build ('' is refused as a build id)
    ready_params = (namespace, task_queue, now, now, *types, build_id or "",
                    refusal_needle(build_id))
    counted, counted_params = ready_count(ready_sql, ready_params, limit, namespace, task_queue,
                                          now, "workflow_types")
    # the builds first: some databases evaluate SET assignments left to right,
    # each seeing the ones before it (epoch must still be the one before the claim)
    # a reset's run starts with the build that recorded the history it keeps
    # (`reset.reset_run`): its first claim keeps that as the last build, so a
    # worker of another build replays the kept history before taking it
    claim = ("started_build = CASE WHEN epoch = 0 THEN ? ELSE started_build END, "
             "last_build = CASE WHEN epoch = 0 AND last_build IS NULL THEN ? "
             "ELSE last_build END, "
             "owner = ?, epoch = epoch + 1, lease_expires_at = ?, "
             "status = 'running', started_at = COALESCE(started_at, ?), "
             "claim_capabilities = ?")
    claim_params = (build_id, build_id, worker_id, now + lease_seconds, now,
                    json.dumps(list(capabilities)))
    return ClaimSql(ready_sql, ready_params, counted, counted_params, claim, claim_params)


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
    build_id: str | None = None,
    limited: bool = False,
    limits: str | None = None,
) -> Program[Claimed[ClaimedRun]]:
    """Take up to `limit` runnable runs of these types, with their recorded ops,
    by priority then age; at most this worker's fair share of the ready runs
    (`fair_limit`), and within the queue's limits (`durable.store.queues`).

    Builds (the upgrade gate, `durable._runtime.upgrade`): a run's first claim
    records the claiming worker's build as the one that started it and last
    took it; a later claim by another build leaves both alone (the worker
    records itself once the run's history replayed against its code). Runs
    `build_id` already failed to replay (``blocked_builds``: every build that
    refused the run, not only the last, or two builds that both refuse it
    would take it from each other in turn, replaying it without end) are not
    taken.

    Where the dialect has writable CTEs (PostgreSQL) and the queue is not
    known to be `limited`, the claim and the workflows' status are ONE
    self-committing statement, and the ops of runs that had an owner before
    are read after it (`read_claimed_ops`); if the queue turns out limited it
    claims nothing and says so (`Claimed.limited`), and the caller claims
    again with `limited=True`. Elsewhere a transaction that first reads the
    queue's limits (locking its row when it has some). A queue known to be
    limited, with the `limits` the store last read, is claimed in ONE
    statement on those dialects too (`queues.claim_limited_in_one`), which
    says when it could not (`Claimed.stale`: the caller claims again in a
    transaction, with `limits=None`).
    """
    if limit <= 0 or not types:
        return Claimed()
    sql = claim_sql(namespace, task_queue, worker_id, types, limit, lease_seconds, now,
                    capabilities, build_id)
    ready_sql, ready_params = sql.ready_sql, sql.ready_params
    counted, counted_params = sql.counted, sql.counted_params
    claim, claim_params = sql.claim, sql.claim_params
    order = "ORDER BY priority, ready_at"
    if tx.dialect.writable_cte and limited and limits is not None:
        return (yield from queues.claim_limited_in_one(
            tx, namespace, task_queue, ready_sql, ready_params, counted, counted_params,
            f"UPDATE runs SET {claim} ", claim_params, limit, now, limits))
    if tx.dialect.writable_cte and not limited:
        share, share_params = yield from share_limit(
            tx, ready_sql, ready_params, limit, namespace, task_queue, now, "workflow_types")
        guard, guard_params = queues.limited_guard(namespace, task_queue, "runs")
        pick = (f"SELECT run_id FROM {ready_sql}AND {guard} = 0 {order} LIMIT {share}"
                + tx.skip_locked)
        return (yield from fastpath.claim_runs_in_one(
            f"UPDATE runs SET {claim} ", claim_params, pick,
            (*ready_params, *guard_params, *share_params), counted, counted_params,
            (guard, guard_params)))
    queue = yield from queues.read_limits(tx, namespace, task_queue, "runs", known=limited)
    next_at = None
    held = 0
    if queue is not None:
        chosen = yield from queues.pick_runs(tx, queue, namespace, task_queue, ready_sql,
                                             ready_params, counted, counted_params, limit, now)
        ids, ready, live, next_at = chosen.ids, chosen.ready, chosen.live, chosen.next_at
        held = chosen.held
    else:
        share, share_params = yield from share_limit(
            tx, ready_sql, ready_params, limit, namespace, task_queue, now, "workflow_types")
        rows = yield q(f"SELECT run_id, {counted} FROM {ready_sql}{order} LIMIT {share}"
                       + tx.skip_locked, *counted_params, *ready_params, *share_params)
        ids = [r["run_id"] for r in rows]
        ready, live = (int(rows[0]["ready"]), int(rows[0]["live"])) if rows else (0, 0)
    claimed = yield from claim_ids(tx, claim, claim_params, ids, ready, live,
                                    recheck=None if queue is None else now)
    if queue is not None and claimed and tx.dialect.writable_cte:
        # tells a one-statement claim waiting for the row that its snapshot's
        # counts are stale (queues.claim_limited_in_one)
        yield ex("UPDATE task_queues SET claims = claims + 1 WHERE namespace = ? AND name = ?",
                 namespace, task_queue)
    claimed.limited = queue is not None
    claimed.limits = None if queue is None else str(queue["limits"])
    claimed.next_at = next_at
    claimed.held_back = held
    return claimed


def claim_ids(tx: Tx, claim: str, claim_params: tuple[Any, ...], ids: list[str], ready: int,
               live: int, recheck: float | None = None) -> Program[Claimed[ClaimedRun]]:
    """Claim the chosen runs (epochs bumped, workflows running) with their ops.

    `recheck` (now): the runs were chosen without locking them (a limited
    claim's window query cannot lock), so the claim takes only those still
    without a live owner."""
    if not ids:
        return Claimed()
    where = f"run_id IN ({placeholders(len(ids))})"
    params: tuple[Any, ...] = tuple(ids)
    if recheck is not None:
        where += " AND (owner IS NULL OR lease_expires_at <= ?)"
        params += (recheck,)
    started = False
    if tx.dialect.writable_cte:
        claimed = yield from fastpath.claim_ids_in_one(f"UPDATE runs SET {claim} ",
                                                       claim_params, where, params)
        started = True
    else:
        claimed = yield from update_returning(
            tx.dialect, "runs", claim, claim_params, where, params, RUN_COLUMNS,
            key="run_id", locked=ids if recheck is None else None)
    ids = [r["run_id"] for r in claimed]
    if not ids:
        return Claimed()
    # A run claimed for the first time (epoch 1 now) has no ops (only an owner
    # writes them: except a reset's new run, which starts with the ops it kept)
    # and may start its workflow; the others have ops to read.
    first = [r for r in claimed if int(r["epoch"]) == 1]
    again = [r["run_id"] for r in claimed
             if int(r["epoch"]) != 1 or r["reset_from_run_id"] is not None]
    if first and not started:
        # by the workflows' key (namespace, workflow_id): current_run_id has no index
        workflow_ids = sorted({r["workflow_id"] for r in first})
        yield ex(
            "UPDATE workflows SET status = 'running' WHERE namespace = ? AND workflow_id IN "
            f"({placeholders(len(workflow_ids))}) AND status = 'pending' AND current_run_id IN "
            f"({placeholders(len(first))})",
            first[0]["namespace"], *workflow_ids, *(r["run_id"] for r in first),
        )
    ops: dict[str, dict[str, OpRecord]] = {i: {} for i in ids}
    if again:
        op_rows = yield q(
            f"SELECT run_id, {OP_COLUMNS} FROM ops WHERE run_id IN "
            f"({placeholders(len(again))})", *again)
        for row in op_rows:
            ops[row["run_id"]][row["op_id"]] = op_from_row(row)
    return Claimed.of([ClaimedRun(run_from_row(r), ops[r["run_id"]]) for r in claimed], ready,
                       live)


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
        rows = yield from update_returning(
            tx.dialect, "runs", "lease_expires_at = ?", (now + lease_seconds,),
            f"owner = ? AND run_id IN ({placeholders(len(chunk))}) AND {open_status_sql()}",
            (worker_id, *chunk), "run_id", key="run_id", ordered=True)
        owned.update(r["run_id"] for r in rows)
    return owned


def release_runs(
    tx: Tx, worker_id: str, run_ids: list[str], now: float, attempts: bool = True
) -> Program[None]:
    """A stopping worker hands its runs and running attempts back at once.

    Attempts go back to pending without using up a retry (the worker, not the
    activity, stopped); a late result from the old attempt is refused.
    """
    if run_ids and tx.slot_limited:  # a queue limited by slots: say which slots came free
        released = yield from update_returning(
            tx.dialect, "runs", "owner = NULL, lease_expires_at = NULL", (),
            f"owner = ? AND run_id IN ({placeholders(len(run_ids))})", (worker_id, *run_ids),
            "namespace, task_queue", key="run_id", ordered=True)
        for queue in sorted({(r["namespace"], r["task_queue"]) for r in released}):
            slot_freed(tx, *queue)
    elif run_ids:
        yield ex(
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE owner = ? AND "
            f"run_id IN ({placeholders(len(run_ids))})",
            worker_id, *run_ids,
        )
    if not attempts:
        return None
    tasks = yield from update_returning(
        tx.dialect, "activity_tasks",
        "status = 'pending', owner = NULL, available_at = ?, claimed_at = NULL, "
        "start_to_close_deadline = NULL, heartbeat_deadline = NULL, lease_expires_at = NULL, "
        "deadline_at = schedule_to_close_deadline", (now,),
        "owner = ? AND status = 'running'", (worker_id,),
        "task_id, run_id, op_id, attempt, namespace, task_queue", key="task_id", ordered=True)
    for task in tasks:
        yield from append_events(tx, task["run_id"], [("ActivityAttemptReleased", {
            "op_id": task["op_id"], "task_id": task["task_id"], "attempt": task["attempt"],
            "worker_id": worker_id, "reason": "worker shutdown",
        })], now)
        tx.wake(Wake.activities(task["namespace"], task["task_queue"]))
    return None


def expire_leases(tx: Tx, worker_id: str, now: float) -> Program[int]:
    """Declare a worker gone now: its runs may be claimed and its running
    attempts are timed out (worker_lost) at once, instead of when their leases
    would have expired. What a lease expiry does, brought forward."""
    tasks = yield from update_returning(
        tx.dialect, "activity_tasks", "lease_expires_at = ?, deadline_at = ?", (now, now),
        "owner = ? AND status = 'running'", (worker_id,), "namespace, task_queue",
        key="task_id", ordered=True)
    runs = yield from update_returning(
        tx.dialect, "runs", "lease_expires_at = ?", (now,),
        f"owner = ? AND {open_status_sql()}", (worker_id,), "namespace, task_queue",
        key="run_id", ordered=True)
    for row in [*runs, *tasks]:
        tx.wake(Wake.runs(row["namespace"], row["task_queue"]))
        tx.wake(Wake.activities(row["namespace"], row["task_queue"]))
    return len(runs) + len(tasks)


def take_for_build(tx: Tx, run_id: str, epoch: int, build_id: str) -> Program[bool]:
    """A worker of `build_id` replayed the run it claimed against its code: it
    is now the build that last took the run, and no build is refused any more
    (a compatible worker took it). False: the claim was lost meanwhile."""
    row = yield from update_one_returning(
        tx.dialect, "runs", "last_build = ?, started_build = COALESCE(started_build, ?), "
        "blocked_build = NULL, blocked_divergence = NULL, blocked_builds = NULL",
        (build_id, build_id),
        f"run_id = ? AND epoch = ? AND {open_status_sql()}", (run_id, epoch), "run_id",
        key="run_id", value=run_id)
    return row is not None


def block_run(tx: Tx, run_id: str, epoch: int, worker_id: str, build_id: str,
              divergence: str, refused: list[str]) -> Program[bool]:
    """A worker of `build_id` claimed a run its code does not replay: record why
    (describe()["blocked"]) and hand the run back untouched, so a worker of a
    build that replays it takes it; workers of `build_id` no longer claim it,
    nor do those of the builds that refused it before (`refused`, as the
    claim read them: the claim's epoch fences this write). Nothing else
    changes: the run is not failed, its history gets nothing."""
    builds = [b for b in refused if b != build_id] + [build_id]
    row = yield from update_one_returning(
        tx.dialect, "runs", "blocked_build = ?, blocked_divergence = ?, blocked_builds = ?, "
        "owner = NULL, lease_expires_at = NULL", (build_id, divergence, refusal_text(builds)),
        "run_id = ? AND epoch = ? AND owner = ?", (run_id, epoch, worker_id),
        "namespace, task_queue", key="run_id", value=run_id)
    if row is None:
        return False
    tx.wake(Wake.runs(row["namespace"], row["task_queue"]))
    return True



def release_strays(tx: Tx, worker_id: str, running: frozenset[str]) -> Program[list[str]]:
    """Hand back the open runs `worker_id` owns but is not `running` (by the runs'
    owner index): what a claim whose answer was lost may have taken
    (`durable._runtime.claiming.RunClaims`). The runs handed back."""
    rows = yield q(f"SELECT run_id FROM runs WHERE owner = ? AND {open_status_sql()} "
                   "ORDER BY run_id", worker_id)
    strays = [r["run_id"] for r in rows if r["run_id"] not in running]
    yield from release_runs(tx, worker_id, strays, 0.0, attempts=False)
    return strays
