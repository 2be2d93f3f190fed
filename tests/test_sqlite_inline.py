"""Brief programs on the loop's own thread (SQLite, ``synchronous=NORMAL``),
side by side with the database thread's lane.

`drivers/durable_sqlite/_inline.py`: a brief write (a worker's step commit,
a client's start) runs on the caller's thread when the loop has nothing else
ready, nothing of the driver's is in flight and the connection and the write
lock are free; a brief read (a run by its id) needs only nothing in flight
(decision (ba)); else each goes through the database thread as before. Each test runs the same
workflow on both lanes (the thread's forced by making `Inline.loop_idle`
answer None) and compares what storage recorded, or pins what the lane must
never do: wait for another process's write lock on the loop, starve the
loop's timers, or run with ``synchronous=FULL``. Counters, never timings.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio
from comparable_history import comparable_history
from durable_sqlite import SQLiteDriver, _inline
from durable_sqlite._inline import Inline
from durable_sqlite._writer import Call, Writer

import durable
from durable import activity, workflow
from durable.driver import brief, q1

pytestmark = pytest.mark.anyio

#: per test key: the ticks of the loop's timer task each step saw
TICKS: dict[str, list[int]] = {}
TICKER = {"ticks": 0}
#: per test key: the event set by the step that stops its worker
STOP_AT: dict[str, anyio.Event] = {}
#: per test key: a connection of its own that takes the write lock at step 2
LOCK: dict[str, sqlite3.Connection] = {}


@activity.defn(name="inline_step")
async def step(key: str, i: int) -> int:
    TICKS.setdefault(key, []).append(TICKER["ticks"])
    event = STOP_AT.get(key)
    if event is not None and i == 5:
        event.set()
    blocker = LOCK.get(key)
    if blocker is not None and i == 2:
        blocker.execute("BEGIN IMMEDIATE")
    return i * 2


@workflow.defn(name="inline_steps")
async def steps(key: str, n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(step, key, i)
    return total


@workflow.defn(name="inline_cancelled")
async def cancelled(key: str) -> str:
    try:
        await workflow.execute_local_activity(step, key, 1)
        await workflow.wait_condition(lambda: False)
        return "never"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_local_activity(step, key, 2)
                await workflow.execute_local_activity(step, key, 3)


@workflow.defn(name="inline_timed_out")
async def timed_out(key: str) -> int:
    for i in range(3):
        await workflow.execute_local_activity(step, key, i)
    await workflow.wait_condition(lambda: False)
    return 0


WORKFLOWS: list[Any] = [steps, cancelled, timed_out]


@contextmanager
def thread_lane(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every commit goes through the database thread, as before the inline lane."""
    with monkeypatch.context() as m:
        m.setattr(Inline, "loop_idle", lambda self, reading=False: None)
        yield


