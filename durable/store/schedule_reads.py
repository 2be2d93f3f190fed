"""Reading schedules: describe one (with its recent fires and the status of
their runs) and list their summaries, as `ScheduleHandle.describe()` and
`Client.list_schedules()` document them.

Reads only: they take no lock and write nothing, so they live apart from the
firing transactions of `durable.store.schedules`, whose records they read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..clock import to_iso
from ..driver import Program, q, q1
from ..errors import StaleCursor
from ..schedules import NEXT_FIRES
from .records import OPEN_STATUSES, loads
from .schedules import (
    FIRE_COLUMNS,
    RECENT_KEPT,
    SCHEDULE_COLUMNS,
    FireRecord,
    ScheduleRecord,
    _due,
    _fire,
    _fire_view,
    schedule_from_row,
)


def describe(namespace: str, schedule_id: str,
             now: float) -> Program[dict[str, Any] | None]:
    """The schedule as `ScheduleHandle.describe()` documents it, or None."""
    row = yield q1(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE namespace = ? AND "
                   "schedule_id = ?", namespace, schedule_id)
    if row is None:
        return None
    s = schedule_from_row(row)
    fires = yield q(
        f"SELECT f.{FIRE_COLUMNS.replace(', ', ', f.')}, w.status AS instance_status "
        "FROM schedule_fires f LEFT JOIN workflows w ON w.namespace = f.namespace "
        "AND w.workflow_id = f.workflow_id WHERE f.namespace = ? AND f.schedule_id = ? "
        "ORDER BY f.seq DESC", namespace, schedule_id)
    recent: list[dict[str, Any]] = []
    running: list[str] = []
    buffered: list[dict[str, Any]] = []
    for f in fires:
        fire = _fire(f)
        view = dict(_fire_view(fire), status=_run_status(fire, f["instance_status"]))
        if fire.outcome == "buffered":
            buffered.append(view)
            continue
        if fire.outcome == "started" and f["instance_status"] in OPEN_STATUSES:
            assert fire.workflow_id is not None
            running.append(fire.workflow_id)
        if len(recent) < RECENT_KEPT:
            recent.append(view)
    overdue = None
    if _overdue_since(s, now) is not None:
        live = yield q1("SELECT count(*) AS n FROM workers WHERE namespace = ? AND "
                        "stopped_at IS NULL AND expires_at >= ?", namespace, now)
        overdue = dict(_overdue(s, now), live_workers=int(live["n"]))
    return dict(_summary(s, now), running=running, buffered=buffered[::-1], recent=recent,
                next_fires=_next_fires(s, now), overdue=overdue,
                catchup_window=s.catchup_window, input=loads(s.input),
                memo=loads(s.start_options.get("memo")))


def _run_status(fire: FireRecord, instance_status: str | None) -> str | None:
    """The status of a fire's run: None when the fire started none; "deleted"
    when its run is gone (retention)."""
    if fire.outcome != "started":
        return None
    return instance_status if instance_status is not None else "deleted"


#: how long past its due time a fire may wait for the scheduler before the
#: views call it overdue (a scheduler fires at its due time; a describe in the
#: same instant is not told a worker is missing)
OVERDUE_AFTER = 5.0
#: fire times an overdue schedule's view counts at most (a schedule every
#: second with no worker for a week: "at least 10000")
COUNT_AT_MOST = 10_000


def _overdue_since(s: ScheduleRecord, now: float) -> float | None:
    """The due time of the schedule's next fire when it passed more than
    OVERDUE_AFTER ago unfired (no worker of the namespace fires schedules), else None."""
    if s.paused or s.due_at is None or now - s.due_at <= OVERDUE_AFTER:
        return None
    return s.due_at


def _missed(s: ScheduleRecord, at: float, now: float) -> bool:
    """A fire at `at` that a worker getting to it now would count as skipped
    (`catchup_window`), as `durable.store.schedules.Firing.advance` does."""
    due = _due(s, at)
    return due is not None and now - due > s.catchup_window


def _overdue(s: ScheduleRecord, now: float) -> dict[str, Any]:
    """An overdue schedule: since when, how late, and how many of its fire
    times are already past its catch-up window (they count as skipped when a
    worker gets to them; `backfill` makes them up)."""
    since = _overdue_since(s, now)
    assert since is not None
    missed, at = 0, s.next_fire_at
    while at is not None and missed < COUNT_AT_MOST and _missed(s, at, now):
        missed += 1
        at = s.spec.next_after(at)
    return {"since": to_iso(since), "late_seconds": now - since, "missed": missed,
            "missed_at_least": missed >= COUNT_AT_MOST,
            "catchup_window": s.catchup_window}


def _next_fires(s: ScheduleRecord, now: float) -> list[str | None]:
    """The fire times to come: an overdue schedule's first ones are those a
    worker back now would still start (within the catch-up window), not those
    it would count as skipped."""
    out: list[str | None] = []
    at = s.next_fire_at
    if at is not None and _missed(s, at, now):
        # past the window: from the first fire time a worker back now would start
        at = s.spec.next_after(now - s.catchup_window - s.jitter - 1.0)
        while at is not None and _missed(s, at, now):
            at = s.spec.next_after(at)
    left = NEXT_FIRES if s.remaining_actions is None else min(NEXT_FIRES, s.remaining_actions)
    while at is not None and len(out) < left:
        out.append(to_iso(at))
        at = s.spec.next_after(at)
    return out


def _summary(s: ScheduleRecord, now: float) -> dict[str, Any]:
    ended = _ended(s, now)
    return {
        "schedule_id": s.schedule_id, "namespace": s.namespace,
        "workflow_type": s.workflow_type, "spec": s.spec.to_dict(), "overlap": s.overlap,
        "paused": s.paused, "note": s.note, "next_fire_at": to_iso(s.next_fire_at),
        # when that fire starts: its time plus its jitter (the views' "in 20s",
        # not "40s ago" for a fire whose jitter has it start later)
        "next_due_at": to_iso(s.due_at),
        "last_fired_at": to_iso(s.last_fired_at), "fires_count": s.fires_count,
        "skipped_count": s.skipped_count,
        # why and when the last fire time was skipped: read from the schedule's
        # own row, so the list carries them as describe does
        "last_skip_reason": s.last_skip_reason, "last_skipped_at": to_iso(s.last_skipped_at),
        # how many more scheduled runs may start: none once it has ended,
        # whatever max_runs left (an end_at passed reads "no limit" otherwise)
        "remaining_actions": 0 if ended else s.remaining_actions, "max_runs": s.max_runs,
        "buffered_count": s.buffered, "overdue_since": to_iso(_overdue_since(s, now)),
        "ended": ended,
        "created_at": to_iso(s.created_at), "updated_at": to_iso(s.updated_at),
        # what the runs start with: the list's (and the reference's `action`) too
        "task_queue": s.task_queue, "jitter": s.jitter,
        "execution_timeout": s.start_options.get("execution_timeout"),
        "run_timeout": s.start_options.get("run_timeout"),
    }


def _ended(s: ScheduleRecord, now: float) -> str | None:
    """Why the schedule fires no more, if it does not: ``"max_runs"`` (its
    scheduled runs are used up) or ``"end_at"`` (its spec has no fire time
    left); None while it has fires to come (or would, once resumed)."""
    if s.remaining_actions == 0:
        return "max_runs"
    if s.next_fire_at is None and (not s.paused or s.spec.next_after(now) is None):
        return "end_at"
    return None


def list_schedules(
    namespace: str, limit: int, after: tuple[float, str] | None, *,
    paused: bool | None = None, workflow_type: str | None = None,
    matching: Sequence[tuple[str, str | int]] = (), now: float,
) -> Program[tuple[list[dict[str, Any]], tuple[float, str] | None]]:
    """One page of summaries, newest first (``created_at``; those created at
    the same instant by schedule id), each with its last fire and that fire's
    run status; and the (created_at, schedule_id) of its last schedule to page
    on after (None on the last page). Keyset paging from `after`: a schedule
    created or deleted between two pages moves no other one, so none is
    listed twice or missed (a new one is newer than the pages already read).
    `paused` keeps paused (True) or active (False) schedules, `workflow_type`
    those starting that type, `matching` those whose columns (`MATCHABLE`)
    equal the values given (a parsed ``query``, `durable._visibility_query`).

    `after` must still name a schedule the same filters keep, created when it
    was: else `StaleCursor` (the reference engine's rule; read in the same
    transaction as the page)."""
    where, params = _filters(paused, workflow_type, matching)
    if after is not None:
        anchor = yield q1("SELECT s.created_at FROM schedules s WHERE s.namespace = ? AND "
                          "s.schedule_id = ?" + where, namespace, after[1], *params)
        if anchor is None or float(anchor["created_at"]) != after[0]:
            raise StaleCursor(
                f"the cursor's last schedule ({after[1]!r}) is no longer in this list "
                "(deleted, or changed so that the filters no longer keep it): list again "
                "from the first page, without a cursor")
    sql = (
        f"SELECT s.{SCHEDULE_COLUMNS.replace(', ', ', s.')}, f.outcome AS last_outcome, "
        "f.scheduled_at AS last_scheduled_at, f.workflow_id AS last_workflow_id, "
        "f.run_id AS last_run_id, w.status AS last_status FROM schedules s "
        "LEFT JOIN schedule_fires f ON f.namespace = s.namespace AND "
        "f.schedule_id = s.schedule_id AND f.seq = s.fire_seq "
        "LEFT JOIN workflows w ON w.namespace = f.namespace AND w.workflow_id = f.workflow_id "
        "WHERE s.namespace = ?")
    page_params: list[Any] = [namespace]
    if after is not None:
        # after (t, id) in (created_at DESC, schedule_id ASC): older than t, or
        # of t with a greater id; written as a range on created_at (what the
        # schedules_created index seeks) less the few rows of t up to id
        sql += (" AND s.created_at <= ? AND NOT (s.created_at = ? AND "
                "s.schedule_id <= ?)")
        page_params += [after[0], after[0], after[1]]
    rows = yield q(sql + where + " ORDER BY s.created_at DESC, s.schedule_id LIMIT ?",
                   *page_params, *params, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    out = []
    last: ScheduleRecord | None = None
    for row in rows:
        s = last = schedule_from_row(row)
        fire = None
        if row["last_outcome"] is not None:
            fire = {"scheduled_at": to_iso(row["last_scheduled_at"]),
                    "outcome": row["last_outcome"], "workflow_id": row["last_workflow_id"],
                    "run_id": row["last_run_id"],
                    "status": (row["last_status"] or "deleted")
                    if row["last_outcome"] == "started" else None}
        out.append(dict(_summary(s, now), last_fire=fire))
    return out, ((last.created_at, last.schedule_id) if more and last is not None else None)



#: the columns a list's `matching` may compare (`durable._visibility_query.SCHEDULES`)
MATCHABLE = frozenset({"schedule_id", "paused", "workflow_type", "task_queue", "note"})


def _filters(paused: bool | None, workflow_type: str | None,
             matching: Sequence[tuple[str, str | int]]) -> tuple[str, list[Any]]:
    """The list's filters as SQL conditions on ``s`` (each ``AND ...``) and their values."""
    conditions: list[tuple[str, str | int]] = []
    if paused is not None:
        conditions.append(("paused", int(paused)))
    if workflow_type is not None:
        conditions.append(("workflow_type", workflow_type))
    conditions += matching
    for column, _ in conditions:
        if column not in MATCHABLE:
            raise ValueError(f"schedules cannot be listed by {column!r}")
    return "".join(f" AND s.{column} = ?" for column, _ in conditions), [
        value for _, value in conditions]
