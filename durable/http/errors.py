"""Errors on the wire: one table from `durable` error classes to HTTP status and code.

The server turns an exception into ``{"error": {"code", "message", ...}}`` with
the status of this table; the remote client turns the code back into the
same class, so code written against an embedded client catches the same
errors from a remote one. Nothing here imports a web framework: the remote
client (httpx only) uses it too.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    CapabilityUnsupported,
    ConfigurationError,
    DurableError,
    FailureCarrying,
    NameNotRegistered,
    PayloadRejected,
    PolicyRejected,
    QueryFailed,
    RunAlreadyClosed,
    RunNotCurrent,
    ScheduleAlreadyExists,
    ScheduleNotFound,
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
    does not have); `status` and `code` are the server's."""

    def __init__(self, message: str, *, status: int, code: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details: dict[str, Any] = dict(details or {})


class AuthenticationFailed(ControlPlaneError):
    """No token, or a token the server does not know (HTTP 401)."""


class PermissionDenied(ControlPlaneError):
    """The token's role may not do this (HTTP 403): a viewer asked for a write."""


# Most specific first: the first class an exception is an instance of decides.
ERROR_TABLE: tuple[tuple[type[DurableError], int, str], ...] = (
    (WorkflowAlreadyStarted, 409, "already_started"),
    (WorkflowNotFound, 404, "not_found"),
    (ScheduleNotFound, 404, "schedule_not_found"),
    (ScheduleAlreadyExists, 409, "schedule_already_exists"),
    (RunNotCurrent, 409, "run_not_current"),
    (RunAlreadyClosed, 409, "run_already_closed"),
    (CapabilityUnsupported, 409, "capability_unsupported"),
    (StructuralLimitExceeded, 413, "structural_limit_exceeded"),
    (NameNotRegistered, 400, "not_registered"),
    (PolicyRejected, 400, "policy_rejected"),
    (PayloadRejected, 400, "payload_error"),
    (ConfigurationError, 400, "invalid_argument"),
    (StorageUnavailable, 503, "storage_unavailable"),
    (QueryFailed, 422, "query_failed"),
    (UpdateRejected, 422, "update_rejected"),
    (UpdateFailed, 409, "update_failed"),
)
# Errors that carry a failure dictionary, rebuilt with it (and its cause).
_CARRYING: dict[str, type[FailureCarrying]] = {
    "query_failed": QueryFailed, "update_rejected": UpdateRejected,
    "update_failed": UpdateFailed,
}

def classify(exc: BaseException) -> tuple[int, str, dict[str, Any]] | None:
    """(status, code, extra fields) for a durable error, or None for anything else."""
    for cls, status, code in ERROR_TABLE:
        if isinstance(exc, cls):
            return status, code, _details(exc)
    return None


def _details(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, WorkflowAlreadyStarted):
        return {"workflow_id": exc.workflow_id, "run_id": exc.run_id}
    if isinstance(exc, ScheduleAlreadyExists):
        return {"schedule_id": exc.schedule_id}
    if isinstance(exc, StructuralLimitExceeded):
        return {"kind": exc.kind, "value": exc.value, "limit": exc.limit}
    if isinstance(exc, StorageUnavailable):
        return {"outcome_unknown": exc.outcome_unknown}
    if isinstance(exc, FailureCarrying):
        return {"failure": exc.failure}
    return {}


def error_from_wire(status: int, body: Any) -> DurableError:
    """The `durable` error a JSON error response stands for."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ControlPlaneError(f"HTTP {status} without a JSON error body", status=status,
                                 code="unknown")
    code = str(error.get("code", "unknown"))
    message = str(error.get("message", f"HTTP {status}"))
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    exc: DurableError
    if code == "already_started":
        exc = WorkflowAlreadyStarted(str(error.get("workflow_id")), error.get("run_id"))
    elif code == "structural_limit_exceeded":
        exc = StructuralLimitExceeded(str(error.get("kind")), int(error.get("value") or 0),
                                      int(error.get("limit") or 0))
    elif code == "payload_too_large":
        exc = StructuralLimitExceeded("request_body_bytes", int(error.get("value") or 0),
                                      int(error.get("limit") or 0))
    elif code == "schedule_already_exists":
        exc = ScheduleAlreadyExists(str(error.get("schedule_id")), str(error.get("namespace")))
    elif code == "storage_unavailable":
        exc = StorageUnavailable(message, outcome_unknown=bool(error.get("outcome_unknown")))
    elif code in _CARRYING:
        failure = error.get("failure") if isinstance(error.get("failure"), dict) else {}
        exc = _CARRYING[code](message, failure)
        if failure:
            exc.__cause__ = Failure.from_dict(failure).to_error()
    elif code in ("unauthenticated",):
        exc = AuthenticationFailed(message, status=status, code=code, details=details)
    elif code == "forbidden":
        exc = PermissionDenied(message, status=status, code=code, details=details)
    else:
        simple: dict[str, type[DurableError]] = {
            "not_found": WorkflowNotFound, "run_not_current": RunNotCurrent,
            "run_already_closed": RunAlreadyClosed,
            "capability_unsupported": CapabilityUnsupported, "not_registered": NameNotRegistered,
            "policy_rejected": PolicyRejected, "payload_error": PayloadRejected,
            "invalid_argument": ConfigurationError, "invalid_body": ConfigurationError,
            "invalid_parameter": ConfigurationError, "invalid_json": ConfigurationError,
            "schedule_not_found": ScheduleNotFound,
        }
        cls = simple.get(code)
        if cls is None:
            return ControlPlaneError(message, status=status, code=code, details=details)
        exc = cls(message)
    exc.args = (message,)  # the server's words, not a message rebuilt here
    return exc
