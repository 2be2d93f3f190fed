"""What a workflow list row shows is what its filters find, on every driver.

One run in each of our statuses (`durable.store.records.LISTED_STATUSES`:
pending, running, completed, failed, cancelled, timed out, terminated,
continued, and the two of an open run marked for review, needs_review and
unknown) is written by the store's own writes, the executor's and the control
plane's (a claim, the owner's close, a deadline enforced, a cancel, a
terminate), at explicit instants. Then every view reads them: the embedded
``Client.list`` and ``describe()``, ``GET /api/workflows`` (the reference's
``status``, ``status_bucket``, ``is_terminal``, and our ``durable_status``)
and ``GET /api/workflows/{id}/runs/{run}``; and every filter finds them: the
reference's ``ExecutionStatus`` for each of its words and its ``status``
buckets (over HTTP and through ``Client.list(query=...)``, embedded and
remote), and our ``status``. For each status the word shown and the word
filtered are the one mapping, `durable._statuses`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

import durable
from durable import _statuses
from durable.clock import VirtualClock
from durable.failure import Failure
from durable.http import create_app
from durable.store.records import LISTED_STATUSES, RunStatus, StartRequest
from durable.store.writes import CloseRun, RunWrites

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0
NS = "default"
TYPE = "wl_flow"
TOKEN = "wl-operator"
HEADERS = {"X-Durable-Workflow-Control-Plane-Version": "2", "Authorization": f"Bearer {TOKEN}"}

#: ours -> (the reference's word, its bucket, terminal): what every view must say
EXPECTED: dict[str, tuple[str, str, bool]] = {
    "pending": ("pending", "running", False),
    "running": ("running", "running", False),
    "needs_review": ("running", "running", False),
    "unknown": ("running", "running", False),
    "completed": ("completed", "completed", True),
    "continued": ("completed", "completed", True),
    "failed": ("failed", "failed", True),
    "timed_out": ("failed", "failed", True),
    "cancelled": ("cancelled", "failed", True),
    "terminated": ("terminated", "failed", True),
}


def _request(workflow_id: str, **fields: Any) -> StartRequest:
    values: dict[str, Any] = {
        "namespace": NS, "workflow_id": workflow_id, "workflow_type": TYPE,
        "task_queue": workflow_id, "input": "[]", "id_reuse": "reject_duplicate",
        "execution_timeout": None, "run_timeout": None}
    values.update(fields)
    return StartRequest(**values)


async def _every_status(client: durable.Client) -> dict[str, str]:
    """One run in each of our statuses (a continued run's next one is pending
    too); {run_id: the status written}."""
    store = client.store
    now = T0
    written: dict[str, str] = {}

    async def start(workflow_id: str, **fields: Any) -> str:
        nonlocal now
        now += 1  # newest first: one instant each
        return (await store.start_workflow(_request(workflow_id, **fields), now)).run_id

    async def claimed(workflow_id: str) -> Any:
        await start(workflow_id)
        [run] = await store.claim_runs(NS, workflow_id, "w1", (TYPE,), 1, 3600.0, now)
        return run.run

    async def close(workflow_id: str, write: CloseRun) -> str:
        run = await claimed(workflow_id)
        [result] = await store.commit([RunWrites(run.run_id, run.epoch, [write])], now)
        assert result.committed, result
        return str(run.run_id)

    written[await start("st-pending")] = "pending"
    written[(await claimed("st-running")).run_id] = "running"
    written[await close("st-completed", CloseRun(RunStatus.COMPLETED, result='"ok"'))] = \
        "completed"
    written[await close("st-failed", CloseRun(RunStatus.FAILED, failure=Failure(
        "application", "it broke", "builtins.ValueError")))] = "failed"
    written[await close("st-continued", CloseRun(RunStatus.CONTINUED, continue_input="[]"))] \
        = "continued"
    next_run = await store.get_run(NS, "st-continued")
    assert next_run is not None
    written[next_run.run_id] = "pending"
    # the executor's two marks for review: a replay mismatch, units of unknown outcome
    written[await close("st-review", CloseRun(RunStatus.FAILED, needs_review=True, failure=Failure(
        "non_determinism", "the code asked for another op", "durable.NonDeterminism")))] = \
        "needs_review"
    written[await close("st-unknown", CloseRun(RunStatus.FAILED, needs_review=True,
                                               failure=Failure.units_unknown(
                                                   ["u2"], "wl_step", "st-unknown")))] = "unknown"
    for status in ("cancelled", "terminated"):
        run_id = await start(f"st-{status}")
        await store.close_run_externally(NS, f"st-{status}", None, status, "asked", now)
        written[run_id] = status
    late = await start("st-timed-out", execution_timeout=5.0)
    await store.enforce_expired(NS, now + 10)
    written[late] = "timed_out"
    return written


@pytest.fixture
async def walked(db_url: str) -> AsyncIterator[tuple[durable.Client, httpx.AsyncClient,
                                                     dict[str, str]]]:
    async with durable.connect(db_url, clock=VirtualClock(T0 + 100)) as client:
        written = await _every_status(client)
        app = create_app(client, {TOKEN: "operator"}, environ={})
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as http:
            yield client, http, written


async def _wire_list(http: httpx.AsyncClient, **params: Any) -> dict[str, dict[str, Any]]:
    response = await http.get("/api/workflows", params={"page_size": 200, **params},
                              headers=HEADERS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["next_page_token"] is None
    return {row["run_id"]: row for row in body["workflows"]}


async def test_every_status_is_filtered_by_the_word_its_row_shows(
        walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]]) -> None:
    client, http, written = walked
    assert set(written.values()) == set(LISTED_STATUSES)  # every one of ours is walked

    # shown: the embedded list and describe() say ours; the wire's rows and
    # descriptions say the reference's word, bucket and terminality for it
    rows = {r["run_id"]: r for r in await client.list(limit=1000)}
    assert {run_id: r["status"] for run_id, r in rows.items()} == written
    wire = await _wire_list(http)
    assert set(wire) == set(written)
    for run_id, ours in written.items():
        word, bucket, terminal = EXPECTED[ours]
        row = wire[run_id]
        assert (row["status"], row["status_bucket"], row["is_terminal"],
                row["durable_status"]) == (word, bucket, terminal, ours), ours
        info = await client.get_handle(row["workflow_id"], run_id=run_id).describe()
        assert info["status"] == ours
        described = await http.get(f"/api/workflows/{row['workflow_id']}/runs/{run_id}",
                                   headers=HEADERS)
        assert described.status_code == 200, described.text
        body = described.json()
        assert (body["status"], body["status_bucket"], body["is_terminal"],
                body["durable_status"]) == (word, bucket, terminal, ours), ours
        assert body["actions"]["can_cancel"] is not terminal, ours
        if body["is_current_run"]:
            current = (await http.get(f"/api/workflows/{row['workflow_id']}",
                                      headers=HEADERS)).json()
            assert (current["status"], current["durable_status"]) == (word, ours), ours

    # filtered: each word finds exactly the rows that show it, wherever asked
    for word in _statuses.REFERENCE_STATUSES:
        shown = {run_id for run_id, row in wire.items() if row["status"] == word}
        assert shown == {run_id for run_id, ours in written.items()
                         if EXPECTED[ours][0] == word}, word
        for field in ("ExecutionStatus", "Status"):
            query = f"{field} = '{word}'"
            assert set(await _wire_list(http, query=query)) == shown, query
            embedded = await client.list(limit=1000, query=query)
            assert {r["run_id"] for r in embedded} == shown, query
        typed = await _wire_list(http, query=f'WorkflowType = "{TYPE}" AND ExecutionStatus = '
                                              f'"{word}"')
        assert set(typed) == shown, word
    for bucket in _statuses.BUCKETS:
        in_bucket = {run_id for run_id, row in wire.items() if row["status_bucket"] == bucket}
        assert set(await _wire_list(http, status=bucket)) == in_bucket, bucket
        for word in _statuses.REFERENCE_STATUSES:  # both filters hold
            both = await _wire_list(http, status=bucket, query=f"ExecutionStatus = '{word}'")
            assert set(both) == {r for r in in_bucket if wire[r]["status"] == word}
    for ours in LISTED_STATUSES:  # our own words, embedded and over the wire
        mine = {run_id for run_id, status in written.items() if status == ours}
        assert {r["run_id"] for r in await client.list(limit=1000, status=ours)} == mine, ours
        assert set(await _wire_list(http, durable_status=ours)) == mine, ours
        word = EXPECTED[ours][0]
        other = "completed" if word != "completed" else "running"
        assert set(await _wire_list(http, durable_status=ours,
                                    query=f"ExecutionStatus = '{word}'")) == mine, ours
        assert await _wire_list(http, durable_status=ours,
                                query=f"ExecutionStatus = '{other}'") == {}, ours
        assert {r["run_id"] for r in await client.list(
            limit=1000, status=ours, query=f"ExecutionStatus = '{word}'")} == mine, ours
        assert await client.list(limit=1000, status=ours,
                                 query=f"ExecutionStatus = '{other}'") == [], ours


async def test_the_remote_list_reads_a_query_as_the_embedded_one(
        walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]]) -> None:
    from conftest import REMOTE_TOKEN, remote_plane

    client, _, written = walked
    queries = ["ExecutionStatus = 'running'", "ExecutionStatus = 'failed'",
               "WorkflowId = 'st-review' and ExecutionStatus = 'running'",
               "TaskQueue = 'st-continued'", "Status = 'waiting'", "st-", "review"]
    async with remote_plane(client) as url, durable.connect(url, token=REMOTE_TOKEN) as remote:
        for query in queries:
            embedded = [(r["run_id"], r["status"]) for r in await client.list(query=query)]
            assert embedded == [(r["run_id"], r["status"])
                                for r in await remote.list(query=query)], query
            for status in ("needs_review", "running", "failed"):
                assert [r["run_id"] for r in await client.list(query=query, status=status)] \
                    == [r["run_id"] for r in await remote.list(query=query, status=status)]
        # pages: the same rows in the same order, a page at a time
        pages: list[list[str]] = []
        cursor = None
        while True:
            page = await remote.list_page(limit=2, cursor=cursor,
                                          query="ExecutionStatus = 'running'")
            pages.append([r["run_id"] for r in page.items])
            cursor = page.next_cursor
            if cursor is None:
                break
        assert [r for p in pages for r in p] == [
            r["run_id"] for r in await client.list(query="ExecutionStatus = 'running'")]
        assert sorted(r for p in pages for r in p) == sorted(
            run_id for run_id, ours in written.items() if EXPECTED[ours][0] == "running")
        for bad, words in (
                ("ExecutionStatus = 'Running'", "requires a quoted pending, running, waiting, "
                                                "completed, failed, cancelled or terminated "
                                                "literal"),
                ("BusinessKey = 'x'", "[BusinessKey] is not searchable. Use WorkflowId, "
                                      "WorkflowType, TaskQueue or ExecutionStatus"),
                ("WorkflowId != 'x'", "supports only equality predicates joined by AND"),
                ("ExecutionStatus = running", "must be a quoted string, number, or boolean"),
                ("WorkflowId = 'x", "unterminated string")):
            for reader in (client, remote):
                with pytest.raises(durable.InvalidVisibilityQuery) as refused:
                    await reader.list(query=bad)
                assert isinstance(refused.value, ValueError)
                assert words in str(refused.value), (bad, str(refused.value))
                assert refused.value.reason.endswith(("_workflow_visibility_query",
                                                      "_workflow_visibility_field",
                                                      "_workflow_visibility_predicate"))
        for reader in (client, remote):  # remote, it would be sent as the id text "3"
            with pytest.raises(durable.ConfigurationError, match="query must be a string"):
                await reader.list(query=3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- every reply


@pytest.fixture
async def remote(walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]]
                 ) -> AsyncIterator[durable.Client]:
    """durable's own remote client of the walked storage's control plane."""
    client, _, _ = walked
    app = create_app(client, {TOKEN: "operator"}, environ={})
    async with durable.connect("http://plane", token=TOKEN,
                               transport=httpx.ASGITransport(app=app)) as connected:
        yield connected


async def test_every_reply_says_the_status_describe_says(
        walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]],
        remote: durable.Client) -> None:
    """The result route, a run's state (embedded and remote) and describe()
    over the remote client say ours as describe() does, and agree on open: a
    run in review is needs_review / unknown and open everywhere (the result
    route said ``durable_status: running`` and the remote client's state
    running; a remote result() would take needs_review for a close)."""
    client, http, written = walked
    rows = {r["run_id"]: r for r in await client.list(limit=1000)}
    for run_id, ours in written.items():
        word, bucket, terminal = EXPECTED[ours]
        workflow_id = rows[run_id]["workflow_id"]
        paths = [f"/api/workflows/{workflow_id}/runs/{run_id}/result"]
        current = await client.control.run_state(workflow_id, None)
        if current is not None and current.run_id == run_id:
            paths.append(f"/api/workflows/{workflow_id}/result")
        for path in paths:
            answer = await http.get(path, headers=HEADERS)
            assert answer.status_code == (200 if terminal else 202), (ours, answer.text)
            body = answer.json()
            assert (body["status"], body["status_bucket"], body["is_terminal"],
                    body["durable_status"]) == (word, bucket, terminal, ours), (ours, path)
    for run_id, ours in written.items():
        terminal = EXPECTED[ours][2]
        workflow_id = rows[run_id]["workflow_id"]
        for plane in (client, remote):
            state = await plane.control.run_state(workflow_id, run_id)
            assert state is not None
            assert (state.status, state.is_open, state.in_review) == (
                ours, not terminal, ours in ("needs_review", "unknown")), (ours, plane)
            info = await plane.get_handle(workflow_id, run_id=run_id).describe()
            assert info["status"] == ours, (ours, plane)


class _Seen(logging.Handler):
    """Keeps `durable.client`'s lines; `told` is set at the first."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.told = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.told.set()


