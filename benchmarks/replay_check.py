"""What the upgrade gate costs: one replay check of a run's history (issue 25).

A worker of a new build takes a run another build advanced only after it
replayed the run's history against its own code (`durable._runtime.upgrade`).
This measures that check for a run whose history holds ``--ops`` completed
activity ops (the workflow then waits for a signal: an open run in flight),
on real storage: reading the run, its ops and inbox (`Store.load_for_replay`)
plus the read-only replay (`replay_check`), median of ``--rounds``. The
history is written straight into the ops table (running 10,000 activities
first would measure something else).

    python benchmarks/replay_check.py --ops 100 1000 10000 --rounds 3
    python benchmarks/replay_check.py --url postgresql://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import durable
from durable import activity, workflow
from durable._runtime.replay import NoStorage, replay_run
from durable._runtime.upgrade import replay_check
from durable.driver import many


@activity.defn(name="rc_step")
async def step(i: int) -> int:
    return i


@workflow.defn(name="rc_flow")
class Flow:
    """``n`` activities in a row, then a wait for the 'go' signal."""

    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self, n: int) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_activity(step, i)
        await workflow.wait_condition(lambda: self.go)
        return total

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


async def one_size(url: str, n: int, rounds: int) -> dict[str, Any]:
    async with durable.connect(url) as client:
        handle = await client.start(Flow, n, id=f"rc-{n}-{time.monotonic_ns()}")
        run_id = (await handle.describe())["run"]["run_id"]
        now = time.time()
        rows = [(run_id, f"0:{i + 1}", "activity", "rc_step", "completed", json.dumps(i), now, now)
                for i in range(n)]

        def insert(tx: Any) -> Any:
            yield many("INSERT INTO ops (run_id, op_id, kind, name, status, result, "
                       "scheduled_at, closed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

        await client.driver.run(insert)
        defn = durable.Worker(client, workflows=[Flow], activities=[step]).workflows["rc_flow"]
        loads, replays = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            loaded = await client.store.load_for_replay(run_id)
            t1 = time.perf_counter()
            assert loaded is not None
            run, ops, inbox = loaded
            divergence = await replay_check(defn, run, ops, inbox, activity_names={"rc_step"},
                                            converter=client.converter, limits=client.limits)
            t2 = time.perf_counter()
            assert divergence is None, divergence
            loads.append(t1 - t0)
            replays.append(t2 - t1)
        # not timed: the replay went through every op and waits at the signal
        outcome = await replay_run(defn, run, ops, inbox, worker=NoStorage({"rc_step"}),
                                   converter=client.converter, limits=client.limits)
        assert set(ops) <= outcome.ctx.asked, "the replay stopped before the end of history"
        assert outcome.committer.went_past == f"condition 'wait_condition' at 0:{n + 1}", (
            outcome.committer.went_past)
        drop = getattr(client.driver, "drop_schema", None)
        if drop is not None and url.startswith("postgres"):
            await drop()
    load, replay = statistics.median(loads) * 1000, statistics.median(replays) * 1000
    return {"ops": n, "load_ms": load, "replay_ms": replay, "total_ms": load + replay,
            "us_per_op": (load + replay) * 1000 / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=None, help="storage URL (default: a temporary SQLite)")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'replay_check.db'}"
        print(f"{args.backend} {url.split('://')[0]}: one replay check, median of "
              f"{args.rounds}")
        print(f"{'ops':>7} {'load ms':>9} {'replay ms':>10} {'total ms':>9} {'us/op':>7}")
        for n in args.ops:
            r = anyio.run(one_size, url, n, args.rounds, backend=args.backend)
            print(f"{r['ops']:>7} {r['load_ms']:>9.1f} {r['replay_ms']:>10.1f} "
                  f"{r['total_ms']:>9.1f} {r['us_per_op']:>7.1f}")


if __name__ == "__main__":
    main()
