"""A worker process serving schedules, for tests/test_schedules_crash.py to kill.

Usage::

    python tests/schedule_app.py --db URL [--backend asyncio|trio] [--lease 1.0]
        [--poll 0.1] [--identity NAME] [--standby]

It registers one workflow, `fired`, which returns the schedule and fire time
its run was started for (`workflow.info()`), and serves until killed. With
`--standby` it imports everything, then waits for a line on its stdin before
it connects: a replacement started ahead of time takes over at once when a
worker is killed (`spawn(standby=True)`, then crash_app.go), instead of a second or more
of interpreter start and imports later.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import durable
from durable import workflow

APP = Path(__file__).resolve()


@workflow.defn(name="sched_crash_fired")
async def fired(label: str) -> dict[str, Any]:
    info = workflow.info()
    return {"label": label, "schedule_id": info.schedule_id,
            "scheduled_at": info.scheduled_at.isoformat() if info.scheduled_at else None}


async def _serve(args: argparse.Namespace) -> None:
    async with durable.connect(args.db) as client:
        worker = durable.Worker(client, workflows=[fired], lease_seconds=args.lease,
                                poll_interval=args.poll, identity=args.identity)
        print(f"serving pid={os.getpid()}", flush=True)
        await worker.run()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--identity", default=None)
    parser.add_argument("--standby", action="store_true")
    args = parser.parse_args(argv)
    if args.standby:
        sys.stdin.readline()
    anyio.run(_serve, args, backend=args.backend)


def spawn(db: str, log: Path, *, backend: str = "asyncio", name: str = "worker",
          lease: float = 1.0, standby: bool = False) -> subprocess.Popen[bytes]:
    """Start a worker process; its output goes to `log` (appended). A standby
    one waits, imports done, until `crash_app.go(proc)`."""
    argv = [sys.executable, str(APP), "--db", db, "--backend", backend, "--lease", str(lease),
            "--identity", f"{name}-{time.monotonic_ns()}"] + (["--standby"] if standby else [])
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if standby else None)


if __name__ == "__main__":
    main()
