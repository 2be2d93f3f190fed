"""durable: embedded, asyncio- and trio-native durable workflows.

Workflows are plain ``async def`` coroutines, activities plain functions; their
progress is recorded in a storage driver (SQLite by default, PostgreSQL to
scale out) so that crashes, restarts and moves between workers resume work
where it stopped. This module is the public face; the engine is private.
"""

from __future__ import annotations

from . import activity, workflow
from ._activities import ActivityInfo
from .budget import Budget
from .cancellation import CancellationContext, CancellationRequestResult
from .client import Client, WorkflowHandle, connect
from .clock import Clock, SystemClock, VirtualClock
from .converter import JSONConverter, PayloadConverter
from .driver import Driver, HistoryEvent
from .errors import (
    ActivityCancelled,
    ActivityFailed,
    ActivityStopRequested,
    ActivityTimedOut,
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
    RunAlreadyClosed,
    RunNotCurrent,
    StorageUnavailable,
    StructuralLimitExceeded,
    WorkflowAlreadyStarted,
    WorkflowAPIOutsideWorkflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
    WorkflowTerminated,
    WorkflowTimedOut,
)
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
from .subprocess import StopReceipt
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "ActivityCancelled",
    "ActivityFailed",
    "ActivityInfo",
    "ActivityOptions",
    "ActivityStopRequested",
    "ActivityTimedOut",
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
    "Driver",
    "DurableError",
    "HistoryEvent",
    "IdReusePolicy",
    "JSONConverter",
    "Limits",
    "NonDeterminismError",
    "NotRegistered",
    "ParentClosePolicy",
    "PayloadConverter",
    "PayloadError",
    "PhaseTimedOut",
    "PolicyRejected",
    "RetryPolicy",
    "RunAlreadyClosed",
    "RunNotCurrent",
    "StartOptions",
    "StopReceipt",
    "StorageUnavailable",
    "StructuralLimitExceeded",
    "SystemClock",
    "VirtualClock",
    "Worker",
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
    "workflow",
]
