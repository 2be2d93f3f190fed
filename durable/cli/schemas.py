"""The JSON shapes ``durable COMMAND --json`` prints, and a small validator for them.

A run (``start``, ``describe``, ``watch``), a page of runs (``list``), a
history and its events are not defined here: they are the HTTP wire's
(`durable.http.model`: ``RUN_SCHEMA``, ``LIST_SCHEMA``, ``HISTORY_SCHEMA``,
``EVENT_SCHEMA``), so ``durable --json`` and ``/api`` answer the same JSON.
The rest are the answers only the command line gives (receipts of signals,
updates and closes, the cascade, schedules, prune).

The shapes are a stable interface for scripts (docs/cli.md, "JSON output"):
keys listed as required are always present (with ``null`` when unset);
objects marked closed (``additionalProperties: False``) never gain keys
without a note in the changelog; the open ones (the cascade's runs) are the
client's own dicts, which newer engines extend. Instants are ISO 8601
strings with a UTC offset.

The schemas use a subset of JSON Schema (type, properties, required,
additionalProperties, items, enum, format "date-time") so that the test suite
can check them without a JSON Schema library; `validate` implements exactly
that subset.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..http import model

Schema = dict[str, Any]

ANY: Schema = {}
STRING: Schema = {"type": "string"}
NULLABLE_STRING: Schema = {"type": ["string", "null"]}
INTEGER: Schema = {"type": "integer"}
NULLABLE_NUMBER: Schema = {"type": ["number", "null"]}
BOOLEAN: Schema = {"type": "boolean"}
INSTANT: Schema = {"type": "string", "format": "date-time"}
NULLABLE_INSTANT: Schema = {"type": ["string", "null"], "format": "date-time"}
NULLABLE_OBJECT: Schema = {"type": ["object", "null"]}

STATUSES = list(model.DURABLE_STATUSES)  # ours: the receipts below say timed_out


def obj(properties: Mapping[str, Schema], *, closed: bool = True,
        optional: tuple[str, ...] = ()) -> Schema:
    """An object whose listed properties are all required (except `optional`)."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": [k for k in properties if k not in optional],
        "additionalProperties": not closed,
    }


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


STATUS: Schema = {"type": "string", "enum": STATUSES}

RESULT = obj({
    "workflow_id": STRING, "run_id": NULLABLE_STRING, "status": STATUS, "result": ANY,
    "failure": NULLABLE_OBJECT,
})

CONTEXT = obj({
    "request_id": STRING, "root_request_id": STRING, "parent_request_id": NULLABLE_STRING,
    "reason": STRING, "requester": NULLABLE_OBJECT, "source": STRING,
    "requested_at": INSTANT, "deadline": INSTANT,
    "lineage": array(array(NULLABLE_STRING)),
    "root_workflow_id": NULLABLE_STRING, "root_run_id": NULLABLE_STRING,
}, closed=False)

#: ``status`` and ``cancellation`` (describe()'s record) are read for a repeat
#: only (``accepted`` false), so that a run closed since shows as closed
REQUEST_CANCELLATION = obj({"workflow_id": STRING, "accepted": BOOLEAN, "context": CONTEXT,
                            "status": {"type": ["string", "null"], "enum": [*STATUSES, None]},
                            "cancellation": NULLABLE_OBJECT})

CLOSE = obj({
    "workflow_id": STRING, "run_id": STRING,
    "action": {"type": "string", "enum": ["cancelled", "terminated"]},
    "status": STATUS, "reason": STRING,
})

STOP = obj({
    "task_id": STRING, "op_id": STRING, "activity_type": STRING, "policy": NULLABLE_STRING,
    "fence": {"type": "object"}, "stop_requested_at": NULLABLE_INSTANT,
    "stop_receipt": NULLABLE_OBJECT, "acknowledged_at": NULLABLE_INSTANT,
    "received_after_deadline": {"type": ["boolean", "null"]},
    "state": {"type": "string", "enum": ["completed", "stopped", "signalled", "stopping",
                                                "unverified"]},
}, closed=False)

