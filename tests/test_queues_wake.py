"""A close on a limited queue wakes the queue's workers in other processes (decision (at)).

Two real worker processes (tests/queue_app.py) share one database and one
queue limited to ``max_running=1``: process A runs ``gated_holder``, which
holds the one slot until signalled; process B runs ``slot_holder`` only, so
the runs waiting for the slot are B's to take, never A's. Both poll every
`POLL` seconds (the worker's fallback poll, and the driver's own look at
everything where it has one) with leases longer still, so nothing but a
wake-up can make B claim sooner. Once B has made a claim pass that found the
slot taken and its driver's watch has heard another process (so no wake-up
sent from then on is missed: `ready`), the holder is let go: B must take
the waiting runs well within `BOUND` seconds, a small fraction of `POLL`.
Before (at), B learnt of the free slot at its next poll (PostgreSQL: its driver's `poll_interval`,
MariaDB: its `any_interval`), and the bound failed. SQLite hears every
commit of another process through the file's ``data_version`` (every 50 ms),
so there the test guards what already held.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import (
    drop_mariadb_database,
    drop_postgres_schema,
    new_mariadb_url,
    new_postgres_url,
    require_mariadb,
    require_postgres,
)
from crash_app import kill9, logs
from queue_app import QUEUE, GatedHolder, most_at_once, read_intervals, slot_holder

import durable

pytestmark = [pytest.mark.crash, pytest.mark.anyio]

APP = Path(__file__).resolve().parent / "queue_app.py"
#: every fallback poll of both processes, in seconds: the test must not need one
POLL = 30.0
#: leases this long: a watchdog waking at a lease's expiry claims too
LEASE = 90.0
#: how long the waiting runs may take once the slot is free: well below `POLL`
BOUND = 10.0
LIMITS = durable.QueueLimits(max_running=1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database several processes share (the stepwise driver cannot be)."""
    if request.param == "postgres":
        require_postgres()
        url = new_postgres_url()
        yield url
        drop_postgres_schema(url)
    elif request.param == "mariadb":
        require_mariadb()
        url = new_mariadb_url()
        yield url
        drop_mariadb_database(url)
    else:
        yield f"sqlite:///{tmp_path / 'shared.db'}"


def spawn(db: str, directory: Path, name: str, workflows: str) -> subprocess.Popen[bytes]:
    with open(directory / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(APP), "--db", db, "--dir", str(directory), "--lease", str(LEASE),
             "--hold", "0.05", "--poll", str(POLL), "--workflows", workflows,
             "--identity", name],
            stdout=log, stderr=subprocess.STDOUT)


async def ready(client: durable.Client, directory: Path, name: str) -> int:
    """The pid of process `name` once it said "ready": it made a claim pass and
    its driver's watch heard another process. Each look sets the queue's
    limits again (unchanged): a commit every driver tells the queue's
    processes of, so that the watch has something to hear."""
    path = directory / f"{name}.log"
    with anyio.fail_after(60):
        while True:
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("ready "):
                    return int(line.split()[2])
            await client.set_queue_limits(QUEUE, LIMITS)
            await anyio.sleep(0.05)


def lines(directory: Path) -> list[list[str]]:
    path = directory / "intervals.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_close_wakes_the_held_back_worker_of_another_process(
    shared_db: str, tmp_path: Path,
) -> None:
    async with durable.connect(shared_db) as client:
        await client.set_queue_limits(QUEUE, LIMITS)
        holder = await client.start(GatedHolder, "holder", id="holder",
                                    options=durable.StartOptions(task_queue=QUEUE))
        procs = [spawn(shared_db, tmp_path, "a", "gated_holder")]
        try:
            await ready(client, tmp_path, "a")
            with anyio.fail_after(60):  # the holder takes the one slot
                while not any(line[:2] == ["start", "holder"] for line in lines(tmp_path)):
                    await anyio.sleep(0.02)
            waiting = [await client.start(slot_holder, f"w{i}", id=f"w{i}",
                                          options=durable.StartOptions(task_queue=QUEUE))
                       for i in range(3)]
            procs.append(spawn(shared_db, tmp_path, "b", "slot_holder"))
            b_pid = await ready(client, tmp_path, "b")  # its claim found the slot taken
            assert [line[1] for line in lines(tmp_path)] == ["holder"]
            await holder.signal("open")
            with anyio.fail_after(BOUND):  # a poll is POLL seconds away
                for handle in waiting:
                    assert await handle.result() in {"w0", "w1", "w2"}
            assert await holder.result() == 0
        except BaseException:
            print(logs(tmp_path))
            raise
        finally:
            for proc in procs:
                await anyio.to_thread.run_sync(kill9, proc)
    intervals = read_intervals(tmp_path, {})
    assert most_at_once(intervals) == 1, sorted(intervals)
    ordered = [i[2] for i in sorted(intervals)]
    assert ordered[0] == "holder" and sorted(ordered[1:]) == ["w0", "w1", "w2"]
    assert {i[4] for i in intervals if i[2] != "holder"} == {b_pid}  # B took each
