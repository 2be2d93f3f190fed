"""Options: validated where they are built, messages naming the field; the retry rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import durable
from durable import (
    ActivityOptions,
    CancellationPolicy,
    ChildOptions,
    ConfigurationError,
    IdReusePolicy,
    Limits,
    ParentClosePolicy,
    RetryPolicy,
    StartOptions,
)
from durable.failure import Failure

# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_attempts": 0}, "RetryPolicy.max_attempts"),
    ({"max_attempts": 2.5}, "RetryPolicy.max_attempts"),
    ({"max_attempts": True}, "RetryPolicy.max_attempts"),
    ({"initial_interval": -1}, "RetryPolicy.initial_interval"),
    ({"initial_interval": "1s"}, "RetryPolicy.initial_interval"),
    ({"maximum_interval": -0.5}, "RetryPolicy.maximum_interval"),
    ({"maximum_interval": float("nan")}, "RetryPolicy.maximum_interval"),
    ({"backoff_coefficient": 0.5}, "RetryPolicy.backoff_coefficient"),
    ({"backoff_coefficient": "2"}, "RetryPolicy.backoff_coefficient"),
    ({"non_retryable_error_types": (ValueError,)}, "RetryPolicy.non_retryable_error_types"),
    ({"non_retryable_error_types": 3}, "RetryPolicy.non_retryable_error_types"),
])
def test_retry_policy_rejects_bad_values_naming_the_field(kwargs: dict[str, Any],
                                                          field: str) -> None:
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"schedule_to_start_timeout": 0}, "ActivityOptions.schedule_to_start_timeout"),
    ({"start_to_close_timeout": -1}, "ActivityOptions.start_to_close_timeout"),
    ({"schedule_to_close_timeout": "5"}, "ActivityOptions.schedule_to_close_timeout"),
    ({"heartbeat_timeout": timedelta(0)}, "ActivityOptions.heartbeat_timeout"),
    ({"max_attempts": 0}, "ActivityOptions.max_attempts"),
    ({"max_attempts": "3"}, "ActivityOptions.max_attempts"),
    ({"retry": {"max_attempts": 3}}, "ActivityOptions.retry"),
    ({"cancellation": "sometimes"}, "ActivityOptions.cancellation"),
    ({"task_queue": ""}, "ActivityOptions.task_queue"),
])
def test_activity_options_reject_bad_values_naming_the_field(kwargs: dict[str, Any],
                                                             field: str) -> None:
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        ActivityOptions(**kwargs)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"execution_timeout": 0.5}, "ChildOptions.execution_timeout"),
    ({"run_timeout": -3}, "ChildOptions.run_timeout"),
    ({"run_timeout": "1h"}, "ChildOptions.run_timeout"),
    ({"cleanup_timeout": 0}, "ChildOptions.cleanup_timeout"),
    ({"cleanup_timeout": -1}, "ChildOptions.cleanup_timeout"),
    ({"cancellation": "never"}, "ChildOptions.cancellation"),
    ({"parent_close_policy": "forget"}, "ChildOptions.parent_close_policy"),
    ({"task_queue": 7}, "ChildOptions.task_queue"),
])
def test_child_options_reject_bad_values_naming_the_field(kwargs: dict[str, Any],
                                                          field: str) -> None:
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        ChildOptions(**kwargs)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"id_reuse": "sometimes"}, "StartOptions.id_reuse"),
    ({"execution_timeout": 0.5}, "StartOptions.execution_timeout"),
    ({"run_timeout": 0}, "StartOptions.run_timeout"),
    ({"run_timeout": "60"}, "StartOptions.run_timeout"),
    ({"task_queue": ""}, "StartOptions.task_queue"),
    ({"memo": ["not", "a", "dict"]}, "StartOptions.memo"),
])
def test_start_options_reject_bad_values_naming_the_field(kwargs: dict[str, Any],
                                                          field: str) -> None:
    with pytest.raises(ConfigurationError, match=field.replace(".", r"\.")):
        StartOptions(**kwargs)


@pytest.mark.parametrize("field", ["payload_bytes", "memo_bytes", "pending_activities",
                                   "pending_children", "pending_timers"])
@pytest.mark.parametrize("value", [0, -1, 1.5, "10"])
def test_limits_must_be_positive_integers(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"Limits\.{field}"):
        Limits(**{field: value})


def test_validation_errors_are_durable_errors_and_value_errors() -> None:
    with pytest.raises(durable.DurableError):
        RetryPolicy(max_attempts="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ActivityOptions(max_attempts=0)


def test_start_options_fluent_methods_keep_their_documented_messages() -> None:
    with pytest.raises(ConfigurationError, match="execution timeout must be at least 1 second"):
        StartOptions().with_execution_timeout(0.5)
    with pytest.raises(ConfigurationError, match="run timeout must be at least 1 second"):
        StartOptions().with_run_timeout(0)
    with pytest.raises(ConfigurationError, match="run timeout"):
        StartOptions().with_run_timeout("60")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"StartOptions\.task_queue"):
        StartOptions().with_task_queue("")


def test_valid_options_are_normalised() -> None:
    opts = ActivityOptions(start_to_close_timeout=timedelta(minutes=1), heartbeat_timeout=5,
                           cancellation="abandon")  # type: ignore[arg-type]
    assert opts.start_to_close_timeout == 60.0
    assert opts.heartbeat_timeout == 5.0
    assert opts.cancellation is CancellationPolicy.ABANDON
    child = ChildOptions(run_timeout=timedelta(seconds=90), cleanup_timeout=2,
                         parent_close_policy="terminate")  # type: ignore[arg-type]
    assert (child.run_timeout, child.cleanup_timeout) == (90.0, 2.0)
    assert child.parent_close_policy is ParentClosePolicy.TERMINATE
    start = StartOptions(id_reuse="allow_duplicate_failed_only",  # type: ignore[arg-type]
                         execution_timeout=timedelta(hours=1))
    assert start.id_reuse is IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY
    assert start.execution_timeout == 3600.0
    chained = StartOptions.return_existing_active().with_run_timeout(30).with_memo({"a": 1})
    assert (chained.id_reuse, chained.run_timeout, chained.memo) == (
        IdReusePolicy.RETURN_EXISTING_ACTIVE, 30.0, {"a": 1})
    policy = RetryPolicy(non_retryable_error_types=["A", "b.B"])  # type: ignore[arg-type]
    assert policy.non_retryable_error_types == ("A", "b.B")
    # a bare string is one name, not its characters
    one = RetryPolicy(non_retryable_error_types="PaymentDeclined")  # type: ignore[arg-type]
    assert one.non_retryable_error_types == ("PaymentDeclined",)
    assert Limits(pending_timers=3).pending_timers == 3


def test_activity_max_attempts_overrides_the_policy() -> None:
    opts = ActivityOptions(max_attempts=7, retry=RetryPolicy(max_attempts=2,
                                                            initial_interval=0.5))
    assert opts.retry_policy.max_attempts == 7
    assert opts.retry_policy.initial_interval == 0.5
    assert ActivityOptions().retry_policy == RetryPolicy()


def test_snapshot_is_json_ready_and_the_policy_round_trips() -> None:
    policy = RetryPolicy(max_attempts=4, initial_interval=0.25, backoff_coefficient=3,
                         maximum_interval=9, non_retryable_error_types=("Declined",))
    snap = ActivityOptions(schedule_to_close_timeout=60, retry=policy,
                           cancellation=CancellationPolicy.WAIT_CANCELLATION_COMPLETED).snapshot()
    assert snap == {
        "schedule_to_start_timeout": None, "start_to_close_timeout": None,
        "schedule_to_close_timeout": 60.0, "heartbeat_timeout": None,
        "retry": {"max_attempts": 4, "initial_interval": 0.25, "backoff_coefficient": 3,
                  "maximum_interval": 9.0, "non_retryable_error_types": ["Declined"]},
        "cancellation": "wait_cancellation_completed",
    }
    assert RetryPolicy.from_dict(snap["retry"]) == policy


# ---------------------------------------------------------------- the retry rule

APP = Failure.from_exception(RuntimeError("boom"))


class Declined(Exception):
    pass


def test_backoff_grows_by_the_coefficient_and_is_capped() -> None:
    policy = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=5.0)
    assert [policy.delay_before(n) for n in (2, 3, 4, 5, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.delay_before(1) == 1.0  # never below the initial interval


def test_next_attempt_is_now_plus_the_delay_until_attempts_run_out() -> None:
    policy = RetryPolicy(max_attempts=3, initial_interval=2.0, backoff_coefficient=3.0)
    assert policy.next_attempt_at(APP, 1, 100.0, None) == 102.0
    assert policy.next_attempt_at(APP, 2, 100.0, None) == 106.0
    assert policy.next_attempt_at(APP, 3, 100.0, None) is None


def test_a_single_attempt_policy_never_retries() -> None:
    assert RetryPolicy(max_attempts=1).next_attempt_at(APP, 1, 0.0, None) is None


@pytest.mark.parametrize("names", [("Declined",), (f"{__name__}.Declined",)])
def test_non_retryable_by_class_name_or_qualified_name(names: tuple[str, ...]) -> None:
    policy = RetryPolicy(non_retryable_error_types=names)
    failure = Failure.from_exception(Declined("no"))
    assert failure.exception_class == f"{__name__}.Declined"
    assert policy.next_attempt_at(failure, 1, 0.0, None) is None
    assert policy.next_attempt_at(APP, 1, 0.0, None) == 1.0


def test_non_retryable_by_recorded_cause_type() -> None:
    failure = Failure("application", "x", "somewhere.Else", details={"cause_type": "Declined"})
    assert RetryPolicy(non_retryable_error_types=("Declined",)).next_attempt_at(
        failure, 1, 0.0, None) is None


def test_non_retryable_by_flag_on_the_failure_or_by_the_caller() -> None:
    class Fatal(Exception):
        non_retryable = True

    flagged = Failure.from_exception(Fatal("stop"))
    assert flagged.non_retryable
    policy = RetryPolicy()
    assert policy.next_attempt_at(flagged, 1, 0.0, None) is None
    assert policy.next_attempt_at(APP, 1, 0.0, None, retryable=False) is None


def test_no_retry_that_could_not_start_before_schedule_to_close() -> None:
    policy = RetryPolicy(max_attempts=10, initial_interval=5.0, backoff_coefficient=1.0)
    assert policy.next_attempt_at(APP, 1, 100.0, 106.0) == 105.0
    assert policy.next_attempt_at(APP, 1, 100.0, 105.0) is None  # would start at the cutoff
    assert policy.next_attempt_at(APP, 1, 100.0, 104.0) is None
