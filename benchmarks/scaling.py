"""Scaling across worker processes, and worker loss (issue [3/4]).

(a) ``throughput``: ``--workflows`` (200) workflows of ``--steps`` (5) REMOTE
    activities each (trivial ``async def`` steps) are started up front, with no
    worker running.  Then 1, 2 and 4 worker PROCESSES (``--workers``), already
    started, connected and waiting at a gate, are released together; the clock
    runs from the release to the last ``closed_at`` (read back from storage).
    Figure: steps (remote activities) per second.  Each worker process is a
    ``durable.Worker`` with its defaults (lease 15 s, poll 1 s, up to 1000
    runs and 100 activities at once) registering both the workflow and the
    activity; they share one PostgreSQL schema, or one SQLite file (WAL,
    synchronous=NORMAL).  Also reported: how the runs and the activity
    attempts were spread over the processes (fairness: every worker is
    listed, with 0 if it closed no run), the CPU seconds each process used,
    and how busy the machine's CPUs were (``/proc/stat``) during the run.
    ``--rounds`` (3) repeats the process counts, order rotated each round;
    the summary gives medians [min-max].

    On PostgreSQL also (issue [3/8] item 7): CPU seconds per 1,000 steps of
    the worker processes (``/proc/<pid>/stat`` utime + stime) PLUS the
    PostgreSQL backends serving them (found in ``pg_stat_activity`` by the
    ``application_name`` each worker's driver sets, ``durable:<origin>``;
    their CPU read from ``/proc`` too, the server being on this machine), and
    lock waits per step, sampled every ``--lock-sample-interval`` (0.05 s)
    from ``pg_stat_activity`` (``wait_event_type = 'Lock'``) and ``pg_locks``
    (not granted): distinct waiting statements per step and an estimate of
    the time spent waiting.  ``log_lock_waits`` would need a superuser to
    change the server's configuration, so the harness samples instead.  See
    ``BackendSampler``.

    Counted, not timed (issue 26), so that a loaded machine does not blur
    them: the wake-ups each worker process heard from other processes
    (``remote`` ones published by its driver's ``watch()``, by kind) and the
    claim passes its worker began (runs + activity attempts), asked of each
    process on stdin (``stats``) once every run is closed; reported per step,
    summed over the processes.

    Where the CPU goes (12-06), to tell fixed costs from per-step work and
    from the machine: each worker process counts, from the release on, the
    transactions it ran by `durable.store.Store` method, its other pooled
    calls (statistics, announcements), the statements it sent by kind and its
    LISTEN/UNLISTEN statements; the CPU it spent starting its worker; its
    system CPU and context switches (``/proc``; involuntary ones mean more
    runnable processes than CPUs); the PostgreSQL backends opened after the
    release and their CPU; and, once every run is closed, the CPU per second
    of an idle process and its backends (``--idle-seconds``, 2).  By default
    (``--warmup`` 200) each process first runs 200 workflows of a queue of
    its own, before the release, so that its pool has grown, its connections
    have prepared their statements and its LISTEN connection is open: the
    figure is the steady state's.  Before 12-06 (``--warmup 0``) the window
    held each process's pool growing from 1 to 10 connections, their
    backends' start and their first statements' planning.  A cProfile of each
    process's measured work: ``DURABLE_SCALING_PROFILE=/tmp/prefix``.
    ``--max-pool`` sets the processes' pool size (diagnosis).

    Who took the backlog (12-06): each process reports when it registered and
    its first run claims that took runs (``claims_after_release``: ms after the
    release; runs taken, live workers the claim counted, ready runs it saw
    left). ``--stagger`` S: process i starts its worker i x S seconds after the
    release, a fleet coming up one after another (0, the default: together).

    ``--rate`` R (12-06): the workflows are not waiting at the release but
    started at R a second from it on (``start_paced``), by the harness's own
    client (whose CPU and backends are not counted). A saturated run on this
    2-core machine keeps both cores full from one process on, so with 4
    processes plus their backends the CPU time per step also holds the
    oversubscription (involuntary switches, caches) and not only what a
    process added costs. Below saturation (e.g. ``--workflows 400 --rate 40``,
    200 steps/s) the cores have room at every process count, so CPU per 1,000
    steps shows what each added process costs: its own loops, polls, smaller
    group commits and the wake-ups it hears. Both readings are reported; the
    target is read on both.

(b) ``failover``: a worker process (the victim) owns ``--runs`` (40) running
    workflows: half wait on a remote activity that the victim runs and that
    never finishes there, half on a durable timer due 0.3 s after the planned
    kill.  A second worker process is already running (it started, then the
    victim's runs were all waiting).  The victim gets SIGKILL; we measure, per
    run, kill -> the first history event recorded after the kill
    ("resumed": ``ActivityRetryScheduled`` with failure_category worker_lost
    for an activity wait, ``TimerFired`` for a timer wait) and kill ->
    ``WorkflowCompleted`` (the survivor finished it), first / median / last
    over the runs, for each lease length in ``--leases`` (2 and 15 s, the
    default).  The victim's recorded lease expiries are read from storage
    just before the kill (of the run for a timer wait, of the running attempt
    for an activity wait), so ``lease_left_at_kill`` (how long the victim's
    lease still ran) and ``resume_after_lease_expiry`` (what the survivor
    added to it) are reported too.  A worker renews its leases every
    lease/3, so a lease has between 2/3 and all of its length left at any
    moment: resume time ~= lease length (x 2/3..1) + detection.

Worker processes are this file run with ``--serve`` (asyncio); their stderr
goes to a temporary directory.  PostgreSQL: a fresh schema per measurement
on ``--pg-url``, dropped afterwards.  SQLite: a fresh file per measurement.

Usage::

    python benchmarks/scaling.py [--part throughput|failover|all] [--db sqlite|postgres|all]
        [--workers 1,2,4] [--workflows 200] [--steps 5] [--rounds 3]
        [--lock-sample-interval 0.05] [--warmup 200] [--idle-seconds 2]
        [--max-pool N] [--stagger 0] [--runs 40] [--leases 2,15]

Prints a table, the throughput summary as markdown (ready for
docs/benchmarks.md) and one JSON object, and writes
``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio

import durable
from durable import activity, workflow

HERE = Path(__file__).resolve().parent
SCRIPT = Path(__file__).resolve()
PG_URL = os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
DBS = ("postgres", "sqlite")

# Set in a worker process (--serve): its name, and whether it is the victim.
WORKER_NAME = "client"
VICTIM = False

# Worker-lost retries come back at once (the default backoff would add 1 s).
FAST_RETRY = durable.ActivityOptions(
    retry=durable.RetryPolicy(max_attempts=10, initial_interval=0.01, maximum_interval=0.1)
)


# ---------------------------------------------------------------- workflows and activities


@activity.defn(name="sc_step")
async def step(i: int) -> int:
    return i * 2 + 1


@workflow.defn(name="sc_flow")
async def flow(base: int, n: int) -> list[Any]:
    """`n` remote activities in a row; returns the total and the process that closed it
    (the name is instrumentation, not workflow logic: a closed run is never replayed)."""
    total = 0
    for i in range(n):
        total += await workflow.execute_activity(step, base + i)
    return [total, WORKER_NAME]


@workflow.defn(name="sc_flow_warm")
async def flow_warm(base: int, n: int) -> list[Any]:
    """`flow` under another name, on the warm-up task queue (`--warmup`)."""
    return await flow(base, n)


@activity.defn(name="sc_hold")
async def hold() -> str:
    """Never finishes in the victim; returns at once anywhere else."""
    if VICTIM:
        await anyio.sleep(3600)
    return WORKER_NAME


@workflow.defn(name="sc_wait_activity")
async def wait_activity() -> str:
    name: str = await workflow.execute_activity(hold, options=FAST_RETRY)
    return name


@workflow.defn(name="sc_wait_timer")
async def wait_timer(fire_at: float) -> str:
    # On replay the recorded fire time is used, whatever this computes.
    await workflow.sleep(max(0.001, fire_at - workflow.now().timestamp()))
    return WORKER_NAME


WORKFLOWS: list[Callable[..., Any]] = [flow, wait_activity, wait_timer]
#: the task queue of the warm-up runs (`--warmup`), which only a warm-up worker takes
WARM_QUEUE = "sc_warm"
ACTIVITIES: list[Callable[..., Any]] = [step, hold]


# ---------------------------------------------------------------- worker processes


async def _serve(args: argparse.Namespace) -> None:
    options = {"max_pool": args.max_pool} if args.max_pool and "postgres" in args.serve_db else {}
    async with durable.connect(args.serve_db, **options) as client:
        # the PostgreSQL driver names its sessions `durable:<origin>`: the parent
        # finds this process's backends in pg_stat_activity by that name
        app = getattr(client.driver, "application_name", None) or "-"
        print(f"connected {app}", flush=True)
        counts = _count_storage_calls(client.driver)
        if args.warm:
            # steady state: a worker of the warm-up queue runs the parent's warm-up
            # workflows (the pool grows, its connections prepare their statements,
            # the LISTEN connection opens), then leaves; the pool stays open
            async with durable.Worker(client, workflows=[flow_warm], activities=ACTIVITIES,
                                      lease_seconds=args.lease, identity=args.name + "-warm",
                                      task_queue=WARM_QUEUE):
                print("warming", flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
            print("warm", flush=True)
        if args.gate:
            said = await anyio.to_thread.run_sync(sys.stdin.readline)
            # "go <seconds>": a fleet whose processes come up one after another
            # (--stagger): this one starts its worker that much after the release
            lag = float(said.split()[1]) if len(said.split()) > 1 else 0.0
            if lag > 0:
                await anyio.sleep(lag)
        cpu_go = time.process_time()
        at_go = {k: Counter(v) for k, v in counts.items()}
        listener = getattr(client.driver, "_listener", None)
        listens_go = getattr(listener, "listens", None)
        profile = None
        if os.environ.get("DURABLE_SCALING_PROFILE"):  # a cProfile of the measured work
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
        worker = durable.Worker(client, workflows=WORKFLOWS, activities=ACTIVITIES,
                                lease_seconds=args.lease, identity=args.name)
        # when this process registered, and its first run claims (time after the
        # release, runs taken, live workers and ready runs it saw): who took the backlog
        run_claims: list[list[float]] = []
        registered_at: list[float] = []
        register, claim = worker.presence.register, worker.runs._claim

        async def register_timed(ttl: float, now: float) -> None:
            await register(ttl, now)
            if not registered_at:
                registered_at.append(time.time())

        async def claim_timed(n: int) -> Any:
            started = time.time()
            got = await claim(n)
            if got and len(run_claims) < 8:
                run_claims.append([started, len(got), got.live, got.left])
            return got

        worker.presence.register = register_timed  # type: ignore[method-assign]
        worker.runs._claim = claim_timed
        # counted, not timed (issue 26): wake-ups heard from other processes, and
        # claim passes begun (runs and activity attempts)
        heard = Counter[str]()

        def on_wake(wake: Any) -> None:
            if wake.remote:
                heard[str(wake.key[0])] += 1

        client.driver.hub.subscribe(on_wake)
        async with worker:
            cpu_ready = time.process_time()
            print("ready", flush=True)
            while True:  # answers "stats" on stdin until the parent kills it
                line = await anyio.to_thread.run_sync(sys.stdin.readline,
                                                      abandon_on_cancel=True)
                if not line:
                    await anyio.sleep_forever()
                if line.strip() == "stats":
                    if profile is not None:
                        profile.disable()
                        profile.dump_stats(f"{os.environ['DURABLE_SCALING_PROFILE']}"
                                           f".{os.getpid()}.prof")
                        profile = None
                    listens = getattr(listener, "listens", None)
                    print("stats " + json.dumps({
                        "heard": dict(heard),
                        "claim_passes": worker.runs.begun + worker.remote.claims.begun,
                        # when (time.time()) it registered; its first run claims
                        # that took runs, [began, taken, live workers, left]
                        "registered_s": registered_at[0] if registered_at else None,
                        "run_claims": run_claims,
                        "listen_statements": None if listens is None or listens_go is None
                                             else listens - listens_go,
                        # CPU seconds of this process from the release to the worker
                        # having started (registered, its loops begun), and so far
                        "cpu_s_starting": round(cpu_ready - cpu_go, 4),
                        "cpu_s_since_go": round(time.process_time() - cpu_go, 4),
                        "pool_size": _pool_size(client.driver),
                        # storage calls since the release, by kind
                        **{k: dict(v - at_go[k]) for k, v in counts.items()}}),
                        flush=True)


def _count_storage_calls(driver: Any) -> dict[str, Counter[str]]:
    """Count (instrumentation of this benchmark only) the transactions a worker
    process runs, by the `durable.store.Store` method that ran them (``read``:
    a program run without BEGIN/COMMIT), the other uses of a pooled connection
    (the driver's upkeep: statistics, announcements), and on PostgreSQL the
    statements sent by kind (their first word; BEGIN and COMMIT, sent apart,
    are the write transactions)."""
    transactions: Counter[str] = Counter()
    upkeep: Counter[str] = Counter()
    statements: Counter[str] = Counter()
    run = driver.run

    def run_counted(program: Any, *, write: bool = True) -> Any:
        name = getattr(program, "__qualname__", "?").split(".<locals>")[0]
        transactions[name.rsplit(".", 1)[-1] + ("" if write else " (read)")] += 1
        return run(program, write=write)

    driver.run = run_counted
    on_pool = getattr(driver, "_on_pool", None)
    if on_pool is not None:
        def on_pool_counted(fn: Any) -> Any:
            upkeep[getattr(fn, "__qualname__", "?").split(".<locals>")[0]] += 1
            return on_pool(fn)

        driver._on_pool = on_pool_counted
    if getattr(driver, "engine", "") == "PostgreSQL":
        pg_driver = sys.modules[type(driver).__module__]
        pg_connection = sys.modules[pg_driver.drive.__module__]

        execute = getattr(pg_connection, "execute")  # noqa: B009 (a module found at run time)

        async def execute_counted(conn: Any, stmt: Any) -> Any:
            statements[stmt.sql.split(None, 1)[0].upper()] += 1
            return await execute(conn, stmt)

        setattr(pg_connection, "execute", execute_counted)  # noqa: B010
        setattr(pg_driver, "execute", execute_counted)  # noqa: B010
    return {"transactions": transactions, "upkeep": upkeep, "statements": statements}


def _pool_size(driver: Any) -> int | None:
    """Connections in the driver's pool now (asyncpg), None if unknown."""
    pool = getattr(driver, "_pool", None)
    get_size = getattr(pool, "get_size", None)
    return int(get_size()) if get_size is not None else None


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[str]
    log: Path
    app_name: str | None = None  # its PostgreSQL application_name, once connected

    def _line(self) -> str:
        assert self.popen.stdout is not None
        return self.popen.stdout.readline().strip()

    async def expect(self, word: str, within: float = 60.0) -> None:
        with anyio.fail_after(within):
            line = await anyio.to_thread.run_sync(self._line, abandon_on_cancel=True)
        said, _, rest = line.partition(" ")
        if said != word:
            tail = await anyio.Path(self.log).read_text()
            raise RuntimeError(f"worker {self.name} said {line!r}, not {word!r}:\n"
                               f"{tail[-3000:]}")
        if word == "connected" and rest not in ("", "-"):
            self.app_name = rest

    def go(self, lag: float = 0.0) -> None:
        stdin: IO[str] | None = self.popen.stdin
        assert stdin is not None
        stdin.write(f"go {lag}\n" if lag > 0 else "go\n")
        stdin.flush()

    async def stats(self) -> dict[str, Any]:
        """The worker's counters (see `_serve`)."""
        self.go_line("stats")
        said, rest = "", ""
        with anyio.fail_after(30):
            while said != "stats":  # "ready" may come first (nobody waited for it)
                line = await anyio.to_thread.run_sync(self._line, abandon_on_cancel=True)
                if not line:
                    raise RuntimeError(f"worker {self.name} ended before its stats")
                said, _, rest = line.partition(" ")
        found: dict[str, Any] = json.loads(rest)
        return found

    def go_line(self, text: str) -> None:
        stdin: IO[str] | None = self.popen.stdin
        assert stdin is not None
        stdin.write(text + "\n")
        stdin.flush()

    def cpu_seconds(self) -> float:
        """User + system CPU time so far (from /proc)."""
        cpu = proc_cpu_seconds(self.popen.pid)
        return float("nan") if cpu is None else cpu

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)


