"""The control plane over HTTP: every route, status code and header rule.

Most tests call the ASGI app in-process through httpx's ASGITransport (the
same bytes a server would pass it); the tests of long polls, disconnects,
`serve` and the remote client run a real server on a loopback port
(uvicorn on asyncio, hypercorn on trio). Every test runs on both host loops
and, where storage matters, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import durable
from durable import workflow
from durable.http import avro, create_app
from durable.http.app import response_for_exception
from durable.http.auth import TokenSet, load_tokens, parse_token_list
from durable.http.errors import ERROR_TABLE, NamespaceNotFound, error_from_wire
from durable.http.routes import operations
from durable.http.serve import is_loopback, load_worker, serve_app, serve_async

pytestmark = pytest.mark.anyio

OPERATOR = "op-token-1"
VIEWER = "view-token-1"
TOKENS = {OPERATOR: "operator", VIEWER: "viewer"}
VERSION = {"X-Durable-Workflow-Control-Plane-Version": "2"}
AS_OPERATOR = {**VERSION, "Authorization": f"Bearer {OPERATOR}"}
AS_VIEWER = {**VERSION, "Authorization": f"Bearer {VIEWER}"}


@workflow.defn
async def napper(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "rested"


@workflow.defn
async def broken(message: str) -> None:
    raise ValueError(message)


@workflow.defn
async def hops(n: int) -> int:
    if n > 0:
        workflow.continue_as_new(n - 1)
    return n


SERVE_WORKER = {"workflows": [napper, broken, hops]}


class Plane:
    """A control plane app on the test's storage, and an HTTP client for it."""

    def __init__(self, storage: durable.Client, app: Starlette, http: httpx.AsyncClient):
        self.storage = storage
        self.app = app
        self.http = http

    async def start(self, workflow_id: str, wf_type: str = "napper", args: Any = (3600,),
                    headers: dict[str, str] | None = None, **fields: Any) -> httpx.Response:
        body = {"workflow_type": wf_type, "workflow_id": workflow_id, "input": list(args),
                "require_registered": False, **fields}
        return await self.http.post("/api/workflows", json=body,
                                    headers=headers or AS_OPERATOR)


def make_app(storage: durable.Client, **kwargs: Any) -> Starlette:
    kwargs.setdefault("environ", {})
    return create_app(storage, TOKENS, **kwargs)


@pytest.fixture
async def plane(storage_client: durable.Client) -> AsyncIterator[Plane]:
    app = make_app(storage_client)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        yield Plane(storage_client, app, http)


@pytest.fixture
async def live(storage_client: durable.Client) -> AsyncIterator[tuple[Plane, str]]:
    """The app served on a free loopback port by a real server."""
    app = make_app(storage_client)
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(serve_app, app, port=0))
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url) as http:
            yield Plane(storage_client, app, http), url
        tg.cancel_scope.cancel()


