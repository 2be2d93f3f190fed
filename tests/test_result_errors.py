"""`handle.result()` raises WorkflowFailed whose __cause__ chain is typed.

Under it, the error the workflow raised (ActivityFailed, ActivityTimedOut
with its timeout_kind, ChildWorkflowFailed), and under that the application
error rebuilt by type name and message, or the child's own terminal error;
`err.failure` stays the recorded failure dict.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow

pytestmark = pytest.mark.anyio

ONCE = durable.ActivityOptions(max_attempts=1)


class StockMissing(Exception):
    pass


@activity.defn
async def chain_reserve(sku: str) -> None:
    raise StockMissing(f"no stock for {sku}")


@activity.defn
async def chain_slow() -> None:
    await anyio.sleep(60)


@workflow.defn
async def chain_reserving(sku: str) -> None:
    await workflow.execute_activity(chain_reserve, sku, options=ONCE)


@workflow.defn
async def chain_waiting() -> None:
    opts = durable.ActivityOptions(start_to_close_timeout=0.3, max_attempts=1)
    await workflow.execute_activity(chain_slow, options=opts)


@workflow.defn
async def chain_failing_child(reason: str) -> None:
    raise ValueError(reason)


@workflow.defn
async def chain_parent(reason: str) -> None:
    await workflow.execute_child(chain_failing_child, reason, id="chain-child")


async def _failure_event(handle: durable.WorkflowHandle) -> dict[str, Any]:
    events = [e for e in await handle.history() if e.type == "WorkflowFailed"]
    assert len(events) == 1
    failure: dict[str, Any] = events[0].data["failure"]
    return failure


async def test_an_activitys_application_error_is_under_activity_failed(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[chain_reserving], activities=[chain_reserve]):
        handle = await client.start(chain_reserving, "sku-1", id="chain-app")
        with pytest.raises(durable.WorkflowFailed) as caught:
            await handle.result()
    err = caught.value
    activity_err = err.__cause__
    assert type(activity_err) is durable.ActivityFailed
    assert activity_err.cause_type == "StockMissing"
    app = activity_err.__cause__
    assert isinstance(app, durable.ApplicationError)
    assert (app.type, str(app)) == ("StockMissing", "StockMissing: no stock for sku-1")
    assert app.__cause__ is None
    assert err.failure == await _failure_event(handle)
    assert err.failure["exception_class"] == "durable.errors.ActivityFailed"
    assert err.failure["cause"]["exception_class"] == f"{__name__}.StockMissing"


async def test_an_activity_timeout_is_under_workflow_failed_with_its_kind(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[chain_waiting], activities=[chain_slow]):
        handle = await client.start(chain_waiting, id="chain-timeout")
        with anyio.fail_after(30), pytest.raises(durable.WorkflowFailed) as caught:
            await handle.result()
    err = caught.value
    timed_out = err.__cause__
    assert isinstance(timed_out, durable.ActivityTimedOut)
    assert timed_out.timeout_kind == "start_to_close"
    assert timed_out.__cause__ is None
    assert err.failure == await _failure_event(handle)
    assert err.failure["cause"]["timeout_kind"] == "start_to_close"


async def test_a_failing_child_is_under_child_workflow_failed(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[chain_parent, chain_failing_child]):
        handle = await client.start(chain_parent, "child broke", id="chain-parent")
        with pytest.raises(durable.WorkflowFailed) as caught:
            await handle.result()
    err = caught.value
    child_err = err.__cause__
    assert isinstance(child_err, durable.ChildWorkflowFailed)
    assert child_err.failure["child_status"] == "failed"
    child_terminal = child_err.__cause__
    assert isinstance(child_terminal, durable.WorkflowFailed)
    app = child_terminal.__cause__
    assert isinstance(app, durable.ApplicationError)
    assert (app.type, str(app)) == ("ValueError", "ValueError: child broke")
    assert err.failure == await _failure_event(handle)
    assert err.failure["failure_category"] == "application"
    assert err.failure["cause"]["failure_category"] == "child_workflow"
