"""Safe at the edges: hostile input at every door of the control plane, the
remote client, the CLI and the web UI (issue 20).

Each test is phrased as behaviour seen from a client (raw HTTP, the remote
client, the CLI, the UI), so it survives changes to how routes are declared.
Rules of the HTTP layer alone run on SQLite; whatever reads storage back
runs on both drivers.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner, Result
from starlette.applications import Starlette

import durable
from durable import workflow
from durable.cli._group import cli
from durable.http import create_app
from durable.http.serve import serve_app

pytestmark = pytest.mark.anyio

OPERATOR = "edge-operator-token"
VIEWER = "edge-viewer-token"
TOKENS = {OPERATOR: "operator", VIEWER: "viewer"}
SECRET = "an-edges-test-secret-of-enough-bytes-0123"
VERSION = {"X-Durable-Workflow-Control-Plane-Version": "2"}
AS_OPERATOR = {**VERSION, "Authorization": f"Bearer {OPERATOR}",
               "Content-Type": "application/json"}
HTTP_ONLY = pytest.mark.parametrize("driver_name", ["sqlite"])
# What reads storage back: both real drivers (the stepwise test driver adds nothing here).
BOTH_DRIVERS = pytest.mark.parametrize(
    "driver_name", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
CLEAN_ENV: dict[str, str | None] = {
    "DURABLE_DB_URL": None, "DURABLE_SERVER_URL": None, "DURABLE_TOKEN": None,
    "DURABLE_NAMESPACE": None, "DURABLE_DEBUG": None, "NO_COLOR": "1", "FORCE_COLOR": None,
    "COLUMNS": "200",
}


@workflow.defn(name="edge-sleeper")
async def sleeper(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "rested"


def make_app(storage: durable.Client, **kwargs: Any) -> Starlette:
    kwargs.setdefault("environ", {})
    return create_app(storage, kwargs.pop("tokens", TOKENS), ui_secret=SECRET, **kwargs)


@pytest.fixture
async def http(storage_client: durable.Client) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(storage_client), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
async def live(storage_client: durable.Client) -> AsyncIterator[str]:
    """The app on a free loopback port (uvicorn on asyncio, hypercorn on trio)."""
    app = make_app(storage_client)
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(serve_app, app, port=0))
        yield f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()


async def run_cli(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """`durable args...` in a thread (its own event loop), so a server on this
    test's loop can answer it."""
    def go() -> Result:
        result = CliRunner().invoke(cli, list(args), env={**CLEAN_ENV, **(env or {})},
                                    prog_name="durable")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    return await anyio.to_thread.run_sync(go)


def error_code(response: httpx.Response) -> str:
    """The error's code in either body shape ({"error": {"code"}} or the
    reference engine's flat {"reason"})."""
    body = response.json()
    inner = body.get("error", body)
    return str(inner.get("code") or inner.get("reason"))


def error_message(response: httpx.Response) -> str:
    body = response.json()
    return str(body.get("error", body)["message"])


async def login(http: httpx.AsyncClient, token: str = OPERATOR) -> None:
    page = await http.get("/ui/login")
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    answer = await http.post("/ui/login", data={"csrf": csrf, "token": token})
    assert answer.status_code == 303, answer.text


# ---------------------------------------------------------------- non-finite numbers


HUGE = "1e400"  # valid JSON that Python reads as infinity


