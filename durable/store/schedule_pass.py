"""The scheduler's pass: fire what is due in a namespace, one batch a transaction.

A pass takes at most `limit` due schedules (their rows locked; rows another
transaction holds are skipped, so workers share a busy namespace instead of
queueing on it) and fires them as `durable.store.schedules.Firing` fires one
schedule, with the same policies, but writes the batch's fires together. A
pass in which every fire starts its run costs the same statements however
many schedules fire in it:

1. the due select (it also reads when the namespace is next due);
2. one read of the batch's open and waiting fires, of the fire times about
   to fire (fired already?) and of whether their runs' workflow ids are taken
   (where the dialect has `lateral_arrays`, PostgreSQL, one text for every
   batch whose plan probes the keys whatever the planner's statistics);
3. one multi-row insert per table for the started runs (instance, run, first
   event) and the fire records: while the pass runs, these inserts are held
   back (`Held`) and sent together;
4. every TRIM_EVERY fires of a schedule, its record's trim: one statement or
   two for all the batch's schedules at once;
5. one UPDATE of the batch's schedules: what changed (next fire time,
   counters); row by row by key in one ``executemany`` where that is one
   round trip (`Dialect.pipelined_many`: SQLite, PostgreSQL), else each
   column a ``CASE`` over the schedule ids (MariaDB).

Only those four inserts are held back. Any other statement (a read; an
update or a delete: a policy that terminates or cancels a run, a waiting
fire that starts) first sends what is held, so that it sees every write made
before it: each policy behaves exactly as when every statement goes out at
once. Inserts into different tables commute (no foreign key, no trigger),
and the inserts into one table keep their order.

Exactly once, as before: a fire and its run are written in one transaction,
a fire time is recorded once per schedule (the fires' primary key), and the
run's id is derived from the schedule id and the fire time. A pass records
at most about `limit` fires (a schedule catching up records up to
`durable.store.schedules.FIRES_PER_TX` of its own), so it never holds its
rows for long; what it left is due at once, in the next pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..driver import Program, Row, Stmt, Tx, ex, many, placeholders, q, q1
from ..schedules import fire_workflow_id
from .events import EVENT_INSERT
from .records import dumps
from .runs import RUN_INSERT, WORKFLOW_INSERT
from .schedules import (
    FIRE_COLUMNS,
    FIRE_INSERT,
    RECENT_KEPT,
    SCHEDULE_COLUMNS,
    Firing,
    ScheduleRecord,
    schedule_from_row,
)

T = TypeVar("T")

#: the inserts a pass holds back and sends together (see the module docstring)
HELD = frozenset({WORKFLOW_INSERT, RUN_INSERT, EVENT_INSERT, FIRE_INSERT})
#: the schedules' columns a pass may change (the rest: only control changes them)
_KEYS = frozenset({"namespace", "schedule_id", "created_at", "updated_at"})
_SAVED = tuple(c for c in SCHEDULE_COLUMNS.split(", ") if c not in _KEYS)


@dataclass
class FirePass:
    """What one scheduler transaction did, and when the namespace is next due."""

    fires: list[dict[str, Any]] = field(default_factory=list)
    missed: int = 0
    next_due: float | None = None
    #: a limit cut the pass short: more is due now
    more: bool = False
    #: some schedule has fires waiting for a run to close
    waiting: bool = False


class Held:
    """Inserts held back in one transaction and sent together, one statement per
    table (``executemany``: a driver may send it as a multi-row INSERT)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Sequence[Any]]] = {}

    def run(self, program: Program[T]) -> Program[T]:
        """`program`, its `HELD` inserts held back (each counts one row); any
        other statement first sends what is held."""
        value: Any = None
        try:
            while True:
                stmt: Stmt = program.send(value)
                if stmt.mode == "exec" and stmt.sql in HELD:
                    self.rows.setdefault(stmt.sql, []).append(stmt.params)
                    value = 1
                else:
                    yield from self.send()
                    value = yield stmt
        except StopIteration as done:
            result: T = done.value
            return result

    def send(self) -> Program[None]:
        """Send what is held: one statement per table, in the order first held."""
        rows, self.rows = self.rows, {}
        for sql, params in rows.items():
            yield many(sql, params) if len(params) > 1 else ex(sql, *params[0])
        return None


