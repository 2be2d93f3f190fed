"""The write-ahead log's upkeep: checkpoints, and a bound on the ``-wal`` file.

Why the log grew without bound (issue 28: 158 MB after 1,500 runs). SQLite
starts its log over from the beginning only when a write transaction begins
while every frame of the log has been copied back into the database file
and no reader still reads from the log. The driver's passive checkpoints
(off the database thread, every ``checkpoint_every`` committed programs) did
copy every frame they saw, but the one writer, the database thread, kept
appending while each ran, so under writes that never pause the moment
"all copied, next write begins" never came: no reader held anything back,
yet the log only grew, about 105 KB per run.

The policy (`Checkpoints`, driven by the database thread; defaults from
``wal_limit``, 64 MiB):

- **passive checkpoints off the thread**, as before: every
  ``checkpoint_every`` committed write programs a daemon thread with a
  connection of its own runs ``PRAGMA wal_checkpoint(PASSIVE)``. It does
  the bulk of the copying and its fsyncs without stalling the thread.
- **a reset on the thread**: once the ``-wal`` file holds more than
  ``wal_limit / 4``, the database thread runs ``PRAGMA
  wal_checkpoint(RESTART)`` on its own connection between two drains: at
  the first quiet point (nothing queued for 20 ms, `_writer.QUIET_GRACE`:
  not in the instant a caller's next transaction is on its way; one where a
  passive checkpoint still runs is let pass), or at the end of the next
  drain whatever is queued once the file passes ``wal_limit / 2`` (waiting
  for a running passive checkpoint to end first: two cannot run at once). Nothing
  of this process can append while it runs, so it copies the tail the last
  passive checkpoint had not seen, and takes the longer the longer that
  tail (measured: 88 frames 1.6 ms, 456 frames 14 ms, 1,710 frames 16 ms,
  5,135 frames 40 ms); the next write starts the log at its beginning.
  While a reset is due the passive checkpoints come four times as often
  (every ``checkpoint_every / 4`` programs), so that whenever it comes the
  tail is short, and often SQLite starts the log over by itself first (a
  write that begins after a passive checkpoint copied all of it, with no
  reader in the log, does). (They used to stop while a reset was due: where 20 ms of
  quiet never come, every reset was forced and copied what half the limit
  had held since the last one, 17-32 ms in which no transaction ran, six
  times in the 12 s of the heartbeat-timeout benchmark: docs/benchmarks.md,
  "Heartbeat-timeout lateness tail".) It waits
  at most `RESET_WAIT` for another process's writer or readers (SQLite's
  busy handler); if they hold on longer it gives up, counts
  ``wal_resets_blocked`` and tries again ``checkpoint_every`` programs
  later.
- **``journal_size_limit = wal_limit / 8``**: the first commit after a reset
  trims the file to that size, so the file's size follows the log's (the
  trigger above reads the file's size with one ``stat``) and a file that
  grew while another process held the log back shrinks again.

So the file stays under ``wal_limit`` unless another process keeps the log
from being reset (a read transaction that never ends); then it grows, the
stats and ``/metrics`` show it, and a warning is logged once.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from pathlib import Path

from durable._log import get_logger
from durable.errors import ConfigurationError

#: the default bound on the -wal file (``?wal_limit=`` in the URL)
DEFAULT_WAL_LIMIT = 64 * 2**20
#: the smallest bound accepted: below it a reset would come every few runs
MIN_WAL_LIMIT = 2**20
#: seconds a reset waits for another process's writer or readers to let go
RESET_WAIT = 0.05

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE = re.compile(r"\s*(\d+)\s*([a-z]*)\s*")

_log = get_logger("durable.sqlite")


def parse_size(text: str, what: str) -> int:
    """Bytes from ``67108864``, ``64MiB`` or ``64MB`` (KiB/MiB/GiB are
    powers of 2, KB/MB/GB powers of 10), at least `MIN_WAL_LIMIT`."""
    match = _SIZE.fullmatch(text.lower())
    if match is None or match.group(2) not in _UNITS:
        raise ConfigurationError(
            f"sqlite {what}={text!r} is not a size; give bytes or a number with a unit: "
            "KiB, MiB, GiB (powers of 2) or KB, MB, GB (powers of 10), e.g. 64MiB")
    size = int(match.group(1)) * _UNITS[match.group(2)]
    if size < MIN_WAL_LIMIT:
        raise ConfigurationError(
            f"sqlite {what}={text!r} is too small: at least 1MiB (the default is 64MiB)")
    return size


def size_text(size: int) -> str:
    """The shortest exact spelling of a size, for messages and docs."""
    for unit in ("GiB", "MiB", "KiB"):
        factor = _UNITS[unit.lower()]
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


class Checkpoints:
    """One database file's checkpoint policy; see the module docstring.

    `committed` and `after_drain` are called on the database thread only;
    the passive checkpoint thread writes its figures as plain attributes.
    """

    def __init__(self, path: str, *, busy_timeout: float, every: int, limit: int) -> None:
        resolved = Path(path).resolve()
        self.wal_path = f"{resolved}-wal"
        # mode=rw: a checkpoint never creates a file that was removed
        self.uri = resolved.as_uri() + "?mode=rw"
        self.busy_timeout = busy_timeout
        self.every = every
        self.limit = limit
        self.reset_at = limit // 4
        self.force_at = limit // 2
        self.trim_to = limit // 8
        self._writes = 0  # committed write programs since the last passive checkpoint
        self._since_blocked: int | None = None  # programs since a blocked reset
        self._look = False  # look at the file's size after the next drain
        self._due = False  # a reset is due: passive checkpoints come more often
        self._over = False  # warned that the file is over the limit
        self._passive: threading.Thread | None = None
        self.checkpoints = 0
        self.resets = 0
        self.resets_blocked = 0
        self.last_checkpoint_at: float | None = None
        self.last_reset_at: float | None = None

    def configure(self, conn: sqlite3.Connection) -> None:
        """On the engine's connection once in WAL mode: no automatic
        checkpoints (they would run inside a COMMIT and stall every caller
        queued behind it), and the size a reset trims the file to."""
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(f"PRAGMA journal_size_limit={self.trim_to}")

    def wal_bytes(self) -> int:
        """The -wal file's size now (0 when there is none)."""
        try:
            return os.stat(self.wal_path).st_size
        except OSError:
            return 0

    # ----------------------------------------------- on the database thread

    def committed(self, programs: int) -> None:
        """After a COMMIT: count write programs (not transactions, so a
        passive checkpoint comes every `every` programs' worth of log however
        they were grouped) and start one when due: every `every / 4` while a
        reset is due, so that the reset, which stops every transaction while
        it copies what no passive checkpoint has, finds little left."""
        self._look = True
        if self._since_blocked is not None:
            self._since_blocked += programs
        self._writes += programs
        if self._writes < ((self.every // 4 or 1) if self._due else self.every):
            return
        if self._passive is not None and self._passive.is_alive():
            return
        self._writes = 0
        self._passive = threading.Thread(target=self._checkpoint_passive,
                                         name="durable-sqlite-checkpoint", daemon=True)
        self._passive.start()

    def look(self) -> int | None:
        """The -wal file's size if `after_drain` would look at it (something was
        committed since it last did), else None: one ``stat`` a drain, which
        the database thread takes between its caller's wake-up and the next
        caller's transaction (issue 26). Past `reset_at` the thread makes sure
        the quiet lasts before `after_drain` resets at a quiet point (see
        `QUIET_GRACE`)."""
        return self.wal_bytes() if self._look else None

    def after_drain(self, conn: sqlite3.Connection, quiet: bool,
                    size: int | None = None) -> None:
        """Between drains: reset the log when it has grown past `reset_at`
        (at a quiet point, or at once past `force_at`). `size`: the file's
        size read by `look` in this same pause (read again when not given)."""
        if not self._look:
            return
        if size is None:
            size = self.wal_bytes()
        if size < self.reset_at:
            self._look = self._due = False
            self._back_under(size)
            return
        if self._since_blocked is not None and self._since_blocked < self.every:
            return  # blocked a moment ago: let the other process get on
        self._due = True
        forced = size >= self.force_at
        if not quiet and not forced:
            return  # look again after the next drain
        passive = self._passive
        if passive is not None and passive.is_alive():
            if not forced:
                return  # it ends soon: not a quiet point to stall in
            passive.join()  # two cannot run at once; it has little to copy
        self._look = False
        self._reset(conn, size)

    def _reset(self, conn: sqlite3.Connection, size: int) -> None:
        """``wal_checkpoint(RESTART)``, waiting at most RESET_WAIT for others."""
        try:
            conn.execute(f"PRAGMA busy_timeout={int(RESET_WAIT * 1000)}")
            try:
                busy = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
            finally:
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        except sqlite3.Error:
            busy = 1  # e.g. an I/O error: the next transaction reports it to its callers
        self._due = False
        if busy:
            self.resets_blocked += 1
            self._since_blocked = 0
            self._look = True
            if size >= self.limit and not self._over:
                self._over = True
                _log.warning("sqlite_wal_over_limit", wal=self.wal_path, wal_bytes=size,
                             wal_limit=self.limit,
                             hint="another process keeps a read transaction open, so the "
                                  "log cannot be started over; it is tried again")
            return
        self._since_blocked = None
        self.resets += 1
        self.last_reset_at = self.last_checkpoint_at = time.time()

    def _back_under(self, size: int) -> None:
        if self._over and size < self.limit:
            self._over = False
            _log.info("sqlite_wal_back_under_limit", wal=self.wal_path, wal_bytes=size,
                      wal_limit=self.limit)

    # ------------------------------------------ on the checkpoint thread

    def _checkpoint_passive(self) -> None:
        """Copy the log back into the database file, off the engine's connection.

        SQLite's automatic checkpoint runs inside whichever COMMIT takes the
        log past 1000 pages, and its fsync (tens of ms) then stalls every
        transaction queued behind that commit on our one connection: measured,
        it made most of the p99 of cancellation latency. A PASSIVE checkpoint
        on a connection of its own runs beside our writers and readers
        instead; what it cannot copy (a reader in another process, frames
        appended meanwhile) is copied by a later one or by the next reset.
        """
        try:
            conn = sqlite3.connect(self.uri, uri=True, timeout=self.busy_timeout)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            return
        self.checkpoints += 1
        self.last_checkpoint_at = time.time()

    def join(self) -> None:
        """Wait for a running passive checkpoint (close)."""
        passive = self._passive
        if passive is not None:
            passive.join()