def spawn(db: str, name: str, workdir: Path, *, lease: float = 15.0, gate: bool = False,
          victim: bool = False, warm: bool = False, max_pool: int = 0) -> Proc:
    argv = [sys.executable, str(SCRIPT), "--serve", "--db-url", db, "--name", name,
            "--lease", str(lease)]
    if gate:
        argv.append("--gate")
    if warm:
        argv.append("--warm")
    if max_pool:
        argv += ["--max-pool", str(max_pool)]
    if victim:
        argv.append("--victim")
    log = workdir / f"{name}.log"
    with open(log, "ab") as err:
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, text=True)
    return Proc(name, popen, log)


def proc_sched(pid: int) -> dict[str, float]:
    """A process's system CPU seconds and context switches so far (/proc), {} once
    it is gone: a process descheduled while it runs (``nonvoluntary``) tells
    of more runnable processes than CPUs."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {"system_s": int(fields[12]) / os.sysconf("SC_CLK_TCK")}
    for line in status:
        name, _, value = line.partition(":")
        if name in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[name.split("_")[0]] = float(value)
    return out


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process so far, from /proc/<pid>/stat (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- PostgreSQL backends


class BackendSampler:
    """Watches the PostgreSQL backends that serve the worker processes.

    The backends are found in ``pg_stat_activity`` by the workers'
    ``application_name`` (our driver sets ``durable:<origin>``; each worker
    prints its own).  Every ``interval`` seconds one query reads their wait
    state (``wait_event_type = 'Lock'``) and the lock they wait for (the
    ungranted entry in ``pg_locks``: type, mode, relation or object; e.g.
    ``object AccessExclusiveLock on pg_database 0`` is the lock PostgreSQL
    takes at commit in every transaction that sent a ``NOTIFY``, and
    ``transactionid ShareLock`` a wait for another transaction's row lock);
    the CPU each backend used is read from ``/proc/<pid>/stat`` (the server runs
    on this machine), from just before the release (or from its start, for a
    backend opened during the run) to its last reading.  Lock waits are
    sampled, not traced: a wait shorter than the interval may be missed, and
    ``lock_wait_s`` (waiting backends x time between samples) is an estimate.
    ``log_lock_waits`` would be exact but needs a superuser to change the
    server's configuration.  The server's own background processes
    (walwriter, checkpointer, background writer) are reported separately.
    """

    QUERY = """
        SELECT a.pid, a.application_name, extract(epoch FROM a.backend_start)::float8,
               a.wait_event_type, a.wait_event, extract(epoch FROM a.query_start)::float8,
               (SELECT l.locktype || ' ' || l.mode
                       || coalesce(' on ' || l.relation::regclass::text, '')
                       || coalesce(' on ' || l.classid::regclass::text || ' ' || l.objid, '')
                FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1)
        FROM pg_stat_activity a
        WHERE a.application_name = ANY($1::text[])
    """
    BACKGROUND = ("walwriter", "checkpointer", "background writer")

    def __init__(self, pg_url: str, app_names: list[str], interval: float) -> None:
        self.pg_url = pg_url
        self.app_names = app_names
        self.interval = interval
        self.t_go = 0.0
        self.base: dict[int, float] = {}  # pid -> CPU seconds at release (0: opened later)
        self.last: dict[int, float] = {}  # pid -> latest CPU reading
        self.app_of: dict[int, str] = {}
        self.opened: set[int] = set()  # backends opened after the release
        self.samples = 0
        self.lock_wait_s = 0.0
        self.lock_wait_samples = 0
        self.waits: set[tuple[int, float | None]] = set()  # distinct (pid, statement start)
        self.wait_events: Counter[str] = Counter()
        self.background: dict[int, tuple[str, float]] = {}
        self.background_last: dict[int, float] = {}
        self._conn: Any = None

    async def open(self) -> None:
        import asyncpg

        self._conn = await asyncpg.connect(
            self.pg_url, server_settings={"application_name": "durable-scaling-sampler"})
        rows = await self._conn.fetch(
            "SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type = ANY($1)",
            list(self.BACKGROUND))
        for pid, kind in rows:
            cpu = proc_cpu_seconds(pid)
            if cpu is not None:
                self.background[pid] = (kind, cpu)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    def _read_cpu(self, pid: int) -> None:
        cpu = proc_cpu_seconds(pid)
        if cpu is not None:
            self.last[pid] = cpu

    async def _sample(self, dt: float) -> None:
        rows = await self._conn.fetch(self.QUERY, self.app_names)
        self.samples += 1
        waiting = 0
        for pid, app, started, wtype, wevent, query_start, lock in rows:
            if pid not in self.base:
                self.app_of[pid] = app
                if started is not None and started >= self.t_go:
                    self.base[pid] = 0.0  # opened during the run: all its CPU counts
                    self.opened.add(pid)
                else:
                    self.base[pid] = proc_cpu_seconds(pid) or 0.0
            self._read_cpu(pid)
            if wtype == "Lock":
                waiting += 1
                self.waits.add((pid, query_start))
                # which lock: pg_locks is read in the same statement but is its own
                # snapshot, so the wait may already be over there
                what = lock or "granted by the time pg_locks was read"
                self.wait_events[f"{wevent}: {what}"] += 1
        if waiting:
            self.lock_wait_samples += 1
            self.lock_wait_s += waiting * dt

    async def snapshot_before_release(self) -> None:
        """Read every worker backend's CPU before the release (its baseline)."""
        self.t_go = math.inf  # every backend seen now existed before the release
        await self._sample(0.0)
        self.samples = 0
        self.lock_wait_samples = 0
        self.lock_wait_s = 0.0
        self.waits.clear()
        self.wait_events.clear()

    async def run(self) -> None:
        """Sample until cancelled."""
        t = time.monotonic()
        while True:
            await anyio.sleep(self.interval)
            now = time.monotonic()
            await self._sample(now - t)
            t = now

    def finish(self) -> dict[str, Any]:
        for pid in self.base:
            self._read_cpu(pid)
        for pid in self.background:
            cpu = proc_cpu_seconds(pid)
            if cpu is not None:
                self.background_last[pid] = cpu
        per_app: dict[str, float] = {}
        opened = 0
        opened_cpu = 0.0
        for pid, base in self.base.items():
            per_app[self.app_of[pid]] = (per_app.get(self.app_of[pid], 0.0)
                                         + self.last.get(pid, base) - base)
            if pid in self.opened:
                opened += 1
                opened_cpu += self.last.get(pid, base) - base
        background = {kind: round(self.background_last.get(pid, cpu0) - cpu0, 3)
                      for pid, (kind, cpu0) in self.background.items()}
        return {
            "backends": len(self.base),
            "backend_cpu_s": round(sum(per_app.values()), 3),
            "backend_cpu_s_by_worker_app": {k: round(v, 3) for k, v in sorted(per_app.items())},
            # connections the workers opened after the release (all their CPU counts,
            # from the backend's start: fork, authentication, catalog caches, plans)
            "backends_opened_after_release": opened,
            "backend_cpu_s_opened_after_release": round(opened_cpu, 3),
            "background_cpu_s": background,
            "samples": self.samples,
            "sample_interval_s": self.interval,
            "lock_wait_samples": self.lock_wait_samples,
            "lock_wait_s_estimated": round(self.lock_wait_s, 3),
            "distinct_lock_waits": len(self.waits),
            "lock_wait_events": dict(self.wait_events.most_common()),
        }


# ---------------------------------------------------------------- storage


@dataclass
class Storage:
    db: str
    url: str
    schema: str | None = None
    path: Path | None = None
    pg_base: str = PG_URL

    async def leases(self) -> tuple[dict[str, float], dict[str, float]]:
        """run_id -> lease_expires_at of every owned open run, and of the run's running
        activity attempt (read directly from the tables)."""
        sqls = ("SELECT run_id, lease_expires_at FROM runs WHERE owner IS NOT NULL "
                "AND status IN ('pending', 'running')",
                "SELECT run_id, lease_expires_at FROM activity_tasks WHERE status = 'running'")
        if self.path is not None:
            def read() -> list[list[Any]]:
                conn = sqlite3.connect(str(self.path))
                try:
                    return [conn.execute(sql).fetchall() for sql in sqls]
                finally:
                    conn.close()

            found = await anyio.to_thread.run_sync(read)
        else:
            import asyncpg

            conn = await asyncpg.connect(self.pg_base,
                                         server_settings={"search_path": str(self.schema)})
            try:
                found = [list(await conn.fetch(sql)) for sql in sqls]
            finally:
                await conn.close()
        runs, tasks = ({r[0]: float(r[1]) for r in rows} for rows in found)
        return runs, tasks


def new_storage(db: str, workdir: Path, pg_url: str) -> Storage:
    tag = uuid.uuid4().hex[:10]
    if db == "sqlite":
        path = workdir / f"scaling_{tag}.db"
        return Storage(db, f"sqlite:///{path}", path=path)
    schema = f"durable_scaling_{tag}"
    return Storage(db, f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}", schema=schema,
                   pg_base=pg_url)


