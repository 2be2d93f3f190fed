"""Schedules and retention on the wire: their shapes, and the remote client's planes.

The control plane serves `/api/schedules` and `/api/system/retention` in the
reference engine's shape (`durable-workflow/server`'s ScheduleController and
SystemController): ``status`` active | paused, ``overlap_policy``,
``jitter_seconds``, ``spec.cron_expressions`` / ``spec.intervals`` (ISO 8601
durations), ``action`` {workflow_type, task_queue, input, timeouts},
``outcome`` on every write. Our own fields (those of `ScheduleHandle.describe()`)
ride along under their own names, never changing the meaning of theirs; the
functions here translate both ways, so that `RemoteSchedules` (a
`ScheduleControl`) and `RemoteRetention` (a `RetentionControl`) give a client
connected with ``durable.connect("http://...")`` the same dicts as an
embedded one. Nothing here imports the server's packages (httpx is enough).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Protocol

from .._registry import workflow_defn_of
from ..errors import ConfigurationError, ScheduleAlreadyExists, ScheduleNotFound
from .errors import ControlPlaneError
from .paths import quote_segment

if TYPE_CHECKING:
    from ..schedules import ScheduleDefinition


class RemoteControl(Protocol):
    """What the planes here use of `durable.http.remote.RemoteControl` (named by
    a protocol, so that this module and remote.py do not import each other)."""

    namespace: str

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: dict[str, Any] | None = None,
                    read_timeout: float | None = None) -> tuple[int, Any]: ...

    def for_namespace(self, namespace: str) -> RemoteControl: ...

#: the keys of our spec (`ScheduleSpec.to_dict()`)
SPEC_KEYS = ("cron", "every", "offset", "timezone", "start_at", "end_at")
#: keys the wire adds for the reference engine's clients (dropped on the way back)
REFERENCE_KEYS = ("status", "overlap_policy", "jitter_seconds", "action", "failures_count",
                  "latest_workflow_instance_id", "paused_at", "info", "state",
                  "search_attributes")
#: the most schedules a page of ``GET /api/schedules`` holds (the reference's
#: bound); `RemoteSchedules.list` reads a longer page in pages of it
LIST_PAGE_MAX = 200
#: how a fire's outcome reads in the reference's trigger answer
TRIGGER_OUTCOMES = {"started": "triggered", "buffered": "buffered", "skipped": "skipped"}

_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)S)?)?$")


def iso_duration(seconds: int) -> str:
    """Whole seconds as an ISO 8601 duration, ``PT3600S``."""
    return f"PT{int(seconds)}S"


def parse_duration(value: Any, what: str) -> int:
    """Seconds from an ISO 8601 duration (``PT1H``, ``P1DT30M``, ``PT90S``) or a
    whole number of seconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().upper()
        if text.isdigit():
            return int(text)
        match = _ISO_DURATION.match(text)
        if match and text not in ("P", "PT") and not text.endswith("T"):
            parts = {k: int(v or 0) for k, v in match.groupdict().items()}
            return parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    raise ConfigurationError(
        f"{what} must be an ISO 8601 duration such as 'PT1H', 'PT15M' or 'P1D' (or whole "
        f"seconds), got {value!r}")


def spec_to_wire(spec: dict[str, Any]) -> dict[str, Any]:
    """Our spec dict, plus the reference's ``cron_expressions`` and ``intervals``."""
    out = dict(spec)
    out["cron_expressions"] = list(spec.get("cron") or ())
    every = spec.get("every")
    out["intervals"] = [] if not every else [
        {"every": iso_duration(every), "offset": iso_duration(spec.get("offset") or 0)}]
    return out