# Rules of the HTTP layer that no storage call reaches: SQLite is enough.
HTTP_ONLY = pytest.mark.parametrize("driver_name", ["sqlite"])


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The flat error body, with its reason also as "code" (as these tests read it)."""
    error: dict[str, Any] = response.json()
    assert isinstance(error["reason"], str) and isinstance(error["message"], str), error
    return {**error, "code": error["reason"]}


# ---------------------------------------------------------------- header rules


@HTTP_ONLY
@pytest.mark.parametrize("value", [None, "1", "3", "two"])
async def test_missing_or_other_version_header_is_400_naming_the_header(
    plane: Plane, value: str | None
) -> None:
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    if value is not None:
        headers["X-Durable-Workflow-Control-Plane-Version"] = value
    response = await plane.http.get("/api/workflows", headers=headers)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == ("missing_control_plane_version" if value is None
                             else "unsupported_control_plane_version")
    assert "X-Durable-Workflow-Control-Plane-Version" in error["message"]
    assert error["header"] == "X-Durable-Workflow-Control-Plane-Version"
    assert error["supported_version"] == "2" and error["requested_version"] == value


@HTTP_ONLY
async def test_missing_token_is_401_with_www_authenticate(plane: Plane) -> None:
    response = await plane.http.get("/api/workflows", headers=VERSION)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert error_of(response)["code"] == "unauthenticated"
    for bad in ("Bearer", "Basic b3A6dG9rZW4=", f"Token {OPERATOR}", "Bearer nope"):
        response = await plane.http.get("/api/workflows",
                                        headers={**VERSION, "Authorization": bad})
        assert response.status_code == 401, bad
        assert "Bearer" in response.headers["WWW-Authenticate"]


async def test_viewer_token_reads_but_is_refused_on_writes(plane: Plane) -> None:
    assert (await plane.start("w1")).status_code == 201
    assert (await plane.http.get("/api/workflows", headers=AS_VIEWER)).status_code == 200
    assert (await plane.http.get("/api/workflows/w1", headers=AS_VIEWER)).status_code == 200
    writes = [
        ("/api/workflows", {"workflow_type": "napper", "workflow_id": "w2",
                            "require_registered": False}),
        ("/api/workflows/w1/request-cancellation", {"reason": "no"}),
        ("/api/workflows/w1/cancel", {}),
        ("/api/workflows/w1/terminate", {}),
        ("/api/repair-pass", None),
        ("/api/workflows/w1/retry-after-review", None),
        ("/api/workflows/w1/signal/go", {}),
        ("/api/workflows/w1/update/set", {}),
        ("/api/signal-with-start", {"workflow_type": "napper", "workflow_id": "w3",
                                    "signal": "go", "require_registered": False}),
    ]
    for path, body in writes:
        response = await plane.http.post(path, json=body, headers=AS_VIEWER)
        assert response.status_code == 403, path
        error = error_of(response)
        assert error["code"] == "forbidden" and error["required_role"] == "operator"
    # nothing was written
    info = (await plane.http.get("/api/workflows/w1", headers=AS_VIEWER)).json()
    assert info["status"] == "pending" and info["cancellation"] is None
    listed = (await plane.http.get("/api/workflows", headers=AS_VIEWER)).json()["workflows"]
    assert [r["workflow_id"] for r in listed] == ["w1"]


async def test_a_run_of_another_namespace_is_404_never_403(plane: Plane) -> None:
    in_a = {**AS_OPERATOR, "X-Namespace": "team-a"}
    in_b = {**AS_OPERATOR, "X-Namespace": "team-b"}
    created = await plane.start("shared-id", headers=in_a)
    assert created.status_code == 201 and created.json()["namespace"] == "team-a"
    run_id = created.json()["run_id"]
    for path in ("/api/workflows/shared-id", f"/api/workflows/shared-id/runs/{run_id}",
                 "/api/workflows/shared-id/history", "/api/workflows/shared-id/result",
                 "/api/workflows/shared-id/cancellation-cascade"):
        response = await plane.http.get(path, headers=in_b)
        assert response.status_code == 404, path
        assert error_of(response)["code"] == "instance_not_found"
        assert "team-b" in error_of(response)["message"]
    for action in ("request-cancellation", "cancel", "terminate"):
        response = await plane.http.post(f"/api/workflows/shared-id/{action}", json={},
                                         headers=in_b)
        assert response.status_code == 404, action
    assert (await plane.http.get("/api/workflows", headers=in_b)).json()["workflows"] == []
    # the default namespace does not see it either; its own namespace does
    assert (await plane.http.get("/api/workflows/shared-id",
                                 headers=AS_OPERATOR)).status_code == 404
    described = await plane.http.get("/api/workflows/shared-id", headers=in_a)
    assert described.json()["status"] == "pending"
    # the same id is free in another namespace
    assert (await plane.start("shared-id", headers=in_b)).status_code == 201


@HTTP_ONLY
async def test_bad_namespace_header_is_400(plane: Plane) -> None:
    for bad in ("", "has space", "-leading", "x" * 200):
        response = await plane.http.get("/api/workflows",
                                        headers={**AS_OPERATOR, "X-Namespace": bad})
        assert response.status_code == 400, bad
        assert error_of(response)["parameter"] == "X-Namespace"


@HTTP_ONLY
async def test_request_id_is_echoed_or_made_and_logged_without_secrets(
    plane: Plane, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable.http")
    response = await plane.http.post(
        "/api/workflows", headers={**AS_OPERATOR, "X-Request-Id": "req-42"},
        json={"workflow_type": "napper", "workflow_id": "secret-body-value", "input": [1],
              "require_registered": False})
    assert response.headers["X-Request-Id"] == "req-42"
    made = await plane.http.get("/healthz", headers={"X-Request-Id": "bad id\nwith newline"})
    assert made.headers["X-Request-Id"] != "bad id\nwith newline"
    assert len(made.headers["X-Request-Id"]) == 32
    lines = [r.getMessage() for r in caplog.records if r.name == "durable.http"]
    line = next(x for x in lines if "req-42" in x)
    assert "route='/api/workflows'" in line and "status=201" in line
    assert "duration_ms=" in line and "method='POST'" in line
    described = await plane.http.get("/api/workflows/secret-body-value", headers=AS_OPERATOR)
    assert described.status_code == 200
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert OPERATOR not in text and "secret-body-value" not in text
    assert "route='/api/workflows/{workflowId}'" in text


# ---------------------------------------------------------------- start and bodies


async def test_start_is_201_with_ids_409_when_taken_200_when_returning_existing(
    plane: Plane,
) -> None:
    first = await plane.start("order-1", execution_timeout_seconds=7200,
                              run_timeout_seconds=3600, memo={"customer": "c-1"},
                              task_queue="orders")
    assert first.status_code == 201
    body = first.json()
    assert body["workflow_id"] == "order-1" and body["created"] is True
    assert body["namespace"] == "default" and body["status"] == "pending"
    again = await plane.start("order-1")
    assert again.status_code == 409
    error = error_of(again)
    assert error["code"] == "instance_already_started"
    assert (error["workflow_id"], error["run_id"]) == ("order-1", body["run_id"])
    existing = await plane.start("order-1", id_reuse_policy="return_existing_active")
    assert existing.status_code == 200
    assert existing.json()["run_id"] == body["run_id"] and existing.json()["created"] is False
    info = await plane.storage.get_handle("order-1").describe()
    assert info["execution_timeout_seconds"] == 7200
    assert info["run"]["run_timeout_seconds"] == 3600
    assert info["memo"] == {"customer": "c-1"}
    assert info["run"]["task_queue"] == "orders"
    events = await plane.storage.get_handle("order-1").history()
    assert events[0].data["input"] == [3600]


async def test_start_of_a_type_no_worker_registered_is_400_not_registered(
    plane: Plane, make_worker: Any
) -> None:
    body = {"workflow_type": "napper", "workflow_id": "n1", "input": [1]}
    response = await plane.http.post("/api/workflows", json=body, headers=AS_OPERATOR)
    assert response.status_code == 400
    assert error_of(response)["code"] == "not_registered"
    async with make_worker(workflows=[napper]):
        response = await plane.http.post("/api/workflows", json=body, headers=AS_OPERATOR)
        assert response.status_code == 201
        types = await plane.http.get("/api/workflow-types", headers=AS_VIEWER)
        assert types.json() == {"workflow_types": ["napper"]}


@HTTP_ONLY
@pytest.mark.parametrize(("body", "field"), [
    ({"workflow_id": "x"}, "body.workflow_type"),
    ({"workflow_type": 7, "workflow_id": "x"}, "body.workflow_type"),
    ({"workflow_type": "napper", "workflow_id": ""}, "body.workflow_id"),
    ({"workflow_type": "napper", "workflow_id": "x", "input": "text"}, "body.input"),
    ({"workflow_type": "napper", "workflow_id": "x", "execution_timeout_seconds": 0.5},
     "body.execution_timeout_seconds"),
    ({"workflow_type": "napper", "workflow_id": "x", "run_timeout_seconds": 1e12},
     "body.run_timeout_seconds"),
    ({"workflow_type": "napper", "workflow_id": "x", "id_reuse_policy": "sometimes"},
     "body.id_reuse_policy"),
    ({"workflow_type": "napper", "workflow_id": "x", "surprise": True}, "body.surprise"),
    ({"workflow_type": "napper", "workflow_id": "nul\u0000byte"}, "body.workflow_id"),
    ([1, 2], "body"),
])
async def test_invalid_body_is_422_naming_the_field(plane: Plane, body: Any,
                                                     field: str) -> None:
    response = await plane.http.post("/api/workflows", json=body, headers=AS_OPERATOR)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_failed" and error["field"] == field
    assert field in error["message"]
    laravel_name = field.removeprefix("body").lstrip(".") or "body"
    assert list(error["errors"]) == [laravel_name] and error["errors"][laravel_name]
    assert await plane.storage.list() == []


@HTTP_ONLY
async def test_a_start_takes_the_reference_engines_ids_unless_it_asks_for_durables(
        plane: Plane) -> None:
    """The reference's start takes 1 to 128 of ``[a-zA-Z0-9._:-]``: so does ours
    (422 naming workflow_id, in its shape: its client raises InvalidArgument),
    unless the start asks for durable's ids (``rules``, what durable's own
    remote client sends): any id the SDK takes, up to 255 characters. Every
    route takes any id in its path, as the reference's do."""
    for bad in ("order 1", "a/b", "ünï", "a#b", "x" * 129):
        refused = await plane.start(bad)
        assert refused.status_code == 422, bad
        error = error_of(refused)
        assert error["code"] == "validation_failed" and list(error["errors"]) == ["workflow_id"]
        assert "^[a-zA-Z0-9._:-]+$" in error["message"]
        assert '"rules": "durable"' in error["message"] and repr(bad[:60]) in error["message"]
    signalled = await plane.http.post("/api/signal-with-start", headers=AS_OPERATOR, json={
        "workflow_type": "napper", "workflow_id": "order 1", "signal": "s",
        "require_registered": False})
    assert signalled.status_code == 422 and "workflow_id" in error_of(signalled)["errors"]
    assert await plane.storage.list() == []
    for good in ("x" * 128, "Order-1.a_b:c"):
        assert (await plane.start(good)).status_code == 201, good
    assert (await plane.start("order 1/ü", rules="durable")).status_code == 201
    described = await plane.http.get("/api/workflows/order%201%2F%C3%BC", headers=AS_VIEWER)
    assert described.status_code == 200 and described.json()["workflow_id"] == "order 1/ü"
    too_long = await plane.start("x" * 256, rules="durable")  # the SDK's own bound
    assert too_long.status_code == 400 and "at most 255" in error_of(too_long)["message"]
    history = await plane.http.get("/api/workflows/order%201%2F%C3%BC/history",
                                   params={"page_size": 1001}, headers=AS_VIEWER)
    assert history.status_code == 422 and list(error_of(history)["errors"]) == ["page_size"]


