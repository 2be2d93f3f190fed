"""Operator routes of the reference engine's contract: namespaces and the repair pass.

`GET /api/namespaces`, `GET /api/namespaces/{name}`, `POST /api/namespaces`,
`PUT /api/namespaces/{name}` and `POST /api/system/repair/pass` need the
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
from .routes import ERROR_SCHEMA, Call, Operation, Param, Reply, Schema, check_schema, text

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
            tags=("system",),
            replies=(Reply(200, "Counts by kind of what was enforced.", {
                "type": "object", "required": ["counts"],
                "properties": {"namespace": {"type": "string"},
                               "counts": {"type": "object",
                                          "additionalProperties": {"type": "integer"}},
                               "repaired": {"type": "integer"}}}),),
        ),
    ]
