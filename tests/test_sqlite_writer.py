"""The SQLite driver's database thread and group commit, on real files.

Programs queued while the thread is busy are run in ONE transaction, each in
a savepoint of its own: a failing program rolls back alone, a storage
failure fails them all, close finishes what is queued, a cancelled caller's
queued program still runs whole. Batching is shown with the driver's
counters (`driver.stats`), never with timings. The thread is held busy by a
"gate" program that blocks (on the database thread) until the test lets it
go, so the programs after it are queued for certain.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from durable_sqlite import SQLiteDriver
from durable_sqlite._writer import Call

import durable
from durable import workflow
from durable.driver import Dialect, Program, Tx, Wake, ex, q, q1, urgent

pytestmark = pytest.mark.anyio


class Gate:
    """A program that holds the database thread until `release()`."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()

    def program(self, tx: Tx) -> Program[None]:
        self.started.set()
        self.go.wait(10)
        yield q1("SELECT 1")

    async def hold(self, driver: SQLiteDriver) -> None:
        """Run the gate (a read: it takes no lock another process holds)."""
        await driver.run(self.program, write=False)

    def release(self) -> None:
        self.go.set()


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[SQLiteDriver]:
    drv = SQLiteDriver(f"sqlite:///{tmp_path / 'w.db'}", busy_timeout=0.2)
    await drv.open()
    await drv.run(lambda tx: _create())
    try:
        yield drv
    finally:
        await drv.close()


def _create() -> Program[None]:
    yield ex("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")


def insert(k: int, *, wake: bool = False) -> Callable[[Tx], Program[int]]:
    def program(tx: Tx) -> Program[int]:
        yield ex("INSERT INTO t (k, v) VALUES (?, ?)", k, f"v{k}")
        if wake:
            tx.wake(Wake.run(str(k)))
        return k

    return program


def failing(k: int, *, wake: bool = False) -> Callable[[Tx], Program[int]]:
    """Writes a row, then raises: the row must not be committed."""
    def program(tx: Tx) -> Program[int]:
        yield ex("INSERT INTO t (k, v) VALUES (?, ?)", k, "doomed")
        if wake:
            tx.wake(Wake.run(str(k)))
        raise ValueError(f"program {k} failed")

    return program


async def keys(driver: SQLiteDriver) -> list[int]:
    def program(tx: Tx) -> Program[list[int]]:
        rows = yield q("SELECT k FROM t ORDER BY k")
        return [int(r[0]) for r in rows]

    return await driver.run(program, write=False)


async def queued_behind_gate(driver: SQLiteDriver, gate: Gate, count: int) -> None:
    """Wait until the gate holds the thread and `count` calls are queued."""
    await anyio.to_thread.run_sync(gate.started.wait, 10)
    writer = driver._writer
    assert writer is not None
    with anyio.fail_after(10):
        while writer.queue.qsize() < count:
            await anyio.sleep(0.001)


async def run_batch(driver: SQLiteDriver,
                    programs: list[tuple[Callable[[Tx], Program[Any]], bool]],
                    ) -> list[Any]:
    """Run `programs` queued behind a gate, so they are drained together;
    each outcome is its value or the exception its caller got."""
    gate = Gate()
    outcomes: list[Any] = [None] * len(programs)

    async def one(i: int, program: Callable[[Tx], Program[Any]], write: bool) -> None:
        try:
            outcomes[i] = await driver.run(program, write=write)
        except Exception as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.hold, driver)
        await anyio.to_thread.run_sync(gate.started.wait, 10)
        for i, (program, write) in enumerate(programs):
            tg.start_soon(one, i, program, write)
            # queued in this order (trio does not run new tasks in start order)
            await queued_behind_gate(driver, gate, i + 1)
        gate.release()
    return outcomes


async def test_concurrent_runs_commit_in_one_transaction(driver: SQLiteDriver) -> None:
    before = driver.stats
    outcomes = await run_batch(driver, [(insert(k), True) for k in range(20)]
                               + [(lambda tx: _count(), False)])
    assert outcomes[:20] == list(range(20))
    after = driver.stats
    # the gate's transaction, then ONE for the 21 queued programs
    assert after.transactions - before.transactions == 2
    assert after.programs - before.programs == 22
    assert after.largest_drain >= 21
    assert await keys(driver) == list(range(20))


