"""One run's state inside a worker: recorded ops, waiters, cancellation bookkeeping.

The `WorkflowContext` is what every durable op of a run consults: the
outcomes recorded so far (replay returns them without yielding), the
waiters of ops in flight, the structural-limit counters, and the state of a
cooperative cancellation (which ops every task is parked on, the shields,
whether the run is being stopped). Ops record through `commit()`, which goes
through the worker's group committer fenced by the run's epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._log import get_logger, get_user_logger
from ..cancellation import CancellationContext
from ..clock import Clock
from ..converter import PayloadConverter, check_size
from ..errors import (
    LostAuthority,
    NonDeterminismError,
    StructuralLimitExceeded,
    WriteRejected,
)
from ..options import Limits
from ..store.records import CommitResult, OpRecord, RunRecord
from ..store.writes import Write
from .committer import Committer

if TYPE_CHECKING:
    from .._registry import WorkflowDefn
    from ..store import Store
    from .executor import RunExecutor
    from .runtime import Runtime


class WorkerServices(Protocol):
    """What a running workflow needs from the worker that hosts it."""

    store: Store
    capabilities: tuple[str, ...]

    async def known_activity_names(self) -> set[str]:
        """Activity names this worker or any live worker has registered."""
        ...

    async def crash_point(self, point: str) -> None:
        """A named point where a test may stop the worker abruptly (no-op otherwise)."""
        ...


class _Waiter:
    __slots__ = ("event", "record")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.record: OpRecord | None = None


class WorkflowContext:
    """Everything a running workflow's code reaches through `durable.workflow`."""

    def __init__(
        self,
        *,
        run: RunRecord,
        ops: dict[str, OpRecord],
        defn: WorkflowDefn,
        worker: WorkerServices,
        clock: Clock,
        converter: PayloadConverter,
        limits: Limits,
        committer: Committer,
        stop_grace: float = 10.0,
    ) -> None:
        self.run = run
        self.stop_grace = stop_grace
        self.recorded = ops
        self.defn = defn
        self.worker = worker
        self.clock = clock
        self.converter = converter
        self.limits = limits
        self.committer = committer
        self.waiters: dict[str, _Waiter] = {}
        self.asked: set[str] = set()  # op ids the code asked for in this execution
        # task paths (and their ancestors) that history has ops of: those replay
        self.recorded_paths: set[str] = set()
        for op_id in ops:
            path = op_id.rsplit(":", 1)[0]
            parts = path.split(".")
            self.recorded_paths.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        self.pending_counts: dict[str, int] = {"activity": 0, "child": 0, "timer": 0}
        self.open_children: set[str] = set()
        self.fatal: BaseException | None = None
        self.broken: Exception | None = None
        # cancellation: see RunExecutor.deliver and workflow._interruptible
        self.cancellation: CancellationContext | None = None
        self.delivered_at = 0.0  # workflow time never runs behind the recorded delivery
        self.delivering = False
        self.hard_stop = False
        self.active = 0
        self.parked: dict[str, str] = {}
        self.quiet = anyio.Event()
        self.replay_boundary: set[str] = set()
        self.replay_delivery_pending = False
        self.shields: set[anyio.CancelScope] = set()
        self.running_local: dict[str, Any] = {}
        self.executor: RunExecutor | None = None
        self.runtime: Runtime | None = None  # set by whoever runs the code (the executor)
        delivered = (run.cancellation or {}).get("boundary")
        if delivered is not None and (run.cancellation or {}).get("delivered_at") is not None:
            self.replay_boundary = {b["op_id"] for b in delivered}
            self.replay_delivery_pending = True
            self.cancellation = CancellationContext.from_record(run.cancellation or {})
            self.delivered_at = float((run.cancellation or {})["delivered_at"])
        ids = {"workflow_id": run.workflow_id, "run_id": run.run_id,
               "workflow_type": run.workflow_type}
        self.log = get_logger("durable.workflow").bind(**ids)
        self.user_log = get_user_logger("durable.workflow").bind(**ids)

    # -- ops -------------------------------------------------------------

    def recorded_op(self, op_id: str, kind: str, name: str) -> OpRecord | None:
        """The record of this op if it exists; check it is the same op."""
        self.asked.add(op_id)
        record = self.recorded.get(op_id)
        if record is None:
            return None
        if record.kind != kind or record.name != name:
            self.fatal = NonDeterminismError(
                f"workflow {self.run.workflow_type} (run {self.run.run_id}) asked for "
                f"{kind} {name!r} at {op_id}, but history recorded {record.kind} "
                f"{record.name!r} there: the code changed in a way that does not replay. "
                "The run is marked for review; deploy the old code or terminate the run"
            )
            raise self.fatal  # fatal even if the workflow code catches it
        return record

    def unreplayed_ops(self) -> list[str]:
        """Recorded ops of the workflow's main task that its code never asked
        for again: the code skipped part of its history (non-determinism).

        Only the main task is checked: its ops run in one deterministic
        sequence. A task of a task group may legitimately not reach ops it
        recorded before (its group was cancelled when another task finished
        first, which replay can reach sooner).
        """
        return sorted(op for op in self.recorded
                      if op.startswith("0:") and op not in self.asked)

    def reserve(self, kind: str) -> None:
        """Count one more pending op of `kind`; over the structural limit, fail the run."""
        limit = {
            "activity": self.limits.pending_activities,
            "child": self.limits.pending_children,
            "timer": self.limits.pending_timers,
        }[kind]
        value = self.pending_counts[kind] + 1
        if value > limit:
            exc = StructuralLimitExceeded(
                f"pending_{'children' if kind == 'child' else kind + 's'}", value, limit
            )
            self.fatal = exc
            raise exc
        self.pending_counts[kind] = value

    def release(self, kind: str) -> None:
        self.pending_counts[kind] -= 1

    def details_encoder(self) -> Callable[[Any], str]:
        """How a local activity's heartbeat details are checked at the call."""
        converter, limit = self.converter, self.limits.payload_bytes

        def encode(value: Any) -> str:
            text = converter.encode(value, "heartbeat details")
            check_size(text, limit, "heartbeat details")
            return text

        return encode

    def encode(self, value: Any, what: str) -> str:
        text = self.converter.encode(value, what)
        try:
            check_size(text, self.limits.payload_bytes, what)
        except StructuralLimitExceeded as exc:
            self.fatal = exc
            raise
        return text

    async def commit(self, writes: list[Write]) -> CommitResult:
        """Record writes for this run (fenced by its epoch) and resolve the ops
        they closed.

        `WriteRejected` (storage refused these writes as invalid; nothing of
        them was recorded) is raised to the calling workflow code, which may
        handle it. Any other failure breaks the run here: it is dropped and
        replayed from storage, never continued from an unknown state.
        """
        if self.broken is not None:
            raise self.broken
        try:
            result = await self.committer.submit(
                self.run.run_id, self.run.epoch, writes, quiet=self.cancellation is None
            )
        except WriteRejected:
            raise
        except Exception as exc:
            # Whatever the workflow code does with this error, the run must not
            # go on from an unknown state: it is replayed from storage instead.
            self.broken = exc
            raise
        if not result.committed:
            self.broken = LostAuthority(f"run {self.run.run_id} is no longer owned here")
            raise self.broken
        for op in result.ops.values():
            self.resolve(op)
        return result

    def waiter(self, op_id: str) -> _Waiter:
        waiter = self.waiters.get(op_id)
        if waiter is None:
            waiter = self.waiters[op_id] = _Waiter()
        return waiter

    def resolve(self, op: OpRecord) -> None:
        """Deliver an op's closed record to whoever awaits it."""
        if not op.closed:
            return
        self.recorded[op.op_id] = op
        if op.op_id in self.open_children:
            self.open_children.discard(op.op_id)
            self.release("child")
        waiter = self.waiters.get(op.op_id)
        if waiter is not None and waiter.record is None:
            waiter.record = op
            waiter.event.set()

    async def wait_op(self, op_id: str) -> OpRecord:
        waiter = self.waiter(op_id)
        record = self.recorded.get(op_id)
        if record is not None and record.closed:
            self.resolve(record)
        await waiter.event.wait()
        self.waiters.pop(op_id, None)
        assert waiter.record is not None
        return waiter.record

    def open_waiters(self) -> list[str]:
        return [op_id for op_id, w in self.waiters.items() if w.record is None]

    # -- cancellation bookkeeping ---------------------------------------------

    def task_started(self) -> None:
        self.active += 1

    def task_finished(self) -> None:
        self.active -= 1
        self._check_quiet()

    def park(self, op_id: str, kind: str) -> None:
        """The calling task now waits on a durable op (a possible delivery boundary)."""
        self.parked[op_id] = kind
        self.active -= 1
        self._check_quiet()
        if self.replay_delivery_pending and self.replay_boundary <= set(self.parked):
            self.redeliver()

    def unpark(self, op_id: str) -> None:
        self.parked.pop(op_id, None)
        self.active += 1

    def _check_quiet(self) -> None:
        if self.active <= 0:
            self.quiet.set()
        elif self.quiet.is_set():
            self.quiet = anyio.Event()

    def must_block(self, record: OpRecord | None, op_id: str) -> bool:
        """Replay interrupts an op again where the live run interrupted it."""
        if record is not None and record.interrupted:
            return True
        return self.replay_delivery_pending and op_id in self.replay_boundary

    def redeliver(self) -> None:
        self.replay_delivery_pending = False
        if self.executor is not None:
            self.executor.interrupt_code()

    def may_act_on_interrupt(self) -> bool:
        """Whether an interrupted op should apply its cancellation policy.

        Not when the worker itself stops the run (shutdown, lost lease, a
        deadline that revoked authority): then nothing may be recorded.
        """
        return not self.hard_stop and self.broken is None

    def binding_deadline(self) -> float | None:
        """The deadline workflow code sees: the cleanup deadline counts only once
        the cancellation is delivered (deterministic on replay)."""
        deadlines = self.run.deadlines.without_cleanup()
        if self.cancellation is not None:
            deadlines = deadlines.with_cleanup(self.cancellation.deadline.timestamp())
        return deadlines.earliest

    def shield(self) -> anyio.CancelScope:
        """A shielded scope bounded by the cleanup deadline (tracked for expiry)."""
        # The cleanup deadline is enforced by the executor's deadline watcher on
        # the engine clock, which first revokes authority and then cancels the
        # shields: an interrupted op then records nothing.
        scope = anyio.CancelScope(shield=True)
        if self.hard_stop:
            scope.cancel()
        return scope
