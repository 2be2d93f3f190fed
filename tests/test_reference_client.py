"""The reference engine's own Python client against `durable serve`.

`durable-workflow` (the reference engine's client, pinned in the dev extra)
is an httpx client of the v2 control-plane contract. Here it drives a live
control plane (a real server on a loopback port) whose runs a `durable`
worker executes: every operation it has for workflows, the result of runs
that completed, failed, timed out, were cancelled and were terminated, and
its error mapping. It runs on asyncio only, so each scenario runs on a
thread of its own (`asyncio.run`) while the server and the worker run on
the test's loop: asyncio and trio on SQLite, asyncio on PostgreSQL. Every
wait is bounded (`result(timeout=...)`, `anyio.fail_after`): none can hang.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

import durable
from durable import activity, workflow
from durable.http import create_app
from durable.http.serve import serve_app

dw = pytest.importorskip("durable_workflow")
dw_errors = pytest.importorskip("durable_workflow.errors")

pytestmark = pytest.mark.anyio

OPERATOR = "ref-operator-token"
VIEWER = "ref-viewer-token"
ADMIN = "ref-admin-token"
# each result() and scenario is bounded
RESULT_TIMEOUT = 20.0
SCENARIO_TIMEOUT = 90.0


@workflow.defn(name="ref_greet")
async def ref_greet(name: str) -> str:
    return f"hello {name}"


@workflow.defn(name="ref_fail")
async def ref_fail(message: str) -> None:
    raise ValueError(message)


@workflow.defn(name="ref_nap")
async def ref_nap(seconds: float) -> str:
    await workflow.sleep(seconds)
    return "rested"


@activity.defn(name="ref_cleanup")
async def ref_cleanup(order: str) -> str:
    return f"cleaned {order}"


@workflow.defn(name="ref_order")
async def ref_order(order: str) -> str:
    try:
        await workflow.sleep(3600)
        return "shipped"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(ref_cleanup, order)


@workflow.defn(name="ref_gate")
class RefGate:
    """Waits for an `open` signal; answers `state`; takes a `set` update."""

    def __init__(self) -> None:
        self.opened_by: str | None = None
        self.value = 0

    @workflow.run
    async def run(self, start: int) -> dict[str, Any]:
        self.value = start
        await workflow.wait_condition(lambda: self.opened_by is not None)
        return {"opened_by": self.opened_by, "value": self.value}

    @workflow.signal
    def open(self, who: str) -> None:
        self.opened_by = who

    @workflow.query
    def state(self) -> dict[str, Any]:
        return {"opened_by": self.opened_by, "value": self.value}

    @workflow.update
    async def set(self, value: int) -> int:
        self.value = value
        return value

    @set.validator
    def _not_negative(self, value: int) -> None:
        if value < 0:
            raise ValueError("value must be at least 0")


@workflow.defn(name="ref_hold")
class RefHold:
    """Its `hold` update waits until a `release` signal: accepted long before
    it completes, so `wait_for: accepted` can only answer at acceptance."""

    def __init__(self) -> None:
        self.released = False
        self.done = False

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.done)
        return "done"

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.update
    async def hold(self, value: int) -> int:
        await workflow.wait_condition(lambda: self.released)
        return value * 2

    @hold.validator
    def _positive(self, value: int) -> None:
        if value <= 0:
            raise ValueError("value must be positive")


WORKFLOWS = [ref_greet, ref_fail, ref_nap, ref_order, RefGate, RefHold]


@dataclass
class Live:
    url: str


SQLITE_BOTH_LOOPS_PG_ASYNCIO = [
    pytest.param(("sqlite", "asyncio"), id="sqlite-asyncio"),
    pytest.param(("sqlite", "trio"), id="sqlite-trio"),
    pytest.param(("postgres", "asyncio"), id="postgres-asyncio", marks=pytest.mark.postgres),
]


@pytest.fixture(params=SQLITE_BOTH_LOOPS_PG_ASYNCIO)
def setup(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def driver_name(setup: tuple[str, str]) -> str:
    return setup[0]


@pytest.fixture
def anyio_backend(setup: tuple[str, str]) -> str:
    return setup[1]


@pytest.fixture
async def live(storage_client: durable.Client, make_worker: Any) -> AsyncIterator[Live]:
    """`durable serve`'s app on a free loopback port, and a worker for WORKFLOWS."""
    app = create_app(storage_client, {OPERATOR: "operator", VIEWER: "viewer", ADMIN: "admin"},
                     environ={}, max_wait=2.0)
    async with make_worker(workflows=WORKFLOWS, activities=[ref_cleanup]):
        async with anyio.create_task_group() as tg:
            port = await tg.start(functools.partial(serve_app, app, port=0))
            yield Live(f"http://127.0.0.1:{port}")
            tg.cancel_scope.cancel()


