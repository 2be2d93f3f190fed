"""Peer benchmark runner: `durable` and DBOS on the same workloads, in the same run.

Usage::

    python benchmarks/run.py [--db sqlite|postgres|all] [--backend asyncio|trio|both]
                             [--repeat 3] [--sqlite-dir DIR] [--only NAME]

Workloads (issue [1/4]); every activity/step is trivial, so the figures are
the engines' own per-step cost:

(a) ``sequential``: one workflow of 200 sequential LOCAL activities: ms per step.
    Target: ours <= 0.1 x DBOS's time per step.
(b) ``concurrent``: 100 concurrent workflows of 10 local activities: steps/s.
    Target: ours >= 10 x DBOS's steps/s.
(c) ``concurrent_remote``: as (b) with REMOTE activities
    (``workflow.execute_activity``), executed by the same worker process.
    DBOS has no remote activities (its steps always run inline in the
    workflow's process), so (c) is compared with DBOS's (b) figure from the
    same run; no target is set for it.

Every measurement runs in a fresh interpreter (``dbos_side.run_dbos`` and
``durable_side.run_durable``): connection, migration and launch are outside
the timed region, a short warm-up runs first, then one timed run.  The
runner does ``--repeat`` rounds, each measuring every configuration once
(DBOS and ours interleaved, so both see the same machine load); each figure
is the median over the rounds.  Ours is measured on each host loop (asyncio,
trio) and, on SQLite, with both our default durability (WAL,
``synchronous=NORMAL``) and ``synchronous=FULL`` (an fsync on every commit,
as DBOS's SQLite default).  Both SDKs put their SQLite files in the same
``--sqlite-dir``.  PostgreSQL rows use a fresh database (DBOS) or schema
(ours) on 127.0.0.1:5432; a row whose side cannot run says ``unavailable``
with the reason instead of stopping the run.

Prints a table (ours, DBOS, factor, target verdict) and writes every raw
figure to ``benchmarks/results/latest.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from dbos_side import run_dbos  # noqa: E402
from durable_side import PG_URL, run_durable  # noqa: E402

LETTERS = {"a": "sequential", "b": "concurrent", "c": "concurrent_remote"}
LABELS = {
    "sequential": "(a) 1 workflow x 200 sequential local activities",
    "concurrent": "(b) 100 workflows x 10 local activities, concurrent",
    "concurrent_remote": "(c) 100 workflows x 10 remote activities, concurrent",
}
# Which DBOS workload each of ours is compared with.
DBOS_PEER = {"sequential": "sequential", "concurrent": "concurrent",
             "concurrent_remote": "concurrent"}
TARGET_FACTOR = {"sequential": 10.0, "concurrent": 10.0}


@dataclass
class Cell:
    """One measured configuration: its per-round results (each a fresh process)."""

    side: str  # "dbos" | "durable"
    workload: str
    db: str
    backend: str | None = None
    durability: str | None = None  # "default" | "full" (SQLite, ours)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.side == "dbos":
            return f"DBOS     {self.workload:<18} {self.db:<8} {'defaults':<26}"
        config = f"{self.backend}/{_durability_label(self.db, self.durability or 'default')}"
        return f"durable  {self.workload:<18} {self.db:<8} {config:<26}"

    def summary(self) -> dict[str, Any] | None:
        """Median over rounds of each figure, or None when no round succeeded."""
        if not self.rounds:
            return None
        seconds = statistics.median(r["seconds"] for r in self.rounds)
        total = self.rounds[0]["steps_total"]
        return {
            "seconds": round(seconds, 6),
            "per_step_ms": round(seconds * 1000.0 / total, 4),
            "steps_per_s": round(total / seconds, 1),
            "steps_total": total,
            "rounds": len(self.rounds),
            "round_per_step_ms": [r["per_step_ms"] for r in self.rounds],
            "round_steps_per_s": [r["steps_per_s"] for r in self.rounds],
        }


def _short_error(exc: BaseException) -> str:
    """The most telling line of a child's failure (its last exception line)."""
    text = str(exc).strip().splitlines()
    for line in reversed(text):
        line = line.strip()
        if line and not line.startswith(("File ", "^", "~")):
            return line[:200]
    return (text[0] if text else repr(exc))[:200]


def _durability_label(db: str, durability: str) -> str:
    if db == "postgres":
        return "server default"
    return "WAL, sync=NORMAL" if durability == "default" else "WAL, sync=FULL"


