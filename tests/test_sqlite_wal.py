"""The SQLite write-ahead log stays bounded under writes that never pause.

Issue 28: the ``-wal`` file grew by ~105 KB per run forever (158 MB after
1,500 runs), because the passive checkpoints ran beside the one writer and
the log was never started over. These tests write hundreds of runs on
virtual time, with and without readers polling all the time, and hold the
file under the limit; the policy's own rules (when a reset runs, what a
reader that never lets go does, the URL option, the figures in
``driver.stats`` and ``/metrics``) are pinned on real files with small
limits. Nothing here is timed: sizes and counters only.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from durable_sqlite import SQLiteDriver
from durable_sqlite._checkpoints import Checkpoints, parse_size

import durable
from durable import activity, workflow
from durable.driver import Program, Tx, ex
from durable.http import create_app
from durable.program import q1
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

MiB = 2**20


@activity.defn
async def tick(n: int) -> int:
    return n + 1


@workflow.defn
async def minutely(n: int) -> int:
    """What a one-minute schedule's run does: a step, a minute, a step
    (~60 KB of log per run: 120 MB over 2,000 runs when nothing bounds it)."""
    n = await workflow.execute_local_activity(tick, n)
    await workflow.sleep(60)
    return await workflow.execute_local_activity(tick, n)


class WalWatch:
    """The largest size the -wal file was seen at, and how often it shrank
    (trimmed to journal_size_limit, 5/8 of the limit, when the log started
    over from past it)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(f"{path}-wal")
        self.largest = 0
        self.shrank = 0
        self._last = 0

    def look(self) -> int:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < self._last:
            self.shrank += 1
        self._last = size
        self.largest = max(self.largest, size)
        return size


class PollingReader:
    """A reader in another thread, on a connection of its own (as a control
    plane in another process would be): list and describe, all the time."""

    def __init__(self, url: str, watch: WalWatch) -> None:
        self.url = url
        self.watch = watch
        self.reads = 0
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="test-wal-reader")

    async def _poll(self) -> None:
        async with durable.connect(self.url) as client:
            while not self._stop.is_set():
                runs = await client.list(limit=20)
                for run in runs[:3]:
                    await client.get_handle(run["workflow_id"]).describe()
                self.reads += 1
                self.watch.look()
                await anyio.sleep(0.001)  # a breath for the GIL, not a pause

    def _main(self) -> None:
        try:
            anyio.run(self._poll)
        except BaseException as exc:  # reported by the test
            self.failures.append(exc)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)


@pytest.fixture
def readers() -> Iterator[list[PollingReader]]:
    """Polling readers the test starts; stopped at the end whatever happens."""
    started: list[PollingReader] = []
    yield started
    for reader in started:
        reader.stop()


#: the busy tests' log limit: an eighth of the default, so that the log their
#: 500 runs write (measured: 13-20 resets, each of a log past a quarter of the
#: limit, 2 MiB: 26 MB or more) is three times the limit: unbounded, it would
#: pass it
LIMIT = "8MiB"
LIMIT_BYTES = 8 * 2**20
#: the busy tests' runs
RUNS = 500


