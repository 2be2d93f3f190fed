"""Like-for-like benchmark: `durable` and DBOS Transact at equal durability, in one run.

Usage::

    python benchmarks/run.py [--db sqlite|postgres|mariadb|postgres,mariadb|all] [--rounds 5]
                             [--timed-runs 5]
                             [--workloads a,b,c,d]
                             [--variants dbos,dbos-wal-normal,...,floor] [--quick]
                             [--backend asyncio|trio|both] [--sqlite-dir DIR] [--out PATH]

Workloads (issue [3/8] item 6); every activity/step is trivial, so the figures
are each engine's own per-step cost:

(a) ``sequential``: one workflow of 200 sequential local steps: ms per step.
(b) ``concurrent``: 100 workflows x 10 local steps, all started at once: steps/s.
(c) ``concurrent_remote``: as (b) with REMOTE activities (ours only: DBOS has
    no remote activities, its steps always run inline in the workflow's
    process; (c) is reported against the floor alone).
(d) ``taskgroup``: one workflow starting 1,000 local steps at once (ours:
    ``workflow.task_group()``; DBOS: ``asyncio.gather`` of async steps, the
    pattern DBOS documents for concurrent steps): steps/s.

Variants (``--variants``, default all):

=====================  ==========================================================
``dbos``               DBOS at its defaults. SQLite: rollback journal
                       (``journal_mode=delete``) + ``synchronous=FULL``.
``dbos-wal-normal``    DBOS forced to WAL + ``synchronous=NORMAL`` (SQLite only;
                       how: ``dbos_side.py``, "SQLite settings").
``dbos-wal-full``      DBOS forced to WAL + ``synchronous=FULL`` (SQLite only).
``ours``               durable at its defaults (SQLite: WAL + NORMAL), per-step
                       recording.
``ours-full``          durable with ``?synchronous=FULL`` (SQLite only).
``ours-batched``       durable, local activities with
                       ``ActivityOptions(record="batched")``; scheduled only when
                       this build accepts that option (feature detection at
                       start-up), else "skipped: batched recording not available
                       in this build".  Workloads (a), (b), (d).
``ours-batched-full``  the same with ``?synchronous=FULL`` (SQLite only).
``floor``              the physical floor (``floor.py``): one INSERT + UPDATE
                       transaction with stdlib sqlite3 inline, with one
                       ``anyio.to_thread`` hop, with a thread fed by a
                       ``queue.SimpleQueue`` (WAL+NORMAL, WAL+FULL,
                       DELETE+FULL); asyncpg one connection and a pool of 8.
=====================  ==========================================================

MariaDB (``--db mariadb``): ours alone (DBOS runs on SQLite and PostgreSQL
only; no floor is measured there), a fresh database per measurement on
``--mariadb-url``'s server, on the server's durability
(``innodb_flush_log_at_trx_commit``).

PostgreSQL: both sides on the same server (DBOS: a fresh database per
measurement; ours: a fresh schema in the URL's database), on the server's
durability (``fsync``, ``synchronous_commit``, reported).

Method.  Every measurement is a fresh interpreter (``dbos_side.py``,
``durable_side.py``, ``floor.py``), so DBOS and ours never share a process:
connection, migration and launch are outside the clock, the disk's dirty
pages are written back first (``os.sync()``: the previous measurement's
writes are not flushed during this one), a warm-up runs, then
``--timed-runs K`` timed runs (default 5), whose median is the measurement's
figure: a batched sequential workflow of ours is ~8 ms, short enough that one
scheduler hiccup or one log checkpoint moved a single run's ratio by a third
(12-08: batched read 19.10x, then 17.45x [10.63-17.73] with nothing on its
path changed); both sides get the same K.  ``--rounds N`` rounds; each round measures every
(workload, variant) once, round-robin, with the variant order rotated by one
each round, workload after workload (so the variants compared with each
other run within seconds of each other), plus the floor once per storage.
A figure is the median over rounds, shown with its [min-max] range.  A
ratio (factor, distance to the floor) is computed per round from the two
figures measured in that round, then its median and range are reported:
the machine is shared and noisy, and interleaving is what makes ratios fair.

Distance to the floor: a figure's time per step divided by the floor's time
per transaction, same round, same storage mode:

* SQLite: one raw commit + one ``anyio.to_thread`` round trip (``to_thread``)
  in the variant's journal and synchronous mode; the JSON also has the
  ratio to the ``queue_thread`` floor (the writer-thread design).
* PostgreSQL: (a) one asyncpg connection's commit time; (b), (c), (d) the
  pool of 8's time per commit (1 / aggregate commits/s).

Writes every raw figure to ``--out`` (default
``benchmarks/results/latest.json``) and the markdown tables to the same path
with ``.md``, and prints the tables ready to paste into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from dbos_side import run_dbos  # noqa: E402
from durable_side import (  # noqa: E402
    EXIT_SKIPPED,
    MARIADB_URL,
    PG_URL,
    SKIPPED_BATCHED,
    probe_durable,
    run_durable,
)
from floor import run_floor  # noqa: E402

WORKLOADS = ("sequential", "concurrent", "concurrent_remote", "taskgroup")
LETTERS = {"a": "sequential", "b": "concurrent", "c": "concurrent_remote", "d": "taskgroup"}
LETTER_OF = {v: k for k, v in LETTERS.items()}
LABELS = {
    "sequential": "(a) 1 workflow x 200 sequential local steps",
    "concurrent": "(b) 100 workflows x 10 local steps, concurrent",
    "concurrent_remote": "(c) 100 workflows x 10 remote activities, concurrent",
    "taskgroup": "(d) 1 workflow, task group of 1,000 concurrent local steps",
}
# (steps per workflow, workflows) per workload: full and --quick sizes
SIZES = {"sequential": (200, 1), "concurrent": (10, 100), "concurrent_remote": (10, 100),
         "taskgroup": (1000, 1)}
QUICK_SIZES = {"sequential": (20, 1), "concurrent": (5, 10), "concurrent_remote": (5, 10),
               "taskgroup": (50, 1)}
SEQUENTIAL = ("sequential",)  # single-stream workloads: floor = one connection


@dataclass(frozen=True)
class Variant:
    name: str
    side: str  # "dbos" | "durable"
    mode: str  # SQLite storage mode: "delete-full" | "wal-normal" | "wal-full"
    sqlite_only: bool = False
    batched: bool = False

    def workloads(self) -> tuple[str, ...]:
        if self.side == "dbos":
            return ("sequential", "concurrent", "taskgroup")
        if self.batched:
            return ("sequential", "concurrent", "taskgroup")
        return WORKLOADS


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("dbos", "dbos", "delete-full"),
    Variant("dbos-wal-normal", "dbos", "wal-normal", sqlite_only=True),
    Variant("dbos-wal-full", "dbos", "wal-full", sqlite_only=True),
    Variant("ours", "durable", "wal-normal"),
    Variant("ours-full", "durable", "wal-full", sqlite_only=True),
    Variant("ours-batched", "durable", "wal-normal", batched=True),
    Variant("ours-batched-full", "durable", "wal-full", sqlite_only=True, batched=True),
)}
ALL_VARIANTS = (*VARIANTS, "floor")
MODE_LABEL = {"delete-full": "rollback journal, FULL", "wal-normal": "WAL, NORMAL",
              "wal-full": "WAL, FULL"}

# (ours, DBOS, what the pair means, target factor per workload)
COMPARISONS: dict[str, list[tuple[str, str, str, dict[str, float]]]] = {
    "sqlite": [
        # issue [8/9]: at the same settings >= 5x sequentially, >= 8x concurrently
        ("ours", "dbos-wal-normal", "same settings: both WAL + NORMAL",
         {"sequential": 5.0, "concurrent": 8.0}),
        ("ours-full", "dbos-wal-full", "same settings: both WAL + FULL",
         {"sequential": 5.0, "concurrent": 8.0}),
        ("ours", "dbos", "defaults: ours WAL + NORMAL vs DBOS rollback journal + FULL",
         {"sequential": 10.0, "concurrent": 10.0}),
        ("ours-full", "dbos", "fsync per commit: ours WAL + FULL vs DBOS default", {}),
        ("ours-batched", "dbos-wal-normal", "batched vs same settings: both WAL + NORMAL",
         {"sequential": 20.0}),
        ("ours-batched-full", "dbos-wal-full", "batched vs same settings: both WAL + FULL",
         {"sequential": 20.0}),
    ],
    "postgres": [
        ("ours", "dbos", "same server, same settings", {"sequential": 5.0, "concurrent": 5.0}),
        ("ours-batched", "dbos", "batched vs DBOS, same server", {}),
    ],
}
#: a sequential step's cost against (one raw commit + one hop) in the same mode:
#: <= 1.5x at WAL + NORMAL, <= 1.2x at FULL, where the fsync'd commit dominates
#: (issue [8/9]); PostgreSQL's steps are held to 1.5x of one asyncpg commit
FLOOR_TARGET = 1.5
FLOOR_TARGET_BY_VARIANT = {"ours-full": 1.2}


def _spread(values: list[float], digits: int = 3) -> dict[str, Any] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "max": round(max(values), digits),
            "n": len(values)}


@dataclass
class Cell:
    """One (storage, workload, variant, host) measured once per round."""

    db: str
    workload: str
    variant: Variant
    backend: str
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)  # round -> result
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def key(self) -> str:
        host = "" if self.variant.side == "dbos" else f"/{self.backend}"
        return f"{self.db}/{self.workload}/{self.variant.name}{host}"

    def mode(self) -> str:
        return self.variant.mode if self.db == "sqlite" else "server"  # postgres, mariadb

    def seconds_per_step(self, r: int) -> float | None:
        res = self.rounds.get(r)
        return None if res is None else res["seconds"] / res["steps_total"]


@dataclass
class FloorCell:
    db: str
    backend: str
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def seconds(self, r: int, mode: str, workload: str, kind: str = "to_thread") -> float | None:
        """The floor's time per transaction for `mode` (SQLite) or the server."""
        res = self.rounds.get(r)
        if res is None:
            return None
        if self.db == "sqlite":
            entry = (res.get("sqlite") or {}).get(mode)
            return None if entry is None else entry[kind]["us"] / 1e6
        pg = res.get("postgres")
        if not pg:
            return None
        if workload in SEQUENTIAL:
            return float(pg["asyncpg_1conn"]["us"]) / 1e6
        return 1.0 / float(pg["asyncpg_pool8"]["per_s"])


