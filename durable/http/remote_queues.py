"""Workers and task queues on the wire, for the remote client.

`RemoteQueues` is a `durable._queues.QueueControl` over HTTP: it reads
``/api/workers`` and ``/api/task-queues`` (the reference engine's shapes,
`durable.http.queues`) and gives back the dicts an embedded client returns,
so ``client.list_workers()``, ``describe_queue``, ``list_queues`` and
``set_queue_limits`` behave the same whichever way a client is connected.
"""

from __future__ import annotations

from typing import Any

from .paths import quote_segment
from .remote_schedules import RemoteControl

_QUEUE_KEYS = ("name", "namespace", "limits", "runs", "activities", "workers", "updated_at",
               "idle", "queues_in_use")
_ROLLOUT_KEYS = ("namespace", "task_queue", "stale_after_seconds", "build_ids")


def worker_from_wire(w: dict[str, Any]) -> dict[str, Any]:
    """A worker of ``/api/workers`` as `client.list_workers()` returns it."""
    return {
        "worker_id": w["worker_id"], "identity": w["identity"], "host": w["host"],
        "pid": w["pid"], "build_id": w["build_id"], "task_queues": [w["task_queue"]],
        "workflows": w["supported_workflow_types"],
        "activities": w["supported_activity_types"], "definitions": w["definitions"],
        "capabilities": w["capabilities"], "started_at": w["registered_at"],
        "last_seen_at": w["last_heartbeat_at"], "expires_at": w["heartbeat_expires_at"],
        "stopped_at": w["stopped_at"], "alive": w["alive"],
        "status": "alive" if w["alive"] else "gone", "runs_held": w["runs_held"],
        "activities_held": w["activities_held"],
        "loop_blocked": w.get("loop_blocked"),  # (absent from an older server)
        "runs_released": w.get("runs_released"),  # (likewise)
    }


class RemoteQueues:
    """`QueueControl` over HTTP (``/api/workers``, ``/api/task-queues``)."""

    def __init__(self, control: RemoteControl) -> None:
        self.control = control

    async def list_workers(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for status in (None, "stale", "stopped"):  # alive first, then gone
            _, data = await self.control._call(
                "GET", "/api/workers", params={"status": status} if status else None)
            found.extend(worker_from_wire(w) for w in data["workers"])
        return found

    async def set_limits(self, name: str, limits: dict[str, Any]) -> None:
        await self.control._call("PUT", f"/api/task-queues/{quote_segment(name)}/limits",
                                 body=limits)

    async def describe(self, name: str) -> dict[str, Any]:
        _, data = await self.control._call("GET", f"/api/task-queues/{quote_segment(name)}")
        found = {k: data[k] for k in _QUEUE_KEYS if k in data}
        if isinstance(data.get("current_leases"), list):  # as the embedded describe has them
            found["leases"] = data["current_leases"]
        return found

    async def list(self) -> list[dict[str, Any]]:
        _, data = await self.control._call("GET", "/api/task-queues")
        return [{k: q[k] for k in _QUEUE_KEYS if k in q} for q in data["task_queues"]]

    async def builds(self, name: str) -> dict[str, Any]:
        _, data = await self.control._call(
            "GET", f"/api/task-queues/{quote_segment(name)}/build-ids")
        return {k: data[k] for k in _ROLLOUT_KEYS}
