"""Schedules: start a workflow at given times, exactly once per fire.

The public face: `ScheduleSpec` (when: cron expressions in a time zone,
and/or a fixed interval), `Overlap` (what a fire does while an earlier run of
the schedule still runs) and `ScheduleHandle` (what `client.get_schedule()`
returns). A schedule lives in storage with its namespace; every worker of the
namespace fires it (`durable._scheduler`), and each fire is one transaction
that records the fire and starts its run (`durable.store.schedules`), so a
fire starts exactly one run whatever the number of workers and crashes. See
docs/schedules.md.

Fire times are whole UTC seconds. Cron expressions are read by `cronsim`,
chosen by measuring (docs/design/decisions.md (s)): it follows Debian cron at
daylight-saving changes, so a fixed-time job whose local time does not exist
that day fires once at the first real instant after the gap, one whose local
time happens twice fires once (the first time), and a wildcard job fires at
every real instant its fields match: a change of the clocks neither skips nor
doubles a fire. Intervals are real durations counted from the Unix epoch plus
`offset` (``every=3600`` fires at each whole UTC hour), untouched by any
clock change.

Kept whole: a spec's validation and its fire times are one definition of
"when" (the next fire, the list's next fires, backfill and the overdue count
all ask the same `ScheduleSpec`); the handle beside it is the thin face
users call, and splitting it off would leave a module of re-exports.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import functools
import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from . import _validate
from ._registry import workflow_name
from .errors import (
    ConfigurationError,
    NameNotRegistered,
    ScheduleAlreadyExists,
    ScheduleNotFound,
)
from .options import Seconds, StartOptions

if TYPE_CHECKING:
    from .store.records import StartRequest

#: how many upcoming fire times describe() lists
NEXT_FIRES = 5
#: cron's nicknames, as Debian cron and the reference engine's cron library
#: (and Temporal) take them: the five fields each stands for (cronsim takes none)
CRON_NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
                  "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
                  "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


def _cron_fields(expr: str) -> str:
    """A cron expression as cronsim reads it: a nickname (``@daily``) as its
    fields; the expression itself is kept as written (describe() shows it)."""
    return CRON_NICKNAMES.get(expr.strip().lower(), expr)


@functools.lru_cache(maxsize=256)
def _fixed_time_seconds(expr: str) -> tuple[str, tuple[int, ...]] | None:
    """A six-field expression at fixed times (its minute and hour fields do not
    start with ``*``) as its five-field part and its seconds; None otherwise.

    cronsim applies Debian cron's daylight-saving rule to five-field
    expressions only, so ``0 30 2 * * *`` in Europe/Berlin would not fire on
    the day 02:30 does not exist and would fire twice on the day it repeats,
    where ``30 2 * * *`` fires once each day: the five fields give the minute
    (by Debian's rule), the seconds field the seconds within it."""
    fields = expr.split()
    if len(fields) != 6 or fields[1].startswith("*") or fields[2].startswith("*"):
        return None
    base = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    minute = CronSim(f"{fields[0]} 0 0 1 1 *", base - datetime.timedelta(seconds=1))
    seconds = sorted({moment.second for moment in
                      (next(minute) for _ in range(60)) if moment.minute == 0
                      and moment.year == 2000 and moment.hour == 0})
    return " ".join(fields[1:]), tuple(seconds)


def _next_cron(expr: str, local: datetime.datetime, instant: float,
               zone: ZoneInfo) -> float:
    """The first fire time of one cron expression strictly after `instant`."""
    fixed = _fixed_time_seconds(expr) if zone.key != "UTC" else None
    if fixed is None:
        return next(CronSim(expr, local)).timestamp()
    five, seconds = fixed
    # the minute holding `instant` may still have a fire: start a minute back
    for minute in CronSim(five, datetime.datetime.fromtimestamp(instant - 60, zone)):
        for second in seconds:
            if minute.timestamp() + second > instant:
                return minute.timestamp() + second
    raise StopIteration  # pragma: no cover (CronSim gives up after 50 years)


class Overlap(enum.StrEnum):
    """What a fire does while a run started by an earlier fire is still open.

    The values are the reference engine's (and Temporal's) policies.
    """

    #: do not start; the fire counts as skipped (the default)
    SKIP = "skip"
    #: start it when the open run has closed; at most one fire waits, later ones are skipped
    BUFFER_ONE = "buffer_one"
    #: start every fire, one after the other, each when the previous run has closed
    BUFFER_ALL = "buffer_all"
    #: ask the open run to stop cooperatively (`request_cancellation`) and start
    #: this fire when it has closed; a newer fire replaces one still waiting
    CANCEL_OTHER = "cancel_other"
    #: terminate the open run and start at once
    TERMINATE_OTHER = "terminate_other"
    #: start at once, whatever runs
    ALLOW_ALL = "allow_all"


def _utc_instant(value: Any, what: str) -> float | None:
    """An aware datetime (or None) as UTC epoch seconds."""
    if value is None:
        return None
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        raise ConfigurationError(
            f"{what} must be a timezone-aware datetime.datetime (e.g. "
            f"datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)), got {value!r}")
    return value.timestamp()


def _whole_seconds(value: Seconds, what: str, minimum: float) -> int:
    seconds = _validate.duration(value, what, minimum=minimum)
    if seconds != int(seconds):
        raise ConfigurationError(
            f"{what} must be a whole number of seconds (fire times are whole seconds), "
            f"got {value!r}")
    return int(seconds)


def _zone(name: Any) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            f"ScheduleSpec.timezone must be an IANA time zone name such as "
            f"'Europe/Amsterdam' or 'UTC', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        # zone names are case-sensitive here (file names), not for every engine
        # (the reference's PHP takes 'europe/amsterdam'): name the one meant
        meant = {known.lower(): known for known in available_timezones()}.get(name.lower())
        hint = f"; did you mean {meant!r}?" if meant else (
            "; on a system without zone data, pip install tzdata")
        raise ConfigurationError(
            f"ScheduleSpec.timezone {name!r} is not a known IANA time zone (such as "
            f"'Europe/Amsterdam', 'America/New_York' or 'UTC'){hint}") from exc


@dataclass(frozen=True)
class ScheduleSpec:
    """When a schedule fires: cron expressions, a fixed interval, or both.

    ``ScheduleSpec(cron="0 2 * * *", timezone="Europe/Amsterdam")`` fires at
    02:00 Amsterdam time every day; ``cron=[...]`` takes several expressions
    (a fire time matched by two of them fires once); ``every=3600`` fires at
    every whole UTC hour (``offset=900``: at a quarter past). Cron
    expressions have five fields (minute hour day month weekday), six (a
    leading seconds field) or are a nickname (``@daily``, ``@hourly``, ...:
    `CRON_NICKNAMES`), and read in `timezone`. `start_at` / `end_at`
    (aware datetimes) bound the fire times: none before `start_at`, none at
    or after `end_at`.
    """

    cron: str | Sequence[str] | None = None
    every: Seconds | None = None
    offset: Seconds = 0
    timezone: str = "UTC"
    start_at: datetime.datetime | None = None
    end_at: datetime.datetime | None = None
    _crons: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _every: int | None = field(init=False, repr=False, compare=False)
    _offset: int = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _start: float | None = field(init=False, repr=False, compare=False)
    _end: float | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        crons: tuple[str, ...]
        if self.cron is None:
            crons = ()
        elif isinstance(self.cron, str):
            crons = (self.cron,)
        elif isinstance(self.cron, Sequence) and all(isinstance(c, str) for c in self.cron):
            crons = tuple(self.cron)
        else:
            raise ConfigurationError(
                f"ScheduleSpec.cron must be a cron expression or a list of them, got "
                f"{self.cron!r}")
        zone = _zone(self.timezone)
        for expr in crons:
            try:
                next(CronSim(_cron_fields(expr), datetime.datetime.now(zone)))
            except (CronSimError, StopIteration, ValueError) as exc:
                raise ConfigurationError(
                    f"ScheduleSpec.cron {expr!r} is not a valid cron expression ({exc}); "
                    "use five fields 'minute hour day month weekday' (e.g. '0 2 * * *' "
                    "for 02:00 every day), six with a leading seconds field, or a nickname "
                    f"({', '.join(CRON_NICKNAMES)})") from exc
        every = None
        if self.every is not None:
            every = _whole_seconds(self.every, "ScheduleSpec.every", 1)
        offset = _whole_seconds(self.offset, "ScheduleSpec.offset", 0)
        if offset and every is None:
            raise ConfigurationError("ScheduleSpec.offset shifts an interval: give every= too")
        if every is not None and offset >= every:
            raise ConfigurationError(
                f"ScheduleSpec.offset must be less than every ({every} s), got {offset}")
        if not crons and every is None:
            raise ConfigurationError(
                "a ScheduleSpec needs cron= (e.g. '0 2 * * *') or every= (seconds)")
        start = _utc_instant(self.start_at, "ScheduleSpec.start_at")
        end = _utc_instant(self.end_at, "ScheduleSpec.end_at")
        if start is not None and end is not None and end <= start:
            raise ConfigurationError(
                f"ScheduleSpec.end_at ({self.end_at}) must be after start_at ({self.start_at})")
        set_(self, "_crons", crons)
        set_(self, "_every", every)
        set_(self, "_offset", offset)
        set_(self, "_zone", zone)
        set_(self, "_start", start)
        set_(self, "_end", end)

    # ---------------------------------------------------------------- fire times

    def _raw_next(self, instant: float) -> float:
        """The first fire time of the crons and the interval strictly after
        `instant`, ignoring start_at and end_at."""
        best = math.inf
        if self._crons:
            local = datetime.datetime.fromtimestamp(instant, self._zone)
            for expr in self._crons:
                best = min(best, _next_cron(_cron_fields(expr), local, instant, self._zone))
        if self._every is not None:
            k = math.floor((instant - self._offset) / self._every) + 1
            best = min(best, float(self._offset + k * self._every))
        return best

    def next_after(self, instant: float) -> float | None:
        """The first fire time (UTC epoch seconds) strictly after `instant`, or
        None when the spec fires no more (past `end_at`)."""
        after = instant
        if self._start is not None and after < self._start:
            after = self._start - 1.0  # every fire time is a whole second
        fire = self._raw_next(after)
        while self._start is not None and fire < self._start:
            fire = self._raw_next(fire)
        if self._end is not None and fire >= self._end:
            return None
        return fire

    def fire_times(self, start: float, end: float) -> Iterator[float]:
        """Every fire time in [start, end), in order."""
        fire = self.next_after(start - 1.0)
        while fire is not None and fire < end:
            if fire >= start:
                yield fire
            fire = self.next_after(fire)

    # ---------------------------------------------------------------- storage

    def to_dict(self) -> dict[str, Any]:
        """The spec as stored and shown by describe()."""
        return {
            "cron": list(self._crons), "every": self._every, "offset": self._offset,
            "timezone": self.timezone,
            "start_at": self.start_at.isoformat() if self.start_at else None,
            "end_at": self.end_at.isoformat() if self.end_at else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleSpec:
        def when(value: Any, what: str) -> datetime.datetime | None:
            # stored specs always parse; one from the wire may be anything
            if value is None:
                return None
            try:
                return datetime.datetime.fromisoformat(value)
            except (TypeError, ValueError):
                raise ConfigurationError(
                    f"a schedule's {what} must be an ISO 8601 date-time with a UTC offset "
                    f"such as 2026-04-01T00:00:00Z, got {value!r}") from None

        return cls(cron=list(data.get("cron") or ()) or None, every=data.get("every"),
                   offset=data.get("offset") or 0, timezone=data.get("timezone") or "UTC",
                   start_at=when(data.get("start_at"), "start_at"),
                   end_at=when(data.get("end_at"), "end_at"))


def jitter_delay(namespace: str, schedule_id: str, scheduled_at: float, jitter: float,
                 next_fire: float | None) -> float:
    """How long after its scheduled time a fire is due: a fraction of `jitter`
    fixed by the fire's identity (every worker, every retry computes the same),
    kept below the gap to the next fire so fires stay in order."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.sha256(f"{namespace}\0{schedule_id}\0{scheduled_at:.0f}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2.0 ** 64
    limit = jitter if next_fire is None else min(jitter, (next_fire - scheduled_at) * 0.99)
    return fraction * limit


def fire_workflow_id(schedule_id: str, scheduled_at: float) -> str:
    """The id of the run a fire starts: the schedule's id and the fire's UTC time,
    ``nightly-import-20260412T020000Z`` (unique per fire, so a fire can start
    one run only). A trigger's time has milliseconds (`trigger_time`), and so
    has its id: ``nightly-import-20260412T020000.001Z``."""
    return f"{schedule_id}-{_fire_time_text(round(scheduled_at * 1000))}"


@functools.lru_cache(maxsize=4096)
def _fire_time_text(millis: int) -> str:
    """`fire_workflow_id`'s time part (a scheduler pass's fires mostly share their
    fire time: formatted once, not once per schedule)."""
    when = datetime.datetime.fromtimestamp(millis // 1000, datetime.UTC)
    fraction = f".{millis % 1000:03d}" if millis % 1000 else ""
    return f"{when:%Y%m%dT%H%M%S}{fraction}Z"


def trigger_time(now: float) -> float:
    """The fire time of a trigger at `now`: now to the millisecond, and never a
    whole second, since whole seconds are the spec's fire times (`ScheduleSpec`
    only has whole-second fires). A trigger in the very second of a scheduled
    fire is then a fire of its own, with a run of its own, and neither is taken
    for the other; two triggers at the same millisecond are one fire."""
    millis = math.floor(now * 1000)
    if millis % 1000 == 0:
        millis += 1
    return millis / 1000


# ---------------------------------------------------------------- what a client sends


@dataclass(frozen=True)
class ScheduleDefinition:
    """A schedule as the client validated and encoded it: what to start, and when.

    `input` is the encoded argument list; `start_options` holds the run's
    ``execution_timeout`` and ``run_timeout`` (seconds or None) and its
    encoded ``memo`` (or None).
    """

    workflow_type: str
    task_queue: str
    input: str
    start_options: dict[str, Any]
    spec: ScheduleSpec
    overlap: Overlap = Overlap.SKIP
    jitter: float = 0.0
    catchup_window: float = 3600.0
    paused: bool = False
    note: str | None = None
    max_runs: int | None = None

_UNSET: Any = object()


def schedule_list_args(limit: int, cursor: str | None, status: str | None,
                       workflow_type: str | None, query: str | None) -> dict[str, Any]:
    """`Client.list_schedules_page`'s arguments checked, as `ScheduleControl.list`
    takes them."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ConfigurationError(f"limit must be an integer from 1 to 10000, got {limit!r}")
    if status not in (None, "active", "paused"):
        raise ConfigurationError(
            f"status must be 'active' or 'paused' (or None for both), got {status!r}")
    for name, value in (("cursor", cursor), ("workflow_type", workflow_type), ("query", query)):
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(f"{name} must be a string or None, got {value!r}")
    return {"limit": limit, "cursor": cursor or None, "workflow_type": workflow_type,
            "paused": None if status is None else status == "paused", "query": query or None}


