"""The Failure value: exact round trips, recording exceptions, rebuilding typed chains."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable import (
    ActivityCancelled,
    ActivityFailed,
    ActivityTimedOut,
    ApplicationError,
    ChildWorkflowFailed,
    NonDeterminismDetected,
    StorageUnavailable,
    StructuralLimitExceeded,
    WorkerLost,
    WorkflowAlreadyStarted,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
    WorkflowTimedOut,
)
from durable.failure import MAX_MESSAGE, Failure, exception_from_failure


class PaymentDeclined(Exception):
    pass


class Fatal(Exception):
    non_retryable = True


def chain(err: BaseException | None) -> list[type[BaseException]]:
    """The classes down an error's __cause__ chain."""
    found: list[type[BaseException]] = []
    while err is not None:
        found.append(type(err))
        err = err.__cause__
    return found


def raised(exc: BaseException) -> BaseException:
    """`exc` as it is once raised (with a traceback)."""
    try:
        raise exc
    except BaseException as caught:
        return caught


APP = Failure.from_exception(raised(PaymentDeclined("card declined")))

CONSTRUCTED: dict[str, Failure] = {
    "from_exception": APP,
    "from_exception_structural": Failure.from_exception(
        raised(StructuralLimitExceeded("pending_timers", 4, 3))),
    "activity_timeout": Failure.activity_timeout("heartbeat", 1_700_000_000.5, "ship", 2),
    "local_timeout": Failure.local_timeout("start_to_close", "charge", 1),
    "worker_lost": Failure.worker_lost("ship", 3, 1_700_000_100.0),
    "workflow_timeout": Failure.workflow_timeout("run_timeout", 1_700_000_000.0, "order-1"),
    "workflow_timeout_unbounded": Failure.workflow_timeout("execution_timeout", None, "o"),
    "cleanup_expired": Failure.cleanup_expired(1_700_000_000.0, "order-1"),
    "closed_cancelled": Failure.closed_by_request("cancelled", "operator said so"),
    "closed_terminated": Failure.closed_by_request("terminated", "bad deploy"),
    "cancelled_workflow": Failure.cancelled_workflow("withdrawn", "req-1", "root-1"),
    "activity_cancelled": Failure.activity_cancelled("stopped", policy="try_cancel",
                                                     stop_receipt={"kind": "completed"}),
    "child_failed": Failure.child_failed("kid", "failed", APP),
    "child_failed_without_cause": Failure.child_failed("kid", "terminated", None),
    "child_start": Failure.child_start("kid"),
    "bare": Failure("cancelled"),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTED))
def test_every_constructor_round_trips_exactly_through_json(name: str) -> None:
    failure = CONSTRUCTED[name]
    data = failure.to_dict()
    stored = json.loads(json.dumps(data))
    assert stored == data
    assert Failure.from_dict(stored) == failure
    assert Failure.from_dict(stored).to_dict() == data


def test_the_storage_form_is_flat_with_a_nested_cause() -> None:
    data = Failure.child_failed("kid", "failed", APP).to_dict()
    assert data["failure_category"] == "child_workflow"
    assert data["exception_class"] == "durable.ChildWorkflowFailed"
    assert data["child_status"] == "failed"
    assert data["cause"]["exception_class"] == f"{__name__}.PaymentDeclined"
    assert Failure.maybe(None) is None and Failure.maybe(data) == Failure.from_dict(data)


def test_unknown_fields_survive_a_round_trip() -> None:
    data = {"failure_category": "application", "message": "m", "added_by_v2": [1, 2]}
    assert Failure.from_dict(data).to_dict() == data
    assert Failure.from_dict(data).get("added_by_v2") == [1, 2]


# ---------------------------------------------------------------- from_exception

def test_an_application_exception_records_its_class_message_and_traceback() -> None:
    data = APP.to_dict()
    assert data["failure_category"] == "application"
    assert data["exception_class"] == f"{__name__}.PaymentDeclined"
    assert (data["message"], data["cause_type"], data["cause_message"]) == (
        "card declined", "PaymentDeclined", "card declined")
    assert "raise exc" in data["traceback"]
    assert not APP.non_retryable and "cause" not in data


def test_an_exception_without_a_message_is_named_by_its_class() -> None:
    assert Failure.from_exception(KeyError()).message == "KeyError"


