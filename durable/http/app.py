"""The control plane as an ASGI application (Starlette; asyncio and trio through anyio).

`create_app(client, tokens=...)` serves the routes of `routes.py` for the
storage `client` opened. Every /api route checks, in this order: the
version header (400), the bearer token and its role (401 / 403), the
namespace header, the path parameters (400) and query parameters (422, as
the reference's; a parameter the route does not take is ignored, or 422
where the reference refuses it: `Operation.unknown_query`), the body (read
with a cap before parsing: 413; not JSON: 400; not fitting the schema: 422);
then the handler runs and a `durable` error becomes the status of
`errors.ERROR_TABLE`. Nothing reaches a handler unvalidated, so bad input is
a 4xx, never a 500.

Long polls (`wait=N` on result and history) hold no database connection
while they wait: they listen to the driver's wake-ups (and re-read on a
bounded poll), and end as soon as the client disconnects.

Kept whole: it is the one path every request takes (the checks in their
order, the handler, the error body), and the web UI's `perform` goes
through the same checks; split, that order would live in two places.
"""

from __future__ import annotations

import math
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import _validate
from .._log import get_logger
from ..client import Client
from ..errors import ConfigurationError
from ..wakes import Wake
from . import hosts, paths
from .auth import ROLES, Grant, TokenSet, load_tokens, role_allows
from .errors import VERSION, VERSION_HEADER, HTTPError, classify, error_body
from .export import export_operations
from .fleet import fleet_operations
from .metrics import Metrics
from .openapi import build_spec
from .queues import queue_operations
from .routes import Call, Operation, Param, check_query_names, operations
from .schedules import schedule_operations
from .schema import SchemaViolation, validate
from .signing import secret_key
from .system import system_operations
from .throttle import AuthThrottle, client_of
from .wire import NonFiniteNumber, dumps, loads_finite
from .workflows import workflow_operations

log = get_logger("durable.http")
# What a request without a token may act as on a development server: never admin.
ANONYMOUS_ROLES = tuple(role for role in ROLES if role != "admin")

NAMESPACE_HEADER = "X-Namespace"
REQUEST_ID_HEADER = "X-Request-Id"
_NAMESPACE = _validate.NAMESPACE_PATTERN
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# JSON nested deeper than this is refused (422) before anything encodes it.
MAX_DEPTH = 64
# How often a history long poll re-reads when no wake-up names its run.
_HISTORY_POLL = 1.0


def error_response(status: int, code: str, message: str, /, *,
                   headers: Mapping[str, str] | None = None, **extra: Any) -> Response:
    return Response(dumps(error_body(code, message, **extra)), status_code=status,
                    media_type="application/json", headers=dict(headers or {}))


def response_for_exception(exc: Exception, request_id: str,
                           operation: str | None = None) -> Response:
    """The JSON error for an exception: a durable error's status and code
    (`errors.ERROR_TABLE`; 503 adds Retry-After), else a logged 500.
    `operation` (signal, query, update) is named as the reference does
    (``control_plane.operation``): its client tells a refused signal from a
    refused query by it."""
    known = classify(exc)
    if known is not None:
        status, code, extra = known
        headers = {"Retry-After": "1"} if status == 503 else None
        if operation is not None:
            extra["control_plane"] = {"operation": operation}
        return error_response(status, code, str(exc), headers=headers, **extra)
    log.exception("control plane request failed", request_id=request_id)
    return error_response(500, "internal_error",
                          f"the server failed (request id {request_id}); see its logs")


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def parse_json_body(raw: bytes) -> Any:
    """A request body's JSON: 400 invalid_json when it is not JSON (NaN and
    Infinity literals included), 400 payload_error for a number out of a
    float's range, as a start whose input cannot be encoded is refused."""
    try:
        return loads_finite(raw.decode("utf-8"))
    except NonFiniteNumber as exc:
        raise HTTPError(
            400, "payload_error",
            f"the body holds the number {str(exc)[:40]}, out of the range of a float "
            "(it would be infinity); JSON values here must be finite numbers") from None
    except (ValueError, RecursionError) as exc:
        raise HTTPError(400, "invalid_json",
                        f"the body is not JSON ({str(exc)[:200]}); send a JSON object "
                        "with 'Content-Type: application/json'") from None


