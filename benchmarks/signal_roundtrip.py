"""Signal round trip (issue [4/8]): send -> handler ran -> recorded.

One workflow waits (``wait_condition``) while signals are sent to it one at a
time; each figure is, for one signal, from just before ``await
handle.signal(...)`` to the moment the sender knows the signal was handled and
its delivery recorded:

* ``1proc`` setups (client and worker in this process): the signal handler
  sets an event the sender waits on. The owner records the delivery
  (``SignalDelivered``) *before* it calls the handler, so "handler ran"
  implies "recorded".
* ``2proc`` setups (the worker is another process, ``--serve``): the sender
  waits until the run's ``SignalDelivered`` event for that signal can be read
  from storage (woken by the delivery's wake-up: LISTEN/NOTIFY on PostgreSQL,
  ``PRAGMA data_version`` polling on SQLite, the wake log read every 50 ms
  on MariaDB, then one read). The handler runs in the worker right after
  that commit. ``mariadb-2proc`` (not part of ``all``: it needs a server,
  ``--mariadb-url``) crosses processes twice through the wake log.

``send`` is how long ``handle.signal()`` itself took (the SignalReceived
commit). Signals are sent one at a time with a random 0-5 ms pause between,
after ``--warmup`` (20) signals that are not counted.

Usage::

    python benchmarks/signal_roundtrip.py [--setup sqlite-1proc|postgres-2proc|sqlite-2proc|
        postgres-1proc|mariadb-2proc|all] [--signals 300] [--backend asyncio|trio]

Prints a table and writes every figure to ``benchmarks/results/signal_roundtrip.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

import durable
from durable import workflow
from durable.driver import Wake

HERE = Path(__file__).resolve().parent
SCRIPT = Path(__file__).resolve()
PG_URL = os.environ.get("DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SETUPS = ("sqlite-1proc", "postgres-2proc", "sqlite-2proc", "postgres-1proc")
#: setups asked for by name only (``all`` leaves them out): they need a MariaDB server
NAMED_ONLY = ("mariadb-2proc", "mariadb-1proc")
MARIADB_URL = os.environ.get("DURABLE_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test")

HANDLED: dict[int, anyio.Event] = {}  # in-process setups: set by the handler


@workflow.defn(name="bench_signal_echo")
class Echo:
    def __init__(self) -> None:
        self.count = 0

    @workflow.run
    async def run(self, total: int) -> int:
        await workflow.wait_condition(lambda: self.count >= total)
        return self.count

    @workflow.signal
    def ping(self, n: int) -> None:
        self.count += 1
        event = HANDLED.get(n)
        if event is not None:
            event.set()


# ---------------------------------------------------------------- the worker process


async def _serve(db: str) -> None:
    async with durable.connect(db) as client, durable.Worker(client, workflows=[Echo]):
        print("ready", flush=True)
        await anyio.sleep_forever()


def spawn_worker(db: str, log: Path, backend: str) -> subprocess.Popen[str]:
    argv = [sys.executable, str(SCRIPT), "--serve", "--db", db, "--backend", backend]
    with open(log, "ab") as err:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)


async def wait_ready(proc: subprocess.Popen[str], log: Path, within: float = 60.0) -> None:
    assert proc.stdout is not None
    with anyio.fail_after(within):
        line = await anyio.to_thread.run_sync(proc.stdout.readline, abandon_on_cancel=True)
    if line.strip() != "ready":
        tail = await anyio.Path(log).read_text()
        raise RuntimeError(f"the worker process did not start:\n{tail[-3000:]}")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


# ---------------------------------------------------------------- measuring


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(seconds: list[float]) -> dict[str, Any]:
    ms = sorted(x * 1000.0 for x in seconds)
    return {
        "count": len(ms), "min_ms": round(ms[0], 3), "p50_ms": round(_percentile(ms, 50), 3),
        "p90_ms": round(_percentile(ms, 90), 3), "p99_ms": round(_percentile(ms, 99), 3),
        "max_ms": round(ms[-1], 3), "mean_ms": round(sum(ms) / len(ms), 3),
    }


async def _delivered(handle: durable.WorkflowHandle, seq: int, after: int) -> int:
    """The sequence of the run's SignalDelivered event for signal `seq`, or 0."""
    for event in await handle.history(after_sequence=after):
        if event.type == "SignalDelivered" and event.data["seq"] == seq:
            return event.sequence
    return 0


