"""durable: embedded, asyncio- and trio-native durable workflows.

Workflows are plain ``async def`` coroutines, activities plain functions; their
progress is recorded in a storage driver (SQLite by default, PostgreSQL to
scale out) so that crashes, restarts and moves between workers resume work
where it stopped. This module is the public face; the engine is private.
"""

from __future__ import annotations

from . import activity, observe, workflow
from ._log import redact_fields
from ._runtime.attempts import ActivityInfo
from .budget import Budget
from .cancellation import CancellationContext, CancellationRequestResult
from .client import Client, WorkflowHandle, connect
from .clock import Clock, SystemClock, VirtualClock
from .control import ControlPlane, Page
from .converter import JSONConverter, PayloadConverter
from .deadlines import Deadlines
from .driver import Dialect, Driver, register_driver
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
    NonDeterminismError,
    NotRegistered,
    PayloadError,
    PhaseTimedOut,
    PolicyRejected,
    QueryFailed,
    RunAlreadyClosed,
    RunNotCurrent,
    ScheduleAlreadyExists,
    ScheduleNotFound,
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
from .schedules import Overlap, ScheduleHandle, ScheduleSpec
from .store.records import HistoryEvent, RunStatus
from .subprocess import StopReceipt
from .worker import Worker

__version__ = "0.3.0"

__all__ = [
    "ActivityAPIOutsideActivity",
    "ActivityCancelled",
    "ActivityFailed",
    "ActivityInfo",
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
    "ControlPlane",
    "Deadlines",
    "Dialect",
    "Driver",
    "DurableError",
    "Failure",
    "HistoryEvent",
    "IdReusePolicy",
    "JSONConverter",
    "Limits",
    "NonDeterminismError",
    "NotRegistered",
    "Overlap",
    "Page",
    "ParentClosePolicy",
    "PayloadConverter",
    "PayloadError",
    "PhaseTimedOut",
    "PolicyRejected",
    "QueryFailed",
    "RetryPolicy",
    "RunAlreadyClosed",
    "RunNotCurrent",
    "RunStatus",
    "ScheduleAlreadyExists",
    "ScheduleHandle",
    "ScheduleNotFound",
    "ScheduleSpec",
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
    "register_driver",
    "workflow",
]