async def _runs_without_a_pause(env: TimeSkippingEnvironment, watch: WalWatch, total: int,
                                *, describe: bool) -> None:
    """`total` runs, 20 at a time, each started as soon as one ends."""
    limiter = anyio.Semaphore(20)

    async def one(i: int) -> None:
        async with limiter:
            handle = await env.client.start(minutely, i, id=f"m-{i}")
            assert await handle.result() == i + 2  # a long poll until it closes
            if describe:
                assert (await handle.describe())["status"] == "completed"
                await env.client.list(limit=10)
        watch.look()

    async with env.worker(workflows=[minutely], activities=[tick]):
        async with anyio.create_task_group() as tg:
            for i in range(total):
                tg.start_soon(one, i)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_runs_without_a_pause_keep_the_log_under_the_limit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy.db"
    watch = WalWatch(path)
    async with TimeSkippingEnvironment(f"sqlite:///{path}?wal_limit={LIMIT}") as env:
        await _runs_without_a_pause(env, watch, RUNS, describe=False)
        stats = env.client.driver.stats
    # 26 MB of log or more written in all, three times the limit: started over
    # more than once by a reset past `reset_at`, a quarter of the limit (the
    # file is rewritten in place after one, not trimmed below half the limit:
    # it need not shrink)
    assert stats.wal_resets >= 2, stats
    assert stats.wal_resets_blocked == 0
    assert 0 < watch.largest < LIMIT_BYTES, watch.largest


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_log_stays_bounded_with_readers_polling_all_the_time(
    tmp_path: Path, readers: list[PollingReader],
) -> None:
    """The same, while a reader on another connection (another thread)
    lists and describes runs nonstop, every run is long-polled to its end
    and described once it closed: readers never keep the log from being
    started over."""
    path = tmp_path / "read.db"
    url = f"sqlite:///{path}?wal_limit={LIMIT}"
    watch = WalWatch(path)
    async with TimeSkippingEnvironment(url) as env:
        reader = PollingReader(url, watch)
        readers.append(reader)
        reader.start()
        await _runs_without_a_pause(env, watch, RUNS, describe=True)
        stats = env.client.driver.stats
        reader.stop()
    assert not reader.failures, reader.failures
    assert reader.reads > 100  # it really read all along
    assert stats.wal_resets >= 2, stats  # started over more than once (above)
    # A reset waits RESET_WAIT (50 ms) for readers: on a loaded machine one of
    # the reader's read transactions can outlast that (its thread starved of
    # the GIL mid-read), and that reset is given up and tried again later
    # (the policy: CI saw 1 blocked of 10). What must hold: resets are not
    # kept from succeeding, and the file stays bounded.
    assert stats.wal_resets > stats.wal_resets_blocked, stats
    assert 0 < watch.largest < LIMIT_BYTES, watch.largest


# ---------------------------------------------------------------- the policy


def _create() -> Program[None]:
    yield ex("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")


def _rows(start: int, count: int) -> Any:
    def program(tx: Tx) -> Program[None]:
        for k in range(start, start + count):
            yield ex("INSERT INTO t (k, v) VALUES (?, ?)", k, os.urandom(400).hex())

    return program


async def _write_until(driver: SQLiteDriver, size: int, start: int = 0) -> int:
    """Insert rows until the -wal file has reached `size` bytes; the next key."""
    k = start
    with anyio.fail_after(60):
        while driver.stats.wal_bytes < size:
            await driver.run(_rows(k, 20))
            k += 20
    return k


async def _write_until_reset(driver: SQLiteDriver, start: int = 0,
                             watch: WalWatch | None = None) -> int:
    """Insert rows until the log has been started over once (the reset runs
    on the database thread after a drain: the next call waits for it),
    `watch` looking at the file after each; the next key."""
    k = start
    resets = driver.stats.wal_resets
    with anyio.fail_after(60):
        while driver.stats.wal_resets == resets:
            await driver.run(_rows(k, 20))
            k += 20
            if watch is not None:
                watch.look()
    return k


async def test_a_small_limit_on_the_url_bounds_the_file(tmp_path: Path) -> None:
    """`?wal_limit=1MiB`: the log is started over past 256 KiB (at once past
    512 KiB; a file past 640 KiB is trimmed back to it: journal_size_limit), so
    the file stays under 1 MiB through 8 MiB of writes; the figures say so."""
    path = tmp_path / "small.db"
    driver = SQLiteDriver(f"sqlite:///{path}?wal_limit=1MiB", checkpoint_every=20)
    assert driver.wal_limit == MiB
    watch = WalWatch(path)
    await driver.open()
    try:
        await driver.run(lambda tx: _create())
        for k in range(0, 8000, 20):  # 8000 rows x ~1 KB
            await driver.run(_rows(k, 20))
            watch.look()
        stats = driver.stats
    finally:
        await driver.close()
    assert watch.largest < MiB, watch.largest
    assert stats.wal_resets >= 8 and stats.wal_resets_blocked == 0
    assert stats.checkpoints >= 1  # the passive ones still run, off the thread
    assert stats.last_wal_reset_at is not None and stats.last_checkpoint_at is not None
    assert stats.last_checkpoint_at >= stats.last_wal_reset_at - 1


