"""The worker registry: which workers are alive and what they can run.

Clients use it to accept a workflow or activity by name that no code in their
own process defines; the cascade uses it to tell a stopping attempt from one
whose worker is gone.
"""

from __future__ import annotations

import json

from ..driver import Program, ex, q
from .records import WorkerRegistration


def register_worker(reg: WorkerRegistration, ttl: float, now: float) -> Program[None]:
    """Record (or refresh) a live worker until `now + ttl`."""
    yield ex("DELETE FROM workers WHERE worker_id = ?", reg.worker_id)
    yield ex(
        "INSERT INTO workers (worker_id, namespace, task_queue, workflow_types, activity_names, "
        "capabilities, heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        reg.worker_id, reg.namespace, reg.task_queue, json.dumps(list(reg.workflow_types)),
        json.dumps(list(reg.activity_names)), json.dumps(list(reg.capabilities)), now, now + ttl,
    )
    yield ex("DELETE FROM workers WHERE expires_at < ?", now - 3600)
    return None


def deregister_worker(worker_id: str) -> Program[None]:
    """Forget a worker that stopped."""
    yield ex("DELETE FROM workers WHERE worker_id = ?", worker_id)
    return None


def registered_names(namespace: str, now: float) -> Program[tuple[set[str], set[str]]]:
    """Workflow types and activity names that live workers have registered."""
    rows = yield q(
        "SELECT workflow_types, activity_names FROM workers WHERE namespace = ? "
        "AND expires_at >= ?",
        namespace, now,
    )
    types: set[str] = set()
    names: set[str] = set()
    for r in rows:
        types.update(json.loads(r["workflow_types"]))
        names.update(json.loads(r["activity_names"]))
    return types, names