@HTTP_ONLY
async def test_names_and_cleanup_budgets_the_reference_refuses_are_refused_unless_asked(
        plane: Plane) -> None:
    """A signal, query or update name over 256 bytes of UTF-8 and a cleanup
    budget outside 1..3600 whole seconds: 422 naming the field, the reference's
    answer, unless the request asks for the SDK's rules (rules: durable)."""
    assert (await plane.start("n-1")).status_code == 201
    run = "/api/workflows/n-1"
    long_name = "ü" * 129  # 129 characters, 258 bytes
    for kind, field in (("signal", "signal_name"), ("query", "query_name"),
                        ("update", "update_name")):
        refused = await plane.http.post(f"{run}/{kind}/{long_name}", json={},
                                        headers=AS_OPERATOR)
        assert refused.status_code == 422, (kind, refused.text)
        assert list(error_of(refused)["errors"]) == [field]
        assert '"rules": "durable"' in error_of(refused)["message"]
    taken = await plane.http.post(f"{run}/signal/{long_name}", json={"rules": "durable"},
                                  headers=AS_OPERATOR)
    assert taken.status_code == 202, taken.text
    assert (await plane.http.post(f"{run}/signal/{'é' * 128}", json={},  # 256 bytes
                                  headers=AS_OPERATOR)).status_code == 202
    with_start = await plane.http.post("/api/signal-with-start", headers=AS_OPERATOR, json={
        "workflow_type": "napper", "workflow_id": "n-2", "signal": long_name,
        "require_registered": False})
    assert with_start.status_code == 422 and list(error_of(with_start)["errors"]) == ["signal"]
    for budget in (0.5, 3601, 1.5):
        refused = await plane.http.post(f"{run}/request-cancellation", headers=AS_OPERATOR,
                                        json={"cleanup_timeout_seconds": budget})
        assert refused.status_code == 422, (budget, refused.text)
        assert list(error_of(refused)["errors"]) == ["cleanup_timeout_seconds"]
    asked = await plane.http.post(f"{run}/request-cancellation", headers=AS_OPERATOR,
                                  json={"cleanup_timeout_seconds": 7200.5,
                                        "rules": "durable"})
    assert asked.status_code == 202, asked.text
    assert asked.json()["request"]["cleanup_timeout_seconds"] == 7200.5
    assert (await plane.start("n-3")).status_code == 201
    assert (await plane.http.post("/api/workflows/n-3/request-cancellation",
                                  headers=AS_OPERATOR,
                                  json={"cleanup_timeout_seconds": 3600})).status_code == 202


@HTTP_ONLY
@pytest.mark.remote_client
async def test_the_sdk_keeps_its_wider_names_and_budgets_through_the_control_plane(
        client: durable.Client) -> None:
    """durable's remote client sends rules: durable, so a name over the
    reference's 256 bytes and a budget over its hour work remotely as embedded."""
    handle = await client.start(napper, 3600, id="wide-1")
    await handle.signal("ü" * 200)
    answer = await handle.request_cancellation("done", cleanup_timeout=7200.5)
    context = answer.context
    assert answer.accepted and (context.deadline - context.requested_at).total_seconds() == 7200.5


@HTTP_ONLY
async def test_body_that_is_not_json_is_400(plane: Plane) -> None:
    for raw in (b"{not json", b"\xff\xfe", b'{"a": NaN}', b"[" * 100_000):
        response = await plane.http.post("/api/workflows", content=raw,
                                         headers={**AS_OPERATOR,
                                                  "Content-Type": "application/json"})
        assert response.status_code in (400, 422), raw[:10]
        assert error_of(response)["code"] in ("invalid_json", "validation_failed")


@HTTP_ONLY
async def test_body_over_the_limit_is_413_before_parsing(storage_client: durable.Client) -> None:
    app = make_app(storage_client, max_body_bytes=4096)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        # not even JSON: refused for its size, so parsing never started
        big = b"{" + b"x" * 10_000
        response = await http.post("/api/workflows", content=big, headers=AS_OPERATOR)
        assert response.status_code == 413
        error = error_of(response)
        assert error["code"] == "payload_too_large" and error["limit"] == 4096

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: streamed
            for _ in range(10):
                yield b" " * 1000

        response = await http.post("/api/workflows", content=chunks(), headers=AS_OPERATOR)
        assert response.status_code == 413
        assert error_of(response)["code"] == "payload_too_large"
        small = {"workflow_type": "napper", "workflow_id": "ok", "input": ["y" * 3000],
                 "require_registered": False}
        assert (await http.post("/api/workflows", json=small,
                                headers=AS_OPERATOR)).status_code == 201


async def test_payload_over_the_clients_limit_is_413_structural_limit(
    storage_client: durable.Client,
) -> None:
    storage = storage_client.with_namespace("default")
    storage.limits = durable.Limits(payload_bytes=1000)
    app = make_app(storage)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://plane") as http:
        body = {"workflow_type": "napper", "workflow_id": "big", "input": ["z" * 2000],
                "require_registered": False}
        response = await http.post("/api/workflows", json=body, headers=AS_OPERATOR)
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "structural_limit_exceeded"
    assert (error["kind"], error["limit"]) == ("payload_bytes", 1000)


@HTTP_ONLY
@pytest.mark.parametrize(("query", "name"), [
    ("page_size=0", "page_size"), ("page_size=201", "page_size"),
    ("page_size=abc", "page_size"), ("page_size=1.5", "page_size"),
    ("status=sleeping", "status"), ("status=timed_out", "status"),
    ("durable_status=waiting", "durable_status"), ("next_page_token=%00", "next_page_token"),
])
async def test_bad_query_parameter_is_422_naming_it(plane: Plane, query: str,
                                                    name: str) -> None:
    """As the reference's (Laravel validates a query's fields as a body's): 422,
    ``errors`` naming the parameter, which its client raises as InvalidArgument.
    A list's page_size is 1 to 200 there, and here."""
    response = await plane.http.get(f"/api/workflows?{query}", headers=AS_OPERATOR)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_failed" and name in error["message"]
    assert error["parameter"] == name and list(error["errors"]) == [name]


@pytest.mark.remote_client
async def test_a_cursor_no_server_gave_is_refused_in_the_python_apis_words(
        client: durable.Client) -> None:
    """Embedded or remote, `list_page(cursor=...)` names `cursor` (the wire names
    `next_page_token`: the remote client checks the cursor before sending it)."""
    with pytest.raises(durable.ConfigurationError,
                       match=r"cursor 'zzz' is not one this server returned; pass the "
                             r"`next_cursor`"):
        await client.list_page(cursor="zzz")


async def test_bad_cursor_is_400_and_paging_follows_next_cursor(plane: Plane) -> None:
    for i in range(5):
        assert (await plane.start(f"p{i}")).status_code == 201
    response = await plane.http.get("/api/workflows?next_page_token=garbage",
                                    headers=AS_OPERATOR)
    assert response.status_code == 400 and error_of(response)["code"] == "invalid_argument"
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"page_size": 2,
                                  **({"next_page_token": cursor} if cursor else {})}
        page = (await plane.http.get("/api/workflows", params=params,
                                     headers=AS_VIEWER)).json()
        assert page["workflow_count"] == len(page["workflows"])
        seen += [item["workflow_id"] for item in page["workflows"]]
        cursor = page["next_page_token"]
        if cursor is None:
            break
    assert seen == ["p4", "p3", "p2", "p1", "p0"]
    # pending runs are in the "running" bucket; none is "running" by our status
    running = await plane.http.get("/api/workflows?durable_status=running", headers=AS_VIEWER)
    assert running.json() == {"workflows": [], "workflow_count": 0, "next_page_token": None}
    bucket = (await plane.http.get("/api/workflows?status=running&query=p3",
                                   headers=AS_VIEWER)).json()["workflows"]
    assert [(r["workflow_id"], r["status"], r["status_bucket"], r["is_terminal"])
            for r in bucket] == [("p3", "pending", "running", False)]
    assert (await plane.http.get("/api/workflows?status=failed",
                                 headers=AS_VIEWER)).json()["workflows"] == []
    typed = await plane.http.get("/api/workflows?workflow_type=napper&page_size=1",
                                 headers=AS_VIEWER)
    assert len(typed.json()["workflows"]) == 1 and typed.json()["next_page_token"]


@HTTP_ONLY
async def test_unknown_route_and_method_are_json_errors(plane: Plane) -> None:
    missing = await plane.http.get("/api/nothing-here", headers=AS_OPERATOR)
    assert missing.status_code == 404 and error_of(missing)["code"] == "route_not_found"
    wrong = await plane.http.delete("/api/workflows", headers=AS_OPERATOR)
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"
    assert "GET" in wrong.headers["Allow"] and "POST" in wrong.headers["Allow"]


# ---------------------------------------------------------------- run routes