def fire_due(tx: Tx, namespace: str, now: float, limit: int,
             check_waiting: bool) -> Program[FirePass]:
    """Fire what is due in the namespace (a batch of at most `limit` schedules
    and about as many fires) and, with `check_waiting`, start waiting fires
    whose blocking runs have closed; see the module docstring."""
    held = Held()
    result = yield from held.run(_fire_due(tx, namespace, now, limit, check_waiting))
    yield from held.send()
    return result


def _fire_due(tx: Tx, namespace: str, now: float, limit: int,
              check_waiting: bool) -> Program[FirePass]:
    result = FirePass()
    # the same statement reads what the pass's end needs to say when the namespace
    # is next due: the earliest due time after now, how many are due now (more
    # than this pass takes: another worker holds some, or the limit cut), and
    # whether fires wait (one round trip less a pass than asking at the end)
    rows = yield q(f"SELECT {SCHEDULE_COLUMNS}, (SELECT MIN(due_at) FROM schedules WHERE "
                   "namespace = ? AND due_at > ?) AS later_due, (SELECT COUNT(*) FROM "
                   "schedules WHERE namespace = ? AND due_at <= ?) AS due_now, (SELECT "
                   "MAX(buffered) FROM schedules WHERE namespace = ?) AS any_waiting "
                   "FROM schedules WHERE namespace = ? AND due_at <= ? ORDER BY due_at "
                   "LIMIT ?" + tx.skip_locked,
                   namespace, now, namespace, now, namespace, namespace, now, limit)
    due = [Firing(tx, schedule_from_row(row), now) for row in rows]
    yield from load_all(namespace, due)
    firings: list[Firing] = []
    fired = 0
    for firing in due:
        if fired >= limit:  # a bounded transaction: the rest is due at once, next pass
            result.more = True
            break
        yield from firing.start_waiting()
        yield from firing.advance()
        fired += len(firing.fires)
        firings.append(firing)
    if check_waiting:
        seen = {f.s.schedule_id for f in due}
        waiting = yield q(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE namespace = ? AND "
                          "buffered > 0 ORDER BY schedule_id LIMIT ?" + tx.skip_locked,
                          namespace, limit)
        for row in waiting:
            if row["schedule_id"] in seen:
                continue
            firing = Firing(tx, schedule_from_row(row), now)
            yield from firing.load()
            yield from firing.start_waiting()
            if firing.fires or firing.s.buffered != int(row["buffered"]):
                firings.append(firing)
    yield from trim_all(namespace, firings, tx.dialect.max_params)
    yield from save_all(namespace, firings, now, tx.dialect.max_params)
    for firing in firings:
        result.fires.extend(dict(f, schedule_id=firing.s.schedule_id) for f in firing.fires)
        result.missed += firing.missed
        result.more = result.more or firing.more
    result.more = result.more or len(rows) >= limit
    if not rows:  # nothing was due: ask
        result.next_due, result.waiting = yield from next_due(namespace)
        return result
    first = rows[0]
    dues = [float(first["later_due"])] if first["later_due"] is not None else []
    dues += [f.s.due_at for f in firings if f.s.due_at is not None]
    if int(first["due_now"]) > len(rows) or result.more:
        dues.append(now)  # due now, and not this pass's: another worker's or the next pass's
    result.next_due = min(dues) if dues else None
    result.waiting = bool(first["any_waiting"]) or any(f.s.buffered for f in firings)
    return result


def next_due(namespace: str) -> Program[tuple[float | None, bool]]:
    """When the namespace's next fire is due (None: no schedule will fire), and
    whether some schedule has fires waiting for a run to close."""
    row = yield q1("SELECT (SELECT MIN(due_at) FROM schedules WHERE namespace = ?) AS due, "
                   "(SELECT MAX(buffered) FROM schedules WHERE namespace = ?) AS waiting",
                   namespace, namespace)
    due = None if row is None or row["due"] is None else float(row["due"])
    return due, bool(row is not None and row["waiting"])


