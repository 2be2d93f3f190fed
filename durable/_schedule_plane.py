"""The embedded schedule plane: a client's schedule requests as transactions on
local storage (`durable.schedules.ScheduleControl` for an embedded client).

A backfill may cover many fire times: it runs as a series of bounded
transactions (`durable.store.schedules.FIRES_PER_TX` fires each), so it never
holds the schedule's row for long; each fire is still recorded and started
in one transaction, and a backfill interrupted halfway can simply be asked
again (fire times that fired are left alone).
"""

from __future__ import annotations

import datetime
from typing import Any

from ._embedded import decode_cursor, encode_cursor
from ._visibility_query import parse as parse_query
from .clock import Clock
from .errors import ConfigurationError, ScheduleNotFound
from .schedules import ScheduleDefinition, ScheduleSpec
from .store import Store

#: the most fire times one backfill call may cover
MAX_BACKFILL_FIRES = 100_000


def _iso(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat()


class EmbeddedSchedules:
    """Schedules of one namespace over storage opened in this process."""

    def __init__(self, store: Store, namespace: str, clock: Clock) -> None:
        self.store = store
        self.namespace = namespace
        self.clock = clock

    async def create(self, schedule_id: str, definition: ScheduleDefinition) -> None:
        await self.store.create_schedule(self.namespace, schedule_id, definition,
                                         self.clock.now())

    async def describe(self, schedule_id: str) -> dict[str, Any]:
        info = await self.store.describe_schedule(self.namespace, schedule_id,
                                                 self.clock.now())
        if info is None:
            raise ScheduleNotFound(
                f"no schedule {schedule_id!r} in namespace {self.namespace!r}")
        return info

    async def list(self, limit: int, cursor: str | None = None, *, paused: bool | None = None,
                   workflow_type: str | None = None,
                   query: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        # newest first, paged on like the run list: the cursor is the
        # (created_at, schedule_id) of the page's last schedule
        after = decode_cursor(cursor) if cursor else None
        matching = [(p.column, p.value) for p in parse_query(query)] if query else []
        items, last = await self.store.list_schedules(
            self.namespace, limit, after, paused=paused, workflow_type=workflow_type,
            matching=matching, now=self.clock.now())
        return items, encode_cursor(last) if last is not None else None

    async def pause(self, schedule_id: str, note: str | None) -> None:
        await self.store.pause_schedule(self.namespace, schedule_id, note, self.clock.now())

    async def resume(self, schedule_id: str, note: str | None) -> None:
        await self.store.resume_schedule(self.namespace, schedule_id, note, self.clock.now())

    async def trigger(self, schedule_id: str, overlap: str | None) -> dict[str, Any]:
        return await self.store.trigger_schedule(self.namespace, schedule_id, overlap,
                                                 self.clock.now())

    async def backfill(self, schedule_id: str, start: float, end: float,
                       overlap: str | None) -> dict[str, Any]:
        info = await self.describe(schedule_id)
        spec = ScheduleSpec.from_dict(info["spec"])
        now = self.clock.now()
        count = 0
        for at in spec.fire_times(start, end):
            if at > now:
                # a fire time still to come, fired now, would take that
                # time's run id (the schedule's own fire then finds it fired
                # and starts nothing) and show a "last fired" in the future
                raise ConfigurationError(
                    f"a backfill makes up past fire times, and this range reaches "
                    f"{_iso(at)}, still to come (it is now {_iso(now)}): end the range "
                    "at or before now (a trigger fires now)")
            count += 1
            if count > MAX_BACKFILL_FIRES:
                raise ConfigurationError(
                    f"a backfill covers at most {MAX_BACKFILL_FIRES} fire times; this range "
                    "has more: split it into several backfills")
        results: list[dict[str, Any]] = []
        cursor: float | None = start
        while cursor is not None:
            batch, cursor = await self.store.backfill_schedule(
                self.namespace, schedule_id, cursor, end, overlap, self.clock.now())
            results.extend(batch)
        fresh = [r for r in results if not r.get("duplicate")]
        return {
            "schedule_id": schedule_id, "fires": len(results),
            "started": sum(r["outcome"] == "started" for r in fresh),
            "buffered": sum(r["outcome"] == "buffered" for r in fresh),
            "skipped": sum(r["outcome"] == "skipped" for r in fresh),
            "already_fired": len(results) - len(fresh),
            "results": results,
        }

    async def update(self, schedule_id: str, changes: dict[str, Any]) -> None:
        await self.store.update_schedule(self.namespace, schedule_id, changes,
                                         self.clock.now())

    async def delete(self, schedule_id: str) -> None:
        await self.store.delete_schedule(self.namespace, schedule_id)
