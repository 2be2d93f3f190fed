"""One attempt of a trivial async activity, on the synchronous lane and supervised.

Usage::

    python benchmarks/local_lane.py [--backend asyncio|trio] [--rounds 15] [--calls 2000]

Calls `attempts.call_activity` for ``async def step(i): return i * 2 + 1``
(no await: `attempts.never_suspends` is true), with the synchronous lane
(as shipped) and with the supervised lane forced (`never_suspends` patched
to answer False: a cancel scope per attempt, as before issue 26), in
interleaved rounds on one host loop. The figure is CPU time of the calling
thread per attempt (`time.thread_time`), which a loaded machine disturbs
less than wall time; median [min-max] over rounds. No storage: this is the
attempt's own cost, the part of a local step the lane removes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from durable._runtime import attempts
from durable.clock import SystemClock


async def step(i: int) -> int:
    return i * 2 + 1


async def measure(rounds: int, calls: int) -> dict[str, list[float]]:
    clock = SystemClock()
    shipped = attempts.never_suspends
    lanes: dict[str, Any] = {"synchronous lane": shipped, "supervised": lambda fn: False}
    figures: dict[str, list[float]] = {name: [] for name in lanes}
    try:
        for _ in range(rounds):
            for name, choice in lanes.items():
                attempts.never_suspends = choice  # type: ignore[assignment]
                t0 = time.thread_time()
                for i in range(calls):
                    actx = attempts.ActivityContext(lambda: None, clock, None,  # type: ignore[arg-type,return-value]
                                                    activity_type="step", attempt=1)
                    await attempts.call_activity(actx, step, True, [i])
                figures[name].append((time.thread_time() - t0) / calls * 1e6)
    finally:
        attempts.never_suspends = shipped  # type: ignore[assignment]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    figures = anyio.run(measure, args.rounds, args.calls, backend=args.backend)
    for name, values in figures.items():
        print(f"{args.backend:8} {name:17} {statistics.median(values):6.2f} µs CPU/attempt "
              f"[{min(values):.2f}-{max(values):.2f}]")


if __name__ == "__main__":
    main()
