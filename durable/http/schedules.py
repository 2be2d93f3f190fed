"""The control plane's schedule and retention routes, in the reference engine's shape.

``/api/schedules`` (list: `schedule_list`; create, describe, update, delete,
pause, resume, trigger, backfill) and ``/api/system/retention`` (+ ``/pass``), declared as
`routes.Operation`s like every other route (`app.py` mounts them, validates
against these schemas, and `openapi.py` publishes them). The shapes are the
reference server's ScheduleController / SystemController, with our own
fields beside theirs (`remote_schedules` translates both ways); each handler
is one call of the client's schedule or retention API, so the rules (exactly
one run per fire, bounded transactions) are the engine's, not this module's.
The retention routes need the ``admin`` role, as every reference ``/system``
route does (deleting history is not an operator's everyday act).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from ..clock import to_iso
from ..errors import ConfigurationError, PayloadRejected
from ..options import StartOptions
from ..schedules import (
    Overlap,
    ScheduleDefinition,
    ScheduleSpec,
    check_schedule_id,
    check_scheduled_workflow,
)
from . import avro, model
from .errors import HTTPError
from .remote_schedules import TRIGGER_OUTCOMES, schedule_to_wire, spec_from_wire
from .routes import (
    ANY_OBJECT,
    ERROR_SCHEMA,
    Call,
    Operation,
    Param,
    Reply,
    durable_rules,
    reference_refusal,
    rules_field,
    seconds,
    text,
)
from .schedule_list import list_operation
from .schema import check_schema

OVERLAPS = [o.value for o in Overlap]
SCHEDULE_ID = Param("scheduleId", "path", text(255, "The schedule id."), "The schedule id.",
                    required=True)
#: the reference engine's bounds (its ScheduleController's rules): a schedule id
#: of at most 128 characters, a jitter of 0 to 3600 whole seconds, history
#: pages clamped to 1..500 (100) (the list's: `schedule_list`)
REFERENCE_SCHEDULE_ID_MAX = 128
REFERENCE_JITTER_MAX = 3600
HISTORY_PAGE_MAX = 500
_ID_RULES = rules_field("schedule ids of up to 234 characters, any jitter")
_NULLABLE_TEXT = {"type": ["string", "null"]}
_OVERLAP = {"type": ["string", "null"], "enum": [*OVERLAPS, None],
            "description": "What a fire does while an earlier run is open (default skip)."}
_INTERVAL = {"type": "object", "properties": {
    "every": {"type": ["string", "integer"],
              "description": "ISO 8601 duration (PT1H) or whole seconds."},
    "offset": {"type": ["string", "integer", "null"]}}}

SPEC_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "description": "When it fires: the reference's cron_expressions / intervals, or ours "
                   "(cron, every, offset); timezone is an IANA name.",
    "properties": {
        "cron_expressions": {"type": ["array", "null"], "items": {"type": "string"},
                             "maxItems": 100},
        "intervals": {"type": ["array", "null"], "items": _INTERVAL, "maxItems": 1},
        "cron": {"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 100},
        "every": {"type": ["integer", "null"], "minimum": 1},
        "offset": {"type": ["integer", "null"], "minimum": 0},
        "timezone": {**_NULLABLE_TEXT, "maxLength": 64},
        "start_at": {**_NULLABLE_TEXT, "description": "ISO 8601 with an offset"},
        "end_at": {**_NULLABLE_TEXT, "description": "ISO 8601 with an offset"},
    },
}
ACTION_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "description": "What each fire starts.",
    "properties": {
        "workflow_type": text(1000, "The registered name of the workflow."),
        "task_queue": {**text(1000, "The task queue of the runs."), "type": ["string", "null"]},
        "input": {"type": ["array", "object", "null"], "maxItems": 10_000,
                  "description": "The workflow's positional arguments: an Avro envelope "
                                 "holding their list ({codec, blob}), or a JSON array."},
        "execution_timeout_seconds": seconds("Each run's execution timeout.", minimum=1),
        "run_timeout_seconds": seconds("Each run's run timeout.", minimum=1),
        # the reference takes these older names too
        "workflow_execution_timeout": seconds("execution_timeout_seconds's other name.",
                                              minimum=1),
        "workflow_run_timeout": seconds("run_timeout_seconds's other name.", minimum=1),
    },
}
_ALIASES = {"workflow_execution_timeout": "execution_timeout_seconds",
            "workflow_run_timeout": "run_timeout_seconds"}
_SETTINGS = {
    "overlap_policy": _OVERLAP,
    "jitter_seconds": seconds("Each fire starts up to this late (fixed per fire).",
                              minimum=0),
    "catchup_window_seconds": seconds("A fire missed while no worker ran starts if one is "
                                      "back within this long (default 3600).", minimum=1),
    "max_runs": {"type": ["integer", "null"], "minimum": 1,
                 "description": "How many more scheduled runs may start (null: no limit)."},
    "memo": {"type": ["object", "null"], "description": "The runs' memo."},
    "note": {**_NULLABLE_TEXT, "maxLength": 1000},
}
CREATE_BODY = check_schema({
    "type": "object", "required": ["spec", "action"], "additionalProperties": False,
    "properties": {
        "schedule_id": {**text(234, "Unique per namespace (default: a new id): at most "
                                    "128 characters, as the reference engine's; with "
                                    "rules durable, the SDK's 234."),
                        "type": ["string", "null"]},
        "spec": SPEC_SCHEMA,
        "action": {**ACTION_SCHEMA, "required": ["workflow_type"]},
        **_SETTINGS,
        "paused": {"type": ["boolean", "null"]},
        "search_attributes": {"type": ["object", "null"],
                              "description": "Accepted for the reference's clients; "
                                             "ignored."},
        "rules": _ID_RULES,
        "require_registered": {
            "type": "boolean", "default": True,
            "description": "Refuse (400 not_registered) a type no live worker registers."},
    },
})
UPDATE_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {"spec": SPEC_SCHEMA, "action": ACTION_SCHEMA, **_SETTINGS,
                   "search_attributes": {"type": ["object", "null"]}, "rules": _ID_RULES},
})
NOTE_BODY = check_schema({"type": "object", "additionalProperties": False,
                          "properties": {"note": {**_NULLABLE_TEXT, "maxLength": 1000}}})
TRIGGER_BODY = check_schema({"type": "object", "additionalProperties": False,
                             "properties": {"overlap_policy": _OVERLAP}})
BACKFILL_BODY = check_schema({
    "type": "object", "required": ["start_time", "end_time"], "additionalProperties": False,
    "properties": {"start_time": text(64, "ISO 8601 with an offset (included)."),
                   "end_time": text(64, "ISO 8601 with an offset (excluded)."),
                   "overlap_policy": _OVERLAP},
})
RETENTION_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "retention_seconds": seconds("Keep closed runs this long (null: the workers' "
                                     "retention applies).", minimum=1),
        "retention_days": {"type": ["number", "null"], "exclusiveMinimum": 0,
                           "maximum": 3650},
    },
})
PASS_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "older_than_seconds": seconds("Delete runs closed longer ago than this (default: "
                                      "the namespace's retention).", exclusive_minimum=0),
        "dry_run": {"type": "boolean", "default": False,
                    "description": "Only list what would be deleted."},
    },
})
OUTCOME_REPLY = {"type": "object", "required": ["schedule_id", "outcome"],
                 "properties": {"schedule_id": {"type": "string"},
                                "outcome": {"type": "string"}}}


def _instant(text_value: str, what: str) -> datetime.datetime:
    """A backfill bound: ISO 8601, a date or a date-time; without an offset it
    is UTC (the reference engine reads it in its UTC application time zone).
    Not a date: 422 naming the field, as the reference's ``date`` rule."""
    try:
        value = datetime.datetime.fromisoformat(text_value)
    except ValueError:
        raise reference_refusal(what, (
            f"{what} must be an ISO 8601 date or date-time such as 2026-04-01T00:00:00Z, "
            f"got {text_value!r}")) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value


