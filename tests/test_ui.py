"""The web UI in a real headless Chromium, against a live control plane.

One server for the module: `durable.http.serve.serve_async` (uvicorn) on a
loopback port, a real SQLite database and a real worker in the same process
(tests/ui_app.py); the browser is Debian's ``chromium`` driven by Playwright
(no browser download: ``executable_path``). The cascade test also runs a
worker process of its own and kills it with SIGKILL while an activity runs.

Without chromium or Playwright these tests skip with the reason, or fail
when ``DURABLE_REQUIRE_BROWSER=1`` (CI). Screenshots of each page go to
``DURABLE_UI_SCREENSHOTS`` (e.g. docs/ui) or a temporary folder.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import ui_app

import durable

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "durable"
CHROMIUM = os.environ.get("DURABLE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
OPERATOR, VIEWER = "ui-operator-token", "ui-viewer-token"
TOKENS = {OPERATOR: "operator", VIEWER: "viewer"}
API = {"X-Durable-Workflow-Control-Plane-Version": "2", "Authorization": f"Bearer {OPERATOR}"}
WAIT = 30.0  # seconds any one thing may take before a test fails


def _unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright)"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return (f"no chromium at {CHROMIUM} (apt-get install chromium, or set "
                "DURABLE_CHROMIUM to its path)")
    return None


def _require_browser() -> None:
    reason = _unavailable()
    if reason is None:
        return
    if os.environ.get("DURABLE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"DURABLE_REQUIRE_BROWSER=1 but the browser tests cannot run: {reason}",
                    pytrace=False)
    pytest.skip(f"browser tests skipped: {reason}")


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Live:
    """The running control plane: its base URL and an API client (operator token)."""

    def __init__(self, url: str, db: str, shots: Path) -> None:
        self.url = url
        self.db = db
        self.shots = shots
        self.api = httpx.Client(base_url=url, headers=API, timeout=30)

    def start(self, workflow_type: str, workflow_id: str, *args: Any, **fields: Any) -> str:
        response = self.api.post("/api/workflows", json={
            "workflow_type": workflow_type, "workflow_id": workflow_id, "input": list(args),
            "require_registered": False, **fields})
        assert response.status_code == 201, response.text
        run_id: str = response.json()["run_id"]
        return run_id

    def describe(self, workflow_id: str) -> dict[str, Any]:
        response = self.api.get(f"/api/workflows/{workflow_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def events(self, workflow_id: str) -> list[str]:
        response = self.api.get(f"/api/workflows/{workflow_id}/history")
        if response.status_code == 404:
            return []
        assert response.status_code == 200, response.text
        return [e["event_type"] for e in response.json()["events"]]

    def status(self, workflow_id: str) -> str:
        """Our status word (the wire's extra durable_status: timed_out, needs_review...)."""
        return str(self.describe(workflow_id)["durable_status"])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    _require_browser()
    from anyio.from_thread import start_blocking_portal

    from durable.http.serve import serve_async

    folder = tmp_path_factory.mktemp("ui")
    shots = Path(os.environ.get("DURABLE_UI_SCREENSHOTS") or folder / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{folder / 'ui.db'}"
    with start_blocking_portal(backend="asyncio") as portal:
        future, port = portal.start_task(functools.partial(
            serve_async, db, "127.0.0.1", 0, tokens=TOKENS, worker=ui_app.WORKER))
        server = Live(f"http://127.0.0.1:{port}", db, shots)
        try:
            yield server
        finally:
            server.api.close()
            portal.call(_cancel, future)


def _cancel(future: Any) -> None:
    future.cancel()


@pytest.fixture(scope="module")
def browser(live: Live) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def open_page(browser: Any, live: Live) -> Iterator[Callable[..., Any]]:
    """A new browser context (its own cookies) and page, signed in with `token`."""
    contexts: list[Any] = []

    def make(token: str | None = OPERATOR, **options: Any) -> Any:
        options.setdefault("viewport", {"width": 1000, "height": 720})
        context = browser.new_context(**options)
        context.set_default_timeout(WAIT * 1000)
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.js_errors = errors
        if token is not None:
            page.goto(f"{live.url}/ui/runs")
            assert "/ui/login" in page.url
            page.get_by_label("Control-plane token").fill(token)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(re.compile(r"/ui/runs$"))
        return page

    yield make
    for context in contexts:
        context.close()


def shot(live: Live, page: Any, name: str, show: Any = None, block: str = "start") -> None:
    """The visible part of the page, scrolled to put `show` (a locator) at the top
    (or `block` "center"), as docs/ui.md shows it."""
    if show is not None:
        show.evaluate("(el, block) => el.scrollIntoView({block})", block)
    page.screenshot(path=str(live.shots / f"{name}.png"))


@pytest.fixture(scope="module")
def runs(live: Live) -> dict[str, str]:
    """Runs the reading tests look at, in the states they need."""
    ids = {
        "greet": live.start("ui-greet", "greet-1", "ada"),
        "fail": live.start("ui-fail", "charge-1", "o-17"),
        "deadlines": live.start("ui-deadlines", "deadlines-1", 10,
                                execution_timeout_seconds=7200, run_timeout_seconds=3600,
                                memo={"customer": "c-9"}),
    }
    wait_for(lambda: live.status("greet-1") == "completed", "greet-1 to complete")
    wait_for(lambda: live.status("charge-1") == "failed", "charge-1 to fail")
    wait_for(lambda: "TimerScheduled" in live.events("deadlines-1"),
             "deadlines-1's activity to time out on both attempts")
    return ids


# ---------------------------------------------------------------- reading


def test_list_filter_and_a_run_with_its_timeouts_and_computed_deadlines(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    page = open_page()
    rows = page.locator("table.runs tbody tr")
    for workflow_id in ("greet-1", "charge-1", "deadlines-1"):
        assert rows.locator(f"th >> text={workflow_id}").count() == 1
    shot(live, page, "runs")

    page.get_by_label("Status").select_option("completed")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"status=completed"))
    assert page.locator('tr[data-workflow-id="greet-1"]').count() == 1
    assert page.locator('tr[data-workflow-id="deadlines-1"]').count() == 0
    assert page.locator("table.runs caption").inner_text().startswith("Runs with status completed")

    page.get_by_label("Status").select_option("")
    page.get_by_label("Workflow type").fill("ui-deadlines")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"type=ui-deadlines"))
    assert page.locator("table.runs tbody tr").count() == 1
    assert page.locator('tr[data-workflow-id="deadlines-1"]').count() == 1

    page.get_by_label("Workflow id").fill("deadlines-1")
    page.get_by_label("Workflow id").press("Enter")
    page.wait_for_url(re.compile(r"/ui/run\?wf=deadlines-1"))
    assert page.locator("h1 .wfid").inner_text() == "deadlines-1"
    assert page.locator("#run-status").inner_text().strip() == "● running"

    info = live.describe("deadlines-1")
    execution = page.locator('tr[data-timeout="Execution timeout"]')
    assert "7200s (2h 00m)" in execution.inner_text()
    deadline = execution.locator("time[data-deadline]")
    assert deadline.get_attribute("datetime") == info["run"]["execution_deadline_at"]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in 1h 5\dm\)", deadline.inner_text())
    run_row = page.locator('tr[data-timeout="Run timeout"]')
    assert "3600s (1h 00m)" in run_row.inner_text()
    countdown = run_row.locator("time[data-deadline] .rel")
    first = countdown.inner_text()
    assert re.fullmatch(r"\(in (5\dm \d\ds|5\dm|1h 00m)\)", first), first
    # the page's script keeps the countdown current (no reload), and the run's
    # duration ticks with it
    running = page.locator("time[data-since]")
    assert running.inner_text().endswith(" so far")
    before = running.inner_text()
    page.wait_for_function("([el, text]) => el.textContent !== text",
                           arg=[countdown.element_handle(), first])
    page.wait_for_function("([el, text]) => el.textContent !== text",
                           arg=[running.element_handle(), before])
    phase = page.locator("#phase")
    assert phase.locator("strong").inner_text() == "cool-down"
    assert (phase.locator("time[data-deadline]").get_attribute("datetime")
            == info["phase"]["deadline_at"])
    assert "c-9" in page.locator("#h-memo + pre").inner_text()
    assert page.locator("#pending").get_by_text("timer").count() == 1
    shot(live, page, "run")

    # a failure with its typed cause chain
    page.goto(f"{live.url}/ui/run?wf=charge-1")
    chain = page.locator("#failures ol.chain").first
    assert chain.locator("li").nth(0).locator(".exc").inner_text() == "builtins.ValueError"
    assert chain.locator("li").nth(1).inner_text().startswith("caused by builtins.KeyError")
    assert "card declined for o-17" in chain.inner_text()
    assert page.locator("#closed-reason").inner_text() == "failed"
    assert not page.js_errors


