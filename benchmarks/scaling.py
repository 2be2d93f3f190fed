"""Scaling across worker processes, and worker loss (issue [3/4]).

(a) ``throughput``: ``--workflows`` (400) workflows of ``--steps`` (5) REMOTE
    activities each (trivial ``async def`` steps) are started up front, with no
    worker running.  Then 1, 2 and 4 worker PROCESSES (``--workers``), already
    started, connected and waiting at a gate, are released together; the clock
    runs from the release to the last ``closed_at`` (read back from storage).
    Figure: steps (remote activities) per second.  Each worker process is a
    ``durable.Worker`` with its defaults (lease 15 s, poll 1 s, up to 1000
    runs and 100 activities at once) registering both the workflow and the
    activity; they share one PostgreSQL schema, or one SQLite file (WAL,
    synchronous=NORMAL).  Also reported: how the runs and the activity
    attempts were spread over the processes, the CPU seconds each process
    used, and how busy the machine's CPUs were (``/proc/stat``) during the
    run.

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
        [--workers 1,2,4] [--workflows 400] [--steps 5] [--runs 40] [--leases 2,15]

Prints a table and one JSON object, and writes ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
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
ACTIVITIES: list[Callable[..., Any]] = [step, hold]


# ---------------------------------------------------------------- worker processes


async def _serve(args: argparse.Namespace) -> None:
    async with durable.connect(args.serve_db) as client:
        print("connected", flush=True)
        if args.gate:
            await anyio.to_thread.run_sync(sys.stdin.readline)
        worker = durable.Worker(client, workflows=WORKFLOWS, activities=ACTIVITIES,
                                lease_seconds=args.lease, identity=args.name)
        async with worker:
            print("ready", flush=True)
            await anyio.sleep_forever()


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[str]
    log: Path

    def _line(self) -> str:
        assert self.popen.stdout is not None
        return self.popen.stdout.readline().strip()

    async def expect(self, word: str, within: float = 60.0) -> None:
        with anyio.fail_after(within):
            line = await anyio.to_thread.run_sync(self._line, abandon_on_cancel=True)
        if line != word:
            tail = await anyio.Path(self.log).read_text()
            raise RuntimeError(f"worker {self.name} said {line!r}, not {word!r}:\n"
                               f"{tail[-3000:]}")

    def go(self) -> None:
        stdin: IO[str] | None = self.popen.stdin
        assert stdin is not None
        stdin.write("go\n")
        stdin.flush()

    def cpu_seconds(self) -> float:
        """User + system CPU time so far (from /proc)."""
        try:
            fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)


def spawn(db: str, name: str, workdir: Path, *, lease: float = 15.0, gate: bool = False,
          victim: bool = False) -> Proc:
    argv = [sys.executable, str(SCRIPT), "--serve", "--db-url", db, "--name", name,
            "--lease", str(lease)]
    if gate:
        argv.append("--gate")
    if victim:
        argv.append("--victim")
    log = workdir / f"{name}.log"
    with open(log, "ab") as err:
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, text=True)
    return Proc(name, popen, log)


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
    async with durable.connect(storage.url) as client:
        try:
            for k in range(n):
                await client.start(flow, k * steps, steps, id=f"flow-{k}")
            procs = [spawn(storage.url, f"w{i}", workdir, gate=True) for i in range(workers)]
            for p in procs:
                await p.expect("connected")
            cpu0 = [p.cpu_seconds() for p in procs]
            busy0, total0 = cpu_busy()
            t_go = time.time()
            for p in procs:
                p.go()
            rows = await wait_closed(client, "sc_flow", n, args.time_limit)
            busy1, total1 = cpu_busy()
            cpu = [round(p.cpu_seconds() - c, 2) for p, c in zip(procs, cpu0, strict=True)]
            t_end = max(_epoch(r["closed_at"]) for r in rows)
            statuses = Counter(r["status"] for r in rows)
            closed_by: Counter[str] = Counter()
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
            await drop(client, storage)
    seconds = t_end - t_go
    return {
        "db": db, "workers": workers, "workflows": n, "steps_per_workflow": steps,
        "steps_total": n * steps, "seconds": round(seconds, 3),
        "steps_per_s": round(n * steps / seconds, 1),
        "workflows_per_s": round(n / seconds, 1),
        "statuses": dict(statuses), "wrong_results": wrong,
        "runs_closed_by": dict(sorted(closed_by.items())),
        "activity_attempts_by": dict(sorted(attempts.items())),
        "worker_cpu_s": cpu,
        "machine_cpu_busy": round((busy1 - busy0) / max(1.0, total1 - total0), 3),
    }


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
            for k in args.workers:
                print(f"throughput {db} x{k} ...", file=sys.stderr, flush=True)
                t = time.monotonic()
                out["throughput"].append(await throughput(db, k, args, workdir))
                out["throughput"][-1]["measurement_wall_s"] = round(time.monotonic() - t, 1)
    if args.part in ("failover", "all"):
        for db in dbs:
            for lease in args.leases:
                print(f"failover {db} lease {lease:g} s ...", file=sys.stderr, flush=True)
                t = time.monotonic()
                out["failover"].append(await failover(db, lease, args, workdir))
                out["failover"][-1]["measurement_wall_s"] = round(time.monotonic() - t, 1)
    return out


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="scaling across worker processes; worker loss")
    p.add_argument("--part", choices=["throughput", "failover", "all"], default="all")
    p.add_argument("--db", choices=[*DBS, "all"], default="all")
    p.add_argument("--workers", default="1,2,4", help="worker process counts (1,2,4)")
    p.add_argument("--workflows", type=int, default=400)
    p.add_argument("--steps", type=int, default=5, help="remote activities per workflow (5)")
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
    p.add_argument("--victim", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.workers = [int(x) for x in _floats(args.workers)]
    args.leases = _floats(args.leases)
    if args.workflows < 1 or args.steps < 1 or args.runs < 2 or not args.workers:
        raise SystemExit("--workflows, --steps >= 1, --runs >= 2, --workers not empty")
    return args


def _print(results: dict[str, Any]) -> None:
    if results["throughput"]:
        print(f"{'db':<9} {'workers':>7} {'steps':>6} {'seconds':>8} {'steps/s':>8} "
              f"{'cpu busy':>8}  runs closed by / attempts by")
        for r in results["throughput"]:
            print(f"{r['db']:<9} {r['workers']:>7} {r['steps_total']:>6} {r['seconds']:>8.2f} "
                  f"{r['steps_per_s']:>8.1f} {r['machine_cpu_busy']:>8.0%}  "
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
                 if k not in ("serve", "serve_db", "name", "lease", "gate", "victim")},
        "git": git_revision(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **results,
    }
    _print(results)
    print(f"load average before/after {report['load_average_before']} / "
          f"{report['load_average_after']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps(report, default=str))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
