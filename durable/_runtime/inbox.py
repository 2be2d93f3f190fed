"""Signals, updates and queries inside a run: where they reach the code, and replay.

**Delivery points.** Replay re-runs workflow code and returns recorded op
outcomes without waiting, so a signal's handler must run again at the same
place relative to the ops, or the code would see different state. A signal
is therefore delivered only at a *scheduling point*: when every workflow task
waits on a durable op (none is running). The owner records, before any
handler code runs, the delivery's number and its *frontier*: the ops the
tasks waited on (``SignalDelivered``; an update's ``UpdateAccepted`` alike).
While a delivery is made the run's tasks stay at their ops (the *gate*): a
task whose op completes meanwhile continues only after the handler ran and
is waiting on an op itself (or has returned).

On replay each recorded delivery is made again when every op of its
frontier is reached, in delivery order: a task reaching such an op (with its
recorded outcome at hand) waits there (`WorkflowContext.hold`) until the
deliveries recorded there are made. A delivery with an empty frontier was
made before the code started (a fresh run's first signals), and is made there
again. New signals are delivered only once replay has caught up.

**Queries and validators** run at a scheduling point too, against the
instance as it is (after replay), with a read-only runtime: nothing they do
is recorded, and a durable op in them fails with `QueryFailed`. A query is
answered only after the run's batched local-activity outcomes are recorded,
so an answer never reflects work a crash could still undo.

Kept whole: deliveries made live, deliveries made again on replay, the
early ones made before the code starts and the ones a due timer waits for
all number and order the same deliveries (one counter, one gate, one
frontier); split apart, each half would have to re-derive the other's order.
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from ..converter import check_size, decode_args
from ..errors import (
    DurableError,
    NonDeterminismDetected,
    PayloadRejected,
    QueryFailed,
    StructuralLimitExceeded,
)
from ..failure import (
    Failure,
    cancel_request_left,
    code_error,
    receive_cancel_request,
    safe_repr,
    safe_str,
)
from ..store.records import ClientRequest, InboxItem, RunRecord
from ..store.writes import AcceptUpdate, CompleteUpdate, DeliverSignal, Write
from .context import RunHost, WorkflowContext
from .handlers import Handler
from .readonly import QueryRuntime
from .runtime import Runtime
from .state import as_task, new_task_state

#: How long a delivery waits for every workflow task to wait on a durable op.
#: A task stuck in a non-durable await (which would not replay either) is not
#: waited for longer; the delivery is made with the tasks that do wait.
QUIET_WAIT = 1.0
#: How long a query handler (or an update validator) may take.
QUERY_TIMEOUT = 5.0
_REMEMBERED_REQUESTS = 10_000


def quiet_verdict(active: int, committing: int) -> tuple[str, str, dict[str, Any]]:
    """What to log when a delivery stopped waiting for quiet: (level, event, fields).

    Tasks awaiting a commit of the run's writes (`Parking.committing`: an op's
    schedule, a child's start) wait on storage, which was slow; that is not
    the workflow code's doing, and it replays. Only a task that runs and is
    not committing waits on something that is not a durable op (a plain
    ``anyio.sleep``, a queue, I/O): that one will not replay, and is warned of.
    """
    committing = min(committing, active)
    if committing >= active:
        return "info", "delivery_during_commit", {
            "committing_tasks": committing,
            "hint": f"storage took over {QUIET_WAIT:g}s to commit the writes of {committing} "
                    "workflow task(s); the delivery waits for them to reach their next op, "
                    "where it is made (and replayed)"}
    return "warning", "delivery_without_quiet", {
        "running_tasks": active - committing, "committing_tasks": committing,
        "hint": "a workflow task waits on something that is not a durable op; it will not "
                "replay deterministically"}


class DeliveryHost(RunHost, Protocol):
    """What the inbox needs of the run's executor: its context and runtime,
    one delivery at a time, and whether the code has started."""

    ctx: WorkflowContext
    runtime: Runtime
    delivery_lock: anyio.Lock
    code_started: bool

    def fail(self, exc: BaseException) -> None:
        """Fail the run with `exc` (a handler's error)."""
        ...


@dataclass
class Delivery:
    """A signal or update delivered to the code (or to be delivered again on replay)."""

    number: int
    kind: str  # signal | update
    name: str
    input: str
    frontier: list[dict[str, Any]]
    delivered_at: float
    seq: int | None = None  # a signal's inbox number
    update_id: str | None = None
    completed: bool = False  # an update whose outcome is recorded
    request_id: str | None = None

    @property
    def path(self) -> str:
        """The task path of its handler: ``s3`` (third delivery, a signal), ``u4``."""
        return f"{'s' if self.kind == 'signal' else 'u'}{self.number}"

    @property
    def frontier_ids(self) -> set[str]:
        return {f["op_id"] for f in self.frontier}


@dataclass
class Inbox:
    """One run's signals, updates and queries, as its executor sees them."""

    executor: DeliveryHost
    replay: deque[Delivery] = field(default_factory=deque)
    signals: dict[int, InboxItem] = field(default_factory=dict)  # received, not delivered
    requests: deque[ClientRequest] = field(default_factory=deque)
    updates: dict[str, Delivery] = field(default_factory=dict)  # accepted, by update id
    delivered_seqs: set[int] = field(default_factory=set)
    # requests seen lately: one may arrive twice (its wake-up and a resync); an
    # old one answered again is harmless (the first answer counts), so the
    # memory of them is bounded
    known_requests: set[str] = field(default_factory=set)
    recent_requests: deque[str] = field(default_factory=deque)
    inbox_seq: int = 0  # the inbox counter seen (everything up to it is known)
    request_seq: int = 0
    wanted: tuple[int, int] | None = None  # counters a resync saw: fetch up to them
    replayed_up_to: int = 0  # deliveries numbered up to this one were recorded before

    def __post_init__(self) -> None:
        self.ctx: WorkflowContext = self.executor.ctx
        self._work = anyio.Event()

    # ---------------------------------------------------------------- arrivals

    def load(self, items: list[InboxItem], requests: list[ClientRequest],
             run: RunRecord) -> None:
        """What a (re)claimed run's inbox holds: deliveries to make again, in
        order, signals still to deliver, requests still to answer."""
        ctx = self.ctx
        recorded: list[Delivery] = []
        for item in items:
            if item.delivery is not None:
                d = Delivery(item.delivery, item.kind, item.name, item.input,
                             list(item.frontier or []), item.delivered_at or item.received_at,
                             item.seq, item.update_id,
                             completed=item.status in ("completed", "failed"))
                recorded.append(d)
                if d.update_id is not None:
                    self.updates[d.update_id] = d
                if item.kind == "signal":
                    self.delivered_seqs.add(item.seq)
            elif item.kind == "signal" and item.status == "received":
                self.signals[item.seq] = item
        recorded.sort(key=lambda d: d.number)
        self.replay.extend(recorded)
        self.replayed_up_to = max([0, *(d.number for d in recorded)])
        for d in recorded:
            for op_id in d.frontier_ids:
                ctx.parking.holding[op_id] = ctx.parking.holding.get(op_id, 0) + 1
        # (max with what early arrivals already taught us: never go back)
        self.inbox_seq = max([self.inbox_seq, run.inbox_seq, *(i.seq for i in items)])
        self.request_seq = max(self.request_seq, run.request_seq)
        for request in requests:
            self._add_request(request)
        self.poke()

    def receive(self, item: InboxItem | ClientRequest) -> None:
        if isinstance(item, ClientRequest):
            self._add_request(item)
        elif item.kind == "signal" and item.seq not in self.delivered_seqs:
            self.signals.setdefault(item.seq, item)
            self.inbox_seq = max(self.inbox_seq, item.seq)
        self.poke()

    def _add_request(self, request: ClientRequest) -> None:
        if request.request_id in self.known_requests:
            return
        self.known_requests.add(request.request_id)
        self.recent_requests.append(request.request_id)
        if len(self.recent_requests) > _REMEMBERED_REQUESTS:
            self.known_requests.discard(self.recent_requests.popleft())
        self.requests.append(request)

    def notice(self, run: RunRecord) -> None:
        """A resync read the run: fetch what its counters say arrived meanwhile."""
        if run.inbox_seq > self.inbox_seq or run.request_seq > self.request_seq:
            self.wanted = (run.inbox_seq, run.request_seq)
            self.poke()

    def poke(self) -> None:
        """Something changed (an arrival, a task parked or finished): look again."""
        self._work.set()

    # ---------------------------------------------------------------- the service

    async def serve(self) -> None:
        """Make deliveries and answer requests at scheduling points, for as long
        as the code runs (a task of the executor's, beside the code)."""
        try:
            while True:
                await self._work.wait()
                self._work = anyio.Event()
                if self.wanted is not None:
                    await self._fetch()
                if self.replay:
                    if self.replay_due():
                        async with self.executor.delivery_lock:
                            await self._until_quiet()
                            await self._replay_next()
                        self.poke()
                    continue
                if not self._live() or not (self.signals or self.requests):
                    continue
                async with self.executor.delivery_lock:
                    await self._until_quiet()
                    if self._live() and not self.replay:
                        await self._serve_live()
                if self.signals or self.requests:
                    self.poke()
        except Exception as exc:  # a commit failed: the run stops here, replayed elsewhere
            self.ctx.log.warning("inbox_stopped", error=repr(exc))
            self.executor.stop("a delivery could not be recorded")

    async def deliver_received_by(self, instant: float) -> None:
        """Until the signals received by `instant` are delivered, for a timer
        due at `instant` whose task is parked at it (a scheduling point).

        A worker that resumes a run after its timer fell due finds the timer
        already due; without this the timer fired at once and a signal
        received before it was delivered after it (history: SignalReceived,
        TimerFired, SignalDelivered), unlike the peers (issue 21).

        Replay comes first: such a worker has the deliveries recorded while
        the timer was pending to make again, and until they are made no new
        one is. Returning then let the timer fire before the signal whenever
        the timer's task looked before the inbox had replayed them, which
        the host loop's scheduling decided (the approval example's crash
        exploration on trio and PostgreSQL under load: its approval, received
        before the timeout, came after it). Those deliveries need no more than
        the tasks parked where history made them, none past this timer (it
        has not fired in history), so the wait ends. Returns at once when no
        delivery can be made (the run stopping or failing): then the timer
        fires first, as before.
        """
        ctx = self.ctx
        while self.replay and not ctx.broken and self._may_deliver():
            released = ctx.parking.released
            self.poke()
            await released.wait()  # opens once each replayed delivery was made
        while (self._live() and not self.replay and not ctx.broken
               and any(item.received_at <= instant for item in self.signals.values())):
            released = ctx.parking.released
            self.poke()
            await released.wait()  # the gate opens once a delivery was made

    def replay_due(self) -> bool:
        """The next delivery recorded in history can be made again: every op of
        its frontier has a task parked at it."""
        return bool(self.replay) and (
            self.replay[0].frontier_ids <= self.ctx.parking.parked.keys())

    def _live(self) -> bool:
        """Whether new deliveries may be made: the code runs, replay caught up,
        the run is not being stopped. (After a delivered cancellation they go
        on: cleanup code may wait for a signal or take an update.)"""
        ctx = self.ctx
        return (self.executor.code_started and not ctx.parking.replay_delivery_pending
                and not ctx.delivering and self._may_deliver())

    def _may_deliver(self) -> bool:
        """Whether deliveries, made again or new, may still be made: the run is
        not closing, failing or being stopped, nor replayed read-only."""
        ctx = self.ctx
        return not (ctx.closing or ctx.failing or ctx.hard_stop or ctx.scratch)

    async def _fetch(self) -> None:
        wanted, self.wanted = self.wanted, None
        assert wanted is not None
        try:
            signals, requests = await self.ctx.worker.store.pending_interactions(
                self.ctx.run.run_id, self.inbox_seq)
        except Exception as exc:  # storage blinked: look again at the next resync
            self.ctx.log.warning("inbox_fetch_failed", error=repr(exc))
            return
        for item in signals:
            self.receive(item)
        for request in requests:
            self._add_request(request)
        self.inbox_seq = max(self.inbox_seq, wanted[0])
        self.request_seq = max(self.request_seq, wanted[1])

    async def _until_quiet(self) -> None:
        """Until every workflow task waits on a durable op (bounded: see QUIET_WAIT).

        Past the bound, a task awaiting a commit of the run's writes is at no
        op: a delivery made then recorded an empty frontier, which replay
        makes before the code starts, where the code saw other state (the
        SQLite trial of 12-06: runs of local steps under load went to
        needs_review). So the gate is closed, each such task stops at its
        next op once its commit returns (`Parking.hold`), and the wait goes
        on for as long as every task still running awaits a commit. Only a
        task that runs outside durable ends the wait (`quiet_verdict`)."""
        ctx = self.ctx
        parking = ctx.parking
        if await self._quiet_within(QUIET_WAIT):
            return
        level, event, fields = quiet_verdict(parking.active, parking.committing)
        getattr(ctx.log, level)(event, **fields)
        if level != "info":
            return
        gated = parking.gated
        parking.close_gate()
        try:
            while not await self._quiet_within(QUIET_WAIT):
                if parking.committing < parking.active:
                    level, event, fields = quiet_verdict(parking.active, parking.committing)
                    getattr(ctx.log, level)(event, **fields)
                    return
        finally:
            if not gated:  # (the delivery that follows closes it again at once)
                parking.open_gate()

    async def _quiet_within(self, seconds: float) -> bool:
        """Whether every workflow task waits on a durable op within `seconds`."""
        parking = self.ctx.parking
        with anyio.move_on_after(seconds):
            while parking.active > 0:
                await parking.quiet.wait()
            return True
        return False

    # ---------------------------------------------------------------- replay

    async def at_start(self) -> None:
        """Before the code starts: the deliveries recorded there, and, for a run
        that has recorded nothing else yet, the signals waiting (so handlers see
        them first; queries and updates wait for the code to have registered
        its handlers: a function workflow does that as it runs)."""
        ctx = self.ctx
        ctx.parking.block()  # the main task has not started: it waits for nothing but this
        try:
            while self.replay and not self.replay[0].frontier:
                await self._replay_next()
            if not self.replay and not ctx.recorded and not ctx.scratch and (
                    self.signals or self._early_updates()):
                async with self.executor.delivery_lock:
                    await self._serve_start()
        finally:
            ctx.parking.unblock()

    async def _replay_next(self) -> None:
        ctx = self.ctx
        d = self.replay.popleft()
        ctx.parking.close_gate()
        try:
            await self._run(d, live=False)
        finally:
            for op_id in d.frontier_ids:
                left = ctx.parking.holding.get(op_id, 0) - 1
                if left > 0:
                    ctx.parking.holding[op_id] = left
                else:
                    ctx.parking.holding.pop(op_id, None)
            ctx.parking.open_gate()
        ctx.parking.check_redelivery()

    def check_finished(self) -> None:
        """The main code returned: every recorded delivery must have been made again."""
        if self.replay:
            d = self.replay[0]
            ops = ", ".join(sorted(d.frontier_ids)) or "the start"
            raise NonDeterminismDetected(
                f"workflow {self.ctx.run.workflow_type} (run {self.ctx.run.run_id}) returned "
                f"before reaching {ops}, where history delivered {d.kind} {d.name!r} "
                f"(delivery {d.number}): the code changed in a way that does not replay"
            )

    # ---------------------------------------------------------------- live deliveries

    def _early_updates(self) -> list[ClientRequest]:
        """The update requests waiting whose handler exists now (before the
        code starts: a class-based workflow's), in the order asked."""
        handlers = self.ctx.handlers
        return sorted((r for r in self.requests if r.kind == "update"
                       and handlers.get("update", r.name) is not None),
                      key=lambda r: r.created_at)

    async def _serve_start(self) -> None:
        """Before a fresh run's code starts: the signals and the updates sent
        before any worker picked the run up, in the order they were sent
        (by the instant storage received each; at the same instant, signals
        first). Without this an update waited for the code's first waiting
        point, so a run with none closed first and an update sent before a
        signal was overtaken by it (issue 21). Queries, and updates whose
        handler the code registers as it runs, wait for the code."""
        ctx = self.ctx
        for request in self._early_updates():
            if ctx.broken:
                return
            await self._deliver_signals({seq for seq, item in self.signals.items()
                                         if item.received_at <= request.created_at})
            self.requests.remove(request)
            await self._offer_update(request)
        await self._deliver_signals(set(self.signals))

    async def _serve_live(self) -> None:
        """Deliver the waiting signals (in the order received), then answer the
        requests (in the order asked). Called at a scheduling point."""
        ctx = self.ctx
        await self._deliver_signals(None)
        while self.requests and not ctx.broken:
            request = self.requests.popleft()
            if request.kind == "query":
                await self._answer_query(request)
            else:
                await self._offer_update(request)

    async def _deliver_signals(self, seqs: set[int] | None) -> None:
        """Deliver the waiting signals numbered `seqs` (None: all), in the order
        received."""
        ctx = self.ctx
        while not ctx.broken:
            waiting = sorted(seq for seq in self.signals if seqs is None or seq in seqs)
            if not waiting:
                return
            batch: list[InboxItem] = []
            for seq in waiting:
                item = self.signals[seq]
                batch.append(item)
                handler = ctx.handlers.get("signal", item.name)
                if handler is not None and handler.is_async:
                    break  # its task may wait on ops: the next frontier includes them
            frontier, now = ctx.parking.frontier(), ctx.clock.now()
            deliveries = [
                Delivery(ctx.parking.deliveries + 1 + i, "signal", item.name, item.input,
                         frontier, now, item.seq)
                for i, item in enumerate(batch)
            ]
            writes: list[Write] = [DeliverSignal(d.seq or 0, d.name, d.number, d.frontier,
                                                 d.delivered_at) for d in deliveries]
            ctx.parking.close_gate()
            try:
                await ctx.commit(writes)
                for item in batch:
                    del self.signals[item.seq]
                    self.delivered_seqs.add(item.seq)
                for d in deliveries:
                    await self._run(d, live=True)
            finally:
                ctx.parking.open_gate()

    async def _run(self, d: Delivery, *, live: bool) -> None:
        """Hand a delivery to its handler (gate closed); return once the handler
        has returned or waits on a durable op."""
        ctx = self.ctx
        ctx.parking.deliveries = d.number
        handler = ctx.handlers.get(d.kind, d.name)
        if handler is None and d.kind == "signal":
            ctx.handlers.buffered.setdefault(d.name, []).append(d)
            if live:
                ctx.log.warning("SignalNotHandled", signal=d.name, delivery=d.number,
                                handlers=ctx.handlers.names("signal"),
                                hint="kept: it is delivered when a handler for it is registered")
            return
        if handler is None:
            raise NonDeterminismDetected(
                f"history accepted update {d.name!r} (delivery {d.number}) but workflow "
                f"{ctx.run.workflow_type} has no handler for it any more"
            )
        await self.invoke(handler, d, replaying=not live)

    async def invoke(self, handler: Handler, d: Delivery, *, replaying: bool) -> None:
        """Run a handler for a delivery: a plain function at once, in this task
        acting as workflow task ``d.path``; an ``async def`` as a task of its own."""
        ctx = self.ctx
        args = decode_args(ctx.converter, d.input, handler.hints)
        if not handler.is_async:
            state = new_task_state(ctx, d.path, d.delivered_at, replaying=replaying,
                                   runtime=self.executor.runtime)
            value: Any = None
            error: Exception | None = None
            with as_task(state):
                try:
                    value = handler.fn(*args)
                    if cancel_request_left():  # it cancelled this task: fail it, not the run's
                        await receive_cancel_request()  # inbox (decision (bd))
                except BaseException as exc:
                    error = code_error(exc, f"the {d.kind} handler {d.name!r}")
            ctx.state_changed()
            await self._finish(d, value, error)
            return

        async def body() -> None:
            value: Any = None
            error: Exception | None = None
            ctx.running_handlers += 1
            try:
                value = await handler.fn(*args)
                if cancel_request_left():  # it cancelled its own task, then returned
                    await receive_cancel_request()
            except BaseException as exc:
                error = code_error(exc, f"the {d.kind} handler {d.name!r}")
            finally:
                ctx.running_handlers -= 1
            await self._finish(d, value, error)

        async def interrupted() -> None:  # the run's cancellation interrupted the handler
            if d.kind == "update" and ctx.may_act_on_interrupt():
                await self._complete(d, None, Failure(
                    "cancelled", f"update {d.name!r} was interrupted: the workflow is being "
                    "cancelled", "durable.WorkflowCancelled"))

        self.executor.spawn_task(d.path, d.delivered_at, replaying, body, interrupted)
        await self._until_quiet()

    def deliver_buffered(self, handler: Handler, deliveries: list[Delivery]) -> None:
        """A handler was registered for signals kept without one: run it for
        each, in order, here (where the code registered it, on replay too)."""
        ctx = self.ctx
        for d in deliveries:
            replaying = d.number <= self.replayed_up_to
            args = decode_args(ctx.converter, d.input, handler.hints)
            if handler.is_async:

                async def body(d: Delivery = d, args: list[Any] = args) -> None:
                    ctx.running_handlers += 1
                    try:
                        await handler.fn(*args)
                        if cancel_request_left():  # it cancelled its own task, then returned
                            await receive_cancel_request()
                    except BaseException as exc:
                        self._signal_failed(d, code_error(exc, f"the signal handler {d.name!r}"))
                    finally:
                        ctx.running_handlers -= 1

                self.executor.spawn_task(d.path, d.delivered_at, replaying, body)
                continue
            state = new_task_state(ctx, d.path, d.delivered_at, replaying=replaying,
                                   runtime=self.executor.runtime)
            with as_task(state):
                try:
                    handler.fn(*args)  # (a request it leaves reaches the workflow's code)
                except BaseException as exc:
                    self._signal_failed(d, code_error(exc, f"the signal handler {d.name!r}"))
            ctx.state_changed()

    def _signal_failed(self, d: Delivery, error: Exception) -> None:
        """A signal handler's error fails the run (non-determinism included)."""
        self.ctx.log.info("signal_handler_failed", signal=d.name, error=safe_repr(error))
        self.executor.fail(self.ctx.fatal or error)

    async def _finish(self, d: Delivery, value: Any, error: Exception | None) -> None:
        ctx = self.ctx
        if error is not None and (isinstance(error, NonDeterminismDetected) or ctx.fatal):
            self.executor.fail(ctx.fatal or error)
            return
        if d.kind == "signal":
            if error is not None:
                self._signal_failed(d, error)
            return
        if error is not None:
            await self._complete(d, None, Failure.from_exception(error, "update"))
            return
        try:
            text = ctx.converter.encode(value, f"the result of update {d.name!r}")
            check_size(text, ctx.limits.payload_bytes, f"the result of update {d.name!r}")
        except (PayloadRejected, StructuralLimitExceeded) as exc:
            await self._complete(d, None, Failure.from_exception(exc, "update"))
            return
        await self._complete(d, text, None)

    async def _complete(self, d: Delivery, result: str | None, failure: Failure | None) -> None:
        if d.completed or self.ctx.closing:  # recorded already / settled by the close
            return
        d.completed = True
        await self.ctx.commit([CompleteUpdate(d.update_id or "", d.name, result, failure)])

    def unfinished_updates(self, status: str) -> list[Write]:
        """The run closes (`status`) while updates run: they fail with it."""
        return [
            CompleteUpdate(d.update_id or "", d.name, None, Failure(
                "run_closed", f"the workflow run closed ({status}) before update {d.name!r} "
                "finished", "durable.UpdateFailed"))
            for d in self.updates.values() if not d.completed
        ]

    # ---------------------------------------------------------------- requests

    async def _answer(self, request: ClientRequest, answer: dict[str, Any]) -> None:
        try:
            await self.ctx.worker.store.answer_request(request.request_id, answer,
                                                       self.ctx.clock.now())
        except Exception as exc:  # the caller times out and says so
            self.ctx.log.warning("request_answer_failed", request_id=request.request_id,
                                 error=repr(exc))

    async def _answer_query(self, request: ClientRequest) -> None:
        self.ctx.parking.close_gate()
        try:
            # A query never sees an outcome that a crash could still take back:
            # batched local-activity outcomes are recorded before it is answered.
            await self.ctx.flush()
            answer = await answer_query(self.ctx, request.name, request.input)
        finally:
            self.ctx.parking.open_gate()
        await self._answer(request, answer)

    async def _offer_update(self, request: ClientRequest) -> None:
        """Validate an update, then accept (record) and run it, or reject it."""
        ctx = self.ctx
        update_id = request.update_id or request.request_id
        if update_id in self.updates:  # the same update again: the caller reads its record
            await self._answer(request, {"accepted": True})
            return
        handler = ctx.handlers.get("update", request.name)
        if handler is None:
            await self._answer(request, _rejection(
                f"workflow {ctx.run.workflow_type} has no update handler named "
                f"{request.name!r} (it has: {', '.join(ctx.handlers.names('update')) or 'none'})"))
            return
        if handler.validator is not None:
            ctx.parking.close_gate()
            try:
                await run_read_only(ctx, handler.validator, handler.hints, request.input,
                                    f"the validator of update {request.name!r}")
            except BaseException as exc:
                error = code_error(exc, f"the validator of update {request.name!r}")
                await self._answer(request, _rejection(safe_str(error), error))
                return
            finally:
                ctx.parking.open_gate()
        d = Delivery(ctx.parking.deliveries + 1, "update", request.name, request.input,
                     ctx.parking.frontier(), ctx.clock.now(), update_id=update_id,
                     request_id=request.request_id)
        ctx.parking.close_gate()
        try:
            await ctx.commit([AcceptUpdate(update_id, d.name, d.input, d.number, d.frontier,
                                           d.delivered_at, request.request_id)])
            self.updates[update_id] = d
            await self._run(d, live=True)
        finally:
            ctx.parking.open_gate()


def _rejection(message: str, exc: BaseException | None = None) -> dict[str, Any]:
    failure = Failure.from_exception(exc, "update_rejected") if exc is not None else Failure(
        "update_rejected", message)
    return {"rejected": True, "error": {"message": message, "failure": failure.to_dict()}}


async def run_read_only(ctx: WorkflowContext, fn: Any, hints: list[Any], payload: str,
                        what: str) -> Any:
    """Call a query handler or validator against the run's state, read-only."""
    args = decode_args(ctx.converter, payload, hints)
    state = new_task_state(ctx, "query", ctx.latest, replaying=False,
                           runtime=QueryRuntime(ctx, what))
    with as_task(state):
        result = fn(*args)
        if inspect.isawaitable(result):
            with anyio.fail_after(QUERY_TIMEOUT):
                result = await result
        if cancel_request_left():  # it cancelled the task serving it, then returned
            await receive_cancel_request()
    return result


async def answer_query(ctx: WorkflowContext, name: str, payload: str) -> dict[str, Any]:
    """A query's answer as the caller receives it: ``{"result": text}`` or
    ``{"error": {...}}``."""
    handler = ctx.handlers.get("query", name)
    if handler is None:
        known = ", ".join(ctx.handlers.names("query")) or "none"
        return {"error": {"message": f"workflow {ctx.run.workflow_type} has no query handler "
                                     f"named {name!r} (it has: {known})"}}
    try:
        value = await run_read_only(ctx, handler.fn, handler.hints, payload, f"query {name!r}")
        text = ctx.converter.encode(value, f"the result of query {name!r}")
        check_size(text, ctx.limits.payload_bytes, f"the result of query {name!r}")
    except TimeoutError:
        return {"error": {"message": f"query {name!r} did not return within "
                                     f"{QUERY_TIMEOUT:g} s"}}
    except BaseException as exc:
        exc = code_error(exc, f"query {name!r}")
        message = safe_str(exc) if isinstance(exc, QueryFailed | DurableError) else (
            f"query {name!r} raised {type(exc).__name__}: {safe_str(exc)}")
        return {"error": {"message": message,
                          "failure": Failure.from_exception(exc, "query").to_dict()}}
    return {"result": text}
