"""The embedded SQLite driver (``sqlite:///path.db``, ``sqlite://:memory:``).

An executor for `durable.store`'s programs with SQLite's dialect
(`SQLiteDialect`: no row locks, ``BEGIN IMMEDIATE`` takes the write lock up
front; a batch of local steps is one fenced ``UPDATE ... RETURNING``).
One connection, owned by one dedicated thread (`_writer.Writer`) that every
use of it goes through: opening and migrating, the domain programs, watch's
``PRAGMA data_version``, closing. Callers put their program on the thread's
queue and wait on an event; each time the thread wakes it takes everything
queued, runs the programs in ONE transaction (``BEGIN IMMEDIATE``, a
``SAVEPOINT`` per program so a failing one rolls back alone, one
``COMMIT``), and crosses back to the event loop once for all their callers
(asyncio: an eventfd of the driver's, `_wake`; trio: ``run_sync_soon``), who
then resume one after the other in queue order. A program thus costs a
share of one thread hop and of one fsync (``synchronous=FULL``) instead of a
whole one each: the hop, not the disk, bounds commits per second on SQLite
(the fsync with FULL). busy_timeout waits happen on the thread. One kind of
program skips the hand-over: a worker's step commit (`durable.driver.brief`)
with ``synchronous=NORMAL`` runs on the loop's own thread when the loop and
the connection are idle, never waiting for the write lock there
(`_inline`, decision (aj)). See docs/design/sqlite-driver.md (and why not
aiosqlite).

WAL mode and ``BEGIN IMMEDIATE`` let several processes on one machine share a
file; another process's commits are noticed through ``PRAGMA data_version``.
The ``-wal`` file is kept under ``?wal_limit=`` (64 MiB) by `_checkpoints`.
"""

from __future__ import annotations

import os
import sqlite3
import weakref
from collections import deque
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qs, urlsplit

import anyio

from durable import _validate
from durable._scopes import asyncio_scope
from durable.driver import Dialect, ProgramFactory, Tx, Wake, WakeHub, is_brief, is_urgent
from durable.errors import ConfigurationError, StorageUnavailable
from durable.store.migrations import migrate
from durable.store.schema import schema_statements

from ._checkpoints import DEFAULT_WAL_LIMIT, Checkpoints, parse_size
from ._inline import UNSYNCED, Inline, pause
from ._waiters import _NO_WAIT, _TrioSoon, _waiter
from ._writer import Call, SQLiteStats, Writer, _closed, _run_program, storage_failure
from .dialect import SQLiteDialect

T = TypeVar("T")

__all__ = ["SQLiteDriver", "SQLiteStats", "storage_failure"]


_FORMS = ("sqlite:///relative/path.db, sqlite:////absolute/path.db or sqlite://:memory:, "
          "optionally with ?synchronous=OFF|NORMAL|FULL|EXTRA and &wal_limit=64MiB")
_QUERY_OPTIONS = ("synchronous", "wal_limit")