async def test_a_drain_hands_over_once_per_loop(
    driver: SQLiteDriver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database thread crosses into the callers' loop ONCE per drain
    (one callback that wakes all of that loop's callers), not once per
    caller: the loop's thread-safe "call soon" is counted."""
    import durable_sqlite

    real = durable_sqlite._waiter
    handovers: list[int] = []  # callers completed by each hand-over
    counted: list[Any] = []

    def waiter() -> tuple[Any, Any, Any]:
        event, notify, soon = real()
        if not counted:  # one per loop: the thread groups callers by it
            def count(fn: Any, turns: Any, calls: list[Any]) -> None:
                handovers.append(len(calls))
                notify(fn, turns, calls)

            counted.append(count)
        return event, counted[0], soon

    monkeypatch.setattr(durable_sqlite, "_waiter", waiter)
    before = driver.stats
    outcomes = await run_batch(driver, [(insert(k), True) for k in range(20)])
    assert outcomes == list(range(20))
    assert driver.stats.drains - before.drains == 2
    assert handovers == [1, 20]  # the gate's drain, then all 20 callers at once


@pytest.mark.parametrize("anyio_backend", ["trio"], indirect=True)
async def test_on_trio_the_turn_passes_inside_the_run() -> None:
    """On trio a caller hands the turn to the next through the run's own
    "call soon" (`_TrioSoon`, a parked system task), not through the token's
    run_sync_soon (a wake-up socket write per caller); its callbacks run one
    scheduling round later, in order, and one scheduled by a callback runs a
    round after that."""
    import trio
    from durable_sqlite import _waiter

    _, notify, soon = _waiter()
    assert soon is _waiter()[2] and soon is not notify  # one per run
    order: list[str] = []

    def second() -> None:
        order.append("second")

    def first() -> None:
        order.append("first")
        soon(order.append, "scheduled by first")

    soon(first)
    soon(second)
    assert order == []  # not in this round
    await trio.lowlevel.checkpoint()
    await trio.lowlevel.checkpoint()
    assert order[:2] == ["first", "second"]
    with anyio.fail_after(5):
        while len(order) < 3:
            await trio.lowlevel.checkpoint()
    assert order == ["first", "second", "scheduled by first"]


def test_the_database_threads_wake_up_runs_its_callbacks_in_order_on_the_loop() -> None:
    """asyncio: the database thread wakes the loop through an eventfd (or a
    pipe) of its own, not the loop's self-socket (`_Wake`): callbacks posted
    from another thread run on the loop in the order posted, one that raises
    is reported and does not hold back the next, posts after the loop closed
    raise (the thread then drops that loop), and the loop's file is closed
    with it."""
    import asyncio
    import gc
    import os

    from durable_sqlite import _waiter
    from durable_sqlite._wake import Wake

    ran: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def boom() -> None:
        raise ValueError("boom")

    def record(i: int) -> None:
        ran.append((i, threading.get_ident()))

    async def main() -> tuple[Any, int]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context["exception"]))
        _, notify, _ = _waiter()
        assert isinstance(notify.__self__, Wake)
        assert _waiter()[1] is notify  # one per loop: the writer keys its turns by it
        done = asyncio.Event()

        def post_all() -> None:
            for i in range(200):
                notify(record, i)
                if i == 100:
                    notify(boom)
            notify(done.set)

        thread = threading.Thread(target=post_all)
        thread.start()
        await done.wait()
        thread.join()
        return notify, notify.__self__.fd

    loop = asyncio.new_event_loop()
    notify, fd = loop.run_until_complete(main())
    loop.close()
    assert [i for i, _ in ran] == list(range(200))
    assert {ident for _, ident in ran} == {threading.get_ident()}  # on the loop's thread
    assert [str(e) for e in errors] == ["boom"]
    with pytest.raises(RuntimeError):
        notify(record, -1)
    errors.clear()  # (its traceback holds the loop)
    del notify, loop
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def _count() -> Program[int]:
    row = yield q1("SELECT count(*) FROM t")
    return int(row[0])


