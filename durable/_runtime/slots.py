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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

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


class SlotWatch:
    """One worker's watch over its run slots (see the module docstring)."""

    def __init__(self, log: Any, limit: int) -> None:
        self._log = log
        self._limit = limit
        #: work was announced while the worker had no room (since it last had some)
        self.wanted = False
        #: the warning was logged and the condition has not cleared since
        self.warned = False

    def check(self, room: int, woken: bool, executors: Iterable[RunExecutor],
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
        if checking or not held:
            self.warned = False
            return
        if not self.warned:
            self.warned = True
            self._log.warning("worker_slots_all_waiting", max_concurrent_runs=self._limit,
                              held_runs=held, waiting_on_children=children, hint=HINT)