@pytest.mark.parametrize("ours", ["needs_review", "unknown"])
async def test_result_of_a_run_in_review_waits_and_says_why(
        walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]],
        remote: durable.Client, ours: str) -> None:
    """result() of a run in review waits (it is open: a retry after review lets
    it go on), embedded and remote alike, and says why in a warning naming the
    status and the way out; it waited in silence embedded, and the remote
    client, reading needs_review as a closed status, raised. A handle bound to
    the run says it at once too: its first read is the long poll, which used
    to answer only after its 30 s (`until_review`)."""
    client, _, written = walked
    workflow_id = "st-review" if ours == "needs_review" else "st-unknown"
    [run_id] = [run for run, status in written.items() if status == ours]
    logger = logging.getLogger("durable.client")
    for plane, bound in ((client, None), (remote, None), (client, run_id), (remote, run_id)):
        seen = _Seen()
        logger.addHandler(seen)
        try:
            with anyio.fail_after(20):  # a guard under the poll's 30 s: the line comes at once
                async with anyio.create_task_group() as tg:
                    handle = plane.get_handle(workflow_id, run_id=bound)
                    tg.start_soon(handle.result)  # a raise fails this
                    await seen.told.wait()
                    tg.cancel_scope.cancel()
        finally:
            logger.removeHandler(seen)
        [line] = seen.lines
        assert "result_waits_for_review" in line and f"status='{ours}'" in line, line
        assert f"durable retry-after-review {workflow_id}" in line, line
        assert ("--units rerun|confirm" in line) is (ours == "unknown"), line