class ControlPlaneServer:
    """The state behind one app: the storage client, tokens, limits, metrics."""

    def __init__(self, client: Client, tokens: TokenSet, *, anonymous_role: str | None,
                 max_body_bytes: int, max_wait: float, public_metrics: bool,
                 throttle: AuthThrottle | None = None, signing_key: bytes | None = None,
                 ) -> None:
        self.client = client
        self.signing_key = signing_key or secret_key(None, {})
        self.tokens = tokens
        self.throttle = throttle or AuthThrottle()
        self.anonymous_role = anonymous_role
        self.max_body_bytes = max_body_bytes
        self.max_wait = max_wait
        self.public_metrics = public_metrics
        self.operations = (operations() + workflow_operations() + schedule_operations()
                           + queue_operations() + system_operations()
                           + export_operations() + fleet_operations())
        self.by_id = {op.operation_id: op for op in self.operations}
        self.metrics = Metrics(client.store)
        self.spec = build_spec(self.operations, anonymous=anonymous_role is not None,
                               max_body_bytes=max_body_bytes, max_wait=max_wait)

    # ------------------------------------------------------------ checks

    def _check_version(self, request: Request) -> None:
        value = request.headers.get(VERSION_HEADER)
        if value is None or value.strip() != VERSION:
            got = "is missing" if value is None else f"is {value!r}"
            code = ("missing_control_plane_version" if value is None
                    else "unsupported_control_plane_version")
            raise HTTPError(400, code,
                            f"the {VERSION_HEADER} header {got}; this server speaks version "
                            f"{VERSION}: send '{VERSION_HEADER}: {VERSION}'",
                            header=VERSION_HEADER, supported_version=VERSION,
                            requested_version=value,
                            remediation=f"send '{VERSION_HEADER}: {VERSION}'")

    def _authenticate(self, request: Request, required: str) -> Grant:
        header = request.headers.get("authorization")
        if header is None or (not len(self.tokens) and self.anonymous_role is not None):
            if self.anonymous_role is None:
                raise HTTPError(401, "unauthenticated",
                                "this route needs 'Authorization: Bearer <token>'",
                                headers={"WWW-Authenticate": 'Bearer realm="durable"'})
            grant = Grant(self.anonymous_role)
            if not role_allows(grant.role, required):  # say how to get there
                fix = ("send a token with it ('Authorization: Bearer <token>', durable "
                       "--token)") if len(self.tokens) else (
                    f"start the server with a {required} token (DURABLE_TOKENS="
                    f"'secret:{required}') and send it (durable --token, 'Authorization: "
                    "Bearer secret'), or use the database directly (durable --db URL)")
                mode = "" if len(self.tokens) else " (development mode: the server has no tokens)"
                raise HTTPError(
                    403, "forbidden",
                    f"a request without a token acts as {grant.role} here{mode}, and this "
                    f"needs the {required} role: {fix}",
                    role=grant.role, required_role=required)
        else:
            client = client_of(request.scope)
            self.check_throttle(client)
            scheme, _, token = header.strip().partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise HTTPError(401, "unauthenticated",
                                "the Authorization header must be 'Bearer <token>'",
                                headers={"WWW-Authenticate":
                                         'Bearer realm="durable", error="invalid_request"'})
            found = self.tokens.grant_of(token)
            if found is None:
                self.throttle.failed(client)
                raise HTTPError(401, "unauthenticated", "the bearer token is not known here",
                                headers={"WWW-Authenticate":
                                         'Bearer realm="durable", error="invalid_token"'})
            grant = found
        self.authorize(grant.role, required)
        return grant

    def check_throttle(self, client: str) -> None:
        """429 while `client` has too many recent failed authentications (throttle.py)."""
        wait = self.throttle.retry_after(client)
        if wait is not None:
            raise HTTPError(429, "too_many_failed_authentications",
                            f"too many failed authentications from this client; try again "
                            f"in {wait} s", headers={"Retry-After": str(wait)},
                            retry_after_seconds=wait)

    @staticmethod
    def check_namespace(grant: Grant, namespace: str) -> None:
        """403 unless the token may act in `namespace`."""
        if not grant.allows_namespace(namespace):
            allowed = ", ".join(sorted(grant.namespaces or ()))
            raise HTTPError(403, "forbidden",
                            f"this token may act in the namespaces {allowed} only, not in "
                            f"{namespace!r}", namespace=namespace)

    @staticmethod
    def authorize(role: str, required: str) -> None:
        """403 unless `role` may use a route that requires `required` (every
        caller, API route or web UI form, is checked here)."""
        if not role_allows(role, required):
            raise HTTPError(403, "forbidden",
                            f"{'an' if role[:1] in 'aeiou' else 'a'} {role} token may not "
                            f"do this; it needs the {required} role",
                            role=role, required_role=required)

    def _namespace(self, request: Request) -> str:
        value = request.headers.get(NAMESPACE_HEADER)
        if value is None:
            return "default"
        if not _NAMESPACE.match(value):
            raise HTTPError(400, "invalid_parameter",
                            f"the {NAMESPACE_HEADER} header must be 1 to 128 letters, digits, "
                            "'.', '_', ':' or '-' (starting with a letter or digit)",
                            parameter=NAMESPACE_HEADER)
        return value

    def _params(self, op: Operation, request: Request) -> dict[str, Any]:
        check_query_names(op, request.query_params.keys())

        def lookup(param: Param) -> str | None:
            if param.location == "path":
                value: str | None = request.path_params.get(param.name)
                if value is not None:  # the id as the client encoded it (paths.py)
                    value = paths.segment_value(request.scope, value)
            elif param.location == "query":
                value = request.query_params.get(param.name)
            else:
                value = request.headers.get(param.name)
            return value

        return self.params_from(op, lookup)

    def params_from(self, op: Operation, lookup: Callable[[Param], str | None],
                    ) -> dict[str, Any]:
        """The operation's parameters, parsed and checked against their schemas
        (`_parameter_error` naming the parameter); `lookup` gives each one's raw
        text or None."""
        values: dict[str, Any] = {}
        for param in op.params:
            raw = lookup(param)
            where = f"{param.location} parameter {param.name!r}"
            try:
                if raw is None:
                    if param.required:
                        raise SchemaViolation(where, "is required")
                    if "default" in param.schema:
                        values[param.name] = param.schema["default"]
                    continue
                value = _parse_scalar(raw, param.schema, where)
                validate(value, param.schema, where)
            except SchemaViolation as exc:
                raise _parameter_error(param, str(exc)) from None
            values[param.name] = value
        return values

    async def _body(self, op: Operation, request: Request) -> dict[str, Any]:
        if op.body is None:
            return {}
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise HTTPError(413, "payload_too_large",
                            f"the body is {declared} bytes; this server takes at most {limit}",
                            value=int(declared), limit=limit)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPError(413, "payload_too_large",
                                f"the body is over {limit} bytes, the most this server takes",
                                value=size, limit=limit)
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            data: Any = {}
        else:
            data = parse_json_body(raw)
        return self.check_body(op, data)

    def check_body(self, op: Operation, data: Any) -> dict[str, Any]:
        """A parsed body checked against the operation's schema (422 naming the field)."""
        if op.body is None:
            return {}
        if _depth_exceeds(data, MAX_DEPTH):
            raise HTTPError(422, "validation_failed",
                            f"body: JSON nested deeper than {MAX_DEPTH} levels", field="body")
        try:
            validate(data, op.body, "body")
        except SchemaViolation as exc:
            raise HTTPError(422, "validation_failed", str(exc), field=exc.where,
                            errors={_field_name(exc.where): [exc.message]}) from None
        assert isinstance(data, dict)
        return data

    def call(self, *, role: str | None, namespace: str, params: dict[str, Any],
             body: dict[str, Any], request_id: str,
             namespaces: frozenset[str] | None = None) -> Call:
        """What a handler is given: the request's namespace view of the client
        (and the namespaces the token is limited to, for routes that name one)."""
        return Call(
            client=self.client.with_namespace(namespace), namespace=namespace,
            role=role, params=params, body=body, request_id=request_id,
            max_wait=self.max_wait, wait_for_change=self.wait_for_change,
            signing_key=self.signing_key, namespaces=namespaces,
        )

    async def perform(self, operation_id: str, *, role: str, namespace: str,
                      params: Mapping[str, Any], body: Any = None,
                      request_id: str = "",
                      namespaces: frozenset[str] | None = None) -> tuple[int, Any]:
        """Run the route `operation_id` for a caller already authenticated as
        `role` (the web UI: its session stands for the token). The same role
        check, parameter and body validation and handler as the HTTP route;
        raises `HTTPError` or the handler's durable error like the route would.
        `namespaces` limits the namespaces, as the token's `Grant` does."""
        op = self.by_id.get(operation_id)
        if op is None:
            raise HTTPError(404, "route_not_found", f"no operation {operation_id!r}")
        if op.role is not None:
            self.authorize(role, op.role)
        self.check_namespace(Grant(role, namespaces), namespace)
        if not _NAMESPACE.match(namespace):
            raise HTTPError(400, "invalid_parameter",
                            "the namespace must be 1 to 128 letters, digits, '.', '_', ':' "
                            "or '-' (starting with a letter or digit)", parameter="namespace")

        check_query_names(op, params)

        def lookup(param: Param) -> str | None:
            value = params.get(param.name)
            return None if value is None else str(value)

        values = self.params_from(op, lookup)
        checked = self.check_body(op, {} if body is None else body)
        call = self.call(role=role, namespace=namespace, params=values, body=checked,
                         request_id=request_id or uuid.uuid4().hex, namespaces=namespaces)
        return await op.handler(call)

    # ------------------------------------------------------------ waiting

    async def wait_for_change(self, run_id: str, read: Callable[[], Awaitable[Any]],
                              seconds: float) -> Any:
        """`read` until it returns something, again on each wake-up naming the run
        (or another process's commit) or a bounded poll; holds no database
        connection while it waits."""
        return await self.client.driver.hub.until({Wake.run(run_id).key}, read, seconds,
                                                  poll=_HISTORY_POLL)

    async def _until_disconnect(self, request: Request,
                                work: Callable[[], Awaitable[tuple[int, Any]]],
                                ) -> tuple[int, Any] | None:
        """Run `work`, but give up when the client disconnects (None then)."""
        outcome: tuple[int, Any] | None = None
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                while True:
                    message = await request.receive()
                    if message["type"] == "http.disconnect":
                        tg.cancel_scope.cancel()
                        return

            async def run() -> None:
                nonlocal outcome, failure
                try:
                    outcome = await work()
                except Exception as exc:  # raised below, outside the task group
                    failure = exc
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(run)
        if failure is not None:
            raise failure
        return outcome

    # ------------------------------------------------------------ routes

    def endpoint(self, op: Operation) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            response = await answer(request)
            if op.versioned:  # echoed on every answer of a versioned route, as the reference
                response.headers[VERSION_HEADER] = VERSION
            return response

        async def answer(request: Request) -> Response:
            request.scope["durable.route"] = op.path
            request_id = str(request.scope.get("durable.request_id") or uuid.uuid4().hex)
            try:
                if op.versioned:
                    self._check_version(request)
                grant = self._authenticate(request, op.role) if op.role else None
                role = grant.role if grant else None
                namespace = self._namespace(request)
                if grant is not None:
                    self.check_namespace(grant, namespace)
                request.scope["durable.namespace"] = namespace
                params = self._params(op, request)
                body = await self._body(op, request)
                call = self.call(role=role, namespace=namespace, params=params, body=body,
                                 request_id=request_id,
                                 namespaces=grant.namespaces if grant else None)
                # a GET long-polls only when asked to wait; a POST that waits
                # (a query, an update) always may
                if op.long_poll and (op.method != "GET" or params.get("wait")
                                     or params.get("wait_new_event")):
                    outcome = await self._until_disconnect(request, lambda: op.handler(call))
                    if outcome is None:
                        request.scope["durable.disconnected"] = True
                        return Response(status_code=499)
                    status, payload = outcome
                else:
                    status, payload = await op.handler(call)
                return Response(dumps(payload), status_code=status,
                                media_type="application/json")
            except HTTPError as exc:
                return error_response(exc.status, exc.code, exc.message, headers=exc.headers,
                                      **exc.extra)
            except Exception as exc:
                return self.error_for(exc, request_id, op.extra.get("operation"))

        return handle

    def error_for(self, exc: Exception, request_id: str,
                  operation: str | None = None) -> Response:
        return response_for_exception(exc, request_id, operation)

    async def openapi(self, request: Request) -> Response:
        request.scope["durable.route"] = "/api/openapi.json"
        return Response(dumps(self.spec), media_type="application/json")

    async def healthz(self, request: Request) -> Response:
        request.scope["durable.route"] = "/healthz"
        return Response(dumps({"status": "ok"}), media_type="application/json")

    async def metrics_endpoint(self, request: Request) -> Response:
        request.scope["durable.route"] = "/metrics"
        try:
            namespaces = None
            if not self.public_metrics:
                namespaces = self._authenticate(request, "viewer").namespaces
            text, content_type = await self.metrics.render(namespaces)
        except HTTPError as exc:
            return error_response(exc.status, exc.code, exc.message, headers=exc.headers,
                                  **exc.extra)
        except Exception as exc:
            return self.error_for(exc, str(request.scope.get("durable.request_id", "")))
        return Response(text, media_type=content_type)

    async def watch_storage(self) -> None:
        """Publish other processes' commits as wake-ups (ends long polls early)."""
        while True:
            try:
                await self.client.driver.watch()
            except Exception:
                log.exception("watching storage for wake-ups failed; retrying in 1 s")
            await anyio.sleep(1)