def _spec(data: dict[str, Any]) -> ScheduleSpec:
    """Our spec from the wire's; one that does not make a schedule is 422 as the
    reference answers it: ``invalid_cron_expression`` naming
    ``spec.cron_expressions``, else ``invalid_schedule_spec`` naming ``spec``."""
    try:
        wire = spec_from_wire(data)
        if not wire["cron"] and wire["every"] is None:
            # (the SDK's words would name cron= and every=); a spec sent to
            # change only its time zone is the usual way to get here
            raise reference_refusal("spec", (
                "spec needs cron_expressions (e.g. [\"0 2 * * *\"]) or intervals (e.g. "
                "[{\"every\": \"PT1H\"}]); a spec is replaced whole, on update too: send "
                "them with the timezone"), "invalid_schedule_spec")
        return ScheduleSpec.from_dict(wire)
    except ConfigurationError as exc:
        message = str(exc)
        if "cron expression" in message:
            raise reference_refusal("spec.cron_expressions", message,
                                    "invalid_cron_expression") from None
        raise reference_refusal("spec", message, "invalid_schedule_spec") from None


def _check_reference_bounds(body: dict[str, Any], schedule_id: str | None) -> None:
    """Refuse what the reference engine's schedule routes refuse (422 naming the
    field), unless the request asks for the SDK's rules (``rules``), which
    take schedule ids of up to 234 characters and any jitter."""
    if durable_rules(body):
        return
    if schedule_id is not None and len(schedule_id) > REFERENCE_SCHEDULE_ID_MAX:
        raise reference_refusal("schedule_id", (
            f"schedule_id is {len(schedule_id)} characters long; the reference engine takes "
            f"at most {REFERENCE_SCHEDULE_ID_MAX}. Choose a shorter id, or send \"rules\": "
            "\"durable\" for durable's SDK's (at most 234)"))
    jitter = body.get("jitter_seconds")
    if jitter is not None and (jitter != int(jitter) or jitter > REFERENCE_JITTER_MAX):
        raise reference_refusal("jitter_seconds", (
            f"jitter_seconds must be a whole number of seconds from 0 to "
            f"{REFERENCE_JITTER_MAX} (the reference engine's bound), got {jitter!r}; send "
            "\"rules\": \"durable\" for durable's SDK's (any duration)"))


