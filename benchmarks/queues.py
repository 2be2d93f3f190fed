"""What queue limits cost a claim: claim throughput with limits set vs none.

Usage::

    python benchmarks/queues.py [--db sqlite,postgres] [--rounds 5] [--runs 2000]
        [--claimers 1] [--warmup 1] [--no-analyze] [--postgres-url URL]
        [--cells none,max_running,per_key,rate,per_key_near]

Each cell starts a backlog of `--runs` runs on a queue of its own, then
`--claimers` concurrent claimers take them through `Store.claim_runs` in
batches of 100 (the worker's `CLAIM_BATCH`) until none is left; the figure is
runs claimed per second. Nothing executes the runs: this is the claim alone,
where the limits are enforced. The limits are set high enough never to bind
(a binding limit's throughput is the limit), so what is measured is their
cost:

- ``none``: no limits (PostgreSQL: the one-statement claim);
- ``max_running``: ``max_running=10**9`` (the limited claim: the queue's row
  locked, live leases counted, runs picked by priority then age);
- ``per_key``: ``max_running_per_key=10**9`` over 100 keys (what runs per key
  counted; a window over the candidates only when keys at their limit crowd them);
- ``rate``: ``rate=Rate(10**9, per=1)`` (a token bucket in the queue's row);
- ``per_key_near``: ``max_running_per_key`` equal to what each of the 100
  keys holds in the backlog (21 at the default ``--runs``): it never binds
  either, but a claim cannot tell that from what runs (the most any key runs
  plus the claim's size passes the limit), so every claim takes the full
  per-key path (keys at their limit left out, the candidates numbered per
  key) that ``per_key`` skips. This is the cost where keys are near their
  limit.

Rounds interleave the cells (each round starts one cell further on);
median [min-max]; the cost is against ``none`` of the same storage. On
PostgreSQL it also counts the statements sent per claim (each a round trip;
BEGIN and COMMIT included), which a loaded host does not change. The target
(issue 24): at most 10%.

What is timed is a worker's steady state, the same for every cell:

- ``--warmup`` rounds (1) run first and are not counted: the first cells on
  a fresh database (a new schema on PostgreSQL) paid for cold caches and
  plans, and the first round's ``none``, always the very first cell, came
  out 2-3x off the others;
- each cell's first claim is not timed: a client's first claim of a queue
  learns whether it is limited (on PostgreSQL the one-statement claim finds
  it limited, then a transaction claims; once per queue and process, which
  a worker that keeps claiming does not pay again);
- on PostgreSQL the backlog's tables are analyzed before the claims
  (``ANALYZE``, as autovacuum does on a database in use), so that every cell
  is planned from the table it claims from, not from a fresh table's
  statistics, and autovacuum's own ANALYZE does not land in one cell at
  random (``--no-analyze``: as before).

``--rate-check SECONDS`` measures a rate instead: a queue limited to
``Rate(100, per=10)``, a backlog of runs, one real worker; it counts the runs
started in each 10 s window and in all (target: within 10% of 10 a second).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durable
from durable.driver import Program, ex, q
from durable.store.records import StartRequest

CELLS: dict[str, durable.QueueLimits] = {
    "none": durable.QueueLimits(),
    "max_running": durable.QueueLimits(max_running=10**9),
    "per_key": durable.QueueLimits(max_running_per_key=10**9),
    "rate": durable.QueueLimits(rate=durable.Rate(10**9, per=1)),
    "per_key_near": durable.QueueLimits(),  # set in `cell`: what a key holds in the backlog
}
KEYS = 100
BATCH = 100


async def backlog(client: durable.Client, queue: str, runs: int) -> None:
    store, now = client.store, time.time()
    for i in range(runs):
        await store.start_workflow(StartRequest(
            client.namespace, f"{queue}-{i}", "bench", queue, "[]", "reject_duplicate", None,
            None, concurrency_key=f"key-{i % KEYS}"), now)


def analyzed() -> Program[None]:
    for table in ("runs", "workflows", "task_queues", "workers"):
        yield ex(f"ANALYZE {table}")
    return None


#: statements sent to PostgreSQL (each one round trip: BEGIN and COMMIT count)
SENT = [0]


def count_round_trips() -> None:
    """Count every statement asyncpg sends, whichever pooled connection sends it."""
    try:
        from asyncpg.connection import Connection
    except ImportError:
        return
    for method in ("fetch", "fetchrow", "fetchval", "execute", "executemany"):
        original = getattr(Connection, method)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            SENT[0] += 1
            return _original(self, *args, **kwargs)

        setattr(Connection, method, counted)


async def cell(url: str, name: str, runs: int, claimers: int,
               analyze: bool = True) -> tuple[float, float, float]:
    """Runs claimed per second on a fresh queue with the cell's limits, this
    process's CPU ms per 100 runs claimed (SQLite's work runs in it: the figure
    a loaded host disturbs least), and statements sent per claim (PostgreSQL:
    round trips, the figure no load disturbs); the first claim not timed."""
    queue = f"{name}-{uuid.uuid4().hex[:8]}"
    async with durable.connect(url) as client:
        await backlog(client, queue, runs + BATCH)
        limits = CELLS[name]
        if name == "per_key_near":  # each key's share of the backlog: never binds
            limits = durable.QueueLimits(max_running_per_key=-(-(runs + BATCH) // KEYS))
        await client.set_queue_limits(queue, limits)
        if analyze and client.driver.dialect.writable_cte:  # PostgreSQL
            await client.driver.run(lambda tx: analyzed(), write=True)
        # the untimed first claim: the store learns whether the queue is limited
        first = await client.store.claim_runs(client.namespace, queue, "w0", ("bench",),
                                              BATCH, 600.0, time.time())
        claimed = calls = 0

        async def claimer(n: int) -> None:
            nonlocal claimed, calls
            while True:
                got = await client.store.claim_runs(client.namespace, queue, f"w{n}",
                                                    ("bench",), BATCH, 600.0, time.time())
                calls += 1
                if not got:
                    return
                claimed += len(got)

        t0, c0, s0 = time.perf_counter(), time.process_time(), SENT[0]
        async with anyio.create_task_group() as tg:
            for n in range(claimers):
                tg.start_soon(claimer, n)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        # (a rate's first claim takes one run: its bucket starts with one token)
        assert claimed + len(first) == runs + BATCH, (name, claimed, len(first), runs)
        return claimed / elapsed, cpu * 1000 / claimed * 100, (SENT[0] - s0) / calls


@durable.workflow.defn(name="bench_rated")
async def rated() -> None:
    return None


def started(queue: str) -> Program[list[Any]]:
    rows: list[Any] = yield q("SELECT started_at FROM runs WHERE task_queue = ? AND "
                              "started_at IS NOT NULL", queue)
    return rows


async def rate_check(url: str, seconds: float) -> None:
    """Starts a queue with Rate(100, per=10) lets through in `seconds`."""
    queue = f"rated-{uuid.uuid4().hex[:8]}"
    async with durable.connect(url) as client:
        await client.set_queue_limits(queue, durable.QueueLimits(rate=durable.Rate(100, per=10)))
        for i in range(int(seconds * 10 * 1.5) + 50):
            await client.start(rated, id=f"{queue}-{i}",
                               options=durable.StartOptions(task_queue=queue))
        async with durable.Worker(client, workflows=[rated], task_queue=queue,
                                  poll_interval=1.0):
            t0 = time.time()
            await anyio.sleep(seconds)
        rows = await client.driver.run(lambda tx: started(queue), write=False)
    times = sorted(float(r["started_at"]) for r in rows)
    inside = [t - t0 for t in times if t0 <= t <= t0 + seconds]
    windows = [sum(1 for t in inside if w * 10 <= t < (w + 1) * 10)
               for w in range(int(seconds // 10))]
    expected = 1 + seconds * 10  # one token at first, then 10 a second
    print(f"{url.split(':')[0]}: {len(inside)} starts in {seconds:g} s (expected {expected:g}, "
          f"{(len(inside) / expected - 1) * 100:+.1f}%); per 10 s window: {windows}")


def postgres_url(base: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema=bench_queues_{uuid.uuid4().hex[:8]}"


async def drop(url: str) -> None:
    async with durable.connect(url) as client:
        dropper = getattr(client.driver, "drop_schema", None)
        if dropper is not None:
            await dropper()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--claimers", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1,
                        help="rounds run first and not counted")
    parser.add_argument("--no-analyze", action="store_true",
                        help="PostgreSQL: claim without analyzing the backlog's tables first")
    parser.add_argument("--postgres-url", default=os.environ.get(
        "DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--cells", default=",".join(CELLS),
                        help="which cells, comma-separated (none is always run): "
                        f"{', '.join(CELLS)}")
    parser.add_argument("--rate-check", type=float, metavar="SECONDS",
                        help="measure Rate(100, per=10) over this long instead")
    args = parser.parse_args()
    unknown = set(args.cells.split(",")) - set(CELLS)
    if unknown:
        parser.error(f"--cells: no cell named {', '.join(sorted(unknown))} (cells: "
                     f"{', '.join(CELLS)})")
    if args.rate_check:
        with tempfile.TemporaryDirectory() as workdir:
            for db in args.db.split(","):
                url = (f"sqlite:///{workdir}/rate.db" if db == "sqlite"
                       else postgres_url(args.postgres_url))
                try:
                    await rate_check(url, args.rate_check)
                finally:
                    if db != "sqlite":
                        await drop(url)
        return
    figures: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    trips: dict[tuple[str, str], list[float]] = {}
    count_round_trips()
    with tempfile.TemporaryDirectory() as workdir:
        urls = {}
        for db in args.db.split(","):
            urls[db] = (f"sqlite:///{workdir}/bench.db" if db == "sqlite"
                        else postgres_url(args.postgres_url))
        try:
            names = ["none", *(n for n in args.cells.split(",") if n in CELLS and n != "none")]
            for r in range(-args.warmup, args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for db, url in urls.items():
                    for name in order:
                        rate, cpu, sent = await cell(url, name, args.runs, args.claimers,
                                                     not args.no_analyze)
                        if r < 0:
                            continue
                        figures.setdefault((db, name), []).append(rate)
                        cpus.setdefault((db, name), []).append(cpu)
                        trips.setdefault((db, name), []).append(sent)
        finally:
            for db, url in urls.items():
                if db != "sqlite":
                    await drop(url)
    print(f"{args.rounds} rounds (after {args.warmup} not counted) x {args.runs} runs claimed "
          f"in batches of {BATCH} by {args.claimers} claimer(s), after one claim not timed"
          f"{'' if args.no_analyze else ' (PostgreSQL: tables analyzed first)'}; runs/s and "
          "this process's CPU ms per 100 runs, median [min-max]; cost vs none\n")
    print("| storage | limits | runs/s | cost | CPU ms / 100 runs | cost | round trips / claim |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for db in urls:
        base = statistics.median(figures[(db, "none")])
        cpu_base = statistics.median(cpus[(db, "none")])
        for name in names:
            f, c = figures[(db, name)], cpus[(db, name)]
            median, cpu = statistics.median(f), statistics.median(c)
            cost = "-" if name == "none" else f"{(1 - median / base) * 100:+.1f}%"
            cpu_cost = "-" if name == "none" else f"{(cpu / cpu_base - 1) * 100:+.1f}%"
            sent = ("-" if db == "sqlite"
                    else f"{statistics.median(trips[(db, name)]):.1f}")
            print(f"| {db} | {name} | {median:.0f} [{min(f):.0f}-{max(f):.0f}] | {cost} "
                  f"| {cpu:.1f} [{min(c):.1f}-{max(c):.1f}] | {cpu_cost} | {sent} |")


if __name__ == "__main__":
    anyio.run(main)