@HTTP_ONLY
@pytest.mark.parametrize(("path", "body"), [
    ("/api/workflows", '{"workflow_type":"edge-sleeper","workflow_id":"n0","input":[%s],'
                       '"require_registered":false}'),
    ("/api/workflows/n1/signal/s", '{"input":[{"deep":[%s]}]}'),
    ("/api/workflows/n1/runs/{run}/signal/s", '{"input":[%s]}'),
    ("/api/workflows/n1/query/q", '{"input":[%s]}'),
    ("/api/workflows/n1/update/u", '{"input":[-%s]}'),
    ("/api/signal-with-start", '{"workflow_type":"edge-sleeper","workflow_id":"n2",'
                               '"signal":"s","signal_input":[%s],"require_registered":false}'),
    ("/api/workflows/n1/request-cancellation", '{"requester":{"id":%s}}'),
    ("/api/workflows/n1/runs/{run}/request-cancellation", '{"requester":{"id":%s}}'),
])
async def test_a_number_beyond_a_float_is_the_same_400_at_every_entry_point(
        http: httpx.AsyncClient, storage_client: durable.Client, path: str, body: str) -> None:
    handle = await storage_client.start(sleeper, 3600, id="n1")
    answer = await http.post(path.format(run=handle.run_id), content=body % HUGE,
                             headers=AS_OPERATOR)
    assert answer.status_code == 400, answer.text
    assert error_code(answer) == "payload_error"
    assert "1e400" in error_message(answer) and "finite" in error_message(answer)
    # nothing was recorded: the run's history is what its start wrote
    types = [e.type for e in await handle.history()]
    assert "SignalReceived" not in types and "CancellationRequested" not in types
    assert {r["workflow_id"] for r in await storage_client.list()} == {"n1"}


@HTTP_ONLY
async def test_nan_and_infinity_literals_are_not_json(http: httpx.AsyncClient,
                                                      storage_client: durable.Client) -> None:
    await storage_client.start(sleeper, 3600, id="lit")
    for literal in ("NaN", "Infinity", "-Infinity"):
        answer = await http.post("/api/workflows/lit/signal/s",
                                 content='{"input":[' + literal + ']}',
                                 headers=AS_OPERATOR)
        assert answer.status_code == 400 and error_code(answer) == "invalid_json"


@BOTH_DRIVERS
async def test_the_embedded_api_refuses_infinity_in_a_requester_and_in_arguments(
        storage_client: durable.Client) -> None:
    handle = await storage_client.start(sleeper, 3600, id="emb")
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(durable.ConfigurationError, match="finite numbers only"):
            await handle.request_cancellation(requester={"type": "app", "id": bad})
        with pytest.raises(durable.PayloadRejected):
            await handle.signal("s", {"x": bad})
    with pytest.raises(durable.ConfigurationError, match="must be a dict"):
        await handle.request_cancellation(requester="me")  # type: ignore[arg-type]
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"d": deep}
    with pytest.raises(durable.ConfigurationError, match="nested too deeply"):
        await handle.request_cancellation(requester=deep)
    with pytest.raises(durable.ConfigurationError, match="plain JSON"):
        await handle.request_cancellation(requester={"at": object()})
    assert "CancellationRequested" not in [e.type for e in await handle.history()]
    accepted = await handle.request_cancellation(requester={"type": "app", "id": 7.5})
    assert accepted.accepted and accepted.context.requester == {"type": "app", "id": 7.5}


@BOTH_DRIVERS
async def test_runs_written_with_hostile_values_stay_readable_everywhere(
        storage_client: durable.Client, live: str, db_url: str) -> None:
    """Values that got into storage before the doors refused them (written here
    below the doors) never make a run unreadable: describe, history and
    cascade answer over HTTP, the remote client, the CLI (--db and --server,
    --json and tables) and the UI, with the non-finite numbers as null."""
    handle = await storage_client.start(sleeper, 3600, id="hostile")
    control = storage_client.control
    await control.signal("hostile", None, "s", "[1e400,NaN,-Infinity]")
    await control.request_cancellation(
        "hostile", None, reason="hostile", cleanup_timeout=30, source="test",
        requester={"type": "app", "id": math.inf, "label": math.nan, "n": [-math.inf]})
    async with durable.connect(live, token=OPERATOR) as remote:
        far = remote.get_handle("hostile")
        info = await far.describe()
        assert info["cancellation"]["requester"] == {"type": "app", "id": None, "label": None,
                                                     "n": [None]}
        requested = [e for e in await far.history() if e.type == "CancellationRequested"]
        assert requested[0].data["requester"]["id"] is None
        assert (await far.cancellation_cascade())["runs"]
    async with httpx.AsyncClient(base_url=live) as http:
        for path in ("", "/history", "/cancellation-cascade", f"/runs/{handle.run_id}"):
            answer = await http.get(f"/api/workflows/hostile{path}",
                                    headers={**VERSION, "Authorization": f"Bearer {OPERATOR}"})
            assert answer.status_code == 200, (path, answer.text)
            assert "Infinity" not in answer.text and "NaN" not in answer.text
        await login(http)
        for page in ("/ui/run", "/ui/run/timeline", "/ui/run/cascade"):
            answer = await http.get(page, params={"wf": "hostile", "run": handle.run_id})
            assert answer.status_code == 200, (page, answer.text[:500])
    for where in (("--db", db_url), ("--server", live, "--token", OPERATOR)):
        for command in ("describe", "history", "cascade"):
            as_json = await run_cli(*where, command, "hostile", "--json")
            assert as_json.exit_code == 0, (where, command, as_json.output)
            json.loads(as_json.stdout, parse_constant=lambda name: pytest.fail(name))
            if where[0] == "--db":  # the same view code renders what --server reads
                table = await run_cli(*where, command, "hostile")
                assert table.exit_code == 0, (where, command, table.output)