async def test_describe_history_and_result_of_a_completed_run(
    plane: Plane, make_worker: Any
) -> None:
    async with make_worker(workflows=[napper]):
        run_id = (await plane.start("nap", args=[0.05])).json()["run_id"]
        result = await plane.http.get("/api/workflows/nap/result?wait=10", headers=AS_VIEWER)
    assert result.status_code == 200
    body = result.json()
    assert (body["workflow_id"], body["run_id"], body["status"], body["durable_status"],
            body["result"]) == ("nap", run_id, "completed", "completed", "rested")
    assert body["result_envelope"] == avro.envelope("rested")
    by_run = await plane.http.get(f"/api/workflows/nap/runs/{run_id}", headers=AS_VIEWER)
    current = await plane.http.get("/api/workflows/nap", headers=AS_VIEWER)
    assert by_run.json() == current.json()
    info = current.json()
    assert info["run_id"] == info["run"]["run_id"] == run_id
    assert (info["status"], info["status_bucket"], info["is_terminal"]) == (
        "completed", "completed", True)
    assert info["input"] == [0.05] and info["output"] == "rested"
    assert avro.from_envelope(info["output_envelope"]) == "rested"
    assert avro.from_envelope(info["input_envelope"]) == [0.05]
    history = (await plane.http.get(f"/api/workflows/nap/runs/{run_id}/history",
                                    headers=AS_VIEWER)).json()
    types = [e["event_type"] for e in history["events"]]
    assert types[0] == "WorkflowStarted" and types[-1] == "WorkflowCompleted"
    assert history["next_page_token"] is None
    last = history["events"][-1]
    assert avro.from_envelope(last["payload"]["output"]) == "rested"
    assert last["payload"]["payload_codec"] == "avro"
    page = (await plane.http.get("/api/workflows/nap/history?after_sequence=1&page_size=2",
                                 headers=AS_VIEWER)).json()
    assert [e["sequence"] for e in page["events"]] == [2, 3]
    assert page["next_page_token"] == base64.b64encode(b"3").decode()
    rest = (await plane.http.get("/api/workflows/nap/history", headers=AS_VIEWER,
                                 params={"next_page_token": page["next_page_token"]})).json()
    assert rest["events"][0]["sequence"] == 4
    tail = await plane.http.get(
        f"/api/workflows/nap/history?after_sequence={last['sequence']}&wait=5",
        headers=AS_VIEWER)  # a closed run gets no new events: no waiting
    assert tail.json()["events"] == []
    unknown = await plane.http.get("/api/workflows/nap/runs/not-a-run/result",
                                   headers=AS_VIEWER)
    assert unknown.status_code == 404


async def test_result_is_202_while_open_and_the_failure_once_failed(
    plane: Plane, make_worker: Any
) -> None:
    await plane.start("open-one")
    pending = await plane.http.get("/api/workflows/open-one/result", headers=AS_VIEWER)
    assert pending.status_code == 202 and pending.json()["status"] == "pending"
    async with make_worker(workflows=[broken]):
        await plane.start("bad", wf_type="broken", args=["it broke"])
        failed = await plane.http.get("/api/workflows/bad/result?wait=10", headers=AS_VIEWER)
    assert failed.status_code == 200
    body = failed.json()
    assert body["status"] == "failed"
    assert body["failure"]["exception_class"] == "builtins.ValueError"
    assert "it broke" in body["failure"]["message"]


async def test_result_of_a_timed_out_run_carries_the_timeout_kind(
    plane: Plane, make_worker: Any
) -> None:
    async with make_worker(workflows=[napper]):
        await plane.start("slow", args=[60], run_timeout_seconds=1)
        response = await plane.http.get("/api/workflows/slow/result?wait=15",
                                        headers=AS_VIEWER)
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["durable_status"]) == ("failed", "timed_out")
    assert body["failure"]["timeout_kind"] == "run_timeout"
    info = (await plane.http.get("/api/workflows/slow", headers=AS_VIEWER)).json()
    assert (info["status"], info["closed_reason"], info["timeout_kind"]) == (
        "failed", "timed_out", "run_timeout")
    # the result route's status fields are describe's: which deadline too
    for key in ("closed_reason", "timeout_kind", "durable_closed_reason"):
        assert body[key] == info[key], key
    assert body["durable_closed_reason"] == "run_timeout"
    assert info["durable_status"] == "timed_out" and info["is_terminal"] is True
    history = (await plane.http.get("/api/workflows/slow/history", headers=AS_VIEWER)).json()
    assert history["events"][-1]["event_type"] == "WorkflowTimedOut"


async def test_continued_run_result_names_the_next_run(plane: Plane, make_worker: Any) -> None:
    async with make_worker(workflows=[hops]):
        first = (await plane.start("hop", wf_type="hops", args=[1])).json()["run_id"]
        final = await plane.http.get("/api/workflows/hop/result?wait=10", headers=AS_VIEWER)
        assert final.status_code in (200, 202)
        with anyio.fail_after(10):
            while (await plane.http.get("/api/workflows/hop/result",
                                        headers=AS_VIEWER)).json()["status"] != "completed":
                await anyio.sleep(0.05)
    old = (await plane.http.get(f"/api/workflows/hop/runs/{first}/result",
                                headers=AS_VIEWER)).json()
    assert (old["status"], old["durable_status"]) == ("completed", "continued")
    assert old["continued_run_id"]
    runs = (await plane.http.get("/api/workflows/hop/runs", headers=AS_VIEWER)).json()
    assert runs["run_count"] == 2 and [r["run_id"] for r in runs["runs"]] == [
        first, old["continued_run_id"]]
    assert [r["is_current_run"] for r in runs["runs"]] == [False, True]
    assert runs["runs"][0]["closed_reason"] == "continued"
    last = (await plane.http.get(f"/api/workflows/hop/runs/{old['continued_run_id']}/result",
                                 headers=AS_VIEWER)).json()
    assert last["status"] == "completed" and last["result"] == 0


async def test_request_cancellation_202_then_200_with_the_original_identity_and_deadline(
    plane: Plane, make_worker: Any
) -> None:
    async with make_worker(workflows=[napper]):
        run_id = (await plane.start("order-9")).json()["run_id"]
        path = f"/api/workflows/order-9/runs/{run_id}/request-cancellation"
        first = await plane.http.post(path, headers={**AS_OPERATOR, "X-Namespace": "default"},
                                      json={"reason": "Order withdrawn",
                                            "cleanup_timeout_seconds": 30})
        assert first.status_code == 202
        original = first.json()
        assert original["accepted"] is True and original["duplicate"] is False
        assert (original["workflow_id"], original["run_id"]) == ("order-9", run_id)
        request = original["request"]
        ref = original["cancellation_request"]
        assert (ref["request_id"], ref["requested_at"], ref["cleanup_deadline_at"]) == (
            request["request_id"], request["requested_at"], request["deadline_at"])
        refreshed = (await plane.http.get(
            f"/api/workflows/order-9/runs/{run_id}/history", headers=AS_VIEWER,
            params={"next_page_token": ref["history_refresh_page_token"]})).json()
        assert refreshed["events"][0]["event_type"] == "CancellationRequested"
        assert request["reason"] == "Order withdrawn"
        assert request["cleanup_timeout_seconds"] == 30
        assert request["requester"] == {"type": "http", "id": None, "label": "operator"}
        assert request["source"] == "http"
        assert request["lineage"] == [[request["request_id"], "order-9", run_id]]
        repeat = await plane.http.post(path, headers=AS_OPERATOR,
                                       json={"reason": "again", "cleanup_timeout_seconds": 900})
        assert repeat.status_code == 200
        again = repeat.json()
        assert again["accepted"] is True and again["duplicate"] is True
        assert again["cancellation_request"] == ref
        for key in ("request_id", "root_request_id", "reason", "requested_at", "deadline_at"):
            assert again["request"][key] == request[key], key
        result = await plane.http.get(f"/api/workflows/order-9/runs/{run_id}/result?wait=10",
                                      headers=AS_VIEWER)
        assert result.json()["status"] == "cancelled"
    closed = await plane.http.post(path, headers=AS_OPERATOR, json={})
    assert closed.status_code == 200  # still the same request, after the run closed
    assert closed.json()["request"]["request_id"] == request["request_id"]
    cascade = await plane.http.get(f"/api/workflows/order-9/runs/{run_id}/cancellation-cascade",
                                   headers=AS_VIEWER)
    assert cascade.status_code == 200
    assert cascade.json()["root"]["request_id"] == request["request_id"]


