"""What a short workflow costs beside its steps: start, close and result.

Usage::

    python benchmarks/workflow_cost.py [steps] [workflows] [batches]

Starts `workflows` (default 100) workflows of `steps` (default 0) trivial
local steps each, every start awaited in turn, then awaits every result:
workload (b)'s shape (`run.py`), whose 10 steps a workflow are about half
of its time (docs/benchmarks.md, 12-08). `batches` (default 8) batches in
one process on a fresh SQLite file (WAL + NORMAL); the first two warm up,
the rest are timed. Prints the median wall and process CPU per workflow:
run it with 0, 1 and 10 steps to split a workflow's fixed cost from its
steps' (process CPU equals wall when the loop and the database thread take
turns at the GIL, as here).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import anyio

import durable
from durable import activity, workflow


@activity.defn(name="cost_step")
async def cost_step(i: int) -> int:
    return i * 2 + 1


@workflow.defn(name="cost_workflow")
async def cost_workflow(n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(cost_step, i)
    return total


async def main(steps: int, workflows: int, batches: int) -> None:
    client = await durable.connect(f"sqlite:///{tempfile.mkdtemp()}/cost.db")
    walls: list[float] = []
    cpus: list[float] = []
    try:
        async with durable.Worker(client, workflows=[cost_workflow], activities=[cost_step]):
            for batch in range(batches):
                t0, c0 = time.perf_counter(), time.process_time()
                handles = [await client.start(cost_workflow, steps, id=f"cost-{batch}-{k}")
                           for k in range(workflows)]
                for handle in handles:
                    await handle.result()
                if batch >= 2:
                    walls.append((time.perf_counter() - t0) / workflows)
                    cpus.append((time.process_time() - c0) / workflows)
    finally:
        await client.close()
    print(f"{steps} steps a workflow, {workflows} at once: "
          f"{statistics.median(walls) * 1e6:.0f} µs wall, "
          f"{statistics.median(cpus) * 1e6:.0f} µs process CPU per workflow")


if __name__ == "__main__":
    given = [int(a) for a in sys.argv[1:4]]
    steps, workflows, batches = given + [0, 100, 8][len(given):]
    anyio.run(main, steps, workflows, batches)