def _compare(workload: str, ours: dict[str, Any], dbos: dict[str, Any]) -> dict[str, Any]:
    """Factor by which ours beats DBOS (>1 is better), and the target verdict."""
    if workload == "sequential":
        factor = dbos["per_step_ms"] / ours["per_step_ms"]
    else:
        factor = ours["steps_per_s"] / dbos["steps_per_s"]
    out: dict[str, Any] = {"factor": round(factor, 2)}
    target = TARGET_FACTOR.get(workload)
    if target is None:
        out["target"] = None
        out["verdict"] = "no target"
        out["text"] = "no target (DBOS has no remote activities; vs its (b))"
        return out
    out["target"] = target
    if workload == "sequential":
        goal = dbos["per_step_ms"] / target
        out["goal_per_step_ms"] = round(goal, 4)
        gap = ours["per_step_ms"] / goal - 1.0
        passed = ours["per_step_ms"] <= goal
        how = (f"{-gap:.0%} under the {goal:.3f} ms goal" if passed
               else f"{gap:.0%} over the {goal:.3f} ms goal")
    else:
        goal = dbos["steps_per_s"] * target
        out["goal_steps_per_s"] = round(goal, 1)
        gap = 1.0 - ours["steps_per_s"] / goal
        passed = ours["steps_per_s"] >= goal
        how = (f"{-gap:.0%} above the {goal:.0f}/s goal" if passed
               else f"{gap:.0%} short of the {goal:.0f}/s goal")
    out["verdict"] = "PASS" if passed else "MISS"
    out["text"] = f"{out['verdict']} {factor:.1f}x vs {target:.0f}x ({how})"
    return out


def _fmt(workload: str, result: dict[str, Any] | None) -> str:
    if result is None:
        return "unavailable"
    if workload == "sequential":
        return f"{result['per_step_ms']:.3f} ms/step"
    return f"{result['steps_per_s']:.0f} steps/s"


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "durable", "drivers")
    return {"commit": git("rev-parse", "HEAD"), "engine_dirty": bool(dirty)}


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": sys.version.split()[0]}


