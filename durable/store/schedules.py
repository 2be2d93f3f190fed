"""Schedules in storage: schedule rows, their fires, and firing them.

Every program here is one transaction. Whatever fires a schedule (a worker's
scheduler pass, `trigger`, `backfill`, a run of the schedule closing while a
fire waits) first locks the schedule's row, then records each fire and
starts its run in the same transaction: a fire advances the schedule and
inserts its run, or neither happens. A fire's run has the id
``{schedule_id}-{time:%Y%m%dT%H%M%SZ}`` (`durable.schedules.fire_workflow_id`),
and a fire is recorded once per (schedule, fire time), so neither a second
worker nor a retry after a crash can start a second run for it.

Tables: ``schedules`` (one row per schedule: what to start, the spec, the
policies, the next fire and counters) and ``schedule_fires`` (one row per
fire: started, buffered or skipped; trimmed to the recent ones, except runs
still open and fires still waiting). A run started by a fire carries
``schedule_id`` and ``scheduled_at`` (`workflow.info()`, describe()); when
it closes, `durable.store.closing` publishes ``("schedules", namespace)`` so
that a fire waiting for it starts at once.

Lock order: a schedule's row, then runs (TERMINATE_OTHER, CANCEL_OTHER). A
run's close never locks a schedule (it only publishes the wake-up), so the
two orders never meet.

Kept whole: firing and control go through the same locked row and fire
records (`ScheduleRecord`, `FireRecord`, `Firing`), and trigger and backfill
are fires, so the halves of a split would import each other. Reading (describe,
list) takes no lock and lives in `durable.store.schedule_reads`; the scheduler's
pass, which fires a batch of schedules and writes their fires together, in
`durable.store.schedule_pass`.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..clock import to_iso
from ..driver import Program, Row, Tx, ex, placeholders, q, q1
from ..errors import (
    CapabilityUnsupported,
    RunAlreadyClosed,
    RunNotCurrent,
    ScheduleAlreadyExists,
    ScheduleNotFound,
    WorkflowNotFound,
)
from ..failure import Failure
from ..schedules import (
    Overlap,
    ScheduleDefinition,
    ScheduleSpec,
    fire_workflow_id,
    jitter_delay,
    trigger_time,
)
from ..wakes import Wake
from . import cancellation
from .closing import close_run
from .records import OPEN_STATUSES, RunStatus, StartRequest, dumps, loads, new_id, plus
from .runs import insert_run

SCHEDULE_COLUMNS = (
    "namespace, schedule_id, workflow_type, task_queue, input, start_options, spec, overlap, "
    "jitter, catchup_window, paused, note, max_runs, remaining_actions, next_fire_at, due_at, "
    "last_fired_at, fires_count, skipped_count, buffered, fire_seq, last_skip_reason, "
    "last_skipped_at, created_at, updated_at"
)
FIRE_COLUMNS = (
    "scheduled_at, seq, origin, outcome, reason, workflow_id, run_id, due_at, fired_at, "
    "started_at, run_open"
)
#: a fire's row (every value a parameter: a driver may send many as one INSERT)
FIRE_INSERT = (f"INSERT INTO schedule_fires (namespace, schedule_id, {FIRE_COLUMNS}) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

#: fires kept per schedule besides open runs and waiting fires (describe's "recent")
RECENT_KEPT = 20
#: a schedule's record of fires is trimmed every this many fires
TRIM_EVERY = 10
#: fires one transaction records per schedule; a longer catch-up or backfill
#: goes on in the next transaction
FIRES_PER_TX = 100
#: missed fire times (outside the catch-up window) one transaction passes over
MISSED_PER_TX = 10_000
#: fires waiting at most under BUFFER_ALL (Temporal's bound); later ones are skipped
BUFFER_LIMIT = 1000
#: the cleanup budget of the cooperative request CANCEL_OTHER sends the open run
CANCEL_CLEANUP_SECONDS = 60.0


@dataclass
class ScheduleRecord:
    """A schedule's row, parsed; the firing code changes it and saves it back."""

    namespace: str
    schedule_id: str
    workflow_type: str
    task_queue: str
    input: str
    start_options: dict[str, Any]
    spec: ScheduleSpec
    overlap: str
    jitter: float
    catchup_window: float
    paused: bool
    note: str | None
    max_runs: int | None
    remaining_actions: int | None
    next_fire_at: float | None
    due_at: float | None
    last_fired_at: float | None
    fires_count: int
    skipped_count: int
    buffered: int
    fire_seq: int
    last_skip_reason: str | None
    last_skipped_at: float | None
    created_at: float
    updated_at: float


