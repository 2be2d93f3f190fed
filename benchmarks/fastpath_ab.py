"""A/B of the SQLite local-steps fast path and the JSON codec, interleaved in one process.

Usage::

    python benchmarks/fastpath_ab.py [--rounds 5] [--steps 300] [--workflows 50]

Variants, measured round-robin (the order rotated each round) on fresh
SQLite files (WAL + NORMAL, the default):

* ``general+json``: the base `Dialect` (the general commit path: read the
  run row, one handler per write) and the standard library's JSON: the
  code before the fast path, as far as a step is concerned;
* ``general+orjson``: the general path, orjson (the ``fast`` extra);
* ``fast+json``: `SQLiteDialect`'s fast path, the standard library's JSON;
* ``fast+orjson``: both (the default when orjson is installed).

Workloads as in ``run.py``: (a) one workflow of `--steps` sequential local
steps (ms per step); (b) `--workflows` workflows x 10 local steps started at
once (steps/s). Each figure is the median over rounds; the ratio column is
computed per round against ``general+json`` measured in that round. CPU per
step (this process, every thread) is steadier than wall time on a shared
machine: it is the Python and SQLite work a step costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import durable
from durable import _json, activity, workflow
from durable.driver import Dialect

VARIANTS = ("general+json", "general+orjson", "fast+json", "fast+orjson")


@activity.defn(name="ab_step")
async def ab_step(i: int) -> int:
    return i * 2 + 1


@workflow.defn(name="ab_steps")
async def ab_steps(base: int, n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(ab_step, base + i)
    return total


async def measure(variant: str, workdir: str, steps: int,
                  workflows: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process, all threads) for `workflows`
    workflows of `steps` steps, after a warm-up."""
    path, codec = variant.split("+")
    _json.DEFAULT = _json.codec(codec)  # the store's own JSON (events, reads)
    url = f"sqlite:///{workdir}/{variant}-{time.monotonic_ns()}.db"
    async with durable.connect(url, converter=durable.JSONConverter(codec=codec)) as client:
        if path == "general":
            client.store.driver.dialect = Dialect()
        async with durable.Worker(client, workflows=[ab_steps], activities=[ab_step]):
            warm = await client.start(ab_steps, 0, 5, id=f"warm-{variant}")
            await warm.result()
            t0, c0 = time.perf_counter(), time.process_time()
            handles = [await client.start(ab_steps, k * steps, steps, id=f"{variant}-{k}")
                       for k in range(workflows)]
            for handle in handles:
                await handle.result()
            return time.perf_counter() - t0, time.process_time() - c0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workflows", type=int, default=50)
    args = parser.parse_args()
    workloads = {"a": (args.steps, 1), "b": (10, args.workflows)}
    figures: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for name, (steps, n_wf) in workloads.items():
                per_step: dict[str, float] = {}
                for variant in order:
                    seconds, cpu_seconds = await measure(variant, workdir, steps, n_wf)
                    per_step[variant] = seconds / (steps * n_wf)
                    cpu.setdefault((name, variant), []).append(cpu_seconds / (steps * n_wf))
                    figures.setdefault((name, variant), []).append(per_step[variant])
                for variant in VARIANTS:
                    ratios.setdefault((name, variant), []).append(
                        per_step["general+json"] / per_step[variant])
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{args.rounds} rounds, SQLite {__import__('sqlite3').sqlite_version}, WAL + NORMAL; "
          "median [min-max]; speed-up = general+json time per step / this one's, per round\n")
    print("| workload | variant | per step | steps/s | speed-up | CPU per step |")
    print("|---|---|---:|---:|---:|---:|")
    for name in workloads:
        for variant in VARIANTS:
            values = figures[(name, variant)]
            ms = [v * 1000 for v in values]
            up = ratios[(name, variant)]
            print(f"| {name} | {variant} | {statistics.median(ms):.3f} "
                  f"[{min(ms):.3f}-{max(ms):.3f}] ms | {1 / statistics.median(values):,.0f} "
                  f"| {statistics.median(up):.2f} [{min(up):.2f}-{max(up):.2f}]x "
                  f"| {statistics.median(cpu[(name, variant)]) * 1e6:.0f} µs |")


def _run() -> Any:
    return anyio.run(main)


if __name__ == "__main__":
    _run()
