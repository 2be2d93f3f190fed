"""Where a sequential PostgreSQL local step's time goes (issue 26).

Workload (a) on PostgreSQL records each local step with ONE self-committing
statement (`durable.store.fastpath._local_steps_in_one`). This takes that
very statement, as a real step sent it, and times it on its own at each
layer between the server and the workflow, in one process, on asyncio:

- ``select_1``: ``SELECT 1`` on a connection held open (the round trip with
  asyncpg's protocol: the floor of any statement);
- ``stmt_held``: the step's statement on a held connection, committing on its
  own (round trip + the server's work + its WAL flush);
- ``stmt_nosync``: the same with ``synchronous_commit = off`` for that
  session only (what the WAL flush costs: measurement only, never used);
- ``stmt_pool``: the same through the driver's pool (``pool.acquire``, as
  the driver takes a connection per transaction);
- ``stmt_driver``: the same as a one-statement program through
  ``driver.run`` (the driver's whole path: its shield, the retry loop, the
  transaction, the wake-ups);
- ``step``: a workflow of ``--steps`` local steps, started and awaited
  (what ``durable_side.py --workload sequential`` measures; per step).

Each is timed in ``--rounds`` interleaved rounds of ``--n`` calls; median
[min-max] over rounds of wall and process CPU per call. The statement is
replayed on a live run (a workflow that took its steps and sleeps), each
time with a fresh op id, so every call writes the rows a step writes.
``--explain`` adds ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` of one such call
(rolled back).

Usage::

    python benchmarks/pg_step.py [--n 1000] [--rounds 5] [--steps 200] [--explain]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg.connection

import durable
from durable import activity, workflow
from durable.driver import Stmt

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@activity.defn(name="pg_step_bench")
async def bench_step(i: int) -> int:
    return i * 2 + 1


@workflow.defn(name="pg_step_local")
async def bench_local(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(bench_step, i)
    return total


@workflow.defn(name="pg_step_hold")
async def bench_hold(n: int) -> int:
    """Take `n` steps, then stay open: its run is where the statement is replayed."""
    for i in range(n):
        await workflow.execute_local_activity(bench_step, i)
    await workflow.sleep(3600)
    return 0


class Captured:
    """The last step statement (``WITH fence AS``) a connection sent, with its
    arguments."""

    def __init__(self) -> None:
        self.sql: str | None = None
        self.args: tuple[Any, ...] = ()

    def install(self) -> None:
        original = asyncpg.connection.Connection.fetchrow

        async def fetchrow(conn: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            if query.startswith("WITH fence AS (UPDATE runs SET event_seq"):
                self.sql, self.args = query, args
            return await original(conn, query, *args, **kwargs)

        asyncpg.connection.Connection.fetchrow = fetchrow  # type: ignore[method-assign]


def _fresh(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The captured arguments with a new op id (ops' key is (run_id, op_id))."""
    out = list(args)
    out[6] = f"replay-{uuid.uuid4().hex}"
    return tuple(out)


