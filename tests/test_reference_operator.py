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
