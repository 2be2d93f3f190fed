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
- **the file is rewritten in place** (decision (aq)): ``journal_size_limit
  = 5/8 wal_limit``, above where a forced reset lets the log grow, so the
  file keeps the size a cycle's log gave it and the next log rewrites its
  blocks. Why: a commit that grows the file must make its new size durable
  too, so at ``synchronous=FULL`` its fdatasync also commits the file
  system's journal (measured on this machine's ext4: 350 µs against 185 µs
  for one that rewrites blocks). Until 12-07 the file was trimmed to an
  eighth of the limit at every reset, so half of each cycle's commits grew
  it. The trigger therefore reads the log's size, not the file's
  (`Checkpoints.log_bytes`): exact while the log grows the file, else the
  frames the last passive checkpoint counted plus the programs since at a
  learned rate. A file that grew past 5/8 while another process held the
  log back is trimmed back to it.
- **written ahead when each commit fsyncs** (FULL, EXTRA): when the log
  reaches the file's end, the database thread extends the file by 1 MiB of
  zeros (fsync'd, under the write lock), so a fresh file's commits rewrite
  blocks too instead of growing it one commit at a time
  (`Checkpoints._write_ahead`). Zeros are never read as frames: a frame
  counts only with the header's salts and checksums that follow on.

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

from ._busy import BusyTimeout

#: the default bound on the -wal file (``?wal_limit=`` in the URL)
DEFAULT_WAL_LIMIT = 64 * 2**20
#: the smallest bound accepted: below it a reset would come every few runs
MIN_WAL_LIMIT = 2**20
#: seconds a reset waits for another process's writer or readers to let go
RESET_WAIT = 0.05
#: bytes the file is written ahead of a log that grows past its end, when each
#: commit fsyncs (`Checkpoints._write_ahead`): ~85 steps' log
AHEAD = 2**20

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

    def __init__(self, path: str, *, busy_timeout: float, every: int, limit: int,
                 ahead: bool = False) -> None:
        resolved = Path(path).resolve()
        self.wal_path = f"{resolved}-wal"
        # mode=rw: a checkpoint never creates a file that was removed
        self.uri = resolved.as_uri() + "?mode=rw"
        self.busy_timeout = busy_timeout
        #: the engine connection's busy timeout, shared with the writer (`_busy`)
        self.busy = BusyTimeout(busy_timeout)
        self.every = every
        self.limit = limit
        self.reset_at = limit // 4
        self.force_at = limit // 2
        # above `force_at` by more than one drain's writes: the file holds
        # what a forced reset lets the log grow to, and is rewritten in place
        self.trim_to = limit // 2 + limit // 8
        self._writes = 0  # committed write programs since the last passive checkpoint
        # the log's size, which the file's no longer tells (`log_bytes`)
        self._frame = 4096 + 24  # bytes a page takes in the log (`configure` reads it)
        self._file = 0  # the file's size at the last look
        self._log = 0  # the log's size when last learned, in bytes
        self._since = 0  # write programs committed since then
        self._rate = 0.0  # bytes of log a write program adds (learned)
        self._generation = 0  # successful resets: a passive figure from before one is stale
        self._figure: tuple[int, int, int] | None = None  # (generation, frames, programs)
        # commits that fsync (FULL, EXTRA): the file is written ahead of the log
        self.ahead = min(AHEAD, limit // 16) if ahead else 0
        self._grew = False  # the last look saw the log append to the file
        self.extended = 0  # times the file was written ahead
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
        self._frame = int(conn.execute("PRAGMA page_size").fetchone()[0]) + 24
        self._file = self._log = self.wal_bytes()  # a log left behind: at most the file

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
        self._since += programs
        if self._since_blocked is not None:
            self._since_blocked += programs
        self._writes += programs
        if self._writes < ((self.every // 4 or 1) if self._due else self.every):
            return
        if self._passive is not None and self._passive.is_alive():
            return
        self._writes = 0
        self._passive = threading.Thread(target=self._checkpoint_passive,
                                         args=(self._generation, self._since),
                                         name="durable-sqlite-checkpoint", daemon=True)
        self._passive.start()

    def log_bytes(self) -> int:
        """The log's size now (one ``stat``), which the policy acts on.

        Why not the file's size, as before: a commit that appends to the
        file must have its new size made durable too, so at ``synchronous=
        FULL`` its ``fdatasync`` also commits the file system's journal
        (measured here: 350 µs against 185 µs for a commit that rewrites
        blocks the file already has). The file is therefore no longer
        trimmed back below where the log starts over (`trim_to`), and its
        size tells the log's only while the log grows past it. Otherwise
        the log's size is what the last passive checkpoint counted
        (``wal_checkpoint`` returns the log's frames), plus what the write
        programs committed since then add at the rate learned while the log
        grew the file, never more than the file."""
        size = self.wal_bytes()
        figure, self._figure = self._figure, None
        if figure is not None and figure[0] == self._generation:
            # (not a rate: its frames count programs committed after the
            # count it carries, up to the moment the checkpoint looked)
            _, frames, programs = figure
            self._log = 32 + frames * self._frame if frames else 0
            self._since -= min(programs, self._since)
        if size > self._file:  # the log grows past the file's end: the file tells it
            if self._since and size > self._log:
                self._rate = (size - self._log) / self._since
            self._log, self._since = size, 0
            self._grew = True
        self._file = size
        return min(size, self._log + int(self._since * self._rate))

    def look(self) -> int | None:
        """The -wal file's size if `after_drain` would look at it (something was
        committed since it last did), else None: one ``stat`` a drain, which
        the database thread takes between its caller's wake-up and the next
        caller's transaction (issue 26). Past `reset_at` the thread makes sure
        the quiet lasts before `after_drain` resets at a quiet point (see
        `QUIET_GRACE`)."""
        return self.log_bytes() if self._look else None

    def after_drain(self, conn: sqlite3.Connection, quiet: bool,
                    size: int | None = None) -> None:
        """Between drains: reset the log when it has grown past `reset_at`
        (at a quiet point, or at once past `force_at`). `size`: the file's
        size read by `look` in this same pause (read again when not given)."""
        if not self._look:
            return
        if size is None:
            size = self.log_bytes()
        if self._grew:
            self._grew = False
            if self.ahead:
                self._write_ahead(conn)
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
            self.busy.set(conn, int(RESET_WAIT * 1000))
            try:
                busy = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
            finally:
                self.busy.restore(conn)
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
        self._generation += 1  # the next write starts the log at its beginning
        self._log = self._since = 0
        self.resets += 1
        self.last_reset_at = self.last_checkpoint_at = time.time()

    def _write_ahead(self, conn: sqlite3.Connection) -> None:
        """Extend the file by `ahead` bytes of zeros past its end (up to
        `trim_to`), made durable now, so that the commits that fill them
        rewrite blocks the file has instead of growing it: with ``synchronous
        =FULL`` a commit that grows the file pays, in its fdatasync, a commit
        of the file system's journal for the new size as well (measured here:
        350 µs against 185 µs a commit), and a fresh file's log grows for its
        first ``force_at`` bytes. Zeros are never taken for frames: a frame
        counts only if its salts are the header's and its checksums follow on.

        Under the write lock (``BEGIN IMMEDIATE``, not waited for: another
        process's writer may append meanwhile, and its frames must not be
        overwritten); given up quietly if that cannot be taken or the write
        fails: the log then grows as before."""
        try:
            self.busy.set(conn, 0)
            try:
                conn.execute("BEGIN IMMEDIATE")
            finally:
                self.busy.restore(conn)
        except sqlite3.Error:
            return
        try:
            size = self.wal_bytes()
            end = min(size + self.ahead, self.trim_to)
            if size and end > size:
                fd = os.open(self.wal_path, os.O_WRONLY)  # (the -wal file holds no locks)
                try:
                    os.pwrite(fd, bytes(end - size), size)
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                self._file = end
                self.extended += 1
        except OSError:
            pass
        finally:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _back_under(self, size: int) -> None:
        if self._over and size < self.limit:
            self._over = False
            _log.info("sqlite_wal_back_under_limit", wal=self.wal_path, wal_bytes=size,
                      wal_limit=self.limit)

    # ------------------------------------------ on the checkpoint thread

    def _checkpoint_passive(self, generation: int, programs: int) -> None:
        """Copy the log back into the database file, off the engine's connection.

        SQLite's automatic checkpoint runs inside whichever COMMIT takes the
        log past 1000 pages, and its fsync (tens of ms) then stalls every
        transaction queued behind that commit on our one connection: measured,
        it made most of the p99 of cancellation latency. A PASSIVE checkpoint
        on a connection of its own runs beside our writers and readers
        instead; what it cannot copy (a reader in another process, frames
        appended meanwhile) is copied by a later one or by the next reset.
        `generation` and `programs` (committed since the log's size was last
        learned) go with the count of the log's frames it returns, for
        `log_bytes`.
        """
        try:
            conn = sqlite3.connect(self.uri, uri=True, timeout=self.busy_timeout)
            try:
                row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return
        if row is not None and row[1] >= 0:  # -1: not in WAL mode
            self._figure = (generation, int(row[1]), programs)
        self.checkpoints += 1
        self.last_checkpoint_at = time.time()

    def join(self) -> None:
        """Wait for a running passive checkpoint (close)."""
        passive = self._passive
        if passive is not None:
            passive.join()
