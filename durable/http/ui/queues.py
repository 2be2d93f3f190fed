"""The web UI's Workers and Queues pages (read-only).

Like every page (`pages.py`), each read goes through the API route's own
operation (`listWorkers`, `listTaskQueues`) with the visitor's role. Workers:
alive first, then gone (kept an hour), with what each serves and holds, and a
name that live workers of one queue register with different code flagged.
Queues: backlog, running of the limit, the oldest waiting run's age, rate
left, live workers, and each build serving the queue or named by its open
runs (`listTaskQueueBuildIds`), flagged when runs that other builds refused
wait for a build no live worker runs. Limits are set with ``durable queue set-limits`` or
``PUT /api/task-queues/{name}/limits``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ...present import loop_blocked_text, runs_released_text, utcnow
from .pages import Visitor

if TYPE_CHECKING:
    from .pages import WebUI


def clashes(workers: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """(queue, kind, name) that live workers of one queue register with different code."""
    seen: dict[tuple[str, str, str], set[str]] = {}
    for worker in workers:
        if not worker.get("alive"):
            continue
        for kind in ("workflows", "activities"):
            for name, d in ((worker.get("definitions") or {}).get(kind) or {}).items():
                seen.setdefault((str(worker["task_queue"]), kind, name), set()).add(
                    str(d.get("fingerprint")))
    return {key for key, prints in seen.items() if len(prints) > 1}


def limits_text(limits: Mapping[str, Any]) -> str:
    parts = []
    for key, label in (("max_running", "running"), ("max_running_per_key", "per key"),
                       ("max_running_activities", "activities")):
        if limits.get(key) is not None:
            parts.append(f"{label} ≤ {limits[key]}")
    for key, label in (("rate", "rate"), ("activity_rate", "activity rate")):
        if limits.get(key):
            parts.append(f"{label} {limits[key]['count']}/{limits[key]['per']:g}s")
    return ", ".join(parts) or "none"


class QueuePages:
    """The pages of `ui` (a `WebUI`) about workers and task queues."""

    def __init__(self, ui: WebUI) -> None:
        self.ui = ui

    def routes(self) -> list[BaseRoute]:
        page = self.ui._page
        return [
            Route("/ui/workers", page("/ui/workers", self.workers), methods=["GET"]),
            Route("/ui/queues", page("/ui/queues", self.queues), methods=["GET"]),
        ]

    async def workers(self, request: Request, visitor: Visitor) -> Response:
        live = (await self.ui.perform(request, visitor, "listWorkers", {}))[1]["workers"]
        stopped = (await self.ui.perform(request, visitor, "listWorkers",
                                         {"status": "stopped"}))[1]["workers"]
        stale = (await self.ui.perform(request, visitor, "listWorkers",
                                       {"status": "stale"}))[1]["workers"]
        found = list(live) + list(stale) + list(stopped)
        now = utcnow()
        return self.ui.render(request, visitor, "workers.html", items=found,
                              clashes=clashes(found),
                              loop_blocked=lambda blocked: loop_blocked_text(blocked, now),
                              released=lambda found: runs_released_text(found, now))

    async def queues(self, request: Request, visitor: Visitor) -> Response:
        _, listed = await self.ui.perform(request, visitor, "listTaskQueues", {})
        items = listed.get("task_queues") or []
        builds: dict[str, list[dict[str, Any]]] = {}
        for q in items:  # each queue's builds: who serves it, and runs waiting for a build
            _, rollout = await self.ui.perform(request, visitor, "listTaskQueueBuildIds",
                                               {"taskQueue": q["name"]})
            builds[q["name"]] = rollout["build_ids"]
        return self.ui.render(request, visitor, "queues.html", items=items, builds=builds,
                              limits_text=limits_text)
