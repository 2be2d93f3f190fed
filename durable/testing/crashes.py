"""Crash exploration: kill the worker at every durable point of a run, recover, check.

    report = await durable.testing.explore_crashes(
        order, "o-1", ["book"], workflows=[order], activities=[charge, reserve, ship],
        check=lambda result, history: ...,          # optional: the user's invariant
    )
    assert report.ok, report.describe()

One run without a crash learns the run's durable points: every transaction of
the worker that adds to history (a commit of the workflow's ops, an activity
attempt claimed, completed or failed, a timer fired, a phase, a cleanup step,
the close). Then, for each point, a fresh run in a namespace of its own: the
worker is killed at that point and a new worker on the same storage recovers
the run.

"Killed" is what SIGKILL does to a worker process, done in-process (why, and
what it cannot imitate: docs/design/decisions.md). The worker's storage is a
wrapper that runs each of its write transactions with a progress check at the
end: the transaction that would record past the point is rolled back, and the
worker stops at once, every task cancelled (`Worker._crash_now`); from then on
the wrapper refuses everything it asks (nothing more is written, no lease is
released, no cleanup runs). Crashing *before* a transaction is the point after
the work that precedes it: an activity that ran and whose result was not
recorded, a timer that fired, a cleanup that started. A last point crashes
right *after* the close was recorded.

Each recovered run is checked (one outcome, equal to the uncrashed run's; no
step recorded twice; executions within recorded attempts plus one; the user's
``check``); ``points=[i]`` runs a failing point alone (docs/testing.md).

Kept whole: the killable storage, one run, the checks and the report are one
procedure read top to bottom, and none is used elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import time
import uuid
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.lowlevel

from .._registry import workflow_name
from .._runtime.attempts import EXECUTIONS, ActivityInfo
from ..client import Client, WorkflowHandle
from ..clock import Clock
from ..driver import Driver, ProgramFactory, Tx, driver_factory, url_scheme
from ..errors import ConfigurationError, DurableError, StorageClosed
from ..options import StartOptions
from ..program import Program, q, q1
from ..store.records import HistoryEvent
from ..worker import Worker

__all__ = ["CrashPoint", "CrashReport", "explore_crashes"]

#: How much a namespace has recorded: the sum of its runs' event counters. A
#: write transaction that raises it recorded history; each is a durable point.
#: (Each run of an exploration has a namespace of its own.)
_PROGRESS = "SELECT COALESCE(SUM(event_seq), 0) AS p FROM runs WHERE namespace = ?"
#: The name a killed worker gives its crash (`Worker.crashed_at`).
_KILLED = "explore_crashes"
#: Event types that close a run: one, at most, per run.
_CLOSES = frozenset({"WorkflowCompleted", "WorkflowFailed", "WorkflowCancelled",
                     "WorkflowTimedOut", "WorkflowTerminated", "WorkflowContinuedAsNew"})

Check = Callable[[Any, list[HistoryEvent]], "bool | Awaitable[bool | None] | None"]
Interact = Callable[[WorkflowHandle], Coroutine[Any, Any, Any]]
Review = Callable[[WorkflowHandle], Awaitable[Any]]


# ---------------------------------------------------------------- the report


@dataclass
class CrashPoint:
    """One durable point, what happened when the worker was killed there."""

    index: int
    #: what the killed worker was about to record ("before ActivityCompleted
    #: charge 0:1"), or "after WorkflowCompleted" for the last point
    where: str
    #: history events recorded (in all runs) when the worker died
    progress: int
    #: whether the worker was killed there (False: the run took another path)
    reached: bool = False
    #: the recovered run's outcome: its result, or the exception it ended with
    outcome: Any = None
    #: what failed the checks (empty: the point passes)
    problems: list[str] = field(default_factory=list)
    #: activity executions during this point's run, by activity type
    executions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reached and not self.problems

    def describe(self) -> str:
        state = "ok" if self.ok else "FAILED"
        line = f"point {self.index} ({self.where}, after {self.progress} events): {state}"
        if not self.reached:
            line += "\n    the worker never reached this point: the run took another path"
        line += "".join(f"\n    {problem}" for problem in self.problems)
        if self.problems and self.executions:  # what ran: a side effect repeated shows here
            line += "\n    activity executions (the killed worker's and the recovery's): " + \
                ", ".join(f"{name} {n}" for name, n in sorted(self.executions.items()))
        return line


@dataclass
class CrashReport:
    """What `explore_crashes` found: the uncrashed run, then every point it tried."""

    workflow_type: str
    #: the uncrashed run's outcome (its result, or the exception it ended with)
    outcome: Any
    #: the uncrashed run's history
    history: list[HistoryEvent]
    #: every durable point explored, by index (only the chosen ones with `points=`)
    points: list[CrashPoint]
    #: how many durable points the run has (the last is "after the close")
    total_points: int
    #: problems of the uncrashed run itself (the user's check failed on it)
    baseline_problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every point explored passed (and the uncrashed run passed the check)."""
        return not self.baseline_problems and all(point.ok for point in self.points)

    @property
    def failures(self) -> list[CrashPoint]:
        return [point for point in self.points if not point.ok]

    def describe(self, call: str = "explore_crashes") -> str:
        """A summary, and every failing point with what failed and how to replay it
        (`call`: what the test called, named in the replay hint)."""
        lines = [f"{self.workflow_type}: {len(self.points)} of {self.total_points} crash points "
                 f"explored in {self.seconds:.2f} s, {len(self.failures)} failed"]
        lines += [f"  the uncrashed run: {problem}" for problem in self.baseline_problems]
        for point in self.failures:
            lines.append("  " + point.describe().replace("\n", "\n  "))
        if self.failures:
            first = self.failures[0].index
            lines.append(f"  replay one alone: {call}(..., points=[{first}])")
        return "\n".join(lines)


