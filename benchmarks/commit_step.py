"""One step's commit alone: the store's transaction for one local step, per path.

Usage::

    python benchmarks/commit_step.py [--rounds 7] [--commits 2000]

Commits one successful local step at a time straight through the store (no
engine around it), on a fresh SQLite file each (WAL + NORMAL), with the
general commit path (the base `Dialect`) and with `SQLiteDialect`'s fast
path, each with the standard library's JSON and with orjson: interleaved
rounds, median [min-max]. "db thread" is the time inside the transaction on
the database thread (BEGIN to COMMIT), "per commit" the caller's wall time
(adds the thread round trip).
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

from durable_sqlite._writer import Writer

import durable
from durable import _json
from durable.driver import Dialect
from durable.store.records import StartRequest
from durable.store.writes import RecordLocalActivity, RunWrites

VARIANTS = ("general+json", "general+orjson", "fast+json", "fast+orjson")
_inside = [0.0]


def _timed(original: Any) -> Any:
    def run_program(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _inside[0] += time.perf_counter() - t0

    return run_program


async def measure(variant: str, workdir: str, commits: int) -> tuple[float, float]:
    """(µs per commit, µs on the database thread per commit)."""
    path, codec = variant.split("+")
    _json.DEFAULT = _json.codec(codec)
    url = f"sqlite:///{workdir}/{variant}-{time.monotonic_ns()}.db"
    async with durable.connect(url, converter=durable.JSONConverter(codec=codec)) as client:
        store = client.store
        if path == "general":
            store.driver.dialect = Dialect()
        now = time.time()
        request = StartRequest("default", "wf", "steps", "q", "[1]", "reject_duplicate",
                               None, None)
        await store.start_workflow(request, now)
        [claimed] = await store.claim_runs("default", "q", "w", ("steps",), 1, 60.0, now, ())
        run = claimed.run
        _inside[0] = 0.0
        t0 = time.perf_counter()
        for i in range(commits):
            step = RecordLocalActivity(f"0:{i + 1}", "double", now, 1, str(2 * i + 1))
            [result] = await store.commit([RunWrites(run.run_id, run.epoch, [step], True)], now)
            assert result.committed
        wall = time.perf_counter() - t0
        return wall / commits * 1e6, _inside[0] / commits * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--commits", type=int, default=2000)
    args = parser.parse_args()
    # the database thread's transaction, BEGIN to COMMIT (durable_sqlite/_writer.py)
    Writer._transaction = _timed(Writer._transaction)  # type: ignore[method-assign]
    walls: dict[str, list[float]] = {}
    inside: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for variant in order:
                wall, db = await measure(variant, workdir, args.commits)
                walls.setdefault(variant, []).append(wall)
                inside.setdefault(variant, []).append(db)
    print(f"{args.rounds} rounds x {args.commits} commits of one local step, SQLite "
          f"{__import__('sqlite3').sqlite_version}, WAL + NORMAL; µs, median [min-max]\n")
    print("| variant | per commit | db thread |")
    print("|---|---:|---:|")
    for variant in VARIANTS:
        w, d = walls[variant], inside[variant]
        print(f"| {variant} | {statistics.median(w):.0f} [{min(w):.0f}-{max(w):.0f}] "
              f"| {statistics.median(d):.0f} [{min(d):.0f}-{max(d):.0f}] |")


if __name__ == "__main__":
    anyio.run(main)
