"""Whether a full worker's slots are all held by runs that only wait.

`Worker(max_concurrent_runs=N)` counts every run the worker holds, a run
that only waits (on a child workflow, a timer, a signal) as much as one that
runs. A parent that waits on its children keeps its slot: when waiting
parents fill every slot of every worker of their queue, their children are
never claimed, and nothing progresses (docs/deployment.md,
docs/design/decisions.md). Until a parked run can be released under
pressure, the worker says so: `SlotWatch.check` runs at each claim pass of
runs, and when the worker has no room, work was announced that it could not
take, and every run it holds waits, it logs ``worker_slots_all_waiting``
once; again only after that cleared.

Since a full worker puts down a run that only waits (`releasable`,
`durable._runtime.relief`), the warning is for when that cannot help: no
run it holds can be put down now (each waits with something of its own in
memory: a handler running, an inbox delivery to make, batched outcomes to
record), or the worker was told not to (``release_waiting_runs=False``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ..store.parked import RELEASABLE
from ..store.records import OpKind

if TYPE_CHECKING:
    from .executor import RunExecutor

#: a run parked on one of these is not only waiting: an attempt is in flight
_IN_FLIGHT = frozenset({OpKind.ACTIVITY, OpKind.LOCAL_ACTIVITY, OpKind.PHASE, OpKind.UNITS})

HINT = ("a parent waiting on its children holds its slot: raise max_concurrent_runs above "
        "the number of runs a tree keeps waiting at once, or run children on another "
        "task queue")


def waiting_on(executor: RunExecutor) -> set[str] | None:
    """The kinds of op a run waits on when it only waits (no workflow task runs,
    no commit or activity attempt is in flight), else None."""
    ctx = executor.ctx
    parking = ctx.parking
    if (not executor.code_started or parking.active > 0 or parking.committing
            or ctx.running_local or not parking.parked):
        return None
    kinds = set(parking.parked.values())
    return None if kinds & _IN_FLIGHT else kinds


def releasable(executor: RunExecutor) -> set[str] | None:
    """The kinds of op a run waits on when it can be put down now (its history
    replays all it has in memory), else None: it only waits, on children,
    timers and conditions alone, and nothing of its own is under way or kept
    for later (a signal or update handler running, an inbox delivery or
    request to serve, a cancellation being delivered, batched outcomes or
    markers not recorded yet, a stop)."""
    kinds = waiting_on(executor)
    if kinds is None or not kinds <= RELEASABLE:
        return None
    ctx = executor.ctx
    parking = ctx.parking
    if (executor.stop_reason is not None or ctx.hard_stop or ctx.closing or ctx.failing
            or ctx.broken is not None or ctx.delivering or ctx.deferred or ctx.batched
            or ctx.pending_counts["activity"] or ctx.running_handlers or parking.gated
            or parking.holding or parking.replay_delivery_pending
            or executor.delivery_lock.locked() or executor.delivering_cancellation
            or not executor.inbox_idle()):
        return None
    return kinds


def may_wait(executor: RunExecutor) -> bool:
    """Whether a run may come to only wait soon: it is not waiting on an
    attempt in flight (an activity, a local one, a phase or units) now."""
    return not (set(executor.ctx.parking.parked.values()) & _IN_FLIGHT
                or executor.ctx.running_local)


class SlotWatch:
    """One worker's watch over its run slots (see the module docstring);
    `release`: the worker puts down runs that only wait (`releasable`)."""

    def __init__(self, log: Any, limit: int, release: bool = False) -> None:
        self._log = log
        self._limit = limit
        self._release = release
        #: work was announced while the worker had no room (since it last had some)
        self.wanted = False
        #: the warning was logged and the condition has not cleared since
        self.warned = False

    def check(self, room: int, woken: bool, executors: Collection[RunExecutor],
              checking: int) -> None:
        """At a claim pass of runs: `room` left, `woken` by a wake-up (work was
        announced), the runs held (and `checking` more the upgrade gate replays)."""
        if room > 0:
            self.wanted = self.warned = False
            return
        self.wanted = self.wanted or woken
        if not self.wanted:
            return
        held = children = 0
        for executor in executors:
            kinds = waiting_on(executor)
            if kinds is None:
                self.warned = False
                return
            held += 1
            children += OpKind.CHILD in kinds
        if checking or not held or (self._release and any(
                releasable(executor) is not None for executor in executors)):
            self.warned = False  # (one can be put down: `relief` takes the work)
            return
        if not self.warned:
            self.warned = True
            self._log.warning("worker_slots_all_waiting", max_concurrent_runs=self._limit,
                              held_runs=held, waiting_on_children=children, hint=HINT)
