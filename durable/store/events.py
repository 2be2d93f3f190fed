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


def _plain(text: str) -> bool:
    """A string JSON writes between its quotes unchanged: printable ASCII but
    the quote and the backslash (DEL and control characters are escaped).
    String methods, not a regular expression: three matches a step on the
    database thread (issue 26)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _as_written(result: str) -> bool:
    """A step's result text that decoding and encoding again gives back byte
    for byte: null, true, false, an integer of at most 18 digits written
    canonically, a `_plain` string in quotes."""
    if result.isdigit():  # (also non-ASCII digits: isascii)
        return result.isascii() and len(result) <= 18 and (result[0] != "0" or result == "0")
    first = result[:1]
    if first == "-":
        digits = result[1:]
        return (digits.isdigit() and digits.isascii() and len(digits) <= 18
                and digits[0] != "0")
    if first == '"':
        return len(result) >= 2 and result[-1] == '"' and _plain(result[1:-1])
    return result in ("null", "true", "false")


def local_step_events(w: RecordLocalActivity) -> tuple[Event, Event]:
    """``ActivityScheduled`` and ``ActivityCompleted`` of a successful local step.

    The data hold strings, an int, a bool and a value read back from the
    step's JSON result, so they are plain JSON and the fast codec (when
    installed) writes them as the standard library would.
    """
    result = "null" if w.result is None else w.result
    if (type(w.attempts) is int and _plain(w.op_id) and _plain(w.name)
            and _as_written(result)):
        # Text JSON writes as is (see _as_written): the same bytes as below,
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