async def test_callers_of_a_drain_resume_in_queue_order_one_round_apart(
    driver: SQLiteDriver,
) -> None:
    """What a caller's continuation starts runs before the next caller of the
    same drain resumes (as when each transaction was a hop of its own)."""
    gate = Gate()
    order: list[str] = []

    async def one(k: int) -> None:
        await driver.run(insert(k))
        order.append(f"caller {k}")

        async def started_by(k: int) -> None:
            order.append(f"task of {k}")

        tg.start_soon(started_by, k)

    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.hold, driver)
        await anyio.to_thread.run_sync(gate.started.wait, 10)
        for k in range(4):
            tg.start_soon(one, k)
            await queued_behind_gate(driver, gate, k + 1)
        gate.release()
    assert order == [f"{who} {k}" for k in range(4) for who in ("caller", "task of")]


async def test_an_urgent_program_runs_first_in_its_drain_alone_and_its_caller_resumes_first(
    driver: SQLiteDriver,
) -> None:
    """The watchdog's pass (`durable.driver.urgent`) is served ahead of the
    calls queued with it, in a transaction of its own, and its caller resumes
    before theirs: the instant it records does not wait for them."""
    gate = Gate()
    order: list[str] = []
    seen: list[int] = []

    def count(tx: Tx) -> Program[int]:
        n = yield from _count()
        seen.append(n)
        return n

    async def one(name: str, program: Callable[[Tx], Program[int]]) -> None:
        await driver.run(program)
        order.append(name)

    before = driver.stats
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.hold, driver)
        await anyio.to_thread.run_sync(gate.started.wait, 10)
        queued = [("insert 1", insert(1)), ("insert 2", insert(2)),
                  ("urgent", urgent(count)), ("insert 3", insert(3))]
        for i, (name, program) in enumerate(queued):
            tg.start_soon(one, name, program)
            await queued_behind_gate(driver, gate, i + 1)
        gate.release()
    assert seen == [0]  # ahead of the inserts queued before it
    assert order == ["urgent", "insert 1", "insert 2", "insert 3"]
    # the gate's, the urgent program's, the rest's
    assert driver.stats.transactions - before.transactions == 3
    assert await keys(driver) == [1, 2, 3]


async def test_callers_resume_in_queue_order_across_drains() -> None:
    """A later drain's callers wait for the earlier drain's to have resumed,
    and a caller that gave up before its turn is skipped."""
    from durable_sqlite import _waiter
    from durable_sqlite._writer import Turns, _set_all

    def call() -> Call[int]:
        return Call(*_waiter(), factory=lambda tx: _pages(), tx=Tx(Dialect()))

    turns = Turns()
    a, b, c, gone, d = call(), call(), call(), call(), call()
    gone.abandoned = True
    _set_all(turns, [a, b])
    _set_all(turns, [c, gone, d])
    woken = lambda: [x.woken for x in (a, b, c, gone, d)]  # noqa: E731
    assert woken() == [True, False, False, False, False]
    for expected in ([True, True, False, False, False], [True, True, True, False, False],
                     [True, True, True, False, True]):
        active = turns.active
        assert active is not None
        active.pass_turn()
        await anyio.sleep(0.01)  # the next turn comes a scheduling round later
        assert woken() == expected
    assert turns.active is d
    d.pass_turn()
    await anyio.sleep(0.01)
    assert turns.active is None


