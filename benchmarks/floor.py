"""The physical floor of this machine: raw commits with no workflow engine around them.

Every figure `benchmarks/run.py` reports is also shown as its distance to the
floor measured in the same run, so that "x ms per step" reads as "n times
one raw commit plus one thread hop".  A step of either engine writes at
least one transaction, and an async engine on SQLite must at least hop to a
thread and back for it (or block its loop); that sum is what a step could
cost with zero engine overhead.

What it measures (one process, one host loop; every figure is the mean over
a time-bounded loop after a short warm-up):

SQLite (stdlib ``sqlite3``, a fresh file under ``--sqlite-dir``), for each
storage mode ``wal-normal`` (ours by default), ``wal-full`` (ours with
``?synchronous=FULL``) and ``delete-full`` (DBOS's default: rollback journal,
``synchronous=FULL``), one transaction shaped like a step's record:
``BEGIN IMMEDIATE; INSERT`` one row into a step table; ``UPDATE`` the run's
row; ``COMMIT``:

* ``inline``: on the loop thread (blocks the loop: the lower bound);
* ``to_thread``: each transaction in one ``anyio.to_thread.run_sync`` round
  trip (what the SQLite driver does today);
* ``queue_thread``: each transaction handed to one dedicated thread through a
  ``queue.SimpleQueue``, the caller woken by one loop wake-up
  (``call_soon_threadsafe`` on asyncio, the trio token on trio): the writer
  thread design.

plus the bare round trips without a transaction (``hop_to_thread``,
``hop_queue_thread``), and, in our two modes (``wal-normal``, ``wal-full``),
a sequential local step's own transaction replayed raw on durable's schema
(``step_inline``, ``step_queue_thread``): ``BEGIN IMMEDIATE``, the fenced
``UPDATE runs ... RETURNING event_seq``, one ``ops`` row and two ``events``
rows (``executemany`` each), ``COMMIT``: the statements and rows the SQLite
driver runs for a step, without the engine. A step's distance from these is
the engine's (Python on both threads); their distance from the INSERT +
UPDATE transaction is SQLite's own work on our rows (wider rows, four
b-trees, a fence).

PostgreSQL (asyncpg, a fresh schema on ``--pg-url``, dropped afterwards), the
same transaction (INSERT + UPDATE in ``conn.transaction()``):

* ``asyncpg_1conn``: one connection, one transaction after another;
* ``asyncpg_pool8``: a pool of 8 connections, 8 tasks each committing in a
  loop (each updates its own run row, so they never wait on each other's
  row lock): aggregate commits/s.

Output: one JSON object on stdout: ``{"sqlite": {mode: {kind: {"us": ...,
"per_s": ...}}}, "hops": {...}, "postgres": {...}}``.  Each measurement is
run as a fresh interpreter by ``run_floor()`` so that it shares nothing with
either engine.

Usage::

    python benchmarks/floor.py --db sqlite --seconds 1.0
    python benchmarks/floor.py --db all --backend trio
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
PG_URL = os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

SQLITE_MODES: dict[str, tuple[str, str]] = {
    "wal-normal": ("WAL", "NORMAL"),
    "wal-full": ("WAL", "FULL"),
    "delete-full": ("DELETE", "FULL"),
}
WARMUP = 20


# --------------------------------------------------------------------------
# Parent side (what run.py imports): run one floor measurement in a child.
# --------------------------------------------------------------------------


def run_floor(
    db: str,
    *,
    backend: str = "asyncio",
    seconds: float = 1.0,
    sqlite_dir: str | None = None,
    pg_url: str | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Measure the floor in a fresh interpreter; its JSON result.

    Raises ``RuntimeError`` with the child's stderr when it fails.
    """
    cmd = [sys.executable, str(SCRIPT), "--db", db, "--backend", backend,
           "--seconds", str(seconds)]
    if sqlite_dir is not None:
        cmd += ["--sqlite-dir", sqlite_dir]
    if pg_url is not None:
        cmd += ["--pg-url", pg_url]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"floor timed out after {timeout:.0f} s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"floor failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise RuntimeError(f"floor printed no JSON: {proc.stdout!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --------------------------------------------------------------------------
# Child side.
# --------------------------------------------------------------------------


def _figure(count: int, elapsed: float, *, parallel: int = 1) -> dict[str, Any]:
    """Per-operation latency (µs, per stream) and aggregate rate of a timed loop."""
    return {
        "n": count,
        "us": round(elapsed * 1e6 * parallel / count, 2),
        "per_s": round(count / elapsed, 1),
    }


async def _timed(op: Callable[[], Awaitable[None]], seconds: float) -> dict[str, Any]:
    """Run `op` WARMUP times, then as often as fits in `seconds` (at least 50)."""
    for _ in range(WARMUP):
        await op()
    count = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        await op()
        count += 1
        if count >= 50 and (count & 15) == 0 and time.perf_counter() >= deadline:
            break
    return _figure(count, time.perf_counter() - t0)


class _Table:
    """A fresh SQLite file with a step table and one run row, in one storage mode."""

    def __init__(self, path: str, journal: str, synchronous: str) -> None:
        # autocommit mode: BEGIN/COMMIT are explicit, as in the durable driver
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        mode = self.conn.execute(f"PRAGMA journal_mode={journal}").fetchone()[0]
        if str(mode).upper() != journal:
            raise RuntimeError(f"sqlite refused journal_mode={journal} (got {mode})")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
                          "updated REAL NOT NULL)")
        self.conn.execute("CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
                          "seq INTEGER NOT NULL, payload TEXT NOT NULL)")
        self.conn.execute("INSERT INTO runs VALUES ('r', 0, 0)")
        self.seq = 0

    def transaction(self) -> None:
        """One step-shaped transaction: insert the step's row, advance the run."""
        self.seq += 1
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO steps (run_id, seq, payload) VALUES (?, ?, ?)",
                  ("r", self.seq, '{"result": 1}'))
        c.execute("UPDATE runs SET seq = ?, updated = ? WHERE id = ?",
                  (self.seq, time.time(), "r"))
        c.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class _StepTable:
    """A fresh SQLite file with durable's schema and one open run: a sequential
    local step's transaction, statement for statement as the driver runs it
    (`durable.store.fastpath`), with no engine around it."""

    def __init__(self, path: str, journal: str, synchronous: str) -> None:
        from durable_sqlite.dialect import SQLiteDialect

        from durable.store.events import EVENT_INSERT
        from durable.store.fastpath import LOCAL_OP_INSERT, fence
        from durable.store.schema import late_indexes, schema_statements

        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute(f"PRAGMA journal_mode={journal}")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        dialect = SQLiteDialect()  # checkpoints as `_Table`'s: SQLite's automatic ones
        for ddl in [*schema_statements(dialect), *late_indexes(dialect)]:
            self.conn.execute(ddl)
        self.conn.execute(
            "INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, run_number, "
            "task_queue, status, input, created_at, epoch) VALUES ('run-1', 'default', "
            "'wf-1', 'bench_local', 1, 'default', 'running', '[2000]', ?, 1)", (time.time(),))
        self.bump = ("UPDATE runs SET event_seq = event_seq + ? WHERE run_id = ? AND "
                     + fence() + " RETURNING event_seq")
        self.op_insert, self.event_insert = LOCAL_OP_INSERT, EVENT_INSERT
        self.step = 0

    def transaction(self) -> None:
        """One step's record: fence and count, one op, its two events."""
        self.step += 1
        c, now, op_id = self.conn, time.time(), f"0:{self.step}"
        c.execute("BEGIN IMMEDIATE")
        cursor = c.execute(self.bump, (2, "run-1", 1, now))
        seq = cursor.fetchone()[0]
        cursor.fetchall()
        c.executemany(self.op_insert, [("run-1", op_id, "bench_step", "completed",
                                        str(self.step), None, now, now, 0)])
        head = f'{{"op_id":"{op_id}","activity_type":"bench_step","local":true'
        c.executemany(self.event_insert, [
            ("run-1", seq - 1, "ActivityScheduled", now, head + "}"),
            ("run-1", seq, "ActivityCompleted", now, f'{head},"attempt":1,"result":1}}')])
        c.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class _QueueThread:
    """One dedicated thread fed by a `queue.SimpleQueue`; completes callers with
    one loop wake-up each (asyncio: `call_soon_threadsafe`; trio: its token)."""

    def __init__(self, backend: str) -> None:
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        if backend == "trio":
            import trio

            token = trio.lowlevel.current_trio_token()
            self._wake: Callable[[Callable[[], Any]], None] = token.run_sync_soon
        else:
            import asyncio

            self._wake = asyncio.get_running_loop().call_soon_threadsafe
        self.thread = threading.Thread(target=self._loop, name="floor-writer", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            fn, done = item
            fn()
            self._wake(done.set)

    async def call(self, fn: Callable[[], None]) -> None:
        import anyio

        done = anyio.Event()
        self.q.put((fn, done))
        await done.wait()

    def close(self) -> None:
        self.q.put(None)
        self.thread.join(timeout=10)


def _noop() -> None:
    return None


def inline_of(tx: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """`tx` as an awaitable that runs on the loop's thread (blocking it)."""

    async def inline() -> None:
        tx()

    return inline


async def _sqlite_floor(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    import anyio

    out: dict[str, Any] = {}
    qt = _QueueThread(args.backend)
    try:
        hops = {
            "hop_to_thread": await _timed(lambda: anyio.to_thread.run_sync(_noop),
                                          args.seconds),
            "hop_queue_thread": await _timed(lambda: qt.call(_noop), args.seconds),
        }
        for name, (journal, synchronous) in SQLITE_MODES.items():
            path = os.path.join(workdir, f"floor_{name}.db")
            table = _Table(path, journal, synchronous)
            try:
                tx = table.transaction

                async def inline(tx: Callable[[], None] = tx) -> None:
                    tx()

                out[name] = {
                    "journal_mode": journal, "synchronous": synchronous,
                    "inline": await _timed(inline, args.seconds),
                    "to_thread": await _timed(lambda tx=tx: anyio.to_thread.run_sync(tx),
                                              args.seconds),
                    "queue_thread": await _timed(lambda tx=tx: qt.call(tx), args.seconds),
                }
            finally:
                table.close()
            if name == "delete-full":
                continue  # DBOS's mode: ours never runs in it
            step = _StepTable(os.path.join(workdir, f"step_{name}.db"), journal, synchronous)
            try:
                out[name]["step_inline"] = await _timed(inline_of(step.transaction),
                                                        args.seconds)
                out[name]["step_queue_thread"] = await _timed(
                    lambda tx=step.transaction: qt.call(tx), args.seconds)
            finally:
                step.close()
    finally:
        qt.close()
    return {"sqlite": out, "hops": hops}


async def _pg_floor(args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    import asyncpg

    schema = f"durable_floor_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(args.pg_url)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        await admin.execute(
            f'CREATE TABLE "{schema}".runs (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, '
            "updated DOUBLE PRECISION NOT NULL)")
        await admin.execute(
            f'CREATE TABLE "{schema}".steps (id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, '
            "seq BIGINT NOT NULL, payload TEXT NOT NULL)")
        await admin.executemany(f'INSERT INTO "{schema}".runs VALUES ($1, 0, 0)',
                                [(f"r{k}",) for k in range(8)])
        settings = {"search_path": schema, "application_name": "durable-floor"}

        async def transaction(conn: Any, run_id: str, seq: int) -> None:
            async with conn.transaction():
                await conn.execute("INSERT INTO steps (run_id, seq, payload) "
                                   "VALUES ($1, $2, $3)", run_id, seq, '{"result": 1}')
                await conn.execute("UPDATE runs SET seq = $2, updated = $3 WHERE id = $1",
                                   run_id, seq, time.time())

        conn = await asyncpg.connect(args.pg_url, server_settings=settings)
        try:
            seq = 0

            async def one() -> None:
                nonlocal seq
                seq += 1
                await transaction(conn, "r0", seq)

            single = await _timed(one, args.seconds)
            sync_commit = await conn.fetchval("SHOW synchronous_commit")
            fsync = await conn.fetchval("SHOW fsync")
        finally:
            await conn.close()

        pool = await asyncpg.create_pool(args.pg_url, min_size=8, max_size=8,
                                         server_settings=settings)
        try:
            counts = [0] * 8
            stop = False

            async def stream(k: int) -> None:
                async with pool.acquire() as c:
                    for _ in range(WARMUP // 4):
                        await transaction(c, f"r{k}", 0)
                    await ready.wait()
                    while not stop:
                        counts[k] += 1
                        await transaction(c, f"r{k}", counts[k])

            ready = asyncio.Event()
            tasks = [asyncio.create_task(stream(k)) for k in range(8)]
            await asyncio.sleep(0.2)  # every stream warmed up and waiting
            base = sum(counts)
            t0 = time.perf_counter()
            ready.set()
            await asyncio.sleep(args.seconds)
            stop = True
            done = sum(counts) - base
            elapsed = time.perf_counter() - t0
            await asyncio.gather(*tasks)
            pooled = _figure(done, elapsed, parallel=8)
        finally:
            await pool.close()
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()
    return {"postgres": {"asyncpg_1conn": single, "asyncpg_pool8": pooled,
                         "synchronous_commit": sync_commit, "fsync": fsync,
                         "asyncpg_version": asyncpg.__version__}}


async def _measure(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    result: dict[str, Any] = {"side": "floor", "backend": args.backend,
                              "seconds_per_figure": args.seconds,
                              "sqlite_version": sqlite3.sqlite_version,
                              "python": sys.version.split()[0]}
    if args.db in ("sqlite", "all"):
        result.update(await _sqlite_floor(args, workdir))
        result["sqlite_dir"] = args.sqlite_dir or tempfile.gettempdir()
    if args.db in ("postgres", "all"):
        if args.backend != "asyncio":
            result["postgres"] = None  # asyncpg runs on asyncio only
        else:
            result.update(await _pg_floor(args))
    return result


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", choices=["sqlite", "postgres", "all"], default="sqlite")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--seconds", type=float, default=1.0,
                   help="time budget of each figure (default 1.0)")
    p.add_argument("--sqlite-dir", default=None,
                   help="parent dir of the SQLite files (default $TMPDIR or /tmp)")
    p.add_argument("--pg-url", default=PG_URL, help=f"PostgreSQL URL (default {PG_URL})")
    args = p.parse_args(argv)
    if args.seconds <= 0:
        raise SystemExit(f"--seconds must be > 0, got {args.seconds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    import anyio

    with tempfile.TemporaryDirectory(prefix="durable_floor_", dir=args.sqlite_dir) as tmp:
        result = anyio.run(_measure, args, tmp, backend=args.backend)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