class CrashExplorationWarning(UserWarning):
    """The exploration passed, but what it compared is worth a look: the
    uncrashed run did not complete, and no `check` said that was expected."""


# ---------------------------------------------------------------- the killable storage


class _Refused(Exception):
    """Raised inside the transaction that would record past the point: rolls it back."""


def _in_transaction(program: Program[Any]) -> Program[Any]:
    """`program` with no statement sent on its own (autocommit): all of it may roll back."""
    try:
        stmt = next(program)
    except StopIteration as done:
        return done.value
    while True:
        if stmt.autocommit:
            stmt = dataclasses.replace(stmt, autocommit=False)
        try:
            result = yield stmt
        except BaseException as exc:  # a statement's own error, thrown back in
            try:
                stmt = program.throw(exc)
            except StopIteration as done:
                return done.value
            continue
        try:
            stmt = program.send(result)
        except StopIteration as done:
            return done.value


class _KillableDriver:
    """The crashing worker's view of storage (see the module docstring).

    `limit` None: learn, recording (before, after) of each write that recorded
    history. Otherwise the first write that would take progress past `limit`
    is rolled back and kills the worker (`after` False), or the first write
    that reaches `limit` commits and then kills it (`after` True).
    """

    def __init__(self, inner: Driver, namespace: str, limit: int | None = None, *,
                 after: bool = False) -> None:
        self._inner = inner
        self.namespace = namespace
        self.limit = limit
        self.after = after
        self.workers: list[Worker] = []
        self.writes: list[tuple[int, int]] = []
        self.killed = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def close(self) -> None:
        """The storage is not this view's to close."""

    def _kill(self) -> None:
        if self.killed.is_set():
            return
        for worker in self.workers:
            worker._crash_now(_KILLED)
        self.killed.set()

    async def _dead(self) -> Any:
        # A killed process asks nothing more: the caller is cancelled here (its
        # worker's tasks all are); one inside a shield gets an error instead.
        await anyio.lowlevel.checkpoint()
        raise StorageClosed("this worker was killed (durable.testing.explore_crashes)")

    async def run(self, program: ProgramFactory[Any], *, write: bool = True) -> Any:
        if self.killed.is_set():
            return await self._dead()
        if not write:
            return await self._inner.run(program, write=False)
        seen: list[tuple[int, int]] = []
        refuse = self.limit is not None and not self.after

        def watched(tx: Tx) -> Program[Any]:
            before = int((yield q1(_PROGRESS, self.namespace))["p"])
            result = yield from _in_transaction(program(tx))
            after = int((yield q1(_PROGRESS, self.namespace))["p"])
            if after > before:
                if refuse and self.limit is not None and after > self.limit:
                    raise _Refused()
                seen.append((before, after))  # a program run again: its last run counts
            return result

        try:
            result = await self._inner.run(watched, write=True)
        except _Refused:
            self._kill()
            return await self._dead()
        if seen:
            self.writes.append(seen[-1])
            if self.after and self.limit is not None and seen[-1][1] >= self.limit:
                self._kill()
                return await self._dead()
        return result