async def test_request_cancellation_of_an_old_or_closed_run_is_409(
    plane: Plane, make_worker: Any
) -> None:
    async with make_worker(workflows=[hops, napper]):
        first = (await plane.start("hop2", wf_type="hops", args=[1])).json()["run_id"]
        with anyio.fail_after(10):
            while (await plane.http.get(f"/api/workflows/hop2/runs/{first}/result",
                                        headers=AS_VIEWER)).json()["durable_status"] != "continued":
                await anyio.sleep(0.05)
        old = await plane.http.post(f"/api/workflows/hop2/runs/{first}/request-cancellation",
                                    json={"reason": "late"}, headers=AS_OPERATOR)
        assert old.status_code == 409 and error_of(old)["code"] == "run_not_current"
        await plane.start("to-close")
        await plane.http.post("/api/workflows/to-close/terminate", json={"reason": "done"},
                              headers=AS_OPERATOR)
        closed = await plane.http.post("/api/workflows/to-close/request-cancellation",
                                       json={}, headers=AS_OPERATOR)
    assert closed.status_code == 409 and error_of(closed)["code"] == "run_not_active"


async def test_cancel_and_terminate_close_the_run_at_once(plane: Plane) -> None:
    await plane.start("c1")
    await plane.start("t1")
    cancelled = await plane.http.post("/api/workflows/c1/cancel", json={"reason": "stop now"},
                                      headers=AS_OPERATOR)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    terminated = await plane.http.post("/api/workflows/t1/terminate", headers=AS_OPERATOR)
    assert terminated.status_code == 200 and terminated.json()["status"] == "terminated"
    # the reply's closed reason is describe's (it was null)
    for name, reply in (("c1", cancelled), ("t1", terminated)):
        info = (await plane.http.get(f"/api/workflows/{name}", headers=AS_VIEWER)).json()
        assert info["closed_reason"] is not None
        for key in ("closed_reason", "durable_closed_reason"):
            assert reply.json()[key] == info[key], (name, key)
    again = await plane.http.post("/api/workflows/t1/cancel", headers=AS_OPERATOR)
    # closing a run that closed otherwise does nothing, and is refused as the
    # reference refuses it (its client raises): the caller must not read "done"
    assert again.status_code == 409, again.text
    assert error_of(again)["code"] == "run_not_active"
    assert again.json()["message"] == (
        f"workflow 't1' run {again.json()['run_id']} is already terminated; nothing was "
        "cancelled (cancel closes open runs only)")
    assert again.json()["status"] == "terminated"
    assert again.json()["outcome"] == "rejected_not_active"
    assert again.json()["durable_closed_reason"] == terminated.json()["durable_closed_reason"]
    assert (await plane.storage.get_handle("t1").describe())["status"] == "terminated"
    repeat = await plane.http.post("/api/workflows/t1/terminate", headers=AS_OPERATOR)
    assert repeat.json()["outcome"] == "terminated"  # a retry of what closed it
    assert "rejection_reason" not in repeat.json()
    result = (await plane.http.get("/api/workflows/c1/result", headers=AS_VIEWER)).json()
    assert result["status"] == "cancelled" and result["failure"]["message"] == "stop now"
    missing = await plane.http.post("/api/workflows/ghost/cancel", headers=AS_OPERATOR)
    assert missing.status_code == 404


async def test_repair_pass_and_retry_after_review(plane: Plane) -> None:
    response = await plane.http.post("/api/repair-pass", headers=AS_OPERATOR)
    assert response.status_code == 200 and response.json() == {"counts": {}}
    await plane.start("r1")
    cleared = await plane.http.post("/api/workflows/r1/retry-after-review",
                                    headers=AS_OPERATOR)
    assert cleared.json() == {"cleared": False}
    missing = await plane.http.post("/api/workflows/nope/retry-after-review",
                                    headers=AS_OPERATOR)
    assert missing.status_code == 404


# ---------------------------------------------------------------- long polls


async def test_result_long_poll_returns_when_the_run_closes(
    live: tuple[Plane, str], make_worker: Any
) -> None:
    plane, _ = live
    async with make_worker(workflows=[napper]):
        await plane.start("poll", args=[0.3])
        with anyio.fail_after(20):
            response = await plane.http.get("/api/workflows/poll/result?wait=15",
                                            headers=AS_VIEWER, timeout=30)
    assert response.status_code == 200 and response.json()["result"] == "rested"


async def test_history_long_poll_returns_new_events(live: tuple[Plane, str],
                                                    make_worker: Any) -> None:
    plane, _ = live
    await plane.start("follow", args=[0.2])
    seen = (await plane.http.get("/api/workflows/follow/history",
                                 headers=AS_VIEWER)).json()["last_sequence"]
    async with anyio.create_task_group() as tg:
        got: list[dict[str, Any]] = []

        async def follow() -> None:
            token = base64.b64encode(str(seen).encode()).decode()
            response = await plane.http.get(
                "/api/workflows/follow/history", headers=AS_VIEWER, timeout=30,
                params={"next_page_token": token, "wait_new_event": "true"})
            got.extend(response.json()["events"])

        tg.start_soon(follow)
        with anyio.fail_after(15):  # the poll read nothing and waits: now a worker runs
            while plane.storage.driver.hub.waiting == 0:
                await anyio.sleep(0.01)
        async with make_worker(workflows=[napper]):
            with anyio.fail_after(15):
                while not got:
                    await anyio.sleep(0.02)
    assert got and got[0]["sequence"] == seen + 1


async def test_long_poll_ends_when_the_client_disconnects(live: tuple[Plane, str]) -> None:
    plane, _ = live
    await plane.start("forever")  # no worker: it stays pending
    with pytest.raises(httpx.ReadTimeout):
        await plane.http.get("/api/workflows/forever/result?wait=50", headers=AS_VIEWER,
                             timeout=httpx.Timeout(5, read=0.5))
    with pytest.raises(httpx.ReadTimeout):
        await plane.http.get("/api/workflows/forever/history?after_sequence=99&wait=50",
                             headers=AS_VIEWER, timeout=httpx.Timeout(5, read=0.5))
    # the server saw both disconnects (it counts them as 499) long before 50 s
    with anyio.fail_after(10):
        while True:
            text = (await plane.http.get("/metrics", headers=AS_VIEWER)).text
            ended = [line for line in text.splitlines()
                     if line.startswith("durable_http_requests_total") and 'status="499"' in line]
            if len(ended) == 2:
                break
            await anyio.sleep(0.05)


# ---------------------------------------------------------------- meta routes


async def test_healthz_and_openapi_need_no_token(plane: Plane) -> None:
    health = await plane.http.get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    spec = await plane.http.get("/api/openapi.json")
    assert spec.status_code == 200
    document = spec.json()
    assert document["openapi"] == "3.1.0"
    for op in operations():
        entry = document["paths"][op.path][op.method.lower()]
        assert entry["operationId"] == op.operation_id
        if op.body is not None:
            assert entry["requestBody"]["content"]["application/json"]["schema"] == op.body
        if op.role is not None:
            assert entry["security"] == [{"bearerAuth": []}]
            assert "401" in entry["responses"] and "403" in entry["responses"]


