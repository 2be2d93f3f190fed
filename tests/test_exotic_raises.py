"""Exotic things raised by workflow and activity code fail the one run or
attempt, recorded with a message that says what to do, and the worker keeps
serving the other runs.

An exception whose ``__str__`` raises used to escape the recording of its
failure: from an activity it ended the worker's task group (and the host's
application with it); from a workflow it had the run handed back and claimed
again, logged every 100 ms, forever. A `BaseException` that is not an
`Exception` (``SystemExit``, a class of the code's own) did the same.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import durable
from durable import activity, workflow

pytestmark = pytest.mark.anyio

ONCE = durable.ActivityOptions(max_attempts=1)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class Unreprable(Exception):
    """Neither its text nor its repr can be had: logging the run's failure
    (`repr`) raised, and the run was handed back and claimed again forever."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Halt(BaseException):
    pass


def _raise(kind: str) -> None:
    if kind == "unprintable":
        raise Unprintable()
    if kind == "unreprable":
        raise Unreprable()
    if kind == "cancelled":  # the host's cancellation, raised while nothing cancels
        raise anyio.get_cancelled_exc_class()()
    if kind == "exit":
        sys.exit(3)
    if kind == "generator_exit":  # by hand: no loop closes a running task's coroutine
        raise GeneratorExit("by hand")
    raise Halt("stop everything")


@activity.defn
def exotic_sync_step(kind: str) -> None:
    _raise(kind)


@activity.defn
async def exotic_async_step(kind: str) -> None:
    await anyio.lowlevel.checkpoint()
    _raise(kind)


@workflow.defn
async def exotic_activity(kind: str, sync: bool, local: bool) -> None:
    step = exotic_sync_step if sync else exotic_async_step
    if local:
        await workflow.execute_local_activity(step, kind, options=ONCE)
    else:
        await workflow.execute_activity(step, kind, options=ONCE)


@workflow.defn
async def exotic_workflow(kind: str) -> None:
    _raise(kind)


@workflow.defn
async def exotic_healthy(x: int) -> int:
    return x + 1


EXPECTED = {
    "unprintable": "<Unprintable: its __str__ raised RuntimeError; make __str__ return a string>",
    "exit": "raised SystemExit (3), a BaseException that is not an Exception",
    # unfixed, a workflow's run was handed back and replayed forever (ten
    # run_execution_error warnings a second)
    "generator_exit": "raised GeneratorExit (by hand), a BaseException that is not an Exception",
    "halt": "raised Halt (stop everything), a BaseException that is not an Exception",
    "unreprable": "<Unreprable: its __str__ raised RuntimeError; make __str__ return a string>",
}
#: asyncio only (trio.Cancelled cannot be raised by hand): unfixed, it went on
#: as a cancellation, cancelled the worker's task group and with it the host's
#: own code in the ``async with Worker`` block, and left the run open
CANCELLED = "raised CancelledError, a BaseException that is not an Exception"


async def _fails_alone(client: durable.Client, handle: durable.WorkflowHandle,
                       expected: str) -> dict[str, Any]:
    # a hang guard, not a timing: unfixed, a workflow's run was claimed again forever
    with pytest.raises(durable.WorkflowFailed) as caught, anyio.fail_after(60):
        await handle.result()
    text = str(caught.value) + repr(caught.value.failure)
    assert expected in text
    # the worker still serves the other runs
    healthy = await client.start(exotic_healthy, 1, id=f"{handle.workflow_id}-after")
    assert await healthy.result() == 2
    return caught.value.failure


