"""Running activity attempts under supervision: one runner for local and remote.

Local activities (run by the workflow's own op, in this worker) and remote
ones (claimed from the queue by a worker) run an attempt the same way:
`new_context` builds the attempt's `ActivityContext`, `decode_args` rebuilds
the arguments from their type hints, `run_attempt` calls the function
(async in a cancel scope, sync in a thread, process-isolated in a child
process), and `attempt_failure` records how an attempt that raised failed.
Retry decisions are the frozen `RetryPolicy`'s (`next_attempt_at`).

An attempt runs with an `ActivityContext` in a contextvar, so that
`activity.heartbeat()` and `activity.check_cancelled()` work from async code and
from sync code in worker threads alike. Heartbeats are recorded locally at once
and flushed to storage by a supervisor task, throttled, so that a tight loop
calling `heartbeat()` costs no round trip per call. A stop (timeout fencing,
cancellation, shutdown) cancels an async attempt's scope and makes the next
`heartbeat()`/`check_cancelled()` of a sync attempt raise.

Kept whole: an attempt's context and its three ways of running (a cancel
scope, a thread, a child process) are one protocol between the activity's
code and its supervisor (how a heartbeat reaches it, how each way stops);
split, each half would restate the other's rules of stopping.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import dis
import multiprocessing
import threading
import types
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

try:  # trio depends on sniffio; without it the host can only be asyncio
    import sniffio
except ImportError:  # pragma: no cover - a core install: recent anyio does not bring it
    sniffio = None  # type: ignore[assignment]

from .._registry import ActivityDefn
from ..budget import Budget
from ..budget import _current as _current_budget
from ..clock import Clock, to_datetime
from ..converter import PayloadConverter, check_size, decode_args
from ..errors import (
    ActivityAPIOutsideActivity,
    ActivityProcessExited,
    ActivityStopRequested,
    StructuralLimitExceeded,
)
from ..failure import Failure, cancel_request_left, receive_cancel_request


@dataclass(frozen=True)
class ActivityInfo:
    """What an activity attempt knows about itself."""

    activity_id: str
    activity_type: str
    attempt: int
    workflow_id: str
    run_id: str
    task_queue: str
    local: bool
    scheduled_at: datetime.datetime | None
    started_at: datetime.datetime | None
    deadline: datetime.datetime | None
    heartbeat_timeout: float | None
    heartbeat_details: Any


#: Told of every activity execution about to start (remote or local, any
#: attempt), when set: `durable.testing.explore_crashes` counts executions
#: with it to check that a crash re-ran each activity at most once more than
#: its recorded attempts. A context variable: only the tasks of the exploring
#: test see it; unset (the default), an execution costs one lookup.
EXECUTIONS: contextvars.ContextVar[Callable[[ActivityInfo], None] | None] = (
    contextvars.ContextVar("durable_activity_executions", default=None))

#: How long a stopped sync activity's thread gets to notice the stop (its next
#: heartbeat() or check_cancelled() raises) before it is abandoned.
DEFAULT_STOP_GRACE = 10.0


class ActivityContext:
    """State of one running attempt, shared by its code and its supervisor."""

    # what most attempts never change: class attributes (set, an instance's own)
    scope: anyio.CancelScope | None = None
    _details: str | None = None
    _dirty = False
    _stop = False  # set once, read from any thread (a plain flag suffices)
    stop_reason: str | None = None
    abandoned = False  # a sync thread that ignored its stop was left running
    _budget: Budget | None = None
    _wakeup: anyio.Event | None = None  # made on first use: most attempts never poke
    process_stop: dict[str, Any] | None = None

    def __init__(self, info: ActivityInfo | Callable[[], ActivityInfo], clock: Clock,
                 deadline: float | None, *,
                 encode_details: Callable[[Any], str] | None = None,
                 stop_grace: float = DEFAULT_STOP_GRACE, activity_type: str = "",
                 attempt: int = 0) -> None:
        # `info` may be a factory: most attempts never ask (activity.info()),
        # and building its datetimes costs more than a trivial activity does
        if isinstance(info, ActivityInfo):
            self._info: ActivityInfo | None = info
            self._make_info: Callable[[], ActivityInfo] | None = None
            activity_type, attempt = info.activity_type, info.attempt
        else:
            self._info, self._make_info = None, info
        self.activity_type = activity_type
        self.attempt = attempt
        self.clock = clock
        self.deadline = deadline
        self._lock = threading.Lock()
        self._encode_details = encode_details
        self.stop_grace = stop_grace
        self.loop_thread = threading.get_ident()
        #: the loop's thread-safe "call soon", for `_poke` from the attempt's
        #: thread (`_run_in_thread` sets it, on the loop's thread)
        self.call_soon_threadsafe: Callable[[Callable[[], None]], None] | None = None

    @property
    def info(self) -> ActivityInfo:
        """What the attempt knows about itself (built on first use)."""
        if self._info is None:
            assert self._make_info is not None
            self._info = self._make_info()
        return self._info

    # -- called by activity code (any thread) --------------------------------

    def heartbeat(self, details: Any) -> None:
        """Record progress; details are encoded here, so a value that cannot be
        stored fails at this call (`PayloadRejected`, `StructuralLimitExceeded`)."""
        encoded = None
        if details is not None and self._encode_details is not None:
            encoded = self._encode_details(details)
        with self._lock:
            if encoded is not None:
                self._details = encoded
            self._dirty = True
        self.check_cancelled()  # stopped: nobody to wake, and maybe no loop left
        self._poke()

    def check_cancelled(self) -> None:
        if self._stop:
            raise ActivityStopRequested(
                f"activity {self.activity_type} attempt {self.attempt} must stop: "
                f"{self.stop_reason}"
            )

    @property
    def wakeup(self) -> anyio.Event:
        """Set when a heartbeat came (the supervisor waits on it; loop thread only)."""
        if self._wakeup is None:
            self._wakeup = anyio.Event()
        return self._wakeup

    @wakeup.setter
    def wakeup(self, event: anyio.Event) -> None:
        self._wakeup = event

    def _set_wakeup(self) -> None:
        self.wakeup.set()

    def _poke(self) -> None:
        """Wake the supervisor, from the loop's thread or from the attempt's.

        From another thread it never waits for the loop: an attempt's thread
        can outlive the loop it was started from (a thread cannot be
        stopped; a worker abandons one that ignores a stop), and a heartbeat
        that waited for a loop no longer running blocked that thread forever,
        and with it the interpreter's exit (seen in CI: pytest hung after its
        summary, in `Future.result` under `anyio.from_thread.run_sync`)."""
        if threading.get_ident() == self.loop_thread:
            self._set_wakeup()
            return
        soon = self.call_soon_threadsafe
        if soon is None:
            return  # not started by `_run_in_thread`: the supervisor's tick flushes it
        try:
            soon(self._set_wakeup)
        except RuntimeError:
            pass  # its loop is closed: nobody to wake

    # -- called by the supervisor ---------------------------------------------

    def take_details(self) -> tuple[bool, str | None]:
        """Whether a heartbeat came since the last call, and the latest encoded details."""
        with self._lock:
            dirty, self._dirty = self._dirty, False
            return dirty, self._details

    @property
    def stopped(self) -> bool:
        return self._stop

    def request_stop(self, reason: str) -> None:
        if self._stop:
            return
        self.stop_reason = reason
        self._stop = True
        if self._budget is not None:
            self._budget.cancel(reason)
        if self.scope is not None:
            self.scope.cancel()

    @property
    def budget(self) -> Budget:
        """The attempt's time budget: its binding deadline (start-to-close,
        schedule-to-close) on the engine's clock, cancelled when the attempt
        must stop (a cancellation, a timeout fence, a shutdown)."""
        with self._lock:  # made on first use (`begin`), maybe in a thread of the attempt's
            if self._budget is None:
                budget = Budget(deadline=self.deadline, clock=self.clock.now,
                                name=f"activity {self.activity_type}")
                if self._stop:
                    budget.cancel(self.stop_reason or "stop requested")
                self._budget = budget
        return self._budget


_current: contextvars.ContextVar[ActivityContext | None] = contextvars.ContextVar(
    "durable_activity", default=None
)


def current() -> ActivityContext:
    ctx = _current.get()
    if ctx is None:
        raise ActivityAPIOutsideActivity(
            "this durable.activity function can only be called while an activity runs "
            "(a function decorated with @durable.activity.defn executed by a Worker)"
        )
    return ctx


def _process_main(conn: Any, fn: Any, args: list[Any]) -> None:
    """Entry point of a process-isolated attempt (runs in the child process)."""
    try:
        value = fn(*args)
    except BaseException as exc:
        try:
            conn.send(("err", exc))
        except Exception:
            conn.send(("err", RuntimeError(f"{type(exc).__qualname__}: {exc}")))
    else:
        conn.send(("ok", value))
    finally:
        conn.close()


def _terminate(proc: Any) -> int | None:
    """Terminate, then kill, and wait: a signal sent is not a stop confirmed."""
    proc.terminate()
    proc.join(2.0)
    if proc.is_alive():
        proc.kill()
        proc.join(5.0)
    return None if proc.is_alive() else proc.exitcode


async def _run_in_process(ctx: ActivityContext, fn: Any, args: list[Any]) -> Any:
    """Run a sync activity in a child process that a stop terminates and confirms."""
    mp = multiprocessing.get_context("spawn")
    receiver, sender = mp.Pipe(duplex=False)
    proc = mp.Process(target=_process_main, args=(sender, fn, args), daemon=True,
                      name=f"durable-activity-{ctx.activity_type}")
    await anyio.to_thread.run_sync(proc.start)
    sender.close()
    try:
        while not ctx.stopped:
            if await anyio.to_thread.run_sync(receiver.poll, 0.05):
                kind, payload = receiver.recv()
                await anyio.to_thread.run_sync(proc.join)
                if kind == "ok":
                    return payload
                raise payload
            if not proc.is_alive():
                raise ActivityProcessExited(
                    f"the process running activity {ctx.activity_type} exited with code "
                    f"{proc.exitcode} before returning a result", exit_code=proc.exitcode,
                )
    finally:
        receiver.close()
        if proc.is_alive():
            with anyio.CancelScope(shield=True):
                exit_code = await anyio.to_thread.run_sync(_terminate, proc)
            ctx.process_stop = {"exit_code": exit_code, "confirmed": exit_code is not None}
    raise _stopped(ctx)


def _stopped(ctx: ActivityContext) -> ActivityStopRequested:
    stop = ctx.process_stop
    if stop is not None:
        return ActivityStopRequested(
            f"activity {ctx.activity_type} attempt {ctx.attempt}: its process was "
            f"terminated (exit code {stop['exit_code']}): {ctx.stop_reason}",
            stop_kind="process_killed", confirmed=bool(stop["confirmed"]),
            exit_code=stop["exit_code"],
        )
    return ActivityStopRequested(
        f"activity {ctx.activity_type} attempt {ctx.attempt} was stopped: "
        f"{ctx.stop_reason}"
    )


async def call_activity(
    ctx: ActivityContext, fn: Any, is_async: bool, args: list[Any],
    *, abandon_on_cancel: bool = False, process_isolated: bool = False,
) -> Any:
    """Run the activity function with its context set; stoppable through ctx.

    An async function that cannot suspend (`never_suspends`) takes the
    synchronous lane (`begin`): it runs right here, with no cancel scope.

    A sync function runs in a worker thread: cancelling waits for it to return
    (after its next heartbeat/check_cancelled raises) for at most
    `ctx.stop_grace` seconds, then abandons the thread (`ctx.abandoned`);
    with `abandon_on_cancel` it is abandoned at once.
    """
    if is_async and never_suspends(fn):
        started = begin(ctx, fn, args)
        if started.done:
            return started.value
        return await finish(ctx, started)
    observer = EXECUTIONS.get()
    if observer is not None:
        observer(ctx.info)
    token = _current.set(ctx)
    budget_token = _current_budget.set(ctx.budget)
    try:
        with anyio.CancelScope() as scope:
            ctx.scope = scope
            if ctx.stopped:
                scope.cancel()
            if is_async:
                value = await fn(*args)
                if cancel_request_left():  # the code cancelled its own task, then returned
                    await receive_cancel_request()
                return value
            # real work virtual time cannot see: a virtual clock holds still
            hold = getattr(ctx.clock, "hold", None)
            with hold() if hold is not None else contextlib.nullcontext():
                if process_isolated:
                    return await _run_in_process(ctx, fn, args)
                return await _run_in_thread(ctx, fn, args, abandon_on_cancel)
        raise _stopped(ctx)
    finally:
        _current_budget.reset(budget_token)
        _current.reset(token)


# ---------------------------------------------------------------- the synchronous lane


class Started:
    """An async attempt driven up to its first suspension (`begin`).

    `done`: it returned and `value` is its result (its context variables
    reset). Otherwise `coro` is suspended (`yielded` is what it gave the
    loop; `_NOT_STARTED`: not run yet), its context set until `finish`.
    """

    # class attributes as the defaults: no __init__ to run
    done = False
    value: Any = None
    coro: Any = None
    yielded: Any = None
    tokens: tuple[Any, Any] | None = None

    def close(self) -> None:
        """End the attempt's coroutine (if unfinished) and reset its context."""
        if self.coro is not None:
            self.coro.close()
            self.coro = None
        tokens, self.tokens = self.tokens, None
        if tokens is not None:
            _current_budget.reset(tokens[1])
            _current.reset(tokens[0])