async def test_metrics_need_a_token_and_count_runs_events_and_requests(
    plane: Plane, make_worker: Any
) -> None:
    assert (await plane.http.get("/metrics")).status_code == 401
    first = await plane.http.get("/metrics", headers={"Authorization": f"Bearer {VIEWER}"})
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/plain")
    async with make_worker(workflows=[napper, broken]):
        await plane.start("m1", args=[0.05])
        await plane.start("m2", wf_type="broken", args=["x"])
        await plane.http.get("/api/workflows/m1/result?wait=10", headers=AS_VIEWER)
        await plane.http.get("/api/workflows/m2/result?wait=10", headers=AS_VIEWER)
        await plane.start("m3")
        with anyio.fail_after(10):
            while (await plane.http.get("/api/workflows/m3",
                                        headers=AS_VIEWER)).json()["status"] != "running":
                await anyio.sleep(0.02)
        await plane.http.post("/api/workflows/m3/request-cancellation",
                              json={"cleanup_timeout_seconds": 10}, headers=AS_OPERATOR)
        await plane.http.get("/api/workflows/m3/result?wait=10", headers=AS_VIEWER)
    text = (await plane.http.get("/metrics", headers=AS_VIEWER)).text
    assert 'durable_runs{namespace="default",status="completed"} 1.0' in text
    assert 'durable_runs{namespace="default",status="failed"} 1.0' in text
    assert 'durable_runs{namespace="default",status="cancelled"} 1.0' in text
    assert 'durable_events_total{namespace="default",type="WorkflowStarted"} 3.0' in text
    assert 'durable_steps_total{kind="timer",namespace="default",outcome="completed"} 1.0' \
        in text
    assert 'durable_cancellations_total{lifecycle="requested",namespace="default"} 1.0' in text
    assert 'durable_cancellations_total{lifecycle="delivered",namespace="default"} 1.0' in text
    assert "durable_deadline_lateness_seconds_count{scope=\"timer\"} 1.0" in text
    assert 'durable_http_requests_total{method="POST",route="/api/workflows",status="201"} 3.0' \
        in text


async def test_mounted_under_a_prefix_in_another_app(storage_client: durable.Client) -> None:
    outer = Starlette(routes=[Mount("/durable", app=make_app(storage_client))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=outer),
                                 base_url="http://host") as http:
        response = await http.post("/durable/api/workflows", headers=AS_OPERATOR, json={
            "workflow_type": "napper", "workflow_id": "mounted", "require_registered": False})
        assert response.status_code == 201
        listed = await http.get("/durable/api/workflows", headers=AS_VIEWER)
        assert listed.json()["workflows"][0]["workflow_id"] == "mounted"


# ---------------------------------------------------------------- tokens and errors


def test_tokens_merge_argument_environment_and_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# team tokens\nfile-op:operator\n\nfile-view:viewer\n")
    tokens = load_tokens({"arg-op": "operator"}, path,
                         {"DURABLE_TOKENS": "env-op:operator, env:view:viewer"})
    assert len(tokens) == 5
    assert tokens.role_of("arg-op") == "operator"
    assert tokens.role_of("env:view") == "viewer"
    assert tokens.role_of("file-view") == "viewer"
    assert tokens.role_of("nope") is None
    assert "file-op" not in repr(tokens) and "arg-op" not in repr(tokens)
    from_env_file = load_tokens(None, None, {"DURABLE_TOKENS_FILE": str(path)})
    assert from_env_file.role_of("file-op") == "operator"
    with pytest.raises(durable.ConfigurationError, match="roles are viewer, operator, admin"):
        TokenSet({"t": "root"})
    assert TokenSet({"t": "admin"}).role_of("t") == "admin"
    with pytest.raises(durable.ConfigurationError, match="TOKEN:ROLE"):
        parse_token_list("just-a-token", "DURABLE_TOKENS")
    with pytest.raises(durable.ConfigurationError, match="cannot read the tokens file"):
        load_tokens(None, tmp_path / "missing", {})


async def test_create_app_refuses_no_tokens_and_remote_clients(
    storage_client: durable.Client,
) -> None:
    with pytest.raises(durable.ConfigurationError, match="no control-plane tokens"):
        create_app(storage_client, environ={})
    with pytest.raises(durable.ConfigurationError, match="anonymous_role"):
        create_app(storage_client, environ={}, anonymous_role="admin")
    app = create_app(storage_client, environ={"DURABLE_TOKENS": "from-env:viewer"})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://plane") as http:
        ok = await http.get("/api/workflows", headers={**VERSION,
                                                       "Authorization": "Bearer from-env"})
        assert ok.status_code == 200
    remote = await durable.connect("http://127.0.0.1:9", token="x")
    try:
        with pytest.raises(durable.ConfigurationError, match="serves storage it opens"):
            create_app(remote, TOKENS)
    finally:
        await remote.close()


async def test_anonymous_role_applies_to_requests_without_a_token(
    storage_client: durable.Client,
) -> None:
    app = create_app(storage_client, environ={}, anonymous_role="viewer")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as http:
        assert (await http.get("/api/workflows", headers=VERSION)).status_code == 200
        write = await http.post("/api/repair-pass", headers=VERSION)
        assert write.status_code == 403
        spec = (await http.get("/api/openapi.json")).json()
        assert spec["paths"]["/api/workflows"]["get"]["security"] == [{"bearerAuth": []}, {}]


def test_every_durable_error_round_trips_through_its_json_form() -> None:
    samples: list[durable.DurableError] = [
        durable.WorkflowAlreadyStarted("w", "r"), durable.WorkflowNotFound("no w"),
        durable.RunNotCurrent("old"), durable.RunAlreadyClosed("closed"),
        durable.CapabilityUnsupported("no cap"),
        durable.StructuralLimitExceeded("payload_bytes", 10, 5),
        durable.NameNotRegistered("nope"), durable.PolicyRejected("bad policy"),
        durable.PayloadRejected("bad payload"), durable.ConfigurationError("bad input"),
        durable.StorageUnavailable("db down", outcome_unknown=True),
        durable.QueryFailed("no handler", {"failure_category": "application",
                                           "cause_type": "KeyError", "message": "k"}),
        durable.UpdateRejected("too big", {"failure_category": "application",
                                           "cause_type": "ValueError", "message": "v"}),
        durable.UpdateFailed("it broke", {"failure_category": "application",
                                          "cause_type": "RuntimeError", "message": "r"}),
        durable.ScheduleNotFound("no s"), durable.ScheduleAlreadyExists("s", "default"),
        NamespaceNotFound("no namespace 'x'"),
        durable.RequestIdConflict("taken", request_id="k", retained_command_type="signal",
                                  retained_name="approve"),
    ]
    assert {type(e) for e in samples} == {cls for cls, _, _ in ERROR_TABLE}
    for exc in samples:
        response = response_for_exception(exc, "rid")
        status = response.status_code
        assert status in (400, 404, 409, 413, 422, 503)
        if status == 503:
            assert response.headers["Retry-After"] == "1"
        rebuilt = error_from_wire(status, json.loads(bytes(response.body)))
        assert type(rebuilt) is type(exc), exc
        assert str(rebuilt) == str(exc)
        if isinstance(exc, durable.errors.FailureCarrying):
            assert isinstance(rebuilt, durable.errors.FailureCarrying)
            assert rebuilt.failure == exc.failure and rebuilt.__cause__ is not None
    conflict = error_from_wire(409, json.loads(bytes(response_for_exception(
        samples[-1], "rid").body)))
    assert isinstance(conflict, durable.RequestIdConflict)
    assert (conflict.request_id, conflict.retained_command_type, conflict.retained_name) == (
        "k", "signal", "approve")
    storage = error_from_wire(503, {"reason": "storage_unavailable", "message": "m",
                                    "outcome_unknown": True})
    assert isinstance(storage, durable.StorageUnavailable) and storage.outcome_unknown


# ---------------------------------------------------------------- signals, queries, updates