def _field_name(where: str) -> str:
    """``body.input[2]`` as Laravel names a field: ``input.2``."""
    name = where.removeprefix("body").lstrip(".")
    return name.replace("[", ".").replace("]", "") or "body"


def _parameter_error(param: Param, message: str) -> HTTPError:
    """A parameter that does not fit its schema. A query parameter is 422 in
    Laravel's validation shape (``errors: {name: [message]}``), as the
    reference engine validates its query fields (a list's ``page_size``)
    with its bodies, and its client raises ``InvalidArgument`` for it; a
    path or header parameter is 400 ``invalid_parameter``."""
    if param.location == "query":
        return HTTPError(422, "validation_failed", message, parameter=param.name,
                         field=param.name, errors={param.name: [message]})
    return HTTPError(400, "invalid_parameter", message, parameter=param.name)


def _parse_scalar(raw: str, schema: Mapping[str, Any], where: str) -> Any:
    kind = schema.get("type")
    try:
        if kind == "integer":
            if not re.fullmatch(r"[+-]?\d{1,18}", raw.strip()):
                raise ValueError(raw)
            return int(raw)
        if kind == "number":
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError(raw)
            return value
        if kind == "boolean":
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
    except ValueError:
        raise SchemaViolation(where, f"must be a finite {kind}, got {raw[:100]!r}") from None
    return raw


