"""A worker process to kill: workflows whose effects can be counted from outside.

The crash tests (tests/test_crash.py) and the fault-injection benchmark
(benchmarks/fault_injection.py) run this file as a real process and stop it
with SIGKILL, then start another one on the same database and check what the
second process did. Nothing is mocked: what they observe is

* the side-effect file ``DIR/effects.log``: every activity attempt appends one
  line (``key step attempt pid``) with O_APPEND, write and fsync *before* it
  returns, so a line exists for each time the effect happened, recorded or not;
* marker files ``DIR/markers/KEY.POINT``: with ``--pause POINT`` (``before:STEP``
  or ``after:STEP``) an activity reaching that point writes its marker and then
  sleeps for an hour, which is where the test kills the process;
* the workflow history, read through an ordinary client.

Usage::

    python tests/crash_app.py --db sqlite:///app.db --dir DIR [--pause after:r2]
        [--backend asyncio|trio] [--lease 1.0] [--poll 0.1] [--identity NAME]
        [--max-runs N] [--max-activities N] [--log-level INFO] [--standby]

With ``--standby`` the process imports everything, then waits for a line on
its stdin before it connects: a test starts the worker that will take over
ahead of time (``spawn_worker(standby=True)``) and lets it go (``go``) right
after the kill, instead of waiting a second or more for an interpreter to
start and import. What it does once let go is what a fresh process does.

The module also holds the launch/kill/inspect helpers both users share.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

import durable
from durable import activity, workflow

APP = Path(__file__).resolve()

# Set by main() in the worker process; the test process never runs activities.
EFFECTS_DIR: Path | None = None
PAUSES: frozenset[str] = frozenset()

# Worker-lost retries must come back fast and must not run out under repeated kills.
OPTIONS = durable.ActivityOptions(
    retry=durable.RetryPolicy(max_attempts=100, initial_interval=0.05, maximum_interval=0.2)
)


# ---------------------------------------------------------------- observable effects


def effects_file(directory: Path) -> Path:
    return directory / "effects.log"


def marker_file(directory: Path, key: str, point: str) -> Path:
    return directory / "markers" / f"{key}.{point.replace(':', '-')}"


def append_line(path: Path, line: str) -> None:
    """Append one line durably: O_APPEND keeps concurrent writers' lines whole."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _effect(key: str, step: str) -> None:
    assert EFFECTS_DIR is not None, "activities run only in a crash_app worker process"
    append_line(effects_file(EFFECTS_DIR), f"{key} {step} {activity.info().attempt} {os.getpid()}")


def _reached(key: str, point: str) -> bool:
    """Write the marker of a configured pause point; True if the caller must stop here."""
    if point not in PAUSES:
        return False
    assert EFFECTS_DIR is not None
    marker = marker_file(EFFECTS_DIR, key, point)
    marker.parent.mkdir(parents=True, exist_ok=True)
    append_line(marker, str(os.getpid()))
    return True


def read_effects(directory: Path) -> Counter[tuple[str, str]]:
    """How many times each (workflow key, step) effect happened."""
    path = effects_file(directory)
    if not path.exists():
        return Counter()
    counts: Counter[tuple[str, str]] = Counter()
    for line in path.read_text().splitlines():
        key, step, _attempt, _pid = line.split()
        counts[key, step] += 1
    return counts


# ---------------------------------------------------------------- workflows and activities


@activity.defn(name="crash_step")
async def step(key: str, name: str) -> str:
    if _reached(key, f"before:{name}"):
        await anyio.sleep(3600)
    _effect(key, name)
    if _reached(key, f"after:{name}"):
        await anyio.sleep(3600)
    return f"{name}:{key}"


@activity.defn(name="crash_step_sync")
def step_sync(key: str, name: str) -> str:
    """The same step as a sync function: it runs in a worker thread."""
    if _reached(key, f"before:{name}"):
        time.sleep(3600)
    _effect(key, name)
    if _reached(key, f"after:{name}"):
        time.sleep(3600)
    return f"{name}:{key}"


PIPELINE_STEPS = ("r1", "l1", "r2", "l2")


