"""Options users pass when they start workflows and call activities and children.

All options are frozen dataclasses: a value is validated once, where it is set,
and an invalid one raises at the call that made it. Options are snapshotted
into storage at schedule time ("frozen"), so changing code later never changes
the policy of work that is already scheduled.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from . import _validate
from .errors import ConfigurationError
from .failure import Failure

Seconds = int | float | timedelta


def _workflow_timeout(value: Seconds | None, label: str, field: str) -> float | None:
    """An execution or run timeout: at least 1 second (the reference engine's rule)."""
    return _validate.optional_duration(value, f"{field}: {label} timeout", minimum=1)


class CancellationPolicy(enum.StrEnum):
    """What an interrupted await does when its workflow is cancelled."""

    TRY_CANCEL = "try_cancel"
    WAIT_CANCELLATION_COMPLETED = "wait_cancellation_completed"
    ABANDON = "abandon"


class ParentClosePolicy(enum.StrEnum):
    """What happens to an open child when its parent closes."""

    ABANDON = "abandon"
    REQUEST_CANCEL = "request_cancel"
    REQUEST_CANCELLATION = "request_cancellation"
    TERMINATE = "terminate"


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How failed activity attempts are retried.

    Defaults follow Temporal's (1 s initial, x2, capped at 100 s) but with a
    finite number of attempts: unlimited retries were a frequent surprise.
    """

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 100.0
    non_retryable_error_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _validate.integer(self.max_attempts, "RetryPolicy.max_attempts", minimum=1,
                          maximum=1_000_000)
        set_ = object.__setattr__
        set_(self, "initial_interval", _validate.duration(
            self.initial_interval, "RetryPolicy.initial_interval"))
        set_(self, "maximum_interval", _validate.duration(
            self.maximum_interval, "RetryPolicy.maximum_interval"))
        set_(self, "backoff_coefficient", _validate.number(
            self.backoff_coefficient, "RetryPolicy.backoff_coefficient", minimum=1.0,
            maximum=100.0))
        names = self.non_retryable_error_types
        if isinstance(names, str):
            names = (names,)  # one name, not its characters
        try:
            names = tuple(names)
        except TypeError:
            raise ConfigurationError(
                "RetryPolicy.non_retryable_error_types must be a sequence of exception type "
                f"names, got {names!r}"
            ) from None
        for item in names:
            if not isinstance(item, str) or not item:
                raise ConfigurationError(
                    "RetryPolicy.non_retryable_error_types must hold exception type names "
                    f"(e.g. 'PaymentDeclined' or 'myapp.errors.PaymentDeclined'), got {item!r}"
                )
        set_(self, "non_retryable_error_types", names)

    def next_attempt_at(self, failure: Failure, attempt: int, now: float,
                        overall_deadline: float | None, *, retryable: bool = True
                        ) -> float | None:
        """When the attempt after a failed `attempt` may start, or None: no retry.

        The one retry rule for local and remote attempts alike: the failure must
        be retryable (not marked non-retryable, its type not listed in
        `non_retryable_error_types`), attempts must be left, and the next one
        must be able to start before the schedule-to-close deadline.
        """
        names = self.non_retryable_error_types
        if (
            not retryable
            or failure.non_retryable
            or attempt >= self.max_attempts
            or failure.exception_class in names
            or failure.get("cause_type") in names
        ):
            return None
        at = now + self.delay_before(attempt + 1)
        if overall_deadline is not None and at >= overall_deadline:
            return None
        return at

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before `attempt` (2 = the first retry)."""
        delay = self.initial_interval * self.backoff_coefficient ** max(0, attempt - 2)
        return float(min(delay, self.maximum_interval))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["non_retryable_error_types"] = list(self.non_retryable_error_types)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetryPolicy:
        return cls(
            max_attempts=int(data["max_attempts"]),
            initial_interval=float(data["initial_interval"]),
            backoff_coefficient=float(data["backoff_coefficient"]),
            maximum_interval=float(data["maximum_interval"]),
            non_retryable_error_types=tuple(data.get("non_retryable_error_types", ())),
        )


#: How a local activity's outcome is recorded (``ActivityOptions.record``).
RECORD_MODES = ("step", "batched")


def record_mode(value: Any, what: str) -> str:
    """``"step"`` or ``"batched"``; anything else is refused at the call that set it."""
    if not isinstance(value, str) or value not in RECORD_MODES:
        raise ConfigurationError(
            f"{what} must be one of {', '.join(repr(m) for m in RECORD_MODES)}, got {value!r}"
        )
    return value


#: The retry policy of every call that sets none (frozen, so one instance serves all).
DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, kw_only=True)
class ActivityOptions:
    """Timeouts, retries and cancellation policy of one activity call.

    `record` applies to local activities: ``"step"`` records each outcome
    with one write before the workflow continues; ``"batched"`` keeps
    successful outcomes in memory and records them with the run's next
    durable operation, its close, or every `Worker(local_activity_batch=)`
    steps (a crash re-runs at most that unrecorded window). None: the
    worker's `local_activity_record` (``"step"`` unless configured).
    """

    schedule_to_start_timeout: Seconds | None = None
    start_to_close_timeout: Seconds | None = None
    schedule_to_close_timeout: Seconds | None = None
    heartbeat_timeout: Seconds | None = None
    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    cancellation: CancellationPolicy = CancellationPolicy.TRY_CANCEL
    task_queue: str | None = None
    record: str | None = None
    #: claims of remote attempts go by priority, 0 (first) .. 9, then age;
    #: None: the run's priority (docs/queues.md)
    priority: int | None = None

    def __post_init__(self) -> None:
        if self.record is not None:
            record_mode(self.record, "ActivityOptions.record")
        for name in (
            "schedule_to_start_timeout",
            "start_to_close_timeout",
            "schedule_to_close_timeout",
            "heartbeat_timeout",
        ):
            object.__setattr__(self, name, _validate.optional_duration(
                getattr(self, name), f"ActivityOptions.{name}", inclusive=False))
        if self.max_attempts is not None:
            _validate.integer(self.max_attempts, "ActivityOptions.max_attempts", minimum=1,
                              maximum=1_000_000)
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError(
                f"ActivityOptions.retry must be a durable.RetryPolicy, got {self.retry!r}"
            )
        object.__setattr__(self, "cancellation", _validate.choice(
            self.cancellation, CancellationPolicy, "ActivityOptions.cancellation"))
        _validate.optional_name(self.task_queue, "ActivityOptions.task_queue")
        if self.priority is not None:
            _validate.integer(self.priority, "ActivityOptions.priority", minimum=0, maximum=9)

    @property
    def retry_policy(self) -> RetryPolicy:
        """The effective retry policy (max_attempts overrides the policy's)."""
        if self.retry is None and self.max_attempts is None:
            return DEFAULT_RETRY  # the common case: no policy built per call
        policy = self.retry or DEFAULT_RETRY
        if self.max_attempts is not None:
            policy = dataclasses.replace(policy, max_attempts=self.max_attempts)
        return policy

    def snapshot(self) -> dict[str, Any]:
        """The frozen form recorded at schedule time."""
        return {
            "schedule_to_start_timeout": self.schedule_to_start_timeout,
            "start_to_close_timeout": self.start_to_close_timeout,
            "schedule_to_close_timeout": self.schedule_to_close_timeout,
            "heartbeat_timeout": self.heartbeat_timeout,
            "retry": self.retry_policy.to_dict(),
            "cancellation": self.cancellation.value,
        } | ({} if self.priority is None else {"priority": self.priority})


