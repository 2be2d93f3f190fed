"""Where workload (b)'s time goes on SQLite: the loop's thread, the database
thread, or each waiting for the other.

Workload (b) of `run.py` in one process: ``--workflows`` workflows (100) of
``--steps`` trivial local steps (10), started one after the other (each
start awaited, as `durable_side.py` and the DBOS side do), then every
result read; WAL + ``--synchronous`` (NORMAL), asyncio. After a warm-up,
``--rounds`` timed rounds; for each round, per 1,000 steps or per step:

- wall time and steps/s;
- CPU of the loop's thread (`time.thread_time`) and of the database thread
  (`time.pthread_getcpuclockid`), and each one's *busy share* (CPU / wall);
- the loop's time blocked in its selector with nothing to run (waiting for
  the database thread or a timer) and the database thread's time blocked on
  its empty queue (waiting for the loop): the rest of each thread's wall
  time, neither CPU nor idle, is mostly waiting for the GIL;
- counts: drains of the database thread, transactions, programs by kind,
  statements, the thread's hand-overs into the loop, the loop's iterations,
  the committer's commits and runs per commit.

    python benchmarks/sqlite_concurrent.py [--synchronous NORMAL|FULL]

For another checkout, put it first on the path (from outside both trees):
``PYTHONPATH=/other:/other/drivers python /this/benchmarks/sqlite_concurrent.py``.
The instrumentation (a few wrapped functions) costs ~2-5 % of the figures;
compare builds with the same script, not with `run.py`'s figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import queue
import resource
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import durable_sqlite._writer as writer_mod

import durable
from durable import activity, workflow
from durable._runtime import committer as committer_mod


@activity.defn(name="bench_step")
async def bench_step(i: int) -> int:
    return i * 2 + 1


@workflow.defn(name="bench_local")
async def bench_local(base: int, n: int) -> int:
    total = 0
    for i in range(n):
        total += await workflow.execute_local_activity(bench_step, base + i)
    return total


class _GcTimer:
    def __init__(self) -> None:
        self.t0: dict[int, float] = {}
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        me = threading.get_ident()
        if phase == "start":
            self.t0[me] = time.perf_counter()
        elif me in self.t0:
            g = info["generation"]
            self.seconds[g] += time.perf_counter() - self.t0.pop(me)
            self.count[g] += 1


GC = _GcTimer()


class _Counters:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.queue_wait = 0.0  # database thread blocked on its empty queue
        self.select_wait = 0.0  # loop blocked in its selector (timeout > 0)
        self.selects = 0  # loop iterations
        self.hops = 0  # call_soon_threadsafe from the database thread
        self.statements: collections.Counter[str] = collections.Counter()
        self.programs: collections.Counter[str] = collections.Counter()
        self.commits = 0
        self.commit_runs = 0
        self.drain_programs: list[int] = []
        self.program_cpu: collections.Counter[str] = collections.Counter()
        self.tx_cpu = 0.0


C = _Counters()


class _TimedQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self.empty() and block:
            t0 = time.perf_counter()
            try:
                return super().get(block, timeout)
            finally:
                C.queue_wait += time.perf_counter() - t0
        return super().get(block, timeout)


def _instrument() -> None:
    init = writer_mod.Writer.__init__

    def writer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.queue = _TimedQueue()

    writer_mod.Writer.__init__ = writer_init  # type: ignore[method-assign]

    execute = writer_mod._execute

    def counted_execute(conn: Any, stmt: Any) -> Any:
        C.statements[stmt.mode] += 1
        return execute(conn, stmt)

    writer_mod._execute = counted_execute

    transaction = writer_mod.Writer._transaction

    def counted_transaction(self: Any, calls: list[Any]) -> Any:
        C.drain_programs.append(len(calls))
        for call in calls:
            f = call.factory
            name = getattr(f, "__qualname__", None) or getattr(
                getattr(f, "func", None), "__qualname__", type(f).__name__)
            C.programs[name.split(".<locals>")[0]] += 1
        t0 = time.thread_time()
        try:
            return transaction(self, calls)
        finally:
            C.tx_cpu += time.thread_time() - t0

    writer_mod.Writer._transaction = counted_transaction  # type: ignore[method-assign]

    drive = writer_mod._drive

    def timed_drive(conn: Any, program: Any) -> Any:
        t0 = time.thread_time()
        try:
            return drive(conn, program)
        finally:
            name = getattr(program, "__qualname__", "?").split(".<locals>")[0]
            C.program_cpu[name] += time.thread_time() - t0

    writer_mod._drive = timed_drive

    cinit = committer_mod.Committer.__init__

    def committer_init(self: Any, commit: Any, *args: Any, **kwargs: Any) -> None:
        async def counted(batches: Any, now: float) -> Any:
            C.commits += 1
            C.commit_runs += len(batches)
            return await commit(batches, now)

        cinit(self, counted, *args, **kwargs)

    committer_mod.Committer.__init__ = committer_init  # type: ignore[method-assign]


def _instrument_loop(loop: asyncio.AbstractEventLoop) -> None:
    selector = loop._selector  # type: ignore[attr-defined]
    select = selector.select

    def timed_select(timeout: float | None = None) -> Any:
        C.selects += 1
        if timeout == 0:
            return select(timeout)
        t0 = time.perf_counter()
        try:
            return select(timeout)
        finally:
            C.select_wait += time.perf_counter() - t0

    selector.select = timed_select
    threadsafe = loop.call_soon_threadsafe

    def counted_threadsafe(*args: Any, **kwargs: Any) -> Any:
        C.hops += 1
        return threadsafe(*args, **kwargs)

    loop.call_soon_threadsafe = counted_threadsafe  # type: ignore[method-assign]


async def _main(args: argparse.Namespace) -> list[dict[str, Any]]:
    _instrument_loop(asyncio.get_running_loop())
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/b.db?synchronous={args.synchronous}"
        async with durable.connect(url) as client:
            writer = client.driver._writer  # type: ignore[attr-defined]
            clock = time.pthread_getcpuclockid(writer.thread.ident)
            async with durable.Worker(client, workflows=[bench_local], activities=[bench_step]):
                tag = 0

                async def once(n_wf: int, steps: int) -> None:
                    nonlocal tag
                    tag += 1
                    handles = [await client.start(bench_local, k * steps, steps,
                                                  id=f"b-{tag}-{k}") for k in range(n_wf)]
                    for h in handles:
                        await h.result()

                await once(10, 10)
                for _ in range(args.rounds):
                    C.reset()
                    GC.seconds, GC.count = [0.0, 0.0, 0.0], [0, 0, 0]
                    s0 = writer.stats()
                    r0 = resource.getrusage(resource.RUSAGE_SELF)
                    w0, l0, d0, p0 = (time.perf_counter(), time.thread_time(),
                                      time.clock_gettime(clock), time.process_time())
                    await once(args.workflows, args.steps)
                    wall = time.perf_counter() - w0
                    loop_cpu = time.thread_time() - l0
                    db_cpu = time.clock_gettime(clock) - d0
                    proc = time.process_time() - p0
                    s1 = writer.stats()
                    r1 = resource.getrusage(resource.RUSAGE_SELF)
                    n = args.workflows * args.steps
                    k = 1000 / n
                    rows.append({
                        "steps/s": n / wall,
                        "wall ms/1k": wall * 1e3 * k,
                        "loop cpu ms/1k": loop_cpu * 1e3 * k,
                        "db cpu ms/1k": db_cpu * 1e3 * k,
                        "process cpu ms/1k": proc * 1e3 * k,
                        "loop busy %": 100 * loop_cpu / wall,
                        "db busy %": 100 * db_cpu / wall,
                        "loop idle (select) %": 100 * C.select_wait / wall,
                        "db idle (queue) %": 100 * C.queue_wait / wall,
                        "loop other (GIL) %": 100 * (wall - loop_cpu - C.select_wait) / wall,
                        "db other (GIL) %": 100 * (wall - db_cpu - C.queue_wait) / wall,
                        "gc ms/1k (gen0,1,2)": [round(x * 1e3 * k, 2) for x in GC.seconds],
                        "gc count/1k": [round(x * k) for x in GC.count],
                        "context switches/1k (voluntary)": (r1.ru_nvcsw - r0.ru_nvcsw) * k,
                        "context switches/1k (involuntary)": (r1.ru_nivcsw - r0.ru_nivcsw) * k,
                        "drains/1k": (s1.drains - s0.drains) * k,
                        "transactions/1k": (s1.transactions - s0.transactions) * k,
                        "programs/1k": (s1.programs - s0.programs) * k,
                        "statements/1k": sum(C.statements.values()) * k,
                        "hops into loop/1k": C.hops * k,
                        "loop iterations/1k": C.selects * k,
                        "commits/1k": C.commits * k,
                        "runs/commit": C.commit_runs / max(1, C.commits),
                        "db cpu by program µs/step": {
                            p: round(v * 1e6 / n, 1) for p, v in C.program_cpu.most_common()},
                        "db cpu in transactions µs/step": [round(C.tx_cpu * 1e6 / n, 1)],
                        "programs by kind/1k": {
                            p: round(v * k) for p, v in C.programs.most_common()},
                        "statements by mode/1k": {
                            m: round(v * k) for m, v in C.statements.items()},
                    })
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workflows", type=int, default=100)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--synchronous", default="NORMAL", choices=["NORMAL", "FULL"])
    p.add_argument("--switch", type=float, default=None,
                   help="sys.setswitchinterval for the run (an experiment, not advice)")
    args = p.parse_args()
    if args.switch is not None:
        sys.setswitchinterval(args.switch)
    _instrument()
    rows = asyncio.run(_main(args))
    print(f"# {os.path.dirname(durable.__file__)}  load {os.getloadavg()[0]:.2f}  "
          f"synchronous={args.synchronous}  rounds {len(rows)} (median [min-max])")
    for key, value in rows[0].items():
        if isinstance(value, (dict, list)):
            print(f"{key}: {rows[len(rows) // 2][key]}")
            continue
        values = [r[key] for r in rows]
        print(f"{key:>24}: {statistics.median(values):9.1f} "
              f"[{min(values):.1f}-{max(values):.1f}]")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
