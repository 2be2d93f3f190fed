"""The SQLite driver's database thread: one connection, one thread, group commit.

Every use of the connection (open and migrate, domain programs, ``PRAGMA
data_version``, close) is a `Call` put on a `queue.SimpleQueue` that one
dedicated thread serves. Each time it wakes up, the thread takes EVERYTHING
queued, runs the programs among it in as few transactions as it can (one
``BEGIN IMMEDIATE`` ... ``COMMIT`` per drain, each program inside a
``SAVEPOINT`` of its own), and completes the callers with ONE call into
their event loop per drain (asyncio: the driver's `_wake.Wake`, an eventfd; trio:
``TrioToken.run_sync_soon``), which wakes them in queue order (`_set_all`).

Why: a commit on SQLite costs one fsync with ``synchronous=FULL`` and a
thread hop each way in any mode; both are paid once per drain instead of
once per program, while the loop never waits on SQLite's busy_timeout
(those waits stay on this thread; a brief write that the loop's thread runs
itself, `Writer.run_inline`, never waits for the lock). A call marked
urgent (`durable.driver.urgent`: the watchdog's pass) is served first, in a
transaction of its own, and its caller woken before the rest of its drain
runs (`Writer._serve_urgent`).

Failure rules (a drain's transaction):

- a program that raises (its own exception, or a statement error, which is
  never thrown into it: `durable.driver.drive_sync`) is rolled back to its
  savepoint alone, and only its caller gets the exception;
- a storage failure (`storage_failure`: locked past busy_timeout, disk full,
  I/O error) in any statement rolls the whole transaction back and every
  caller in it gets `StorageUnavailable(outcome_unknown=False)`, except
  read-only programs that rode along: they run again in a read transaction
  of their own (a deferred ``BEGIN`` never waits for the write lock);
- COMMIT failing: if SQLite left the transaction open (``SQLITE_BUSY``:
  another process's readers past busy_timeout, in rollback-journal mode) the
  driver rolls it back and every caller gets
  `StorageUnavailable(outcome_unknown=False)`; an I/O error during COMMIT
  (the log may or may not have reached the disk) gives
  `StorageUnavailable(outcome_unknown=True)`, which the engine resolves by
  reading back; any other COMMIT error (not a storage failure): rolled back,
  and every caller gets that error;
- if a program's error made SQLite abandon the whole transaction (an error
  class SQLite answers with a full rollback), the programs that had already
  succeeded in it certainly did not commit: they are run again from their
  factories in a new transaction (the `Driver.run` contract allows it).

Kept whole: one thread's loop and the rules of its transactions (grouping,
savepoints, what each failure does to whom, the order callers resume in);
split apart, each part would have to restate the others' invariants.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from durable.driver import Dialect, Program, ProgramFactory, Stmt, Tx, drive_sync
from durable.errors import StorageClosed, StorageUnavailable

from ._busy import BusyTimeout
from ._checkpoints import Checkpoints

T = TypeVar("T")

#: programs per transaction at most: a drain bigger than this commits in
#: several transactions (a transaction holds SQLite's write lock, which other
#: processes wait for, for as long as it runs)
MAX_PROGRAMS_PER_TRANSACTION = 256
#: seconds the queue must stay empty after a drain for a quiet point at which
#: the write-ahead log is reset (`Writer._quiet_lasts`)
QUIET_GRACE = 0.02


def _execute(conn: sqlite3.Connection, stmt: Stmt) -> Any:
    if stmt.mode == "many":
        conn.executemany(stmt.sql, stmt.params_seq)
        return None
    cursor = conn.execute(stmt.sql, stmt.params)
    if stmt.mode == "all":
        return cursor.fetchall()
    if stmt.mode == "one":
        row = cursor.fetchone()
        cursor.fetchall()
        return row
    cursor.fetchall()
    return cursor.rowcount


# SQLite errors that say storage cannot be used right now (another process
# holds the lock past busy_timeout, the disk is full or failing, the file is
# gone or read-only): the transaction did not commit and may be retried.
_UNAVAILABLE = (
    "database is locked",
    "database table is locked",
    "disk i/o error",
    "database or disk is full",
    "unable to open database file",
    "attempt to write a readonly database",
)


def storage_failure(exc: BaseException) -> bool:
    """Whether `exc` means storage is unavailable (retry), not a bad statement."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        text in str(exc).lower() for text in _UNAVAILABLE)


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back, never masking the error that brought us here (after some
    errors SQLite has rolled back already and there is nothing to undo)."""
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


class _StorageFailed(Exception):
    """A storage failure inside a program: the whole transaction is lost."""

    def __init__(self, cause: sqlite3.Error):
        super().__init__(str(cause))
        self.cause = cause


def _drive(conn: sqlite3.Connection, program: Program[T]) -> T:
    """Run one program's statements (inside a transaction opened by the caller).

    A storage failure ends the whole transaction (`_StorageFailed`); any other
    statement error propagates unchanged (`durable.driver.drive_sync`).
    """

    def execute(stmt: Stmt) -> Any:
        try:
            return _execute(conn, stmt)
        except Exception as exc:
            if storage_failure(exc):
                assert isinstance(exc, sqlite3.Error)
                raise _StorageFailed(exc) from exc
            raise

    return drive_sync(program, execute)


def _run_program(conn: sqlite3.Connection, program: Program[T], write: bool) -> T:
    """Run one program as a transaction of its own (opening the database:
    the migrations run before the thread serves anyone)."""
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        value = _drive(conn, program)
        conn.execute("COMMIT")
        return value
    except _StorageFailed as failed:
        _rollback(conn)
        raise failed.cause from None
    except BaseException:
        _rollback(conn)
        raise


class _Waiter(Protocol):
    def set(self) -> None: ...


Notify = Callable[..., object]


class Call(Generic[T]):
    """One request to the database thread and, once served, its outcome.

    `event` is set on the caller's loop (through `notify`, that loop's
    thread-safe "call soon") once `value` or `error` holds the outcome.
    A program call carries its factory (to run it again in a new transaction
    if SQLite abandoned the one it was in), a function call a function of
    the connection. Program calls are resumed one after the other, in the
    order they were queued (`turns`, `soon`: see `_set_all`).
    """

    __slots__ = (
        "abandoned",
        "error",
        "event",
        "factory",
        "fn",
        "notify",
        "program",
        "soon",
        "turns",
        "tx",
        "urgent",
        "value",
        "woken",
        "write",
    )

    def __init__(self, event: _Waiter, notify: Notify, soon: Notify, *,
                 factory: ProgramFactory[T] | None = None, tx: Tx | None = None,
                 write: bool = True, urgent: bool = False,
                 fn: Callable[[sqlite3.Connection | None], T] | None = None):
        self.factory = factory
        self.urgent = urgent  # served first in its drain (`Writer._serve_urgent`)
        self.tx = tx
        self.program: Program[T] | None = (
            factory(tx) if factory is not None and tx is not None else None)
        self.write = write
        self.fn = fn
        self.value: T | None = None
        self.error: BaseException | None = None
        self.event = event
        self.notify = notify
        self.soon = soon  # the loop's own "call soon" (from the loop thread)
        self.turns: Turns | None = None  # set when served
        self.woken = False
        self.abandoned = False  # its caller stopped waiting before its turn

    def pass_turn(self) -> None:
        """On the loop, once this caller has resumed: wake the next caller
        waiting for its turn one scheduling round later."""
        turns, self.turns = self.turns, None
        if turns is None or turns.active is not self:
            return
        if turns.waiting:  # asyncio: loop.call_soon; trio: _TrioSoon (no socket)
            self.soon(turns.next)
        else:  # nobody waits: no round to schedule (trio's costs a wake-up)
            turns.active = None

    def restart(self, dialect: Dialect) -> None:
        """A fresh program and Tx: the previous run certainly did not commit."""
        assert self.factory is not None
        if self.program is not None:
            self.program.close()
        self.tx = Tx(dialect, slot_limited=frozenset() if self.tx is None else self.tx.slot_limited,
                     activity_slot_limited=frozenset() if self.tx is None
                     else self.tx.activity_slot_limited)
        self.program = self.factory(self.tx)
        self.value = None
        self.error = None


class Turns:
    """The order in which one event loop's program callers resume: queue
    order, one at a time, across drains. Used on that loop only."""

    __slots__ = ("active", "waiting")

    def __init__(self) -> None:
        self.waiting: deque[Call[Any]] = deque()
        self.active: Call[Any] | None = None

    def add(self, calls: list[Call[Any]]) -> None:
        for call in calls:
            call.turns = self
        self.waiting.extend(calls)
        if self.active is None:
            self.next()

    def next(self) -> None:
        """Wake the first caller still waiting (an abandoned one is skipped)."""
        while self.waiting:
            call = self.waiting.popleft()
            if call.abandoned:
                call.turns = None
                continue
            self.active = call
            call.woken = True
            call.event.set()
            return
        self.active = None


@dataclass(frozen=True)
class SQLiteStats:
    """Counters of the database thread, for tests and tuning.

    `transactions`: transactions committed that ran at least one program;
    `programs`: programs run to their end (committed, or rolled back to their
    savepoint because they raised); `drains`: wake-ups of the thread that
    found work (each completes its callers with one call into their loop);
    `largest_drain`: most calls served by one wake-up; `inline`: brief
    programs (step commits, starts, reads of one run: `durable.driver.brief`)
    run on their caller's thread instead (`Writer.run_inline`; each is also
    one transaction and one program); `deferred`: brief programs sent to
    this thread after all, because another connection held the write lock
    or storage failed (nothing committed).

    The write-ahead log (see `_checkpoints`; zeros and None in memory):
    `wal_bytes`: the ``-wal`` file's size when the stats were read;
    `checkpoints`: passive checkpoints run (off the database thread);
    `wal_resets`: times the log was started over from its beginning;
    `wal_resets_blocked`: resets given up because another process's reader
    or writer held on; `last_checkpoint_at`, `last_wal_reset_at`: Unix times
    of the last checkpoint of either kind and of the last reset.
    """

    transactions: int = 0
    programs: int = 0
    drains: int = 0
    largest_drain: int = 0
    inline: int = 0
    deferred: int = 0
    wal_bytes: int = 0
    checkpoints: int = 0
    wal_resets: int = 0
    wal_resets_blocked: int = 0
    last_checkpoint_at: float | None = None
    last_wal_reset_at: float | None = None


_STOP = object()
#: put by a brief write committed on the caller's thread (`Writer.run_inline`)
#: when the write-ahead log needs the upkeep the thread does between drains
_UPKEEP = object()


class Writer:
    """The thread that owns the connection; see the module docstring."""

    def __init__(self, url: str, busy_timeout: float, dialect: Dialect,
                 checkpoints: Checkpoints | None):
        self.url = url
        self.busy_timeout = busy_timeout
        self.dialect = dialect
        self.checkpoints = checkpoints  # the -wal file's upkeep (None in memory)
        #: the connection's busy timeout now: 0 after a brief write on the
        #: loop's thread, the default again before the next drain (`_busy`)
        self.busy = checkpoints.busy if checkpoints is not None else BusyTimeout(busy_timeout)
        self.conn: sqlite3.Connection | None = None
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._held: Any = None  # taken from the queue while waiting for a quiet point
        self.stopped = False
        self.transactions = 0
        self.programs = 0
        self.drains = 0
        self.largest_drain = 0
        self.turns: dict[Notify, Turns] = {}  # per event loop (only one is supported)
        # Held by whoever uses the connection: this thread for a drain and the
        # upkeep after it, or a caller's thread for a brief write (`run_inline`).
        self.lock = threading.Lock()
        self.inline = 0  # brief programs run on a caller's thread
        self.deferred = 0  # brief programs sent to this thread after all (`run_inline`)
        self._upkeep_queued = False
        self.thread = threading.Thread(target=self._serve, name="durable-sqlite", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Ask the thread to finish what is queued, close the connection and end."""
        self.queue.put(_STOP)

    def stats(self) -> SQLiteStats:
        c = self.checkpoints
        counts = (self.transactions, self.programs, self.drains, self.largest_drain,
                  self.inline, self.deferred)
        if c is None:
            return SQLiteStats(*counts)
        return SQLiteStats(*counts, c.wal_bytes(), c.checkpoints, c.resets, c.resets_blocked,
                           c.last_checkpoint_at, c.last_reset_at)

    # ------------------------------------------------------------ the thread

    def _serve(self) -> None:
        get, get_nowait, empty = self.queue.get, self.queue.get_nowait, self.queue.empty
        stopping = False
        while not stopping:
            held, self._held = self._held, None
            batch: list[Any] = [held if held is not None else get()]
            while not empty():  # this thread alone takes from the queue: no
                batch.append(get_nowait())  # queue.Empty raised and caught per drain
            with self.lock:
                stopping, calls = self._drain(batch)
            if calls:  # (not a wake-up for the upkeep alone)
                self.drains += 1
                self.largest_drain = max(self.largest_drain, len(calls))
                self._complete(calls)
            if self.checkpoints is not None:
                self._upkeep(self.checkpoints, stopping)

    def _drain(self, batch: list[Any]) -> tuple[bool, list[Call[Any]]]:
        """Serve one wake-up's calls, holding `lock`: whether asked to stop,
        and the calls whose callers to wake (without the lock, so that a
        caller woken may find the connection free at once)."""
        stopping = False
        calls: list[Call[Any]] = []
        late: list[Call[Any]] = []
        urgent = False
        for item in batch:
            if item is _UPKEEP:
                continue
            if item is _STOP:
                stopping = True
            elif stopping:
                late.append(item)  # put after close: only from another thread
            else:
                calls.append(item)
                urgent = urgent or item.urgent
        conn = self.conn
        if calls and conn is not None:
            try:  # after brief writes on the loop's thread (`run_inline`); else nothing sent
                self.busy.restore(conn)
            except sqlite3.Error:
                pass  # the connection fails the transactions below: they report it
        if urgent and not stopping and len(calls) > 1:
            calls = self._serve_urgent(calls)
        self._serve_guarded(calls)
        if stopping:
            self._close()
            self.stopped = True
            late.extend(self._take_rest())
            for call in late:
                call.error = _closed(self.url)
            calls.extend(late)
        return stopping, calls

    def _upkeep(self, checkpoints: Checkpoints, stopping: bool) -> None:
        """Between drains, the callers already woken: the log's upkeep (see
        `_checkpoints`), holding `lock` only when there is something to do."""
        size = checkpoints.look()  # None: nothing to look at
        if size is not None:
            with self.lock:
                if self.conn is not None:
                    quiet = self.queue.empty()
                    if quiet and not stopping and size >= checkpoints.reset_at:
                        # the quiet must last (the size is read again after it)
                        quiet, size = self._quiet_lasts(), None
                    checkpoints.after_drain(self.conn, quiet=quiet, size=size)
        # a brief write may ask again (after the quiet wait: its own request
        # must not be what breaks the quiet)
        self._upkeep_queued = False

    def run_inline(self, call: Call[Any]) -> bool:
        """On the caller's thread: run `call` (a brief program, `durable.driver.
        brief`: a step's commit, a start, a read of one run) as a transaction
        of its own on the connection, if nobody uses it; False when it must
        go through the queue (busy, closed, or the write lock held by another
        process: this path never waits for it).

        Why: on SQLite with ``synchronous=NORMAL`` a step's commit appends a
        few pages to the log without an fsync, some tens of microseconds,
        while the hand-over to this thread and back costs more than that in
        wake-ups (decision (aj)). The caller's outcome, its errors and the
        counters are those of a drain of one call; a storage failure that
        left nothing committed is not the caller's: the call is made afresh
        and queued, where the busy timeout applies.
        """
        lock = self.lock
        if not lock.acquire(blocking=False):
            return False
        try:
            conn = self.conn
            if conn is None or self.stopped:
                return False
            try:
                self.busy.set(conn, 0)  # left so: the next drain puts the default back
            except sqlite3.Error:
                return False  # (a connection SQLite no longer serves: the thread's error)
            self._serve_guarded([call])  # a bug of ours becomes the caller's error
            error = call.error
            if isinstance(error, StorageUnavailable) and not error.outcome_unknown:
                call.restart(self.dialect)
                self.deferred += 1
                return False
            self.inline += 1
            checkpoints = self.checkpoints
            if checkpoints is not None and not self._upkeep_queued:
                size = checkpoints.look()
                if size is not None:
                    if size < checkpoints.reset_at:  # nothing to do but note it
                        checkpoints.after_drain(conn, quiet=False, size=size)
                    else:  # the thread looks for a quiet point to reset at (at
                        # once past `force_at`), as after a drain of its own:
                        # never here, where a reset would hold the loop
                        self._upkeep_queued = True
                        self.queue.put(_UPKEEP)
            return True
        finally:
            lock.release()

    def _serve_guarded(self, calls: list[Call[Any]]) -> None:
        """`_serve_calls`, where a bug of ours becomes each unserved caller's
        error: it must not leave callers waiting."""
        try:
            self._serve_calls(calls)
        except BaseException as exc:
            for call in calls:
                if call.error is None and call.value is None:
                    call.error = exc

    def _serve_urgent(self, calls: list[Call[Any]]) -> list[Call[Any]]:
        """Serve a drain's urgent calls (`durable.driver.urgent`: the
        watchdog's pass) first, in a transaction of their own, and wake their
        callers before the others run; the others are returned.

        Why: the watchdog records a deadline as enforced at the instant its
        transaction runs, and one that falls while its pass is on its way
        waits for the next pass (docs/benchmarks.md, "Heartbeat-timeout
        lateness tail"). Every call of a drain was queued before any of them
        was served, so serving some first is an order they could have been
        queued in; callers resume in the order they ran, as always (`Turns`).
        """
        first = [call for call in calls if call.urgent]
        if len(first) == len(calls):
            return calls
        self._serve_guarded(first)
        self.drains += 1
        self._complete(first)
        return [call for call in calls if not call.urgent]

    def _quiet_lasts(self) -> bool:
        """Whether nothing is queued for `QUIET_GRACE` seconds (what came meanwhile
        is served next). A reset takes the thread for 5-70 ms: not in the instant
        a caller's next transaction is on its way (the scheduler's second pass of
        a second's fires came just then and waited for the whole reset)."""
        inline = self.inline
        self.lock.release()  # brief writes may come meanwhile (`run_inline`)
        try:
            self._held = self.queue.get(timeout=QUIET_GRACE)
        except queue.Empty:
            return True
        finally:
            self.lock.acquire()
        return self.inline == inline  # no brief write came: the quiet lasted

    def _take_rest(self) -> list[Call[Any]]:
        rest: list[Call[Any]] = []
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return rest
            if item is not _STOP and item is not _UPKEEP:
                rest.append(item)

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def _complete(self, calls: list[Call[Any]]) -> None:
        """Wake the callers: one call into each event loop for the whole drain."""
        by_loop: dict[Notify, list[Call[Any]]] = {}
        for call in calls:
            by_loop.setdefault(call.notify, []).append(call)
        for notify, group in by_loop.items():
            turns = self.turns.get(notify)
            if turns is None:
                turns = self.turns[notify] = Turns()
            try:
                notify(_set_all, turns, group)
            except Exception:  # that loop is gone: nobody is waiting any more
                self.turns.pop(notify, None)

    def _serve_calls(self, calls: list[Call[Any]]) -> None:
        """Serve in queue order: functions one by one, consecutive programs
        grouped into transactions of up to MAX_PROGRAMS_PER_TRANSACTION."""
        group: list[Call[Any]] = []
        for call in calls:
            if call.fn is not None:
                if group:
                    self._run_group(group)
                    group = []
                try:
                    call.value = call.fn(self.conn)
                except BaseException as exc:
                    call.error = exc
                continue
            if self.conn is None:
                call.error = _closed(self.url)
                continue
            group.append(call)
            if len(group) >= MAX_PROGRAMS_PER_TRANSACTION:
                self._run_group(group)
                group = []
        if group:
            self._run_group(group)

    def _run_group(self, calls: list[Call[Any]]) -> None:
        """Run programs in one transaction, each in a savepoint of its own."""
        while calls:
            calls = self._transaction(calls)

    def _transaction(self, calls: list[Call[Any]]) -> list[Call[Any]]:
        """One transaction over `calls`; returns the calls to run again in a
        new one (empty unless SQLite abandoned this transaction under a
        program that failed on its own)."""
        conn = self.conn
        assert conn is not None
        single = len(calls) == 1
        write = calls[0].write if single else any(call.write for call in calls)
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            return self._fail_all(calls, exc, outcome_unknown=False)
        done: list[Call[Any]] = []
        writes = 0
        for index, call in enumerate(calls):
            program = call.program
            assert program is not None
            # Savepoint names are unique in the transaction and unlike any a
            # domain program uses for itself, so a program's own savepoints
            # nest inside its batch savepoint without clashing.
            savepoint = "" if single else f"durable_batch_{index}"
            try:
                if not single:
                    conn.execute(f"SAVEPOINT {savepoint}")
                value = _drive(conn, program)
                if not single:
                    conn.execute(f"RELEASE {savepoint}")
            except _StorageFailed as failed:
                _rollback(conn)
                return self._fail_all(calls, failed.cause, outcome_unknown=False)
            except BaseException as exc:
                if isinstance(exc, sqlite3.Error) and storage_failure(exc):
                    _rollback(conn)  # SAVEPOINT/RELEASE itself hit the storage
                    return self._fail_all(calls, exc, outcome_unknown=False)
                call.error = exc
                self.programs += 1
                if single:
                    _rollback(conn)
                    return []
                if not self._undo(conn, savepoint):
                    # SQLite abandoned the whole transaction: the programs
                    # before this one did not commit; run them (and the
                    # rest) again in a new transaction.
                    _rollback(conn)
                    retry = [c for c in calls if c is not call and c.error is None]
                    for again in retry:
                        again.restart(self.dialect)
                    return retry
                continue
            call.value = value
            done.append(call)
            if call.write:
                writes += 1
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            unknown = not conn.in_transaction and "disk i/o error" in str(exc).lower()
            _rollback(conn)
            return self._fail_all(calls, exc, outcome_unknown=unknown)
        self.transactions += 1
        self.programs += len(done)
        if writes and self.checkpoints is not None:
            self.checkpoints.committed(writes)
        return []

    @staticmethod
    def _undo(conn: sqlite3.Connection, savepoint: str) -> bool:
        """Roll one program back to its savepoint; False if the transaction is gone."""
        if not conn.in_transaction:
            return False
        try:
            conn.execute(f"ROLLBACK TO {savepoint}")
            conn.execute(f"RELEASE {savepoint}")
        except sqlite3.Error:
            return False
        return conn.in_transaction

    def _fail_all(self, calls: list[Call[Any]], exc: sqlite3.Error, *,
                  outcome_unknown: bool) -> list[Call[Any]]:
        """Every caller of a transaction that did not commit gets the failure
        (StorageUnavailable for a storage failure, else the error itself),
        except read-only programs that rode in a write transaction: they are
        returned, to run again in a read transaction of their own, which
        never waits for the write lock (alone, they would not have)."""
        reads: list[Call[Any]] = []
        mixed = any(call.write for call in calls)
        for call in calls:
            if call.error is not None:
                continue  # it failed on its own first: its caller gets that error
            call.value = None
            if mixed and not call.write and not outcome_unknown:
                call.restart(self.dialect)
                reads.append(call)
                continue
            if storage_failure(exc) or outcome_unknown:
                error: BaseException = _unavailable(self.url, self.busy_timeout, exc,
                                                    outcome_unknown)
                error.__cause__ = exc
            else:
                error = exc
            call.error = error
        return reads


