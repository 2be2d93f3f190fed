"""The web UI over HTTP, without a browser: sessions, CSRF, roles, pages as HTML.

The app runs in-process behind httpx's ASGITransport on real SQLite storage
(the browser tests in tests/test_ui.py drive a live server with Chromium).
Every rule here is one a browser test would take seconds to show: a form
without the session's CSRF token does nothing, a viewer's crafted POST is a
403 through the API's own role check, a cookie is never a bearer token, a
removed token ends its sessions. The view functions are checked on the
documented dict shapes.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import durable
from durable import activity, present, workflow
from durable.http import create_app
from durable.http.ui import cascade, views
from durable.http.ui.session import COOKIE_NAME, SessionCodec, session_key
from durable.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.anyio

OPERATOR = "ui-op-token"
VIEWER = "ui-view-token"
TOKENS = {OPERATOR: "operator", VIEWER: "viewer"}
SECRET = "a-test-secret-of-enough-bytes-0123456789"
API = {"X-Durable-Workflow-Control-Plane-Version": "2"}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SQLITE_ONLY = pytest.mark.parametrize("driver_name", ["sqlite"])


class Browserless:
    """An httpx client that keeps cookies like a browser, on the app in-process."""

    def __init__(self, http: httpx.AsyncClient, storage: durable.Client) -> None:
        self.http = http
        self.storage = storage

    async def csrf(self, path: str = "/ui/login") -> str:
        page = await self.http.get(path)
        found = CSRF.search(page.text)
        assert found, page.text[:500]
        return found.group(1)

    async def login(self, token: str) -> httpx.Response:
        csrf = await self.csrf()
        return await self.http.post("/ui/login", data={"csrf": csrf, "token": token})

    async def start(self, workflow_id: str, **fields: Any) -> str:
        response = await self.http.post(
            "/api/workflows", headers={**API, "Authorization": f"Bearer {OPERATOR}"},
            json={"workflow_type": "ui-nobody", "workflow_id": workflow_id, "input": [1],
                  "require_registered": False, **fields})
        assert response.status_code == 201, response.text
        run_id: str = response.json()["run_id"]
        return run_id

    async def status(self, workflow_id: str) -> str:
        info = await self.storage.get_handle(workflow_id).describe()
        return str(info["status"])


def _app(storage: durable.Client, **kwargs: Any) -> Any:
    kwargs.setdefault("environ", {})
    return create_app(storage, kwargs.pop("tokens", TOKENS), ui_secret=SECRET, **kwargs)


@pytest.fixture
async def ui(storage_client: durable.Client) -> AsyncIterator[Browserless]:
    transport = httpx.ASGITransport(app=_app(storage_client), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        yield Browserless(http, storage_client)


# ---------------------------------------------------------------- sessions


@SQLITE_ONLY
async def test_pages_redirect_to_the_login_form_until_signed_in(ui: Browserless) -> None:
    response = await ui.http.get("/ui/runs?status=running")
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/login?next=%2Fui%2Fruns%3Fstatus%3Drunning"
    response = await ui.http.get("/ui")
    assert response.status_code == 303


@SQLITE_ONLY
async def test_login_sets_an_httponly_samesite_strict_cookie_and_no_token(
        ui: Browserless) -> None:
    response = await ui.login(OPERATOR)
    assert response.status_code == 303 and response.headers["location"] == "/ui/runs"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=v1.")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/ui", "Max-Age=43200"):
        assert attribute in cookie, cookie
    assert OPERATOR not in cookie
    page = await ui.http.get("/ui/runs")
    assert page.status_code == 200
    assert 'Signed in as <strong data-role="operator">operator</strong>' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


@SQLITE_ONLY
async def test_an_unknown_token_is_refused_at_login(ui: Browserless) -> None:
    response = await ui.login("not-a-token")
    assert response.status_code == 401
    assert "That token is not known here" in response.text
    assert (await ui.http.get("/ui/runs")).status_code == 303


@SQLITE_ONLY
async def test_the_login_form_itself_needs_the_sessions_csrf_token(ui: Browserless) -> None:
    await ui.http.get("/ui/login")
    response = await ui.http.post("/ui/login", data={"token": OPERATOR})
    assert response.status_code == 403
    assert "CSRF" in response.text
    assert (await ui.http.get("/ui/runs")).status_code == 303


@SQLITE_ONLY
async def test_login_never_redirects_off_the_ui(ui: Browserless) -> None:
    for target in ("https://evil.example/", "//evil.example/ui/", "/api/workflows"):
        csrf = await ui.csrf()  # signing in starts a new session, with a new token
        response = await ui.http.post("/ui/login", params={"next": target},
                                      data={"csrf": csrf, "token": VIEWER})
        assert response.headers["location"] == "/ui/runs", target


@SQLITE_ONLY
async def test_the_session_cookie_is_not_a_bearer_token(ui: Browserless) -> None:
    await ui.login(OPERATOR)
    response = await ui.http.get("/api/workflows", headers=API)
    assert response.status_code == 401
    assert response.json()["reason"] == "unauthenticated"


@SQLITE_ONLY
async def test_a_forged_or_tampered_cookie_is_ignored(ui: Browserless) -> None:
    await ui.login(OPERATOR)
    good = ui.http.cookies[COOKIE_NAME]
    version, payload, signature = good.split(".")
    session = SessionCodec(session_key(SECRET)).decode(good)
    assert session is not None and session.signed_in
    resigned = SessionCodec(session_key("another-secret-of-enough-bytes")).encode(session)
    for bad in (f"{version}.{payload}.{signature[:-2]}AA",
                f"{version}.{payload[:-2]}xx.{signature}", resigned):
        ui.http.cookies.clear()
        ui.http.cookies.set(COOKIE_NAME, bad, domain="plane", path="/ui")
        assert (await ui.http.get("/ui/runs")).status_code == 303


@SQLITE_ONLY
async def test_removing_a_token_ends_its_sessions(storage_client: durable.Client) -> None:
    first = httpx.ASGITransport(app=_app(storage_client), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=first, base_url="http://plane") as http:
        ui = Browserless(http, storage_client)
        await ui.login(VIEWER)
        assert (await http.get("/ui/runs")).status_code == 200
        cookie = http.cookies[COOKIE_NAME]
    # the same secret, but the viewer token is gone (a restart with a new tokens file)
    second = httpx.ASGITransport(app=_app(storage_client, tokens={OPERATOR: "operator"}),
                                 raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=second, base_url="http://plane") as http:
        http.cookies.set(COOKIE_NAME, cookie, domain="plane", path="/ui")
        assert (await http.get("/ui/runs")).status_code == 303


@SQLITE_ONLY
async def test_logout_ends_the_session(ui: Browserless) -> None:
    await ui.login(OPERATOR)
    csrf = await ui.csrf("/ui/runs")
    response = await ui.http.post("/ui/logout", data={"csrf": csrf})
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    assert (await ui.http.get("/ui/runs")).status_code == 303


@SQLITE_ONLY
async def test_anonymous_role_reads_without_signing_in(storage_client: durable.Client) -> None:
    app = create_app(storage_client, anonymous_role="viewer", environ={}, ui_secret=SECRET)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        page = await http.get("/ui/runs")
        assert page.status_code == 200
        assert "Not signed in: acting as" in page.text
        login = await http.get("/ui/login")
        assert "This server has no tokens configured" in login.text


# ---------------------------------------------------------------- actions


@SQLITE_ONLY
async def test_a_post_without_the_csrf_token_does_nothing(ui: Browserless) -> None:
    run_id = await ui.start("csrf-1")
    await ui.login(OPERATOR)
    for data in ({}, {"csrf": "forged"}, {"csrf": ""}):
        response = await ui.http.post(f"/ui/run/terminate?wf=csrf-1&run={run_id}",
                                      data={**data, "reason": "x"})
        assert response.status_code == 403
        assert "Form refused (CSRF)" in response.text
    # a token from another session does not do either
    other = httpx.ASGITransport(app=_app(ui.storage), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=other, base_url="http://plane") as http:
        theirs = await Browserless(http, ui.storage).csrf()
    response = await ui.http.post(f"/ui/run/terminate?wf=csrf-1&run={run_id}",
                                  data={"csrf": theirs})
    assert response.status_code == 403
    assert await ui.status("csrf-1") == "pending"


@SQLITE_ONLY
async def test_a_viewer_sees_no_actions_and_its_crafted_post_is_refused(
        ui: Browserless) -> None:
    run_id = await ui.start("viewer-1")
    await ui.login(VIEWER)
    page = await ui.http.get(f"/ui/run?wf=viewer-1&run={run_id}")
    assert page.status_code == 200
    assert "Read only: a viewer cannot act on runs" in page.text
    for action in ("request-cancellation", "cancel", "terminate"):
        assert f"/ui/run/{action}?" not in page.text
        confirm = await ui.http.get(f"/ui/run/{action}?wf=viewer-1&run={run_id}")
        assert confirm.status_code == 403
    csrf = CSRF.search(page.text)
    assert csrf is not None  # the sign-out form: the viewer has a valid CSRF token
    for action in ("request-cancellation", "cancel", "terminate"):
        response = await ui.http.post(f"/ui/run/{action}?wf=viewer-1&run={run_id}",
                                      data={"csrf": csrf.group(1), "reason": "no"})
        assert response.status_code == 403, action
        # the API's own words: the same role check refused it
        assert "a viewer token may not do this; it needs the operator role" in response.text
    assert await ui.status("viewer-1") == "pending"


@SQLITE_ONLY
async def test_operator_actions_go_through_the_api_operations(ui: Browserless) -> None:
    await ui.login(OPERATOR)
    run_a = await ui.start("act-a")
    confirm = await ui.http.get(f"/ui/run/request-cancellation?wf=act-a&run={run_a}")
    assert confirm.status_code == 200
    assert 'name="cleanup_timeout_seconds"' in confirm.text
    csrf = CSRF.search(confirm.text)
    assert csrf is not None
    response = await ui.http.post(f"/ui/run/request-cancellation?wf=act-a&run={run_a}",
                                  data={"csrf": csrf.group(1), "reason": "from the UI",
                                        # the SDK's budgets (over the reference's hour)
                                        "cleanup_timeout_seconds": "7200.5"})
    assert response.status_code == 303
    assert response.headers["location"].endswith("notice=cancellation-requested")
    info = await ui.storage.get_handle("act-a").describe()
    request = info["cancellation"]
    assert request["reason"] == "from the UI" and request["source"] == "web_ui"
    assert request["requester"] == {"type": "web_ui", "id": None, "label": "operator"}
    assert request["cleanup_timeout_seconds"] == 7200.5
    # a repeat is the API's 200: the original request stands
    again = await ui.http.post(f"/ui/run/request-cancellation?wf=act-a&run={run_a}",
                               data={"csrf": csrf.group(1), "cleanup_timeout_seconds": "99"})
    assert again.headers["location"].endswith("notice=cancellation-repeated")
    page = await ui.http.get(again.headers["location"])
    assert "the original request and its deadline stand" in page.text
    # bad input is the API schema's refusal, shown on the form
    bad = await ui.http.post(f"/ui/run/request-cancellation?wf=act-a&run={run_a}",
                             data={"csrf": csrf.group(1), "cleanup_timeout_seconds": "-1"})
    assert bad.status_code == 422
    assert "cleanup_timeout_seconds" in bad.text and 'role="alert"' in bad.text

    run_b = await ui.start("act-b")
    response = await ui.http.post(f"/ui/run/terminate?wf=act-b&run={run_b}",
                                  data={"csrf": csrf.group(1), "reason": "fraud"})
    assert response.status_code == 303
    info = await ui.storage.get_handle("act-b").describe()
    assert info["status"] == "terminated" and info["closed_reason"] == "fraud"

    run_c = await ui.start("act-c")
    await ui.http.post(f"/ui/run/cancel?wf=act-c&run={run_c}", data={"csrf": csrf.group(1)})
    assert await ui.status("act-c") == "cancelled"
    closed = await ui.http.post(f"/ui/run/request-cancellation?wf=act-c&run={run_c}",
                                data={"csrf": csrf.group(1)})
    assert closed.status_code == 409
    assert "is already cancelled; there is nothing to cancel" in closed.text
    # "Terminate" on a run that closed otherwise: refused, never the notice
    # that it was terminated (it said so before, beside a cancelled run)
    late = await ui.http.post(f"/ui/run/terminate?wf=act-c&run={run_c}",
                              data={"csrf": csrf.group(1), "reason": "too late"})
    assert late.status_code == 409 and "location" not in late.headers
    assert "is already cancelled; nothing was terminated" in late.text
    assert 'role="alert"' in late.text
    assert await ui.status("act-c") == "cancelled"


@SQLITE_ONLY
async def test_an_action_on_an_older_run_is_refused_not_redirected(ui: Browserless) -> None:
    await ui.login(OPERATOR)
    await ui.start("old-1")
    csrf = await ui.csrf("/ui/runs")
    response = await ui.http.post("/ui/run/request-cancellation?wf=old-1&run=no-such-run",
                                  data={"csrf": csrf})
    assert response.status_code == 404


@SQLITE_ONLY
async def test_an_operator_signals_a_run_from_its_page_and_a_viewer_cannot(
    ui: Browserless,
) -> None:
    run_id = await ui.start("sig-1")
    await ui.login(OPERATOR)
    page = await ui.http.get(f"/ui/run?wf=sig-1&run={run_id}")
    assert "/ui/run/signal?" in page.text
    form = await ui.http.get(f"/ui/run/signal?wf=sig-1&run={run_id}")
    assert form.status_code == 200 and 'name="args"' in form.text
    csrf = CSRF.search(form.text)
    assert csrf is not None
    bad = await ui.http.post(f"/ui/run/signal?wf=sig-1&run={run_id}",
                             data={"csrf": csrf.group(1), "name": "go", "args": "not json"})
    assert bad.status_code == 422 and "JSON" in bad.text
    sent = await ui.http.post(f"/ui/run/signal?wf=sig-1&run={run_id}",
                              data={"csrf": csrf.group(1), "name": "go", "args": '["ann", 3]'})
    assert sent.status_code in (200, 303), sent.text
    events = await ui.storage.get_handle("sig-1").history()
    received = [e.data for e in events if e.type == "SignalReceived"]
    assert len(received) == 1 and received[0]["name"] == "go"
    await ui.login(VIEWER)
    viewer_csrf = await ui.csrf("/ui/runs")
    refused = await ui.http.post(f"/ui/run/signal?wf=sig-1&run={run_id}",
                                 data={"csrf": viewer_csrf, "name": "go", "args": "[]"})
    assert refused.status_code == 403
    events = await ui.storage.get_handle("sig-1").history()
    assert len([e for e in events if e.type == "SignalReceived"]) == 1


@workflow.defn(name="ui-http-approval")
class UIApproval:
    """The approval example's shape: a query, a validated update, a signal."""

    def __init__(self) -> None:
        self.limit = 1000
        self.approver: str | None = None

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.approver is not None, timeout=3600)
        return f"approved by {self.approver} under {self.limit}"

    @workflow.signal
    def approve(self, who: str) -> None:
        self.approver = who

    @workflow.query
    def progress(self) -> dict[str, Any]:
        return {"limit": self.limit, "approver": self.approver}

    @workflow.update
    def set_limit(self, limit: int) -> int:
        previous, self.limit = self.limit, limit
        return previous

    @set_limit.validator
    def _check_limit(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"a limit must be positive, got {limit}")