# ---------------------------------------------------------------- text UTF-8 cannot encode


LONE = "\udcff"  # os.fsdecode(b"\xff"): a lone surrogate


@workflow.defn(name="edge-echo")
async def echo(text: str) -> str:
    return f"got {text}"


@BOTH_DRIVERS
async def test_lone_surrogates_are_kept_and_shown_escaped_in_every_view(
        storage_client: durable.Client, live: str, db_url: str, make_worker: Any) -> None:
    """Decision (t): stored as given, served by the API as the same JSON escape,
    shown escaped (never a 500 or a crash) by the UI and the CLI."""
    async with make_worker(workflows=[echo]):
        handle = await storage_client.start(
            echo, LONE, id="sur", options=durable.StartOptions(memo={"file": LONE}))
        assert await handle.result() == f"got {LONE}"
    async with durable.connect(live, token=OPERATOR) as remote:
        far = remote.get_handle("sur")
        assert await far.result() == f"got {LONE}"
        assert (await far.describe())["memo"] == {"file": LONE}
    async with httpx.AsyncClient(base_url=live) as http:
        answer = await http.get("/api/workflows/sur/result",
                                headers={**VERSION, "Authorization": f"Bearer {OPERATOR}"})
        assert answer.status_code == 200 and answer.json()["result"] == f"got {LONE}"
        await login(http)
        for page in ("/ui/run", "/ui/run/timeline"):
            shown = await http.get(page, params={"wf": "sur", "run": handle.run_id})
            assert shown.status_code == 200, (page, shown.text[:300])
            assert "\\udcff" in shown.text
    for where in (("--db", db_url), ("--server", live, "--token", OPERATOR)):
        for command in ("history", "result", "describe"):
            as_json = await run_cli(*where, command, "sur", "--json")
            assert as_json.exit_code == 0, (where, command, as_json.output)
            assert LONE not in as_json.stdout  # escaped: the bytes are valid UTF-8
            data = json.loads(as_json.stdout)
            assert LONE in json.dumps(data, ensure_ascii=False), (command, data)
            if where[0] == "--db":  # the same view code renders what --server reads
                table = await run_cli(*where, command, "sur")
                assert table.exit_code == 0, (where, command, table.output)
        result = await run_cli(*where, "result", "sur", "--json")
        assert json.loads(result.stdout)["result"] == f"got {LONE}"


# ---------------------------------------------------------------- a password in a server URL


async def test_a_password_in_a_server_url_is_masked_in_errors_and_repr() -> None:
    url = "http://ann:Hunter2-s3cret@127.0.0.1:9"
    client = await durable.connect(url, token="x", timeout=2)
    try:
        assert "Hunter2" not in repr(client.control)
        with pytest.raises(durable.StorageUnavailable) as failed:
            await client.list()
        assert "Hunter2" not in str(failed.value)
        assert "http://ann:***@127.0.0.1:9" in str(failed.value)
    finally:
        await client.close()
    for argv in (("--server", url, "list"), ("--server", url, "--debug", "list")):
        result = await run_cli(*argv)
        assert result.exit_code != 0
        assert "Hunter2" not in result.output and "Hunter2" not in result.stderr
        assert "ann:***@" in result.stderr