async def drop(client: durable.Client, storage: Storage) -> None:
    if storage.schema is not None:
        with anyio.CancelScope(shield=True):
            await client.driver.drop_schema()  # type: ignore[attr-defined]


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return float(sum(fields) - idle), float(sum(fields))


def _epoch(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(str(value)).timestamp()


async def wait_closed(client: durable.Client, wf_type: str, n: int, within: float,
                      interval: float = 0.05) -> list[dict[str, Any]]:
    """Until `n` runs of `wf_type` are closed; their summaries."""
    with anyio.fail_after(within):
        while True:
            rows = await client.list(workflow_type=wf_type, limit=n + 1)
            closed = [r for r in rows if r["closed_at"] is not None]
            if len(closed) >= n:
                return closed
            await anyio.sleep(interval)


async def wait_for_event(handle: durable.WorkflowHandle, etype: str) -> None:
    """Poll the history (another process records it) until it has an `etype` event."""
    while True:
        if any(e.type == etype for e in await handle.history()):
            return
        await anyio.sleep(0.05)


# ---------------------------------------------------------------- (a) throughput


async def throughput(db: str, workers: int, args: argparse.Namespace,
                     workdir: Path) -> dict[str, Any]:
    storage = new_storage(db, workdir, args.pg_url)
    n, steps = args.workflows, args.steps
    procs: list[Proc] = []
    sampler: BackendSampler | None = None
    backends: dict[str, Any] | None = None
    async with durable.connect(storage.url) as client:
        try:
            paced = args.rate > 0
            if not paced:  # all of them waiting when the workers are released
                for k in range(n):
                    await client.start(flow, k * steps, steps, id=f"flow-{k}")
            warm = args.warmup > 0
            procs = [spawn(storage.url, f"w{i}", workdir, gate=True, warm=warm,
                           max_pool=args.max_pool)
                     for i in range(workers)]
            for p in procs:
                await p.expect("connected")
            if warm:
                for p in procs:
                    await p.expect("warming")
                for k in range(args.warmup):
                    await client.start(flow_warm, k * steps, steps, id=f"warm-{k}",
                                       task_queue=WARM_QUEUE)
                await wait_closed(client, "sc_flow_warm", args.warmup, args.time_limit)
                for p in procs:
                    p.go_line("warmed")
                for p in procs:
                    await p.expect("warm")
            apps = [p.app_name for p in procs if p.app_name]
            if db == "postgres" and len(apps) == len(procs):
                sampler = BackendSampler(args.pg_url, apps, args.lock_sample_interval)
                await sampler.open()
                await sampler.snapshot_before_release()
            cpu0 = [p.cpu_seconds() for p in procs]
            sched0 = [proc_sched(p.popen.pid) for p in procs]
            busy0, total0 = cpu_busy()
            t_go = time.time()
            if sampler is not None:
                sampler.t_go = t_go
            async with anyio.create_task_group() as tg:
                if sampler is not None:
                    tg.start_soon(sampler.run)
                for i, p in enumerate(procs):
                    p.go(i * args.stagger)
                if paced:
                    tg.start_soon(start_paced, client, n, steps, args.rate)
                rows = await wait_closed(client, "sc_flow", n, args.time_limit)
                tg.cancel_scope.cancel()
            busy1, total1 = cpu_busy()
            cpu_end = [p.cpu_seconds() for p in procs]
            sched: Counter[str] = Counter()
            for p, before in zip(procs, sched0, strict=True):
                sched.update({k: v - before.get(k, 0.0)
                              for k, v in proc_sched(p.popen.pid).items()})
            cpu = [round(c1 - c, 2) for c1, c in zip(cpu_end, cpu0, strict=True)]
            counters = [await p.stats() for p in procs]
            if sampler is not None:
                backends = sampler.finish()
            elif db == "postgres":
                backends = {"unavailable": "a worker did not report its application_name"}
            # the fixed cost: every run closed, the processes idle on (polls,
            # watchdog, lease renewals, registrations), CPU per second of one
            idle: dict[str, float] | None = None
            if args.idle_seconds > 0:
                await anyio.sleep(args.idle_seconds)
                idle_cpu = sum(p.cpu_seconds() for p in procs) - sum(cpu_end)
                idle = {"worker_cpu_s_per_s_per_process": round(
                    idle_cpu / args.idle_seconds / len(procs), 4)}
                if sampler is not None and backends is not None:
                    await sampler._sample(0.0)  # backends opened while idle count too
                    later = sampler.finish()
                    idle["backend_cpu_s_per_s_per_process"] = round(
                        (later["backend_cpu_s"] - backends["backend_cpu_s"])
                        / args.idle_seconds / len(procs), 4)
            t_end = max(_epoch(r["closed_at"]) for r in rows)
            statuses = Counter(r["status"] for r in rows)
            closed_by: Counter[str] = Counter({p.name: 0 for p in procs})
            attempts: Counter[str] = Counter()
            wrong = 0
            for k in range(n):
                h = client.get_handle(f"flow-{k}")
                total, name = await h.result()
                closed_by[name] += 1
                want = sum((k * steps + i) * 2 + 1 for i in range(steps))
                wrong += int(total != want)
                for e in await h.history():
                    if e.type == "ActivityStarted":
                        attempts[str(e.data.get("worker_id"))] += 1
        finally:
            for p in procs:
                p.kill()
            if sampler is not None:
                await sampler.close()
            await drop(client, storage)
    seconds = t_end - t_go
    total_steps = n * steps
    offered = {"offered_workflows_per_s": args.rate} if args.rate > 0 else {}
    ours_cpu = sum(cpu)
    out: dict[str, Any] = {
        "db": db, "workers": workers, "workflows": n, "steps_per_workflow": steps,
        "steps_total": total_steps, "seconds": round(seconds, 3),
        "steps_per_s": round(total_steps / seconds, 1),
        "workflows_per_s": round(n / seconds, 1),
        **offered,
        "statuses": dict(statuses), "wrong_results": wrong,
        "runs_closed_by": dict(sorted(closed_by.items())),
        # per process, ms after the release: when it registered, and its first
        # run claims that took runs [began, runs taken, live workers seen, left]
        "claims_after_release": {
            p.name: {"registered_ms": None if c.get("registered_s") is None
                     else round((c["registered_s"] - t_go) * 1000, 1),
                     "run_claims": [[round((t - t_go) * 1000, 1), *rest]
                                    for t, *rest in c.get("run_claims", [])]}
            for p, c in zip(procs, counters, strict=True)},
        "workers_without_closed_runs": sorted(k for k, v in closed_by.items() if v == 0),
        "activity_attempts_by": dict(sorted(attempts.items())),
        "worker_cpu_s": cpu,
        "counters": counters,
        # remote wake-ups heard, summed over the processes (load-independent)
        "wakeups_heard_per_step": round(
            sum(sum(c["heard"].values()) for c in counters) / total_steps, 3),
        "claim_passes_per_step": round(
            sum(c["claim_passes"] for c in counters) / total_steps, 3),
        "worker_cpu_s_per_1000_steps": round(ours_cpu * 1000 / total_steps, 3),
        # of which in the kernel; how often the processes were descheduled while
        # runnable (nonvoluntary) or waiting (voluntary), per step
        "worker_system_cpu_s_per_1000_steps": round(
            sched["system_s"] * 1000 / total_steps, 3),
        "worker_nonvoluntary_switches_per_step": round(
            sched["nonvoluntary"] / total_steps, 3),
        "worker_voluntary_switches_per_step": round(sched["voluntary"] / total_steps, 3),
        # the part of it spent between the release and each worker having started
        "worker_start_cpu_s_per_1000_steps": round(
            sum(c["cpu_s_starting"] for c in counters) * 1000 / total_steps, 3),
        "transactions_per_step": round(
            sum(sum(c["transactions"].values()) for c in counters) / total_steps, 3),
        "transactions_per_step_by_kind": _per_step(
            [c["transactions"] for c in counters], total_steps),
        "upkeep_per_step_by_kind": _per_step([c["upkeep"] for c in counters], total_steps),
        "statements_per_step": round(
            sum(sum(c["statements"].values()) for c in counters) / total_steps, 3),
        "statements_per_step_by_kind": _per_step(
            [c["statements"] for c in counters], total_steps),
        "listen_statements_per_step": round(
            sum(c["listen_statements"] or 0 for c in counters) / total_steps, 3),
        "pool_sizes": [c["pool_size"] for c in counters],
        "idle": idle,
        "idle_worker_cpu_s_per_s": idle and idle.get("worker_cpu_s_per_s_per_process"),
        "idle_backend_cpu_s_per_s": idle and idle.get("backend_cpu_s_per_s_per_process"),
        "machine_cpu_busy": round((busy1 - busy0) / max(1.0, total1 - total0), 3),
    }
    if db != "postgres":  # counted on PostgreSQL only
        for name in ("statements_per_step", "listen_statements_per_step"):
            out[name] = None
    if backends is not None:
        out["postgres"] = backends
        if "backend_cpu_s" in backends:
            out["backend_cpu_s_per_1000_steps"] = round(
                backends["backend_cpu_s"] * 1000 / total_steps, 3)
            out["cpu_s_per_1000_steps"] = round(
                (ours_cpu + backends["backend_cpu_s"]) * 1000 / total_steps, 3)
            out["lock_waits_per_step"] = round(backends["distinct_lock_waits"] / total_steps, 4)
            out["backends_opened_after_release"] = backends["backends_opened_after_release"]
            out["opened_backend_cpu_s_per_1000_steps"] = round(
                backends["backend_cpu_s_opened_after_release"] * 1000 / total_steps, 3)
            out["lock_wait_ms_per_step"] = round(
                backends["lock_wait_s_estimated"] * 1000 / total_steps, 3)
    else:
        out["cpu_s_per_1000_steps"] = out["worker_cpu_s_per_1000_steps"]
    return out


async def start_paced(client: durable.Client, n: int, steps: int, rate: float) -> None:
    """`--rate`: start the `n` workflows at `rate` a second from the release on,
    each at its own instant (k / rate after the release, not after the previous
    start), so the offered load does not drift with how long a start takes."""
    t0 = time.monotonic()
    for k in range(n):
        delay = t0 + k / rate - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)
        await client.start(flow, k * steps, steps, id=f"flow-{k}")