async def test_a_failing_program_rolls_back_alone(driver: SQLiteDriver) -> None:
    await driver.run(insert(100))

    def duplicate(tx: Tx) -> Program[None]:
        yield ex("INSERT INTO t (k, v) VALUES (?, 'x')", 5)
        yield ex("INSERT INTO t (k, v) VALUES (?, 'dup')", 100)  # not handled

    def tries_to_handle_its_own_error(tx: Tx) -> Program[str]:
        # a failed statement is not thrown into the program (drive() has no
        # `throw`: docs/design/writing-a-driver.md), so its own savepoints and
        # except clause never run: the error is its outcome and all of its
        # writes roll back, without touching the rest of the batch
        yield ex("INSERT INTO t (k, v) VALUES (7, 'undone')")
        yield ex("SAVEPOINT durable_batch_0")
        yield ex("INSERT INTO t (k, v) VALUES (8, 'undone')")
        try:
            yield ex("INSERT INTO t (k, v) VALUES (100, 'dup')")
        except sqlite3.IntegrityError:  # pragma: no cover - never reached
            yield ex("ROLLBACK TO durable_batch_0")
        yield ex("RELEASE durable_batch_0")
        return "handled"

    outcomes = await run_batch(driver, [
        (insert(1), True), (failing(2), True), (insert(3), True), (duplicate, True),
        (tries_to_handle_its_own_error, True), (insert(9), True),
    ])
    assert outcomes[0] == 1 and outcomes[2] == 3 and outcomes[5] == 9
    assert isinstance(outcomes[1], ValueError)
    assert isinstance(outcomes[3], sqlite3.IntegrityError)
    assert isinstance(outcomes[4], sqlite3.IntegrityError)
    assert await keys(driver) == [1, 3, 9, 100]


async def test_savepoints_past_64_kib_stay_in_memory_and_still_roll_back(
    driver: SQLiteDriver, tmp_path: Path
) -> None:
    """The connection keeps temporary storage in memory (docs/design/
    sqlite-driver.md, "Temporary storage in memory"): a drain whose programs
    change far more than the 64 KiB a savepoint's undo pages kept in memory
    before spilling to a file still rolls a failing program back alone."""
    assert await _on_thread(driver, lambda c: c.execute("PRAGMA temp_store").fetchone()[0]) == 2

    def wide(k: int, fail: bool) -> Callable[[Tx], Program[int]]:
        def program(tx: Tx) -> Program[int]:
            for j in range(40):  # ~40 pages of 4 KiB
                yield ex("INSERT INTO t (k, v) VALUES (?, ?)", k + j, "x" * 3000)
            if fail:
                raise ValueError("undone")
            return k
        return program

    outcomes = await run_batch(driver, [(wide(1000, False), True), (wide(2000, True), True),
                                        (wide(3000, False), True)])
    assert outcomes[0] == 1000 and outcomes[2] == 3000
    assert isinstance(outcomes[1], ValueError)
    stored = await keys(driver)
    assert stored == [*range(1000, 1040), *range(3000, 3040)]


async def test_wakes_are_published_only_for_programs_that_committed(
    driver: SQLiteDriver,
) -> None:
    seen: list[Wake] = []
    driver.hub.subscribe(seen.append)
    await run_batch(driver, [(insert(1, wake=True), True), (failing(2, wake=True), True),
                             (insert(3, wake=True), True)])
    assert sorted(w.key for w in seen) == [("run", "1"), ("run", "3")]


async def test_a_storage_failure_fails_the_whole_drain(driver: SQLiteDriver) -> None:
    """One program runs out of room (a real SQLITE_FULL, forced with
    max_page_count): nothing of the drain is committed, every caller gets
    StorageUnavailable(outcome_unknown=False), and the driver works after."""
    pages = await driver.run(lambda tx: _pages())
    await _on_thread(driver, lambda c: c.execute(f"PRAGMA max_page_count={pages}"))

    def big(tx: Tx) -> Program[None]:
        yield ex("INSERT INTO t (k, v) VALUES (50, ?)", "x" * 200_000)

    outcomes = await run_batch(driver, [(insert(1), True), (big, True), (insert(2), True),
                                        (lambda tx: _count(), False)])
    # the read that rode along runs again on its own
    assert outcomes.pop() == 0
    for outcome in outcomes:
        assert isinstance(outcome, durable.StorageUnavailable), outcome
        assert outcome.outcome_unknown is False
    await _on_thread(driver, lambda c: c.execute("PRAGMA max_page_count=1073741823"))
    assert await keys(driver) == []
    assert await driver.run(insert(4)) == 4


def _pages() -> Program[int]:
    row = yield q1("PRAGMA page_count")
    return int(row[0])


async def _on_thread(driver: SQLiteDriver, fn: Callable[[Any], Any]) -> Any:
    from durable_sqlite import _waiter

    writer = driver._writer
    assert writer is not None
    return await driver._call(writer, Call(*_waiter(), fn=fn))