@workflow.defn(name="crash_pipeline")
async def pipeline(key: str, timer_seconds: float) -> list[str]:
    """Remote, local, remote, durable timer, local (sync): every kind of boundary."""
    r1 = await workflow.execute_activity(step, key, "r1", options=OPTIONS)
    l1 = await workflow.execute_local_activity(step, key, "l1", options=OPTIONS)
    r2 = await workflow.execute_activity(step, key, "r2", options=OPTIONS)
    await workflow.sleep(timer_seconds)
    l2 = await workflow.execute_local_activity(step_sync, key, "l2", options=OPTIONS)
    return [r1, l1, r2, l2]


CLEANUP_STEPS = ("c1", "c2")


@workflow.defn(name="crash_cancellable")
async def cancellable(key: str) -> str:
    """Waits on a timer until cancelled, then cleans up under the shield: a remote
    step and a local one, so a kill can land in the middle of the cleanup."""
    try:
        await workflow.sleep(3600)
        return "not cancelled"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(step, key, "c1", options=OPTIONS)
                await workflow.execute_local_activity(step, key, "c2", options=OPTIONS)


@workflow.defn(name="crash_signalled")
class Signalled:
    """Each signal runs a remote step in its (async) handler; the run ends once
    `count` of them have: a kill can land inside a delivered signal's handler."""

    def __init__(self) -> None:
        self.values: list[str] = []

    @workflow.run
    async def run(self, count: int) -> list[str]:
        await workflow.wait_condition(lambda: len(self.values) >= count)
        return self.values

    @workflow.signal  # may run before the run method starts: the key is the workflow id
    async def add(self, n: int) -> None:
        key = workflow.info().workflow_id
        self.values.append(await workflow.execute_activity(step, key, f"s{n}", options=OPTIONS))


@workflow.defn(name="crash_updated")
class Updated:
    """An update whose handler runs a remote step: a kill can land between
    UpdateAccepted and UpdateCompleted."""

    def __init__(self) -> None:
        self.applied: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: bool(self.applied))
        return self.applied

    @workflow.update
    async def apply(self, n: int) -> str:
        key = workflow.info().workflow_id
        value: str = await workflow.execute_activity(step, key, f"u{n}", options=OPTIONS)
        self.applied.append(value)
        return value


@activity.defn(name="crash_fault_work")
async def work(key: str, name: str, value: int, seconds: float) -> int:
    """Work on both sides of the effect (`seconds` in all, on average), so that kills
    land before effects, and after them but before their results are recorded."""
    await anyio.sleep(random.uniform(0.0, seconds))
    _effect(key, name)
    await anyio.sleep(random.uniform(0.0, seconds))
    return value * 2


@workflow.defn(name="crash_fault_flow")
async def fault_flow(key: str, steps: int, timer_seconds: float, work_seconds: float) -> int:
    """`steps` remote activities, a durable timer, then one local activity."""
    total = 0
    for i in range(steps):
        doubled: int = await workflow.execute_activity(work, key, f"a{i}", i, work_seconds,
                                                       options=OPTIONS)
        total += doubled
    await workflow.sleep(timer_seconds)
    last: int = await workflow.execute_local_activity(work, key, "local", 1, work_seconds,
                                                      options=OPTIONS)
    return total + last


def fault_flow_result(steps: int) -> int:
    return sum(2 * i for i in range(steps)) + 2


def fault_flow_steps(steps: int) -> list[str]:
    return [f"a{i}" for i in range(steps)] + ["local"]


LOCAL_RUN_BATCH = 5  # the workers' local_activity_batch: the batched window


@workflow.defn(name="crash_local_run")
async def local_run(key: str, n: int, record: str) -> list[str]:
    """`n` local steps s0, s1, ... recorded per step or batched (`record`)."""
    options = durable.ActivityOptions(record=record, retry=OPTIONS.retry)
    return [await workflow.execute_local_activity(step, key, f"s{i}", options=options)
            for i in range(n)]


# ---------------------------------------------------------------- the worker process