def spec_from_wire(data: dict[str, Any]) -> dict[str, Any]:
    """A spec dict (`ScheduleSpec.from_dict`) from either shape: ours (``cron``,
    ``every``, ``offset``) or the reference's (``cron_expressions``, ``intervals``)."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"spec must be an object, got {data!r}")
    cron = data.get("cron")
    if cron is None:
        cron = data.get("cron_expressions")
    every = data.get("every")
    offset = data.get("offset")
    intervals = data.get("intervals")
    if every is None and intervals:
        if not isinstance(intervals, list) or len(intervals) != 1 or not isinstance(
                intervals[0], dict):
            raise ConfigurationError(
                "spec.intervals holds at most one interval here ({'every': 'PT1H', "
                "'offset': 'PT15M'}); use cron_expressions for more")
        every = intervals[0].get("every")
        offset = intervals[0].get("offset")
    return {
        "cron": list(cron) if isinstance(cron, list) else cron,
        "every": None if every is None else parse_duration(every, "spec interval every"),
        "offset": 0 if offset is None else parse_duration(offset, "spec interval offset"),
        "timezone": data.get("timezone") or "UTC",
        "start_at": data.get("start_at"), "end_at": data.get("end_at"),
    }


def schedule_to_wire(info: dict[str, Any]) -> dict[str, Any]:
    """A schedule (describe() or a list summary) with the reference's fields added."""
    out = dict(info)
    out["spec"] = spec_to_wire(info.get("spec") or {})
    # the reference's statuses are active and paused (its deleted is gone): an
    # ended schedule (`ended`, ours) keeps its own, and the reference's fields
    # say it fires no more: no next_fire_at nor info.next_fire, remaining_actions 0
    out["status"] = "paused" if info.get("paused") else "active"
    out["state"] = {"status": out["status"], "paused": bool(info.get("paused")),
                    "note": info.get("note")}
    out["overlap_policy"] = info.get("overlap")
    out["jitter_seconds"] = _whole(info.get("jitter"))
    out["action"] = {
        "workflow_type": info.get("workflow_type"), "task_queue": info.get("task_queue"),
        "execution_timeout_seconds": _whole(info.get("execution_timeout")),
        "run_timeout_seconds": _whole(info.get("run_timeout")),
    }
    out["failures_count"] = 0
    out["paused_at"] = None  # (not kept here)
    out["search_attributes"] = {}  # (accepted on create, not kept)
    if "skipped_count" in info:
        out["info"] = {"next_fire": info.get("next_fire_at"),
                       "last_fire": info.get("last_fired_at"),
                       "fires_count": info.get("fires_count"), "failures_count": 0,
                       "skipped_trigger_count": info.get("skipped_count"),
                       "last_skip_reason": info.get("last_skip_reason"),
                       "last_skipped_at": info.get("last_skipped_at")}
    latest = info.get("last_fire") or next(
        (f for f in info.get("recent") or () if f.get("workflow_id")), None)
    out["latest_workflow_instance_id"] = (latest or {}).get("workflow_id")
    return out


def _whole(seconds: Any) -> Any:
    """Whole seconds as the reference's integer (its client's fields are int); a
    fraction (the SDK's) stays."""
    return int(seconds) if isinstance(seconds, float) and seconds.is_integer() else seconds


def schedule_from_wire(data: dict[str, Any]) -> dict[str, Any]:
    """What `schedule_to_wire` was given: the reference's fields dropped."""
    out = {k: v for k, v in data.items() if k not in REFERENCE_KEYS}
    spec = data.get("spec") or {}
    out["spec"] = {k: spec.get(k) for k in SPEC_KEYS}
    return out


def _segment(value: str) -> str:
    return quote_segment(value)


def _translate(exc: ControlPlaneError, schedule_id: str, namespace: str) -> Exception:
    """A server whose error table lacks the schedule errors still answers with their
    codes (``reason`` in the reference's body): the same classes as embedded."""
    translated: Exception
    if exc.code == "schedule_not_found":
        translated = ScheduleNotFound(str(exc))
    elif exc.code == "schedule_already_exists":
        translated = ScheduleAlreadyExists(schedule_id, namespace)
    else:
        return exc
    translated.args = exc.args
    return translated