def load_all(namespace: str, firings: list[Firing]) -> Program[None]:
    """`Firing.load` for every schedule of the batch, in one statement: their open
    and waiting fires, the record of each one's next fire time (fired already?),
    and which of those fires' workflow ids are taken (rows with a NULL ``seq``)."""
    if not firings:
        return None
    ids = [f.s.schedule_id for f in firings]
    nexts = {f.s.schedule_id: f.s.next_fire_at for f in firings if f.s.next_fire_at is not None}
    times = sorted(set(nexts.values()))
    wids = [fire_workflow_id(sid, at) for sid, at in nexts.items()]
    if firings[0].tx.dialect.lateral_arrays:
        rows = yield q(_LOAD_LATERAL, ids, namespace, times, wids, namespace)
    else:
        rows = yield from _load_in(namespace, ids, times, wids)
    taken = {r["workflow_id"] for r in rows if r["seq"] is None}
    fires: dict[str, list[Row]] = {}
    for row in rows:
        if row["seq"] is not None:
            fires.setdefault(row["sid"], []).append(row)
    for firing in firings:
        at = firing.s.next_fire_at
        firing.take(fires.get(firing.s.schedule_id, []), at,
                    at is not None and fire_workflow_id(firing.s.schedule_id, at) in taken)
    return None


_COLUMNS = FIRE_COLUMNS.split(", ")
#: `load_all`'s read where the dialect joins array parameters LATERAL: one text
#: for every batch (prepared once), and a plan that probes the fires' and the
#: workflows' primary keys element by element (an ``IN`` list, planned without
#: statistics, as on a server whose autovacuum is off, scanned the namespace)
_LOAD_LATERAL = (
    f"SELECT f.schedule_id AS sid, {', '.join('f.' + c for c in _COLUMNS)}, "
    "w.status AS instance_status, NULL AS taken FROM unnest(CAST(? AS TEXT[])) AS b(sid) "
    "CROSS JOIN LATERAL (SELECT * FROM schedule_fires WHERE namespace = ? AND schedule_id = "
    "b.sid AND (run_open = 1 OR outcome = 'buffered' OR scheduled_at = "
    "ANY(CAST(? AS DOUBLE PRECISION[]))) OFFSET 0) AS f LEFT JOIN workflows w ON "
    "w.namespace = f.namespace AND w.workflow_id = f.workflow_id UNION ALL SELECT "
    f"{', '.join(['NULL'] * (1 + _COLUMNS.index('workflow_id')))}, x.workflow_id, "
    f"{', '.join(['NULL'] * (len(_COLUMNS) - _COLUMNS.index('workflow_id')))}, "
    "x.current_run_id FROM unnest(CAST(? AS TEXT[])) AS t(wid) CROSS JOIN LATERAL (SELECT "
    "workflow_id, current_run_id FROM workflows WHERE namespace = ? AND workflow_id = t.wid "
    "OFFSET 0) AS x")


def _load_in(namespace: str, ids: list[str], times: list[float],
             wids: list[str]) -> Program[list[Row]]:
    """`load_all`'s read with ``IN`` lists."""
    columns = _COLUMNS
    sql = (f"SELECT f.schedule_id AS sid, {', '.join('f.' + c for c in columns)}, "
           "w.status AS instance_status, NULL AS taken FROM schedule_fires f LEFT JOIN "
           "workflows w ON w.namespace = f.namespace AND w.workflow_id = f.workflow_id "
           f"WHERE f.namespace = ? AND f.schedule_id IN ({placeholders(len(ids))}) AND "
           "(f.run_open = 1 OR f.outcome = 'buffered'")
    args: list[Any] = [namespace, *ids]
    if times:  # (a fire time of another schedule of the batch matches too: ignored)
        sql += f" OR f.scheduled_at IN ({placeholders(len(times))})"
        args += times
    sql += ")"
    if wids:
        # one more row per taken id, all NULL but the workflow id and its run
        before = ", ".join(["NULL"] * (1 + columns.index("workflow_id")))
        after = ", ".join(["NULL"] * (len(columns) - columns.index("workflow_id")))
        sql += (f" UNION ALL SELECT {before}, workflow_id, {after}, current_run_id FROM "
                f"workflows WHERE namespace = ? AND workflow_id IN "
                f"({placeholders(len(wids))})")
        args += [namespace, *wids]
    rows: list[Row] = yield q(sql, *args)
    return rows


