"""One run's state inside a worker: recorded ops, waiters, cancellation bookkeeping.

The `WorkflowContext` is what every durable op of a run consults: the
outcomes recorded so far (replay returns them without yielding), the
waiters of ops in flight, the structural-limit counters, and the state of a
cooperative cancellation (the shields, whether the run is being stopped;
where its tasks are parked is `parking`'s). Ops record through `commit()`,
which goes through the worker's group committer fenced by the run's epoch.

It reaches the outside through three small interfaces, passed at
construction: `RunHost` (its executor: tasks beside the code, stopping,
interrupting), `WorkerServices` (the worker: storage, crash points) and
`Submitter` (the group committer), so that this module depends on none of
them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._log import get_logger, get_user_logger
from ..cancellation import CancellationContext
from ..clock import Clock
from ..converter import PayloadConverter, check_size
from ..errors import (
    AuthorityLost,
    NonDeterminismDetected,
    StructuralLimitExceeded,
    WriteRejected,
)
from ..options import Limits
from ..store.records import CommitResult, OpKind, OpRecord, OpStatus, RunRecord
from ..store.writes import RecordBatchedLocalActivity, RecordLocalActivity, Write
from .handlers import Handler, HandlerTable
from .parking import Parking

if TYPE_CHECKING:
    from .._registry import WorkflowDefn
    from ..store import Store


#: What the live executor advises after a divergence: true where it marks
#: the run for review, not where a replay only checks (the upgrade gate, a
#: query), which cut it off at this text.
LIVE_ADVICE = " The run is marked for review"


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


class Submitter(Protocol):
    """Where a run's writes go: the worker's group committer (a read-only replay
    has one that records nothing)."""

    async def submit(self, run_id: str, epoch: int, writes: list[Write],
                     quiet: bool = False) -> CommitResult:
        """Record the writes fenced by `epoch`; the run's share of the commit."""
        ...


