"""What went wrong, as recorded: the `Failure` value and the errors it stands for.

A failure is stored as a JSON object (``failure_category``, ``message``,
``exception_class``, kind-specific fields, and a nested ``cause``) so that an
operator can read it in `describe()`, history and SQL. In the engine it is a
`Failure`: built by the constructors below (one per kind of failure, so the
same kind is always recorded the same way) and turned back into exceptions
by `to_error()` and its variants, with the chain of causes rebuilt as
``__cause__`` links. A class that cannot be imported where the failure is
read never stops ``except`` blocks from running: application exceptions come
back as `ApplicationError` carrying their type name and message.
"""

from __future__ import annotations

import traceback as _traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from . import errors
from .clock import to_iso

_KNOWN = ("failure_category", "message", "exception_class", "cause")
#: How many ``raise ... from`` links are recorded below an exception.
_MAX_CAUSES = 8


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(leaf_exceptions(inner))
        return found
    return [exc]


#: the failure of code that cancelled its own asyncio task (`cancel_request_left`)
OWN_CANCELLATION = (
    "{what} cancelled its own task (asyncio's task.cancel() with no cancel scope asking): "
    "a run's or an attempt's task is the worker's, not the code's, so it fails here rather "
    "than stop the worker; to stop a run use handle.cancel() or request_cancellation(), "
    "to bound a wait use workflow.phase(name, limit) in a workflow, anyio.fail_after() in an "
    "activity")


def not_an_exception(exc: BaseException, what: str) -> Exception | None:
    """The error a run or an attempt fails with when its code (`what`, e.g.
    "activity 'charge'") raised `exc`, a `BaseException` that is not an
    `Exception`; None when `exc` must go on: the host's cancellation, a
    `KeyboardInterrupt` (the operator's Ctrl-C stops the host; the run or
    attempt is not failed, and resumes on restart or on another worker),
    `workflow.continue_as_new()`'s `ContinueAsNew`.

    A `GeneratorExit` fails the run too: no event loop closes a running
    task's coroutine (the engine closes only the code's own coroutines, whose
    `close()` takes its GeneratorExit back), so one that reaches here was
    raised by the code; let go on, it had the run handed back and replayed
    forever, ten warnings a second (the embedding audit).

    Left to propagate, the others (`SystemExit`, a class of the code's own)
    ended the worker's task group and the host with it (an activity), or had
    the run handed back and claimed again forever (a workflow). So did, on
    asyncio, a `CancelledError` the code raised while nothing cancelled its
    task (`cancellation_pending`): it cancelled the worker's task group and the
    host's own code in the ``async with Worker`` block; it fails here too, and
    so does the code's cancellation of its own task (`cancel_request_left`),
    which is withdrawn so that recording the failure is not cancelled."""
    leaves = leaf_exceptions(exc)
    going_on = (anyio.get_cancelled_exc_class(), KeyboardInterrupt,
                errors.ContinueAsNew)  # (the engine's own)
    if isinstance(exc, Exception):
        return None
    if any(isinstance(leaf, going_on) for leaf in leaves):
        cancel = anyio.get_cancelled_exc_class()
        if not all(isinstance(leaf, cancel) for leaf in leaves if isinstance(leaf, going_on)):
            return None
        if cancellation_pending():
            return None
        # The code raised the host's cancellation while nothing cancelled it
        # (asyncio: `raise CancelledError()`, a cancelled future awaited, a
        # sync activity's `asyncio.run` that was cancelled), or cancelled its
        # own task: going on, it cancelled the worker's task group and the
        # host's own code with it.
        if cancel_request_left():
            take_back_own_cancellation()
            error = errors.RaisedNotAnException(OWN_CANCELLATION.format(what=what))
            error.__cause__ = exc
            return error
    raised = leaves[0] if len(leaves) == 1 else exc
    text = safe_str(raised)
    error = errors.RaisedNotAnException(
        f"{what} raised {type(raised).__name__}{f' ({text})' if text else ''}, a "
        "BaseException that is not an Exception: it fails here (the run, the attempt, the "
        "query or the update) rather than stop the worker; raise an Exception subclass instead")
    error.__cause__ = raised
    return error


