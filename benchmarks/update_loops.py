"""Updates on one run, asyncio against trio (issue 20: "600 updates on PostgreSQL
take 40 s under trio against 8.5 s under asyncio").

One process per host loop and round (alternating, so a busy machine hurts
both alike): a worker and a client in the same process, one run of a class
workflow, `--updates` updates sent one after another (each awaited), after
10 not counted. For each it prints ms per update, the storage transactions
per update by kind (what the engine asks of the driver: the same work on
both loops, or not), and the median round trip of ``SELECT 1`` through the
driver, which on trio crosses to asyncpg's loop thread and back
(`durable_postgres.bridge`).

Usage::

    nice -n 10 python benchmarks/update_loops.py [--updates 200] [--rounds 2]
        [--url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import anyio

import durable
from durable import workflow

PG_URL = os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@workflow.defn(name="bench-counter")
class Counter:
    def __init__(self) -> None:
        self.total = 0
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return self.total

    @workflow.update
    def add(self, k: int) -> int:
        self.total += k
        return self.total

    @workflow.signal
    def finish(self) -> None:
        self.done = True


async def measure(url: str, updates: int) -> dict[str, Any]:
    calls: collections.Counter[str] = collections.Counter()
    async with durable.connect(url) as client:
        driver: Any = client.driver
        run = driver.run

        async def counted(program: Any, *, write: bool = True) -> Any:
            calls[str(getattr(program, "__qualname__", "?")).split(".")[1]] += 1
            return await run(program, write=write)

        driver.run = counted
        async with durable.Worker(client, workflows=[Counter], poll_interval=0.2):
            handle = await client.start(Counter, id=f"bench-{uuid.uuid4().hex}")
            for _ in range(10):
                await handle.update("add", 0)
            calls.clear()
            started = time.perf_counter()
            for _ in range(updates):
                await handle.update("add", 1)
            elapsed = time.perf_counter() - started
            await handle.signal("finish")
        per_call = []
        pool = getattr(driver, "_pool", None)
        if pool is not None:
            async def select_one() -> Any:
                async with pool.acquire() as conn:
                    return await conn.fetchval("SELECT 1")

            for _ in range(200):
                t = time.perf_counter()
                await driver._call(select_one)
                per_call.append((time.perf_counter() - t) * 1000)
    return {"ms_per_update": elapsed / updates * 1000,
            "calls_per_update": {k: round(v / updates, 2) for k, v in calls.most_common()},
            "select1_median_ms": statistics.median(per_call) if per_call else None}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--url", default=PG_URL)
    p.add_argument("--one", choices=["asyncio", "trio"], help=argparse.SUPPRESS)
    p.add_argument("--switch-interval", type=float, default=None,
                   help="set sys.setswitchinterval first (the trio bridge then keeps it; "
                        "0.0050001 measures the interpreter's default 5 ms)")
    args = p.parse_args(argv)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if args.one:
        result = anyio.run(measure, args.url, args.updates, backend=args.one)
        print(json.dumps(result))
        return
    rows: dict[str, list[dict[str, Any]]] = {"asyncio": [], "trio": []}
    for _ in range(args.rounds):
        for backend in rows:
            extra = ([] if args.switch_interval is None
                     else ["--switch-interval", str(args.switch_interval)])
            out = subprocess.run(
                [sys.executable, __file__, "--one", backend, "--updates", str(args.updates),
                 "--url", args.url, *extra], capture_output=True, text=True, check=True)
            rows[backend].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for backend, results in rows.items():
        ms = [r["ms_per_update"] for r in results]
        print(f"{backend:8} {statistics.median(ms):7.1f} ms/update "
              f"(rounds: {', '.join(f'{m:.1f}' for m in ms)}); SELECT 1 via the driver "
              f"{statistics.median(r['select1_median_ms'] for r in results):.2f} ms")
        print(f"         transactions per update: {results[-1]['calls_per_update']}")
    a = statistics.median(r["ms_per_update"] for r in rows["asyncio"])
    t = statistics.median(r["ms_per_update"] for r in rows["trio"])
    print(f"trio / asyncio: {t / a:.2f}x; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
