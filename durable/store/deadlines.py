"""The watchdog's transactions: when is the next deadline, and enforce what expired.

Enforcement is idempotent and safe on many workers at once (claims skip rows
another enforcer holds). Storage is the source of truth: a run past its
deadline is timed out (or its cleanup expires) here, whichever worker or
commit gets to it first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ..clock import to_iso
from ..driver import Program, Tx, placeholders, q, q1
from ..failure import Failure
from .activities import task_expiry, time_out_task
from .closing import close_run
from .records import OPEN_SQL, RUN_COLUMNS, TASK_COLUMNS, RunStatus, earliest, run_from_row


def next_deadline(namespace: str, now: float,
                  since: float | None = None) -> Program[tuple[float | None, float | None]]:
    """When something in the namespace is next due: (a deadline, a lease expiry).

    An attempt that becomes available (a retry's backoff ends) counts from
    `since`, the instant the caller last poked its claim loops (default:
    `now`): one that became available after that poke is due now, even if
    the caller slept past it for another reason. Without it a watchdog woken
    by a wake-up at the very instant a retry became available never poked
    the claim loops, and on virtual time the clock skipped on to the retry's
    schedule-to-start deadline (issue 21). An attempt available the instant it
    was scheduled is not counted: its scheduling commit's wake-up announces it
    to whoever should claim it, and on PostgreSQL that is its run's process
    alone (docs/design/postgres-driver.md): counted here, every other process's
    watchdog, woken by any wake-up, poked its claim loops to claim it.

    The two are apart because a lease expires only when its worker is gone: a
    virtual clock (durable.testing) must never skip ahead to a lease expiry,
    or it would declare live workers lost.
    """
    row = yield q1(
        "SELECT "
        "(SELECT MIN(deadline_at) FROM runs WHERE namespace = ? "
        f" AND status IN {OPEN_SQL}) AS run_deadline, "
        "(SELECT MIN(CASE WHEN lease_expires_at IS NOT NULL AND deadline_at >= lease_expires_at"
        " THEN NULL ELSE deadline_at END) FROM activity_tasks WHERE namespace = ? "
        f" AND status IN {OPEN_SQL}) AS task_deadline, "
        "(SELECT MIN(available_at) FROM activity_tasks WHERE namespace = ? "
        " AND status = 'pending' AND available_at > ? AND available_at > scheduled_at)"
        " AS task_available, "
        "(SELECT MIN(lease_expires_at) FROM runs WHERE namespace = ? "
        f" AND status IN {OPEN_SQL} AND owner IS NOT NULL) AS run_lease, "
        "(SELECT MIN(lease_expires_at) FROM activity_tasks WHERE namespace = ? "
        " AND status = 'running') AS task_lease",
        namespace, namespace, namespace, now if since is None else min(since, now),
        namespace, namespace,
    )
    if row is None:
        return None, None
    return (earliest(row["run_deadline"], row["task_deadline"], row["task_available"]),
            earliest(row["run_lease"], row["task_lease"]))


def enforce_expired(
    tx: Tx, namespace: str, now: float, run_id: str | None = None, limit: int = 500
) -> Program[dict[str, int]]:
    """Time out runs and activity attempts past their deadlines; counts by kind.

    With `run_id`, only that run's own deadlines (a commit found it expired).
    """
    counts: dict[str, int] = {}
    run_filter = " AND run_id = ?" if run_id is not None else ""
    extra: tuple[Any, ...] = (run_id,) if run_id is not None else ()
    runs = yield q(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE namespace = ? AND status IN "
        f"{OPEN_SQL} AND deadline_at <= ?{run_filter} ORDER BY deadline_at LIMIT ?"
        + tx.skip_locked,
        namespace, now, *extra, limit,
    )
    for row in runs:
        run = run_from_row(row)
        expired = run.deadlines.expired(now)
        if expired is None:
            continue
        kind, deadline = expired
        if kind == "cleanup_deadline":
            yield from close_run(tx, run.run_id, RunStatus.CANCELLED, now,
                                 failure=Failure.cleanup_expired(
                                     deadline, run.workflow_id, delivered=bool(
                                         (run.cancellation or {}).get("delivered_at"))),
                                 reason="deadline_expired")
        else:
            yield from close_run(tx, run.run_id, RunStatus.TIMED_OUT, now,
                                 failure=Failure.workflow_timeout(kind, deadline,
                                                                  run.workflow_id),
                                 reason=kind)
        counts[kind] = counts.get(kind, 0) + 1
    if run_id is not None:
        return counts
    tasks = yield q(
        f"SELECT {TASK_COLUMNS} FROM activity_tasks WHERE namespace = ? AND status IN "
        f"{OPEN_SQL} AND deadline_at <= ? ORDER BY deadline_at LIMIT ?"
        + tx.skip_locked,
        namespace, now, limit,
    )
    for task in sorted(tasks, key=lambda t: str(t["run_id"])):  # lock order: see claims
        task_kind = yield from time_out_task(tx, task, now)
        if task_kind is not None:
            counts[task_kind] = counts.get(task_kind, 0) + 1
    return counts


def overdue(namespace: str, now: float, limit: int = 100) -> Program[dict[str, Any]]:
    """The deadlines that have passed and are not enforced yet, read only:
    what a repair pass would enforce now. Every worker's watchdog enforces a
    deadline as it falls due, so a healthy namespace shows none, or only
    ones a few milliseconds old; a count that stays, or an oldest one
    seconds late, means no watchdog is running in it (no worker, or none
    reaching the database). Counts by kind; the ids of at most `limit` runs
    and `limit` activity attempts, oldest first (``scan_pressure``: there
    may be more)."""
    runs = yield q(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE namespace = ? AND status IN {OPEN_SQL} "
        "AND deadline_at <= ? ORDER BY deadline_at LIMIT ?", namespace, now, limit)
    tasks = yield q(
        f"SELECT {TASK_COLUMNS} FROM activity_tasks WHERE namespace = ? AND status IN "
        f"{OPEN_SQL} AND deadline_at <= ? ORDER BY deadline_at LIMIT ?", namespace, now, limit)
    run_kinds: dict[str, int] = {}
    task_kinds: dict[str, int] = {}
    run_ids: list[str] = []
    task_ids: list[str] = []
    due: list[float] = []
    for row in runs:
        expired = run_from_row(row).deadlines.expired(now)
        if expired is not None:
            run_kinds[expired[0]] = run_kinds.get(expired[0], 0) + 1
            run_ids.append(str(row["run_id"]))
            due.append(expired[1])
    for task in tasks:
        expiry = task_expiry(task, now)
        if expiry is not None:
            task_kinds[expiry[0]] = task_kinds.get(expiry[0], 0) + 1
            task_ids.append(str(task["task_id"]))
            due.append(expiry[1])
    oldest = min(due) if due else None
    return {"runs": run_kinds, "activity_attempts": task_kinds, "run_ids": run_ids,
            "attempt_ids": task_ids, "oldest_due_at": to_iso(oldest),
            "oldest_overdue_seconds": None if oldest is None else max(0.0, now - oldest),
            "scan_limit": limit,
            "scan_pressure": len(runs) >= limit or len(tasks) >= limit}


def overdue_counts(namespaces: list[str],
                   now: float) -> Program[dict[tuple[str, str], tuple[int, float]]]:
    """For /metrics: (namespace, "runs" or "activity_attempts") -> (how many
    deadlines have passed unenforced, when the oldest fell due), for each of
    `namespaces` that has any. The same rows as `overdue`, counted, not read:
    per namespace, a range of its deadline index (a closed row's deadline is
    NULL, so the range holds only overdue open rows), not a scan of the table."""
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for namespace in namespaces:
        for of, table in (("runs", "runs"), ("activity_attempts", "activity_tasks")):
            row = yield q1(f"SELECT count(*) AS n, min(deadline_at) AS oldest FROM {table} "
                           f"WHERE namespace = ? AND deadline_at <= ? AND status IN {OPEN_SQL}",
                           namespace, now)
            if row is not None and int(row["n"]):
                out[(namespace, of)] = (int(row["n"]), float(row["oldest"]))
    return out


def enforce_attempts(tx: Tx, namespace: str, task_ids: list[str],
                     now: float) -> Program[list[dict[str, Any]]]:
    """Apply the passed deadline of each of these activity attempts (the
    reference's activity-timeout pass); per id: ``enforced`` (with
    ``kind`` and whether a next attempt was scheduled, ``has_retry``) or
    ``skipped`` with the reason (``not_expired``: none of its deadlines has
    passed; ``not_found``: no open attempt has this id here)."""
    if not task_ids:
        return []
    rows = yield q(
        f"SELECT {TASK_COLUMNS} FROM activity_tasks WHERE namespace = ? AND status IN "
        f"{OPEN_SQL} AND task_id IN ({placeholders(len(task_ids))}) ORDER BY task_id{tx.lock}",
        namespace, *task_ids)
    found = {str(r["task_id"]): r for r in rows}
    outcomes: dict[str, dict[str, Any]] = {}
    for task in sorted(found.values(), key=lambda t: str(t["run_id"])):  # lock order: claims
        kind = yield from time_out_task(tx, task, now)
        if kind is None:
            continue
        after = yield q1("SELECT status FROM activity_tasks WHERE task_id = ?", task["task_id"])
        outcomes[str(task["task_id"])] = {
            "outcome": "enforced", "kind": kind,
            "has_retry": after is not None and after["status"] == "pending"}
    return [{"execution_id": task_id, **outcomes.get(task_id, {
        "outcome": "skipped", "reason": "not_expired" if task_id in found else "not_found"})}
        for task_id in task_ids]


class WatchPass(NamedTuple):
    """What one watchdog pass did: the instant it enforced at, counts by kind,
    and when something is next due (a deadline, a lease expiry)."""

    now: float
    counts: dict[str, int]
    next_at: float | None
    lease_at: float | None


def watchdog_pass(tx: Tx, namespace: str, clock: Callable[[], float],
                  limit: int = 500) -> Program[WatchPass]:
    """Enforce what expired, then read when something is next due: one transaction.

    The instant is read from `clock` when the transaction runs, not when the
    watchdog queued it. Why (issue 26, docs/benchmarks.md "Deadline
    lateness"): the watchdog's transactions wait behind the worker's others
    (a group commit, its claims); a deadline that passed during that wait was
    left for the next pass, one more round trip later, and the time it was
    recorded at was already stale when it was written. Reading the next
    deadline in the same transaction saves the pass its second wait; it
    counts a retry from this instant, since the caller pokes its claim loops
    right after (`next_deadline`'s `since`).
    """
    now = clock()
    counts = yield from enforce_expired(tx, namespace, now, limit=limit)
    next_at, lease_at = yield from next_deadline(namespace, now, now)
    return WatchPass(now, counts, next_at, lease_at)
