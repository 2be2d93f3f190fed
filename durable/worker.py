"""The worker: runs workflows and activities inside the host's event loop.

A worker is a handful of anyio tasks in the application's own event loop
(asyncio or trio): it claims runnable runs and executes each as a task,
claims activity attempts, renews its leases in one statement, and runs the
watchdog that enforces every expired deadline. Wake-ups from the driver make
it react at once; a bounded fallback poll covers a missed wake-up.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ._log import get_logger
from ._registry import ActivityDefn, Registry
from ._runtime import attempts
from ._runtime.committer import Committer
from ._runtime.context import WorkflowContext
from ._runtime.executor import RunExecutor
from ._runtime.queries import IdleQueries
from .converter import check_size
from .driver import Wake
from .errors import ConfigurationError
from .failure import Failure
from .store.records import (
    ActivityTask,
    ClaimedRun,
    ClientRequest,
    InboxItem,
    OpRecord,
    WorkerRegistration,
)

if TYPE_CHECKING:
    from .client import Client

CAPABILITIES = ("cooperative_cancellation", "activity_supervision")


class _Trigger:
    """A level-triggered wake-up: set() any number of times, wait() consumes it."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, at_most: float) -> None:
        with anyio.move_on_after(at_most):
            await self._event.wait()
        self._event = anyio.Event()