@dataclass
class FireRecord:
    """One fire of a schedule: started (its run), buffered (waiting) or skipped (why)."""

    scheduled_at: float
    seq: int
    origin: str  # schedule | trigger | backfill
    outcome: str  # started | buffered | skipped
    reason: str | None
    workflow_id: str | None
    run_id: str | None
    due_at: float
    fired_at: float
    started_at: float | None
    run_open: bool


@functools.lru_cache(maxsize=16384)
def _spec(text: str) -> ScheduleSpec:
    """The spec stored as `text` (specs are immutable; parsing one costs a cron parse)."""
    return ScheduleSpec.from_dict(loads(text))


def schedule_from_row(row: Row) -> ScheduleRecord:
    return ScheduleRecord(
        namespace=row["namespace"], schedule_id=row["schedule_id"],
        workflow_type=row["workflow_type"], task_queue=row["task_queue"], input=row["input"],
        start_options=loads(row["start_options"]) or {}, spec=_spec(row["spec"]),
        overlap=row["overlap"], jitter=float(row["jitter"]),
        catchup_window=float(row["catchup_window"]), paused=bool(row["paused"]),
        note=row["note"], max_runs=_int(row["max_runs"]),
        remaining_actions=_int(row["remaining_actions"]), next_fire_at=row["next_fire_at"],
        due_at=row["due_at"], last_fired_at=row["last_fired_at"],
        fires_count=int(row["fires_count"]), skipped_count=int(row["skipped_count"]),
        buffered=int(row["buffered"]), fire_seq=int(row["fire_seq"]),
        last_skip_reason=row["last_skip_reason"], last_skipped_at=row["last_skipped_at"],
        created_at=row["created_at"], updated_at=row["updated_at"],
    )


