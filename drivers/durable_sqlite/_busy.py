"""The engine connection's ``busy_timeout``: what it is now, set only to change it.

Three users want three values on the one connection (all while holding the
writer's lock, so one at a time):

- the database thread's transactions wait for another process's write lock
  up to the driver's ``busy_timeout`` (the default, 30 s);
- a brief program run on the loop's own thread (`Writer.run_inline`,
  decisions (aj), (ba)) must never wait for it: 0, and it goes to the thread
  instead;
- a reset of the log waits briefly for others (`_checkpoints.RESET_WAIT`),
  and writing the file ahead does not wait at all.

Each used to set its value and put the default back around its own
statements: for the loop's commits that was two ``PRAGMA busy_timeout``
statements per sequential step on the loop's thread, one statement more
than the step's own three (issue 26). Knowing what the connection has, a
user now sets the value only when it differs: consecutive steps on the
loop's thread set nothing, and the database thread puts the default back
once, before its next drain.
"""

from __future__ import annotations

import sqlite3


class BusyTimeout:
    """One connection's ``busy_timeout`` in milliseconds, as last set.

    `set` is the only way it changes; a PRAGMA that raised leaves it
    unknown, so the next `set` sends it again whatever the value asked."""

    def __init__(self, seconds: float) -> None:
        #: the driver's own (``sqlite3.connect(timeout=...)`` opens with it)
        self.default = int(seconds * 1000)
        self._now: int | None = self.default

    def set(self, conn: sqlite3.Connection, ms: int) -> None:
        """Give `conn` a busy timeout of `ms` unless it has it already."""
        if ms == self._now:
            return
        self._now = None  # until the statement has run
        conn.execute(f"PRAGMA busy_timeout={ms}")
        self._now = ms

    def restore(self, conn: sqlite3.Connection) -> None:
        """The driver's own timeout: what the database thread's transactions wait."""
        self.set(conn, self.default)