def _set_all(turns: Turns, calls: list[Call[Any]]) -> None:
    """On the caller's loop, once per drain: wake its callers.

    Function calls (open, close, data_version) are woken at once. Program
    calls take their turn after those of earlier drains, one after the
    other in queue order, each one scheduling round after the previous one
    resumed (`Call.pass_turn`), without another thread crossing: whatever a
    caller's continuation starts (a run executor registered for the run it
    claimed) gets to run before the next caller publishes its wake-ups. That
    is the order callers saw when each transaction was a hop of its own;
    waking a whole drain in one round let a wake-up reach a run's executor
    before it loaded the run's inbox, and the wake-up was lost.
    """
    programs: list[Call[Any]] = []
    for call in calls:
        if call.factory is None:
            call.woken = True
            call.event.set()
        else:
            programs.append(call)
    if programs:
        turns.add(programs)


def _closed(url: str) -> StorageClosed:
    return StorageClosed(f"the SQLite database {url!r} is closed (the client was "
                         "closed); nothing more can be recorded through it")


def _unavailable(url: str, busy_timeout: float, exc: BaseException,
                 outcome_unknown: bool) -> StorageUnavailable:
    if outcome_unknown:
        return StorageUnavailable(
            f"SQLite at {url!r} failed during COMMIT ({exc}); the transaction may or "
            "may not have been recorded", outcome_unknown=True)
    return StorageUnavailable(
        f"SQLite at {url!r} cannot be used right now ({exc}); nothing was "
        "recorded. Another process may hold the write lock longer than busy_timeout "
        f"({busy_timeout:g} s), or the disk is full or failing",
        outcome_unknown=False,
    )