def _short_error(exc: BaseException) -> str:
    """The most telling line of a child's failure (its last exception line)."""
    text = str(exc).strip().splitlines()
    for line in reversed(text):
        line = line.strip()
        if line and not line.startswith(("File ", "^", "~")):
            return line[:240]
    return (text[0] if text else repr(exc))[:240]


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _git() -> dict[str, Any]:
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", *argv], cwd=HERE, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "durable", "drivers")
    return {"commit": git("rev-parse", "HEAD"), "short": git("rev-parse", "--short", "HEAD"),
            "branch": git("rev-parse", "--abbrev-ref", "HEAD"), "engine_dirty": bool(dirty)}


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import sqlite3

    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}


def _fmt_figure(workload: str, res: dict[str, Any]) -> str:
    if workload == "sequential":
        return f"{res['per_step_ms']:.3f} ms/step"
    return f"{res['steps_per_s']:.0f} steps/s"


# ---------------------------------------------------------------- running


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sqlite_dir: str = args.sqlite_dir or tempfile.gettempdir()
        self.sizes = QUICK_SIZES if args.quick else SIZES
        self.notes: list[str] = []
        self.durable_info: dict[str, Any] = {}

    def _measure(self, cell: Cell, r: int) -> None:
        if cell.skipped or (cell.errors and not cell.rounds):
            return  # skipped, or unavailable in an earlier round: do not retry every round
        steps, workflows = self.sizes[cell.workload]
        label = f"  {cell.key:<48}"
        print(label, end="", flush=True)
        # what the previous measurement left for the kernel to write back (DBOS's
        # rollback journal at FULL writes the most) is written now, not during
        # this one: each measurement starts from the same quiet disk
        os.sync()
        t0 = time.perf_counter()
        try:
            if cell.variant.side == "dbos":
                result = run_dbos(
                    cell.workload, cell.db,  # type: ignore[arg-type]
                    steps=steps, workflows=workflows, sqlite_dir=self.sqlite_dir,
                    repeat=self.args.timed_runs,
                    sqlite_pragmas="default" if cell.variant.mode == "delete-full"  # type: ignore[arg-type]
                    else cell.variant.mode,
                    timeout=self.args.timeout)
            else:
                result = run_durable(
                    cell.workload, cell.db,  # type: ignore[arg-type]
                    backend=cell.backend,  # type: ignore[arg-type]
                    synchronous="FULL" if cell.variant.mode == "wal-full" else None,
                    record="batched" if cell.variant.batched else None,
                    steps=steps, workflows=workflows, sqlite_dir=self.sqlite_dir,
                    repeat=self.args.timed_runs,
                    pg_url=self.args.pg_url, mariadb_url=self.args.mariadb_url,
                    timeout=self.args.timeout)
        except Exception as exc:
            text = str(exc)
            if f"(exit {EXIT_SKIPPED})" in text and SKIPPED_BATCHED in text:
                cell.skipped = SKIPPED_BATCHED
                print(f" {SKIPPED_BATCHED}")
                return
            cell.errors.append(_short_error(exc))
            print(f" unavailable: {cell.errors[-1]}")
            return
        result["load_average"] = _load()
        cell.rounds[r] = result
        print(f" {_fmt_figure(cell.workload, result):>18}  ({time.perf_counter() - t0:.1f} s)")

    def _measure_floor(self, fc: FloorCell, r: int) -> None:
        if fc.errors and not fc.rounds:
            return
        print(f"  {f'{fc.db}/floor/{fc.backend}':<48}", end="", flush=True)
        t0 = time.perf_counter()
        try:
            res = run_floor(fc.db, backend=fc.backend, seconds=self.args.floor_seconds,
                            sqlite_dir=self.sqlite_dir, pg_url=self.args.pg_url,
                            timeout=self.args.timeout)
        except Exception as exc:
            fc.errors.append(_short_error(exc))
            print(f" unavailable: {fc.errors[-1]}")
            return
        fc.rounds[r] = res
        if fc.db == "sqlite":
            wn = res["sqlite"]["wal-normal"]
            text = f"commit {wn['inline']['us']:.0f} us, +hop {wn['to_thread']['us']:.0f} us"
        else:
            pg = res.get("postgres") or {}
            text = (f"1 conn {pg['asyncpg_1conn']['us']:.0f} us, pool8 "
                    f"{pg['asyncpg_pool8']['per_s']:.0f}/s") if pg else "n/a on this host"
        print(f" {text}  ({time.perf_counter() - t0:.1f} s)")

    def plan(self) -> tuple[list[Cell], list[FloorCell]]:
        args = self.args
        dbs = ["sqlite", "postgres"] if args.db == "all" else args.db.split(",")
        backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
        names = list(args.variants)
        if any(VARIANTS[n].batched for n in names if n in VARIANTS):
            try:
                self.durable_info = probe_durable()
            except Exception as exc:
                self.durable_info = {"batched": False, "reason": _short_error(exc)}
            if not self.durable_info.get("batched"):
                dropped = [n for n in names if n in VARIANTS and VARIANTS[n].batched]
                names = [n for n in names if n not in dropped]
                note = (f"{', '.join(dropped)}: {SKIPPED_BATCHED} "
                        f"({self.durable_info.get('reason')})")
                self.notes.append(note)
                print(note)
        if any(VARIANTS[n].side == "dbos" for n in names if n in VARIANTS) and (
                importlib.util.find_spec("dbos") is None):
            dropped = [n for n in names if n in VARIANTS and VARIANTS[n].side == "dbos"]
            names = [n for n in names if n not in dropped]
            note = (f"{', '.join(dropped)}: skipped: dbos is not installed "
                    "(pip install -e '.[bench]')")
            self.notes.append(note)
            print(note)
        cells: list[Cell] = []
        for db in dbs:
            for workload in args.workloads:
                for name in names:
                    if name == "floor":
                        continue
                    v = VARIANTS[name]
                    if (v.sqlite_only and db != "sqlite") or workload not in v.workloads():
                        continue
                    if db == "mariadb" and v.side == "dbos":
                        continue  # DBOS has no MariaDB support
                    for backend in (["asyncio"] if v.side == "dbos" else backends):
                        cells.append(Cell(db, workload, v, backend))
        floors = [FloorCell(db, backend) for db in dbs for backend in backends
                  if "floor" in names and (db == "sqlite" or (db == "postgres"
                                                             and backend == "asyncio"))]
        if "mariadb" in dbs:
            self.notes.append("mariadb: ours alone (DBOS runs on SQLite and PostgreSQL only); "
                              "no floor is measured on MariaDB")
        if "concurrent_remote" in args.workloads and any(
                VARIANTS[n].side == "dbos" for n in names if n in VARIANTS):
            self.notes.append("(c) remote activities: ours alone. DBOS has no remote activities "
                              "(its steps always run inline in the workflow's process).")
        return cells, floors

    def run(self) -> dict[str, Any]:
        args = self.args
        started = datetime.datetime.now(datetime.UTC)
        load_before = _load()
        t_start = time.perf_counter()
        cells, floors = self.plan()
        loads: list[list[float] | None] = []
        for r in range(args.rounds):
            loads.append(_load())
            print(f"round {r + 1}/{args.rounds} (load average {loads[-1]})")
            for db in dict.fromkeys([c.db for c in cells] + [f.db for f in floors]):
                for fc in floors:
                    if fc.db == db:
                        self._measure_floor(fc, r)
                for workload in args.workloads:
                    group = [c for c in cells if c.db == db and c.workload == workload]
                    if not group:
                        continue
                    shift = r % len(group)  # rotate who goes first, round by round
                    for cell in group[shift:] + group[:shift]:
                        self._measure(cell, r)
        elapsed = time.perf_counter() - t_start
        report = {
            "started_at": started.isoformat(timespec="seconds"),
            "elapsed_s": round(elapsed, 1),
            "command": "python " + " ".join(shlex.quote(a) for a in
                                            ["benchmarks/run.py", *sys.argv[1:]]),
            "args": {k: v for k, v in vars(args).items()},
            "machine": _machine(),
            "load_average_before": load_before,
            "load_average_per_round": loads,
            "load_average_after": _load(),
            "git": _git(),
            "sqlite_dir": self.sqlite_dir,
            "sizes": {w: {"steps": s, "workflows": n} for w, (s, n) in self.sizes.items()},
            "durable": self.durable_info,
            "notes": self.notes,
            "method": "every (workload, variant) once per round, each in a fresh process, "
                      "round-robin with the order rotated per round; figures are medians "
                      "[min-max] over rounds; ratios are computed per round, then summarised",
            "cells": [summarise_cell(c, floors) for c in cells],
            "floor": [summarise_floor(f) for f in floors],
        }
        report["comparisons"] = compare(cells, args.rounds)
        dbos_versions = {res.get("dbos_version") for c in cells for res in c.rounds.values()
                         if c.variant.side == "dbos"}
        report["dbos_version"] = sorted(v for v in dbos_versions if v)
        return report


