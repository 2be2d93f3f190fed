"""A run's history as two runs of the same workflow can be compared.

Tests that run one workflow two ways (the synchronous and the supervised
activity lane, `tests/test_local_lane.py`; a step's commit on the loop's
thread and through the SQLite database thread, `tests/test_sqlite_inline.py`)
assert the two histories are the same: each event's type and data, without
what differs between any two runs (times, ids, workers, epochs, tracebacks)
and with the test's own key replaced.
"""

from __future__ import annotations

import re
from typing import Any

import durable

_VOLATILE = {"at", "started_at", "closed_at", "recorded_at", "scheduled_at", "deadline_at",
             "delivered_at", "requested_at", "created_at", "fire_at", "run_id", "workflow_id",
             "worker_id", "origin", "traceback", "stack", "epoch", "owner"}
_ID = re.compile(r"[0-9a-f]{32}")


def scrub(value: Any, key: str) -> Any:
    """`value` without what differs between two runs; `key` reads "KEY"."""
    if isinstance(value, dict):
        return {k: scrub(v, key) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [scrub(v, key) for v in value]
    if isinstance(value, str):
        return _ID.sub("ID", value.replace(key, "KEY"))
    return value


async def comparable_history(handle: durable.WorkflowHandle, key: str
                             ) -> list[tuple[str, Any]]:
    """The run's events, each as (type, scrubbed data)."""
    return [(e.type, scrub(e.data, key)) for e in await handle.history()]