# ---------------------------------------------------------------- storage for one run


@dataclass
class _Storage:
    client: Client  # the application's client: starts, interacts, recovers
    driver: Driver  # the storage under it, which killable views wrap
    clock: Clock
    virtual: bool
    #: the workers whose claims virtual time waits for (`TimeSkippingEnvironment`):
    #: a claim that skipped a locked row waits for its real-time poll, and a
    #: jump meanwhile passes the run by (its condition timed out at a point
    #: where nothing should have changed)
    workers: weakref.WeakSet[Worker] = field(default_factory=weakref.WeakSet)


@contextlib.asynccontextmanager
async def _storage(url: str, time_skipping: bool) -> AsyncIterator[_Storage]:
    """Storage for one exploration: SQLite as given (the default: a private
    in-memory database), PostgreSQL in a schema of its own, dropped after."""
    if time_skipping:
        from .environment import TimeSkippingEnvironment

        async with TimeSkippingEnvironment(url) as env:
            yield _Storage(env.client, cast(Driver, env._counting), env.clock, True,
                           env._workers)
        return
    from .environment import _own_storage  # a schema of its own, as the environment's

    url, schema = _own_storage(url)
    driver = driver_factory(url)(url)
    await driver.open()
    client = Client(driver)
    try:
        yield _Storage(client, driver, client.clock, False)
    finally:
        with anyio.CancelScope(shield=True):
            if schema is not None:
                await driver.drop_schema()  # type: ignore[attr-defined]
            await client.close()


async def _all_events(driver: Driver,
                      namespace: str) -> list[tuple[str, int, str, dict[str, Any]]]:
    """Every history event of every run of `namespace`, in the order they were recorded."""

    def read(tx: Tx) -> Program[list[tuple[str, int, str, dict[str, Any]]]]:
        rows = yield q("SELECT e.run_id, e.seq, e.type, e.data FROM events e JOIN runs r "
                       "ON r.run_id = e.run_id WHERE r.namespace = ? ORDER BY e.id", namespace)
        return [(r["run_id"], int(r["seq"]), r["type"], json.loads(r["data"])) for r in rows]

    return cast(list[tuple[str, int, str, dict[str, Any]]], await driver.run(read, write=False))


# ---------------------------------------------------------------- one run


@dataclass
class _Plan:
    workflow: Any
    args: tuple[Any, ...]
    workflow_id: str
    workflows: Sequence[Any]
    activities: Sequence[Any]
    task_queues: Sequence[str]
    options: StartOptions | None
    interact: Interact | None
    review: Review | None
    seconds: float
    before_each: Callable[[], Any] | None


@dataclass
class _Run:
    outcome: Any
    history: list[HistoryEvent]
    events: list[tuple[str, int, str, dict[str, Any]]]
    executions: dict[tuple[str, str], int]
    by_type: dict[str, int]
    killed: bool
    writes: list[tuple[int, int]]
    interact_error: BaseException | None = None
    #: False: the run was still open when `seconds_per_run` ran out
    ended: bool = True


