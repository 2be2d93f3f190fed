"""A full worker puts down runs that only wait, to take ready work in their slots.

`Worker(max_concurrent_runs=N)` counts the runs a worker holds in memory,
and a run holds its slot while it only waits. Parents awaiting children on
their own task queue could fill every slot of every worker, and nothing
progressed (docs/design/decisions.md (ak)). Now, under pressure only, a
worker hands such a run back (decision (am)):

- *when*: at a claim pass, the worker has no room, work was announced that
  it could not take (`SlotWatch.wanted`), and it holds runs that can be put
  down (`slots.releasable`: every task parked on a child, a timer or a
  condition, nothing of their own under way);
- *how many*: it first claims up to as many ready runs as it could put
  down (so it never puts one down for work another worker took first),
  then puts down one run per run claimed, the least recently active first
  (`Parking.quiet_since`); if fewer can be put down by then (one woke
  meanwhile), it hands the surplus back at once, unstarted;
- *how*: each chosen executor is stopped (it records nothing more), and
  once they ended one transaction (`Store.release_parked`) hands them
  back, each claimable again only once something it waits on happened: a
  child closes, a timer falls due, a signal, an update or a cancellation
  arrives (`durable.store.parked`, which also sees one that arrived
  meanwhile). Whoever claims it then replays its history, as after a
  restart; its history says nothing of the release.

A run put down on a timer is claimable at the timer's instant, which no
commit announces: the watchdog of the worker that put it down wakes then
(`next_due`), pokes its claim loop and tells the other processes of the
queue where the driver can (`announce`: PostgreSQL); elsewhere (MariaDB)
they find it at their fallback poll. If the hand-back fails (storage), the run is handed back the
way a run whose execution hit a storage error is (`Worker.hand_back`:
claimable at once, when storage answers again); it is never left owned by
an executor that no longer exists past its lease.

The same under queue pressure (decision (ao), `trade`): a claim held back
by the queue's ``max_running`` (`Claimed.held_back`) while this worker
holds runs that only wait and that ready runs of the queue descend from (a
parent whose child waits for the slot the parent holds): those are stopped
and, in one transaction under the queue's lock (`Store.trade_parked`), put
down and the ready runs that descend from them claimed in their slots, so
that no other claim takes those slots and the limit holds. Ready work
unrelated to the runs held is not traded for: ``max_running`` bounds runs
in progress, waits included (decision (aa)). The same for a key's
``max_running_per_key`` (decision (aw)): a ready run of a key at its limit
is traded for only by an ancestor of it that holds one of that key's slots
(a parent of key K waiting for its child of key K).

The cost is one replay per release, which is why it is for pressure only.

What a worker put down is seen from outside (`record`): its registry row,
written at each lease renewal with the rest of it, holds how many runs it
put down in all, how many in the last `RECENT` seconds and when last
(``durable workers``, ``/api/workers``, the UI's Workers page, /metrics'
``durable_worker_runs_released_total``). The worker reads the same window
(`recently`) to claim again at a run's end while its last claim left work.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ..clock import to_iso
from ..store.parked import Parked, Released
from ..store.records import Claimed, ClaimedRun
from .slots import SlotWatch, may_wait, releasable

if TYPE_CHECKING:
    from ..clock import Clock
    from ..store import Store
    from .claiming import RunClaims
    from .executor import RunExecutor

#: how long a stopped executor may take to end before its run is handed back
#: as after an error (a run that only waits ends at once: nothing is in flight)
STOP_BOUND = 10.0
#: why a released executor stopped (`RunExecutor.stop_reason`)
REASON = "put down under pressure"
#: how long after a put-down a worker counts as putting runs down: while it does,
#: it claims again at a run's end when its last claim left ready work (the runs
#: put down turn ready together after the wake-ups that said so were spent on
#: full workers), and operators see the count of that window. A pressure
#: episode puts runs down at its passes seconds apart; a minute after the
#: last one it is over, and work its claims leave is other workers' (PostgreSQL
#: addresses starts to processes), which their wake-ups take
RECENT = 60.0


class ReliefWorker(Protocol):
    """What putting runs down needs of the worker."""

    worker_id: str
    store: Store
    clock: Clock
    log: Any
    slots: SlotWatch
    namespace: str
    task_queue: str
    lease_seconds: float
    run_claims: RunClaims

    @property
    def capabilities(self) -> tuple[str, ...]: ...
    @property
    def build_id(self) -> str | None: ...

    @property
    def executors(self) -> Mapping[str, RunExecutor]: ...

    def hand_back(self, run_id: str) -> None:
        """Hand a run back (claimable at once), retried while storage is out."""


class Relief:
    """One worker's putting down of parked runs under pressure (module docstring).

    `claim(n)` claims up to n ready runs (the worker's claim of runs);
    `on_due()` is called when a run put down on a timer will fall due (the
    watchdog reads `next_due` again)."""

    def __init__(self, worker: ReliefWorker,
                 claim: Callable[[int], Awaitable[Claimed[ClaimedRun]]],
                 on_due: Callable[[], None], again: Callable[[], None]) -> None:
        self.worker = worker
        self._claim = claim
        self._on_due = on_due
        self._again = again
        #: the executors told to say when their code stops (`_watch`)
        self._watched: list[RunExecutor] = []
        #: runs put down so far, and runs whose hand-back failed (then handed
        #: back as after an error); the worker's counters
        self.released = 0
        self.failed = 0
        #: when the last run was put down (the worker's clock), and the instants
        #: of those put down in the last `RECENT` seconds (oldest first)
        self.last_at: float | None = None
        self._recent: deque[float] = deque()
        #: runs taken in trades under queue pressure (`trade`), and runs a trade
        #: stopped and then kept, finding nothing left to take for them
        self.traded = 0
        self.kept = 0
        self._ending: dict[str, anyio.Event] = {}
        self._due: list[float] = []  # when runs put down on timers fall due (a heap)

    def recently(self, now: float) -> bool:
        """Whether it put a run down in the last `RECENT` seconds."""
        return self.last_at is not None and now - self.last_at <= RECENT

    def record(self, now: float) -> dict[str, Any] | None:
        """What the registry keeps of it (None while it put nothing down):
        ``{count, recent, window_seconds, last_at, failed}`` as of `now`."""
        if self.last_at is None and not self.failed:
            return None
        while self._recent and now - self._recent[0] > RECENT:
            self._recent.popleft()
        return {"count": self.released, "recent": len(self._recent),
                "window_seconds": RECENT, "last_at": self.last_at, "failed": self.failed}

    def candidates(self) -> list[RunExecutor]:
        """The runs that can be put down now, least recently active first."""
        found = [e for e in self.worker.executors.values() if releasable(e) is not None]
        found.sort(key=lambda e: e.ctx.parking.quiet_since)
        return found

    def ended(self, executor: RunExecutor) -> None:
        """The worker dropped `executor` (its `execute` ended)."""
        if self._ending:
            event = self._ending.pop(executor.run.run_id, None)
            if event is not None:
                event.set()

    def next_due(self) -> float | None:
        """The earliest instant a run put down here on a timer falls due."""
        return self._due[0] if self._due else None

    def fell_due(self, now: float) -> bool:
        """Whether a run put down here on a timer fell due by `now` (forgotten
        then: the worker claims, and tells the other processes, once)."""
        due = self._due
        fell = False
        while due and due[0] <= now:
            heapq.heappop(due)
            fell = True
        return fell

    async def relieve(self, batch: int) -> Claimed[ClaimedRun]:
        """At a full worker's claim pass: claim ready runs for the slots of runs
        it can put down, and put as many down; the runs to start (none when
        nothing was announced, nothing can be put down, or nothing is ready)."""
        self._unwatch()
        if not self.worker.slots.wanted:
            return Claimed()
        found = self.candidates()
        if not found:
            self._watch()
            return Claimed()
        claimed = await self._claim(min(len(found), batch))
        if not claimed and claimed.held_back:  # the queue's limits, not this worker
            return await self.trade(claimed.held_back, batch)
        if not claimed:
            self.worker.slots.wanted = False  # others took it: wait for the next news
            return claimed
        chosen = self.candidates()[:len(claimed)]  # again: the claim awaited storage
        if len(chosen) < len(claimed):
            for item in claimed[len(chosen):]:  # no slot for it after all
                self.worker.hand_back(item.run.run_id)
            del claimed[len(chosen):]
        if chosen:
            await self._put_down(chosen)
        return claimed

    def _watch(self, only: Collection[str] | None = None) -> None:
        """Work waits and no run can be put down yet: claim again (`again`) as
        soon as one that may come to wait stops running (of `only`, when
        given), rather than at the next wake-up or poll (runs park a moment
        after they are claimed). Not the runs that wait on an attempt (a run
        of local steps parks at every step: a pass at each would cost the
        full worker O(runs) a step)."""
        self._watched = [e for e in self.worker.executors.values()
                         if may_wait(e) and (only is None or e.run.run_id in only)]
        for executor in self._watched:
            executor.on_wait = self._waits

    def _waits(self) -> None:
        self._unwatch()
        self._again()

    def _unwatch(self) -> None:
        for executor in self._watched:
            executor.on_wait = None
        self._watched = []

    async def trade(self, held: int, batch: int) -> Claimed[ClaimedRun]:
        """A claim pass found `held` ready runs held back by the queue's
        ``max_running`` or by keys at their ``max_running_per_key``
        (`Claimed.held_back`): put down as many runs held here
        that only wait and that ready runs descend from (they wait for a slot
        their ancestors hold: the queue's deadlock), the least recently active
        first, and claim those runs in their slots, in one transaction
        (`Store.trade_parked`, decision (ao)); the runs to start. Not for ready
        work unrelated to the runs held here: ``max_running`` bounds runs in
        progress, waits included (decision (aa)), and those wait their turn."""
        self._unwatch()
        worker = self.worker
        if not worker.executors:
            return Claimed()
        # which runs held here ready runs descend from: one read of the runs
        # held (at most the queue's max_running), so that a pass on a queue
        # kept full by unrelated work costs that read and nothing more
        waited = await worker.store.waited_for(
            worker.namespace, worker.task_queue, worker.run_claims.types,
            list(worker.executors), worker.clock.now())
        if not waited:
            return Claimed()
        chosen = [e for e in self.candidates() if waited.get(e.run.run_id)][:min(held, batch)]
        if not chosen:
            # their ancestors here do not only wait yet (a parent parks a moment
            # after it starts its child): try again when one of them comes to wait
            self._watch(waited)
            return Claimed()
        return await self._put_down(chosen, trade=True)

    async def _put_down(self, chosen: list[RunExecutor],
                        trade: bool = False) -> Claimed[ClaimedRun]:
        # shielded: the runs stopped here must be handed back (and the runs
        # claimed for them started), even when the worker stops meanwhile
        with anyio.CancelScope(shield=True):
            claimed = await self._hand_down(chosen, trade)
        return claimed

    async def _hand_down(self, chosen: list[RunExecutor], trade: bool) -> Claimed[ClaimedRun]:
        worker = self.worker
        parked: list[tuple[RunExecutor, Parked, list[str]]] = []
        ending: list[anyio.Event] = []  # (`ended` pops them from `_ending` as they end)
        for executor in chosen:
            kinds = sorted(str(k) for k in releasable(executor) or ())
            run = executor.run
            parked.append((executor, Parked(run.run_id, run.epoch,
                                            tuple(sorted(executor.ctx.parking.parked))), kinds))
            ending.append(self._ending.setdefault(run.run_id, anyio.Event()))
            executor.stop(REASON)
        ended: list[tuple[RunExecutor, Parked, list[str]]] = []
        with anyio.move_on_after(STOP_BOUND):
            for entry, event in zip(parked, ending, strict=True):
                await event.wait()
                ended.append(entry)
        for _, p, _ in parked[len(ended):]:  # still ending: as after an error
            self._ending.pop(p.run_id, None)
            worker.log.warning("run_release_failed", run_id=p.run_id,
                               error=f"its execution did not end within {STOP_BOUND:g}s")
            self.failed += 1
            worker.hand_back(p.run_id)
        claimed: Claimed[ClaimedRun] = Claimed()
        if not ended:
            return claimed
        runs = [p for _, p, _ in ended]
        now = worker.clock.now()
        try:
            if trade:
                traded = await worker.store.trade_parked(
                    worker.namespace, worker.task_queue, worker.worker_id,
                    worker.run_claims.types, runs, worker.lease_seconds, now,
                    worker.capabilities, worker.build_id)
                results, claimed = traded.released, traded.claimed
                self.traded += traded.taken
                self.kept += len(traded.kept)
            else:
                results = await worker.store.release_parked(worker.worker_id, runs, now)
        except Exception as exc:  # storage failed: hand them back as after an error
            self.failed += len(ended)
            if trade:  # it may have claimed runs: handed back before the next claim
                worker.run_claims.failed = True
            for _, p, _ in ended:
                worker.log.warning("run_release_failed", run_id=p.run_id, error=repr(exc))
                worker.hand_back(p.run_id)
            return Claimed()
        by_id = {p.run_id: (executor, kinds) for executor, p, kinds in ended}
        parked_ops = {p.run_id: p.waits_on for _, p, _ in ended}
        for result in results:
            executor, kinds = by_id[result.run_id]
            if not result.lost:
                self.released += 1
                self.last_at = now
                self._recent.append(now)
                self._log(executor, kinds, result, len(parked_ops[result.run_id]),
                          "queue" if trade else "worker")
            if result.because == "due" and result.ready_at is not None:
                heapq.heappush(self._due, result.ready_at)
                self._on_due()
        return claimed

    def _log(self, executor: RunExecutor, kinds: list[str], result: Released,
             ops: int, reason: str) -> None:
        run = executor.run
        if result.ready_at is None:
            claimable = "when an op it waits on ends, or a signal, update or cancellation arrives"
        elif result.because == "due" and result.ready_at > executor.ctx.clock.now():
            claimable = (f"when a timer or deadline it waits for falls due "
                         f"({to_iso(result.ready_at)})")
        else:
            claimable = f"at once ({result.because} meanwhile)"
        self.worker.log.info("run_released_under_pressure", run_id=run.run_id,
                             workflow_id=run.workflow_id, workflow_type=run.workflow_type,
                             waiting_on=kinds, ops=ops, reason=reason,
                             claimable=claimable)
