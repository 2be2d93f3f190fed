"""A delivery that waits for quiet blames the workflow code only when it is to blame.

A signal or an update is delivered once every workflow task waits on a
durable op (the delivery's boundary), or after `QUIET_WAIT`. Past that bound
the worker warned ``delivery_without_quiet``: "a workflow task waits on
something that is not a durable op; it will not replay deterministically".
The MariaDB trial (12-06) saw that warning under load for a workflow that
only waited in `wait_condition` and on a child: its task was awaiting the
commit of its child's start, which storage took more than a second to make.
Nothing was wrong with the code. Now a task awaiting a commit of the run's
writes is told apart (`Parking.committing`): slow storage is logged at info
as ``delivery_during_commit``, and the warning stays for code that really
waits on something else.

The commit is held with an explicit hook on the worker's committer (the
real one runs once released), and `QUIET_WAIT` is shortened for the test.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable._runtime import inbox
from durable.testing import Replayer, isolated_definitions

pytestmark = pytest.mark.anyio

#: what the run's code waits on outside durable (the warning's case), per test
OUTSIDE: dict[str, anyio.Event] = {}

with isolated_definitions():
    @activity.defn(name="quiet_noop")
    async def noop() -> str:
        return "ok"

    @workflow.defn(name="quiet_flow")
    class Flow:
        def __init__(self) -> None:
            self.seen: list[str] = []

        @workflow.signal
        def poke(self, what: str) -> None:
            self.seen.append(what)

        @workflow.run
        async def run(self, outside: bool) -> list[str]:
            await workflow.wait_condition(lambda: "go" in self.seen)
            if outside:
                OUTSIDE["waiting"].set()
                await OUTSIDE["event"].wait()  # not a durable op: the warning's case
            else:
                await workflow.execute_activity(noop)  # its schedule's commit is held
            await workflow.wait_condition(lambda: "done" in self.seen)
            return self.seen


@pytest.fixture
def short_quiet(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deliveries wait 0.1 s for quiet (not 1 s); the engine's info lines are kept."""
    caplog.set_level(logging.INFO, logger="durable.workflow")
    monkeypatch.setattr(inbox, "QUIET_WAIT", 0.1)


def lines(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if f"'{event}'" in r.getMessage()]


async def until_logged(caplog: pytest.LogCaptureFixture, event: str) -> str:
    with anyio.fail_after(30):
        while not lines(caplog, event):
            await anyio.sleep(0.01)
    return lines(caplog, event)[0]


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_task_awaiting_its_commit_is_not_blamed(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture, short_quiet: None,
) -> None:
    held, entered = anyio.Event(), anyio.Event()
    async with durable.Worker(storage_client, workflows=[Flow], activities=[noop],
                              poll_interval=0.1) as worker:
        original = worker.committer.submit

        async def slow_storage(run_id: str, epoch: int, writes: Any, **kw: Any) -> Any:
            if any(type(w).__name__ == "ScheduleActivity" for w in writes):
                entered.set()
                await held.wait()  # the commit storage takes its time over
            return await original(run_id, epoch, writes, **kw)

        worker.committer.submit = slow_storage  # type: ignore[method-assign]
        handle = await storage_client.start(Flow, False, id="slow-commit")
        await handle.signal("poke", "go")
        await entered.wait()
        await handle.signal("poke", "done")  # delivered while the task awaits its commit
        line = await until_logged(caplog, "delivery_during_commit")
        held.set()
        assert await handle.result() == ["go", "done"]
    assert "storage took over 0.1s to commit the writes of 1 workflow task(s)" in line, line
    assert lines(caplog, "delivery_without_quiet") == []


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_task_waiting_outside_durable_is_still_warned_of(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture, short_quiet: None,
) -> None:
    OUTSIDE["event"], OUTSIDE["waiting"] = anyio.Event(), anyio.Event()
    async with durable.Worker(storage_client, workflows=[Flow], activities=[noop],
                              poll_interval=0.1):
        handle = await storage_client.start(Flow, True, id="waits-outside")
        await handle.signal("poke", "go")
        await OUTSIDE["waiting"].wait()  # "done" is delivered while the code waits outside
        await handle.signal("poke", "done")
        line = await until_logged(caplog, "delivery_without_quiet")
        OUTSIDE["event"].set()
        assert await handle.result() == ["go", "done"]
    assert "running_tasks=1" in line and "committing_tasks=0" in line, line
    assert "not a durable op" in line
    assert lines(caplog, "delivery_during_commit") == []


def test_the_verdict_counts_only_tasks_that_are_not_committing() -> None:
    assert inbox.quiet_verdict(2, 2)[:2] == ("info", "delivery_during_commit")
    level, event, fields = inbox.quiet_verdict(2, 1)
    assert (level, event, fields["running_tasks"], fields["committing_tasks"]) == (
        "warning", "delivery_without_quiet", 1, 1)


with isolated_definitions():
    @activity.defn(name="quiet_step")
    async def step(name: str) -> str:
        return name

    @workflow.defn(name="quiet_steps")
    class Steps:
        """Local steps back to back: the task is never quiet between them."""

        def __init__(self) -> None:
            self.seen: list[str] = []

        @workflow.signal
        def poke(self, what: str) -> None:
            self.seen.append(what)

        @workflow.run
        async def run(self) -> list[str]:
            await workflow.execute_local_activity(step, "a")
            before = bool(self.seen)  # what the code saw before the delivery
            await workflow.execute_local_activity(step, "b")  # its record's commit is held
            if before:
                await workflow.sleep(0.01)
            else:
                await workflow.execute_local_activity(step, "c")
            await workflow.wait_condition(lambda: bool(self.seen))
            return self.seen


@pytest.mark.parametrize("driver_name", ["sqlite"])
async def test_a_delivery_during_a_commit_replays_where_it_was_made(
    storage_client: durable.Client, caplog: pytest.LogCaptureFixture, short_quiet: None,
) -> None:
    """A signal that waited past QUIET_WAIT while the only task awaited the
    commit of a local step's outcome was delivered at once, with an empty
    frontier: replay made it before the code started, where the code saw
    other state (the trial of 12-06: runs of 4 SQLite processes under kills
    went to needs_review). Now the task stops at its next op, and the delivery
    is made there."""
    held, entered = anyio.Event(), anyio.Event()
    async with durable.Worker(storage_client, workflows=[Steps], activities=[step],
                              poll_interval=0.1) as worker:
        original = worker.committer.submit

        async def slow_storage(run_id: str, epoch: int, writes: Any, **kw: Any) -> Any:
            if any(getattr(w, "op_id", None) == "0:2" and type(w).__name__ ==
                   "RecordLocalActivity" for w in writes):
                entered.set()
                await held.wait()
            return await original(run_id, epoch, writes, **kw)

        worker.committer.submit = slow_storage  # type: ignore[method-assign]
        handle = await storage_client.start(Steps, id="steps-slow-commit")
        await entered.wait()
        await handle.signal("poke", "x")  # while the task awaits its step's commit
        await until_logged(caplog, "delivery_during_commit")
        held.set()
        assert await handle.result() == ["x"]
    history = await handle.history()
    delivered = [e.data for e in history if e.type == "SignalDelivered"]
    assert [d["frontier"] for d in delivered] == [[{"op_id": "0:3", "kind": "local_activity"}]]
    await Replayer(workflows=[Steps]).replay(history)  # NonDeterminismDetected before
