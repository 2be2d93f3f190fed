"""The SQLite write-ahead log under writes that never pause, and reads meanwhile (issue 28).

``--runs`` runs of what a one-minute schedule runs (a local step, a minute,
a local step) are written ``--concurrency`` at a time on virtual time
(`durable.testing.TimeSkippingEnvironment` on a file), a new one started as
each ends: the writer never pauses. A reader in another process (as a
control plane or a dashboard would be) polls all the time: the open runs
(``list(status="running", limit=20)``, an indexed read) and ``describe()``
of three of them. Per window of ``--window`` completed runs: the ``-wal``
file's largest size and the reader's median and p90 time per poll. The
figure of merit: the last window's median poll time against the first's.
(A plain ``list()`` is left out: without a status it sorts every run, so
its time grows with the table whatever the log does.)

    python benchmarks/wal_growth.py --runs 2000 [--backend trio]
    python benchmarks/wal_growth.py --url "sqlite:////tmp/w.db?wal_limit=16MiB"

For the code before a change, put that code first on the path, e.g.
``git archive <commit> | tar -x -C /tmp/before`` then
``PYTHONPATH=/tmp/before:/tmp/before/drivers python benchmarks/wal_growth.py``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import anyio

import durable
from durable import activity, workflow
from durable.testing import TimeSkippingEnvironment


@activity.defn(name="wg_tick")
async def tick(n: int) -> int:
    return n + 1


@workflow.defn(name="wg_minutely")
async def minutely(n: int, remote: bool) -> int:
    step = workflow.execute_activity if remote else workflow.execute_local_activity
    n = await step(tick, n)
    await workflow.sleep(60)
    return await step(tick, n)


async def read_until_stdin_closes(url: str) -> None:
    """The reader process: say ``ready``, poll until the parent closes our
    stdin, then print ``[[monotonic time, seconds], ...]``, one per poll."""
    polls: list[tuple[float, float]] = []
    done = anyio.Event()

    async def wait_for_eof() -> None:
        await anyio.to_thread.run_sync(sys.stdin.read)
        done.set()

    async with durable.connect(url) as client, anyio.create_task_group() as tg:
        tg.start_soon(wait_for_eof)
        print("ready", flush=True)
        while not done.is_set():
            t0 = time.monotonic()
            runs = await client.list(status="running", limit=20)
            for run in runs[:3]:
                await client.get_handle(run["workflow_id"]).describe()
            if runs:
                polls.append((t0, time.monotonic() - t0))
            await anyio.sleep(0.001)
    print(json.dumps(polls))


class Writer:
    """The runs, and when each ended with the -wal file's size then."""

    def __init__(self, wal: Path) -> None:
        self.wal = wal
        self.ended: list[tuple[float, int]] = []  # (monotonic time, -wal bytes)

    async def write(self, url: str, runs: int, concurrency: int, remote: bool) -> None:
        limiter = anyio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limiter:
                handle = await env.client.start(minutely, i, remote, id=f"wg-{i}")
                await handle.result()
            try:
                size = self.wal.stat().st_size
            except FileNotFoundError:
                size = 0
            self.ended.append((time.monotonic(), size))

        async with TimeSkippingEnvironment(url) as env, env.worker(
                workflows=[minutely], activities=[tick]):
            async with anyio.create_task_group() as tg:
                for i in range(runs):
                    tg.start_soon(one, i)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--url", default="sqlite:///wal_growth.db")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--remote", action="store_true",
                        help="remote activities (the issue's workload: ~105 KB of log per run)")
    parser.add_argument("--no-reader", action="store_true", help="the writer alone")
    parser.add_argument("--reader", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader:
        anyio.run(read_until_stdin_closes, args.url)
        return
    path = urlsplit(args.url).path[1:]
    for suffix in ("", "-wal", "-shm"):
        Path(path + suffix).unlink(missing_ok=True)
    anyio.run(_create, args.url)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; code: {durable.__file__}")
    reader = None if args.no_reader else subprocess.Popen(
        [sys.executable, __file__, "--reader", "--url", args.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert reader is None or (reader.stdout is not None
                              and reader.stdout.readline() == "ready\n")
    writer = Writer(Path(path + "-wal"))
    started = time.perf_counter()
    try:
        anyio.run(writer.write, args.url, args.runs, args.concurrency, args.remote,
                  backend=args.backend)
    finally:
        out = reader.communicate("")[0] if reader is not None else "[]"
    elapsed = time.perf_counter() - started
    polls: list[list[float]] = json.loads(out)
    print(f"{args.runs} runs in {elapsed:.1f} s ({args.backend}), {len(polls)} polls, "
          f"load average at end: {os.getloadavg()[0]:.2f}")
    report(writer.ended, polls, args.window)


async def _create(url: str) -> None:
    async with durable.connect(url):
        pass  # the schema, before the reader opens the file


def report(ended: list[tuple[float, int]], polls: list[list[float]], window: int) -> None:
    """A table by window of completed runs: a poll counts in the window of
    the number of runs that had ended when it started."""
    times = [at for at, _ in ended]
    by_window: dict[int, list[float]] = {i: [] for i in range(-(-len(ended) // window))}
    for at, seconds in polls:
        done = bisect.bisect_right(times, at)
        if done < len(ended):  # the polls after the last run are not counted
            by_window[done // window].append(seconds)
    print("| runs done | largest -wal (MB) | polls | median poll (ms) | p90 poll (ms) |")
    print("|---|---|---|---|---|")
    medians = []
    for index, seconds in sorted(by_window.items()):
        seconds.sort()
        low, high = index * window, min((index + 1) * window, len(ended))
        largest = max(size for _, size in ended[low:high])
        reads = "| - | -"
        if seconds:
            medians.append(statistics.median(seconds))
            reads = f"| {medians[-1] * 1000:.2f} | {seconds[int(len(seconds) * 0.9)] * 1000:.2f}"
        print(f"| {low}-{high} | {largest / 1e6:.1f} | {len(seconds)} {reads} |")
    if len(medians) > 1:
        print(f"last window's median poll / first window's: {medians[-1] / medians[0]:.2f}x")


if __name__ == "__main__":
    main()
