"""CPU of the event loop's thread per sequential local step, for A/B runs.

Usage::

    python benchmarks/step_cpu.py [asyncio|trio] [steps] [batched|per-step] [FULL|NORMAL]
    DURABLE_TREE=/other/checkout python benchmarks/step_cpu.py

`DURABLE_TREE` runs the `durable` and `durable_sqlite` of another checkout.
(``PYTHONPATH`` alone does not: an editable install's import hook keeps
`durable` on the installed checkout, and only the drivers came from the
other one.)

One workflow of `steps` (default 2,000) trivial local steps on a fresh
SQLite file (WAL + NORMAL), three times after a warm-up; prints the median
CPU time of the loop's thread per step (`time.thread_time`, which a loaded
machine disturbs less than wall time), of the SQLite driver's database thread
(its transactions, its wake-ups and the caller's; read through
`time.pthread_getcpuclockid`), the process's CPU per step (both, and the
passive checkpoints' threads) and the wall time per step; with
``batched``, the steps are recorded with ``record="batched"`` (one commit per
64 steps: what is left is the engine's Python per step); with ``FULL``, the
file is opened with ``?synchronous=FULL`` (each commit's fsync, on the
database thread: its wait is wall time, not CPU). Alternate
it with another checkout (PYTHONPATH) to compare two builds.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

if os.environ.get("DURABLE_TREE"):  # before durable is imported: see the docstring
    _tree = os.environ["DURABLE_TREE"]
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path[:0] = [_tree, os.path.join(_tree, "drivers")]

import anyio

import durable
from durable import activity, workflow


@activity.defn(name="bench_step")
async def bench_step(i: int) -> int:
    return i * 2 + 1


_BATCHED = len(sys.argv) > 3 and sys.argv[3] == "batched"
_SYNCHRONOUS = sys.argv[4].upper() if len(sys.argv) > 4 else "NORMAL"


@workflow.defn(name="bench_local")
async def bench_local(n: int) -> int:
    total = 0
    options = durable.ActivityOptions(record="batched") if _BATCHED else None
    for i in range(n):
        total += await workflow.execute_local_activity(bench_step, i, options=options)
    return total


async def main() -> None:
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    cpu: list[float] = []
    db: list[float] = []
    proc: list[float] = []
    wall: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        async with durable.connect(f"sqlite:///{d}/steps.db?synchronous={_SYNCHRONOUS}") as client:
            clock = time.pthread_getcpuclockid(client.driver._writer.thread.ident)  # type: ignore[attr-defined]
            async with durable.Worker(client, workflows=[bench_local], activities=[bench_step]):
                await (await client.start(bench_local, 10, id="warm")).result()
                for r in range(3):
                    c0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
                    d0 = time.clock_gettime(clock)
                    await (await client.start(bench_local, n, id=f"r{r}")).result()
                    cpu.append((time.thread_time() - c0) / n * 1e6)
                    db.append((time.clock_gettime(clock) - d0) / n * 1e6)
                    proc.append((time.process_time() - p0) / n * 1e6)
                    wall.append((time.perf_counter() - w0) / n * 1e6)
    print(f"loop thread CPU {statistics.median(cpu):.1f} µs/step, "
          f"database thread CPU {statistics.median(db):.1f} µs/step, "
          f"process CPU {statistics.median(proc):.1f} µs/step, "
          f"wall {statistics.median(wall):.1f} µs/step, synchronous={_SYNCHRONOUS} "
          f"({os.path.dirname(durable.__file__)})")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