async def run_reference(scenario: Callable[[str], Awaitable[None]], live: Live) -> None:
    """Run an asyncio scenario of the reference client on its own thread."""

    def in_thread() -> None:
        asyncio.run(asyncio.wait_for(scenario(live.url), SCENARIO_TIMEOUT))

    await anyio.to_thread.run_sync(in_thread)


def client(url: str, token: str = OPERATOR, **kwargs: Any) -> Any:
    return dw.Client(url, token=token, timeout=15.0, **kwargs)


# ---------------------------------------------------------------- outcomes


async def test_result_of_completed_failed_timed_out_cancelled_and_terminated_runs(
    live: Live,
) -> None:
    async def scenario(url: str) -> None:
        async with client(url) as c:
            done = await c.start_workflow(workflow_type="ref_greet", task_queue="default",
                                          workflow_id="r-done", input=["ann"])
            assert done.workflow_type == "ref_greet" and done.run_id
            assert await done.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == "hello ann"

            failed = await c.start_workflow(workflow_type="ref_fail", task_queue="default",
                                            workflow_id="r-failed", input=["it broke"])
            with pytest.raises(dw_errors.WorkflowFailed) as caught:
                await failed.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)
            assert "it broke" in str(caught.value)
            assert caught.value.exception_class == "builtins.ValueError"

            slow = await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                          workflow_id="r-timeout", input=[3600],
                                          execution_timeout_seconds=1, run_timeout_seconds=1)
            with pytest.raises(dw_errors.WorkflowTimedOut):
                await slow.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)
            described = await c.describe_workflow_run("r-timeout", slow.run_id)
            assert described.status == "failed" and described.closed_reason == "timed_out"
            history = await c.get_history("r-timeout", slow.run_id)
            assert history["events"][-1]["event_type"] == "WorkflowTimedOut"

            cancelled = await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                               workflow_id="r-cancel", input=[3600])
            await c.cancel_workflow("r-cancel", reason="not needed")
            with pytest.raises(dw_errors.WorkflowCancelled):
                await cancelled.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)

            terminated = await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                                workflow_id="r-term", input=[3600])
            await c.terminate_workflow("r-term", reason="operator said so")
            with pytest.raises(dw_errors.WorkflowTerminated):
                await terminated.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)
            assert (await c.describe_workflow("r-term")).status == "terminated"
            await c.terminate_workflow("r-term")  # a retry of what closed it: accepted

            # a run that closed otherwise: refused as the reference refuses it (409
            # run_not_active), so the caller does not believe it stopped work that
            # had finished; the run is left as it was
            for close in (c.cancel_workflow, c.terminate_workflow):
                with pytest.raises(dw_errors.ServerError) as refused:
                    await close("r-done", reason="too late")
                assert refused.value.status == 409, refused.value
                assert refused.value.reason() == "run_not_active"
                assert isinstance(refused.value.body, dict)
                assert refused.value.body["status"] == "completed"
            assert (await c.describe_workflow("r-done")).status == "completed"

    await run_reference(scenario, live)


# ---------------------------------------------------------------- start, describe, list, history