@workflow.defn(name="http_gate")
class Gate:
    """Waits for an `open` signal; answers `state`; takes a `slow_set` update."""

    def __init__(self) -> None:
        self.opened_by: str | None = None
        self.value = 0

    @workflow.run
    async def run(self, start: int) -> dict[str, Any]:
        self.value = start
        await workflow.wait_condition(lambda: self.opened_by is not None)
        return {"opened_by": self.opened_by, "value": self.value}

    @workflow.signal
    def open(self, who: str) -> None:
        self.opened_by = who

    @workflow.query
    def state(self) -> dict[str, Any]:
        return {"opened_by": self.opened_by, "value": self.value}

    @workflow.update
    async def slow_set(self, value: int, pause: float) -> int:
        await workflow.sleep(pause)
        self.value = value
        return value

    @slow_set.validator
    def _positive(self, value: int, pause: float) -> None:
        if value < 0:
            raise ValueError("value must be at least 0")


async def _waiting(plane: Plane, workflow_id: str) -> None:
    with anyio.fail_after(10):
        while True:
            info = (await plane.http.get(f"/api/workflows/{workflow_id}",
                                         headers=AS_VIEWER)).json()
            if info["pending_operations"]:
                return
            await anyio.sleep(0.02)


async def test_signal_query_and_update_over_http_with_their_roles_and_errors(
    plane: Plane, make_worker: Any,
) -> None:
    async with make_worker(workflows=[Gate]):
        assert (await plane.start("g1", "http_gate", (1,))).status_code == 201
        await _waiting(plane, "g1")
        query = await plane.http.post("/api/workflows/g1/query/state", json={},
                                      headers=AS_VIEWER)  # viewers may query
        assert query.status_code == 200, query.text
        assert query.json()["result"] == {"opened_by": None, "value": 1}
        assert avro.from_envelope(query.json()["result_envelope"]) == query.json()["result"]
        missing = await plane.http.post("/api/workflows/g1/query/nope", json={},
                                        headers=AS_VIEWER)
        assert missing.status_code == 409 and error_of(missing)["code"] == "query_rejected"
        assert error_of(missing)["control_plane"] == {"operation": "query"}
        rejected = await plane.http.post(
            "/api/workflows/g1/update/slow_set", json={"input": [-1, 0]},
            headers=AS_OPERATOR)
        assert rejected.status_code == 409, rejected.text
        error = error_of(rejected)
        assert error["code"] == "update_rejected" and "at least 0" in error["message"]
        assert error["failure"]["cause_type"] == "ValueError"
        done = await plane.http.post(  # arguments as an Avro envelope, as the reference sends
            "/api/workflows/g1/update/slow_set",
            json={"input": avro.envelope([5, 0.01]), "request_id": "u-1",
                  "wait_for": "completed"},
            headers=AS_OPERATOR)
        assert done.status_code == 200, done.text
        answer = done.json()
        assert (answer["update_id"], answer["update_status"], answer["result"]) == (
            "u-1", "completed", 5)
        signal = await plane.http.post("/api/workflows/g1/signal/open",
                                       json={"input": ["ann"], "request_id": "s-1"},
                                       headers=AS_OPERATOR)
        assert signal.status_code == 202 and signal.json()["request_id"] == "s-1"
        result = await plane.http.get("/api/workflows/g1/result", params={"wait": 10},
                                      headers=AS_VIEWER)
        assert result.json()["result"] == {"opened_by": "ann", "value": 5}
    closed = await plane.http.post("/api/workflows/g1/signal/open", json={},
                                   headers=AS_OPERATOR)
    assert closed.status_code == 409 and error_of(closed)["code"] == "run_not_active"
    assert error_of(closed)["control_plane"] == {"operation": "signal"}
    unknown = await plane.http.post("/api/workflows/nobody/signal/open", json={},
                                    headers=AS_OPERATOR)
    assert unknown.status_code == 404
    framing = await plane.http.post("/api/workflows/nobody/signal/open",
                                    json={"input": {"codec": "avro", "blob": "[1]"}},
                                    headers=AS_OPERATOR)
    assert framing.status_code == 400 and "invalid_payload_framing" in error_of(framing)[
        "message"]


async def test_signal_with_start_over_http_starts_then_signals(
    plane: Plane, make_worker: Any,
) -> None:
    body = {"workflow_type": "http_gate", "workflow_id": "g2", "input": [7],
            "signal": "open", "signal_input": ["first"], "require_registered": False}
    started = await plane.http.post("/api/signal-with-start", json=body, headers=AS_OPERATOR)
    assert started.status_code == 201, started.text
    assert started.json()["created"] is True
    again = await plane.http.post("/api/signal-with-start", json=body, headers=AS_OPERATOR)
    assert again.status_code == 200 and again.json()["run_id"] == started.json()["run_id"]
    async with make_worker(workflows=[Gate]):
        result = await plane.http.get("/api/workflows/g2/result", params={"wait": 10},
                                      headers=AS_VIEWER)
    assert result.json()["result"] == {"opened_by": "first", "value": 7}


async def test_a_remote_update_outlasting_the_servers_wait_is_waited_for_by_its_id(
    storage_client: durable.Client, make_worker: Any,
) -> None:
    """The server caps each wait at max_wait (0.3 s here); the remote client asks
    again with the same update_id until the outcome is recorded: it runs once."""
    app = make_app(storage_client, max_wait=0.3)
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(serve_app, app, port=0))
        async with durable.connect(f"http://127.0.0.1:{port}", token=OPERATOR) as remote:
            async with make_worker(workflows=[Gate]):
                handle = await remote.start(Gate, 0, id="g3")
                assert await handle.update("slow_set", 9, 1.0, update_id="slow") == 9
                # accepted well within the second (a loaded box once took over 0.2 s,
                # the old bound); done only after two: the wait ends first
                with pytest.raises(durable.UpdateFailed, match="has not completed") as late:
                    await handle.update("slow_set", 10, 2.0, timeout=1.0)
                assert late.value.failure["timeout_kind"] == "update_wait"
                assert late.value.failure["accepted"] is True
                await handle.signal("open", "remote")
                assert (await handle.result())["opened_by"] == "remote"
        tg.cancel_scope.cancel()
    accepted = [e.data["update_id"] for e in await storage_client.get_handle("g3").history()
                if e.type == "UpdateAccepted"]
    assert accepted.count("slow") == 1


# ---------------------------------------------------------------- the remote client


async def test_remote_client_speaks_the_same_api_with_the_same_errors(
    live: tuple[Plane, str], make_worker: Any
) -> None:
    plane, url = live
    async with durable.connect(url, token=OPERATOR) as remote:
        assert not remote.embedded
        with pytest.raises(durable.ConfigurationError, match="no storage of its own"):
            durable.Worker(remote, workflows=[napper])
        with pytest.raises(durable.NameNotRegistered):
            await remote.start("never-defined", 1, id="before-worker")
        handle = await remote.start(napper, 0.05, id="r1")  # a function: no worker needed
        async with make_worker(workflows=[napper, broken]):
            assert await handle.result() == "rested"
            with pytest.raises(durable.WorkflowFailed) as failed:
                await remote.execute(broken, "remote boom", id="r2")
            assert failed.value.failure["exception_class"] == "builtins.ValueError"
            with pytest.raises(durable.WorkflowAlreadyStarted):
                await remote.start(napper, 1, id="r1",
                                   options=durable.StartOptions.reject_duplicate())
        with pytest.raises(durable.WorkflowNotFound):
            await remote.get_handle("ghost").describe()
        with pytest.raises(durable.WorkflowNotFound):
            await remote.get_handle("ghost").result()
        assert [e.type for e in await handle.history(limit=2)] == ["WorkflowStarted",
                                                                    "TimerScheduled"]
        summaries = await remote.list(status="completed")
        assert summaries[0]["workflow_id"] == "r1"
        assert summaries[0]["started_at"] == (await plane.storage.list(
            status="completed"))[0]["started_at"]
        assert await remote.repair_pass() == {}
        assert await remote.overdue_deadlines() == await plane.storage.overdue_deadlines()
        other = remote.with_namespace("elsewhere")
        assert await other.list() == []
        await other.close()  # a view: the connection stays open
        assert len(await remote.list()) == 2
    async with durable.connect(url, token=VIEWER) as viewer:
        assert len(await viewer.list()) == 2
        assert (await viewer.overdue_deadlines())["runs"] == {}  # a read: a viewer's too
        with pytest.raises(durable.http.PermissionDenied):
            await viewer.get_handle("r1").terminate()
    async with durable.connect(url, token="wrong") as stranger:
        with pytest.raises(durable.http.AuthenticationFailed):
            await stranger.list()


