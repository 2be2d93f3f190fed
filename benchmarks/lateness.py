"""Deadline lateness (issue [2/4]): how late deadlines are enforced, from history.

lateness = (the terminal event's ``recorded_at``) - (the deadline it enforces)

(i)  ``heartbeat``: ``--n`` (1,000) workflows each run one REMOTE activity with
     ``heartbeat_timeout=1 s`` and ``max_attempts=1`` whose function never
     heartbeats (it sleeps ``--hold`` s, past its deadline).  The worker's
     watchdog enforces the heartbeat timeout: the attempt is fenced and the
     terminal ``ActivityTimedOut`` event (``ActivityRetryScheduled`` if a retry
     were allowed) is recorded.  The deadline is the ``heartbeat_deadline`` of
     the attempt's ``ActivityStarted`` event (claim time + 1 s).
(ii) ``timers``: ``--n`` (1,000) workflows each sleep (``workflow.sleep``) until
     a due time; the due times are spread evenly over ``--spread`` (10) s.
     Lateness is ``TimerFired.recorded_at - TimerScheduled.fire_at``.

The workflows are started at an even pace over ``--spread`` seconds (timers:
their due times are spread; the starts are quick), so deadlines arrive at a
steady 100/s; ``--activity-spread 0`` starts the 1,000 activities at once
instead (a burst of 1,000 heartbeat deadlines within the claim window).

One process, one ``durable.Worker`` on SQLite (our default WAL +
``synchronous=NORMAL``; ``--synchronous FULL`` to fsync each commit) in
``--sqlite-dir``.  Everything is read back with ``await handle.history()``.
``recorded_at`` is the engine's clock reading for the transaction that
records the event (taken just before it runs); the event is visible to other
readers one commit later.  Target: p99 <= 20 ms at 1,000 (issue [8/9]; 50 ms before).

Usage::

    python benchmarks/lateness.py [--only heartbeat|timers] [--backend asyncio|trio]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import durable
from durable import activity, workflow

HERE = Path(__file__).resolve().parent
TARGET_P99_MS = 20.0  # issue [8/9]: no regression at 1,000 timers / activities


@activity.defn(name="lateness_silent")
async def silent(hold: float) -> str:
    """Never heartbeats: sleeps past its heartbeat deadline until it is fenced."""
    await anyio.sleep(hold)
    return "not stopped"


@workflow.defn(name="lateness_heartbeat")
async def heartbeat_wf(hold: float) -> str:
    opts = durable.ActivityOptions(heartbeat_timeout=1, max_attempts=1)
    try:
        await workflow.execute_activity(silent, hold, options=opts)
    except durable.ActivityTimedOut as exc:
        return f"timed_out:{exc.timeout_kind}"
    return "completed"


@workflow.defn(name="lateness_timer")
async def timer_wf(due_epoch: float) -> str:
    await workflow.sleep(max(0.001, due_epoch - workflow.now().timestamp()))
    return "fired"


def _epoch(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(str(value)).timestamp()


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(lateness_s: list[float]) -> dict[str, Any]:
    ms = sorted(x * 1000.0 for x in lateness_s)
    p99 = _percentile(ms, 99)
    return {
        "count": len(ms),
        "min_ms": round(ms[0], 2) if ms else None,
        "p50_ms": round(_percentile(ms, 50), 2),
        "p90_ms": round(_percentile(ms, 90), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(ms[-1], 2) if ms else None,
        "mean_ms": round(statistics.fmean(ms), 2) if ms else None,
        "target_p99_ms": TARGET_P99_MS,
        "verdict": "PASS" if p99 <= TARGET_P99_MS else "MISS",
    }


async def _start_paced(
    client: durable.Client, wf: Any, args_for: list[Any], ids: list[str], spread: float
) -> list[durable.WorkflowHandle]:
    """Start workflows at an even pace over `spread` seconds (0: all at once)."""
    handles: list[durable.WorkflowHandle] = []
    t0 = time.monotonic()
    n = len(ids)
    for k, (arg, wid) in enumerate(zip(args_for, ids, strict=True)):
        if spread > 0:
            delay = t0 + spread * k / n - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
        handles.append(await client.start(wf, arg, id=wid))
    return handles


async def measure_heartbeat(
    client: durable.Client, n: int, spread: float, hold: float
) -> dict[str, Any]:
    ids = [f"hb-{k}" for k in range(n)]
    t0 = time.perf_counter()
    handles = await _start_paced(client, heartbeat_wf, [hold] * n, ids, spread)
    outcomes = [await h.result() for h in handles]
    elapsed = time.perf_counter() - t0
    lateness: list[float] = []
    raw: list[tuple[float, float]] = []
    kinds: dict[str, int] = {}
    problems: list[str] = []
    for h in handles:
        events = await h.history()
        started = next((e for e in events if e.type == "ActivityStarted"), None)
        terminal = next(
            (e for e in events if e.type in ("ActivityTimedOut", "ActivityRetryScheduled")), None
        )
        if started is None or terminal is None or not started.data.get("heartbeat_deadline"):
            problems.append(f"{h.workflow_id}: no ActivityStarted/terminal event")
            continue
        kind = str(terminal.data.get("timeout_kind"))
        kinds[kind] = kinds.get(kind, 0) + 1
        deadline = _epoch(started.data["heartbeat_deadline"])
        lateness.append(_epoch(terminal.recorded_at) - deadline)
        raw.append((deadline, lateness[-1]))
    result = summarize(lateness)
    result.update({
        "case": "heartbeat", "n": n, "start_spread_s": spread, "hold_s": hold,
        "heartbeat_timeout_s": 1.0, "timeout_kinds": kinds,
        "outcomes": {o: outcomes.count(o) for o in set(outcomes)},
        "problems": problems[:10], "elapsed_s": round(elapsed, 2),
        "raw_deadline_lateness_ms": _raw(raw),
    })
    return result


def _raw(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(deadline relative to the first, in s; lateness in ms), by deadline."""
    pairs = sorted(pairs)
    if not pairs:
        return []
    first = pairs[0][0]
    return [(round(d - first, 4), round(late * 1000.0, 3)) for d, late in pairs]