# ---------------------------------------------------------------- summaries


def _floor_for(cell: Cell, floors: list[FloorCell]) -> FloorCell | None:
    for fc in floors:
        if fc.db == cell.db and fc.backend == cell.backend:
            return fc
    for fc in floors:  # PostgreSQL floors run on asyncio only; DBOS cells are asyncio
        if fc.db == cell.db:
            return fc
    return None


def summarise_cell(cell: Cell, floors: list[FloorCell]) -> dict[str, Any]:
    rounds = sorted(cell.rounds)
    per_step_ms = [cell.rounds[r]["per_step_ms"] for r in rounds]
    steps_per_s = [cell.rounds[r]["steps_per_s"] for r in rounds]
    out: dict[str, Any] = {
        "key": cell.key, "db": cell.db, "workload": cell.workload,
        "variant": cell.variant.name, "side": cell.variant.side, "backend": cell.backend,
        "storage_mode": cell.mode(), "batched": cell.variant.batched,
        "per_step_ms": _spread(per_step_ms, 4), "steps_per_s": _spread(steps_per_s, 1),
        "skipped": cell.skipped, "errors": cell.errors,
        "rounds": {str(r): cell.rounds[r] for r in rounds},
    }
    fc = _floor_for(cell, floors)
    for kind in ("to_thread", "queue_thread"):
        ratios = []
        for r in rounds:
            f = fc.seconds(r, cell.mode(), cell.workload, kind) if fc else None
            s = cell.seconds_per_step(r)
            if f and s:
                ratios.append(s / f)
        if cell.db == "postgres" and kind == "queue_thread":
            continue
        out["x_floor" if kind == "to_thread" else "x_floor_queue_thread"] = _spread(ratios, 2)
    return out