def test_a_group_of_one_records_the_exception_inside() -> None:
    group = ExceptionGroup("tasks", [ExceptionGroup("inner", [PaymentDeclined("x")])])
    failure = Failure.from_exception(group)
    assert failure.exception_class == f"{__name__}.PaymentDeclined"
    both = Failure.from_exception(ExceptionGroup("two", [ValueError("a"), KeyError("b")]))
    assert both.exception_class == "builtins.ExceptionGroup"


def test_a_structural_limit_is_its_own_category_with_kind_value_limit() -> None:
    failure = Failure.from_exception(StructuralLimitExceeded("pending_timers", 4, 3))
    assert failure.category == "structural_limit"
    assert (failure.get("kind"), failure.get("value"), failure.get("limit")) == (
        "pending_timers", 4, 3)


def test_non_retryable_exceptions_are_marked() -> None:
    assert Failure.from_exception(Fatal("no")).non_retryable
    assert Failure.from_exception(Fatal("no")).to_dict()["non_retryable"] is True


def test_a_carried_failure_becomes_the_cause() -> None:
    err = APP.to_activity_error()
    failure = Failure.from_exception(err)
    assert failure.exception_class == "durable.errors.ActivityFailed"
    assert failure.cause == APP


def test_raise_from_records_the_cause_with_one_traceback() -> None:
    try:
        try:
            raise KeyError("sku-9")
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc
    except RuntimeError as exc:
        failure = Failure.from_exception(exc)
    assert failure.cause is not None
    assert failure.cause.exception_class == "builtins.KeyError"
    assert "traceback" not in failure.cause.details
    assert "KeyError" in failure.get("traceback")
    err = failure.to_error()
    assert isinstance(err, ApplicationError) and err.type == "RuntimeError"
    assert isinstance(err.__cause__, ApplicationError) and err.__cause__.type == "KeyError"


def test_re_raising_a_rebuilt_application_error_records_the_original() -> None:
    rebuilt = APP.to_activity_error().__cause__
    assert isinstance(rebuilt, ApplicationError)
    failure = Failure.from_exception(raised(rebuilt))
    assert failure.exception_class == f"{__name__}.PaymentDeclined"
    assert failure.cause_type == "PaymentDeclined" and failure.message == "card declined"
    assert chain(failure.to_workflow_error("failed")) == [WorkflowFailed, ApplicationError]


def test_an_application_error_built_by_user_code_keeps_its_type() -> None:
    failure = Failure.from_exception(ApplicationError("bad postcode", type="Validation"))
    assert (failure.cause_type, failure.message) == ("Validation", "bad postcode")
    err = failure.to_error()
    assert isinstance(err, ApplicationError)
    assert (err.type, str(err)) == ("Validation", "Validation: bad postcode")
    activity_err = failure.to_activity_error()
    assert chain(activity_err) == [ActivityFailed, ApplicationError]
    assert activity_err.cause_type == "Validation"


# ---------------------------------------------------------------- back to errors

@pytest.mark.parametrize("prefix", ["durable.", "durable.errors."])
def test_durable_class_names_rebuild_durable_errors(prefix: str) -> None:
    assert isinstance(Failure("x", "m", prefix + "NonDeterminismDetected").to_error(),
                      NonDeterminismDetected)
    err = Failure("x", "gone", prefix + "StorageUnavailable").to_error()
    assert isinstance(err, StorageUnavailable) and str(err) == "gone"
    timed_out = Failure("timeout", "t", prefix + "ActivityTimedOut",
                        details={"timeout_kind": "heartbeat"}).to_error()
    assert isinstance(timed_out, ActivityTimedOut) and timed_out.timeout_kind == "heartbeat"


def test_an_unknown_class_comes_back_as_application_error_with_its_name() -> None:
    for name in ("myapp.errors.OutOfStock", "durable.NoSuchError", None):
        err = Failure("application", "none left", name,
                      details={"cause_type": "OutOfStock"}).to_error()
        assert isinstance(err, ApplicationError)
        assert (err.type, str(err)) == ("OutOfStock", "OutOfStock: none left")
        assert err.failure["message"] == "none left"