def _per_step(counters: list[dict[str, int]], steps: int) -> dict[str, float]:
    """Summed over the processes, per step, most first."""
    total: Counter[str] = Counter()
    for c in counters:
        total.update(c)
    return {k: round(v / steps, 4) for k, v in total.most_common()}


# ---------------------------------------------------------------- (b) failover


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"first": None, "median": None, "last": None}
    ms = sorted(values)
    return {"first": round(ms[0], 3), "median": round(statistics.median(ms), 3),
            "last": round(ms[-1], 3)}


@dataclass
class KindStats:
    """Per-run figures (seconds) of one kind of wait in a failover measurement."""

    resumed: list[float]
    completed: list[float]
    lease_left_at_kill: list[float]
    resume_after_lease_expiry: list[float]
    first_event: Counter[str]

    @classmethod
    def new(cls) -> KindStats:
        return cls([], [], [], [], Counter())

    def summary(self) -> dict[str, Any]:
        return {
            "runs": len(self.completed),
            "kill_to_resumed_s": _spread(self.resumed),
            "kill_to_completed_s": _spread(self.completed),
            "lease_left_at_kill_s": _spread(self.lease_left_at_kill),
            "resume_after_lease_expiry_s": _spread(self.resume_after_lease_expiry),
            "first_event_after_kill": dict(self.first_event),
        }