class RemoteSchedules:
    """`ScheduleControl` over HTTP: the schedules of the remote client's namespace."""

    def __init__(self, control: RemoteControl) -> None:
        self.control = control

    async def _call(self, method: str, path: str, schedule_id: str = "",
                    **kwargs: Any) -> Any:
        try:
            _, data = await self.control._call(method, "/api/schedules" + path, **kwargs)
        except ControlPlaneError as exc:
            raise _translate(exc, schedule_id, self.control.namespace) from None
        return data

    def _path(self, schedule_id: str, action: str = "") -> str:
        return f"/{_segment(schedule_id)}" + (f"/{action}" if action else "")

    async def create(self, schedule_id: str, definition: ScheduleDefinition) -> None:
        options = definition.start_options
        memo = options.get("memo")
        body = {
            "schedule_id": schedule_id,
            "spec": spec_to_wire(definition.spec.to_dict()),
            "action": {
                "workflow_type": definition.workflow_type,
                "task_queue": definition.task_queue,
                "input": json.loads(definition.input),
                "execution_timeout_seconds": options.get("execution_timeout"),
                "run_timeout_seconds": options.get("run_timeout"),
            },
            "memo": None if memo is None else json.loads(memo),
            "overlap_policy": str(definition.overlap),
            "jitter_seconds": definition.jitter,
            "catchup_window_seconds": definition.catchup_window,
            "max_runs": definition.max_runs,
            "paused": definition.paused,
            "note": definition.note,
            # the client checked a workflow function it imports, as an embedded
            # client does (it needs no live worker); a name it does not import
            # the plane checks, arguments included, against its live workers'
            # definitions (which a remote client cannot read)
            "require_registered": workflow_defn_of(definition.workflow_type) is None,
            # the SDK's ids and jitter, not only the reference engine's (checked here)
            "rules": "durable",
        }
        await self._call("POST", "", schedule_id, body=body)

    async def describe(self, schedule_id: str) -> dict[str, Any]:
        data = await self._call("GET", self._path(schedule_id), schedule_id)
        return schedule_from_wire(data)

    async def list(self, limit: int, cursor: str | None = None, *, paused: bool | None = None,
                   workflow_type: str | None = None,
                   query: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        params: dict[str, Any] = {}
        for name, value in (("workflow_type", workflow_type), ("query", query),
                            ("status", None if paused is None else
                             "paused" if paused else "active")):
            if value is not None:
                params[name] = value
        # The server pages by at most LIST_PAGE_MAX (the reference's bound); a
        # larger `limit` (the Python API takes up to 10000) is read page after page.
        items: list[dict[str, Any]] = []
        while True:
            data = await self._call("GET", "", params={
                **params, "page_size": min(LIST_PAGE_MAX, limit - len(items)),
                **({"next_page_token": cursor} if cursor else {})})
            items += [schedule_from_wire(item) for item in data["schedules"]]
            cursor = data.get("next_page_token")
            if not cursor or len(items) >= limit:
                return items, cursor

    async def pause(self, schedule_id: str, note: str | None) -> None:
        await self._call("POST", self._path(schedule_id, "pause"), schedule_id,
                         body={"note": note})

    async def resume(self, schedule_id: str, note: str | None) -> None:
        await self._call("POST", self._path(schedule_id, "resume"), schedule_id,
                         body={"note": note})

    async def trigger(self, schedule_id: str, overlap: str | None) -> dict[str, Any]:
        data = await self._call("POST", self._path(schedule_id, "trigger"), schedule_id,
                                body={"overlap_policy": overlap})
        out = {k: v for k, v in data.items() if k not in ("schedule_id", "fire_outcome")}
        out["outcome"] = data["fire_outcome"]
        return out

    async def backfill(self, schedule_id: str, start: float, end: float,
                       overlap: str | None) -> dict[str, Any]:
        data = await self._call("POST", self._path(schedule_id, "backfill"), schedule_id,
                                body={"start_time": _iso(start), "end_time": _iso(end),
                                      "overlap_policy": overlap})
        keys = ("schedule_id", "fires", "started", "buffered", "skipped", "already_fired")
        out = {k: data[k] for k in keys}
        out["results"] = [{k: v for k, v in r.items() if k != "fire_time"}
                          for r in data["results"]]
        return out

    async def update(self, schedule_id: str, changes: dict[str, Any]) -> None:
        body: dict[str, Any] = {}
        for key, wire in (("overlap", "overlap_policy"), ("jitter", "jitter_seconds"),
                          ("catchup_window", "catchup_window_seconds"),
                          ("max_runs", "max_runs"), ("note", "note")):
            if key in changes:
                body[wire] = str(changes[key]) if key == "overlap" else changes[key]
        if "spec" in changes:
            body["spec"] = spec_to_wire(changes["spec"].to_dict())
        action: dict[str, Any] = {}
        if "workflow_type" in changes:
            action["workflow_type"] = changes["workflow_type"]
        if "input" in changes:
            action["input"] = json.loads(changes["input"])
        if "start_options" in changes:
            options = changes["start_options"]
            action.update(task_queue=changes.get("task_queue"),
                          execution_timeout_seconds=options.get("execution_timeout"),
                          run_timeout_seconds=options.get("run_timeout"))
            memo = options.get("memo")
            body["memo"] = None if memo is None else json.loads(memo)
        if action:
            body["action"] = action
        body["rules"] = "durable"  # (the SDK's jitter, checked here)
        await self._call("PUT", self._path(schedule_id), schedule_id, body=body)

    async def delete(self, schedule_id: str) -> None:
        await self._call("DELETE", self._path(schedule_id), schedule_id)


class RemoteRetention:
    """`RetentionControl` over HTTP (``/api/system/retention``)."""

    def __init__(self, control: RemoteControl) -> None:
        self.control = control

    async def set(self, namespace: str, seconds: float | None) -> None:
        await self.control.for_namespace(namespace)._call(
            "PUT", "/api/system/retention", body={"retention_seconds": seconds})

    async def get(self, namespace: str) -> dict[str, Any]:
        _, data = await self.control.for_namespace(namespace)._call(
            "GET", "/api/system/retention")
        return {k: data[k] for k in ("namespace", "retention_seconds", "pruned",
                                     "last_pruned_at")}

    async def prune(self, older_than: float, dry_run: bool) -> dict[str, Any]:
        _, data = await self.control._call(
            "POST", "/api/system/retention/pass",
            body={"older_than_seconds": older_than, "dry_run": dry_run})
        report: dict[str, Any] = data["report"]
        return report


def _iso(instant: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(instant, datetime.UTC).isoformat()
