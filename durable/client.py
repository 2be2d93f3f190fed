"""The client: start workflows, await their results, inspect and control them.

A client owns one storage driver; a `Worker` built on the client shares it, so
that in one process a result is delivered by an in-memory wake-up the moment
it is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio

from ._registry import workflow_defn_of, workflow_name
from .cancellation import CancellationContext, CancellationRequestResult
from .clock import Clock, SystemClock
from .converter import JSONConverter, PayloadConverter, check_size
from .driver import Driver, HistoryEvent, RunRecord, StartRequest, Wake, driver_factory
from .errors import (
    ConfigurationError,
    NotRegistered,
    StructuralLimitExceeded,
    WorkflowNotFound,
    error_from_failure,
)
from .options import Limits, Seconds, StartOptions, to_seconds


class WorkflowHandle:
    """A workflow instance (its current run, or one given run)."""

    def __init__(self, client: Client, workflow_id: str, run_id: str | None = None,
                 result_hint: Any = None) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.run_id = run_id
        self._hint = result_hint

    def __repr__(self) -> str:
        return f"WorkflowHandle(workflow_id={self.workflow_id!r}, run_id={self.run_id!r})"

    async def _run(self, run_id: str | None = None) -> RunRecord:
        run = await self.client.driver.get_run(
            self.client.namespace, self.workflow_id, run_id or self.run_id
        )
        if run is None:
            raise WorkflowNotFound(
                f"no workflow {self.workflow_id!r}"
                + (f" run {self.run_id!r}" if self.run_id else "")
                + f" in namespace {self.client.namespace!r}"
            )
        return run

    async def result(self, *, follow_runs: bool = True) -> Any:
        """Wait for the workflow's result, following continue-as-new.

        Raises WorkflowFailed / WorkflowCancelled / WorkflowTimedOut /
        WorkflowTerminated when it does not complete.
        """
        run = await self._run()
        poll = 0.01
        while True:
            if run.status == "continued" and follow_runs and run.continued_run_id:
                run = await self._run(run.continued_run_id)
                continue
            if run.status == "completed":
                return self.client.converter.decode(run.result, self._hint)
            if not run.is_open and run.status != "continued":
                raise error_from_failure(run.failure or {"failure_category": run.status,
                                                         "message": run.status})
            if run.status == "continued":
                return None
            await self.client.wait_for_change(run.run_id, poll)
            poll = min(poll * 2, 0.5)
            run = await self._run(run.run_id)

    async def describe(self) -> dict[str, Any]:
        """The instance, its run, deadlines, pending operations and failures."""
        info = await self.client.driver.describe(self.client.namespace, self.workflow_id,
                                                 self.run_id)
        if info is None:
            raise WorkflowNotFound(f"no workflow {self.workflow_id!r} in "
                                   f"namespace {self.client.namespace!r}")
        return info

    async def history(self) -> list[HistoryEvent]:
        """The run's history events, in order."""
        run = await self._run()
        return await self.client.driver.history(run.run_id)

    async def request_cancellation(
        self,
        reason: str = "cancellation requested",
        *,
        cleanup_timeout: Seconds = 30,
        requester: dict[str, Any] | None = None,
        source: str = "client",
    ) -> CancellationRequestResult:
        """Ask the run to stop cooperatively: its cleanup code runs, bounded.

        The first request is accepted; a repeat returns the original identity
        and deadline (a different cleanup_timeout never extends the budget).
        Raises `CapabilityUnsupported` (recording nothing) when the worker
        holding the run cannot take cooperative cancellation.
        """
        seconds = to_seconds(cleanup_timeout, "cleanup_timeout")
        if seconds is None or seconds <= 0:
            raise ConfigurationError("cleanup_timeout must be greater than 0 seconds")
        accepted, record = await self.client.driver.request_cancellation(
            self.client.namespace, self.workflow_id, self.run_id, reason, seconds,
            requester, source, self.client.clock.now(),
        )
        return CancellationRequestResult(accepted, CancellationContext.from_record(record))

    async def retry_after_review(self) -> bool:
        """Replay a run that was marked for review (non-determinism), after a fix.

        Deploy code that replays the recorded history first; returns False when
        the run was not marked.
        """
        return await self.client.driver.clear_review(
            self.client.namespace, self.workflow_id, self.client.clock.now()
        )

    async def cancellation_cascade(self) -> dict[str, Any]:
        """What a cancellation did across the tree of runs, read from records alone."""
        return await self.client.driver.cancellation_cascade(
            self.client.namespace, self.workflow_id, self.run_id, self.client.clock.now()
        )

    async def cancel(self, reason: str = "cancelled") -> None:
        """Close the run at once as cancelled; no cleanup code runs."""
        await self.client.driver.close_run_externally(
            self.client.namespace, self.workflow_id, self.run_id, "cancelled", reason,
            self.client.clock.now(),
        )

    async def terminate(self, reason: str = "terminated") -> None:
        """Close the run at once as terminated, revoking all its authority."""
        await self.client.driver.close_run_externally(
            self.client.namespace, self.workflow_id, self.run_id, "terminated", reason,
            self.client.clock.now(),
        )


