"""durable: embedded, asyncio- and trio-native durable workflows.

Workflows are plain ``async def`` coroutines, activities plain functions; their
progress is recorded in a storage driver (SQLite by default, PostgreSQL to
scale out) so that crashes, restarts and moves between workers resume work
where it stopped. This module is the public face of an application's code;
the engine is private. Seams for other audiences have faces of their own:
`durable.driver` (writing a storage driver: `Driver`, `Dialect`,
`register_driver`, programs and wake-ups), `durable.control` (the control
plane a client talks to: `ControlPlane`, `Page`), `durable.testing`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from . import activity, errors, observe, workflow
from . import subprocess as subprocess  # `durable.subprocess.run` after `import durable`
from ._log import redact_fields
from ._queues import QueueLimits, Rate
from .budget import Budget
from .cancellation import CancellationContext, CancellationRequestResult
from .client import Client, WorkflowHandle, connect
from .clock import Clock, SystemClock, VirtualClock
from .converter import JSONConverter, PayloadConverter
from .deadlines import Deadlines
from .errors import (
    ActivityAPIOutsideActivity,
    ActivityCancelled,
    ActivityFailed,
    ActivityProcessExited,
    ActivityStopRequested,
    ActivityTimedOut,
    ApplicationError,
    BudgetCancelled,
    BudgetExhausted,
    CapabilityUnsupported,
    ChildWorkflowFailed,
    ConfigurationError,
    DurableError,
    InvalidScheduleQuery,
    InvalidVisibilityQuery,
    NameNotRegistered,
    NonDeterminismDetected,
    PayloadRejected,
    PhaseTimedOut,
    PolicyRejected,
    QueryFailed,
    RequestIdConflict,
    RunAlreadyClosed,
    RunNotCurrent,
    ScheduleAlreadyExists,
    ScheduleNotFound,
    StaleCursor,
    StorageClosed,
    StorageUnavailable,
    StructuralLimitExceeded,
    UnitOutcomeUnknown,
    UpdateFailed,
    UpdateRejected,
    WorkerFailed,
    WorkerLost,
    WorkflowAlreadyStarted,
    WorkflowAPIOutsideWorkflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
    WorkflowTerminated,
    WorkflowTimedOut,
    WriteRejected,
)
from .failure import Failure
from .options import (
    ActivityOptions,
    CancellationPolicy,
    ChildOptions,
    IdReusePolicy,
    Limits,
    ParentClosePolicy,
    RetryPolicy,
    StartOptions,
)
from .receipts import StopReceipt
from .schedules import Overlap, ScheduleHandle, ScheduleSpec
from .store.records import HistoryEvent, RunStatus
from .worker import Worker

__version__ = "0.3.0"

__all__ = [
    "ActivityAPIOutsideActivity",
    "ActivityCancelled",
    "ActivityFailed",
    "ActivityOptions",
    "ActivityProcessExited",
    "ActivityStopRequested",
    "ActivityTimedOut",
    "ApplicationError",
    "Budget",
    "BudgetCancelled",
    "BudgetExhausted",
    "CancellationContext",
    "CancellationPolicy",
    "CancellationRequestResult",
    "CapabilityUnsupported",
    "ChildOptions",
    "ChildWorkflowFailed",
    "Client",
    "Clock",
    "ConfigurationError",
    "Deadlines",
    "DurableError",
    "Failure",
    "HistoryEvent",
    "IdReusePolicy",
    "InvalidScheduleQuery",
    "InvalidVisibilityQuery",
    "JSONConverter",
    "Limits",
    "NameNotRegistered",
    "NonDeterminismDetected",
    "Overlap",
    "ParentClosePolicy",
    "PayloadConverter",
    "PayloadRejected",
    "PhaseTimedOut",
    "PolicyRejected",
    "QueryFailed",
    "QueueLimits",
    "Rate",
    "RequestIdConflict",
    "RetryPolicy",
    "RunAlreadyClosed",
    "RunNotCurrent",
    "RunStatus",
    "ScheduleAlreadyExists",
    "ScheduleHandle",
    "ScheduleNotFound",
    "ScheduleSpec",
    "StaleCursor",
    "StartOptions",
    "StopReceipt",
    "StorageClosed",
    "StorageUnavailable",
    "StructuralLimitExceeded",
    "SystemClock",
    "UnitOutcomeUnknown",
    "UpdateFailed",
    "UpdateRejected",
    "VirtualClock",
    "Worker",
    "WorkerFailed",
    "WorkerLost",
    "WorkflowAPIOutsideWorkflow",
    "WorkflowAlreadyStarted",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowNotFound",
    "WorkflowTerminated",
    "WorkflowTimedOut",
    "WriteRejected",
    "activity",
    "connect",
    "observe",
    "redact_fields",
    "workflow",
]

#: Names that left this face in 0.3 (still importable, with a `DeprecationWarning`,
#: until 0.4): seam types moved to the face of their audience, errors renamed
#: to the one pattern of `durable.errors`.
_MOVED = {
    "ActivityInfo": "durable.activity",
    "ControlPlane": "durable.control",
    "Page": "durable.control",
    "Dialect": "durable.driver",
    "Driver": "durable.driver",
    "register_driver": "durable.driver",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        home = _MOVED[name]
        warnings.warn(f"durable.{name} is now {home}.{name}; the old name goes in 0.4",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)
    if name in errors.RENAMED:
        new = errors.RENAMED[name]
        warnings.warn(f"durable.{name} is now durable.{new} (error names say what happened, "
                      "subject first); the old name goes in 0.4", DeprecationWarning,
                      stacklevel=2)
        return getattr(errors, new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
