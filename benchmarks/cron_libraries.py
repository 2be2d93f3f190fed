"""Choosing the cron library for schedules (issue [5/9], docs/design/decisions.md (s)).

For each candidate on PyPI that computes next fire times:

1. **Correctness at daylight-saving changes.** A schedule must neither skip
   nor double a fire when the clocks change. The oracle below walks real time
   minute by minute (second by second for the 30-minute zone) through two days
   around each transition and says when each expression must fire, following
   the rule Debian's cron (and so most operators' expectations) uses:

   - a *fixed-time* job (neither the minute nor the hour field starts with
     ``*``), e.g. ``30 2 * * *``: fires once per matching local day; a local time
     that does not exist (spring forward) fires at the first real instant
     after the gap; a local time that happens twice (fall back) fires on its
     first occurrence only;
   - a *wildcard* job (``0 * * * *``, ``*/15 * * * *``): fires at every real
     instant whose local wall time matches (so each real hour or quarter hour
     once: both occurrences of a repeated hour, none in the gap).

   Checked in Europe/Amsterdam and America/New_York (one-hour shifts) and
   Australia/Lord_Howe (a 30-minute shift), spring and autumn of 2026. A
   library passes a case when the UTC instants it yields from before the
   transition to two days later are exactly the oracle's.
2. **Speed** of a next-fire computation: parse the expression and compute the
   next fire after a given instant (what the scheduler does when it advances
   a schedule), and the next fire from an already parsed expression.
3. **Maintenance**: version, release month, dependencies, size, pure Python
   (read from the installed distribution's metadata).

Usage::

    pip install cronsim croniter cron-converter apscheduler
    # python-crontab and parse-crontab both install the import name `crontab`:
    pip install --target /tmp/cronlibs/python-crontab --no-deps python-crontab
    pip install --target /tmp/cronlibs/parse-crontab crontab
    python benchmarks/cron_libraries.py [--n 20000] [--libs /tmp/cronlibs] [--json out.json]

A library that is not installed is reported as such.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

UTC = dt.UTC

# (zone, a day of the transition, which one): 2026's transitions.
TRANSITIONS = [
    ("Europe/Amsterdam", dt.date(2026, 3, 29), "spring"),
    ("Europe/Amsterdam", dt.date(2026, 10, 25), "autumn"),
    ("America/New_York", dt.date(2026, 3, 8), "spring"),
    ("America/New_York", dt.date(2026, 11, 1), "autumn"),
    ("Australia/Lord_Howe", dt.date(2026, 10, 4), "spring"),
    ("Australia/Lord_Howe", dt.date(2026, 4, 5), "autumn"),
]

# Expressions whose fires the transitions move: fixed times inside the
# skipped or repeated local hour, and wildcard ones.
EXPRESSIONS = {
    "Europe/Amsterdam": ["30 2 * * *", "0 2 * * *", "0 3 * * *", "0 * * * *", "*/15 * * * *"],
    "America/New_York": ["30 2 * * *", "30 1 * * *", "0 2 * * *", "0 * * * *", "*/15 * * * *"],
    "Australia/Lord_Howe": ["15 2 * * *", "45 1 * * *", "0 2 * * *", "0 * * * *",
                            "*/15 * * * *"],
}


# ---------------------------------------------------------------- the oracle

def _field_matches(field: str, value: int) -> bool:
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            lo, hi = 0, 59
        elif "-" in base:
            lo, hi = (int(x) for x in base.split("-"))
        else:
            lo = hi = int(base)
            if step:
                hi = 59
        if lo <= value <= hi and (not step or (value - lo) % int(step) == 0):
            return True
    return False


def oracle(expr: str, zone: str, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """When `expr` (minute and hour fields only; the others ``*``) must fire in
    (start, end], by the rule in the module docstring, as UTC instants."""
    tz = ZoneInfo(zone)
    minute, hour = expr.split()[:2]
    fixed = not minute.startswith("*") and not hour.startswith("*")
    fires: list[dt.datetime] = []
    step = dt.timedelta(minutes=1)
    t = start.replace(second=0, microsecond=0) + step
    previous_local = (t - step).astimezone(tz)
    fired_days: set[tuple[dt.date, int, int]] = set()
    while t <= end:
        local = t.astimezone(tz)
        if fixed:
            # every fixed wall time that became due between the previous real
            # minute's wall time and this one (a jump forward passes over some)
            wall_prev = previous_local.replace(tzinfo=None)
            wall_now = local.replace(tzinfo=None)
            probe = wall_prev + step
            while probe <= wall_now:
                key = (probe.date(), probe.hour, probe.minute)
                if (_field_matches(minute, probe.minute) and _field_matches(hour, probe.hour)
                        and key not in fired_days):
                    fired_days.add(key)
                    fires.append(t)
                probe += step
        elif _field_matches(minute, local.minute) and _field_matches(hour, local.hour):
            fires.append(t)
        previous_local = local
        t += step
    return fires


# ---------------------------------------------------------------- the candidates

NextFn = Callable[[str, ZoneInfo, dt.datetime], dt.datetime]


def _cronsim() -> tuple[NextFn, Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]]:
    from cronsim import CronSim

    def nxt(expr: str, tz: ZoneInfo, after: dt.datetime) -> dt.datetime:
        return next(CronSim(expr, after.astimezone(tz))).astimezone(UTC)

    def it(expr: str, tz: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
        return (d.astimezone(UTC) for d in CronSim(expr, after.astimezone(tz)))

    return nxt, it


def _croniter() -> tuple[NextFn, Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]]:
    from croniter import croniter

    def nxt(expr: str, tz: ZoneInfo, after: dt.datetime) -> dt.datetime:
        return croniter(expr, after.astimezone(tz)).get_next(dt.datetime).astimezone(UTC)

    def it(expr: str, tz: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
        c = croniter(expr, after.astimezone(tz))
        while True:
            yield c.get_next(dt.datetime).astimezone(UTC)

    return nxt, it


def _import_crontab(home: Path | None) -> Any:
    """The `crontab` module found in `home` (python-crontab and parse-crontab
    share the import name, so each is installed in a directory of its own)."""
    if home is None or not home.is_dir():
        raise ImportError(f"not found in {home}")
    sys.modules.pop("crontab", None)
    sys.path.insert(0, str(home))
    try:
        import crontab
    finally:
        sys.path.remove(str(home))
        sys.modules.pop("crontab", None)
    return crontab


def _python_crontab(home: Path | None) -> tuple[
        NextFn, Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]]:
    CronTab = _import_crontab(home).CronTab

    def schedule(expr: str, tz: ZoneInfo, after: dt.datetime) -> Any:
        job = CronTab(tab="").new(command="true")
        job.setall(expr)
        return job.schedule(date_from=after.astimezone(tz))

    def nxt(expr: str, tz: ZoneInfo, after: dt.datetime) -> dt.datetime:
        return schedule(expr, tz, after).get_next().astimezone(UTC)

    def it(expr: str, tz: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
        s = schedule(expr, tz, after)
        while True:
            yield s.get_next().astimezone(UTC)

    return nxt, it


def _parse_crontab(home: Path | None) -> tuple[
        NextFn, Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]]:
    CronTab = _import_crontab(home).CronTab

    def nxt(expr: str, tz: ZoneInfo, after: dt.datetime) -> dt.datetime:
        local = after.astimezone(tz)
        result: dt.datetime = CronTab(expr).next(now=local, delta=False, return_datetime=True)
        return result.astimezone(UTC)

    def it(expr: str, tz: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
        c = CronTab(expr)
        t = after.astimezone(tz)
        while True:
            t = c.next(now=t, delta=False, return_datetime=True)
            t = t.astimezone(UTC).astimezone(tz)  # the next input: a real instant
            yield t.astimezone(UTC)

    return nxt, it


def _cron_converter() -> tuple[NextFn,
                               Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]]:
    from cron_converter import Cron

    def nxt(expr: str, tz: ZoneInfo, after: dt.datetime) -> dt.datetime:
        result: dt.datetime = Cron(expr).schedule(start_date=after.astimezone(tz)).next()
        return result.astimezone(UTC)

    def it(expr: str, tz: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
        s = Cron(expr).schedule(start_date=after.astimezone(tz))
        while True:
            yield s.next().astimezone(UTC)

    return nxt, it


def _apscheduler() -> tuple[NextFn,
                            Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]]:
    from apscheduler.triggers.cron import CronTrigger

    tick = dt.timedelta(microseconds=1)  # its next fire is "at or after now"

    def just_after(t: dt.datetime, tz: ZoneInfo) -> dt.datetime:
        # in UTC: aware arithmetic in a zone is wall-clock arithmetic
        return (t.astimezone(UTC) + tick).astimezone(tz)

    def nxt(expr: str, tz: ZoneInfo, after: dt.datetime) -> dt.datetime:
        trigger = CronTrigger.from_crontab(expr, timezone=tz)
        result: dt.datetime = trigger.get_next_fire_time(None, just_after(after, tz))
        return result.astimezone(UTC)

    def it(expr: str, tz: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
        trigger = CronTrigger.from_crontab(expr, timezone=tz)
        t = after.astimezone(tz)
        while True:
            t = trigger.get_next_fire_time(t, just_after(t, tz))
            yield t.astimezone(UTC)

    return nxt, it


# label: (distribution, loader, its own directory under --libs or None)
CANDIDATES: dict[str, tuple[str, Callable[..., Any], str | None]] = {
    "cronsim": ("cronsim", _cronsim, None),
    "croniter": ("croniter", _croniter, None),
    "python-crontab": ("python-crontab", _python_crontab, "python-crontab"),
    "crontab (parse-crontab)": ("crontab", _parse_crontab, "parse-crontab"),
    "cron-converter": ("cron-converter", _cron_converter, None),
    "APScheduler CronTrigger": ("APScheduler", _apscheduler, None),
}


# ---------------------------------------------------------------- the measures

def correctness(it: Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]]
                ) -> tuple[int, int, list[str]]:
    """(cases passed, cases, what failed)."""
    passed, total, failures = 0, 0, []
    for zone, day, which in TRANSITIONS:
        tz = ZoneInfo(zone)
        start = dt.datetime.combine(day - dt.timedelta(days=1), dt.time(12), tz).astimezone(UTC)
        end = start + dt.timedelta(days=2)
        for expr in EXPRESSIONS[zone]:
            total += 1
            want = oracle(expr, zone, start, end)
            got: list[dt.datetime] = []
            try:
                for fire in it(expr, tz, start):
                    if fire > end or len(got) > len(want) + 5:
                        break
                    got.append(fire)
            except Exception as exc:  # a library that raises on a DST edge fails the case
                failures.append(f"{zone} {which} {expr!r}: raised {type(exc).__name__}: {exc}")
                continue
            if got == want:
                passed += 1
                continue
            missing = sorted(set(want) - set(got))
            extra = sorted(set(got) - set(want))
            doubled = len(got) - len(set(got))

            def local(xs: list[dt.datetime], tz: ZoneInfo = tz) -> str:
                return ", ".join(x.astimezone(tz).strftime("%m-%d %H:%M%z") for x in xs[:3])

            failures.append(
                f"{zone} {which} {expr!r}: missing [{local(missing)}] extra [{local(extra)}]"
                + (f" doubled {doubled}" if doubled else ""))
    return passed, total, failures


def speed(nxt: NextFn, it: Callable[[str, ZoneInfo, dt.datetime], Iterator[dt.datetime]],
          n: int) -> dict[str, float]:
    """Microseconds per next-fire computation: parse + next, and next on a parsed one."""
    tz = ZoneInfo("Europe/Amsterdam")
    base = dt.datetime(2026, 1, 1, tzinfo=UTC)
    out: dict[str, float] = {}
    for expr in ("0 2 * * *", "*/5 * * * *", "0 9 * * 1-5"):
        starts = [base + dt.timedelta(minutes=7 * i) for i in range(n)]
        t0 = time.perf_counter()
        for s in starts:
            nxt(expr, tz, s)
        out[f"parse+next {expr}"] = (time.perf_counter() - t0) / n * 1e6
        # successive fires from a parsed expression, 500 at a time (some
        # libraries stop at a year limit)
        chunks = [it(expr, tz, base) for _ in range(n // 500)]
        t0 = time.perf_counter()
        for gen in chunks:
            for _ in range(500):
                next(gen)
        out[f"next {expr}"] = (time.perf_counter() - t0) / (len(chunks) * 500) * 1e6
    return out


def maintenance(dist_name: str, home: Path | None) -> dict[str, Any]:
    if home is None:
        dist = md.distribution(dist_name)
    else:
        dist = next(d for d in md.distributions(path=[str(home)])
                    if d.metadata["Name"].lower() == dist_name.lower())
    files = [f for f in (dist.files or []) if str(f).endswith(".py")]
    lines = 0
    native = False
    for f in dist.files or []:
        path = Path(str(f.locate()))
        if path.suffix in (".so", ".pyd"):
            native = True
        if path.suffix == ".py" and path.exists() and "dist-info" not in str(path):
            lines += len(path.read_text(errors="replace").splitlines())
    return {
        "version": dist.version,
        "requires": [r.split(";")[0].strip() for r in (dist.requires or [])
                     if "extra ==" not in r],
        "python_files": len(files),
        "python_lines": lines,
        "pure_python": not native,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="next-fire computations per case")
    parser.add_argument("--libs", type=Path, default=Path("/tmp/cronlibs"),
                        help="where python-crontab and parse-crontab are installed apart")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}, "
          f"n={args.n}")
    results: dict[str, Any] = {}
    for label, (dist_name, make, subdir) in CANDIDATES.items():
        home = args.libs / subdir if subdir else None
        try:
            nxt, it = make(home) if subdir else make()
        except ImportError as exc:
            print(f"\n{label}: not installed ({exc})")
            continue
        passed, total, failures = correctness(it)
        speeds = speed(nxt, it, args.n)
        meta = maintenance(dist_name, home)
        results[label] = {"dst_passed": passed, "dst_cases": total, "failures": failures,
                          "us_per_next": speeds, **meta}
        print(f"\n{label} {meta['version']}: DST {passed}/{total}; requires "
              f"{meta['requires'] or 'nothing'}; {meta['python_lines']} lines of Python, "
              f"pure Python: {meta['pure_python']}")
        for case, us in speeds.items():
            print(f"  {case:28s} {us:8.1f} us")
        for failure in failures:
            print(f"  FAIL {failure}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
