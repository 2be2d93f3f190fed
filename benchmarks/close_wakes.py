"""Notifications and wake-ups per 1,000 steps, unlimited and limited queue (decision (at)).

Why: a run's close or release on a queue limited by slots (``max_running``,
``max_running_per_key``) now wakes the queue's claimers in every process, in
its commit (PostgreSQL: one more NOTIFY in the COMMIT's round trip; MariaDB:
one more key in the commit's wake-log row). An unlimited queue must not pay
for it. This counts, it does not time: ``--runs`` (100) runs of ``--steps``
(10) local steps each on one worker, first on queue ``free`` (no limits),
then on queue ``capped`` (``max_running`` above the runs: the limit never
holds one back, so the work is the same), and per 1,000 steps prints

- ``notifications``: what the driver sent to other processes (PostgreSQL:
  NOTIFY statements and ``pg_notify`` calls, one per channel a commit
  names; MariaDB: wake-log rows; SQLite has none, another process reads
  the file's ``data_version``);
- ``runs_keys``: how many of those carried the queue's ``RUNS`` key;
- ``runs_wakes``: the queue's ``RUNS`` wake-ups published in this process.

A/B: run it with ``PYTHONPATH`` set to the tree to measure (the code before
(at) runs it too).

Usage::

    PYTHONPATH=<tree>:<tree>/drivers python benchmarks/close_wakes.py \\
        [--drivers sqlite,postgres,mariadb] [--runs 100] [--steps 10]

Prints one JSON object per driver and queue.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

import durable
from durable import activity, workflow

PG_URL = os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MARIADB_URL = os.environ.get("DURABLE_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test")


@activity.defn(name="cwk_step")
async def step(i: int) -> int:
    return i


@workflow.defn(name="cwk_run")
async def stepper(steps: int) -> int:
    total = 0
    for i in range(steps):
        total += await workflow.execute_local_activity(step, i)
    return total


class Counts:
    """What the driver sent (by wrapping its one builder of notifications)."""

    def __init__(self) -> None:
        self.notifications = 0
        self.runs_keys = 0
        self.queue = ""

    def sent(self, keys: list[Any]) -> None:
        self.notifications += 1
        self.runs_keys += sum(1 for k in keys if list(k)[:1] == ["runs"]
                              and list(k)[2:3] == [self.queue])


def count_sends(counts: Counts) -> None:
    """Wrap the PostgreSQL and MariaDB drivers' builders of what they send."""
    try:
        from durable_postgres.driver import PostgresDriver
    except ImportError:  # pragma: no cover
        pass
    else:
        notifications = PostgresDriver._notifications

        def counted(self: Any, wakes: Any) -> list[tuple[str, str]]:
            pairs: list[tuple[str, str]] = notifications(self, wakes)
            for _, text in pairs:
                counts.sent(json.loads(text)["k"])
            return pairs

        PostgresDriver._notifications = counted  # type: ignore[method-assign]
    try:
        from durable_mariadb.driver import MariaDBDriver
    except ImportError:  # pragma: no cover
        pass
    else:
        payload = MariaDBDriver._payload

        def counted_payload(self: Any, tx: Any) -> str:
            text: str = payload(self, tx)
            counts.sent(json.loads(text))
            return text

        MariaDBDriver._payload = counted_payload  # type: ignore[method-assign]


async def measure(url: str, queue: str, limited: bool, runs: int, steps: int,
                  counts: Counts) -> dict[str, Any]:
    async with durable.connect(url) as client:
        if limited:
            await client.set_queue_limits(queue, durable.QueueLimits(max_running=runs + 1))
        published = 0

        def on_wake(wake: Any) -> None:
            nonlocal published
            if list(wake.key) == ["runs", client.namespace, queue]:
                published += 1

        handles = [await client.start(stepper, steps, id=f"{queue}-{i}",
                                      options=durable.StartOptions(task_queue=queue))
                   for i in range(runs)]
        # counted from here: the worker's claims, the steps, the closes (not the starts)
        counts.queue, counts.notifications, counts.runs_keys = queue, 0, 0
        unsubscribe = client.store.hub.subscribe(on_wake)
        try:
            async with durable.Worker(client, workflows=[stepper], activities=[step],
                                      task_queue=queue):
                for handle in handles:
                    assert await handle.result() == sum(range(steps))
        finally:
            unsubscribe()
        per = 1000 / (runs * steps)
        return {"queue": queue, "limited": limited, "steps": runs * steps, "per_1000_steps": {
            "notifications": round(counts.notifications * per, 1),
            "runs_keys": round(counts.runs_keys * per, 1),
            "runs_wakes": round(published * per, 1)}}


async def mariadb_url() -> str:
    import asyncmy  # type: ignore[import-untyped]

    parts = urlsplit(MARIADB_URL)
    database = f"durable_cwk_{uuid.uuid4().hex[:10]}"
    conn = await asyncmy.connect(host=parts.hostname, port=parts.port or 3306,
                                 user=parts.username or "root", password=parts.password or "")
    async with conn.cursor() as cur:
        await cur.execute(f"CREATE DATABASE {database}")
    conn.close()
    return parts._replace(path=f"/{database}").geturl()


async def main(args: argparse.Namespace) -> None:
    counts = Counts()
    count_sends(counts)
    for driver in args.drivers.split(","):
        for queue, limited in (("free", False), ("capped", True)):
            if driver == "postgres":
                url = f"{PG_URL}?schema=durable_cwk_{uuid.uuid4().hex[:10]}"
            elif driver == "mariadb":
                url = await mariadb_url()
            else:
                url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'cwk.db'}"
            try:
                result = await measure(url, queue, limited, args.runs, args.steps, counts)
            finally:
                async with durable.connect(url) as cleanup:
                    drop = getattr(cleanup.store.driver, "drop_schema", None) or getattr(
                        cleanup.store.driver, "drop_database", None)
                    if drop is not None:
                        await drop()
            print(json.dumps({"driver": driver, **result}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--drivers", default="sqlite,postgres,mariadb")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    anyio.run(main, parser.parse_args())