def summarise_floor(fc: FloorCell) -> dict[str, Any]:
    rounds = sorted(fc.rounds)
    figures: dict[str, Any] = {}

    def add(name: str, get: Callable[[dict[str, Any]], float | None], digits: int = 1) -> None:
        values = [v for v in (get(fc.rounds[r]) for r in rounds) if v is not None]
        if values:
            figures[name] = _spread(values, digits)

    if fc.db == "sqlite":
        for mode in ("wal-normal", "wal-full", "delete-full"):
            for kind in ("inline", "to_thread", "queue_thread", "step_inline",
                         "step_queue_thread"):  # step_*: our modes only
                add(f"{mode}/{kind}/us", lambda res, m=mode, k=kind: (
                    res["sqlite"][m].get(k) or {}).get("us"))  # type: ignore[misc]
        for hop in ("hop_to_thread", "hop_queue_thread"):
            add(f"{hop}/us", lambda res, h=hop: res["hops"][h]["us"])  # type: ignore[misc]
    else:
        add("asyncpg_1conn/us", lambda res: (res.get("postgres") or {}).get(
            "asyncpg_1conn", {}).get("us"))
        add("asyncpg_pool8/per_s", lambda res: (res.get("postgres") or {}).get(
            "asyncpg_pool8", {}).get("per_s"))
    settings = None
    if fc.db == "postgres" and rounds:
        pg = fc.rounds[rounds[0]].get("postgres") or {}
        settings = {"fsync": pg.get("fsync"), "synchronous_commit": pg.get("synchronous_commit")}
    return {"db": fc.db, "backend": fc.backend, "figures": figures, "errors": fc.errors,
            "server_settings": settings, "rounds": {str(r): fc.rounds[r] for r in rounds}}