async def measure_timers(
    client: durable.Client, n: int, spread: float, lead: float
) -> dict[str, Any]:
    ids = [f"timer-{k}" for k in range(n)]
    t0 = time.perf_counter()
    base = time.time() + lead
    dues = [base + spread * k / n for k in range(n)]
    handles = await _start_paced(client, timer_wf, dues, ids, 0.0)
    start_s = time.perf_counter() - t0
    outcomes = [await h.result() for h in handles]
    elapsed = time.perf_counter() - t0
    lateness: list[float] = []
    raw: list[tuple[float, float]] = []
    problems: list[str] = []
    for h in handles:
        events = await h.history()
        scheduled = next((e for e in events if e.type == "TimerScheduled"), None)
        fired = next((e for e in events if e.type == "TimerFired"), None)
        if scheduled is None or fired is None:
            problems.append(f"{h.workflow_id}: no TimerScheduled/TimerFired event")
            continue
        due = _epoch(scheduled.data["fire_at"])
        lateness.append(_epoch(fired.recorded_at) - due)
        raw.append((due, lateness[-1]))
    result = summarize(lateness)
    result.update({
        "case": "timers", "n": n, "due_spread_s": spread, "lead_s": lead,
        "start_all_s": round(start_s, 2),
        "outcomes": {o: outcomes.count(o) for o in set(outcomes)},
        "problems": problems[:10], "elapsed_s": round(elapsed, 2),
        "raw_deadline_lateness_ms": _raw(raw),
    })
    return result


async def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    query = f"?synchronous={args.synchronous}" if args.synchronous else ""
    url = f"sqlite:///{os.path.join(workdir, 'lateness.db')}{query}"
    results: dict[str, Any] = {}
    async with durable.connect(url) as client:
        worker = durable.Worker(
            client, workflows=[heartbeat_wf, timer_wf], activities=[silent],
            max_concurrent_activities=args.max_activities or args.n,
        )
        async with worker:
            cases = ["heartbeat", "timers"] if args.only is None else [args.only]
            for case in cases:
                print(f"{case}: running ...", file=sys.stderr, flush=True)
                if case == "heartbeat":
                    spread = args.spread if args.activity_spread is None else args.activity_spread
                    results[case] = await measure_heartbeat(client, args.n, spread, args.hold)
                else:
                    results[case] = await measure_timers(client, args.n, args.spread, args.lead)
            results["watchdog_repairs"] = dict(worker.repairs)
    return results


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="deadline lateness, from recorded history")
    p.add_argument("--only", choices=["heartbeat", "timers"], default=None)
    p.add_argument("--n", type=int, default=1000, help="activities / timers (default 1000)")
    p.add_argument("--spread", type=float, default=10.0,
                   help="seconds over which timers are due and activities start (default 10)")
    p.add_argument("--activity-spread", type=float, default=None,
                   help="override the activities' start spread (0 = all at once)")
    p.add_argument("--hold", type=float, default=5.0,
                   help="how long the silent activity would sleep (default 5 s)")
    p.add_argument("--lead", type=float, default=2.0,
                   help="seconds from the start to the first timer's due time (default 2)")
    p.add_argument("--max-activities", type=int, default=None,
                   help="worker max_concurrent_activities (default: --n)")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--synchronous", choices=["NORMAL", "FULL"], default=None)
    p.add_argument("--sqlite-dir", default=None, help="directory for the SQLite file")
    p.add_argument("--out", default=str(HERE / "results" / "lateness.json"))
    args = p.parse_args(argv)
    if args.n < 1 or args.spread < 0:
        raise SystemExit("--n must be >= 1 and --spread >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    started = datetime.datetime.now(datetime.UTC)
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="durable_lateness_", dir=args.sqlite_dir) as tmp:
        results = anyio.run(run, args, tmp, backend=args.backend)
    report = {
        "started_at": started.isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "args": vars(args),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "storage": {"sqlite_dir": args.sqlite_dir or tempfile.gettempdir(),
                    "journal_mode": "WAL", "synchronous": args.synchronous or "NORMAL"},
        "results": results,
    }
    print(f"{'case':<10} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'min ms':>8}  verdict")
    for case in ("heartbeat", "timers"):
        r = results.get(case)
        if r is None:
            continue
        print(f"{case:<10} {r['count']:>5} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r['max_ms']:>8.2f} {r['min_ms']:>8.2f}  {r['verdict']} "
              f"(p99 target <= {TARGET_P99_MS:.0f} ms)")
        if r["problems"]:
            print(f"  problems: {r['problems']}")
    print(f"backend {args.backend}; load average before/after {report['load_average_before']} / "
          f"{report['load_average_after']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"raw figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
