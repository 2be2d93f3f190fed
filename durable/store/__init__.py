"""The store: durable's domain transactions, written once, above the driver seam.

Each method here is ONE transaction: a program from one of the domain
modules (runs, claims, commit, activities, deadlines, cancellation,
inspection, workers) handed to the driver's executor. Fencing, retries,
timeouts, cancellation policies and parent close policies live in those
programs, so every driver behaves the same by construction; a driver only
supplies a `Dialect` and runs programs (`durable.driver`).

    engine / client  ->  Store (this)  ->  Driver.run(program)  ->  database
"""

from __future__ import annotations

from typing import Any

from ..driver import Driver, WakeHub
from ..failure import Failure
from . import (
    activities,
    cancellation,
    claims,
    closing,
    commit,
    deadlines,
    inspection,
    interaction,
    runs,
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
    HeartbeatAck,
    HistoryEvent,
    InboxItem,
    OpRecord,
    RunRecord,
    StartRequest,
    StartResult,
    StorageSnapshot,
    WorkerRegistration,
)
from .writes import RunWrites

ListPage = tuple[list[dict[str, Any]], tuple[float, str] | None]


class Store:
    """Typed domain transactions over one driver (see the module docstring)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    @property
    def hub(self) -> WakeHub:
        """Where the driver publishes wake-ups."""
        return self.driver.hub

    # ---------------------------------------------------------------- runs

    async def start_workflow(self, request: StartRequest, now: float) -> StartResult:
        """Start an instance under its id-reuse policy.

        Raises `WorkflowAlreadyStarted` when the policy refuses the id.
        """
        return await self.driver.run(lambda tx: runs.start_workflow(tx, request, now))

    async def get_run(
        self, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunRecord | None:
        """A run (the instance's current run when `run_id` is None), or None."""
        return await self.driver.run(lambda tx: runs.get_run(namespace, workflow_id, run_id),
                                     write=False)

    async def resync(
        self, run_ids: list[str], waiting: dict[str, list[str]]
    ) -> tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]]:
        """Many owned runs' state and the closed ops they wait on, in one read."""
        return await self.driver.run(lambda tx: runs.resync(run_ids, waiting), write=False)

    async def clear_review(self, namespace: str, workflow_id: str, now: float,
                           units: str | None = None) -> bool:
        """Let a run marked for review be replayed again; False if it was not marked.

        Raises `WorkflowNotFound`.
        """
        return await self.driver.run(
            lambda tx: runs.clear_review(tx, namespace, workflow_id, now, units))

    # ---------------------------------------------------------------- ownership

    async def claim_runs(
        self, namespace: str, task_queue: str, worker_id: str, workflow_types: tuple[str, ...],
        limit: int, lease_seconds: float, now: float, capabilities: tuple[str, ...] = (),
    ) -> Claimed[ClaimedRun]:
        """Take runnable runs of these types (epoch bumped), with their recorded ops:
        at most `limit` and at most a fair share of the ready runs (`Claimed.left`
        says how many ready runs this claim saw left for others)."""
        claimed = await self.driver.run(lambda tx: claims.claim_runs(
            tx, namespace, task_queue, worker_id, workflow_types, limit, lease_seconds, now,
            capabilities))
        if claimed.unread:  # after the claim committed: see claims._claim_runs_in_one
            await self.driver.run(lambda tx: claims.read_claimed_ops(claimed), write=False)
        return claimed

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

    async def expire_leases(self, worker_id: str, now: float) -> int:
        """Declare a worker gone now (its leases expire at once); how many leases."""
        return await self.driver.run(lambda tx: claims.expire_leases(tx, worker_id, now))

    # ---------------------------------------------------------------- the owner's commit

    async def commit(self, batches: list[RunWrites], now: float) -> list[CommitResult]:
        """Record runs' writes in one transaction, each run fenced by its epoch."""
        return await self.driver.run(lambda tx: commit.commit(tx, batches, now))

    # ---------------------------------------------------------------- activities

    async def claim_activities(
        self, namespace: str, task_queue: str, worker_id: str, names: tuple[str, ...],
        limit: int, lease_seconds: float, now: float,
    ) -> Claimed[ActivityTask]:
        """Start pending attempts of these activities on this worker."""
        return await self.driver.run(lambda tx: activities.claim_activities(
            tx, namespace, task_queue, worker_id, names, limit, lease_seconds, now))

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

    async def next_deadline(self, namespace: str,
                            now: float) -> tuple[float | None, float | None]:
        """When something in the namespace is next due: (a deadline, a lease expiry)."""
        return await self.driver.run(lambda tx: deadlines.next_deadline(namespace, now),
                                     write=False)

    async def enforce_expired(
        self, namespace: str, now: float, run_id: str | None = None
    ) -> dict[str, int]:
        """Enforce every deadline due at `now`; counts by kind."""
        return await self.driver.run(
            lambda tx: deadlines.enforce_expired(tx, namespace, now, run_id))

    # ---------------------------------------------------------------- control

    async def close_run_externally(
        self, namespace: str, workflow_id: str, run_id: str | None, status: str, reason: str,
        now: float,
    ) -> RunRecord:
        """cancel()/terminate(): close the run now (no-op when closed); the run.

        Raises `WorkflowNotFound`.
        """
        return await self.driver.run(lambda tx: closing.close_run_externally(
            tx, namespace, workflow_id, run_id, status, reason, now))

    async def request_cancellation(
        self, namespace: str, workflow_id: str, run_id: str | None, reason: str,
        cleanup_timeout: float, requester: dict[str, Any] | None, source: str, now: float,
    ) -> tuple[bool, dict[str, Any]]:
        """Record a cooperative request once: (accepted, the request as stored).

        Raises `WorkflowNotFound`, `RunNotCurrent`, `RunAlreadyClosed`,
        `CapabilityUnsupported` (nothing recorded).
        """
        return await self.driver.run(lambda tx: cancellation.request_cancellation(
            tx, namespace, workflow_id, run_id, reason, cleanup_timeout, requester, source,
            now))

    async def stop_requests(self, worker_id: str) -> list[str]:
        """Running attempts of this worker that were asked to stop."""
        return await self.driver.run(lambda tx: cancellation.stop_requests(worker_id),
                                     write=False)

    # ---------------------------------------------------------------- interaction

    async def send_signal(self, namespace: str, workflow_id: str, run_id: str | None,
                          name: str, payload: str, now: float) -> InboxItem:
        """Record a received signal. Raises `WorkflowNotFound`, `RunAlreadyClosed`."""
        return await self.driver.run(lambda tx: interaction.send_signal(
            tx, namespace, workflow_id, run_id, name, payload, now))

    async def signal_with_start(self, request: StartRequest, name: str, payload: str,
                                now: float) -> StartResult:
        """Signal the open run of the instance, or start one and signal it."""
        return await self.driver.run(
            lambda tx: interaction.signal_with_start(tx, request, name, payload, now))

    async def submit_request(self, namespace: str, workflow_id: str, run_id: str | None,
                             kind: str, name: str, payload: str, update_id: str | None,
                             now: float) -> RequestTicket:
        """Ask a run a query or an update (see `durable.store.interaction`)."""
        return await self.driver.run(lambda tx: interaction.submit_request(
            tx, namespace, workflow_id, run_id, kind, name, payload, update_id, now))

    async def take_answer(self, request_id: str) -> dict[str, Any] | None:
        """A request's answer (a query's row is deleted then), or None."""
        return await self.driver.run(lambda tx: interaction.take_answer(request_id))

    async def withdraw_request(self, request_id: str) -> dict[str, Any] | None:
        """Stop waiting for a request; its answer if one arrived meanwhile."""
        return await self.driver.run(lambda tx: interaction.withdraw_request(request_id))

    async def answer_request(self, request_id: str, answer: dict[str, Any], now: float) -> bool:
        """A worker's answer to a request (the first one counts)."""
        return await self.driver.run(
            lambda tx: interaction.answer_request(tx, request_id, answer, now))

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

    async def take_requests(self, request_ids: list[str], worker_id: str) -> list[ClientRequest]:
        """Take pending requests to answer (each by one worker only)."""
        return await self.driver.run(lambda tx: interaction.take_requests(request_ids,
                                                                          worker_id))

    async def purge_requests(self, before: float) -> int:
        """Delete requests created before `before`; how many."""
        return await self.driver.run(lambda tx: interaction.purge_requests(before))

    # ---------------------------------------------------------------- inspection

    async def describe(
        self, namespace: str, workflow_id: str, run_id: str | None
    ) -> dict[str, Any] | None:
        """The instance and a run as describe() documents them, or None."""
        return await self.driver.run(
            lambda tx: inspection.describe(namespace, workflow_id, run_id), write=False)

    async def history(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> list[HistoryEvent]:
        """A run's events after `after_sequence`, oldest first."""
        return await self.driver.run(
            lambda tx: inspection.history(run_id, after_sequence, limit), write=False)

    async def list_runs(
        self, namespace: str, status: str | None, workflow_type: str | None, limit: int,
        before: tuple[float, str] | None = None,
    ) -> ListPage:
        """Run summaries, newest first, and the key of the next page."""
        return await self.driver.run(lambda tx: inspection.list_runs(
            namespace, status, workflow_type, limit, before), write=False)

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
            lambda tx: inspection.cascade(namespace, workflow_id, run_id, now), write=False)

    # ---------------------------------------------------------------- workers

    async def register_worker(self, registration: WorkerRegistration, ttl: float,
                              now: float) -> None:
        """Record a live worker until `now + ttl`."""
        await self.driver.run(lambda tx: workers.register_worker(registration, ttl, now))

    async def deregister_worker(self, worker_id: str) -> None:
        """Forget a stopped worker."""
        await self.driver.run(lambda tx: workers.deregister_worker(worker_id))

    async def registered_names(self, namespace: str, now: float) -> tuple[set[str], set[str]]:
        """Workflow types and activity names live workers have registered."""
        return await self.driver.run(lambda tx: workers.registered_names(namespace, now),
                                     write=False)