async def _timed(fn: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        await fn()
    return ((time.perf_counter() - t0) * 1e6 / n, (time.process_time() - c0) * 1e6 / n)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    captured = Captured()
    captured.install()
    sep = "&" if "?" in args.pg_url else "?"
    schema = f"durable_pgstep_{uuid.uuid4().hex[:8]}"
    client = await durable.connect(f"{args.pg_url}{sep}schema={schema}")
    driver: Any = client.driver
    figures: dict[str, list[tuple[float, float]]] = {}
    explain: list[str] = []
    try:
        async with durable.Worker(client, workflows=[bench_local, bench_hold],
                                  activities=[bench_step]):
            await (await client.start(bench_local, 10, id="warm")).result()
            await client.start(bench_hold, 5, id="hold")
            for _ in range(500):
                run_open = await driver._pool.fetchval(
                    "SELECT count(*) FROM ops WHERE run_id = (SELECT run_id FROM runs "
                    "WHERE workflow_id = 'hold') AND kind = 'timer'")
                if run_open:
                    break
                await _sleep(0.01)
            assert captured.sql is not None
            hold_run = await driver._pool.fetchval(
                "SELECT run_id FROM runs WHERE workflow_id = 'hold'")
            assert captured.args[1] == hold_run, "the last step captured is not the held run's"
            sql, base = captured.sql, captured.args

            held = await asyncpg.connect(args.pg_url, server_settings={"search_path": schema})
            nosync = await asyncpg.connect(args.pg_url, server_settings={
                "search_path": schema, "synchronous_commit": "off"})

            async def select_1() -> None:
                await held.fetchval("SELECT 1")

            async def stmt_held() -> None:
                row = await held.fetchrow(sql, *_fresh(base))
                assert row is not None

            async def stmt_nosync() -> None:
                await nosync.fetchrow(sql, *_fresh(base))

            async def stmt_pool() -> None:
                async with driver._pool.acquire(timeout=driver.connect_timeout) as conn:
                    await conn.fetchrow(sql, *_fresh(base))

            qsql = sql  # the driver numbers ``?``: give it the text with ``?`` back
            for k in range(len(base), 0, -1):
                qsql = qsql.replace(f"${k}", "?")

            async def stmt_driver() -> None:
                def program(tx: Any) -> Any:
                    row = yield Stmt(qsql, _fresh(base), "one", autocommit=True)
                    return row

                await driver.run(program)

            counter = [0]

            async def step() -> None:
                counter[0] += 1
                handle = await client.start(bench_local, args.steps, id=f"seq-{counter[0]}")
                await handle.result()

            kinds: dict[str, tuple[Callable[[], Awaitable[Any]], int]] = {
                "select_1": (select_1, args.n), "stmt_held": (stmt_held, args.n),
                "stmt_nosync": (stmt_nosync, args.n), "stmt_pool": (stmt_pool, args.n),
                "stmt_driver": (stmt_driver, args.n), "step": (step, 1)}
            for fn, n in kinds.values():  # warm-up: prepared statements, caches
                await _timed(fn, min(n, 50))
            for _ in range(args.rounds):
                for name, (fn, n) in kinds.items():
                    wall, cpu = await _timed(fn, n)
                    if name == "step":
                        wall, cpu = wall / args.steps, cpu / args.steps
                    figures.setdefault(name, []).append((wall, cpu))
            if args.explain:
                tr = held.transaction()
                await tr.start()
                try:
                    text = "EXPLAIN (ANALYZE, BUFFERS, WAL, VERBOSE false) " + sql
                    for _ in range(3):  # the last of 3: a warm cache, a plan by then generic
                        explain = [r[0] for r in await held.fetch(text, *_fresh(base))]
                finally:
                    await tr.rollback()
            await held.close()
            await nosync.close()
    finally:
        await driver.drop_schema()
        await client.close()
    out: dict[str, Any] = {"n": args.n, "rounds": args.rounds, "steps": args.steps,
                           "statement_chars": len(captured.sql or "")}
    for name, values in figures.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        out[name] = {"wall_us": [round(statistics.median(walls), 1), round(min(walls), 1),
                                 round(max(walls), 1)],
                     "cpu_us": [round(statistics.median(cpus), 1), round(min(cpus), 1),
                                round(max(cpus), 1)]}
    if explain:
        out["explain"] = explain
    return out


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--pg-url", default=PG_URL)
    p.add_argument("--n", type=int, default=1000, help="calls per round and kind")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=200, help="steps of the `step` workflow")
    p.add_argument("--explain", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    import asyncio

    found = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(found))
        return
    print(f"{args.rounds} rounds x {args.n} calls; per call (step: per step of {args.steps}); "
          "median [min-max] over rounds", file=sys.stderr)
    for name, v in found.items():
        if isinstance(v, dict):
            w, c = v["wall_us"], v["cpu_us"]
            print(f"{name:12s} wall {w[0]:8.1f} [{w[1]:.1f}-{w[2]:.1f}] µs   "
                  f"cpu {c[0]:7.1f} [{c[1]:.1f}-{c[2]:.1f}] µs")
    for line in found.get("explain", []):
        print("  " + line)


if __name__ == "__main__":
    main()
