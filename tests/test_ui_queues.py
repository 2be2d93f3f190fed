"""The UI's Workers and Queues pages: who serves the namespace, what each queue
runs and waits, with the visitor's role (a viewer reads them)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from test_ui_http import VIEWER, Browserless, _app
from test_workers import reserve_seats, reserve_stock, shop_order

import durable

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("driver_name", ["sqlite"])]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def ui(storage_client: durable.Client) -> AsyncIterator[Browserless]:
    transport = httpx.ASGITransport(app=_app(storage_client), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
        yield Browserless(http, storage_client)


async def test_workers_page_lists_workers_and_flags_a_name_with_two_definitions(
    ui: Browserless, storage_client: durable.Client,
) -> None:
    await ui.login(VIEWER)
    async with durable.Worker(storage_client, workflows=[shop_order], activities=[reserve_stock],
                              identity="shop", poll_interval=0.1), \
            durable.Worker(storage_client, activities=[reserve_seats], identity="theatre",
                           poll_interval=0.1):
        page = await ui.http.get("/ui/workers")
        assert page.status_code == 200, page.text
        assert ">shop</th>" in page.text and ">theatre</th>" in page.text
        assert page.text.count('data-state="alive"') == 2
        assert page.text.count('data-clash="reserve"') == 2  # on both workers' rows
        assert 'aria-current="page">Workers' in page.text
        assert "0 runs, 0 attempts" in page.text and "1 attempts" not in page.text
    # both stopped gracefully: "stopped" and when, not "gone" as a killed one
    page = await ui.http.get("/ui/workers")
    assert page.text.count('data-state="stopped"') == 2, page.text
    assert page.text.count("it stopped itself") == 2
    assert 'data-state="gone"' not in page.text
    # a worker that went silent (SIGKILL: last seen 1000 s ago, for 30 s) is gone
    from durable.store.records import WorkerRegistration

    now = storage_client.clock.now()
    await storage_client.store.register_worker(WorkerRegistration(
        "w-killed", storage_client.namespace, "default", ("ui-nobody",), (), ()), 30.0,
        now - 1000)
    page = await ui.http.get("/ui/workers")
    assert page.text.count('data-state="gone"') == 1, page.text
    assert page.text.count('data-state="stopped"') == 2
    assert "without saying it stopped (killed, or cut off): presumed gone since" in page.text


async def test_queues_page_shows_running_waiting_and_limits(
    ui: Browserless, storage_client: durable.Client,
) -> None:
    await ui.login(VIEWER)
    for i in range(3):
        await storage_client.start(shop_order, "sku", id=f"q-{i}",
                                   options=durable.StartOptions(task_queue="shop"))
    await storage_client.set_queue_limits("shop", durable.QueueLimits(max_running=2))
    page = await ui.http.get("/ui/queues")
    assert page.status_code == 200, page.text
    assert 'data-queue="shop"' in page.text
    assert 'data-waiting="3"' in page.text and "0 of 2" in page.text
    assert "running ≤ 2" in page.text
    # the oldest waiting run's age in the words every page uses ("2m 52s",
    # not "172.0 s")
    row = page.text.split('data-queue="shop"', 1)[1].split("</tr>", 1)[0]
    assert " s</td>" not in row and re.search(r"<td>\d+(\.\d+)?s|<td>\d+m", row), row