async def failover(db: str, lease: float, args: argparse.Namespace,
                   workdir: Path) -> dict[str, Any]:
    storage = new_storage(db, workdir, args.pg_url)
    rng = random.Random(f"{db}-{lease}-{args.seed}")
    n_act = args.runs // 2
    n_timer = args.runs - n_act
    procs: list[Proc] = []
    stats = {"activity": KindStats.new(), "timer": KindStats.new(), "all": KindStats.new()}
    problems: list[str] = []
    async with durable.connect(storage.url) as client:
        try:
            victim = spawn(storage.url, "victim", workdir, lease=lease, victim=True)
            survivor = spawn(storage.url, "survivor", workdir, lease=lease, gate=True)
            procs = [victim, survivor]
            await victim.expect("connected")
            await victim.expect("ready")
            await survivor.expect("connected")
            # a random phase within the victim's renewal period (lease / 3)
            planned_kill = time.time() + args.setup_seconds + rng.uniform(0.0, lease / 3)
            fire_at = planned_kill + 0.3
            handles = [await client.start(wait_activity, id=f"act-{k}") for k in range(n_act)]
            handles += [await client.start(wait_timer, fire_at, id=f"timer-{k}")
                        for k in range(n_timer)]
            with anyio.fail_after(args.setup_seconds + 30):
                for h in handles:
                    want = "ActivityStarted" if h.workflow_id.startswith("act") else (
                        "TimerScheduled")
                    await wait_for_event(h, want)
            survivor.go()  # the survivor starts only now, so the victim owns every run
            await survivor.expect("ready")
            delay = planned_kill - time.time()
            if delay < 0.0:
                raise RuntimeError(f"the setup took longer than --setup-seconds "
                                   f"{args.setup_seconds}; raise it")
            await anyio.sleep(delay)
            run_leases, attempt_leases = await storage.leases()
            t_kill = time.time()
            victim.kill()
            await wait_closed(client, "sc_wait_activity", n_act, lease + 60)
            await wait_closed(client, "sc_wait_timer", n_timer, lease + 60)
            for h in handles:
                kind = "activity" if h.workflow_id.startswith("act") else "timer"
                events = await h.history()
                after = [e for e in events if _epoch(e.recorded_at) > t_kill]
                done = next((e for e in events if e.type == "WorkflowCompleted"), None)
                result = await h.result()
                if not after or done is None or result != "survivor":
                    problems.append(f"{h.workflow_id}: {[e.type for e in events]} -> {result!r}")
                    continue
                run_id = (await h.describe())["run"]["run_id"]
                # what the survivor waited for: the attempt's lease (activity waits),
                # the run's lease (timer waits)
                leases = attempt_leases if kind == "activity" else run_leases
                first = _epoch(after[0].recorded_at)
                for s in (stats[kind], stats["all"]):
                    s.resumed.append(first - t_kill)
                    s.completed.append(_epoch(done.recorded_at) - t_kill)
                    s.first_event[after[0].type] += 1
                    if run_id in leases:
                        s.lease_left_at_kill.append(leases[run_id] - t_kill)
                        s.resume_after_lease_expiry.append(first - leases[run_id])
        finally:
            for p in procs:
                p.kill()
            await drop(client, storage)
    return {
        "db": db, "lease_seconds": lease, "lease_renewed_every_s": round(lease / 3, 3),
        "runs": args.runs, "waiting_on_activity": n_act, "waiting_on_timer": n_timer,
        "timer_due_after_kill_s": 0.3,
        **{kind: s.summary() for kind, s in stats.items()},
        "problems": problems[:10],
    }


