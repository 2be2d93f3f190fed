"""Workflows the browser tests (tests/test_ui.py) look at through the web UI.

Each one leaves something on a page an operator reads: a plain result, a
failure with a chain of causes, an activity that times out on every attempt
(its retry policy, its four timeouts and an ActivityTimedOut naming its
kind) inside a run with execution and run deadlines and a current phase, a
heartbeating activity with a cooperative cleanup, and a three-level tree whose
leaf activity runs on a worker process the test kills with SIGKILL (an
unverified stop).
"""

from __future__ import annotations

from typing import Any

import anyio

import durable
from durable import activity, workflow

# The task queue only the worker process the tests kill serves.
DOOMED_QUEUE = "ui-doomed"
QUICK = durable.ActivityOptions(start_to_close_timeout=60, max_attempts=1)
# Every configured timeout type, and a retry policy with two attempts that both
# time out (start-to-close) after heartbeating.
SLOW = durable.ActivityOptions(
    schedule_to_start_timeout=30,
    start_to_close_timeout=1,
    schedule_to_close_timeout=600,
    heartbeat_timeout=15,
    retry=durable.RetryPolicy(max_attempts=2, initial_interval=0.2, backoff_coefficient=2,
                              maximum_interval=10),
)
TERMINATE_CHILDREN = durable.ChildOptions(
    parent_close_policy=durable.ParentClosePolicy.TERMINATE)


@activity.defn(name="ui-greet-activity")
async def greet_activity(name: str) -> str:
    return f"hello, {name}"


@activity.defn(name="ui-charge")
async def charge(order: str) -> str:
    try:
        {}[order]
    except KeyError as exc:
        raise ValueError(f"card declined for {order}") from exc
    return order


@activity.defn(name="ui-slow")
async def slow(total: int) -> int:
    for done in range(total):
        activity.heartbeat({"done": done, "total": total})
        await anyio.sleep(0.2)
    return total


@activity.defn(name="ui-hang")
async def hang(key: str) -> str:
    activity.heartbeat({"done": 3, "total": 10})
    await anyio.sleep(3600)
    return key


@activity.defn(name="ui-steady")
async def steady(total: int) -> int:
    """Heartbeats its progress for as long as the test watches (no history event)."""
    for done in range(total):
        activity.heartbeat({"done": done, "total": total})
        await anyio.sleep(0.3)
    return total


@activity.defn(name="ui-release")
async def release(key: str) -> str:
    return f"released {key}"


@workflow.defn(name="ui-greet")
async def greet(name: str) -> str:
    return await workflow.execute_activity(greet_activity, name, options=QUICK)


@workflow.defn(name="ui-fail")
async def fail(order: str) -> str:
    return await workflow.execute_activity(charge, order, options=QUICK)


@workflow.defn(name="ui-deadlines")
async def deadlines(total: int) -> str:
    try:
        await workflow.execute_activity(slow, total, options=SLOW)
    except durable.ActivityTimedOut:
        pass
    async with workflow.phase("cool-down", limit=3000):
        await workflow.sleep(3600)
    return "done"


@workflow.defn(name="ui-guarded")
async def guarded(key: str) -> str:
    try:
        return await workflow.execute_activity(hang, key, options=QUICK)
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(release, key, options=QUICK)


@workflow.defn(name="ui-progress")
async def progress(total: int) -> int:
    return await workflow.execute_activity(
        steady, total, options=durable.ActivityOptions(start_to_close_timeout=3600,
                                                       heartbeat_timeout=2))


@workflow.defn(name="ui-approval")
class Approval:
    """examples/approval.py's shape: waits for an approval, under a limit an update sets."""

    def __init__(self) -> None:
        self.stage = "waiting for approval"
        self.limit = 1000
        self.approver: str | None = None

    @workflow.run
    async def run(self, amount: int) -> str:
        await workflow.wait_condition(lambda: self.approver is not None)
        return f"{amount} approved by {self.approver}"

    @workflow.signal
    def approve(self, who: str) -> None:
        self.approver = who

    @workflow.query
    def progress(self) -> dict[str, Any]:
        return {"stage": self.stage, "limit": self.limit, "approver": self.approver}

    @workflow.update
    def set_limit(self, limit: int) -> int:
        previous, self.limit = self.limit, limit
        return previous

    @set_limit.validator
    def _check_limit(self, limit: int) -> None:
        if limit <= 0 or limit > 100_000:
            raise ValueError(f"a limit must be between 1 and 100000, got {limit}")


@workflow.defn(name="ui-leaf")
async def leaf(key: str) -> str:
    return await workflow.execute_activity(hang, key, options=QUICK)


@workflow.defn(name="ui-mid")
async def mid(key: str) -> str:
    return str(await workflow.execute_child(leaf, key, id=f"{key}-leaf",
                                            options=TERMINATE_CHILDREN))


@workflow.defn(name="ui-root")
async def root(key: str) -> str:
    return str(await workflow.execute_child(mid, key, id=f"{key}-mid",
                                            options=TERMINATE_CHILDREN))


WORKFLOWS: list[Any] = [greet, fail, deadlines, guarded, progress, Approval]
ACTIVITIES: list[Any] = [greet_activity, charge, slow, hang, release, steady]

# The control plane's in-process worker (durable.http.serve.serve_async(worker=...)).
WORKER: dict[str, Any] = {"workflows": WORKFLOWS, "activities": ACTIVITIES,
                          "poll_interval": 0.1, "lease_seconds": 5.0}

# `durable worker tests.ui_app:DOOMED`: the process the cascade test kills. Its
# lease outlives the test, so the cascade finds the killed worker's attempt unended
# (no stop receipt): with a 5 s lease, on a loaded machine the in-process worker
# judged the attempt lost (ended, worker_lost) before the run was terminated.
DOOMED: dict[str, Any] = {"workflows": [root, mid, leaf], "activities": [hang],
                          "task_queue": DOOMED_QUEUE, "poll_interval": 0.1,
                          "lease_seconds": 600.0}