def _arguments(value: Any) -> list[Any]:
    try:
        return model.payload_in(value, "action.input")
    except avro.PayloadCodecError as exc:
        raise PayloadRejected(f"action.input: {exc}") from None


def _action(body: dict[str, Any]) -> dict[str, Any]:
    """The body's action, the reference's older timeout names read as the new
    ones (a new name given wins)."""
    action = dict(body.get("action") or {})
    for old, new in _ALIASES.items():
        value = action.pop(old, None)
        if value is not None and action.get(new) is None:
            action[new] = value
    return action


def _options(action: dict[str, Any], memo: Any) -> StartOptions:
    return StartOptions(execution_timeout=action.get("execution_timeout_seconds"),
                        run_timeout=action.get("run_timeout_seconds"),
                        memo=dict(memo or {}), task_queue=action.get("task_queue"))


# ---------------------------------------------------------------- schedules


async def create_schedule(call: Call) -> tuple[int, Any]:
    body = call.body
    client = call.client
    _check_reference_bounds(body, body.get("schedule_id"))
    try:
        schedule_id = check_schedule_id(body.get("schedule_id") or uuid.uuid4().hex)
    except ConfigurationError as exc:
        raise reference_refusal("schedule_id", str(exc)) from None
    action = _action(body)
    wf_type = action["workflow_type"]
    args = _arguments(action.get("input"))
    fields = client._schedule_fields(
        schedule_id=schedule_id, spec=_spec(body["spec"]),
        overlap=body.get("overlap_policy") or Overlap.SKIP,
        args=args, options=_options(action, body.get("memo")),
        workflow=wf_type, jitter=body.get("jitter_seconds") or 0,
        catchup_window=body.get("catchup_window_seconds") or 3600,
        max_runs=body.get("max_runs"), note=body.get("note"))
    if body.get("require_registered", True):
        # the name, and the arguments against its function as live workers
        # register it (each fire would fail with TypeError); a taken id first
        await check_scheduled_workflow(client, schedule_id, wf_type, wf_type, args)
    definition = ScheduleDefinition(paused=bool(body.get("paused")), **fields)
    await client.schedule_control.create(schedule_id, definition)
    return 201, {"schedule_id": schedule_id, "outcome": "created"}


async def describe_schedule(call: Call) -> tuple[int, Any]:
    info = await call.client.get_schedule(call.params["scheduleId"]).describe()
    return 200, schedule_to_wire(info)