def _workers(client: Client, plan: _Plan, storage: _Storage) -> list[Worker]:
    lease = 10 * 365 * 24 * 3600.0 if storage.virtual else 15.0  # a dead worker is declared dead
    workers = [Worker(client, workflows=plan.workflows, activities=plan.activities,
                      task_queue=tq, lease_seconds=lease, poll_interval=0.05)
               for tq in plan.task_queues]
    storage.workers.update(workers)
    return workers


async def _outcome(handle: WorkflowHandle, review: Review | None) -> Any:
    """The run's result, or the exception it ended with. A run that waits for an
    operator's review (status ``unknown``) is handed to `review`, if given."""
    if review is None:
        return await _result(handle)
    async with anyio.create_task_group() as tg:
        outcome: list[Any] = []

        async def wait() -> None:
            outcome.append(await _result(handle))
            tg.cancel_scope.cancel()

        tg.start_soon(wait)
        while True:  # until `wait` has the outcome and cancels this
            await anyio.sleep(0.02)
            if (await handle.describe())["status"] == "unknown":
                await review(handle)
    return outcome[0]


async def _result(handle: WorkflowHandle) -> Any:
    try:
        return await handle.result()
    except DurableError as exc:
        return exc


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _one_run(plan: _Plan, storage: _Storage, namespace: str, limit: int | None,
                   after: bool) -> _Run:
    """Start the workflow in a namespace of its own with a killable worker (killed
    at `limit`, or learning with None), recover with a fresh one, return what
    happened."""
    if plan.before_each is not None:
        await _maybe_await(plan.before_each())
    executions: dict[tuple[str, str], int] = {}
    by_type: dict[str, int] = {}

    def executed(info: ActivityInfo) -> None:
        key = (info.run_id, info.activity_id)
        executions[key] = executions.get(key, 0) + 1
        by_type[info.activity_type] = by_type.get(info.activity_type, 0) + 1

    client = storage.client.with_namespace(namespace)
    killable = _KillableDriver(storage.driver, namespace, limit, after=after)
    doomed = Client(cast(Driver, killable), namespace=namespace, clock=storage.clock)
    workers = _workers(doomed, plan, storage)
    killable.workers = workers
    outcome: Any = None
    finished = False
    failed: list[BaseException] = []  # what the application's side (interact) raised
    phase = "starting the run"  # where a run that does not end within the bound was
    token = EXECUTIONS.set(executed)
    try:
        with anyio.move_on_after(plan.seconds) as bound:
            async with anyio.create_task_group() as user:  # the application's side
                handle = await client.start(plan.workflow, *plan.args, id=plan.workflow_id,
                                            options=plan.options)
                if plan.interact is not None:
                    user.start_soon(_play, plan.interact, handle, failed)
                async with contextlib.AsyncExitStack() as stack:
                    phase = "starting the first worker"
                    for worker in workers:
                        await stack.enter_async_context(worker)
                    phase = "waiting for the outcome with the first worker"
                    outcome = await _outcome(handle, plan.review)  # a kill cancels this
                    finished = True
                    phase = "stopping the first worker"
                if not finished:  # killed: a fresh worker recovers the run
                    phase = "expiring the killed worker's leases"
                    for worker in workers:
                        await client.store.expire_leases(worker.worker_id, storage.clock.now())
                    async with contextlib.AsyncExitStack() as stack:
                        phase = "starting the recovering worker"
                        for worker in _workers(client, plan, storage):
                            await stack.enter_async_context(worker)
                        phase = "waiting for the outcome with the recovering worker"
                        outcome = await _outcome(handle, plan.review)
                        phase = "stopping the recovering worker"
                phase = "waiting for the application's side (interact) to return"
        if bound.cancelled_caught:
            outcome = TimeoutError(f"the run did not end within {plan.seconds} s "
                                   f"(seconds_per_run) while {phase}; status "
                                   f"{await _status(client, plan, workers)}")
        history = await client.get_handle(plan.workflow_id).history()
        events = await _all_events(storage.driver, namespace)
    finally:
        EXECUTIONS.reset(token)
    return _Run(outcome, history, events, executions, by_type, killable.killed.is_set(),
                killable.writes, failed[0] if failed else None, not bound.cancelled_caught)


