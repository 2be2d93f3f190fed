"""What a run's owner asks storage to record, batched into one fenced commit.

Each write is a small frozen value; `durable.store.commit` has one handler
per write type. A `RunWrites` carries one run's writes and the lease epoch
they were made under: storage refuses the whole batch when the epoch is no
longer current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..failure import Failure
from .records import StartRequest


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
    """A local activity's outcome (its only record: it ran inside the worker)."""

    op_id: str
    name: str
    started_at: float
    attempts: int
    result: str | None = None
    failure: Failure | None = None
    interrupted: bool = False

    @classmethod
    def succeeded(cls, op_id: str, name: str, started_at: float, attempts: int,
                  result: str | None) -> RecordLocalActivity:
        """``RecordLocalActivity(op_id=..., ..., result=...)`` of a success, made
        without the frozen dataclass's ``__init__`` (an ``object.__setattr__``
        per field: 1.2 µs of a local step's Python, issue 26); the same
        fields, still frozen."""
        write = object.__new__(cls)
        write.__dict__.update(op_id=op_id, name=name, started_at=started_at,
                              attempts=attempts, result=result, failure=None,
                              interrupted=False)
        return write


@dataclass(frozen=True)
class RecordBatchedLocalActivity:
    """A local activity's outcome recorded after the fact (``record="batched"``).

    The workflow went on from the outcome in memory, its time advanced to
    `closed_at`; the record keeps that instant instead of the commit's, so
    replay sees the same workflow time as the live run did. Recorded by
    `durable.store.commit` (`HANDLERS`).
    """

    step: RecordLocalActivity
    closed_at: float


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
class CloseRun:
    """Close the run: completed, failed, cancelled, continued (with the next run's input)."""

    status: str
    result: str | None = None
    failure: Failure | None = None
    continue_input: str | None = None
    needs_review: bool = False


@dataclass(frozen=True)
class DeliverCancellation:
    """Record the delivery boundary: which ops were pending when it was delivered.

    `deliveries` is how many signals and updates the run had been delivered
    before: replay re-delivers the cancellation after the same ones.
    """

    request_id: str
    boundary: list[dict[str, Any]]
    delivered_at: float
    deliveries: int = 0


@dataclass(frozen=True)
class RequestActivityStop:
    """Ask a remote activity's attempt to stop (TRY_CANCEL / WAIT_CANCELLATION_COMPLETED).

    `scope` is ``"run"`` when the run's cancellation interrupted the await (the
    op is marked interrupted, so replay interrupts it again), ``"operation"``
    when workflow code cancelled this one op through its handle.
    """

    op_id: str
    policy: str
    scope: str = "run"


@dataclass(frozen=True)
class CancelTimer:
    op_id: str


@dataclass(frozen=True)
class RequestChildCancellation:
    """Send a child a cooperative request carrying this run's lineage."""

    op_id: str
    policy: str
    cleanup_timeout: float | None = None
    scope: str = "run"  # see RequestActivityStop
    reason: str | None = None


@dataclass(frozen=True)
class DeliverSignal:
    """A received signal reaches the run's code: its delivery number and where
    (the ops every workflow task waited on, which is where replay delivers it)."""

    seq: int
    name: str
    delivery: int
    frontier: list[dict[str, Any]]
    delivered_at: float


@dataclass(frozen=True)
class AcceptUpdate:
    """A validated update becomes part of the run (``UpdateAccepted``)."""

    update_id: str
    name: str
    input: str
    delivery: int
    frontier: list[dict[str, Any]]
    delivered_at: float
    request_id: str | None = None


@dataclass(frozen=True)
class CompleteUpdate:
    """An accepted update's outcome (``UpdateCompleted``): a result or a failure."""

    update_id: str
    name: str
    result: str | None = None
    failure: Failure | None = None


@dataclass(frozen=True)
class ScheduleCondition:
    """`workflow.wait_condition` starts to wait; `fire_at` is its timeout, if any."""

    op_id: str
    fire_at: float | None
    timeout: float | None


@dataclass(frozen=True)
class ResolveCondition:
    """A condition wait ended: satisfied (True), timed out (False), or interrupted
    by the run's cancellation (None: marked interrupted, as timers are)."""

    op_id: str
    satisfied: bool | None


@dataclass(frozen=True)
class RecordMarker:
    """A marker op (`workflow.patched`): which branch of changed code this run took."""

    op_id: str
    name: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SignalExternal:
    """Signal another workflow (an op of this run: sent once, its outcome recorded)."""

    op_id: str
    workflow_id: str
    run_id: str | None
    name: str
    input: str


@dataclass(frozen=True)
class CancelExternal:
    """Ask another workflow to cancel cooperatively (an op of this run)."""

    op_id: str
    workflow_id: str
    run_id: str | None
    reason: str
    cleanup_timeout: float


@dataclass(frozen=True)
class StartPhase:
    """A durable phase began: its name and its deadline (the limit capped by
    every deadline around it)."""

    op_id: str
    name: str
    deadline: float | None
    limit: float | None


@dataclass(frozen=True)
class EndPhase:
    """A phase ended: completed, timed_out, cancelled or failed."""

    op_id: str
    outcome: str
    failure: Failure | None = None


@dataclass(frozen=True)
class StartUnits:
    """A batch of idempotent units began: how many, and which activity runs each."""

    op_id: str
    handler: str
    total: int


@dataclass(frozen=True)
class EndUnits:
    """A batch of units ended: every unit confirmed, or some outcome unknown."""

    op_id: str
    outcome: str
    done: int
    unknown: tuple[str, ...] = ()


Write = (
    ScheduleActivity
    | RecordLocalActivity
    | RecordBatchedLocalActivity
    | ScheduleTimer
    | FireTimer
    | ScheduleChild
    | CloseRun
    | DeliverCancellation
    | RequestActivityStop
    | CancelTimer
    | RequestChildCancellation
    | StartPhase
    | EndPhase
    | StartUnits
    | EndUnits
    | DeliverSignal
    | AcceptUpdate
    | CompleteUpdate
    | ScheduleCondition
    | ResolveCondition
    | RecordMarker
    | SignalExternal
    | CancelExternal
)


@dataclass
class RunWrites:
    """One run's writes for one commit, fenced by the lease epoch they were made under."""

    run_id: str
    epoch: int
    writes: list[Write] = field(default_factory=list)
    # The owner has not delivered a cancellation it has yet to mark: the batch
    # needs no lifecycle bookkeeping (lets dialects take a one-statement path).
    quiet: bool = False

    def local_steps_only(self) -> bool:
        """Only successful local steps: what a dialect's fast path may record."""
        return self.quiet and all(
            isinstance(w, RecordLocalActivity) and w.failure is None and not w.interrupted
            for w in self.writes
        )