async def update_schedule(call: Call) -> tuple[int, Any]:
    body = call.body
    _check_reference_bounds(body, None)
    handle = call.client.get_schedule(call.params["scheduleId"])
    changes: dict[str, Any] = {}
    for wire, key in (("overlap_policy", "overlap"), ("jitter_seconds", "jitter"),
                      ("catchup_window_seconds", "catchup_window"), ("note", "note")):
        if body.get(wire) is not None:
            changes[key] = body[wire]
    if "max_runs" in body:
        changes["max_runs"] = body["max_runs"]
    if body.get("spec") is not None:
        changes["spec"] = _spec(body["spec"])
    action = _action(body)
    if action.get("workflow_type"):
        changes["workflow"] = action["workflow_type"]
    if "input" in action:
        changes["args"] = _arguments(action.get("input"))
    run_keys = ("task_queue", "execution_timeout_seconds", "run_timeout_seconds")
    if any(k in action for k in run_keys) or "memo" in body:
        # the reference merges the action: what is not given is kept
        info = await handle.describe()
        kept = {"task_queue": info.get("task_queue"),
                "execution_timeout_seconds": info.get("execution_timeout"),
                "run_timeout_seconds": info.get("run_timeout")}
        kept.update({k: action[k] for k in run_keys if k in action})
        changes["options"] = _options(kept, body.get("memo"))
    await handle.update(**changes)
    return 200, {"schedule_id": handle.schedule_id, "outcome": "updated"}


async def delete_schedule(call: Call) -> tuple[int, Any]:
    await call.client.get_schedule(call.params["scheduleId"]).delete()
    return 200, {"schedule_id": call.params["scheduleId"], "outcome": "deleted"}


async def _note(call: Call) -> str | None:
    """A pause's or resume's note: the one sent, null included (our remote client
    sends null to clear it, as the SDK's pause() and resume() do); none sent
    keeps the schedule's own, as the reference keeps it (its client sends no
    note when given none: a note set at create was lost to a bare pause)."""
    if "note" in call.body:
        return call.body["note"]  # type: ignore[no-any-return]
    kept = (await call.client.get_schedule(call.params["scheduleId"]).describe())["note"]
    return None if kept is None else str(kept)


async def pause_schedule(call: Call) -> tuple[int, Any]:
    await call.client.get_schedule(call.params["scheduleId"]).pause(await _note(call))
    return 200, {"schedule_id": call.params["scheduleId"], "outcome": "paused"}


async def resume_schedule(call: Call) -> tuple[int, Any]:
    await call.client.get_schedule(call.params["scheduleId"]).resume(await _note(call))
    return 200, {"schedule_id": call.params["scheduleId"], "outcome": "resumed"}


async def trigger_schedule(call: Call) -> tuple[int, Any]:
    handle = call.client.get_schedule(call.params["scheduleId"])
    fire = await handle.trigger(call.body.get("overlap_policy"))
    outcome = TRIGGER_OUTCOMES[fire["outcome"]]
    if fire.get("reason") == "buffer_full":  # (the reference names this skip apart)
        outcome = "buffer_full"
    reply = {**fire, "schedule_id": call.params["scheduleId"], "outcome": outcome,
             "fire_outcome": fire["outcome"]}
    if fire["outcome"] == "buffered":  # the reference says how many fires wait
        reply["buffer_depth"] = (await handle.describe())["buffered_count"]
    return 200, reply


async def backfill_schedule(call: Call) -> tuple[int, Any]:
    body = call.body
    start = _instant(body["start_time"], "start_time")
    end = _instant(body["end_time"], "end_time")
    if end <= start:
        raise HTTPError(422, "invalid_time_range", (
            f"end_time must be after start_time (got {body['start_time']!r} to "
            f"{body['end_time']!r}): a backfill fires every fire time in [start_time, "
            "end_time)"), field="end_time")
    try:
        done = await call.client.get_schedule(call.params["scheduleId"]).backfill(
            start, end, body.get("overlap_policy"))
    except ConfigurationError as exc:  # a range with fire times to come, or too many
        raise HTTPError(422, "invalid_time_range", str(exc), field="end_time") from None
    results = [{**r, "fire_time": r["scheduled_at"]} for r in done["results"]]
    return 200, {**done, "results": results, "outcome": "backfill_started",
                 "fires_attempted": done["fires"]}


def _after_sequence(raw: str | None) -> int:
    """The history's ``after_sequence``: a whole number from 0 (absent: 0);
    else 422 ``invalid_after_sequence``, the reference's answer."""
    if raw is None or raw == "":
        return 0
    if raw.lstrip("-").isdigit() and int(raw) >= 0:
        return int(raw)
    raise HTTPError(422, "invalid_after_sequence",
                    f"after_sequence must be a non-negative integer, got {raw[:40]!r}",
                    field="after_sequence",
                    errors={"after_sequence": ["must be a non-negative integer"]})