def _fire(row: Row) -> FireRecord:
    return FireRecord(
        scheduled_at=float(row["scheduled_at"]), seq=int(row["seq"]), origin=row["origin"],
        outcome=row["outcome"], reason=row["reason"], workflow_id=row["workflow_id"],
        run_id=row["run_id"], due_at=float(row["due_at"]), fired_at=float(row["fired_at"]),
        started_at=row["started_at"], run_open=bool(row["run_open"]),
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _due(s: ScheduleRecord, fire: float | None) -> float | None:
    """When a fire of `s` at `fire` is due: its time plus its jitter."""
    if fire is None:
        return None
    if s.jitter <= 0:
        return fire
    return fire + jitter_delay(s.namespace, s.schedule_id, fire, s.jitter,
                               s.spec.next_after(fire))


def _plan(s: ScheduleRecord, after: float) -> None:
    """Set the schedule's next fire: the spec's first after `after` (none while
    paused or once its scheduled runs are used up)."""
    if s.paused or s.remaining_actions == 0:
        s.next_fire_at = s.due_at = None
        return
    s.next_fire_at = s.spec.next_after(after)
    s.due_at = _due(s, s.next_fire_at)


def _lock(tx: Tx, namespace: str, schedule_id: str) -> Program[ScheduleRecord]:
    row = yield q1(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE namespace = ? "
                   "AND schedule_id = ?" + tx.lock, namespace, schedule_id)
    if row is None:
        raise ScheduleNotFound(f"no schedule {schedule_id!r} in namespace {namespace!r}")
    return schedule_from_row(row)


def _save(s: ScheduleRecord, now: float) -> Program[None]:
    yield ex(
        "UPDATE schedules SET workflow_type = ?, task_queue = ?, input = ?, start_options = ?, "
        "spec = ?, overlap = ?, jitter = ?, catchup_window = ?, paused = ?, note = ?, "
        "max_runs = ?, remaining_actions = ?, next_fire_at = ?, due_at = ?, last_fired_at = ?, "
        "fires_count = ?, skipped_count = ?, buffered = ?, fire_seq = ?, last_skip_reason = ?, "
        "last_skipped_at = ?, updated_at = ? WHERE namespace = ? AND schedule_id = ?",
        s.workflow_type, s.task_queue, s.input, dumps(s.start_options),
        dumps(s.spec.to_dict()), s.overlap, s.jitter, s.catchup_window, int(s.paused), s.note,
        s.max_runs, s.remaining_actions, s.next_fire_at, s.due_at, s.last_fired_at,
        s.fires_count, s.skipped_count, s.buffered, s.fire_seq, s.last_skip_reason,
        s.last_skipped_at, now, s.namespace, s.schedule_id,
    )
    return None


class Firing:
    """One schedule while one transaction fires it (its row is locked)."""

    def __init__(self, tx: Tx, s: ScheduleRecord, now: float) -> None:
        self.tx = tx
        self.s = s
        self.now = now
        self.running: list[FireRecord] = []  # fires whose run is open
        self.waiting: list[FireRecord] = []  # buffered fires, oldest first
        self.more = False
        self.missed = 0
        self.fires: list[dict[str, Any]] = []
        self._first_seq = s.fire_seq
        #: the row as read (the scheduler's pass saves only what changed)
        self.before = dict(vars(s))
        self.closed: list[FireRecord] = []  # fires whose run closed, still flagged open
        # (fire time, its record or None, its workflow id taken): read by load(at)
        self.checked: tuple[float, FireRecord | None, bool] | None = None

    def load(self, at: float | None = None) -> Program[None]:
        """Read the open and buffered fires, noting the runs that closed since, in
        one statement; with `at` (the first fire time this transaction will fire),
        the same statement also says whether `at` has fired already and whether
        its run's workflow id is taken, so that fire doesn't ask again."""
        s = self.s
        sql = (f"SELECT f.{FIRE_COLUMNS.replace(', ', ', f.')}, w.status AS instance_status"
               "{taken} FROM schedule_fires f LEFT JOIN workflows w ON "
               "w.namespace = f.namespace AND w.workflow_id = f.workflow_id WHERE "
               "f.namespace = ? AND f.schedule_id = ? AND (f.run_open = 1 OR "
               "f.outcome = 'buffered'{same})")
        args: list[Any] = [s.namespace, s.schedule_id]
        if at is None:
            rows = yield q(sql.format(taken="", same="") + " ORDER BY f.seq", *args)
        else:
            # one more row, all NULL but `taken`: the run id holding the fire's workflow id
            nulls = ", ".join(["NULL"] * (len(FIRE_COLUMNS.split(", ")) + 1))
            rows = yield q(
                sql.format(taken=", NULL AS taken", same=" OR f.scheduled_at = ?")
                + f" UNION ALL SELECT {nulls}, (SELECT current_run_id FROM workflows WHERE "
                "namespace = ? AND workflow_id = ?)",
                *args, at, s.namespace, fire_workflow_id(s.schedule_id, at))
        taken = None
        if at is not None:
            taken = next(r for r in rows if r["seq"] is None)["taken"] is not None
        self.take(rows, at, bool(taken))
        return None

    def take(self, rows: list[Row], at: float | None, taken: bool) -> None:
        """Note the fires read for this schedule (`load`'s rows, or its share of
        the scheduler pass's one read); `at` and `taken` as `load` says."""
        found: FireRecord | None = None
        for row in sorted((r for r in rows if r["seq"] is not None), key=lambda r: r["seq"]):
            fire = _fire(row)
            if at is not None and fire.scheduled_at == at:
                found = fire
            if not (fire.run_open or fire.outcome == "buffered"):
                continue  # only `at`'s own record, read for the check
            if fire.outcome == "buffered":
                self.waiting.append(fire)
            elif row["instance_status"] in OPEN_STATUSES:
                self.running.append(fire)
            else:  # flagged closed when the record is next trimmed (finish)
                self.closed.append(fire)
        if at is not None:
            self.checked = (at, found, taken)
        self.s.buffered = len(self.waiting)

    # ---------------------------------------------------------------- one fire

    def fire(self, at: float, origin: str, overlap: str, due: float) -> Program[dict[str, Any]]:
        """Record the fire at `at` under `overlap`; what became of it."""
        s = self.s
        if self.checked is not None and self.checked[0] == at:
            _, existing, taken = self.checked  # read by load(at), in the same transaction
            self.checked = None
        else:
            found = yield q1(
                f"SELECT {FIRE_COLUMNS}, (SELECT current_run_id FROM workflows WHERE "
                "namespace = ? AND workflow_id = ?) AS taken FROM (SELECT 1 AS one) AS one "
                "LEFT JOIN schedule_fires ON namespace = ? AND schedule_id = ? AND "
                "scheduled_at = ?", s.namespace, fire_workflow_id(s.schedule_id, at),
                s.namespace, s.schedule_id, at)
            existing = None if found["seq"] is None else _fire(found)
            taken = found["taken"] is not None
        if existing is not None and origin == "backfill" and (
                existing.outcome, existing.reason) == ("skipped", "catchup_window"):
            # missed while no worker ran (recorded to say so): a backfill makes it up
            yield ex("DELETE FROM schedule_fires WHERE namespace = ? AND schedule_id = ? AND "
                     "scheduled_at = ?", s.namespace, s.schedule_id, at)
            existing = None
        if existing is not None:  # this fire time has fired already: it fires once
            return dict(_fire_view(existing), duplicate=True)
        if origin == "schedule" and s.remaining_actions is not None:
            s.remaining_actions -= 1  # a scheduled fire that starts or waits uses one
        if not self.running or overlap == Overlap.ALLOW_ALL:
            result = yield from self._start(at, origin, due, taken)
        elif overlap == Overlap.SKIP:
            result = yield from self._skip(at, origin, due, "overlap")
        elif overlap == Overlap.BUFFER_ONE:
            if self.waiting:
                result = yield from self._skip(at, origin, due, "buffer_full")
            else:
                result = yield from self._buffer(at, origin, due)
        elif overlap == Overlap.BUFFER_ALL:
            if len(self.waiting) >= BUFFER_LIMIT:
                result = yield from self._skip(at, origin, due, "buffer_full")
            else:
                result = yield from self._buffer(at, origin, due)
        elif overlap == Overlap.CANCEL_OTHER:
            yield from self._request_cancellation()
            for older in self.waiting:  # a newer fire replaces one still waiting
                yield from self._supersede(older)
            self.waiting = []
            result = yield from self._buffer(at, origin, due)
            yield from self.start_waiting()  # the runs may have been pending: closed now
        else:  # TERMINATE_OTHER
            yield from self._terminate()
            result = yield from self._start(at, origin, due, taken)
        if result["outcome"] == "skipped" and origin == "schedule" and (
                s.remaining_actions is not None):
            s.remaining_actions += 1  # a skipped fire uses none
        self.fires.append(result)
        return result

    def _insert(self, fire: FireRecord) -> Program[None]:
        s = self.s
        s.fire_seq += 1
        fire.seq = s.fire_seq
        yield ex(
            FIRE_INSERT, s.namespace, s.schedule_id, fire.scheduled_at, fire.seq, fire.origin,
            fire.outcome, fire.reason, fire.workflow_id, fire.run_id, fire.due_at, fire.fired_at,
            fire.started_at, int(fire.run_open))
        return None

    def _start_run(self, at: float, taken: bool | None) -> Program[tuple[str, str] | None]:
        """Start the fire's run; (workflow id, run id), or None when its id is
        `taken` (None: not known yet, look)."""
        s = self.s
        workflow_id = fire_workflow_id(s.schedule_id, at)
        if taken is None:
            row = yield q1("SELECT current_run_id FROM workflows WHERE namespace = ? AND "
                           "workflow_id = ?", s.namespace, workflow_id)
            taken = row is not None
        if taken:
            return None
        options = s.start_options
        request = StartRequest(
            namespace=s.namespace, workflow_id=workflow_id, workflow_type=s.workflow_type,
            task_queue=s.task_queue, input=s.input, id_reuse="reject_duplicate",
            execution_timeout=options.get("execution_timeout"),
            run_timeout=options.get("run_timeout"), memo=options.get("memo"),
            schedule_id=s.schedule_id, scheduled_at=at, priority=options.get("priority", 5),
            concurrency_key=options.get("concurrency_key"),
        )
        run_id = new_id()
        yield from insert_run(self.tx, request, run_id, 1, self.now,
                              plus(self.now, request.execution_timeout))
        s.fires_count += 1
        s.last_fired_at = at
        return workflow_id, run_id

    def _start(self, at: float, origin: str, due: float,
               taken: bool) -> Program[dict[str, Any]]:
        started = yield from self._start_run(at, taken)
        if started is None:
            return (yield from self._skip(at, origin, due, "workflow_id_taken"))
        fire = FireRecord(at, 0, origin, "started", None, started[0], started[1], due,
                          self.now, self.now, True)
        yield from self._insert(fire)
        self.running.append(fire)
        return _fire_view(fire)

    def _skip(self, at: float, origin: str, due: float, reason: str) -> Program[dict[str, Any]]:
        fire = FireRecord(at, 0, origin, "skipped", reason, None, None, due, self.now, None,
                          False)
        yield from self._insert(fire)
        self._count_skip(reason)
        return _fire_view(fire)

    def _count_skip(self, reason: str, n: int = 1) -> None:
        s = self.s
        s.skipped_count += n
        s.last_skip_reason = reason
        s.last_skipped_at = self.now

    def _buffer(self, at: float, origin: str, due: float) -> Program[dict[str, Any]]:
        fire = FireRecord(at, 0, origin, "buffered", None, fire_workflow_id(
            self.s.schedule_id, at), None, due, self.now, None, False)
        yield from self._insert(fire)
        self.waiting.append(fire)
        self.s.buffered = len(self.waiting)
        self.tx.wake(Wake.schedules(self.s.namespace))  # see durable._scheduler: a close may race
        return _fire_view(fire)

    def _supersede(self, fire: FireRecord) -> Program[None]:
        s = self.s
        yield ex("UPDATE schedule_fires SET outcome = 'skipped', reason = 'superseded', "
                 "workflow_id = NULL WHERE namespace = ? AND schedule_id = ? AND "
                 "scheduled_at = ?", s.namespace, s.schedule_id, fire.scheduled_at)
        self._count_skip("superseded")
        if fire.origin == "schedule" and s.remaining_actions is not None:
            s.remaining_actions += 1  # it never started: its action is not used
        s.buffered = 0
        return None

    def start_waiting(self) -> Program[None]:
        """Start buffered fires, oldest first, while no run of the schedule is open."""
        s = self.s
        while self.waiting and not self.running:
            fire = self.waiting.pop(0)
            s.buffered = len(self.waiting)
            started = yield from self._start_run(fire.scheduled_at, None)
            if started is None:
                fire.outcome, fire.reason, fire.workflow_id = "skipped", "workflow_id_taken", None
                self._count_skip("workflow_id_taken")
            else:
                fire.outcome, (fire.workflow_id, fire.run_id) = "started", started
                fire.started_at, fire.run_open = self.now, True
                self.running.append(fire)
            yield ex(
                "UPDATE schedule_fires SET outcome = ?, reason = ?, workflow_id = ?, run_id = ?, "
                "started_at = ?, run_open = ? WHERE namespace = ? AND schedule_id = ? AND "
                "scheduled_at = ?", fire.outcome, fire.reason, fire.workflow_id, fire.run_id,
                fire.started_at, int(fire.run_open), s.namespace, s.schedule_id,
                fire.scheduled_at)
            self.fires.append(_fire_view(fire))
        return None

    def _request_cancellation(self) -> Program[None]:
        """CANCEL_OTHER: ask every open run of the schedule to stop cooperatively
        (a run asked before keeps its first request). A run that closed
        meanwhile is no longer running; a worker that cannot take cooperative
        cancellation leaves its run to finish (the fire waits for it)."""
        s = self.s
        still: list[FireRecord] = []
        for fire in self.running:
            assert fire.workflow_id is not None
            try:
                yield from cancellation.request_cancellation(
                    self.tx, s.namespace, fire.workflow_id, None,
                    f"schedule {s.schedule_id!r}: a newer fire replaces this run "
                    "(overlap policy cancel_other)", CANCEL_CLEANUP_SECONDS,
                    {"type": "schedule", "id": s.schedule_id}, "schedule", self.now)
            except (RunAlreadyClosed, WorkflowNotFound):
                continue
            except (CapabilityUnsupported, RunNotCurrent):
                pass
            still.append(fire)
        self.running = still
        return None

    def _terminate(self) -> Program[None]:
        """TERMINATE_OTHER: terminate every open run of the schedule now."""
        s = self.s
        for fire in self.running:
            row = yield q1("SELECT current_run_id FROM workflows WHERE namespace = ? AND "
                           "workflow_id = ?", s.namespace, fire.workflow_id)
            if row is not None:
                reason = (f"schedule {s.schedule_id!r}: a newer fire replaces this run "
                          "(overlap policy terminate_other)")
                yield from close_run(self.tx, row["current_run_id"], RunStatus.TERMINATED,
                                     self.now, reason=reason,
                                     failure=Failure.closed_by_request("terminated", reason))
        self.running = []
        return None

    # ---------------------------------------------------------------- the spec's fires

    def advance(self) -> Program[None]:
        """Fire every scheduled fire that is due (bounded per transaction)."""
        s, now = self.s, self.now
        fired = 0
        missed: deque[tuple[float, float]] = deque(maxlen=RECENT_KEPT)  # the latest, to record
        while s.next_fire_at is not None and s.due_at is not None and s.due_at <= now:
            if fired >= FIRES_PER_TX or self.missed >= MISSED_PER_TX:
                self.more = True
                break
            at, due = s.next_fire_at, s.due_at
            if now - due > s.catchup_window:
                self.missed += 1
                self._count_skip("catchup_window")
                missed.append((at, due))
            else:
                yield from self._record_missed(missed)  # they all come before it
                missed.clear()
                yield from self.fire(at, "schedule", s.overlap, due)
                fired += 1
            if s.remaining_actions == 0:
                s.next_fire_at = s.due_at = None
            else:
                s.next_fire_at = s.spec.next_after(at)
                s.due_at = _due(s, s.next_fire_at)
        yield from self._record_missed(missed)
        return None

    def _record_missed(self, missed: deque[tuple[float, float]]) -> Program[None]:
        """Record fire times skipped as past the catch-up window (the latest
        RECENT_KEPT of a stretch; `skipped_count` counts them all), so that the
        schedule's recent fires say why its count of skips grew while no worker
        ran. A time a backfill already fired keeps its record; a backfill of a
        recorded one fires it (`fire`)."""
        if not missed:
            return None
        s = self.s
        rows = yield q(f"SELECT scheduled_at FROM schedule_fires WHERE namespace = ? AND "
                       f"schedule_id = ? AND scheduled_at IN ({placeholders(len(missed))})",
                       s.namespace, s.schedule_id, *(at for at, _ in missed))
        recorded = {float(r["scheduled_at"]) for r in rows}
        for at, due in missed:
            if at not in recorded:
                yield from self._insert(FireRecord(at, 0, "schedule", "skipped",
                                                   "catchup_window", None, None, due,
                                                   self.now, None, False))
        return None

    @property
    def trim_due(self) -> bool:
        """This transaction's fires crossed a multiple of TRIM_EVERY: trim the record
        (fires whose run closed are flagged then too, not at each load: one
        statement less a fire)."""
        return self.s.fire_seq // TRIM_EVERY != self._first_seq // TRIM_EVERY

    def finish(self) -> Program[None]:
        """Trim the record of fires (every TRIM_EVERY fires) and save the schedule."""
        s = self.s
        if self.trim_due:
            if self.closed:
                yield ex(f"UPDATE schedule_fires SET run_open = 0 WHERE namespace = ? AND "
                         f"schedule_id = ? AND scheduled_at IN "
                         f"({placeholders(len(self.closed))})",
                         s.namespace, s.schedule_id, *(f.scheduled_at for f in self.closed))
            yield ex("DELETE FROM schedule_fires WHERE namespace = ? AND schedule_id = ? AND "
                     "seq <= ? AND run_open = 0 AND outcome <> 'buffered'",
                     s.namespace, s.schedule_id, s.fire_seq - RECENT_KEPT)
        yield from _save(s, self.now)
        return None


def _fire_view(fire: FireRecord) -> dict[str, Any]:
    """A fire as the API shows it."""
    return {
        "seq": fire.seq, "scheduled_at": to_iso(fire.scheduled_at), "origin": fire.origin,
        "outcome": fire.outcome, "reason": fire.reason, "workflow_id": fire.workflow_id,
        "run_id": fire.run_id, "due_at": to_iso(fire.due_at),
        "fired_at": to_iso(fire.fired_at), "started_at": to_iso(fire.started_at),
    }


# ---------------------------------------------------------------- control


def create(tx: Tx, namespace: str, schedule_id: str, d: ScheduleDefinition,
           now: float) -> Program[None]:
    """Store a new schedule; its first fire is the spec's first after `now`."""
    existing = yield q1("SELECT schedule_id FROM schedules WHERE namespace = ? AND "
                        "schedule_id = ?" + tx.lock, namespace, schedule_id)
    if existing is not None:
        raise ScheduleAlreadyExists(schedule_id, namespace)
    s = ScheduleRecord(
        namespace=namespace, schedule_id=schedule_id, workflow_type=d.workflow_type,
        task_queue=d.task_queue, input=d.input, start_options=dict(d.start_options),
        spec=d.spec, overlap=str(d.overlap), jitter=d.jitter, catchup_window=d.catchup_window,
        paused=d.paused, note=d.note, max_runs=d.max_runs, remaining_actions=d.max_runs,
        next_fire_at=None, due_at=None, last_fired_at=None, fires_count=0, skipped_count=0,
        buffered=0, fire_seq=0, last_skip_reason=None, last_skipped_at=None, created_at=now,
        updated_at=now)
    _plan(s, now)
    yield ex(
        f"INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES "
        f"({placeholders(len(SCHEDULE_COLUMNS.split(',')))})",
        s.namespace, s.schedule_id, s.workflow_type, s.task_queue, s.input,
        dumps(s.start_options), dumps(s.spec.to_dict()), s.overlap, s.jitter, s.catchup_window,
        int(s.paused), s.note, s.max_runs, s.remaining_actions, s.next_fire_at, s.due_at,
        s.last_fired_at, s.fires_count, s.skipped_count, s.buffered, s.fire_seq,
        s.last_skip_reason, s.last_skipped_at, s.created_at, s.updated_at)
    tx.wake(Wake.schedules(namespace))
    return None


def pause(tx: Tx, namespace: str, schedule_id: str, note: str | None,
          now: float) -> Program[None]:
    s = yield from _lock(tx, namespace, schedule_id)
    s.paused, s.note = True, note
    _plan(s, now)
    yield from _save(s, now)
    tx.wake(Wake.schedules(namespace))
    return None


def resume(tx: Tx, namespace: str, schedule_id: str, note: str | None,
           now: float) -> Program[None]:
    """Fire again from the spec's first fire time after `now`."""
    s = yield from _lock(tx, namespace, schedule_id)
    s.paused, s.note = False, note
    _plan(s, now)
    yield from _save(s, now)
    tx.wake(Wake.schedules(namespace))
    return None


def update(tx: Tx, namespace: str, schedule_id: str, changes: dict[str, Any],
           now: float) -> Program[None]:
    """Apply `changes` (fields of `ScheduleDefinition`, and `max_runs`: the scheduled
    runs that may still start); re-plan the next fire when the timing changed."""
    s = yield from _lock(tx, namespace, schedule_id)
    for name in ("workflow_type", "task_queue", "input", "note"):
        if name in changes:
            setattr(s, name, changes[name])
    if "start_options" in changes:
        s.start_options = dict(changes["start_options"])
    if "overlap" in changes:
        s.overlap = str(changes["overlap"])
    if "catchup_window" in changes:
        s.catchup_window = float(changes["catchup_window"])
    if "max_runs" in changes:
        s.max_runs = s.remaining_actions = changes["max_runs"]
    if "spec" in changes:
        s.spec = changes["spec"]
    if "jitter" in changes:
        s.jitter = float(changes["jitter"])
    if "spec" in changes or s.next_fire_at is None or s.remaining_actions == 0:
        if {"spec", "jitter", "max_runs"} & changes.keys():
            _plan(s, now)  # a new spec, or one that fired no more, goes on from now
    elif {"jitter", "max_runs"} & changes.keys():
        # the next fire stays: one past its time and waiting for its jitter,
        # or overdue while no worker ran (catch-up), is still fired (or counted
        # as skipped), not dropped unrecorded; only when it is due may move
        s.due_at = _due(s, s.next_fire_at)
    yield from _save(s, now)
    tx.wake(Wake.schedules(namespace))
    return None


def delete(tx: Tx, namespace: str, schedule_id: str) -> Program[None]:
    """Forget the schedule and its fires; the runs it started are left alone."""
    yield from _lock(tx, namespace, schedule_id)
    yield ex("DELETE FROM schedule_fires WHERE namespace = ? AND schedule_id = ?",
             namespace, schedule_id)
    yield ex("DELETE FROM schedules WHERE namespace = ? AND schedule_id = ?",
             namespace, schedule_id)
    tx.wake(Wake.schedules(namespace))
    return None


def trigger(tx: Tx, namespace: str, schedule_id: str, overlap: str | None,
            now: float) -> Program[dict[str, Any]]:
    """Fire now, at `trigger_time(now)`: never a whole second, so never the
    time of a scheduled fire (a trigger at the same millisecond as another is
    the same fire)."""
    s = yield from _lock(tx, namespace, schedule_id)
    firing = Firing(tx, s, now)
    at = trigger_time(now)
    yield from firing.load(at)
    yield from firing.start_waiting()
    result = yield from firing.fire(at, "trigger", overlap or s.overlap, now)
    yield from firing.finish()
    return result


def backfill(tx: Tx, namespace: str, schedule_id: str, start: float, end: float,
             overlap: str | None, now: float) -> Program[tuple[list[dict[str, Any]], float | None]]:
    """Fire the spec's fire times in [start, end), at most FIRES_PER_TX of them;
    the fires, and where the next transaction resumes (None: done)."""
    s = yield from _lock(tx, namespace, schedule_id)
    firing = Firing(tx, s, now)
    yield from firing.load()
    yield from firing.start_waiting()
    results: list[dict[str, Any]] = []
    resume_at: float | None = None
    for at in s.spec.fire_times(start, end):
        if len(results) >= FIRES_PER_TX:
            resume_at = at
            break
        results.append((yield from firing.fire(at, "backfill", overlap or s.overlap, now)))
    yield from firing.finish()
    return results, resume_at