def test_errors_whose_constructor_is_not_a_message_are_rebuilt_with_their_fields() -> None:
    started = Failure.from_exception(WorkflowAlreadyStarted("dup-7", "run-1")).to_error()
    assert isinstance(started, WorkflowAlreadyStarted)
    assert (started.workflow_id, started.run_id) == ("dup-7", "run-1")
    assert str(started) == str(WorkflowAlreadyStarted("dup-7", "run-1"))
    limit = Failure.from_exception(StructuralLimitExceeded("memo_bytes", 9, 5, "hint")).to_error()
    assert isinstance(limit, StructuralLimitExceeded)
    assert (limit.kind, limit.value, limit.limit) == ("memo_bytes", 9, 5)
    assert str(limit).endswith("; hint")
    broken = Failure("structural_limit", "m", "durable.StructuralLimitExceeded").to_error()
    assert isinstance(broken, ApplicationError)  # fields missing: still an error to catch
    assert broken.type == "StructuralLimitExceeded"


def test_an_activity_failure_raises_the_typed_error_with_the_app_error_below() -> None:
    err = APP.to_activity_error()
    assert chain(err) == [ActivityFailed, ApplicationError]
    assert (err.cause_type, err.cause_message) == ("PaymentDeclined", "card declined")
    cause = err.__cause__
    assert isinstance(cause, ApplicationError)
    assert (cause.type, str(cause)) == ("PaymentDeclined", "PaymentDeclined: card declined")
    assert err.failure == APP.to_dict()


@pytest.mark.parametrize(("failure", "kind"), [
    (Failure.activity_timeout("start_to_close", 5.0, "ship", 1), ActivityTimedOut),
    (Failure.local_timeout("start_to_close", "ship", 1), ActivityTimedOut),
    (Failure.activity_cancelled("stopped"), ActivityCancelled),
    (Failure.worker_lost("ship", 1, None), WorkerLost),
])
def test_activity_outcomes_raise_their_own_class_with_nothing_below(
    failure: Failure, kind: type[ActivityFailed]
) -> None:
    err = failure.to_activity_error()
    assert chain(err) == [kind]
    assert err.failure == failure.to_dict()


def test_a_child_failure_chains_the_childs_terminal_error() -> None:
    failed = Failure.child_failed("kid", "failed", APP).to_child_error()
    assert chain(failed) == [ChildWorkflowFailed, WorkflowFailed, ApplicationError]
    timed_out = Failure.child_failed(
        "kid", "timed_out", Failure.workflow_timeout("run_timeout", 9.0, "kid")).to_child_error()
    assert chain(timed_out) == [ChildWorkflowFailed, WorkflowTimedOut]
    assert isinstance(timed_out.__cause__, WorkflowTimedOut)
    assert timed_out.__cause__.timeout_kind == "run_timeout"
    terminated = Failure.child_failed(
        "kid", "terminated", Failure.closed_by_request("terminated", "r")).to_child_error()
    assert chain(terminated) == [ChildWorkflowFailed, WorkflowTerminated]
    started = Failure.child_start("kid").to_child_error()
    assert isinstance(started, WorkflowAlreadyStarted) and started.workflow_id == "kid"
    # a child's refusal has no run id to show, and names the fix that applies
    # to a child (its id), not StartOptions; kept through a recorded failure
    assert "(run None)" not in str(started) and "start_child(..., id=...)" in str(started)
    raised_again = Failure.from_exception(WorkflowAlreadyStarted("kid", child=True)).to_error()
    assert str(raised_again) == str(WorkflowAlreadyStarted("kid", child=True))
    assert str(WorkflowAlreadyStarted("dup", "r-1")).startswith(
        "workflow id 'dup' is already in use (run r-1); pick another id")


def _workflow_raised(exc: BaseException) -> WorkflowFailed:
    """What handle.result() raises for a workflow whose code raised `exc`."""
    stored = json.loads(json.dumps(Failure.from_exception(raised(exc)).to_dict()))
    err = Failure.from_dict(stored).to_workflow_error("failed")
    assert isinstance(err, WorkflowFailed)
    assert err.failure == stored
    return err


def test_workflow_failed_is_caused_by_the_activity_error_and_the_app_error() -> None:
    err = _workflow_raised(APP.to_activity_error())
    assert chain(err) == [WorkflowFailed, ActivityFailed, ApplicationError]
    app = err.__cause__.__cause__ if err.__cause__ else None
    assert isinstance(app, ApplicationError) and app.type == "PaymentDeclined"


def test_workflow_failed_is_caused_by_the_timeout_with_its_kind() -> None:
    timeout = Failure.activity_timeout("schedule_to_close", 5.0, "ship", 2)
    err = _workflow_raised(timeout.to_activity_error())
    assert chain(err) == [WorkflowFailed, ActivityTimedOut]
    cause = err.__cause__
    assert isinstance(cause, ActivityTimedOut) and cause.timeout_kind == "schedule_to_close"


