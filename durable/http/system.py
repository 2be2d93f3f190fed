"""Operator routes of the reference engine's contract: namespaces and the repair pass.

`GET /api/namespaces`, `GET /api/namespaces/{name}`, `POST /api/namespaces`,
`PUT /api/namespaces/{name}`, `POST /api/system/repair/pass`, and the
reference's read-only `GET /api/system/repair` (how deadlines are enforced
here, and those passed and not enforced yet) and `GET
/api/system/activity-timeouts` with its `POST .../pass` need the
``admin`` role (ours: ``viewer`` < ``operator`` < ``admin``), as the
reference's writes do. A namespace here is a name that holds something
(runs, workers, schedules or settings; `durable.store.namespaces`); every
request may still act in any namespace its token allows, so creating one
is optional: it gives the namespace a description and a retention before
anything runs in it. A namespace's ``retention_days`` is its retention
setting (`client.set_retention`): the runs closed longer ago are deleted.
Workers and task queues are in `queues.py`.
"""

from __future__ import annotations

from typing import Any

from ..store.namespaces import NamespaceAlreadyExists, NoSuchNamespace
from .errors import HTTPError, NamespaceNotFound
from .routes import (
    ANY_OBJECT,
    ERROR_SCHEMA,
    Call,
    Operation,
    Param,
    Reply,
    Schema,
    check_schema,
    text,
)

_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
NAMESPACE: Schema = {
    "type": "object", "required": ["name", "status"],
    "properties": {
        "name": {"type": "string"}, "description": {"type": ["string", "null"]},
        "retention_days": {"type": ["number", "null"]},
        "status": {"type": "string", "enum": ["active"]},
        "external_payload_storage": {"type": "null"},
        "created_at": {"type": ["string", "null"]},
        "updated_at": {"type": ["string", "null"]},
        "run_count": {"type": "integer", "description": "Extension: runs stored."},
        "open_run_count": {"type": "integer", "description": "Extension: runs still open."},
    },
}
_DESCRIPTION = {"type": ["string", "null"], "maxLength": 1000,
                "description": "What the namespace is for."}
_RETENTION_DAYS = {"type": ["integer", "null"], "minimum": 1, "maximum": 3650,
                   "description": "Delete runs closed longer ago than this many days "
                                  "(null: the workers' retention applies)."}
CREATE_BODY = check_schema({
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": _NAME_PATTERN,
                 "description": "1 to 128 letters, digits, '.', '_', ':' or '-', starting "
                                "with a letter or digit (what X-Namespace takes)."},
        "description": _DESCRIPTION, "retention_days": _RETENTION_DAYS,
    },
})
UPDATE_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {"description": _DESCRIPTION, "retention_days": _RETENTION_DAYS},
})
NAME_PARAM = Param("namespace", "path", text(128, "The namespace's name."),
                   "The namespace's name.", required=True)


def _days(seconds: float | None) -> float | int | None:
    if seconds is None:
        return None
    days = seconds / 86400
    return int(days) if days == int(days) else days


def _allowed(call: Call, name: str) -> None:
    """403 unless the token may act in `name` (a token limited to namespaces
    names them; the request's X-Namespace was checked already)."""
    if call.namespaces is not None and name not in call.namespaces:
        raise HTTPError(403, "forbidden",
                        f"this token may act in the namespaces "
                        f"{', '.join(sorted(call.namespaces))} only, not in {name!r}",
                        namespace=name)


async def _namespaces(call: Call) -> list[dict[str, Any]]:
    found = await call.client.store.namespaces()
    if call.namespaces is not None:  # a limited token sees its own only
        found = [item for item in found if item["name"] in call.namespaces]
    if "default" not in {item["name"] for item in found} and (
            call.namespaces is None or "default" in call.namespaces):
        found.insert(0, {"name": "default", "run_count": 0, "open_run_count": 0,
                         "created_at": None, "updated_at": None, "description": None,
                         "retention_seconds": None})
        found.sort(key=lambda item: str(item["name"]))  # by name, as listed
    return [{"name": item["name"], "description": item["description"],
             "retention_days": _days(item["retention_seconds"]), "status": "active",
             "external_payload_storage": None, "created_at": item["created_at"],
             "updated_at": item["updated_at"], "run_count": item["run_count"],
             "open_run_count": item["open_run_count"]} for item in found]


