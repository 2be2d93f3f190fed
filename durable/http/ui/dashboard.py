"""The web UI's dashboard: the namespace at a glance, each figure linking to its worst run.

Runs started per minute over the past hour, failures in the past hour and
week, the longest wait for a worker and the longest run (Waterline's
counters). The figures come from the run list read through the API's own
``listWorkflows`` operation with the visitor's role, as every page reads
(`pages.py`): the runs created in the past week, newest first, up to
`SCAN` of them (the page says when it stopped there), plus every open run
however old (an old run still running is the longest run). No new storage
query, so the figures are the list's, on every driver and over the remote
client alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ... import present as _fmt
from .. import model
from .pages import Visitor, _summary

if TYPE_CHECKING:
    from .pages import WebUI

# The most runs the dashboard reads (newest first) before it stops and says so.
SCAN = 5000
PAGE = model.LIST_PAGE_MAX  # (the most one page of the list holds)
# Closed statuses counted as failures (a cancellation or a termination was asked for).
FAILED = ("failed", "timed_out")
HOUR = timedelta(hours=1)
WEEK = timedelta(days=7)


def _at(value: Any) -> datetime | None:
    return _fmt.instant(value)


#: how late a deadline must be before the dashboard says no watchdog enforces
#: it (a watchdog enforces each within milliseconds of its time)
UNWATCHED = 5.0


def overdue_card(found: Mapping[str, Any]) -> dict[str, Any]:
    """The card of the deadlines passed and not enforced (`overdueDeadlines`):
    how many, how late the oldest is, and whether that means no watchdog runs."""
    count = sum(found["runs"].values()) + sum(found["activity_attempts"].values())
    late = found["oldest_overdue_seconds"]
    return {"count": count, "more": bool(found["scan_pressure"]), "late": late,
            "unwatched": late is not None and late >= UNWATCHED,
            "kinds": sorted({**found["runs"], **found["activity_attempts"]})}


def dashboard(recent: Iterable[Mapping[str, Any]], open_runs: Iterable[Mapping[str, Any]],
              now: datetime) -> dict[str, Any]:
    """The dashboard's figures from run summaries (`recent`: the newest runs;
    `open_runs`: the open ones), as of `now`."""
    runs: dict[str, Mapping[str, Any]] = {}
    for item in [*recent, *open_runs]:
        runs.setdefault(str(item.get("run_id")), item)
    hour_ago, week_ago = now - HOUR, now - WEEK
    per_minute = [0] * 60  # the oldest minute first; the last is the current one
    failures_hour: list[Mapping[str, Any]] = []
    failures_week: list[Mapping[str, Any]] = []
    wait: tuple[float, Mapping[str, Any]] | None = None
    longest: tuple[float, Mapping[str, Any]] | None = None
    for run in runs.values():
        created, started, closed = (_at(run.get("created_at")), _at(run.get("started_at")),
                                    _at(run.get("closed_at")))
        if created is not None and hour_ago < created <= now:
            minute = int((created - hour_ago).total_seconds() // 60)
            per_minute[min(minute, 59)] += 1
        if run.get("status") in FAILED and closed is not None:
            if closed > week_ago:
                failures_week.append(run)
            if closed > hour_ago:
                failures_hour.append(run)
        open_ = closed is None
        if created is not None and (open_ or created > week_ago):
            waited = ((started or now) - created).total_seconds() \
                if started is not None or open_ else None
            if waited is not None and (wait is None or waited > wait[0]):
                wait = (waited, run)
        if started is not None:
            ran = ((closed or now) - started).total_seconds()
            if longest is None or ran > longest[0]:
                longest = (ran, run)

    def latest(items: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        return max(items, key=lambda r: str(r.get("closed_at")), default=None)

    total_hour = sum(per_minute)
    return {
        "per_minute": per_minute, "runs_last_hour": total_hour,
        "rate": total_hour / 60, "busiest_minute": max(per_minute),
        "failures_hour": len(failures_hour), "failures_week": len(failures_week),
        "latest_failure_hour": latest(failures_hour),
        "latest_failure_week": latest(failures_week),
        "longest_wait": None if wait is None else {"seconds": wait[0], "run": wait[1]},
        "longest_run": None if longest is None else {"seconds": longest[0],
                                                     "run": longest[1]},
    }


def bars(per_minute: list[int], width: int = 600, height: int = 80) -> list[dict[str, Any]]:
    """The per-minute chart's bars (x, y, w, h in the SVG's units, and the count)."""
    top = max(per_minute) or 1
    step = width / len(per_minute)
    out = []
    for i, count in enumerate(per_minute):
        h = round(height * count / top, 1)
        out.append({"x": round(i * step, 1), "y": round(height - h, 1),
                    "w": round(step * 0.8, 1), "h": h, "count": count,
                    "ago": len(per_minute) - 1 - i})
    return out


class DashboardPage:
    """`/ui/dashboard` for `ui` (a `WebUI`)."""

    def __init__(self, ui: WebUI) -> None:
        self.ui = ui

    def routes(self) -> list[BaseRoute]:
        return [Route("/ui/dashboard", self.ui._page("/ui/dashboard", self.page),
                      methods=["GET"])]

    async def _scan(self, request: Request, visitor: Visitor, params: dict[str, Any],
                    until: datetime | None, most: int) -> tuple[list[dict[str, Any]], bool]:
        """Run summaries newest first, until one was created before `until` (or
        `most` were read: True then, when more were left)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while len(items) < most:
            query = {**params, "page_size": min(PAGE, most - len(items))}
            if token:
                query["next_page_token"] = token
            _, page = await self.ui.perform(request, visitor, "listWorkflows", query)
            batch = [_summary(item) for item in page.get("workflows") or []]
            items.extend(batch)
            token = page.get("next_page_token")
            oldest = _at(batch[-1].get("created_at")) if batch else None
            if not token or (until is not None and oldest is not None and oldest < until):
                return items, False
        return items, bool(token)

    async def page(self, request: Request, visitor: Visitor) -> Response:
        now = _fmt.utcnow()
        recent, capped = await self._scan(request, visitor, {}, now - WEEK, SCAN)
        open_runs, open_capped = await self._scan(request, visitor, {"status": "running"},
                                                  None, SCAN)
        figures = dashboard(recent, open_runs, now)
        _, overdue = await self.ui.perform(request, visitor, "overdueDeadlines", {})
        return self.ui.render(request, visitor, "dashboard.html", d=figures,
                              bars=bars(figures["per_minute"]), scanned=len(recent),
                              capped=capped or open_capped, scan=SCAN,
                              overdue=overdue_card(overdue))