async def _status(client: Client, plan: _Plan, workers: list[Worker]) -> str:
    """The run's status and its last events: what an unended point was doing;
    and an open op of an activity or workflow the exploration's worker does not
    register (it waits for a worker that never comes: the usual cause)."""
    try:
        handle = client.get_handle(plan.workflow_id)
        status = str((await handle.describe())["status"])
        history = await handle.history()
    except DurableError as exc:
        return repr(exc)
    last = [event.type for event in history[-5:]]
    activities = {name for worker in workers for name in worker.activities}
    workflows = {name for worker in workers for name in worker.workflows}
    missing = sorted(
        {f"activity {e.data.get('activity_type')!r}" for e in history
         if e.type == "ActivityScheduled" and not e.data.get("local")
         and e.data.get("activity_type") not in activities}
        | {f"child workflow {e.data.get('workflow_type')!r}" for e in history
           if e.type == "ChildWorkflowScheduled" and e.data.get("workflow_type") not in workflows})
    hint = (f"; it asked for {', '.join(missing)}, which the exploration's worker does not "
            "register: pass it in activities= (an activity) or workflows= (a child "
            "workflow)") if missing else ""
    return f"{status}, last events {', '.join(last)}{hint}"


async def _play(interact: Interact, handle: WorkflowHandle, failed: list[BaseException]) -> None:
    """The application's side of a run; its error is a problem of the point."""
    try:
        await interact(handle)
    except Exception as exc:
        failed.append(exc)


# ---------------------------------------------------------------- checks


def _same(a: Any, b: Any) -> bool:
    """The same outcome: an equal result, or the same error. A run that failed
    because the crash cost an activity its last attempt (its failure says the
    worker was lost) fails as the uncrashed run did: the crash is that loss."""
    if isinstance(a, BaseException) or isinstance(b, BaseException):
        return type(a) is type(b) and (_message(a) == _message(b) or _worker_lost(a))
    return bool(a == b)


def _worker_lost(exc: Any) -> bool:
    failure = getattr(exc, "failure", None)
    while isinstance(failure, dict):
        if failure.get("failure_category") == "worker_lost":
            return True
        failure = failure.get("cause")
    return False


def _message(exc: Any) -> str:
    return str(exc)


def _show(value: Any) -> str:
    if isinstance(value, BaseException):
        return f"{type(value).__name__}({_message(value)!r})"
    return repr(value)


def _twice(events: list[tuple[str, int, str, dict[str, Any]]]) -> list[str]:
    """Steps recorded more than once: an op's event (per attempt), a phase's, a close."""
    seen: dict[tuple[Any, ...], int] = {}
    for run_id, _seq, kind, data in events:
        if "op_id" in data:
            attempt = data.get("attempt", data.get("failed_attempt"))  # retries: one each
            key: tuple[Any, ...] = (run_id, kind, data["op_id"], attempt)
        elif kind.startswith("Phase") and "phase" in data:
            key = (run_id, kind, data["phase"])
        elif kind in _CLOSES or kind == "WorkflowStarted":
            key = (run_id, "close" if kind in _CLOSES else kind)
        else:
            continue
        seen[key] = seen.get(key, 0) + 1
    return [f"{key[1]} {' '.join(str(k) for k in key[2:] if k is not None)} recorded "
            f"{n} times in run {key[0]}".replace("  ", " ")
            for key, n in seen.items() if n > 1]