async def test_a_locked_database_fails_the_whole_drain(
    driver: SQLiteDriver, tmp_path: Path
) -> None:
    """Another process holds the write lock past busy_timeout: the drain's
    writers get StorageUnavailable(outcome_unknown=False); a read that rode
    along is answered (a read never waits for the write lock)."""
    blocker = sqlite3.connect(tmp_path / "w.db", isolation_level=None, timeout=5)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        outcomes = await run_batch(driver, [(insert(1), True), (insert(2), True),
                                            (lambda tx: _count(), False)])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert outcomes.pop() == 0
    assert all(isinstance(o, durable.StorageUnavailable) and not o.outcome_unknown
               for o in outcomes), outcomes
    assert await keys(driver) == []


class _CommitFails:
    """Wraps the connection: the COMMIT after the next `skip` fails as
    SQLITE_BUSY does, the transaction left open."""

    def __init__(self, conn: sqlite3.Connection, skip: int,
                 message: str = "database is locked", closes: bool = False):
        self.conn = conn
        self.message = message
        self.skip = skip
        self.closes = closes  # SQLite ended the transaction itself (an I/O error)
        self.armed = True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self.armed:
            if self.skip:
                self.skip -= 1
                return self.conn.execute(sql, *args)
            self.armed = False
            if self.closes:
                self.conn.execute("ROLLBACK")
            raise sqlite3.OperationalError(self.message)
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


async def test_a_failed_commit_rolls_back_and_tells_every_caller(driver: SQLiteDriver) -> None:
    writer = driver._writer
    assert writer is not None and writer.conn is not None
    real = writer.conn
    wrapped = _CommitFails(real, skip=1)  # the gate's commit goes through
    await _on_thread(driver, lambda c: setattr(writer, "conn", wrapped))
    try:
        outcomes = await run_batch(driver, [(insert(1), True), (insert(2), True)])
    finally:
        await _on_thread(driver, lambda c: setattr(writer, "conn", real))
    assert not wrapped.armed
    for outcome in outcomes:
        assert isinstance(outcome, durable.StorageUnavailable), outcome
        assert outcome.outcome_unknown is False
    assert not real.in_transaction
    assert await keys(driver) == []
    assert await driver.run(insert(3)) == 3


async def test_an_io_error_during_commit_leaves_the_outcome_unknown(
    driver: SQLiteDriver,
) -> None:
    """COMMIT fails with an I/O error and SQLite has closed the transaction:
    the log may or may not be on disk, so callers get outcome_unknown=True
    (the engine reads back rather than guesses)."""
    writer = driver._writer
    assert writer is not None and writer.conn is not None
    real = writer.conn
    wrapped = _CommitFails(real, skip=1, message="disk I/O error", closes=True)
    await _on_thread(driver, lambda c: setattr(writer, "conn", wrapped))
    try:
        outcomes = await run_batch(driver, [(insert(1), True), (insert(2), True)])
    finally:
        await _on_thread(driver, lambda c: setattr(writer, "conn", real))
    for outcome in outcomes:
        assert isinstance(outcome, durable.StorageUnavailable), outcome
        assert outcome.outcome_unknown is True
    assert await driver.run(insert(3)) == 3


async def test_a_caller_cancelled_while_its_program_runs_gets_its_value(
    driver: SQLiteDriver,
) -> None:
    gate = Gate()
    got: list[Any] = []

    async def caller(scope: anyio.CancelScope) -> None:
        with scope:
            got.append(await driver.run(gate.program, write=False))
            await anyio.sleep(5)
            got.append("not reached")

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller, scope)
        await anyio.to_thread.run_sync(gate.started.wait, 10)
        scope.cancel()
        await anyio.wait_all_tasks_blocked()  # cancelled, the caller still waits
        gate.release()
    assert got == [None]