@pytest.mark.remote_client
async def test_the_sdk_starts_ids_the_reference_refuses_and_lists_past_its_page_bound(
        client: durable.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `/api` refuses a caller in the reference's terms, durable's SDK still
    does, embedded or remote: ids the reference's start refuses (its remote
    client asks for durable's id rules), and lists longer than the
    reference's page bound (the remote client reads them a page at a time;
    pages of 2 here instead of 200): the same runs, the same cursor."""
    from durable.http import remote

    monkeypatch.setattr(remote, "LIST_PAGE_MAX", 2)
    odd = ["order 1/ü", "x" * 255, "a#b?c%d", "e"]
    for wid in odd:
        await client.start(napper, 3600, id=wid)
    assert sorted(s["workflow_id"] for s in await client.list(limit=4)) == sorted(odd)
    first = await client.list_page(limit=3)
    assert len(first.items) == 3 and first.next_cursor
    rest = await client.list_page(limit=3, cursor=first.next_cursor)
    assert len(rest.items) == 1 and rest.next_cursor is None
    assert sorted(s["workflow_id"] for s in first.items + rest.items) == sorted(odd)
    assert (await client.get_handle("order 1/ü").describe())["workflow_id"] == "order 1/ü"


async def test_connect_over_http_takes_token_from_environment_and_refuses_driver_options(
    live: tuple[Plane, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = live
    monkeypatch.setenv("DURABLE_TOKEN", VIEWER)
    async with durable.connect(url) as client:
        assert await client.list() == []
    with pytest.raises(durable.ConfigurationError, match=r"pool_size .*mean nothing"):
        await durable.connect(url, pool_size=3)
    with pytest.raises(durable.ConfigurationError, match="clock="):
        await durable.connect(url, clock=durable.VirtualClock())
    with pytest.raises(durable.ConfigurationError, match="token= is for a control plane"):
        await durable.connect("sqlite:///:memory:", token="x")
    unreachable = await durable.connect("http://127.0.0.1:9", token="x", timeout=2)
    try:
        with pytest.raises(durable.StorageUnavailable, match="cannot reach"):
            await unreachable.list()
    finally:
        await unreachable.close()


# ---------------------------------------------------------------- serve


def test_only_loopback_addresses_count_as_loopback() -> None:
    for host in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com"):
        assert not is_loopback(host), host


async def test_serve_refuses_a_non_loopback_address_without_tokens(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABLE_TOKENS", raising=False)
    monkeypatch.delenv("DURABLE_TOKENS_FILE", raising=False)
    with pytest.raises(durable.ConfigurationError, match="refusing to serve"):
        await serve_async(db_url, host="0.0.0.0", port=0)


async def test_serve_runs_a_worker_in_process_and_answers_on_loopback(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABLE_TOKENS", raising=False)
    monkeypatch.delenv("DURABLE_TOKENS_FILE", raising=False)
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(
            serve_async, db_url, "127.0.0.1", 0, worker="test_http:SERVE_WORKER"))
        async with durable.connect(f"http://127.0.0.1:{port}") as remote:  # no token: loopback
            assert await remote.execute("napper", 0.01, id="served") == "rested"
            assert "napper" in await remote.control.registered_types()
        tg.cancel_scope.cancel()


def not_a_worker(client: durable.Client) -> str:
    return "not a worker"


async def test_worker_spec_errors_are_clear(storage_client: durable.Client) -> None:
    storage = storage_client
    with pytest.raises(durable.ConfigurationError, match="MODULE:ATTR"):
        load_worker("no-colon", storage)
    with pytest.raises(durable.ConfigurationError, match="cannot import"):
        load_worker("no_such_module_here:x", storage)
    with pytest.raises(durable.ConfigurationError, match="has no attribute"):
        load_worker("test_http:NOTHING", storage)
    with pytest.raises(durable.ConfigurationError, match=r"not a durable\.Worker"):
        load_worker("test_http:not_a_worker", storage)


# ---------------------------------------------------------------- discovery


@HTTP_ONLY
async def test_health_needs_neither_token_nor_version_header(plane: Plane) -> None:
    response = await plane.http.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "serving" and body["checks"] == {"database": "ok"}
    assert body["timestamp"].endswith("+00:00")


@HTTP_ONLY
async def test_cluster_info_advertises_what_the_reference_client_checks(plane: Plane) -> None:
    """The reference client reads these before a query, a cancellation request
    and an update; cluster info needs a token but not the version header."""
    anonymous = await plane.http.get("/api/cluster/info")
    assert anonymous.status_code == 401 and error_of(anonymous)["code"] == "unauthenticated"
    response = await plane.http.get("/api/cluster/info",
                                    headers={"Authorization": f"Bearer {VIEWER}"})
    assert response.status_code == 200
    info = response.json()
    capabilities = info["worker_protocol"]["server_capabilities"]
    assert capabilities["query_tasks"] is True
    assert capabilities["cooperative_cancellation"] is True
    major, minor = info["worker_protocol"]["version"].split(".")
    assert major == "1" and int(minor) >= 20
    wait_for = (info["control_plane"]["request_contract"]["operations"]["update"]["fields"]
                ["wait_for"]["canonical_values"])
    assert wait_for == ["accepted", "completed"]
    assert info["control_plane"]["version"] == "2"
    assert info["capabilities"]["payload_codecs"] == ["avro"]
    assert info["limits"]["max_payload_bytes"] == plane.storage.limits.payload_bytes


# ---------------------------------------------------------------- operator routes (admin)


ADMIN = "admin-token-1"


async def test_namespaces_and_the_repair_pass_need_the_admin_role(
    storage_client: durable.Client,
) -> None:
    app = create_app(storage_client, {**TOKENS, ADMIN: "admin"}, environ={})
    as_admin = {**VERSION, "Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://plane") as http:
        for workflow_id, namespace in (("a1", "team-a"), ("a2", "team-a"), ("b1", "team-b")):
            body = {"workflow_type": "napper", "workflow_id": workflow_id, "input": [3600],
                    "require_registered": False}
            created = await http.post("/api/workflows", json=body,
                                      headers={**as_admin, "X-Namespace": namespace})
            assert created.status_code == 201, created.text  # admin may do what operators do
        for path in ("/api/namespaces", "/api/namespaces/team-a"):
            refused = await http.get(path, headers=AS_OPERATOR)
            assert refused.status_code == 403 and error_of(refused)["required_role"] == "admin"
        refused = await http.post("/api/system/repair/pass", headers=AS_OPERATOR)
        assert refused.status_code == 403
        listed = (await http.get("/api/namespaces", headers=as_admin)).json()["namespaces"]
        assert [(n["name"], n["run_count"], n["open_run_count"], n["status"])
                for n in listed] == [("default", 0, 0, "active"), ("team-a", 2, 2, "active"),
                                     ("team-b", 1, 1, "active")]
        one = await http.get("/api/namespaces/team-b", headers=as_admin)
        assert one.status_code == 200 and one.json()["name"] == "team-b"
        missing = await http.get("/api/namespaces/nobody", headers=as_admin)
        assert missing.status_code == 404 and error_of(missing)["code"] == "namespace_not_found"
        repaired = await http.post("/api/system/repair/pass",
                                   headers={**as_admin, "X-Namespace": "team-a"})
        assert repaired.status_code == 200
        assert repaired.json() == {"namespace": "team-a", "counts": {}, "repaired": 0}