async def _one(call: Call, name: str) -> dict[str, Any]:
    _allowed(call, name)
    for item in await _namespaces(call):
        if item["name"] == name:
            return item
    raise NamespaceNotFound(f"no namespace {name!r}: nothing was stored in it")


async def list_namespaces(call: Call) -> tuple[int, Any]:
    return 200, {"namespaces": await _namespaces(call)}


async def describe_namespace(call: Call) -> tuple[int, Any]:
    return 200, await _one(call, call.params["namespace"])


async def create_namespace(call: Call) -> tuple[int, Any]:
    body = call.body
    name: str = body["name"]
    _allowed(call, name)
    days = body.get("retention_days")
    try:
        await call.client.store.create_namespace(
            name, body.get("description"), None if days is None else days * 86400.0,
            call.client.clock.now())
    except NamespaceAlreadyExists:
        raise HTTPError(409, "namespace_already_exists",
                        f"namespace {name!r} already exists (it holds runs, workers, "
                        "schedules or settings); change it with PUT /api/namespaces/{name}",
                        namespace=name) from None
    return 201, await _one(call, name)


async def update_namespace(call: Call) -> tuple[int, Any]:
    name: str = call.params["namespace"]
    _allowed(call, name)
    body = call.body
    # as the reference: a field left out or null is left as it is
    fields: dict[str, Any] = {}
    if body.get("description") is not None:
        fields["description"] = body["description"]
    if body.get("retention_days") is not None:
        fields["retention_seconds"] = body["retention_days"] * 86400.0
    try:
        if fields:
            await call.client.store.update_namespace(name, fields, call.client.clock.now())
    except NoSuchNamespace as exc:
        raise NamespaceNotFound(str(exc)) from None
    return 200, await _one(call, name)


async def repair_pass(call: Call) -> tuple[int, Any]:
    counts = await call.client.control.repair_pass()
    return 200, {"namespace": call.namespace, "counts": counts,
                 "repaired": sum(counts.values())}


#: how deadlines are enforced here (the reference's repair policy, in our terms)
REPAIR_POLICY = {
    "enforced_by": "watchdog",
    "description": "every worker's watchdog enforces each deadline of its namespace as it "
                   "falls due: execution and run timeouts, cleanup deadlines, activity "
                   "timeouts, and the leases of workers that stopped renewing; POST "
                   "/api/system/repair/pass enforces what is due once, with no worker "
                   "running",
    "pass_scan_limit": 500,
}


async def repair_status(call: Call) -> tuple[int, Any]:
    return 200, {"namespace": call.namespace, "policy": REPAIR_POLICY,
                 "candidates": await call.client.control.overdue()}


async def activity_timeout_status(call: Call) -> tuple[int, Any]:
    found = await call.client.control.overdue()
    ids = found["attempt_ids"]
    return 200, {"namespace": call.namespace, "expired_count": len(ids),
                 "expired_execution_ids": ids, "scan_limit": found["scan_limit"],
                 "scan_pressure": found["scan_pressure"],
                 "by_kind": found["activity_attempts"]}


async def activity_timeout_pass(call: Call) -> tuple[int, Any]:
    limit = call.body.get("limit") or 100
    ids = call.body.get("execution_ids") or (
        await call.client.control.overdue())["attempt_ids"][:limit]
    results = await call.client.store.enforce_attempts(
        call.namespace, list(dict.fromkeys(ids)), call.client.clock.now())
    enforced = sum(1 for r in results if r["outcome"] == "enforced")
    return 200, {"processed": len(results), "enforced": enforced,
                 "skipped": len(results) - enforced, "failed": 0, "results": results}


ACTIVITY_PASS_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "execution_ids": {"type": "array", "maxItems": 100,
                          "items": {"type": "string", "minLength": 1, "maxLength": 300},
                          "description": "Only these activity attempts (task ids)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                  "description": "At most this many overdue attempts (default 100)."},
    },
})

