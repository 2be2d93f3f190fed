"""A finished run and a finished activity attempt leave no cyclic garbage.

Objects that lived a second (a run, an attempt) are in the oldest garbage
collector generation by the time they are dropped: if they sit in a reference
cycle, only a full collection frees them, and a full collection stops the
process for tens of milliseconds (it set heartbeat-timeout lateness's tail:
docs/benchmarks.md, "One transaction a watchdog pass"). With the collector
off, this checks that none of a run's executor and context and an
attempt's context is left for the collector once the worker is done.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import durable
from durable import activity, workflow
from durable._runtime import attempts
from durable._runtime.state import current_task_state

pytestmark = pytest.mark.anyio

SEEN: list[weakref.ref[Any]] = []


@activity.defn(name="garbage_beat")
async def beat(n: int) -> int:
    SEEN.append(weakref.ref(attempts.current()))
    activity.heartbeat(n)
    return n + 1


@workflow.defn(name="garbage_flow")
async def flow(n: int) -> int:
    ctx = current_task_state().ctx
    SEEN.append(weakref.ref(ctx))
    SEEN.append(weakref.ref(ctx.host))  # the run's executor
    options = durable.ActivityOptions(heartbeat_timeout=30.0, start_to_close_timeout=60.0)
    result: int = await workflow.execute_activity(beat, n, options=options)
    return result


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        SEEN.clear()


async def test_a_finished_run_and_its_attempt_are_freed_without_the_collector(
    db_url: str, collector_off: None,
) -> None:
    async with durable.connect(db_url) as client:
        async with durable.Worker(client, workflows=[flow], activities=[beat],
                                  poll_interval=0.2):
            handle = await client.start(flow, 41, id="garbage-1")
            assert await handle.result() == 42
    # The worker and the client are done with the run and the attempt. What is
    # still alive is either held (a pending timer of the host loop made while
    # the run's task ran keeps a copy of its context variables until it is
    # due) or only in a reference cycle: a collection frees only the latter.
    assert len(SEEN) == 3
    alive = [(type(ref()).__name__, ref) for ref in SEEN if ref() is not None]
    gc.collect()
    only_cyclic = [name for name, ref in alive if ref() is None]
    assert only_cyclic == []
