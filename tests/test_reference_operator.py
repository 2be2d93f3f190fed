"""The reference engine's own client's operator methods against `durable serve`.

`durable-workflow` 2.12.0 (pinned in the dev extra) on
tests/test_reference_client.py's live server and worker, on SQLite (asyncio
and trio) and PostgreSQL: retention (admin only), namespaces (create,
update, describe, list), search attributes (listed; registering one is
refused: the engine cannot filter by them), history export (checked by the
client's own bundle verifier) and the worker roster. Routes the client has
no method for are driven with httpx against the same server.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from test_reference_client import (
    ADMIN,
    OPERATOR,
    RESULT_TIMEOUT,
    VIEWER,
    Live,
    anyio_backend,
    driver_name,
    live,
    ref_greet,
    run_reference,
    setup,
)
from test_reference_client import client as ref_client

dw = pytest.importorskip("durable_workflow")
dw_errors = pytest.importorskip("durable_workflow.errors")

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend", "driver_name", "live", "setup"]  # fixtures used from there

VERSION = {"X-Durable-Workflow-Control-Plane-Version": "2"}


def headers(token: str, namespace: str = "default") -> dict[str, str]:
    return {**VERSION, "Authorization": f"Bearer {token}", "X-Namespace": namespace}


async def test_retention_routes_need_the_admin_role(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with ref_client(url, token=OPERATOR) as c:
            with pytest.raises(dw_errors.ServerError) as refused:
                await c.retention_status()
            assert refused.value.status == 403
            assert refused.value.body["required_role"] == "admin"
        async with ref_client(url, token=ADMIN) as c:
            status = await c.retention_status()
            assert status["namespace"] == "default" and status["retention_days"] is None
            assert status["expired_run_count"] == 0
            with pytest.raises(dw_errors.ServerError) as no_setting:
                await c.retention_pass()  # nothing says how old is too old
            assert no_setting.value.status == 400
            assert no_setting.value.body["reason"] == "invalid_argument"
            with pytest.raises(dw_errors.InvalidArgument):
                await c.retention_pass(run_ids=["r-1"])  # not supported: 422 names it

    await run_reference(scenario, live)
    async with httpx.AsyncClient(base_url=live.url) as http:
        for token in (VIEWER, OPERATOR):
            response = await http.put("/api/system/retention", json={"retention_days": 1},
                                      headers=headers(token))
            assert response.status_code == 403
        response = await http.put("/api/system/retention", json={"retention_days": 1},
                                  headers=headers(ADMIN))
        assert response.status_code == 200 and response.json()["retention_seconds"] == 86400


async def test_history_export_passes_the_reference_clients_own_verifier(live: Live) -> None:
    from durable_workflow.history_bundle_verify import verify_bundle

    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            done = await c.start_workflow(workflow_type="ref_greet", task_queue="default",
                                          workflow_id="exp-1", input=["zoë ✓"])
            assert await done.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == "hello zoë ✓"
            bundle = await c.export_history("exp-1", done.run_id)
            assert bundle["schema"] == "durable-workflow.v2.history-export"
            assert bundle["history_complete"] is True
            assert bundle["workflow"]["instance_id"] == "exp-1"
            assert bundle["workflow"]["status"] == "completed"
            types = [e["type"] for e in bundle["history_events"]]
            assert types[0] == "WorkflowStarted" and types[-1] == "WorkflowCompleted"
            history = await c.get_history("exp-1", done.run_id, page_size=1000)
            assert [e["sequence"] for e in bundle["history_events"]] == [
                e["sequence"] for e in history["events"]]
            assert dw._avro.decode(bundle["payloads"]["arguments"]["data"]) == ["zoë ✓"]
            assert dw._avro.decode(bundle["payloads"]["output"]["data"]) == "hello zoë ✓"
            report = verify_bundle(bundle)
            assert report["status"] == "ok", report["findings"]
            assert report["integrity"]["checksum_matches"] is True
            tampered = {**bundle, "dedupe_key": "changed"}
            assert verify_bundle(tampered)["status"] == "failed"

            failed = await c.start_workflow(workflow_type="ref_fail", task_queue="default",
                                            workflow_id="exp-2", input=["broken"])
            with pytest.raises(dw_errors.WorkflowFailed):
                await failed.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)
            bundle = await c.export_history("exp-2", failed.run_id)
            assert bundle["workflow"]["status"] == "failed"
            assert bundle["payloads"]["output"]["available"] is False
            assert verify_bundle(bundle)["status"] == "ok"

            open_run = await c.start_workflow(workflow_type="ref_order", task_queue="default",
                                              workflow_id="exp-3", input=["o-1"])
            bundle = await c.export_history("exp-3", open_run.run_id)
            assert bundle["history_complete"] is False
            assert verify_bundle(bundle)["status"] == "ok"
            await c.terminate_workflow("exp-3", reason="done")

            with pytest.raises(dw_errors.WorkflowNotFound):
                await c.export_history("exp-missing", "r-1")

    await run_reference(scenario, live)


async def test_namespaces_are_created_updated_described_and_listed(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with ref_client(url, token=ADMIN) as c:
            created = await c.create_namespace("billing", description="invoices",
                                               retention_days=30)
            assert (created.name, created.description, created.retention_days,
                    created.status) == ("billing", "invoices", 30, "active")
            assert created.created_at is not None
            with pytest.raises(dw_errors.ServerError) as twice:
                await c.create_namespace("billing")
            assert twice.value.status == 409
            assert twice.value.body["reason"] == "namespace_already_exists"
            with pytest.raises(dw_errors.ServerError) as taken:
                await c.create_namespace("default")
            assert taken.value.status == 409

            updated = await c.update_namespace("billing", retention_days=7)
            assert (updated.description, updated.retention_days) == ("invoices", 7)
            updated = await c.update_namespace("billing", description="all invoices")
            assert (updated.description, updated.retention_days) == ("all invoices", 7)
            described = await c.describe_namespace("billing")
            assert described.updated_at is not None and described.retention_days == 7
            names = [n.name for n in (await c.list_namespaces()).namespaces]
            assert names == ["billing", "default"]
            with pytest.raises(dw_errors.NamespaceNotFound):
                await c.update_namespace("nowhere", description="x")
            with pytest.raises(dw_errors.NamespaceNotFound):
                await c.describe_namespace("nowhere")
            with pytest.raises(dw_errors.InvalidArgument):
                await c.create_namespace("bad name!")
        async with ref_client(url, token=ADMIN, namespace="billing") as c:
            status = await c.retention_status()  # the namespace's retention is its setting
            assert status["namespace"] == "billing" and status["retention_days"] == 7
        async with ref_client(url, token=OPERATOR) as c:
            with pytest.raises(dw_errors.ServerError) as refused:
                await c.create_namespace("shipping")
            assert refused.value.status == 403

    await run_reference(scenario, live)
    async with httpx.AsyncClient(base_url=live.url) as http:
        response = await http.put("/api/namespaces/billing", json={"retention_days": 0},
                                  headers=headers(ADMIN))
        assert response.status_code == 422 and "retention_days" in response.json()["errors"]


async def test_workers_search_attributes_and_the_worker_plane(
        live: Live, make_worker: Any) -> None:
    async with make_worker(workflows=[ref_greet], identity="gone-worker") as gone:
        pass  # started and stopped: its record stays, not alive
    gone_id = gone.worker_id

    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            listed = await c.list_workers()
            assert listed.workers and all(w.status == "active" for w in listed.workers)
            live_id = listed.workers[0].worker_id
            assert gone_id not in {w.worker_id for w in listed.workers}
            described = await c.describe_worker(gone_id)
            assert described.status == "stopped"

            attributes = await c.list_search_attributes()
            assert attributes.system_attributes == {} and attributes.custom_attributes == {}
            for refused in (c.create_search_attribute("Region", "keyword"),
                            c.delete_search_attribute("Region")):
                with pytest.raises(dw_errors.ServerError) as unsupported:
                    await refused
                assert unsupported.value.status == 409
                assert unsupported.value.body["reason"] == "capability_unsupported"
                assert unsupported.value.body["capability"] == "search_attributes"
            with pytest.raises(dw_errors.InvalidArgument):
                await c.create_search_attribute("Region", "colour")

            for refused in (c.register_worker(worker_id="py-1", task_queue="default",
                                              supported_workflow_types=["ref_greet"],
                                              capability_manifest={}),
                            c.heartbeat_worker(worker_id="py-1")):
                with pytest.raises(dw_errors.ServerError) as no_plane:
                    await refused
                assert no_plane.value.status == 409
                assert no_plane.value.body["capability"] == "workflow_tasks"
            info = await c.get_cluster_info()
            capabilities = info["capabilities"]
            assert capabilities["search_attributes"] is False
            assert capabilities["workflow_tasks"] is False
            assert capabilities["history_export"] is True

            with pytest.raises(dw_errors.ServerError) as not_admin:
                await c.deregister_worker(gone_id)
            assert not_admin.value.status == 403
        async with ref_client(url, token=ADMIN) as c:
            with pytest.raises(dw_errors.ServerError) as alive:
                await c.deregister_worker(live_id)
            assert alive.value.status == 409 and alive.value.body["reason"] == "worker_alive"
            assert await c.deregister_worker(gone_id) == {"worker_id": gone_id,
                                                          "outcome": "deregistered"}
            with pytest.raises(dw_errors.ServerError) as missing:
                await c.describe_worker(gone_id)
            assert missing.value.status == 404
            with pytest.raises(dw_errors.ServerError) as twice:
                await c.deregister_worker(gone_id)
            assert twice.value.body["reason"] == "worker_not_found"

    await run_reference(scenario, live)


async def test_repair_and_activity_timeout_status_and_pass(live: Live) -> None:
    """Its `repair_status`, `activity_timeout_status` and `activity_timeout_pass`
    (admin only, as in the reference): how deadlines are enforced here and
    which have passed unenforced; the pass reports each id it was given.
    (What the pass enforces is pinned in tests/unit/store/test_deadlines.py.)"""
    async def scenario(url: str) -> None:
        async with ref_client(url, token=OPERATOR) as c:
            for call in (c.repair_status(), c.activity_timeout_status(),
                         c.activity_timeout_pass()):
                with pytest.raises(dw_errors.ServerError) as refused:
                    await call
                assert refused.value.status == 403
        async with ref_client(url, token=ADMIN) as c:
            status = await c.repair_status()
            assert status["policy"]["enforced_by"] == "watchdog"
            assert status["candidates"]["runs"] == {}  # a live worker's watchdog runs
            assert status["candidates"]["activity_attempts"] == {}
            assert await c.activity_timeout_status() == {
                "namespace": "default", "expired_count": 0, "expired_execution_ids": [],
                "scan_limit": 100, "scan_pressure": False, "by_kind": {}}
            assert await c.activity_timeout_pass() == {
                "processed": 0, "enforced": 0, "skipped": 0, "failed": 0, "results": []}
            assert (await c.activity_timeout_pass(execution_ids=["none-such", "none-such"])
                    )["results"] == [{"execution_id": "none-such", "outcome": "skipped",
                                      "reason": "not_found"}]
            with pytest.raises(dw_errors.InvalidArgument):
                await c.activity_timeout_pass(limit=101)
            # the pass covers the namespace: a filter is refused, never ignored (it
            # answered for the whole namespace as if for the runs asked about)
            assert (await c.repair_pass())["counts"] == {}
            for narrowed, field in (({"run_ids": ["r-1"]}, "run_ids"),
                                    ({"instance_id": "commands-1"}, "instance_id")):
                with pytest.raises(dw_errors.InvalidArgument) as refused:
                    await c.repair_pass(**narrowed)
                assert list(refused.value.errors) == [field]

    await run_reference(scenario, live)


async def test_archive_repair_and_redrive_say_what_to_do_here(live: Live) -> None:
    """The reference's run commands this engine has no counterpart for, and its
    standalone activities, are refused (409, not a bare 404), each naming what
    does the job here."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            done = await c.start_workflow(workflow_type="ref_greet", task_queue="default",
                                          workflow_id="commands-1", input=["ann"])
            await c.get_result(done, timeout=RESULT_TIMEOUT)
            for call, verb, hint in (
                    (c.archive_workflow("commands-1", reason="old"), "archive",
                     "has no archive tier"),
                    (c.repair_workflow("commands-1"), "repair", "waiting_for"),
                    (c.redrive_workflow("commands-1", done.run_id), "redrive",
                     "POST /api/workflows/{id}/reset")):
                with pytest.raises(dw_errors.ServerError) as refused:
                    await call
                assert refused.value.status == 409
                assert refused.value.body["reason"] == "capability_unsupported"
                message = refused.value.body["message"]
                assert message.startswith(f"cannot {verb} workflow 'commands-1': "), message
                assert hint in message
            for call in (c.start_activity(activity_type="ref_cleanup", task_queue="default"),
                         c.list_activities(), c.describe_activity("act-1")):
                with pytest.raises(dw_errors.ServerError) as standalone:
                    await call
                assert standalone.value.status == 409
                assert standalone.value.body["capability"] == "standalone_activities"
                assert "runs activities only inside workflows" in \
                    standalone.value.body["message"]

    await run_reference(scenario, live)


