"""The web UI's Schedules pages in a real headless Chromium, against a live control plane.

The same set-up as tests/test_ui.py (its fixtures: one `durable serve` with a
worker of tests/ui_app.py on a real SQLite database, Debian's chromium
driven by Playwright); skipped the same way without a browser. The schedule
fires on 1 January only, so every fire here is one the test asks for.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from test_ui import VIEWER, Live, browser, live, open_page, shot, wait_for

pytestmark = pytest.mark.browser
__all__ = ["browser", "live", "open_page"]  # the fixtures this module uses from test_ui

NEVER = "0 2 1 1 *"


def create(live: Live, schedule_id: str) -> None:
    response = live.api.post("/api/schedules", json={
        "schedule_id": schedule_id, "spec": {"cron_expressions": [NEVER],
                                             "timezone": "Europe/Amsterdam"},
        "action": {"workflow_type": "ui-greet", "input": ["sched"]},
        "overlap_policy": "allow_all", "require_registered": False})
    assert response.status_code == 201, response.text


def schedule(live: Live, schedule_id: str) -> dict[str, Any]:
    body: dict[str, Any] = live.api.get(f"/api/schedules/{schedule_id}").json()
    return body


def test_an_operator_sees_schedules_fires_one_and_pauses_it(
        live: Live, open_page: Callable[..., Any]) -> None:
    create(live, "ui-nightly")
    page = open_page()
    page.get_by_role("link", name="Schedules").click()
    page.wait_for_url(re.compile(r"/ui/schedules$"))
    row = page.locator('tr[data-schedule-id="ui-nightly"]')
    assert "0 2 1 1 * (Europe/Amsterdam)" in row.inner_text()
    assert row.locator("[data-state]").inner_text() == "active"
    next_fire = schedule(live, "ui-nightly")["next_fire_at"]
    assert row.locator("[data-next-fire]").get_attribute("data-next-fire") == next_fire
    shot(live, page, "schedules")

    row.get_by_role("link", name="ui-nightly").click()
    page.wait_for_url(re.compile(r"/ui/schedule\?id=ui-nightly$"))
    assert page.locator("#next-fires li").count() == 5
    assert "No fires yet." in page.locator("#recent").inner_text()

    page.get_by_role("link", name="Fire now").click()
    page.wait_for_url(re.compile(r"/ui/schedule/trigger\?id=ui-nightly$"))
    page.get_by_label("Overlap policy for this fire").select_option("skip")
    page.get_by_role("button", name="Fire now").click()
    page.wait_for_url(re.compile(r"notice=schedule-started"))
    assert "Fired: a run was started" in page.locator("p.notice").inner_text()
    fire = page.locator("#recent tbody tr").first
    assert fire.locator("[data-outcome]").inner_text() == "started"
    workflow_id = schedule(live, "ui-nightly")["recent"][0]["workflow_id"]
    wait_for(lambda: live.status(workflow_id) == "completed", "the fired run to complete")
    page.reload()
    fire = page.locator("#recent tbody tr").first
    assert "completed" in fire.inner_text()
    shot(live, page, "schedule")
    fire.get_by_role("link", name=workflow_id).click()
    page.wait_for_url(re.compile(r"/ui/run\?wf="))
    assert page.locator("h1 .wfid").inner_text() == workflow_id

    page.goto(f"{live.url}/ui/schedule?id=ui-nightly")
    page.get_by_role("link", name="Pause").click()
    page.get_by_label("Note").fill("db maintenance")
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url(re.compile(r"notice=schedule-paused"))
    assert page.locator("h1 [data-state]").inner_text() == "paused"
    assert page.locator("#note").inner_text() == "db maintenance"
    assert schedule(live, "ui-nightly")["status"] == "paused"
    page.get_by_role("link", name="Resume").click()
    page.get_by_role("button", name="Resume").click()
    page.wait_for_url(re.compile(r"notice=schedule-resumed"))
    assert schedule(live, "ui-nightly")["status"] == "active"
    missing = page.goto(f"{live.url}/ui/schedule?id=no-such-schedule")
    assert missing is not None and missing.status == 404
    assert not page.js_errors


def test_a_viewer_reads_schedules_but_cannot_act(
        live: Live, open_page: Callable[..., Any]) -> None:
    create(live, "ui-readonly")
    page = open_page(VIEWER)
    page.goto(f"{live.url}/ui/schedule?id=ui-readonly")
    assert page.locator("h1").inner_text().startswith("Schedule ui-readonly")
    for name in ("Pause", "Resume", "Fire now"):
        assert page.get_by_role("link", name=name).count() == 0
    refused = page.goto(f"{live.url}/ui/schedule/trigger?id=ui-readonly")
    assert refused is not None and refused.status == 403
    page.goto(f"{live.url}/ui/schedules")
    status, _ = page.evaluate(
        """async ([url]) => {
            const csrf = document.querySelector('input[name=csrf]').value;
            const body = new URLSearchParams({csrf});
            const r = await fetch(url, {method: 'POST', body, credentials: 'same-origin'});
            return [r.status, await r.text()];
        }""", [f"{live.url}/ui/schedule/trigger?id=ui-readonly"])
    assert status == 403
    assert schedule(live, "ui-readonly")["fires_count"] == 0
