"""Every worker fires its namespace's schedules.

The scheduler is a loop a `Worker` runs beside its others: read when the
namespace's next fire is due, sleep until then on the engine's clock (so
schedules fire on `TimeSkippingEnvironment`'s virtual clock too), and fire
what is due in one transaction (`durable.store.schedules.fire_due`). Any
number of workers in any number of processes may do it at once: a fire is
recorded and its run started in the transaction that locks the schedule's
row, so each fire starts one run. Within one process, one worker per
storage and namespace fires (the others stand by and take over when it
stops), so that they do not queue on the same rows.

Wake-ups re-plan the sleep: ``("schedules", namespace)`` when a schedule is
created or changed; ``("schedules", namespace, "closed")`` when a run a
schedule started closes (a buffered fire may start now: looked at only while
some fire waits); ``("any",)`` when another process committed something. A
fallback poll covers a lost wake-up.
"""

from __future__ import annotations

from typing import Any

import anyio

from ._duties import Duty
from .clock import Clock
from .store import Store
from .wakes import Wake, WakeKind

#: schedules one transaction fires at most (more due: the next transaction, at once)
FIRE_BATCH = 100
#: real seconds to wait before looking again when what is due is being fired
#: by another process (its rows are locked: PostgreSQL's SKIP LOCKED passed them)
LOCKED_BACKOFF = 0.02


class Scheduler(Duty):
    """Fires the schedules of a worker's namespace (see the module docstring)."""

    name = "scheduler"

    def __init__(self, store: Store, clock: Clock, namespace: str, *, poll_interval: float,
                 worker_id: str) -> None:
        super().__init__(store, clock, namespace, poll_interval=poll_interval,
                         worker_id=worker_id)
        self._woken = anyio.Event()
        #: a run of a schedule closed (or another process committed): buffered
        #: fires may start now
        self._recheck_waiting = True
        #: some schedule has fires waiting for a run to close (as last read)
        self._waiting = False
        #: fires this scheduler recorded, by outcome, and fire times it passed over
        self.counts: dict[str, int] = {}

    def _on_wake(self, wake: Wake) -> None:
        if wake.kind is WakeKind.ANY or (wake.kind is WakeKind.SCHEDULES
                                         and wake.subject == self.namespace):
            self._recheck_waiting = True
            # a closed run matters only to fires waiting for one; a change, always
            if wake != Wake.schedule_run_closed(self.namespace) or self._waiting:
                self._woken.set()

    async def _loop(self) -> None:
        due, self._waiting = await self.store.next_schedule_due(self.namespace)
        while True:
            now = self.clock.now()
            recheck = self._waiting and self._recheck_waiting
            if (due is not None and due <= now) or recheck:
                self._recheck_waiting = False
                fired = await self.store.fire_schedules(self.namespace, now, FIRE_BATCH, recheck)
                self._note(fired.fires, fired.missed)
                due, self._waiting = fired.next_due, fired.waiting
                if fired.more:
                    await anyio.lowlevel.checkpoint()
                    continue
                if due is not None and due <= now and not fired.fires and not fired.missed:
                    # due, yet nothing fired: another process holds those schedules
                    await self._sleep(None, LOCKED_BACKOFF)
                    due, self._waiting = await self.store.next_schedule_due(self.namespace)
                    continue
            await self._sleep(due, self.poll_interval)
            if self.clock.now() < (due if due is not None else float("inf")):
                # woken early (a change, a close) or the fallback poll: look again
                due, self._waiting = await self.store.next_schedule_due(self.namespace)

    async def _sleep(self, until: float | None, at_most: float) -> bool:
        """Sleep until `until` on the engine's clock, a wake-up, or `at_most`
        real seconds; whether a wake-up came."""
        woken = False
        async with anyio.create_task_group() as race:

            async def clock() -> None:
                assert until is not None
                await self.clock.sleep_until(until)
                race.cancel_scope.cancel()

            async def wake() -> None:
                nonlocal woken
                with anyio.move_on_after(at_most):
                    await self._woken.wait()
                    woken = True
                race.cancel_scope.cancel()

            if until is not None:
                race.start_soon(clock)
            race.start_soon(wake)
        self._woken = anyio.Event()
        return woken

    def _note(self, fires: list[dict[str, Any]], missed: int) -> None:
        for fire in fires:
            self.counts[fire["outcome"]] = self.counts.get(fire["outcome"], 0) + 1
            if fire["outcome"] == "skipped":
                self.log.info("schedule_fire_skipped", schedule_id=fire["schedule_id"],
                              scheduled_at=fire["scheduled_at"], reason=fire["reason"])
            else:
                self.log.debug("schedule_fired", schedule_id=fire["schedule_id"],
                               scheduled_at=fire["scheduled_at"], outcome=fire["outcome"],
                               workflow_id=fire["workflow_id"])
        if missed:
            self.counts["missed"] = self.counts.get("missed", 0) + missed
            self.log.info("schedule_fires_missed", count=missed,
                          hint="fire times older than their schedule's catchup_window when a "
                               "worker got to them count as skipped")
