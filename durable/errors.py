"""Every error `durable` raises derives from `DurableError`.

Names follow one pattern: what happened to what, subject first
(`WorkflowNotFound`, `ActivityTimedOut`, `StorageUnavailable`,
`UpdateRejected`, `NonDeterminismDetected`). Only the roots of a family keep
the conventional ``Error`` suffix: `DurableError` itself, `ConfigurationError`
(bad input at the call that gave it; also a `ValueError`) and
`ApplicationError` (an error of *your* code, named as Temporal names it).
Names 0.2 used before this rule (`NonDeterminismError`, `PayloadError`,
`NotRegistered`) still import, with a `DeprecationWarning`, until 0.4.

Errors that cross the storage boundary (a workflow's failure, an activity's
failure) are rebuilt from their recorded form on replay, so they are our own
classes carrying the original type name and message rather than the user's
exception class: a class that cannot be imported on the replaying worker must
never stop `except`/`finally` blocks from running (a pain point of the
reference engine's users).
"""

from __future__ import annotations

import warnings
from datetime import datetime
from typing import Any


class DurableError(Exception):
    """Base class of every error raised by `durable`."""


class ConfigurationError(DurableError, ValueError):
    """A call was given input it cannot use; the message says how to fix it."""


class RequestIdConflict(ConfigurationError):
    """A signal's or update's request id already names another message of the
    run (another name, or the other kind): give each message its own id and
    reuse one only to retry the very same message. HTTP 409
    ``request_id_conflict``, the reference engine's reason; still a
    `ConfigurationError` for code that catches that."""

    def __init__(self, message: str, *, request_id: str | None = None,
                 retained_command_type: str | None = None,
                 retained_name: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.retained_command_type = retained_command_type
        self.retained_name = retained_name


class WorkflowAlreadyStarted(DurableError):
    """A workflow with this id is already running (or exists, under reject_duplicate).

    `status` is the instance's status when the refusal knew it (None from a
    child's start, or from a server that did not say). The advice depends on
    it: `StartOptions.return_existing_active()` helps only while the instance
    is open, so an id whose run has closed is told what does help (reading its
    outcome, starting a failed one again, another id) instead.
    """

    def __init__(self, workflow_id: str, run_id: str | None = None, *,
                 child: bool = False, status: str | None = None) -> None:
        # a child's start knows no run id (the refusal is recorded in its
        # parent's history), and StartOptions do not apply to a child
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.child = child
        self.status = status
        super().__init__(self._message())

    @property
    def closed(self) -> bool:
        """True when the instance that holds the id has closed (its status says so)."""
        return self.status is not None and self.status not in ("pending", "running")

    def _message(self) -> str:
        wid = self.workflow_id
        if self.child:
            return (f"workflow id {wid!r} is already in use; give the child an id of its own "
                    "(workflow.start_child(..., id=...)): a workflow id is used once in a "
                    "namespace, closed runs included")
        run = f"run {self.run_id}" if self.run_id else "its run"
        if not self.closed:
            held = f" ({run}, {self.status})" if self.status else (
                f" ({run})" if self.run_id else "")
            return (f"workflow id {wid!r} is already in use{held}; pick another id or start "
                    "with StartOptions.return_existing_active() to get the running one")
        again = ("" if self.status == "completed" else
                 ", StartOptions(id_reuse=IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY) starts it "
                 "again")
        return (f"workflow id {wid!r} was used by a run that closed {self.status} ({run}); "
                "an id is used once in a namespace, closed runs included, so "
                "StartOptions.return_existing_active() does not help: "
                f"client.get_handle({wid!r}) reads its outcome{again}, or pick another id")


class WorkflowNotFound(DurableError):
    """No workflow (or run) with this id exists in the namespace."""


class ScheduleNotFound(DurableError):
    """No schedule with this id exists in the namespace."""


class ScheduleAlreadyExists(DurableError):
    """A schedule with this id already exists in the namespace."""

    def __init__(self, schedule_id: str, namespace: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} already exists in namespace {namespace!r}; pick another "
            "id, or change it with client.get_schedule(id).update(...)")
        self.schedule_id = schedule_id
        self.namespace = namespace