async def test_programs_before_one_that_aborts_the_transaction_run_again(
    driver: SQLiteDriver,
) -> None:
    """INSERT OR ROLLBACK makes SQLite abandon the whole transaction: the
    programs that had succeeded in it did not commit, so they run again (from
    their factories) in a new transaction; only the culprit fails."""
    await driver.run(insert(100))
    calls = {"n": 0}

    def counted(tx: Tx) -> Program[int]:
        calls["n"] += 1
        yield ex("INSERT INTO t (k, v) VALUES (1, 'a')")
        return 1

    def aborts(tx: Tx) -> Program[None]:
        yield ex("INSERT OR ROLLBACK INTO t (k, v) VALUES (100, 'dup')")

    outcomes = await run_batch(driver, [(counted, True), (aborts, True), (insert(3), True)])
    assert outcomes[0] == 1 and outcomes[2] == 3
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert calls["n"] == 2
    assert await keys(driver) == [1, 3, 100]


async def test_close_finishes_the_queued_calls(tmp_path: Path) -> None:
    drv = SQLiteDriver(f"sqlite:///{tmp_path / 'c.db'}")
    await drv.open()
    await drv.run(lambda tx: _create())
    gate = Gate()
    outcomes: list[Any] = []

    async def one(k: int) -> None:
        outcomes.append(await drv.run(insert(k)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.hold, drv)
        await anyio.to_thread.run_sync(gate.started.wait, 10)
        for k in range(5):
            tg.start_soon(one, k)
        await queued_behind_gate(drv, gate, 5)
        tg.start_soon(drv.close)
        await anyio.sleep(0.01)
        with pytest.raises(durable.StorageClosed):
            await drv.run(insert(99))
        gate.release()
    assert sorted(outcomes) == list(range(5))
    assert drv._writer is None
    with pytest.raises(durable.StorageClosed):
        await drv.run(insert(99))
    conn = sqlite3.connect(tmp_path / "c.db")
    assert [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k")] == list(range(5))
    conn.close()


async def _spin(stop: anyio.Event) -> None:
    """Keep the loop from ever being idle: a callback is always ready."""
    while not stop.is_set():
        await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_programs_queued_over_a_busy_loop_turn_are_handed_over_together(
    driver: SQLiteDriver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On asyncio, programs queued while other callbacks are ready wait for
    the loop's turn to end and reach the database thread together: one drain,
    one transaction (each loop round between them released the GIL, where the
    thread used to take what was queued so far)."""
    import durable_sqlite

    monkeypatch.setattr(durable_sqlite, "HANDOVER_WAIT", 30.0)  # only the turn's end here
    before = driver.stats

    async def one(k: int) -> None:
        for _ in range(k):  # queued over 20 loop rounds, not in one
            await anyio.lowlevel.checkpoint()
        assert await driver.run(insert(k)) == k

    async with anyio.create_task_group() as tg:
        for k in range(20):
            tg.start_soon(one, k)
    after = driver.stats
    # one transaction for the twenty: programs handed over in two drains would
    # have made two. (Not the drains themselves: on a loaded box a call of the
    # driver's own, the log's upkeep, can have a drain of its own in between.)
    assert after.transactions - before.transactions == 1
    assert after.programs - before.programs == 20
    assert await keys(driver) == list(range(20))


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_a_loop_that_is_never_idle_still_hands_its_programs_over(
    driver: SQLiteDriver,
) -> None:
    """A loop with a callback always ready never ends its turn: its programs
    go to the database thread after `HANDOVER_WAIT` all the same."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_spin, stop)
        with anyio.fail_after(10):
            for k in range(3):
                assert await driver.run(insert(k)) == k
        stop.set()
    assert await keys(driver) == [0, 1, 2]


@pytest.mark.parametrize("anyio_backend", ["asyncio"], indirect=True)
async def test_close_serves_the_programs_still_held_for_the_loop(tmp_path: Path) -> None:
    """Programs held for the end of the loop's turn when close() is called
    are handed over first: served, not refused as closed; and a caller
    cancelled while its program is held still gets its outcome (the program
    runs whole, the cancellation arrives at its next checkpoint)."""
    drv = SQLiteDriver(f"sqlite:///{tmp_path / 'h.db'}")
    await drv.open()
    await drv.run(lambda tx: _create())
    outcomes: list[Any] = []
    reached_after: list[int] = []

    async def one(k: int, scope: anyio.CancelScope) -> None:
        with scope:
            outcomes.append(await drv.run(insert(k)))
            await anyio.sleep(0.5 if k == 1 else 0)
            reached_after.append(k)

    stop = anyio.Event()
    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_spin, stop)
        tg.start_soon(one, 1, scope)
        tg.start_soon(one, 2, anyio.CancelScope())
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        handover = drv._handover
        assert handover is not None and len(handover.pending) == 2  # held, not queued
        scope.cancel()
        await drv.close()
        stop.set()
    assert sorted(outcomes) == [1, 2]
    assert reached_after == [2]  # 1 was cancelled at its first checkpoint after the wait
    conn = sqlite3.connect(tmp_path / "h.db")
    assert [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k")] == [1, 2]
    conn.close()


def _writer_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "durable-sqlite")


async def test_opening_and_closing_many_drivers_leaves_no_thread(tmp_path: Path) -> None:
    before = _writer_threads()
    for i in range(30):
        drv = SQLiteDriver(f"sqlite:///{tmp_path / f'm{i % 3}.db'}")
        await drv.open()
        await drv.run(lambda tx: _pages(), write=False)
        await drv.close()
        await drv.close()  # idempotent
    assert _writer_threads() == before


async def test_a_driver_that_fails_to_open_leaves_no_thread(tmp_path: Path) -> None:
    before = _writer_threads()
    drv = SQLiteDriver(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with pytest.raises(durable.ConfigurationError):
        await drv.open()
    with anyio.fail_after(10):
        while _writer_threads() != before:
            await anyio.sleep(0.01)


async def test_a_cancelled_callers_queued_program_runs_whole(driver: SQLiteDriver) -> None:
    """Cancelling a caller whose program is queued (or running) does not
    abandon it: as with the thread hop before, the program runs whole, the
    caller gets its value, and the cancellation arrives at its next
    checkpoint."""
    gate = Gate()
    got: list[int] = []
    reached_after = False

    async def caller(scope: anyio.CancelScope) -> None:
        nonlocal reached_after
        with scope:
            got.append(await driver.run(insert(42)))
            await anyio.sleep(5)
            reached_after = True

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(gate.hold, driver)
        await anyio.to_thread.run_sync(gate.started.wait, 10)
        tg.start_soon(caller, scope)
        await queued_behind_gate(driver, gate, 1)
        scope.cancel()
        await anyio.wait_all_tasks_blocked()  # cancelled, the caller still waits
        gate.release()
    assert got == [42]
    assert not reached_after
    assert await keys(driver) == [42]


async def test_watch_reads_data_version_through_the_thread(
    driver: SQLiteDriver, tmp_path: Path
) -> None:
    """Another process's commit is noticed (data_version, read on the
    database thread) and published as Wake(("any",))."""
    seen: list[Wake] = []
    driver.hub.subscribe(seen.append)
    read = driver._data_version
    baseline = threading.Event()  # set on the database thread once a version was read

    def reading(conn: sqlite3.Connection | None) -> int | None:
        version = read(conn)
        if version is not None:
            baseline.set()
        return version

    driver._data_version = reading  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(driver.watch)
        # the other process commits only once the watch holds a version to compare
        # with (a fixed pause lost that race on a loaded machine)
        with anyio.fail_after(10):
            while not baseline.is_set():
                await anyio.sleep(0.01)
        other = sqlite3.connect(tmp_path / "w.db", isolation_level=None)
        other.execute("INSERT INTO t (k, v) VALUES (1, 'other')")
        other.close()
        with anyio.fail_after(10):
            while Wake(("any",)) not in seen:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


@workflow.defn
async def double(x: int) -> int:
    return x * 2


async def test_a_workflow_client_on_the_batched_driver(tmp_path: Path) -> None:
    """End to end through durable.connect: many runs started at once."""
    async with durable.connect(f"sqlite:///{tmp_path / 'e.db'}") as client:
        async with durable.Worker(client, workflows=[double], poll_interval=0.05):
            results: list[int] = []

            async def one(i: int) -> None:
                results.append(await client.execute(double, i, id=f"d-{i}"))

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for i in range(20):
                        tg.start_soon(one, i)
        assert sorted(results) == [i * 2 for i in range(20)]
        stats = client.driver.stats  # type: ignore[attr-defined]
        assert stats.programs > stats.transactions


