"""The store: durable's domain transactions, written once, above the driver seam.

Each method here is ONE transaction: a program from one of the domain
modules (runs, claims, commit, activities, deadlines, cancellation,
inspection, workers) handed to the driver's executor. Fencing, retries,
timeouts, cancellation policies and parent close policies live in those
programs, so every driver behaves the same by construction; a driver only
supplies a `Dialect` and runs programs (`durable.driver`).

    engine / client  ->  Store (this)  ->  Driver.run(program)  ->  database

Kept whole: one short method per transaction, the one face the engine and
the clients reach storage through; split, the face would be two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..driver import Driver, WakeHub, brief, runs_shielded, urgent
from ..failure import Failure
from . import (
    activities,
    cancellation,
    cascade,
    claims,
    closing,
    commit,
    deadlines,
    inspection,
    interaction,
    namespaces,
    parked,
    queue_views,
    queues,
    reset,
    retention,
    runs,
    schedule_pass,
    schedule_reads,
    schedule_stats,
    schedules,
    unknown,
    workers,
)
from .interaction import RequestTicket, UpdateState
from .records import (
    ActivityOutcome,
    ActivityTask,
    Claimed,
    ClaimedRun,
    ClientRequest,
    CommitResult,
    DefinitionClash,
    HeartbeatAck,
    HistoryEvent,
    InboxItem,
    OpRecord,
    RunRecord,
    StartRequest,
    StartResult,
    StorageSnapshot,
    WorkerRegistration,
    new_id,
)
from .writes import RunWrites

if TYPE_CHECKING:
    from ..schedules import ScheduleDefinition

Settled = list[CommitResult] | None  # `settle_commit`: None when storage cannot tell
ListPage = tuple[list[dict[str, Any]], tuple[float, str] | None]


class Store:
    """Typed domain transactions over one driver (see the module docstring)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        #: queues (kind, namespace, name) last seen with limits: their claims go
        #: straight to the limited path (`durable.store.queues`)
        self._limited: set[tuple[str, str, str]] = set()
        #: the limits each limited queue had at its last claim: a one-statement
        #: claim checks them against the queue's row (`queues.claim_limited_in_one`)
        self._limits: dict[tuple[str, str, str], str] = {}
        #: this process's workers that take runs as they start (eager starts,
        #: `durable._runtime.eager`): asked in turn, from the one after the last
        self.takers: list[runs.StartTakers] = []
        self._next_taker = 0

    @property
    def hub(self) -> WakeHub:
        """Where the driver publishes wake-ups."""
        return self.driver.hub

    @property
    def commit_shielded(self) -> bool:
        """Whether `commit` is shielded whole from cancellation (its driver
        `runs_shielded`: `commit` awaits nothing but the driver's `run`)."""
        return runs_shielded(self.driver)

    # ---------------------------------------------------------------- runs

    async def start_workflow(self, request: StartRequest, now: float) -> StartResult:
        """Start an instance under its id-reuse policy (`WorkflowAlreadyStarted` when it
        refuses the id); an unknown outcome is read back (`unknown.start_workflow`).

        A worker of this process with a free slot for it takes the new run in
        the start's transaction (`takers`, `runs.Taker`), as a claim would."""
        if not self.takers or ("runs", request.namespace, request.task_queue) in self._limited:
            return await unknown.start_workflow(self.driver, request, now)
        run_id = new_id()
        for turn in range(len(self.takers)):
            source = self.takers[(self._next_taker + turn) % len(self.takers)]
            taker = source.offer(request, run_id)
            if taker is not None:
                self._next_taker = (self._next_taker + turn + 1) % len(self.takers)
                break
        else:
            return await unknown.start_workflow(self.driver, request, now, run_id=run_id)
        try:
            started = await unknown.start_workflow(self.driver, request, now, taker, run_id)
        except BaseException:
            source.settle(run_id, None, failed=True)
            raise
        source.settle(run_id, started.taken, failed=False)
        return started

    async def get_run(
        self, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunRecord | None:
        """A run (the instance's current run when `run_id` is None), or None.
        Brief (`durable.driver.brief`): a read by key, which SQLite serves on
        the caller's thread when nothing of its driver is in flight there, so
        `result()` waits for no thread (decision (ba))."""
        return await self.driver.run(
            brief(lambda tx: runs.get_run(namespace, workflow_id, run_id)), write=False)

    async def resync(
        self, run_ids: list[str], waiting: dict[str, list[str]]
    ) -> tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]]:
        """Many owned runs' state and the closed ops they wait on, in one read."""
        return await self.driver.run(lambda tx: runs.resync(run_ids, waiting), write=False)

    async def reset_run(self, namespace: str, workflow_id: str, run_id: str | None, to_op: str,
                        reason: str, now: float) -> dict[str, Any]:
        """Continue a failed or stuck run as a new run from `to_op` (`store.reset`)."""
        return await self.driver.run(lambda tx: reset.reset_run(
            tx, namespace, workflow_id, run_id, to_op, reason, now))

    async def clear_review(self, namespace: str, workflow_id: str, now: float,
                           units: str | None = None) -> bool:
        """Let a run marked for review be replayed again; False if it was not
        marked. Raises `WorkflowNotFound`."""
        return await self.driver.run(
            lambda tx: runs.clear_review(tx, namespace, workflow_id, now, units))

    # ---------------------------------------------------------------- ownership

    async def claim_runs(
        self, namespace: str, task_queue: str, worker_id: str, workflow_types: tuple[str, ...],
        limit: int, lease_seconds: float, now: float, capabilities: tuple[str, ...] = (),
        build_id: str | None = None,
    ) -> Claimed[ClaimedRun]:
        """Take runnable runs of these types (epoch bumped), with their recorded ops:
        at most `limit` and at most a fair share of the ready runs (`Claimed.left`
        says how many ready runs this claim saw left for others). A worker of a
        build skips the runs that build cannot replay (the upgrade gate); a
        limited queue is claimed within its limits (`durable.store.queues`)."""
        queue = ("runs", namespace, task_queue)
        limited = queue in self._limited
        limits = self._limits.get(queue) if limited else None
        claimed = await self.driver.run(lambda tx: claims.claim_runs(
            tx, namespace, task_queue, worker_id, workflow_types, limit, lease_seconds, now,
            capabilities, build_id, limited, limits))
        if (claimed.limited and not limited and not claimed) or claimed.stale:
            # the one-statement claim found the queue limited, or could not
            # trust its snapshot: claim within the limits in a transaction
            claimed = await self.driver.run(lambda tx: claims.claim_runs(
                tx, namespace, task_queue, worker_id, workflow_types, limit, lease_seconds,
                now, capabilities, build_id, True))
        if claimed.limited:
            self._limited.add(queue)
        else:
            self._limited.discard(queue)
        if claimed.limits is not None:
            self._limits[queue] = claimed.limits
        else:
            self._limits.pop(queue, None)
        # a close or release of a run of this queue wakes its claimers (decision (at))
        self.hub.limit_slots(namespace, task_queue,
                             claimed.limited and queues.counts_slots(claimed.limits))
        if claimed.unread:  # after the claim committed: see fastpath.claim_runs_in_one
            await self.driver.run(lambda tx: claims.read_claimed_ops(claimed), write=False)
        return claimed

    async def open_runs(self, namespace: str, task_queue: str, after_run_id: str = "",
                        limit: int = 500) -> list[dict[str, Any]]:
        """A page of a task queue's open runs by run id (id, type, builds)."""
        return await self.driver.run(
            lambda tx: runs.open_runs(namespace, task_queue, after_run_id, limit), write=False)

    async def take_for_build(self, run_id: str, epoch: int, build_id: str) -> bool:
        """Record that `build_id` replayed the claimed run and now advances it."""
        return await self.driver.run(lambda tx: claims.take_for_build(tx, run_id, epoch, build_id))

    async def block_run(self, run_id: str, epoch: int, worker_id: str, build_id: str,
                        divergence: str, refused: list[str]) -> bool:
        """Hand back a claimed run `build_id` cannot replay (nor `refused`)."""
        return await self.driver.run(lambda tx: claims.block_run(
            tx, run_id, epoch, worker_id, build_id, divergence, refused))

    async def renew_leases(
        self, worker_id: str, run_ids: list[str], lease_seconds: float, now: float
    ) -> set[str]:
        """Extend the worker's leases; the run ids it still owns."""
        return await self.driver.run(
            lambda tx: claims.renew_leases(tx, worker_id, run_ids, lease_seconds, now))

    async def release_runs(
        self, worker_id: str, run_ids: list[str], now: float, attempts: bool = True
    ) -> None:
        """Hand runs (and, with `attempts`, running attempts) back without a retry."""
        await self.driver.run(
            lambda tx: claims.release_runs(tx, worker_id, run_ids, now, attempts))

    async def release_strays(self, worker_id: str, running: frozenset[str]) -> list[str]:
        """Hand back the runs `worker_id` owns but is not running (`claims.release_strays`)."""
        return await self.driver.run(lambda tx: claims.release_strays(tx, worker_id, running))

    async def release_parked(self, worker_id: str, runs: list[parked.Parked],
                             now: float) -> list[parked.Released]:
        """Put runs down under pressure, each claimable again once its wait ends."""
        return await self.driver.run(lambda tx: parked.release_parked(tx, worker_id, runs, now))

    async def waited_for(self, namespace: str, task_queue: str, types: tuple[str, ...],
                         run_ids: list[str], now: float) -> dict[str, int]:
        """Of these runs (held, only waiting), those a ready run of the queue
        descends from, and how many each (`parked.waited_for`)."""
        return await self.driver.run(lambda tx: parked.waited_for(
            namespace, task_queue, types, run_ids, now), write=False)

    async def trade_parked(
        self, namespace: str, task_queue: str, worker_id: str, types: tuple[str, ...],
        runs: list[parked.Parked], lease_seconds: float, now: float,
        capabilities: tuple[str, ...] = (), build_id: str | None = None,
    ) -> parked.Traded:
        """Under queue pressure: put runs down and claim, in the queue slots they
        free, ready runs that descend from them, in one transaction
        (`parked.trade_parked`, decision (ao))."""
        sql = claims.claim_sql(namespace, task_queue, worker_id, types, len(runs),
                               lease_seconds, now, capabilities, build_id)
        return await self.driver.run(lambda tx: parked.trade_parked(
            tx, worker_id, runs, sql, namespace, task_queue, now))

    async def expire_leases(self, worker_id: str, now: float) -> int:
        """Declare a worker gone now (its leases expire at once); how many leases."""
        return await self.driver.run(lambda tx: claims.expire_leases(tx, worker_id, now))

    # ---------------------------------------------------------------- the owner's commit

    def commit(self, batches: list[RunWrites], now: float) -> Awaitable[list[CommitResult]]:
        """Record runs' writes in one transaction, each run fenced by its epoch
        (the driver's `run` itself, not a coroutine around it: one await layer
        less on every step's commit, paid at each suspension and resume)."""
        return self.driver.run(brief(lambda tx: commit.commit(tx, batches, now)))

    async def settle_commit(self, batches: list[RunWrites], now: float) -> Settled:
        """A `commit` whose outcome was unknown, read back (`unknown.settle_commit`)."""
        return await unknown.settle_commit(self.driver, batches, now)

    # ---------------------------------------------------------------- activities

    async def claim_activities(
        self, namespace: str, task_queue: str, worker_id: str, names: tuple[str, ...],
        limit: int, lease_seconds: float, now: float, task_ids: tuple[str, ...] = (),
        available_by: float | None = None,
    ) -> Claimed[ActivityTask]:
        """Start pending attempts of these activities on this worker (of these
        task ids only, or available since `available_by` only, if given)."""
        claimed = await self.driver.run(lambda tx: activities.claim_activities(
            tx, namespace, task_queue, worker_id, names, limit, lease_seconds, now, task_ids,
            available_by))
        # an attempt of this queue that stops running wakes its claimers
        self.hub.limit_activity_slots(namespace, task_queue, claimed.limited
                                      and queues.counts_activity_slots(claimed.limits))
        return claimed

    async def complete_activity(
        self, task_id: str, attempt: int, worker_id: str, result: str | None,
        failure: Failure | None, now: float,
    ) -> ActivityOutcome:
        """Record an attempt's outcome: recorded, retry_scheduled or refused."""
        return await self.driver.run(lambda tx: activities.complete_activity(
            tx, task_id, attempt, worker_id, result, failure, now))

    async def attempt_state(self, task_id: str) -> tuple[str, int, str | None] | None:
        """(status, attempt, owner) of an activity task, or None if unknown: how a
        worker learns whether a report whose commit was lost was recorded."""
        return await self.driver.run(lambda tx: activities.attempt_state(task_id),
                                     write=False)

    async def heartbeat_activity(
        self, task_id: str, attempt: int, worker_id: str, details: str | None, now: float
    ) -> HeartbeatAck:
        """Record progress; whether the attempt is still current and must stop."""
        return await self.driver.run(lambda tx: activities.heartbeat_activity(
            tx, task_id, attempt, worker_id, details, now))

    # ---------------------------------------------------------------- the watchdog

    async def next_deadline(self, namespace: str, now: float, since: float | None = None
                            ) -> tuple[float | None, float | None]:
        """When something in the namespace is next due: (a deadline, a lease expiry);
        an attempt that became available after `since` counts as due."""
        return await self.driver.run(lambda tx: deadlines.next_deadline(namespace, now, since),
                                     write=False)

    async def enforce_expired(
        self, namespace: str, now: float, run_id: str | None = None
    ) -> dict[str, int]:
        """Enforce every deadline due at `now`; counts by kind."""
        return await self.driver.run(
            lambda tx: deadlines.enforce_expired(tx, namespace, now, run_id))

    async def overdue(self, namespace: str, now: float, limit: int = 100) -> dict[str, Any]:
        """The deadlines passed and not enforced yet (`deadlines.overdue`)."""
        return await self.driver.run(lambda tx: deadlines.overdue(namespace, now, limit),
                                     write=False)

    async def overdue_counts(self, namespaces: list[str],
                             now: float) -> dict[tuple[str, str], tuple[int, float]]:
        """Deadlines passed unenforced, per namespace (`deadlines.overdue_counts`)."""
        return await self.driver.run(lambda tx: deadlines.overdue_counts(namespaces, now),
                                     write=False)

    async def enforce_attempts(self, namespace: str, task_ids: list[str],
                               now: float) -> list[dict[str, Any]]:
        """Apply the passed deadline of each of these attempts
        (`deadlines.enforce_attempts`)."""
        return await self.driver.run(
            lambda tx: deadlines.enforce_attempts(tx, namespace, task_ids, now))

    async def watchdog_pass(self, namespace: str, clock: Callable[[], float]
                            ) -> deadlines.WatchPass:
        """Enforce every deadline due at `clock()` read inside the transaction,
        and when something is next due, in one transaction."""
        return await self.driver.run(  # served first where a driver can (`urgent`)
            urgent(lambda tx: deadlines.watchdog_pass(tx, namespace, clock)))

    # ---------------------------------------------------------------- control

    async def close_run_externally(
        self, namespace: str, workflow_id: str, run_id: str | None, status: str, reason: str,
        now: float,
    ) -> RunRecord:
        """cancel()/terminate(): close the run now (no-op when closed); the run.
        Raises `WorkflowNotFound`."""
        return await self.driver.run(lambda tx: closing.close_run_externally(
            tx, namespace, workflow_id, run_id, status, reason, now))

    async def request_cancellation(
        self, namespace: str, workflow_id: str, run_id: str | None, reason: str,
        cleanup_timeout: float, requester: dict[str, Any] | None, source: str, now: float,
    ) -> tuple[bool, dict[str, Any]]:
        """Record a cooperative request once: (accepted, the request as stored).
        Raises `WorkflowNotFound`, `RunNotCurrent`, `RunAlreadyClosed`,
        `CapabilityUnsupported` (nothing recorded)."""
        return await self.driver.run(lambda tx: cancellation.request_cancellation(
            tx, namespace, workflow_id, run_id, reason, cleanup_timeout, requester, source,
            now))

    async def stop_requests(self, worker_id: str) -> list[str]:
        """Attempts of this worker that were asked to stop, or fenced by their
        run's close, and have not stopped yet."""
        return await self.driver.run(lambda tx: cancellation.stop_requests(worker_id),
                                     write=False)

    # ---------------------------------------------------------------- interaction

    async def send_signal(self, namespace: str, workflow_id: str, run_id: str | None,
                          name: str, payload: str, now: float,
                          sender: dict[str, Any] | None = None,
                          request_id: str | None = None) -> interaction.SignalReceipt:
        """Record a received signal and who sent it, once per `request_id`.
        Raises `WorkflowNotFound`, `RunAlreadyClosed`."""
        return await self.driver.run(lambda tx: interaction.send_signal(
            tx, namespace, workflow_id, run_id, name, payload, now, sender, request_id))

    async def signal_with_start(self, request: StartRequest, name: str, payload: str,
                                now: float) -> StartResult:
        """Signal the open run of the instance, or start one and signal it."""
        return await self.driver.run(
            lambda tx: interaction.signal_with_start(tx, request, name, payload, now))

    async def submit_request(self, namespace: str, workflow_id: str, run_id: str | None,
                             kind: str, name: str, payload: str, update_id: str | None,
                             now: float, sender: dict[str, Any] | None = None) -> RequestTicket:
        """Ask a run a query or an update (see `durable.store.interaction`)."""
        return await self.driver.run(lambda tx: interaction.submit_request(
            tx, namespace, workflow_id, run_id, kind, name, payload, update_id, now, sender))

    async def take_answer(self, request_id: str) -> dict[str, Any] | None:
        """A request's answer (a query's row is deleted then), or None."""
        return await self.driver.run(lambda tx: interaction.take_answer(request_id))

    async def withdraw_request(self, request_id: str) -> dict[str, Any] | None:
        """Stop waiting for a request; its answer if one arrived meanwhile."""
        return await self.driver.run(lambda tx: interaction.withdraw_request(request_id))

    async def answer_request(self, request_id: str, answer: dict[str, Any], now: float,
                             taker: str | None = None) -> bool:
        """A worker's answer to a request (the first one counts; a `taker`'s only
        while the request is still its own)."""
        return await self.driver.run(
            lambda tx: interaction.answer_request(tx, request_id, answer, now, taker))

    async def update_state(self, run_id: str, update_id: str,
                           request_id: str | None) -> UpdateState:
        """Where an update stands (accepted, completed, rejected, or still asked)."""
        return await self.driver.run(
            lambda tx: interaction.update_state(run_id, update_id, request_id), write=False)

    async def pending_interactions(
        self, run_id: str, after_seq: int
    ) -> tuple[list[InboxItem], list[ClientRequest]]:
        """Signals received after `after_seq` and unanswered requests of a run."""
        return await self.driver.run(
            lambda tx: interaction.pending_interactions(run_id, after_seq), write=False)

    async def load_inbox(self, run_id: str) -> tuple[list[InboxItem], list[ClientRequest]]:
        """A run's whole inbox (for replay) and its unanswered requests."""
        return await self.driver.run(lambda tx: interaction.load_inbox(run_id), write=False)

    async def load_for_replay(
        self, run_id: str
    ) -> tuple[RunRecord, dict[str, OpRecord], list[InboxItem]] | None:
        """A run, its ops and its inbox, for a read-only replay."""
        return await self.driver.run(lambda tx: interaction.load_for_replay(run_id),
                                     write=False)

    async def idle_requests(self, namespace: str, task_queue: str, types: tuple[str, ...],
                            limit: int, now: float) -> list[str]:
        """Queries of runs no live worker holds, that these workflow types answer."""
        return await self.driver.run(lambda tx: interaction.idle_requests(
            namespace, task_queue, types, limit, now), write=False)

    async def queries_due(self, namespace: str, task_queue: str, types: tuple[str, ...],
                          limit: int, now: float, worker_id: str
                          ) -> tuple[list[str], float | None]:
        """`idle_requests`, and when the first other live taker of such a query
        registered until (its query is offered again just after), in one read."""
        return await self.driver.run(lambda tx: interaction.queries_due(
            namespace, task_queue, types, limit, now, worker_id), write=False)

    async def take_requests(self, request_ids: list[str], worker_id: str,
                            now: float) -> list[ClientRequest]:
        """Take requests to answer (each by one live worker only; again once
        its taker is gone)."""
        return await self.driver.run(lambda tx: interaction.take_requests(tx, request_ids,
                                                                          worker_id, now))

    async def purge_requests(self, before: float) -> int:
        """Delete requests created before `before`; how many."""
        return await self.driver.run(lambda tx: interaction.purge_requests(before))

    # ---------------------------------------------------------------- inspection

    async def describe(
        self, namespace: str, workflow_id: str, run_id: str | None, now: float | None = None
    ) -> dict[str, Any] | None:
        """The instance and a run as describe() documents them, or None (with
        `now`: what an open run no worker holds waits for)."""
        return await self.driver.run(
            lambda tx: inspection.describe(namespace, workflow_id, run_id, now), write=False)

    async def history(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> list[HistoryEvent]:
        """A run's events after `after_sequence`, oldest first."""
        return await self.driver.run(
            lambda tx: inspection.history(run_id, after_sequence, limit), write=False)

    async def list_runs(
        self, namespace: str, status: str | None, workflow_type: str | None, limit: int,
        before: tuple[float, str] | None = None, *, statuses: tuple[str, ...] | None = None,
        id_contains: str | None = None, now: float | None = None,
        matching: Sequence[tuple[str, str]] = (),
    ) -> ListPage:
        """Run summaries, newest first, and the next page's key (`now`: names holders;
        `matching`: column = value, `inspection.list_runs`)."""
        return await self.driver.run(lambda tx: inspection.list_runs(
            namespace, status, workflow_type, limit, before, statuses=statuses,
            id_contains=id_contains, now=now, matching=matching), write=False)

    async def namespaces(self) -> list[dict[str, Any]]:
        """Every namespace that holds something: run counts, description,
        retention (`durable.store.namespaces`)."""
        return await self.driver.run(lambda tx: namespaces.listed(), write=False)

    async def create_namespace(self, namespace: str, description: str | None,
                               retention_seconds: float | None, now: float) -> None:
        """Create a namespace that holds nothing yet (`namespaces.NamespaceAlreadyExists`)."""
        await self.driver.run(lambda tx: namespaces.create(
            tx, namespace, description, retention_seconds, now))

    async def update_namespace(self, namespace: str, fields: dict[str, Any],
                               now: float) -> None:
        """Change a namespace's description or retention (`namespaces.NoSuchNamespace`)."""
        await self.driver.run(lambda tx: namespaces.update(tx, namespace, fields, now))

    async def run_ids(self, namespace: str, workflow_id: str) -> list[str]:
        """Every run of a workflow id, oldest first."""
        return await self.driver.run(lambda tx: inspection.run_ids(namespace, workflow_id),
                                     write=False)

    async def observe(
        self, after_event_id: int | None, limit: int, recheck: tuple[int, ...] = ()
    ) -> StorageSnapshot:
        """Run counts, open cancellations and an event tail (what metrics export)."""
        return await self.driver.run(
            lambda tx: inspection.observe(after_event_id, limit, recheck), write=False)

    async def cancellation_cascade(
        self, namespace: str, workflow_id: str, run_id: str | None, now: float
    ) -> dict[str, Any]:
        """The cancellation tree rooted at the run. Raises `WorkflowNotFound`."""
        return await self.driver.run(
            lambda tx: cascade.cascade(namespace, workflow_id, run_id, now), write=False)

    # ---------------------------------------------------------------- workers

    async def register_worker(self, registration: WorkerRegistration, ttl: float,
                              now: float) -> list[DefinitionClash]:
        """Record a live worker until `now + ttl`; the names another live worker
        of its queue registers with different code."""
        return await self.driver.run(lambda tx: workers.register_worker(registration, ttl, now))

    async def deregister_worker(self, worker_id: str, now: float) -> None:
        """Mark a stopped worker gone."""
        await self.driver.run(lambda tx: workers.deregister_worker(worker_id, now))

    async def forget_worker(self, namespace: str, worker_id: str, now: float) -> str:
        """Delete a gone worker's record: deleted, alive (kept) or missing."""
        return await self.driver.run(lambda tx: workers.forget_worker(namespace, worker_id, now))

    async def list_workers(self, namespace: str, now: float) -> list[dict[str, Any]]:
        """The namespace's workers, alive and recently gone (`workers.list_workers`)."""
        return await self.driver.run(lambda tx: workers.list_workers(namespace, now),
                                     write=False)

    async def workflow_definitions(self, namespace: str, workflow_type: str,
                                   now: float) -> list[dict[str, Any]]:
        """What each live worker registering the type registered for it."""
        return await self.driver.run(
            lambda tx: workers.workflow_definitions(namespace, workflow_type, now),
            write=False)

    async def registered_names(self, namespace: str, now: float, task_queue: str | None = None,
                               ) -> tuple[set[str], set[str]]:
        """Workflow types and activity names live workers have registered (of
        one task queue, if given)."""
        return await self.driver.run(
            lambda tx: workers.registered_names(namespace, now, task_queue), write=False)

    # ---------------------------------------------------------------- queue limits

    async def set_queue_limits(self, namespace: str, name: str, limits: dict[str, Any],
                               now: float) -> None:
        """Store a queue's limits (`durable.store.queues`; empty: none)."""
        await self.driver.run(lambda tx: queues.set_limits(tx, namespace, name, limits, now))

    async def describe_queue(self, namespace: str, name: str, now: float) -> dict[str, Any]:
        """A queue's limits, what runs and waits, and the rate left."""
        return await self.driver.run(lambda tx: queue_views.describe_queue(namespace, name, now),
                                     write=False)

    async def queue_builds(self, namespace: str, name: str, now: float) -> dict[str, Any]:
        """The queue's builds, their workers and the open runs each holds or
        refused (`durable._builds.rollout`), read in one transaction."""
        from .._builds import rollout

        def program(tx: Any) -> Any:
            found = yield from workers.list_workers(namespace, now)
            runs = yield from queue_views.build_runs(namespace, name)
            return rollout(namespace, name, found, runs)
        return await self.driver.run(program, write=False)

    async def queue_gauges(self, now: float) -> list[dict[str, Any]]:
        """Every queue's running, waiting, limits and rate left (for /metrics)."""
        return await self.driver.run(lambda tx: queue_views.gauges(now), write=False)

    async def list_queues(self, namespace: str, now: float) -> list[dict[str, Any]]:
        """`describe_queue` of every queue known in the namespace."""
        def program(tx: Any) -> Any:
            names = yield from queue_views.queue_names(namespace, now)
            out = []
            for name in names:
                out.append((yield from queue_views.describe_queue(namespace, name, now,
                                                                  leases=False)))
            return out
        return await self.driver.run(program, write=False)

    # ---------------------------------------------------------------- schedules

    async def fire_schedules(self, namespace: str, now: float, limit: int,
                             check_waiting: bool) -> schedule_pass.FirePass:
        """Fire what is due (and, with `check_waiting`, buffered fires whose
        blocking run closed); when the namespace is next due."""
        return await self.driver.run(lambda tx: schedule_pass.fire_due(
            tx, namespace, now, limit, check_waiting))

    async def next_schedule_due(self, namespace: str) -> tuple[float | None, bool]:
        """When the namespace's next fire is due (None: none will), and whether
        fires wait for runs to close."""
        return await self.driver.run(lambda tx: schedule_pass.next_due(namespace), write=False)

    async def schedule_stats(self, after: float | None, limit: int,
                             now: float | None = None) -> schedule_stats.ScheduleStats:
        """Schedule counts, fires recorded after `after`, retention's deletions
        and (with `now`) the overdue schedules (what /metrics exports)."""
        return await self.driver.run(lambda tx: schedule_stats.stats(after, limit, now),
                                     write=False)

    async def create_schedule(self, namespace: str, schedule_id: str,
                              definition: ScheduleDefinition, now: float) -> None:
        """Store a new schedule. Raises `ScheduleAlreadyExists`."""
        await self.driver.run(lambda tx: schedules.create(tx, namespace, schedule_id,
                                                          definition, now))

    async def describe_schedule(self, namespace: str, schedule_id: str,
                                now: float) -> dict[str, Any] | None:
        """A schedule, its next fires and its recent fires with their runs' status."""
        return await self.driver.run(
            lambda tx: schedule_reads.describe(namespace, schedule_id, now), write=False)

    async def list_schedules(
        self, namespace: str, limit: int, after: tuple[float, str] | None = None, *,
        paused: bool | None = None, workflow_type: str | None = None,
        matching: Sequence[tuple[str, str | int]] = (), now: float,
    ) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
        """A page of schedule summaries, newest first, with their last fire, and
        the (created_at, schedule_id) the next page starts after (None on the last).
        Raises `StaleCursor` for an `after` the filters no longer keep."""
        return await self.driver.run(
            lambda tx: schedule_reads.list_schedules(
                namespace, limit, after, paused=paused, workflow_type=workflow_type,
                matching=matching, now=now), write=False)

    async def pause_schedule(self, namespace: str, schedule_id: str, note: str | None,
                             now: float) -> None:
        """Stop firing. Raises `ScheduleNotFound`."""
        await self.driver.run(lambda tx: schedules.pause(tx, namespace, schedule_id, note,
                                                         now))

    async def resume_schedule(self, namespace: str, schedule_id: str, note: str | None,
                              now: float) -> None:
        """Fire again from the next fire time after `now`. Raises `ScheduleNotFound`."""
        await self.driver.run(lambda tx: schedules.resume(tx, namespace, schedule_id, note,
                                                          now))

    async def update_schedule(self, namespace: str, schedule_id: str,
                              changes: dict[str, Any], now: float) -> None:
        """Change some of a schedule's fields. Raises `ScheduleNotFound`."""
        await self.driver.run(lambda tx: schedules.update(tx, namespace, schedule_id,
                                                          changes, now))

    async def delete_schedule(self, namespace: str, schedule_id: str) -> None:
        """Delete a schedule and its fires. Raises `ScheduleNotFound`."""
        await self.driver.run(lambda tx: schedules.delete(tx, namespace, schedule_id))

    async def trigger_schedule(self, namespace: str, schedule_id: str, overlap: str | None,
                               now: float) -> dict[str, Any]:
        """Fire now; what became of the fire. Raises `ScheduleNotFound`."""
        return await self.driver.run(lambda tx: schedules.trigger(
            tx, namespace, schedule_id, overlap, now))

    async def backfill_schedule(
        self, namespace: str, schedule_id: str, start: float, end: float, overlap: str | None,
        now: float,
    ) -> tuple[list[dict[str, Any]], float | None]:
        """Fire the fire times in [start, end), a bounded number per transaction;
        the fires and where to resume (None: done). Raises `ScheduleNotFound`."""
        return await self.driver.run(lambda tx: schedules.backfill(
            tx, namespace, schedule_id, start, end, overlap, now))

    # ---------------------------------------------------------------- retention

    async def set_retention(self, namespace: str, seconds: float | None, now: float) -> None:
        """Keep the namespace's closed runs `seconds` (None: the workers' setting)."""
        await self.driver.run(lambda tx: retention.set_retention(tx, namespace, seconds, now))

    async def retention_settings(self, namespace: str) -> dict[str, Any]:
        """The namespace's retention and what retention deleted there so far."""
        return await self.driver.run(lambda tx: retention.settings(namespace), write=False)

    async def expired_runs(self, namespace: str, cutoff: float,
                           limit: int) -> list[dict[str, Any]]:
        """The oldest runs closed before `cutoff`."""
        return await self.driver.run(lambda tx: retention.expired(namespace, cutoff, limit),
                                     write=False)

    async def count_expired_runs(self, namespace: str, cutoff: float) -> int:
        """How many runs closed before `cutoff`."""
        return await self.driver.run(lambda tx: retention.count_expired(namespace, cutoff),
                                     write=False)

    async def prune_runs(self, namespace: str, cutoff: float, now: float) -> retention.Pruned:
        """Delete the next small batch of runs closed before `cutoff` (see
        `durable.store.retention`); nothing deleted: none left."""
        return await self.driver.run(
            lambda tx: retention.prune_batch(tx, namespace, cutoff, now))

    async def reclaim_space(self) -> None:
        """Make deleted rows' space reusable where the database needs telling
        (PostgreSQL: VACUUM, outside a transaction)."""
        await self.driver.run(retention.vacuum, write=False)