async def test_after_a_reset_the_log_rewrites_the_file_in_place(tmp_path: Path) -> None:
    """Once the file has held a log as long as a reset lets it grow, later
    logs rewrite it in place: it is neither trimmed nor grown again, so a
    commit never has to make a new file size durable (at FULL, its fdatasync
    would commit the file system's journal too: 350 µs against 185 µs here).
    Before, the file was trimmed to an eighth of the limit at every reset and
    grew again, at each of them."""
    path = tmp_path / "place.db"
    driver = SQLiteDriver(f"sqlite:///{path}?wal_limit=1MiB", checkpoint_every=20)
    watch = WalWatch(path)
    await driver.open()
    try:
        await driver.run(lambda tx: _create())
        k = await _write_until_reset(driver)
        for _ in range(6):
            k = await _write_until_reset(driver, k, watch)
        stats = driver.stats
    finally:
        await driver.close()
    # never trimmed (before: at each reset), so grown only where a cycle's log
    # ran longer than any before it (a forced reset comes by 512 KiB)
    assert watch.shrank == 0, (watch.shrank, stats)
    assert 0 < watch.largest < MiB, watch.largest
    assert stats.wal_resets >= 7 and stats.wal_resets_blocked == 0, stats


async def test_at_full_the_file_is_written_ahead_of_the_log(tmp_path: Path) -> None:
    """With ``synchronous=FULL`` each commit fsyncs, and one that grows the
    file pays for its new size too: so once the log reaches the file's end,
    the file is extended by zeros ahead of it (1 MiB at a time here), and
    the commits that follow rewrite those blocks. At NORMAL, where a commit
    syncs nothing, it is not."""
    sizes: dict[str, set[int]] = {}
    for mode in ("FULL", "NORMAL"):
        path = tmp_path / f"{mode}.db"
        driver = SQLiteDriver(f"sqlite:///{path}?synchronous={mode}&wal_limit=16MiB",
                              checkpoint_every=10**6)
        watch = WalWatch(path)
        await driver.open()
        try:
            await driver.run(lambda tx: _create())
            seen: set[int] = set()
            k = 0
            while watch.look() < 3 * MiB:  # ~150 commits of ~20 KB
                await driver.run(_rows(k, 20))
                k += 20
                seen.add(watch.look())
            checkpoints = driver._writer.checkpoints  # type: ignore[union-attr]
            assert checkpoints is not None
            extended = checkpoints.extended
            rows = await driver.run(lambda tx: _count())
        finally:
            await driver.close()
        assert rows == k
        sizes[mode] = seen
        if mode == "FULL":
            assert extended >= 2, extended
            # the file's size changed at the extensions and at the commits that
            # reached its end (one before each), not at the other ~150
            assert len(seen) <= 2 * extended + 2, (len(seen), extended)
        else:
            assert extended == 0
            assert len(seen) > 100  # every commit grew the file
    assert len(sizes["FULL"]) < len(sizes["NORMAL"]) // 10


def _count() -> Program[int]:
    row = yield q1("SELECT count(*) AS n FROM t")
    return int(row["n"])


_WRITER = """
import anyio, os, signal, sys
sys.path[:0] = sys.argv[3:]
from durable_sqlite import SQLiteDriver
from durable.driver import ex

def rows(start):
    def program(tx):
        for k in range(start, start + 20):
            yield ex("INSERT INTO t (k, v) VALUES (?, ?)", k, os.urandom(400).hex())
    return program

def create(tx):
    yield ex("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")

async def main():
    driver = SQLiteDriver(f"sqlite:///{sys.argv[1]}?synchronous=FULL&wal_limit=16MiB")
    await driver.open()
    await driver.run(create)
    for k in range(0, int(sys.argv[2]), 20):
        await driver.run(rows(k))
    print(driver._writer.checkpoints.extended, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close: the log is what recovery reads

anyio.run(main)
"""


