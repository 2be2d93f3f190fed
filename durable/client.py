"""The client: start workflows, await their results, inspect and control them.

A client reaches the runs through a control plane (`durable.control`): the
embedded one opens storage in this process (a `Worker` built on the client
shares it, so a result is delivered by an in-memory wake-up the moment it is
recorded); the remote one speaks to a `durable serve` control plane over
HTTP. Validation, payload encoding and typed errors live here, once, so both
behave the same.

Kept whole: `Client` is the one object users call for everything they ask of
durable (workflows, schedules, retention); each method validates and encodes
one request and hands it to a control plane, so splitting the module would
split that one face, not separate concerns (the schedules' own logic lives in
`durable.schedules`, retention's in `durable._retention`).
"""

from __future__ import annotations

import builtins
import os
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Never

from . import _validate, observe
from ._embedded import EmbeddedControl, check_start_arity
from ._queues import EmbeddedQueues, QueueControl, QueueLimits
from ._registry import WorkflowDefn, check_handler_arguments, workflow_defn_of, workflow_name
from ._retention import EmbeddedRetention, RetentionControl
from ._schedule_plane import EmbeddedSchedules
from .cancellation import CancellationContext, CancellationRequestResult
from .clock import Clock, SystemClock
from .control import ControlPlane, Page, RunState, say_review_wait
from .converter import JSONConverter, PayloadConverter, check_size
from .driver import Driver, driver_factory
from .errors import (
    CapabilityUnsupported,
    ConfigurationError,
    NameNotRegistered,
    StructuralLimitExceeded,
    WorkflowNotFound,
)
from .failure import Failure
from .options import Limits, Seconds, StartOptions, check_client_options
from .schedules import (
    Overlap,
    ScheduleControl,
    ScheduleDefinition,
    ScheduleHandle,
    ScheduleSpec,
    check_schedule_id,
    check_scheduled_workflow,
    schedule_fields,
    schedule_list_args,
)
from .store import Store
from .store.records import LISTED_STATUSES, HistoryEvent, StartRequest

# How long one wait of result() lasts before it asks again (a remote plane
# holds a request open that long; the embedded one listens to wake-ups).
_RESULT_POLL = 30.0