@pytest.mark.parametrize("kind", sorted(EXPECTED))
@pytest.mark.parametrize(("sync", "local"), [(True, False), (False, False), (False, True)])
async def test_an_activity_raising_it_fails_its_attempt(
    client: durable.Client, make_worker: Any, kind: str, sync: bool, local: bool
) -> None:
    async with make_worker(workflows=[exotic_activity, exotic_healthy],
                           activities=[exotic_sync_step, exotic_async_step]):
        handle = await client.start(exotic_activity, kind, sync, local,
                                    id=f"exotic-{kind}-{sync}-{local}")
        await _fails_alone(client, handle, EXPECTED[kind])


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_a_workflow_raising_it_fails_its_run(
    client: durable.Client, make_worker: Any, kind: str
) -> None:
    async with make_worker(workflows=[exotic_workflow, exotic_healthy]):
        handle = await client.start(exotic_workflow, kind, id=f"exotic-wf-{kind}")
        failure = await _fails_alone(client, handle, EXPECTED[kind])
        if kind not in ("unprintable", "unreprable"):
            assert failure["exception_class"] == "durable.errors.RaisedNotAnException"
            assert failure["cause"]["exception_class"].endswith(
                {"exit": "SystemExit", "generator_exit": "GeneratorExit"}.get(kind, "Halt"))


@workflow.defn
class ExoticHandlers:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)  # until its signal handler fails it

    @workflow.query
    def ask(self, kind: str) -> None:
        _raise(kind)

    @workflow.update
    async def change(self, kind: str) -> None:
        _raise(kind)

    @workflow.signal
    def tell(self, kind: str) -> None:
        if kind == "continue":
            workflow.continue_as_new()
        _raise(kind)

    @workflow.update
    async def renew(self) -> None:
        workflow.continue_as_new()


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_a_handler_raising_it_fails_its_query_update_or_run(
    client: durable.Client, make_worker: Any, kind: str
) -> None:
    """Unfixed, a query or an update whose handler raised a BaseException had
    the run claimed again forever (the caller timed out); one raising an
    exception whose __str__ raises stopped the run's inbox."""
    async with make_worker(workflows=[ExoticHandlers, exotic_healthy]):
        handle = await client.start(ExoticHandlers, id=f"exotic-handlers-{kind}")
        with pytest.raises(durable.QueryFailed, match=re.escape(EXPECTED[kind])):
            await handle.query("ask", kind)
        with pytest.raises(durable.UpdateFailed, match=re.escape(EXPECTED[kind])):
            await handle.update("change", kind)
        assert (await handle.describe())["status"] == "running"
        await handle.signal("tell", kind)  # a signal handler's error fails the run
        await _fails_alone(client, handle, EXPECTED[kind])


async def test_a_handler_continuing_as_new_is_told_only_the_run_may(
    client: durable.Client, make_worker: Any
) -> None:
    """Unfixed, the run was claimed again forever (the update's caller timed out)."""
    message = "called workflow.continue_as_new(): only the workflow's run may"
    async with make_worker(workflows=[ExoticHandlers, exotic_healthy]):
        handle = await client.start(ExoticHandlers, id="exotic-handlers-continue")
        with pytest.raises(durable.UpdateFailed, match=re.escape(message)):
            await handle.update("renew")
        await handle.signal("tell", "continue")
        await _fails_alone(client, handle, message)


@pytest.mark.parametrize(("sync", "local"),
                         [(True, False), (False, False), (False, True), (None, None)])
async def test_a_cancellation_raised_by_hand_fails_its_run_not_the_host(
    client: durable.Client, make_worker: Any, anyio_backend: str, sync: Any, local: Any
) -> None:
    """asyncio's CancelledError raised by workflow or activity code while nothing
    cancels it (a library that leaks one, a sync activity's own ``asyncio.run``
    that was cancelled) is the code's failure: the host's own code goes on."""
    if anyio_backend != "asyncio":
        pytest.skip("trio.Cancelled has no public constructor")

    async def body() -> None:
        if sync is None:
            handle = await client.start(exotic_workflow, "cancelled", id="exotic-wf-cancelled")
        else:
            handle = await client.start(exotic_activity, "cancelled", sync, local,
                                        id=f"exotic-cancelled-{sync}-{local}")
        failure = await _fails_alone(client, handle, CANCELLED)
        assert "RaisedNotAnException" in repr(failure)

    # unfixed, the host's code was cancelled silently: nothing failed, the body stopped
    await _host_survives(make_worker, body,
                         workflows=[exotic_activity, exotic_workflow, exotic_healthy],
                         activities=[exotic_sync_step, exotic_async_step])