_NOT_STARTED: Any = object()

#: Opcodes through which a coroutine's own frame can suspend (3.11-3.13): an
#: ``await`` (GET_AWAITABLE, SEND, YIELD_VALUE), ``async with``, ``async for``.
_SUSPENDING = frozenset({"YIELD_VALUE", "SEND", "GET_AWAITABLE", "BEFORE_ASYNC_WITH",
                         "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR", "ASYNC_GEN_WRAP"})
#: by code identity (a code's hash hashes its bytecode); holding it keeps its id
_NEVER_SUSPENDS: dict[int, tuple[types.CodeType, bool]] = {}


def never_suspends(fn: Any) -> bool:
    """Whether calling `fn` makes a coroutine that cannot suspend: a plain
    ``async def`` whose own code has no ``await``, ``async with`` or ``async
    for`` (a nested function's awaits run only when the outer code awaits
    it). Anything else (a wrapper, a partial, a callable object) may."""
    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(code, types.CodeType):
        return False
    known = _NEVER_SUSPENDS.get(id(code))
    if known is None or known[0] is not code:
        known = _NEVER_SUSPENDS[id(code)] = (code, not any(
            ins.opname in _SUSPENDING for ins in dis.get_instructions(code)))
    return known[1]


def begin(ctx: ActivityContext, fn: Any, args: list[Any]) -> Started:
    """The synchronous lane of an async attempt: call it and run it right here,
    on the calling task, up to its first suspension (for a function that
    `never_suspends`, to its end).

    Why: many activities of a durable step (a computation, a lookup in
    memory, a value already at hand) are `async def` functions that return
    without ever suspending. For those, the cancel scope, the deadline
    watcher task and the task switches of a supervised attempt are pure
    cost: a stop (a cancellation, a timeout, a worker stop) only reaches an
    attempt at an await that suspends, so nothing could have stopped them.
    The same records are written and the same outcome is returned or raised.

    Should one suspend after all, `finish` resumes the same coroutine in the
    attempt's cancel scope with what the loop sends back: nothing runs twice
    or is lost. That is safe only if the attempt suspended outside any cancel
    scope of its own (anyio and trio refuse scopes exited out of order), so
    the lane is for functions without an await (`never_suspends`), not for
    any coroutine tried once: one suspended inside ``anyio.fail_after()``
    could not be given its scope afterwards. An attempt already asked to
    stop is started by `finish`, in its cancelled scope, as before.
    """
    observer = EXECUTIONS.get()
    if observer is not None:
        observer(ctx.info)
    started = Started()
    started.tokens = (_current.set(ctx), _current_budget.set(lambda: ctx.budget))  # if asked
    try:
        coro = fn(*args)
        if ctx._stop:
            started.coro, started.yielded = coro, _NOT_STARTED
            return started
        try:
            started.yielded = coro.send(None)
        except StopIteration as stop:
            if cancel_request_left():  # the code cancelled its own task: `finish`
                # receives it in the attempt's scope, as its next await would have
                started.coro, started.yielded = _then(stop.value), _NOT_STARTED
                return started
            started.done, started.value = True, stop.value
            started.close()
            return started
        started.coro = coro
        return started
    except BaseException:
        started.close()
        raise


