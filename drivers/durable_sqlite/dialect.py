"""SQLite's dialect: the base `Dialect`, plus a short path for local steps.

A step of a workflow is, most of the time, one successful local activity.
The general commit path reads the run's row (and parses it) to fence it, then
inserts the op, bumps the run's event counter and inserts the events: four
statements and ~100 µs of Python per step inside the transaction. Here the
fence and the event counter are one ``UPDATE ... RETURNING`` (SQLite 3.35 and
later), followed by one ``executemany`` for the ops and one for the events,
whatever the number of steps in the batch. It stores exactly the rows the
general path stores (the same statements and row builders); when the fence
matches no row (a stale epoch, a closed run, a passed deadline), nothing has
been written and the general path runs in the same transaction to give the
precise outcome, enforcing the deadline as it does.
"""

from __future__ import annotations

import sqlite3

from durable.driver import Dialect, Program, Stmt, many, placeholders
from durable.store.commit import LOCAL_OP_INSERT, local_op_row
from durable.store.events import EVENT_INSERT, event_text, local_step_events
from durable.store.records import OPEN_STATUSES, CommitResult, OpKind, OpRecord, OpStatus
from durable.store.writes import RecordLocalActivity, RunWrites

#: ``RETURNING`` arrived in SQLite 3.35.0 (2021-03)
HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)

_FENCE = (
    "UPDATE runs SET event_seq = event_seq + ? WHERE run_id = ? AND epoch = ? "
    f"AND status IN ({placeholders(len(OPEN_STATUSES))}) "
    "AND (deadline_at IS NULL OR deadline_at > ?) RETURNING event_seq"
)


class SQLiteDialect(Dialect):
    """The base dialect (SQLite's defaults) with the local-steps fast path."""

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult | None] | None:
        # Several statements: never `autocommit`, whatever the caller allows.
        return local_steps(batch, now) if HAS_RETURNING else None


def local_steps(batch: RunWrites, now: float) -> Program[CommitResult | None]:
    """Fence and count events in one UPDATE, then insert ops and events in bulk.

    The fence is the general path's: the lease epoch, an open status, the
    deadline not passed (``now < deadline_at``). None when it matches no row.
    """
    writes = [w for w in batch.writes if isinstance(w, RecordLocalActivity)]
    events = [event for w in writes for event in local_step_events(w)]
    row = yield Stmt(_FENCE, (len(events), batch.run_id, batch.epoch, *OPEN_STATUSES, now),
                     "one")
    if row is None:
        return None
    run_id = batch.run_id
    yield many(LOCAL_OP_INSERT,
               [local_op_row(run_id, w, OpStatus.COMPLETED, now) for w in writes])
    first = int(row[0]) - len(events) + 1
    yield many(EVENT_INSERT, [(run_id, first + i, etype, now, event_text(data))
                              for i, (etype, data) in enumerate(events)])
    return CommitResult(run_id, True, {
        w.op_id: OpRecord(w.op_id, OpKind.LOCAL_ACTIVITY, w.name, OpStatus.COMPLETED,
                          w.result, None, w.started_at, now)
        for w in writes
    })