@dataclass(frozen=True, kw_only=True)
class ChildOptions:
    """Policies and timeouts of one child workflow call."""

    cancellation: CancellationPolicy = CancellationPolicy.WAIT_CANCELLATION_COMPLETED
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.REQUEST_CANCELLATION
    execution_timeout: Seconds | None = None
    run_timeout: Seconds | None = None
    cleanup_timeout: Seconds | None = None
    task_queue: str | None = None
    #: claims go by priority, 0 (first) .. 9; None: the parent's, so a child of
    #: urgent work is not queued behind the backlog its parent went ahead of
    priority: int | None = None
    #: the child's key for ``max_running_per_key``; not inherited: a parent
    #: holds its key's slot while it waits, so a child of the same key could
    #: wait for a slot its own parent holds
    concurrency_key: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.priority is not None:
            set_(self, "priority", _validate.integer(self.priority, "ChildOptions.priority",
                                                     minimum=0, maximum=9))
        _validate.optional_name(self.concurrency_key, "ChildOptions.concurrency_key")
        set_(self, "execution_timeout", _workflow_timeout(self.execution_timeout, "execution",
                                                          f"{type(self).__name__}.execution_timeout"))
        set_(self, "run_timeout", _workflow_timeout(self.run_timeout, "run",
                                                    f"{type(self).__name__}.run_timeout"))
        set_(self, "cleanup_timeout", _validate.optional_duration(
            self.cleanup_timeout, "ChildOptions.cleanup_timeout", inclusive=False))
        set_(self, "cancellation", _validate.choice(
            self.cancellation, CancellationPolicy, "ChildOptions.cancellation"))
        set_(self, "parent_close_policy", _validate.choice(
            self.parent_close_policy, ParentClosePolicy, "ChildOptions.parent_close_policy"))
        _validate.optional_name(self.task_queue, "ChildOptions.task_queue")


class IdReusePolicy(enum.StrEnum):
    """What `start` does when the workflow id is already in use."""

    REJECT_DUPLICATE = "reject_duplicate"
    RETURN_EXISTING_ACTIVE = "return_existing_active"
    ALLOW_DUPLICATE_FAILED_ONLY = "allow_duplicate_failed_only"