async def test_a_start_or_signal_with_start_of_a_run_in_review_says_so(
        walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]]) -> None:
    """The start reply that returns (or signals) the open run says its status
    as describe() does: needs_review / unknown for a run in review (it said the
    stored running)."""
    _, http, written = walked
    for workflow_id, ours in (("st-review", "needs_review"), ("st-unknown", "unknown"),
                              ("st-running", "running"), ("st-pending", "pending")):
        body = {"workflow_type": TYPE, "workflow_id": workflow_id, "task_queue": workflow_id,
                "require_registered": False}
        for path, extra, outcome in (
                ("/api/workflows", {"duplicate_policy": "use-existing"},
                 "returned_existing_active"),
                ("/api/signal-with-start", {"signal": "poke"}, "signalled_existing")):
            answer = await http.post(path, headers=HEADERS, json={**body, **extra})
            assert answer.status_code == 200, answer.text
            reply = answer.json()
            assert (reply["outcome"], reply["status"], reply["durable_status"]) == (
                outcome, EXPECTED[ours][0], ours), (workflow_id, path)
            assert written[reply["run_id"]] == ours
    fresh = await http.post("/api/workflows", headers=HEADERS, json={
        "workflow_type": TYPE, "workflow_id": "st-fresh", "require_registered": False})
    assert fresh.status_code == 201, fresh.text
    assert (fresh.json()["status"], fresh.json()["durable_status"]) == ("pending", "pending")