# -- code that cancels its own asyncio task (the embedding audit's last case, 12-08)

OWN_CANCEL = "cancelled its own task (asyncio's task.cancel() with no cancel scope asking)"


async def _cancel_own_task(then_await: bool) -> None:
    """``asyncio.current_task().cancel()``, then an await (the request lands
    in the code) or none (it is left for whatever awaits next: unfixed, the
    engine's own await after the code returned)."""
    import asyncio

    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    if then_await:
        await asyncio.sleep(0)


@activity.defn
async def own_cancel_then_await() -> int:
    await _cancel_own_task(True)
    return 1


@activity.defn
async def own_cancel_then_return() -> int:
    import asyncio

    asyncio.current_task().cancel()  # type: ignore[union-attr]
    return 1  # no await: a local attempt takes the synchronous lane


@workflow.defn
async def own_cancel_activity(then_await: bool, local: bool) -> int:
    step = own_cancel_then_await if then_await else own_cancel_then_return
    if local:
        return await workflow.execute_local_activity(step, options=ONCE)
    return await workflow.execute_activity(step, options=ONCE)


@workflow.defn
async def own_cancel_workflow(then_await: bool) -> int:
    await _cancel_own_task(then_await)
    return 1


@workflow.defn
class OwnCancelHandlers:
    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return 2

    @workflow.update
    async def change(self, then_await: bool) -> int:
        await _cancel_own_task(then_await)
        return 3

    @workflow.signal
    async def tell(self) -> None:
        await _cancel_own_task(True)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.query
    def peek(self) -> int:
        import asyncio

        asyncio.current_task().cancel()  # type: ignore[union-attr]
        return 4


async def _host_survives(make_worker: Any, body: Any, *, workflows: list[Any] | None = None,
                         activities: list[Any] | None = None) -> None:
    """Run `body` in a worker inside a host whose own task ticks beside it:
    the body must end, and the host's task must tick on after it."""
    ticks = 0
    body_done = False

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    try:
        async with anyio.create_task_group() as host:
            host.start_soon(tick)
            async with make_worker(
                    workflows=workflows or [own_cancel_activity, own_cancel_workflow,
                                            OwnCancelHandlers, exotic_healthy],
                    activities=activities or [own_cancel_then_await, own_cancel_then_return]):
                await body()
            seen = ticks
            await anyio.sleep(0.05)
            assert ticks > seen  # the host's own task was not cancelled
            body_done = True
            host.cancel_scope.cancel()
    finally:
        # unfixed, the ``async with Worker`` block raised CancelledError ("Cancelled
        # via cancel scope"): the run's task cancelled the worker's task group
        assert body_done, "the host's own code was cancelled by a run's code"


@pytest.mark.parametrize("then_await", [True, False], ids=["then-await", "then-return"])
@pytest.mark.parametrize("where", ["workflow", "local", "remote"])
async def test_code_cancelling_its_own_task_fails_its_run_not_the_host(
    client: durable.Client, make_worker: Any, anyio_backend: str, where: str,
    then_await: bool,
) -> None:
    """Workflow or activity code that calls ``asyncio.current_task().cancel()``
    cancelled the worker's task group and the host's own code with it (the
    request reached the code's next await, or, with none, the engine's):
    the run or attempt fails, saying what to use instead, and the worker
    serves the other runs."""
    if anyio_backend != "asyncio":
        pytest.skip("trio has no way to cancel a task outside a cancel scope")

    async def body() -> None:
        if where == "workflow":
            handle = await client.start(own_cancel_workflow, then_await,
                                        id=f"own-cancel-wf-{then_await}")
        else:
            handle = await client.start(own_cancel_activity, then_await, where == "local",
                                        id=f"own-cancel-{where}-{then_await}")
        failure = await _fails_alone(client, handle, OWN_CANCEL)
        text = repr(failure)
        assert "RaisedNotAnException" in text
        assert "handle.cancel() or request_cancellation()" in text

    await _host_survives(make_worker, body)


