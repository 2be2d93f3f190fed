"""How long `durable.testing.explore_crashes` takes over the three examples.

    python benchmarks/explore_crashes.py [--url URL] [--backend asyncio|trio] [--rounds N]

For each example: its durable points, the exploration's wall time (the
learning run and one crashed and recovered run per point) and the time per
point; the median of `--rounds` explorations. order.py and approval.py run on
virtual time; nightly_import.py does real I/O (HTTP, a child process, a
SQLite warehouse), so it runs on real time. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

import durable
from durable.testing import CrashReport, explore_crashes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import approval
import nightly_import
import order


async def wait_then_approve(handle: durable.WorkflowHandle) -> None:
    """approval.py's application: act once the purchase waits (tests do the same)."""
    clock = handle.client.clock
    while True:
        try:
            if (await handle.query("progress"))["stage"] == "waiting for approval":
                break
        except durable.DurableError:
            pass
        await clock.sleep_until(clock.now() + 0.05)
    await handle.signal("approve", "ann")
    await handle.update("set_limit", 5000)
    await handle.signal("approve", "ann")


async def explore_order(url: str) -> CrashReport:
    return await explore_crashes(order.order, "o-1", ["book", "lamp"], url=url,
                                 activities=[order.charge, order.reserve_stock, order.ship])


async def explore_approval(url: str) -> CrashReport:
    return await explore_crashes(approval.PurchaseApproval, "p-7", 2500, 60.0, url=url,
                                 activities=[approval.reserve, approval.release, approval.pay],
                                 interact=wait_then_approve)


async def explore_nightly(url: str) -> CrashReport:
    nightly_import.WAREHOUSE = Path(tempfile.mkdtemp(prefix="durable-explore-")) / "wh.db"

    def empty_warehouse() -> None:
        nightly_import.WAREHOUSE.unlink(missing_ok=True)
        with sqlite3.connect(nightly_import.WAREHOUSE) as db:
            db.execute("CREATE TABLE sales (night TEXT, id TEXT PRIMARY KEY, customer TEXT, "
                       "cents INTEGER)")
            db.execute("CREATE TABLE notes (night TEXT, note TEXT)")

    async def operator(handle: durable.WorkflowHandle) -> None:
        done = (await handle.describe())["progress"]["done"]
        rows = nightly_import.warehouse_rows("n1")
        await handle.retry_after_review(units="confirm" if rows > done else "rerun")

    with nightly_import.source_service() as source:
        return await explore_crashes(
            nightly_import.nightly_import, "n1", source, 0.0, url=url, time_skipping=False,
            activities=[nightly_import.fetch_rows, nightly_import.normalise,
                        nightly_import.load_row, nightly_import.record_partial_load],
            task_queues=["default", "warehouse"], before_each=empty_warehouse,
            options=durable.StartOptions(execution_timeout=3600), review=operator)


EXAMPLES: dict[str, Callable[[str], Awaitable[CrashReport]]] = {
    "order.py": explore_order, "approval.py": explore_approval,
    "nightly_import.py": explore_nightly,
}


async def main(url: str, rounds: int, only: list[str]) -> None:
    print(f"{'example':<18} {'points':>6} {'seconds':>8} {'per point':>10}  all pass")
    for name, explore in EXAMPLES.items():
        if only and name not in only:
            continue
        reports = [await explore(url) for _ in range(rounds)]
        seconds = statistics.median(r.seconds for r in reports)
        points = reports[0].total_points
        ok = all(r.ok for r in reports)
        print(f"{name:<18} {points:>6} {seconds:>8.2f} {seconds / (points + 1):>10.3f}  {ok}")
        if not ok:
            print(next(r for r in reports if not r.ok).describe())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="sqlite://:memory:")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[], choices=list(EXAMPLES))
    args: Any = parser.parse_args()
    anyio.run(main, args.url, args.rounds, args.only, backend=args.backend)
