"""What /metrics reads about schedules and retention (`Store.schedule_stats`).

One read transaction per scrape: schedule counts by namespace and state, the
fires recorded since the previous scrape (a tail by ``fired_at``; fire rows
are kept until their schedule's record is trimmed, so a scrape every few
minutes sees them all), and the rows retention deleted per namespace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..driver import Program, q, q1
from .records import loads
from .schedule_reads import OVERDUE_AFTER


@dataclass
class ScheduleStats:
    """What /metrics exports about schedules and retention, read in one transaction."""

    #: (namespace, "active" | "paused") -> (schedules, fires, skipped fires)
    schedules: dict[tuple[str, str], tuple[int, int, int]]
    #: fires recorded after the caller's mark, oldest first:
    #: (namespace, origin, outcome, due_at, fired_at)
    fires: list[tuple[str, str, str, float, float]]
    #: the newest fired_at seen (the next call's mark)
    mark: float
    #: namespace -> {table: rows retention deleted}
    pruned: dict[str, dict[str, int]]
    #: namespace -> (active schedules whose next fire is overdue, the oldest
    #: one's due time): no worker of the namespace fires them (`schedule_reads.OVERDUE_AFTER`)
    overdue: dict[str, tuple[int, float]] = field(default_factory=dict)


#: a mark before every fire time (an empty table at the first scrape)
_BEFORE_ALL = -1e18


def stats(after: float | None, limit: int,
          now: float | None = None) -> Program[ScheduleStats]:
    """Counts by namespace, and the fires recorded after `after` (None: none, only
    the mark to start from). A fire is kept until its schedule's record is
    trimmed (RECENT_KEPT), so a scrape every few minutes sees every fire."""
    rows = yield q("SELECT namespace, paused, COUNT(*) AS n, SUM(fires_count) AS fires, "
                   "SUM(skipped_count) AS skipped FROM schedules GROUP BY namespace, paused")
    counts = {(r["namespace"], "paused" if r["paused"] else "active"):
              (int(r["n"]), int(r["fires"] or 0), int(r["skipped"] or 0)) for r in rows}
    fires: list[tuple[str, str, str, float, float]] = []
    if after is None:
        row = yield q1("SELECT MAX(fired_at) AS m FROM schedule_fires")
        mark = _BEFORE_ALL if row is None or row["m"] is None else float(row["m"])
    else:
        found = yield q("SELECT namespace, origin, outcome, due_at, fired_at FROM "
                        "schedule_fires WHERE fired_at > ? ORDER BY fired_at LIMIT ?",
                        after, limit)
        fires = [(r["namespace"], r["origin"], r["outcome"], float(r["due_at"]),
                  float(r["fired_at"])) for r in found]
        mark = fires[-1][4] if fires else after
    settings = yield q("SELECT namespace, pruned FROM namespace_settings")
    pruned = {r["namespace"]: {str(k): int(v) for k, v in (loads(r["pruned"]) or {}).items()}
              for r in settings}
    overdue: dict[str, tuple[int, float]] = {}
    if now is not None:
        late = yield q("SELECT namespace, COUNT(*) AS n, MIN(due_at) AS oldest FROM schedules "
                       "WHERE paused = 0 AND due_at IS NOT NULL AND due_at < ? "
                       "GROUP BY namespace", now - OVERDUE_AFTER)
        overdue = {r["namespace"]: (int(r["n"]), float(r["oldest"])) for r in late}
    return ScheduleStats(counts, fires, mark, pruned, overdue)