class InvalidVisibilityQuery(ConfigurationError):
    """A list's `query` does not fit its grammar (`durable._visibility_query`);
    `reason` names what is wrong, in the reference engine's words."""

    def __init__(self, message: str, *,
                 reason: str = "invalid_workflow_visibility_query") -> None:
        super().__init__(message)
        self.reason = reason


class InvalidScheduleQuery(InvalidVisibilityQuery):
    """A schedule list's `query` does not fit its grammar (`durable._visibility_query`);
    `reason` is the reference engine's name for what is wrong."""

    def __init__(self, message: str, *,
                 reason: str = "invalid_schedule_visibility_query") -> None:
        super().__init__(message, reason=reason)


class StaleCursor(ConfigurationError):
    """A schedule list's cursor whose last schedule is no longer in the list it was
    given for (deleted, or changed so that the filters no longer keep it, or made
    anew): list again from the first page, without a cursor."""


class NameNotRegistered(ConfigurationError):
    """A workflow or activity name is not known to this process or any worker."""


class NonDeterminismDetected(DurableError):
    """Replayed code asked for a different operation than the one recorded."""


class AuthorityLost(DurableError):
    """This worker no longer owns the run (its lease epoch was superseded).

    Internal: the engine stops the run's task without recording anything.
    """


class StorageUnavailable(DurableError):
    """Storage could not be reached, or the connection broke during a commit.

    `outcome_unknown` is True when a commit may or may not have been recorded:
    only storage knows, so the caller must read the state back (the engine
    replays the run) instead of assuming either outcome.
    """

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class StorageClosed(StorageUnavailable):
    """The client (and its storage) was closed: nothing more can be recorded.

    Workers that meet it stop serving (logged once) instead of retrying.
    """


class WorkerFailed(DurableError):
    """A worker stopped because of an internal error (a bug in durable).

    Raised where the application leaves ``async with Worker(...)`` (or from
    `Worker.run()`); its ``__cause__`` is the error, whose traceback was
    logged when it happened. The application's own code is never interrupted.
    """


class WriteRejected(DurableError):
    """Storage refused a write as invalid (a value it cannot represent).

    Raised at the workflow call whose write it was; other runs committed in the
    same transaction are not affected. `cause` is the database's complaint.
    """