class AccessLog:
    """ASGI middleware: request id (accepted from X-Request-Id or made), echoed on
    the response; one structured log line per request (method, route template,
    status, duration; never bodies, query strings or tokens); request metrics."""

    def __init__(self, app: ASGIApp, plane: ControlPlaneServer) -> None:
        self.app = app
        self.plane = plane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                given = value.decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope["durable.request_id"] = request_id
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            duration = time.perf_counter() - started
            route = str(scope.get("durable.route", "unmatched"))
            method = str(scope.get("method", ""))
            disconnected = bool(scope.get("durable.disconnected"))
            self.plane.metrics.observe_request(method, route, status, duration)
            log.info("http_request", request_id=request_id, method=method, route=route,
                     status=status, duration_ms=round(duration * 1000, 2),
                     namespace=scope.get("durable.namespace"), disconnected=disconnected)


def _by_method(handlers: dict[str, Callable[[Request], Awaitable[Response]]],
               ) -> Callable[[Request], Awaitable[Response]]:
    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](request)

    return dispatch


def create_app(
    client: Client,
    tokens: Mapping[str, str] | None = None,
    *,
    tokens_file: str | os.PathLike[str] | None = None,
    anonymous_role: str | None = None,
    max_body_bytes: int | None = None,
    max_wait: float = 60.0,
    public_metrics: bool = False,
    environ: Mapping[str, str] | None = None,
    ui: bool = True,
    ui_secret: str | bytes | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_auth_failures: int = 10,
    auth_failure_window: float = 60.0,
) -> Starlette:
    """The control plane for the storage `client` opened, as an ASGI app.

    `tokens` maps bearer tokens to roles (``"operator"``, ``"viewer"``) and is
    merged with ``DURABLE_TOKENS`` and `tokens_file` / ``DURABLE_TOKENS_FILE``
    (see `durable.http.auth`). With no token anywhere the app refuses to be
    built unless `anonymous_role` says which role a request without a token
    has (for a development server on loopback; `serve` sets it there).
    `max_body_bytes` caps request bodies (default: the client's payload and
    memo limits plus 64 KiB of JSON around them); `max_wait` caps long polls;
    `public_metrics` serves /metrics without a token.

    `ui` mounts the web UI for operators at ``/ui`` (see docs/ui.md; needs
    Jinja2, the ``ui`` extra): a browser signs in with the same tokens and
    gets a session cookie signed with `ui_secret` (else ``DURABLE_UI_SECRET``,
    else a random key per process, so sessions end when it restarts). The same
    secret signs the schedule list's page tokens (`durable.http.signing`).

    `allowed_hosts` are the names the server is reached by (``"*.example.com"``
    for subdomains, ``"*"`` for any): a request naming another ``Host`` is
    refused (400 host_not_allowed), which stops DNS rebinding. Default: the
    loopback names when `anonymous_role` is set, any host otherwise
    (`durable.http.hosts`).

    `max_auth_failures` failed authentications (unknown tokens, refused UI
    logins) from one client address within `auth_failure_window` seconds
    lock it out with 429 and Retry-After until they age out
    (`durable.http.throttle`); 0 turns the limit off.

    The client's namespace does not matter: each request acts in the
    namespace of its ``X-Namespace`` header through `Client.with_namespace`.
    Mount the app anywhere (``Mount("/durable", app)`` in Starlette,
    ``fastapi_app.mount("/durable", app)``); its lifespan watches storage for
    other processes' commits so long polls end at once (without it, they
    notice within a second).
    """
    if not client.embedded:
        raise ConfigurationError(
            "the control plane serves storage it opens itself: give create_app a client "
            "connected with a database URL (sqlite:// or postgresql://), not an http(s) one"
        )
    if anonymous_role is not None and anonymous_role not in ANONYMOUS_ROLES:
        raise ConfigurationError(
            f"anonymous_role must be one of {', '.join(ANONYMOUS_ROLES)} or None, got "
            f"{anonymous_role!r} (the admin role needs a token)"
        )
    token_set = load_tokens(tokens, tokens_file, environ)
    if not len(token_set) and anonymous_role is None:
        raise ConfigurationError(
            "no control-plane tokens: pass tokens={'<token>': 'operator'}, set DURABLE_TOKENS "
            "('tok1:operator,tok2:viewer') or DURABLE_TOKENS_FILE, or pass "
            "anonymous_role='operator' for a development server reachable only on loopback"
        )
    if not (isinstance(max_wait, int | float) and 0 < max_wait <= 3600):
        raise ConfigurationError(f"max_wait must be 0 < seconds <= 3600, got {max_wait!r}")
    if max_body_bytes is None:
        max_body_bytes = client.limits.payload_bytes + client.limits.memo_bytes + 64 * 1024
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or (
        max_body_bytes < 1024
    ):
        raise ConfigurationError(
            f"max_body_bytes must be an integer of at least 1024, got {max_body_bytes!r}"
        )
    if isinstance(max_auth_failures, bool) or not isinstance(max_auth_failures, int) or (
        max_auth_failures < 0
    ) or not (isinstance(auth_failure_window, int | float) and auth_failure_window > 0):
        raise ConfigurationError(
            "max_auth_failures must be an integer >= 0 (0: no limit) and auth_failure_window "
            f"seconds > 0, got {max_auth_failures!r} and {auth_failure_window!r}")
    plane = ControlPlaneServer(client, token_set, anonymous_role=anonymous_role,
                         max_body_bytes=max_body_bytes, max_wait=float(max_wait),
                         public_metrics=public_metrics,
                         throttle=AuthThrottle(max_auth_failures, float(auth_failure_window)),
                         signing_key=secret_key(ui_secret, environ))
    by_path: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
    for op in plane.operations:
        by_path.setdefault(op.path, {})[op.method] = plane.endpoint(op)
    # One route per path, so a wrong method is a 405 whose Allow lists them all.
    routes: list[BaseRoute] = [Route(path, _by_method(handlers), methods=list(handlers))
                               for path, handlers in by_path.items()]
    routes += [
        Route("/api/openapi.json", plane.openapi, methods=["GET"], name="openapi"),
        Route("/healthz", plane.healthz, methods=["GET"], name="healthz"),
        Route("/metrics", plane.metrics_endpoint, methods=["GET"], name="metrics"),
    ]
    if ui:
        from .ui import ui_routes

        routes += ui_routes(plane, ui_secret, environ)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(plane.watch_storage)
            yield
            tg.cancel_scope.cancel()

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error_response(405, "method_not_allowed",
                                  f"{request.method} is not allowed here",
                                  headers=exc.headers)
        if exc.status_code == 404:
            return error_response(404, "route_not_found",
                                  "no such route; the routes are listed in /api/openapi.json",
                                  headers=exc.headers)
        return error_response(exc.status_code, "http_error", str(exc.detail),
                              headers=exc.headers)

    async def server_error(request: Request, exc: Exception) -> Response:
        return plane.error_for(exc, str(request.scope.get("durable.request_id", "")))

    app = Starlette(
        routes=routes, lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.durable = plane
    app.add_middleware(paths.SegmentPaths)  # an id's "/" never splits it (paths.py)
    try:
        host_check = hosts.plan(allowed_hosts, anonymous=anonymous_role is not None)
    except ValueError as exc:
        raise ConfigurationError(f"allowed_hosts: {exc}") from None
    if host_check is not None:  # inside the access log, so refusals are logged
        app.add_middleware(hosts.HostCheck, patterns=host_check[0], loopback=host_check[1],
                           error=error_response)
    app.add_middleware(AccessLog, plane=plane)
    return app