class WorkflowHandle:
    """A workflow instance: its current run, one given run, or the chain a start began.

    - ``client.get_handle(id)`` follows whatever run is current, even after the
      id is reused by a new start;
    - ``client.get_handle(id, run_id=R)`` acts on run R only;
    - the handle `start()` returns is bound to the run it started (`run_id`,
      `first_run_id`) and to the runs that continue it (continue-as-new), never
      to a later instance that reuses the id: after a reuse, `result()` still
      reports its own chain's outcome, `cancel()`/`terminate()` find it closed,
      and `request_cancellation()` raises `RunNotCurrent`.
    """

    def __init__(self, client: Client, workflow_id: str, run_id: str | None = None,
                 result_hint: Any = None, *, first_run_id: str | None = None,
                 defn: WorkflowDefn | None = None) -> None:
        self._defn = defn  # when known here: a handler's arguments are checked at the call
        self.client = client
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.first_run_id = first_run_id
        self._hint = result_hint

    def __repr__(self) -> str:
        return f"WorkflowHandle(workflow_id={self.workflow_id!r}, run_id={self.run_id!r})"

    def _payload(self, kind: str, name: str, args: tuple[Any, ...]) -> str:
        if self._defn is not None:
            check_handler_arguments(self._defn, kind, name, len(args))
        return self.client._payload(args, f"the arguments of {kind} {name!r}")

    async def _not_found(self) -> WorkflowNotFound:
        return await self.client.control.not_found(self.workflow_id, self.run_id)

    async def _state(self, run_id: str | None) -> RunState:
        state = await self.client.control.run_state(self.workflow_id, run_id)
        if state is None:
            raise await self._not_found()
        return state

    async def _target(self) -> str | None:
        """The run this handle acts on now (None: the instance's current run)."""
        if self.first_run_id is None:
            return self.run_id
        state = await self._state(self.first_run_id)
        while state.status == "continued" and state.continued_run_id:
            state = await self._state(state.continued_run_id)
        return state.run_id

    async def result(self, *, follow_runs: bool = True) -> Any:
        """Wait for the workflow's result, following continue-as-new; raises
        WorkflowFailed / WorkflowCancelled / WorkflowTimedOut / WorkflowTerminated
        when it does not complete. A run in review is open: waited for, saying why."""
        control = self.client.control  # a known run: straight to the wait (it reads it
        # first), which answers at once for a run in review so that it is said at once
        state = await (self._state(None) if self.run_id is None else
                       control.await_run(self.workflow_id, self.run_id, _RESULT_POLL,
                                         until_review=True))
        told: set[tuple[str, str]] = set()  # (run, status) said to wait for review
        while True:
            if state.is_open:
                say_review_wait(self.workflow_id, state, told)
                state = await control.await_run(self.workflow_id, state.run_id, _RESULT_POLL)
                continue
            if state.status == "continued":
                if follow_runs and state.continued_run_id:
                    state = await self._state(state.continued_run_id)
                    continue
                return None
            if state.status == "completed":
                return self.client.converter.decode(state.result, self._hint)
            failure = Failure.from_dict(state.failure or {"failure_category": state.status,
                                                          "message": state.status})
            raise failure.to_workflow_error(state.status)

    async def describe(self) -> dict[str, Any]:
        """The instance, its run, deadlines, pending operations and failures."""
        info = await self.client.control.describe(self.workflow_id, await self._target())
        if info is None:
            raise await self._not_found()
        return info

    async def history(self, *, after_sequence: int = 0,
                      limit: int | None = None) -> list[HistoryEvent]:
        """The run's history events, in order (those after `after_sequence`)."""
        return await self.client.control.history(
            self.workflow_id, await self._target(), after_sequence=after_sequence, limit=limit
        )

    async def request_cancellation(
        self,
        reason: str = "cancellation requested",
        *,
        cleanup_timeout: Seconds = 30,
        requester: dict[str, Any] | None = None,
        source: str = "client",
    ) -> CancellationRequestResult:
        """Ask the run to stop cooperatively: its cleanup code runs, bounded.

        The first request is accepted; a repeat returns the original identity
        and deadline (a different cleanup_timeout never extends the budget).
        Raises `CapabilityUnsupported` (recording nothing) when the worker
        holding the run cannot take cooperative cancellation.
        """
        seconds = _validate.optional_duration(cleanup_timeout, "cleanup_timeout", inclusive=False)
        if seconds is None:
            raise ConfigurationError("cleanup_timeout must be greater than 0 seconds, got None")
        if not isinstance(reason, str):
            raise ConfigurationError(f"reason must be a string, got {reason!r}")
        requester = _validate.json_object(requester, "requester")
        accepted, record = await self.client.control.request_cancellation(
            self.workflow_id, await self._target(), reason=reason, cleanup_timeout=seconds,
            requester=requester, source=source,
        )
        return CancellationRequestResult(accepted, CancellationContext.from_record(record))

    async def retry_after_review(self, *, units: str | None = None) -> bool:
        """Let a run marked for review be replayed again; False if it was not marked.

        After non-determinism: deploy code that replays the recorded history
        first. After units whose outcome is unknown (`workflow.units`), say
        what an operator found: ``units="rerun"`` runs them again (their
        effect did not happen, or doing it twice is safe), ``units="confirm"``
        records them done (their effect happened).
        """
        if units not in (None, "rerun", "confirm"):
            raise ConfigurationError(f"units must be 'rerun' or 'confirm', got {units!r}")
        return await self.client.control.clear_review(self.workflow_id, units=units)

    async def reset(self, *, to_op: str, reason: str) -> WorkflowHandle:
        """Repair a failed, timed-out, terminated, cancelled or stuck run after a
        fix: it continues as a new run of the same workflow id that keeps the
        results recorded before op `to_op` (nothing before it runs again) and
        runs the rest with the code deployed now. A stuck (open) run is
        terminated first. The old run and the new one name each other
        (describe()["run"]["reset_run_id"] / ["reset_from_run_id"]). Returns
        a handle bound to the new run. ``durable history ID`` shows op ids.
        """
        to_op = _validate.name(to_op, "to_op")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(f"reason must say why the run is reset, got {reason!r}")
        info = await self.client.control.reset(self.workflow_id, self.run_id, to_op=to_op,
                                               reason=reason)
        return WorkflowHandle(self.client, self.workflow_id, info["run_id"])

    async def cancellation_cascade(self) -> dict[str, Any]:
        """What a cancellation did across the tree of runs, read from records alone."""
        return await self.client.control.cancellation_cascade(self.workflow_id,
                                                              await self._target())

    async def cancel(self, reason: str = "cancelled") -> None:
        """Close the run at once as cancelled; no cleanup code runs."""
        await self.client.control.close_run(self.workflow_id, await self._target(),
                                            status="cancelled", reason=reason)

    async def terminate(self, reason: str = "terminated") -> None:
        """Close the run at once as terminated, revoking all its authority."""
        await self.client.control.close_run(self.workflow_id, await self._target(),
                                            status="terminated", reason=reason)

    async def signal(self, name: str, *args: Any, requester: dict[str, Any] | None = None,
                     source: str = "client", request_id: str | None = None) -> bool:
        """Send the run a signal; returns once it is recorded (``SignalReceived``).

        Signals are delivered to the workflow's handler for `name` in the order
        received, exactly once; one sent before a handler exists is kept until
        the workflow registers one. `requester` (who sends it, a JSON object
        such as ``{"type": "user", "id": "ana"}``) and `source` are recorded
        with it, as a cancellation request's are: the history, ``durable
        describe`` and the UI answer "who approved this".

        `request_id` makes sending idempotent: a sender that cannot tell
        whether its signal arrived (a timeout, a crash before the answer)
        sends it again with the same id, and the run records it once. True
        when it was recorded now, False when that id was already recorded
        for this run. Raises `RunAlreadyClosed` for a closed run,
        `WorkflowNotFound` (nothing recorded), `ConfigurationError` for a
        request id the run already holds for another signal or an update.
        """
        payload = self._payload("signal", name, args)
        sender = _validate.sender(requester, source)
        key = None if request_id is None else _validate.name(request_id, "signal request_id")
        return await self.client.control.signal(
            self.workflow_id, await self._target(), _validate.name(name, "signal name"),
            payload, sender=sender, request_id=key)

    async def query(self, name: str, *args: Any, timeout: Seconds = 10,  # noqa: ASYNC109
                    result_type: Any = None) -> Any:
        """Ask the workflow's query handler `name`; its return value.

        A worker that holds the run answers from its state in memory; a run no
        live worker holds (closed ones too) is replayed by a worker that has
        its workflow type, without recording anything. Raises `QueryFailed`
        when the handler raises or tries a durable operation, when there is no
        such handler, or when no worker answered within `timeout` seconds (the
        request is then withdrawn: a cancel scope around the call could not do
        that). `result_type` rebuilds a dataclass or model from the answer.
        """
        wait = _validate.optional_duration(timeout, "query timeout")
        if wait is None or wait <= 0:
            raise ConfigurationError("query timeout must be greater than 0 seconds")
        payload = self._payload("query", name, args)
        text = await self.client.control.query(self.workflow_id, await self._target(),
                                               _validate.name(name, "query name"), payload, wait)
        return self.client.converter.decode(text, result_type)

    async def update(self, name: str, *args: Any, update_id: str | None = None,
                     timeout: Seconds | None = None,  # noqa: ASYNC109
                     result_type: Any = None, requester: dict[str, Any] | None = None,
                     source: str = "client") -> Any:
        """Ask the workflow's update handler `name` and wait for its result.

        The update is validated first (its validator raising rejects it with
        `UpdateRejected`, and nothing is recorded), then recorded
        (``UpdateAccepted``), run as workflow code, and its result recorded
        (``UpdateCompleted``). Giving the same `update_id` again returns the
        recorded result without running it again. Raises `UpdateFailed` when
        the handler raised or the run closed first, or when `timeout` seconds
        passed (None: wait as long as it takes); `RunAlreadyClosed`.
        `requester` and `source` (who asks) are recorded with the accepted
        update (``UpdateAccepted``, describe's ``received``), as a signal's.
        """
        wait = _validate.optional_duration(timeout, "update timeout")
        if wait is not None and wait <= 0:
            raise ConfigurationError("update timeout must be greater than 0 seconds")
        _validate.optional_name(update_id, "update_id")
        payload = self._payload("update", name, args)
        text = await self.client.control.update(
            self.workflow_id, await self._target(), _validate.name(name, "update name"), payload,
            update_id or uuid.uuid4().hex, wait, sender=_validate.sender(requester, source))
        return self.client.converter.decode(text, result_type)


