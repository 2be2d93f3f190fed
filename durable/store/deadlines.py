"""The watchdog's transactions: when is the next deadline, and enforce what expired.

Enforcement is idempotent and safe on many workers at once (claims skip rows
another enforcer holds). Storage is the source of truth: a run past its
deadline is timed out (or its cleanup expires) here, whichever worker or
commit gets to it first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ..driver import Program, Tx, q, q1
from ..failure import Failure
from .activities import time_out_task
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