class FailureCarrying(DurableError):
    """An error rebuilt from a recorded failure dictionary."""

    def __init__(self, message: str, failure: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.failure: dict[str, Any] = dict(failure or {})

    @property
    def failure_category(self) -> str | None:
        value = self.failure.get("failure_category")
        return str(value) if value is not None else None


class WorkflowFailed(FailureCarrying):
    """The workflow raised; `failure` holds the recorded failure."""


class WorkflowCancelled(FailureCarrying):
    """The workflow was cancelled (cooperatively, immediately, or by its parent)."""


class WorkflowTerminated(FailureCarrying):
    """The workflow was terminated."""


class WorkflowTimedOut(FailureCarrying):
    """The workflow exceeded its execution or run timeout (`timeout_kind`)."""

    @property
    def timeout_kind(self) -> str | None:
        value = self.failure.get("timeout_kind")
        return str(value) if value is not None else None

    @property
    def deadline_at(self) -> datetime | None:
        """The deadline that passed, as an aware UTC datetime (ISO text in `failure`)."""
        value = self.failure.get("deadline_at")
        return None if value is None else datetime.fromisoformat(str(value))


class ActivityFailed(FailureCarrying):
    """The activity raised on its last attempt (or a non-retryable error).

    `cause_type` and `cause_message` name the original exception.
    """

    @property
    def cause_type(self) -> str | None:
        """The original exception's class name (``exception_class`` has the module)."""
        value = self.failure.get("cause_type") or self.failure.get("exception_class")
        return str(value) if value is not None else None

    @property
    def cause_message(self) -> str | None:
        value = self.failure.get("cause_message")
        return str(value) if value is not None else None


class ActivityTimedOut(ActivityFailed):
    """The activity exceeded one of its timeouts (`timeout_kind`)."""

    @property
    def timeout_kind(self) -> str | None:
        value = self.failure.get("timeout_kind")
        return str(value) if value is not None else None


class ActivityCancelled(ActivityFailed):
    """The activity was cancelled before it completed."""


class WorkerLost(ActivityFailed):
    """The worker running an activity attempt stopped renewing its lease (it
    crashed, hung or lost storage) and no attempt was left to retry on."""


class ApplicationError(FailureCarrying):
    """An exception raised by workflow or activity code, rebuilt from its record.

    The original class may not be importable where the failure is read (another
    process, another version), so it comes back as this error carrying the
    original class name in `type` and its message; `traceback` is the original
    traceback as text.
    """

    def __init__(self, message: str, failure: dict[str, Any] | None = None, *,
                 type: str | None = None) -> None:
        super().__init__(message, failure)
        self.type = type

    @property
    def traceback(self) -> str | None:
        value = self.failure.get("traceback")
        return None if value is None else str(value)

    def __str__(self) -> str:
        message = super().__str__()
        return f"{self.type}: {message}" if self.type else message


class ActivityStopRequested(DurableError):
    """Raised inside an activity by `heartbeat()`/`check_cancelled()` when its
    attempt must stop (cancellation, timeout fencing or worker shutdown).

    For a process-isolated activity it reports how the stop was confirmed.
    """

    def __init__(
        self,
        message: str = "the activity attempt must stop",
        *,
        stop_kind: str | None = None,
        confirmed: bool = True,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.stop_kind = stop_kind
        self.confirmed = confirmed
        self.exit_code = exit_code


class ActivityProcessExited(DurableError):
    """The child process of a process-isolated activity attempt died without a
    result (killed, crashed, or exited); `exit_code` says how."""

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ChildWorkflowFailed(FailureCarrying):
    """A child workflow did not complete; `cause` is the child's terminal error."""


class QueryFailed(FailureCarrying):
    """A query could not be answered: its handler raised or tried a durable
    operation, no handler has the name, or no worker answered in time.

    Nothing was recorded: queries are read-only. `failure` holds the handler's
    error when it raised one (``__cause__`` is that error, rebuilt).
    """


class UpdateRejected(FailureCarrying):
    """An update was refused before it was accepted: its validator raised, or
    the workflow has no update handler with that name.

    Rejections leave no trace in the run's history; `failure` holds the
    validator's error (``__cause__`` is that error, rebuilt).
    """


class UpdateFailed(FailureCarrying):
    """An accepted update did not complete: its handler raised, the run closed
    (or was cancelled) before it finished, or the caller stopped waiting.

    `failure` is the recorded failure; ``__cause__`` the handler's error, rebuilt.
    """


class StructuralLimitExceeded(DurableError):
    """A configured structural limit was exceeded (`kind`, `value`, `limit`)."""

    def __init__(self, kind: str, value: int, limit: int, hint: str = "") -> None:
        message = f"structural limit exceeded: {kind} is {value}, the limit is {limit}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)
        self.kind = kind
        self.value = value
        self.limit = limit


class PayloadRejected(ConfigurationError):
    """A value could not be serialised by the payload converter."""


class PolicyRejected(ConfigurationError):
    """An operation's cancellation policy is not allowed for it."""


class CapabilityUnsupported(DurableError):
    """The worker holding the run does not support the requested capability."""


class RunNotCurrent(DurableError):
    """The selected run is not the workflow's current run."""


class RunAlreadyClosed(DurableError):
    """The run is closed; the request has nothing to act on."""


class WorkflowAPIOutsideWorkflow(DurableError, RuntimeError):
    """A `durable.workflow` function was called outside a running workflow."""


class ActivityAPIOutsideActivity(DurableError, RuntimeError):
    """A `durable.activity` function was called outside a running activity."""


class RaisedNotAnException(DurableError):
    """Workflow or activity code raised a `BaseException` that is not an
    `Exception` (`SystemExit`, `GeneratorExit`, a class of its own): the one
    attempt or run fails with this error (its ``__cause__`` is what was
    raised) instead of the worker stopping. `KeyboardInterrupt` and the host's
    cancellation are not caught: they stop the host, as they mean to."""


class NondeterministicCall(DurableError):
    """Workflow code called something that returns another value, or waits
    another way, when the run replays (``time.time()``, ``random.random()``,
    ``asyncio.sleep()``): raised at that call under
    `durable.testing.strict_determinism`, in tests only."""


class UnitOutcomeUnknown(DurableError):
    """Units of `workflow.units` whose effect could not be confirmed (`keys`).

    Raised out of `workflow.units`; uncaught, it parks the run for review
    (describe()["status"] == "unknown") until an operator calls
    ``handle.retry_after_review(units="rerun" | "confirm")``.
    """

    def __init__(self, message: str, keys: list[str] | None = None,
                 handler: str = "?") -> None:
        super().__init__(message)
        self.keys = list(keys or [])
        self.handler = handler


class ContinueAsNew(BaseException):
    """Raised by `workflow.continue_as_new()`; caught by the engine.

    A BaseException so that a workflow's broad `except Exception` cannot swallow
    it by accident.
    """

    def __init__(self, args: tuple[Any, ...]) -> None:
        super().__init__("continue as new")
        self.new_args = args


# ------------------------------------------------------------------ time budgets
#
# Raised by `durable.Budget` (durable/budget.py) anywhere: in activities, plain
# scripts, web handlers. A budget that ran out and a budget that was cancelled
# are different stops, so they are different classes; a phase that overran its
# own limit is a kind of running out (a subclass), told apart by `timeout_kind`.


class BudgetExhausted(DurableError, TimeoutError):
    """A time budget ran out: its deadline passed (at or after it counts as passed).

    `budget` names the budget whose deadline bound, `phase` the phase that was
    running (or refused to start), `late_by` how many seconds past the deadline
    the check happened, `timeout_kind` is ``"budget"`` (``"phase"`` for
    `PhaseTimedOut`). Also a `TimeoutError`, so code that already handles
    timeouts handles it.
    """

    timeout_kind: str = "budget"

    def __init__(
        self,
        message: str,
        *,
        budget: str = "budget",
        phase: str | None = None,
        deadline: float | None = None,
        late_by: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.budget = budget
        self.phase = phase
        self.deadline = deadline
        self.late_by = late_by


class PhaseTimedOut(BudgetExhausted):
    """A phase overran its own `limit` while the budget around it still had time.

    Distinct from the whole budget running out (plain `BudgetExhausted`): the
    caller may skip or retry the phase and go on with the time left.
    """

    timeout_kind = "phase"

    def __init__(
        self,
        message: str,
        *,
        budget: str = "budget",
        phase: str | None = None,
        limit: float | None = None,
        deadline: float | None = None,
        late_by: float = 0.0,
    ) -> None:
        super().__init__(message, budget=budget, phase=phase, deadline=deadline,
                         late_by=late_by)
        self.limit = limit


class BudgetCancelled(DurableError):
    """The budget was cancelled (`Budget.cancel(reason)`): no new work may start.

    `budget` names the budget that was cancelled, `reason` is the reason given,
    `phase` the phase that was running or refused to start.
    """

    def __init__(
        self,
        message: str,
        *,
        budget: str = "budget",
        reason: str = "cancelled",
        phase: str | None = None,
    ) -> None:
        super().__init__(message)
        self.budget = budget
        self.reason = reason
        self.phase = phase


#: Names of 0.2, kept importable (with a `DeprecationWarning`) until 0.4.
RENAMED = {
    "NonDeterminismError": "NonDeterminismDetected",
    "PayloadError": "PayloadRejected",
    "NotRegistered": "NameNotRegistered",
}


def __getattr__(name: str) -> Any:
    if name in RENAMED:
        warnings.warn(f"durable.{name} is now durable.{RENAMED[name]} (error names say what "
                      "happened, subject first); the old name goes in 0.4",
                      DeprecationWarning, stacklevel=2)
        return globals()[RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
