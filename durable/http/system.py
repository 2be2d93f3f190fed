"""Operator routes of the reference engine's contract: namespaces and the repair pass.

`GET /api/namespaces`, `GET /api/namespaces/{name}` and `POST
/api/system/repair/pass` need the ``admin`` role (ours: ``viewer`` <
``operator`` < ``admin``), as the reference's do. A namespace here is a
name that holds something (runs, workers, schedules or settings); every
request may still act in any namespace its token allows (namespaces are
not created before use). Workers and task queues are in `queues.py`.
"""

from __future__ import annotations

from typing import Any

from .errors import NamespaceNotFound
from .routes import ERROR_SCHEMA, Call, Operation, Param, Reply, Schema, text

NAMESPACE: Schema = {
    "type": "object", "required": ["name", "status"],
    "properties": {
        "name": {"type": "string"}, "description": {"type": ["string", "null"]},
        "retention_days": {"type": ["number", "null"]},
        "status": {"type": "string", "enum": ["active"]},
        "created_at": {"type": ["string", "null"]},
        "run_count": {"type": "integer", "description": "Extension: runs stored."},
        "open_run_count": {"type": "integer", "description": "Extension: runs still open."},
    },
}


async def _namespaces(call: Call) -> list[dict[str, Any]]:
    found = await call.client.store.namespaces()
    names = {item["name"] for item in found}
    if "default" not in names:
        found.insert(0, {"name": "default", "run_count": 0, "open_run_count": 0,
                         "created_at": None})
    out = []
    for item in found:
        settings = await call.client.store.retention_settings(item["name"])
        seconds = settings.get("retention_seconds")
        out.append({"name": item["name"], "description": None,
                    "retention_days": None if seconds is None else seconds / 86400,
                    "status": "active", "created_at": item["created_at"],
                    "run_count": item["run_count"],
                    "open_run_count": item["open_run_count"]})
    return out


async def list_namespaces(call: Call) -> tuple[int, Any]:
    return 200, {"namespaces": await _namespaces(call)}


async def describe_namespace(call: Call) -> tuple[int, Any]:
    name = call.params["namespace"]
    for item in await _namespaces(call):
        if item["name"] == name:
            return 200, item
    raise NamespaceNotFound(f"no namespace {name!r}: nothing was stored in it")


async def repair_pass(call: Call) -> tuple[int, Any]:
    counts = await call.client.control.repair_pass()
    return 200, {"namespace": call.namespace, "counts": counts,
                 "repaired": sum(counts.values())}


def system_operations() -> list[Operation]:
    """The admin routes: namespaces and the repair pass."""
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
            describe_namespace, "admin", tags=("system",),
            params=(Param("namespace", "path", text(128, "The namespace's name."),
                          "The namespace's name.", required=True),),
            replies=(Reply(200, "The namespace.", NAMESPACE),
                     Reply(404, "namespace_not_found.", ERROR_SCHEMA)),
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
