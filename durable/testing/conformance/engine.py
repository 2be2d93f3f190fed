"""The conformance suite's engine tests: ops, replay, children, errors, on a driver.

Every test takes its storage from the `db_url` fixture (or the `client` /
`make_worker` fixtures built on it) of `durable.testing.conformance`, the
plugin a driver's author enables; it runs on asyncio and trio. Import the
tests into a test module of your own to run them::

    from durable.testing.conformance.engine import *  # noqa: F403

durable's own suite runs them on every shipped driver (tests/test_engine.py).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow

pytestmark = pytest.mark.anyio

CALLS: dict[str, int] = {}


def count(key: str) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    return CALLS[key]


@dataclasses.dataclass
class Order:
    order_id: str
    amount: int


@activity.defn
async def add(a: int, b: int) -> int:
    return a + b


@activity.defn
def shout(text: str) -> str:
    return text.upper()


@activity.defn
async def flaky(key: str, fail_times: int) -> str:
    n = count(key)
    if n <= fail_times:
        raise RuntimeError(f"flaky failure {n}")
    return f"ok after {n}"


class PaymentDeclined(Exception):
    pass


@activity.defn
async def decline(key: str) -> None:
    count(key)
    raise PaymentDeclined("card declined")


@activity.defn
async def price(order: Order) -> Order:
    return Order(order.order_id, order.amount * 2)


@workflow.defn
async def arithmetic(x: int) -> dict[str, Any]:
    remote = await workflow.execute_activity(add, x, 1)
    local = await workflow.execute_local_activity(add, remote, 10)
    text = await workflow.execute_activity(shout, "hi")
    await workflow.sleep(0.05)
    return {"remote": remote, "local": local, "text": text}


@workflow.defn
async def priced(order: Order) -> Order:
    result: Order = await workflow.execute_activity(price, order)
    assert isinstance(result, Order)
    return result


@workflow.defn
async def retrying(key: str) -> str:
    opts = durable.ActivityOptions(
        max_attempts=3, retry=durable.RetryPolicy(initial_interval=0.01)
    )
    result: str = await workflow.execute_activity(flaky, key, 2, options=opts)
    return result


@workflow.defn
async def declined(key: str) -> str:
    opts = durable.ActivityOptions(
        retry=durable.RetryPolicy(max_attempts=5, initial_interval=0.01,
                                  non_retryable_error_types=("PaymentDeclined",))
    )
    try:
        await workflow.execute_activity(decline, key, options=opts)
    except durable.ActivityFailed as exc:
        return f"caught {exc.cause_type}: {exc.cause_message}"
    return "not reached"


@workflow.defn
async def failing(message: str) -> None:
    raise ValueError(message)


@workflow.defn
async def parent(x: int) -> int:
    a = await workflow.execute_child(arithmetic, x)
    try:
        await workflow.execute_child(failing, "child boom")
    except durable.ChildWorkflowFailed as exc:
        assert isinstance(exc.__cause__, durable.WorkflowFailed)
    return int(a["local"])


@workflow.defn
async def doubled(n: int) -> int:
    return n * 2


@workflow.defn
async def nested(n: int) -> int:
    child: int = await workflow.execute_child(doubled, n)
    return child + 1


@workflow.defn
async def fan_out(n: int) -> list[int]:
    results: list[int] = [0] * n

    async def one(i: int) -> None:
        await workflow.sleep(0.01 * (n - i))
        results[i] = await workflow.execute_activity(add, i, 100)

    async with workflow.task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return results


@activity.defn
async def echo(value: Any) -> Any:
    return value


@workflow.defn
async def deterministic(key: str) -> bool:
    values = [workflow.random(), str(workflow.uuid4()), workflow.now().isoformat()]
    recorded = await workflow.execute_local_activity(echo, values)
    await workflow.execute_activity(wait_gate, key)  # the worker restarts while this waits
    again = [workflow.random(), str(workflow.uuid4()), workflow.now().isoformat()]
    return bool(recorded == values and again != values)


@workflow.defn
async def counter(n: int, total: int) -> int:
    if n > 0:
        await workflow.execute_local_activity(add, n, 0)
        workflow.continue_as_new(n - 1, total + n)
    return total


@workflow.defn
async def rogue_task() -> None:
    async def sneaky() -> None:
        await workflow.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sneaky)


@activity.defn
async def big(n: int) -> str:
    return "x" * n


@workflow.defn
async def too_big(n: int) -> str:
    result: str = await workflow.execute_local_activity(big, n)
    return result


@workflow.defn
async def many_timers(n: int) -> None:
    async with workflow.task_group() as tg:
        for _ in range(n):
            tg.start_soon(workflow.sleep, 10)


@pytest.mark.remote_client
async def test_activities_timers_and_result(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[arithmetic], activities=[add, shout]):
        result = await client.execute(arithmetic, 1, id="wf-1")
    assert result == {"remote": 2, "local": 12, "text": "HI"}
    types = [e.type for e in await client.get_handle("wf-1").history()]
    assert types[0] == "WorkflowStarted"
    assert types[-1] == "WorkflowCompleted"
    assert types.count("ActivityCompleted") == 3
    assert "TimerFired" in types
    info = await client.get_handle("wf-1").describe()
    assert info["status"] == "completed"
    assert info["workflow_type"] == "arithmetic"


@pytest.mark.remote_client
async def test_dataclass_payloads_round_trip(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[priced], activities=[price]):
        result = await client.execute(priced, Order("o1", 21), id="priced")
    assert result == Order("o1", 42)


@pytest.mark.remote_client
async def test_retries_then_success(client: durable.Client, make_worker: Any) -> None:
    key = f"retry-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[retrying], activities=[flaky]):
        assert await client.execute(retrying, key, id="retry") == "ok after 3"
    types = [e.type for e in await client.get_handle("retry").history()]
    assert types.count("ActivityRetryScheduled") == 2


@pytest.mark.remote_client
async def test_non_retryable_error_fails_at_once(client: durable.Client, make_worker: Any) -> None:
    key = f"decline-{uuid.uuid4().hex[:10]}"
    async with make_worker(workflows=[declined], activities=[decline]):
        result = await client.execute(declined, key, id="declined")
    assert result == "caught PaymentDeclined: card declined"
    assert CALLS[key] == 1


@pytest.mark.remote_client
async def test_workflow_failure_is_raised_from_result(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[failing]):
        handle = await client.start(failing, "boom", id="fails")
        with pytest.raises(durable.WorkflowFailed) as err:
            await handle.result()
    assert "boom" in str(err.value)
    assert err.value.failure["exception_class"] == "builtins.ValueError"
    info = await handle.describe()
    assert info["status"] == "failed"
    assert info["failures"][0]["cause_type"] == "ValueError"


@pytest.mark.remote_client
async def test_child_results_and_failures(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[parent, arithmetic, failing], activities=[add, shout]):
        assert await client.execute(parent, 5, id="parent") == 16
    types = [e.type for e in await client.get_handle("parent").history()]
    assert types.count("ChildWorkflowScheduled") == 2
    assert "ChildWorkflowCompleted" in types and "ChildWorkflowFailed" in types


async def test_parents_awaiting_children_on_a_full_worker_complete(
    client: durable.Client, make_worker: Any
) -> None:
    """A worker whose every slot holds a parent waiting on its child puts
    parents down (`Store.release_parked`: claimable again when the child
    closes) and takes the children in their slots: 4 parents on 2 slots."""
    handles = [await client.start(nested, i, id=f"nested-{i}") for i in range(4)]
    async with make_worker(workflows=[nested, doubled], max_concurrent_runs=2) as worker:
        assert [await h.result() for h in handles] == [1, 3, 5, 7]
    assert worker.relief.released > 0


async def test_parents_holding_a_full_queue_trade_their_slots_for_their_children(
    client: durable.Client, make_worker: Any
) -> None:
    """A queue of ``max_running=1`` whose slot a parent waiting on its child
    holds: the worker (room to spare) puts the parent down and claims the
    child in its slot in one transaction (`Store.trade_parked`, decision
    (ao)); 3 parents complete, the limit held throughout."""
    await client.set_queue_limits("default", durable.QueueLimits(max_running=1))
    handles = [await client.start(nested, i, id=f"traded-{i}") for i in range(3)]
    async with make_worker(workflows=[nested, doubled]) as worker:
        assert [await h.result() for h in handles] == [1, 3, 5]
    assert worker.relief.traded > 0


@pytest.mark.remote_client
async def test_task_group_fan_out(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[fan_out], activities=[add]):
        assert await client.execute(fan_out, 5, id="fan") == [100, 101, 102, 103, 104]


@pytest.mark.remote_client
async def test_continue_as_new_chains_runs(client: durable.Client, make_worker: Any) -> None:
    async with make_worker(workflows=[counter], activities=[add]):
        handle = await client.start(counter, 3, 0, id="counter")
        assert await handle.result() == 6
        info = await handle.describe()
    assert info["run_count"] == 4
    assert info["run"]["run_number"] == 4


@pytest.mark.remote_client
async def test_op_from_unmanaged_task_is_an_error(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[rogue_task]):
        with pytest.raises(durable.WorkflowFailed) as err:
            await client.execute(rogue_task, id="rogue")
    assert "task_group" in str(err.value)


@pytest.mark.remote_client
async def test_payload_limit_fails_run_with_structural_limit(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[too_big], activities=[big]):
        with pytest.raises(durable.WorkflowFailed) as err:
            await client.execute(too_big, 3 * 1024 * 1024, id="big")
    assert err.value.failure["failure_category"] == "structural_limit"
    assert err.value.failure["kind"] == "payload_bytes"


async def test_pending_timer_limit(db_url: str) -> None:
    limits = durable.Limits(pending_timers=3)
    async with durable.connect(db_url, limits=limits) as client:
        async with durable.Worker(client, workflows=[many_timers], poll_interval=0.2):
            with pytest.raises(durable.WorkflowFailed) as err:
                await client.execute(many_timers, 5, id="timers")
    failure = err.value.failure
    assert failure["failure_category"] == "structural_limit"
    assert (failure["kind"], failure["limit"]) == ("pending_timers", 3)


@pytest.mark.remote_client
async def test_duplicate_id_is_rejected(client: durable.Client, make_worker: Any) -> None:
    await client.start(arithmetic, 1, id="dup")
    with pytest.raises(durable.WorkflowAlreadyStarted):
        await client.start(arithmetic, 1, id="dup")
    again = await client.start(
        arithmetic, 1, id="dup", options=durable.StartOptions.return_existing_active()
    )
    assert again.workflow_id == "dup"
    assert len(await client.list()) == 1


@pytest.mark.remote_client
async def test_duplicate_id_of_a_closed_run_says_what_helps(
    client: durable.Client, make_worker: Any
) -> None:
    """An id whose run has closed is refused under every policy that does not
    replace it; the error says it closed, how, and what helps. It advised
    `return_existing_active()`, which refuses a closed run too (the README's
    example, run a second time)."""
    async with make_worker(workflows=[arithmetic, failing], activities=[add, shout]):
        await client.execute(arithmetic, 1, id="dup-done")
        with pytest.raises(durable.WorkflowFailed):
            await client.execute(failing, "no", id="dup-failed")
    for options in (durable.StartOptions.reject_duplicate(),
                    durable.StartOptions.return_existing_active()):
        with pytest.raises(durable.WorkflowAlreadyStarted) as err:
            await client.start(arithmetic, 1, id="dup-done", options=options)
        assert (err.value.status, err.value.closed) == ("completed", True)
        text = str(err.value)
        assert "closed completed" in text and "client.get_handle('dup-done')" in text
        assert "to get the running one" not in text and "ALLOW_DUPLICATE" not in text
    with pytest.raises(durable.WorkflowAlreadyStarted) as err:
        await client.start(failing, "no", id="dup-failed")
    assert err.value.status == "failed"
    assert "IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY" in str(err.value)
    again = await client.start(failing, "yes", id="dup-failed", options=durable.StartOptions(
        id_reuse=durable.IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY))
    assert again.workflow_id == "dup-failed"
    with pytest.raises(durable.WorkflowAlreadyStarted) as err:  # open: the running one helps
        await client.start(failing, "no", id="dup-failed")
    assert err.value.status in ("pending", "running") and not err.value.closed
    assert "return_existing_active() to get the running one" in str(err.value)


@pytest.mark.remote_client
async def test_unserialisable_argument_fails_at_call_and_writes_nothing(
    client: durable.Client,
) -> None:
    with pytest.raises(durable.PayloadRejected, match="cannot be serialised"):
        await client.start(arithmetic, object(), id="bad")
    assert await client.list() == []
    with pytest.raises(durable.WorkflowNotFound):
        await client.get_handle("bad").describe()


async def test_unknown_names_are_refused(client: durable.Client) -> None:
    with pytest.raises(durable.NameNotRegistered, match="unknown workflow 'nope'"):
        await client.start("nope", id="x")
    with pytest.raises(durable.ConfigurationError, match="not a workflow"):
        await client.start(len, id="x")
    with pytest.raises(durable.ConfigurationError, match=r"no @activity\.defn"):
        durable.Worker(client, activities=["not-registered"])
    with pytest.raises(durable.ConfigurationError, match=r"no @workflow\.defn"):
        durable.Worker(client, workflows=["not-registered"])


async def test_workflow_api_outside_workflow() -> None:
    with pytest.raises(durable.WorkflowAPIOutsideWorkflow):
        await workflow.sleep(1)
    with pytest.raises(durable.WorkflowAPIOutsideWorkflow):
        workflow.now()
    with pytest.raises(durable.DurableError):
        activity.heartbeat()


async def test_deterministic_helpers_replay_identically(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"det-{uuid.uuid4().hex[:10]}"
    gate = GATES[key] = anyio.Event()
    async with make_worker(workflows=[deterministic], activities=[echo, wait_gate]):
        handle = await client.start(deterministic, key, id="det")
        while not any(e.type == "ActivityStarted" for e in await handle.history()):
            await anyio.sleep(0.01)
    gate.set()
    async with make_worker(workflows=[deterministic], activities=[echo, wait_gate]):
        assert await handle.result() is True


async def test_worker_runs_next_to_other_tasks_in_the_app(
    client: durable.Client, make_worker: Any
) -> None:
    ticks = 0

    async def app_task() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as app:
        app.start_soon(app_task)
        async with make_worker(workflows=[arithmetic], activities=[add, shout]):
            await client.execute(arithmetic, 2, id="app")
        app.cancel_scope.cancel()
    assert ticks > 5


async def test_replay_after_worker_restart_does_not_repeat_steps(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"restart-{uuid.uuid4().hex[:10]}"
    CALLS.pop(key, None)
    gate = anyio.Event()
    GATES[key] = gate
    async with make_worker(workflows=[two_steps], activities=[counted, wait_gate]):
        handle = await client.start(two_steps, key, id="restart")
        while CALLS.get(key, 0) < 1:
            await anyio.sleep(0.01)
    # the first worker stopped mid-run; a new one replays step 1 and runs step 2
    gate.set()
    async with make_worker(workflows=[two_steps], activities=[counted, wait_gate]):
        assert await handle.result() == "done"
    assert CALLS[key] == 1


GATES: dict[str, anyio.Event] = {}


@activity.defn
async def counted(key: str) -> int:
    return count(key)


@activity.defn
async def wait_gate(key: str) -> str:
    await GATES[key].wait()
    return "done"


@workflow.defn
async def two_steps(key: str) -> str:
    await workflow.execute_local_activity(counted, key)
    opts = durable.ActivityOptions(retry=durable.RetryPolicy(initial_interval=0.01))
    result: str = await workflow.execute_activity(wait_gate, key, options=opts)
    return result


SHAPE = {"v": 1}


@workflow.defn
async def changing(key: str) -> str:
    if SHAPE["v"] == 1:
        await workflow.execute_local_activity(counted, key)
    else:
        await workflow.sleep(0.01)  # a deploy changed the code under a running run
    opts = durable.ActivityOptions(retry=durable.RetryPolicy(initial_interval=0.01))
    result: str = await workflow.execute_activity(wait_gate, key, options=opts)
    return result


async def test_non_determinism_marks_the_run_for_review(
    client: durable.Client, make_worker: Any
) -> None:
    key = f"nd-{uuid.uuid4().hex[:10]}"
    GATES[key] = anyio.Event()
    SHAPE["v"] = 1
    async with make_worker(workflows=[changing], activities=[counted, wait_gate]):
        handle = await client.start(changing, key, id="nd")
        while CALLS.get(key, 0) < 1:
            await anyio.sleep(0.01)
    SHAPE["v"] = 2
    try:
        async with make_worker(workflows=[changing], activities=[counted, wait_gate]) as worker:
            with anyio.fail_after(10):
                while not (await handle.describe())["run"]["needs_review"]:
                    await anyio.sleep(0.02)
            await worker.runs.claim_now()  # a claim pass after the mark takes nothing
            assert worker.executors == {}
            info = await handle.describe()
    finally:
        SHAPE["v"] = 1
    GATES[key].set()
    assert info["status"] == "needs_review" and info["run"]["status"] == "running"
    assert "does not replay" in info["reason"]
    assert info["run"]["owner"] is None
    failure = info["failures"][-1]
    assert failure["failure_category"] == "non_determinism"
    assert "does not replay" in failure["message"]
    types = [e.type for e in await handle.history()]
    assert "WorkflowNeedsReview" in types and "WorkflowFailed" not in types
    assert CALLS[key] == 1
    # the old code is back: clear the mark and the run replays to completion
    assert await handle.retry_after_review() is True
    async with make_worker(workflows=[changing], activities=[counted, wait_gate]):
        assert await handle.result() == "done"
    assert CALLS[key] == 1
