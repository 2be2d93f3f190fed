"""Schedules and retention over HTTP: the routes in the reference engine's shape,
the remote client's schedule and retention planes, and the CLI with --server.

The lifecycle tests run twice (`remote_client`): once on the embedded client
and once on ``durable.connect("http://...")`` against a live control plane
on the same storage, with the same expectations, so the remote client gives
the same dicts and errors. Storage is SQLite: the routes add no storage
behaviour of their own (tests/test_schedules*.py cover the engine on both).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner
from conftest import REMOTE_ADMIN_TOKEN, REMOTE_TOKEN, remote_plane

import durable
from durable import ScheduleSpec, workflow
from durable.cli._group import cli
from durable.http import create_app
from durable.testing import TimeSkippingEnvironment, isolated_definitions

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("driver_name", ["sqlite"])]

OPERATOR = "op-token"
VIEWER = "view-token"
ADMIN = "admin-token"
VERSION = {"X-Durable-Workflow-Control-Plane-Version": "2"}
AS_OPERATOR = {**VERSION, "Authorization": f"Bearer {OPERATOR}"}
AS_VIEWER = {**VERSION, "Authorization": f"Bearer {VIEWER}"}
AS_ADMIN = {**VERSION, "Authorization": f"Bearer {ADMIN}"}
NEVER = "0 2 1 1 *"  # 02:00 on 1 January: nothing fires by itself during a test


@workflow.defn(name="http-sched-echo")
async def echo(value: str) -> str:
    return value


@workflow.defn(name="http-sched-other")
async def other() -> None:
    return None


# a workflow only its worker knows: schedules name it, its function is not here
with isolated_definitions():
    @workflow.defn(name="http-sched-elsewhere")
    async def elsewhere(label: str, suffix: str = "!") -> str:
        return label + suffix


WRONG_ARITY = (r"workflow 'http-sched-elsewhere' \(as its live workers register it\) takes 1 to "
               r"2 arguments \(label, suffix\), got {}")


def reason(response: httpx.Response) -> str:
    """The error's code, in the reference's flat body or the older nested one."""
    body = response.json()
    if "reason" in body:
        return str(body["reason"])
    return str(body["error"]["code"])


@pytest.fixture
async def http(storage_client: durable.Client) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(storage_client, {OPERATOR: "operator", VIEWER: "viewer", ADMIN: "admin"},
                     environ={})
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as c:
        yield c


# ---------------------------------------------------------------- the client, both ways


@pytest.mark.remote_client
async def test_the_schedule_api_gives_the_same_answers_embedded_and_remote(
        client: durable.Client, storage_client: durable.Client) -> None:
    handle = await client.create_schedule(
        "nightly", ScheduleSpec(cron=NEVER, timezone="Europe/Amsterdam"), echo, "x",
        overlap=durable.Overlap.BUFFER_ONE, jitter=30, max_runs=10, note="first",
        options=durable.StartOptions(memo={"team": "ops"}).with_execution_timeout(3600))
    info = await handle.describe()
    # what each fire starts with: its arguments and memo (the memo was shown nowhere)
    assert info["input"] == ["x"] and info["memo"] == {"team": "ops"}
    assert info == await storage_client.get_schedule("nightly").describe()
    assert info["spec"]["cron"] == [NEVER] and info["overlap"] == "buffer_one"
    assert info["jitter"] == 30 and info["remaining_actions"] == 10
    assert info["execution_timeout"] == 3600 and info["note"] == "first"
    (summary,) = await client.list_schedules()
    assert summary == (await storage_client.list_schedules())[0]

    await handle.pause(note="maintenance")
    assert (await handle.describe())["paused"] is True
    await handle.resume()
    fired = await handle.trigger(overlap="allow_all")
    assert fired["outcome"] == "started"
    assert fired["workflow_id"].startswith("nightly-") and fired["run_id"]
    run = await storage_client.get_handle(fired["workflow_id"]).describe()
    assert run["schedule"]["schedule_id"] == "nightly"

    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    await handle.update(spec=ScheduleSpec(every=3600), overlap="allow_all", args=["y"],
                        max_runs=None)
    done = await handle.backfill(start, start + dt.timedelta(hours=2))
    assert (done["fires"], done["started"], done["already_fired"]) == (2, 2, 0)
    assert [r["workflow_id"] for r in done["results"]] == [
        "nightly-20260101T000000Z", "nightly-20260101T010000Z"]
    again = await handle.backfill(start, start + dt.timedelta(hours=2))
    assert again["already_fired"] == 2
    info = await handle.describe()
    assert info["spec"]["every"] == 3600 and info["remaining_actions"] is None
    assert info["execution_timeout"] == 3600  # kept: options were not given

    with pytest.raises(durable.ScheduleAlreadyExists, match="already exists") as taken:
        await client.create_schedule("nightly", ScheduleSpec(every=60), echo, "z")
    assert (taken.value.schedule_id, taken.value.namespace) == ("nightly", "default")
    await handle.delete()
    with pytest.raises(durable.ScheduleNotFound):
        await handle.describe()
    with pytest.raises(durable.ScheduleNotFound):
        await client.get_schedule("nightly").trigger()
    with pytest.raises(durable.ConfigurationError, match="cron"):
        await client.create_schedule("bad", ScheduleSpec(cron="* * *"), echo)


@pytest.mark.remote_client
async def test_schedule_lists_page_newest_first_with_filters_embedded_and_remote(
        client: durable.Client) -> None:
    """Newest first (created one after another on the real clock: no two at the
    same instant; tests/test_schedule_list.py covers ties), the same embedded
    and through the control plane."""
    for n in range(7):
        handle = await client.create_schedule(f"page-{n}", ScheduleSpec(cron=NEVER), echo, "x")
        if n % 2:
            await handle.pause(note="odd")
    await client.create_schedule("zeta", ScheduleSpec(cron=NEVER), other)
    ids, cursor, pages = [], None, 0
    while True:  # three at a time, each exactly once, the newest first
        page = await client.list_schedules_page(limit=3, cursor=cursor)
        ids += [s["schedule_id"] for s in page.items]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert ids == ["zeta"] + [f"page-{n}" for n in range(6, -1, -1)] and pages == 3
    # filters apply before the page is cut: a page of paused ones is full
    paused = await client.list_schedules_page(limit=2, status="paused")
    assert [s["schedule_id"] for s in paused.items] == ["page-5", "page-3"]
    rest = await client.list_schedules_page(limit=2, status="paused", cursor=paused.next_cursor)
    assert [s["schedule_id"] for s in rest.items] == ["page-1"] and rest.next_cursor is None
    active = (await client.list_schedules_page(
        status="active", query='WorkflowType = "http-sched-echo"')).items
    assert [s["schedule_id"] for s in active] == ["page-6", "page-4", "page-2", "page-0"]
    typed = (await client.list_schedules_page(workflow_type="http-sched-other")).items
    assert [s["schedule_id"] for s in typed] == ["zeta"]
    assert [s["schedule_id"] for s in (await client.list_schedules_page(
        query="ScheduleId = 'page-3' AND Status = 'paused'")).items] == ["page-3"]
    with pytest.raises(durable.InvalidScheduleQuery) as caught:  # the reference's reason
        await client.list_schedules_page(query="ScheduleId LIKE 'page-%'")
    assert caught.value.reason == "unsupported_schedule_visibility_predicate"
    # the page's last one deleted: stale, the same class embedded and remote
    first = await client.list_schedules_page(limit=2)
    await client.get_schedule(first.items[-1]["schedule_id"]).delete()
    with pytest.raises(durable.StaleCursor):
        await client.list_schedules_page(limit=2, cursor=first.next_cursor)
    with pytest.raises(durable.ConfigurationError, match="not one this server returned"):
        await client.list_schedules_page(cursor="not-a-cursor")
    with pytest.raises(durable.ConfigurationError, match="'active' or 'paused'"):
        await client.list_schedules_page(status="running")


@pytest.mark.remote_client
async def test_the_sdk_keeps_its_wider_schedule_rules_embedded_and_remote(
        client: durable.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """What /api refuses as the reference does (ids over 128, jitter over an
    hour), the SDK takes, also through the control plane (its remote client
    sends rules: durable); a list longer than a server page is read page
    after page (pages of 2 here; the server's are at most 200)."""
    monkeypatch.setattr("durable.http.remote_schedules.LIST_PAGE_MAX", 2)
    long_id = "s" * 200
    handle = await client.create_schedule(long_id, ScheduleSpec(cron=NEVER), echo, "x",
                                          jitter=7200.5)
    await handle.update(jitter=5400, max_runs=3)
    assert (await handle.describe())["jitter"] == 5400
    for n in range(3):
        await client.create_schedule(f"p-{n}", ScheduleSpec(cron=NEVER), echo, "x")
    page = await client.list_schedules_page(limit=3)
    assert [s["schedule_id"] for s in page.items] == ["p-2", "p-1", "p-0"]
    assert page.next_cursor is not None
    assert [s["schedule_id"] for s in await client.list_schedules()] == [
        "p-2", "p-1", "p-0", long_id]


async def test_the_remote_client_raises_configuration_error_for_a_misused_page_token(
        storage_client: durable.Client) -> None:
    """The list's refusals of a token (another namespace's: 403; other
    filters': 409; changed: 400) and of an unknown parameter (422) reach our
    remote client as `ConfigurationError`, the server's words kept."""
    async with remote_plane(storage_client) as url, durable.connect(
            url, token=REMOTE_TOKEN) as remote:
        for n in range(2):
            await remote.create_schedule(f"t-{n}", ScheduleSpec(cron=NEVER), echo, "x")
        token = (await remote.list_schedules_page(limit=1)).next_cursor
        assert token is not None
        elsewhere = remote.with_namespace("other")
        for client, kwargs, words in (
                (elsewhere, {}, "belongs to a different namespace"),
                (remote, {"status": "paused"}, "must be reused with the same status"),
                (remote, {"query": "ScheduleId = 't-1'"}, "must be reused with the same status")):
            with pytest.raises(durable.ConfigurationError, match=words):
                await client.list_schedules_page(limit=1, cursor=token, **kwargs)
        with pytest.raises(durable.ConfigurationError, match="not one this server returned"):
            await remote.list_schedules_page(limit=1, cursor=token[:-2])
        assert [s["schedule_id"] for s in (await remote.list_schedules_page(
            limit=5, cursor=token)).items] == ["t-0"]
        with pytest.raises(durable.ConfigurationError, match=r"\[bogus\] is not supported"):
            await remote.control._call("GET", "/api/schedules",  # type: ignore[attr-defined]
                                       params={"bogus": "1"})


@pytest.mark.remote_client(role="admin")
async def test_retention_settings_and_prune_embedded_and_remote(
        client: durable.Client, storage_client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[echo]):
        await storage_client.execute(echo, "a", id="old-a")
    await client.set_retention(days=7)
    settings = await client.get_retention()
    assert settings["retention_seconds"] == 7 * 86400
    assert settings == await storage_client.get_retention()
    dry = await client.prune(0.001, dry_run=True)
    assert dry["dry_run"] is True and dry["runs_expired"] == 1
    assert [r["workflow_id"] for r in dry["runs"]] == ["old-a"]
    done = await client.prune(0.001)
    assert done["runs_deleted"] == 1 and done["deleted"]["runs"] == 1
    # the pruned run's id is told apart from a wrong one, by either client
    for reader in (client, storage_client):
        for call in (reader.get_handle("old-a").describe, reader.get_handle("old-a").result):
            with pytest.raises(durable.WorkflowNotFound,
                               match=r"no workflow 'old-a' in namespace 'default': if it "
                                     r"existed, retention may have deleted it.*this namespace "
                                     r"deletes runs closed more than 7d ago; last pass at "
                                     r".*, 1 runs deleted so far"):
                await call()
    await client.set_retention(days=None)
    assert (await client.get_retention())["retention_seconds"] is None


@pytest.mark.remote_client
async def test_a_schedule_by_name_takes_the_arguments_its_live_workers_register(
        client: durable.Client, storage_client: durable.Client) -> None:
    """By name, embedded or remote, a schedule's arguments are checked against
    the function the live workers register, at create and at an update of them
    (each fire failed with TypeError), nothing written; a taken id is said first."""
    spec = ScheduleSpec(cron=NEVER)
    async with durable.Worker(storage_client, workflows=[elsewhere]):
        with pytest.raises(durable.ConfigurationError, match=WRONG_ARITY.format(0)):
            await client.create_schedule("named", spec, "http-sched-elsewhere")
        assert await client.list_schedules() == []
        handle = await client.create_schedule("named", spec, "http-sched-elsewhere", "a")
        with pytest.raises(durable.ScheduleAlreadyExists, match="'named' already exists"):
            await client.create_schedule("named", spec, "http-sched-elsewhere")
        before = await handle.describe()
        with pytest.raises(durable.ConfigurationError, match=WRONG_ARITY.format(3)):
            await handle.update(args=["a", "b", "c"])
        assert await handle.describe() == before
        await handle.update(args=["b", "?"])
        fired = await handle.trigger()
        assert await client.get_handle(fired["workflow_id"]).result() == "b?"


async def test_routes_refuse_a_schedule_whose_arguments_its_workers_do_not_take(
        http: httpx.AsyncClient, storage_client: durable.Client) -> None:
    """POST and PUT by name (the reference client's way) check the arguments as
    a start by name does (400 invalid_argument, nothing written), after the
    duplicate id (409, as the reference answers it first)."""
    body = {"schedule_id": "named", "spec": {"cron_expressions": [NEVER]},
            "action": {"workflow_type": "http-sched-elsewhere", "input": []}}
    async with durable.Worker(storage_client, workflows=[elsewhere]):
        refused = await http.post("/api/schedules", json=body, headers=AS_OPERATOR)
        assert refused.status_code == 400 and reason(refused) == "invalid_argument"
        assert "got 0" in refused.json()["message"]
        assert (await http.get("/api/schedules", headers=AS_VIEWER)).json()["schedules"] == []
        good = {**body, "action": {**body["action"], "input": ["a"]}}
        assert (await http.post("/api/schedules", json=good, headers=AS_OPERATOR)
                ).status_code == 201
        taken = await http.post("/api/schedules", json=body, headers=AS_OPERATOR)
        assert taken.status_code == 409 and reason(taken) == "schedule_already_exists"
        before = (await http.get("/api/schedules/named", headers=AS_VIEWER)).json()
        changed = await http.put("/api/schedules/named", headers=AS_OPERATOR, json={
            "action": {"workflow_type": "http-sched-elsewhere", "input": ["a", "b", "c"]}})
        assert changed.status_code == 400 and reason(changed) == "invalid_argument"
        assert "got 3" in changed.json()["message"]
        assert (await http.get("/api/schedules/named", headers=AS_VIEWER)).json() == before


async def test_cli_schedule_create_by_name_over_server_checks_the_arguments(
        storage_client: durable.Client) -> None:
    """`durable schedule create --server` names the type: the control plane checks
    its arguments against the live workers' function (the CLI cannot)."""
    def run(*args: str) -> Any:
        return CliRunner().invoke(
            cli, ["--server", url, "--token", REMOTE_TOKEN, "schedule", "create", "named",
                  "http-sched-elsewhere", "--cron", NEVER, *args],
            env={"DURABLE_DB_URL": None, "DURABLE_SERVER_URL": None, "DURABLE_TOKEN": None,
                 "DURABLE_NAMESPACE": None})

    async with durable.Worker(storage_client, workflows=[elsewhere]), \
            remote_plane(storage_client) as url:
        refused = await anyio.to_thread.run_sync(run, "--input", '["a", "b", "c"]')
        assert refused.exit_code != 0 and "got 3" in refused.stderr, refused.stderr
        assert await storage_client.list_schedules() == []
        made = await anyio.to_thread.run_sync(run, "--input", '["a"]')
        assert made.exit_code == 0, made.stderr
    assert [s["schedule_id"] for s in await storage_client.list_schedules()] == ["named"]


# ---------------------------------------------------------------- the reference's shapes


async def test_routes_speak_the_reference_shape(http: httpx.AsyncClient) -> None:
    body = {"schedule_id": "hourly", "spec": {"cron_expressions": [], "intervals": [
        {"every": "PT1H", "offset": "PT15M"}], "timezone": "UTC"},
        "action": {"workflow_type": "http-sched-echo", "input": ["v"],
                   "execution_timeout_seconds": 600},
        "overlap_policy": "allow_all", "note": "from the reference client",
        "require_registered": False}
    created = await http.post("/api/schedules", json=body, headers=AS_OPERATOR)
    assert created.status_code == 201, created.text
    assert created.json() == {"schedule_id": "hourly", "outcome": "created"}
    again = await http.post("/api/schedules", json=body, headers=AS_OPERATOR)
    assert again.status_code == 409 and reason(again) == "schedule_already_exists"

    shown = (await http.get("/api/schedules/hourly", headers=AS_VIEWER)).json()
    assert shown["status"] == "active" and shown["overlap_policy"] == "allow_all"
    assert shown["spec"]["intervals"] == [{"every": "PT3600S", "offset": "PT900S"}]
    assert shown["spec"]["every"] == 3600 and shown["spec"]["offset"] == 900
    assert shown["action"] == {"workflow_type": "http-sched-echo", "task_queue": "default",
                               "execution_timeout_seconds": 600, "run_timeout_seconds": None}
    assert shown["next_fire_at"].endswith(":15:00+00:00") and len(shown["next_fires"]) == 5

    listed = (await http.get("/api/schedules", headers=AS_VIEWER)).json()
    assert [s["schedule_id"] for s in listed["schedules"]] == ["hourly"]
    assert listed["next_page_token"] is None
    paused_only = await http.get("/api/schedules", params={"status": "paused"},
                                 headers=AS_VIEWER)
    assert paused_only.json()["schedules"] == []
    await http.post("/api/schedules", json=dict(body, schedule_id="hourly-2"),
                    headers=AS_OPERATOR)
    first = (await http.get("/api/schedules", params={"page_size": 1},
                            headers=AS_VIEWER)).json()
    assert [s["schedule_id"] for s in first["schedules"]] == ["hourly-2"]  # newest first
    second = (await http.get("/api/schedules", headers=AS_VIEWER, params={
        "page_size": 1, "next_page_token": first["next_page_token"]})).json()
    assert [s["schedule_id"] for s in second["schedules"]] == ["hourly"]
    assert second["next_page_token"] is None and second["schedule_count"] == 1
    bad = await http.get("/api/schedules", params={"next_page_token": "x"}, headers=AS_VIEWER)
    # a token this server did not give, and pages over 200: the reference's answers
    assert bad.status_code == 400 and reason(bad) == "malformed_schedule_page_token"
    assert bad.json()["field"] == "next_page_token"
    big = await http.get("/api/schedules", params={"page_size": 201}, headers=AS_VIEWER)
    assert big.status_code == 422 and big.json()["field"] == "page_size"
    assert list(big.json()["errors"]) == ["page_size"]
    await http.delete("/api/schedules/hourly-2", headers=AS_OPERATOR)

    fired = await http.post("/api/schedules/hourly/trigger", json={}, headers=AS_OPERATOR)
    assert fired.json()["outcome"] == "triggered"
    assert fired.json()["fire_outcome"] == "started"
    assert fired.json()["workflow_id"].startswith("hourly-")

    back = await http.post("/api/schedules/hourly/backfill", headers=AS_OPERATOR, json={
        "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T03:00:00Z"})
    data = back.json()
    assert data["outcome"] == "backfill_started" and data["fires_attempted"] == 3
    assert [r["fire_time"] for r in data["results"]] == [
        f"2026-01-01T0{h}:15:00+00:00" for h in range(3)]

    updated = await http.put("/api/schedules/hourly", headers=AS_OPERATOR, json={
        "spec": {"cron_expressions": ["30 6 * * *"], "timezone": "Asia/Tokyo"},
        "action": {"run_timeout_seconds": 60}})
    assert updated.json() == {"schedule_id": "hourly", "outcome": "updated"}
    shown = (await http.get("/api/schedules/hourly", headers=AS_VIEWER)).json()
    assert shown["spec"]["cron_expressions"] == ["30 6 * * *"]
    assert shown["spec"]["intervals"] == [] and shown["spec"]["timezone"] == "Asia/Tokyo"
    assert shown["action"]["run_timeout_seconds"] == 60
    assert shown["action"]["execution_timeout_seconds"] == 600  # merged, as the reference

    paused = await http.post("/api/schedules/hourly/pause", json={"note": "freeze"},
                             headers=AS_OPERATOR)
    assert paused.json() == {"schedule_id": "hourly", "outcome": "paused"}
    assert (await http.get("/api/schedules/hourly", headers=AS_VIEWER)).json()[
        "status"] == "paused"
    resumed = await http.post("/api/schedules/hourly/resume", json={}, headers=AS_OPERATOR)
    assert resumed.json()["outcome"] == "resumed"
    deleted = await http.delete("/api/schedules/hourly", headers=AS_OPERATOR)
    assert deleted.json() == {"schedule_id": "hourly", "outcome": "deleted"}
    gone = await http.get("/api/schedules/hourly", headers=AS_VIEWER)
    assert gone.status_code == 404 and reason(gone) == "schedule_not_found"


@pytest.mark.parametrize(("body", "status", "code"), [
    # a spec that makes no schedule: 422 as the reference answers it
    ({"spec": {"cron_expressions": ["* *"]}, "action": {"workflow_type": "http-sched-echo"},
      "require_registered": False}, 422, "invalid_cron_expression"),
    ({"spec": {"intervals": [{"every": "an hour"}]},
      "action": {"workflow_type": "http-sched-echo"}, "require_registered": False},
     422, "invalid_schedule_spec"),
    ({"spec": {"cron_expressions": ["0 * * * *"]}, "action": {"workflow_type": "nobody"}},
     400, "not_registered"),
    ({"spec": {}, "action": {"workflow_type": "http-sched-echo"},
      "require_registered": False}, 422, "invalid_schedule_spec"),
    ({"spec": {"cron_expressions": ["0 * * * *"]}, "action": {}}, 422, None),
    ({"spec": {"cron_expressions": ["0 * * * *"]},
      "action": {"workflow_type": "http-sched-echo"}, "overlap_policy": "sometimes"},
     422, None),
])
async def test_bad_schedule_bodies_are_refused_naming_what_is_wrong(
        http: httpx.AsyncClient, body: dict[str, Any], status: int, code: str | None) -> None:
    response = await http.post("/api/schedules", json=body, headers=AS_OPERATOR)
    assert response.status_code == status, response.text
    if code is not None:
        assert reason(response) == code
    assert (await http.get("/api/schedules", headers=AS_VIEWER)).json()["schedules"] == []


async def test_a_spec_with_no_fire_rule_is_refused_in_the_wire_s_words(
        http: httpx.AsyncClient) -> None:
    """The reference client's `update_schedule(spec=ScheduleSpec(timezone=...))`
    (a spec is replaced whole) is refused naming cron_expressions and intervals,
    the words it sent (they read cron= and every=, the SDK's), nothing changed."""
    made = await http.post("/api/schedules", headers=AS_OPERATOR, json={
        "schedule_id": "tz", "spec": {"cron_expressions": [NEVER]}, "require_registered": False,
        "action": {"workflow_type": "http-sched-echo"}})
    assert made.status_code == 201, made.text
    before = (await http.get("/api/schedules/tz", headers=AS_VIEWER)).json()
    for send in (lambda body: http.put("/api/schedules/tz", json=body, headers=AS_OPERATOR),
                 lambda body: http.post("/api/schedules", headers=AS_OPERATOR, json={
                     **body, "require_registered": False,
                     "action": {"workflow_type": "http-sched-echo"}})):
        refused = await send({"spec": {"timezone": "Europe/Amsterdam"}})
        assert refused.status_code == 422 and reason(refused) == "invalid_schedule_spec"
        message = refused.json()["message"]
        assert "cron_expressions" in message and "intervals" in message, message
        assert "replaced whole" in message and "cron=" not in message
    assert (await http.get("/api/schedules/tz", headers=AS_VIEWER)).json() == before


async def test_what_the_reference_refuses_is_refused_in_its_shape(
        http: httpx.AsyncClient) -> None:
    """Ids over 128 characters, jitter over 3600 s or not whole, max_runs 0: 422
    naming the field (unless rules durable); backfill bounds without an
    offset are UTC, a reversed range is 422 invalid_time_range; a history
    limit over 500 reads 500, a bad after_sequence is 422 invalid_after_sequence."""
    base = {"spec": {"cron_expressions": [NEVER]}, "require_registered": False,
            "action": {"workflow_type": "http-sched-echo"}}
    for extra, field in (({"schedule_id": "x" * 129}, "schedule_id"),
                         ({"jitter_seconds": 3601}, "jitter_seconds"),
                         ({"jitter_seconds": 1.5}, "jitter_seconds"),
                         ({"max_runs": 0}, "max_runs")):
        refused = await http.post("/api/schedules", json={**base, **extra},
                                  headers=AS_OPERATOR)
        assert refused.status_code == 422, (extra, refused.text)
        assert list(refused.json()["errors"]) == [field], extra
    taken = await http.post("/api/schedules", headers=AS_OPERATOR, json={
        **base, "schedule_id": "x" * 200, "jitter_seconds": 3601.5, "rules": "durable"})
    assert taken.status_code == 201, taken.text
    made = await http.post("/api/schedules", headers=AS_OPERATOR,
                           json={**base, "schedule_id": "r" * 128, "jitter_seconds": 3600})
    assert made.status_code == 201, made.text
    path = "/api/schedules/" + "r" * 128
    jitter = await http.put(path, json={"jitter_seconds": 7200}, headers=AS_OPERATOR)
    assert jitter.status_code == 422 and list(jitter.json()["errors"]) == ["jitter_seconds"]
    naive = await http.post(path + "/backfill", headers=AS_OPERATOR, json={
        "start_time": "2026-01-01", "end_time": "2026-01-01T03:00:00"})
    assert naive.status_code == 200, naive.text
    assert [r["fire_time"] for r in naive.json()["results"]] == ["2026-01-01T02:00:00+00:00"]
    for start, end, code in (("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z",
                              "invalid_time_range"),
                             ("yesterday", "2026-01-01T00:00:00Z", "validation_failed")):
        bad = await http.post(path + "/backfill", headers=AS_OPERATOR,
                              json={"start_time": start, "end_time": end})
        assert bad.status_code == 422 and reason(bad) == code, bad.text
    ahead = await http.post(path + "/backfill", headers=AS_OPERATOR, json={
        "start_time": "2026-01-01T00:00:00Z", "end_time": "2999-01-01T00:00:00Z"})
    assert ahead.status_code == 422 and reason(ahead) == "invalid_time_range", ahead.text
    assert "still to come" in ahead.json()["message"]
    history = await http.get(path + "/history", params={"limit": 501}, headers=AS_VIEWER)
    assert history.status_code == 200 and len(history.json()["events"]) == 1
    for after in ("-1", "x"):
        bad = await http.get(path + "/history", params={"after_sequence": after},
                             headers=AS_VIEWER)
        assert bad.status_code == 422 and reason(bad) == "invalid_after_sequence"
    # the backfilled run is open (no worker here): a fire now waits behind it
    buffered = await http.post(path + "/trigger", json={"overlap_policy": "buffer_one"},
                               headers=AS_OPERATOR)
    assert buffered.json()["outcome"] == "buffered" and buffered.json()["buffer_depth"] == 1
    full = await http.post(path + "/trigger", json={"overlap_policy": "buffer_one"},
                           headers=AS_OPERATOR)
    assert full.json()["outcome"] == "buffer_full" and full.json()["fire_outcome"] == "skipped"
    listed = (await http.get("/api/schedules", headers=AS_VIEWER)).json()["schedules"]
    assert all(item["created_at"] and item["updated_at"] for item in listed)
    aliased = await http.post("/api/schedules", headers=AS_OPERATOR, json={
        **base, "schedule_id": "aliased", "action": {
            "workflow_type": "http-sched-echo", "workflow_execution_timeout": 600,
            "workflow_run_timeout": 60}})
    assert aliased.status_code == 201, aliased.text
    action = (await http.get("/api/schedules/aliased", headers=AS_VIEWER)).json()["action"]
    assert (action["execution_timeout_seconds"], action["run_timeout_seconds"]) == (600, 60)
    shown = (await http.get(path, headers=AS_VIEWER)).json()
    info = shown["info"]  # the reference's skip counters
    assert (info["skipped_trigger_count"], info["last_skip_reason"]) == (1, "buffer_full")
    assert info["last_skipped_at"]
    # the list's items carry the same last-skip facts as describe
    item = next(item for item in (await http.get("/api/schedules", headers=AS_VIEWER)).json()[
        "schedules"] if item["schedule_id"] == shown["schedule_id"])
    assert (item["info"]["skipped_trigger_count"], item["info"]["last_skip_reason"],
            item["info"]["last_skipped_at"]) == (1, "buffer_full", info["last_skipped_at"])
    assert shown["jitter_seconds"] == 3600 and shown["search_attributes"] == {}


async def test_viewers_read_schedules_but_change_nothing_and_retention_is_admin_only(
        http: httpx.AsyncClient) -> None:
    body = {"schedule_id": "s", "spec": {"cron_expressions": [NEVER]},
            "action": {"workflow_type": "http-sched-echo"}, "require_registered": False}
    assert (await http.post("/api/schedules", json=body, headers=AS_VIEWER)).status_code == 403
    assert (await http.post("/api/schedules", json=body, headers=AS_OPERATOR)).status_code == 201
    for method, path in (("POST", "/api/schedules/s/pause"), ("POST", "/api/schedules/s/trigger"),
                         ("DELETE", "/api/schedules/s"), ("PUT", "/api/schedules/s")):
        response = await http.request(method, path, json={}, headers=AS_VIEWER)
        assert response.status_code == 403, (method, path)
    # retention needs the admin role, as every reference /system route
    for method, path in (("GET", "/api/system/retention"),
                         ("POST", "/api/system/retention/pass"),
                         ("PUT", "/api/system/retention")):
        for headers in (AS_VIEWER, AS_OPERATOR):
            response = await http.request(method, path, json={}, headers=headers)
            assert response.status_code == 403, (method, path)
            assert response.json()["required_role"] == "admin"
    assert (await http.get("/api/system/retention", headers=AS_ADMIN)).status_code == 200
    assert (await http.get("/api/schedules/s", headers=VERSION)).status_code == 401


async def test_retention_routes_in_the_reference_shape(db_url: str) -> None:
    """On the virtual clock: the run is a day old without waiting a day."""
    async with TimeSkippingEnvironment(db_url) as env:
        app = create_app(env.client, {ADMIN: "admin"}, environ={})
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            status = (await http.get("/api/system/retention", headers=AS_ADMIN)).json()
            assert status["retention_days"] is None and status["expired_run_count"] == 0
            no_setting = await http.post("/api/system/retention/pass", json={},
                                         headers=AS_ADMIN)
            assert no_setting.status_code == 400 and "no retention setting" in no_setting.text
            async with env.worker(workflows=[echo]):
                await env.client.execute(echo, "a", id="r-1")
            put = await http.put("/api/system/retention", json={"retention_days": 1},
                                 headers=AS_ADMIN)
            assert put.status_code == 200 and put.json()["retention_seconds"] == 86400
            status = (await http.get("/api/system/retention", headers=AS_ADMIN)).json()
            assert status["retention_days"] == 1 and status["expired_run_count"] == 0
            await env.sleep(2 * 86400)
            status = (await http.get("/api/system/retention", headers=AS_ADMIN)).json()
            assert status["expired_run_count"] == 1 and len(status["expired_run_ids"]) == 1
            assert status["cutoff"] is not None and status["scan_pressure"] is False
            dry = (await http.post("/api/system/retention/pass", json={"dry_run": True},
                                   headers=AS_ADMIN)).json()
            assert dry["processed"] == 1 and dry["pruned"] == 0
            assert dry["results"][0]["outcome"] == "would_prune"
            done = (await http.post("/api/system/retention/pass", json={},
                                    headers=AS_ADMIN)).json()
            assert done["pruned"] == 1 and done["results"][0]["outcome"] == "pruned"
            assert done["results"][0]["history_events_deleted"] > 0
            assert done["report"]["deleted"]["runs"] == 1
            bad = await http.put("/api/system/retention", headers=AS_ADMIN,
                                 json={"retention_days": 1, "retention_seconds": 60})
            assert bad.status_code == 400 and "not both" in bad.text


async def test_metrics_count_fires_lateness_and_retention_deletions(db_url: str) -> None:
    async with TimeSkippingEnvironment(db_url) as env:
        app = create_app(env.client, {OPERATOR: "operator"}, environ={})
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:

            async def scrape() -> str:
                response = await http.get("/metrics", headers=AS_OPERATOR)
                assert response.status_code == 200
                return response.text

            await scrape()  # the fire tail starts here
            async with env.worker(workflows=[echo]):
                handle = await env.client.create_schedule(
                    "minutely", ScheduleSpec(every=60), echo, "m",
                    overlap=durable.Overlap.ALLOW_ALL)
                await env.sleep(180)
                await handle.pause()
                fired = await handle.trigger()
                await env.client.get_handle(fired["workflow_id"]).result()
            text = await scrape()
            assert 'durable_schedules{namespace="default",state="paused"} 1.0' in text
            assert 'durable_schedule_fires{kind="fired",namespace="default"} 4.0' in text
            assert ('durable_schedule_fires_recorded_total{namespace="default",'
                    'origin="schedule",outcome="started"} 3.0') in text
            assert ('durable_schedule_fires_recorded_total{namespace="default",'
                    'origin="trigger",outcome="started"} 1.0') in text
            assert 'durable_schedule_fire_lateness_seconds_count{namespace="default"} 3.0' in text
            assert "durable_retention_deleted_rows" not in text.replace(
                "# HELP durable_retention_deleted_rows", "").replace(
                "# TYPE durable_retention_deleted_rows", "")
            await env.sleep(3600)
            report = await env.client.prune(60)
            assert report["runs_deleted"] == 4
            text = await scrape()
            assert 'durable_retention_deleted_rows{namespace="default",table="runs"} 4.0' in text, (
                [line for line in text.splitlines() if "retention" in line])
            # a second scrape counts nothing twice
            assert ('durable_schedule_fires_recorded_total{namespace="default",'
                    'origin="schedule",outcome="started"} 3.0') in await scrape()


# ---------------------------------------------------------------- the CLI with --server


async def test_cli_schedule_commands_over_server(storage_client: durable.Client) -> None:
    await storage_client.create_schedule("via-cli", ScheduleSpec(cron=NEVER), echo, "c")

    def run(*args: str, token: str = REMOTE_TOKEN) -> Any:
        result = CliRunner().invoke(
            cli, ["--server", url, "--token", token, *args, "--json"],
            env={"DURABLE_DB_URL": None, "DURABLE_SERVER_URL": None, "DURABLE_TOKEN": None,
                 "DURABLE_NAMESPACE": None})
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    async with remote_plane(storage_client) as url:
        listed = await anyio.to_thread.run_sync(run, "schedule", "list")
        assert [s["schedule_id"] for s in listed["schedules"]] == ["via-cli"]
        await anyio.to_thread.run_sync(run, "schedule", "pause", "via-cli")
        fired = await anyio.to_thread.run_sync(run, "schedule", "trigger", "via-cli",
                                                "--overlap", "allow_all")
        assert fired["outcome"] == "started"
        dry = await anyio.to_thread.run_sync(functools.partial(  # retention: admin only
            run, "prune", "--older-than", "1d", "--dry-run", token=REMOTE_ADMIN_TOKEN))
        assert dry["dry_run"] is True and dry["runs_expired"] == 0
    info = await storage_client.get_schedule("via-cli").describe()
    assert info["paused"] is True and info["fires_count"] == 1