# ---------------------------------------------------------------- main


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    dbs = DBS if args.db == "all" else (args.db,)
    out: dict[str, Any] = {"throughput": [], "failover": []}
    if args.part in ("throughput", "all"):
        for db in dbs:
            for r in range(args.rounds):
                # rotate which process count goes first, round by round
                shift = r % len(args.workers)
                for k in args.workers[shift:] + args.workers[:shift]:
                    print(f"throughput {db} x{k} (round {r + 1}/{args.rounds}) ...",
                          file=sys.stderr, flush=True)
                    t = time.monotonic()
                    res = await throughput(db, k, args, workdir)
                    res["round"] = r
                    res["measurement_wall_s"] = round(time.monotonic() - t, 1)
                    out["throughput"].append(res)
        out["throughput_summary"] = summarise_throughput(out["throughput"])
    if args.part in ("failover", "all"):
        for db in dbs:
            for lease in args.leases:
                print(f"failover {db} lease {lease:g} s ...", file=sys.stderr, flush=True)
                t = time.monotonic()
                out["failover"].append(await failover(db, lease, args, workdir))
                out["failover"][-1]["measurement_wall_s"] = round(time.monotonic() - t, 1)
    return out


def _median_range(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


def summarise_throughput(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (storage, process count): medians [min, max] over rounds, and the CPU per
    1,000 steps relative to the one-process figure (the flatness target)."""
    out: list[dict[str, Any]] = []
    keys = sorted({(r["db"], r["workers"]) for r in results})
    for db, workers in keys:
        rs = [r for r in results if r["db"] == db and r["workers"] == workers]
        row: dict[str, Any] = {"db": db, "workers": workers, "rounds": len(rs)}
        for name in ("steps_per_s", "cpu_s_per_1000_steps", "worker_cpu_s_per_1000_steps",
                     "backend_cpu_s_per_1000_steps", "lock_waits_per_step",
                     "lock_wait_ms_per_step", "machine_cpu_busy",
                     "wakeups_heard_per_step", "claim_passes_per_step",
                     "worker_start_cpu_s_per_1000_steps", "opened_backend_cpu_s_per_1000_steps",
                     "backends_opened_after_release", "transactions_per_step",
                     "statements_per_step", "listen_statements_per_step",
                     "idle_worker_cpu_s_per_s", "idle_backend_cpu_s_per_s",
                     "worker_system_cpu_s_per_1000_steps",
                     "worker_nonvoluntary_switches_per_step",
                     "worker_voluntary_switches_per_step"):
            row[name] = _median_range([r[name] for r in rs if r.get(name) is not None])
        row["rounds_where_a_worker_closed_no_run"] = sum(
            1 for r in rs if r["workers_without_closed_runs"])
        row["runs_closed_by"] = [r["runs_closed_by"] for r in rs]
        out.append(row)
    for row in out:
        one = next((o for o in out if o["db"] == row["db"] and o["workers"] == 1), None)
        if one and one["cpu_s_per_1000_steps"] and row["cpu_s_per_1000_steps"]:
            row["cpu_vs_1_process"] = round(row["cpu_s_per_1000_steps"]["median"]
                                            / one["cpu_s_per_1000_steps"]["median"], 3)
    return out


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="scaling across worker processes; worker loss")
    p.add_argument("--part", choices=["throughput", "failover", "all"], default="all")
    p.add_argument("--db", choices=[*DBS, "all"], default="all")
    p.add_argument("--workers", default="1,2,4", help="worker process counts (1,2,4)")
    p.add_argument("--workflows", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3,
                   help="throughput: rounds over the process counts, order rotated (3)")
    p.add_argument("--lock-sample-interval", type=float, default=0.05,
                   help="throughput, PostgreSQL: seconds between pg_stat_activity/pg_locks "
                        "samples (0.05)")
    p.add_argument("--steps", type=int, default=5, help="remote activities per workflow (5)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="throughput: start the workflows at this many a second after the "
                        "release (a steady load below what the machine can take, so CPU "
                        "per step is not the oversubscribed machine's); 0 (default): all "
                        "of them waiting before the release")
    p.add_argument("--warmup", type=int, default=200,
                   help="throughput: workflows (of --steps steps) each measurement's processes "
                        "run first, on a queue of their own, before the release, so that "
                        "the figures are the steady state's: pools grown, statements prepared, "
                        "LISTEN connection open (200; 0: cold start, as before 12-06)")
    p.add_argument("--stagger", type=float, default=0.0,
                   help="throughput: process i starts its worker i x this many seconds "
                        "after the release (a fleet coming up one after another; 0, the "
                        "default: all at once)")
    p.add_argument("--max-pool", type=int, default=0,
                   help="throughput, PostgreSQL: each worker process's pool size "
                        "(max_pool; 0: the driver's default, 10)")
    p.add_argument("--idle-seconds", type=float, default=2.0,
                   help="throughput: after every run closed, seconds the processes idle on "
                        "to measure their fixed CPU per second (2; 0: skip)")
    p.add_argument("--time-limit", type=float, default=300.0,
                   help="give up on a throughput run after this many seconds")
    p.add_argument("--runs", type=int, default=40, help="runs the failover victim owns (40)")
    p.add_argument("--leases", default="2,15", help="lease lengths for failover (2,15)")
    p.add_argument("--setup-seconds", type=float, default=3.0,
                   help="failover: from starting the runs to the kill, at least (3)")
    p.add_argument("--seed", type=int, default=1, help="failover: seeds the kill phase")
    p.add_argument("--pg-url", default=PG_URL, help=f"PostgreSQL URL (default {PG_URL})")
    p.add_argument("--sqlite-dir", default=None, help="directory for the SQLite files")
    p.add_argument("--out", default=str(HERE / "results" / "scaling.json"))
    # worker process mode
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--db-url", dest="serve_db", default=None, help=argparse.SUPPRESS)
    p.add_argument("--name", default="worker", help=argparse.SUPPRESS)
    p.add_argument("--lease", type=float, default=15.0, help=argparse.SUPPRESS)
    p.add_argument("--gate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--victim", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.workers = [int(x) for x in _floats(args.workers)]
    args.leases = _floats(args.leases)
    if args.workflows < 1 or args.steps < 1 or args.runs < 2 or not args.workers:
        raise SystemExit("--workflows, --steps >= 1, --runs >= 2, --workers not empty")
    if args.rounds < 1 or args.lock_sample_interval <= 0:
        raise SystemExit("--rounds must be >= 1 and --lock-sample-interval > 0")
    return args


def _mr(s: dict[str, float] | None, fmt: str) -> str:
    if s is None:
        return "-"
    if s["n"] == 1:
        return f"{s['median']:{fmt}}"
    return f"{s['median']:{fmt}} [{s['min']:{fmt}}-{s['max']:{fmt}}]"


def markdown_throughput(report: dict[str, Any]) -> str:
    """The throughput table, ready to paste into docs/benchmarks.md."""
    lines = [f"`{report['command']}`, commit {report['git']['commit']}, "
             f"{report['started_at'][:16].replace('T', ' ')} UTC, load average "
             f"{report['load_average_before']} before, {report['load_average_after']} after; "
             "median [min-max] over rounds.", "",
             "| storage | processes | steps/s | CPU s / 1,000 steps (ours + PG backends) "
             "| ours | PG backends | vs 1 process | wake-ups heard / step "
             "| claim passes / step | lock waits / step | lock wait ms / step "
             "| runs closed per process (each round) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in report.get("throughput_summary", []):
        closed = "; ".join(" / ".join(str(v) for v in by.values())
                           for by in row["runs_closed_by"])
        lines.append(
            f"| {row['db']} | {row['workers']} | {_mr(row['steps_per_s'], '.0f')} | "
            f"{_mr(row['cpu_s_per_1000_steps'], '.2f')} | "
            f"{_mr(row['worker_cpu_s_per_1000_steps'], '.2f')} | "
            f"{_mr(row['backend_cpu_s_per_1000_steps'], '.2f')} | "
            f"{row.get('cpu_vs_1_process', '-')} | "
            f"{_mr(row.get('wakeups_heard_per_step'), '.2f')} | "
            f"{_mr(row.get('claim_passes_per_step'), '.3f')} | "
            f"{_mr(row['lock_waits_per_step'], '.3f')} | "
            f"{_mr(row['lock_wait_ms_per_step'], '.2f')} | {closed} |")
    lines += ["", "Where it goes (worker processes' own counters since the release, summed "
              f"over the processes; warm-up {report['args'].get('warmup', 0)} workflows "
              "before the release):", "",
              "| storage | processes | transactions / step | statements / step "
              "| LISTEN+UNLISTEN / step | worker start CPU s / 1,000 steps "
              "| backends opened after release | their CPU s / 1,000 steps "
              "| worker system CPU s / 1,000 steps | involuntary switches / step "
              "| idle CPU s / s per process (worker, backends) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in report.get("throughput_summary", []):
        lines.append(
            f"| {row['db']} | {row['workers']} | {_mr(row.get('transactions_per_step'), '.3f')} | "
            f"{_mr(row.get('statements_per_step'), '.2f')} | "
            f"{_mr(row.get('listen_statements_per_step'), '.2f')} | "
            f"{_mr(row.get('worker_start_cpu_s_per_1000_steps'), '.3f')} | "
            f"{_mr(row.get('backends_opened_after_release'), '.0f')} | "
            f"{_mr(row.get('opened_backend_cpu_s_per_1000_steps'), '.2f')} | "
            f"{_mr(row.get('worker_system_cpu_s_per_1000_steps'), '.2f')} | "
            f"{_mr(row.get('worker_nonvoluntary_switches_per_step'), '.1f')} | "
            f"{_mr(row.get('idle_worker_cpu_s_per_s'), '.4f')}, "
            f"{_mr(row.get('idle_backend_cpu_s_per_s'), '.4f')} |")
    return "\n".join(lines) + "\n"


def _print(results: dict[str, Any]) -> None:
    if results["throughput"]:
        print(f"{'db':<9} {'workers':>7} {'steps':>6} {'seconds':>8} {'steps/s':>8} "
              f"{'cpu busy':>8} {'cpu/1k':>7} {'locks/step':>10}  runs closed by / attempts by")
        for r in results["throughput"]:
            print(f"{r['db']:<9} {r['workers']:>7} {r['steps_total']:>6} {r['seconds']:>8.2f} "
                  f"{r['steps_per_s']:>8.1f} {r['machine_cpu_busy']:>8.0%} "
                  f"{r.get('cpu_s_per_1000_steps', float('nan')):>7.2f} "
                  f"{r.get('lock_waits_per_step', float('nan')):>10.3f}  "
                  f"{r['runs_closed_by']} / {r['activity_attempts_by']}")
    if results["failover"]:
        print(f"{'db':<9} {'lease':>5} {'kind':<9} {'lease left':>16} "
              f"{'kill->resumed first/med/last':>30} {'kill->completed first/med/last':>32}")
        for r in results["failover"]:
            for kind in ("activity", "timer", "all"):
                s = r[kind]
                ll, rs, cp = (s["lease_left_at_kill_s"], s["kill_to_resumed_s"],
                              s["kill_to_completed_s"])
                if rs["first"] is None:
                    continue
                print(f"{r['db']:<9} {r['lease_seconds']:>5g} {kind:<9} "
                      f"{ll['first']:>7.2f}..{ll['last']:<7.2f} "
                      f"{rs['first']:>9.2f} {rs['median']:>9.2f} {rs['last']:>9.2f}   "
                      f"{cp['first']:>9.2f} {cp['median']:>9.2f} {cp['last']:>9.2f}")
            if r["problems"]:
                print(f"  problems: {r['problems']}")


def git_revision() -> dict[str, Any]:
    """The commit measured, and the tracked files changed on top of it."""
    def git(*argv: str) -> str:
        try:
            out = subprocess.run(["git", *argv], cwd=HERE, capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"),
            "modified": git("status", "--porcelain", "--untracked-files=no").splitlines()}


def main(argv: list[str] | None = None) -> int:
    global WORKER_NAME, VICTIM
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.serve:
        WORKER_NAME, VICTIM = args.name, args.victim
        anyio.run(_serve, args)
        return 0
    started = datetime.datetime.now(datetime.UTC)
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="durable_scaling_", dir=args.sqlite_dir) as tmp:
        results = anyio.run(run, args, Path(tmp))
    report = {
        "started_at": started.isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "args": {k: v for k, v in vars(args).items()
                 if k not in ("serve", "serve_db", "name", "lease", "gate", "victim", "warm")},
        "git": git_revision(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **results,
    }
    _print(results)
    print(f"load average before/after {report['load_average_before']} / "
          f"{report['load_average_after']}")
    if results.get("throughput_summary"):
        report["markdown"] = markdown_throughput(report)
        print()
        print(report["markdown"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps(report, default=str))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