class ScheduleControl(Protocol):
    """How a client reaches schedules: storage in this process, or HTTP.

    Every method acts in the plane's namespace and raises `ScheduleNotFound`
    for an unknown schedule (`ScheduleAlreadyExists` for create).
    """

    async def create(self, schedule_id: str, definition: ScheduleDefinition) -> None:
        """Store a new schedule; its first fire is the spec's first after now."""
        ...

    async def describe(self, schedule_id: str) -> dict[str, Any]:
        ...

    async def list(self, limit: int, cursor: str | None = None, *, paused: bool | None = None,
                   workflow_type: str | None = None,
                   query: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """A page of summaries, newest first (by ``created_at``, then by id),
        after `cursor` (an opaque cursor a previous page returned), and the
        cursor of the next page (None on the last)."""
        ...

    async def pause(self, schedule_id: str, note: str | None) -> None:
        ...

    async def resume(self, schedule_id: str, note: str | None) -> None:
        ...

    async def trigger(self, schedule_id: str, overlap: str | None) -> dict[str, Any]:
        ...

    async def backfill(self, schedule_id: str, start: float, end: float,
                       overlap: str | None) -> dict[str, Any]:
        ...

    async def update(self, schedule_id: str, changes: dict[str, Any]) -> None:
        ...

    async def delete(self, schedule_id: str) -> None:
        ...


def check_schedule_id(value: Any) -> str:
    """A schedule id: a name short enough that ``{id}-{YYYYmmddTHHMMSS.fffZ}``
    (its fires' workflow ids; a trigger's time has milliseconds) is one too.
    It allowed 238 (a scheduled fire's 17 characters): a trigger of a 235 to
    238 character id made a workflow id past 255, refused by MariaDB's keys
    and by every call that names a run elsewhere (the MariaDB audit)."""
    _validate.name(value, "schedule id")
    suffix = len("-20260101T000000.000Z")
    longest = _validate.MAX_NAME_LENGTH - suffix
    if len(value) > longest:
        raise ConfigurationError(
            f"a schedule id is at most {longest} characters (its fires' workflow ids add "
            f"up to {suffix}), got {len(value)}")
    return str(value)


def schedule_fields(start_request: Callable[..., StartRequest], *, unset: Any = None,
                    **given: Any) -> dict[str, Any]:
    """Validate and encode the given schedule fields (those not `unset`) as
    `ScheduleDefinition` fields: what create() stores and update() changes.
    `start_request` is the client's (it encodes arguments and memo, checking
    their size, as a start does)."""
    given = {k: v for k, v in given.items() if v is not unset}
    out: dict[str, Any] = {}
    if "spec" in given:
        if not isinstance(given["spec"], ScheduleSpec):
            raise ConfigurationError(
                f"spec must be a durable.ScheduleSpec, got {given['spec']!r}")
        out["spec"] = given["spec"]
    if "overlap" in given:
        out["overlap"] = _validate.choice(given["overlap"], Overlap, "overlap")
    if "jitter" in given:
        out["jitter"] = _validate.duration(given["jitter"], "jitter")
    if "catchup_window" in given:
        out["catchup_window"] = _validate.duration(given["catchup_window"], "catchup_window",
                                                   minimum=1)
    if "max_runs" in given:
        # bounded: past 64 bits the driver raised its own OverflowError /
        # DataError instead of a ConfigurationError
        out["max_runs"] = None if given["max_runs"] is None else _validate.integer(
            given["max_runs"], "max_runs", maximum=1_000_000_000)
    if "note" in given:
        note = given["note"]
        if note is not None and (not isinstance(note, str) or len(note) > 1000):
            shown = (f"{note[:40]!r}... ({len(note)} characters)"
                     if isinstance(note, str) else repr(note))
            raise ConfigurationError(
                f"note must be a string of at most 1000 characters, got {shown}")
        out["note"] = note
    if "workflow" in given:
        out["workflow_type"] = workflow_name(given["workflow"])
    if {"args", "options", "task_queue"} & given.keys():
        options = given.get("options", StartOptions())
        if not isinstance(options, StartOptions):
            raise ConfigurationError(f"options must be a durable.StartOptions, got {options!r}")
        request = start_request(out.get("workflow_type", "the scheduled workflow"),
                                list(given.get("args", ())), given.get("schedule_id", "schedule"),
                                options, given.get("task_queue"))
        if "args" in given:
            out["input"] = request.input
        if "options" in given or "task_queue" in given:
            out["task_queue"] = request.task_queue
            out["start_options"] = {"execution_timeout": request.execution_timeout,
                                    "run_timeout": request.run_timeout, "memo": request.memo,
                                    "priority": request.priority,
                                    "concurrency_key": request.concurrency_key}
    return out


class ScheduleClient(Protocol):
    """What a `ScheduleHandle` needs of its client (`durable.Client` is one)."""

    namespace: str

    @property
    def schedule_control(self) -> ScheduleControl: ...

    def _schedule_fields(self, *, unset: Any = None, **given: Any) -> dict[str, Any]: ...

    async def _check_registered(self, wf_type: str, workflow: Callable[..., Any] | str,
                                args: Any = None) -> Any: ...


async def check_scheduled_workflow(client: ScheduleClient, schedule_id: str, wf_type: str,
                                   workflow: Callable[..., Any] | str,
                                   args: Sequence[Any]) -> None:
    """Refuse, before anything is recorded, a new schedule whose workflow no
    worker registers or whose function does not take `args` (by name: as its
    live workers register it, `durable._embedded.check_start_arity`): every fire
    would fail. A schedule id already taken is said first, as the reference
    engine answers a duplicate id before anything else of the request (one
    read more, only when refusing)."""
    try:
        await client._check_registered(wf_type, workflow, args)
    except ConfigurationError as refused:
        try:
            await client.schedule_control.describe(schedule_id)
        except ScheduleNotFound:
            raise refused from None
        raise ScheduleAlreadyExists(schedule_id, client.namespace) from None


class ScheduleHandle:
    """One schedule of the client's namespace (`client.get_schedule(id)`).

    Every call is one transaction; the schedule's next fire is re-planned at
    once by the workers (a wake-up), whatever changed.
    """

    def __init__(self, client: ScheduleClient, schedule_id: str) -> None:
        self.client = client
        self.schedule_id = _validate.name(schedule_id, "schedule id")

    def __repr__(self) -> str:
        return f"ScheduleHandle(schedule_id={self.schedule_id!r})"

    @property
    def _control(self) -> ScheduleControl:
        return self.client.schedule_control

    async def describe(self) -> dict[str, Any]:
        """The schedule, its next fire times and its recent fires with their runs' status:
        ``{schedule_id, workflow_type, spec, overlap, paused, note, next_fire_at,
        next_fires, last_fired_at, fires_count, skipped_count, remaining_actions, input,
        running, recent: [{scheduled_at, workflow_id, run_id, status, outcome, ...}]}``."""
        return await self._control.describe(self.schedule_id)

    async def pause(self, note: str | None = None) -> None:
        """Stop firing until `resume()`; `note` says why (shown by describe())."""
        await self._control.pause(self.schedule_id, _note(note))

    async def resume(self, note: str | None = None) -> None:
        """Fire again, from the next fire time after now (fires that fell in
        the pause are not made up: `backfill()` does that)."""
        await self._control.resume(self.schedule_id, _note(note))

    async def trigger(self, overlap: Overlap | str | None = None) -> dict[str, Any]:
        """Fire now (the current second), under `overlap` (default: the schedule's);
        ``{outcome: started|buffered|skipped, scheduled_at, workflow_id, run_id,
        reason}``. A second trigger within the same second is that same fire."""
        return await self._control.trigger(self.schedule_id, _overlap(overlap))

    async def backfill(self, start: datetime.datetime, end: datetime.datetime,
                       overlap: Overlap | str | None = None) -> dict[str, Any]:
        """Fire for every fire time of the spec in [start, end), in order, under
        `overlap` (default: the schedule's); fire times that already fired are
        left alone. ``{fires, started, buffered, skipped, already_fired, results}``."""
        first = _utc_instant(start, "backfill start")
        last = _utc_instant(end, "backfill end")
        assert first is not None and last is not None
        if last <= first:
            raise ConfigurationError(f"backfill end ({end}) must be after start ({start})")
        return await self._control.backfill(self.schedule_id, first, last, _overlap(overlap))

    async def update(
        self,
        *,
        spec: ScheduleSpec = _UNSET,
        overlap: Overlap | str = _UNSET,
        args: Sequence[Any] = _UNSET,
        options: StartOptions = _UNSET,
        workflow: Callable[..., Any] | str = _UNSET,
        jitter: Seconds = _UNSET,
        catchup_window: Seconds = _UNSET,
        max_runs: int | None = _UNSET,
        note: str | None = _UNSET,
    ) -> None:
        """Change what is given, keep the rest. A new spec fires from its first
        fire time after now; `max_runs` sets how many more scheduled runs may
        start (None: no limit)."""
        changes = self.client._schedule_fields(
            spec=spec, overlap=overlap, args=args, options=options, workflow=workflow,
            jitter=jitter, catchup_window=catchup_window, max_runs=max_runs, note=note,
            unset=_UNSET)
        if not changes:
            return
        given = None if args is _UNSET else list(args)
        if workflow is not _UNSET:
            if given is None:  # the arguments it keeps must fit the new workflow
                given = list((await self.describe())["input"])
            await self.client._check_registered(changes["workflow_type"], workflow, given)
        elif given is not None:
            # new arguments for the workflow it starts: checked as create_schedule
            # checks them, against its definition when this process has it, else
            # as its live workers register it (its runs would fail with TypeError
            # at every fire); a type no live worker registers now is left to the
            # runs, as it was (the update does not change the type)
            stored = str((await self.describe())["workflow_type"])
            with contextlib.suppress(NameNotRegistered):
                await self.client._check_registered(stored, stored, given)
        await self._control.update(self.schedule_id, changes)

    async def delete(self) -> None:
        """Delete the schedule and its record of fires; runs it started go on."""
        await self._control.delete(self.schedule_id)


def _note(note: Any) -> str | None:
    if note is not None and not isinstance(note, str):
        raise ConfigurationError(f"a schedule note must be a string, got {note!r}")
    if note is not None and len(note) > 1000:
        raise ConfigurationError(f"a schedule note is at most 1000 characters, got {len(note)}")
    return note


def _overlap(value: Overlap | str | None) -> str | None:
    return None if value is None else str(_validate.choice(value, Overlap, "overlap"))