def test_mask_url_and_mask_password_in() -> None:
    from durable._log import mask_password_in, mask_url

    assert mask_url("https://u:p%40ss@h:1/x") == "https://u:***@h:1/x"
    assert mask_url("http://h:1") == "http://h:1"
    assert mask_url("http://u@h") == "http://u@h"
    url = "http://u:longpass@h"
    assert mask_password_in("failed for longpass at http://u:longpass@h", url) == (
        "failed for *** at http://u:***@h")
    # a very short password is masked only where it stands in a URL
    assert mask_password_in("a: http://u:a@h", "http://u:a@h") == "a: http://u:***@h"


# ---------------------------------------------------------------- a malformed UI cookie


@HTTP_ONLY
@pytest.mark.parametrize("cookie", ["v1.\u00e9t\u00e9.sig", "\u00ff\u00fe", "v1.a.b.c",
                                    "v1..", "v1.!!!.???"])
async def test_a_malformed_ui_cookie_is_no_session_and_login_still_works(
        storage_client: durable.Client, cookie: str) -> None:
    app = make_app(storage_client)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    bad = (b"cookie", f"durable_ui={cookie}".encode())
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        page = await http.get("/ui/runs", headers=[bad])
        assert page.status_code == 303 and "/ui/login" in page.headers["location"]
        form = await http.get("/ui/login", headers=[bad])
        assert form.status_code == 200
        assert "durable_ui=v1." in form.headers.get("set-cookie", "")  # a fresh one
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        signed_in = await http.post("/ui/login", data={"csrf": csrf, "token": OPERATOR})
        assert signed_in.status_code == 303, signed_in.text[:300]
        assert (await http.get("/ui/runs")).status_code == 200


# ---------------------------------------------------------------- Host check (DNS rebinding)


async def _asgi(app: Starlette) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8233")


@HTTP_ONLY
async def test_a_token_less_server_says_how_to_reach_an_admin_route(
        storage_client: durable.Client) -> None:
    """Without tokens every request acts as operator, so an admin route (retention)
    is refused; the refusal says why (no token sent, development mode) and how
    to get there, not only that 'an operator token' may not."""
    app = create_app(storage_client, anonymous_role="operator", environ={}, ui_secret=SECRET)
    async with await _asgi(app) as http:
        refused = await http.get("/api/system/retention", headers=VERSION)
    assert refused.status_code == 403 and error_code(refused) == "forbidden"
    message = error_message(refused)
    assert "without a token" in message and "acts as operator" in message, message
    assert "DURABLE_TOKENS" in message and "--db" in message, message


@HTTP_ONLY
async def test_a_token_less_server_answers_only_requests_naming_a_loopback_host(
        storage_client: durable.Client) -> None:
    """DNS rebinding: a page at attacker.example whose name now resolves to
    127.0.0.1 reaches the server, but its requests name attacker.example."""
    app = create_app(storage_client, anonymous_role="operator", environ={}, ui_secret=SECRET)
    start = {"workflow_type": "edge-sleeper", "workflow_id": "rebound", "input": [1],
             "require_registered": False}
    async with await _asgi(app) as http:
        for host in ("attacker.example", "attacker.example:8233", "127.0.0.1.nip.io:8233",
                     "localhost.attacker.example", ""):
            headers = {**VERSION, "Host": host}
            refused = [await http.get("/api/workflows", headers=headers),
                       await http.post("/api/workflows", json=start, headers=headers),
                       await http.post("/api/workflows/x/terminate", json={}, headers=headers),
                       await http.get("/ui/runs", headers=headers),
                       await http.get("/metrics", headers=headers)]
            for answer in refused:
                assert answer.status_code == 400, (host, answer.request.url, answer.text)
                assert error_code(answer) == "host_not_allowed"
                assert "--allowed-host" in error_message(answer)
        assert await storage_client.list() == []
        for host in ("127.0.0.1:8233", "localhost:8233", "LOCALHOST", "[::1]:8233",
                     "127.0.0.2", "localhost."):
            answer = await http.get("/api/workflows", headers={**VERSION, "Host": host})
            assert answer.status_code == 200, (host, answer.text)
        page = await http.get("/ui/runs")
        assert page.status_code == 200
        assert 'data-mode="no-token"' in page.text and "development mode" in page.text