def _over_executed(run: _Run) -> list[str]:
    """Activities that ran more than once beyond their recorded attempts."""
    recorded: dict[tuple[str, str], int] = {}
    names: dict[tuple[str, str], str] = {}
    for run_id, _seq, _kind, data in run.events:
        if "activity_type" not in data:
            continue
        key = (run_id, str(data.get("task_id") or data.get("op_id")))
        names[key] = f"{data['activity_type']} ({data.get('op_id')})"
        attempt = data.get("attempt")
        if isinstance(attempt, int):
            recorded[key] = max(recorded.get(key, 0), attempt)
    return [f"activity {names.get(key, key[1])} executed {n} times, but {recorded.get(key, 0)} "
            f"attempt(s) were recorded: at most one more may run unrecorded"
            for key, n in run.executions.items() if n > recorded.get(key, 0) + 1]


async def _problems(run: _Run, expected: Any, check: Check | None,
                    compare: bool = True) -> list[str]:
    problems: list[str] = []
    if compare and not _same(run.outcome, expected):
        problems.append(f"outcome {_show(run.outcome)} differs from the uncrashed run's "
                        f"{_show(expected)}")
    if run.interact_error is not None:
        problems.append(f"interact raised {type(run.interact_error).__name__}: "
                        f"{run.interact_error}")
    problems += _twice(run.events)
    problems += _over_executed(run)
    if check is not None:
        try:
            verdict = await _maybe_await(check(run.outcome, run.history))
        except Exception as exc:
            problems.append(f"check failed: {type(exc).__name__}: {exc}")
        else:
            if verdict is False:
                problems.append("check returned False")
    return problems


def _where(events: list[tuple[str, int, str, dict[str, Any]]], before: int, after: int,
           last: bool) -> str:
    """A point's name from the events of the learning run: those the killed
    transaction would have recorded (or, for the last point, the close)."""

    def name(event: tuple[str, int, str, dict[str, Any]]) -> str:
        _run, _seq, kind, data = event
        detail = data.get("activity_type") or data.get("phase") or ""
        op = data.get("op_id") or ""
        return " ".join(str(part) for part in (kind, detail, op) if part)

    if last:
        return "after " + (name(events[-1]) if events else "the close")
    return "before " + ", ".join(name(event) for event in events[before:after])


# ---------------------------------------------------------------- the entry point


async def explore_crashes(
    workflow: Any,
    *args: Any,
    activities: Sequence[Any] = (),
    workflows: Sequence[Any] = (),
    check: Check | None = None,
    points: Sequence[int] | None = None,
    url: str = "sqlite://:memory:",
    time_skipping: bool = True,
    task_queues: Sequence[str] = ("default",),
    workflow_id: str | None = None,
    options: StartOptions | None = None,
    interact: Interact | None = None,
    review: Review | None = None,
    before_each: Callable[[], Any] | None = None,
    seconds_per_run: float = 60.0,
) -> CrashReport:
    """Crash the worker at every durable point of one run of `workflow(*args)`
    and check each recovery (see the module docstring).

    `activities` and `workflows` are what the worker registers (`workflow` is
    added); `task_queues` the queues it serves (one worker each, all killed
    together, as one process). `check(result, history)` is the user's
    invariant: False or an exception fails the point; `result` is the exception
    for a run that did not complete. `points` runs only those indices (a
    failing one, alone). `url` picks the storage, made fresh for the exploration
    (SQLite as given, the default in memory; PostgreSQL in a schema of its
    own, dropped after); each run has a namespace of its own. With `time_skipping` (the
    default) time is virtual, as in `TimeSkippingEnvironment`; turn it off for
    activities that wait on real I/O. `seconds_per_run` bounds each run (real
    time). `interact(handle)` plays the application (signals, updates) from
    the start of each run, crash or not; `review(handle)` the operator, for
    runs that stop for review (status ``unknown``). `before_each()` resets
    the world outside storage (a test database, files) before every run.
    """
    if not activities and not workflows and workflow is None:
        raise ConfigurationError("explore_crashes needs a workflow to run")
    if url_scheme(url) not in ("sqlite", "postgresql", "postgres"):
        raise ConfigurationError(
            f"explore_crashes runs on SQLite or PostgreSQL storage, got {url!r}")
    if not task_queues or isinstance(task_queues, str):
        raise ConfigurationError(
            f"explore_crashes task_queues= must be a list of queue names, got {task_queues!r}")
    if points is not None and not list(points):
        raise ConfigurationError(
            "explore_crashes points=[] explores no point, so nothing would be checked; leave "
            "points out (None) to explore every point, or name the ones to replay")
    if not seconds_per_run > 0:
        raise ConfigurationError(
            f"explore_crashes seconds_per_run= must be positive, got {seconds_per_run!r}")
    all_workflows = list(workflows)
    if not any(w is workflow for w in all_workflows):
        all_workflows.append(workflow)
    plan = _Plan(workflow, args, workflow_id or f"explore-{workflow_name(workflow)}",
                 all_workflows, list(activities), list(task_queues), options, interact, review,
                 seconds_per_run, before_each)
    started = time.perf_counter()
    error: Exception | None = None
    async with _storage(url, time_skipping) as storage:
        try:
            return await _explore(plan, storage, check, points, started)
        except Exception as exc:  # raised as it is, not grouped by the storage's tasks
            error = exc
    raise error