class Client:
    """Entry point for applications: start, await, list and control workflows.

    Built by `durable.connect`; ``Client(driver)`` wraps a storage driver you
    opened yourself, ``Client(control=...)`` any other control plane.
    """

    def __init__(
        self,
        driver: Driver | None = None,
        *,
        namespace: str = "default",
        clock: Clock | None = None,
        converter: PayloadConverter | None = None,
        limits: Limits | None = None,
        control: ControlPlane | None = None,
    ) -> None:
        if (driver is None) == (control is None):
            raise ConfigurationError("a Client needs exactly one of a driver or a control plane")
        _validate.namespace(namespace)
        check_client_options(clock, converter, limits)
        self.clock: Clock = clock or SystemClock()
        self.converter: PayloadConverter = converter or JSONConverter()
        self.limits = limits or Limits()
        self._driver = driver
        self._store = Store(driver) if driver is not None else None
        if self._store is not None:
            control = EmbeddedControl(self._store, namespace, self.clock)
            observe.watch(self._store.hub)  # stops recorded here are logged here
        assert control is not None
        self.control: ControlPlane = control
        self.namespace = control.namespace

    @staticmethod
    def _no_storage() -> ConfigurationError:
        return ConfigurationError(
            "this client talks to a control plane over HTTP and has no storage of its own; "
            "a Worker needs storage: connect it with a database URL (sqlite:// or "
            "postgresql://)"
        )

    @property
    def driver(self) -> Driver:
        """The storage driver of an embedded client (workers need one)."""
        if self._driver is None:
            raise self._no_storage()
        return self._driver

    @property
    def store(self) -> Store:
        """The domain transactions over this client's storage (embedded clients)."""
        if self._store is None:
            raise self._no_storage()
        return self._store

    @property
    def embedded(self) -> bool:
        """Whether the client opened storage in this process (and can host workers)."""
        return self._driver is not None

    def with_namespace(self, namespace: str) -> Client:
        """A client acting in `namespace` over this client's connection.

        Cheap (no new connection): a server answering many namespaces builds
        one per request. Closing the view releases nothing; close this client.
        """
        _validate.namespace(namespace)
        view = Client(control=self.control.for_namespace(namespace), clock=self.clock,
                      converter=self.converter, limits=self.limits)
        view._driver = self._driver
        view._store = self._store
        return view

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self.control.close()

    async def start(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        options: StartOptions | None = None,
        task_queue: str | None = None,
        **misplaced: Never,
    ) -> WorkflowHandle:
        """Start a workflow instance; returns once the start is recorded."""
        if misplaced:
            raise _validate.misplaced_keywords("client.start()", misplaced, StartOptions,
                                               "the workflow's")
        options = _validate.options(options, StartOptions(), "options")
        wf_type = workflow_name(workflow)
        defn = await self._check_registered(wf_type, workflow, args)
        request = self._start_request(wf_type, args, id, options, task_queue)
        started = await self.control.start(request)
        return WorkflowHandle(self, id, started.run_id, defn.return_hint if defn else None,
                              first_run_id=started.run_id, defn=defn)

    def _start_request(self, wf_type: str, args: tuple[Any, ...] | list[Any], id: str,
                       options: StartOptions, task_queue: str | None) -> StartRequest:
        """Validate and encode a start (the control plane's start route builds one too)."""
        _validate.name(id, "workflow id")
        _validate.optional_name(task_queue, "task_queue")
        payload = self.converter.encode(list(args), f"the arguments of workflow {wf_type!r}")
        check_size(payload, self.limits.payload_bytes, f"the arguments of workflow {wf_type!r}")
        memo = None
        if options.memo:
            memo = self.converter.encode(options.memo, "the memo")
            if len(memo.encode()) > self.limits.memo_bytes:
                raise StructuralLimitExceeded("memo_bytes", len(memo.encode()),
                                              self.limits.memo_bytes)
        return StartRequest(
            namespace=self.namespace, workflow_id=id, workflow_type=wf_type,
            task_queue=task_queue or options.task_queue or "default", input=payload,
            id_reuse=options.id_reuse.value, execution_timeout=options.execution_timeout,
            run_timeout=options.run_timeout, memo=memo, priority=options.priority,
            concurrency_key=options.concurrency_key,
        )

    def _payload(self, args: tuple[Any, ...], what: str) -> str:
        """Encode call arguments (a signal's, a query's, an update's), size-checked."""
        payload = self.converter.encode(list(args), what)
        check_size(payload, self.limits.payload_bytes, what)
        return payload

    async def signal_with_start(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        signal: str,
        signal_args: tuple[Any, ...] | list[Any] = (),
        options: StartOptions | None = None,
        task_queue: str | None = None,
    ) -> WorkflowHandle:
        """Signal the instance `id` if it is running, else start it with `args`
        and signal the new run; one transaction either way. A new run's handlers
        see the signal before its code starts. A closed instance is started
        again only as its `options.id_reuse` allows (else `WorkflowAlreadyStarted`).
        """
        options = _validate.options(options, StartOptions(), "options")
        wf_type = workflow_name(workflow)
        defn = await self._check_registered(wf_type, workflow, args)
        request = self._start_request(wf_type, args, id, options, task_queue)
        payload = self._payload(tuple(signal_args), f"the arguments of signal {signal!r}")
        started = await self.control.signal_with_start(
            request, _validate.name(signal, "signal name"), payload)
        return WorkflowHandle(self, id, started.run_id, defn.return_hint if defn else None,
                              first_run_id=started.run_id, defn=defn)

    async def execute(
        self,
        workflow: Callable[..., Any] | str,
        *args: Any,
        id: str,
        options: StartOptions | None = None,
        task_queue: str | None = None,
        **misplaced: Never,
    ) -> Any:
        """Start a workflow and wait for its result."""
        if misplaced:
            raise _validate.misplaced_keywords("client.execute()", misplaced, StartOptions,
                                               "the workflow's")
        handle = await self.start(workflow, *args, id=id, options=options, task_queue=task_queue)
        return await handle.result()

    def get_handle(self, workflow_id: str, *, run_id: str | None = None) -> WorkflowHandle:
        """A handle to an existing instance (its current run unless run_id is given)."""
        _validate.name(workflow_id, "workflow id")
        _validate.optional_name(run_id, "run id")
        return WorkflowHandle(self, workflow_id, run_id)

    async def list(self, *, status: str | None = None, workflow_type: str | None = None,
                   limit: int = 100, query: str | None = None) -> list[dict[str, Any]]:
        """Run summaries, newest first (the first `limit`; `list_page` pages through all);
        `status` is ours, `query` read as ``GET /api/workflows`` reads it (`run_filter`)."""
        return (await self.list_page(status=status, workflow_type=workflow_type, limit=limit,
                                     query=query)).items

    async def list_page(self, *, status: str | None = None, workflow_type: str | None = None,
                        limit: int = 100, cursor: str | None = None,
                        query: str | None = None) -> Page:
        """One page of run summaries, newest first (filters as `list`); pass
        `next_cursor`, with the same filters, for the next."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ConfigurationError(f"limit must be an integer from 1 to 1000, got {limit!r}")
        if status is not None:
            _validate.one_of(status, LISTED_STATUSES, "status")
        return await self.control.list_runs(status=status, workflow_type=workflow_type,
                                            limit=limit, cursor=cursor, query=query)

    # ---------------------------------------------------------------- schedules

    @property
    def schedule_control(self) -> ScheduleControl:
        """Where this client's schedule requests go (storage, or the control plane)."""
        if self._store is not None:
            return EmbeddedSchedules(self._store, self.namespace, self.clock)
        plane: ScheduleControl = self._plane_part("schedules", "schedules")
        return plane

    async def create_schedule(
        self,
        schedule_id: str,
        spec: ScheduleSpec,
        workflow: Callable[..., Any] | str,
        *args: Any,
        overlap: Overlap | str = Overlap.SKIP,
        jitter: Seconds = 0,
        catchup_window: Seconds = 3600,
        max_runs: int | None = None,
        paused: bool = False,
        note: str | None = None,
        options: StartOptions | None = None,
        task_queue: str | None = None,
    ) -> ScheduleHandle:
        """Create a schedule that starts `workflow(*args)` at every fire time of `spec`.

        Each fire starts one run with id ``{schedule_id}-{time:%Y%m%dT%H%M%SZ}``
        (UTC; a trigger's has milliseconds), once whatever the number of workers and crashes;
        `overlap` says what a fire does while an earlier run of the schedule
        is open; `jitter` delays each fire by up to that many seconds (the same
        delay for a given fire on every worker); a fire missed while no worker
        ran starts when a worker is back within `catchup_window` seconds, else
        it counts as skipped; `max_runs` bounds the runs scheduled fires start.
        Raises `ScheduleAlreadyExists`, `NameNotRegistered` for an unknown workflow.
        """
        if not isinstance(paused, bool):
            raise ConfigurationError(f"paused must be True or False, got {paused!r}")
        check_schedule_id(schedule_id)
        fields = self._schedule_fields(
            schedule_id=schedule_id, spec=spec, overlap=overlap, args=args,
            options=options or StartOptions(), task_queue=task_queue, workflow=workflow,
            jitter=jitter, catchup_window=catchup_window, max_runs=max_runs, note=note)
        await check_scheduled_workflow(self, schedule_id, fields["workflow_type"], workflow, args)
        await self.schedule_control.create(schedule_id, ScheduleDefinition(paused=paused, **fields))
        return ScheduleHandle(self, schedule_id)

    def get_schedule(self, schedule_id: str) -> ScheduleHandle:
        """A handle to the schedule `schedule_id` of this namespace."""
        return ScheduleHandle(self, check_schedule_id(schedule_id))

    async def list_schedules(self, *, limit: int = 1000) -> builtins.list[dict[str, Any]]:
        """The first `limit` schedule summaries, newest first: spec, paused, next fire,
        counters, the last fire and its run's status (`list_schedules_page` pages and
        filters)."""
        return (await self.list_schedules_page(limit=limit)).items

    async def list_schedules_page(self, *, limit: int = 100, cursor: str | None = None,
                                  status: str | None = None, workflow_type: str | None = None,
                                  query: str | None = None) -> Page:
        """A page of schedule summaries, newest first (by creation time, then by id,
        as the control plane's list), and the next page's `next_cursor` (None on the
        last); filters: `status` ("active", "paused"), `workflow_type`, and `query`,
        the reference engine's grammar: ``Field = literal`` joined by ``AND``, fields
        ``ScheduleId``, ``Status``, ``WorkflowType``, ``TaskQueue``, ``Note``
        (`durable._visibility_query`; `InvalidScheduleQuery` for one that does not fit).

        Pass a cursor with the filters it was given for. One whose last schedule
        the filters no longer keep (deleted, paused under ``status="active"``, ...)
        raises `StaleCursor`, as the reference engine refuses it: list again from the
        first page."""
        return Page(*await self.schedule_control.list(
            **schedule_list_args(limit, cursor, status, workflow_type, query)))

    async def _check_registered(self, wf_type: str, workflow: Callable[..., Any] | str,
                                args: Sequence[Any] | None = None) -> WorkflowDefn | None:
        """The definition of a workflow about to be started with `args`: a name no
        worker registered, or arguments its function does not take, are refused
        here, before anything is recorded."""
        defn = workflow_defn_of(workflow)
        if defn is None and wf_type not in await self.control.registered_types():
            raise NameNotRegistered(
                f"unknown workflow {wf_type!r}: no @workflow.defn with this name is imported "
                "here and no worker has registered it; pass the workflow function or check "
                "the name"
            )
        if args is not None:
            await check_start_arity(self._store, self.namespace, self.clock, wf_type, defn, args)
        return defn

    def _schedule_fields(self, *, unset: Any = None, **given: Any) -> dict[str, Any]:
        """The given schedule fields, validated and encoded (`schedule_fields`)."""
        return schedule_fields(self._start_request, unset=unset, **given)

    # ---------------------------------------------------------------- retention

    @property
    def retention_control(self) -> RetentionControl:
        """Where this client's retention requests go (storage, or the control plane)."""
        if self._store is not None:
            return EmbeddedRetention(self._store, self.namespace, self.clock)
        plane: RetentionControl = self._plane_part("retention", "retention")
        return plane

    async def set_retention(self, namespace: str | None = None, *,
                            days: float | None) -> None:
        """Keep the namespace's closed runs `days` days (None: clear the setting,
        the workers' `retention` applies again). Workers of the namespace delete
        older closed runs, with everything they own, from their next pass on."""
        target = _validate.namespace(namespace or self.namespace)
        seconds = None
        if days is not None:
            seconds = _validate.number(days, "retention days", minimum=1 / 86400,
                                       maximum=_validate.MAX_SECONDS / 86400) * 86400
        await self.retention_control.set(target, seconds)

    async def get_retention(self, namespace: str | None = None) -> dict[str, Any]:
        """``{namespace, retention_seconds, pruned: {table: rows}, last_pruned_at}``:
        the stored setting (None: the workers' applies) and what retention
        deleted there so far."""
        target = _validate.namespace(namespace or self.namespace)
        return await self.retention_control.get(target)

    async def prune(self, older_than: Seconds, *, dry_run: bool = False) -> dict[str, Any]:
        """Delete now the namespace's runs closed more than `older_than` ago, with
        everything they own, in small transactions; ``dry_run`` only lists them.
        ``{cutoff, dry_run, runs: [...], runs_deleted, deleted: {table: rows}}``
        (``runs_expired`` instead of deleting, for a dry run)."""
        seconds = _validate.duration(older_than, "older_than")
        if not isinstance(dry_run, bool):
            raise ConfigurationError(f"dry_run must be True or False, got {dry_run!r}")
        return await self.retention_control.prune(seconds, dry_run)

    # ---------------------------------------------------------------- queues and workers

    @property
    def queue_control(self) -> QueueControl:
        """Where this client's queue and worker requests go (storage, or the plane)."""
        if self._store is not None:
            return EmbeddedQueues(self._store, self.namespace, self.clock)
        plane: QueueControl = self._plane_part("queues", "queues and workers")
        return plane

    def _plane_part(self, attribute: str, what: str) -> Any:
        """The remote control plane's part serving `what` (its `attribute`), or
        `CapabilityUnsupported` when that plane has none."""
        plane = getattr(self.control, attribute, None)
        if plane is None:
            raise CapabilityUnsupported(
                f"this client's control plane does not serve {what}; connect with a "
                "database URL, or to a `durable serve` that does")
        return plane

    async def list_workers(self) -> builtins.list[dict[str, Any]]:
        """The namespace's workers, alive first, then recently gone (kept an hour):
        ``{worker_id, identity, host, pid, build_id, task_queues, workflows,
        activities, definitions, last_seen_at, alive, status, runs_held, ...}``."""
        return await self.queue_control.list_workers()

    async def set_queue_limits(self, task_queue: str, limits: QueueLimits) -> None:
        """Limit how much of `task_queue` runs at once across every worker
        (`QueueLimits()`: no limits). Takes effect at the workers' next claim."""
        if not isinstance(limits, QueueLimits):
            raise ConfigurationError(
                f"limits must be a durable.QueueLimits, got {limits!r}")
        await self.queue_control.set_limits(_validate.name(task_queue, "task_queue"),
                                            limits.to_dict())

    async def describe_queue(self, task_queue: str) -> dict[str, Any]:
        """``{name, limits, runs: {running, waiting, oldest_waiting_seconds,
        rate_left, running_by_key}, activities: {...}, workers}``."""
        return await self.queue_control.describe(_validate.name(task_queue, "task_queue"))

    async def list_queues(self) -> builtins.list[dict[str, Any]]:
        """`describe_queue` of every queue that is limited, served by a live
        worker, or holds open work."""
        return await self.queue_control.list()

    async def queue_builds(self, task_queue: str) -> dict[str, Any]:
        """The queue's builds during a deploy: each one's workers, the open runs it
        advanced, others refused, it refused (docs/deploying.md)."""
        return await self.queue_control.builds(_validate.name(task_queue, "task_queue"))

    # ---------------------------------------------------------------- maintenance

    async def repair_pass(self) -> dict[str, int]:
        """Enforce every deadline that is due now, once; counts by kind.

        Workers do this continuously in their watchdog; this one-shot pass is
        for operators and scripts (and works with no worker running).
        """
        return await self.control.repair_pass()

    async def overdue_deadlines(self) -> dict[str, Any]:
        """The deadlines passed and not enforced yet, by kind, and how late the
        oldest is: what `repair_pass` would enforce now (none: watchdogs run)."""
        return await self.control.overdue()