async def _serve(args: argparse.Namespace) -> None:
    async with durable.connect(args.db) as client:
        worker = durable.Worker(
            client,
            workflows=[pipeline, fault_flow, cancellable, Signalled, Updated, local_run],
            activities=[step, step_sync, work],
            lease_seconds=args.lease, poll_interval=args.poll, identity=args.identity,
            max_concurrent_runs=args.max_runs, max_concurrent_activities=args.max_activities,
            local_activity_batch=LOCAL_RUN_BATCH,
        )
        async with worker:
            await anyio.sleep_forever()


def main(argv: Sequence[str] | None = None) -> None:
    global EFFECTS_DIR, PAUSES
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="storage URL")
    parser.add_argument("--dir", required=True, type=Path, help="effects and markers go here")
    parser.add_argument("--pause", action="append", default=[],
                        help="before:STEP or after:STEP: write a marker there and hang")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--identity", default=None)
    parser.add_argument("--max-runs", type=int, default=1000)
    parser.add_argument("--max-activities", type=int, default=100)
    parser.add_argument("--log-level", default=os.environ.get("CRASH_APP_LOG_LEVEL", "WARNING"),
                        help="engine log level (the log goes to DIR/NAME.log)")
    parser.add_argument("--standby", action="store_true",
                        help="wait for a line on stdin before connecting")
    args = parser.parse_args(argv)
    if args.standby:
        sys.stdin.readline()
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    EFFECTS_DIR = args.dir
    PAUSES = frozenset(args.pause)
    args.dir.mkdir(parents=True, exist_ok=True)
    anyio.run(_serve, args, backend=args.backend)


# ---------------------------------------------------------------- helpers for the test side


def spawn_worker(
    db: str,
    directory: Path,
    *,
    pauses: Iterable[str] = (),
    backend: str = "asyncio",
    lease: float = 1.0,
    poll: float = 0.1,
    name: str = "worker",
    max_runs: int = 1000,
    max_activities: int = 100,
    standby: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a crash_app worker process; its output goes to DIR/NAME.log. A
    standby one waits, imports done, until `go(proc)`."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(APP), "--db", db, "--dir", str(directory),
            "--backend", backend, "--lease", str(lease), "--poll", str(poll),
            "--identity", f"{name}-{time.monotonic_ns()}", "--max-runs", str(max_runs),
            "--max-activities", str(max_activities)]
    for point in pauses:
        argv += ["--pause", point]
    if standby:
        argv.append("--standby")
    with open(directory / f"{name}.log", "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if standby else None)


def go(proc: subprocess.Popen[bytes]) -> None:
    """Let a standby worker process (crash_app's or schedule_app's) connect and serve."""
    assert proc.stdin is not None, "not a standby process"
    proc.stdin.write(b"go\n")
    proc.stdin.close()


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL: no finally block, no lease release, no flush. Wait until it is gone
    (and close the stdin of a standby process)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    if proc.stdin is not None:
        proc.stdin.close()


def logs(directory: Path, limit: int = 4000) -> str:
    """The tail of every worker log in DIR, for assertion messages."""
    parts = []
    for path in sorted(directory.glob("*.log")):
        if path.name != "effects.log":
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-limit:]}")
    return "\n".join(parts)


# Events that record an op's outcome: each may appear at most once per op, and an
# op closes with exactly one of them.
OUTCOME_EVENTS = frozenset({
    "ActivityCompleted", "ActivityFailed", "ActivityTimedOut", "ActivityCancelled",
    "TimerFired", "TimerCancelled", "ChildWorkflowCompleted", "ChildWorkflowFailed",
})
SCHEDULE_EVENTS = frozenset({"ActivityScheduled", "TimerScheduled", "ChildWorkflowScheduled"})
CLOSE_EVENTS = frozenset({
    "WorkflowCompleted", "WorkflowFailed", "WorkflowTimedOut", "WorkflowCancelled",
    "WorkflowTerminated", "WorkflowContinuedAsNew",
})


@dataclass
class HistoryCheck:
    """What a closed run's history says about its ops."""

    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (op_id, type)
    schedules: Counter[tuple[str, str]] = field(default_factory=Counter)
    closes: int = 0
    retries_after_worker_lost: int = 0
    problems: list[str] = field(default_factory=list)