#: the reference's pass takes `run_ids` and `instance_id` to narrow it; ours
#: covers the namespace, so they are refused (422 naming the field), never
#: ignored: a caller that asked for one run must not learn "repaired: 3" of others
REPAIR_PASS_BODY = check_schema({
    "type": "object", "additionalProperties": False, "properties": {},
    "description": "No fields: the pass covers the namespace (the reference's run_ids "
                   "and instance_id filters are not supported, 422).",
})

def system_operations() -> list[Operation]:
    """The admin routes: namespaces and the repair pass."""
    not_found = Reply(404, "namespace_not_found.", ERROR_SCHEMA)
    return [
        Operation(
            "GET", "/api/namespaces", "listNamespaces", "Namespaces that hold something",
            list_namespaces, "admin", tags=("system",),
            replies=(Reply(200, "The namespaces, by name.", {
                "type": "object", "required": ["namespaces"],
                "properties": {"namespaces": {"type": "array", "items": NAMESPACE}}}),),
        ),
        Operation(
            "GET", "/api/namespaces/{namespace}", "describeNamespace", "One namespace",
            describe_namespace, "admin", tags=("system",), params=(NAME_PARAM,),
            replies=(Reply(200, "The namespace.", NAMESPACE), not_found),
        ),
        Operation(
            "POST", "/api/namespaces", "createNamespace",
            "Create a namespace (a description and a retention before anything runs in it)",
            create_namespace, "admin", tags=("system",), body=CREATE_BODY, body_required=True,
            replies=(Reply(201, "The namespace.", NAMESPACE),
                     Reply(409, "namespace_already_exists: the name holds something.",
                           ERROR_SCHEMA)),
        ),
        Operation(
            "PUT", "/api/namespaces/{namespace}", "updateNamespace",
            "Change a namespace's description or retention (null or absent: unchanged)",
            update_namespace, "admin", tags=("system",), params=(NAME_PARAM,),
            body=UPDATE_BODY,
            replies=(Reply(200, "The namespace.", NAMESPACE), not_found),
        ),
        Operation(
            "POST", "/api/system/repair/pass", "systemRepairPass",
            "Enforce every deadline due now in the namespace, once", repair_pass, "admin",
            tags=("system",), body=REPAIR_PASS_BODY,
            replies=(Reply(200, "Counts by kind of what was enforced.", {
                "type": "object", "required": ["counts"],
                "properties": {"namespace": {"type": "string"},
                               "counts": {"type": "object",
                                          "additionalProperties": {"type": "integer"}},
                               "repaired": {"type": "integer"}}}),),
        ),
        Operation(
            "GET", "/api/system/repair", "systemRepairStatus",
            "How deadlines are enforced, and those passed and not enforced yet",
            repair_status, "admin", tags=("system",),
            replies=(Reply(200, "{namespace, policy, candidates}: candidates as "
                                "GET /api/deadlines/overdue answers.", ANY_OBJECT),)),
        Operation(
            "GET", "/api/system/activity-timeouts", "systemActivityTimeoutStatus",
            "Activity attempts past a deadline and not timed out yet", activity_timeout_status,
            "admin", tags=("system",),
            replies=(Reply(200, "{expired_count, expired_execution_ids, scan_limit, "
                                "scan_pressure, by_kind}.", ANY_OBJECT),)),
        Operation(
            "POST", "/api/system/activity-timeouts/pass", "systemActivityTimeoutPass",
            "Time out activity attempts past a deadline, once", activity_timeout_pass,
            "admin", tags=("system",), body=ACTIVITY_PASS_BODY,
            replies=(Reply(200, "{processed, enforced, skipped, failed, results: "
                                "[{execution_id, outcome, kind?, has_retry?, reason?}]}.",
                           ANY_OBJECT),),
            description="Each attempt's passed deadline is applied as the watchdog would "
                        "(a retry when its policy allows one); an attempt none of whose "
                        "deadlines has passed is skipped (not_expired), as is an id with no "
                        "open attempt here (not_found)."),
    ]