@dataclass(frozen=True)
class StartOptions:
    """How a workflow instance starts: id reuse, timeouts, queue, memo.

    The fluent face mirrors the reference engine's
    ``StartOptions::rejectDuplicate()->withExecutionTimeout(7200)``.
    """

    id_reuse: IdReusePolicy = IdReusePolicy.REJECT_DUPLICATE
    execution_timeout: float | None = None
    run_timeout: float | None = None
    task_queue: str | None = None
    memo: dict[str, Any] = field(default_factory=dict)
    #: claims go by priority, 0 (first) .. 9, then age (docs/queues.md)
    priority: int = 5
    #: runs of one key count against the queue's ``max_running_per_key``
    concurrency_key: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "priority", _validate.integer(self.priority, "StartOptions.priority",
                                                 minimum=0, maximum=9))
        _validate.optional_name(self.concurrency_key, "StartOptions.concurrency_key")
        set_(self, "id_reuse", _validate.choice(self.id_reuse, IdReusePolicy,
                                                "StartOptions.id_reuse"))
        set_(self, "execution_timeout", _workflow_timeout(self.execution_timeout, "execution",
                                                          f"{type(self).__name__}.execution_timeout"))
        set_(self, "run_timeout", _workflow_timeout(self.run_timeout, "run",
                                                    f"{type(self).__name__}.run_timeout"))
        _validate.optional_name(self.task_queue, "StartOptions.task_queue")
        if not isinstance(self.memo, dict) or not all(isinstance(k, str) for k in self.memo):
            raise ConfigurationError(
                f"StartOptions.memo must be a dict with string keys, got {self.memo!r}"
            )

    @classmethod
    def reject_duplicate(cls) -> StartOptions:
        """Refuse to start when any instance with the id exists."""
        return cls(id_reuse=IdReusePolicy.REJECT_DUPLICATE)

    @classmethod
    def return_existing_active(cls) -> StartOptions:
        """Return a handle to the running instance instead of failing."""
        return cls(id_reuse=IdReusePolicy.RETURN_EXISTING_ACTIVE)

    def with_execution_timeout(self, seconds: Seconds) -> StartOptions:
        """Bound the whole instance, across continue-as-new (at least 1 second)."""
        return dataclasses.replace(self, execution_timeout=_workflow_timeout(
            seconds, "execution", "StartOptions.with_execution_timeout"))

    def with_run_timeout(self, seconds: Seconds) -> StartOptions:
        """Bound each run; renewed at every continue-as-new (at least 1 second)."""
        return dataclasses.replace(self, run_timeout=_workflow_timeout(
            seconds, "run", "StartOptions.with_run_timeout"))

    def with_task_queue(self, task_queue: str) -> StartOptions:
        """Run the workflow on workers polling this task queue."""
        return dataclasses.replace(self, task_queue=task_queue)

    def with_memo(self, memo: dict[str, Any]) -> StartOptions:
        """Attach non-indexed metadata shown by describe() (bounded in size)."""
        return dataclasses.replace(self, memo=dict(memo))


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Structural limits, with the reference engine's defaults.

    They protect storage and replay from runaway workflows; exceeding one raises
    `StructuralLimitExceeded` at the call and fails the run with
    ``failure_category = "structural_limit"``.
    """

    payload_bytes: int = 2 * 1024 * 1024
    memo_bytes: int = 256 * 1024
    pending_activities: int = 2000
    pending_children: int = 1000
    pending_timers: int = 2000

    def __post_init__(self) -> None:
        for name in ("payload_bytes", "memo_bytes", "pending_activities", "pending_children",
                     "pending_timers"):
            _validate.integer(getattr(self, name), f"Limits.{name}", minimum=1)


def check_client_options(clock: Any, converter: Any, limits: Any) -> None:
    """Refuse, at the call, a clock, converter or limits of the wrong kind:
    unchecked, each was kept and broke the first start with an
    AttributeError or TypeError far from the call that passed it."""
    if limits is not None and not isinstance(limits, Limits):
        raise ConfigurationError(
            f"limits must be a durable.Limits, got {limits!r} ({type(limits).__name__}); "
            "build one: limits=durable.Limits(payload_bytes=..., memo_bytes=...)")
    if clock is not None and not all(
            callable(getattr(clock, name, None)) for name in ("now", "sleep_until")):
        raise ConfigurationError(
            f"clock must be a durable.Clock (now() and sleep_until()), got {clock!r} "
            f"({type(clock).__name__}); leave it unset for real time, or pass "
            "durable.VirtualClock() in tests")
    if converter is not None and (isinstance(converter, str | bytes) or not all(
            callable(getattr(converter, name, None)) for name in ("encode", "decode"))):
        raise ConfigurationError(
            f"converter must be a durable.PayloadConverter (encode() and decode()), got "
            f"{converter!r} ({type(converter).__name__}); leave it unset for JSON, or pass "
            "durable.JSONConverter(codec=...)")
