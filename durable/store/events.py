"""A run's history: events numbered by the run's own counter, and failures.

Event data are stored as compact JSON text. Most events are built as dicts
and encoded here (``default=str``: whatever the engine put in them is kept
readable); a local step's two events, the commonest by far, are encoded by
`local_step_events`, once for both the general commit path and a dialect's
one-statement fast path, so the two store the same text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .. import _json
from ..driver import Program, Tx, ex, many
from ..failure import Failure
from .returning import update_one_returning
from .writes import RecordLocalActivity

#: an event type and its data: a dict, or its JSON text when already encoded
Event = tuple[str, "dict[str, Any] | str"]


#: one history event (shared with dialects' fast paths)
EVENT_INSERT = "INSERT INTO events (run_id, seq, type, recorded_at, data) VALUES (?, ?, ?, ?, ?)"


def event_text(data: dict[str, Any] | str) -> str:
    """An event's data as stored: compact JSON (text already encoded is kept)."""
    return data if isinstance(data, str) else _json.STDLIB.dumps(data, str)


#: a string JSON writes between its quotes unchanged: printable ASCII but
#: the quote and the backslash (DEL and control characters are escaped)
_PLAIN_TEXT = re.compile(r'[ !#-\[\]-~]*')
#: a step's result text that decoding and encoding again gives back byte
#: for byte: null, true, false, an integer of at most 18 digits written
#: canonically, a string of `_PLAIN_TEXT`
_AS_WRITTEN = re.compile(r'null|true|false|0|-?[1-9][0-9]{0,17}|"[ !#-\[\]-~]*"')


def local_step_events(w: RecordLocalActivity) -> tuple[Event, Event]:
    """``ActivityScheduled`` and ``ActivityCompleted`` of a successful local step.

    The data hold strings, an int, a bool and a value read back from the
    step's JSON result, so they are plain JSON and the fast codec (when
    installed) writes them as the standard library would.
    """
    result = "null" if w.result is None else w.result
    if (type(w.attempts) is int and _PLAIN_TEXT.fullmatch(w.op_id)
            and _PLAIN_TEXT.fullmatch(w.name) and _AS_WRITTEN.fullmatch(result)):
        # Text JSON writes as is (see _AS_WRITTEN): the same bytes as below,
        # without a decode and two encodes on the database thread (issue 26).
        head = f'{{"op_id":"{w.op_id}","activity_type":"{w.name}","local":true'
        return (("ActivityScheduled", head + "}"),
                ("ActivityCompleted", f'{head},"attempt":{w.attempts},"result":{result}}}'))
    scheduled = {"op_id": w.op_id, "activity_type": w.name, "local": True}
    completed = {**scheduled, "attempt": w.attempts,
                 "result": None if w.result is None else _json.loads(w.result)}
    return (
        ("ActivityScheduled", _json.dumps(scheduled, _json.payload_default)),
        ("ActivityCompleted", _json.dumps(completed, _json.payload_default)),
    )


def append_events(tx: Tx, run_id: str, events: Iterable[Event], now: float) -> Program[None]:
    """Append history events to a run (numbered by the run's event counter).

    Several runs' events at once: `durable.store.fastpath.append_events_of_runs`.
    """
    events = list(events)
    if not events:
        return None
    row = yield from update_one_returning(
        tx.dialect, "runs", "event_seq = event_seq + ?", (len(events),), "run_id = ?",
        (run_id,), "event_seq", key="run_id", value=run_id)
    if row is None:
        return None
    yield from insert_events(run_id, int(row["event_seq"]), events, now)
    return None


def insert_events(run_id: str, last: int, events: list[Event], now: float) -> Program[None]:
    """Insert a run's `events`, the last numbered `last`: the run's event
    counter was bumped by their count, and read back, by the caller (with
    other columns of the run in the same UPDATE, as a close does)."""
    first = last - len(events) + 1
    yield many(
        EVENT_INSERT,
        [(run_id, first + i, etype, now, event_text(data))
         for i, (etype, data) in enumerate(events)],
    )
    return None


def record_failure(run_id: str, failure: Failure, now: float) -> Program[None]:
    """Keep a failure for describe()'s ``failures`` list."""
    yield ex(
        "INSERT INTO failures (run_id, recorded_at, data) VALUES (?, ?, ?)",
        run_id, now, _json.STDLIB.dumps(failure.to_dict(), str),
    )
    return None