class RunHost(Protocol):
    """What a run's context asks of whoever executes the run (its executor):
    tasks beside the code, stopping, interrupting, the inbox's attention."""

    def spawn_task(self, path: str, clock: float, replaying: bool | None,
                   body: Callable[[], Awaitable[None]],
                   on_interrupt: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run `body` as workflow task `path` beside the code."""
        ...

    def spawn_engine(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run engine work for the run in the background (never workflow code)."""
        ...

    def stop(self, reason: str) -> None:
        """Stop executing the run here, recording nothing more."""
        ...

    def interrupt_code(self) -> None:
        """Interrupt the workflow's code at its awaits (a cancellation is delivered)."""
        ...

    def poke(self) -> None:
        """The run's state may have changed: deliveries and requests may be due."""
        ...

    def deliver_buffered(self, handler: Handler, deliveries: list[Any]) -> None:
        """Hand signals kept without a handler to the handler just registered."""
        ...

    async def deliver_received_by(self, instant: float) -> None:
        """Return once the signals received by `instant` are delivered (or
        cannot be now): a timer due at `instant` fires after them."""
        ...


@dataclass(frozen=True)
class RunSetup:
    """What every run a worker executes is given (the same for all its runs)."""

    worker: WorkerServices
    clock: Clock
    converter: PayloadConverter
    limits: Limits
    committer: Submitter
    stop_grace: float = 10.0
    local_record: str = "step"  # how local activities without a `record` option are recorded
    local_batch: int = 64


class _Waiter:
    __slots__ = ("event", "record")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.record: OpRecord | None = None


class Condition:
    """A task waiting in `workflow.wait_condition`: its predicate, re-evaluated
    whenever the run's state may have changed."""

    __slots__ = ("done", "error", "event", "predicate")

    def __init__(self, predicate: Callable[[], object]) -> None:
        self.predicate = predicate
        self.event = anyio.Event()
        self.done = False
        self.error: BaseException | None = None


class WorkflowContext:
    """Everything a running workflow's code reaches through `durable.workflow`."""

    def __init__(self, *, run: RunRecord, ops: dict[str, OpRecord], defn: WorkflowDefn,
                 setup: RunSetup, host: RunHost) -> None:
        self.run = run
        self.host = host
        # batched local activities (see record_batched): outcomes waiting in
        # `deferred` for the run's next commit, and when to record them anyway
        self.local_record = setup.local_record
        self.local_batch = setup.local_batch
        self.batched = 0
        self.idle: anyio.Event | None = None  # set when the run may want a flush
        self.stop_grace = setup.stop_grace
        self.recorded = ops
        self.defn = defn
        self.worker = setup.worker
        self.clock = setup.clock
        self.converter = setup.converter
        self.limits = setup.limits
        self.committer = setup.committer
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
        self.fatal: BaseException | None = None  # the code does not replay its history
        self.failed_with: BaseException | None = None  # a handler failed the run
        self.broken: Exception | None = None
        # cancellation: see RunExecutor.on_request and ops.interruptible
        self.cancellation: CancellationContext | None = None
        self.delivered_at = 0.0  # workflow time never runs behind the recorded delivery
        self.delivering = False
        self.hard_stop = False
        # where the tasks are, and so where deliveries happen (durable/_runtime/parking.py)
        self.parking = Parking(on_stop=self.state_changed, on_quiet=self._on_quiet,
                               redeliver=host.interrupt_code)
        self.shields: set[anyio.CancelScope] = set()
        self.running_local: dict[str, Any] = {}
        # how local attempts check heartbeat details (the converter and limit are the run's)
        self.details_encoder: Callable[[Any], str] | None = None
        # the host's checkpoint_if_cancelled, found at the first op (ops.live_gate)
        self.checkpoint_if_cancelled: Callable[[], Awaitable[None]] | None = None
        # signals, queries, updates: see durable/_runtime/inbox.py
        self.handlers = HandlerTable()
        self.instance: Any = None  # the run's instance of a class-based workflow
        self.conditions: dict[str, Condition] = {}
        self.deferred: list[Write] = []  # recorded with the run's next commit
        self.patches: dict[str, bool] = {}
        self.task_scopes: set[anyio.CancelScope] = set()  # handler and op tasks
        self.running_handlers = 0
        self.closing = False  # the code returned: handlers are stopped, nothing recorded
        self.failing = False  # a handler failed the run: the code is stopped
        self.scratch = False  # a read-only replay: nothing is ever recorded
        self.latest = run.started_at or run.created_at  # the latest recorded time seen
        delivered = (run.cancellation or {}).get("boundary")
        if delivered is not None and (run.cancellation or {}).get("delivered_at") is not None:
            self.parking.expect_redelivery(
                (b["op_id"] for b in delivered),
                int((run.cancellation or {}).get("deliveries_before") or 0))
            self.cancellation = CancellationContext.from_record(run.cancellation or {})
            self.delivered_at = float((run.cancellation or {})["delivered_at"])
        ids = {"workflow_id": run.workflow_id, "run_id": run.run_id,
               "workflow_type": run.workflow_type}
        self.log = get_logger("durable.workflow").bind(**ids)

    @functools.cached_property
    def user_log(self) -> Any:
        """What ``workflow.logger`` writes to, bound to the run's ids: made when
        the code first logs (a structlog logger bound per run cost ~5 µs of
        every run, logging or not; issue 26)."""
        run = self.run
        return get_user_logger("durable.workflow").bind(
            workflow_id=run.workflow_id, run_id=run.run_id, workflow_type=run.workflow_type)

    # -- ops -------------------------------------------------------------

    def recorded_op(self, op_id: str, kind: str, name: str) -> OpRecord | None:
        """The record of this op if it exists; check it is the same op."""
        self.asked.add(op_id)
        record = self.recorded.get(op_id)
        if record is None:
            return None
        if record.kind != kind or record.name != name:
            self.fatal = NonDeterminismDetected(
                f"workflow {self.run.workflow_type} (run {self.run.run_id}) asked for "
                f"{kind} {name!r} at {op_id}, but history recorded {record.kind} "
                f"{record.name!r} there: the code changed in a way that does not replay."
                f"{LIVE_ADVICE}; deploy the old code or terminate the run"
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
        carried = self.batched
        if self.deferred:  # markers and batched outcomes go with the run's next commit,
            writes, self.deferred = [*self.deferred, *writes], []  # ahead of its writes
            self.batched = 0
        self.parking.committing += 1
        try:
            result = await self.committer.submit(
                self.run.run_id, self.run.epoch, writes, quiet=self.cancellation is None
            )
        except WriteRejected as exc:
            if carried:  # outcomes the code went on from are lost: replay from storage
                self.broken = exc
            raise
        except Exception as exc:
            # Whatever the workflow code does with this error, the run must not
            # go on from an unknown state: it is replayed from storage instead.
            self.broken = exc
            raise
        finally:
            self.parking.committing -= 1
        if not result.committed:
            self.broken = AuthorityLost(f"run {self.run.run_id} is no longer owned here")
            raise self.broken
        for op in result.ops.values():
            self.resolve(op)
        return result

    # -- batched local activities ----------------------------------------------

    def record_batched(self, write: RecordLocalActivity, closed_at: float) -> OpRecord:
        """Keep a local activity's outcome for the run's next commit (``record="batched"``).

        The code goes on from the record in memory at once; storage gets it,
        with the instant it was known, with whatever the run commits next (a
        durable op, a delivery, the close) or at the next `flush()`. A crash
        before that re-runs the activity: at least once, as activities promise.
        """
        status = OpStatus.COMPLETED if write.failure is None else OpStatus.FAILED
        record = OpRecord(write.op_id, OpKind.LOCAL_ACTIVITY, write.name, status, write.result,
                          write.failure, write.started_at, closed_at)
        self.deferred.append(RecordBatchedLocalActivity(write, closed_at))
        self.batched += 1
        self.recorded[write.op_id] = record
        if self.idle is None and not self.scratch:
            self.idle = anyio.Event()
            self.host.spawn_engine(self._flush_when_idle)
        return record

    def wants_flush(self) -> bool:
        """Batched outcomes are waiting and the run has stopped running local
        activities: every task waits on something else (it yielded)."""
        return (self.batched > 0 and self.parking.active <= 0
                and OpKind.LOCAL_ACTIVITY not in self.parking.parked.values())

    async def flush(self) -> None:
        """Record the batched outcomes now (nothing to do when none wait)."""
        if self.batched and self.broken is None and not self.hard_stop:
            await self.commit([])

    async def _flush_when_idle(self) -> None:
        """Engine task of a run with batched outcomes: record them as soon as the
        workflow yields (waits on anything but a local activity), so that a
        run that waits long does not keep unrecorded work."""
        while True:
            assert self.idle is not None
            await self.idle.wait()
            self.idle = anyio.Event()
            if self.wants_flush() and not self.closing and not self.failing:
                try:
                    await self.flush()
                except Exception:  # the run stops; whoever claims it replays from storage
                    self.host.stop("batched outcomes could not be recorded")
                    return

    def _on_quiet(self) -> None:
        """No task runs: batched outcomes may be recorded now (see `_flush_when_idle`)."""
        if self.batched and self.idle is not None:
            self.idle.set()

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

    def state_changed(self) -> None:
        """Workflow code stopped running (a task parked, blocked or finished, a
        handler returned): conditions may hold now, deliveries may be due."""
        if self.conditions:
            self.check_conditions()
        self.host.poke()

    def check_conditions(self) -> None:
        for cond in list(self.conditions.values()):
            if cond.done:
                continue
            try:
                satisfied = bool(cond.predicate())
            except Exception as exc:  # raised to the waiting task
                cond.error, satisfied = exc, True
            if satisfied:
                cond.done = True
                cond.event.set()

    def may_act_on_interrupt(self) -> bool:
        """Whether an interrupted op should apply its cancellation policy.

        Not when the worker itself stops the run (shutdown, lost lease, a
        deadline that revoked authority): then nothing may be recorded.
        """
        return (not self.hard_stop and self.broken is None and not self.closing
                and not self.failing)

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
