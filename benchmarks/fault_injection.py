"""Fault injection: SIGKILL random worker processes while hundreds of workflows run.

What it does
------------
Starts ``--workflows`` instances of ``fault_flow`` (``--steps`` remote
activities, a durable timer, one local activity; see tests/crash_app.py) on a
fresh database, launches ``--workers`` worker processes on it (alternately on
asyncio and trio), and every ``--kill-every`` seconds SIGKILLs a random worker
and starts a new one in its place, until every workflow has completed. Then it
reads every history and the side-effect file that the activities append to
(with fsync, before they return) and prints one JSON object:

* ``completed`` / ``not_completed`` / ``wrong_results``: every workflow must
  complete with the right result;
* ``history_problems``: an op whose outcome (ActivityCompleted, TimerFired, ...)
  or schedule was recorded more than once, or not at all; must be empty;
* ``ops``, ``effect_lines``, ``reexecuted_attempts`` (= effect lines - ops,
  split into remote and local): the price of at-least-once execution, i.e. how
  many effects happened again because a worker died after the effect and before
  its result was recorded; ``missing_effects`` must be empty;
* ``retries_after_worker_lost``: attempts fenced because their worker died;
* ``kills`` and ``seconds`` (from the first worker's start to the last completion);
* ``unexpected_exits``: workers that died without being killed (restarted at
  once); must be empty: a worker crash is a failed run of this benchmark;
* with ``--soak``: ``backend_terminations`` (PostgreSQL: every backend of the
  workers terminated at once, as a server restart looks to them) and
  ``sigstops`` (a worker frozen past its lease, then resumed: its stale writes
  must be refused and it must keep serving).

The short version of this run is a test: tests/test_crash.py
(``test_random_kills_of_three_workers_lose_and_duplicate_nothing``).

Usage::

    python benchmarks/fault_injection.py --db sqlite --workflows 300 --workers 3 --kill-every 3
    python benchmarks/fault_injection.py --db postgres   # needs the PostgreSQL driver
    python benchmarks/fault_injection.py --db postgres --workflows 500 --soak

SQLite: a file in a temporary directory, shared by all worker processes.
PostgreSQL: a schema of its own at ``$DURABLE_TEST_POSTGRES_URL`` (default
postgresql://postgres@127.0.0.1:5432/test), dropped afterwards. Exits 1 if any
check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from crash_app import FaultReport, run_fault_injection

import durable

POSTGRES_URL = os.environ.get(
    "DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def failed(report: FaultReport) -> bool:
    return bool(
        report.not_completed or report.wrong_results or report.history_problems
        or report.missing_effects or report.unexpected_exits
        or report.completed != report.workflows
    )


async def run(args: argparse.Namespace, workdir: Path) -> FaultReport:
    if args.db == "sqlite":
        url = f"sqlite:///{workdir / 'fault.db'}"
    else:
        sep = "&" if "?" in POSTGRES_URL else "?"
        url = f"{POSTGRES_URL}{sep}schema=durable_fault_{uuid.uuid4().hex[:12]}"
    try:
        return await run_fault_injection(
            url, workdir / "run", workflows=args.workflows, workers=args.workers,
            kill_every=args.kill_every, steps=args.steps, timer_seconds=args.timer,
            work_seconds=args.work, max_kills=args.max_kills,
            lease=args.lease, time_limit=args.time_limit, seed=args.seed,
            terminate_backends_every=args.terminate_backends_every if args.soak else None,
            sigstop_every=args.sigstop_every if args.soak else None,
            sigstop_for=args.sigstop_for,
        )
    finally:
        if args.db == "postgres":
            async with durable.connect(url) as client:
                drop = getattr(client.driver, "drop_schema", None)
                if drop is not None:
                    await drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--steps", type=int, default=4, help="remote activities per workflow")
    parser.add_argument("--timer", type=float, default=1.0, help="durable timer, seconds")
    parser.add_argument("--work", type=float, default=0.05,
                        help="mean seconds an activity works before and after its effect")
    parser.add_argument("--lease", type=float, default=1.0, help="worker lease, seconds")
    parser.add_argument("--max-kills", type=int, default=None,
                        help="stop killing after this many kills (default: until done)")
    parser.add_argument("--time-limit", type=float, default=300.0,
                        help="give up (and report what is unfinished) after this long")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--soak", action="store_true",
                        help="also terminate the workers' PostgreSQL backends and freeze "
                        "workers with SIGSTOP past their lease (then SIGCONT)")
    parser.add_argument("--terminate-backends-every", type=float, default=7.0,
                        help="with --soak on PostgreSQL: seconds between backend terminations")
    parser.add_argument("--sigstop-every", type=float, default=5.0,
                        help="with --soak: seconds between freezes of a random worker")
    parser.add_argument("--sigstop-for", type=float, default=None,
                        help="with --soak: seconds a frozen worker stays frozen "
                        "(default: twice the lease)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (logs, effects, SQLite file); "
                        "it is always kept when a check failed")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="durable-fault-"))
    report = anyio.run(run, args, workdir)
    figures = dataclasses.asdict(report)
    figures["ok"] = not failed(report)
    if args.keep or not figures["ok"]:
        figures["workdir"] = str(workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    sys.exit(0 if figures["ok"] else 1)


if __name__ == "__main__":
    main()
