"""The embedded control plane: a client's requests as transactions on local storage.

This is what `durable.connect("sqlite:///...")` or ``"postgresql://..."``
gives a client: every request is one domain transaction on the storage the
client opened, and waiting for a result listens to the driver's wake-ups
(in-process at once, from other processes through the driver's watch).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import anyio

from .clock import Clock
from .control import Page, RunState
from .driver import Wake
from .errors import ConfigurationError, WorkflowNotFound
from .store import Store
from .store.records import HistoryEvent, RunRecord, StartRequest, StartResult


def encode_cursor(key: tuple[float, str]) -> str:
    """An opaque page cursor: the (created_at, run_id) of a page's last row."""
    return base64.urlsafe_b64encode(f"{key[0]!r}|{key[1]}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        created, run_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return float(created), run_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"cursor {cursor!r} is not one this server returned; pass the `next_cursor` "
            "of the previous page, or none for the first page"
        ) from exc


def _state(run: RunRecord) -> RunState:
    failure = run.failure.to_dict() if run.failure is not None else None
    return RunState(run.run_id, run.status, run.result, failure, run.continued_run_id)


class EmbeddedControl:
    """A `ControlPlane` over storage opened in this process."""

    def __init__(self, store: Store, namespace: str, clock: Clock, *,
                 owns_driver: bool = True) -> None:
        self.store = store
        self.namespace = namespace
        self.clock = clock
        self._owns_driver = owns_driver

    def for_namespace(self, namespace: str) -> EmbeddedControl:
        return EmbeddedControl(self.store, namespace, self.clock, owns_driver=False)

    async def start(self, request: StartRequest) -> StartResult:
        return await self.store.start_workflow(request, self.clock.now())

    async def _run(self, workflow_id: str, run_id: str | None) -> RunRecord | None:
        return await self.store.get_run(self.namespace, workflow_id, run_id)

    async def run_state(self, workflow_id: str, run_id: str | None) -> RunState | None:
        run = await self._run(workflow_id, run_id)
        return None if run is None else _state(run)

    async def await_run(self, workflow_id: str, run_id: str, wait: float) -> RunState:
        changed = anyio.Event()

        def on_wake(wake: Wake) -> None:
            if wake.key[0] == "any" or (wake.key[0] == "run" and wake.key[1] == run_id):
                changed.set()

        unsubscribe = self.store.hub.subscribe(on_wake)
        # Another process's commit wakes us only while something watches the
        # driver (a worker does); without one, a bounded poll finds it.
        poll = 0.01
        try:
            with anyio.move_on_after(wait):
                while True:
                    run = await self._run(workflow_id, run_id)
                    if run is None:
                        raise WorkflowNotFound(
                            f"no run {run_id!r} of workflow {workflow_id!r} in namespace "
                            f"{self.namespace!r}"
                        )
                    if not run.is_open:
                        return _state(run)
                    # a wake-up that arrived during the read is not lost: the
                    # event stays set until we start waiting again
                    with anyio.move_on_after(poll):
                        await changed.wait()
                    changed = anyio.Event()
                    poll = min(poll * 2, 0.5)
        finally:
            unsubscribe()
        run = await self._run(workflow_id, run_id)
        if run is None:
            raise WorkflowNotFound(f"no run {run_id!r} of workflow {workflow_id!r}")
        return _state(run)

    async def describe(self, workflow_id: str, run_id: str | None) -> dict[str, Any] | None:
        return await self.store.describe(self.namespace, workflow_id, run_id)

    async def history(
        self, workflow_id: str, run_id: str | None, *, after_sequence: int = 0,
        limit: int | None = None,
    ) -> list[HistoryEvent]:
        run = await self._run(workflow_id, run_id)
        if run is None:
            raise WorkflowNotFound(_not_found(workflow_id, run_id, self.namespace))
        return await self.store.history(run.run_id, after_sequence, limit)

    async def request_cancellation(
        self, workflow_id: str, run_id: str | None, *, reason: str, cleanup_timeout: float,
        requester: dict[str, Any] | None, source: str,
    ) -> tuple[bool, dict[str, Any]]:
        return await self.store.request_cancellation(
            self.namespace, workflow_id, run_id, reason, cleanup_timeout, requester, source,
            self.clock.now(),
        )

    async def close_run(self, workflow_id: str, run_id: str | None, *, status: str,
                        reason: str) -> None:
        await self.store.close_run_externally(
            self.namespace, workflow_id, run_id, status, reason, self.clock.now()
        )

    async def cancellation_cascade(self, workflow_id: str, run_id: str | None) -> dict[str, Any]:
        return await self.store.cancellation_cascade(
            self.namespace, workflow_id, run_id, self.clock.now()
        )

    async def clear_review(self, workflow_id: str, *, units: str | None = None) -> bool:
        return await self.store.clear_review(self.namespace, workflow_id, self.clock.now(),
                                             units)

    async def list_runs(self, *, status: str | None, workflow_type: str | None, limit: int,
                        cursor: str | None) -> Page:
        before = decode_cursor(cursor) if cursor else None
        items, next_key = await self.store.list_runs(
            self.namespace, status, workflow_type, limit, before
        )
        return Page(items, encode_cursor(next_key) if next_key is not None else None)

    async def repair_pass(self) -> dict[str, int]:
        return await self.store.enforce_expired(self.namespace, self.clock.now())

    async def registered_types(self) -> set[str]:
        types, _ = await self.store.registered_names(self.namespace, self.clock.now())
        return types

    async def close(self) -> None:
        if self._owns_driver:
            await self.store.driver.close()


def _not_found(workflow_id: str, run_id: str | None, namespace: str) -> str:
    run = f" run {run_id!r}" if run_id else ""
    return f"no workflow {workflow_id!r}{run} in namespace {namespace!r}"