def test_workflow_failed_is_caused_by_the_child_error_and_the_childs_error() -> None:
    err = _workflow_raised(Failure.child_failed("kid", "failed", APP).to_child_error())
    assert chain(err) == [WorkflowFailed, ChildWorkflowFailed, WorkflowFailed, ApplicationError]


def test_workflow_failed_by_an_app_error_is_caused_by_it() -> None:
    err = _workflow_raised(ValueError("bad state"))
    assert chain(err) == [WorkflowFailed, ApplicationError]
    assert str(err) == "bad state"


@pytest.mark.parametrize(("failure", "status", "kind"), [
    (Failure.workflow_timeout("run_timeout", 1.0, "w"), "timed_out", WorkflowTimedOut),
    (Failure.cleanup_expired(1.0, "w"), "cancelled", WorkflowCancelled),
    (Failure.closed_by_request("cancelled", "r"), "cancelled", WorkflowCancelled),
    (Failure.closed_by_request("terminated", "r"), "terminated", WorkflowTerminated),
    (Failure.cancelled_workflow("r", "q", "q"), "cancelled", WorkflowCancelled),
    (Failure("timed_out"), "timed_out", WorkflowTimedOut),
    (Failure(None, "no category"), "terminated", WorkflowTerminated),
])
def test_closed_runs_raise_the_error_of_their_status_with_nothing_below(
    failure: Failure, status: str, kind: type[BaseException]
) -> None:
    err = failure.to_workflow_error(status)
    assert chain(err) == [kind]


def test_exception_from_failure_reads_a_stored_dict() -> None:
    data: dict[str, Any] = APP.to_activity_error().failure
    err = exception_from_failure(data)
    assert isinstance(err, ApplicationError) and err.type == "PaymentDeclined"


@pytest.mark.anyio
async def test_what_code_raises_that_is_not_an_exception_fails_it_unless_it_must_go_on(
) -> None:
    """`continue_as_new()` raises a BaseException of the engine's own: it is
    not a failure, in a handler either; nor a cancellation or a Ctrl-C (the
    host's cancellation: tests/test_exotic_raises.py). A `GeneratorExit` that
    reaches here was raised by the code (no loop closes a running task's
    coroutine): it fails, as `SystemExit` does."""
    from durable.errors import ContinueAsNew, RaisedNotAnException
    from durable.failure import code_error, not_an_exception

    class Halt(BaseException):
        pass

    error = not_an_exception(Halt("stop"), "activity 'a'")
    assert isinstance(error, RaisedNotAnException)
    assert str(error).startswith("activity 'a' raised Halt (stop), a BaseException that is not")
    assert isinstance(error.__cause__, Halt)
    assert isinstance(not_an_exception(BaseExceptionGroup("g", [SystemExit(2)]), "x"),
                      RaisedNotAnException)
    for going_on in (ContinueAsNew(()), KeyboardInterrupt(),
                     BaseExceptionGroup("g", [ContinueAsNew(())])):
        assert not_an_exception(going_on, "x") is None
    with pytest.raises(KeyboardInterrupt):
        code_error(KeyboardInterrupt(), "x")
    assert isinstance(not_an_exception(GeneratorExit(), "x"), RaisedNotAnException)
    assert isinstance(code_error(GeneratorExit(), "x"), RaisedNotAnException)
    assert "only the workflow's run may" in str(code_error(ContinueAsNew(()), "x"))


def test_a_huge_message_is_recorded_cut_saying_how_long_it_was() -> None:
    """An exception carrying 5 MiB of message wrote 10 MiB events (message and
    cause_message) and 20 MiB once wrapped in its run's failure: the record
    keeps MAX_MESSAGE characters and says how many there were."""
    huge = "x" * (5 * 1024 * 1024)
    failure = Failure.from_exception(ValueError(huge))
    assert failure.message.startswith("x" * 1000)
    assert failure.message.endswith(f"... [message cut: {len(huge):,} characters in all]")
    assert len(failure.message) < MAX_MESSAGE + 100
    assert failure.details["cause_message"] == failure.message
    assert len(json.dumps(failure.to_dict())) < 3 * MAX_MESSAGE + 20_000  # + the traceback
    short = Failure.from_exception(ValueError("no stock"))
    assert short.message == "no stock"
    app = Failure.from_exception(ApplicationError(huge, type="Big"))
    assert app.message.endswith("characters in all]") and len(app.message) < MAX_MESSAGE + 100
