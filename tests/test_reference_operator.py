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
    assert RESULT_TIMEOUT
