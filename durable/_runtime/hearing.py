"""What a worker hears: the wake-ups that are its own, and those it asks for.

A worker claims from one task queue, so a wake-up naming another queue
(``RUNS``, ``ACTIVITIES``, ``REQUESTS``) is not its business: it claims
nothing on it (before, any queue's wake-up woke every worker's claim loop,
in this process and, through NOTIFY, in all the others). It also tells the
hub what it waits for from other processes (`durable.wakes.WakeHub.want`):
its queue's wake-ups, and those naming a run it executes. A driver that
addresses its notifications (PostgreSQL) then sends a run's wake-ups to the
process that holds the run and a queue's to the processes with a worker on
it, instead of to every process.

It also remembers the runs that an interaction (a signal, query or update)
named while no executor of ours had them: one may be ours, claimed a moment
ago (its claim read the run's counters before that interaction was
recorded), so the worker re-reads it when it starts executing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..wakes import Wake, WakeHub, WakeKind

#: an interaction noticed for a run we did not hold yet is remembered this long
EARLY_WINDOW = 5.0
#: and for at most this many runs at once
EARLY_REMEMBERED = 1000

_QUEUE_KINDS = (WakeKind.RUNS, WakeKind.ACTIVITIES, WakeKind.REQUESTS)


class Hearing:
    """A worker's subscription to its hub, and what it asks other processes for.

    `start(on_wake)` subscribes and says which of its queue's wake-ups it
    wants (``RUNS`` and ``REQUESTS`` if it runs workflows, ``ACTIVITIES`` if
    it runs activities); `hold(run_id)` / `drop(run_id)` say that it executes
    a run, or no more; `stop()` says it wants nothing more.
    """

    def __init__(self, hub: WakeHub, namespace: str, task_queue: str, *,
                 workflows: bool, activities: bool) -> None:
        self._hub = hub
        self._queue = (namespace, task_queue)
        self._keys = [key for key, wanted in (
            (Wake.runs(namespace, task_queue).key, workflows),
            (Wake.requests(namespace, task_queue).key, workflows),
            (Wake.activities(namespace, task_queue).key, activities)) if wanted]
        self._held: dict[str, Callable[[], None]] = {}
        self._stops: list[Callable[[], None]] = []
        self._early: dict[str, float] = {}

    def start(self, on_wake: Callable[[Wake], None],
              takes_activities: Callable[[], bool] | None = None,
              takes_runs: Callable[[], bool] | None = None) -> None:
        """Subscribe; `takes_activities` says when this worker claims alone the
        attempts a commit of this process makes ready on its queue
        (`WakeHub.claim_here`), `takes_runs` when it claims the starts
        addressed to this process (else the driver passes them on)."""
        self._stops = [self._hub.subscribe(on_wake), self._hub.want(self._keys)]
        if takes_activities is not None:
            key = Wake.activities(*self._queue).key
            self._stops.append(self._hub.claim_here(key, takes_activities))
        if takes_runs is not None:
            self._stops.append(self._hub.claim_here(Wake.runs(*self._queue).key, takes_runs))

    def stop(self) -> None:
        for stop in (*self._stops, *self._held.values()):
            stop()
        self._stops = []
        self._held = {}

    def concerns(self, wake: Wake) -> bool:
        """False for a wake-up naming another task queue (claiming on it
        would scan for nothing); True for everything else."""
        return wake.kind not in _QUEUE_KINDS or tuple(wake.key[1:]) == self._queue

    def hold(self, run_id: str) -> None:
        """This worker executes `run_id` now: its wake-ups come here too."""
        if run_id not in self._held:
            unwant = self._hub.want([Wake.run(run_id).key])
            executed = self._hub.execute_here(run_id)

            def drop() -> None:
                unwant()
                executed()

            self._held[run_id] = drop

    def drop(self, run_id: str) -> None:
        """This worker executes `run_id` no more."""
        unwant = self._held.pop(run_id, None)
        if unwant is not None:
            unwant()

    def remember_early(self, run_id: str) -> None:
        """Note an interaction for a run we run no executor for (yet), or that
        an executor stopped with the run open (what it heard went with it): an
        executor started here for the run soon after re-reads its counters."""
        now = time.monotonic()
        if len(self._early) >= EARLY_REMEMBERED:
            self._early = {r: t for r, t in self._early.items() if now - t < EARLY_WINDOW}
        self._early[run_id] = now

    def noticed_early(self, run_id: str) -> bool:
        """Whether an interaction named `run_id` shortly before we took it."""
        noticed = self._early.pop(run_id, None)
        return noticed is not None and time.monotonic() - noticed < EARLY_WINDOW