def check_history(events: Sequence[durable.HistoryEvent]) -> HistoryCheck:
    """Count outcomes per op; list every duplicate or missing outcome as a problem."""
    check = HistoryCheck()
    for event in events:
        op_id = event.data.get("op_id")
        if event.type in OUTCOME_EVENTS and op_id is not None:
            check.outcomes[op_id, event.type] += 1
        elif event.type in SCHEDULE_EVENTS and op_id is not None:
            check.schedules[op_id, event.type] += 1
        elif event.type in CLOSE_EVENTS:
            check.closes += 1
        elif event.type == "ActivityRetryScheduled" and (
            event.data.get("failure", {}).get("failure_category") == "worker_lost"
        ):
            check.retries_after_worker_lost += 1
    per_op: Counter[str] = Counter()
    for (op_id, etype), n in check.outcomes.items():
        per_op[op_id] += n
        if n > 1:
            check.problems.append(f"op {op_id}: {etype} recorded {n} times")
    for (op_id, etype), n in check.schedules.items():
        if n > 1:
            check.problems.append(f"op {op_id}: {etype} recorded {n} times")
        if per_op[op_id] != 1:
            check.problems.append(f"op {op_id}: {per_op[op_id]} outcomes recorded, expected 1")
    if check.closes != 1:
        check.problems.append(f"the run closed {check.closes} times")
    return check


def count_type(events: Sequence[durable.HistoryEvent], etype: str, **data: Any) -> int:
    return sum(
        1 for e in events
        if e.type == etype and all(e.data.get(k) == v for k, v in data.items())
    )


# ---------------------------------------------------------------- fault injection


@dataclass
class FaultReport:
    """Figures of one fault-injection run (printed as JSON by the benchmark)."""

    driver: str
    workflows: int
    workers: int
    steps: int
    kill_every: float
    lease: float
    kills: int = 0
    unexpected_exits: list[str] = field(default_factory=list)
    seconds: float = 0.0
    completed: int = 0
    not_completed: list[str] = field(default_factory=list)
    wrong_results: list[str] = field(default_factory=list)
    ops: int = 0
    effect_lines: int = 0
    reexecuted_attempts: int = 0
    reexecuted_remote: int = 0
    reexecuted_local: int = 0
    missing_effects: list[str] = field(default_factory=list)
    retries_after_worker_lost: int = 0
    history_problems: list[str] = field(default_factory=list)
    backend_terminations: int = 0  # PostgreSQL backends of the workers terminated
    sigstops: int = 0  # workers frozen (SIGSTOP) past their lease, then resumed


async def _terminate_backends(client: durable.Client, marker: str) -> int:
    """Terminate every PostgreSQL backend whose application_name is `marker`."""

    def program(tx: Any) -> Any:
        rows = yield durable.driver.q(
            "SELECT pg_terminate_backend(pid) AS gone FROM pg_stat_activity "
            "WHERE application_name = ?", marker)
        return sum(1 for r in rows if r["gone"])

    terminated: int = await client.driver.run(program, write=False)
    return terminated