class Client:
    """Entry point for applications: start, await, list and control workflows."""

    def __init__(
        self,
        driver: Driver,
        *,
        namespace: str = "default",
        clock: Clock | None = None,
        converter: PayloadConverter | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.driver = driver
        self.namespace = namespace
        self.clock: Clock = clock or SystemClock()
        self.converter: PayloadConverter = converter or JSONConverter()
        self.limits = limits or Limits()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.driver.close()

    async def wait_for_change(self, run_id: str, at_most: float) -> None:
        """Wait until a wake-up names the run (or anything, cross-process), or timeout."""
        event = anyio.Event()

        def on_wake(wake: Wake) -> None:
            if wake.key[0] == "any" or (wake.key[0] == "run" and wake.key[1] == run_id):
                event.set()

        unsubscribe = self.driver.hub.subscribe(on_wake)
        try:
            with anyio.move_on_after(at_most):
                await event.wait()
        finally:
            unsubscribe()

    async def start(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        options: StartOptions | None = None,
        task_queue: str | None = None,
    ) -> WorkflowHandle:
        """Start a workflow instance; returns once the start is recorded."""
        options = options or StartOptions()
        wf_type = workflow_name(workflow)
        defn = workflow_defn_of(workflow)
        if defn is None and wf_type not in await self._registered_types():
            raise NotRegistered(
                f"unknown workflow {wf_type!r}: no @workflow.defn with this name is imported "
                "here and no worker has registered it; pass the workflow function or check "
                "the name"
            )
        if not isinstance(id, str) or not id:
            raise ValueError("workflow id must be a non-empty string")
        payload = self.converter.encode(list(args), f"the arguments of workflow {wf_type!r}")
        check_size(payload, self.limits.payload_bytes, f"the arguments of workflow {wf_type!r}")
        memo = None
        if options.memo:
            memo = self.converter.encode(options.memo, "the memo")
            if len(memo.encode()) > self.limits.memo_bytes:
                raise StructuralLimitExceeded("memo_bytes", len(memo.encode()),
                                              self.limits.memo_bytes)
        request = StartRequest(
            namespace=self.namespace, workflow_id=id, workflow_type=wf_type,
            task_queue=task_queue or options.task_queue or "default", input=payload,
            id_reuse=options.id_reuse.value, execution_timeout=options.execution_timeout,
            run_timeout=options.run_timeout, memo=memo,
        )
        await self.driver.start_workflow(request, self.clock.now())
        return WorkflowHandle(self, id, None, defn.return_hint if defn else None)

    async def execute(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        options: StartOptions | None = None,
        task_queue: str | None = None,
    ) -> Any:
        """Start a workflow and wait for its result."""
        handle = await self.start(workflow, *args, id=id, options=options, task_queue=task_queue)
        return await handle.result()

    def get_handle(self, workflow_id: str, *, run_id: str | None = None) -> WorkflowHandle:
        """A handle to an existing instance (its current run unless run_id is given)."""
        return WorkflowHandle(self, workflow_id, run_id)

    async def list(
        self, *, status: str | None = None, workflow_type: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Run summaries, newest first."""
        return await self.driver.list_runs(self.namespace, status, workflow_type, limit)

    async def repair_pass(self) -> dict[str, int]:
        """Enforce every deadline that is due now, once; counts by kind.

        Workers do this continuously in their watchdog; this one-shot pass is
        for operators and scripts (and works with no worker running).
        """
        return await self.driver.enforce_expired(self.namespace, self.clock.now())

    async def _registered_types(self) -> set[str]:
        types, _ = await self.driver.registered_names(self.namespace, self.clock.now())
        return types


class _Connecting:
    """What `connect()` returns: await it, or use it with ``async with``."""

    def __init__(self, url: str, kwargs: dict[str, Any], driver_options: dict[str, Any]) -> None:
        self._url = url
        self._kwargs = kwargs
        self._driver_options = driver_options
        self._client: Client | None = None

    async def _open(self) -> Client:
        factory = driver_factory(self._url)
        driver = factory(self._url, **self._driver_options)
        await driver.open()
        return Client(driver, **self._kwargs)

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Client:
        self._client = await self._open()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    url: str = "sqlite:///durable.db",
    *,
    namespace: str = "default",
    clock: Clock | None = None,
    converter: PayloadConverter | None = None,
    limits: Limits | None = None,
    **driver_options: Any,
) -> _Connecting:
    """Open storage at `url` (driver chosen by scheme) and return a client.

    ``async with durable.connect(url) as client:`` closes it at the end;
    ``client = await durable.connect(url)`` leaves closing to you.
    """
    return _Connecting(
        url,
        {"namespace": namespace, "clock": clock, "converter": converter, "limits": limits},
        driver_options,
    )