def trim_all(namespace: str, firings: list[Firing], max_params: int) -> Program[None]:
    """`Firing.finish`'s trims for every schedule of the pass that is due one: its
    fires whose run closed flagged, then its old fires deleted."""
    due = [f for f in firings if f.trim_due]
    closed = [(f.s.schedule_id, fire.workflow_id) for f in due for fire in f.closed]
    if due and due[0].tx.dialect.pipelined_many:
        # row by row by the fires' key prefix (see save_all)
        if closed:
            yield many("UPDATE schedule_fires SET run_open = 0 WHERE namespace = ? AND "
                       "schedule_id = ? AND workflow_id = ? AND run_open = 1",
                       [(namespace, sid, wid) for sid, wid in closed])
        yield many("DELETE FROM schedule_fires WHERE namespace = ? AND schedule_id = ? AND "
                   "seq <= ? AND run_open = 0 AND outcome <> 'buffered'",
                   [(namespace, f.s.schedule_id, f.s.fire_seq - RECENT_KEPT) for f in due])
        return None
    for chunk in _chunks(closed, 2, max_params - 1):
        # a started fire's workflow id names its schedule and time: the pairs match exactly
        yield ex(f"UPDATE schedule_fires SET run_open = 0 WHERE namespace = ? AND run_open = 1 "
                 f"AND schedule_id IN ({placeholders(len(chunk))}) AND workflow_id IN "
                 f"({placeholders(len(chunk))})",
                 namespace, *(sid for sid, _ in chunk), *(wid for _, wid in chunk))
    for part in _chunks(due, 3, max_params - 1):
        yield ex("DELETE FROM schedule_fires WHERE namespace = ? AND run_open = 0 AND "
                 f"outcome <> 'buffered' AND schedule_id IN ({placeholders(len(part))}) AND "
                 f"seq <= CASE schedule_id {' '.join(['WHEN ? THEN ?'] * len(part))} "
                 "ELSE seq - 1 END",  # (never taken: every id has its WHEN)
                 namespace, *(f.s.schedule_id for f in part),
                 *(v for f in part for v in (f.s.schedule_id, f.s.fire_seq - RECENT_KEPT)))
    return None


def save_all(namespace: str, firings: list[Firing], now: float,
             max_params: int) -> Program[None]:
    """Save the pass's schedules in one UPDATE (more only past `max_params`):
    each column some schedule changed is a ``CASE`` over the ids that changed it."""
    changes = [(f, [c for c in _SAVED if _changed(f.before[c], getattr(f.s, c))])
               for f in firings]
    columns = [c for c in _SAVED if any(c in changed for _, changed in changes)]
    if firings and firings[0].tx.dialect.pipelined_many:
        # row by row by primary key (one executemany): each row a probe of the
        # key, where the CASEs cost the batch's size for each row and column
        assigned = ", ".join(f"{column} = ?" for column in [*columns, "updated_at"])
        yield many(f"UPDATE schedules SET {assigned} WHERE namespace = ? AND schedule_id = ?",
                   [(*(_stored(f.s, c) for c in columns), now, namespace, f.s.schedule_id)
                    for f in firings])
        return None
    for part in _chunks(changes, 1 + 2 * len(columns), max_params - 2):
        sets, args = [], []
        for column in columns:
            whens = [(f.s.schedule_id, _stored(f.s, column)) for f, changed in part
                     if column in changed]
            if whens:
                sets.append(f"{column} = CASE schedule_id "
                            f"{' '.join(['WHEN ? THEN ?'] * len(whens))} ELSE {column} END")
                args += [v for when in whens for v in when]
        yield ex(f"UPDATE schedules SET {', '.join([*sets, 'updated_at = ?'])} WHERE "
                 f"namespace = ? AND schedule_id IN ({placeholders(len(part))})",
                 *args, now, namespace, *(f.s.schedule_id for f, _ in part))
    return None


def _changed(before: Any, after: Any) -> bool:
    """Whether a field changed (the same object did not: a spec or options
    compared field by field only when replaced)."""
    return before is not after and before != after


def _stored(s: ScheduleRecord, column: str) -> Any:
    """A schedule's field as its column stores it."""
    value = getattr(s, column)
    if column == "start_options":
        return dumps(value)
    if column == "spec":
        return dumps(value.to_dict())
    if column == "paused":
        return int(value)
    return value


def _chunks(items: list[T], per_item: int, room: int) -> Iterator[list[T]]:
    """`items` in slices whose statements bind at most `room` parameters."""
    size = max(1, room // max(1, per_item))
    for start in range(0, len(items), size):
        yield items[start:start + size]
