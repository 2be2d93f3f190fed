"""How a worker claims work: one loop for runs and activity attempts alike.

A worker claims when it is woken (work was created here or, heard through
the driver, in another process) and at a fallback poll, never more than it
has room for nor more than its fair share (`durable.store.claims.fair_limit`).
A worker hears only its own task queue's wake-ups (`durable._runtime.hearing`;
on PostgreSQL the others are not even sent to its process). With many
processes on one queue every notification of it wakes every claimer, so two
rules keep them from stampeding (docs/deployment.md): after a claim that left
ready work for others, a worker with room waits `CLAIM_TURN` first; a worker
whose claim after another process's notification found nothing gathers such
notifications for `CLAIM_GATHER` before claiming again.

Fewer notifications in the first place (issue 26): a driver that addresses
its notifications (PostgreSQL) does not send a queue's ``ACTIVITIES``
wake-up to other processes while a worker here takes that queue's attempts
(`durable.wakes.WakeHub.claimed_here`): the local wake-up makes this
process claim them (those its own runs scheduled first,
`durable._runtime.remote`), the others are not disturbed. Such a queue is
*quiet* (`quiet()`), and its loop is given `spread` (the driver's
`announce`) to pass the baton: after a pass woken here while work
announced here is unclaimed (`unheard()`), it tells the other processes if
it has no room or more is left than it takes by itself (it takes a few left
over, fewer than one each for the live workers, a pass later). On a quiet
queue nobody else may be claiming, so a worker that took some and left
more claims again after `CLAIM_TURN`, whatever woke it.

Runs the same way (`RunClaims`): on PostgreSQL a client's start is
addressed to one process of the queue in turn (`durable.wakes.Wake.to`),
whose pass on it is woken "here" and quiet; the other processes do not
hear of it at all, and it passes the baton when it cannot take it.

`ClaimLoop.claim_now()` returns once a claim pass begun after the call has
finished, so that a test can show that nothing was claimed without sleeping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import anyio

from ..errors import StorageUnavailable
from ..store.records import Claimed, ClaimedRun
from ..wakes import Wake
from .serving import ServingWorker

T = TypeVar("T")

#: most runs (or activity attempts) one claim takes; a claim also takes at most
#: its fair share of the ready work (``durable.store.claims.fair_limit``)
CLAIM_BATCH = 100
#: a worker's claims of runs start this small and double while a backlog lasts
#: (`ClaimLoop`, slow start): a worker cannot know which workers are about to
#: register, so the first to claim a backlog takes 10, then 20, 40, 80 and 100
#: (a pass apart, each claim at most its fair share as the registry then
#: counts it), leaving the rest to those that register meanwhile
CLAIM_START = 10
#: after a claim that left ready work for others, a worker with room waits
#: this long before claiming again, so that the others woken by the same
#: notification take their share first (docs/deployment.md)
CLAIM_TURN = 0.005
#: a worker whose last claim found nothing gathers wake-ups from other
#: processes this long before claiming again (a local wake-up claims at once):
#: with N processes every notification wakes N claimers, of which one wins
CLAIM_GATHER = 0.02


class Trigger:
    """A level-triggered wake-up: set() any number of times, wait() consumes it.

    A wake-up heard from another process (``set(remote=True)``) may be
    gathered: `wait(gather=...)` then waits that much longer, unless a local
    wake-up comes, so that a burst of notifications costs one claim.
    """

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._local = anyio.Event()

    def set(self, remote: bool = False) -> None:
        self._event.set()
        if not remote:
            self._local.set()

    @property
    def pending(self) -> bool:
        """Set and not consumed yet: a wait now would return at once. (For
        tests: once a wake-up is published, its claim loop either has this
        set or has begun a pass, so a test can show that none came.)"""
        return self._event.is_set()

    async def wait(self, at_most: float, gather: float = 0.0) -> str | None:
        """Wait until set, or `at_most` seconds (None); "local" if a local
        wake-up came, else "remote"."""
        with anyio.move_on_after(at_most):
            await self._event.wait()
        fired = self._event.is_set()
        if fired and gather > 0 and not self._local.is_set():
            with anyio.move_on_after(gather):
                await self._local.wait()
        how = ("local" if self._local.is_set() else "remote") if fired else None
        self._event = anyio.Event()
        self._local = anyio.Event()
        return how


class ClaimLoop(Generic[T]):
    """Claims work of one kind and starts each item, for as long as it runs.

    `room()` is how many more items the worker can take now, `claim(n)`
    claims at most n of them (one storage transaction), `start(item)` starts
    one. `trigger` is set by wake-ups (and when a full worker frees room).
    `spread()` tells the other processes that there is work (the baton, see
    the module docstring); `quiet()` says that they are not told of work
    announced here (nor this process of theirs), `unheard()` that some work
    announced here is still to be claimed.

    Slow start (`first_batch`, runs: `CLAIM_START`): a claim takes at most
    `batch` items, which starts at `first_batch`, doubles (up to
    `CLAIM_BATCH`) after each claim that left a backlog (`Claimed.backlog`:
    at least one more for every live worker) and goes back to `first_batch`
    after one that did not. A fair share counts only the workers registered
    at that moment: a fleet started together onto a backlog registers over
    some milliseconds, and without it the first to register took 100 runs a
    pass, all of a small backlog, before the others could count. Draining a
    backlog alone costs a few more claims (10, 20, 40, 80, then 100 each).
    """

    def __init__(self, *, room: Callable[[], int], claim: Callable[[int], Awaitable[Claimed[T]]],
                 start: Callable[[T], None], poll_interval: float,
                 now: Callable[[], float] | None = None,
                 spread: Callable[[], Awaitable[None]] | None = None,
                 quiet: Callable[[], bool] = lambda: True,
                 unheard: Callable[[], bool] = lambda: True,
                 first_batch: int = CLAIM_BATCH,
                 watch: Callable[[int, bool], None] | None = None,
                 relieve: Callable[[int], Awaitable[Claimed[T]]] | None = None,
                 trade: Callable[[int, int], Awaitable[Claimed[T]]] | None = None) -> None:
        self._room = room
        #: a pass whose claim the queue's max_running held back: trades runs held
        #: here that only wait for ready runs that descend from them (runs:
        #: `durable._runtime.relief.Relief.trade`); what to start
        self._trade = trade
        #: a full worker's pass: claims what it frees slots for, and frees them
        #: (runs: `durable._runtime.relief.Relief.relieve`); what to start
        self._relieve = relieve
        #: told at each pass the room left and whether a wake-up woke it
        #: (runs: `durable._runtime.slots.SlotWatch`)
        self._watch = watch
        self._first_batch = min(first_batch, CLAIM_BATCH)
        #: most items the next claim takes (slow start, see the class docstring)
        self.batch = self._first_batch
        self._spread = spread
        self._quiet = quiet
        self._unheard = unheard
        #: batons passed (`spread` called: the other processes were told)
        self.spread = 0
        self._now = now
        self._claim = claim
        self._start = start
        self._poll_interval = poll_interval
        self.trigger = Trigger()
        #: claim passes begun and finished (a pass: claim, then start what it got)
        self.begun = 0
        self.passes = 0
        #: items claimed so far (a test environment learns whether a pass found work)
        self.claimed = 0
        #: ready items the last claim saw left for others (`Claimed.left`), and
        #: those the queue's max_running held back from it (`Claimed.held_back`)
        self.left = 0
        self.held = 0
        #: whether `run()` ended (no pass will come until it runs again)
        self.ended = False
        #: how many items the claim under way may take, until it started them
        #: (room that an eager start must not take: `durable._runtime.eager`)
        self.claiming = 0
        self._passed = anyio.Event()

    @property
    def alone(self) -> bool:
        """Whether the other processes are not told of work announced here, nor
        this one of theirs (then they pass batons)."""
        return self._spread is not None and self._quiet()

    async def run(self) -> None:
        self.ended = False
        try:
            await self._loop()
        finally:
            self.ended = True
            self._passed.set()  # no pass will come: release whoever waits for one

    async def _loop(self) -> None:
        woken: str | None = None
        while True:
            self.begun += 1
            room = self._room()
            if self._watch is not None:
                self._watch(room, woken is not None)
            claimed: Claimed[T] = Claimed()
            if room > 0:
                self.claiming = min(room, self.batch)
                try:
                    claimed = await self._claim(self.claiming)
                finally:
                    self.claiming = 0
                self.left = claimed.left
                self.held = claimed.held_back
                self.batch = (min(CLAIM_BATCH, self.batch * 2) if claimed.backlog
                              else self._first_batch)
                self.claimed += len(claimed)
                for item in claimed:
                    self._start(item)
                if claimed.held_back and self._trade is not None:
                    traded = await self._trade(claimed.held_back, self.batch)
                    self.claimed += len(traded)
                    for item in traded:
                        self._start(item)
            elif self._relieve is not None:
                claimed = await self._relieve(self.batch)
                if claimed:  # slots were freed for them: the baton's rules as for room
                    room = len(claimed)
                    self.left = claimed.left
                    self.claimed += len(claimed)
                    for item in claimed:
                        self._start(item)
            spread = self._spread
            alone = self.alone
            more = claimed.left > 0 and room > len(claimed)
            if woken == "local" and spread is not None and alone and self._unheard() and (
                    room <= 0 or (claimed.left > 0 and (not more or not claimed
                                                        or claimed.backlog))):
                # Woken here, the other processes may not have heard of this work,
                # and this worker has no room for it, or more is left than it
                # takes by itself: the baton.
                self.spread += 1
                await spread()
                woken = "told"  # once: from now on they claim by the rules below
            self._pass_done()
            if claimed and more and (claimed.backlog or alone):
                # the other workers' turn first; alone: a few left over, or the
                # baton's rest, that nobody else may be claiming: take them too
                await anyio.sleep(CLAIM_TURN)
                continue
            # Lost the race for what a notification announced (every worker of
            # every process heard it): gather the next ones before claiming.
            lost = woken == "remote" and room > 0 and not claimed
            woken = await self.trigger.wait(self._wait(claimed), CLAIM_GATHER if lost else 0.0)

    def _wait(self, claimed: Claimed[T]) -> float:
        """The fallback poll, or less when a queue's rate lets work start sooner
        (nothing announces that moment)."""
        if claimed.next_at is None or self._now is None:
            return self._poll_interval
        return min(self._poll_interval, max(0.0, claimed.next_at - self._now()) + 0.001)

    def _pass_done(self) -> None:
        self.passes += 1
        passed, self._passed = self._passed, anyio.Event()
        passed.set()

    async def claim_now(self) -> None:
        """Claim now, and return once a claim pass begun after this call has
        finished: whatever was claimable then has been claimed and started.
        (For tests: shows that nothing was claimed, without sleeping.) Returns
        at once when the loop ended (a loop not started yet is waited for)."""
        target = self.begun + 1  # a pass under way may have read before this call
        self.trigger.set()
        while self.passes < target and not self.ended:
            await self._passed.wait()


class _Gate(Protocol):
    @property
    def checking(self) -> set[str]: ...


class _Eager(Protocol):
    @property
    def in_flight(self) -> set[str]: ...


class RunClaimer(ServingWorker, Protocol):
    """What claiming runs needs of its worker."""

    @property
    def lease_seconds(self) -> float: ...
    @property
    def capabilities(self) -> tuple[str, ...]: ...
    @property
    def build_id(self) -> str | None: ...
    @property
    def executors(self) -> Mapping[str, object]:
        """The runs it executes, by run id."""
    @property
    def gate(self) -> _Gate:
        """The upgrade gate: `checking` are the claimed runs it replays first."""
    @property
    def eager(self) -> _Eager:
        """Its eager starts: `in_flight` are the runs of starts under way."""


class RunClaims:
    """A worker's claims of runs, and what a claim whose answer was lost took.

    Such a claim (its connection lost while its one self-committing statement,
    or its COMMIT, was on the wire: `StorageUnavailable(outcome_unknown=True)`;
    or one that committed and whose runs' ops could then not be read) may
    have taken runs: owned by this worker, their epochs bumped, but unknown
    to it, so neither run nor renewed, and nobody else could take them
    before their leases expired. After any failed claim the next one first
    hands back (`Store.release_strays`) the open runs storage says this
    worker owns while neither an executor nor the upgrade gate has them: the
    claim loop runs one claim at a time and starts what a claim returns
    before the next, so those are exactly such runs, or runs on their way
    back anyway (dropped after an error). They are claimable at once, by this
    worker's next claim or another's. Adopting them instead would need their
    ops read and a second way to start a run; a hand-back costs one claim
    more, after a failure. Until it succeeds no claim is made (the failure
    goes to the loop's outage handling, which tries again); after a claim
    that certainly took nothing it finds nothing (one indexed read).

    It also says which ``RUNS`` wake-ups are this worker's (`heard`): on
    PostgreSQL a start is addressed to one process of the queue
    (`durable_postgres.addressing`), which claims it at once, and passes the
    baton (`baton`, the queue's wake-up to every process) when the pass it
    woke could not take all that is ready, as activities do (module
    docstring).
    """

    def __init__(self, worker: RunClaimer, types: tuple[str, ...]) -> None:
        self.worker = worker
        self.types = types
        #: a claim failed: hand back what it may have taken before the next
        self.failed = False
        # a start addressed to this process was heard since the last claim
        # began (`heard`), and whether the last claim's pass was woken so; a
        # full worker's pass claims nothing, and the first says it is due
        self._addressed = False
        self._addressed_pass = False
        self._announce = getattr(worker.store.driver, "announce", None)
        #: what `ClaimLoop` needs to pass the baton of a start addressed here
        #: that this worker cannot take (no room, or more left than it takes)
        self.baton: dict[str, Any] = {} if self._announce is None else {
            "spread": self._spread, "quiet": self._addressed_here,
            "unheard": self._addressed_here}

    def _addressed_here(self) -> bool:
        return self._addressed or self._addressed_pass

    async def _spread(self) -> None:
        """The baton: every process of the queue is told (and claims)."""
        self._addressed = self._addressed_pass = False
        assert self._announce is not None
        await self._announce([Wake.runs(self.worker.namespace, self.worker.task_queue)])

    def heard(self, wake: Wake) -> bool:
        """Whether a ``RUNS`` wake-up of this queue is this worker's to claim on:
        not if it is a start addressed to another process (`Wake.to`), which
        claims it (or passes the baton). One addressed to this process
        makes the next pass's baton due if it leaves work behind."""
        if wake.to is None:
            return True
        if wake.to != self.worker.store.hub.address:
            return False
        self._addressed = True
        return True

    async def claim(self, n: int) -> Claimed[ClaimedRun]:
        """Claim up to `n` runs (after handing back what a failed claim took)."""
        self._addressed_pass, self._addressed = self._addressed, False
        worker = self.worker
        if self.failed:
            running = frozenset(worker.executors) | worker.gate.checking | worker.eager.in_flight
            strays = await worker.store.release_strays(worker.worker_id, running)
            if strays:
                worker.log.warning("claim_outcome_unknown_runs_released", runs=len(strays))
            self.failed = False
        try:
            return await worker.store.claim_runs(
                worker.namespace, worker.task_queue, worker.worker_id, self.types, n,
                worker.lease_seconds, worker.run_setup.clock.now(), worker.capabilities,
                worker.build_id)
        except StorageUnavailable:
            self.failed = True
            raise