@contextmanager
def as_is(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield


def _driver(client: durable.Client) -> SQLiteDriver:
    driver = client.driver
    assert isinstance(driver, SQLiteDriver)
    return driver


async def _until(condition: Any) -> None:
    with anyio.fail_after(30):
        while not await condition():
            await anyio.sleep(0.01)


async def test_steps_record_the_same_history_on_either_lane(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "same"
    histories = []
    for name, make_lane in (("inline", as_is), ("thread", thread_lane)):
        with make_lane(monkeypatch):
            async with durable.connect(f"sqlite:///{tmp_path / name}.db") as client:
                driver = _driver(client)
                async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
                    before = driver.stats.inline
                    assert await client.execute(steps, key, 20, id=key) == 380
                    inline = driver.stats.inline - before
                histories.append(await comparable_history(client.get_handle(key), key))
        if name == "inline":
            # most of the 21 commits (20 steps, the close) on a quiet box; one
            # coming while something else is ready to run (a timer of the
            # worker's, on a loaded box) goes through the thread
            assert inline >= 1
        else:
            assert inline == 0
    assert histories[0] == histories[1]


async def test_synchronous_full_never_commits_on_the_loop(tmp_path: Path) -> None:
    """A commit that syncs takes 0.2 ms to milliseconds: the loop never waits for one."""
    async with durable.connect(f"sqlite:///{tmp_path / 'full.db'}?synchronous=FULL") as client:
        async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
            assert await client.execute(steps, "full", 10, id="full") == 90
        assert _driver(client).stats.inline == 0
        assert _driver(client).stats.transactions > 10


def _busy_timeout() -> Any:
    row = yield q1("PRAGMA busy_timeout")
    return int(row[0])


async def test_steps_on_the_loop_set_the_busy_timeout_once_and_the_thread_puts_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit on the loop's thread runs with busy_timeout 0, the database
    thread's transactions with the driver's own. The connection keeps what
    was set last (`durable_sqlite._busy`): a run of steps on the loop sets it
    once, not twice a step, and the thread's next drain finds the driver's
    timeout back before its transaction runs. (That the thread then waits for
    a lock held elsewhere: the test below this one.)

    Counted against who used the connection, in order: a statement setting
    the timeout comes only where the user changes (the loop's lane after the
    thread's, or the other way round), so however many drains a loaded box
    puts between the steps, the count is bounded by those changes."""
    monkeypatch.setattr(Inline, "loop_idle",
                        lambda self, reading=False:
                        None if self.queued else sniffio.current_async_library())
    uses: list[str] = []  # "loop", "thread", or the PRAGMA sent, in order
    real_inline, real_drain = Writer.run_inline, Writer._drain

    def on_loop(self: Writer, call: Any) -> bool:
        uses.append("loop")
        return real_inline(self, call)

    def on_thread(self: Writer, batch: list[Any]) -> Any:
        if any(isinstance(item, Call) for item in batch):
            uses.append("thread")
        return real_drain(self, batch)

    monkeypatch.setattr(Writer, "run_inline", on_loop)
    monkeypatch.setattr(Writer, "_drain", on_thread)
    async with durable.connect(f"sqlite:///{tmp_path / 'busy.db'}",
                               busy_timeout=7) as client:
        driver = _driver(client)
        writer = driver._writer
        assert writer is not None and writer.conn is not None
        writer.conn.set_trace_callback(
            lambda sql: uses.append(sql) if sql.startswith("PRAGMA busy_timeout=") else None)
        async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
            before = driver.stats.inline
            assert await client.execute(steps, "busy", 20, id="busy") == 380
            assert driver.stats.inline - before >= 15  # (a loaded box sends a few to the thread)
            # the thread's next transaction: the driver's own timeout again
            assert await driver.run(lambda tx: _busy_timeout(), write=False) == 7000
    users = [u for u in uses if u in ("loop", "thread")]
    changes = sum(a != b for a, b in itertools.pairwise(users))
    pragmas = [u for u in uses if u.startswith("PRAGMA")]
    assert set(pragmas) <= {"PRAGMA busy_timeout=0", "PRAGMA busy_timeout=7000"}, pragmas
    assert len(pragmas) <= changes + 1, (changes, uses)
    # each one follows a change of user: 0 right after the loop took over, the
    # driver's own right after the thread did
    for i, use in enumerate(uses):
        if use.startswith("PRAGMA"):
            assert uses[i - 1] == ("loop" if use.endswith("=0") else "thread"), uses[:i + 1]


async def test_a_write_lock_held_elsewhere_sends_the_step_to_the_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another connection takes the write lock in the middle of a run (from the
    step's own activity): the step's commit is not waited for on the loop
    (busy_timeout 0 there) but queued for the database thread, which waits;
    the loop keeps serving meanwhile (this test's task polls on it), and the
    run completes once the lock is gone, each step recorded once. The loop
    counts as idle at every commit here, so that each one tries the loop's
    lane first whatever else a loaded box has ready."""
    key = "locked"
    path = tmp_path / "locked.db"
    monkeypatch.setattr(Inline, "loop_idle",
                        lambda self, reading=False:
                        None if self.queued else sniffio.current_async_library())
    async with durable.connect(f"sqlite:///{path}") as client:
        driver = _driver(client)
        inline = driver._inline
        assert inline is not None
        LOCK[key] = blocker = sqlite3.connect(path, isolation_level=None, timeout=5,
                                              check_same_thread=False)
        try:
            async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
                handle = await client.start(steps, key, 6, id=key)
                try:
                    await _until(lambda: _value(blocker.in_transaction and inline.queued > 0))
                    before = driver.stats
                finally:
                    if blocker.in_transaction:
                        blocker.execute("ROLLBACK")
                # tried on the loop and sent to the thread (or sent there at
                # once, if another program of the worker's was in flight)
                assert before.deferred <= 1
                with anyio.fail_after(30):
                    assert await handle.result() == 30
                after = driver.stats
        finally:
            LOCK.pop(key, None)
            blocker.close()
        assert after.transactions > before.transactions  # through the thread, once free
        assert after.deferred == before.deferred
        history = await handle.history()
    completed = [e for e in history if e.type.endswith("ActivityCompleted")]
    assert len(completed) == 6


async def _value(value: bool) -> bool:
    return value


def _count_pauses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The backends of every pause the driver makes from now on (each one a
    turn of the loop given after a commit on its thread)."""
    import durable_sqlite

    pauses: list[str] = []
    real_pause = durable_sqlite.pause

    async def counted(backend: str) -> None:
        pauses.append(backend)
        await real_pause(backend)

    monkeypatch.setattr(durable_sqlite, "pause", counted)
    return pauses


async def _events(handle: durable.WorkflowHandle, etype: str) -> bool:
    return any(e.type == etype for e in await handle.history())


async def test_the_loop_runs_its_timers_between_steps_committed_on_its_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of commits on the loop's thread gives the loop a turn once one
    of its timers fell due (or `PAUSE_EVERY` passed): the timer task ticks
    during the run, as it did while each commit waited for the database
    thread. Without that turn, a workflow of local steps that never suspend
    would hold the loop for its whole run.

    How many commits take the loop's lane depends on how often the ticker is
    ready when one is made: a ticker every 0.5 ms on a loaded box left 57 of
    300 there (CI, 12-07), so the ticker wakes every 2 ms and the test asks
    for a tenth of the steps on the lane, and for the pauses that gave the
    loop its turns, not for a share that only a quiet machine gives."""
    key = "ticks"
    TICKER["ticks"] = 0
    pauses = _count_pauses(monkeypatch)

    async def tick() -> None:
        while True:
            await anyio.sleep(0.002)
            TICKER["ticks"] += 1

    async with durable.connect(f"sqlite:///{tmp_path / 'ticks.db'}") as client:
        driver = _driver(client)
        async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                before = driver.stats.inline
                assert await client.execute(steps, key, 300, id=key) == 300 * 299
                tg.cancel_scope.cancel()
            assert driver.stats.inline - before >= 30
    assert pauses
    seen = TICKS[key]
    assert seen[-1] > seen[0]


@pytest.mark.parametrize("lane", ["inline", "thread"])
async def test_a_worker_stopped_between_steps_leaves_a_run_another_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lane: str) -> None:
    """The worker's host cancels it in the middle of a run of steps; a new
    worker replays and finishes it: every step recorded once, on either lane."""
    key = f"stopped-{lane}"
    make_lane = as_is if lane == "inline" else thread_lane
    with make_lane(monkeypatch):
        async with durable.connect(f"sqlite:///{tmp_path / 'stopped.db'}") as client:
            STOP_AT[key] = stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                worker = durable.Worker(client, workflows=WORKFLOWS, activities=[step],
                                        lease_seconds=0.5)
                tg.start_soon(worker.run)
                handle = await client.start(steps, key, 40, id=key)
                await stop.wait()
                tg.cancel_scope.cancel()
            del STOP_AT[key]
            async with durable.Worker(client, workflows=WORKFLOWS, activities=[step],
                                      lease_seconds=0.5):
                with anyio.fail_after(30):
                    assert await handle.result() == 40 * 39
            history = await handle.history()
    completed = [e.data.get("op") or e.data.get("op_id") for e in history
                 if e.type in ("ActivityCompleted", "LocalActivityCompleted")]
    assert len(completed) == len(set(completed)) == 40


async def test_cancellation_and_its_cleanup_record_alike_on_either_lane(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    histories = []
    for name, make_lane in (("inline", as_is), ("thread", thread_lane)):
        key = "cancel"
        with make_lane(monkeypatch):
            async with durable.connect(f"sqlite:///{tmp_path / name}.db") as client:
                async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
                    handle = await client.start(cancelled, key, id=key)
                    await _until(functools.partial(_events, handle, "ConditionScheduled"))
                    await handle.request_cancellation(reason="stop", cleanup_timeout=30)
                    with anyio.fail_after(30), pytest.raises(durable.WorkflowCancelled):
                        await handle.result()
                histories.append(await comparable_history(handle, key))
    assert histories[0] == histories[1]


async def _behind_the_lock(blocker: sqlite3.Connection, driver: SQLiteDriver,
                           call: Any, done: list[Any]) -> None:
    """Run `call` (a task that appends to `done` once its brief write landed)
    while `blocker` holds the write lock: the write is tried on the loop's
    thread, made afresh and queued (`deferred`), the loop is not held while it
    waits, and it lands once the lock is let go."""
    blocker.execute("BEGIN IMMEDIATE")
    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await _until(lambda: _value(driver.stats.deferred == 1))
        for _ in range(10):  # the loop is not held by the waiting write
            await anyio.lowlevel.checkpoint()
        assert not done and driver._inline is not None and driver._inline.queued == 1
        blocker.execute("ROLLBACK")


async def test_a_brief_write_meeting_the_lock_waits_in_the_thread_not_on_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the driver: the write lock is held by another connection; a brief
    write tried on the loop's thread is made afresh and queued (`deferred`),
    the loop keeps running (this task's own awaits), and the write commits
    once, through the thread, when the lock is gone."""
    monkeypatch.setattr(Inline, "loop_idle",
                        lambda self, reading=False:
                        None if self.queued else sniffio.current_async_library())
    path = tmp_path / "driver.db"
    driver = SQLiteDriver(f"sqlite:///{path}")
    await driver.open()
    blocker = sqlite3.connect(path, isolation_level=None, timeout=5)
    made = {"n": 0}

    def program(tx: Any) -> Any:
        made["n"] += 1
        yield durable.driver.ex("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        yield durable.driver.ex("INSERT INTO t VALUES (1)")
        return made["n"]

    outcome: list[int] = []

    async def write() -> None:
        outcome.append(await driver.run(brief(program)))

    try:
        await _behind_the_lock(blocker, driver, write, outcome)
        assert outcome == [1]  # its statements ran once: in the thread's transaction
        rows = await driver.run(lambda tx: (yield durable.driver.q("SELECT x FROM t")),
                                write=False)
        assert [tuple(r) for r in rows] == [(1,)]
        assert driver.stats.inline == 0 and driver.stats.deferred == 1
    finally:
        blocker.close()
        await driver.close()


def _jump_loop_clock(seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Move the running loop's clock `seconds` ahead: its timers due that much sooner."""
    if sniffio.current_async_library() == "trio":
        import attrs
        import trio

        statistics = trio.lowlevel.current_statistics  # (trio's clock is frozen: its reading)
        monkeypatch.setattr(trio.lowlevel, "current_statistics", lambda: attrs.evolve(
            statistics(), seconds_to_next_deadline=statistics().seconds_to_next_deadline
            - seconds))
        return
    import asyncio

    loop = asyncio.get_running_loop()
    now = loop.time
    monkeypatch.setattr(loop, "time", lambda: now() + seconds)


async def test_a_commit_on_the_loop_thread_yields_once_a_timer_of_the_loop_is_due(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A due timer (a host's ticker, a sleep ending) gets the loop after the
    next commit made on its thread, not only once `PAUSE_EVERY` passed: the
    trial of 12-06 measured a host's 10 ms ticker 1.1-2.2 ms late at the
    median beside a workflow of sequential steps, against 0.14-0.45 ms
    through the database thread. The loop's clock is moved, not waited for."""
    monkeypatch.setattr(_inline, "PAUSE_EVERY", 3600.0)  # only a due timer makes it yield
    pauses = _count_pauses(monkeypatch)

    def program(tx: Any) -> Any:
        yield durable.driver.ex("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        yield durable.driver.ex("INSERT INTO t VALUES (1)")

    driver = SQLiteDriver(f"sqlite:///{tmp_path / 'due.db'}")
    await driver.open()
    try:
        inline = driver._inline
        assert inline is not None
        await driver.run(brief(program))  # (the table; the first commit pauses: paused_at 0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 60)
            await anyio.wait_all_tasks_blocked()
            inline.paused_at = time.monotonic()
            before = driver.stats.inline, len(pauses)
            await driver.run(brief(program))
            assert (driver.stats.inline, len(pauses)) == (before[0] + 1, before[1])
            _jump_loop_clock(61, monkeypatch)  # the sleep's timer is due now
            await driver.run(brief(program))
            assert (driver.stats.inline, len(pauses)) == (before[0] + 2, before[1] + 1)
            tg.cancel_scope.cancel()
    finally:
        await driver.close()


@pytest.mark.parametrize("anyio_backend", ["trio"])  # asyncio's ready queue is whole
async def test_a_pause_on_trio_lets_the_tasks_woken_with_it_run_first() -> None:
    """trio runs the tasks made runnable together as one batch, in random
    order, and its `tasks_runnable` does not count what is left of the batch
    being run. After one checkpoint the pausing task ran before the tasks
    woken with it half the time, and its next commit found the loop "idle"
    while they (a due timer's, a socket's) had not run: they waited for the
    next pause. The 12-06 trial measured a 10 ms ticker 2.0-3.1 ms late at
    the median on trio beside sequential steps (0.13-0.15 through the
    thread). Twenty rounds: without the second checkpoint one fails with
    probability 1 - 2**-20."""
    async def peer(go: anyio.Event, ran: list[bool]) -> None:
        await go.wait()
        ran.append(True)

    for _ in range(20):
        go, ran = anyio.Event(), []
        async with anyio.create_task_group() as tg:
            tg.start_soon(peer, go, ran)
            await anyio.wait_all_tasks_blocked()
            go.set()  # runnable now: the pause's checkpoint puts this task beside it
            await _inline.pause("trio")
            assert ran


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_a_deadline_read_before_the_commit_makes_the_commit_pause() -> None:
    """On trio `Inline.loop_idle` reads the loop's statistics once and keeps
    when its next deadline falls; `pause_due` reuses it after the commit
    instead of a second statistics call. A deadline already passed (a sleep
    ended) makes the commit pause; one an hour away does not, until
    `PAUSE_EVERY` passed."""
    import trio

    for offset, expected in ((-1.0, True), (3600.0, False)):
        inline = Inline()
        with trio.CancelScope() as scope:  # noqa: ASYNC100 (entered past its deadline, it would
            scope.deadline = trio.current_time() + offset  # cancel, not register)
            assert inline.loop_idle() == "trio"
            inline.paused_at = time.monotonic()  # `PAUSE_EVERY` not passed yet
            assert inline.pause_due("trio") is expected


@contextmanager
def idle_lane(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The loop counts as idle whenever nothing of the driver's is in flight."""
    with monkeypatch.context() as m:
        m.setattr(Inline, "loop_idle", lambda self, reading=False:
                  None if self.queued else sniffio.current_async_library())
        yield


def _what(call: Call[Any]) -> str:
    """Which of the store's programs a call runs: "start", "read" (a run by
    its id) or "commit" (a worker's steps or close); else "other"."""
    name = getattr(call.factory, "__qualname__", "")
    for part, what in (("_start.", "start"), ("get_run.", "read"), ("commit.", "commit")):
        if part in name:
            return what
    return "other"


def _record_lanes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """From now on, every program call's lane in order: ("loop", what) for
    one made on the loop's thread, ("thread", what) for one queued (`_what`)."""
    lanes: list[tuple[str, str]] = []
    real_inline, real_queued = Writer.run_inline, SQLiteDriver._queued

    def on_loop(self: Writer, call: Call[Any]) -> bool:
        what = _what(call)  # (before: a call sent back to the queue is made afresh)
        made = real_inline(self, call)
        if made:
            lanes.append(("loop", what))
        return made

    async def queued(self: SQLiteDriver, writer: Writer, call: Call[Any]) -> Any:
        lanes.append(("thread", _what(call)))
        return await real_queued(self, writer, call)

    monkeypatch.setattr(Writer, "run_inline", on_loop)
    monkeypatch.setattr(SQLiteDriver, "_queued", queued)
    return lanes


async def test_a_start_and_the_reads_of_its_result_run_on_the_loop_like_its_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's start (one instance's rows by key) and the reads of a run by
    its id that `result()` makes are brief too (`durable.driver.brief`): with
    nothing of the driver's in flight, they skip the two hand-overs to the
    database thread, so an awaited short workflow waits for no thread at all.
    Side by side with the thread's lane: the same results and histories.
    The loop counts as idle whenever nothing of the driver's is in flight
    (`idle_lane`), so that the worker's own tasks, ready at the instant of a
    start, do not decide the lane here; a write then waits for an idle loop
    (`test_a_brief_read_runs_on_the_loop_while_other_callbacks_are_ready`)."""
    histories = []
    for name, make_lane in (("inline", idle_lane), ("thread", thread_lane)):
        with make_lane(monkeypatch), monkeypatch.context() as m:
            lanes = _record_lanes(m)
            async with durable.connect(f"sqlite:///{tmp_path / name}.db") as client:
                async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
                    for k in range(5):
                        handle = await client.start(steps, f"start{k}", 2, id=f"start{k}")
                        assert await handle.result() == 2
                    m.undo()
                histories.append([await comparable_history(client.get_handle(f"start{k}"),
                                                           f"start{k}") for k in range(5)])
        if name == "inline":
            assert {("loop", "start"), ("loop", "read"), ("loop", "commit")} <= set(lanes), lanes
        else:
            assert not any(lane == "loop" for lane, _ in lanes), lanes
            assert {"start", "read", "commit"} <= {what for _, what in lanes}, lanes
    assert histories[0] == histories[1]


async def test_a_brief_read_runs_on_the_loop_while_other_callbacks_are_ready(
        anyio_backend: str) -> None:
    """A brief read only needs nothing of the driver's in flight: it has no
    commit to share with the callers the loop is about to run. A brief write
    in the same instant goes to the database thread, whose group commit may
    share its transaction with theirs (decision (aj))."""
    driver = SQLiteDriver("sqlite://:memory:")
    await driver.open()
    try:
        def read(tx: Any) -> Any:
            row = yield q1("SELECT 1 AS one")
            return row["one"]

        def write(tx: Any) -> Any:
            yield durable.driver.ex("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
            return 1

        async def ready_soon() -> None:
            await anyio.lowlevel.checkpoint()

        for program, is_write in ((read, False), (write, True)):
            before = driver.stats.inline
            async with anyio.create_task_group() as tg:
                tg.start_soon(ready_soon)  # runnable, not run yet: the loop is not idle
                assert await driver.run(brief(program), write=is_write) == 1
            assert driver.stats.inline - before == (0 if is_write else 1), program
    finally:
        await driver.close()


async def test_a_start_refused_on_the_loop_raises_at_the_call_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The id-reuse refusal of a start made on the loop's thread is the
    caller's error, as from the thread; its transaction is rolled back."""
    async with durable.connect(f"sqlite:///{tmp_path / 'refused.db'}") as client:
        driver = _driver(client)
        async with durable.Worker(client, workflows=WORKFLOWS, activities=[step]):
            handle = await client.start(cancelled, "refused", id="refused")
            await _until(functools.partial(_events, handle, "ConditionScheduled"))
            with idle_lane(monkeypatch):
                before = driver.stats.inline
                with pytest.raises(durable.WorkflowAlreadyStarted, match="refused"):
                    await client.start(cancelled, "refused", id="refused")
                assert driver.stats.inline > before  # refused on the loop's thread
            await handle.request_cancellation(reason="done", cleanup_timeout=30)
            with anyio.fail_after(30), pytest.raises(durable.WorkflowCancelled):
                await handle.result()
        rows = await driver.run(
            lambda tx: (yield durable.driver.q("SELECT run_id FROM runs")), write=False)
        assert len(rows) == 1


async def test_a_start_meeting_a_write_lock_held_elsewhere_waits_in_the_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start tried on the loop's thread while another process holds the
    write lock is made afresh and queued (`deferred`): the loop keeps running
    (this task's own awaits) and the start lands once, when the lock is gone."""
    monkeypatch.setattr(Inline, "loop_idle", lambda self, reading=False:
                        None if self.queued else sniffio.current_async_library())
    path = tmp_path / "start_locked.db"
    async with durable.connect(f"sqlite:///{path}") as client:
        driver = _driver(client)
        blocker = sqlite3.connect(path, isolation_level=None, timeout=5)
        started: list[str] = []

        async def start() -> None:
            handle = await client.start(steps, "locked_start", 1, id="locked_start")
            started.append(handle.workflow_id)

        try:
            await _behind_the_lock(blocker, driver, start, started)
        finally:
            if blocker.in_transaction:
                blocker.execute("ROLLBACK")
            blocker.close()
        assert started == ["locked_start"]
        rows = await driver.run(
            lambda tx: (yield durable.driver.q("SELECT run_id FROM runs")), write=False)
        assert len(rows) == 1
