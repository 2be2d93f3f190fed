"""Wall time per durable timer on virtual time (issue [2/8] item 19).

A workflow sleeps ``--timers`` times for a minute each under
`durable.testing.TimeSkippingEnvironment` (nothing else runnable, so each
timer is skipped to at once); the figure is wall-clock ms per virtual timer,
median over ``--rounds``. Target: under 1 ms. The docs' ``poller`` example
(10,000 timers over 100 runs chained by continue-as-new) is the same shape.

    python benchmarks/virtual_time.py --timers 2000 --rounds 3 [--backend trio]
    python benchmarks/virtual_time.py --url "sqlite:///tmp/vt.db"
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio

from durable import workflow
from durable.testing import TimeSkippingEnvironment


@workflow.defn(name="vt_sleeper")
async def sleeper(n: int) -> int:
    for _ in range(n):
        await workflow.sleep(60)
    return n


async def one_round(url: str, timers: int) -> float:
    async with TimeSkippingEnvironment(url) as env, env.worker(workflows=[sleeper]):
        t0 = time.perf_counter()
        handle = await env.client.start(sleeper, timers, id=f"vt-{time.monotonic_ns()}")
        assert await handle.result() == timers
        elapsed = time.perf_counter() - t0
    return elapsed * 1000 / timers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timers", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default="sqlite://:memory:")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    figures = [anyio.run(one_round, args.url, args.timers, backend=args.backend)
               for _ in range(args.rounds)]
    print(f"{args.backend} {args.url}: {statistics.median(figures):.3f} ms per virtual timer "
          f"(median of {args.rounds}; rounds: {', '.join(f'{f:.3f}' for f in figures)}; "
          f"target < 1 ms)")


if __name__ == "__main__":
    main()