@SQLITE_ONLY
async def test_query_and_update_forms_finish_the_approval_from_the_ui(
    ui: Browserless, make_worker: Any,
) -> None:
    async with make_worker(workflows=[UIApproval]):
        handle = await ui.storage.start(UIApproval, id="appr-1")
        run_id = (await handle.describe())["run"]["run_id"]
        with anyio.fail_after(30):  # until it waits on its condition
            while "ConditionScheduled" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.02)
        base = f"?wf=appr-1&run={run_id}"
        await ui.login(VIEWER)  # a viewer may query, not update
        page = await ui.http.get(f"/ui/run{base}")
        assert "/ui/run/query?" in page.text and "/ui/run/update?" not in page.text
        pending = page.text[page.text.index('id="pending"'):page.text.index('id="received"')]
        assert "times out" in pending and "fires" not in pending  # a condition's timeout
        csrf = await ui.csrf(f"/ui/run/query{base}")
        asked = await ui.http.post(f"/ui/run/query{base}",
                                   data={"csrf": csrf, "name": "progress", "args": "[]"})
        assert asked.status_code == 200, asked.text
        assert 'id="action-answer"' in asked.text and "&#34;limit&#34;: 1000" in asked.text
        unknown = await ui.http.post(f"/ui/run/query{base}",
                                     data={"csrf": csrf, "name": "nope", "args": "[]"})
        assert unknown.status_code == 409 and 'id="action-error"' in unknown.text
        refused = await ui.http.post(f"/ui/run/update{base}",
                                     data={"csrf": csrf, "name": "set_limit", "args": "[5]"})
        assert refused.status_code == 403
        await ui.login(OPERATOR)
        form = await ui.http.get(f"/ui/run/update{base}")
        assert form.status_code == 200 and 'name="request_id"' in form.text
        csrf = await ui.csrf(f"/ui/run/update{base}")
        rejected = await ui.http.post(f"/ui/run/update{base}",
                                      data={"csrf": csrf, "name": "set_limit", "args": "[0]"})
        assert rejected.status_code == 409, rejected.text
        assert "a limit must be positive, got 0" in rejected.text
        data = {"csrf": csrf, "name": "set_limit", "args": "[5000]", "request_id": "u-1"}
        done = await ui.http.post(f"/ui/run/update{base}", data=data)
        assert done.status_code == 200, done.text
        assert "update id <code>u-1</code>" in done.text and ">1000</pre>" in done.text
        again = await ui.http.post(f"/ui/run/update{base}", data=data)  # a reload
        assert again.status_code == 200 and ">1000</pre>" in again.text  # not run twice
        bad = await ui.http.post(f"/ui/run/update{base}",
                                 data={"csrf": csrf, "name": "set_limit", "args": "{}"})
        assert bad.status_code == 422 and "JSON array" in bad.text
        sent = await ui.http.post(f"/ui/run/signal{base}",
                                  data={"csrf": csrf, "name": "approve", "args": '["ann"]'})
        assert sent.status_code == 303, sent.text
        with anyio.fail_after(30):
            assert await handle.result() == "approved by ann under 5000"
        page = await ui.http.get(f"/ui/run{base}")
        received = page.text[page.text.index('id="received"'):page.text.index('id="activities"')]
        assert "approve" in received and "set_limit" in received
        assert "web_ui (operator) via web_ui" in received
        closed = await ui.http.post(f"/ui/run/query{base}",
                                    data={"csrf": csrf, "name": "progress", "args": "[]"})
        assert closed.status_code == 200 and "&#34;approver&#34;: &#34;ann&#34;" in closed.text