def _measure(cell: Cell, args: argparse.Namespace, sqlite_dir: str) -> None:
    """Run one round of `cell` in a fresh process and record the outcome."""
    if cell.errors and not cell.rounds:
        return  # unavailable in an earlier round: do not retry every round
    print(f"  {cell.label} ...", end="", flush=True)
    t0 = time.perf_counter()
    try:
        if cell.side == "dbos":
            result = run_dbos(cell.workload, cell.db,  # type: ignore[arg-type]
                              repeat=1, sqlite_dir=sqlite_dir, timeout=args.timeout)
        else:
            result = run_durable(
                cell.workload,  # type: ignore[arg-type]
                cell.db,  # type: ignore[arg-type]
                backend=cell.backend or "asyncio",  # type: ignore[arg-type]
                synchronous="FULL" if cell.durability == "full" else None,
                repeat=1, sqlite_dir=sqlite_dir, pg_url=args.pg_url, timeout=args.timeout,
            )
    except Exception as exc:
        cell.errors.append(_short_error(exc))
        print(f" unavailable: {cell.errors[-1]}")
        return
    cell.rounds.append(result)
    print(f" {_fmt(cell.workload, result)}  ({time.perf_counter() - t0:.1f} s)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    dbs = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    workloads = list(LABELS)
    if args.only:
        wanted = {LETTERS.get(n.strip(), n.strip()) for n in args.only.split(",")}
        unknown = wanted - set(workloads)
        if unknown:
            raise SystemExit(f"--only: unknown workload(s) {sorted(unknown)}; "
                             f"use {', '.join(workloads)} or a, b, c")
        workloads = [w for w in workloads if w in wanted]
    sqlite_dir = args.sqlite_dir or tempfile.gettempdir()
    started = datetime.datetime.now(datetime.UTC)
    load_before = _load()
    t_start = time.perf_counter()

    # Every configuration, in the order one round measures them: per workload and
    # database, DBOS first, then ours on each host and durability setting.
    dbos_cells: dict[tuple[str, str], Cell] = {}
    order: list[Cell] = []
    pairs: list[tuple[Cell, Cell]] = []  # (ours, DBOS peer)
    for workload in workloads:
        for db in dbs:
            key = (DBOS_PEER[workload], db)
            if key not in dbos_cells:
                dbos_cells[key] = Cell("dbos", key[0], db)
                order.append(dbos_cells[key])
            for backend in backends:
                for durability in (["default", "full"] if db == "sqlite" else ["default"]):
                    ours = Cell("durable", workload, db, backend, durability)
                    order.append(ours)
                    pairs.append((ours, dbos_cells[key]))
    loads: list[list[float] | None] = []
    for n in range(args.repeat):
        print(f"round {n + 1}/{args.repeat} (load average {_load()})")
        loads.append(_load())
        for cell in order:
            _measure(cell, args, sqlite_dir)
    elapsed = time.perf_counter() - t_start

    rows: list[dict[str, Any]] = []
    for ours, dbos in pairs:
        o, d = ours.summary(), dbos.summary()
        row: dict[str, Any] = {
            "workload": ours.workload, "db": ours.db, "backend": ours.backend,
            "durability": ours.durability, "ours": o, "dbos": d,
            "dbos_workload": dbos.workload,
            "ours_error": None if o else "; ".join(ours.errors) or "not run",
            "dbos_error": None if d else "; ".join(dbos.errors) or "not run",
            "verdict": _compare(ours.workload, o, d) if o and d else {},
        }
        rows.append(row)
    return {
        "started_at": started.isoformat(),
        "elapsed_s": round(elapsed, 1),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "args": vars(args),
        "machine": _machine(),
        "load_average_before": load_before,
        "load_average_per_round": loads,
        "load_average_after": _load(),
        "git": _git(),
        "sqlite_dir": sqlite_dir,
        "method": "each round runs every configuration once, each in a fresh process "
                  "(warm-up, then one timed run); figures are medians over rounds",
        "targets": {"sequential": "ours time/step <= 0.1 x DBOS",
                    "concurrent": "ours steps/s >= 10 x DBOS",
                    "concurrent_remote": "none (compared with DBOS's concurrent figure)"},
        "rows": rows,
        "raw": [{"side": c.side, "workload": c.workload, "db": c.db, "backend": c.backend,
                 "durability": c.durability, "rounds": c.rounds, "errors": c.errors}
                for c in order],
    }


def print_table(report: dict[str, Any]) -> None:
    rows = report["rows"]
    header = (f"{'workload':<20} {'db':<8} {'ours: host, durability':<28} {'ours':>16} "
              f"{'DBOS (default)':>16}  {'factor / target':<}")
    print()
    print(header)
    print("-" * len(header) + "-" * 40)
    for r in rows:
        wl = r["workload"]
        ours = _fmt(wl, r["ours"]) if r["ours"] else "unavailable"
        dbos_wl = DBOS_PEER[wl]
        dbos = _fmt(dbos_wl, r["dbos"]) if r["dbos"] else "unavailable"
        if dbos_wl != wl and r["dbos"]:
            dbos += "*"
        config = f"{r['backend']}, {_durability_label(r['db'], r['durability'])}"
        if r["verdict"]:
            verdict = r["verdict"]["text"]
        else:
            reasons = [e for e in (r["ours_error"], r["dbos_error"]) if e]
            verdict = "unavailable: " + "; ".join(reasons)
        print(f"{wl:<20} {r['db']:<8} {config:<28} {ours:>16} {dbos:>16}  {verdict}")
    print()
    print("factor = how many times better ours is (DBOS ms/step / ours, or ours steps/s / DBOS).")
    print("* (c): DBOS has no remote activities; compared with its (b) figure from this run.")
    print("DBOS on SQLite: its defaults (rollback journal, synchronous=FULL: fsync per commit).")
    print("Ours sync=NORMAL (default, WAL) does not fsync each commit: a power loss can lose")
    print("the last commits (never corrupts); sync=FULL fsyncs each commit like DBOS.")
    rounds = report["args"]["repeat"]
    print(f"Figures: medians of {rounds} round(s); every configuration runs once per round, "
          "each in a fresh process.")
    print(f"load average before/after: {report['load_average_before']} / "
          f"{report['load_average_after']} on {report['machine']['cpus']} CPUs; "
          f"elapsed {report['elapsed_s']} s")
    before = report["load_average_before"]
    cpus = report["machine"]["cpus"] or 1
    if before and before[0] > cpus:
        print("WARNING: the machine was busy (1-minute load average above the CPU count); "
              "figures are noisy.")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="durable vs DBOS, same workloads, same run")
    p.add_argument("--db", choices=["sqlite", "postgres", "all"], default="sqlite")
    p.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per figure (median)")
    p.add_argument("--sqlite-dir", default=None,
                   help="directory for both SDKs' SQLite files (default $TMPDIR or /tmp; "
                        "/tmp is a real disk here, /dev/shm is tmpfs)")
    p.add_argument("--only", default=None,
                   help="comma-separated workloads: sequential, concurrent, concurrent_remote "
                        "(or a, b, c)")
    p.add_argument("--pg-url", default=PG_URL, help=f"our PostgreSQL URL (default {PG_URL})")
    p.add_argument("--timeout", type=float, default=240.0,
                   help="seconds before one measurement process is abandoned (reported "
                        "unavailable); default 240")
    p.add_argument("--out", default=str(HERE / "results" / "latest.json"),
                   help="where to write the raw figures (JSON)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        raise SystemExit("--repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    report = run(args)
    print_table(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"raw figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
