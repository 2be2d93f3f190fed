"""A run's history: events numbered by the run's own counter, and failures."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..driver import Program, ex, many, q1
from ..failure import Failure

Event = tuple[str, dict[str, Any]]


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
        "INSERT INTO events (run_id, seq, type, recorded_at, data) VALUES (?, ?, ?, ?, ?)",
        [
            (run_id, first + i, etype, now, json.dumps(data, default=str))
            for i, (etype, data) in enumerate(events)
        ],
    )
    return None


def record_failure(run_id: str, failure: Failure, now: float) -> Program[None]:
    """Keep a failure for describe()'s ``failures`` list."""
    yield ex(
        "INSERT INTO failures (run_id, recorded_at, data) VALUES (?, ?, ?)",
        run_id, now, json.dumps(failure.to_dict(), default=str),
    )
    return None
