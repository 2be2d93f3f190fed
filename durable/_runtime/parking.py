"""Where a run's workflow tasks are, which decides where a delivery is made.

A workflow task either runs (`Parking.active` counts them) or waits: parked
on a durable op (`park`; the op may be part of a delivery boundary), or
blocked on other tasks (`block`; a task group's end, a handle). When none
runs the run is *quiet*, and the ops its tasks are parked on
(`frontier()`) are where a cooperative cancellation, a signal or an update
is delivered. The delivery records that frontier, so that replay makes it
again at the same place (docs/design/decisions.md, (d) and (h)).

While a delivery is made the *gate* is closed: a task whose op completes
meanwhile stays at it (`hold`) until the handler has run. On replay, a task
reaching an op named in a recorded delivery's frontier waits there too
(`holding`), and an op the live run interrupted is interrupted again
(`must_block`); the recorded cancellation is re-delivered once every op of
its boundary is parked, after the same deliveries as before
(`check_redelivery`).

This module knows nothing of ops, storage or the executor: the run's
context tells it what to do when a task stops running (`on_stop`), when the
run becomes quiet (`on_quiet`) and when a cancellation is due again
(`redeliver`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from time import monotonic

import anyio

from ..store.records import OpRecord


class Parking:
    """One run's tasks: running, parked on ops, held by the delivery gate."""

    def __init__(self, *, on_stop: Callable[[], None], on_quiet: Callable[[], None],
                 redeliver: Callable[[], None]) -> None:
        self._on_stop = on_stop
        self._on_quiet = on_quiet
        self._redeliver = redeliver
        self.active = 0  # workflow tasks running now
        #: when the run last became quiet (the process's monotonic time): a full
        #: worker puts down the least recently active first (`durable._runtime.relief`)
        self.quiet_since = 0.0
        #: commits of the run's writes awaited now (an op's schedule, a child's
        #: start): a task awaiting one runs, but waits on storage, not on
        #: something that would not replay (`quiet_verdict`)
        self.committing = 0
        self.parked: dict[str, str] = {}  # op id -> kind, for every task parked on an op
        self._quiet: anyio.Event | None = None  # see `quiet` (made when someone waits)
        self.deliveries = 0  # signals and updates delivered to the code so far
        self.gated = False  # a delivery is being made: tasks stay at their ops
        self.released = anyio.Event()  # set (and replaced) when held tasks may move on
        self.holding: dict[str, int] = {}  # op id -> replayed deliveries still due there
        # replay of a delivered cancellation: its boundary, and how many signal or
        # update deliveries it came after
        self.replay_boundary: set[str] = set()
        self.replay_delivery_pending = False
        self.cancel_after = 0

    def detach(self) -> None:
        """The run is done: forget its callbacks (bound methods of its context
        and executor), so the context and this do not keep each other alive in
        a reference cycle only a full garbage collection frees."""
        self._on_stop = self._on_quiet = self._redeliver = _nothing

    def expect_redelivery(self, boundary: Iterable[str], after: int) -> None:
        """History delivered a cancellation at `boundary` after `after` deliveries:
        replay delivers it again there."""
        self.replay_boundary = set(boundary)
        self.replay_delivery_pending = True
        self.cancel_after = after

    # -- tasks -----------------------------------------------------------------

    def task_started(self) -> None:
        self.active += 1
        self._check_quiet()

    def task_finished(self) -> None:
        self.active -= 1
        self._check_quiet()
        self._on_stop()

    def park(self, op_id: str, kind: str) -> None:
        """The calling task now waits on a durable op (a possible delivery boundary)."""
        self.parked[op_id] = kind
        self.active -= 1
        self._check_quiet()
        self._on_stop()
        self.check_redelivery()

    def unpark(self, op_id: str) -> None:
        self.parked.pop(op_id, None)
        self.active += 1
        self._check_quiet()

    def block(self) -> None:
        """The calling task waits for other workflow tasks (a task group's end, a
        handle): it is not running, and it is not at a delivery boundary either."""
        self.active -= 1
        self._check_quiet()
        self._on_stop()

    def unblock(self) -> None:
        self.active += 1
        self._check_quiet()

    @property
    def quiet(self) -> anyio.Event:
        """Set while no workflow task runs (every one waits on a durable op).

        Made on demand: tasks park and unpark at every op, and only a delivery
        ever waits for quiet, so the event is not replaced at each op.
        """
        if self._quiet is None:
            self._quiet = anyio.Event()
            if self.active <= 0:
                self._quiet.set()
        return self._quiet

    def _check_quiet(self) -> None:
        if self.active <= 0:
            self.quiet_since = monotonic()
            if self._quiet is not None:
                self._quiet.set()
            self._on_quiet()
        elif self._quiet is not None and self._quiet.is_set():
            self._quiet = None

    def frontier(self) -> list[dict[str, str]]:
        """Where every workflow task waits now: the ops of a delivery's frontier."""
        return [{"op_id": op_id, "kind": kind} for op_id, kind in sorted(self.parked.items())]

    # -- the delivery gate -------------------------------------------------------

    def must_hold(self, op_id: str) -> bool:
        return self.gated or op_id in self.holding

    async def hold(self, op_id: str, kind: str, *, parked: bool) -> None:
        """Stay at op `op_id` while a delivery is being made, or (replay) until
        the deliveries recorded there have been made again."""
        if not parked:
            self.park(op_id, kind)
        try:
            while self.gated or op_id in self.holding:
                await self.released.wait()
        finally:
            if not parked:
                self.unpark(op_id)

    def close_gate(self) -> None:
        self.gated = True

    def open_gate(self) -> None:
        self.gated = False
        self.release_held()

    def release_held(self) -> None:
        """Let tasks held at their ops look again (a delivery was made)."""
        released, self.released = self.released, anyio.Event()
        released.set()

    # -- replaying a delivered cancellation ----------------------------------------

    def must_block(self, record: OpRecord | None, op_id: str) -> bool:
        """Replay interrupts an op again where the live run interrupted it."""
        if record is not None and record.interrupted:
            return True
        return self.replay_delivery_pending and op_id in self.replay_boundary

    def check_redelivery(self) -> None:
        """Re-deliver a recorded cancellation once replay reaches its boundary
        (after the same signals and updates as when it was delivered)."""
        if (self.replay_delivery_pending and self.deliveries >= self.cancel_after
                and self.replay_boundary <= self.parked.keys()):
            self.redeliver()

    def redeliver(self) -> None:
        """Deliver the recorded cancellation again now (once)."""
        self.replay_delivery_pending = False
        self._redeliver()


def _nothing() -> None:
    """A detached parking's callbacks (the run is done)."""
