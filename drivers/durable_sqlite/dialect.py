"""SQLite's dialect: the base `Dialect`, with the local-steps fast path.

A step of a workflow is, most of the time, one successful local activity.
The general commit path reads the run's row (and parses it) to fence it, then
inserts the op, bumps the run's event counter and inserts the events: four
statements and ~100 µs of Python per step inside the transaction. With
``UPDATE ... RETURNING`` (SQLite 3.35 and later) the fence and the event
counter are one statement, followed by one ``executemany`` for the ops and
one for the events, whatever the number of steps in the batch
(`durable.store.fastpath`, which every driver shares). A group commit's
runs of local steps only are one such UPDATE each, then one ``executemany``
for all their ops and one for all their events, whatever else rides in the
transaction (`local_steps_group`, `steps_group_mixed`).
"""

from __future__ import annotations

import sqlite3

from durable.driver import Dialect, Program
from durable.store import fastpath
from durable.store.records import CommitResult
from durable.store.writes import RunWrites

#: ``RETURNING`` arrived in SQLite 3.35.0 (2021-03)
HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)


class SQLiteDialect(Dialect):
    """The base dialect (SQLite's defaults) with the local-steps fast path."""

    # SQLITE_MAX_VARIABLE_NUMBER's default: 32766 since 3.32.0, 999 before
    max_params = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
    #: a group commit's runs of local steps only go through `local_steps_group`
    #: even when other runs ride in the same transaction (with 100 runs
    #: stepping at once nearly every group holds a run that starts or closes)
    steps_group_mixed = True
    #: the owner's close: one fenced UPDATE ... RETURNING, its event, its
    #: instance's row (`durable.store.closing.close_owned_in_one`)
    owned_close_returning = HAS_RETURNING

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult | None] | None:
        # Several statements: never `autocommit`, whatever the caller allows.
        if not HAS_RETURNING:
            return None
        return fastpath.local_steps(self, batch, now, autocommit=False)

    def local_steps_group(
        self, batches: list[RunWrites], now: float
    ) -> Program[list[CommitResult | None]] | None:
        # one cached UPDATE a run, then one executemany each for every run's
        # ops and events (`fastpath.local_steps_group_returning`): a group of
        # k runs was 3k statements, run by run
        if not HAS_RETURNING:
            return None
        return fastpath.local_steps_group_returning(batches, now)