async def finish(ctx: ActivityContext, started: Started) -> Any:
    """The slow lane: go on with a suspended attempt in its cancel scope."""
    try:
        with anyio.CancelScope() as scope:
            ctx.scope = scope
            if ctx.stopped:
                scope.cancel()
            coro, yielded = started.coro, started.yielded
            if yielded is _NOT_STARTED:
                return await coro
            return await _resume(coro, yielded)
        raise _stopped(ctx)
    finally:
        started.close()  # a no-op for a coroutine the await ran to its end


async def _then(value: Any) -> Any:
    """`value`, once a cancel request left by the code has reached the task
    (`durable.failure.receive_cancel_request`)."""
    await receive_cancel_request()
    return value


@types.coroutine
def _resume(coro: Any, yielded: Any) -> Generator[Any, Any, Any]:
    """Await a coroutine that already ran to its first suspension: hand what it
    yielded to the event loop, and pass what the loop sends or throws back
    to it, until it returns (`yield from` would restart it with None)."""
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(sent)
        except StopIteration as stop:
            return stop.value


def _thread_safe_soon() -> Callable[[Callable[[], None]], None]:
    """The running loop's way to run a callback soon from another thread,
    without waiting for it (asyncio's ``call_soon_threadsafe``, trio's
    ``TrioToken.run_sync_soon``)."""
    if sniffio is not None and sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    loop = asyncio.get_running_loop()

    def soon(callback: Callable[[], None]) -> None:
        loop.call_soon_threadsafe(callback)

    return soon