async def test_start_policies_describe_runs_list_and_history(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with client(url) as c:
            info = await c.get_cluster_info()
            assert info["worker_protocol"]["server_capabilities"]["query_tasks"] is True
            assert (await c.health())["status"] == "serving"

            first = await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                           workflow_id="s-1", input=[3600],
                                           memo={"team": "ops"})
            with pytest.raises(dw_errors.WorkflowAlreadyStarted):
                await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                       workflow_id="s-1", input=[3600])
            same = await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                          workflow_id="s-1", input=[3600],
                                          duplicate_policy="use-existing")
            assert same.run_id == first.run_id

            described = await c.describe_workflow("s-1")
            assert described.run_id == first.run_id and described.status in (
                "pending", "running", "waiting")
            assert described.input == [3600] and described.payload_codec == "avro"
            assert described.memo == {"team": "ops"} and described.task_queue == "default"
            run = await c.describe_workflow_run("s-1", first.run_id)
            assert run.is_current_run is True and run.run_number == 1
            assert run.status_bucket == "running"
            runs = await c.list_workflow_runs("s-1")
            assert runs.run_count == 1 and [r.run_id for r in runs.runs] == [first.run_id]

            await c.terminate_workflow("s-1")
            with pytest.raises(dw_errors.WorkflowAlreadyStarted):  # closed: both policies 409
                await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                       workflow_id="s-1", input=[1],
                                       duplicate_policy="use-existing")

            for i in range(5):
                handle = await c.start_workflow(workflow_type="ref_greet",
                                                task_queue="default",
                                                workflow_id=f"list-{i}", input=[str(i)])
                await handle.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)
            seen: list[str] = []
            token = None
            for _ in range(10):
                page = await c.list_workflows(workflow_type="ref_greet", page_size=2,
                                              next_page_token=token)
                assert len(page.executions) <= 2
                seen += [e.workflow_id for e in page.executions]
                token = page.next_page_token
                if token is None:
                    break
            assert sorted(seen) == [f"list-{i}" for i in range(5)]
            completed = await c.list_workflows(status="completed", query="list-3")
            assert [e.workflow_id for e in completed.executions] == ["list-3"]
            assert (await c.list_workflows(status="failed", query="list-")).executions == []
            running = await c.list_workflows(status="failed", query="s-1")
            assert [e.status for e in running.executions] == ["terminated"]
            # a visibility query (`durable._visibility_query.WORKFLOWS`) filters in storage
            typed = await c.list_workflows(
                query="WorkflowType = 'ref_greet' AND ExecutionStatus = 'completed'")
            assert sorted(e.workflow_id for e in typed.executions) == sorted(seen)
            one = await c.list_workflows(query='WorkflowId = "list-2" and TaskQueue = \'default\'')
            assert [e.workflow_id for e in one.executions] == ["list-2"]
            ended = await c.list_workflows(workflow_type="ref_nap", query="Status = 'terminated'")
            assert [e.workflow_id for e in ended.executions] == ["s-1"]
            for disagreeing in ({"status": "running", "query": "ExecutionStatus = 'completed'"},
                                {"query": "WorkflowType = 'ref_nap' AND WorkflowId = 'list-1'"},
                                {"query": "Status = 'waiting'"}):
                assert (await c.list_workflows(**disagreeing)).executions == []
            for bad, words in (("BusinessKey = 'x'", "[BusinessKey] is not searchable. Use "
                                "WorkflowId, WorkflowType, TaskQueue or ExecutionStatus"),
                               ("WorkflowId != 'x'", "only equality predicates"),
                               ("ExecutionStatus = 'Running'", "quoted pending, running,"),
                               ("WorkflowId = 'x", "unterminated string")):
                with pytest.raises(dw_errors.InvalidArgument) as refused:  # 422, not []
                    await c.list_workflows(query=bad)
                assert list(refused.value.errors) == ["query"], bad
                assert words in refused.value.errors["query"][0], bad

            done = c.get_workflow_handle("list-0")
            pages: list[str] = []
            token = None
            run_id = (await c.describe_workflow("list-0")).run_id
            while True:
                page = await c.get_history("list-0", run_id, page_size=1,
                                           next_page_token=token)
                pages += [e["event_type"] for e in page["events"]]
                token = page["next_page_token"]
                if token is None:
                    break
            assert pages[0] == "WorkflowStarted" and pages[-1] == "WorkflowCompleted"
            assert done.workflow_id == "list-0"

    await run_reference(scenario, live)