@HTTP_ONLY
async def test_allowed_hosts_name_the_server_and_tokens_alone_allow_any_host(
        storage_client: durable.Client) -> None:
    auth = {**VERSION, "Authorization": f"Bearer {OPERATOR}"}
    async with await _asgi(make_app(storage_client)) as http:  # tokens, no list: any host
        answer = await http.get("/api/workflows", headers={**auth, "Host": "anything.example"})
        assert answer.status_code == 200
    app = make_app(storage_client, allowed_hosts=["durable.example.com", "*.corp.example"])
    async with await _asgi(app) as http:
        for host, status in (("durable.example.com", 200), ("DURABLE.example.com:443", 200),
                             ("a.corp.example", 200), ("b.a.corp.example:80", 200),
                             ("corp.example", 400), ("durable.example.com.evil", 400),
                             ("127.0.0.1", 400)):
            answer = await http.get("/api/workflows", headers={**auth, "Host": host})
            assert answer.status_code == status, (host, answer.text)
        page = await http.get("/ui/runs", headers={"Host": "a.corp.example"})
        assert page.status_code == 303  # the login form: signed-in mode, no banner
    with pytest.raises(durable.ConfigurationError, match="allowed_hosts"):
        make_app(storage_client, allowed_hosts=[""])
    async with await _asgi(make_app(storage_client, allowed_hosts=["*"])) as http:
        answer = await http.get("/api/workflows", headers={**auth, "Host": "x.example"})
        assert answer.status_code == 200


@BOTH_DRIVERS
async def test_serve_without_tokens_says_so_and_checks_the_host_on_a_real_server(
        db_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from durable.http.serve import serve_async

    monkeypatch.delenv("DURABLE_TOKENS", raising=False)
    monkeypatch.delenv("DURABLE_TOKENS_FILE", raising=False)
    caplog.set_level("WARNING", logger="durable.http")
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(
            serve_async, db_url, "127.0.0.1", 0, allowed_hosts=["devbox.test"], ui=False))
        assert "NO TOKENS" in caplog.text and "OPERATOR" in caplog.text
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for host, status in (("attacker.example", 400), (f"devbox.test:{port}", 200),
                                 (f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200)):
                answer = await http.get("/api/workflows", headers={**VERSION, "Host": host})
                assert answer.status_code == status, (host, answer.text)
        async with durable.connect(f"http://127.0.0.1:{port}") as remote:
            assert await remote.list() == []
        tg.cancel_scope.cancel()


@HTTP_ONLY
async def test_durable_serve_takes_allowed_host_options(monkeypatch: pytest.MonkeyPatch,
                                                        db_url: str) -> None:
    import durable.http.serve

    seen: dict[str, Any] = {}
    monkeypatch.setattr(durable.http.serve, "serve",
                        lambda *args, **kwargs: seen.update(kwargs))
    result = await run_cli("--db", db_url, "serve", "--allowed-host", "a.test",
                           "--allowed-host", "*.b.test")
    assert result.exit_code == 0, result.output
    assert seen["allowed_hosts"] == ["a.test", "*.b.test"]
    assert seen["max_auth_failures"] == 10
    await run_cli("--db", db_url, "serve", "--max-auth-failures", "0")
    assert seen["allowed_hosts"] is None and seen["max_auth_failures"] == 0


# ---------------------------------------------------------------- ids with / . .. ? # and more


STRANGE_IDS = ["a/b", "a%2Fb", "%", "%25", ".", "..", "../victim", "a?b=c", "a#frag",
               "with space", "ünï/cødé ☃", "victim/", "/victim", "x/history", "runs"]