FLAKY: dict[str, int] = {}


@activity.defn(name="ui-flaky")
async def ui_flaky(key: str) -> str:
    FLAKY[key] = FLAKY.get(key, 0) + 1
    if FLAKY[key] < 2:
        raise RuntimeError(f"attempt {FLAKY[key]} of {key} failed")
    return key


@workflow.defn(name="ui-kid")
async def ui_kid(key: str) -> str:
    return await workflow.execute_activity(
        ui_flaky, key, options=durable.ActivityOptions(
            start_to_close_timeout=30,
            retry=durable.RetryPolicy(max_attempts=3, initial_interval=0.01)))


@workflow.defn(name="ui-mom")
async def ui_mom(key: str) -> str:
    await workflow.sleep(0.01)
    return await workflow.execute_child(ui_kid, key, id=f"{key}-kid")


@SQLITE_ONLY
async def test_the_timeline_draws_steps_as_bars_and_the_tree_of_runs(
    ui: Browserless, make_worker: Any,
) -> None:
    key = f"tree-{uuid.uuid4().hex[:6]}"
    async with make_worker(workflows=[ui_mom, ui_kid], activities=[ui_flaky]):
        handle = await ui.storage.start(ui_mom, key, id=key)
        with anyio.fail_after(30):
            assert await handle.result() == key
    await ui.login(VIEWER)
    page = await ui.http.get(f"/ui/run/timeline?wf={key}-kid")
    assert page.status_code == 200, page.text
    chart = page.text[page.text.index('id="chart"'):page.text.index('id="tree"')]
    assert '<svg class="gantt"' in chart
    assert 'data-kind="activity" data-status="completed"' in chart
    assert chart.count('class="mark"') == 1  # the first attempt failed
    assert "/ui/run/activity?wf=" in chart
    tree = page.text[page.text.index('id="tree"'):]
    assert tree.index(f'data-wf="{key}"') < tree.index(f'data-wf="{key}-kid"')
    assert 'class="current" aria-current="true" data-wf="' + f'{key}-kid"' in tree
    mom = await ui.http.get(f"/ui/run/timeline?wf={key}")
    chart = mom.text[mom.text.index('id="chart"'):mom.text.index('id="tree"')]
    assert 'data-kind="timer" data-status="completed"' in chart
    assert 'data-kind="child" data-status="completed"' in chart
    alone = await ui.start(f"{key}-alone")
    page = await ui.http.get(f"/ui/run/timeline?wf={key}-alone&run={alone}")
    assert "no parent and started no child" in page.text
    assert "No activity, timer, child or phase yet." in page.text


def test_the_chart_places_bars_on_the_axis_and_marks_failed_attempts() -> None:
    from durable.http.ui import chart

    t0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def ev(seconds: float, kind: str, **data: Any) -> dict[str, Any]:
        return {"type": kind, "recorded_at": (t0 + timedelta(seconds=seconds)).isoformat(),
                "data": data}

    events = [
        ev(0, "WorkflowStarted"),
        ev(0, "ActivityScheduled", op_id="0:1", activity_type="charge"),
        ev(1, "ActivityRetryScheduled", op_id="0:1", attempt=1),
        ev(5, "ActivityFailed", op_id="0:1", attempt=2),
        ev(5, "TimerScheduled", op_id="0:2", duration_seconds=60),
        ev(6, "CancellationDelivered"),
        ev(6, "TimerCancelled", op_id="0:2"),
        ev(10, "WorkflowCancelled", reason="deadline_expired"),
    ]
    rows = chart.spans(events)
    assert [(r["kind"], r["status"]) for r in rows] == [
        ("activity", "failed"), ("timer", "cancelled"), ("cleanup", "timed_out")]
    drawn = chart.chart(rows, t0, t0 + timedelta(seconds=10), t0)
    assert drawn is not None
    bar = drawn["bars"][0]
    assert bar["x"] == chart.LABEL and bar["bad"] and len(bar["marks"]) == 2
    width = chart.WIDTH - chart.LABEL - 10
    assert bar["w"] == round(width / 2, 1)  # 5 s of 10
    assert drawn["bars"][2]["x"] == round(chart.LABEL + width * 0.6, 1)
    still = chart.chart(chart.spans(events[:5]), t0, None, t0 + timedelta(seconds=20))
    assert still is not None and still["bars"][1]["open"]
    assert still["ticks"][-1]["text"] == "+20s"


@activity.defn(name="ui-unit")
def ui_unit(item: str) -> str:
    while item == "stuck":  # past its start-to-close: its effect cannot be confirmed
        time.sleep(0.02)
        activity.check_cancelled()
    return item


@workflow.defn(name="ui-units")
async def ui_units(items: list[str]) -> int:
    result = await workflow.units(
        items, key=str, handler=ui_unit,
        options=durable.ActivityOptions(start_to_close_timeout=1))
    return len(result.done)


@SQLITE_ONLY
async def test_an_operator_decides_about_unknown_units_from_the_run_page(
    ui: Browserless, make_worker: Any,
) -> None:
    async with make_worker(workflows=[ui_units], activities=[ui_unit]):
        handle = await ui.storage.start(ui_units, ["a", "stuck"], id="units-1")
        with anyio.fail_after(30):
            while (await handle.describe())["status"] != "unknown":
                await anyio.sleep(0.05)
        run_id = (await handle.describe())["run"]["run_id"]
        await ui.login(OPERATOR)
        page = await ui.http.get(f"/ui/run?wf=units-1&run={run_id}")
        assert "could not be confirmed" in page.text and "stuck" in page.text
        assert "/ui/run/retry-after-review?" in page.text
        form = await ui.http.get(f"/ui/run/retry-after-review?wf=units-1&run={run_id}")
        assert 'value="rerun"' in form.text and 'value="confirm"' in form.text
        csrf = CSRF.search(form.text)
        assert csrf is not None
        odd = await ui.http.post(f"/ui/run/retry-after-review?wf=units-1&run={run_id}",
                                 data={"csrf": csrf.group(1), "units": "maybe"})
        assert odd.status_code == 422
        done = await ui.http.post(f"/ui/run/retry-after-review?wf=units-1&run={run_id}",
                                  data={"csrf": csrf.group(1), "units": "confirm"})
        assert done.status_code == 303 and "review-cleared" in done.headers["location"]
        with anyio.fail_after(30):
            assert await handle.result() == 2
    listed = await ui.http.get("/ui/runs?status=unknown")
    assert listed.status_code == 200


# ---------------------------------------------------------------- pages


@SQLITE_ONLY
async def test_the_event_stream_reports_new_events_then_the_close(ui: Browserless) -> None:
    run_id = await ui.start("stream-1")
    await ui.login(VIEWER)
    await ui.storage.get_handle("stream-1").terminate("done watching")
    response = await ui.http.get(f"/ui/run/stream?wf=stream-1&run={run_id}&after=0")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "content-length" not in response.headers
    body = response.text
    assert body.startswith("retry: 2000\n\n")
    assert "event: history\ndata: " in body and "WorkflowTerminated" in body
    assert body.rstrip().endswith('event: closed\ndata: {"status": "terminated"}')
    # it resumes after the browser's Last-Event-ID: nothing new, only the close
    last = re.findall(r"id: (\d+)\nevent: history", body)[-1]
    again = await ui.http.get(f"/ui/run/stream?wf=stream-1&run={run_id}",
                              headers={"Last-Event-ID": last})
    assert "event: history" not in again.text and "event: closed" in again.text
    missing = await ui.http.get("/ui/run/stream?wf=stream-1&run=nope")
    assert missing.status_code == 404


