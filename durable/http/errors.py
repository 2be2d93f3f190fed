"""Errors on the wire: one table from `durable` error classes to HTTP status and reason.

The server answers a refusal with the reference engine's flat error body,
``{"message": ..., "reason": ..., <details>}`` (a body that does not fit a
route's schema: 422 ``{"message", "reason": "validation_failed", "errors":
{field: [messages]}}``), with the status of this table; the reasons are the
reference engine's where it has one (``instance_not_found``,
``instance_already_started``, ``run_not_active``, ``update_rejected``,
``query_rejected``, ...), so its own client maps them to its own errors. Our
remote client turns the reason back into the same `durable` class, so code
written against an embedded client catches the same errors from a remote
one. Nothing here imports a web framework: the remote client (httpx only)
uses it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import (
    CapabilityUnsupported,
    ConfigurationError,
    DurableError,
    FailureCarrying,
    InvalidScheduleQuery,
    InvalidVisibilityQuery,
    NameNotRegistered,
    PayloadRejected,
    PolicyRejected,
    QueryFailed,
    RequestIdConflict,
    RunAlreadyClosed,
    RunNotCurrent,
    ScheduleAlreadyExists,
    ScheduleNotFound,
    StaleCursor,
    StorageUnavailable,
    StructuralLimitExceeded,
    UpdateFailed,
    UpdateRejected,
    WorkflowAlreadyStarted,
    WorkflowNotFound,
)
from ..failure import Failure

# The header every /api route requires, and the only version this server speaks.
VERSION_HEADER = "X-Durable-Workflow-Control-Plane-Version"
VERSION = "2"


class ControlPlaneError(DurableError):
    """An HTTP control plane refused a request for a reason no other `durable`
    error names (authentication, authorisation, protocol version, a route it
    does not have); `status` and `code` (the body's ``reason``) are the server's."""

    def __init__(self, message: str, *, status: int, code: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details: dict[str, Any] = dict(details or {})

    @property
    def reason(self) -> str:
        """The reference engine's name for `code`."""
        return self.code


class NamespaceNotFound(WorkflowNotFound):
    """No namespace of that name holds anything (HTTP 404 namespace_not_found)."""


class AuthenticationFailed(ControlPlaneError):
    """No token, or a token the server does not know (HTTP 401)."""


class PermissionDenied(ControlPlaneError):
    """The token's role may not do this (HTTP 403): a viewer asked for a write."""


# Most specific first: the first class an exception is an instance of decides.
ERROR_TABLE: tuple[tuple[type[DurableError], int, str], ...] = (
    (WorkflowAlreadyStarted, 409, "instance_already_started"),
    (NamespaceNotFound, 404, "namespace_not_found"),
    (WorkflowNotFound, 404, "instance_not_found"),
    (ScheduleNotFound, 404, "schedule_not_found"),
    (ScheduleAlreadyExists, 409, "schedule_already_exists"),
    (RunNotCurrent, 409, "run_not_current"),
    (RunAlreadyClosed, 409, "run_not_active"),
    (CapabilityUnsupported, 409, "capability_unsupported"),
    (StructuralLimitExceeded, 413, "structural_limit_exceeded"),
    (RequestIdConflict, 409, "request_id_conflict"),
    (NameNotRegistered, 400, "not_registered"),
    (PolicyRejected, 400, "policy_rejected"),
    (PayloadRejected, 400, "payload_error"),
    (ConfigurationError, 400, "invalid_argument"),
    (StorageUnavailable, 503, "storage_unavailable"),
    (QueryFailed, 409, "query_rejected"),
    (UpdateRejected, 409, "update_rejected"),
    # the reference's client reads a 422 whose update_status is "failed" as its UpdateFailed
    (UpdateFailed, 422, "update_failed"),
)
# Errors that carry a failure dictionary, rebuilt with it (and its cause).
_CARRYING: dict[str, type[FailureCarrying]] = {
    "query_rejected": QueryFailed, "query_worker_timeout": QueryFailed,
    "query_not_found": QueryFailed, "update_rejected": UpdateRejected,
    "update_failed": UpdateFailed,
}
# Our earlier reasons, still understood from an older server.
_SIMPLE: dict[str, type[DurableError]] = {
    "instance_not_found": WorkflowNotFound, "workflow_not_found": WorkflowNotFound,
    "run_not_found": WorkflowNotFound, "namespace_not_found": NamespaceNotFound,
    "run_not_current": RunNotCurrent, "run_not_active": RunAlreadyClosed,
    "capability_unsupported": CapabilityUnsupported, "not_registered": NameNotRegistered,
    "policy_rejected": PolicyRejected, "payload_error": PayloadRejected,
    "invalid_argument": ConfigurationError, "validation_failed": ConfigurationError,
    "invalid_parameter": ConfigurationError, "invalid_json": ConfigurationError,
    "invalid_payload_framing": ConfigurationError, "schedule_not_found": ScheduleNotFound,
    # the reference's own refusals of schedule input (a list's page token used
    # in another namespace is a 403 that is no role's refusal)
    "malformed_schedule_page_token": ConfigurationError,
    "schedule_page_token_namespace_mismatch": ConfigurationError,
    "schedule_page_token_filter_mismatch": ConfigurationError,
    "stale_schedule_page_token": StaleCursor,
    "unsupported_schedule_list_filter": ConfigurationError,
    "invalid_cron_expression": ConfigurationError, "invalid_schedule_spec": ConfigurationError,
    "invalid_time_range": ConfigurationError, "invalid_after_sequence": ConfigurationError,
}

#: the reference's refusals of a schedule list's ``query`` (`durable._visibility_query`)
SCHEDULE_QUERY_REASONS = frozenset({
    "invalid_schedule_visibility_query", "unsupported_schedule_visibility_field",
    "unsupported_schedule_visibility_predicate"})
#: a workflow list's (`durable._visibility_query.WORKFLOWS`)
WORKFLOW_QUERY_REASONS = frozenset({
    "invalid_workflow_visibility_query", "unsupported_workflow_visibility_field",
    "unsupported_workflow_visibility_predicate"})


def classify(exc: BaseException) -> tuple[int, str, dict[str, Any]] | None:
    """(status, reason, extra fields) for a durable error, or None for anything else."""
    for cls, status, reason in ERROR_TABLE:
        if isinstance(exc, cls):
            details = _details(exc)
            if isinstance(exc, QueryFailed) and exc.failure.get("timeout_kind") == "query_wait":
                return 504, "query_worker_timeout", details
            if isinstance(exc, UpdateFailed):
                details.update(update_status="failed", failure_message=str(exc))
            return status, reason, details
    return None


def _details(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, WorkflowAlreadyStarted):
        return {"workflow_id": exc.workflow_id, "run_id": exc.run_id,
                # an extension (the reference's client ignores it): the advice
                # the remote client's error gives depends on it
                "instance_status": exc.status}
    if isinstance(exc, ScheduleAlreadyExists):
        return {"schedule_id": exc.schedule_id, "namespace": exc.namespace}
    if isinstance(exc, StructuralLimitExceeded):
        return {"kind": exc.kind, "value": exc.value, "limit": exc.limit}
    if isinstance(exc, RequestIdConflict):
        # the reference's fields for a key retained with another intent (its
        # client's SignalFailed/UpdateFailed `.details`)
        return {"request_id": exc.request_id, "retained_command_type": exc.retained_command_type,
                "conflict": {"name": exc.retained_name}}
    if isinstance(exc, StorageUnavailable):
        return {"outcome_unknown": exc.outcome_unknown}
    if isinstance(exc, FailureCarrying):
        return {"failure": exc.failure}
    return {}


def error_from_wire(status: int, body: Any) -> DurableError:
    """The `durable` error a flat JSON error body (``{message, reason, ...}``) stands for."""
    if not isinstance(body, dict) or not isinstance(body.get("message"), str):
        return ControlPlaneError(f"HTTP {status} without a JSON error body", status=status,
                                 code="unknown")
    message = str(body["message"])
    code = str(body.get("reason") or ("validation_failed" if status == 422 else "unknown"))
    details = {k: v for k, v in body.items() if k not in ("reason", "message")}
    exc: DurableError
    if code in ("instance_already_started", "duplicate_not_allowed"):
        status_of = body.get("instance_status")
        exc = WorkflowAlreadyStarted(str(body.get("workflow_id")), body.get("run_id"),
                                     status=status_of if isinstance(status_of, str) else None)
    elif code == "structural_limit_exceeded":
        exc = StructuralLimitExceeded(str(body.get("kind")), int(body.get("value") or 0),
                                      int(body.get("limit") or 0))
    elif code == "payload_too_large":
        exc = StructuralLimitExceeded("request_body_bytes", int(body.get("value") or 0),
                                      int(body.get("limit") or 0))
    elif code == "schedule_already_exists":
        exc = ScheduleAlreadyExists(str(body.get("schedule_id")), str(body.get("namespace")))
    elif code == "request_id_conflict":
        conflict = body.get("conflict")
        kind = body.get("retained_command_type")
        name = conflict.get("name") if isinstance(conflict, dict) else None
        exc = RequestIdConflict(message, request_id=str(body.get("request_id")),
                                retained_command_type=kind if isinstance(kind, str) else None,
                                retained_name=name if isinstance(name, str) else None)
    elif code == "storage_unavailable":
        exc = StorageUnavailable(message, outcome_unknown=bool(body.get("outcome_unknown")))
    elif code in SCHEDULE_QUERY_REASONS:
        exc = InvalidScheduleQuery(message, reason=code)
    elif code in WORKFLOW_QUERY_REASONS:
        exc = InvalidVisibilityQuery(message, reason=code)
    elif code in _CARRYING:
        failure = body.get("failure") if isinstance(body.get("failure"), dict) else {}
        exc = _CARRYING[code](message, failure)
        if failure:
            exc.__cause__ = Failure.from_dict(failure).to_error()
    elif status == 401 or code == "too_many_failed_authentications":
        exc = AuthenticationFailed(message, status=status, code=code, details=details)
    elif status == 403 and code not in _SIMPLE:
        exc = PermissionDenied(message, status=status, code=code, details=details)
    else:
        cls = _SIMPLE.get(code)
        if cls is None:
            return ControlPlaneError(message, status=status, code=code, details=details)
        exc = cls(message)
    exc.args = (message,)  # the server's words, not a message rebuilt here
    return exc


class HTTPError(Exception):
    """A refusal with a status, a code and a message (becomes a JSON error)."""

    def __init__(self, status: int, code: str, message: str, /, *,
                 headers: Mapping[str, str] | None = None, **extra: Any) -> None:
        # (positional-only: a body may carry a `status` or a `message` field
        # of its own, e.g. the run's status beside a refused close)
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.extra = extra


def error_body(code: str, message: str, /, **extra: Any) -> dict[str, Any]:
    """The reference engine's flat error body: ``{message, reason, ...}``; a
    body that did not fit its schema (422) also names the field in ``errors``
    (``{field: [messages]}``, Laravel's validation shape)."""
    body: dict[str, Any] = {"message": message, "reason": code, **extra}
    if code == "validation_failed" and "errors" not in body:
        body["errors"] = {str(extra.get("field") or "body"): [message]}
    return body