def cancellation_pending() -> bool:
    """Whether the current task is being cancelled by a cancellation that must
    go on: a cancel scope around it (a task group's, the worker's stop, the
    host's cancellation, which reaches a worker's tasks through its task
    group), so that a cancellation exception caught now is raised on. Only
    asyncio lets code cancel without a cancel scope (``trio.Cancelled`` has
    no public constructor): there a task being cancelled counts
    ``cancelling()`` above 0, and a cancel scope that asked for it is
    cancelled (`_scope_asked`). A task cancelled with no scope asking was
    cancelled by the code itself (`cancel_request_left`)."""
    import asyncio

    if anyio.get_cancelled_exc_class() is not asyncio.CancelledError:
        return True
    task = asyncio.current_task()
    if task is None:
        return True
    return task.cancelling() > 0 and _scope_asked(task)


def _scope_asked(task: Any) -> bool:
    """Whether a cancel scope around `task` was cancelled, its request hence
    the scope's: the effective deadline reads -inf inside one, but a shield
    hides the cancelled scopes above it, and cleanup runs under one after
    catching the run's cancellation (`workflow.cancellation_shield()`): its
    steps would read that request as the code's own and withdraw it. So,
    past a shield, anyio's own record of the task's scopes is walked (an
    internal of anyio's asyncio backend: without it, the effective deadline
    alone is read). Called only for a task with a cancel request."""
    if anyio.current_effective_deadline() == float("-inf"):
        return True
    try:
        from anyio._backends._asyncio import _task_states

        scope: Any = _task_states[task].cancel_scope
    except Exception:  # pragma: no cover - another anyio layout
        return False
    while scope is not None:
        if getattr(scope, "_cancel_called", False):
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False


def cancel_request_left() -> bool:
    """Whether the current asyncio task holds a cancel request that no cancel
    scope asked for: the code's own ``asyncio.current_task().cancel()`` (or a
    task it handed its task to). Going on, it cancelled the worker's task
    group and the host's own code in the ``async with Worker`` block (the
    embedding audit, 12-08). Code that called it and returned before its
    next await leaves one for the engine's next await, outside the code
    (decision (bd)). A cancelled
    scope's request is not one: code that caught a cooperative cancellation
    and returned a value keeps it. Cheap enough for every local step: one
    counter read, and no exception on trio, where no code can cancel a task
    outside a scope."""
    import asyncio

    loop = asyncio._get_running_loop()
    if loop is None:  # trio
        return False
    task = asyncio.current_task(loop)
    return task is not None and task.cancelling() > 0 and not _scope_asked(task)


async def receive_cancel_request() -> None:
    """Let a cancel request left by code that just returned (`cancel_request_left`)
    reach the task here, as the code's next await would have: it raises
    where the code's own exceptions are caught, so the run or attempt fails
    (`not_an_exception`) rather than the engine's next await, outside the
    code, carrying it to the worker's task group. A request the code caught
    and went on from is withdrawn."""
    import asyncio

    await asyncio.sleep(0)  # a request still pending raises here
    if cancel_request_left():  # none was: the code caught its own and went on
        take_back_own_cancellation()


def take_back_own_cancellation() -> None:
    """Withdraw the code's own cancel requests from the current task (asyncio's
    ``uncancel``), so that the engine's awaits that record the failure they
    caused are not cancelled too. Only called when `cancel_request_left()`: no
    cancel scope asked for any of them."""
    import asyncio

    task = asyncio.current_task()
    while task is not None and task.cancelling() > 0:
        task.uncancel()


