"""Time budgets: one end-to-end deadline shared by phases and dependencies.

    budget = durable.Budget(timeout=3600, name="nightly-import")
    async with budget.phase("read", limit=600) as read:
        async with httpx.AsyncClient(timeout=read.budget.httpx_timeout(connect=5, read=30)) as c:
            rows = (await c.get(url)).json()
    async with budget.phase("write", limit=1200):
        await conn.executemany(sql, rows, timeout=budget.asyncpg_timeout(60))

A process that gives each call its own timeout can spend far more than the
time anyone is willing to wait: ten calls of 30 s are five minutes. A budget
is one deadline on the monotonic clock (a wall-clock jump neither fires it
early nor delays it), and every phase and dependency gets `min(its own limit,
the time left)`. Nothing here needs a workflow, a worker or even an event
loop: `remaining()`, `check()` and the adapters are plain functions of the
clock, so plain scripts, thread-pool code and web handlers use them as well as
asyncio and trio code.

Three ways a budget stops work, told apart because operators must tell them
apart (the article behind this module insists on it):

* the deadline passed: `BudgetExhausted` (a `TimeoutError`);
* a phase overran its own limit while the budget still had time:
  `PhaseTimedOut`, a subclass with ``timeout_kind == "phase"``;
* someone decided to stop: `cancel(reason)`, after which `check()` and every
  new phase raise `BudgetCancelled`. Cancellation is cooperative: code
  already running finishes its step and notices at its next check (the
  subprocesses `durable.subprocess.run` supervises notice within 0.1 s).

A result that arrives at or after its deadline is refused: the deadline is
the last instant at which nothing counts any more, the same rule storage
applies to activity results.

Kept whole: a `Budget` and its `Phase`s are one thing. A phase is a child
budget whose end decides between three outcomes from its parent's state
(the binding deadline, the first cancellation up the chain), and the parent
reports which phase bound it; split in two, each half would reach into the
other's private state.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import anyio

from . import _validate
from ._log import get_logger
from .errors import BudgetCancelled, BudgetExhausted, ConfigurationError, PhaseTimedOut
from .receipts import StopReceipt

if TYPE_CHECKING:
    import httpx

__all__ = ["Budget", "Phase", "PhaseRecord"]

_log = get_logger("durable.budget")

#: the current budget, or a function that makes it on first use (an activity
#: attempt's: most attempts never ask for it, and making one costs more than a
#: trivial activity does); the function returns the same budget every time
_current: contextvars.ContextVar[Budget | Callable[[], Budget] | None] = (
    contextvars.ContextVar("durable_budget", default=None))


def _fmt(seconds: float) -> str:
    return f"{seconds:.3g} s"


@dataclass(frozen=True)
class _Cancellation:
    budget: str
    reason: str
    at: float


@dataclass(frozen=True)
class PhaseRecord:
    """What happened to one phase, for reports (a snapshot; see `Budget.phases`).

    `started` and `ended` are readings of the budget's monotonic clock (only
    their differences mean anything); `started_at`/`ended_at` are wall-clock
    UTC datetimes for humans. `outcome` is ``"running"``, ``"completed"``,
    ``"timed_out"``, ``"cancelled"`` or ``"failed"``; `timeout_kind` says which
    deadline bound a time-out (``"phase"``: its own limit, ``"budget"``: the
    budget's); `error` names the exception class that ended it, never its
    message (messages can carry data that must not reach logs or reports).
    """

    name: str
    limit: float | None
    deadline: float | None
    started: float
    started_at: datetime.datetime
    ended: float | None = None
    ended_at: datetime.datetime | None = None
    outcome: str = "running"
    timeout_kind: str | None = None
    error: str | None = None

    @property
    def duration(self) -> float | None:
        """Seconds the phase ran, or None while it runs."""
        return None if self.ended is None else self.ended - self.started


class Budget:
    """An end-to-end time budget on a monotonic clock; see the module docstring.

    `deadline` is an instant of `clock` (default `time.monotonic`) or an aware
    `datetime` (converted once, at construction, to the monotonic clock);
    `timeout` is seconds from now. With both, the earlier binds; with neither
    the budget never runs out (`remaining()` is `math.inf`) but can still be
    cancelled. `clock` lets tests drive time by hand
    (`durable.testing.ManualClock`).
    """

    def __init__(
        self,
        deadline: float | datetime.datetime | None = None,
        timeout: float | datetime.timedelta | None = None,
        clock: Callable[[], float] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        if clock is not None and not callable(clock):
            raise ConfigurationError(
                "Budget(clock=...) must be a callable returning monotonic seconds "
                f"(like time.monotonic), not {type(clock).__name__}"
            )
        self._clock: Callable[[], float] = clock if clock is not None else time.monotonic
        own: float | None = None
        if deadline is not None:
            own = self._instant(deadline)
        if timeout is not None:
            end = self._clock() + _validate.duration(timeout, "Budget(timeout=...)")
            own = end if own is None else min(own, end)
        self._setup(name=_name(name, "budget"), parent=None, own_deadline=own)

    def _setup(self, *, name: str, parent: Budget | None, own_deadline: float | None,
               phase: Phase | None = None) -> None:
        self.name = name
        self._parent: Budget | None = parent
        self._phase: Phase | None = phase
        self._own_deadline: float | None = own_deadline
        self._deadline: float | None
        inherited = parent._deadline if parent is not None else None
        if own_deadline is None:
            self._deadline = inherited
        elif inherited is None:
            self._deadline = own_deadline
        else:
            self._deadline = min(own_deadline, inherited)
        self._cancellation: _Cancellation | None = None
        self._lock = threading.Lock()
        self._phases: list[Phase] = []
        self._receipts: list[StopReceipt] = []

    def _instant(self, deadline: float | datetime.datetime) -> float:
        if isinstance(deadline, datetime.datetime):
            if deadline.tzinfo is None or deadline.utcoffset() is None:
                raise ConfigurationError(
                    "Budget(deadline=...) got a naive datetime; pass an aware one "
                    "(e.g. datetime.now(timezone.utc) + timedelta(hours=1)) or a "
                    "monotonic instant (time.monotonic() + seconds)"
                )
            left = (deadline - datetime.datetime.now(datetime.UTC)).total_seconds()
            return self._clock() + left
        if isinstance(deadline, bool) or not isinstance(deadline, int | float):
            raise ConfigurationError(
                "Budget(deadline=...) must be a monotonic instant (float, e.g. "
                "time.monotonic() + 60) or an aware datetime, "
                f"not {type(deadline).__name__}"
            )
        if math.isnan(deadline):
            raise ConfigurationError("Budget(deadline=...) must not be NaN")
        return float(deadline)

    # ------------------------------------------------------------ the current budget

    @classmethod
    def current(cls) -> Budget:
        """The budget made current by `use()` (or by a running phase).

        When none is, a fresh unbounded budget: code that takes "the current
        budget" then behaves as it would without one.
        """
        budget = _current.get()
        if budget is None:
            return cls(name="unbounded")
        return budget if isinstance(budget, Budget) else budget()

    @contextlib.contextmanager
    def use(self) -> Iterator[Budget]:
        """Make this budget current for the code below (and tasks it starts).

        A context variable, so each asyncio/trio task and each thread started
        with a copied context sees its own; `durable.subprocess.run` and the
        testing dependencies default to it.
        """
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    # ------------------------------------------------------------ time left

    @property
    def deadline(self) -> float | None:
        """The binding deadline as an instant of the budget's clock, or None."""
        return self._deadline

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock this budget reads."""
        return self._clock

    def remaining(self) -> float:
        """Seconds left (never negative); `math.inf` when unbounded."""
        if self._deadline is None:
            return math.inf
        return max(0.0, self._deadline - self._clock())

    @property
    def expired(self) -> bool:
        """True once the deadline is reached (at the deadline counts as expired)."""
        return self._deadline is not None and self._clock() >= self._deadline

    @property
    def cancelled(self) -> bool:
        """True once this budget or one it derives from was cancelled."""
        return self._first_cancellation() is not None

    @property
    def cancel_reason(self) -> str | None:
        """The reason given to the first `cancel()` that applies, or None."""
        found = self._first_cancellation()
        return None if found is None else found.reason

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel cooperatively: no new phase starts, `check()` raises.

        Safe from any thread. The first reason is kept; later calls change
        nothing. Child budgets and phases see it; the parent does not. The
        reason is logged: say why, never include secrets.
        """
        if not isinstance(reason, str):
            raise ConfigurationError(
                f"cancel(reason=...) must be a str, not {type(reason).__name__}")
        with self._lock:
            if self._cancellation is not None:
                return
            self._cancellation = _Cancellation(self.name, reason, self._clock())
        _log.info("budget_cancelled", budget=self.name, reason=reason,
                  remaining=_log_seconds(self.remaining()))

    def check(self) -> None:
        """Raise if no new work may start: `BudgetCancelled` or `BudgetExhausted`.

        When the budget was both cancelled and ran out, the earlier of the two
        is reported: a cancellation made after the deadline passed does not
        turn a time-out into a cancellation, nor the other way round.
        """
        error = self._stop_error(self._clock())
        if error is not None:
            raise error

    def _stop_error(self, now: float, *, refused: str | None = None,
                    ) -> BudgetCancelled | BudgetExhausted | None:
        """The error `check()` raises at `now`, or None while work may go on."""
        cancellation = self._first_cancellation()
        expired = self._deadline is not None and now >= self._deadline
        if cancellation is not None and not (
            expired and self._deadline is not None and self._deadline <= cancellation.at
        ):
            return self._cancelled_error(cancellation, refused=refused)
        if expired:
            return self._exhausted_error(now, refused=refused)
        return None

    def timeout_for(self, op_timeout: float | None = None) -> float:
        """`min(op_timeout, remaining())` for an operation's own timeout argument.

        Raises (see `check()`) rather than return zero when no time is left:
        many clients read a zero timeout as "no timeout" or "don't wait".
        `math.inf` when both are unbounded.
        """
        self.check()
        own = math.inf if op_timeout is None else _validate.duration(op_timeout, "op_timeout")
        return min(own, self.remaining())

    # ------------------------------------------------------------ derived budgets

    def child(self, timeout: float | datetime.timedelta | None = None,
              name: str | None = None) -> Budget:
        """A budget of its own for part of the work: it can only be shorter.

        Its deadline is `min(now + timeout, this budget's deadline)`; a child
        asking for more than is left gets what is left. It sees this budget's
        cancellation; cancelling it leaves this budget alone.
        """
        own = None if timeout is None else (
            self._clock() + _validate.duration(timeout, "child(timeout=...)"))
        return self._derive(_name(name, "child", parent=self.name), own)

    def _derive(self, name: str, own_deadline: float | None,
                phase: Phase | None = None) -> Budget:
        derived = Budget.__new__(Budget)
        derived._clock = self._clock
        derived._setup(name=name, parent=self, own_deadline=own_deadline, phase=phase)
        return derived

    def phase(self, name: str, limit: float | datetime.timedelta | None = None) -> Phase:
        """A named phase of the work, bounded by `min(limit, remaining())`.

        ``async with budget.phase("read", limit=30) as p:`` refuses to start
        (raises) after the deadline or a cancellation, cancels its body when
        its deadline comes (`PhaseTimedOut` when its own limit bound,
        `BudgetExhausted` when the budget's deadline did), refuses a body that
        returns at or after its deadline, and records what happened in
        `phases`. Inside, `p.budget` (also `Budget.current()`) is the phase's
        own budget, to hand to dependencies.

        ``with budget.phase(...)`` (no event loop needed) does the same checks
        and records but cannot interrupt its body: it can only refuse to start
        and refuse a late result when the body returns.
        """
        if not isinstance(name, str) or not name:
            raise ConfigurationError("phase(name=...) must be a non-empty str naming the phase")
        seconds = (None if limit is None
                   else _validate.duration(limit, f"phase {name!r} limit", unbounded=True))
        if seconds is not None and seconds <= 0:
            raise ConfigurationError(
                f"phase {name!r} limit must be > 0 seconds (got {limit!r}); "
                "leave it out to bound the phase by the budget alone"
            )
        return Phase(self, name, None if seconds == math.inf else seconds)

    # ------------------------------------------------------------ records

    @property
    def phases(self) -> tuple[PhaseRecord, ...]:
        """Every phase started on this budget, in start order (running ones too).

        Phases started on a child budget or inside a phase (on `p.budget`)
        are recorded there.
        """
        with self._lock:
            phases = list(self._phases)
        return tuple(p.record() for p in phases)

    @property
    def stop_receipts(self) -> tuple[StopReceipt, ...]:
        """Receipts of child processes stopped under this budget or one derived from it."""
        with self._lock:
            return tuple(self._receipts)

    def record_stop(self, receipt: StopReceipt) -> None:
        """Keep a stop receipt here and on every budget this one derives from.

        `durable.subprocess.run` calls it; code that supervises its own
        processes can too, so reports find every stop in one place.
        """
        budget: Budget | None = self
        while budget is not None:
            with budget._lock:
                budget._receipts.append(receipt)
            budget = budget._parent

    # ------------------------------------------------------------ adapters

    def asyncpg_timeout(self, op: float | None = None) -> float | None:
        """A value for asyncpg's ``timeout=`` (per call) or ``command_timeout=``.

        `min(op, remaining())` in seconds; None (asyncpg: no timeout) when both
        are unbounded. Raises (see `check()`) when no time is left. asyncpg
        cancels the statement on the server when it times out.
        """
        value = self.timeout_for(op)
        return None if math.isinf(value) else value

    def httpx_timeout(self, connect: float | None = None, read: float | None = None,
                      write: float | None = None, pool: float | None = None) -> httpx.Timeout:
        """An `httpx.Timeout` whose every limit is `min(its own, remaining())`.

        Connecting and reading are limited apart: a quick connection says
        nothing about a quick answer. A limit left out gets the time left.
        httpx applies `read` to each read, not to the whole response, so a
        server that drips bytes can outlast the budget: wrap the call in
        `fail_after()` for a hard bound on the total. Needs httpx
        (``pip install httpx``); raises (see `check()`) when no time is left.
        """
        try:
            import httpx
        except ImportError as exc:
            raise ConfigurationError(
                "Budget.httpx_timeout() needs httpx, which is not installed: pip install httpx"
            ) from exc
        self.check()
        left = self.remaining()

        def bound(value: float | None, what: str) -> float | None:
            own = math.inf if value is None else _validate.duration(
                value, f"httpx_timeout({what}=...)")
            limit = min(own, left)
            return None if math.isinf(limit) else limit

        return httpx.Timeout(connect=bound(connect, "connect"), read=bound(read, "read"),
                             write=bound(write, "write"), pool=bound(pool, "pool"))


    @contextlib.contextmanager
    def fail_after(self, *, shield: bool = False) -> Iterator[anyio.CancelScope]:
        """An anyio cancel scope ending at the budget's deadline, raising on time-out.

        Like `anyio.fail_after`, on asyncio and trio, but raises this budget's
        `BudgetExhausted` (or `PhaseTimedOut` inside a phase whose limit
        bound); refuses to start (see `check()`) when no time is left.
        """
        self.check()
        with anyio.CancelScope(deadline=self.host_deadline(), shield=shield) as scope:
            yield scope
        if scope.cancelled_caught and anyio.current_time() >= scope.deadline:
            raise self._exhausted_error(self._clock())

    @contextlib.contextmanager
    def move_on_after(self, *, shield: bool = False) -> Iterator[anyio.CancelScope]:
        """An anyio cancel scope ending quietly at the budget's deadline.

        Like `anyio.move_on_after`: the body is cancelled and the code after
        the block runs; `scope.cancelled_caught` tells. A spent or cancelled
        budget cancels the body at its first checkpoint.
        """
        deadline = self.host_deadline()
        if self.expired or self.cancelled:
            deadline = -math.inf
        with anyio.CancelScope(deadline=deadline, shield=shield) as scope:
            yield scope

    # ------------------------------------------------------------ for supervisors
    #
    # What code that supervises work outside this process on a budget's behalf
    # (`durable.subprocess.run`; an adapter of your own) asks of it, beside
    # `remaining()`, `cancelled`, `expired`, `clock` and `record_stop()`: the
    # deadline as a cancel scope needs it, and the error that says why the
    # work was stopped. Application code does not need these.

    def host_deadline(self) -> float:
        """This budget's deadline on the running event loop's clock (inf: none).

        anyio's clock (trio's above all) has its own epoch, so the instant is
        carried over as time left, read once now.
        """
        left = self.remaining()
        return math.inf if math.isinf(left) else anyio.current_time() + left

    def stop_error(self, at: float, *, cancelled: bool) -> BudgetCancelled | BudgetExhausted:
        """Why work this budget bounds was stopped, as the error to raise: its
        earliest cancellation when `cancelled` (`cancel()` was what stopped
        it), else its time-out as of `at` (a reading of `clock`: when the
        decision to stop was made, not after the stop's grace period)."""
        if cancelled:
            cancellation = self._first_cancellation()
            if cancellation is not None:
                return self._cancelled_error(cancellation)
        return self._exhausted_error(at)

    # ------------------------------------------------------------ errors

    def _first_cancellation(self) -> _Cancellation | None:
        found: _Cancellation | None = None
        budget: Budget | None = self
        while budget is not None:
            mine = budget._cancellation
            if mine is not None and (found is None or mine.at < found.at):
                found = mine
            budget = budget._parent
        return found

    def _phase_name(self) -> str | None:
        budget: Budget | None = self
        while budget is not None:
            if budget._phase is not None:
                return budget._phase.name
            budget = budget._parent
        return None

    def _binding(self) -> Budget:
        """The outermost budget whose own deadline is the one that binds."""
        binding = self
        budget: Budget | None = self
        while budget is not None:
            if budget._own_deadline is not None and budget._own_deadline == self._deadline:
                binding = budget
            budget = budget._parent
        return binding

    def _cancelled_error(self, cancellation: _Cancellation, *,
                         refused: str | None = None) -> BudgetCancelled:
        phase = refused or self._phase_name()
        what = f"phase {refused!r} not started: " if refused else ""
        return BudgetCancelled(
            f"{what}budget {cancellation.budget!r} was cancelled: {cancellation.reason}",
            budget=cancellation.budget, reason=cancellation.reason, phase=phase,
        )

    def _exhausted_error(self, now: float, *, refused: str | None = None,
                         late_result: bool = False) -> BudgetExhausted:
        deadline = self._deadline if self._deadline is not None else now
        late_by = max(0.0, now - deadline)
        binding = self._binding()
        bound_phase = binding._phase
        prefix = f"phase {refused!r} not started: " if refused else ""
        suffix = ""
        if late_result:
            when = "at its deadline" if late_by == 0 else f"{_fmt(late_by)} after its deadline"
            suffix = (f": the body returned {when}, so its result is refused "
                      "(any effect it had may still have happened)")
        if bound_phase is not None and binding._parent is not None:
            return PhaseTimedOut(
                f"{prefix}phase {bound_phase.name!r} overran its limit of "
                f"{_fmt(bound_phase.limit or 0.0)} (budget {binding._parent.name!r} still had "
                f"time){suffix}",
                budget=binding._parent.name, phase=bound_phase.name, limit=bound_phase.limit,
                deadline=deadline, late_by=late_by,
            )
        phase = refused or self._phase_name()
        during = f" during phase {phase!r}" if phase and not refused else ""
        name = binding._parent.name if bound_phase is not None and binding._parent else binding.name
        return BudgetExhausted(
            f"{prefix}budget {name!r} ran out{during} ({_fmt(late_by)} past its deadline){suffix}",
            budget=name, phase=phase, deadline=deadline, late_by=late_by,
        )

    def __repr__(self) -> str:
        state = " cancelled" if self.cancelled else ""
        return f"<Budget {self.name!r} remaining={self.remaining():.3f}{state}>"


def _name(name: str | None, default: str, *, parent: str | None = None) -> str:
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigurationError(f"a budget name must be a non-empty str, not {name!r}")
    own = name or default
    return own if parent is None else f"{parent}/{own}"


def _log_seconds(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 6)


class Phase:
    """A running (or finished) phase; `budget.phase(...)` makes one.

    Single-use: enter it once, with ``async with`` (bounded) or ``with``
    (checked and recorded only). After entry, `budget` is the phase's own
    budget (`min(limit, remaining)` of its parent) and `deadline` its instant.
    """

    def __init__(self, parent: Budget, name: str, limit: float | None) -> None:
        self.name = name
        self.limit = limit
        self._parent = parent
        self._budget: Budget | None = None
        self._record: PhaseRecord | None = None
        self._token: contextvars.Token[Budget | Callable[[], Budget] | None] | None = None
        self._scope: anyio.CancelScope | None = None

    @property
    def budget(self) -> Budget:
        """The phase's own budget: hand it to dependencies (`timeout_for`, adapters)."""
        if self._budget is None:
            raise ConfigurationError(
                f"phase {self.name!r} has not started: use it as "
                "`async with budget.phase(...) as p:` first"
            )
        return self._budget

    @property
    def deadline(self) -> float | None:
        return self.budget.deadline

    @property
    def outcome(self) -> str | None:
        """None before entry, then as in `PhaseRecord.outcome`."""
        return None if self._record is None else self._record.outcome

    def record(self) -> PhaseRecord:
        """A snapshot of what happened to this phase."""
        if self._record is None:
            raise ConfigurationError(f"phase {self.name!r} has not started")
        return self._record

    # ------------------------------------------------------------ start and end

    def _begin(self) -> None:
        if self._record is not None:
            raise ConfigurationError(
                f"phase {self.name!r} was already entered; a Phase is single-use, "
                "call budget.phase(...) again for another"
            )
        parent = self._parent
        now = parent._clock()
        error = parent._stop_error(now, refused=self.name)
        if error is not None:
            _log.info("phase_refused", budget=parent.name, phase=self.name,
                      stop_kind="cancelled" if isinstance(error, BudgetCancelled)
                      else "timed_out")
            raise error
        own = None if self.limit is None else now + self.limit
        budget = parent._derive(f"{parent.name}/{self.name}", own, phase=self)
        self._budget = budget
        self._record = PhaseRecord(
            name=self.name, limit=self.limit, deadline=budget.deadline, started=now,
            started_at=datetime.datetime.now(datetime.UTC),
        )
        with parent._lock:
            parent._phases.append(self)
        self._token = _current.set(budget)
        _log.info("phase_started", budget=parent.name, phase=self.name,
                  limit=self.limit, remaining=_log_seconds(budget.remaining()))

    def _end(self, exc: BaseException | None, cut_by_scope: bool) -> BudgetExhausted | None:
        """Record how the phase ended; return the error to raise in place of
        `exc` (None: let `exc`, or the normal return, through)."""
        budget = self.budget
        now = budget._clock()
        late = budget._deadline is not None and now >= budget._deadline
        replacement: BudgetExhausted | None = None
        timeout_kind: str | None = None
        if cut_by_scope or (late and exc is None):
            replacement = budget._exhausted_error(now, late_result=not cut_by_scope)
            outcome, timeout_kind = "timed_out", replacement.timeout_kind
        elif exc is None:
            outcome = "completed"
        elif not isinstance(exc, Exception) or isinstance(exc, BudgetCancelled):
            # the host's cancellation (asyncio/trio), KeyboardInterrupt, or ours
            outcome = "cancelled"
        elif isinstance(exc, BudgetExhausted):
            outcome, timeout_kind = "timed_out", exc.timeout_kind
        elif late:
            # an error surfacing at the deadline (a client's own time-out fed
            # with timeout_for()) is the budget running out, not a failure
            replacement = budget._exhausted_error(now)
            replacement.__cause__ = exc
            outcome, timeout_kind = "timed_out", replacement.timeout_kind
        else:
            outcome = "failed"
        error = replacement or exc
        if error is not None and not isinstance(error, Exception):
            error_name = None  # a cancellation is not an error of the phase
        else:
            error_name = None if error is None else type(error).__name__
        assert self._record is not None
        self._record = PhaseRecord(
            name=self.name, limit=self.limit, deadline=self._record.deadline,
            started=self._record.started, started_at=self._record.started_at,
            ended=now, ended_at=datetime.datetime.now(datetime.UTC), outcome=outcome,
            timeout_kind=timeout_kind, error=error_name,
        )
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        # info, whatever the outcome: a time-out or a cancellation is the
        # caller's to handle (and to log louder if it matters to them)
        _log.info("phase_ended", budget=self._parent.name, phase=self.name,
                  stop_kind=outcome, duration=round(now - self._record.started, 6),
                  limit=self.limit, timeout_kind=timeout_kind, error_type=error_name)
        return replacement

    # ------------------------------------------------------------ async: bounded

    async def __aenter__(self) -> Phase:
        self._begin()
        scope = anyio.CancelScope(deadline=self.budget.host_deadline())
        scope.__enter__()
        self._scope = scope
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool:
        scope = self._scope
        assert scope is not None
        self._scope = None
        try:
            # trio's scope answers True for "no exception" too: only an
            # exception it swallowed is a cut by the deadline
            cut = bool(scope.__exit__(exc_type, exc, tb)) and exc is not None
        except BaseException as raised:
            self._end(raised, cut_by_scope=False)
            raise
        replacement = self._end(None if cut else exc, cut_by_scope=cut)
        if replacement is not None:
            if cut:
                raise replacement from None
            raise replacement
        return cut

    # ------------------------------------------------------------ sync: checked

    def __enter__(self) -> Phase:
        self._begin()
        return self

    def __exit__(self, exc_type: type[BaseException] | None,
                 exc: BaseException | None, tb: TracebackType | None) -> None:
        replacement = self._end(exc, cut_by_scope=False)
        if replacement is not None:
            raise replacement

    def __repr__(self) -> str:
        return f"<Phase {self.name!r} limit={self.limit} outcome={self.outcome}>"