def compare(cells: list[Cell], n_rounds: int) -> list[dict[str, Any]]:
    """Per-round factors (DBOS time per step / ours) for each pair, summarised."""
    index = {(c.db, c.workload, c.variant.name, c.backend): c for c in cells}
    out: list[dict[str, Any]] = []
    for db, pairs in COMPARISONS.items():
        for ours_name, dbos_name, meaning, targets in pairs:
            for workload in WORKLOADS:
                dbos = index.get((db, workload, dbos_name, "asyncio"))
                for (cdb, cwl, cname, backend), ours in index.items():
                    if (cdb, cwl, cname) != (db, workload, ours_name) or dbos is None:
                        continue
                    factors = []
                    for r in range(n_rounds):
                        o, d = ours.seconds_per_step(r), dbos.seconds_per_step(r)
                        if o and d:
                            factors.append(d / o)
                    spread = _spread(factors, 2)
                    target = targets.get(workload)
                    verdict = None
                    if spread is not None and target is not None:
                        verdict = "PASS" if spread["median"] >= target else "MISS"
                    out.append({"db": db, "workload": workload, "ours": ours_name,
                                "dbos": dbos_name, "backend": backend, "meaning": meaning,
                                "factor": spread, "target": target, "verdict": verdict})
    return out


# ---------------------------------------------------------------- markdown


