"""Queue limits across worker processes on PostgreSQL, one of them SIGKILLed.

Four real worker processes (tests/queue_app.py) share one database and one
limited queue; each run records the interval in which it executed. One
process is SIGKILLed while it holds slots: its slots come back when its
leases end (`LEASE`), and another worker finishes its runs. The recorded
intervals never overlap more than the limit allows.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import drop_postgres_schema, new_postgres_url, require_postgres
from crash_app import kill9, logs
from queue_app import QUEUE, Interval, most_at_once, read_intervals, slot_holder

import durable

pytestmark = [pytest.mark.crash, pytest.mark.anyio, pytest.mark.postgres]

APP = Path(__file__).resolve().parent / "queue_app.py"
WORKERS = 4
#: long enough that a worker starved on a loaded CI host still renews in time
#: (a lease that lapses while its holder still runs is a second holder: the
#: limit then counts one run twice), short enough for the test to be quick
LEASE = 2.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def pg_db() -> Iterator[str]:
    require_postgres()
    url = new_postgres_url()
    yield url
    drop_postgres_schema(url)


def spawn(db: str, directory: Path, n: int, hold: float) -> subprocess.Popen[bytes]:
    with open(directory / f"worker{n}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(APP), "--db", db, "--dir", str(directory), "--lease", str(LEASE),
             "--hold", str(hold), "--identity", f"qw{n}"],
            stdout=log, stderr=subprocess.STDOUT)


def pids_started(directory: Path) -> list[int]:
    path = directory / "intervals.log"
    if not path.exists():
        return []
    return [int(line.split()[3]) for line in path.read_text().splitlines()
            if line.startswith("start")]


async def run_under_limit(db: str, directory: Path, limits: durable.QueueLimits,
                          keys: list[str], hold: float,
                          keyed: bool = False) -> list[Interval]:
    """Start one run per entry of `keys` on the limited queue (`keyed`: with
    that concurrency key), run them on four processes, SIGKILL the one that
    started first once it holds a slot; the recorded intervals."""
    directory.mkdir(parents=True, exist_ok=True)
    async with durable.connect(db) as client:
        await client.set_queue_limits(QUEUE, limits)
        handles = [await client.start(
            slot_holder, key, id=f"run-{i}", options=durable.StartOptions(
                task_queue=QUEUE, concurrency_key=key if keyed else None))
            for i, key in enumerate(keys)]
        procs = [spawn(db, directory, n, hold) for n in range(WORKERS)]
        killed: dict[int, float] = {}
        try:
            with anyio.fail_after(60):
                while not pids_started(directory):
                    await anyio.sleep(0.02)
            victim = next(p for p in procs if p.pid == pids_started(directory)[0])
            await anyio.to_thread.run_sync(kill9, victim)
            killed[victim.pid] = time.time()
            with anyio.fail_after(90):
                for handle in handles:
                    assert await handle.result() in keys
        except BaseException:
            print(logs(directory))
            raise
        finally:
            for proc in procs:
                await anyio.to_thread.run_sync(kill9, proc)
    return read_intervals(directory, killed)


async def test_four_processes_never_run_more_than_max_running_even_through_a_kill(
    pg_db: str, tmp_path: Path,
) -> None:
    keys = [f"k{i}" for i in range(15)]
    intervals = await run_under_limit(pg_db, tmp_path, durable.QueueLimits(max_running=3),
                                      keys, hold=0.3)
    assert most_at_once(intervals) <= 3, sorted(intervals)
    assert most_at_once(intervals) >= 2  # the limit, not a lone worker, is what held it
    # every run executed, the killed one's again on another worker
    assert {i[2] for i in intervals} == set(keys)


async def test_one_run_per_key_over_twenty_keys_through_a_kill(
    pg_db: str, tmp_path: Path,
) -> None:
    keys = [f"customer-{i % 20}" for i in range(40)]  # two runs of each of 20 keys
    intervals = await run_under_limit(pg_db, tmp_path,
                                      durable.QueueLimits(max_running_per_key=1), keys,
                                      hold=0.2, keyed=True)
    by_key: dict[str, list[Interval]] = defaultdict(list)
    for interval in intervals:
        by_key[interval[2]].append(interval)
    assert max(most_at_once(v) for v in by_key.values()) == 1, [
        sorted(v) for v in by_key.values() if most_at_once(v) > 1]
    assert most_at_once(intervals) > 3  # the keys ran side by side
    assert set(by_key) == set(keys)