CASCADE_RUN = obj({
    "workflow_id": STRING, "run_id": STRING, "workflow_type": STRING, "status": STATUS,
    "lifecycle": STRING, "request": NULLABLE_OBJECT, "delivery": NULLABLE_OBJECT,
    "cleanup_outcome": NULLABLE_STRING, "deadline_at": NULLABLE_INSTANT,
    "activity_stops": array(STOP), "child_propagation": {"type": "object"},
}, closed=False)

CASCADE = obj({
    "workflow_id": STRING, "root": NULLABLE_OBJECT, "inspection_complete": BOOLEAN,
    "truncated": BOOLEAN,
    "findings": array(obj({"workflow_id": STRING, "run_id": STRING, "finding": STRING},
                          closed=False)),
    "runs": array(CASCADE_RUN),
    "edges": array(obj({
        "parent_workflow_id": STRING, "parent_run_id": STRING, "child_workflow_id": STRING,
        "child_run_id": STRING, "policy": NULLABLE_STRING,
    }, closed=False)),
}, closed=False)

REPAIR_PASS = obj({"repaired": {"type": "object", "additionalProperties": INTEGER},
                   "total": INTEGER})

#: ``repair-pass --dry-run``: `durable.store.deadlines.overdue`
OVERDUE = obj({
    "runs": {"type": "object", "additionalProperties": INTEGER},
    "activity_attempts": {"type": "object", "additionalProperties": INTEGER},
    "run_ids": array(STRING), "attempt_ids": array(STRING),
    "oldest_due_at": NULLABLE_INSTANT, "oldest_overdue_seconds": NULLABLE_NUMBER,
    "scan_limit": INTEGER, "scan_pressure": BOOLEAN,
})

REVIEW = obj({"workflow_id": STRING, "cleared": BOOLEAN,
              "units": {"type": ["string", "null"], "enum": ["rerun", "confirm", None]}})
SIGNAL = obj({"workflow_id": STRING, "run_id": NULLABLE_STRING, "signal": STRING,
              "recorded": BOOLEAN})
QUERY = obj({"workflow_id": STRING, "query": STRING, "result": ANY})
UPDATE = obj({"workflow_id": STRING, "update": STRING, "update_id": STRING, "result": ANY})

# ---- durable schedule ... and durable prune (the client's dicts: open, like describe)

SCHEDULE_SPEC = obj({
    "cron": array(STRING), "every": {"type": ["integer", "null"]}, "offset": INTEGER,
    "timezone": STRING, "start_at": NULLABLE_INSTANT, "end_at": NULLABLE_INSTANT,
}, closed=False)

SCHEDULE_FIRE = obj({
    "scheduled_at": INSTANT, "outcome": {"type": "string",
                                         "enum": ["started", "buffered", "skipped"]},
    "workflow_id": NULLABLE_STRING, "run_id": NULLABLE_STRING,
}, closed=False)

SCHEDULE_SUMMARY = obj({
    "schedule_id": STRING, "namespace": STRING, "workflow_type": STRING,
    "spec": SCHEDULE_SPEC, "overlap": STRING, "paused": BOOLEAN, "note": NULLABLE_STRING,
    "next_fire_at": NULLABLE_INSTANT, "last_fired_at": NULLABLE_INSTANT,
    "fires_count": INTEGER, "skipped_count": INTEGER,
    "remaining_actions": {"type": ["integer", "null"]},
}, closed=False)

SCHEDULE_LIST = obj({"schedules": array(SCHEDULE_SUMMARY), "count": INTEGER,
                     "next_cursor": NULLABLE_STRING})

SCHEDULE_DESCRIBE = obj({
    **SCHEDULE_SUMMARY["properties"], "next_fires": array(INSTANT),
    "running": array(STRING), "recent": array(SCHEDULE_FIRE),
}, closed=False)

