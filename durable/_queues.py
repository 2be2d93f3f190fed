"""Task queues and the workers serving them, as an operator sees and steers them.

`client.list_workers()` (``durable workers``, ``/api/workers``) lists who
serves the namespace: identity, host, pid, build, queue, the code behind each
registered name, last seen, alive or gone, and what each holds. Queue limits
(`client.set_queue_limits`, ``durable queue``) are stored with the queue and
enforced by every worker's claims (`durable.store.queues`); see
docs/queues.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from . import _validate
from .clock import Clock
from .errors import ConfigurationError
from .options import Seconds
from .store import Store


class QueueControl(Protocol):
    """How a client reaches queues and workers: storage here, or HTTP."""

    async def list_workers(self) -> list[dict[str, Any]]:
        """The namespace's workers, alive first (`durable.store.workers.list_workers`)."""
        ...

    async def set_limits(self, name: str, limits: dict[str, Any]) -> None:
        """Store the queue's limits (`QueueLimits.to_dict`; empty: none)."""
        ...

    async def describe(self, name: str) -> dict[str, Any]:
        """Limits, running, waiting, oldest waiting age, rate left."""
        ...

    async def list(self) -> list[dict[str, Any]]:
        """`describe` of every queue known: limited, served, or holding open work."""
        ...

    async def builds(self, name: str) -> dict[str, Any]:
        """The queue's builds during a deploy (`durable._builds.rollout`)."""
        ...


class EmbeddedQueues:
    """Queues and workers over storage opened in this process."""

    def __init__(self, store: Store, namespace: str, clock: Clock) -> None:
        self.store = store
        self.namespace = namespace
        self.clock = clock

    async def list_workers(self) -> list[dict[str, Any]]:
        return await self.store.list_workers(self.namespace, self.clock.now())

    async def set_limits(self, name: str, limits: dict[str, Any]) -> None:
        await self.store.set_queue_limits(self.namespace, name, limits, self.clock.now())

    async def describe(self, name: str) -> dict[str, Any]:
        return await self.store.describe_queue(self.namespace, name, self.clock.now())

    async def list(self) -> list[dict[str, Any]]:
        return await self.store.list_queues(self.namespace, self.clock.now())

    async def builds(self, name: str) -> dict[str, Any]:
        return await self.store.queue_builds(self.namespace, name, self.clock.now())


@dataclass(frozen=True)
class Rate:
    """`count` starts per `per` seconds, across every worker: ``Rate(100, per=60)``."""

    count: int
    per: Seconds = 1.0

    def __post_init__(self) -> None:
        _validate.integer(self.count, "Rate count", minimum=1, maximum=1_000_000_000)
        object.__setattr__(self, "per", _validate.duration(self.per, "Rate per",
                                                           inclusive=False))

    def to_dict(self) -> dict[str, float]:
        return {"count": self.count, "per": _validate.duration(self.per, "Rate per")}


@dataclass(frozen=True, kw_only=True)
class QueueLimits:
    """How much of a task queue may run at once, across every worker and process.

    None means no limit. `max_running`: open runs of the queue held by a worker
    at once (a run waiting on a timer still holds its slot); `max_running_activities`:
    remote activity attempts running at once; `rate`: first starts of runs per
    period; `activity_rate`: attempts started per period; `max_running_per_key`:
    open runs per `StartOptions(concurrency_key=...)`. Stored with the queue,
    changeable at run time (`client.set_queue_limits`); worker-local limits
    (`max_concurrent_runs`, ...) still apply on top.
    """

    max_running: int | None = None
    max_running_activities: int | None = None
    rate: Rate | None = None
    activity_rate: Rate | None = None
    max_running_per_key: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_running", "max_running_activities", "max_running_per_key"):
            value = getattr(self, name)
            if value is not None:
                _validate.integer(value, f"QueueLimits.{name}", minimum=1, maximum=1_000_000_000)
        for name in ("rate", "activity_rate"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Rate):
                raise ConfigurationError(
                    f"QueueLimits.{name} must be a durable.Rate(count, per=seconds), "
                    f"got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """The stored form: only the limits that are set."""
        out: dict[str, Any] = {}
        for name in ("max_running", "max_running_activities", "max_running_per_key"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("rate", "activity_rate"):
            rate = getattr(self, name)
            if rate is not None:
                out[name] = rate.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueLimits:
        def rate(value: Any) -> Rate | None:
            return Rate(int(value["count"]), per=float(value["per"])) if value else None
        return cls(max_running=data.get("max_running"),
                   max_running_activities=data.get("max_running_activities"),
                   max_running_per_key=data.get("max_running_per_key"),
                   rate=rate(data.get("rate")), activity_rate=rate(data.get("activity_rate")))