class _Connecting:
    """What `connect()` returns: await it, or use it with ``async with``."""

    def __init__(self, url: str, kwargs: dict[str, Any], driver_options: dict[str, Any],
                 token: str | None = None) -> None:
        self._url = url
        self._kwargs = kwargs
        self._driver_options = driver_options
        self._token = token
        self._client: Client | None = None

    def _open_remote(self) -> Client:
        unknown = sorted(set(self._driver_options) - set(_REMOTE_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} storage driver "
                f"option(s), which mean nothing to a control plane over HTTP; a remote client "
                f"takes token=, namespace=, converter=, limits= and {', '.join(_REMOTE_OPTIONS)}"
            )
        if self._kwargs.get("clock") is not None:
            raise ConfigurationError(
                "clock= cannot be given to a remote client: the control plane's storage and "
                "workers keep time; pass a clock to the process that serves it"
            )
        try:
            from .http.remote import RemoteControl
        except ImportError as exc:
            raise ConfigurationError(
                "connecting over HTTP needs httpx: pip install 'durable-sdk[remote]'"
            ) from exc
        token = self._token if self._token is not None else os.environ.get("DURABLE_TOKEN")
        control = RemoteControl(self._url, token=token or None,
                                namespace=self._kwargs["namespace"], **self._driver_options)
        return Client(control=control, converter=self._kwargs.get("converter"),
                      limits=self._kwargs.get("limits"))

    async def _open(self) -> Client:
        if _is_http(self._url):
            return self._open_remote()
        if self._token is not None:
            raise ConfigurationError(
                "token= is for a control plane over HTTP (http:// or https:// URLs); a "
                f"database URL ({self._url.split(':', 1)[0]}://) needs none"
            )
        factory = driver_factory(self._url)
        _validate.driver_options(factory, self._url, self._driver_options)
        driver = factory(self._url, **self._driver_options)
        await driver.open()
        try:
            return Client(driver, **self._kwargs)
        except BaseException:
            await driver.close()
            raise

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Client:
        self._client = await self._open()
        return self._client

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    url: str = "sqlite:///durable.db",
    *,
    namespace: str = "default",
    clock: Clock | None = None,
    converter: PayloadConverter | None = None,
    limits: Limits | None = None,
    token: str | None = None,
    **driver_options: Any,
) -> _Connecting:
    """Open storage at `url` (driver chosen by scheme) and return a client.

    ``async with durable.connect(url) as client:`` closes it at the end;
    ``client = await durable.connect(url)`` leaves closing to you.

    An ``http://`` or ``https://`` URL connects to a control plane (``durable
    serve``) instead: the same `Client`, its requests sent over HTTP with the
    bearer `token` (default: the ``DURABLE_TOKEN`` environment variable).
    Such a client takes `timeout` (seconds, default 30), `verify` (TLS: a
    bool or a CA bundle path) and `transport` (an httpx transport, e.g.
    ``httpx.ASGITransport(app)`` in tests); it has no storage, so a Worker
    needs a database URL.
    """
    return _Connecting(
        _validate.storage_url(url),
        {"namespace": namespace, "clock": clock, "converter": converter, "limits": limits},
        driver_options,
        token,
    )


# Options a remote client takes besides those every client takes.
_REMOTE_OPTIONS = ("timeout", "verify", "transport")


def _is_http(url: str) -> bool:
    return url.split(":", 1)[0].lower() in ("http", "https")
