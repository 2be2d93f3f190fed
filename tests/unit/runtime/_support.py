"""Helpers for the engine's unit tests: one run executed without a worker.

A `RunExecutor` is given what a worker would give it (`RunSetup`): here a
real in-memory store and the group committer over it, or a committer that
only records what it is asked. Wake-ups that carry an op's record are handed
to the run as the worker would (`route`), and time is virtual, so a test
says exactly when things happen.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from durable import JSONConverter, Limits, VirtualClock
from durable._registry import WorkflowDefn, workflow_defn_of
from durable._runtime.committer import Committer
from durable._runtime.context import RunSetup, Submitter
from durable._runtime.executor import RunExecutor
from durable.store import Store
from durable.store.records import CommitResult, OpRecord, RunRecord, RunStatus, StartRequest
from durable.store.writes import Write
from durable.wakes import Wake, WakeKind

T0 = 1_700_000_000.0
CAPS = ("cooperative_cancellation", "activity_supervision")


class Services:
    """What a run asks of its worker (`WorkerServices`)."""

    capabilities = CAPS

    def __init__(self, store: Any) -> None:
        self.store = store
        self.crash_points: list[str] = []

    async def known_activity_names(self) -> set[str]:
        return set()

    async def crash_point(self, point: str) -> None:
        self.crash_points.append(point)


class Recorder:
    """A committer that records what it is asked and accepts it (`Submitter`)."""

    def __init__(self, *, committed: bool = True) -> None:
        self.submitted: list[list[Write]] = []
        self.committed = committed

    async def submit(self, run_id: str, epoch: int, writes: list[Write],
                     quiet: bool = False) -> CommitResult:
        self.submitted.append(list(writes))
        return CommitResult(run_id, self.committed)


def setup(committer: Submitter, store: Any = None, clock: VirtualClock | None = None,
          **options: Any) -> RunSetup:
    return RunSetup(worker=Services(store), clock=clock or VirtualClock(T0),
                    converter=JSONConverter(), limits=options.pop("limits", Limits()),
                    committer=committer, **options)


def run_record(workflow_type: str, input: str = "[]", **fields: Any) -> RunRecord:
    """A run as a claim returns it, owned at epoch 1, for tests without storage."""
    values: dict[str, Any] = {
        "run_id": "r1", "workflow_id": "wf-1", "namespace": "default",
        "workflow_type": workflow_type, "task_queue": "default", "run_number": 1,
        "status": RunStatus.RUNNING, "input": input, "created_at": T0, "started_at": T0,
        "epoch": 1,
    }
    values.update(fields)
    return RunRecord(**values)


def executor(fn: Callable[..., Any], run: RunRecord, run_setup: RunSetup,
             ops: dict[str, OpRecord] | None = None,
             done: list[RunExecutor] | None = None) -> RunExecutor:
    defn = workflow_defn_of(fn)
    assert isinstance(defn, WorkflowDefn)
    return RunExecutor(run, dict(ops or {}), defn, run_setup,
                       (done if done is not None else []).append)


@asynccontextmanager
async def claimed(store: Store, fn: Callable[..., Any], *args: Any,
                  workflow_id: str = "wf-1", clock: VirtualClock | None = None,
                  **options: Any) -> AsyncIterator[RunExecutor]:
    """Start `fn` in the store, claim its run and build its executor over the
    store's group committer; op records the store publishes reach the run."""
    defn = workflow_defn_of(fn)
    assert isinstance(defn, WorkflowDefn)
    clock = clock or VirtualClock(T0)
    request = StartRequest(
        namespace="default", workflow_id=workflow_id, workflow_type=defn.name,
        task_queue=workflow_id, input=JSONConverter().encode(list(args), "args"),
        id_reuse="reject_duplicate", execution_timeout=options.pop("execution_timeout", None),
        run_timeout=None)
    await store.start_workflow(request, clock.now())
    [claim] = await store.claim_runs("default", workflow_id, "w1", (defn.name,), 1, 60.0,
                                     clock.now(), CAPS)
    run_setup = setup(Committer(store.commit, clock), store, clock, **options)
    ex = RunExecutor(claim.run, claim.ops, defn, run_setup, lambda _: None)
    unsubscribe = store.hub.subscribe(lambda wake: route(ex, wake))
    try:
        yield ex
    finally:
        unsubscribe()


def route(ex: RunExecutor, wake: Wake) -> None:
    """What a worker does with a wake-up for a run it executes."""
    if wake.kind is WakeKind.RUN and wake.subject == ex.run.run_id:
        if isinstance(wake.data, OpRecord):
            ex.ctx.resolve(wake.data)


async def run_to_end(ex: RunExecutor, clock: VirtualClock | None = None) -> None:
    """Execute the run; with a clock, move virtual time to each timer as the
    run waits for it, until the run's code has ended."""
    async with anyio.create_task_group() as tg:
        done = anyio.Event()

        async def execute() -> None:
            try:
                await ex.execute()
            finally:
                done.set()

        tg.start_soon(execute)
        while clock is not None and not done.is_set():
            await anyio.wait_all_tasks_blocked()
            due = clock.next_wakeup()
            if due is not None:
                clock.advance_to(due)
            else:  # a storage call in flight (its thread is not a task) or the end
                with anyio.move_on_after(0.005):
                    await done.wait()
        await done.wait()