@SQLITE_ONLY
async def test_the_live_parts_of_a_run_page_render_alone(ui: Browserless) -> None:
    run_id = await ui.start("live-1")
    await ui.login(VIEWER)
    page = await ui.http.get(f"/ui/run?wf=live-1&run={run_id}")
    assert f'data-poll="/ui/run/live?wf=live-1&amp;run={run_id}"' in page.text
    assert 'id="waiting"' in page.text
    part = await ui.http.get(f"/ui/run/live?wf=live-1&run={run_id}")
    assert part.status_code == 200 and "<html" not in part.text
    assert 'id="poll-state" data-poll-part data-open="1"' in part.text
    listed = await ui.http.get("/ui/runs")
    row = listed.text[listed.text.index('data-workflow-id="live-1"'):]
    assert 'data-waiting="1"' in row[:row.index("</tr>")]  # the list tells waiting from busy
    # no worker started it: not "started 21m ago, 21m so far"
    assert "data-not-started>not started</span>, created" in row[:row.index("</tr>")]
    assert "so far" not in row[:row.index("</tr>")]
    # "busy" is only for a live holder (a killed worker's run reads "holder gone":
    # test_the_runs_list_names_a_killed_holder)
    template = (Path(views.__file__).parent / "templates" / "runs.html").read_text()
    assert "held by a live worker" in template
    # nobody serves the queue: the page says what is missing, not "busy"
    assert 'data-waiting-kind="worker"' in part.text and "registers ui-nobody" in part.text
    assert 'id="pending" data-poll-part' in part.text
    await ui.storage.get_handle("live-1").terminate("done")
    part = await ui.http.get(f"/ui/run/live?wf=live-1&run={run_id}")
    assert 'data-open="0"' in part.text and 'id="waiting"' not in part.text
    page = await ui.http.get(f"/ui/run?wf=live-1&run={run_id}")
    assert "data-poll=" not in page.text
    missing = await ui.http.get("/ui/run/live?wf=nope")
    assert missing.status_code == 404
    listed = await ui.http.get("/ui/runs")
    row = listed.text[listed.text.index('data-workflow-id="live-1"'):]
    assert 'data-waiting=' not in row[:row.index("</tr>")]  # closed: neither


@durable.workflow.defn(name="ui-dash-late")
async def _late() -> None:
    """Started, never run: no worker in these tests registers it."""


@SQLITE_ONLY
async def test_the_dashboard_page_links_each_figure_to_its_worst_run(
        ui: Browserless) -> None:
    await ui.start("dash-open")
    run_id = await ui.start("dash-failed")
    await ui.storage.get_handle("dash-failed").terminate("stop")  # terminated: no failure
    await ui.login(VIEWER)
    page = await ui.http.get("/ui/dashboard")
    assert page.status_code == 200, page.text
    assert 'aria-current="page">Dashboard' in page.text
    rate = page.text[page.text.index('id="d-rate"'):page.text.index('id="d-failures-hour"')]
    assert "2 started in the past hour" in rate
    hour = page.text[page.text.index('id="d-failures-hour"'):page.text.index('id="d-wait"')]
    assert '<p class="figure">0</p>' in hour
    wait = page.text[page.text.index('id="d-wait"'):page.text.index('id="d-longest"')]
    assert "(still waiting)" in wait and "/ui/run?wf=dash-" in wait
    assert run_id  # the terminated run is not the longest wait: it never started
    assert "<svg" in page.text and page.text.count("<rect") == 60
    # after a prune, "0 failures" would read as "nothing failed": it says it is a floor
    assert "Runs already deleted (<code>durable prune</code>" in page.text
    overdue = page.text[page.text.index('id="d-overdue"'):page.text.index('id="d-chart"')]
    assert 'data-overdue="0"' in overdue and "none: every deadline passed so far" in overdue
    # a run whose run timeout passed an hour ago, and no worker to enforce it
    import time

    past = durable.Client(ui.storage.driver, clock=durable.VirtualClock(time.time() - 3600))
    await past.start(_late, id="dash-late", options=durable.StartOptions(run_timeout=10))
    page = await ui.http.get("/ui/dashboard")
    overdue = page.text[page.text.index('id="d-overdue"'):page.text.index('id="d-chart"')]
    assert 'class="card bad-card" id="d-overdue"' in page.text
    assert 'data-overdue="1"' in overdue and "data-unwatched" in overdue
    assert "(run_timeout): no worker" in overdue
    assert "s watchdog seems to run in this namespace" in overdue


@SQLITE_ONLY
async def test_pages_read_without_javascript(ui: Browserless) -> None:
    run_id = await ui.start("page-1", execution_timeout_seconds=7200, run_timeout_seconds=3600,
                            memo={"customer": "c-9"})
    await ui.start("page-2")
    await ui.login(VIEWER)
    listing = await ui.http.get("/ui/runs?status=pending&type=ui-nobody")
    assert listing.status_code == 200
    assert 'data-workflow-id="page-1"' in listing.text
    assert 'data-workflow-id="page-2"' in listing.text
    none = await ui.http.get("/ui/runs?status=completed")
    assert "No workflow runs match." in none.text
    page = await ui.http.get(f"/ui/run?wf=page-1&run={run_id}")
    text = page.text
    assert "Execution timeout" in text and "7200s (2h 00m)" in text
    assert "Run timeout" in text and "3600s (1h 00m)" in text
    assert text.count("data-deadline") >= 2
    assert "&#34;customer&#34;: &#34;c-9&#34;" in text  # the memo, escaped
    assert (await ui.http.get("/ui/run/timeline?wf=page-1")).status_code == 200
    cascade = await ui.http.get("/ui/run/cascade?wf=page-1")
    assert "This run has no cancellation request" in cascade.text
    found = await ui.http.get("/ui/runs?q=page-1")
    assert found.status_code == 303
    assert found.headers["location"] == "/ui/run?wf=page-1"
    partial = await ui.http.get("/ui/runs?q=page-")
    assert "No workflow has the id" in partial.text and 'data-workflow-id="page-2"' in partial.text
    missing = await ui.http.get("/ui/run?wf=nope")
    assert missing.status_code == 404 and "no workflow &#39;nope&#39;" in missing.text
    assert (await ui.http.get("/ui/run/activity?wf=page-1&op=0:9")).status_code == 404
    assert (await ui.http.get("/ui/runs?status=bogus")).status_code == 400
    assert (await ui.http.get("/ui/elsewhere")).status_code == 404
    assert (await ui.http.get("/ui/static/ui.js")).headers["content-type"].startswith(
        "text/javascript")


@SQLITE_ONLY
async def test_text_from_storage_is_escaped(ui: Browserless) -> None:
    evil = "<script>alert(1)</script>"
    await ui.start("esc-1", memo={"note": evil})
    await ui.login(VIEWER)
    page = await ui.http.get("/ui/run?wf=esc-1")
    assert evil not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


@SQLITE_ONLY
async def test_namespaces_are_kept_apart(ui: Browserless) -> None:
    await ui.start("ns-1")
    await ui.login(VIEWER)
    other = await ui.http.get("/ui/runs?ns=team-b")
    assert 'data-workflow-id="ns-1"' not in other.text
    assert (await ui.http.get("/ui/run?wf=ns-1&ns=team-b")).status_code == 404
    assert (await ui.http.get("/ui/runs?ns=bad%20name")).status_code == 400