async def test_a_handler_cancelling_its_own_task_fails_its_update_or_run(
    client: durable.Client, make_worker: Any, anyio_backend: str
) -> None:
    """A query or an update handler that cancels its own task fails its query
    or update (the run goes on); a signal handler's fails the run; the host
    goes on."""
    if anyio_backend != "asyncio":
        pytest.skip("trio has no way to cancel a task outside a cancel scope")

    async def body() -> None:
        handle = await client.start(OwnCancelHandlers, id="own-cancel-handlers")
        with pytest.raises(durable.QueryFailed, match=re.escape(OWN_CANCEL)):
            await handle.query("peek")
        with pytest.raises(durable.UpdateFailed, match=re.escape(OWN_CANCEL)):
            await handle.update("change", True)
        assert (await handle.describe())["status"] == "running"
        await handle.signal("tell")
        await _fails_alone(client, handle, OWN_CANCEL)
        # one that returns before its request reaches it fails its update too (as
        # asyncio's task would end cancelled); unfixed, the request reached the
        # inbox's next await and the run's later signals were never handled
        other = await client.start(OwnCancelHandlers, id="own-cancel-handlers-return")
        with pytest.raises(durable.UpdateFailed, match=re.escape(OWN_CANCEL)):
            await other.update("change", False)
        await other.signal("finish")
        with anyio.fail_after(60):  # a hang guard
            assert await other.result() == 2

    await _host_survives(make_worker, body)


# -- a cleanup's steps leave the run's delivered cancellation alone

CLEANUP_COUNTS: list[tuple[str, int, int]] = []


@activity.defn
async def cleanup_at_once() -> int:
    return 1  # no await: the synchronous lane


@activity.defn
async def cleanup_that_waits() -> int:
    await anyio.lowlevel.checkpoint()
    return 2


@workflow.defn
async def cleans_up_under_a_shield() -> None:
    import asyncio

    try:
        await workflow.sleep(3600)
    except anyio.get_cancelled_exc_class():
        task = asyncio.current_task()
        assert task is not None
        with workflow.cancellation_shield():
            for step in (cleanup_at_once, cleanup_that_waits):
                before = task.cancelling()
                await workflow.execute_local_activity(step)
                CLEANUP_COUNTS.append((step.__name__, before, task.cancelling()))
        raise


async def test_cleanup_steps_under_a_shield_keep_the_runs_cancellation(
    client: durable.Client, make_worker: Any, anyio_backend: str
) -> None:
    """A shield hides the run's cancelled code scope from the effective
    deadline: read through it, the delivered cancellation looked like the
    code's own (decision (bd)), and a cleanup step withdrew it. The steps run,
    the request stays, the run closes cancelled."""
    if anyio_backend != "asyncio":
        pytest.skip("trio counts no cancel requests on its tasks")
    CLEANUP_COUNTS.clear()
    async with make_worker(workflows=[cleans_up_under_a_shield],
                           activities=[cleanup_at_once, cleanup_that_waits]):
        handle = await client.start(cleans_up_under_a_shield, id="cleanup-under-shield")
        with anyio.fail_after(60):  # a hang guard
            while "TimerScheduled" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.02)
            await handle.request_cancellation(reason="test")
            with pytest.raises(durable.WorkflowCancelled):
                await handle.result()
    assert [name for name, _, _ in CLEANUP_COUNTS] == ["cleanup_at_once", "cleanup_that_waits"]
    # the delivered request is still counted after each step (withdrawn: 0)
    assert all(before > 0 and after == before for _, before, after in CLEANUP_COUNTS), \
        CLEANUP_COUNTS
    completed = [e for e in await handle.history() if e.type == "ActivityCompleted"]
    assert len(completed) == 2