def code_error(exc: BaseException, what: str) -> Exception:
    """The error that a handler (`what`) raised, to fail its query, update or
    run with: `exc` itself, or `not_an_exception`'s stand-in, or for
    `continue_as_new()` (a handler may not) the error saying so; a
    cancellation or a `KeyboardInterrupt` is raised on."""
    if isinstance(exc, Exception):
        return exc
    if isinstance(exc, errors.ContinueAsNew):  # (it had the run claimed again forever)
        return errors.ConfigurationError(
            f"{what} called workflow.continue_as_new(): only the workflow's run may; have "
            "the handler set state that the run waits for, and continue as new there")
    error = not_an_exception(exc, what)
    if error is None:
        raise exc
    return error


#: the longest exception message a failure records (characters); its
#: traceback keeps its last 8,000
MAX_MESSAGE = 32_768


def bounded_message(text: str) -> str:
    """`text` cut to `MAX_MESSAGE` characters, saying how long it was. Why: a
    message is recorded several times (the failure's message, its
    ``cause_message``, again in each failure that wraps it: an activity's in
    its run's), so an exception carrying a 5 MiB message wrote 10 MiB and 20
    MiB events (the embedding audit), past any payload limit, into every
    history read and UI page of the run."""
    if len(text) <= MAX_MESSAGE:
        return text
    return f"{text[:MAX_MESSAGE]}... [message cut: {len(text):,} characters in all]"


def safe_repr(value: object) -> str:
    """``repr(value)``, or a stand-in naming its type when its ``__repr__``
    raises (for a log line: logging a failure must not fail, or the run is
    handed back and claimed again forever)."""
    try:
        return repr(value)
    except Exception as exc:
        return (f"<{type(value).__name__}: its __repr__ raised "
                f"{type(exc).__name__}; make __repr__ return a string>")


def safe_str(value: object) -> str:
    """``str(value)``, or a stand-in naming its type when its ``__str__`` raises:
    recording a failure must not fail (that would end the worker's task, not
    the one attempt or run)."""
    try:
        return str(value)
    except Exception as exc:
        return (f"<{type(value).__name__}: its __str__ raised "
                f"{type(exc).__name__}; make __str__ return a string>")


