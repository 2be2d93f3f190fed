"""A run's history: events numbered by the run's own counter, and failures.

Event data are stored as compact JSON text. Most events are built as dicts
and encoded here (``default=str``: whatever the engine put in them is kept
readable); a local step's two events, the commonest by far, are encoded by
`local_step_events`, once for both the general commit path and a dialect's
one-statement fast path, so the two store the same text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import _json
from ..driver import Program, Stmt, Tx, ex, many, q1
from ..failure import Failure
from .writes import RecordLocalActivity

#: an event type and its data: a dict, or its JSON text when already encoded
Event = tuple[str, "dict[str, Any] | str"]


#: one history event (shared with dialects' fast paths)
EVENT_INSERT = "INSERT INTO events (run_id, seq, type, recorded_at, data) VALUES (?, ?, ?, ?, ?)"


def event_text(data: dict[str, Any] | str) -> str:
    """An event's data as stored: compact JSON (text already encoded is kept)."""
    return data if isinstance(data, str) else _json.STDLIB.dumps(data, str)


def local_step_events(w: RecordLocalActivity) -> tuple[Event, Event]:
    """``ActivityScheduled`` and ``ActivityCompleted`` of a successful local step.

    The data hold strings, an int, a bool and a value read back from the
    step's JSON result, so they are plain JSON and the fast codec (when
    installed) writes them as the standard library would.
    """
    scheduled = {"op_id": w.op_id, "activity_type": w.name, "local": True}
    completed = {**scheduled, "attempt": w.attempts,
                 "result": None if w.result is None else _json.loads(w.result)}
    return (
        ("ActivityScheduled", _json.dumps(scheduled, _json.payload_default)),
        ("ActivityCompleted", _json.dumps(completed, _json.payload_default)),
    )


def append_events(run_id: str, events: Iterable[Event], now: float) -> Program[None]:
    """Append history events to a run (numbered by the run's event counter)."""
    events = list(events)
    if not events:
        return None
    row = yield q1(
        "UPDATE runs SET event_seq = event_seq + ? WHERE run_id = ? RETURNING event_seq",
        len(events), run_id,
    )
    if row is None:
        return None
    last = int(row["event_seq"])
    first = last - len(events) + 1
    yield many(
        EVENT_INSERT,
        [(run_id, first + i, etype, now, event_text(data))
         for i, (etype, data) in enumerate(events)],
    )
    return None


def append_events_of_runs(tx: Tx, items: list[tuple[str, Event]], now: float
                          ) -> Program[None]:
    """Append one event to each of several runs (a run may come more than once:
    its events keep their order), locking the runs in run_id order.

    With writable CTEs (PostgreSQL) ONE statement bumps every run's counter and
    inserts every event; elsewhere `append_events` run by run. Why: a claim of
    k activity attempts appended k events in 2k round trips.
    """
    items = sorted(items, key=lambda item: item[0])  # lock order: see claims
    if not items:
        return None
    if not tx.dialect.writable_cte:
        for run_id, event in items:
            yield from append_events(run_id, [event], now)
        return None
    yield Stmt(
        "WITH v AS MATERIALIZED (SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]), "
        "CAST(? AS TEXT[])) WITH ORDINALITY AS v(run_id, type, data, k)), "
        "c AS (SELECT run_id, count(*) AS n FROM v GROUP BY run_id), "
        "locked AS MATERIALIZED (SELECT run_id FROM runs WHERE run_id IN (SELECT run_id FROM c) "
        "ORDER BY run_id FOR UPDATE), "
        "bump AS (UPDATE runs SET event_seq = runs.event_seq + c.n FROM c "
        "WHERE runs.run_id = c.run_id AND runs.run_id IN (SELECT run_id FROM locked) "
        "RETURNING runs.run_id, runs.event_seq, c.n) "
        "INSERT INTO events (run_id, seq, type, recorded_at, data) "
        "SELECT v.run_id, bump.event_seq - bump.n "
        "+ row_number() OVER (PARTITION BY v.run_id ORDER BY v.k), v.type, "
        "CAST(? AS DOUBLE PRECISION), v.data FROM v JOIN bump ON bump.run_id = v.run_id",
        ([run_id for run_id, _ in items], [etype for _, (etype, _) in items],
         [event_text(data) for _, (_, data) in items], now),
        "exec",
    )
    return None


def record_failure(run_id: str, failure: Failure, now: float) -> Program[None]:
    """Keep a failure for describe()'s ``failures`` list."""
    yield ex(
        "INSERT INTO failures (run_id, recorded_at, data) VALUES (?, ?, ?)",
        run_id, now, _json.STDLIB.dumps(failure.to_dict(), str),
    )
    return None