def test_heartbeat_progress_moves_live_and_the_page_says_what_the_run_waits_for(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    # it heartbeats until terminated below: at 60 steps (18 s) the run could end
    # while a loaded machine's browser still looked at it
    live.start("ui-progress", "progress-1", 100_000)
    wait_for(lambda: "ActivityStarted" in live.events("progress-1"), "the activity to start")
    page = open_page(VIEWER)
    page.goto(f"{live.url}/ui/run?wf=progress-1")
    assert page.locator("body").get_attribute("data-poll")
    assert page.locator("#waiting [data-waiting-kind]").get_attribute(
        "data-waiting-kind") == "busy"
    page.evaluate("window.__same_page = true")  # gone if the page were reloaded
    bar = page.locator("#pending progress")
    bar.wait_for()
    page.locator("#pending a").first.focus()  # a reader on the activity's link keeps it
    first = float(bar.get_attribute("value") or 0)
    # heartbeats record no history event: only the poll can move the bar
    page.wait_for_function(
        "v => Number(document.querySelector('#pending progress').value) > v + 1", arg=first)
    assert page.evaluate("window.__same_page") is True
    assert page.evaluate("document.activeElement.closest('#pending') !== null")
    shot(live, page, "live-progress", page.locator("#waiting"))
    page.goto(f"{live.url}/ui/runs")  # the list tells busy from waiting
    assert page.locator('tr[data-workflow-id="progress-1"] [data-waiting]').inner_text() == "busy"
    held = page.locator('tr[data-workflow-id="progress-1"] [data-holder-text]').inner_text()
    assert held.startswith("activity ui-steady runs on worker ") and "presumed alive until" in held
    assert page.locator('tr[data-workflow-id="deadlines-1"] [data-waiting]').inner_text() \
        == "waiting"
    live.api.post("/api/workflows/progress-1/terminate", json={"reason": "seen enough"})
    # a run waiting on a timer says so, with its countdown
    page.goto(f"{live.url}/ui/run?wf=deadlines-1")
    waiting = page.locator("#waiting")
    assert waiting.locator("[data-waiting-kind]").get_attribute("data-waiting-kind") == "timer"
    assert "a timer, which fires" in waiting.inner_text()
    assert not page.js_errors


def test_finish_an_approval_with_query_update_and_signal_forms_then_the_dashboard(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    live.start("ui-approval", "approval-1", 2500)
    page = open_page()
    page.goto(f"{live.url}/ui/run?wf=approval-1")
    page.get_by_role("link", name="Query…").click()
    page.get_by_label("Query name").fill("progress")
    page.get_by_role("button", name="Ask").click()
    answer = page.locator("#action-answer")
    assert '"limit": 1000' in answer.inner_text()
    shot(live, page, "query")
    page.get_by_role("link", name="Back to the run").click()
    page.get_by_role("link", name="Update…").click()
    page.get_by_label("Update name").fill("set_limit")
    page.get_by_label("Arguments (a JSON array)").fill("[0]")
    page.get_by_role("button", name="Send the update").click()
    assert "got 0" in page.locator("#action-error").inner_text()
    page.get_by_label("Arguments (a JSON array)").fill("[5000]")
    page.get_by_role("button", name="Send the update").click()
    assert page.locator("#action-answer pre").inner_text().strip() == "1000"
    shot(live, page, "update")
    page.get_by_role("link", name="Back to the run").click()
    page.get_by_role("link", name="Signal…").click()
    page.get_by_label("Signal name").fill("approve")
    page.get_by_label("Arguments (a JSON array)").fill('["ann"]')
    page.get_by_role("button", name="Send the signal").click()
    page.wait_for_url(re.compile(r"notice=signalled"))
    wait_for(lambda: live.status("approval-1") == "completed", "the approval to complete")
    page.reload()
    received = page.locator("#received")
    assert "approve" in received.inner_text() and "set_limit" in received.inner_text()
    assert "web_ui (operator) via web_ui" in received.inner_text()
    shot(live, page, "received", received)

    page.get_by_role("link", name="Dashboard").click()
    page.wait_for_url(re.compile(r"/ui/dashboard"))
    assert page.locator("#d-failures-week .figure").inner_text() != "-"
    assert page.locator("#d-longest a").count() == 1
    shot(live, page, "dashboard")
    # a run's timeline: the chart with its failed attempts, and the tree
    page.goto(f"{live.url}/ui/run/timeline?wf=deadlines-1")
    chart = page.locator("svg.gantt")
    assert chart.locator('g[data-kind="activity"].bad').count() == 1
    assert chart.locator(".mark").count() == 2  # both attempts timed out
    shot(live, page, "timeline-chart", page.locator("#chart"))
    assert not page.js_errors


def test_an_activity_shows_its_retry_policy_timeouts_attempts_and_timeout_kind(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    page = open_page()
    page.goto(f"{live.url}/ui/run?wf=deadlines-1")
    page.locator("#activities").get_by_role("link", name="ui-slow").click()
    page.wait_for_url(re.compile(r"/ui/run/activity\?"))
    policy = page.locator("#retry-policy")
    assert policy.locator('[data-field="max_attempts"]').inner_text() == "2"
    assert "0.2s (200ms)" in policy.inner_text()
    assert "\N{MULTIPLICATION SIGN}2.0" in policy.inner_text()
    expected = {"schedule_to_start": "30s", "start_to_close": "1s",
                "schedule_to_close": "600s (10m)", "heartbeat": "15s"}
    for kind, configured in expected.items():
        row = page.locator(f'#activity-timeouts tr[data-timeout="{kind}"]')
        assert row.locator("td").nth(0).inner_text() == configured, kind
        assert row.locator("time.deadline").count() == 1, kind
    # the latest attempt timed out: its deadline is judged by that, not "passed ... ago"
    assert "reached: the attempt timed out" in page.locator(
        '#activity-timeouts tr[data-timeout="start_to_close"]').inner_text()
    # the retry was claimed at once: its schedule-to-start deadline was met, whatever
    # the clock says now
    assert "met: a worker claimed it" in page.locator(
        '#activity-timeouts tr[data-timeout="schedule_to_start"]').inner_text()
    attempts = page.locator("#attempts tbody tr")
    assert attempts.count() == 2
    for n in range(2):
        text = attempts.nth(n).inner_text()
        assert "timed_out" in text and "timeout: start_to_close" in text
    assert "retried: next attempt" in attempts.nth(0).inner_text()
    shot(live, page, "activity", page.locator("#retry-policy"))

    page.get_by_role("link", name="Timeline").click()
    page.wait_for_url(re.compile(r"/ui/run/timeline\?"))
    timed_out = page.locator('tr[data-event="ActivityTimedOut"]')
    assert timed_out.count() == 1
    assert timed_out.locator("[data-timeout-kind]").inner_text() == "timeout: start_to_close"
    assert ("Activity ui-slow timed out: start_to_close timeout (attempt 2)"
            in timed_out.inner_text())
    numbers = [int(n) for n in page.locator("table.timeline td.num:first-child").all_inner_texts()]
    assert numbers == sorted(numbers) and numbers[0] == 1
    assert re.fullmatch(r"\+\d+\.\d{3}s",
                        page.locator('tr[data-event="ActivityTimedOut"] td').nth(2).inner_text())
    shot(live, page, "timeline", timed_out, "center")
    assert not page.js_errors


def test_pages_read_without_javascript(live: Live, runs: dict[str, str],
                                       open_page: Callable[..., Any]) -> None:
    page = open_page(java_script_enabled=False)
    page.goto(f"{live.url}/ui/run?wf=deadlines-1")
    assert "7200s (2h 00m)" in page.locator("#timeouts").inner_text()
    assert re.search(r"\(in 1h 5\dm\)", page.locator("#timeouts").inner_text())
    page.goto(f"{live.url}/ui/run/timeline?wf=deadlines-1")
    assert page.locator('tr[data-event="ActivityTimedOut"]').count() == 1


# ---------------------------------------------------------------- acting


def test_request_cancellation_from_the_ui_and_watch_the_run_reach_cancelled(
        live: Live, open_page: Callable[..., Any]) -> None:
    live.start("ui-guarded", "guarded-1", "k-1")
    wait_for(lambda: "ActivityStarted" in live.events("guarded-1"), "the activity to start")
    # a page opened before anything happens, never reloaded: it follows the run live
    watcher = open_page(VIEWER)
    watcher.goto(f"{live.url}/ui/run?wf=guarded-1")
    assert watcher.locator("body").get_attribute("data-stream")
    assert "3/10" in watcher.locator("#pending").inner_text()  # heartbeat progress

    page = open_page()
    page.goto(f"{live.url}/ui/run?wf=guarded-1")
    page.get_by_role("link", name="Request cancellation…").click()
    page.wait_for_url(re.compile(r"/ui/run/request-cancellation\?"))
    page.get_by_label("Reason").fill("customer withdrew")
    page.get_by_label("Cleanup timeout (seconds)").fill("20")
    shot(live, page, "confirm")
    page.get_by_role("button", name="Request cancellation").click()
    page.wait_for_url(re.compile(r"notice=cancellation-requested"))
    assert "Cancellation requested" in page.locator(".notice").inner_text()

    watcher.locator("#run-status").get_by_text("cancelled").wait_for()
    assert "customer withdrew" in watcher.locator("#cancellation").inner_text()
    assert watcher.locator("#cancellation [data-lifecycle]").inner_text().endswith("cancelled")
    assert live.status("guarded-1") == "cancelled"
    page.reload()
    assert page.locator("#run-status").inner_text().strip() == "⊘ cancelled"
    assert page.locator("#actions").count() == 0  # a closed run has no actions ...
    # ... but can be repaired, and queried
    assert page.locator("#repair a").all_inner_texts() == ["Reset…", "Query…"]
    page.get_by_role("link", name="Cancellation cascade").click()
    page.wait_for_url(re.compile(r"/ui/run/cascade\?"))
    assert page.locator("#inspection.ok").inner_text().startswith("✓ Verified")
    assert page.locator('li[data-stop-state="stopped"]').count() == 1
    shot(live, page, "cascade-verified")
    assert not page.js_errors and not watcher.js_errors


def test_the_cascade_of_a_three_level_tree_flags_an_unverified_stop(
        live: Live, open_page: Callable[..., Any], tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.fail(f"the durable script is not installed at {SCRIPT}: pip install -e '.[dev]'")
    log = tmp_path / "doomed.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_")}
    with log.open("wb") as err:
        proc = subprocess.Popen([str(SCRIPT), "--db", live.db, "worker", "tests.ui_app:DOOMED"],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        wait_for(lambda: "running in namespace" in log.read_text() or proc.poll() is not None,
                 "the worker process to start")
        assert proc.poll() is None, log.read_text()
        live.start("ui-root", "tree", "tree", task_queue=ui_app.DOOMED_QUEUE)
        wait_for(lambda: "ActivityStarted" in live.events("tree-leaf"),
                 "the leaf's activity to start in the worker process")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    page = open_page()
    # the runs list named the killed worker's runs "busy": it names the worker
    # the leaf's attempt runs on, presumed alive (its registration outlives it)
    # until its record is that of a worker last seen 1000 s ago
    page.goto(f"{live.url}/ui/runs")
    leaf_row = page.locator('tr[data-workflow-id="tree-leaf"]')
    held = leaf_row.locator("[data-holder-text]").inner_text()
    assert held.startswith("activity ui-hang runs on worker ") and "presumed alive" in held
    with ThreadPoolExecutor(1) as pool:  # off Playwright's loop
        pool.submit(anyio.run, _last_seen_long_ago, live.db, ui_app.DOOMED_QUEUE).result(30)
    page.goto(f"{live.url}/ui/runs")
    assert leaf_row.locator('[data-holder="gone"]').inner_text() == "holder gone"
    held = leaf_row.locator("[data-holder-text]").inner_text()
    assert "last seen 16m" in held and "presumed gone" in held, held
    shot(live, page, "runs-holder-gone", leaf_row)
    page.goto(f"{live.url}/ui/run?wf=tree")
    page.get_by_role("link", name="Request cancellation…").click()
    page.get_by_label("Reason").fill("worker died")
    page.get_by_role("button", name="Request cancellation").click()
    page.wait_for_url(re.compile(r"notice=cancellation-requested"))
    # recorded, but no worker is left to deliver it
    assert page.locator("#cancellation [data-lifecycle]").inner_text().endswith("requested")
    page.get_by_role("link", name="Terminate…").click()
    page.get_by_label("Reason").fill("its worker is gone")
    page.get_by_role("button", name="Terminate the run").click()
    page.wait_for_url(re.compile(r"notice=terminated"))
    assert live.status("tree") == "terminated"

    page.goto(f"{live.url}/ui/run/timeline?wf=tree-mid")  # the tree of runs, from the root
    tree = page.locator("#tree")
    assert [li.get_attribute("data-wf") for li in tree.locator("li").all()] == [
        "tree", "tree-mid", "tree-leaf"]
    assert tree.locator("li.current").get_attribute("data-wf") == "tree-mid"
    shot(live, page, "tree", page.locator("#chart"))
    page.goto(f"{live.url}/ui/run?wf=tree")
    page.get_by_role("link", name="Cancellation cascade").click()
    page.wait_for_url(re.compile(r"/ui/run/cascade\?"))
    inspection = page.locator("#inspection")
    assert inspection.get_attribute("class") == "inspection incomplete"
    assert inspection.get_attribute("role") == "alert"
    text = inspection.inner_text()
    assert text.startswith("✗ NOT VERIFIED: inspection incomplete. 1 finding could not be "
                           "verified")
    assert "tree-leaf: attempt 1 of ui-hang has no stop receipt" in text
    assert "Verified" not in text.replace("NOT VERIFIED", "").replace("verified;", "")
    # three levels, nested: root > mid > leaf
    root = page.locator('.tree > .node[data-workflow-id="tree"]')
    mid = root.locator('.kids .node[data-workflow-id="tree-mid"]')
    leaf = mid.locator('.kids .node[data-workflow-id="tree-leaf"]')
    assert leaf.count() == 1
    assert root.locator("[data-lifecycle]").first.inner_text().endswith("terminated")
    assert "policy parent_close:terminate" in root.locator(".edge").first.inner_text()
    stop = leaf.locator('li[data-stop-state="unverified"]')
    assert stop.count() == 1
    assert "✗ NOT VERIFIED" in stop.inner_text() and "no stop receipt" in stop.inner_text()
    # distinct colour AND words AND an icon: not the colour of success
    flag = stop.locator(".unverified")
    colour = flag.evaluate("el => getComputedStyle(el).backgroundColor")
    assert colour == "rgb(155, 0, 0)"
    assert flag.locator(".icon").inner_text() == "✗"
    assert page.locator(".verified").count() == 0
    shot(live, page, "cascade-unverified")
    assert not page.js_errors


async def _last_seen_long_ago(db: str, queue: str) -> None:
    """Rewrite the record of each worker of `queue` as a worker last seen 1000 s
    ago (for 30 s): a SIGKILLed worker's, long after, without waiting."""
    from durable.store.records import WorkerRegistration

    async with durable.connect(db) as client:
        for w in await client.list_workers():
            if w["task_queues"] == [queue]:
                await client.store.register_worker(WorkerRegistration(
                    w["worker_id"], client.namespace, queue, tuple(w["workflows"]),
                    tuple(w["activities"]), ()), 30.0, client.clock.now() - 1000)


def test_a_viewer_cannot_act(live: Live, runs: dict[str, str],
                             open_page: Callable[..., Any]) -> None:
    page = open_page(VIEWER)
    page.goto(f"{live.url}/ui/run?wf=deadlines-1")
    assert page.locator("[data-role]").inner_text() == "viewer"
    for name in ("Request cancellation…", "Cancel now…", "Terminate…"):
        assert page.get_by_role("link", name=name).count() == 0
    assert "Read only: a viewer cannot act on runs" in page.locator("#actions").inner_text()
    shot(live, page, "run-viewer")
    # the confirmation page is refused too, and so is a crafted POST with a valid CSRF token
    response = page.goto(f"{live.url}/ui/run/terminate?wf=deadlines-1")
    assert response is not None and response.status == 403
    page.goto(f"{live.url}/ui/run?wf=deadlines-1")
    run_id = live.describe("deadlines-1")["run"]["run_id"]
    status, text = page.evaluate(
        """async ([url]) => {
            const csrf = document.querySelector('input[name=csrf]').value;
            const body = new URLSearchParams({csrf, reason: 'x'});
            const r = await fetch(url, {method: 'POST', body, credentials: 'same-origin'});
            return [r.status, await r.text()];
        }""", [f"{live.url}/ui/run/terminate?wf=deadlines-1&run={run_id}"])
    assert status == 403
    assert "a viewer token may not do this; it needs the operator role" in text
    assert live.status("deadlines-1") == "running"
    # keyboard: the first Tab reaches the skip link, which moves focus to the content
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def test_a_post_without_the_csrf_token_is_refused(live: Live, runs: dict[str, str],
                                                  open_page: Callable[..., Any]) -> None:
    page = open_page()
    page.goto(f"{live.url}/ui/run/terminate?wf=deadlines-1")
    # the real form, with its CSRF field removed before it is submitted
    form = "form[action*='/ui/run/terminate']"
    assert page.locator(f"{form} input[name=csrf]").count() == 1
    page.evaluate(f"document.querySelector(\"{form} input[name=csrf]\").remove()")
    page.get_by_label("Reason").fill("no csrf")
    with page.expect_response(re.compile(r"/ui/run/terminate")) as answer:
        page.get_by_role("button", name="Terminate the run").click()
    assert answer.value.status == 403
    assert page.locator("h1").inner_text() == "Form refused (CSRF)"
    assert live.status("deadlines-1") == "running"


# WCAG 2 contrast of every element's own text against the background behind it,
# every form control's label, and the page's landmarks, computed in the browser.
A11Y_AUDIT = """() => {
  const parse = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const low = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    const style = getComputedStyle(el);
    if (!own || style.visibility === 'hidden' || style.display === 'none' || !el.offsetParent
        && style.position !== 'fixed') continue;
    if (el.closest('.sr-only')) continue;
    const a = lum(parse(style.color)), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const text = el.textContent.trim().slice(0, 30);
    if (ratio < 4.5) low.push(`${el.tagName}.${el.className} "${text}" ${ratio.toFixed(2)}`);
  }
  const unlabelled = [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
    .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
    .map(el => el.name);
  const landmarks = ['header', 'nav', 'main', 'footer'].filter(t => !document.querySelector(t));
  return {low, unlabelled, landmarks, lang: document.documentElement.lang,
          title: document.title, h1: document.querySelectorAll('h1').length};
}"""


def test_pages_pass_contrast_label_and_landmark_checks(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    page = open_page()
    paths = ["/ui/runs", "/ui/run?wf=deadlines-1", "/ui/run?wf=charge-1",
             "/ui/run/timeline?wf=deadlines-1", "/ui/run/activity?wf=deadlines-1&op=0:1",
             "/ui/run/cascade?wf=deadlines-1", "/ui/run/request-cancellation?wf=deadlines-1",
             "/ui/run/query?wf=deadlines-1", "/ui/run/update?wf=deadlines-1", "/ui/dashboard"]
    # the cascades the acting tests left (when they ran first: -k may leave them out)
    paths += [f"/ui/run/cascade?wf={wf}" for wf in ("guarded-1", "tree") if live.events(wf)]
    for path in paths:
        page.goto(f"{live.url}{path}")
        audit = page.evaluate(A11Y_AUDIT)
        assert audit["low"] == [], (path, audit["low"])
        assert audit["unlabelled"] == [], (path, audit["unlabelled"])
        assert audit["landmarks"] == [], (path, audit["landmarks"])
        assert audit["lang"] == "en" and audit["title"].endswith("· durable")
        assert audit["h1"] == 1, path
    login = open_page(None)
    login.goto(f"{live.url}/ui/login")
    audit = login.evaluate(A11Y_AUDIT)
    assert audit["low"] == [] and audit["unlabelled"] == []
    # the audit does catch what it looks for
    login.evaluate("""() => {
        const p = document.createElement('p');
        p.textContent = 'faint'; p.style.color = '#aaaaaa';
        document.querySelector('main').append(p, document.createElement('input'));
    }""")
    audit = login.evaluate(A11Y_AUDIT)
    assert len(audit["low"]) == 1 and audit["low"][0].startswith('P. "faint" 2.')
    assert audit["unlabelled"] == [""]


def test_a_narrow_viewport_does_not_overflow(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    page = open_page(viewport={"width": 360, "height": 720})
    wide = []
    for path in ("/ui/dashboard", "/ui/runs", "/ui/run?wf=deadlines-1",
                 "/ui/run/timeline?wf=deadlines-1", "/ui/run/query?wf=deadlines-1"):
        page.goto(f"{live.url}{path}")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 360:
            wide.append((path, width))
    shot(live, page, "narrow")  # the last page, as a phone shows it
    assert wide == []


# Words of a table's cells that the browser split across lines at no break
# opportunity (a letter-by-letter column), e.g. "Configured" drawn as "Co/nfi/gu/re/d".
BROKEN_WORDS = r"""() => { const out = [];
  for (const cell of document.querySelectorAll('main table th, main table td')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const words = /[A-Za-z0-9]{2,}/g; let m;
      while ((m = words.exec(node.textContent))) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                                                         .map(r => Math.round(r.top)));
        if (lines.size > 1) out.push(m[0]);
      }
    }
  }
  return out; }"""


def test_a_narrow_viewport_scrolls_tables_rather_than_crushing_their_columns(
        live: Live, runs: dict[str, str], open_page: Callable[..., Any]) -> None:
    """At 360 px a table is as wide as its longest words and scrolls inside itself
    (docs/ui.md, Accessibility): main's `overflow-wrap: anywhere` had every column
    shrink to a letter or two, headers and times drawn one syllable a line."""
    page = open_page(viewport={"width": 360, "height": 720})
    broken = {}
    for path in ("/ui/runs", "/ui/run?wf=deadlines-1", "/ui/workers", "/ui/schedules",
                 "/ui/queues"):
        page.goto(f"{live.url}{path}")
        words = page.evaluate(BROKEN_WORDS)
        if words:
            broken[path] = words[:5]
        assert page.evaluate("document.documentElement.scrollWidth") <= 360, path
    assert broken == {}
    page.goto(f"{live.url}/ui/runs")
    header = page.locator("table.runs")
    assert header.evaluate("t => t.scrollWidth > t.clientWidth")  # it scrolls, whole


# ---------------------------------------------------------------- safe at the edges (issue 20)


def test_a_malformed_cookie_odd_ids_and_unencodable_text_in_the_browser(
        live: Live, browser: Any, open_page: Callable[..., Any]) -> None:
    """A non-ASCII session cookie is no session (the login page, then signing
    in works); runs whose ids hold '/', '..' or '#' open and are acted on as
    themselves; a result holding a lone surrogate shows escaped."""
    context = browser.new_context()
    context.set_default_timeout(WAIT * 1000)
    context.add_cookies([{"name": "durable_ui", "value": "v1.\u00e9t\u00e9.x",
                          "url": live.url}])
    page = context.new_page()
    response = page.goto(f"{live.url}/ui/runs")
    assert response is not None and response.status == 200 and "/ui/login" in page.url
    page.get_by_label("Control-plane token").fill(OPERATOR)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/ui/runs$"))
    context.close()

    victim = live.start("edge-nobody", "edge-victim")  # no worker: it stays open
    ids = ["edge-victim/runs/" + victim, "edge/..", "edge #1"]
    # ids the reference engine refuses: started with durable's id rules
    runs = {wid: live.start("edge-nobody", wid, rules="durable") for wid in ids}
    started = live.api.post("/api/workflows", content=json.dumps({
        "workflow_type": "ui-greet", "workflow_id": "edge-surrogate", "input": ["\udcff"],
        "require_registered": False}), headers={"Content-Type": "application/json"})
    assert started.status_code == 201, started.text
    greeted = started.json()["run_id"]
    page = open_page()
    for wid, run_id in runs.items():
        page.goto(f"{live.url}/ui/runs")
        page.get_by_role("link", name=wid, exact=True).first.click()
        page.wait_for_url(re.compile(r"/ui/run\?"))
        assert run_id in page.locator("body").inner_text(), wid
    page.get_by_role("link", name="Terminate…").click()
    page.wait_for_url(re.compile(r"/ui/run/terminate\?"))
    page.get_by_role("button", name="Terminate").click()
    page.wait_for_url(re.compile(r"notice="))
    terminated = live.api.get("/api/workflows/edge%20%231").json()
    assert terminated["status"] == "terminated"
    assert live.status("edge-victim") == "pending"
    wait_for(lambda: live.status("edge-surrogate") == "completed", "the greeting")
    page.goto(f"{live.url}/ui/run?wf=edge-surrogate&run={greeted}")
    assert "hello, \\udcff" in page.locator("body").inner_text()
    assert not page.js_errors