@SQLITE_ONLY
async def test_mounted_under_a_prefix_links_and_cookie_follow_it(
        storage_client: durable.Client) -> None:
    host = Starlette(routes=[Mount("/durable", app=_app(storage_client))])
    transport = httpx.ASGITransport(app=host, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        first = await http.get("/durable/ui/runs")
        assert first.status_code == 303
        assert first.headers["location"] == "/durable/ui/login?next=%2Fdurable%2Fui%2Fruns"
        assert "Path=/durable/ui" in first.headers["set-cookie"]
        page = await http.get(first.headers["location"])
        assert 'href="/durable/ui/static/ui.css"' in page.text
        csrf = CSRF.search(page.text)
        assert csrf is not None
        signed = await http.post("/durable/ui/login?next=%2Fdurable%2Fui%2Fruns",
                                 data={"csrf": csrf.group(1), "token": VIEWER})
        assert signed.headers["location"] == "/durable/ui/runs"
        assert (await http.get("/durable/ui/runs")).status_code == 200
        assert (await http.get("/durable/ui/static/ui.css")).status_code == 200


@SQLITE_ONLY
async def test_ui_false_leaves_the_ui_out(storage_client: durable.Client) -> None:
    transport = httpx.ASGITransport(app=_app(storage_client, ui=False),
                                    raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        response = await http.get("/ui/runs")
        assert response.status_code == 404
        assert response.json()["reason"] == "route_not_found"


@SQLITE_ONLY
async def test_a_short_ui_secret_is_refused(storage_client: durable.Client) -> None:
    with pytest.raises(durable.ConfigurationError, match="at least 16 bytes"):
        create_app(storage_client, TOKENS, environ={}, ui_secret="short")
    with pytest.raises(durable.ConfigurationError, match="DURABLE_UI_SECRET"):
        create_app(storage_client, TOKENS, environ={"DURABLE_UI_SECRET": "tiny"})


# ---------------------------------------------------------------- views


NOW = datetime(2026, 4, 12, 12, 0, tzinfo=UTC)


def test_the_dashboard_counts_rates_failures_and_names_the_worst_runs() -> None:
    from durable.http.ui.dashboard import bars, dashboard

    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def run(run_id: str, status: str, created: float, started: float | None = None,
            closed: float | None = None) -> dict[str, Any]:
        def at(minutes: float | None) -> str | None:
            return None if minutes is None else (now - timedelta(minutes=minutes)).isoformat()
        return {"run_id": run_id, "workflow_id": f"wf-{run_id}", "status": status,
                "created_at": at(created), "started_at": at(started), "closed_at": at(closed)}

    recent = [
        run("a", "completed", created=0.5, started=0.4, closed=0.1),
        run("b", "failed", created=10, started=10, closed=9),
        run("c", "timed_out", created=3 * 24 * 60, started=3 * 24 * 60, closed=2 * 24 * 60),
        run("d", "pending", created=30),  # no worker took it yet: the longest wait
        run("e", "failed", created=8 * 24 * 60, started=8 * 24 * 60, closed=8 * 24 * 60),
    ]
    old = run("f", "running", created=30 * 24 * 60, started=30 * 24 * 60 - 1)
    d = dashboard(recent, [old, recent[3]], now)
    assert d["runs_last_hour"] == 3 and d["per_minute"][-1] == 1
    assert d["per_minute"][50] == d["per_minute"][30] == 1
    assert d["rate"] == 3 / 60
    assert d["failures_hour"] == 1 and d["latest_failure_hour"]["run_id"] == "b"
    assert d["failures_week"] == 2 and d["latest_failure_week"]["run_id"] == "b"  # not e
    assert d["longest_wait"]["run"]["run_id"] == "d" and d["longest_wait"]["seconds"] == 1800
    assert d["longest_run"]["run"]["run_id"] == "f"  # open, a month old: still counted
    empty = dashboard([], [], now)
    assert empty["longest_run"] is None and empty["rate"] == 0
    assert [b["h"] for b in bars([0, 2, 1], height=80)] == [0, 80, 40]


def test_a_failure_chain_lists_every_cause_outermost_first() -> None:
    chain = views.failure_chain({
        "failure_category": "application", "exception_class": "durable.errors.ActivityFailed",
        "message": "card declined", "attempt": 2,
        "cause": {"exception_class": "builtins.ValueError", "message": "declined",
                  "cause": {"exception_class": "builtins.KeyError", "message": "'o1'"}},
    })
    assert [link["exception_class"] for link in chain] == [
        "durable.errors.ActivityFailed", "builtins.ValueError", "builtins.KeyError"]
    assert chain[0]["details"] == {"attempt": 2}


def test_a_deadline_says_late_in_words_not_only_colour() -> None:
    late = str(views.deadline("2026-04-12T11:59:57+00:00", NOW, True))
    assert "3s late" in late and "⚠" in late and 'class="deadline late"' in late
    ahead = str(views.deadline("2026-04-12T12:04:12+00:00", NOW, True))
    assert "in 4m 12s" in ahead
    closed = str(views.deadline("2026-04-12T11:58:00+00:00", NOW, False))
    assert "passed 2m ago" in closed and "late" not in closed
    met = str(views.deadline("2026-04-12T11:58:00+00:00", NOW, False,
                             "2026-04-12T11:57:59.9+00:00"))
    assert "met, 100ms to spare" in met and "data-deadline" not in met  # the script leaves it
    missed = str(views.deadline("2026-04-12T11:58:00+00:00", NOW, False, NOW))
    assert "missed by 2m" in missed and "⚠" in missed


def _event(sequence: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"sequence": sequence, "type": kind,
            "recorded_at": f"2026-04-12T12:00:{sequence:02d}+00:00", "data": data}


def test_activity_attempts_come_from_history_and_pending_operations() -> None:
    events = [
        _event(2, "ActivityScheduled", op_id="0:1", activity_type="ship", task_id="t1",
               schedule_to_start_timeout=30.0, start_to_close_timeout=60.0,
               schedule_to_close_timeout=None, heartbeat_timeout=10.0,
               retry_policy={"max_attempts": 3, "initial_interval": 1.0,
                             "backoff_coefficient": 2.0, "maximum_interval": 100.0,
                             "non_retryable_error_types": []},
               schedule_to_start_deadline="2026-04-12T12:00:32+00:00"),
        _event(3, "ActivityStarted", op_id="0:1", attempt=1, worker_id="w1",
               start_to_close_deadline="2026-04-12T12:01:03+00:00"),
        _event(4, "ActivityRetryScheduled", op_id="0:1", failed_attempt=1, next_attempt=2,
               timeout_kind="heartbeat", failure={"message": "no heartbeat"},
               schedule_to_start_deadline="2026-04-12T12:00:40+00:00"),
        _event(5, "ActivityStarted", op_id="0:1", attempt=2, worker_id="w2"),
    ]
    pending = [{"op_id": "0:1", "kind": "activity", "task_status": "running", "attempt": 2,
                "heartbeat_details": {"done": 4, "total": 10}}]
    detail = views.activity_detail(events, "0:1", pending, NOW)
    assert detail is not None
    first, second = detail["attempts"]
    assert (first["outcome"], first["timeout_kind"]) == ("timed_out", "heartbeat")
    assert second["outcome"] == "running"
    assert second["heartbeat_details"] == {"done": 4, "total": 10}
    timeouts = {t["kind"]: t for t in detail["timeouts"]}
    assert timeouts["schedule_to_start"]["deadline"] == "2026-04-12T12:00:40+00:00"
    assert timeouts["schedule_to_close"]["configured"] is None
    assert detail["retry_policy"]["max_attempts"] == 3
    # once describe() no longer lists it, an attempt without an outcome is not "running"
    gone = views.activity_detail(events, "0:1", [], NOW)
    assert gone is not None and gone["attempts"][1]["outcome"] == "unknown"


def test_an_activitys_schedule_to_start_deadline_is_over_once_a_worker_claims_it() -> None:
    # judged by the clock alone, an attempt claimed at once that ran past its
    # schedule-to-start deadline read "⚠ 9.7s late" (counting up), and "passed:
    # the activity ended 10m after it" once it completed
    scheduled = _event(2, "ActivityScheduled", op_id="0:1", activity_type="ship", task_id="t1",
                       schedule_to_start_timeout=5.0, start_to_close_timeout=900.0,
                       schedule_to_start_deadline="2026-04-12T12:00:07+00:00")
    started = _event(3, "ActivityStarted", op_id="0:1", attempt=1, worker_id="w1",
                     start_to_close_deadline="2026-04-12T12:15:03+00:00")
    later = NOW + timedelta(minutes=2)
    running = views.activity_detail(
        [scheduled, started], "0:1",
        [{"op_id": "0:1", "kind": "activity", "task_status": "running", "attempt": 1}], later)
    assert running is not None and running["claimed_at"] == started["recorded_at"]
    text = str(views.deadline("2026-04-12T12:00:07+00:00", later, True,
                              claimed=running["claimed_at"]))
    assert "met: a worker claimed it 4s before it" in text
    assert "late" not in text and "⚠" not in text and "data-deadline" not in text
    done = views.activity_detail([scheduled, started, {
        "sequence": 4, "type": "ActivityCompleted", "recorded_at": "2026-04-12T12:10:00+00:00",
        "data": {"op_id": "0:1", "attempt": 1, "result": 1}}], "0:1", [], later)
    assert done is not None and done["claimed_at"] == started["recorded_at"]
    # a retry awaiting a worker is not claimed: its deadline counts down, then is late
    retrying = views.activity_detail([scheduled, started, _event(
        5, "ActivityRetryScheduled", op_id="0:1", failed_attempt=1, next_attempt=2,
        failure={"message": "boom"}, schedule_to_start_deadline="2026-04-12T12:00:10+00:00")],
        "0:1", [{"op_id": "0:1", "kind": "activity", "task_status": "pending"}], later)
    assert retrying is not None and retrying["claimed_at"] is None


@SQLITE_ONLY
async def test_a_run_held_by_a_killed_worker_is_not_said_to_be_busy(ui: Browserless) -> None:
    # a worker SIGKILLed while it held the run: nothing is open and nothing runs,
    # yet the page said "nothing: it is busy (its code or an activity runs)"
    from durable.store.records import WorkerRegistration

    run_id = await ui.start("held-1", task_queue="held-q")
    store, now = ui.storage.store, ui.storage.clock.now()
    await ui.login(VIEWER)
    registration = WorkerRegistration("w-alive", ui.storage.namespace, "held-q", ("ui-nobody",),
                                      (), ())
    await store.register_worker(registration, 600.0, now)
    part = await ui.http.get(f"/ui/run/live?wf=held-1&run={run_id}")  # served, not yet taken
    assert "it is ready for a worker of queue held-q to take" in part.text, part.text
    [claimed] = await store.claim_runs(ui.storage.namespace, "held-q", "w-alive",
                                       ("ui-nobody",), 1, 600.0, now)
    part = await ui.http.get(f"/ui/run/live?wf=held-1&run={run_id}")
    assert 'data-waiting-kind="holder"' in part.text and "busy" not in part.text
    assert "its code runs on worker w-alive (last seen" in part.text
    assert "presumed alive until" in part.text
    # the workers page said only "alive" (last seen 7m ago) for a killed worker
    workers = await ui.http.get("/ui/workers")
    assert "data-presumed>presumed alive until" in workers.text
    await store.forget_worker(ui.storage.namespace, "w-alive", now + 1300)  # long gone
    part = await ui.http.get(f"/ui/run/live?wf=held-1&run={run_id}")
    assert "worker w-alive, which holds it, is gone" in part.text and "⚠" in part.text
    assert claimed.run.run_id == run_id


async def _killed_and_live(ui: Browserless, gone_queue: str, live_queue: str) -> float:
    """Worker w-killed takes the run of `gone_queue` and w-live that of
    `live_queue`; then w-killed's registration lapses (last seen 1000 s ago,
    for 30 s: a SIGKILLed worker's record, its run's lease still held). The
    clock's now."""
    from durable.store.records import WorkerRegistration

    store, ns = ui.storage.store, ui.storage.namespace
    now = ui.storage.clock.now()
    for worker, queue in (("w-killed", gone_queue), ("w-live", live_queue)):
        registration = WorkerRegistration(worker, ns, queue, ("ui-nobody",), (), ())
        await store.register_worker(registration, 600.0, now)
        [_] = await store.claim_runs(ns, queue, worker, ("ui-nobody",), 1, 600.0, now)
    await store.register_worker(WorkerRegistration("w-killed", ns, gone_queue, ("ui-nobody",),
                                                   (), ()), 30.0, now - 1000)
    return now


async def test_the_runs_list_names_a_killed_holder(ui: Browserless, db_url: str) -> None:
    # a run held by a SIGKILLed worker was listed "busy" everywhere (UI, durable
    # list, /api) long after that worker's presumed-alive time had passed; its
    # page said so. A worker last seen 1000 s ago holds gone-1; a live one live-1.
    from durable.cli._group import cli
    await ui.start("gone-1", task_queue="q-gone")
    await ui.start("live-1", task_queue="q-live")
    await ui.start("free-1", task_queue="q-free")  # no worker took it: waiting
    now = await _killed_and_live(ui, "q-gone", "q-live")
    # the embedded client's summaries
    listed = {r["workflow_id"]: r for r in await ui.storage.list()}
    gone, live = listed["gone-1"]["holder"], listed["live-1"]["holder"]
    assert (gone["worker_id"], gone["alive"], gone["activity"]) == ("w-killed", False, None)
    assert gone["last_seen_at"] is not None and listed["gone-1"]["waiting"] is True
    # and when another worker takes it: its claim's lease (600 s) ends (views said
    # only "once that worker's lease on it has lapsed")
    lease_end = present.instant(gone["lease_expires_at"])
    assert lease_end is not None and abs(lease_end.timestamp() - (now + 600)) < 1
    assert (live["worker_id"], live["alive"]) == ("w-live", True)
    assert listed["live-1"]["waiting"] is False
    assert listed["free-1"]["holder"] is None and listed["free-1"]["waiting"] is True
    # the wire: the reference's fields as they were, our holder beside them
    viewer = {**API, "Authorization": f"Bearer {VIEWER}"}
    page = (await ui.http.get("/api/workflows", headers=viewer)).json()
    items = {w["workflow_id"]: w for w in page["workflows"]}
    assert (items["gone-1"]["status"], items["gone-1"]["status_bucket"]) == ("running", "running")
    assert items["gone-1"]["holder"]["alive"] is False
    assert items["live-1"]["holder"]["alive"] is True
    described = (await ui.http.get("/api/workflows/gone-1", headers=viewer)).json()
    assert described["wait_kind"] == "workflow-task", described
    assert "worker w-killed, which holds it" in described["wait_reason"]
    assert "presumed gone" in described["wait_reason"]
    assert f"its lease on the run ends at {gone['lease_expires_at']}" in described["wait_reason"]
    assert described["holder"]["alive"] is False and "holder" not in described["durable_keys"]
    described = (await ui.http.get("/api/workflows/live-1", headers=viewer)).json()
    assert described["wait_kind"] is None and described["holder"]["worker_id"] == "w-live"
    # the web UI's runs list
    await ui.login(VIEWER)
    text = (await ui.http.get("/ui/runs")).text

    def row(workflow_id: str) -> str:
        rest = text[text.index(f'data-workflow-id="{workflow_id}"'):]
        return rest[:rest.index("</tr>")]
    assert 'data-holder="gone"' in row("gone-1") and ">busy<" not in row("gone-1")
    assert "held by worker w-killed, last seen 16m" in row("gone-1")
    assert "presumed gone" in row("gone-1")
    assert ">busy<" in row("live-1") and "presumed alive until" in row("live-1")
    assert "data-holder-text" not in row("free-1")
    # the run page says the same as the list (it read the worker on its own)
    part = await ui.http.get("/ui/run/live?wf=gone-1")
    assert "worker w-killed, which holds it, is gone" in part.text
    assert "lease on it has lapsed (lease end: " in part.text
    # durable list, and its --json (the wire's page)
    human = await anyio.to_thread.run_sync(_cli, cli, db_url, "list")
    gone_line = next(line for line in human.splitlines() if line.startswith("gone-1"))
    assert "holder gone" in gone_line and "busy" not in gone_line, human
    assert "held by worker w-killed" in human and "presumed gone" in human
    assert "(lease end: " in human
    live_line = next(line for line in human.splitlines() if line.startswith("live-1"))
    assert "busy" in live_line and "presumed alive until" in human
    data = json.loads(await anyio.to_thread.run_sync(_cli, cli, db_url, "list", "--json"))
    rows = {w["workflow_id"]: w for w in data["workflows"]}
    assert rows["gone-1"]["holder"]["alive"] is False and rows["gone-1"]["waiting"] is True


def _cli(cli: Any, url: str, *args: str) -> str:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["--db", url, *args], env={"NO_COLOR": "1", "COLUMNS": "250"},
                                prog_name="durable")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def test_a_terminated_runs_timeouts_are_not_met() -> None:
    info = {"status": "terminated", "closed_reason": "stuck", "open": False,
            "execution_timeout_seconds": 900.0,
            "run": {"status": "terminated", "run_timeout_seconds": 600.0,
                    "closed_at": "2026-04-12T11:50:00+00:00",
                    "run_deadline_at": "2026-04-12T11:59:58+00:00",
                    "execution_deadline_at": "2026-04-12T12:04:58+00:00"}}
    info["cancellation"] = {"cleanup_timeout_seconds": 30.0, "lifecycle": "terminated",
                            "deadline_at": "2026-04-12T11:50:20+00:00",
                            "closed_at": "2026-04-12T11:50:00+00:00",
                            "cleanup_outcome": "terminated"}
    shown = [str(views.deadline(t["deadline"], NOW, t["open"], t["ended"], t["cleanup"],
                                kind=t["kind"], closed=t["closed"]))
             for t in views.run_timeouts(info)]
    assert "cleanup cut short by terminate" in shown[2], shown
    # a child's request has no timeout of its own: it keeps its parent's deadline
    info["cancellation"]["cleanup_timeout_seconds"] = None
    info["cancellation"]["parent_request_id"] = "r-parent"
    assert views.run_timeouts(info)[2]["configured"] == "its parent's request's deadline"
    assert "not reached: terminated 9m 58s before it" in shown[1], shown
    assert "not reached: terminated 14m 58s before it" in shown[0], shown
    assert not any("met" in text for text in shown)
    assert not any("data-deadline" in text for text in shown)  # the script leaves them


def test_an_activity_stopped_with_try_cancel_is_cancelled_not_running() -> None:
    # a try_cancel stop closes the op when asked; the attempt ends at its receipt.
    # Before, the run page said "running" and the attempt "unknown, 48s so far"
    # on a closed run.
    events = [
        _event(2, "ActivityScheduled", op_id="0:1", activity_type="hang", task_id="t1",
               cancellation="try_cancel", start_to_close_timeout=60.0),
        _event(3, "ActivityStarted", op_id="0:1", attempt=1, worker_id="w1",
               start_to_close_deadline="2026-04-12T12:01:03+00:00"),
        _event(6, "ActivityCancelRequested", op_id="0:1", activity_type="hang", attempt=1,
               policy="try_cancel", worker_id="w1"),
        _event(8, "ActivityStopReceipt", op_id="0:1", task_id="t1", attempt=1,
               stop_receipt={"kind": "cancel_scope", "worker_id": "w1", "attempt": 1,
                             "confirmed": True}),
    ]
    [row] = views.activities(events)
    assert (row["status"], row["closed_at"]) == ("cancelled", "2026-04-12T12:00:06+00:00")
    detail = views.activity_detail(events, "0:1", [], NOW)
    assert detail is not None and detail["status"] == "cancelled" and not detail["open"]
    [only] = detail["attempts"]
    assert (only["outcome"], only["ended_at"]) == ("cancelled", "2026-04-12T12:00:08+00:00")
    assert only["duration"] == "5s" and only["stop_receipt"]["kind"] == "cancel_scope"
    # its start-to-close deadline, 55s after it stopped, was not reached (not "passed")
    shown = str(views.deadline(only["start_to_close_deadline"], NOW, False, attempt=only,
                               kind="start_to_close"))
    assert "not reached: the attempt ended 55s before it" in shown
    assert "data-deadline" not in shown  # fixed: the page's script leaves it
    # still stopping (no receipt yet) on a closed run: unknown, and no "so far"
    stopping = views.activity_detail(events[:3], "0:1", [], NOW)
    assert stopping is not None and stopping["status"] == "cancelled"
    assert (stopping["attempts"][0]["outcome"], stopping["attempts"][0]["duration"]) == (
        "unknown", "-")


def test_a_timeout_event_names_its_kind_in_the_timeline() -> None:
    rows = views.timeline([
        _event(1, "WorkflowStarted", workflow_type="w"),
        _event(7, "ActivityTimedOut", op_id="0:1", activity_type="slow", attempt=2,
               timeout_kind="start_to_close", failure={"message": "timed out"}),
        _event(9, "WorkflowTimedOut", timeout_kind="run_timeout"),
    ], "2026-04-12T12:00:01+00:00")
    assert rows[1]["headline"] == "Activity slow timed out: start_to_close timeout (attempt 2)"
    assert rows[1]["elapsed"] == "+6.000s" and rows[1]["tone"] == "bad"
    assert rows[2]["headline"] == "Workflow timed out: run_timeout timeout"


def test_a_stop_in_an_unknown_state_is_shown_as_not_verified() -> None:
    tree = cascade.cascade_tree({
        "root": {"request_id": "r"}, "inspection_complete": True, "findings": [],
        "runs": [{"workflow_id": "a", "run_id": "1", "status": "cancelled",
                  "lifecycle": "cancelled", "activity_stops": [
                      {"state": "something-new", "activity_type": "x"},
                      {"state": "stopped", "activity_type": "y"}]}],
        "edges": [],
    })
    states = [stop["state"] for stop in tree["nodes"][0]["stops"]]
    assert states == ["unverified", "stopped"]
    assert tree["nodes"][0]["stops"][0]["label"] == "NOT VERIFIED"


def test_the_cascade_tree_nests_children_under_their_parents() -> None:
    tree = cascade.cascade_tree({
        "root": {"request_id": "r"}, "inspection_complete": False,
        "findings": [{"workflow_id": "c", "finding": "attempt 1 of x has no stop receipt"}],
        "runs": [{"workflow_id": "a", "run_id": "1"}, {"workflow_id": "b", "run_id": "2"},
                 {"workflow_id": "c", "run_id": "3"}],
        "edges": [{"parent_run_id": "1", "child_workflow_id": "b", "child_run_id": "2",
                   "policy": "parent_close:terminate"},
                  {"parent_run_id": "2", "child_workflow_id": "c", "child_run_id": "3"}],
    })
    assert tree["verified"] is False and len(tree["nodes"]) == 1
    b = tree["nodes"][0]["children"][0]
    assert b["policy"] == "parent_close:terminate" and b["node"]["workflow_id"] == "b"
    assert b["node"]["children"][0]["node"]["workflow_id"] == "c"


async def test_the_cascade_of_a_request_no_worker_took_yet_is_in_progress(
        ui: Browserless) -> None:
    """A cancellation no worker delivered yet (no worker serves the run): the
    page read "✓ Verified: inspection complete, every stop is confirmed by a
    receipt" while nothing had stopped. It says what is under way instead,
    and "Verified" once the tree has closed."""
    await ui.storage.start(ui_mom, "x", id="inflight")
    await ui.storage.get_handle("inflight").request_cancellation(reason="withdrawn")
    await ui.login(VIEWER)
    page = (await ui.http.get("/ui/run/cascade?wf=inflight")).text
    shown = re.search(r'id="inspection" role="status">\s*<p>(.*?)</p>', page, re.S)
    assert shown is not None, page
    assert " ".join(shown.group(1).split()) == (
        "&hellip; In progress: 1 of 1 run still open; nothing to verify until they end.")
    assert "Verified" not in page
    await ui.storage.get_handle("inflight").terminate(reason="done looking")
    page = (await ui.http.get("/ui/run/cascade?wf=inflight")).text
    assert "In progress" not in page and "Verified</" in page


@workflow.defn(name="ui-idle-greet")
async def idle_greet(name: str) -> str:
    return name


async def test_a_schedule_no_worker_fired_reads_overdue_on_its_pages(tmp_path: Path) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    async with TimeSkippingEnvironment(f"sqlite:///{tmp_path / 'idle.db'}",
                                       start=start.timestamp()) as env:
        await env.client.create_schedule("idle", durable.ScheduleSpec(every=600), idle_greet,
                                         "x", catchup_window=900)
        await env.sleep(3600)  # no worker for an hour: four fires past their window
        transport = httpx.ASGITransport(app=_app(env.client), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            ui = Browserless(http, env.client)
            await ui.login(VIEWER)
            listed = (await http.get("/ui/schedules")).text
            assert 'data-overdue="2026-01-01T00:10:00+00:00">overdue</strong>' in listed, listed
            page = (await http.get("/ui/schedule?id=idle")).text
    shown = re.search(r'id="overdue">(.*?)</td>', page, re.S)
    assert shown is not None, page
    assert ("due since 2026-01-01 00:10:00 UTC (50m ago) and not fired: no live worker of "
            "its namespace runs, and workers fire schedules (start one); 4 fire time(s) are "
            "past the catch-up window (900s (15m))") in " ".join(shown.group(1).split())


async def test_a_jittered_fire_reads_when_it_starts_not_ago(tmp_path: Path) -> None:
    """Past its fire time, before its jitter has it start, the list's next fire
    says when it starts (it read "Ns ago", as if overdue), its fire time beside."""
    from durable.schedules import jitter_delay

    start = datetime(2026, 1, 1, tzinfo=UTC)
    async with TimeSkippingEnvironment(f"sqlite:///{tmp_path / 'jitter.db'}",
                                       start=start.timestamp()) as env:
        await env.client.create_schedule("jit", durable.ScheduleSpec(every=600), idle_greet,
                                         "x", jitter=300)
        fire = start.timestamp() + 600
        delay = jitter_delay("default", "jit", fire, 300, fire + 600)
        assert delay > 2
        await env.sleep(601)  # past 00:10:00, before it is due
        transport = httpx.ASGITransport(app=_app(env.client), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            ui = Browserless(http, env.client)
            await ui.login(VIEWER)
            listed = (await http.get("/ui/schedules")).text
    cell = re.search(r'data-next-fire="2026-01-01T00:10:00\+00:00">(.*?)</td>', listed, re.S)
    assert cell is not None, listed
    due = datetime.fromtimestamp(fire + delay, UTC).isoformat()
    assert f'<time datetime="{due}"' in cell.group(1), cell.group(1)
    # (its "in"/"ago" is the page's clock, the wall clock here, not the test's)
    assert "(jitter: fire time 00:10:00)" in cell.group(1)


@SQLITE_ONLY
async def test_an_ended_schedule_is_shown_ended_not_active(ui: Browserless) -> None:
    """A schedule with no fire time left is `ended` (as `durable schedule list`
    says), not `active` beside an `ended` badge, on the list and its page."""
    past = datetime(2020, 1, 1, tzinfo=UTC)
    await ui.storage.create_schedule("over", durable.ScheduleSpec(every=60, end_at=past),
                                     idle_greet, "x")
    await ui.login(VIEWER)
    listed = (await ui.http.get("/ui/schedules")).text
    row = listed[listed.index('data-schedule-id="over"'):]
    row = row[:row.index("</tr>")]
    assert re.findall(r'data-state="(\w+)"[^>]*>(\w+)<', row) == [("ended", "ended")], row
    page = (await ui.http.get("/ui/schedule", params={"id": "over"})).text
    assert re.findall(r'<h1>.*data-state="(\w+)">(\w+)<', page) == [("ended", "ended")]


async def test_the_schedules_page_lists_past_one_api_page(
        ui: Browserless, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's pages hold at most 200 schedules (the reference's bound); the
    page reads on, a page at a time (here pages of 1)."""
    monkeypatch.setattr("durable.http.ui.schedules.LIST_PAGE_MAX", 1)
    for n in range(3):
        await ui.storage.create_schedule(f"page-{n}", durable.ScheduleSpec(cron="0 2 1 1 *"),
                                         idle_greet, "x")
    await ui.login(VIEWER)
    listed = (await ui.http.get("/ui/schedules")).text
    assert all(f"page-{n}" in listed for n in range(3)), listed


async def test_the_run_page_and_api_say_whether_the_owner_is_still_there(
        ui: Browserless) -> None:
    # the run page read "w-killed · epoch 1" for a worker SIGKILLed long before
    # (`durable describe` said it was gone): /api's description names the
    # owner's presence, and the page says it as the CLI does
    for workflow_id in ("own-gone", "own-live", "own-none"):
        await ui.start(workflow_id, task_queue=f"q-{workflow_id}")
    now = await _killed_and_live(ui, "q-own-gone", "q-own-live")
    viewer = {**API, "Authorization": f"Bearer {VIEWER}"}

    async def presence(workflow_id: str) -> dict[str, Any]:
        described = (await ui.http.get(f"/api/workflows/{workflow_id}", headers=viewer)).json()
        # an extension beside the reference's fields; describe() has no such key
        assert described["status_bucket"] == "running" and "owner_presence" not in \
            described["durable_keys"]
        found: dict[str, Any] = described["owner_presence"]
        return found
    gone, live, none = (await presence("own-gone"), await presence("own-live"),
                        await presence("own-none"))
    assert (gone["worker_id"], gone["state"], gone["alive"]) == ("w-killed", "gone", False)
    assert datetime.fromisoformat(gone["last_seen_at"]).timestamp() == pytest.approx(now - 1000)
    assert datetime.fromisoformat(gone["expires_at"]).timestamp() == pytest.approx(now - 970)
    assert (live["worker_id"], live["state"], live["alive"]) == ("w-live", "presumed_alive", True)
    assert datetime.fromisoformat(live["expires_at"]).timestamp() == pytest.approx(now + 600)
    # the run's lease, which another worker waits out before it takes a gone owner's run
    assert datetime.fromisoformat(gone["lease_expires_at"]).timestamp() == pytest.approx(
        now + 600)
    assert none == {"worker_id": None, "state": "none", "alive": False, "last_seen_at": None,
                    "expires_at": None, "lease_expires_at": None}
    # the remote client's describe() is the embedded one's: no wire-only key
    assert "owner_presence" not in await ui.storage.get_handle("own-gone").describe()
    await ui.login(VIEWER)

    async def worker_row(workflow_id: str) -> str:
        text = (await ui.http.get(f"/ui/run?wf={workflow_id}")).text
        rest = text[text.index('<th scope="row">Worker</th>'):]
        return rest[:rest.index("</tr>")]
    row = await worker_row("own-gone")
    assert 'class="bad" data-owner="gone"' in row and "⚠" in row, row
    assert "w-killed (last seen 16m" in row and "presumed gone" in row, row
    assert "lease on it has lapsed (lease end: " in row and ", in 10m)" in row, row
    row = await worker_row("own-live")
    assert 'data-owner="presumed_alive"' in row and "bad" not in row, row
    assert "w-live (last seen" in row and "presumed alive until" in row, row
    row = await worker_row("own-none")
    assert 'data-owner="none"' in row and "none (no worker holds it)" in row, row


def _heartbeating_attempt() -> list[dict[str, Any]]:
    """An activity with a 2 s heartbeat timeout, its first attempt started:
    its first heartbeat deadline (the one history records) at 12:00:05."""
    return [
        _event(2, "ActivityScheduled", op_id="0:1", activity_type="pack", task_id="t1",
               start_to_close_timeout=60.0, heartbeat_timeout=2.0),
        _event(3, "ActivityStarted", op_id="0:1", attempt=1, worker_id="w1",
               start_to_close_deadline="2026-04-12T12:01:03+00:00",
               heartbeat_deadline="2026-04-12T12:00:05+00:00"),
    ]


def test_a_heartbeating_attempts_heartbeat_deadline_is_not_late_nor_passed() -> None:
    # the heartbeat deadline recorded when the attempt started moves with each
    # heartbeat; the activity page showed a healthy, heartbeating attempt as
    # "⚠ (3s late)" and, once it completed in time, "passed 6.7s ago"
    events = _heartbeating_attempt()
    pending = [{"op_id": "0:1", "kind": "activity", "task_status": "running", "attempt": 1,
                "heartbeat_details": {"done": 4, "total": 10}}]
    now = NOW + timedelta(seconds=30)  # 25s past the first heartbeat deadline
    running = views.activity_detail(events, "0:1", pending, now)
    assert running is not None
    [attempt] = running["attempts"]
    shown = str(views.deadline(attempt["heartbeat_deadline"], now, True, attempt=attempt,
                               kind="heartbeat"))
    assert "late" not in shown and "⚠" not in shown and "extended" in shown
    assert "data-deadline" not in shown  # the page's script must not count it down to "late"
    done = views.activity_detail(
        [*events, _event(20, "ActivityCompleted", op_id="0:1", attempt=1, result=10)],
        "0:1", [], now)
    assert done is not None
    [attempt] = done["attempts"]
    shown = str(views.deadline(attempt["heartbeat_deadline"], now, False, attempt=attempt,
                               kind="heartbeat"))
    assert "(passed" not in shown and "extended" in shown  # (the CSS class is "passed")


async def test_a_run_waiting_for_a_queue_or_key_slot_has_a_page(ui: Browserless) -> None:
    # the run page answered 500 (jinja2 UndefinedError: 'held_by_ancestors')
    # for every run waiting for a slot that no run it descends from holds: a
    # top-level run behind a full queue or key, the page an operator opens first
    import durable
    from durable.store.records import WorkerRegistration

    store, ns = ui.storage.store, ui.storage.namespace
    await ui.storage.set_queue_limits("slot-q", durable.QueueLimits(max_running=1))
    first = await ui.start("slot-1", task_queue="slot-q", concurrency_key="k")
    second = await ui.start("slot-2", task_queue="slot-q", concurrency_key="k")
    now = ui.storage.clock.now()
    await store.register_worker(WorkerRegistration("w-slot", ns, "slot-q", ("ui-nobody",),
                                                   (), ()), 600.0, now)
    [claimed] = await store.claim_runs(ns, "slot-q", "w-slot", ("ui-nobody",), 5, 600.0, now)
    assert claimed.run.run_id == first
    await ui.login(VIEWER)
    for path in (f"/ui/run?wf=slot-2&run={second}", f"/ui/run/live?wf=slot-2&run={second}"):
        page = await ui.http.get(path)
        assert page.status_code == 200, page.text
        assert "a slot on queue slot-q (1 of 1 running); held by slot-1 (worker w-slot" in (
            page.text), page.text
    await ui.storage.set_queue_limits("slot-q", durable.QueueLimits(max_running=5,
                                                                    max_running_per_key=1))
    page = await ui.http.get(f"/ui/run?wf=slot-2&run={second}")
    assert page.status_code == 200, page.text
    assert "a slot of its key on queue slot-q (1 of 1 running); held by slot-1" in page.text


def test_a_running_attempts_current_heartbeat_deadline_is_judged_as_it_stands() -> None:
    """describe()'s pending operation carries the running attempt's heartbeat
    deadline as its last heartbeat moved it: the page judges that one, ahead
    ("in 1s") while the attempt heartbeats, and "late" only when it is past
    (the attempt stopped heartbeating and nothing has timed it out yet)."""
    events = _heartbeating_attempt()
    now = NOW + timedelta(seconds=30)
    for moved, words, late in ((now + timedelta(seconds=1), "in 1s", False),
                               (now - timedelta(seconds=3), "3s late", True)):
        pending = [{"op_id": "0:1", "kind": "activity", "task_status": "running",
                    "attempt": 1, "heartbeat_details": None,
                    "heartbeat_deadline": moved.isoformat()}]
        detail = views.activity_detail(events, "0:1", pending, now)
        assert detail is not None
        [attempt] = detail["attempts"]
        assert attempt["heartbeat_deadline"] == moved.isoformat()
        shown = str(views.deadline(attempt["heartbeat_deadline"], now, True, attempt=attempt,
                                   kind="heartbeat"))
        assert words in shown and "extended" not in shown, shown
        assert ("⚠" in shown) is late, shown
        assert "data-deadline" not in shown  # fixed: the script cannot see the next heartbeat


def test_an_activitys_own_deadlines_are_judged_by_how_the_activity_ended() -> None:
    """schedule_to_close and schedule_to_start bound the activity, not one
    attempt. Judged with no end, an activity that completed at 12:00:04 read
    "passed 6m ago" of its 12:00:30 deadline once the clock went past it, and
    one its schedule_to_close timed out read "passed" too."""
    scheduled = _event(2, "ActivityScheduled", op_id="0:1", activity_type="ship",
                       task_id="t1", schedule_to_close_timeout=28.0, start_to_close_timeout=60.0,
                       schedule_to_close_deadline="2026-04-12T12:00:30+00:00")
    started = _event(3, "ActivityStarted", op_id="0:1", attempt=1, worker_id="w1",
                     start_to_close_deadline="2026-04-12T12:01:03+00:00")
    later = NOW + timedelta(minutes=6)

    def shown(*more: dict[str, Any]) -> str:
        detail = views.activity_detail([scheduled, started, *more], "0:1", [], later)
        assert detail is not None
        [s2c] = [t for t in detail["timeouts"] if t["kind"] == "schedule_to_close"]
        return str(views.deadline(s2c["deadline"], later, False, attempt=detail["ended"],
                                  kind="schedule_to_close"))

    done = shown(_event(4, "ActivityCompleted", op_id="0:1", attempt=1, result=1))
    assert "not reached: the activity ended 26s before it" in done and "ago" not in done, done
    timed = shown(_event(30, "ActivityTimedOut", op_id="0:1", attempt=1,
                         timeout_kind="schedule_to_close"))
    assert "reached: the activity timed out" in timed and "⚠" in timed, timed
