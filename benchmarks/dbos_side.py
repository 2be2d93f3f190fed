"""Peer benchmark: DBOS Transact 3.x on the same workloads as `durable`.

What it measures
----------------
Wall-clock time of DBOS durable workflows whose steps are trivial, so the
figure is DBOS's per-step bookkeeping cost, not user work.  In DBOS 3.4.0
each step costs two system-database transactions (look up a recorded
output, then record the new one), plus the workflow's own status rows:

* ``sequential``: one ``@DBOS.workflow`` that calls a trivial ``@DBOS.step``
  ``--steps`` times (default 200) in a row.  Reported as ms per step.
* ``concurrent``: ``--workflows`` workflows (default 100) of ``--steps``
  steps each (default 10), all started at once, timed until every result is
  in.  Reported as steps per second.  ``--mode async`` uses
  ``async def`` workflows/steps with ``DBOS.start_workflow_async`` on one
  event loop; ``--mode sync`` (the default: it was the faster of the two
  on DBOS 3.4.0 here) uses plain functions with ``DBOS.start_workflow``
  (DBOS's thread pool, one thread per running workflow).
* ``taskgroup``: one ``async def`` workflow that starts ``--steps`` (default
  1,000) ``async def`` steps at once (``asyncio.gather``, the pattern DBOS
  documents for concurrent steps: each step takes its step id when it is
  called, before its first ``await``, so the order is deterministic) and
  awaits them all.  Reported as steps per second.  Always ``--mode async``.

SQLite settings (``--sqlite-pragmas``)
--------------------------------------
DBOS 3.4 opens its SQLite system database with SQLAlchemy
(``SQLiteSystemDatabase._create_engine`` in ``dbos/_sys_db_sqlite.py``): a
``"connect"`` event listener on its engine sets ``isolation_level =
"IMMEDIATE"``, ``busy_timeout`` and ``foreign_keys``, and nothing else, so
its connections run sqlite3's defaults: ``journal_mode=delete`` (rollback
journal) and ``synchronous=FULL``.  ``default`` leaves that alone.
``wal-normal`` / ``wal-full`` force our settings on DBOS: the database file
is created in WAL mode before ``DBOS.launch()`` (the journal mode is stored
in the file), and a SQLAlchemy ``"connect"`` listener registered on the
``sqlalchemy.engine.Engine`` class (SQLAlchemy's documented way to set
SQLite pragmas on every connection of every engine) runs ``PRAGMA
journal_mode=WAL`` and ``PRAGMA synchronous=NORMAL|FULL`` on each new DBAPI
connection, next to DBOS's own listener.  DBOS's public alternatives do not
fit: ``db_engine_kwargs`` cannot run statements on connect, and
``system_database_engine`` (a custom engine) would skip DBOS's own listener
and so its ``IMMEDIATE`` transactions.  In every mode the listener reads
back ``journal_mode`` and ``synchronous`` on each connection; the result's
``sqlite_pragmas`` lists what DBOS's connections actually ran with, and the
run fails if any connection differs from the requested mode.

The database is either a fresh SQLite file in a temporary directory or a
fresh PostgreSQL database (``dbos_bench_<random>`` on 127.0.0.1:5432, user
``postgres``), created before and dropped after the run.  DBOS launch and
schema migration happen before the clock starts, and a short warm-up runs
first.  ``--repeat K`` measures K times in the same process (fresh workflow
IDs each time); ``seconds`` is the median, every run is listed in ``runs``.
DBOS's SQLite settings are its defaults (rollback journal, synchronous=FULL,
so every commit fsyncs): the directory matters a lot, so compare both SDKs
with the same ``--sqlite-dir`` (default ``$TMPDIR``, else /tmp).

Why subprocesses
----------------
DBOS is a process-wide singleton (``DBOS(config=...)`` / ``DBOS.launch()``,
a global registry of decorated functions, background threads, a thread
pool).  One process cannot cleanly host two differently configured DBOS
instances, nor run next to our own SDK without sharing its threads and
event loop.  So every measurement runs in its own interpreter:
``run_dbos()`` spawns ``sys.executable benchmarks/dbos_side.py ...`` and
parses the single JSON object the child prints on stdout.  The ``dbos``
package is imported only in that child.

Usage::

    python benchmarks/dbos_side.py --workload sequential --db sqlite
    python benchmarks/dbos_side.py --workload concurrent --db postgres --repeat 3
    python benchmarks/dbos_side.py --workload taskgroup --db sqlite --sqlite-pragmas wal-full
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Workload = Literal["sequential", "concurrent", "taskgroup"]
Pragmas = Literal["default", "wal-normal", "wal-full"]
DbKind = Literal["sqlite", "postgres"]
Mode = Literal["sync", "async"]

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
PG_ADMIN_DB = "test"

DEFAULT_STEPS: dict[str, int] = {"sequential": 200, "concurrent": 10, "taskgroup": 1000}
DEFAULT_WORKFLOWS: dict[str, int] = {"sequential": 1, "concurrent": 100, "taskgroup": 1}
# journal_mode, synchronous (as PRAGMA synchronous reads back: 1 NORMAL, 2 FULL)
PRAGMAS: dict[str, tuple[str, int] | None] = {
    "default": None, "wal-normal": ("wal", 1), "wal-full": ("wal", 2),
}

SCRIPT = Path(__file__).resolve()


# --------------------------------------------------------------------------
# Parent side: what our runner imports.
# --------------------------------------------------------------------------


def run_dbos(
    workload: Workload,
    db: DbKind,
    *,
    steps: int | None = None,
    workflows: int | None = None,
    repeat: int = 1,
    mode: Mode = "sync",
    sqlite_dir: str | None = None,
    sqlite_pragmas: Pragmas = "default",
    pool_size: int | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run one DBOS measurement in a fresh interpreter and return its JSON.

    Raises ``RuntimeError`` (with the child's stderr) if the child fails.
    """
    cmd: list[str] = [
        sys.executable,
        str(SCRIPT),
        "--workload",
        workload,
        "--db",
        db,
        "--repeat",
        str(repeat),
        "--mode",
        mode,
    ]
    if steps is not None:
        cmd += ["--steps", str(steps)]
    if workflows is not None:
        cmd += ["--workflows", str(workflows)]
    if sqlite_dir is not None:
        cmd += ["--sqlite-dir", sqlite_dir]
    if pool_size is not None:
        cmd += ["--pool-size", str(pool_size)]
    if sqlite_pragmas != "default":
        cmd += ["--sqlite-pragmas", sqlite_pragmas]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"dbos_side timed out after {timeout:.0f} s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"dbos_side failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise RuntimeError(f"dbos_side printed no JSON: {proc.stdout!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --------------------------------------------------------------------------
# Child side: everything below imports dbos.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """The DBOS-registered functions used by the workloads."""

    seq_workflow: Callable[[int, int], int]
    seq_workflow_async: Callable[[int, int], Coroutine[Any, Any, int]]
    gather_workflow: Callable[[int, int], Coroutine[Any, Any, int]]


def _step_value(i: int) -> int:
    return i * 2 + 1


def _define_workflows() -> Bench:
    """Register the workflows with DBOS (must happen before launch)."""
    from dbos import DBOS

    @DBOS.step()
    def bench_step(i: int) -> int:
        return _step_value(i)

    @DBOS.workflow()
    def bench_workflow(base: int, n: int) -> int:
        total = 0
        for i in range(n):
            total += bench_step(base + i)
        return total

    @DBOS.step()
    async def bench_step_async(i: int) -> int:
        return _step_value(i)

    @DBOS.workflow()
    async def bench_workflow_async(base: int, n: int) -> int:
        total = 0
        for i in range(n):
            total += await bench_step_async(base + i)
        return total

    @DBOS.workflow()
    async def bench_gather_workflow(base: int, n: int) -> int:
        # every step is called (and takes its step id) here, in order, before
        # gather schedules them: DBOS's documented pattern for concurrent steps
        results = await asyncio.gather(*(bench_step_async(base + i) for i in range(n)))
        return sum(results)

    return Bench(seq_workflow=bench_workflow, seq_workflow_async=bench_workflow_async,
                 gather_workflow=bench_gather_workflow)


def _expected(base: int, n: int) -> int:
    return sum(_step_value(base + i) for i in range(n))


_seen_pragmas: list[tuple[str, int]] = []


def _install_sqlite_pragmas(pragmas: Pragmas) -> None:
    """Force (or just observe) the pragmas of every SQLite connection DBOS opens.

    A class-level SQLAlchemy ``"connect"`` listener runs for each new DBAPI
    connection of every engine, DBOS's included, alongside DBOS's own
    listener (which sets IMMEDIATE transactions, busy_timeout, foreign_keys).
    """
    import sqlite3

    import sqlalchemy as sa
    from sqlalchemy import event

    wanted = PRAGMAS[pragmas]

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        if not isinstance(dbapi_conn, sqlite3.Connection):
            return
        if wanted is not None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute(f"PRAGMA synchronous={wanted[1]}")
        journal = str(dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        sync = int(dbapi_conn.execute("PRAGMA synchronous").fetchone()[0])
        _seen_pragmas.append((journal, sync))

    event.listen(sa.engine.Engine, "connect", on_connect)


def _check_pragmas(pragmas: Pragmas) -> dict[str, Any]:
    """What DBOS's connections ran with; fails if a forced mode did not hold."""
    seen = sorted(set(_seen_pragmas))
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    report = {"requested": pragmas, "connections": len(_seen_pragmas),
              "observed": [{"journal_mode": j, "synchronous": names.get(s, s)} for j, s in seen]}
    wanted = PRAGMAS[pragmas]
    if wanted is not None and seen != [wanted]:
        raise RuntimeError(f"DBOS's SQLite connections did not run with {pragmas}: {report}")
    return report


@contextmanager
def _database(db: DbKind, sqlite_dir: str | None, pragmas: Pragmas) -> Iterator[str]:
    """Yield a system_database_url for a fresh database; drop it afterwards."""
    if db == "sqlite":
        import sqlite3

        with tempfile.TemporaryDirectory(prefix="dbos_bench_", dir=sqlite_dir) as tmp:
            path = os.path.join(tmp, "dbos_sys.sqlite")
            if PRAGMAS[pragmas] is not None:
                # WAL is a property of the file: set it before DBOS's pool opens
                # several connections at once.
                conn = sqlite3.connect(path)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.close()
            yield f"sqlite:///{path}"
        return

    import psycopg

    name = f"dbos_bench_{uuid.uuid4().hex[:12]}"
    admin = f"host={PG_HOST} port={PG_PORT} user={PG_USER} dbname={PG_ADMIN_DB}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sequential(bench: Bench, mode: Mode, steps: int, base: int) -> None:
    from dbos import DBOS

    if mode == "sync":
        got = bench.seq_workflow(base, steps)
    else:

        async def go() -> int:
            handle = await DBOS.start_workflow_async(bench.seq_workflow_async, base, steps)
            return await handle.get_result()

        got = _loop().run_until_complete(go())
    if got != _expected(base, steps):
        raise AssertionError(f"sequential: got {got}, want {_expected(base, steps)}")


def _concurrent(bench: Bench, mode: Mode, steps: int, workflows: int, base: int) -> None:
    from dbos import DBOS

    bases = [base + k * steps for k in range(workflows)]
    if mode == "sync":
        handles = [DBOS.start_workflow(bench.seq_workflow, b, steps) for b in bases]
        results = [h.get_result() for h in handles]
    else:

        async def go() -> list[int]:
            hs = [
                await DBOS.start_workflow_async(bench.seq_workflow_async, b, steps) for b in bases
            ]
            return list(await asyncio.gather(*(h.get_result() for h in hs)))

        results = _loop().run_until_complete(go())
    want = [_expected(b, steps) for b in bases]
    if results != want:
        raise AssertionError("concurrent: wrong results")


def _taskgroup(bench: Bench, steps: int, base: int) -> None:
    from dbos import DBOS

    async def go() -> int:
        handle = await DBOS.start_workflow_async(bench.gather_workflow, base, steps)
        return await handle.get_result()

    got = _loop().run_until_complete(go())
    if got != _expected(base, steps):
        raise AssertionError(f"taskgroup: got {got}, want {_expected(base, steps)}")


_loop_holder: list[asyncio.AbstractEventLoop] = []


def _loop() -> asyncio.AbstractEventLoop:
    """One event loop for the whole child (DBOS keeps per-loop async state).

    Created lazily so that importing this module (``run_dbos``) has no effect.
    """
    if not _loop_holder:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        _loop_holder.append(loop)
    return _loop_holder[0]


def _measure(
    workload: Workload,
    db: DbKind,
    mode: Mode,
    steps: int,
    workflows: int,
    repeat: int,
    sqlite_dir: str | None,
    pool_size: int | None,
    pragmas: Pragmas,
) -> dict[str, Any]:
    import dbos as dbos_pkg
    from dbos import DBOS, DBOSConfig

    _loop()
    if db == "sqlite":
        _install_sqlite_pragmas(pragmas)
    bench = _define_workflows()
    with _database(db, sqlite_dir, pragmas) as url:
        config: DBOSConfig = {
            "name": "dbos-bench",
            "system_database_url": url,
            "log_level": "WARNING",
        }
        if pool_size is not None:
            config["sys_db_pool_size"] = pool_size
        DBOS(config=config)
        t_launch = time.perf_counter()
        DBOS.launch()
        launch_s = time.perf_counter() - t_launch
        try:
            base = 0

            def once(n_steps: int, n_wf: int) -> None:
                nonlocal base
                if workload == "sequential":
                    _sequential(bench, mode, n_steps, base)
                elif workload == "taskgroup":
                    _taskgroup(bench, n_steps, base)
                else:
                    _concurrent(bench, mode, n_steps, n_wf, base)
                base += n_steps * n_wf

            # Warm-up: small version of the workload (connections, caches, JIT-free
            # but import/first-call paths).
            once(min(steps, 10), min(workflows, 10))

            runs: list[float] = []
            cpu: list[float] = []
            for _ in range(repeat):
                c0 = time.process_time()
                t0 = time.perf_counter()
                once(steps, workflows)
                runs.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            observed = _check_pragmas(pragmas) if db == "sqlite" else None
        finally:
            DBOS.destroy(destroy_registry=True)
    _loop().close()

    steps_total = steps * workflows
    seconds = statistics.median(runs)
    return {
        "workload": workload,
        "db": db,
        "mode": "async" if workload == "taskgroup" else mode,
        "steps": steps,
        "workflows": workflows,
        "steps_total": steps_total,
        "repeat": repeat,
        "seconds": round(seconds, 6),
        "per_step_ms": round(seconds * 1000.0 / steps_total, 4),
        "steps_per_s": round(steps_total / seconds, 1),
        "runs": [round(r, 6) for r in runs],
        "cpu_s": round(statistics.median(cpu), 6),
        "sqlite_dir": (sqlite_dir or tempfile.gettempdir()) if db == "sqlite" else None,
        "sys_db_pool_size": pool_size,
        "sqlite_pragmas": observed,
        "launch_s": round(launch_s, 3),
        "dbos_version": _dbos_version(dbos_pkg),
        "python": sys.version.split()[0],
    }


def _dbos_version(pkg: Any) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dbos")
    except PackageNotFoundError:
        return str(getattr(pkg, "__version__", "unknown"))


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--workload", choices=list(DEFAULT_STEPS), required=True)
    p.add_argument("--db", choices=["sqlite", "postgres"], required=True)
    p.add_argument("--steps", type=int, default=None, help="steps per workflow")
    p.add_argument("--workflows", type=int, default=None, help="concurrent workflows")
    p.add_argument("--repeat", type=int, default=1, help="timed runs (median reported)")
    p.add_argument(
        "--mode",
        choices=["sync", "async"],
        default="sync",
        help="sync (default, faster here): def + DBOS thread pool; "
        "async: async def + start_workflow_async",
    )
    p.add_argument(
        "--sqlite-dir",
        default=None,
        help="parent dir of the temp SQLite file (default: $TMPDIR or /tmp); "
        "use the same dir as our side, fsync cost dominates",
    )
    p.add_argument(
        "--sqlite-pragmas",
        choices=list(PRAGMAS),
        default="default",
        help="default: DBOS's own (rollback journal, synchronous=FULL); wal-normal / "
        "wal-full: forced on each of its connections (ours: WAL + NORMAL or FULL)",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="DBOS sys_db_pool_size (default: DBOS's own, 20)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    workload: Workload = args.workload
    steps = args.steps if args.steps is not None else DEFAULT_STEPS[workload]
    workflows = (
        1
        if workload in ("sequential", "taskgroup")
        else (args.workflows if args.workflows is not None else DEFAULT_WORKFLOWS[workload])
    )
    if steps < 1 or workflows < 1 or args.repeat < 1:
        raise SystemExit("--steps, --workflows and --repeat must be >= 1")

    # Keep stdout for the single JSON line: anything DBOS (or its deps) prints
    # goes to stderr instead.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        result = _measure(
            workload,
            args.db,
            args.mode,
            steps,
            workflows,
            args.repeat,
            args.sqlite_dir,
            args.pool_size,
            args.sqlite_pragmas,
        )
    finally:
        sys.stdout = real_stdout
    real_stdout.write(json.dumps(result) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
