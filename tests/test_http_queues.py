"""``/api/workers`` and ``/api/task-queues[/{name}]`` in the reference engine's
shape (with our fields beside), and ``PUT /api/task-queues/{name}/limits``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

import durable
from durable import activity, workflow
from durable.http import create_app

pytestmark = pytest.mark.anyio

VERSION = {"X-Durable-Workflow-Control-Plane-Version": "2"}
AS_OPERATOR = {**VERSION, "Authorization": "Bearer op"}
AS_VIEWER = {**VERSION, "Authorization": "Bearer view"}


@activity.defn(name="http_queue_ship")
async def ship(order: str) -> str:
    return order


@workflow.defn(name="http_queue_order")
async def order(n: int) -> int:
    return n


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def http(storage_client: durable.Client) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(storage_client, {"op": "operator", "view": "viewer"}, environ={})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://plane") as client:
        yield client


async def get(http: httpx.AsyncClient, path: str) -> Any:
    response = await http.get(path, headers=AS_VIEWER)
    assert response.status_code == 200, response.text
    return response.json()


async def test_workers_are_listed_in_the_reference_shape_with_ours(
    storage_client: durable.Client, http: httpx.AsyncClient,
) -> None:
    async with durable.Worker(storage_client, workflows=[order], activities=[ship],
                              task_queue="orders", identity="api-worker", poll_interval=0.1):
        listed = await get(http, "/api/workers")
        [worker] = listed["workers"]
        assert worker["worker_id"].startswith("api-worker#")
        assert (worker["task_queue"], worker["runtime"], worker["status"]) == (
            "orders", "python", "active")
        assert worker["supported_workflow_types"] == ["http_queue_order"]
        assert worker["supported_activity_types"] == ["http_queue_ship"]
        assert set(worker["workflow_definition_fingerprints"]) == {"http_queue_order"}
        assert worker["last_heartbeat_at"] and worker["registered_at"]
        assert (worker["identity"], worker["alive"], worker["runs_held"]) == (
            "api-worker", True, 0)
        assert listed["stale_after_seconds"] == 30.0  # twice the default 15 s lease
        one = await get(http, f"/api/workers/{quote(worker['worker_id'], safe='')}")
        assert one["worker_id"] == worker["worker_id"]
        assert (await get(http, "/api/workers?task_queue=elsewhere"))["workers"] == []
        missing = await http.get("/api/workers/nobody", headers=AS_VIEWER)
        assert missing.status_code == 404 and missing.json()["reason"] == "worker_not_found"
    # stopped: no longer listed as live, listed when asked for
    assert (await get(http, "/api/workers"))["workers"] == []
    [gone] = (await get(http, "/api/workers?status=stopped"))["workers"]
    assert gone["alive"] is False


async def test_task_queues_show_backlog_pollers_and_limits(
    storage_client: durable.Client, http: httpx.AsyncClient,
) -> None:
    for i in range(3):
        await storage_client.start(order, i, id=f"o-{i}",
                                   options=durable.StartOptions(task_queue="orders"))
    denied = await http.put("/api/task-queues/orders/limits", headers=AS_VIEWER,
                            json={"max_running": 2})
    assert denied.status_code == 403
    done = await http.put("/api/task-queues/orders/limits", headers=AS_OPERATOR,
                          json={"max_running": 2, "rate": {"count": 10, "per": 60}})
    assert done.status_code == 200, done.text
    assert done.json()["limits"]["rate"] == {"count": 10, "per": 60.0}
    bad = await http.put("/api/task-queues/orders/limits", headers=AS_OPERATOR,
                         json={"max_running": 0})
    assert bad.status_code == 422
    listed = await get(http, "/api/task-queues")
    [queue] = [q for q in listed["task_queues"] if q["name"] == "orders"]
    assert queue["stats"]["workflow_tasks"] == {"ready_count": 3, "leased_count": 0}
    assert queue["stats"]["approximate_backlog_count"] == 3
    assert queue["limits"]["max_running"] == 2
    detail = await get(http, "/api/task-queues/orders")
    assert (detail["name"], detail["pollers"], detail["runs"]["waiting"]) == ("orders", [], 3)
    assert detail["runs"]["rate_left"] == 1
    assert detail["current_leases"] == []  # nothing claimed: nothing leased
    # a claim: the lease behind the leased count is listed (it said [] always)
    now = storage_client.clock.now()
    claimed = await storage_client.store.claim_runs(
        "default", "orders", "w-api", ("http_queue_order",), 1, 30.0, now)
    assert len(claimed) == 1
    detail = await get(http, "/api/task-queues/orders")
    assert detail["stats"]["workflow_tasks"]["leased_count"] == 1
    [lease] = detail["current_leases"]
    assert (lease["kind"], lease["workflow_id"], lease["worker_id"]) == (
        "workflow", claimed[0].run.workflow_id, "w-api")
    assert lease["lease_expires_at"] is not None


async def test_a_remote_client_sees_workers_and_queues_as_an_embedded_one(
    storage_client: durable.Client,
) -> None:
    from conftest import REMOTE_TOKEN, remote_plane

    async with durable.Worker(storage_client, workflows=[order], task_queue="orders",
                              identity="remote-seen", poll_interval=0.1), \
            remote_plane(storage_client) as url, \
            durable.connect(url, token=REMOTE_TOKEN) as remote:
        await remote.set_queue_limits("orders", durable.QueueLimits(
            max_running=4, rate=durable.Rate(5, per=2)))
        assert await remote.describe_queue("orders") == \
            await storage_client.describe_queue("orders")
        assert [q["name"] for q in await remote.list_queues()] == ["orders"]
        theirs, ours = await remote.list_workers(), await storage_client.list_workers()
        assert [w["worker_id"] for w in theirs] == [w["worker_id"] for w in ours]
        assert theirs[0] == {k: ours[0][k] for k in theirs[0]}


async def test_a_start_over_http_takes_a_priority_and_a_concurrency_key(
    storage_client: durable.Client, http: httpx.AsyncClient,
) -> None:
    body = {"workflow_type": "http_queue_order", "workflow_id": "urgent", "input": [1],
            "task_queue": "orders", "priority": 0, "concurrency_key": "customer-1",
            "require_registered": False}
    response = await http.post("/api/workflows", json=body, headers=AS_OPERATOR)
    assert response.status_code == 201, response.text
    run = (await storage_client.get_handle("urgent").describe())["run"]
    assert (run["priority"], run["concurrency_key"]) == (0, "customer-1")
    # none given: the default, as an embedded start
    response = await http.post("/api/workflows", json={**body, "workflow_id": "plain",
                                                        "priority": None,
                                                        "concurrency_key": None},
                               headers=AS_OPERATOR)
    assert response.status_code == 201, response.text
    run = (await storage_client.get_handle("plain").describe())["run"]
    assert (run["priority"], run["concurrency_key"]) == (5, None)
    bad = await http.post("/api/workflows", json={**body, "workflow_id": "bad", "priority": 10},
                          headers=AS_OPERATOR)
    assert bad.status_code == 422 and "priority" in bad.text, bad.text


async def test_a_remote_client_starts_with_a_priority_and_a_concurrency_key(
    storage_client: durable.Client,
) -> None:
    from conftest import REMOTE_TOKEN, remote_plane

    async with remote_plane(storage_client) as url, \
            durable.connect(url, token=REMOTE_TOKEN) as remote:
        await remote.start(order, 1, id="remote-urgent", options=durable.StartOptions(
            task_queue="orders", priority=1, concurrency_key="customer-9"))
    run = (await storage_client.get_handle("remote-urgent").describe())["run"]
    assert (run["priority"], run["concurrency_key"]) == (1, "customer-9")