@BOTH_DRIVERS
async def test_every_id_addresses_exactly_its_own_run_over_http(
        storage_client: durable.Client, live: str, make_worker: Any) -> None:
    """The remote client, the CLI --server and the UI reach each run by its own
    id; an id that spells another run's path never touches that run."""
    victim = await storage_client.start(sleeper, 3600, id="victim")
    runs = {wid: (await storage_client.start(sleeper, 3600, id=wid)).run_id
            for wid in STRANGE_IDS}
    async with durable.connect(live, token=OPERATOR) as remote:
        for wid, run_id in runs.items():
            handle = remote.get_handle(wid)
            info = await handle.describe()
            assert (info["workflow_id"], info["run"]["run_id"]) == (wid, run_id), wid
            pinned = await remote.get_handle(wid, run_id=run_id).describe()
            assert pinned["workflow_id"] == wid
            assert (await handle.history())[0].type == "WorkflowStarted"
            assert (await remote.control.run_state(wid, run_id)).run_id == run_id  # type: ignore[union-attr]
            await handle.signal("poke", wid)
        # the path of the victim's run, as an id: no such workflow, the victim untouched
        forged = remote.get_handle(f"victim/runs/{victim.run_id}")
        with pytest.raises(durable.WorkflowNotFound):
            await forged.terminate()
        with pytest.raises(durable.WorkflowNotFound):
            await forged.describe()
        # started under that id, it is a run of its own; terminating it spares the victim
        own = await remote.start(sleeper, 3600, id=f"victim/runs/{victim.run_id}")
        await remote.get_handle(f"victim/runs/{victim.run_id}").terminate()
        assert (await own.describe())["status"] == "terminated"
        await remote.get_handle("../victim").request_cancellation()
        await remote.get_handle("victim/").cancel()
        assert (await victim.describe())["status"] == "running" or (
            await victim.describe())["status"] == "pending"
        assert "CancellationRequested" not in [e.type for e in await victim.history()]
        signals = [e.data for e in await storage_client.get_handle("a/b").history()
                   if e.type == "SignalReceived"]
        assert len(signals) == 1
    for wid in ("a/b", "..", "ünï/cødé ☃"):
        shown = await run_cli("--server", live, "--token", OPERATOR, "describe", wid, "--json")
        assert shown.exit_code == 0, (wid, shown.output)
        assert json.loads(shown.stdout)["workflow_id"] == wid
    async with httpx.AsyncClient(base_url=live) as http:
        await login(http)
        for wid in ("a/b", "..", "a#frag"):
            page = await http.get("/ui/run", params={"wf": wid, "run": runs[wid]})
            assert page.status_code == 200 and runs[wid] in page.text, wid
        form = await http.get("/ui/run/terminate", params={"wf": "x/history",
                                                          "run": runs["x/history"]})
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        done = await http.post("/ui/run/terminate", params={"wf": "x/history",
                                                           "run": runs["x/history"]},
                               data={"csrf": csrf, "reason": "ui"})
        assert done.status_code == 303, done.text[:300]
    assert (await storage_client.get_handle("x/history").describe())["status"] == "terminated"
    assert (await victim.describe())["status"] in ("pending", "running")


@HTTP_ONLY
async def test_raw_api_paths_route_on_the_encoded_segments(
        http: httpx.AsyncClient, storage_client: durable.Client) -> None:
    victim = await storage_client.start(sleeper, 3600, id="victim")
    await storage_client.start(sleeper, 3600, id="a/b")
    auth = {**VERSION, "Authorization": f"Bearer {OPERATOR}"}
    answer = await http.get("/api/workflows/a%2Fb", headers=auth)
    assert answer.status_code == 200 and answer.json()["workflow_id"] == "a/b"
    answer = await http.get("/api/workflows/a%2fb/history", headers=auth)
    assert answer.status_code == 200 and answer.json()["workflow_id"] == "a/b"
    forged = await http.post(f"/api/workflows/victim%2Fruns%2F{victim.run_id}/terminate",
                             json={}, headers=auth)
    assert forged.status_code == 404
    assert (await victim.describe())["status"] in ("pending", "running")
    # an unencoded "/" is a path separator, as always
    assert (await http.get(f"/api/workflows/victim/runs/{victim.run_id}",
                           headers=auth)).status_code == 200