class Worker:
    """Executes the given workflows and activities for one task queue.

    Use ``async with Worker(...)`` to run it in the background of the current
    event loop while the application keeps running, or ``await worker.run()``.
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
    ) -> None:
        if not workflows and not activities:
            raise ConfigurationError("a Worker needs at least one workflow or activity to run")
        if lease_seconds <= 0 or poll_interval <= 0:
            raise ConfigurationError("lease_seconds and poll_interval must be positive")
        self.client = client
        self.driver = client.driver
        self.store = client.store
        self.clock = client.clock
        self.namespace = client.namespace
        self.task_queue = task_queue
        self.max_concurrent_runs = max_concurrent_runs
        self.max_concurrent_activities = max_concurrent_activities
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.worker_id = identity or f"worker-{uuid.uuid4().hex[:12]}"
        self.capabilities = tuple(capabilities)
        self.registry = Registry.of(workflows, activities)
        self.workflows = self.registry.workflows
        self.activities = self.registry.activities
        self.executors: dict[str, RunExecutor] = {}
        self.running_activities: dict[str, attempts.ActivityContext] = {}
        self.committer = Committer(self.store.commit, self.clock)
        self.log = get_logger("durable.worker").bind(worker_id=self.worker_id)
        self._tg: anyio.abc.TaskGroup | None = None
        self._runs_trigger = _Trigger()
        self._activities_trigger = _Trigger()
        self._watchdog_trigger = _Trigger()
        self._resync_trigger = _Trigger()
        self._resync: set[str] = set()
        self._known_names: set[str] = set(self.activities)
        self._known_checked = -math.inf
        self._unsubscribe: Callable[[], None] | None = None
        self.repairs: dict[str, int] = {}
        self._owned_at_exit: list[str] = []
        self.idle_queries = IdleQueries(self)  # queries of runs no live worker holds

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Worker:
        await self.store.register_worker(self._registration(), self.lease_seconds * 2,
                                          self.clock.now())
        self._unsubscribe = self.store.hub.subscribe(self._on_wake)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._resilient, self._watch_driver)
        tg.start_soon(self._resilient, self._lease_loop)
        tg.start_soon(self._resilient, self._watchdog_loop)
        tg.start_soon(self._resilient, self._resync_loop)
        if self.workflows:
            tg.start_soon(self._resilient, self._claim_runs_loop)
            tg.start_soon(self._resilient, self.idle_queries.run)
        if self.activities:
            tg.start_soon(self._resilient, self._claim_activities_loop)
        self.log.info("worker_started", task_queue=self.task_queue,
                      workflows=sorted(self.workflows), activities=sorted(self.activities))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self._tg = self._tg, None
        assert tg is not None
        self._owned_at_exit = list(self.executors)
        for executor in list(self.executors.values()):
            executor.stop("shutdown")
        for actx in list(self.running_activities.values()):
            actx.request_stop("worker shutdown")
        tg.cancel_scope.cancel()
        try:
            result = await tg.__aexit__(exc_type, exc, tb)
        finally:
            if self._unsubscribe is not None:
                self._unsubscribe()
            with anyio.CancelScope(shield=True):
                await self._release_all()
        self.log.info("worker_stopped")
        return result

    async def _release_all(self) -> None:
        try:
            await self.store.release_runs(self.worker_id, self._owned_at_exit,
                                           self.clock.now())
            await self.store.deregister_worker(self.worker_id)
        except Exception as exc:  # storage may be gone at shutdown: leases expire anyway
            self.log.warning("release_failed", error=repr(exc))

    async def _resilient(self, loop: Callable[[], Any]) -> None:
        """Keep a background loop alive through storage errors, with backoff.

        A worker inside someone's application must not take the application
        down because the database blinked; the loop resumes where it was.
        """
        delay = 0.1
        while True:
            try:
                await loop()
                return
            except Exception as exc:
                self.log.warning("worker_loop_error", loop=loop.__name__, error=repr(exc))
                await anyio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def run(self) -> None:
        """Run until cancelled."""
        async with self:
            await anyio.sleep_forever()

    def _registration(self) -> WorkerRegistration:
        return WorkerRegistration(
            worker_id=self.worker_id, namespace=self.namespace, task_queue=self.task_queue,
            workflow_types=tuple(sorted(self.workflows)),
            activity_names=tuple(sorted(self.activities)), capabilities=self.capabilities,
        )

    # ---------------------------------------------------------------- wake-ups

    def _on_wake(self, wake: Wake) -> None:
        kind = wake.key[0]
        if kind == "run":
            executor = self.executors.get(wake.key[1])
            if executor is not None:
                if isinstance(wake.data, OpRecord):
                    executor.ctx.resolve(wake.data)
                elif isinstance(wake.data, InboxItem | ClientRequest):
                    executor.on_interaction(wake.data)  # a signal, query or update
                else:
                    self._resync.add(wake.key[1])
                    self._resync_trigger.set()
        elif kind == "requests":
            self.idle_queries.trigger()
        elif kind == "runs":
            self._runs_trigger.set()
            self._watchdog_trigger.set()
        elif kind == "activities":
            self._activities_trigger.set()
            self._watchdog_trigger.set()
        elif kind == "activity_stop":
            actx = self.running_activities.get(wake.key[1])
            if actx is not None:
                actx.request_stop("the attempt was fenced (timed out or cancelled)")
        elif kind == "any":
            self.idle_queries.trigger()
            self._runs_trigger.set()
            self._activities_trigger.set()
            self._watchdog_trigger.set()
            self._resync.update(self.executors)
            self._resync_trigger.set()

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
            if self.running_activities:
                for task_id in await self.store.stop_requests(self.worker_id):
                    actx = self.running_activities.get(task_id)
                    if actx is not None:
                        actx.request_stop("a stop was requested for this attempt")
            executors = {r: self.executors[r] for r in pending if r in self.executors}
            if not executors:
                continue
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

    # ---------------------------------------------------------------- runs

    async def _claim_runs_loop(self) -> None:
        types = tuple(sorted(self.workflows))
        while True:
            room = self.max_concurrent_runs - len(self.executors)
            batch = min(room, 100)
            claimed: list[ClaimedRun] = []
            if batch > 0:
                claimed = await self.store.claim_runs(
                    self.namespace, self.task_queue, self.worker_id, types, batch,
                    self.lease_seconds, self.clock.now(), self.capabilities,
                )
                for item in claimed:
                    self._start_run(item)
            if batch > 0 and len(claimed) == batch:
                await anyio.lowlevel.checkpoint()
                continue
            await self._runs_trigger.wait(self.poll_interval)

    def _start_run(self, claimed: ClaimedRun) -> None:
        assert self._tg is not None
        run = claimed.run
        ctx = WorkflowContext(
            run=run, ops=claimed.ops, defn=self.workflows[run.workflow_type], worker=self,
            clock=self.clock, converter=self.client.converter, limits=self.client.limits,
            committer=self.committer,
        )
        executor = RunExecutor(ctx, self._run_done)
        self.executors[run.run_id] = executor
        self._tg.start_soon(executor.execute, name=f"durable run {run.workflow_id}/{run.run_id}")

    def _run_done(self, executor: RunExecutor) -> None:
        if self.executors.get(executor.run.run_id) is executor:
            del self.executors[executor.run.run_id]
        if executor.needs_release and self._tg is not None:
            self._tg.start_soon(self._release_after_error, executor.run.run_id)
        self._runs_trigger.set()

    async def _release_after_error(self, run_id: str) -> None:
        """Hand a run whose execution hit a storage error back, to be replayed."""
        await anyio.sleep(0.1)
        try:
            await self.store.release_runs(self.worker_id, [run_id], self.clock.now(),
                                           attempts=False)
        except Exception as exc:
            self.log.warning("release_failed", run_id=run_id, error=repr(exc))

    async def _lease_loop(self) -> None:
        interval = self.lease_seconds / 3
        while True:
            await anyio.sleep(interval)
            now = self.clock.now()
            sent = dict(self.executors)
            owned = await self.store.renew_leases(
                self.worker_id, list(sent), self.lease_seconds, now
            )
            for run_id, executor in sent.items():
                if run_id not in owned and self.executors.get(run_id) is executor:
                    executor.stop("lease lost")
            await self.store.register_worker(self._registration(), self.lease_seconds * 2, now)

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
        """Sleep until the next deadline of any kind, then enforce what expired."""
        while True:
            now = self.clock.now()
            counts = await self.store.enforce_expired(self.namespace, now)
            if counts:
                for kind, n in counts.items():
                    self.repairs[kind] = self.repairs.get(kind, 0) + n
                self.log.info("deadlines_enforced", **counts)
                self._activities_trigger.set()
                self._runs_trigger.set()
            next_at = await self.store.next_deadline(self.namespace, now)
            async with anyio.create_task_group() as race:

                async def until_deadline(at: float) -> None:
                    await self.clock.sleep_until(at)
                    race.cancel_scope.cancel()

                async def until_trigger() -> None:
                    await self._watchdog_trigger.wait(self.poll_interval)
                    await anyio.sleep(0.005)  # coalesce bursts of new deadlines
                    race.cancel_scope.cancel()

                if next_at is not None:
                    race.start_soon(until_deadline, next_at)
                race.start_soon(until_trigger)
            self._runs_trigger.set()
            self._activities_trigger.set()

    # ---------------------------------------------------------------- activities

    async def _claim_activities_loop(self) -> None:
        names = tuple(sorted(self.activities))
        while True:
            room = self.max_concurrent_activities - len(self.running_activities)
            batch = min(room, 100)
            tasks: list[ActivityTask] = []
            if batch > 0:
                tasks = await self.store.claim_activities(
                    self.namespace, self.task_queue, self.worker_id, names, batch,
                    self.lease_seconds, self.clock.now(),
                )
                for task in tasks:
                    self._start_activity(task)
            if batch > 0 and len(tasks) == batch:
                await anyio.lowlevel.checkpoint()
                continue
            await self._activities_trigger.wait(self.poll_interval)

    def _start_activity(self, task: ActivityTask) -> None:
        assert self._tg is not None
        defn = self.activities[task.name]
        deadlines = [d for d in (task.start_to_close_deadline, task.schedule_to_close_deadline)
                     if d is not None]
        deadline = min(deadlines) if deadlines else None
        actx = attempts.new_context(
            defn, activity_id=task.task_id, attempt=task.attempt, workflow_id=task.workflow_id,
            run_id=task.run_id, task_queue=task.task_queue, local=False,
            scheduled_at=task.scheduled_at, started_at=task.claimed_at, deadline=deadline,
            heartbeat_timeout=task.options.get("heartbeat_timeout"),
            heartbeat_details=self.client.converter.decode(task.heartbeat_details),
            clock=self.clock,
        )
        self.running_activities[task.task_id] = actx
        self._tg.start_soon(self._run_activity, task, defn, actx,
                            name=f"durable activity {task.name}/{task.task_id}")

    async def _run_activity(
        self, task: ActivityTask, defn: ActivityDefn, actx: attempts.ActivityContext
    ) -> None:
        converter = self.client.converter
        result: str | None = None
        failure: Failure | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._supervise, task, actx)
                try:
                    args = attempts.arguments(defn, converter, task.input)
                    value = await attempts.run_attempt(actx, defn, args)
                    result = converter.encode(value, f"the result of activity {task.name!r}")
                    check_size(result, self.client.limits.payload_bytes,
                               f"the result of activity {task.name!r}")
                except Exception as exc:
                    result, failure = None, attempts.attempt_failure(exc, actx, defn)
                finally:
                    tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                outcome = await self.store.complete_activity(
                    task.task_id, task.attempt, self.worker_id, result, failure,
                    self.clock.now(),
                )
            if outcome.status == "refused":
                self.log.info("activity_result_refused", task_id=task.task_id,
                              activity=task.name, attempt=task.attempt, reason=outcome.reason)
        finally:
            self.running_activities.pop(task.task_id, None)
            self._activities_trigger.set()

    async def _supervise(self, task: ActivityTask, actx: attempts.ActivityContext) -> None:
        """Flush heartbeats (throttled) and stop the attempt when storage says so."""
        hb_timeout = task.options.get("heartbeat_timeout")
        throttle = max(0.05, min(1.0, hb_timeout * 0.4)) if hb_timeout else 1.0
        local_deadline = actx.deadline

        async def expire() -> None:
            if local_deadline is not None:
                await self.clock.sleep_until(local_deadline)
                actx.request_stop("the attempt's deadline passed")

        async with anyio.create_task_group() as tg:
            tg.start_soon(expire)
            last_flush = -math.inf
            while True:
                with anyio.move_on_after(throttle):  # fallback tick for non-anyio threads
                    await actx.wakeup.wait()
                actx.wakeup = anyio.Event()
                # Throttle on the engine's clock, so virtual time keeps the same rules.
                await self.clock.sleep_until(last_flush + throttle)
                dirty, details = actx.take_details()
                if not dirty:
                    continue
                last_flush = self.clock.now()
                encoded: str | None = self.client.converter.encode(details, "heartbeat details")
                if encoded is not None and len(encoded) > self.client.limits.payload_bytes:
                    self.log.warning("heartbeat_details_too_large", task_id=task.task_id,
                                     size=len(encoded), limit=self.client.limits.payload_bytes)
                    encoded = None
                ack = await self.store.heartbeat_activity(
                    task.task_id, task.attempt, self.worker_id, encoded, last_flush,
                )
                if not ack.accepted or ack.stop_requested:
                    actx.request_stop(ack.reason or "stop requested")