async def schedule_history(call: Call) -> tuple[int, Any]:
    """The schedule's fires as the reference's schedule history events (oldest
    first, by sequence): what our record keeps, the recent fires and those still
    waiting or running (not an audit log of every change: a deleted schedule
    has none)."""
    info = await call.client.get_schedule(call.params["scheduleId"]).describe()
    after = _after_sequence(call.params.get("after_sequence"))
    # as the reference: a limit under 1 is the default, over 500 is 500
    limit = call.params["limit"]
    limit = 100 if limit < 1 else min(limit, HISTORY_PAGE_MAX)
    fires = sorted({f["seq"]: f for f in [*info["recent"], *info["buffered"]]}.values(),
                   key=lambda f: f["seq"])
    fresh = [f for f in fires if f["seq"] > after]
    page = fresh[:limit]
    events = [{
        "id": f"{info['schedule_id']}:{f['seq']}", "sequence": f["seq"],
        "event_type": ("ScheduleTriggerSkipped" if f["outcome"] == "skipped"
                       else "ScheduleTriggered"),
        "recorded_at": f["fired_at"], "workflow_instance_id": f["workflow_id"],
        "workflow_run_id": f["run_id"], "payload": f,
    } for f in page]
    more = len(fresh) > limit
    return 200, {"schedule_id": info["schedule_id"], "namespace": call.namespace,
                 "events": events, "has_more": more,
                 "next_cursor": page[-1]["seq"] if more and page else None}


# ---------------------------------------------------------------- retention


async def retention_status(call: Call) -> tuple[int, Any]:
    client = call.client
    settings = await client.get_retention()
    keep = settings["retention_seconds"]
    limit = call.params["limit"]
    expired: list[dict[str, Any]] = []
    cutoff = None
    if keep is not None:
        cutoff = client.clock.now() - keep
        expired = await client.store.expired_runs(call.namespace, cutoff, limit)
    return 200, {
        "namespace": call.namespace,
        "retention_days": None if keep is None else keep / 86400,
        "cutoff": to_iso(cutoff),
        "expired_run_count": len(expired),
        "expired_run_ids": [r["run_id"] for r in expired],
        "scan_limit": limit, "scan_pressure": len(expired) >= limit,
        **settings,
    }


async def set_retention(call: Call) -> tuple[int, Any]:
    body = call.body
    seconds_ = body.get("retention_seconds")
    if body.get("retention_days") is not None:
        if seconds_ is not None:
            raise ConfigurationError("give retention_seconds or retention_days, not both")
        seconds_ = body["retention_days"] * 86400
    await call.client.set_retention(days=None if seconds_ is None else seconds_ / 86400)
    return 200, {"namespace": call.namespace, "outcome": "updated",
                 "retention_seconds": seconds_}


async def retention_pass(call: Call) -> tuple[int, Any]:
    client = call.client
    older = call.body.get("older_than_seconds")
    if older is None:
        older = (await client.get_retention())["retention_seconds"]
    if older is None:
        raise ConfigurationError(
            f"namespace {call.namespace!r} has no retention setting: send "
            "older_than_seconds, or set one with PUT /api/system/retention")
    dry_run = bool(call.body.get("dry_run"))
    report = await client.prune(older, dry_run=dry_run)
    outcome = "would_prune" if dry_run else "pruned"
    results = [{"run_id": r["run_id"], "workflow_id": r["workflow_id"], "outcome": outcome,
                "history_events_deleted": 0 if dry_run else r.get("history_events", 0)}
               for r in report["runs"]]
    count = report.get("runs_expired", 0) if dry_run else report["runs_deleted"]
    return 200, {"processed": count, "pruned": 0 if dry_run else count, "skipped": 0,
                 "failed": 0, "results": results, "report": report}


# ---------------------------------------------------------------- the routes


