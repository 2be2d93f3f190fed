"""Our side of the peer benchmark: `durable` on the same workloads as DBOS.

What it measures
----------------
Wall-clock time of durable workflows whose activities are trivial
(``async def bench_step(i) -> i * 2 + 1``), so the figure is the engine's
per-step bookkeeping, not user work:

* ``sequential`` (issue [1/4] a): one workflow that awaits ``--steps``
  (default 200) LOCAL activities (``workflow.execute_local_activity``) in a
  row.  Reported as ms per step.
* ``concurrent`` (b): ``--workflows`` workflows (default 100) of ``--steps``
  local activities each (default 10), all started at once, timed until every
  result is in.  Reported as steps per second.
* ``concurrent_remote`` (c): as ``concurrent`` with REMOTE activities
  (``workflow.execute_activity``): each step is scheduled on the task queue,
  claimed and executed by the same worker (same process), and its result
  recorded.
* ``taskgroup`` (d): one workflow that starts ``--steps`` (default 1,000)
  local activities at once in a ``workflow.task_group()`` and awaits them
  all.  Reported as steps per second.

``--record batched`` runs the local activities with
``durable.ActivityOptions(record="batched")`` (their results are recorded
with the next durable operation instead of one write each).  Builds without
that option make the child exit with status 3 and the message
``skipped: batched recording not available in this build``; ``--probe``
prints ``{"batched": true|false, "reason": ...}`` without measuring, which
is how ``run.py`` decides whether to schedule the batched variant at all.

The process opens the database with ``durable.connect(url)`` and starts one
``durable.Worker`` on the host loop (``--backend asyncio|trio``) before the
clock starts, so connection, schema migration and worker registration are
excluded.  A short warm-up (10 workflows of up to 10 steps) runs first.
``--repeat K`` measures K times in the same process (fresh workflow ids each
time); ``seconds`` is the median, every run is listed in ``runs``.  The
timed region covers what DBOS's timed region covers: starting the workflows
(one ``client.start`` each, in a loop) and awaiting every result.

Storage: a fresh SQLite file in a temporary directory under ``--sqlite-dir``
(our defaults: WAL, ``synchronous=NORMAL``; ``--synchronous FULL`` adds
``?synchronous=FULL`` to the URL, an fsync on every commit like DBOS's
default), or a fresh schema (``?schema=durable_bench_<random>``) on
``--pg-url``, dropped afterwards.

Like ``dbos_side.py``, every measurement runs in its own interpreter so that
measurements are independent: ``run_durable()`` spawns
``sys.executable benchmarks/durable_side.py ...`` and parses the single JSON
object it prints.  ``--profile PATH`` additionally profiles one extra run with
cProfile (main thread) and times the SQLite driver's database thread, and
writes both to PATH; the timed runs are never profiled.

Usage::

    python benchmarks/durable_side.py --workload sequential --db sqlite
    python benchmarks/durable_side.py --workload concurrent --backend trio --synchronous FULL
    python benchmarks/durable_side.py --workload taskgroup --record batched   # when available
    python benchmarks/durable_side.py --probe
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

Workload = Literal["sequential", "concurrent", "concurrent_remote", "taskgroup"]
DbKind = Literal["sqlite", "postgres", "mariadb"]
Backend = Literal["asyncio", "trio"]

WORKLOADS: tuple[str, ...] = ("sequential", "concurrent", "concurrent_remote", "taskgroup")
DEFAULT_STEPS: dict[str, int] = {"sequential": 200, "concurrent": 10, "concurrent_remote": 10,
                                 "taskgroup": 1000}
DEFAULT_WORKFLOWS: dict[str, int] = {"sequential": 1, "concurrent": 100, "concurrent_remote": 100,
                                     "taskgroup": 1}
# Workloads made of local activities: the only ones `record="batched"` applies to.
LOCAL_WORKLOADS = ("sequential", "concurrent", "taskgroup")
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
MARIADB_URL = os.environ.get("DURABLE_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test")

SCRIPT = Path(__file__).resolve()


# --------------------------------------------------------------------------
# Parent side: what the runner imports (does not import durable).
# --------------------------------------------------------------------------


def run_durable(
    workload: Workload,
    db: DbKind,
    *,
    backend: Backend = "asyncio",
    synchronous: str | None = None,
    record: str | None = None,
    steps: int | None = None,
    workflows: int | None = None,
    repeat: int = 1,
    sqlite_dir: str | None = None,
    pg_url: str | None = None,
    mariadb_url: str | None = None,
    profile: str | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run one measurement of ours in a fresh interpreter and return its JSON.

    Raises ``RuntimeError`` (with the tail of the child's stderr) on failure.
    """
    cmd: list[str] = [
        sys.executable, str(SCRIPT), "--workload", workload, "--db", db,
        "--backend", backend, "--repeat", str(repeat),
    ]
    if synchronous is not None:
        cmd += ["--synchronous", synchronous]
    if record is not None:
        cmd += ["--record", record]
    if steps is not None:
        cmd += ["--steps", str(steps)]
    if workflows is not None:
        cmd += ["--workflows", str(workflows)]
    if sqlite_dir is not None:
        cmd += ["--sqlite-dir", sqlite_dir]
    if pg_url is not None:
        cmd += ["--pg-url", pg_url]
    if mariadb_url is not None:
        cmd += ["--mariadb-url", mariadb_url]
    if profile is not None:
        cmd += ["--profile", profile]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"durable_side timed out after {timeout:.0f} s: {' '.join(cmd)}"
        ) from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"durable_side failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if not lines:
        raise RuntimeError(f"durable_side printed no JSON: {proc.stdout!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def probe_durable(timeout: float = 60.0) -> dict[str, Any]:
    """What this build of durable supports, asked of a fresh interpreter.

    Returns ``{"batched": bool, "reason": str | None, "version": str}``.
    """
    cmd = [sys.executable, str(SCRIPT), "--probe"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"durable_side --probe failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


# --------------------------------------------------------------------------
# Child side: everything below imports durable.
# --------------------------------------------------------------------------


def _step_value(i: int) -> int:
    return i * 2 + 1


def _expected(base: int, n: int) -> int:
    return sum(_step_value(base + i) for i in range(n))


SKIPPED_BATCHED = "skipped: batched recording not available in this build"
EXIT_SKIPPED = 3


def batched_options() -> tuple[Any, str | None]:
    """`ActivityOptions(record="batched")`, or None and why this build lacks it.

    Feature detection: the option is being added to the engine ([3/8] item 5);
    until then the constructor rejects the keyword.
    """
    import durable

    try:
        return durable.ActivityOptions(record="batched"), None  # type: ignore[call-arg]
    except (TypeError, durable.DurableError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _define(local_options: Any = None) -> tuple[Any, Any, Any, Any]:
    """Define the activity and the workflows (imports durable).

    `local_options` is passed to every local activity call (None: defaults,
    i.e. one recorded write per step).
    """
    from durable import activity, workflow

    @activity.defn(name="bench_step")
    async def bench_step(i: int) -> int:
        return _step_value(i)

    @workflow.defn(name="bench_local")
    async def bench_local(base: int, n: int) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_local_activity(
                bench_step, base + i, options=local_options)
        return total

    @workflow.defn(name="bench_taskgroup")
    async def bench_taskgroup(base: int, n: int) -> int:
        results = [0] * n

        async def one(i: int) -> None:
            results[i] = await workflow.execute_local_activity(
                bench_step, base + i, options=local_options)

        async with workflow.task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return sum(results)

    @workflow.defn(name="bench_remote")
    async def bench_remote(base: int, n: int) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_activity(bench_step, base + i)
        return total

    return bench_step, bench_local, bench_remote, bench_taskgroup


def _storage_url(db: DbKind, sqlite_dir: str, synchronous: str | None, pg_url: str,
                 mariadb_url: str = MARIADB_URL) -> str:
    if db == "sqlite":
        query = f"?synchronous={synchronous}" if synchronous else ""
        return f"sqlite:///{os.path.join(sqlite_dir, 'durable.db')}{query}"
    if db == "mariadb":
        database = f"durable_bench_{uuid.uuid4().hex[:12]}"
        _mariadb_admin(mariadb_url, f"CREATE DATABASE {database}")
        return urlsplit(mariadb_url)._replace(path=f"/{database}").geturl()
    schema = f"durable_bench_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in pg_url else "?"
    return f"{pg_url}{sep}schema={schema}"


def _mariadb_admin(url: str, statement: str) -> None:
    """One statement on the MariaDB server of `url`, from a thread of its own
    (asyncmy is asyncio-only; the benchmark may run on trio)."""
    import asyncio
    import threading

    import asyncmy

    parts = urlsplit(url)

    async def run() -> None:
        conn = await asyncmy.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                                     user=parts.username or "root",
                                     password=parts.password or "", autocommit=True)
        try:
            async with conn.cursor() as cur:
                await cur.execute(statement)
        finally:
            await conn.ensure_closed()

    thread = threading.Thread(target=asyncio.run, args=(run(),))
    thread.start()
    thread.join()


class _DbThreadTimer:
    """Profiling aid: total time the SQLite driver spends inside transactions
    (the database thread's `Writer._transaction`, one per group commit; or
    `_run_program`, one per program, in builds before the group commit)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self._owner: Any = None
        self._name = ""
        self._orig: Callable[..., Any] | None = None

    def install(self) -> bool:
        try:
            import durable_sqlite
        except ImportError:
            return False
        writer = getattr(getattr(durable_sqlite, "_writer", None), "Writer", None)
        if writer is not None and hasattr(writer, "_transaction"):
            self._owner, self._name = writer, "_transaction"
        elif hasattr(durable_sqlite, "_run_program"):
            self._owner, self._name = durable_sqlite, "_run_program"
        else:
            return False
        orig = getattr(self._owner, self._name)
        self._orig = orig

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.count += 1

        setattr(self._owner, self._name, timed)
        return True

    def uninstall(self) -> None:
        if self._orig is not None:
            setattr(self._owner, self._name, self._orig)


async def _measure(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    import anyio

    import durable

    workload: Workload = args.workload
    steps: int = args.steps
    n_wf: int = args.workflows
    local_options = None
    if args.record == "batched":
        local_options, _ = batched_options()
    bench_step, bench_local, bench_remote, bench_taskgroup = _define(local_options)
    wf = {"concurrent_remote": bench_remote, "taskgroup": bench_taskgroup}.get(
        workload, bench_local)
    url = _storage_url(args.db, workdir, args.synchronous, args.pg_url, args.mariadb_url)

    t_connect = time.perf_counter()
    client = await durable.connect(url)
    connect_s = time.perf_counter() - t_connect
    settings: dict[str, Any] = {"url": url}
    for attr in ("synchronous", "journal_mode"):
        if hasattr(client.driver, attr):
            settings[attr] = getattr(client.driver, attr)
    if args.db == "sqlite":
        settings.setdefault("journal_mode", "WAL")
    base = 0
    tag = 0

    async def once(n_steps: int, n_workflows: int) -> None:
        nonlocal base, tag
        tag += 1
        bases = [base + k * n_steps for k in range(n_workflows)]
        base += n_steps * n_workflows
        handles = [
            await client.start(wf, b, n_steps, id=f"bench-{tag}-{k}")
            for k, b in enumerate(bases)
        ]
        results = [await h.result() for h in handles]
        want = [_expected(b, n_steps) for b in bases]
        if results != want:
            raise AssertionError(f"{workload}: wrong results")

    runs: list[float] = []
    cpu: list[float] = []
    profile_info: dict[str, Any] | None = None
    driver_stats: Any = None
    try:
        worker = durable.Worker(
            client, workflows=[bench_local, bench_remote, bench_taskgroup],
            activities=[bench_step],
        )
        async with worker:
            once_steps = min(steps, 10)
            await once(once_steps, min(n_wf, 10))  # warm-up
            for _ in range(args.repeat):
                c0 = time.process_time()
                t0 = time.perf_counter()
                await once(steps, n_wf)
                runs.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            # the SQLite driver's counters (whole process: warm-up and every
            # timed run): programs per transaction shows the group commit at work
            driver_stats = getattr(client.driver, "stats", None)
            if args.profile:
                profile_info, report = await _profiled_run(once, steps, n_wf, args.profile)
                Path(args.profile).write_text(report)  # noqa: ASYNC240 (outside the timing)
    finally:
        with anyio.CancelScope(shield=True):
            if args.db == "postgres":
                drop = getattr(client.driver, "drop_schema", None)
                if drop is not None:
                    await drop()
            if args.db == "mariadb":
                drop = getattr(client.driver, "drop_database", None)
                if drop is not None:
                    await drop()
            await client.close()

    steps_total = steps * n_wf
    seconds = statistics.median(runs)
    result: dict[str, Any] = {
        "side": "durable",
        "workload": workload,
        "db": args.db,
        "backend": args.backend,
        "record": args.record,
        "steps": steps,
        "workflows": n_wf,
        "steps_total": steps_total,
        "repeat": args.repeat,
        "seconds": round(seconds, 6),
        "per_step_ms": round(seconds * 1000.0 / steps_total, 4),
        "steps_per_s": round(steps_total / seconds, 1),
        "runs": [round(r, 6) for r in runs],
        "cpu_s": round(statistics.median(cpu), 6),
        "connect_s": round(connect_s, 3),
        "storage": settings,
        "durable_version": durable.__version__,
        "python": sys.version.split()[0],
    }
    if driver_stats is not None:
        result["driver_stats"] = {
            name: getattr(driver_stats, name)
            for name in ("transactions", "programs", "drains", "largest_drain")}
    if profile_info is not None:
        result["profile"] = profile_info
    return result


async def _profiled_run(
    once: Callable[[int, int], Any], steps: int, n_wf: int, path: str
) -> tuple[dict[str, Any], str]:
    """One extra run under cProfile plus database-thread timing; writes a report."""
    import cProfile
    import io
    import pstats

    timer = _DbThreadTimer()
    has_timer = timer.install()
    prof = cProfile.Profile()
    c0 = time.process_time()
    t0 = time.perf_counter()
    prof.enable()
    try:
        await once(steps, n_wf)
    finally:
        prof.disable()
        timer.uninstall()
    wall = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    total = steps * n_wf
    info = {
        "wall_ms_per_step_profiled": round(wall * 1000 / total, 4),
        "cpu_ms_per_step_profiled": round(cpu_s * 1000 / total, 4),
        "db_thread_ms_per_step": round(timer.seconds * 1000 / total, 4) if has_timer else None,
        "db_transactions": timer.count if has_timer else None,
        "report": path,
    }
    return info, json.dumps(info, indent=2) + "\n\n" + out.getvalue()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--probe", action="store_true",
                   help="print what this build supports (JSON) and exit")
    p.add_argument("--workload", choices=WORKLOADS, default=None)
    p.add_argument("--db", choices=["sqlite", "postgres", "mariadb"], default="sqlite")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--synchronous", choices=["NORMAL", "FULL"], default=None,
                   help="SQLite synchronous setting (default: the driver's, NORMAL)")
    p.add_argument("--record", choices=["per-step", "batched"], default="per-step",
                   help="how local activity results are recorded (default per-step; "
                        "batched: ActivityOptions(record='batched'))")
    p.add_argument("--steps", type=int, default=None, help="steps per workflow")
    p.add_argument("--workflows", type=int, default=None, help="concurrent workflows")
    p.add_argument("--repeat", type=int, default=1, help="timed runs (median reported)")
    p.add_argument("--sqlite-dir", default=None,
                   help="parent dir of the temp SQLite file (default: $TMPDIR or /tmp)")
    p.add_argument("--pg-url", default=PG_URL, help=f"PostgreSQL URL (default {PG_URL})")
    p.add_argument("--mariadb-url", default=MARIADB_URL,
                   help=f"MariaDB server; a database is created per run (default {MARIADB_URL})")
    p.add_argument("--profile", default=None, metavar="PATH",
                   help="profile one extra (untimed) run and write the report to PATH")
    args = p.parse_args(argv)
    if args.probe:
        return args
    if args.workload is None:
        p.error("--workload is required (unless --probe)")
    workload: str = args.workload
    if args.record == "batched" and workload not in LOCAL_WORKLOADS:
        p.error(f"--record batched applies to local activities only: {', '.join(LOCAL_WORKLOADS)}"
                f", not {workload}")
    if args.steps is None:
        args.steps = DEFAULT_STEPS[workload]
    if workload in ("sequential", "taskgroup"):
        args.workflows = 1
    elif args.workflows is None:
        args.workflows = DEFAULT_WORKFLOWS[workload]
    if args.steps < 1 or args.workflows < 1 or args.repeat < 1:
        raise SystemExit("--steps, --workflows and --repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    import anyio

    import durable

    if args.probe:
        _, reason = batched_options()
        print(json.dumps({"batched": reason is None, "reason": reason,
                          "version": durable.__version__}))
        return 0
    if args.record == "batched" and batched_options()[0] is None:
        print(SKIPPED_BATCHED, file=sys.stderr)
        return EXIT_SKIPPED
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # keep stdout for the single JSON line
    # An application that did not configure logging: the engine's info events
    # are filtered at WARNING, as for any library user.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        with tempfile.TemporaryDirectory(prefix="durable_bench_", dir=args.sqlite_dir) as tmp:
            result = anyio.run(_measure, args, tmp, backend=args.backend)
        if args.db == "sqlite":
            result["sqlite_dir"] = args.sqlite_dir or tempfile.gettempdir()
    finally:
        sys.stdout = real_stdout
    real_stdout.write(json.dumps(result) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