@dataclass(frozen=True)
class Failure:
    """A recorded failure. `to_dict()` / `from_dict()` round-trip exactly."""

    category: str | None
    message: str | None = None
    exception_class: str | None = None
    cause: Failure | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- storage form

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.category is not None:
            data["failure_category"] = self.category
        if self.exception_class is not None:
            data["exception_class"] = self.exception_class
        if self.message is not None:
            data["message"] = self.message
        data.update(self.details)
        if self.cause is not None:
            data["cause"] = self.cause.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Failure:
        cause = data.get("cause")
        return cls(
            category=data.get("failure_category"),
            message=data.get("message"),
            exception_class=data.get("exception_class"),
            cause=cls.from_dict(cause) if isinstance(cause, Mapping) else None,
            details={k: v for k, v in data.items() if k not in _KNOWN},
        )

    @classmethod
    def maybe(cls, data: Mapping[str, Any] | None) -> Failure | None:
        return None if data is None else cls.from_dict(data)

    # ---------------------------------------------------------------- reading

    def get(self, key: str, default: Any = None) -> Any:
        """A kind-specific field (``timeout_kind``, ``attempt``, ``policy``...)."""
        return self.details.get(key, default)

    @property
    def timeout_kind(self) -> str | None:
        value = self.details.get("timeout_kind")
        return None if value is None else str(value)

    @property
    def non_retryable(self) -> bool:
        return bool(self.details.get("non_retryable", False))

    @property
    def cause_type(self) -> str | None:
        """The class name of the exception this failure describes."""
        value = self.details.get("cause_type")
        if value is not None:
            return str(value)
        if self.exception_class:
            return self.exception_class.rsplit(".", 1)[-1]
        return None

    def with_details(self, **details: Any) -> Failure:
        return Failure(self.category, self.message, self.exception_class, self.cause,
                       {**self.details, **details})

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_exception(cls, exc: BaseException, category: str = "application") -> Failure:
        """The recorded form of an exception raised by workflow or activity code.

        Its cause is the failure the exception carries (a durable error rebuilt
        from a record), else the exception it was raised from (``raise ... from``).
        An `ApplicationError` stands in for an application exception: a rebuilt
        one is recorded as the exception it was rebuilt from; one built by user
        code as its `type` and message.
        """
        return cls._from_exception(exc, category, 0)

    @classmethod
    def _from_exception(cls, exc: BaseException, category: str, depth: int) -> Failure:
        leaves = leaf_exceptions(exc)
        if len(leaves) == 1:
            exc = leaves[0]
        kind = type(exc)
        carried = getattr(exc, "failure", None)
        original = (cls.from_dict(carried) if isinstance(carried, Mapping) and carried
                    else None)
        exception_class = f"{kind.__module__}.{kind.__qualname__}"
        text = bounded_message(safe_str(exc))
        message = text or kind.__name__
        details: dict[str, Any] = {"cause_type": kind.__name__, "cause_message": text}
        cause = original
        if isinstance(exc, errors.ApplicationError):
            if original is not None and original.exception_class is not None:
                # rebuilt from a record: re-raising it records the same exception
                exception_class = original.exception_class
                message = original.message or message
                details = {k: original.details[k] for k in ("cause_type", "cause_message")
                           if k in original.details}
                cause = original.cause
            else:
                raw = bounded_message(safe_str(exc.args[0])) if exc.args else ""
                message = raw or kind.__name__
                details = {"cause_type": exc.type or kind.__name__, "cause_message": raw}
        if depth == 0:  # the traceback shows the whole chain: record it once
            details["traceback"] = "".join(_traceback.format_exception(exc))[-8000:]
        if isinstance(exc, errors.StructuralLimitExceeded):
            category = "structural_limit"
            details.update(kind=exc.kind, value=exc.value, limit=exc.limit)
        if isinstance(exc, errors.WorkflowAlreadyStarted):
            details.update(workflow_id=exc.workflow_id, run_id=exc.run_id)
            if exc.child:
                details["child"] = True
            if exc.status is not None:
                details["status"] = exc.status
        if getattr(exc, "non_retryable", False):
            details["non_retryable"] = True
        if cause is None and exc.__cause__ is not None and depth < _MAX_CAUSES:
            cause = cls._from_exception(exc.__cause__, "application", depth + 1)
        return cls(category=category, message=message, exception_class=exception_class,
                   cause=cause, details=details)

    @classmethod
    def activity_timeout(cls, kind: str, deadline: float | None, name: str,
                         attempt: int) -> Failure:
        return cls("timeout", f"activity {name} timed out ({kind}) on attempt {attempt}",
                   "durable.ActivityTimedOut", details={
                       "propagation_kind": "timeout", "timeout_kind": kind,
                       "deadline_at": to_iso(deadline), "attempt": attempt})

    @classmethod
    def local_timeout(cls, kind: str, name: str, attempt: int) -> Failure:
        return cls("timeout", f"local activity {name} timed out ({kind})",
                   "durable.ActivityTimedOut", details={
                       "propagation_kind": "timeout", "timeout_kind": kind, "attempt": attempt})

    @classmethod
    def worker_lost(cls, name: str, attempt: int, deadline: float | None) -> Failure:
        return cls("worker_lost",
                   f"the worker running attempt {attempt} of {name} stopped renewing its lease",
                   "durable.WorkerLost", details={"attempt": attempt,
                                                  "deadline_at": to_iso(deadline)})

    @classmethod
    def workflow_timeout(cls, kind: str, deadline: float | None, workflow_id: str) -> Failure:
        return cls("timeout", f"workflow {workflow_id} exceeded its {kind.replace('_', ' ')}",
                   "durable.WorkflowTimedOut", details={
                       "propagation_kind": "timeout", "timeout_kind": kind,
                       "deadline_at": to_iso(deadline)})

    @classmethod
    def phase_timeout(cls, phase: str, deadline: float | None, limit: float | None,
                      workflow_id: str) -> Failure:
        return cls("timeout", f"workflow {workflow_id} overran its phase {phase!r}",
                   "durable.PhaseTimedOut", details={
                       "propagation_kind": "timeout", "timeout_kind": "phase",
                       "phase": phase, "limit": limit, "deadline_at": to_iso(deadline)})

    @classmethod
    def units_unknown(cls, keys: list[str], handler: str, workflow_id: str) -> Failure:
        shown = ", ".join(keys[:5]) + ("..." if len(keys) > 5 else "")
        return cls("unknown", f"workflow {workflow_id}: the outcome of unit(s) {shown} of "
                   f"{handler} could not be confirmed (the call may or may not have taken "
                   "effect); an operator decides: `durable retry-after-review "
                   f"{workflow_id} --units rerun` (run them again) or `--units confirm` "
                   "(record them done), or handle.retry_after_review(units='rerun' or "
                   "'confirm')", "durable.UnitOutcomeUnknown",
                   details={"unknown_units": keys, "handler": handler})

    @classmethod
    def cleanup_expired(cls, deadline: float | None, workflow_id: str,
                        delivered: bool = True) -> Failure:
        """The cleanup deadline closed the run: its cleanup did not finish or,
        not `delivered`, never started (no worker took the request in time)."""
        what = ("did not finish its cleanup" if delivered else
                "never received its cancellation (no worker ran it)")
        return cls("cancelled",
                   f"workflow {workflow_id} {what} before the "
                   "cancellation deadline; its authority is revoked",
                   "durable.WorkflowCancelled", details={
                       "lifecycle": "deadline_expired", "deadline_at": to_iso(deadline)})

    @classmethod
    def closed_by_request(cls, status: str, reason: str) -> Failure:
        """A run closed from outside: ``cancelled`` (cancel()) or ``terminated``."""
        category = "terminated" if status == "terminated" else "cancelled"
        return cls(category, reason, f"durable.Workflow{category.capitalize()}")

    @classmethod
    def cancelled_workflow(cls, reason: str, request_id: str, root_request_id: str) -> Failure:
        """A run whose code finished after a delivered cooperative cancellation."""
        return cls("cancelled", f"cancelled: {reason}", "durable.WorkflowCancelled",
                   details={"request_id": request_id, "root_request_id": root_request_id})

    @classmethod
    def activity_cancelled(cls, message: str, **details: Any) -> Failure:
        return cls("cancelled", message, "durable.ActivityCancelled", details=details)

    @classmethod
    def child_failed(cls, child_workflow_id: str, status: str,
                     cause: Failure | None) -> Failure:
        return cls("child_workflow", f"child workflow {child_workflow_id} {status}",
                   "durable.ChildWorkflowFailed", cause or Failure(status),
                   details={"child_status": status})

    @classmethod
    def child_start(cls, child_workflow_id: str) -> Failure:
        return cls("child_start", f"child workflow id {child_workflow_id!r} is already in use; "
                   "give the child an id of its own (workflow.start_child(..., id=...)): a "
                   "workflow id is used once in a namespace, closed runs included",
                   "durable.WorkflowAlreadyStarted",
                   details={"child_workflow_id": child_workflow_id})

    # ---------------------------------------------------------------- back to errors

    def to_error(self) -> BaseException:
        """The exception this failure describes, its causes chained below it."""
        cls = _durable_class(self.exception_class)
        if cls is None or cls is errors.ApplicationError:
            app = errors.ApplicationError(
                self.message or "", type=self.cause_type, failure=self.to_dict(),
            )
            if self.cause is not None:
                app.__cause__ = self.cause.to_error()
            return app
        if not issubclass(cls, errors.FailureCarrying):
            return self._plain(cls)
        # An error that carried a failure (ActivityFailed carries the activity's)
        # was recorded with that failure as its cause.
        carried = self.cause if self.cause is not None else self
        err = cls(self.message or cls.__name__, carried.to_dict())
        link = carried._next_link(cls)
        if link is not None:
            err.__cause__ = link
        return err

    def _next_link(self, carrier: type[errors.FailureCarrying]) -> BaseException | None:
        """What lies under an error of class `carrier` that carries this failure.

        Under a `ChildWorkflowFailed`, the child's terminal error. Under any
        other carrier, the exception this failure describes (an application
        error, rebuilt) unless the carrier is that exception itself (an
        `ActivityTimedOut` carrying its timeout); then what caused it.
        """
        if issubclass(carrier, errors.ChildWorkflowFailed):
            status = self.get("child_status")
            if self.category == "child_start" or self.cause is None:
                return None
            return self.cause.to_workflow_error(str(status) if status else None)
        described = _durable_class(self.exception_class)
        if self.exception_class is None or described is carrier:
            return self.cause.to_error() if self.cause is not None else None
        return self.to_error()

    def _plain(self, cls: type[BaseException]) -> BaseException:
        """A durable error that carries no failure, with its attributes and the
        message as recorded; an `ApplicationError` if it cannot be rebuilt."""
        message = self.message or cls.__name__
        err: BaseException
        try:
            if issubclass(cls, errors.WorkflowAlreadyStarted):
                workflow_id = self.get("workflow_id") or self.get("child_workflow_id")
                err = cls(str(workflow_id or "?"), self.get("run_id"),
                          child=bool(self.get("child") or self.category == "child_start"),
                          status=self.get("status"))
            elif issubclass(cls, errors.StructuralLimitExceeded):
                err = cls(str(self.get("kind")), int(self.get("value")), int(self.get("limit")))
            else:
                err = cls(message)
        except (TypeError, ValueError):
            return errors.ApplicationError(message, self.to_dict(), type=cls.__name__)
        err.args = (message,)
        if self.cause is not None:
            err.__cause__ = self.cause.to_error()
        return err

    def to_activity_error(self) -> errors.ActivityFailed:
        """What awaiting an activity that ended with this failure raises."""
        cls: type[errors.ActivityFailed]
        if self.category == "timeout":
            cls = errors.ActivityTimedOut
        elif self.category == "cancelled":
            cls = errors.ActivityCancelled
        elif self.category == "worker_lost":
            cls = errors.WorkerLost
        else:
            cls = errors.ActivityFailed
        err = cls(self.message or "activity failed", self.to_dict())
        link = self._next_link(cls)
        if link is not None:
            err.__cause__ = link
        return err

    def to_child_error(self) -> BaseException:
        """What awaiting a child workflow that ended with this failure raises."""
        if self.category == "child_start":
            return self._plain(errors.WorkflowAlreadyStarted)
        err = errors.ChildWorkflowFailed(self.message or "child workflow failed",
                                         self.to_dict())
        link = self._next_link(errors.ChildWorkflowFailed)
        if link is not None:
            err.__cause__ = link
        return err

    def to_workflow_error(self, status: str | None = None) -> errors.FailureCarrying:
        """What `handle.result()` raises for a run that closed with this failure."""
        category = self.category or status
        cls: type[errors.FailureCarrying]
        if category == "timeout" or status == "timed_out":
            cls = errors.WorkflowTimedOut
        elif category == "cancelled" or status == "cancelled":
            cls = errors.WorkflowCancelled
        elif category == "terminated" or status == "terminated":
            cls = errors.WorkflowTerminated
        else:
            cls = errors.WorkflowFailed
        err = cls(self.message or str(category or "workflow did not complete"), self.to_dict())
        if cls is errors.WorkflowFailed and self.exception_class is not None:
            err.__cause__ = self.to_error()  # what the workflow raised
        return err


def _durable_class(name: str | None) -> type[BaseException] | None:
    """The durable error class a recorded ``exception_class`` names, if any."""
    if not name or not name.startswith("durable."):
        return None
    short = name.rsplit(".", 1)[-1]
    found = getattr(errors, short, None)
    if isinstance(found, type) and issubclass(found, errors.DurableError):
        return found
    return None


def exception_from_failure(data: Mapping[str, Any]) -> BaseException:
    """The exception a recorded failure describes (for tools that hold the dict)."""
    return Failure.from_dict(data).to_error()
