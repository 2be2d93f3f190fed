"""Retention: closed runs older than their namespace keeps them are deleted.

How long a namespace keeps closed runs is its stored setting
(`client.set_retention(namespace, days=...)`), else the `retention` of the
workers serving it (`Worker(..., retention=timedelta(days=30))`); with
neither, nothing is deleted. Every such worker runs `RetentionKeeper` (one per
storage and namespace in a process): a pass deletes, batch after batch of
small transactions (`durable.store.retention`), every run closed before
``now - retention``, then sleeps until the next pass on the engine's clock.
`prune` is the same pass on demand (`client.prune()`, ``durable prune``).
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from ._duties import Duty
from .clock import Clock, to_iso
from .store import Store
from .wakes import Wake

#: runs a report lists at most (the counts cover them all)
LISTED_RUNS = 1000
#: a pass runs at least this often (seconds on the engine's clock) ...
LONGEST_PAUSE = 3600.0
#: ... and at most every 1/PASSES_PER_PERIOD of the retention period
PASSES_PER_PERIOD = 24
#: real seconds between looks at the namespace's setting while none applies
SETTING_POLL = 60.0


async def prune(store: Store, namespace: str, cutoff: float, now: float, *,
                dry_run: bool = False) -> dict[str, Any]:
    """Delete (`dry_run`: only list) the namespace's runs closed before `cutoff`,
    in small transactions; what was (or would be) deleted."""
    report: dict[str, Any] = {"namespace": namespace, "cutoff": to_iso(cutoff),
                              "dry_run": dry_run, "runs": [], "runs_deleted": 0,
                              "deleted": {}}
    if dry_run:
        runs = await store.expired_runs(namespace, cutoff, LISTED_RUNS)
        report["runs"] = runs
        report["runs_expired"] = await store.count_expired_runs(namespace, cutoff)
        return report
    deleted: dict[str, int] = report["deleted"]
    while True:
        batch = await store.prune_runs(namespace, cutoff, now)
        if not batch.rows and not batch.runs:
            break
        for table, n in batch.rows.items():
            deleted[table] = deleted.get(table, 0) + n
        report["runs_deleted"] += len(batch.runs)
        room = LISTED_RUNS - len(report["runs"])
        report["runs"].extend(batch.runs[:max(room, 0)])
        await anyio.lowlevel.checkpoint()  # between transactions: the others' turn
    if deleted:
        await store.reclaim_space()
    return report


class RetentionControl(Protocol):
    """How a client reaches retention: storage in this process, or HTTP."""

    async def set(self, namespace: str, seconds: float | None) -> None:
        """Store how long `namespace` keeps closed runs (None: clear it)."""
        ...

    async def get(self, namespace: str) -> dict[str, Any]:
        """The stored setting and what retention deleted so far."""
        ...

    async def prune(self, older_than: float, dry_run: bool) -> dict[str, Any]:
        """Delete (or list) this namespace's runs closed `older_than` seconds ago."""
        ...


class EmbeddedRetention:
    """Retention settings and pruning over storage opened in this process."""

    def __init__(self, store: Store, namespace: str, clock: Clock) -> None:
        self.store = store
        self.namespace = namespace
        self.clock = clock

    async def set(self, namespace: str, seconds: float | None) -> None:
        await self.store.set_retention(namespace, seconds, self.clock.now())

    async def get(self, namespace: str) -> dict[str, Any]:
        return await self.store.retention_settings(namespace)

    async def prune(self, older_than: float, dry_run: bool) -> dict[str, Any]:
        now = self.clock.now()
        return await prune(self.store, self.namespace, now - older_than, now, dry_run=dry_run)


class RetentionKeeper(Duty):
    """A worker's share of retention (see the module docstring)."""

    name = "retention"

    def __init__(self, store: Store, clock: Clock, namespace: str, retention: float | None, *,
                 poll_interval: float, worker_id: str) -> None:
        super().__init__(store, clock, namespace, poll_interval=poll_interval,
                         worker_id=worker_id)
        self.retention = retention
        self._changed = anyio.Event()
        #: rows this worker's passes deleted, by table
        self.deleted: dict[str, int] = {}

    def _on_wake(self, wake: Wake) -> None:
        if wake == Wake.retention(self.namespace):
            self._changed.set()

    async def _loop(self) -> None:
        while True:
            stored = (await self.store.retention_settings(self.namespace))["retention_seconds"]
            keep = stored if stored is not None else self.retention
            if keep is None:  # nothing to keep short: wait for a setting (another
                # process's change comes as a wake-up on PostgreSQL, by polling on SQLite)
                with anyio.move_on_after(max(self.poll_interval, SETTING_POLL)):
                    await self._pause(None)
                continue
            now = self.clock.now()
            report = await prune(self.store, self.namespace, now - keep, now)
            if report["runs_deleted"]:
                for table, n in report["deleted"].items():
                    self.deleted[table] = self.deleted.get(table, 0) + n
                self.log.info("retention_pruned", runs=report["runs_deleted"],
                              rows=report["deleted"], cutoff=report["cutoff"])
            await self._pause(now + min(max(keep / PASSES_PER_PERIOD, 1.0), LONGEST_PAUSE))

    async def _pause(self, until: float | None) -> None:
        """Until `until` on the engine's clock (a background wait: virtual time
        never skips ahead for it) or a change of the namespace's setting."""
        async with anyio.create_task_group() as race:

            async def clock() -> None:
                assert until is not None
                await self.clock.sleep_until(until, background=True)
                race.cancel_scope.cancel()

            async def changed() -> None:
                await self._changed.wait()
                race.cancel_scope.cancel()

            if until is not None:
                race.start_soon(clock)
            race.start_soon(changed)
        self._changed = anyio.Event()
