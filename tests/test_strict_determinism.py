"""`durable.testing.strict_determinism`: workflow code that would differ on replay
fails at the call in the user's tests.

The case behind it: a workflow stamped an order with ``time.time()`` and
branched on it. Every test passed; in production, the replay after a deploy
took the other branch and the run was marked for review. Under
``strict_determinism`` the first test run fails, naming the call, the line and
what to use instead, while activities, the test's own code and durable's
engine keep the real functions.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.testing import NondeterministicCall, isolated_definitions, strict_determinism

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("driver_name", ["sqlite"])]

CALLS: dict[str, Callable[[], Any]] = {
    "time.time": lambda: time.time(),
    "time.time_ns": lambda: time.time_ns(),
    "random.random": lambda: random.random(),
    "random.choice": lambda: random.choice([1, 2]),
    "uuid.uuid4": lambda: uuid.uuid4(),
}

with isolated_definitions():
    @workflow.defn(name="strict_clock")
    async def stamps_with_the_host_clock(kind: str) -> str:
        if kind == "time.sleep":
            time.sleep(0.001)  # noqa: ASYNC251 -- the very call the guard must stop
        elif kind == "anyio.sleep":
            await anyio.sleep(0.001)
        elif kind == "asyncio.sleep":
            await asyncio.sleep(0.001)
        elif kind == "trio.sleep":
            import trio
            await trio.sleep(0.001)
        else:
            CALLS[kind]()
        return "stamped"

    @activity.defn(name="strict_reads_clock")
    async def reads_the_clock() -> float:
        await anyio.sleep(0.001)  # an activity may sleep as it likes
        return time.time() + random.random() + uuid.uuid4().int % 2

    @activity.defn(name="strict_reads_clock_at_once")
    async def reads_the_clock_at_once() -> float:  # no await: the synchronous lane
        return time.time() + random.random()

    @activity.defn(name="strict_reads_clock_sync")
    def reads_the_clock_in_a_thread() -> float:
        time.sleep(0.001)
        return time.time() + random.random()

    @workflow.defn(name="strict_polite")
    async def polite() -> str:
        stamp = workflow.now().isoformat() + str(workflow.random()) + str(workflow.uuid4())
        await workflow.sleep(0.001)
        await workflow.execute_activity(reads_the_clock)
        await workflow.execute_local_activity(reads_the_clock)
        await workflow.execute_local_activity(reads_the_clock_at_once)
        await workflow.execute_activity(reads_the_clock_in_a_thread)
        workflow.logger.info("stamped", stamp=stamp)  # a logger reads the clock for itself
        return "polite"

    @workflow.defn(name="strict_swallows")
    async def swallows() -> str:
        try:
            time.time()
        except Exception:
            return "swallowed"
        return "not called"


async def run(client: durable.Client, fn: Any, *args: Any) -> Any:
    async with durable.Worker(client, workflows=[fn, polite],
                              activities=[reads_the_clock, reads_the_clock_in_a_thread],
                              poll_interval=0.1):
        handle = await client.start(fn, *args, id=f"strict-{uuid.UUID(int=0).hex}-{id(fn)}")
        return await handle.result()


@pytest.mark.parametrize("kind", [*CALLS, "time.sleep", "anyio.sleep", "asyncio.sleep",
                                  "trio.sleep"])
async def test_workflow_code_fails_at_a_call_that_differs_on_replay(
    storage_client: durable.Client, kind: str, anyio_backend: str,
) -> None:
    if kind in ("asyncio.sleep", "trio.sleep") and not kind.startswith(anyio_backend):
        pytest.skip(f"{kind} runs on its own loop only")
    with pytest.raises(durable.WorkflowFailed) as failed, strict_determinism() as guard:
        await run(storage_client, stamps_with_the_host_clock, kind)
    message = str(failed.value)
    assert f"workflow 'strict_clock' called {kind}()" in message, message
    assert "test_strict_determinism.py:" in message
    advice = "workflow.sleep(seconds)" if "sleep" in kind else "workflow."
    assert advice in message and "or call it in an activity" in message
    assert [type(v) for v in guard.violations] == [NondeterministicCall]


async def test_activities_the_engine_and_the_test_keep_the_real_functions(
    storage_client: durable.Client,
) -> None:
    with strict_determinism() as guard:
        assert await run(storage_client, polite) == "polite"
        assert time.time() > 0 and random.random() < 1  # the test's own code
    assert guard.violations == []


async def test_a_swallowed_violation_still_fails_the_test(storage_client: durable.Client) -> None:
    with pytest.raises(NondeterministicCall, match=r"called time\.time\(\)"), \
            strict_determinism():
        assert await run(storage_client, swallows) == "swallowed"
    # a test that expected the run to fail (for whatever reason) does not hide it either
    with pytest.raises(NondeterministicCall, match=r"called uuid\.uuid4\(\)"), \
            strict_determinism(), pytest.raises(durable.WorkflowFailed):
        await run(storage_client, stamps_with_the_host_clock, "uuid.uuid4")


async def test_the_functions_are_restored_when_the_last_block_ends(
    storage_client: durable.Client,
) -> None:
    originals = (time.time, random.random, uuid.uuid4, anyio.sleep, asyncio.sleep)
    with strict_determinism():
        with strict_determinism():
            assert time.time is not originals[0]
        assert time.time is not originals[0]  # the outer block still guards
    assert (time.time, random.random, uuid.uuid4, anyio.sleep, asyncio.sleep) == originals
    # outside the block, workflow code gets the real clock (the guard is for tests)
    assert await run(storage_client, stamps_with_the_host_clock, "time.time") == "stamped"


async def test_the_pytest_fixture_guards_the_test(
    storage_client: durable.Client, durable_strict_determinism: Any,
) -> None:
    with pytest.raises(durable.WorkflowFailed, match=r"called random\.random\(\)"):
        await run(storage_client, stamps_with_the_host_clock, "random.random")
    assert len(durable_strict_determinism.violations) == 1
    durable_strict_determinism.violations.clear()  # seen: the fixture's end has nothing to add
