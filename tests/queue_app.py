"""A worker process for the queue-limit tests: runs that record when they hold a slot.

Each run of ``slot_holder(key)`` executes one local activity that appends
``start KEY WORKFLOW_ID PID TIME`` to ``DIR/intervals.log``, sleeps ``HOLD``
seconds and appends ``end KEY WORKFLOW_ID PID TIME`` (O_APPEND, one write a line): the intervals in
which the runs really executed, read from outside. tests/test_queues_crash.py
starts four of these processes on one PostgreSQL database with a queue limit,
SIGKILLs one, and checks that the intervals never overlap more than the limit.

``gated_holder`` records a start, waits for its ``open`` signal and records
its end: a run that holds its slot until the test says so.
tests/test_queues_wake.py runs one process of each type on a queue with
``max_running=1`` and polls far apart (``--poll``), to show that a close
wakes the other process's worker (decision (at)).

Usage::

    python tests/queue_app.py --db URL --dir DIR [--lease 1.0] [--hold 0.3]
        [--poll 0.1] [--workflows slot_holder|gated_holder]

``--poll`` (0.1 s if not given) is also the driver's own look at everything (PostgreSQL's
``poll_interval``, MariaDB's ``any_interval``; SQLite's look at the file's
``data_version``, its only way to hear another process, is left as it is).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import anyio

import durable
from durable import activity, workflow
from durable.wakes import Wake, WakeKind

QUEUE = "limited"
LOG: Path | None = None
HOLD = 0.3


def record(line: str) -> None:
    assert LOG is not None
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line} {os.getpid()} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@activity.defn(name="hold_slot")
async def hold_slot(key: str) -> str:
    run = activity.info().workflow_id
    record(f"start {key} {run}")
    await anyio.sleep(HOLD)
    record(f"end {key} {run}")
    return key


@workflow.defn(name="slot_holder")
async def slot_holder(key: str) -> str:
    result: str = await workflow.execute_local_activity(hold_slot, key)
    return result


@activity.defn(name="mark")
async def mark(line: str) -> None:
    record(line)


@workflow.defn(name="gated_holder")
class GatedHolder:
    """Holds its queue slot until signalled (``open``)."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def open(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, key: str) -> int:
        run = workflow.info().workflow_id
        await workflow.execute_local_activity(mark, f"start {key} {run}")
        await workflow.wait_condition(lambda: self.go)
        await workflow.execute_local_activity(mark, f"end {key} {run}")
        return 0


Interval = tuple[float, float, str, str, int]  # start, end, key, workflow id, pid


def read_intervals(directory: Path, killed: dict[int, float]) -> list[Interval]:
    """(start, end, key, workflow id, pid) of every execution; one a killed
    process never ended ends at its kill time (`killed`: pid -> time the kill
    was seen done)."""
    opened: dict[tuple[str, str], float] = {}
    out: list[Interval] = []
    path = directory / "intervals.log"
    for line in path.read_text().splitlines():
        what, key, run, pid, at = line.split()
        if what == "start":
            opened[(run, pid)] = float(at)
        else:
            out.append((opened.pop((run, pid)), float(at), key, run, int(pid)))
    for (run, pid), started in opened.items():
        key = next(line.split()[1] for line in path.read_text().splitlines()
                   if line.split()[2] == run)
        out.append((started, killed[int(pid)], key, run, int(pid)))
    return out


def most_at_once(intervals: list[Interval]) -> int:
    """The largest number of intervals open at one instant (an end before a
    start at the same instant)."""
    points = sorted([(i[0], 1) for i in intervals] + [(i[1], -1) for i in intervals])
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def driver_options(db: str, poll: float) -> dict[str, float]:
    """The driver's own fallback look at everything, as far apart as the worker's poll."""
    if db.startswith("postgres"):
        return {"poll_interval": poll}
    if db.startswith("mariadb"):
        return {"any_interval": poll}
    return {}


async def main(args: argparse.Namespace) -> None:
    workflows = {"slot_holder": [slot_holder], "gated_holder": [GatedHolder]}[args.workflows]
    options = {} if args.poll is None else driver_options(args.db, args.poll)
    async with durable.connect(args.db, **options) as client:
        heard = anyio.Event()

        def on_wake(wake: Wake) -> None:
            if wake.remote or wake.kind is WakeKind.ANY:  # from the driver's watch
                heard.set()

        unsubscribe = client.store.hub.subscribe(on_wake)
        async with durable.Worker(
            client, workflows=workflows, activities=[hold_slot, mark], task_queue=QUEUE,
            lease_seconds=args.lease, poll_interval=args.poll or 0.1, identity=args.identity,
        ) as worker:
            # "ready": a claim pass has been made, and the driver's watch has
            # heard another process (PostgreSQL: it listens; MariaDB: it knows
            # where the wake log ends; SQLite: it read the file's data_version),
            # so no wake-up committed from now on is missed
            await worker.runs.claim_now()
            await heard.wait()
            unsubscribe()
            print("ready", worker.worker_id, os.getpid(), flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--hold", type=float, default=0.3)
    parser.add_argument("--identity", default="queue-worker")
    parser.add_argument("--poll", type=float, default=None)
    parser.add_argument("--workflows", default="slot_holder",
                        choices=["slot_holder", "gated_holder"])
    parsed = parser.parse_args()
    LOG = Path(parsed.dir) / "intervals.log"
    HOLD = parsed.hold
    anyio.run(main, parsed)