# ---------------------------------------------------------------- throttling, namespaced tokens


def test_the_throttle_counts_failures_per_client_in_a_sliding_window() -> None:
    from durable.http.throttle import AuthThrottle

    now = [100.0]
    throttle = AuthThrottle(3, 10.0, max_clients=2, clock=lambda: now[0])
    for _ in range(2):
        throttle.failed("a")
    assert throttle.retry_after("a") is None
    now[0] += 4
    throttle.failed("a")
    assert throttle.retry_after("a") == 6  # until the first failure is 10 s old
    assert throttle.retry_after("b") is None
    now[0] += 6
    assert throttle.retry_after("a") is None  # the two at 100 left the window
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.retry_after("a") == 4  # 104, 110, 110: until 104 is 10 s old
    throttle.failed("b")
    throttle.failed("c")  # over max_clients: the oldest ("a") is forgotten
    assert throttle.retry_after("a") is None
    assert AuthThrottle(0).retry_after("x") is None


@HTTP_ONLY
async def test_failed_authentications_lock_a_client_out_for_a_while(
        storage_client: durable.Client) -> None:
    app = make_app(storage_client, max_auth_failures=5, auth_failure_window=30)
    now = [1000.0]
    app.state.durable.throttle.clock = lambda: now[0]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False,
                                    client=("203.0.113.7", 5000))
    neighbour = httpx.ASGITransport(app=app, raise_app_exceptions=False,
                                    client=("203.0.113.8", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http, \
            httpx.AsyncClient(transport=neighbour, base_url="http://127.0.0.1") as other:
        def auth(token: str) -> dict[str, str]:
            return {**VERSION, "Authorization": f"Bearer {token}"}

        for attempt in range(5):
            answer = await http.get("/api/workflows", headers=auth(f"guess-{attempt}"))
            assert answer.status_code == 401
        for token in ("guess-6", OPERATOR):  # refused before the token is looked at
            answer = await http.get("/api/workflows", headers=auth(token))
            assert answer.status_code == 429, answer.text
            assert error_code(answer) == "too_many_failed_authentications"
            assert answer.headers["retry-after"] == "30"
        assert (await http.get("/metrics", headers=auth(OPERATOR))).status_code == 429
        assert (await http.get("/healthz")).status_code == 200  # no token: not throttled
        assert (await other.get("/api/workflows", headers=auth(OPERATOR))).status_code == 200
        # the UI's login is the same door
        page = await http.get("/ui/login")
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        refused = await http.post("/ui/login", data={"csrf": csrf, "token": OPERATOR})
        assert refused.status_code == 429 and "Too many" in refused.text
        now[0] += 29
        assert (await http.get("/api/workflows", headers=auth(OPERATOR))).status_code == 429
        now[0] += 1
        assert (await http.get("/api/workflows", headers=auth(OPERATOR))).status_code == 200
        # wrong tokens at the UI's login count too
        for attempt in range(5):
            page = await other.get("/ui/login")
            csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            wrong = await other.post("/ui/login", data={"csrf": csrf, "token": f"g{attempt}"})
            assert wrong.status_code == 401
        assert (await other.get("/api/workflows", headers=auth(OPERATOR))).status_code == 429


@BOTH_DRIVERS
async def test_a_remote_client_guessing_tokens_is_throttled(
        storage_client: durable.Client, live: str) -> None:
    async with durable.connect(live, token="not-a-token") as guesser:
        codes = []
        for _ in range(12):
            with pytest.raises(durable.http.AuthenticationFailed) as failed:
                await guesser.list()
            codes.append(failed.value.code)  # type: ignore[attr-defined]
    assert codes[:10] == ["unauthenticated"] * 10
    assert codes[10:] == ["too_many_failed_authentications"] * 2


@HTTP_ONLY
async def test_a_token_limited_to_namespaces_acts_and_sees_metrics_only_there(
        storage_client: durable.Client) -> None:
    tokens = {OPERATOR: "operator", "billing-op": "operator@billing|billing-eu",
              "billing-view": "viewer@billing"}
    app = make_app(storage_client, tokens=tokens)
    await storage_client.with_namespace("billing").start(sleeper, 3600, id="invoice")
    await storage_client.with_namespace("shipping").start(sleeper, 3600, id="parcel")
    async with await _asgi(app) as http:
        def as_(token: str, namespace: str) -> dict[str, str]:
            return {**VERSION, "Authorization": f"Bearer {token}", "X-Namespace": namespace}

        answer = await http.get("/api/workflows", headers=as_("billing-op", "billing"))
        assert [r["workflow_id"] for r in answer.json()["workflows"]] == ["invoice"]
        for namespace in ("shipping", "default"):
            refused = await http.get("/api/workflows/parcel",
                                     headers=as_("billing-op", namespace))
            assert refused.status_code == 403, refused.text
            assert "billing, billing-eu" in error_message(refused)
            terminate = await http.post("/api/workflows/parcel/terminate", json={},
                                        headers=as_("billing-op", namespace))
            assert terminate.status_code == 403
        assert (await storage_client.with_namespace("shipping").get_handle(
            "parcel").describe())["status"] in ("pending", "running")
        assert (await http.post("/api/workflows/invoice/terminate", json={},
                                headers=as_("billing-view", "billing"))).status_code == 403
        metrics = await http.get("/metrics", headers=as_("billing-view", "billing"))
        assert metrics.status_code == 200
        assert 'namespace="billing"' in metrics.text
        assert 'namespace="shipping"' not in metrics.text
        assert "durable_http_requests_total" in metrics.text  # server-wide, kept
        everything = await http.get("/metrics", headers=as_(OPERATOR, "default"))
        assert 'namespace="shipping"' in everything.text
        # the UI: a session of that token lands in its namespace, and stays there
        page = await http.get("/ui/login")
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        await http.post("/ui/login", data={"csrf": csrf, "token": "billing-op"})
        runs = await http.get("/ui/runs")
        assert runs.status_code == 200 and "invoice" in runs.text
        assert (await http.get("/ui/runs", params={"ns": "shipping"})).status_code == 403
        assert (await http.get("/ui/run", params={"ns": "shipping", "wf": "parcel",
                                                  "run": "x"})).status_code == 403


def test_namespaced_token_lists_parse_and_refuse_bad_entries() -> None:
    from durable.http.auth import Grant, parse_token_list

    tokens = parse_token_list("a:operator, b:c:viewer@x|y.z , d@e:operator@ns:1",
                              "DURABLE_TOKENS")
    assert tokens == {"a": "operator", "b:c": "viewer@x|y.z", "d@e": "operator@ns:1"}
    assert Grant.parse("viewer@x|y.z") == Grant("viewer", frozenset({"x", "y.z"}))
    for bad in ("t:operator@", "t:operator@bad ns", "t:root", "t:viewer@|"):
        with pytest.raises(durable.ConfigurationError):
            parse_token_list(bad, "DURABLE_TOKENS")
    with pytest.raises(durable.ConfigurationError, match="namespaces"):
        create_app_tokens = {"t": "operator@"}
        from durable.http.auth import TokenSet
        TokenSet(create_app_tokens)


# ---------------------------------------------------------------- trio's database bridge


def test_a_bridge_shortens_the_default_switch_interval_and_keeps_a_chosen_one() -> None:
    import sys

    from durable._bridge import (
        BRIDGED_SWITCH_INTERVAL,
        DEFAULT_SWITCH_INTERVAL,
        LoopThread,
        shorten_switch_interval,
    )

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL)
        assert shorten_switch_interval() is True
        assert sys.getswitchinterval() == BRIDGED_SWITCH_INTERVAL
        sys.setswitchinterval(0.002)  # the application's own choice
        assert shorten_switch_interval() is False
        assert sys.getswitchinterval() == 0.002
        sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL)
        thread = LoopThread("the test driver")
        try:
            assert sys.getswitchinterval() == BRIDGED_SWITCH_INTERVAL
        finally:
            thread.loop.call_soon_threadsafe(thread.loop.stop)
    finally:
        sys.setswitchinterval(before)
