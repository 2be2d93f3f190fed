"""The storage driver Protocol: domain transactions, not SQL.

Every method is one transaction, and drivers implement each as one round trip
where they can: a step's cost is its round trips. Writes made on behalf of a
run are fenced by the run's lease epoch; a stale owner's batch is refused with
`committed=False` and the engine drops the run without recording anything.

Drivers are found by URL scheme through the ``durable.drivers`` entry-point
group, so a third party can ship one without touching `durable`; core code
never imports a driver module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigurationError

OPEN_STATUSES = ("pending", "running")
TERMINAL_STATUSES = ("completed", "failed", "cancelled", "timed_out", "terminated", "continued")


@dataclass(frozen=True)
class Wake:
    """A hint that something changed: ("run", run_id), ("runs", ns, queue),
    ("activities", ns, queue), ("activity_stop", task_id) or ("any",) when a
    driver only knows that another process committed something.

    `op` may carry an op's new record so its owner needs no extra read.
    """

    key: tuple[str, ...]
    op: OpRecord | None = None


WakeCallback = Callable[[Wake], None]


class WakeHub:
    """In-process fan-out of wake-ups; callbacks run on the host event loop."""

    def __init__(self) -> None:
        self._callbacks: list[WakeCallback] = []

    def subscribe(self, callback: WakeCallback) -> Callable[[], None]:
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def publish(self, wakes: Iterable[Wake]) -> None:
        wakes = list(wakes)
        if not wakes:
            return
        for callback in list(self._callbacks):
            for wake in wakes:
                callback(wake)


@dataclass
class OpRecord:
    """One durable operation of a run, as recorded."""

    op_id: str
    kind: str  # activity | local_activity | timer | child
    name: str
    status: str  # scheduled | completed | failed | cancelled
    result: str | None = None
    failure: dict[str, Any] | None = None
    scheduled_at: float | None = None
    closed_at: float | None = None
    fire_at: float | None = None
    child_workflow_id: str | None = None
    child_run_id: str | None = None
    task_id: str | None = None
    interrupted: bool = False

    @property
    def closed(self) -> bool:
        return self.status != "scheduled"


@dataclass
class RunRecord:
    """A run (one execution of a workflow instance) as stored."""

    run_id: str
    namespace: str
    workflow_id: str
    workflow_type: str
    run_number: int
    task_queue: str
    status: str
    input: str
    created_at: float
    started_at: float | None = None
    closed_at: float | None = None
    closed_reason: str | None = None
    result: str | None = None
    failure: dict[str, Any] | None = None
    parent_run_id: str | None = None
    parent_workflow_id: str | None = None
    parent_op_id: str | None = None
    run_timeout: float | None = None
    execution_timeout: float | None = None
    execution_deadline_at: float | None = None
    run_deadline_at: float | None = None
    cleanup_deadline_at: float | None = None
    owner: str | None = None
    epoch: int = 0
    cancellation: dict[str, Any] | None = None
    continued_run_id: str | None = None
    needs_review: bool = False

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES


@dataclass
class ClaimedRun:
    run: RunRecord
    ops: dict[str, OpRecord]


@dataclass
class ActivityTask:
    """One claimed attempt of a remote activity."""

    task_id: str
    namespace: str
    task_queue: str
    name: str
    run_id: str
    workflow_id: str
    op_id: str
    input: str
    attempt: int
    options: dict[str, Any]
    scheduled_at: float
    claimed_at: float
    heartbeat_details: str | None
    start_to_close_deadline: float | None
    schedule_to_close_deadline: float | None
    heartbeat_deadline: float | None


@dataclass(frozen=True)
class StartRequest:
    namespace: str
    workflow_id: str
    workflow_type: str
    task_queue: str
    input: str
    id_reuse: str
    execution_timeout: float | None
    run_timeout: float | None
    memo: str | None = None
    parent_run_id: str | None = None
    parent_workflow_id: str | None = None
    parent_op_id: str | None = None
    parent_close_policy: str | None = None
    cancellation: dict[str, Any] | None = None
    cleanup_timeout: float | None = None  # a child's budget for a parent's cooperative request


@dataclass(frozen=True)
class StartResult:
    run_id: str
    created: bool
    status: str


# ---- writes a run's owner commits, batched into one fenced transaction ----


@dataclass(frozen=True)
class ScheduleActivity:
    op_id: str
    name: str
    task_id: str
    task_queue: str
    input: str
    options: dict[str, Any]


@dataclass(frozen=True)
class RecordLocalActivity:
    op_id: str
    name: str
    started_at: float
    attempts: int
    result: str | None = None
    failure: dict[str, Any] | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class ScheduleTimer:
    op_id: str
    fire_at: float
    duration: float


@dataclass(frozen=True)
class FireTimer:
    op_id: str


@dataclass(frozen=True)
class ScheduleChild:
    op_id: str
    request: StartRequest
    options: dict[str, Any]


@dataclass(frozen=True)
class RecordEvent:
    """A history event with no state change (e.g. a local activity retry)."""

    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class CloseRun:
    """Close the run: completed, failed, continued (with the next run's input)."""

    status: str
    result: str | None = None
    failure: dict[str, Any] | None = None
    continue_input: str | None = None
    needs_review: bool = False


@dataclass(frozen=True)
class DeliverCancellation:
    """Record the delivery boundary: which ops were pending when it was delivered."""

    request_id: str
    boundary: list[dict[str, Any]]
    delivered_at: float


@dataclass(frozen=True)
class RequestActivityStop:
    """Ask a remote activity's attempt to stop (TRY_CANCEL / WAIT_CANCELLATION_COMPLETED)."""

    op_id: str
    policy: str


@dataclass(frozen=True)
class CancelTimer:
    op_id: str


@dataclass(frozen=True)
class RequestChildCancellation:
    """Send a child a cooperative request carrying this run's lineage."""

    op_id: str
    policy: str
    cleanup_timeout: float | None = None


Write = (
    ScheduleActivity
    | RecordLocalActivity
    | ScheduleTimer
    | FireTimer
    | ScheduleChild
    | RecordEvent
    | CloseRun
    | DeliverCancellation
    | RequestActivityStop
    | CancelTimer
    | RequestChildCancellation
)


@dataclass
class RunWrites:
    run_id: str
    epoch: int
    writes: list[Write] = field(default_factory=list)
    # The owner has not delivered a cancellation it has yet to mark: the batch
    # needs no lifecycle bookkeeping (lets drivers take a one-statement path).
    quiet: bool = False


@dataclass(frozen=True)
class CommitResult:
    run_id: str
    committed: bool
    ops: dict[str, OpRecord] = field(default_factory=dict)
    next_run_id: str | None = None


@dataclass(frozen=True)
class ActivityOutcome:
    """What happened to an activity result or failure report."""

    status: str  # recorded | retry_scheduled | refused
    reason: str | None = None


@dataclass(frozen=True)
class HeartbeatAck:
    accepted: bool
    stop_requested: bool
    reason: str | None = None


@dataclass(frozen=True)
class HistoryEvent:
    sequence: int
    type: str
    recorded_at: Any  # datetime
    data: dict[str, Any]


@dataclass(frozen=True)
class WorkerRegistration:
    worker_id: str
    namespace: str
    task_queue: str
    workflow_types: tuple[str, ...]
    activity_names: tuple[str, ...]
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class RecordedEvent:
    """A history event as the metrics tail reads it: storage-wide, by its id."""

    event_id: int
    namespace: str
    run_id: str
    type: str
    recorded_at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class StorageSnapshot:
    """What one metrics scrape reads, in one read transaction.

    `runs` counts runs by (namespace, status); `open_cancellations` counts open
    runs under a cooperative request by (namespace, lifecycle); `events` are
    the events after the id the caller passed (oldest first, at most its
    limit) plus any of the ids it asked to re-check; `last_event_id` is the
    highest event id stored when no id was passed (where a tail starts).
    """

    runs: dict[tuple[str, str], int]
    open_cancellations: dict[tuple[str, str], int]
    events: list[RecordedEvent]
    last_event_id: int


@runtime_checkable
class Driver(Protocol):
    """What the engine needs from storage. See the module docstring."""

    hub: WakeHub

    async def open(self) -> None:
        """Connect and migrate the schema."""

    async def close(self) -> None:
        """Release connections and background resources."""

    async def start_workflow(self, request: StartRequest, now: float) -> StartResult:
        """See the module docstring."""

    async def get_run(
        self, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunRecord | None:
        """See the module docstring."""

    async def claim_runs(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        workflow_types: tuple[str, ...],
        limit: int,
        lease_seconds: float,
        now: float,
        capabilities: tuple[str, ...] = (),
    ) -> list[ClaimedRun]:
        """See the module docstring."""

    async def renew_leases(
        self, worker_id: str, run_ids: list[str], lease_seconds: float, now: float
    ) -> set[str]:
        """See the module docstring."""

    async def release_runs(
        self, worker_id: str, run_ids: list[str], now: float, attempts: bool = True
    ) -> None:
        """See the module docstring."""

    async def commit(self, batches: list[RunWrites], now: float) -> list[CommitResult]:
        """See the module docstring."""

    async def resync(
        self, run_ids: list[str], waiting: dict[str, list[str]]
    ) -> tuple[dict[str, RunRecord], list[tuple[str, OpRecord]]]:
        """Many owned runs' state and the closed ops they wait on, in one read."""

    async def load_ops(self, run_id: str, op_ids: list[str]) -> dict[str, OpRecord]:
        """See the module docstring."""

    async def claim_activities(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        names: tuple[str, ...],
        limit: int,
        lease_seconds: float,
        now: float,
    ) -> list[ActivityTask]:
        """See the module docstring."""

    async def complete_activity(
        self,
        task_id: str,
        attempt: int,
        worker_id: str,
        result: str | None,
        failure: dict[str, Any] | None,
        now: float,
    ) -> ActivityOutcome:
        """See the module docstring."""

    async def heartbeat_activity(
        self, task_id: str, attempt: int, worker_id: str, details: str | None, now: float
    ) -> HeartbeatAck:
        """See the module docstring."""

    async def next_deadline(self, namespace: str, now: float) -> float | None:
        """See the module docstring."""

    async def enforce_expired(
        self, namespace: str, now: float, run_id: str | None = None
    ) -> dict[str, int]:
        """See the module docstring."""

    async def close_run_externally(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        status: str,
        reason: str,
        now: float,
    ) -> RunRecord:
        """See the module docstring."""

    async def clear_review(self, namespace: str, workflow_id: str, now: float) -> bool:
        """Let a run marked for review be replayed again; False if it was not marked."""

    async def describe(
        self, namespace: str, workflow_id: str, run_id: str | None
    ) -> dict[str, Any] | None:
        """See the module docstring."""

    async def history(
        self, run_id: str, after_sequence: int = 0, limit: int | None = None
    ) -> list[HistoryEvent]:
        """See the module docstring."""

    async def list_runs(
        self, namespace: str, status: str | None, workflow_type: str | None, limit: int,
        before: tuple[float, str] | None = None,
    ) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
        """See the module docstring."""

    async def register_worker(
        self, registration: WorkerRegistration, ttl: float, now: float
    ) -> None:
        """See the module docstring."""

    async def deregister_worker(self, worker_id: str) -> None:
        """See the module docstring."""

    async def request_cancellation(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        reason: str,
        cleanup_timeout: float,
        requester: dict[str, Any] | None,
        source: str,
        now: float,
    ) -> tuple[bool, dict[str, Any]]:
        """Record a cooperative request once; a duplicate returns the original."""

    async def cancellation_cascade(
        self, namespace: str, workflow_id: str, run_id: str | None, now: float
    ) -> dict[str, Any]:
        """The cancellation tree rooted at this run, from records alone."""

    async def stop_requests(self, worker_id: str) -> list[str]:
        """Running attempts of this worker that were asked to stop."""

    async def registered_names(self, namespace: str, now: float) -> tuple[set[str], set[str]]:
        """Workflow types and activity names that live workers have registered."""

    async def observe(
        self, after_event_id: int | None, limit: int, recheck: tuple[int, ...] = ()
    ) -> StorageSnapshot:
        """Counts and the event tail that metrics export (read only)."""

    async def watch(self) -> None:
        """Run until cancelled, publishing ``Wake(("any",))`` when another process
        commits (SQLite: data_version polling; PostgreSQL: LISTEN/NOTIFY)."""


def driver_factory(url: str) -> Callable[..., Driver]:
    """The driver class registered for the URL's scheme."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if not scheme:
        raise ConfigurationError(
            f"storage URL {url!r} has no scheme; use e.g. 'sqlite:///app.db', "
            "'sqlite://:memory:' or 'postgresql://user@host/db'"
        )
    scheme = scheme.split("+", 1)[0]
    entry_points = metadata.entry_points(group="durable.drivers")
    for entry_point in entry_points:
        if entry_point.name == scheme:
            factory: Callable[..., Driver] = entry_point.load()
            return factory
    known = sorted({ep.name for ep in entry_points})
    raise ConfigurationError(
        f"no storage driver for URL scheme {scheme!r} in {url!r}; installed drivers: "
        f"{', '.join(known) or 'none'} (PostgreSQL needs `pip install durable-sdk[postgres]`)"
    )


def replace_run(run: RunRecord, **changes: Any) -> RunRecord:
    return dataclasses.replace(run, **changes)
