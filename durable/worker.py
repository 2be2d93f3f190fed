"""The worker: runs workflows and activities inside the host's event loop.

A worker is a handful of anyio tasks in the application's own event loop
(asyncio or trio): it claims runnable runs and executes each as a task,
claims activity attempts, renews its leases in one statement, and runs the
watchdog that enforces every expired deadline. Wake-ups from the driver make
it react at once; a bounded fallback poll covers a missed wake-up.

It lives in someone else's application, so nothing it meets may take that
application down: a storage outage is retried with backoff (logged once,
and once more when storage is back), a closed client stops the worker
quietly, one run's or attempt's failure stays with that run or attempt. A
bug in durable itself stops the worker (logged with its traceback) and is
raised as `WorkerFailed` when the ``async with`` block ends; the host's own
code is never interrupted by it.

Its parts live beside the engine in `durable._runtime`: claiming
(`claiming.ClaimLoop`, one loop for runs and attempts), remote activity
attempts (`remote`, the twin of `local`), storage outages (`outage`), and
queries of idle runs (`queries`). This module wires them together and keeps
what is the worker's own: its lifecycle, wake-ups, leases, the watchdog and
the runs it executes.

Kept whole: those share the worker's state (its executors, triggers and
task group) and are each a few short loops over it; what stands alone is in
`durable._runtime` already.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from . import _validate
from ._log import get_logger
from ._registry import Registry
from ._retention import RetentionKeeper
from ._runtime import attempts
from ._runtime.claiming import CLAIM_START, ClaimLoop, RunClaims, Trigger
from ._runtime.committer import Committer
from ._runtime.context import RunSetup
from ._runtime.eager import EagerStarts
from ._runtime.executor import RunExecutor
from ._runtime.hearing import Hearing
from ._runtime.loop_watch import LoopWatch, codes_of
from ._runtime.outage import FIRST_DELAY, Outage, raise_unless_storage
from ._runtime.presence import Presence
from ._runtime.queries import IdleQueries
from ._runtime.race import first_of
from ._runtime.relief import Relief
from ._runtime.remote import RemoteActivities
from ._runtime.slots import SlotWatch
from ._runtime.upgrade import UpgradeGate
from ._scheduler import Scheduler
from .errors import ConfigurationError, WorkerFailed
from .options import Seconds, record_mode
from .store.records import (
    ClaimedRun,
    ClientRequest,
    InboxItem,
    OpRecord,
    earliest,
)
from .wakes import Wake, WakeKind

if TYPE_CHECKING:
    from .client import Client

CAPABILITIES = ("cooperative_cancellation", "activity_supervision")
#: the longest `Worker(identity=...)`: its worker id, ``{identity}#{8 hex}``,
#: is an id of at most 255 characters too
_IDENTITY_LENGTH = 255 - 9
#: how long the watchdog gathers wake-ups before it re-reads the next deadline
WATCHDOG_COALESCE = 0.02


def _names(value: Sequence[Callable[..., Any] | str], what: str) -> Sequence[Any]:
    if isinstance(value, str) or not isinstance(value, Sequence | set | frozenset):
        raise ConfigurationError(
            f"Worker {what}= must be a list of functions or names, got {value!r}"
        )
    return list(value)


class Worker:
    """Executes the given workflows and activities for one task queue.

    Use ``async with Worker(...)`` to run it in the background of the current
    event loop while the application keeps running, or ``await worker.run()``.
    An exception raised by the body of the ``async with`` block comes out of
    it unchanged.
    """

    def __init__(
        self,
        client: Client,
        *,
        workflows: Sequence[Callable[..., Any] | str] = (),
        activities: Sequence[Callable[..., Any] | str] = (),
        task_queue: str = "default",
        max_concurrent_runs: int = 1000,
        max_concurrent_activities: int = 100,
        lease_seconds: float = 15.0,
        poll_interval: float = 1.0,
        identity: str | None = None,
        capabilities: Sequence[str] = CAPABILITIES,
        shutdown_grace: float = attempts.DEFAULT_STOP_GRACE,
        local_activity_record: str = "step",
        local_activity_batch: int = 64,
        retention: Seconds | None = None,
        build_id: str | None = None,
        loop_block_warning: Seconds | None = 2.0,
        release_waiting_runs: bool = True,
        eager_starts: bool = True,
    ) -> None:
        workflows = _names(workflows, "workflows")
        activities = _names(activities, "activities")
        if not workflows and not activities:
            raise ConfigurationError("a Worker needs at least one workflow or activity to run")
        self.client = client
        self.driver = client.driver  # raises for a client with no storage of its own
        self.store = client.store
        self.clock = client.clock
        self.namespace = client.namespace
        self.task_queue = _validate.name(task_queue, "Worker task_queue")
        self.max_concurrent_runs = _validate.integer(
            max_concurrent_runs, "Worker max_concurrent_runs", maximum=1_000_000)
        self.max_concurrent_activities = _validate.integer(
            max_concurrent_activities, "Worker max_concurrent_activities", maximum=1_000_000)
        # at least half a second: a worker renews its leases a few times per
        # lease, so a lease of milliseconds lapsed between renewals and healthy
        # runs were taken back and failed with WorkerLost, in a storm of logs
        self.lease_seconds = _validate.duration(lease_seconds, "Worker lease_seconds",
                                                minimum=0.5)
        self.poll_interval = _validate.duration(poll_interval, "Worker poll_interval",
                                                inclusive=False, maximum=3600)
        self.shutdown_grace = _validate.duration(shutdown_grace, "Worker shutdown_grace",
                                                 maximum=3600)
        # how local activities without ActivityOptions(record=...) are recorded
        self.local_activity_record = record_mode(local_activity_record,
                                                 "Worker local_activity_record")
        self.local_activity_batch = _validate.integer(
            local_activity_batch, "Worker local_activity_batch", minimum=1, maximum=100_000)
        unknown = sorted(set(_names(capabilities, "capabilities")) - set(CAPABILITIES))
        if unknown:
            raise ConfigurationError(
                f"Worker capabilities {unknown} are not known; choose from {list(CAPABILITIES)}"
            )
        self.capabilities = tuple(capabilities)
        #: the deploy this worker's code belongs to (the upgrade gate); None: no gate
        self.build_id = _validate.optional_name(build_id, "Worker build_id")
        # Leases belong to this incarnation: a process restarted with the same
        # identity must not renew (and so keep alive) its dead predecessor's
        # attempts, which then expire and are recovered.
        _validate.optional_name(identity, "Worker identity")
        if identity is not None and len(identity) > _IDENTITY_LENGTH:
            # the worker id adds "#" and 8 characters: an id past 255 is
            # refused by MariaDB's keys (a raw DataError at start) and by
            # every call that names a worker elsewhere
            raise ConfigurationError(
                f"Worker identity is {len(identity)} characters long; at most "
                f"{_IDENTITY_LENGTH} are allowed (the worker id adds '#' and 8 characters to "
                f"it, and an id is at most {_validate.MAX_NAME_LENGTH}; it starts "
                f"{identity[:40]!r})")
        self.identity = identity or f"worker-{uuid.uuid4().hex[:12]}"
        self.worker_id = f"{self.identity}#{uuid.uuid4().hex[:8]}" if identity else (
            self.identity)
        self.registry = Registry.of(workflows, activities)
        self.workflows = self.registry.workflows
        self.activities = self.registry.activities
        self.executors: dict[str, RunExecutor] = {}
        self.committer = Committer(self.store.commit, self.clock, settle=self.store.settle_commit,
                                   commit_shielded=self.store.commit_shielded)
        self.log = get_logger("durable.worker").bind(worker_id=self.worker_id)
        #: its record in the registry (``durable workers``) and clash warnings
        self.presence = Presence(
            self.store, self.registry, worker_id=self.worker_id, identity=self.identity,
            namespace=self.namespace, task_queue=self.task_queue,
            capabilities=self.capabilities, log=self.log,
            build_id=self.build_id)
        self.outage = Outage(self.log, lambda: self._stopping)
        #: warns when something blocks the event loop this long (None: never)
        block = _validate.optional_duration(loop_block_warning, "Worker loop_block_warning",
                                            minimum=0.01, maximum=3600)
        self.loop_watch = None if block is None else LoopWatch(
            block, self.log, lambda: codes_of(self.workflows, self.activities),
            consequence=self._leases_after_block)
        #: when the leases were last renewed (the process's monotonic time)
        self.renewed_at = time.monotonic()
        self.presence.loop_watch = self.loop_watch
        self.repairs: dict[str, int] = {}
        #: the error that stopped this worker (a bug in durable), if any
        self.failure: BaseException | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._stopping = False
        self._stopped = anyio.Event()
        self._loop_scopes: list[anyio.CancelScope] = []
        self._watchdog_trigger = Trigger()
        #: set once a watchdog pass poked the claim loops (tests count passes after)
        self.watchdog_poked = anyio.Event()
        self._resync_trigger = Trigger()
        self._resync: set[str] = set()
        #: which wake-ups are this worker's, and which it asks other processes for
        self.hearing = Hearing(self.store.hub, self.namespace, self.task_queue,
                               workflows=bool(self.workflows), activities=bool(self.activities))
        self._known_names: set[str] = set(self.activities)
        self._known_checked = -math.inf
        self._to_release: list[str] = []
        self._crash_at: frozenset[str] = frozenset()
        self._crashed = anyio.Event()
        #: the crash point this worker stopped at (durable.testing), if any
        self.crashed_at: str | None = None
        self.run_setup = RunSetup(
            worker=self, clock=self.clock, converter=client.converter, limits=client.limits,
            committer=self.committer, stop_grace=self.shutdown_grace,
            local_record=self.local_activity_record, local_batch=self.local_activity_batch)
        self.idle_queries = IdleQueries(self)  # queries of runs no live worker holds
        #: the remote activity attempts this worker claims and runs
        self.remote = RemoteActivities(self, self.activities)
        #: replays runs another build advanced before taking them (build_id set)
        self.gate = UpgradeGate(self)
        types = tuple(sorted(self.workflows))
        #: claiming runs: `runs.claim_now()` lets a test see a claim pass through
        self.run_claims = RunClaims(self, types)  # (and what a lost claim took: handed back)
        if not isinstance(release_waiting_runs, bool):
            raise ConfigurationError(
                f"Worker release_waiting_runs= must be True or False, got {release_waiting_runs!r}")
        #: a full worker with ready work puts down runs that only wait (docs/deployment.md)
        self.release_waiting_runs = release_waiting_runs
        #: warns when every slot is held by a run that only waits and none can be put down
        self.slots = SlotWatch(self.log, self.max_concurrent_runs, release=release_waiting_runs)
        #: puts them down (`relief.released` counts the runs put down so far,
        #: `relief.record` what the registry shows of them)
        self.relief = Relief(self, self.run_claims.claim, self._watchdog_trigger.set,
                             lambda: self.runs.trigger.set())
        self.presence.relief = self.relief
        if not isinstance(eager_starts, bool):
            raise ConfigurationError(
                f"Worker eager_starts= must be True or False, got {eager_starts!r}")
        #: takes its process's starts in their transaction (`durable._runtime.eager`)
        self.eager = EagerStarts(self, eager_starts)
        self.runs: ClaimLoop[ClaimedRun] = ClaimLoop(
            room=self.run_room,
            claim=self.run_claims.claim, start=lambda claimed: self._start_run(claimed),
            poll_interval=self.poll_interval, now=self.clock.now, first_batch=CLAIM_START,
            watch=self._watch_slots, **self.run_claims.baton,
            relieve=self.relief.relieve if release_waiting_runs else None,
            trade=self.relief.trade if release_waiting_runs else None)
        #: fires the namespace's schedules; deletes closed runs past retention
        self.scheduler = Scheduler(self.store, self.clock, self.namespace,
                                   poll_interval=self.poll_interval, worker_id=self.worker_id)
        self.retention = RetentionKeeper(
            self.store, self.clock, self.namespace,
            _validate.optional_duration(retention, "Worker retention", minimum=1),
            poll_interval=self.poll_interval, worker_id=self.worker_id)

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Worker:
        if self._entered:
            raise ConfigurationError("a Worker runs once; create a new Worker to run again")
        self._entered = True
        await self.presence.register(self.lease_seconds * 2, self.clock.now())
        if self.activities:
            await self.remote.check_cover()
        self.hearing.start(self._on_wake, self.remote.takes if self.activities else None,
                           (lambda: not self.runs.ended) if self.workflows else None)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        loops: list[Callable[[], Awaitable[None]]] = [
            self._watch_driver, self._lease_loop, self._watchdog_loop, self._resync_loop,
            self.scheduler.run, self.retention.run]
        if self.workflows:
            loops.append(self.runs.run)
            loops.append(self.idle_queries.run)
        if self.activities:
            loops.append(self.remote.claims.run)
        if self.loop_watch is not None:
            loops.append(self.loop_watch.run)
        for loop in loops:
            tg.start_soon(self._guarded, loop, name=f"durable worker {_loop_name(loop)}")
        if self.workflows:
            self.eager.thread = threading.get_ident()  # (entered on its loop's thread)
            self.store.takers.append(self.eager)
        self.log.info("worker_started", task_queue=self.task_queue,
                      workflows=sorted(self.workflows), activities=sorted(self.activities))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self.crashed_at is not None:
            return await self._abandon(exc_type, exc, tb)
        await self._shutdown()
        if exc is None and self.failure is not None:
            raise WorkerFailed(
                f"worker {self.worker_id} stopped because of an internal error: "
                f"{self.failure!r}; see the log for its traceback"
            ) from self.failure
        return False

    # ---------------------------------------------------------------- crash points (testing)

    #: Where `durable.testing.crash_at` may stop a worker abruptly.
    CRASH_POINTS = ("after_effect", "cleanup", "between_phases", "before_close")

    async def crash_point(self, point: str) -> None:
        """Called by the engine at named points; stops the worker abruptly at one a
        test chose (`durable.testing.crash_at`), as a SIGKILL would: nothing more
        is recorded, nothing is released, and the caller never returns."""
        if point not in self._crash_at or self.crashed_at is not None:
            return
        self._crash_now(point)
        await anyio.sleep_forever()

    def _crash_now(self, point: str) -> None:
        """Stop abruptly now (`crash_point`, `durable.testing.explore_crashes`)."""
        self.crashed_at = point
        self._leave_takers()  # a killed process takes nothing more
        self.log.info("worker_crashed_on_purpose", point=point)
        for executor in list(self.executors.values()):
            executor.stop("crash")
        self.remote.stop_all("worker crash")
        self._crashed.set()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()  # the `async with` block ends at once

    async def _abandon(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                       tb: TracebackType | None) -> bool:
        """Leave like a killed process: hand nothing back, deregister nothing."""
        tg, self._tg = self._tg, None
        self._stopping = True
        self.hearing.stop()
        self._stopped.set()
        if tg is None:
            return False
        return bool(await tg.__aexit__(exc_type, exc, tb))

    async def _shutdown(self) -> None:
        """Stop everything, hand runs and running attempts back, deregister."""
        tg, self._tg = self._tg, None
        if tg is None:
            return
        self._stopping = True
        self._take_no_starts()
        self._stop_work("shutdown")
        tg.cancel_scope.cancel()
        # The body's own exception is not ours to pass in: it comes out of
        # `async with` unchanged (none of our tasks raises).
        await tg.__aexit__(None, None, None)
        self.hearing.stop()
        with anyio.CancelScope(shield=True):
            await self._release_all()
        self._stopped.set()
        self.log.info("worker_stopped")

    def _take_no_starts(self) -> None:
        """No more eager starts; runs of starts under way are handed back with
        the others (a start that commits after that leaves its run to expire)."""
        self._leave_takers()
        self._to_release.extend(self.eager.in_flight)

    def _leave_takers(self) -> None:
        """Be asked for no more starts (`durable.store.Store.takers`)."""
        if self.eager in self.store.takers:
            self.store.takers.remove(self.eager)

    def _stop_work(self, reason: str) -> None:
        self._to_release.extend(self.executors)
        for executor in list(self.executors.values()):
            executor.stop(reason)
        self.remote.stop_all(f"worker {reason}")

    async def _release_all(self) -> None:
        try:
            await self.store.release_runs(self.worker_id, sorted(set(self._to_release)),
                                          self.clock.now())
            await self.store.deregister_worker(self.worker_id, self.clock.now())
        except Exception as exc:  # storage may be gone at shutdown: leases expire anyway
            self.log.warning("release_failed", error=repr(exc))

    async def run(self) -> None:
        """Run until cancelled (or until the worker stops: its client closed, or
        `WorkerFailed` for an internal error)."""
        async with self:
            await self._stopped.wait()

    def _stop_serving(self, failure: BaseException | None) -> None:
        """Stop claiming and executing; the host application keeps running."""
        if failure is not None and self.failure is None:
            self.failure = failure
        self._stopping = True
        self._stop_work("stopped")
        for scope in self._loop_scopes:
            scope.cancel()
        self._stopped.set()

    async def _guarded(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop; storage errors are retried, nothing escapes.

        A storage outage is logged once (and its end once); a closed client
        stops the worker; any other error is a bug in durable: it is logged
        with its traceback and stops the worker, which then raises
        `WorkerFailed` where the application left it.
        """
        name = _loop_name(loop)
        try:
            with anyio.CancelScope() as scope:
                self._loop_scopes.append(scope)
                try:
                    await self.outage.retry(name, loop)
                except Exception as exc:
                    self.log.exception("worker_failed", loop=name, error=repr(exc))
                    self._stop_serving(exc)
                    return
        except BaseExceptionGroup as group:
            raise_unless_storage(group)  # stopped while storage closed under it
        if not self._stopping:  # the loop gave up: the client was closed
            self.log.info("worker_storage_closed", loop=name)
            self._stop_serving(None)

    @property
    def stopping(self) -> bool:
        """Whether the worker stops (shutdown, closed storage, an internal error)."""
        return self._stopping

    def spawn(self, work: Callable[..., Any], *args: Any, name: str) -> bool:
        """Start `work(*args)` in the worker's task group; False (nothing started)
        once the worker stops."""
        if self._tg is None or self._stopping:
            return False
        self._tg.start_soon(work, *args, name=name)
        return True

    # ---------------------------------------------------------------- wake-ups

    def _on_wake(self, wake: Wake) -> None:
        if not self.hearing.concerns(wake):
            return  # another task queue's: nothing of ours to claim
        match wake.kind:
            case WakeKind.RUN:
                self._on_run_wake(wake)
            case WakeKind.REQUESTS:
                self.idle_queries.trigger()
            case WakeKind.RUNS:
                if self.run_claims.heard(wake):  # not a start addressed elsewhere
                    self.runs.trigger.set(wake.remote and wake.to is None)
                if wake.brings_deadline:  # not a start without timeouts (NO_DEADLINE)
                    self._watchdog_trigger.set()
            case WakeKind.ACTIVITIES:
                if isinstance(wake.data, str) and not wake.remote:
                    self.remote.claim_mine(wake.data)  # a run here scheduled it
                else:
                    self.remote.claim_any(wake.remote)
                self._watchdog_trigger.set()
            case WakeKind.ACTIVITY_STOP:
                self.remote.stop(wake.subject, "the attempt was fenced (timed out or cancelled)")
            case WakeKind.ANY:
                self.idle_queries.trigger()
                self._claim_all()
                self._watchdog_trigger.set()
                self._resync.update(self.executors)
                self._resync_trigger.set()

    def _on_run_wake(self, wake: Wake) -> None:
        """A run changed: its executor gets the op record or the interaction the
        wake-up carries, or re-reads the run (a resync)."""
        run_id = wake.subject
        executor = self.executors.get(run_id)
        if executor is not None:
            if isinstance(wake.data, OpRecord):
                executor.ctx.resolve(wake.data)
            elif isinstance(wake.data, InboxItem | ClientRequest):
                executor.on_interaction(wake.data)  # a signal, query or update
            elif not executor.ctx.closing or wake.remote:  # not a local change (its own
                # close) once its code returned: a re-read then changes nothing
                self._resync.add(run_id)
                self._resync_trigger.set()
        elif isinstance(wake.data, InboxItem | ClientRequest):
            self.hearing.remember_early(run_id)

    async def _watch_driver(self) -> None:
        await self.driver.watch()

    async def _resync_loop(self) -> None:
        """Re-read the pending ops of runs a wake-up named without their records."""
        while True:
            await self._resync_trigger.wait(self.poll_interval)
            if not self._resync:
                # fallback: periodically re-check every run that waits on something
                self._resync = {r for r, ex in self.executors.items() if ex.ctx.open_waiters()}
            pending, self._resync = self._resync, set()
            await self.remote.check_stop_requests()
            await self._resync_runs({r: self.executors[r] for r in pending if r in self.executors})

    async def _resync_runs(self, executors: dict[str, RunExecutor]) -> None:
        """One resync pass (`_resync_loop`), in a frame of its own that empties
        `executors` however it ends. Why: the worker stopping cancels the pass,
        and the cancellation's traceback keeps the frame, in a reference cycle
        that only a full collection frees: the executors of finished runs
        lived on with it (tests/test_garbage.py, 1 run in 15)."""
        try:
            if not executors:
                return
            waiting = {r: ex.ctx.open_waiters() for r, ex in executors.items()}
            runs, closed = await self.store.resync(sorted(executors), waiting)
            for run_id, executor in executors.items():
                run = runs.get(run_id)
                if run is None or not run.is_open or run.epoch != executor.run.epoch:
                    executor.stop("closed or claimed elsewhere")
                    continue
                executor.on_run_state(run)  # signals, queries, updates from elsewhere
                if run.cancellation is not None and "cooperative_cancellation" in (
                    self.capabilities
                ):
                    executor.on_request(run.cancellation)
            for run_id, op in closed:
                owner = self.executors.get(run_id)
                if owner is not None:
                    owner.ctx.resolve(op)
        finally:
            executors.clear()

    # ---------------------------------------------------------------- runs

    def run_room(self) -> int:
        """How many more runs this worker can take now: its free slots, less
        those the upgrade gate and eager starts under way hold."""
        return (self.max_concurrent_runs - len(self.executors) - len(self.gate.checking)
                - self.eager.reserved)

    @property
    def serving(self) -> bool:
        """Running, not stopping, and storage answering its last request."""
        return (self._tg is not None and not self._stopping and self.crashed_at is None
                and not self.outage.down)

    def start_taken(self, taken: ClaimedRun) -> None:
        """Start a run this worker took as it started (`durable._runtime.eager`);
        its watchdog learns of the run's deadlines (nobody announced them)."""
        self._start_run(taken)
        if taken.run.deadlines.earliest is not None:
            self._watchdog_trigger.set()

    def _watch_slots(self, room: int, woken: bool) -> None:
        self.slots.check(room, woken, self.executors.values(), len(self.gate.checking))

    def _claim_all(self) -> None:
        """Claim runs and attempts now (work may be ready that no wake-up named)."""
        self.runs.trigger.set()
        self.remote.poll()

    def _start_run(self, claimed: ClaimedRun, checked: bool = False) -> None:
        run = claimed.run
        if self._tg is None or self._stopping:
            # claimed while the worker stops (the claim was in flight): hand it back
            self._to_release.append(run.run_id)
            return
        if not checked and self.gate.needs_check(claimed):  # another build advanced it
            self._tg.start_soon(self.gate.admit, claimed, lambda c: self._start_run(c, True),
                                self.hand_back, name=f"durable upgrade check {run.run_id}")
            return
        executor = RunExecutor(run, claimed.ops, self.workflows[run.workflow_type],
                               self.run_setup, self._run_done)
        before = self.executors.get(run.run_id)
        if before is not None:
            # claimed again while still executed here: its lease lapsed (a loop
            # blocked for a whole lease, or a virtual clock moved past it), and
            # the claim fenced the old executor. Stop it, or it runs on beside
            # the new one, and what it heard the new one must re-read (below)
            before.stop("claimed again after its lease lapsed")
        self.executors[run.run_id] = executor
        self.hearing.hold(run.run_id)  # its wake-ups from other processes come here
        if claimed.ops:  # started before (a restart, a lost worker): say it was taken up
            self.log.info("run_resumed", workflow_id=run.workflow_id, run_id=run.run_id,
                          workflow_type=run.workflow_type, recorded_ops=len(claimed.ops))
        if self.hearing.noticed_early(run.run_id) or before is not None:
            # an interaction was recorded after the claim read the run's counters
            # and before this executor existed (or went to the one it replaces, or
            # to one stopped here just before: `_run_done`): re-read them (a
            # resync) so it is fetched instead of waiting for the next one
            self._resync.add(run.run_id)
            self._resync_trigger.set()
        self._tg.start_soon(executor.execute, name=f"durable run {run.workflow_id}/{run.run_id}")

    def _run_done(self, executor: RunExecutor) -> None:
        current = self.executors.get(executor.run.run_id) is executor
        if current:
            del self.executors[executor.run.run_id]
            self.hearing.drop(executor.run.run_id)
        if executor.stop_reason is not None:
            # stopped with the run open (put down, lease lost, replaced): a signal
            # or request it heard in-process went with it, while the claim that
            # takes the run up again here may have read the run's counters
            # before; its successor re-reads them (tests/test_reclaimed_here.py)
            self.hearing.remember_early(executor.run.run_id)
        self.relief.ended(executor)
        if executor.needs_release and current:  # not a run claimed again since
            self.hand_back(executor.run.run_id)
        if len(self.executors) + 1 >= self.max_concurrent_runs or self.runs.held or (
                self.runs.left and self.relief.recently(self.clock.now())):
            # it was full: it claims again now (otherwise a notification of new
            # work woke it already; claiming after every run found nothing); or
            # it put runs down recently (`relief.RECENT`) and its last claim left
            # ready work, for others that may not come (runs put down under
            # pressure turn ready together, after the wake-ups that said so were
            # spent on full workers: relief). Not for every worker whose claim saw
            # work left, nor for one that put runs down long ago: on PostgreSQL
            # that work was addressed to another process, which was woken for it
            # (tests/test_postgres_addressing.py). Or its last claim was held back
            # by the queue's max_running (or keys at their max_running_per_key):
            # the slot this run held is free, and no commit announces that
            # (decisions (ao), (aw))
            self.runs.trigger.set()

    def hand_back(self, run_id: str) -> None:
        if self._tg is not None and not self._stopping:
            self._tg.start_soon(self._release_after_error, run_id)
        else:
            self._to_release.append(run_id)

    async def _release_after_error(self, run_id: str) -> None:
        """Hand a run whose execution hit a storage error back, to be replayed
        (by this worker or another) as soon as storage answers again."""
        await anyio.sleep(FIRST_DELAY)  # it just failed: storage needs a moment
        async def release() -> bool:
            await self.store.release_runs(self.worker_id, [run_id], self.clock.now(),
                                          attempts=False)
            return True

        try:
            released = await self.outage.retry("release", release)
        except Exception as exc:  # its lease expires anyway
            self.log.warning("release_failed", run_id=run_id, error=repr(exc))
            return
        if released is None:  # the worker stops (or storage closed): released at exit
            self._to_release.append(run_id)
        else:
            self.runs.trigger.set()

    async def _lease_loop(self) -> None:
        interval = self.lease_seconds / 3
        while True:
            await anyio.sleep(interval)
            now = self.clock.now()
            sent = dict(self.executors)
            owned = await self.store.renew_leases(
                self.worker_id, [*sent, *self.gate.checking], self.lease_seconds, now)
            self.outage.storage_up()
            self.renewed_at = time.monotonic()
            for run_id, executor in sent.items():
                if run_id not in owned and self.executors.get(run_id) is executor:
                    executor.stop("lease lost")
            await self.presence.register(self.lease_seconds * 2, now)
            if self.activities:
                await self.remote.check_cover()

    def _leases_after_block(self, now: float) -> str | None:
        """What a blocked loop did to this worker's leases, in words (None: nothing):
        they lapse when no renewal came for a whole lease, and other workers may
        then take its runs and attempts over (it stops those at its next renewal)."""
        since = now - self.renewed_at
        held = len(self.executors) + len(self.remote.running)
        if since <= self.lease_seconds or not held:
            return None
        what = "run or activity attempt" if held == 1 else "runs and activity attempts"
        return (f"its leases lapsed meanwhile (last renewed {since:.1f}s before the loop turned "
                f"again; a lease lasts {self.lease_seconds:g}s): other workers may have taken "
                f"over the {held} {what} it held, which it then stops")

    async def known_activity_names(self) -> set[str]:
        """Activity names any live worker has registered (cached, refreshed on a miss)."""
        now = self.clock.now()
        if now - self._known_checked > 1.0:
            self._known_checked = now
            _, names = await self.store.registered_names(self.namespace, now)
            self._known_names = set(self.activities) | names
        return self._known_names

    # ---------------------------------------------------------------- watchdog

    async def _watchdog_loop(self) -> None:
        """Sleep until the next deadline of any kind, then enforce what expired.

        A wake-up (new work anywhere, which may carry an earlier deadline)
        only re-reads when the next deadline is: enforcing, and poking the
        claim loops, happen when a deadline or lease is due or at the
        fallback poll. Why: with N worker processes every commit's NOTIFY
        wakes N watchdogs; enforcing on each cost 5 round trips per worker
        per notification and made CPU per step grow with the number of
        processes (docs/deployment.md).
        """
        enforce = True
        poked = self.clock.now()  # when the claim loops were last poked
        while True:
            if enforce:  # a deadline, a lease expiry, a retry's backoff or the poll
                # one transaction, at the instant it runs (store.deadlines.watchdog_pass)
                done = await self.store.watchdog_pass(self.namespace, self.clock.now)
                if done.counts:
                    for kind, n in done.counts.items():
                        self.repairs[kind] = self.repairs.get(kind, 0) + n
                    self.log.info("deadlines_enforced", **done.counts)
                self._claim_all()
                if self.relief.fell_due(done.now):
                    await self._announce_runs()  # a run put down here is due (relief)
                self.watchdog_poked.set()
                poked, next_at, lease_at = done.now, done.next_at, done.lease_at
            else:
                now = self.clock.now()
                # a retry available since the last poke is due now (deadlines.next_deadline)
                next_at, lease_at = await self.store.next_deadline(self.namespace, now, poked)
                if any(at is not None and at <= now for at in (next_at, lease_at)):
                    enforce = True  # already due: enforce at once
                    continue
            # a run put down here on a timer falls due then (relief): claim it
            next_at = earliest(next_at, self.relief.next_due())
            woken = False

            async def until_trigger() -> None:
                nonlocal woken
                if await self._watchdog_trigger.wait(self.poll_interval) is None:
                    return  # the fallback poll: enforce
                await anyio.sleep(WATCHDOG_COALESCE)  # a burst of wake-ups: one read
                woken = True  # a deadline due meanwhile ends the wait first: no re-read

            # the first to finish ends the others (leaving no cyclic garbage: race.py)
            await first_of(*(
                functools.partial(self.clock.sleep_until, at, background=background)
                for at, background in ((next_at, False), (lease_at, True)) if at is not None
            ), until_trigger)
            enforce = not woken


    async def _announce_runs(self) -> None:
        """Tell the queue's other processes that runs are ready (where the driver
        can: `announce`); they claim as on any ``RUNS`` wake-up."""
        announce = getattr(self.driver, "announce", None)
        if announce is not None:
            await announce([Wake.runs(self.namespace, self.task_queue)])


def _loop_name(loop: Callable[..., Any]) -> str:
    """A background loop's name for the logs (a bound method: its owner's too)."""
    owner = getattr(loop, "__self__", None)
    name = getattr(loop, "__name__", repr(loop))
    return name if owner is None or isinstance(owner, Worker) else (
        f"{type(owner).__name__}.{name}")