async def test_history_long_poll_answers_when_an_event_arrives(live: Live) -> None:
    """wait_new_event holds the request (up to the server's max_wait, 2 s here)
    until an event follows the token: the signal sent meanwhile."""
    import base64

    import httpx

    async def scenario(url: str) -> None:
        async with client(url) as c:
            handle = await c.start_workflow(workflow_type="ref_gate", task_queue="default",
                                            workflow_id="poll-1", input=[1])
            headers = {"Authorization": f"Bearer {OPERATOR}",
                       "X-Durable-Workflow-Control-Plane-Version": "2"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=15) as http:
                path = f"/api/workflows/poll-1/runs/{handle.run_id}/history"
                page = (await http.get(path)).json()
                last = page["events"][-1]["sequence"]
                token = base64.b64encode(str(last).encode()).decode()
                poll = asyncio.create_task(http.get(path, params={
                    "next_page_token": token, "wait_new_event": "true"}))
                await asyncio.sleep(0.1)
                await c.signal_workflow("poll-1", "open", args=["bo"])
                answer = (await poll).json()
                assert answer["events"], answer
                assert all(e["sequence"] > last for e in answer["events"])
                assert answer["next_page_token"] is None
            assert (await handle.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)) == {
                "opened_by": "bo", "value": 1}

    await run_reference(scenario, live)


# ---------------------------------------------------------------- messages and cancellation


