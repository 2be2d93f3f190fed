"""Retention: deleting closed runs past their namespace's retention, and what they own.

A run owns the rows of `RUN_TABLES` (its history, ops, activity attempts,
inbox, requests, failures); its instance's row goes with the run that is its
current one. Deleting is done in small transactions so that no lock is held
for long: `prune_batch` deletes a group of runs whose rows together stay
under a budget; a run alone over the budget first loses its rows table by
table, `CHUNK_ROWS` at a time (`prune_chunk`), then the run itself goes in a
batch. Rows are counted per table, in the namespace's settings row, in the
same transactions (what `/metrics` exports).

Only closed runs are ever deleted (`closed_at` set, status not open), and
only those closed before the cutoff; a run that another worker is deleting
(its row locked) is passed over (PostgreSQL: SKIP LOCKED).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from ..clock import to_iso
from ..driver import Program, Tx, ex, placeholders, q, q1
from ..wakes import Wake
from .records import OPEN_STATUSES, dumps, loads
from .schema import table_names

#: every table whose rows belong to one run (by ``run_id``), with a key that
#: orders a run's rows (for deleting a large run a chunk at a time)
RUN_TABLES: tuple[tuple[str, str], ...] = (
    ("events", "seq"),
    ("ops", "op_id"),
    ("activity_tasks", "task_id"),
    ("inbox", "seq"),
    ("requests", "request_id"),
    ("request_senders", "request_id"),
    ("failures", "id"),
)
#: rows one transaction deletes, about (a run's events and ops estimated from
#: its event counter)
BATCH_ROWS = 5000
#: runs one transaction deletes at most
BATCH_RUNS = 200
#: rows of one table a chunk of a large run deletes
CHUNK_ROWS = 2000

_NOT_OPEN = f"status NOT IN ({placeholders(len(OPEN_STATUSES))})"


@dataclass
class Pruned:
    """What one transaction deleted: the runs, and rows by table."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    #: a run too large for one batch was cut down instead (its run id)
    chunked: str | None = None

    def add(self, table: str, n: int) -> None:
        if n:
            self.rows[table] = self.rows.get(table, 0) + n


def expired(namespace: str, cutoff: float, limit: int) -> Program[list[dict[str, Any]]]:
    """The oldest closed runs closed before `cutoff` (what a pass would delete)."""
    rows = yield q(
        "SELECT run_id, workflow_id, workflow_type, status, closed_at, event_seq FROM runs "
        f"WHERE namespace = ? AND closed_at < ? AND {_NOT_OPEN} ORDER BY closed_at LIMIT ?",
        namespace, cutoff, *OPEN_STATUSES, limit)
    return [_run_view(row) for row in rows]


def count_expired(namespace: str, cutoff: float) -> Program[int]:
    """How many runs closed before `cutoff`."""
    row = yield q1(f"SELECT COUNT(*) AS n FROM runs WHERE namespace = ? AND closed_at < ? AND "
                   f"{_NOT_OPEN}", namespace, cutoff, *OPEN_STATUSES)
    return int(row["n"]) if row is not None else 0


def _run_view(row: Any) -> dict[str, Any]:
    return {"run_id": row["run_id"], "workflow_id": row["workflow_id"],
            "workflow_type": row["workflow_type"], "status": row["status"],
            "closed_at": to_iso(row["closed_at"]), "history_events": int(row["event_seq"])}


def prune_batch(tx: Tx, namespace: str, cutoff: float, now: float) -> Program[Pruned]:
    """Delete the next group of expired runs (rows within `BATCH_ROWS`), or cut a
    single large one down by a chunk; what was deleted (nothing: none left)."""
    candidates = yield q(
        "SELECT run_id, workflow_id, workflow_type, status, closed_at, event_seq FROM runs "
        f"WHERE namespace = ? AND closed_at < ? AND {_NOT_OPEN} ORDER BY closed_at LIMIT ?"
        + tx.skip_locked, namespace, cutoff, *OPEN_STATUSES, BATCH_RUNS)
    pruned = Pruned()
    group: list[Any] = []
    budget = 0
    for row in candidates:
        weight = 2 * int(row["event_seq"]) + 1  # its events, about as many ops, its row
        if group and budget + weight > BATCH_ROWS:
            break
        group.append(row)
        budget += weight
    if not group:
        return pruned
    if budget > BATCH_ROWS:  # one run, too large for one transaction: a chunk of it
        run_id = group[0]["run_id"]
        pruned.chunked = run_id
        for table, key in RUN_TABLES:
            n = yield from _delete_chunk(table, key, run_id)
            pruned.add(table, n)
            if n >= CHUNK_ROWS:
                break
        else:
            yield from _delete_runs(tx, namespace, group, pruned)
        yield from _count(tx, namespace, pruned, now)
        return pruned
    yield from _delete_runs(tx, namespace, group, pruned)
    yield from _count(tx, namespace, pruned, now)
    return pruned


def _delete_chunk(table: str, key: str, run_id: str) -> Program[int]:
    """Delete up to CHUNK_ROWS of the run's rows in `table`, in key order."""
    bound = yield q1(f"SELECT {key} AS k FROM {table} WHERE run_id = ? ORDER BY {key} "
                     "LIMIT 1 OFFSET ?", run_id, CHUNK_ROWS)
    if bound is None:
        n: int = yield ex(f"DELETE FROM {table} WHERE run_id = ?", run_id)
    else:
        n = yield ex(f"DELETE FROM {table} WHERE run_id = ? AND {key} < ?", run_id, bound["k"])
    return n


