"""Task queues and the workers serving them, as an operator sees and steers them.

`client.list_workers()` (``durable workers``, ``/api/workers``) lists who
serves the namespace: identity, host, pid, build, queue, the code behind each
registered name, last seen, alive or gone, and what each holds. Queue limits
(`client.set_queue_limits`, ``durable queue``) are stored with the queue and
enforced by every worker's claims (`durable.store.queues`); see
docs/queues.md.
"""

from __future__ import annotations

from typing import Any, Protocol

from .clock import Clock
from .store import Store


class QueueControl(Protocol):
    """How a client reaches queues and workers: storage here, or HTTP."""

    async def list_workers(self) -> list[dict[str, Any]]:
        """The namespace's workers, alive first (`durable.store.workers.list_workers`)."""
        ...


class EmbeddedQueues:
    """Queues and workers over storage opened in this process."""

    def __init__(self, store: Store, namespace: str, clock: Clock) -> None:
        self.store = store
        self.namespace = namespace
        self.clock = clock

    async def list_workers(self) -> list[dict[str, Any]]:
        return await self.store.list_workers(self.namespace, self.clock.now())
