"""What the SQLite driver's loop side costs per program when callers queue together.

``--callers`` tasks each run ``--programs`` one-row INSERT programs through
`SQLiteDriver.run` on one file (WAL, NORMAL), so the database thread drains
several at a time. Prints this process's CPU time and the wall time per
program, and programs per drain (`driver.stats`). CPU time is the figure of
merit on a loaded machine: what the loop and the thread spend per program,
whatever else the cores are doing. Made for "one wake-up per group commit"
(docs/benchmarks.md): on trio each caller used to pass its turn to the next
through ``TrioToken.run_sync_soon`` (a wake-up socket write and read per
caller).

    python benchmarks/sqlite_turns.py [--backend trio|asyncio]

For the code before a change, put that code first on the path, e.g.
``PYTHONPATH=/path/to/before/drivers python benchmarks/sqlite_turns.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from durable_sqlite import SQLiteDriver

from durable.driver import Program, Tx, ex


def _create(tx: Tx) -> Program[None]:
    yield ex("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")


def _insert(k: int) -> Callable[[Tx], Program[int]]:
    def program(tx: Tx) -> Program[int]:
        yield ex("INSERT INTO t (k, v) VALUES (?, 'x')", k)
        return k

    return program


async def measure(callers: int, programs: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        driver = SQLiteDriver(f"sqlite:///{Path(tmp) / 'turns.db'}")
        await driver.open()
        try:
            await driver.run(_create)
            before = driver.stats

            async def caller(c: int) -> None:
                for i in range(programs):
                    await driver.run(_insert(c * programs + i))

            cpu, wall = time.process_time(), time.perf_counter()
            async with anyio.create_task_group() as tg:
                for c in range(callers):
                    tg.start_soon(caller, c)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            after = driver.stats
        finally:
            await driver.close()
    n = callers * programs
    per_drain = (after.programs - before.programs) / max(1, after.drains - before.drains)
    return (f"{cpu / n * 1e6:.1f} us CPU/program  {wall / n * 1e6:.1f} us wall/program  "
            f"{per_drain:.1f} programs/drain")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["asyncio", "trio"], default="trio")
    p.add_argument("--callers", type=int, default=50, help="concurrent callers (default 50)")
    p.add_argument("--programs", type=int, default=200,
                   help="programs each caller runs, one after the other (default 200)")
    args = p.parse_args()
    if args.callers < 1 or args.programs < 1:
        raise SystemExit("--callers and --programs must be >= 1")
    print(anyio.run(measure, args.callers, args.programs, backend=args.backend))


if __name__ == "__main__":
    main()