def test_a_log_written_ahead_is_read_back_whole_after_a_kill(tmp_path: Path) -> None:
    """SIGKILLed after its last commit, with the file written ahead of the
    log: the next open recovers every committed row and nothing else (the
    zeros past the log are not frames), and the database checks whole."""
    path = tmp_path / "killed.db"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(path), "3000", str(root), str(root / "drivers")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert int(done.stdout.split()[-1]) >= 1  # it had written ahead
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size > 0  # the log was left behind, not checkpointed away
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*), max(k) FROM t").fetchone() == (3000, 2999)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


async def test_a_reader_that_never_lets_go_is_reported_then_the_log_shrinks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A read transaction in another connection that stays open keeps the
    log from being started over: the file passes the limit, the resets are
    counted as blocked and one warning says why; once the reader ends, the
    next reset starts the log over and trims the file."""
    path = tmp_path / "held.db"
    driver = SQLiteDriver(f"sqlite:///{path}?wal_limit=1MiB", checkpoint_every=20)
    await driver.open()
    await driver.run(lambda tx: _create())
    await driver.run(_rows(0, 1))
    reader = sqlite3.connect(path, isolation_level=None)
    caplog.set_level(logging.INFO, logger="durable.sqlite")
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM t").fetchall()  # holds its snapshot
        k = await _write_until(driver, 2 * MiB, start=1)
        held = driver.stats
        assert held.wal_resets_blocked >= 1, held
        warnings = [r for r in caplog.records if "sqlite_wal_over_limit" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        reader.execute("COMMIT")
        with anyio.fail_after(60):
            while driver.stats.wal_bytes >= MiB:
                await driver.run(_rows(k, 20))
                k += 20
        after = driver.stats
    finally:
        reader.close()
        await driver.close()
    assert after.wal_resets > held.wal_resets
    assert any("sqlite_wal_back_under_limit" in r.getMessage() for r in caplog.records)


def _connection(path: Path, checkpoints: Checkpoints) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    checkpoints.configure(conn)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    return conn


def _grow(conn: sqlite3.Connection, checkpoints: Checkpoints, size: int) -> None:
    k = conn.execute("SELECT coalesce(max(k), 0) + 1 FROM t").fetchone()[0]
    while checkpoints.wal_bytes() < size:
        conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (k, os.urandom(400).hex()))
        checkpoints.committed(1)
        k += 1


def test_a_reset_waits_for_a_quiet_point_unless_the_log_is_past_half_the_limit(
    tmp_path: Path,
) -> None:
    """Past a quarter of the limit the database thread starts the log over
    only when nothing is queued; past half, at the end of the next drain
    whatever is queued."""
    checkpoints = Checkpoints(str(tmp_path / "q.db"), busy_timeout=7, every=10**9,
                              limit=4 * MiB)
    conn = _connection(tmp_path / "q.db", checkpoints)
    try:
        _grow(conn, checkpoints, checkpoints.reset_at)
        checkpoints.after_drain(conn, quiet=False)
        assert checkpoints.resets == 0
        checkpoints.after_drain(conn, quiet=True)
        assert checkpoints.resets == 1
        conn.execute("INSERT INTO t (v) VALUES ('after')")  # starts over, trims
        checkpoints.committed(1)
        assert checkpoints.wal_bytes() <= checkpoints.trim_to
        _grow(conn, checkpoints, checkpoints.force_at)
        checkpoints.after_drain(conn, quiet=False)
        assert checkpoints.resets == 2
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 7000  # restored
    finally:
        conn.close()


def test_while_a_reset_is_due_passive_checkpoints_come_four_times_as_often(
    tmp_path: Path,
) -> None:
    """Whenever the reset comes (quiet, or forced past half the limit), the
    log a passive checkpoint has not copied is at most a quarter of
    `checkpoint_every` programs' (the reset's time grows with it)."""
    checkpoints = Checkpoints(str(tmp_path / "p.db"), busy_timeout=7, every=10**9,
                              limit=4 * MiB)
    conn = _connection(tmp_path / "p.db", checkpoints)
    try:
        _grow(conn, checkpoints, checkpoints.reset_at)
        checkpoints.after_drain(conn, quiet=False)  # due, not quiet: no reset
        checkpoints.every = 8
        checkpoints.committed(1)  # past 8 / 4 programs since the last one
        checkpoints.join()
        assert (checkpoints.checkpoints, checkpoints.resets) == (1, 0)
        _grow(conn, checkpoints, checkpoints.force_at)
        checkpoints.after_drain(conn, quiet=False)
        assert checkpoints.resets == 1 and checkpoints.checkpoints > 1
    finally:
        conn.close()


@pytest.mark.parametrize("text, size", [
    ("67108864", 64 * MiB), ("64MiB", 64 * MiB), ("64mib", 64 * MiB), ("64MB", 64 * 10**6),
    ("1GiB", 2**30), ("2048KiB", 2 * MiB), (" 3 MiB ", 3 * MiB),
])
def test_wal_limit_forms(text: str, size: int) -> None:
    assert parse_size(text, "wal_limit") == size


@pytest.mark.parametrize("query, message", [
    ("wal_limit=lots", "is not a size"),
    ("wal_limit=64MiBs", "is not a size"),
    ("wal_limit=-5MiB", "is not a size"),
    ("wal_limit=1.5MiB", "is not a size"),
    ("wal_limit=", "is not a size"),
    ("wal_limit=512KiB", "too small: at least 1MiB"),
    ("wal_limt=64MiB", "unknown options ['wal_limt']"),
])
def test_a_bad_wal_limit_is_refused_naming_the_fix(query: str, message: str) -> None:
    with pytest.raises(durable.ConfigurationError) as info:
        SQLiteDriver(f"sqlite:///x.db?{query}")
    assert message in str(info.value)


async def test_in_memory_there_is_no_log_and_no_figures() -> None:
    driver = SQLiteDriver("sqlite://:memory:?wal_limit=8MiB")
    await driver.open()
    try:
        await driver.run(lambda tx: _create())
        await driver.run(_rows(0, 50))
        stats = driver.stats
        assert (stats.wal_bytes, stats.checkpoints, stats.wal_resets) == (0, 0, 0)
        assert stats.last_checkpoint_at is None
        assert driver.gauges() == {}
    finally:
        await driver.close()


async def test_metrics_export_the_log_size_and_the_last_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with durable.connect(f"sqlite:///{path}?wal_limit=1MiB",
                               checkpoint_every=20) as client:
        driver = client.driver
        assert isinstance(driver, SQLiteDriver)
        app = create_app(client, {"t": "viewer"}, environ={})
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            first = (await http.get("/metrics", headers={"Authorization": "Bearer t"})).text
            assert "durable_sqlite_wal_bytes " in first
            assert "durable_sqlite_last_wal_reset_timestamp_seconds" not in first
            await driver.run(lambda tx: _create())
            await _write_until_reset(driver)
            stats = driver.stats
            assert stats.last_wal_reset_at is not None
            text = (await http.get("/metrics", headers={"Authorization": "Bearer t"})).text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines()
                 if line.startswith("durable_sqlite_"))
    assert float(lines["durable_sqlite_wal_bytes"]) > 0
    assert float(lines["durable_sqlite_last_wal_reset_timestamp_seconds"]) == pytest.approx(
        stats.last_wal_reset_at)
    assert float(lines["durable_sqlite_last_checkpoint_timestamp_seconds"]) >= float(
        lines["durable_sqlite_last_wal_reset_timestamp_seconds"])
