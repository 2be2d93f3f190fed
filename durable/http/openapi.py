"""The OpenAPI 3.1 document, written from the route table (`routes.operations()`).

Request schemas are the dictionaries the server validates with; the error
replies every route can give (version header, token, role, parameters,
body size and shape, storage) are added here from what the route declares,
so the document lists exactly the statuses the server answers with.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from .errors import VERSION, VERSION_HEADER
from .routes import ERROR_SCHEMA, Operation, Reply

_REQUEST_ID = {
    "description": "The request id: the X-Request-Id the client sent (if it was 1 to 128 "
                   "letters, digits, '.', '_', ':' or '-'), else one the server made.",
    "schema": {"type": "string"},
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _response(reply: Reply, *, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": reply.description,
                           "headers": {"X-Request-Id": _REQUEST_ID, **(headers or {})}}
    if reply.schema is not None:
        schema = _ERROR_REF if reply.schema is ERROR_SCHEMA else reply.schema
        out["content"] = {reply.content_type: {"schema": schema}}
    return out


def _error(description: str) -> Reply:
    return Reply(0, description, ERROR_SCHEMA)


def _operation(op: Operation, *, anonymous: bool) -> dict[str, Any]:
    params: list[dict[str, Any]] = []
    if op.versioned:
        params.append({
            "name": VERSION_HEADER, "in": "header", "required": True,
            "description": "The control-plane protocol version; a missing or other value "
                           "is refused with 400 missing_control_plane_version or "
                           "unsupported_control_plane_version.",
            "schema": {"type": "string", "enum": [VERSION]},
        })
        params.append({
            "name": "X-Namespace", "in": "header", "required": False,
            "description": "The namespace to act in (default 'default'); a run of another "
                           "namespace is 404.",
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"},
        })
    for param in op.params:
        params.append({"name": param.name, "in": param.location,
                       "required": param.required or param.location == "path",
                       "description": param.description, "schema": param.schema})
    responses: dict[str, Any] = {}
    for reply in op.replies:
        responses[str(reply.status)] = _response(reply)
        if op.links and 200 <= reply.status < 300:
            responses[str(reply.status)]["links"] = {
                name: {"operationId": target, "parameters": params}
                for name, (target, params) in op.links.items()
            }
    errors: dict[int, str] = {}
    if op.versioned or op.params or op.body is not None:  # a body may not be JSON
        errors[400] = ("missing_control_plane_version / unsupported_control_plane_version (the "
                       "version header), invalid_parameter (a path or header parameter), "
                       "invalid_json, invalid_argument, not_registered.")
    if op.role is not None:
        errors[401] = "unauthenticated: no bearer token, or an unknown one."
        errors[403] = ("forbidden: the token's role may not do this, or the token is limited "
                       "to other namespaces.")
        errors[429] = ("too_many_failed_authentications: this client presented too many "
                       "unknown tokens lately; retry after Retry-After seconds.")
    if any(p.location == "path" for p in op.params):
        errors[404] = ("instance_not_found: no such workflow or run in this namespace (a run of "
                       "another namespace is 404 too).")
    queried = any(p.location == "query" for p in op.params)
    if op.body is not None:
        errors[413] = ("payload_too_large: the body is over the server's limit (checked "
                       "before parsing); structural_limit_exceeded: a payload is over its "
                       "limit.")
    if op.body is not None or queried:
        errors[422] = ("validation_failed: the body or a query parameter does not fit its "
                       "schema (errors names the field, as the reference's validation).")
    if op.path.startswith("/api/"):
        errors[503] = "storage_unavailable: storage could not be reached; retry."
    for status, description in errors.items():
        key = str(status)
        if key in responses:
            continue
        headers: dict[str, Any] = {}
        if status == 401:
            headers["WWW-Authenticate"] = {"required": True, "schema": {"type": "string"},
                                           "description": "Bearer realm=\"durable\""}
        if status in (429, 503):
            headers["Retry-After"] = {"required": True, "schema": {"type": "string"},
                                      "description": "Seconds to wait before retrying."}
        responses[key] = _response(_error(description), headers=headers)
    out: dict[str, Any] = {
        "operationId": op.operation_id, "summary": op.summary, "tags": list(op.tags),
        "parameters": params, "responses": responses,
    }
    if op.description:
        out["description"] = op.description
    if op.role is not None:
        out["security"] = [{"bearerAuth": []}] + ([{}] if anonymous else [])
        out["x-durable-role"] = op.role
    if op.body is not None:
        out["requestBody"] = {"required": op.body_required,
                              "content": {"application/json": {"schema": op.body}}}
    return out


def build_spec(operations: list[Operation], *, anonymous: bool, max_body_bytes: int,
               max_wait: float) -> dict[str, Any]:
    """The whole document for an app's configuration."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, anonymous=anonymous)
    text_reply = {"description": "OK", "headers": {"X-Request-Id": _REQUEST_ID}}
    paths["/api/openapi.json"] = {"get": {
        "operationId": "getOpenAPI", "summary": "This document (no token, no version header)",
        "tags": ["meta"],
        "responses": {"200": {**text_reply, "content": {"application/json": {
            "schema": {"type": "object"}}}}},
    }}
    paths["/healthz"] = {"get": {
        "operationId": "healthz", "summary": "Liveness (no token)", "tags": ["meta"],
        "responses": {"200": {**text_reply, "content": {"application/json": {"schema": {
            "type": "object", "required": ["status"],
            "properties": {"status": {"type": "string", "enum": ["ok"]}}}}}}},
    }}
    paths["/metrics"] = {"get": {
        "operationId": "metrics", "summary": "Prometheus metrics (viewer token)",
        "tags": ["meta"], "security": [{"bearerAuth": []}] + ([{}] if anonymous else []),
        "responses": {
            "200": {**text_reply, "content": {"text/plain": {"schema": {"type": "string"}}}},
            "401": _response(_error("unauthenticated"), headers={"WWW-Authenticate": {
                "required": True, "schema": {"type": "string"}}}),
            "403": _response(_error("forbidden")),
            "429": _response(_error("too_many_failed_authentications"), headers={
                "Retry-After": {"required": True, "schema": {"type": "string"},
                                "description": "Seconds to wait before retrying."}}),
            "503": _response(_error("storage_unavailable"), headers={"Retry-After": {
                "required": True, "schema": {"type": "string"}}}),
        },
    }}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "durable control plane",
            "version": __version__,
            "description": (
                f"Every /api route needs '{VERSION_HEADER}: {VERSION}' and "
                "'Authorization: Bearer <token>' (roles: operator does everything, viewer "
                "only reads). 'X-Namespace' picks the namespace (default 'default'). Errors "
                "are {\"error\": {\"code\", \"message\", ...}}. Bodies are JSON of at most "
                f"{max_body_bytes} bytes; long polls (wait=N) last at most {max_wait:g} s."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