SCHEDULE_ACTION = obj({"schedule_id": STRING, "action": STRING})

SCHEDULE_TRIGGER = obj({"schedule_id": STRING, **SCHEDULE_FIRE["properties"]}, closed=False)

SCHEDULE_BACKFILL = obj({
    "schedule_id": STRING, "fires": INTEGER, "started": INTEGER, "buffered": INTEGER,
    "skipped": INTEGER, "already_fired": INTEGER, "results": array(SCHEDULE_FIRE),
})

PRUNE = obj({
    "namespace": STRING, "cutoff": INSTANT, "dry_run": BOOLEAN,
    "runs": array(obj({"run_id": STRING, "workflow_id": STRING, "status": STATUS,
                       "closed_at": NULLABLE_INSTANT}, closed=False)),
    "runs_deleted": INTEGER, "deleted": {"type": "object", "additionalProperties": INTEGER},
    "runs_expired": INTEGER,
}, optional=("runs_expired",))

RETENTION = obj({
    "namespace": STRING, "retention_seconds": {"type": ["number", "null"]},
    "pruned": {"type": "object", "additionalProperties": INTEGER},
    "last_pruned_at": NULLABLE_INSTANT,
    # after --set shorter than before (or under 1h with --yes): what the next pass deletes
    "runs_to_delete": INTEGER,
}, optional=("runs_to_delete",))

#: The shape each command prints with --json. ``history --follow --json`` and
#: ``watch --json`` print JSON Lines: one ``history_event`` / ``describe``
#: object per line.
SCHEMAS: dict[str, Schema] = {
    "start": model.RUN_SCHEMA,
    "list": model.LIST_SCHEMA,
    "describe": model.RUN_SCHEMA,
    "history": model.HISTORY_SCHEMA,
    "history_event": model.EVENT_SCHEMA,
    "result": RESULT,
    "request-cancellation": REQUEST_CANCELLATION,
    "cancel": CLOSE,
    "terminate": CLOSE,
    "cascade": CASCADE,
    "watch": model.RUN_SCHEMA,
    "repair-pass": REPAIR_PASS,
    "repair-pass --dry-run": OVERDUE,
    "retry-after-review": REVIEW,
    "signal": SIGNAL,
    "query": QUERY,
    "update": UPDATE,
    "schedule create": SCHEDULE_DESCRIBE,
    "schedule update": SCHEDULE_DESCRIBE,
    "schedule describe": SCHEDULE_DESCRIBE,
    "schedule list": SCHEDULE_LIST,
    "schedule pause": SCHEDULE_ACTION,
    "schedule resume": SCHEDULE_ACTION,
    "schedule delete": SCHEDULE_ACTION,
    "schedule trigger": SCHEDULE_TRIGGER,
    "schedule backfill": SCHEDULE_BACKFILL,
    "prune": PRUNE,
    "retention": RETENTION,
}

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


def _is(value: Any, type_name: str) -> bool:
    if type_name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[type_name])


def validate(value: Any, schema: Schema, path: str = "$") -> list[str]:
    """Every way `value` departs from `schema`, as ``path: problem`` lines."""
    errors: list[str] = []
    if "anyOf" in schema:
        branches = [validate(value, s, path) for s in schema["anyOf"]]
        if all(branches):
            errors.append(f"{path}: matches none of the allowed shapes "
                          f"({'; '.join(b[0] for b in branches)})")
        return errors
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is(value, t) for t in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__} "
                    f"{value!r:.60}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if schema.get("format") == "date-time" and isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            errors.append(f"{path}: {value!r} is not an ISO 8601 instant")
        else:
            if parsed.tzinfo is None:
                errors.append(f"{path}: {value!r} has no UTC offset")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing key {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                errors += validate(item, properties[key], f"{path}.{key}")
            elif extra is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errors += validate(item, extra, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{index}]")
    return errors
