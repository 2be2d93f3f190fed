"""Workflows and activities the CLI tests run: ``durable worker tests.cli_app:WORKER``.

Each workflow shows one thing an operator looks at: a plain result, heartbeat
progress, a failure, a cooperative cancellation with cleanup (alone and in a
parent/child tree), and an activity that ignores every stop request.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio

import durable
from durable import activity, workflow

OPTS = durable.ActivityOptions(start_to_close_timeout=120, max_attempts=1)


@activity.defn(name="cli-greet-activity")
async def greet_activity(name: str) -> str:
    return f"hello, {name}"


@activity.defn(name="cli-count-activity")
def count_activity(total: int, pause: float) -> int:
    """Heartbeats ``{"done": n, "total": total}``: what `durable watch` draws as a bar."""
    for n in range(total + 1):
        activity.heartbeat({"done": n, "total": total})
        time.sleep(pause)
    return total


@activity.defn(name="cli-hang")
async def hang(key: str) -> str:
    await anyio.sleep(3600)
    return key


# Cleanups a test holds open: `release(key)` waits until HELD_CLEANUPS[key] is
# set, so a run stays in its cleanup phase (still running) for exactly as long
# as the test needs to look at it there, however slow or fast the worker is.
# Only a worker in the test's own process (ThreadWorker) sees this.
HELD_CLEANUPS: dict[str, threading.Event] = {}


@activity.defn(name="cli-release")
async def release(key: str) -> str:
    held = HELD_CLEANUPS.get(key)
    if held is not None:
        await anyio.to_thread.run_sync(held.wait, abandon_on_cancel=True)
    return f"released {key}"


@activity.defn(name="cli-block")
def block(seconds: float) -> float:
    """Blocks its thread without heartbeats: no stop request can reach it."""
    time.sleep(seconds)
    return seconds


@workflow.defn(name="cli-greet")
async def greet(name: str) -> str:
    return await workflow.execute_activity(greet_activity, name, options=OPTS)


@workflow.defn(name="cli-count")
async def count(total: int, pause: float) -> int:
    return await workflow.execute_activity(count_activity, total, pause, options=OPTS)


@workflow.defn(name="cli-fail")
async def fail(message: str) -> str:
    raise ValueError(message)


@workflow.defn(name="cli-guarded")
async def guarded(key: str) -> str:
    try:
        return await workflow.execute_activity(hang, key, options=OPTS)
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(release, key, options=OPTS)


@workflow.defn(name="cli-parent")
async def parent(key: str) -> str:
    return await workflow.execute_child(guarded, f"{key}-child", id=f"{key}-child")


@workflow.defn(name="cli-again")
async def again(n: int) -> int:
    """Continues as new once: the first run is then an older, closed run."""
    if n < 1:
        workflow.continue_as_new(n + 1)
    return n


@workflow.defn(name="cli-stuck")
async def stuck(seconds: float) -> float:
    return await workflow.execute_activity(block, seconds, options=OPTS)


@activity.defn(name="cli-unit")
def unit(item: str) -> str:
    """Unit "stuck" runs past its start-to-close timeout: its effect cannot be confirmed."""
    while item == "stuck":
        time.sleep(0.02)
        activity.check_cancelled()
    return f"imported {item}"


@workflow.defn(name="cli-units")
async def units(items: list[str]) -> dict[str, Any]:
    result = await workflow.units(
        items, key=str, handler=unit,
        options=durable.ActivityOptions(start_to_close_timeout=1, max_attempts=2))
    return {"done": result.done}


@workflow.defn(name="cli-gate")
class Gate:
    """Waits for `open`; answers `state`; takes a `set_limit` update (validated)."""

    def __init__(self) -> None:
        self.opened_by: str | None = None
        self.limit = 0

    @workflow.run
    async def run(self, limit: int) -> dict[str, Any]:
        self.limit = limit
        await workflow.wait_condition(lambda: self.opened_by is not None)
        return {"opened_by": self.opened_by, "limit": self.limit}

    @workflow.signal
    def open(self, who: str) -> None:
        self.opened_by = who

    @workflow.query
    def state(self) -> dict[str, Any]:
        return {"opened_by": self.opened_by, "limit": self.limit}

    @workflow.update
    def set_limit(self, limit: int) -> int:
        self.limit = limit
        return limit

    @set_limit.validator
    def _check(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be at least 0")


WORKFLOWS: list[Any] = [greet, count, fail, guarded, parent, again, stuck, Gate, units]
ACTIVITIES: list[Any] = [greet_activity, count_activity, hang, release, block, unit]

# The spec form of `durable worker MODULE:ATTR`.
WORKER: dict[str, Any] = {"workflows": WORKFLOWS, "activities": ACTIVITIES,
                          "poll_interval": 0.1, "lease_seconds": 5.0}


def make_worker(client: durable.Client) -> durable.Worker:
    """The factory form of `durable worker MODULE:ATTR`."""
    return durable.Worker(client, workflows=WORKFLOWS, activities=ACTIVITIES,
                          poll_interval=0.1, lease_seconds=5.0, identity="factory-worker")


# Specs `durable worker` must refuse (tests/test_cli.py).
BAD_SPEC: dict[str, Any] = {"workflow": [greet]}
EMPTY_SPEC: dict[str, Any] = {"workflows": [], "activities": []}