async def _explore(plan: _Plan, storage: _Storage, check: Check | None,
                   points: Sequence[int] | None, started: float) -> CrashReport:
    prefix = f"explore-{uuid.uuid4().hex[:8]}"
    baseline = await _one_run(plan, storage, f"{prefix}-learn", None, False)
    # A point is "history as the previous write left it": the progress each
    # write committed (`after`) is exact, as writes to one run serialise on its
    # row; the `before` a write read may be older (PostgreSQL reads what was
    # committed when each statement began), so only the first one is used.
    afters = sorted({after for _before, after in baseline.writes})
    first = min((before for before, _after in baseline.writes), default=0)
    limits = [first, *afters[:-1]] if afters else []
    final = afters[-1] if afters else 0
    total = len(limits) + 1
    chosen = list(range(total)) if points is None else list(points)
    wrong = [i for i in chosen if not isinstance(i, int) or not 0 <= i < total]
    if wrong:
        raise ConfigurationError(
            f"explore_crashes points= {wrong} are not among this run's points 0..{total - 1}")
    report = CrashReport(workflow_name(plan.workflow), baseline.outcome, baseline.history, [],
                         total, await _problems(baseline, baseline.outcome, check,
                                                compare=False))
    if not baseline.ended:
        # every crashed run would time out the same way: nothing to compare with
        report.baseline_problems.insert(0, f"{_message(baseline.outcome)}; no crash point "
                                           "was explored (each needs the run to end)")
        chosen = []
    for index in chosen:
        last = index == len(limits)
        limit = final if last else limits[index]
        point = CrashPoint(index, _where(baseline.events, limit,
                                         final if last else afters[index], last), limit)
        began = time.perf_counter()
        run = await _one_run(plan, storage, f"{prefix}-{index}", limit, last)
        point.seconds = time.perf_counter() - began
        point.reached = run.killed
        point.outcome = run.outcome
        point.executions = run.by_type
        point.problems = await _problems(run, baseline.outcome, check)
        report.points.append(point)
    report.seconds = time.perf_counter() - started
    if check is None and baseline.ended and isinstance(baseline.outcome, BaseException):
        # a workflow broken before any crash (a NameError, a wrong argument)
        # fails the same way at every point: that passes, and says nothing
        warnings.warn(CrashExplorationWarning(
            f"explore_crashes: the uncrashed run of {report.workflow_type} did not complete "
            f"({type(baseline.outcome).__name__}: {_message(baseline.outcome)}); every crash "
            "point was compared with that outcome. If the workflow should complete, fix that "
            "first; if this outcome is what you test, pass check= to say so"), stacklevel=2)
    return report
