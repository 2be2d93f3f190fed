"""The kept connection, A/B in one process (issue 26).

Workflows of ``--steps`` sequential local steps on PostgreSQL (asyncio),
alternating, workflow by workflow, the driver as it is (a transaction takes
the connection the last one left: `durable_postgres.driver._Lease`; the
host's cancel scope class found once) with the driver as it was (``KEEP =
0``: every transaction through asyncpg's ``pool.acquire``/``release``;
``anyio.CancelScope`` looked up per call). One process, one schema, one
server: on a machine shared with other jobs, pairs a few hundred
milliseconds apart see the same load, which separate processes minutes
apart (``run.py``) do not. The order flips every pair.

Usage::

    python benchmarks/pg_kept_ab.py [--pairs 40] [--steps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import anyio
import durable_postgres.driver as pg

import durable
from durable import activity, workflow

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@activity.defn(name="kept_ab_step")
async def step(i: int) -> int:
    return i * 2 + 1


@workflow.defn(name="kept_ab_local")
async def local(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(step, i)
    return total


async def measure(pairs: int, steps: int, url: str) -> dict[str, list[tuple[float, float]]]:
    sep = "&" if "?" in url else "?"
    client = await durable.connect(f"{url}{sep}schema=durable_kept_ab_{uuid.uuid4().hex[:8]}")
    driver: pg.PostgresDriver = client.driver  # type: ignore[assignment]
    scope = driver._scope
    found: dict[str, list[tuple[float, float]]] = {"before": [], "kept": []}
    try:
        async with durable.Worker(client, workflows=[local], activities=[step]):
            for k in range(5):
                await (await client.start(local, 50, id=f"warm-{k}")).result()
            for n in range(pairs):
                for mode in ("kept", "before") if n % 2 else ("before", "kept"):
                    if mode == "kept":
                        pg.KEEP, driver._scope = 2, scope
                    else:
                        pg.KEEP, driver._scope = 0, anyio.CancelScope
                        for conn in driver._release_kept():
                            await driver._require_pool().release(conn)
                    c0, t0 = time.process_time(), time.perf_counter()
                    await (await client.start(local, steps, id=f"{mode}-{n}")).result()
                    found[mode].append(((time.perf_counter() - t0) * 1000 / steps,
                                        (time.process_time() - c0) * 1000 / steps))
    finally:
        pg.KEEP = 2
        await driver.drop_schema()
        await client.close()
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--pg-url", default=PG_URL)
    args = p.parse_args()
    found = asyncio.run(measure(args.pairs, args.steps, args.pg_url))
    for mode, values in found.items():
        walls = [w for w, _ in values]
        print(f"{mode:7s} wall {statistics.median(walls):.3f} [{min(walls):.3f}-{max(walls):.3f}] "
              f"ms/step, process CPU {statistics.median(c for _, c in values):.3f} ms/step")
    ratios = [b[0] / k[0] for b, k in zip(found["before"], found["kept"], strict=True)]
    print(f"before / kept, pair by pair: {statistics.median(ratios):.3f} "
          f"[{min(ratios):.2f}-{max(ratios):.2f}]; kept faster in "
          f"{sum(r > 1 for r in ratios)} of {len(ratios)} pairs")


if __name__ == "__main__":
    main()