async def test_cancel_and_terminate_answer_the_status_describe_says(
        walked: tuple[durable.Client, httpx.AsyncClient, dict[str, str]],
        remote: durable.Client) -> None:
    """Cancel's and terminate's answer says, through the one mapping, the
    status of the run after the call: an open run (in review too) is closed
    by it; a closed run is left as it was (409 ``run_not_active``, the body's
    status in its own words: a timed-out run ``failed``/``timed_out``). The
    remote client closes a run in review and its result() then raises, as
    embedded."""
    client, http, written = walked
    rows = {r["run_id"]: r for r in await client.list(limit=1000)}
    for index, (run_id, ours) in enumerate(written.items()):
        if ours == "unknown":
            continue  # closed by the remote client below
        action, closed = ("cancel", "cancelled") if index % 2 else ("terminate", "terminated")
        workflow_id = rows[run_id]["workflow_id"]
        answer = await http.post(f"/api/workflows/{workflow_id}/runs/{run_id}/{action}",
                                 headers=HEADERS, json={"reason": "walked"})
        reply = answer.json()
        if EXPECTED[ours][2]:  # terminal: nothing done
            assert answer.status_code == 409, answer.text
            assert reply["reason"] == "run_not_active", reply
            assert f"nothing was {closed}" in reply["message"], reply
            expected = ("rejected_not_active", *EXPECTED[ours][:3], ours)
        else:
            assert answer.status_code == 200, answer.text
            expected = (closed, closed, "failed", True, closed)
        assert (reply["outcome"], reply["status"], reply["status_bucket"],
                reply["is_terminal"], reply["durable_status"]) == expected, (ours, action)
    handle = remote.get_handle("st-unknown")
    await handle.terminate("an operator decided")
    assert (await handle.describe())["status"] == "terminated"
    with pytest.raises(durable.WorkflowTerminated):
        await handle.result()