def _range(s: dict[str, Any] | None, fmt: str) -> str:
    if s is None:
        return "—"
    if s["n"] == 1:
        return f"{s['median']:{fmt}}"
    return f"{s['median']:{fmt}} [{s['min']:{fmt}}-{s['max']:{fmt}}]"


def _verdict_text(factor: dict[str, Any] | None, target: float | None) -> str:
    if factor is None:
        return "—"
    if target is None:
        return "no target"
    m = factor["median"]
    if m >= target:
        return f"PASS (>= {target:g}x)"
    return f"**MISS**: {target:g}x needs {target / m:.2f}x faster"


def markdown(report: dict[str, Any]) -> str:
    lines: list[str] = []
    git = report["git"]
    m = report["machine"]
    date = report["started_at"][:16].replace("T", " ")
    dirty = " (engine modified)" if git.get("engine_dirty") else ""
    lines.append(f"`{report['command']}`, commit {git.get('short')}{dirty} "
                 f"({git.get('branch')}), {date} UTC, {report['elapsed_s']:.0f} s. "
                 f"{m['cpus']} CPUs ({m['cpu_model']}), Python {m['python']}, "
                 f"SQLite {m['sqlite']}, DBOS {', '.join(report['dbos_version']) or 'n/a'}. "
                 f"Load average {report['load_average_before']} before, "
                 f"{report['load_average_after']} after. "
                 f"Rounds: {report['args']['rounds']}; timed runs per measurement: "
                 f"{report['args'].get('timed_runs', 1)} (their median); median [min-max] "
                 "over rounds.")
    lines.append("")
    lines.append("| workload | storage | variant | settings | figure | x floor |")
    lines.append("|---|---|---|---|---:|---:|")
    for c in report["cells"]:
        wl = c["workload"]
        unit, key, fmt = (("ms/step", "per_step_ms", ".3f") if wl == "sequential"
                          else ("steps/s", "steps_per_s", ",.0f"))
        if c["skipped"]:
            fig = c["skipped"]
        elif c[key] is None:
            fig = "unavailable: " + "; ".join(c["errors"])[:120]
        else:
            fig = f"{_range(c[key], fmt)} {unit}"
        settings = ("server" if c["db"] != "sqlite" else MODE_LABEL[c["storage_mode"]])
        if c["batched"]:
            settings += ", batched"
        name = c["variant"] + (f" ({c['backend']})" if c["side"] == "durable"
                               and c["backend"] != "asyncio" else "")
        lines.append(f"| {LETTER_OF[wl]} | {c['db']} | {name} | {settings} | {fig} | "
                     f"{_range(c.get('x_floor'), '.2f')} |")
    lines.append("")
    lines.append("x floor = time per step / (one raw INSERT+UPDATE commit in the same mode + "
                 "one `anyio.to_thread` round trip) measured in the same round (SQLite); "
                 "PostgreSQL: / one asyncpg commit (a) or / the pool-of-8 time per commit "
                 "(b, c, d).")
    comps = [c for c in report["comparisons"] if c["factor"] is not None]
    if comps:
        lines.append("")
        lines.append("| workload | storage | ours vs DBOS | factor | target |")
        lines.append("|---|---|---|---:|---|")
        for c in comps:
            host = f" ({c['backend']})" if c["backend"] != "asyncio" else ""
            lines.append(f"| {LETTER_OF[c['workload']]} | {c['db']} | {c['ours']}{host} vs "
                         f"{c['dbos']}: {c['meaning']} | {_range(c['factor'], '.2f')}x | "
                         f"{_verdict_text(c['factor'], c['target'])} |")
        lines.append("")
        lines.append("factor = DBOS time per step / ours, computed per round (both measured "
                     "in that round), median [min-max].")
    floor_lines = []
    for f in report["floor"]:
        for name, s in f["figures"].items():
            what, _, unit = name.rpartition("/")
            if unit == "us":
                per_s = 1e6 / s["median"] if s["median"] else 0
                floor_lines.append(f"| {f['db']} ({f['backend']}) | {what} | "
                                   f"{_range(s, ',.0f')} µs | {per_s:,.0f} |")
            else:
                floor_lines.append(f"| {f['db']} ({f['backend']}) | {what} | "
                                   f"{1e6 / s['median'] * 8:,.0f} µs per stream | "
                                   f"{_range(s, ',.0f')} |")
        if f.get("server_settings"):
            ss = f["server_settings"]
            floor_lines.append(f"| {f['db']} | server settings | fsync={ss['fsync']}, "
                               f"synchronous_commit={ss['synchronous_commit']} | |")
    if floor_lines:
        lines.append("")
        lines.append("| floor | one INSERT + UPDATE transaction | time | per s |")
        lines.append("|---|---|---:|---:|")
        lines.extend(floor_lines)
        if any("/step_" in line for line in floor_lines):
            lines.append("")
            lines.append("step_*: a sequential local step's own transaction replayed raw on "
                         "durable's schema (the fenced UPDATE of runs, one ops row, two events "
                         "rows), inline or through the writer-thread hop: the part of a step "
                         "that is SQLite's own work on our rows (benchmarks/floor.py).")
    if report["notes"]:
        lines.append("")
        lines.extend(f"- {n}" for n in report["notes"])
    return "\n".join(lines) + "\n"


