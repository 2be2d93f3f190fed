"""durable: embedded, asyncio- and trio-native durable workflows.

Workflows are plain ``async def`` coroutines, activities plain functions; their
progress is recorded in a storage driver (SQLite by default, PostgreSQL to
scale out) so that crashes, restarts and moves between workers resume work
where it stopped. This module is the public face; the engine is private.
"""

from __future__ import annotations

from . import activity, workflow
from ._runtime.attempts import ActivityInfo
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
    CapabilityUnsupported,
    ChildWorkflowFailed,
    ConfigurationError,
    DurableError,
    NonDeterminismError,
    NotRegistered,
    PayloadError,
    PolicyRejected,
    QueryFailed,
    RunAlreadyClosed,
    RunNotCurrent,
    StorageUnavailable,
    StructuralLimitExceeded,
    UpdateFailed,
    UpdateRejected,
    WorkerLost,
    WorkflowAlreadyStarted,
    WorkflowAPIOutsideWorkflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
    WorkflowTerminated,
    WorkflowTimedOut,
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
from .store.records import HistoryEvent, RunStatus
from .worker import Worker

__version__ = "0.1.0"

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
    "Page",
    "ParentClosePolicy",
    "PayloadConverter",
    "PayloadError",
    "PolicyRejected",
    "QueryFailed",
    "RetryPolicy",
    "RunAlreadyClosed",
    "RunNotCurrent",
    "RunStatus",
    "StartOptions",
    "StorageUnavailable",
    "StructuralLimitExceeded",
    "SystemClock",
    "UpdateFailed",
    "UpdateRejected",
    "VirtualClock",
    "Worker",
    "WorkerLost",
    "WorkflowAPIOutsideWorkflow",
    "WorkflowAlreadyStarted",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowNotFound",
    "WorkflowTerminated",
    "WorkflowTimedOut",
    "activity",
    "connect",
    "register_driver",
    "workflow",
]
