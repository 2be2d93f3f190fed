"""Wake-ups and claims per child start on PostgreSQL, at 1, 2 and 4 processes (issue 26).

Why: a child's start is committed by its parent's worker; until 12-06 its
``RUNS`` wake-up went to the queue's channel, so every process of the queue
claimed on it and all but one found nothing. Now it is addressed to one
member process (`durable_postgres.addressing`, `Addressing.peek`): the
committing one, whose worker takes the queue's runs, else one in turn.
This counts, it does not time (2 shared cores blur timings; counts do not
depend on the load much): per child start, the ``RUNS`` wake-ups that the
processes heard from other processes, the run claim passes their workers
began, and the claims (``claim_runs`` calls) and those that took nothing.

Each "process" is a client of its own (its own driver, origin, pool and
LISTEN connection) with a `durable.Worker` (defaults: poll 1 s), all in this
Python process, on a fresh schema. Warm-up parents first, one on each
process, twice (their children let every process's driver learn the queue's
members: the upkeep reads them off the step's path); then ``--parents``
(20) parents, started together by a client without a worker, each start
``--children`` (10) children one after the other and wait for them all.
Counted from the warm-up's end to the last parent's result; the parents'
own starts are counted too (one run in ``children + 1``).

A/B: run the script with ``PYTHONPATH`` set to the tree to measure (the
code before the change has no ``Addressing.peek``; the script runs there).
``--in-turn`` (diagnosis, after the change): a process's own new work goes
to the members in turn like a client's start, never kept by its process
(decision (ah) says why it is not).

Usage::

    PYTHONPATH=<tree>:<tree>/drivers python benchmarks/child_wakes.py \\
        [--processes 1,2,4] [--parents 20] [--children 10] [--pg-url URL] [--in-turn]

Prints one JSON object per process count.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from contextlib import AsyncExitStack
from typing import Any

import anyio

import durable
from durable import workflow

PG_URL = os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@workflow.defn(name="cw_kid")
async def kid(i: int) -> int:
    return i


@workflow.defn(name="cw_parent")
async def parent(tag: str, n: int) -> int:
    children = [await workflow.start_child(kid, i, id=f"{tag}-{i}") for i in range(n)]
    return sum([await child.result() for child in children])


class Counts:
    """One process's counters: remote ``RUNS`` wake-ups heard, run claim calls
    and the empty ones (its worker's claim passes are `Worker.runs.begun`)."""

    def __init__(self, client: durable.Client) -> None:
        self.heard = 0
        #: of which addressed to every process (not to this one)
        self.to_everybody = 0
        self.claims = 0
        self.empty = 0
        original = client.store.claim_runs

        async def counted(*args: Any, **kwargs: Any) -> Any:
            claimed = await original(*args, **kwargs)
            self.claims += 1
            self.empty += not claimed
            return claimed

        client.store.claim_runs = counted  # type: ignore[method-assign]
        client.store.hub.subscribe(self._on_wake)

    def snapshot(self, worker: durable.Worker) -> tuple[int, ...]:
        """heard, claims, empty claims, claim passes, batons, heard to everybody"""
        return (self.heard, self.claims, self.empty, worker.runs.begun, worker.runs.spread,
                self.to_everybody)

    def _on_wake(self, wake: Any) -> None:
        if wake.remote and wake.key[0] == "runs":
            self.heard += 1
            self.to_everybody += wake.to is None


async def measure(url: str, processes: int, parents: int, children: int,
                  in_turn: bool = False) -> dict[str, Any]:
    schema = f"bench_cw_{uuid.uuid4().hex[:10]}"
    url = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(durable.connect(url))
                   for _ in range(processes)]
        workers = [await stack.enter_async_context(
            durable.Worker(client, workflows=[parent, kid])) for client in clients]
        counts = [Counts(client) for client in clients]
        if in_turn:  # diagnosis: a process's new work in turn too, never kept here
            for client in clients:
                driver: Any = client.driver
                driver._tx_addressee = driver.addressing.peek
        starter = await stack.enter_async_context(durable.connect(url))
        await anyio.sleep(1.0)  # every worker registered, every LISTEN open
        for again in range(2):  # a warm-up parent on each process (starts go in turn)
            warm = [await starter.start(parent, f"warm{again}-{i}", 2, id=f"warm{again}-{i}")
                    for i in range(processes)]
            for handle in warm:
                await handle.result()
            await anyio.sleep(0.5)  # the upkeep reads the members the warm-up asked about
        before = [c.snapshot(w) for c, w in zip(counts, workers, strict=True)]
        handles = [await starter.start(parent, f"p{i}", children, id=f"p{i}")
                   for i in range(parents)]
        with anyio.fail_after(300):
            for handle in handles:
                await handle.result()
        after = [c.snapshot(w) for c, w in zip(counts, workers, strict=True)]
        delta = [tuple(a - b for a, b in zip(x, y, strict=True))
                 for x, y in zip(after, before, strict=True)]
        started = parents * children
        result = {
            "processes": processes, "parents": parents, "children": children,
            "heard_per_child": round(sum(d[0] for d in delta) / started, 3),
            "heard_to_everybody_per_child": round(sum(d[5] for d in delta) / started, 3),
            "claim_passes_per_child": round(sum(d[3] for d in delta) / started, 3),
            "claims_per_child": round(sum(d[1] for d in delta) / started, 3),
            "empty_claims_per_child": round(sum(d[2] for d in delta) / started, 3),
            "batons_per_child": round(sum(d[4] for d in delta) / started, 3),
            "addressed_here": hasattr(getattr(clients[0].driver, "addressing", None), "peek"),
            "in_turn": in_turn,
        }
    await _drop(url, schema)
    return result


async def _drop(url: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.split("?")[0])
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--processes", default="1,2,4")
    p.add_argument("--parents", type=int, default=20)
    p.add_argument("--children", type=int, default=10)
    p.add_argument("--pg-url", default=PG_URL)
    p.add_argument("--in-turn", action="store_true",
                   help="diagnosis: address a process's new work in turn, as starts")
    args = p.parse_args()
    for n in (int(x) for x in args.processes.split(",")):
        print(json.dumps(anyio.run(measure, args.pg_url, n, args.parents, args.children,
                                   args.in_turn)), flush=True)


if __name__ == "__main__":
    main()