async def measure(client: durable.Client, in_process: bool, signals: int,
                  warmup: int) -> dict[str, Any]:
    total = warmup + signals
    started = await client.start(Echo, total, id=f"echo-{uuid.uuid4().hex[:8]}")
    run_id = (await started.describe())["run"]["run_id"]
    # a sender usually holds the workflow's id, not the handle that started it
    handle = client.get_handle(started.workflow_id)
    changed = anyio.Event()

    def on_wake(wake: Wake) -> None:
        nonlocal changed
        if wake.key == ("delivered", run_id) or wake.key == ("any",):
            changed.set()

    unsubscribe = client.store.hub.subscribe(on_wake)
    sends: list[float] = []
    round_trips: list[float] = []
    seen_up_to = 0
    try:
        for n in range(total):
            await anyio.sleep(random.uniform(0.0, 0.005))
            if in_process:
                HANDLED[n] = anyio.Event()
            changed = anyio.Event()
            t0 = time.perf_counter()
            await handle.signal("ping", n)
            t_sent = time.perf_counter()
            with anyio.fail_after(30):
                if in_process:
                    await HANDLED[n].wait()
                    del HANDLED[n]
                else:
                    while not (found := await _delivered(handle, n + 1, seen_up_to)):
                        with anyio.move_on_after(0.05):  # a wake-up missed: read again
                            await changed.wait()
                        changed = anyio.Event()
                    seen_up_to = found
            t_done = time.perf_counter()
            if n >= warmup:
                sends.append(t_sent - t0)
                round_trips.append(t_done - t0)
        with anyio.fail_after(30):
            assert await handle.result() == total
    finally:
        unsubscribe()
    return {"send": summarize(sends), "round_trip": summarize(round_trips)}


async def run_setup(setup: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    db, procs = setup.split("-")
    in_process = procs == "1proc"
    out: dict[str, Any] = {"setup": setup}
    if db == "sqlite":
        url = f"sqlite:///{workdir / f'{setup}.db'}"
        out["storage"] = {"url": url, "journal_mode": "WAL", "synchronous": "NORMAL"}
    elif db == "mariadb":  # the URL's database, which must exist (runs stay in it)
        url = args.mariadb_url
        out["storage"] = {"url": url}
    else:
        schema = f"durable_sig_{uuid.uuid4().hex[:6]}"
        url = f"{args.pg_url}{'&' if '?' in args.pg_url else '?'}schema={schema}"
        out["storage"] = {"url": url}
    print(f"{setup}: {args.signals} signals ...", file=sys.stderr, flush=True)
    async with durable.connect(url) as client:
        try:
            if in_process:
                async with durable.Worker(client, workflows=[Echo]):
                    out.update(await measure(client, True, args.signals, args.warmup))
            else:
                log = workdir / f"{setup}-worker.log"
                proc = spawn_worker(url, log, args.backend)
                try:
                    await wait_ready(proc, log)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(client.driver.watch)  # hear the worker's commits
                        out.update(await measure(client, False, args.signals, args.warmup))
                        tg.cancel_scope.cancel()
                finally:
                    stop(proc)
        finally:
            drop = getattr(client.driver, "drop_schema", None)
            if drop is not None:
                with anyio.CancelScope(shield=True):
                    await drop()
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="signal round trip: send -> handled -> recorded")
    p.add_argument("--setup", choices=[*SETUPS, *NAMED_ONLY, "all"], default="all")
    p.add_argument("--signals", type=int, default=300, help="signals measured per setup")
    p.add_argument("--warmup", type=int, default=20, help="signals sent first, not measured")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--pg-url", default=PG_URL, help=f"PostgreSQL URL (default {PG_URL})")
    p.add_argument("--mariadb-url", default=MARIADB_URL,
                   help=f"MariaDB URL of an existing database (default {MARIADB_URL})")
    p.add_argument("--sqlite-dir", default=None, help="directory for the SQLite files")
    p.add_argument("--out", default=str(HERE / "results" / "signal_roundtrip.json"))
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--db", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.signals < 1:
        raise SystemExit("--signals must be >= 1")
    return args


def git_revision() -> dict[str, Any]:
    def git(*argv: str) -> str:
        try:
            out = subprocess.run(["git", *argv], cwd=HERE, capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"),
            "modified": git("status", "--porcelain", "--untracked-files=no").splitlines()}


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    setups = SETUPS if args.setup == "all" else (args.setup,)
    return {setup: await run_setup(setup, args, workdir) for setup in setups}


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.serve:
        anyio.run(_serve, args.db, backend=args.backend)
        return 0
    started = datetime.datetime.now(datetime.UTC)
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="durable_sig_", dir=args.sqlite_dir) as tmp:
        results = anyio.run(run, args, Path(tmp), backend=args.backend)
    report = {
        "started_at": started.isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "backend": args.backend, "signals": args.signals, "warmup": args.warmup,
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "git": git_revision(), "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'setup':<16} {'measure':<11} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for setup, r in results.items():
        for key in ("send", "round_trip"):
            m = r[key]
            print(f"{setup:<16} {key:<11} {m['p50_ms']:>8.2f} {m['p99_ms']:>8.2f} "
                  f"{m['max_ms']:>8.2f}")
    print(f"load average {load_before} -> {report['load_average_after']}; written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