async def run_fault_injection(
    db: str,
    directory: Path,
    *,
    workflows: int,
    workers: int,
    kill_every: float,
    steps: int = 3,
    timer_seconds: float = 0.5,
    work_seconds: float = 0.03,
    lease: float = 1.0,
    max_kills: int | None = None,
    time_limit: float = 120.0,
    seed: int | None = None,
    terminate_backends_every: float | None = None,
    sigstop_every: float | None = None,
    sigstop_for: float | None = None,
) -> FaultReport:
    """Run `workflows` fault_flow instances on `workers` processes sharing `db`,
    SIGKILL a random worker every `kill_every` seconds and start it again, then
    check every history and count the effects.

    The soak faults, when asked for: every `terminate_backends_every` seconds
    every PostgreSQL backend of the workers is terminated (a server restart as
    the workers see it); every `sigstop_every` seconds a random worker is
    frozen with SIGSTOP for `sigstop_for` seconds (default: twice its lease,
    so its leases expire and its runs move on) and then resumed with SIGCONT:
    its stale writes must be refused, and it must go on serving.

    The faults stop after `max_kills` kills, or once every workflow completed (or
    `time_limit` passed).
    """
    rng = random.Random(seed)
    report = FaultReport(driver=db.split(":", 1)[0], workflows=workflows, workers=workers,
                         steps=steps, kill_every=kill_every, lease=lease)
    backends = ("asyncio", "trio")
    procs: list[subprocess.Popen[bytes]] = []
    keys = [f"f{i:04d}" for i in range(workflows)]
    postgres = db.startswith("postgres")
    marker = f"durable_soak_{os.getpid()}_{time.monotonic_ns()}"
    worker_db = db
    if postgres and terminate_backends_every is not None:
        # the workers' connections carry a name of their own, so that only they
        # are terminated (never this controller's, nor anyone else's)
        worker_db = f"{db}{'&' if '?' in db else '?'}application_name={marker}"
    frozen: dict[int, float] = {}
    async with durable.connect(db) as client:
        try:
            for key in keys:
                await client.start(fault_flow, key, steps, timer_seconds, work_seconds, id=key)
            # a share each, so that every worker has work to lose when it is killed
            share = -(-workflows // workers)

            def spawn(i: int) -> subprocess.Popen[bytes]:
                return spawn_worker(worker_db, directory, backend=backends[i % 2], lease=lease,
                                    name=f"worker{i}", max_runs=share, max_activities=share)

            started = time.monotonic()
            procs = [spawn(i) for i in range(workers)]
            next_kill = started + kill_every
            next_terminate = started + (terminate_backends_every or math.inf
                                        if postgres else math.inf)
            next_stop = started + (sigstop_every or math.inf)
            while time.monotonic() - started < time_limit:
                now = time.monotonic()
                for i, until in list(frozen.items()):
                    if now >= until:
                        procs[i].send_signal(signal.SIGCONT)
                        del frozen[i]
                if now >= next_terminate:
                    report.backend_terminations += await _terminate_backends(client, marker)
                    next_terminate = now + (terminate_backends_every or math.inf)
                if now >= next_stop and len(frozen) < workers - 1:
                    i = rng.randrange(workers)
                    if i not in frozen and procs[i].poll() is None:
                        procs[i].send_signal(signal.SIGSTOP)
                        frozen[i] = now + (sigstop_for if sigstop_for is not None
                                           else 2 * lease)
                        report.sigstops += 1
                    next_stop = now + (sigstop_every or math.inf)
                done = await client.list(status="completed", workflow_type="crash_fault_flow",
                                         limit=workflows + 1)
                report.completed = len(done)
                if report.completed >= workflows:
                    break
                for i, proc in enumerate(procs):
                    if proc.poll() is not None:  # died on its own: say so, start another
                        report.unexpected_exits.append(f"worker{i}: exit {proc.returncode}")
                        procs[i] = spawn(i)
                if time.monotonic() >= next_kill and (max_kills is None or
                                                      report.kills < max_kills):
                    i = rng.randrange(workers)
                    frozen.pop(i, None)
                    kill9(procs[i])
                    report.kills += 1
                    procs[i] = spawn(i)
                    next_kill = time.monotonic() + kill_every
                await anyio.sleep(0.25)
            report.seconds = round(time.monotonic() - started, 2)
        finally:
            for proc in procs:
                kill9(proc)  # a frozen process dies of SIGKILL too
        effects = read_effects(directory)
        expected = fault_flow_result(steps)
        for key in keys:
            handle = client.get_handle(key)
            info = await handle.describe()
            if info["status"] != "completed":
                report.not_completed.append(f"{key}: {info['status']}")
                continue
            result = await handle.result()
            if result != expected:
                report.wrong_results.append(f"{key}: {result!r} != {expected!r}")
            check = check_history(await handle.history())
            report.retries_after_worker_lost += check.retries_after_worker_lost
            report.history_problems += [f"{key}: {p}" for p in check.problems]
            for name in fault_flow_steps(steps):
                report.ops += 1
                n = effects[key, name]
                if n == 0:
                    report.missing_effects.append(f"{key}/{name}")
                report.effect_lines += n
                extra = max(0, n - 1)
                report.reexecuted_attempts += extra
                if name == "local":
                    report.reexecuted_local += extra
                else:
                    report.reexecuted_remote += extra
    return report


if __name__ == "__main__":
    main()
