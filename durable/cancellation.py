"""The public shape of a cooperative cancellation request.

`CancellationContext` is immutable and identical on every replay: it is built
from the stored request, never from the host clock, so cleanup code that reads
``workflow.cancellation().deadline`` makes the same decisions after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .clock import to_datetime


@dataclass(frozen=True)
class CancellationContext:
    """Who asked to cancel what, why, and by when cleanup must be done."""

    request_id: str
    root_request_id: str
    parent_request_id: str | None
    reason: str
    requester: dict[str, Any]
    source: str
    requested_at: datetime
    deadline: datetime
    lineage: tuple[tuple[str | None, str, str], ...]
    root_workflow_id: str | None = None
    root_run_id: str | None = None

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> CancellationContext:
        requested = to_datetime(float(data["requested_at"]))
        deadline = to_datetime(float(data["deadline_at"]))
        assert requested is not None and deadline is not None
        return cls(
            request_id=data["request_id"],
            root_request_id=data["root_request_id"],
            parent_request_id=data.get("parent_request_id"),
            reason=data["reason"],
            requester=dict(data.get("requester") or {}),
            source=data["source"],
            requested_at=requested,
            deadline=deadline,
            lineage=tuple(
                (item[0], str(item[1]), str(item[2])) for item in data.get("lineage", [])
            ),
            root_workflow_id=data.get("root_workflow_id"),
            root_run_id=data.get("root_run_id"),
        )


@dataclass(frozen=True)
class CancellationRequestResult:
    """What `request_cancellation` returns: accepted the first time only."""

    accepted: bool
    context: CancellationContext
