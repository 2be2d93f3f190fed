"""Remote activities: attempts a worker claims from the queue, runs and records.

The twin of `local.py`. An attempt of a remote activity is claimed by any
worker that has the activity (`ClaimLoop`), run by the shared attempt runner
(`attempts.run_attempt`) under supervision, and its outcome recorded by one
fenced write (`Store.complete_activity`): storage decides whether it still
counts (a late or fenced attempt's result is refused, visibly) and whether
a failure is retried.

- **Supervision.** While the attempt runs, its heartbeats are flushed to
  storage (throttled to one write per ``0.4 x heartbeat_timeout``, clamped
  to 0.05-1 s), and it is asked to stop when storage says so (the heartbeat's
  answer, an ``ACTIVITY_STOP`` wake-up, a resync) or when its own deadline
  passes on this worker's clock.
- **Recording through outages.** The outcome is written through
  `Outage.retry`; a commit whose outcome is unknown is resolved by reading
  the attempt back, never by guessing; a result storage refuses becomes a
  non-retryable failure saying why.
- **A worker's shutdown** hands running attempts back without using one up
  (``release_runs``): an attempt stopped by it records nothing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._registry import ActivityDefn
from ..converter import check_size
from ..errors import StorageClosed, StorageUnavailable
from ..failure import Failure, not_an_exception
from ..store.records import ActivityOutcome, ActivityTask, AttemptStatus, Claimed
from ..wakes import Wake
from . import attempts
from .claiming import ClaimLoop
from .outage import Outage
from .serving import ServingWorker

if TYPE_CHECKING:
    pass


#: at most this many attempts scheduled here are remembered to be claimed first
#: (more wait for a claim of any attempt, as before)
MINE_AT_MOST = 10_000
#: a fallback poll leaves attempts this young to the process that scheduled them
OWN_GRACE = 1.0


class AttemptWorker(ServingWorker, Protocol):
    """What running remote attempts needs of its worker."""

    @property
    def lease_seconds(self) -> float: ...
    @property
    def max_concurrent_activities(self) -> int: ...
    @property
    def outage(self) -> Outage: ...
    @property
    def stopping(self) -> bool:
        """The worker stops: an attempt stopped now is handed back, not recorded."""

    def spawn(self, work: Callable[..., Any], *args: Any, name: str) -> bool:
        """Start `work(*args)` in the worker's task group; False when stopping."""
        ...

    async def crash_point(self, point: str) -> None:
        """A named point where a test may stop the worker abruptly."""
        ...