def _parse(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme.split("+")[0] != "sqlite":
        raise ConfigurationError(f"not a sqlite URL: {url!r}; use {_FORMS}")
    if not url.split(":", 1)[1].startswith("//"):
        raise ConfigurationError(
            f"malformed sqlite URL {url!r} (it needs '//' after 'sqlite:'); use {_FORMS}")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_QUERY_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"sqlite URL {url!r} has unknown options {unknown}; the URL takes only "
            f"{list(_QUERY_OPTIONS)} (driver options such as busy_timeout go to "
            "durable.connect as keywords)")
    options = {k: v[-1] for k, v in query.items()}
    if parts.netloc == ":memory:" or parts.path in ("/:memory:", ":memory:"):
        return ":memory:", options
    if parts.netloc:
        raise ConfigurationError(
            f"sqlite URL {url!r} has a host part ({parts.netloc!r}); use sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise ConfigurationError(f"sqlite URL {url!r} names no file; e.g. sqlite:///app.db")
    return path, options


class SQLiteDriver:
    """Storage on one SQLite file (or in memory), shared safely by processes."""

    #: `run` is shielded whole, from before its first await (durable.driver.Driver)
    runs_shielded: ClassVar[bool] = True

    def __init__(self, url: str, *, busy_timeout: float = 30.0, poll_interval: float = 0.05,
                 checkpoint_every: int = 200, file_mode: int = 0o600):
        self.hub = WakeHub()
        self.dialect: Dialect = SQLiteDialect()
        self.url = url
        self.path, options = _parse(url)
        self.synchronous = options.get("synchronous", "NORMAL").upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(
                f"sqlite synchronous={self.synchronous!r} is not one of OFF, NORMAL, FULL, EXTRA"
            )
        self.busy_timeout = _validate.duration(busy_timeout, "busy_timeout", maximum=3600)
        self.poll_interval = _validate.duration(poll_interval, "poll_interval",
                                                inclusive=False, maximum=60)
        self.checkpoint_every = _validate.integer(checkpoint_every, "checkpoint_every")
        self.wal_limit = (parse_size(options["wal_limit"], "wal_limit")
                          if "wal_limit" in options else DEFAULT_WAL_LIMIT)
        if isinstance(file_mode, bool) or not isinstance(file_mode, int) or not (
                0 <= file_mode <= 0o777):
            raise ConfigurationError(
                f"file_mode must be permission bits such as 0o600, got {file_mode!r}")
        self.file_mode = file_mode
        self._writer: Writer | None = None
        self._finalizer: Any = None  # weakref.finalize ending the thread
        self._stats = SQLiteStats()
        self._closing = False
        self._handover: _Handover | None = None  # asyncio: programs held for the loop's turn
        # brief writes on the loop's thread (`_inline`): only where a commit syncs nothing
        self._inline = Inline() if self.synchronous in UNSYNCED else None

    @property
    def _conn(self) -> sqlite3.Connection | None:
        """The connection, owned by the database thread (tests poke at it)."""
        return self._writer.conn if self._writer is not None else None

    @property
    def stats(self) -> SQLiteStats:
        """Counters of the database thread (transactions, programs, drains)
        and the write-ahead log's size and last checkpoints."""
        return self._writer.stats() if self._writer is not None else self._stats

    def gauges(self) -> dict[str, tuple[str, float]]:
        """The log's figures for ``/metrics`` (durable.http.metrics): name ->
        (help, value), only those that have a value (none in memory: no log)."""
        if not self.shared:
            return {}
        stats = self.stats
        figures: dict[str, tuple[str, float | None]] = {
            "durable_sqlite_wal_bytes": (
                "Size of the SQLite -wal file in bytes.", stats.wal_bytes),
            "durable_sqlite_last_checkpoint_timestamp_seconds": (
                "Unix time of the last WAL checkpoint (passive or reset).",
                stats.last_checkpoint_at),
            "durable_sqlite_last_wal_reset_timestamp_seconds": (
                "Unix time the write-ahead log was last started over from its beginning.",
                stats.last_wal_reset_at),
        }
        return {name: (doc, value) for name, (doc, value) in figures.items()
                if value is not None}

    @property
    def shared(self) -> bool:
        """Whether other processes may use the same database."""
        return self.path != ":memory:"

    def _connect(self, checkpoints: Checkpoints | None) -> sqlite3.Connection:
        if self.path != ":memory:":
            parent = Path(self.path).resolve().parent
            if not parent.is_dir():
                raise ConfigurationError(f"cannot open {self.url!r}: directory {str(parent)!r} "
                                         f"does not exist{_validate.sqlite_path_hint(self.path)}")
            self._create_private()
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            if checkpoints is not None:
                conn.execute("PRAGMA journal_mode=WAL")
                checkpoints.configure(conn)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for ddl in schema_statements(self.dialect):
                    conn.execute(ddl)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            if storage_failure(exc):  # locked past busy_timeout, disk full: not the URL's fault
                raise StorageUnavailable(
                    f"cannot open SQLite database {self.url!r} right now ({exc}); nothing was "
                    f"recorded. Another process may hold the write lock longer than "
                    f"busy_timeout ({self.busy_timeout:g} s), or the disk is full or "
                    f"failing") from exc
            raise ConfigurationError(f"cannot open SQLite database {self.url!r}: {exc}") from exc
        _run_program(conn, migrate(self.dialect), True)
        # savepoints' undo pages never spill to a temporary file; after the
        # migrations, whose index builds may sort a large table (docs/design/
        conn.execute("PRAGMA temp_store=MEMORY")  # sqlite-driver.md)
        return conn

    def _create_private(self) -> None:
        """Create the database file readable by its owner only (`file_mode`,
        0600 by default): payloads are stored in clear. SQLite gives the -wal
        and -shm files it creates the database file's permissions."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, self.file_mode)
        except FileExistsError:
            return
        except OSError as exc:
            raise ConfigurationError(f"cannot create the SQLite file {self.path!r}: {exc}") from exc
        os.close(fd)
        os.chmod(self.path, self.file_mode)  # whatever the umask

    async def open(self) -> None:
        if self._writer is not None:
            return
        self._closing = False
        checkpoints = None if not self.shared else Checkpoints(
            self.path, busy_timeout=self.busy_timeout, every=self.checkpoint_every,
            limit=self.wal_limit, ahead=self.synchronous not in UNSYNCED)
        # The thread does not hold the driver, so that a driver dropped
        # without close() is collected and its finalizer ends the thread.
        writer = Writer(self.url, self.busy_timeout, self.dialect, checkpoints)
        writer.start()
        self._finalizer = weakref.finalize(self, writer.stop)
        self._writer = writer

        def connect(_: sqlite3.Connection | None) -> None:
            writer.conn = self._connect(checkpoints)

        try:
            await self._call(writer, Call(*_waiter(), fn=connect))
        except BaseException:
            self._writer = None
            self._finalizer.detach()
            writer.stop()
            raise

    async def close(self) -> None:
        """Finish every call queued so far, close the connection, end the thread."""
        writer = self._writer
        if writer is None or self._closing:
            return
        self._closing = True
        if self._handover is not None:  # what callers queued before close: served first
            self._handover.flush_now()
        with anyio.CancelScope(shield=True):
            call: Call[None] = Call(*_waiter(), fn=lambda conn: None)
            writer.queue.put(call)
            writer.stop()
            await call.event.wait()  # type: ignore[attr-defined]
            await anyio.to_thread.run_sync(writer.thread.join)
            self._finalizer.detach()
            if writer.checkpoints is not None:
                await anyio.to_thread.run_sync(writer.checkpoints.join)
            self._stats = writer.stats()
            self._writer = None

    async def _call(self, writer: Writer, call: Call[T], *, shield: bool = True) -> T:
        """Queue a call for the database thread and wait for its outcome.

        The wait is shielded, as the thread hop it replaces was once started:
        a program, once queued, runs whole, and its caller gets its outcome
        (a cancellation then arrives at the caller's next checkpoint), so a
        claim is never committed unseen. `shield=False` for reads whose
        outcome nobody needs once the caller is gone (watch's data_version):
        the thread still serves it and wakes nobody."""
        writer.queue.put(call)
        try:
            if shield and type(call.soon) is _TrioSoon:
                await call.event.shielded()  # type: ignore[attr-defined]
            elif shield:
                with anyio.CancelScope(shield=True):
                    await call.event.wait()  # type: ignore[attr-defined]
            else:
                await call.event.wait()  # type: ignore[attr-defined]
        except BaseException:
            if call.woken:
                call.pass_turn()
            else:
                call.abandoned = True  # its turn in the drain is skipped
            raise
        call.pass_turn()
        if call.error is not None:
            raise call.error
        return call.value  # type: ignore[return-value]

    def _tx(self) -> Tx:
        """A transaction's context (the queues limited by slots: `Tx.slot_limited`)."""
        return Tx(self.dialect, slot_limited=self.hub.slot_limited,
                  activity_slot_limited=self.hub.activity_slot_limited)

    async def run(self, program: ProgramFactory[T], *, write: bool = True) -> T:
        """Run the program whole on the database thread, grouped with whatever
        else is queued into one transaction (in a savepoint of its own)."""
        writer = self._writer
        if writer is None or self._closing or writer.stopped:
            raise _closed(self.url)
        inline = self._inline
        if inline is None:
            call = Call(*_waiter(), factory=program, tx=self._tx(), write=write,
                        urgent=is_urgent(program))
            return await self._queued(writer, call)
        backend = inline.loop_idle(reading=not write) if is_brief(program) else None
        if backend is not None:  # a brief program, the loop idle: on its thread
            call = Call(_NO_WAIT, _NO_WAIT, _NO_WAIT, factory=program, tx=self._tx(),
                        write=write)
            if writer.run_inline(call):
                assert call.tx is not None
                if call.error is None and call.tx.wakes:
                    self.hub.publish(call.tx.wakes)
                if inline.pause_due(backend):
                    await pause(backend)
                if call.error is not None:
                    raise call.error
                return call.value  # type: ignore[return-value]
            call.event, call.notify, call.soon = _waiter()
        else:
            call = Call(*_waiter(), factory=program, tx=self._tx(), write=write,
                        urgent=is_urgent(program))
        inline.queued += 1  # until resumed: see `_inline`
        try:
            return await self._queued(writer, call)
        finally:
            inline.queued -= 1

    async def _queued(self, writer: Writer, call: Call[T]) -> T:
        """`run` through the database thread: `_call`'s shielded wait, with
        the hand-over of `_Handover` and the wake-ups published on resuming."""
        if call.urgent or type(call.soon) is _TrioSoon:
            writer.queue.put(call)
        else:
            self._hand_over(writer, call)
        try:
            if type(call.soon) is _TrioSoon:
                await call.event.shielded()  # type: ignore[attr-defined]
            else:
                with asyncio_scope(shield=True):  # (every commit enters one)
                    await call.event.wait()  # type: ignore[attr-defined]
        except BaseException:
            if call.woken:
                call.pass_turn()
            else:
                call.abandoned = True  # its turn in the drain is skipped
            raise
        call.pass_turn()
        if call.error is not None:
            raise call.error
        assert call.tx is not None
        if call.tx.wakes:
            self.hub.publish(call.tx.wakes)
        return call.value  # type: ignore[return-value]

    def _hand_over(self, writer: Writer, call: Call[Any]) -> None:
        """Queue an asyncio caller's program for the database thread, now if
        the loop has nothing else ready to run, else once it has (`_Handover`)."""
        handover = self._handover
        loop = getattr(call.soon, "__self__", None)  # asyncio: loop.call_soon's loop
        if handover is None or handover.loop is not loop or handover.queue is not writer.queue:
            if handover is not None:
                handover.flush_now()  # (its loop is gone: nothing more would flush it)
            ready = getattr(loop, "_ready", None)
            if not isinstance(ready, deque):  # not the stdlib's loop (uvloop): as before
                self._handover = None
                writer.queue.put(call)
                return
            handover = self._handover = _Handover(loop, ready, writer.queue)
        handover.put(call)

    @staticmethod
    def _data_version(conn: sqlite3.Connection | None) -> int | None:
        if conn is None:
            return None
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    async def watch(self) -> None:
        if not self.shared:
            await anyio.sleep_forever()
        last: int | None = None
        while True:
            writer = self._writer
            if writer is not None and not self._closing and not writer.stopped:
                version = await self._call(writer, Call(*_waiter(), fn=self._data_version),
                                           shield=False)
                if last is not None and version is not None and version != last:
                    self.hub.publish([Wake.any()])
                last = version
            await anyio.sleep(self.poll_interval)


#: longest a program waits on a busy asyncio loop to be handed to the
#: database thread with the rest of the loop's turn (`_Handover`), in seconds
HANDOVER_WAIT = 0.002


class _Handover:
    """Programs of an asyncio loop's callers, handed to the database thread
    together once the loop has nothing else ready to run.

    Why: the thread needs the GIL to take a call and to run every statement,
    and a busy loop holds it. A program queued in the middle of the loop's
    turn woke the thread, which then won the GIL between two of the loop's
    callbacks often enough to commit what was queued so far (a start, or a
    claim) in a transaction of its own, and the rest in another: under
    workload (b) of the peer benchmark 2.3 transactions, wake-ups and
    hand-overs per round of the runs' group commit instead of one (docs/
    benchmarks.md, "SQLite concurrent steps: one hand-over per loop turn").
    A program queued when nothing else is ready (every sequential step) is
    handed over at once, as before; one queued while other callbacks are
    ready waits for the loop's turn to end (the loop runs its ready
    callbacks, then looks again), at most `HANDOVER_WAIT` seconds on a loop
    that is never idle. Its caller's wait, its outcome and the order callers
    resume in are unchanged: only the instant the thread sees the call moves.
    """

    __slots__ = ("deadline", "loop", "pending", "queue", "ready")

    def __init__(self, loop: Any, ready: deque[Any], queue: Any) -> None:
        self.loop = loop
        self.ready = ready  # the loop's callbacks ready to run (asyncio's `_ready`)
        self.queue = queue  # the database thread's
        self.pending: list[Call[Any]] = []
        self.deadline = 0.0

    def put(self, call: Call[Any]) -> None:
        if self.pending:
            self.pending.append(call)
        elif not self.ready:  # nothing else to run: the loop is about to wait
            self.queue.put(call)
        else:
            self.pending.append(call)
            self.deadline = self.loop.time() + HANDOVER_WAIT
            self.loop.call_soon(self._look)

    def _look(self) -> None:
        """On the loop, once a round: hand over if the loop's turn ended (or
        the wait is up), else look again after the callbacks now ready."""
        if not self.pending:  # handed over already (close)
            return
        ready = self.ready
        if ready and self.loop.time() < self.deadline and not _only_retries(ready):
            self.loop.call_soon(self._look)
            return
        self.flush_now()

    def flush_now(self) -> None:
        pending, self.pending = self.pending, []
        for call in pending:
            self.queue.put(call)


def _only_retries(ready: deque[Any]) -> bool:
    """Whether every ready callback is anyio's cancellation retry: a scope
    cancelled while one of its tasks waits shielded (a program's caller, for
    one) delivers the cancellation again at every round of the loop until the
    task leaves, so the loop is never without a ready callback meanwhile,
    though it has nothing else to do."""
    for handle in ready:
        if getattr(getattr(handle, "_callback", None), "__name__", "") != "_deliver_cancellation":
            return False
    return True