async def test_signal_query_update_and_request_cancellation(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with client(url) as c:
            gate = await c.start_workflow(workflow_type="ref_gate", task_queue="default",
                                          workflow_id="g-1", input=[1])
            answer = None
            for _ in range(200):  # the first query may come before a worker holds the run
                try:
                    answer = await c.query_workflow("g-1", "state")
                    break
                except dw_errors.QueryFailed:
                    await asyncio.sleep(0.05)
            assert answer is not None and answer["result"] == {"opened_by": None, "value": 1}
            with pytest.raises(dw_errors.QueryFailed):
                await c.query_workflow("g-1", "no_such_query")

            accepted = await c.update_workflow("g-1", "set", args=[5], wait_for="accepted")
            assert accepted["update_status"] in ("accepted", "completed")
            completed = await c.update_workflow("g-1", "set", args=[7], wait_for="completed",
                                                request_id="upd-7")
            assert completed["result"] == 7 and completed["update_status"] == "completed"
            again = await c.update_workflow("g-1", "set", args=[7], wait_for="completed",
                                            request_id="upd-7")
            assert again["result"] == 7
            # the key of another message: the reference's 409 request_id_conflict,
            # which its client raises as the command's typed failure
            with pytest.raises(dw_errors.UpdateFailed) as taken:
                await c.update_workflow("g-1", "reset", wait_for="completed",
                                        request_id="upd-7")
            assert taken.value.body["reason"] == "request_id_conflict", taken.value
            assert taken.value.body["retained_command_type"] == "update"
            # (a signal sent with an update's key: the client types the failure
            # by the retained command, as against its own server)
            with pytest.raises(dw_errors.UpdateFailed) as taken_too:
                await c.signal_workflow("g-1", "open", args=["eve"], request_id="upd-7")
            assert taken_too.value.body["reason"] == "request_id_conflict", taken_too.value
            with pytest.raises(dw_errors.UpdateRejected):
                await c.update_workflow("g-1", "set", args=[-1], wait_for="completed")

            receipt = await c.signal_workflow("g-1", "open", args=["ann"])
            assert receipt["request_id"].startswith("sdk-python-signal-")
            assert await gate.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == {
                "opened_by": "ann", "value": 7}
            with pytest.raises(dw_errors.SignalFailed):  # closed: run_not_active
                await c.signal_workflow("g-1", "open", args=["late"])

            order = await c.start_workflow(workflow_type="ref_order", task_queue="default",
                                           workflow_id="o-1", input=["o-1"])
            first = await c.request_workflow_cancellation(
                "o-1", run_id=order.run_id, reason="withdrawn", cleanup_timeout_seconds=30)
            assert first["duplicate"] is False and first["run_id"] == order.run_id
            request = first["cancellation_request"]
            repeat = await c.request_workflow_cancellation(
                "o-1", reason="again", cleanup_timeout_seconds=600)
            assert repeat["duplicate"] is True
            for key in ("request_id", "requested_at", "cleanup_deadline_at"):
                assert repeat["cancellation_request"][key] == request[key], key
            with pytest.raises(dw_errors.WorkflowCancelled):
                await order.result(timeout=RESULT_TIMEOUT, poll_interval=0.05)
            history = await c.get_history("o-1", order.run_id,
                                          next_page_token=request["history_refresh_page_token"])
            types = [e["event_type"] for e in history["events"]]
            assert types[0] == "CancellationRequested"
            assert "ActivityCompleted" in types  # the shielded cleanup ran
            assert types[-1] == "WorkflowCancelled"

    await run_reference(scenario, live)


async def test_an_update_waited_for_accepted_answers_at_acceptance(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with client(url) as c:
            run = await c.start_workflow(workflow_type="ref_hold", task_queue="default",
                                         workflow_id="h-1", input=[])
            # the handler waits for `release`, which nobody has sent: this answer
            # can only be the acceptance (validated, recorded)
            accepted = await c.update_workflow("h-1", "hold", args=[21], wait_for="accepted",
                                               request_id="hold-21")
            assert accepted["update_status"] == "accepted", accepted
            assert accepted["outcome"] == "update_accepted" and accepted["result"] is None
            history = await c.get_history("h-1", run.run_id)
            types = [e["event_type"] for e in history["events"]]
            assert "UpdateAccepted" in types and "UpdateCompleted" not in types
            with pytest.raises(dw_errors.UpdateRejected):  # validated before accepted
                await c.update_workflow("h-1", "hold", args=[0], wait_for="accepted")
            await c.signal_workflow("h-1", "release")
            done = await c.update_workflow("h-1", "hold", args=[21], wait_for="completed",
                                           request_id="hold-21")
            assert done["update_status"] == "completed" and done["result"] == 42
            # accepted again once completed: the result comes with it
            again = await c.update_workflow("h-1", "hold", args=[21], wait_for="accepted",
                                            request_id="hold-21")
            assert again["update_status"] == "completed" and again["result"] == 42
            await c.signal_workflow("h-1", "finish")
            assert await run.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == "done"
            history = await c.get_history("h-1", run.run_id)
            types = [e["event_type"] for e in history["events"]]
            assert types.count("UpdateAccepted") == types.count("UpdateCompleted") == 1

    await run_reference(scenario, live)


# ---------------------------------------------------------------- errors


async def test_error_mapping(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with client(url) as c:
            with pytest.raises(dw_errors.WorkflowNotFound):
                await c.describe_workflow("nobody-here")
            await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                   workflow_id="e-1", input=[3600])
            with pytest.raises(dw_errors.WorkflowAlreadyStarted):
                await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                       workflow_id="e-1", input=[3600])
            with pytest.raises(dw_errors.InvalidArgument):  # fairness is not supported
                await c.start_workflow(workflow_type="ref_nap", task_queue="default",
                                       workflow_id="e-2", input=[1], fairness_key="tenant-a")
            # what the reference's server refuses, ours does, in its shape (422,
            # errors naming the field): ids beyond ^[a-zA-Z0-9._:-]{1,128}$ on a
            # start, page sizes beyond 200 (list) and 1000 (history)
            for bad_id in ("order 1", "a/b", "ünï", "x" * 129):
                with pytest.raises(dw_errors.InvalidArgument) as refused:
                    await c.start_workflow(workflow_type="ref_greet", task_queue="default",
                                           workflow_id=bad_id, input=["x"])
                assert list(refused.value.errors) == ["workflow_id"], bad_id
            longest = await c.start_workflow(workflow_type="ref_greet", task_queue="default",
                                             workflow_id="e." + "x" * 126, input=["x"])
            assert await longest.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == "hello x"
            for size in (0, 201):
                with pytest.raises(dw_errors.InvalidArgument) as refused:
                    await c.list_workflows(page_size=size)
                assert list(refused.value.errors) == ["page_size"]
            assert len((await c.list_workflows(page_size=200)).executions) == 2
            run_id = (await c.describe_workflow("e-1")).run_id
            with pytest.raises(dw_errors.InvalidArgument) as refused:
                await c.get_history("e-1", run_id, page_size=1001)
            assert list(refused.value.errors) == ["page_size"]
            assert (await c.get_history("e-1", run_id, page_size=1000))["events"]
            # a signal, query or update name over 256 bytes of UTF-8
            with pytest.raises(dw_errors.InvalidArgument) as refused:
                await c.signal_workflow("e-1", "ü" * 129)
            assert list(refused.value.errors) == ["signal_name"]
            with pytest.raises(dw_errors.InvalidArgument) as refused:
                await c.query_workflow("e-1", "ü" * 129)
            assert list(refused.value.errors) == ["query_name"]
            for bad in ("zzz", "bm90IGEgdG9rZW4="):  # a page token this server never gave
                with pytest.raises(dw_errors.ServerError) as caught:
                    await c.list_workflows(page_size=1, next_page_token=bad)
                assert caught.value.status == 400
                assert caught.value.body["message"] == (  # the list said `next_cursor`
                    "next_page_token is not one this server gave: pass the next_page_token of "
                    "the previous page, or none for the first page")
            await c.terminate_workflow("e-1")
        async with client(url, token="not-a-token") as stranger:
            with pytest.raises(dw_errors.Unauthorized):
                await stranger.describe_workflow("e-1")
        async with client(url, namespace="elsewhere") as other:
            with pytest.raises(dw_errors.WorkflowNotFound):  # 404, never 403
                await other.describe_workflow("e-1")
        async with client(url, token=VIEWER) as viewer:
            assert (await viewer.describe_workflow("e-1")).status == "terminated"
            with pytest.raises(dw_errors.DurableWorkflowError):
                await viewer.terminate_workflow("e-1")

    await run_reference(scenario, live)


# ---------------------------------------------------------------- a killed holder


async def test_a_run_held_by_a_killed_worker_parses_and_says_so(
        live: Live, storage_client: durable.Client) -> None:
    """A run whose worker was SIGKILLed 1000 s ago: the reference client still
    parses the list and the description (status running: the run is open),
    and the wire says what its contract has words for (``wait_kind``
    workflow-task, ``wait_reason``) plus our ``holder``; it read as running on
    that worker."""
    from durable.store.records import WorkerRegistration

    async with httpx.AsyncClient(base_url=live.url, headers={
            "X-Durable-Workflow-Control-Plane-Version": "2",
            "Authorization": f"Bearer {OPERATOR}"}) as http:
        started = await http.post("/api/workflows", json={
            "workflow_type": "ref-nobody", "workflow_id": "held-1", "task_queue": "ref-held",
            "input": [1], "require_registered": False})
        assert started.status_code == 201, started.text
    store, ns = storage_client.store, storage_client.namespace
    now = storage_client.clock.now()
    registration = WorkerRegistration("w-killed", ns, "ref-held", ("ref-nobody",), (), ())
    await store.register_worker(registration, 600.0, now)
    [_] = await store.claim_runs(ns, "ref-held", "w-killed", ("ref-nobody",), 1, 600.0, now)
    await store.register_worker(registration, 30.0, now - 1000)  # last seen long ago

    async def scenario(url: str) -> None:
        async with client(url, VIEWER) as c:
            page = await c.list_workflows(query="held-")
            assert [(e.workflow_id, e.status) for e in page.executions] == [
                ("held-1", "running")]
            described = await c.describe_workflow("held-1")
            assert (described.status, described.task_queue) == ("running", "ref-held")
        async with httpx.AsyncClient(base_url=url, headers={
                "X-Durable-Workflow-Control-Plane-Version": "2",
                "Authorization": f"Bearer {VIEWER}"}) as http:
            body = (await http.get("/api/workflows/held-1")).json()
            assert body["wait_kind"] == "workflow-task" and "presumed gone" in body["wait_reason"]
            assert (body["holder"]["worker_id"], body["holder"]["alive"]) == ("w-killed", False)
            item = (await http.get("/api/workflows", params={"query": "held-"})).json()
            [listed] = item["workflows"]
            assert listed["holder"]["alive"] is False and listed["waiting"] is True

    await run_reference(scenario, live)