def _delete_runs(tx: Tx, namespace: str, group: list[Any], pruned: Pruned) -> Program[None]:
    ids = [row["run_id"] for row in group]
    marks = placeholders(len(ids))
    for table, _ in RUN_TABLES:
        n = yield ex(f"DELETE FROM {table} WHERE run_id IN ({marks})", *ids)
        pruned.add(table, n)
    # an instance goes with its current run (older runs of a continued chain
    # leave it alone); the instance's row is checked closed in the same statement
    n = yield ex(f"DELETE FROM workflows WHERE namespace = ? AND current_run_id IN ({marks}) "
                 f"AND {_NOT_OPEN}", namespace, *ids, *OPEN_STATUSES)
    pruned.add("workflows", n)
    n = yield ex(f"DELETE FROM runs WHERE run_id IN ({marks}) AND {_NOT_OPEN}", *ids,
                 *OPEN_STATUSES)
    pruned.add("runs", n)
    pruned.runs.extend(_run_view(row) for row in group)
    return None


def _count(tx: Tx, namespace: str, pruned: Pruned, now: float) -> Program[None]:
    """Add what was deleted to the namespace's counters (in the same transaction)."""
    if not pruned.rows:
        return None
    row = yield q1("SELECT pruned FROM namespace_settings WHERE namespace = ?" + tx.lock,
                   namespace)
    if row is None:
        yield ex("INSERT INTO namespace_settings (namespace, retention_seconds, pruned, "
                 "last_pruned_at, updated_at) VALUES (?, NULL, ?, ?, ?)",
                 namespace, dumps(pruned.rows), now, now)
        return None
    totals: dict[str, int] = loads(row["pruned"]) or {}
    for table, n in pruned.rows.items():
        totals[table] = totals.get(table, 0) + n
    yield ex("UPDATE namespace_settings SET pruned = ?, last_pruned_at = ? WHERE namespace = ?",
             dumps(totals), now, namespace)
    return None


def set_retention(tx: Tx, namespace: str, seconds: float | None, now: float) -> Program[None]:
    """Set (None: clear) how long the namespace keeps closed runs."""
    n = yield ex("UPDATE namespace_settings SET retention_seconds = ?, updated_at = ? "
                 "WHERE namespace = ?", seconds, now, namespace)
    if not n:
        yield ex("INSERT INTO namespace_settings (namespace, retention_seconds, pruned, "
                 "last_pruned_at, updated_at) VALUES (?, ?, ?, NULL, ?)",
                 namespace, seconds, dumps({}), now)
    tx.wake(Wake.retention(namespace))
    return None


def settings(namespace: str) -> Program[dict[str, Any]]:
    """The namespace's retention and what retention deleted there so far."""
    row = yield q1("SELECT retention_seconds, pruned, last_pruned_at FROM namespace_settings "
                   "WHERE namespace = ?", namespace)
    if row is None:
        return {"namespace": namespace, "retention_seconds": None, "pruned": {},
                "last_pruned_at": None}
    return {"namespace": namespace, "retention_seconds": row["retention_seconds"],
            "pruned": loads(row["pruned"]) or {}, "last_pruned_at": to_iso(row["last_pruned_at"])}


def _fire_of(workflow_id: str) -> tuple[str, float] | None:
    """The schedule id and fire time a schedule's run id names
    (`durable.schedules.fire_workflow_id`: ``{schedule_id}-20261024T160000Z``, a
    trigger's with milliseconds), or None when it is not shaped so."""
    schedule_id, _, stamp = workflow_id.rpartition("-")
    if not schedule_id or not stamp.endswith("Z"):
        return None
    whole, _, millis = stamp[:-1].partition(".")
    try:
        when = datetime.datetime.strptime(whole, "%Y%m%dT%H%M%S").replace(tzinfo=datetime.UTC)
        fraction = int(millis) / 1000 if millis else 0.0
    except ValueError:
        return None
    return schedule_id, when.timestamp() + fraction


def missing_note(namespace: str, workflow_id: str) -> Program[str | None]:
    """Why the namespace may have no workflow `workflow_id` though it had one:
    retention deleted it. Certain for a run a schedule started (its fire is
    still recorded, its run gone); for any other id, what retention deleted here
    and when, so that the caller can tell a deleted run from a wrong id. None
    when retention never deleted anything in the namespace."""
    row = yield q1("SELECT retention_seconds, pruned, last_pruned_at FROM namespace_settings "
                   "WHERE namespace = ?", namespace)
    if row is None or row["last_pruned_at"] is None:
        return None
    retention = row["retention_seconds"]
    runs = (loads(row["pruned"]) or {}).get("runs", 0)
    policy = (f"this namespace deletes runs closed more than {_duration(retention)} ago"
              if retention else "a prune or a worker's retention deleted closed runs here")
    last = f"{policy}; last pass at {to_iso(row['last_pruned_at'])}, {runs} runs deleted so far"
    fire = _fire_of(workflow_id)
    if fire is not None:
        found = yield q1("SELECT scheduled_at FROM schedule_fires WHERE namespace = ? AND "
                         "schedule_id = ? AND scheduled_at = ? AND workflow_id = ?",
                         namespace, fire[0], fire[1], workflow_id)
        if found is not None:
            return (f"schedule {fire[0]!r} started it (its fire at "
                    f"{to_iso(found['scheduled_at'])}) and retention has since deleted it "
                    f"with its history ({last})")
    return (f"if it existed, retention may have deleted it with its history once it closed "
            f"({last}); otherwise check the id")


def _duration(seconds: float) -> str:
    """`seconds` as a retention reads: ``30d``, ``12h``, ``90s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def vacuum(tx: Tx) -> Program[None]:
    """Make the space of deleted and updated rows reusable where the database
    needs to be told (the dialect's `vacuum`, over every table: runs, their
    rows and schedules all churn; run outside a transaction)."""
    statement = tx.dialect.vacuum
    if statement:
        yield ex(statement.format(tables=", ".join(table_names())))
    return None