async def _run_in_thread(ctx: ActivityContext, fn: Any, args: list[Any],
                         abandon_on_cancel: bool) -> Any:
    """A sync activity in a worker thread, stoppable cooperatively and in bounded time.

    A Python thread cannot be killed: a stop makes the activity's next
    heartbeat() or check_cancelled() raise. The thread is waited for at most
    `ctx.stop_grace` seconds; one that ignores the stop is abandoned (its
    attempt is fenced already; its late result is refused) so that a worker
    can always leave. `process_isolated=True` is the way to stop code that
    never checks.

    A stop that comes before the thread began the function (it waited for a
    thread token, or for a thread to pick it up) ends the attempt at once:
    the function never runs (anyio's asyncio backend drops a job cancelled
    before a thread took it; here a job that begins after the stop returns
    unrun). That wait spent the whole grace for a `done` that could not come,
    then said the function "ignored its stop" (seen under load: a WAIT-policy
    cancellation took 10 s instead of the activity's 1 s). The grace is
    waited for on the loop, not in another thread: with every thread token
    held (by activities that ignore their stops) a thread for the wait was
    itself waited for, shielded, without bound.
    """
    context = contextvars.copy_context()
    done = threading.Event()
    outcome: list[tuple[bool, Any]] = []
    ctx.call_soon_threadsafe = _thread_safe_soon()
    soon = ctx.call_soon_threadsafe
    #: decides once whether the function began (or never will), and whether a
    #: stop waits for its end (then its end wakes the loop: `finished`)
    turn = threading.Lock()
    began = gave_up = waiting = False
    finished = anyio.Event()

    def target() -> None:
        nonlocal began
        with turn:
            if gave_up:
                return  # stopped before it began: never run
            began = True
        try:
            outcome.append((True, context.run(fn, *args)))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            with turn:
                done.set()
                wake = waiting
            if wake:
                try:
                    soon(finished.set)
                except Exception:  # the loop ended: an abandoned thread's late end
                    pass

    try:
        await anyio.to_thread.run_sync(target, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        if abandon_on_cancel:
            raise
        with turn:
            if not began:
                gave_up = True
            elif not done.is_set():
                waiting = True
        if gave_up:
            raise  # it never ran: nothing to wait for, the stop is confirmed
        if waiting:
            with anyio.move_on_after(ctx.stop_grace, shield=True):
                await finished.wait()
        if not done.is_set():
            ctx.abandoned = True
            raise
        # It finished within the grace period: its outcome counts (a late
        # result is then refused, visibly, if its attempt was fenced); the
        # cancellation stays pending on the enclosing scope.
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def new_context(
    defn: ActivityDefn,
    *,
    activity_id: str,
    attempt: int,
    workflow_id: str,
    run_id: str,
    task_queue: str,
    local: bool,
    scheduled_at: float | None,
    started_at: float | None,
    deadline: float | None,
    heartbeat_timeout: float | None,
    heartbeat_details: Any,
    clock: Clock,
    encode_details: Callable[[Any], str] | None = None,
    stop_grace: float = DEFAULT_STOP_GRACE,
) -> ActivityContext:
    """The context of one attempt: its info (built when first asked for), clock
    and binding deadline."""

    def info() -> ActivityInfo:
        return ActivityInfo(
            activity_id=activity_id,
            activity_type=defn.name,
            attempt=attempt,
            workflow_id=workflow_id,
            run_id=run_id,
            task_queue=task_queue,
            local=local,
            scheduled_at=to_datetime(scheduled_at),
            started_at=to_datetime(started_at),
            deadline=to_datetime(deadline),
            heartbeat_timeout=heartbeat_timeout,
            heartbeat_details=heartbeat_details,
        )

    return ActivityContext(info, clock, deadline, encode_details=encode_details,
                           stop_grace=stop_grace, activity_type=defn.name, attempt=attempt)


def details_encoder(converter: PayloadConverter, limit: int) -> Callable[[Any], str]:
    """How an attempt's heartbeat details are checked at the `heartbeat()` call:
    encodable, and within the payload limit."""

    def encode(value: Any) -> str:
        text = converter.encode(value, "heartbeat details")
        check_size(text, limit, "heartbeat details")
        return text

    return encode


def arguments(defn: ActivityDefn, converter: PayloadConverter, payload: str) -> list[Any]:
    """The attempt's arguments, rebuilt from their recorded JSON by type hint."""
    return decode_args(converter, payload, defn.param_hints)


async def run_attempt(actx: ActivityContext, defn: ActivityDefn, args: list[Any], *,
                      abandon_on_cancel: bool = False) -> Any:
    """Call the activity for one attempt, supervised through `actx`."""
    return await call_activity(actx, defn.fn, defn.is_async, args,
                               abandon_on_cancel=abandon_on_cancel,
                               process_isolated=defn.process_isolated)


def attempt_failure(exc: Exception, actx: ActivityContext, defn: ActivityDefn) -> Failure:
    """How an attempt that raised `exc` failed, as recorded.

    A stop (timeout fencing, cancellation, shutdown) records how it was
    stopped and whether the stop was confirmed; a result over the payload
    limit is not retried (it would be as large next time).
    """
    if isinstance(exc, ActivityStopRequested):
        return Failure.from_exception(exc, "stopped").with_details(
            stop_reason=actx.stop_reason,
            stop_kind=exc.stop_kind or ("cancel_scope" if defn.is_async else "cooperative"),
            stop_confirmed=exc.confirmed,
            **({"exit_code": exc.exit_code} if exc.exit_code is not None else {}),
        )
    failure = Failure.from_exception(exc)
    if isinstance(exc, StructuralLimitExceeded):
        failure = failure.with_details(non_retryable=True)
    return failure