class RemoteActivities:
    """A worker's remote activity attempts: claimed, run, recorded, supervised."""

    def __init__(self, worker: AttemptWorker, activities: Mapping[str, ActivityDefn]) -> None:
        self.worker = worker
        self.activities = activities
        #: attempts running now, by task id
        self.running: dict[str, attempts.ActivityContext] = {}
        names = tuple(sorted(activities))
        #: whether this worker claims every activity its queue's live workers
        #: registered (`check_cover`): only then may it claim alone (`takes`)
        self.covers = False
        # attempts this process's runs scheduled, not claimed yet (`claim_mine`)
        self._mine: set[str] = set()
        self._any = False  # a pass is due that claims any ready attempt (`claim_any`)
        self._stale_only = False  # a poll is due (`poll`)
        self.wake = Wake.activities(worker.namespace, worker.task_queue)
        announce = getattr(worker.store.driver, "announce", None)
        self.claims: ClaimLoop[ActivityTask] = ClaimLoop(
            room=self._room,
            claim=lambda n: self._claim(names, n),
            start=lambda task: self.start(task),  # looked up at each call (tests wrap it)
            poll_interval=worker.poll_interval, now=worker.run_setup.clock.now,
            spread=None if announce is None else functools.partial(announce, [self.wake]),
            quiet=lambda: self.covers, unheard=lambda: bool(self._mine))

    def _room(self) -> int:
        return self.worker.max_concurrent_activities - len(self.running)

    def takes(self) -> bool:
        """Whether this worker claims, on its local wake-up, any attempt that a
        commit of this process makes ready on its queue: it claims every
        activity the queue's workers registered, runs, and has room. The
        driver then tells no other process (`durable.wakes.WakeHub.claim_here`).
        Called on the driver's thread too: it only reads."""
        return (self.covers and self._room() > 0 and not self.worker.stopping
                and not self.claims.ended)

    async def check_cover(self) -> None:
        """Whether this worker has every activity the live workers of its queue
        registered (at start, then at each lease renewal): one that lacks some
        must let the others hear of the attempts it would not claim."""
        worker = self.worker
        _, names = await worker.store.registered_names(
            worker.namespace, worker.run_setup.clock.now(), worker.task_queue)
        self.covers = names <= set(self.activities)

    def claim_mine(self, task_id: str) -> None:
        """A commit of this process scheduled attempt `task_id` on our queue:
        claim it (and its like) first (`_claim`)."""
        if len(self._mine) < MINE_AT_MOST:
            self._mine.add(task_id)
        self.claims.trigger.set()

    def claim_any(self, remote: bool = False) -> None:
        """Claim whatever is ready (another process's wake-up, room freed)."""
        self._any = True
        self.claims.trigger.set(remote)

    def poll(self) -> None:
        """The fallback poll: claim what is ready, but where other processes
        announce their own work to themselves (`claims.alone`), only what has
        waited `OWN_GRACE` or more: an attempt scheduled a moment ago in another
        process is that process's to claim (taking it would cost both a
        wake-up and a read, issue 26); one that waited longer is stranded."""
        if self._any:
            self.claims.trigger.set()  # a claim of anything is due anyway
            return
        self._stale_only = True
        self.claims.trigger.set()

    async def _claim(self, names: tuple[str, ...], n: int) -> Claimed[ActivityTask]:
        """Claim the attempts this process's runs scheduled, if only they were
        announced since the last pass; else any (within the fair share).

        Why the process's own first: an attempt run here reports to a run held
        here, so its outcome reaches the run in process (with its record);
        run in another process, it costs a notification, a read of the run's
        ops and the backends' CPU for them (issue 26: taken by whichever
        process claimed next, 3 attempts in 4 crossed over with 4 processes).
        """
        worker = self.worker
        now = worker.run_setup.clock.now()
        if self._any or not self._mine:
            stale_only = self._stale_only and not self._any and self.claims.alone
            self._any = self._stale_only = False
            claimed = await worker.store.claim_activities(
                worker.namespace, worker.task_queue, worker.worker_id, names, n,
                worker.lease_seconds, now, (), now - OWN_GRACE if stale_only else None)
            self._mine.difference_update(task.task_id for task in claimed)
            if self._mine:
                self.claims.trigger.set()  # ours are left: the next pass takes them
            return claimed
        mine, self._mine = tuple(self._mine), set()
        claimed = await worker.store.claim_activities(
            worker.namespace, worker.task_queue, worker.worker_id, names, n,
            worker.lease_seconds, now, mine)
        if claimed.left > 0:  # some of ours left for want of room or of share
            self._mine.update(set(mine) - {task.task_id for task in claimed})
        return claimed

    def stop(self, task_id: str, reason: str) -> None:
        """Ask the running attempt of `task_id`, if it is ours, to stop."""
        actx = self.running.get(task_id)
        if actx is not None:
            actx.request_stop(reason)

    def stop_all(self, reason: str) -> None:
        for actx in list(self.running.values()):
            actx.request_stop(reason)

    async def check_stop_requests(self) -> None:
        """Stop the attempts storage asks this worker to stop (a resync: a
        wake-up may have been missed)."""
        if self.running:
            for task_id in await self.worker.store.stop_requests(self.worker.worker_id):
                self.stop(task_id, "a stop was requested for this attempt")

    # ---------------------------------------------------------------- one attempt

    def start(self, task: ActivityTask) -> None:
        """Run a claimed attempt in the background (claimed while the worker
        stops: not run; the release at exit hands it back)."""
        setup = self.worker.run_setup
        defn = self.activities[task.name]
        deadlines = [d for d in (task.start_to_close_deadline, task.schedule_to_close_deadline)
                     if d is not None]
        actx = attempts.new_context(
            defn, activity_id=task.task_id, attempt=task.attempt, workflow_id=task.workflow_id,
            run_id=task.run_id, task_queue=task.task_queue, local=False,
            scheduled_at=task.scheduled_at, started_at=task.claimed_at,
            deadline=min(deadlines) if deadlines else None,
            heartbeat_timeout=task.options.get("heartbeat_timeout"),
            heartbeat_details=setup.converter.decode(task.heartbeat_details),
            clock=setup.clock, stop_grace=setup.stop_grace,
            encode_details=attempts.details_encoder(setup.converter, setup.limits.payload_bytes),
        )
        if self.worker.spawn(self._run, task, defn, actx,
                             name=f"durable activity {task.name}/{task.task_id}"):
            self.running[task.task_id] = actx

    async def _run(self, task: ActivityTask, defn: ActivityDefn,
                   actx: attempts.ActivityContext) -> None:
        worker = self.worker
        setup = worker.run_setup
        what = f"the result of activity {task.name!r}"
        result: str | None = None
        failure: Failure | None = None
        try:
            # The supervisor and the deadline watch end by their own scopes, not
            # by the group's: a child task that ends cancelled leaves its
            # exception in a reference cycle (anyio's task_done) that only a full
            # garbage collection frees, one per attempt (docs/benchmarks.md).
            helpers = anyio.CancelScope(), anyio.CancelScope()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._supervise, task, actx, helpers[0])
                if actx.deadline is not None:
                    tg.start_soon(self._expire, actx, actx.deadline, helpers[1])
                try:
                    args = attempts.arguments(defn, setup.converter, task.input)
                    value = await attempts.run_attempt(actx, defn, args)
                    await worker.crash_point("after_effect")
                    result = setup.converter.encode(value, what)
                    check_size(result, setup.limits.payload_bytes, what)
                except BaseException as exc:
                    error = exc if isinstance(exc, Exception) else not_an_exception(
                        exc, f"activity {task.name!r}")
                    if error is None:  # a cancellation, a KeyboardInterrupt: not ours to keep
                        raise
                    result, failure = None, attempts.attempt_failure(error, actx, defn)
                finally:
                    for scope in helpers:
                        scope.cancel()
            if worker.stopping and failure is not None and failure.category == "stopped":
                return  # stopped by this worker's shutdown: handed back without a retry
            with anyio.CancelScope(shield=True):
                outcome = await self._record(task, result, failure)
            if outcome is not None and outcome.status == "refused":
                worker.log.info("activity_result_refused", task_id=task.task_id,
                                activity=task.name, attempt=task.attempt, reason=outcome.reason)
        finally:
            if actx.abandoned:
                worker.log.warning("activity_thread_abandoned", task_id=task.task_id,
                                   activity=task.name, grace=setup.stop_grace,
                                   hint="it ignored its stop; use process_isolated=True for "
                                        "code that cannot check activity.heartbeat()")
            self.running.pop(task.task_id, None)
            if len(self.running) + 1 >= worker.max_concurrent_activities:
                self.claim_any()  # it was full: claim again now

    async def _record(self, task: ActivityTask, result: str | None,
                      failure: Failure | None) -> ActivityOutcome | None:
        """Record an attempt's outcome, through storage outages.

        An outcome-unknown commit is resolved by reading the attempt back,
        never guessed; a result storage refuses becomes a (non-retryable)
        failure saying why. Gives up (None) when the client closed, when
        the worker stops during an outage (the lease then hands the attempt
        to another worker), or on an unexpected error (logged).
        """
        worker = self.worker
        while True:
            async def complete(result: str | None = result,
                               failure: Failure | None = failure) -> ActivityOutcome:
                return await worker.store.complete_activity(
                    task.task_id, task.attempt, worker.worker_id, result, failure,
                    worker.run_setup.clock.now())

            try:
                return await worker.outage.retry("record_attempt", complete,
                                                 landed=lambda: self._settled(task))
            except Exception as exc:
                if result is None:
                    worker.log.exception("activity_outcome_not_recorded",
                                         task_id=task.task_id, error=repr(exc))
                    return None
                # the result itself could not be stored: record why instead
                result, failure = None, Failure(
                    "storage_rejected", f"the result of activity {task.name!r} could not be "
                    f"stored: {type(exc).__name__}: {exc}", "durable.WriteRejected",
                    details={"non_retryable": True})

    async def _settled(self, task: ActivityTask) -> bool:
        """After a lost commit: is our attempt no longer running (recorded or fenced)?"""
        worker = self.worker

        async def still_ours() -> bool:
            state = await worker.store.attempt_state(task.task_id)
            return state is not None and (
                state[0] == AttemptStatus.RUNNING and state[1] == task.attempt
                and state[2] == worker.worker_id)

        ours = await worker.outage.retry("record_attempt", still_ours)
        return not ours  # None (the worker stops): nothing more to do either

    async def _expire(self, actx: attempts.ActivityContext, deadline: float,
                      scope: anyio.CancelScope) -> None:
        """Stop the attempt at its deadline (until `scope` is cancelled: it ended)."""
        with scope:
            await self.worker.run_setup.clock.sleep_until(deadline)
            actx.request_stop("the attempt's deadline passed")

    async def _supervise(self, task: ActivityTask, actx: attempts.ActivityContext,
                         scope: anyio.CancelScope) -> None:
        """Flush heartbeats (throttled) and stop the attempt when storage says so,
        until `scope` is cancelled (the attempt ended)."""
        worker = self.worker
        clock = worker.run_setup.clock
        hb_timeout = task.options.get("heartbeat_timeout")
        throttle = max(0.05, min(1.0, hb_timeout * 0.4)) if hb_timeout else 1.0
        with scope:
            last_flush = -math.inf
            while True:
                with anyio.move_on_after(throttle):  # fallback tick for non-anyio threads
                    await actx.wakeup.wait()
                actx.wakeup = anyio.Event()
                # Throttle on the engine's clock, so virtual time keeps the same rules.
                await clock.sleep_until(last_flush + throttle)
                dirty, details = actx.take_details()
                if not dirty:
                    continue
                last_flush = clock.now()
                try:
                    ack = await worker.store.heartbeat_activity(
                        task.task_id, task.attempt, worker.worker_id, details, last_flush,
                    )
                except StorageClosed:
                    actx.request_stop("the worker's storage was closed")
                    return
                except StorageUnavailable as exc:
                    worker.outage.storage_down("heartbeat", exc)
                    continue  # the next heartbeat tries again; the details are kept
                if not ack.accepted or ack.stop_requested:
                    actx.request_stop(ack.reason or "stop requested")
