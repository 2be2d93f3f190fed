"""Schedules at scale (issue [5/9]): 10,000 schedules firing every minute, one worker.

    python benchmarks/schedules.py [--db sqlite|postgres|both] [--schedules 10000]
        [--minutes 3] [--warmup 60] [--burst] [--json out.json]

Each schedule fires every minute (``ScheduleSpec(every=60, offset=k % 60)``:
the fires spread evenly over the minute, about 167 a second; ``--burst``
gives them all offset 0, so all 10,000 are due in the same second) and starts
a workflow that returns at once (overlap ALLOW_ALL: a fire never waits for the
previous run); one `durable.Worker` in this process fires them and runs the
runs, or, with ``--fire-only``, fires them and runs nothing (the runs stay
pending: what firing alone costs). After ``--warmup`` seconds, for ``--minutes``
minutes, every fire is read back from storage:

* **lateness** = the instant the fire was recorded and its run started (the
  engine's clock reading for that transaction, ``schedule_fires.fired_at``)
  minus the instant it was due (``due_at``: its time, no jitter here);
  p50 / p90 / p99 / max; target p99 <= 100 ms;
* **committed lateness** = when the pass that recorded the fire returned
  (committed: its run visible and claimable) minus when it was due; with
  batches the later of the two (``committed_p50_ms`` / ``committed_p99_ms``);
* **CPU per fire** = this process's CPU time (every thread: the event loop
  and SQLite's database thread) over the window, divided by the fires in it;
  on PostgreSQL also the server backends serving it (``/proc/<pid>/stat``);
  it covers firing *and* running the started runs (claim, execute, close);
* fires expected in the window vs recorded (a missed or skipped fire shows).

``--statements`` measures instead, with no load and no clock, how many
statements (round trips, BEGIN and COMMIT included) the scheduler spends per
fire and per pass (transaction) when 1, 10 or 60 schedules are due at once
and one pass fires them: 60 schedules, every run closed before its
schedule's next fire; deterministic, so a change shows.

SQLite: a file in a temporary directory (WAL, synchronous=NORMAL, the
defaults). PostgreSQL: a schema of its own at ``DURABLE_BENCH_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``), dropped afterwards.
Run it when the machine is quiet; the load average is printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

import durable
from durable import Overlap, ScheduleSpec, activity, workflow
from durable.driver import Program, Tx, q

TARGET_P99_MS = 100.0
PG_URL = os.environ.get("DURABLE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@workflow.defn(name="bench_scheduled")
async def scheduled() -> None:
    return None


@activity.defn(name="bench_unused")
async def unused() -> None:
    """What a fire-only worker registers: it fires schedules and runs nothing."""


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    return values[max(1, math.ceil(p / 100 * len(values))) - 1]


def _proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _backend_pids(client: durable.Client) -> list[int]:
    app = getattr(client.driver, "application_name", None)
    if not app:
        return []

    def pids(tx: Tx) -> Program[list[int]]:
        rows = yield q("SELECT pid FROM pg_stat_activity WHERE application_name = ?", app)
        return [int(r["pid"]) for r in rows]

    return await client.store.driver.run(pids, write=False)


async def _create(client: durable.Client, n: int, burst: bool) -> float:
    t0 = time.perf_counter()
    limiter = anyio.CapacityLimiter(32)

    async def one(k: int) -> None:
        async with limiter:
            await client.create_schedule(
                f"bench-{k:05d}", ScheduleSpec(every=60, offset=0 if burst else k % 60),
                scheduled, overlap=Overlap.ALLOW_ALL)

    async with anyio.create_task_group() as tg:
        for k in range(n):
            tg.start_soon(one, k)
    return time.perf_counter() - t0


async def _fires(client: durable.Client, start: float, end: float) -> list[tuple[float, float]]:
    def read(tx: Tx) -> Program[list[tuple[float, float]]]:
        rows = yield q("SELECT due_at, fired_at, outcome FROM schedule_fires WHERE namespace = ? "
                       "AND due_at >= ? AND due_at < ?", client.namespace, start, end)
        return [(float(r["due_at"]), float(r["fired_at"])) for r in rows]

    return await client.store.driver.run(read, write=False)


def _time_commits(client: durable.Client) -> list[tuple[float, float]]:
    """(due, committed) of every fire the worker's passes return: a pass records
    its fires at its start (``fired_at``) but they become visible, their runs
    claimable, when it commits; with a batch of fires a pass, that is later."""
    seen: list[tuple[float, float]] = []
    store = client.store
    original = store.fire_schedules

    async def timed(*args: Any) -> Any:
        done = await original(*args)
        now = client.clock.now()
        seen.extend((dt.datetime.fromisoformat(f["due_at"]).timestamp(), now)
                    for f in done.fires)
        return done

    store.fire_schedules = timed  # type: ignore[method-assign]
    return seen


async def measure(url: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    from durable import _scheduler

    _scheduler.FIRE_BATCH = args.fire_batch
    async with durable.connect(url) as client:
        commits = _time_commits(client)
        try:
            created_s = await _create(client, args.schedules, args.burst)
            worker = (durable.Worker(client, activities=[unused]) if args.fire_only else
                      durable.Worker(client, workflows=[scheduled],
                                     max_concurrent_runs=args.schedules))
            async with worker:
                await anyio.sleep(args.warmup)
                pids = await _backend_pids(client)
                backend0 = {p: _proc_cpu(p) or 0.0 for p in pids}
                cpu0, t0 = time.process_time(), client.clock.now()
                await anyio.sleep(args.minutes * 60)
                cpu1, t1 = time.process_time(), client.clock.now()
                backend1 = {p: _proc_cpu(p) for p in await _backend_pids(client)}
            fires = await _fires(client, t0, t1)
            skipped = worker.scheduler.counts.get("skipped", 0)
            missed = worker.scheduler.counts.get("missed", 0)
        finally:
            drop = getattr(client.driver, "drop_schema", None)
            if drop is not None and "schema=" in url:
                await drop()
    lateness = sorted((fired - due) * 1000 for due, fired in fires)
    visible = sorted((at - due) * 1000 for due, at in commits if t0 <= due < t1)
    backend_cpu = sum((backend1.get(p) or backend0[p]) - backend0[p] for p in backend0) + sum(
        cpu or 0.0 for p, cpu in backend1.items() if p not in backend0)
    expected = args.schedules * args.minutes
    p99 = _percentile(lateness, 99)
    result = {
        "db": label, "schedules": args.schedules, "burst": args.burst,
        "fire_only": args.fire_only,
        "create_s": round(created_s, 1), "window_s": round(t1 - t0, 1),
        "fires": len(lateness), "fires_expected_about": expected,
        "skipped": skipped, "missed": missed,
        "p50_ms": round(_percentile(lateness, 50), 2),
        "p90_ms": round(_percentile(lateness, 90), 2),
        "p99_ms": round(p99, 2), "max_ms": round(lateness[-1], 2) if lateness else None,
        "mean_ms": round(statistics.fmean(lateness), 2) if lateness else None,
        "fire_batch": args.fire_batch,
        "committed_p50_ms": round(_percentile(visible, 50), 2),
        "committed_p99_ms": round(_percentile(visible, 99), 2),
        "cpu_ms_per_fire": round((cpu1 - cpu0) / max(1, len(lateness)) * 1000, 3),
        "backend_cpu_ms_per_fire": round(backend_cpu / max(1, len(lateness)) * 1000, 3)
        if backend0 else None,
        "target_p99_ms": TARGET_P99_MS,
        "verdict": "PASS" if p99 <= TARGET_P99_MS else "MISS",
    }
    print(json.dumps(result), flush=True)
    return result


async def statements_per_fire(url: str, schedules: int = 60, minutes: int = 2,
                              together: int = 1) -> tuple[float, float]:
    """Statements (BEGIN and COMMIT included) per fire and per pass of the
    scheduler, `together` schedules due at once (one pass fires them; see the
    module docstring)."""
    from durable.store import schedule_pass

    counts = {"statements": 0, "transactions": 0}
    original = schedule_pass.fire_due

    def counted(*args: Any, **kwargs: Any) -> Any:
        program = original(*args, **kwargs)
        counts["transactions"] += 1
        value: Any = None
        try:
            while True:
                statement = program.send(value)
                counts["statements"] += 1
                value = yield statement
        except StopIteration as stop:
            return stop.value

    schedule_pass.fire_due = counted  # type: ignore[assignment]
    seconds = math.ceil(schedules / together)
    try:
        async with durable.connect(url) as client:
            for k in range(schedules):
                await client.create_schedule(f"stmt-{k:03d}",
                                             ScheduleSpec(every=60, offset=k // together),
                                             scheduled, overlap=Overlap.ALLOW_ALL)
            base = (int(client.clock.now()) // 60 + 1) * 60
            fires = 0
            for minute in range(minutes + 1):
                if minute == 1:  # the first minute warms up (the runs' first closes)
                    counts.update(statements=0, transactions=0)
                    fires = 0
                for k in range(seconds):
                    done = await client.store.fire_schedules(
                        client.namespace, base + minute * 60 + k + 0.001, 100, False)
                    fires += len(done.fires)
                for run in await client.list(status="pending", limit=10 * schedules):
                    await client.get_handle(run["workflow_id"]).terminate("benchmark")
            drop = getattr(client.driver, "drop_schema", None)
            if drop is not None and "schema=" in url:
                await drop()
    finally:
        schedule_pass.fire_due = original
    total = counts["statements"] + 2 * counts["transactions"]
    return total / max(1, fires), total / max(1, counts["transactions"])


async def main(args: argparse.Namespace) -> None:
    if args.statements:
        with tempfile.TemporaryDirectory() as tmp:
            urls = []
            for together in (1, 10, 60):
                if args.db in ("sqlite", "both"):
                    urls.append(("sqlite", together,
                                 f"sqlite:///{Path(tmp) / f'stmt{together}.db'}"))
                if args.db in ("postgres", "both"):
                    sep = "&" if "?" in PG_URL else "?"
                    urls.append(("postgres", together,
                                 f"{PG_URL}{sep}schema=bench_stmt_{uuid.uuid4().hex[:8]}"))
            for label, together, url in urls:
                per_fire, per_pass = await statements_per_fire(url, together=together)
                print(json.dumps({"db": label, "due_together": together,
                                  "statements_per_fire": round(per_fire, 2),
                                  "statements_per_pass": round(per_pass, 2)}), flush=True)
        return
    print(f"python {sys.version.split()[0]}, backend {args.backend}, load average "
          f"{os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.db in ("sqlite", "both"):
            results.append(await measure(f"sqlite:///{Path(tmp) / 'bench.db'}", "sqlite", args))
        if args.db in ("postgres", "both"):
            sep = "&" if "?" in PG_URL else "?"
            url = f"{PG_URL}{sep}schema=bench_schedules_{uuid.uuid4().hex[:8]}"
            results.append(await measure(url, "postgres", args))
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--burst", action="store_true", help="every schedule due in one second")
    parser.add_argument("--fire-only", action="store_true",
                        help="the worker fires and runs nothing (the runs stay pending)")
    parser.add_argument("--statements", action="store_true",
                        help="count statements per fire instead (no load, deterministic)")
    parser.add_argument("--fire-batch", type=int, default=100,
                        help="schedules a scheduler pass takes at most (durable's FIRE_BATCH)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    anyio.run(main, arguments, backend=arguments.backend)
