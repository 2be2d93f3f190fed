"""A worker's presence in the registry: what it records about itself, and the
clashes it warns about.

Every worker records who it is (identity, host, pid, build), its queue and
the code behind each name it registers (`_registry.describe_definition`), at
start and at each lease renewal (its last-seen time), with what it saw
since (its event loop blocked, runs it put down under pressure), in the
same write; ``durable workers`` and ``/api/workers`` read it. When another
live worker of the same queue registers one of its names with different
code, both workers log a warning naming both definitions (once per name and
other worker): the newcomer at start, the other at its next renewal.
Either may run the name, so the wrong code would otherwise run silently.

It also records where a start may be addressed to the worker's process
(its driver's `durable.wakes.WakeHub.address`, PostgreSQL only): a starter
addresses a start's notification to one process among the live workers that
take the queue's runs (`durable_postgres.addressing`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import TYPE_CHECKING, Any

from ..store.records import DefinitionClash, WorkerRegistration

if TYPE_CHECKING:
    from .._registry import Registry
    from ..store import Store
    from .loop_watch import LoopWatch
    from .relief import Relief


class Presence:
    """Registers one worker and warns about definition clashes."""

    def __init__(self, store: Store, registry: Registry, *, worker_id: str, identity: str,
                 namespace: str, task_queue: str, capabilities: tuple[str, ...], log: Any,
                 build_id: str | None = None) -> None:
        self.store = store
        self.log = log
        self.started_at: float | None = None
        #: what the loop watch saw (`loop_watch.LoopWatch`), recorded at each renewal
        self.loop_watch: LoopWatch | None = None
        #: the runs it put down under pressure (`relief.Relief`), recorded likewise
        self.relief: Relief | None = None
        self._warned: set[tuple[str, str, str]] = set()
        #: the clashes warned about so far (for tests and describe)
        self.clashes: list[DefinitionClash] = []
        self._base = WorkerRegistration(
            worker_id=worker_id, namespace=namespace, task_queue=task_queue,
            workflow_types=tuple(sorted(registry.workflows)),
            activity_names=tuple(sorted(registry.activities)), capabilities=capabilities,
            identity=identity, host=socket.gethostname(), pid=os.getpid(), build_id=build_id,
            definitions=registry.describe(), address=store.hub.address)

    def registration(self, now: float) -> WorkerRegistration:
        watch = self.loop_watch
        blocks = None
        if watch is not None and watch.last_ended is not None:
            blocks = watch.last_ended.as_record(watch.count)
        released = self.relief.record(now) if self.relief is not None else None
        return dataclasses.replace(self._base, started_at=self.started_at, loop_blocks=blocks,
                                   runs_released=released)

    async def register(self, ttl: float, now: float) -> None:
        """Record (or refresh) the worker until `now + ttl`; warn about new clashes."""
        if self.started_at is None:
            self.started_at = now
        self.warn(await self.store.register_worker(self.registration(now), ttl, now))

    def warn(self, clashes: list[DefinitionClash]) -> None:
        for clash in clashes:
            key = (clash.kind, clash.name, clash.other_worker_id)
            if key in self._warned:
                continue
            self._warned.add(key)
            self.clashes.append(clash)
            self.log.warning("definition_clash", kind=clash.kind, name=clash.name,
                             task_queue=clash.task_queue, other_worker=clash.other_worker_id,
                             other_definition=clash.other, this_definition=clash.mine,
                             detail=clash.message())