def schedule_operations() -> list[Operation]:
    """The schedule and retention routes (appended to `routes.operations()`)."""
    tags = ("schedules",)
    by_id = (SCHEDULE_ID,)
    not_found = Reply(404, "schedule_not_found.", ERROR_SCHEMA)
    return [
        list_operation(),
        Operation(
            "POST", "/api/schedules", "createSchedule", "Create a schedule", create_schedule,
            "operator", tags=tags, body=CREATE_BODY, body_required=True,
            replies=(Reply(201, "{schedule_id, outcome: created}", OUTCOME_REPLY),
                     Reply(409, "schedule_already_exists.", ERROR_SCHEMA)),
        ),
        Operation(
            "GET", "/api/schedules/{scheduleId}", "describeSchedule",
            "A schedule: spec, policy, next fires, recent fires and their runs' status",
            describe_schedule, tags=tags, params=by_id,
            replies=(Reply(200, "The schedule.", ANY_OBJECT), not_found),
        ),
        Operation(
            "PUT", "/api/schedules/{scheduleId}", "updateSchedule",
            "Change what is given; keep the rest", update_schedule, "operator", tags=tags,
            params=by_id, body=UPDATE_BODY,
            replies=(Reply(200, "{schedule_id, outcome: updated}", OUTCOME_REPLY), not_found),
        ),
        Operation(
            "DELETE", "/api/schedules/{scheduleId}", "deleteSchedule",
            "Delete a schedule (its runs go on)", delete_schedule, "operator", tags=tags,
            params=by_id,
            replies=(Reply(200, "{schedule_id, outcome: deleted}", OUTCOME_REPLY), not_found),
        ),
        Operation(
            "POST", "/api/schedules/{scheduleId}/pause", "pauseSchedule", "Stop firing",
            pause_schedule, "operator", tags=tags, params=by_id, body=NOTE_BODY,
            replies=(Reply(200, "{schedule_id, outcome: paused}", OUTCOME_REPLY), not_found),
        ),
        Operation(
            "POST", "/api/schedules/{scheduleId}/resume", "resumeSchedule",
            "Fire again from the next fire time", resume_schedule, "operator", tags=tags,
            params=by_id, body=NOTE_BODY,
            replies=(Reply(200, "{schedule_id, outcome: resumed}", OUTCOME_REPLY), not_found),
        ),
        Operation(
            "POST", "/api/schedules/{scheduleId}/trigger", "triggerSchedule", "Fire now",
            trigger_schedule, "operator", tags=tags, params=by_id, body=TRIGGER_BODY,
            replies=(Reply(200, "outcome triggered | buffered | skipped (fire_outcome: "
                                "started | buffered | skipped), workflow_id, run_id, "
                                "scheduled_at, reason.", ANY_OBJECT), not_found),
        ),
        Operation(
            "POST", "/api/schedules/{scheduleId}/backfill", "backfillSchedule",
            "Fire every fire time in [start_time, end_time)", backfill_schedule, "operator",
            tags=tags, params=by_id, body=BACKFILL_BODY, body_required=True,
            replies=(Reply(200, "{outcome: backfill_started, fires_attempted, results, fires, "
                                "started, buffered, skipped, already_fired}", ANY_OBJECT),
                     not_found),
        ),
        Operation(
            "GET", "/api/schedules/{scheduleId}/history", "scheduleHistory",
            "The schedule's kept fires as history events, oldest first", schedule_history,
            tags=tags,
            params=(SCHEDULE_ID,
                    Param("limit", "query",
                          {"type": "integer", "minimum": -2_147_483_648,
                           "maximum": 2_147_483_647, "default": 100},
                          "At most this many events: under 1 reads 100, over 500 reads 500 "
                          "(the reference clamps it)."),
                    Param("after_sequence", "query", text(40, "A sequence."),
                          "Only events after this sequence (next_cursor), a whole number "
                          "from 0; else 422 invalid_after_sequence.")),
            replies=(Reply(200, "{schedule_id, namespace, events, has_more, next_cursor}",
                           ANY_OBJECT), not_found),
        ),
        Operation(
            "GET", "/api/system/retention", "retentionStatus",
            "The namespace's retention and the runs it would delete now", retention_status,
            "admin", tags=("system",),
            params=(Param("limit", "query",
                          {"type": "integer", "minimum": 1, "maximum": 100, "default": 100},
                          "List at most this many expired runs."),),
            replies=(Reply(200, "{namespace, retention_days, cutoff, expired_run_count, "
                                "expired_run_ids, scan_limit, scan_pressure, "
                                "retention_seconds, pruned, last_pruned_at}", ANY_OBJECT),),
        ),
        Operation(
            "PUT", "/api/system/retention", "setRetention",
            "Set how long the namespace keeps closed runs", set_retention, "admin",
            tags=("system",), body=RETENTION_BODY,
            replies=(Reply(200, "{namespace, outcome: updated, retention_seconds}",
                           ANY_OBJECT),),
        ),
        Operation(
            "POST", "/api/system/retention/pass", "retentionPass",
            "Delete (dry_run: list) the runs closed before the cutoff, now",
            retention_pass, "admin", tags=("system",), body=PASS_BODY,
            replies=(Reply(200, "{processed, pruned, skipped, failed, results, report}",
                           ANY_OBJECT),),
        ),
    ]