def _floor_verdicts(report: dict[str, Any]) -> list[str]:
    """The per-step floor target for ours (a): a step <= 1.5 x (commit + hop),
    1.2 x where every commit is fsync'd (`FLOOR_TARGET_BY_VARIANT`)."""
    out = []
    for c in report["cells"]:
        if (c["side"] == "durable" and not c["batched"] and c["workload"] == "sequential"
                and c.get("x_floor")):
            x = c["x_floor"]["median"]
            target = FLOOR_TARGET_BY_VARIANT.get(c["variant"], FLOOR_TARGET)
            verdict = "PASS" if x <= target else f"MISS ({x / target:.2f}x over)"
            out.append(f"{c['key']}: {x:.2f}x floor, target <= {target}x: {verdict}")
    return out


# ---------------------------------------------------------------- CLI


def _parse_list(text: str, known: dict[str, str] | tuple[str, ...], what: str) -> list[str]:
    out = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if isinstance(known, dict):
            name = known.get(name, name)
            valid: tuple[str, ...] = tuple(known.values())
        else:
            valid = known
        if name not in valid:
            raise SystemExit(f"--{what}: unknown {name!r}; use {', '.join(valid)}"
                             + (" (or a, b, c, d)" if what == "workloads" else ""))
        out.append(name)
    if not out:
        raise SystemExit(f"--{what}: empty")
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="durable vs DBOS like for like, same run")
    p.add_argument("--db", default="sqlite",
                   help="sqlite, postgres, mariadb, a comma-separated list of them (measured "
                        "round by round, so their figures come from the same minutes), or all "
                        "(sqlite,postgres)")
    p.add_argument("--rounds", "--repeat", dest="rounds", type=int, default=None,
                   help="interleaved rounds (default 5; 1 with --quick)")
    p.add_argument("--timed-runs", type=int, default=None,
                   help="timed runs per measurement, in its process after the warm-up; the "
                        "median is its figure (default 5; 1 with --quick); both sides alike")
    p.add_argument("--workloads", "--only", dest="workloads", default="a,b,c,d",
                   help="comma-separated: a,b,c,d or sequential, concurrent, "
                        "concurrent_remote, taskgroup")
    p.add_argument("--variants", default=",".join(ALL_VARIANTS),
                   help=f"comma-separated, default all: {', '.join(ALL_VARIANTS)}")
    p.add_argument("--quick", action="store_true",
                   help="small sizes and short floor loops: a smoke run, not figures")
    p.add_argument("--backend", choices=["asyncio", "trio", "both"], default="asyncio",
                   help="our host loop (DBOS always runs its own way)")
    p.add_argument("--sqlite-dir", default=None,
                   help="directory for every SQLite file (default $TMPDIR or /tmp; /tmp is a "
                        "real disk here, /dev/shm a tmpfs that hides fsyncs)")
    p.add_argument("--pg-url", default=PG_URL, help=f"our PostgreSQL URL (default {PG_URL})")
    p.add_argument("--mariadb-url", default=MARIADB_URL,
                   help=f"our MariaDB server (a database is created per run; default "
                        f"{MARIADB_URL})")
    p.add_argument("--floor-seconds", type=float, default=None,
                   help="time budget of each floor figure (default 1.0; 0.1 with --quick)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds before one measurement process is abandoned (default 300)")
    p.add_argument("--out", default=str(HERE / "results" / "latest.json"),
                   help="raw figures (JSON); the markdown goes next to it (.md)")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 5
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    if args.timed_runs is None:
        args.timed_runs = 1 if args.quick else 5
    if args.timed_runs < 1:
        raise SystemExit(f"--timed-runs must be >= 1, got {args.timed_runs}")
    if args.floor_seconds is None:
        args.floor_seconds = 0.1 if args.quick else 1.0
    if args.floor_seconds <= 0:
        raise SystemExit(f"--floor-seconds must be > 0, got {args.floor_seconds}")
    dbs = ["sqlite", "postgres"] if args.db == "all" else args.db.split(",")
    unknown = [db for db in dbs if db not in ("sqlite", "postgres", "mariadb")]
    if unknown or not dbs:
        raise SystemExit(f"--db: unknown storage {', '.join(unknown) or '(none)'}; use sqlite, "
                         "postgres, mariadb, a comma-separated list of them, or all")
    wanted = set(_parse_list(args.workloads, LETTERS | {w: w for w in WORKLOADS}, "workloads"))
    args.workloads = [w for w in WORKLOADS if w in wanted]
    args.variants = _parse_list(args.variants, ALL_VARIANTS, "variants")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    report = Runner(args).run()
    text = markdown(report)
    report["markdown"] = text
    report["floor_verdicts"] = _floor_verdicts(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(text)
    print()
    print(text)
    for line in report["floor_verdicts"]:
        print(line)
    print(f"raw figures: {out}; markdown: {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
