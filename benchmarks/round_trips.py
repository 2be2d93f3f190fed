"""Round trips per workflow on PostgreSQL, for `durable_side.py`'s workloads (issue 26).

Counts every call that waits for the server on an asyncpg connection (each
is one round trip once its statement is prepared: ``execute``, ``fetch``,
``fetchrow``, ``fetchval``, ``executemany``, ``prepare``), by the first words
of its SQL (a data-modifying CTE by the names of its parts) and whether it
ran inside a transaction (``[in tx]``, after a BEGIN), and the store
programs run (``driver.run``, ``(read)`` without BEGIN/COMMIT). One process:
the worker and the client share the driver, as in ``durable_side.py``. A
warm-up of 10 workflows runs first and is not counted; LISTEN/UNLISTEN are
the listener connection's. Counting, not timing: the figures do not depend
on the machine's load (the grouping of concurrent commits does a little).

Usage::

    python benchmarks/round_trips.py --workload concurrent   # 100 x 10 local steps
    python benchmarks/round_trips.py --workload sequential   # 1 x 200
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import asyncpg.connection
from durable_side import PG_URL, _define

import durable

SIZES = {"concurrent": (10, 100), "sequential": (200, 1)}


class Counted:
    """The round trips and store programs counted while `on` is set."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.programs: Counter[str] = Counter()
        self.on = False

    def install(self) -> None:
        """Wrap asyncpg's connection methods that wait for the server."""
        for name in ("execute", "fetch", "fetchrow", "fetchval", "executemany", "prepare"):
            setattr(asyncpg.connection.Connection, name,
                    self._counted(name, getattr(asyncpg.connection.Connection, name)))

    def _counted(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(conn: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            if self.on:
                where = " [in tx]" if conn.is_in_transaction() else ""
                self.calls[f"{name}: {kind(query)}{where}"] += 1
            return await original(conn, query, *args, **kwargs)

        return counted


def kind(sql: str) -> str:
    """A statement's kind: its first words, a CTE's parts, LISTEN/UNLISTEN as one."""
    text = re.sub(r"\s+", " ", sql.strip())
    if text.startswith(("LISTEN", "UNLISTEN")):
        return "LISTEN/UNLISTEN (listener connection)"
    if text.startswith("WITH"):
        return "WITH " + ",".join(re.findall(r"(?:WITH|,) (\w+) AS", text)[:6])
    if text.startswith("NOTIFY") or " COMMIT" in text:
        return "NOTIFY+COMMIT" if "COMMIT" in text else "NOTIFY"
    return " ".join(text.split()[:4])[:70]


async def measure(workload: str, pg_url: str) -> dict[str, Any]:
    steps, workflows = SIZES[workload]
    counted = Counted()
    counted.install()
    bench_step, bench_local, _, _ = _define(None)
    sep = "&" if "?" in pg_url else "?"
    client = await durable.connect(f"{pg_url}{sep}schema=round_trips_{uuid.uuid4().hex[:8]}")
    run = client.driver.run

    def run_counted(program: Any, *, write: bool = True) -> Any:
        if counted.on:
            name = getattr(program, "__qualname__", "?").split(".<locals>")[0]
            counted.programs[name.rsplit(".", 1)[-1] + ("" if write else " (read)")] += 1
        return run(program, write=write)

    client.driver.run = run_counted  # type: ignore[method-assign]
    try:
        async with durable.Worker(client, workflows=[bench_local], activities=[bench_step]):
            async def once(tag: str, n_steps: int, n_workflows: int) -> None:
                handles = [await client.start(bench_local, k * n_steps, n_steps, id=f"{tag}-{k}")
                           for k in range(n_workflows)]
                for handle in handles:
                    await handle.result()

            await once("warm", min(steps, 10), min(workflows, 10))
            counted.on = True
            await once("counted", steps, workflows)
            counted.on = False
    finally:
        drop = getattr(client.driver, "drop_schema", None)
        if drop is not None:
            await drop()
        await client.close()
    total = sum(counted.calls.values())
    listens = sum(v for k, v in counted.calls.items() if "LISTEN" in k)
    return {
        "workload": workload, "workflows": workflows, "steps": steps,
        "round_trips_per_workflow": round(total / workflows, 2),
        "without_listener": round((total - listens) / workflows, 2),
        "per_workflow": {k: round(v / workflows, 2) for k, v in counted.calls.most_common()},
        "programs_per_workflow": {k: round(v / workflows, 2)
                                  for k, v in counted.programs.most_common()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--workload", choices=sorted(SIZES), default="concurrent")
    p.add_argument("--pg-url", default=PG_URL, help=f"PostgreSQL URL (default {PG_URL})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    found = anyio.run(measure, args.workload, args.pg_url)
    if args.json:
        print(json.dumps(found))
        return
    print(f"{found['workload']}: {found['workflows']} x {found['steps']} local steps; round "
          f"trips per workflow {found['round_trips_per_workflow']} "
          f"({found['without_listener']} without the listener's LISTEN/UNLISTEN)")
    for name, n in found["per_workflow"].items():
        print(f"{n:8.2f}  {name}")
    print("store programs per workflow:")
    for name, n in found["programs_per_workflow"].items():
        print(f"{n:8.2f}  {name}")


if __name__ == "__main__":
    main()