async def test_a_queues_builds_read_by_the_reference_client(live: Live) -> None:
    """Its `list_task_queue_build_ids` parses our rollout snapshot (our fields
    in its ``raw``); its drain, promote and resume are refused, saying how a
    build is taken out here."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            done = await c.start_workflow(workflow_type="ref_greet", task_queue="default",
                                          workflow_id="builds-1", input=["ann"])
            await c.get_result(done, timeout=RESULT_TIMEOUT)
            snapshot = await c.list_task_queue_build_ids("default")
            assert (snapshot.namespace, snapshot.task_queue) == ("default", "default")
            assert isinstance(snapshot.stale_after_seconds, int)
            [cohort] = snapshot.build_ids  # the live server's worker has no build id
            assert (cohort.build_id, cohort.rollout_status, cohort.drain_intent) == (
                None, "active", "active")
            assert cohort.active_worker_count == cohort.total_worker_count >= 1
            assert cohort.runtimes == ["python"] and cohort.raw is not None
            assert cohort.raw["open_runs"] == 0  # the run it ran is closed
            for steer in (c.drain_task_queue_build_id, c.promote_task_queue_build_id,
                          c.resume_task_queue_build_id):
                with pytest.raises(dw_errors.ServerError) as refused:
                    await steer("default", None)
                assert refused.value.status == 409
                assert refused.value.body["capability"] == "build_id_rollout_control"
                assert "of task queue 'default': this server does not drain, promote or " \
                       "resume builds" in refused.value.body["message"]
                assert "the workers without a build id" in refused.value.body["message"]

    await run_reference(scenario, live)


async def test_versioned_answers_echo_the_control_plane_version(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url) as http:
        for path in ("/api/workflows", "/api/workflows/none-such", "/api/namespaces"):
            response = await http.get(path, headers=headers(OPERATOR))
            assert response.headers["X-Durable-Workflow-Control-Plane-Version"] == "2", path
        missing = await http.get("/api/workflows", headers={"Authorization": f"Bearer {VIEWER}"})
        assert missing.status_code == 400
        assert missing.headers["X-Durable-Workflow-Control-Plane-Version"] == "2"
        health = await http.get("/api/health")  # not versioned: nothing to echo
        assert "X-Durable-Workflow-Control-Plane-Version" not in health.headers


async def test_an_admin_limited_to_namespaces_changes_only_those(
        storage_client: Any) -> None:
    from durable.http import create_app

    app = create_app(storage_client, {"all": "admin", "billing-only": "admin@billing"},
                     environ={})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        limited = headers("billing-only", "billing")
        created = await http.post("/api/namespaces", json={"name": "billing"}, headers=limited)
        assert created.status_code == 201
        for method, path, body in (("POST", "/api/namespaces", {"name": "shipping"}),
                                   ("PUT", "/api/namespaces/default", {"retention_days": 1}),
                                   ("GET", "/api/namespaces/default", None)):
            response = await http.request(method, path, json=body, headers=limited)
            assert response.status_code == 403, (method, path)
        listed = (await http.get("/api/namespaces", headers=limited)).json()["namespaces"]
        assert [n["name"] for n in listed] == ["billing"]
        everything = (await http.get("/api/namespaces", headers=headers("all"))).json()
        assert [n["name"] for n in everything["namespaces"]] == ["billing", "default"]
