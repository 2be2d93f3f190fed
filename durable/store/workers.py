"""The worker registry: which workers are alive, what they are and what they run.

Clients use it to accept a workflow or activity by name that no code in their
own process defines; the cascade uses it to tell a stopping attempt from one
whose worker is gone; operators read it (`list_workers`: ``durable workers``,
``/api/workers``) to see who serves a queue. Each worker describes the code
behind every name it registers (module, qualified name, signature and their
fingerprint), so that two live workers serving one name on one queue with
different code are found at registration (`clashes`) instead of by a
workflow that fails three attempts later.

A stopped worker's row stays for an hour, marked gone (`stopped_at`), so an
operator sees it left; a crashed one shows gone once its registration expires.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..clock import to_iso
from ..driver import Program, ex, placeholders, q, q1
from .records import OPEN_SQL, DefinitionClash, WorkerRegistration

#: how long a gone worker stays listed (seconds)
KEEP_GONE = 3600.0

_KINDS = (("workflow", "workflows"), ("activity", "activities"))


def register_worker(reg: WorkerRegistration, ttl: float,
                    now: float) -> Program[list[DefinitionClash]]:
    """Record (or refresh) a live worker until `now + ttl`; the names other live
    workers of its namespace and queue register with a different definition.

    Workers of two different builds are not a clash: that is a rolling deploy,
    and the upgrade gate decides which build takes which run."""
    yield ex("DELETE FROM workers WHERE worker_id = ?", reg.worker_id)
    yield ex(
        "INSERT INTO workers (worker_id, namespace, task_queue, workflow_types, activity_names, "
        "capabilities, heartbeat_at, expires_at, identity, host, pid, build_id, definitions, "
        "started_at, address, loop_blocks, runs_released) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        reg.worker_id, reg.namespace, reg.task_queue, json.dumps(list(reg.workflow_types)),
        json.dumps(list(reg.activity_names)), json.dumps(list(reg.capabilities)), now, now + ttl,
        reg.identity, reg.host, reg.pid, reg.build_id, json.dumps(reg.definitions, sort_keys=True),
        reg.started_at if reg.started_at is not None else now, reg.address,
        None if reg.loop_blocks is None else json.dumps(reg.loop_blocks, sort_keys=True),
        None if reg.runs_released is None else json.dumps(reg.runs_released, sort_keys=True),
    )
    yield ex("DELETE FROM workers WHERE expires_at < ?", now - KEEP_GONE)
    if not reg.definitions:
        return []
    others = yield q(
        "SELECT worker_id, host, build_id, definitions FROM workers WHERE namespace = ? "
        "AND task_queue = ? "
        "AND worker_id <> ? AND expires_at >= ? AND stopped_at IS NULL ORDER BY worker_id",
        reg.namespace, reg.task_queue, reg.worker_id, now)
    found: list[DefinitionClash] = []
    for other in others:
        if reg.build_id is not None and other["build_id"] not in (None, reg.build_id):
            continue  # another build: a deploy in progress
        theirs = _definitions(other["definitions"])
        for kind, plural in _KINDS:
            mine_by_name = reg.definitions.get(plural, {})
            theirs_by_name = theirs.get(plural, {})
            for name in sorted(set(mine_by_name) & set(theirs_by_name)):
                mine, their = mine_by_name[name], theirs_by_name[name]
                if mine.get("fingerprint") != their.get("fingerprint"):
                    found.append(DefinitionClash(kind, name, reg.task_queue, mine,
                                                 other["worker_id"], other["host"], their))
    return found


def deregister_worker(worker_id: str, now: float) -> Program[None]:
    """Mark a worker that stopped as gone (listed for `KEEP_GONE` more seconds)."""
    yield ex("UPDATE workers SET stopped_at = ?, heartbeat_at = ?, expires_at = ? "
             "WHERE worker_id = ?", now, now, now - 1.0, worker_id)
    return None


def forget_worker(namespace: str, worker_id: str, now: float) -> Program[str]:
    """Delete the record of a worker that is no longer alive: ``"deleted"``;
    ``"alive"`` (kept: a live worker writes its record again at its next
    renewal, so deleting it would only hide the worker and the names it
    serves for a while) or ``"missing"``."""
    row = yield q1("SELECT stopped_at, expires_at FROM workers WHERE worker_id = ? "
                   "AND namespace = ?", worker_id, namespace)
    if row is None:
        return "missing"
    if _alive(row, now):
        return "alive"
    yield ex("DELETE FROM workers WHERE worker_id = ? AND namespace = ?", worker_id, namespace)
    return "deleted"


def registered_names(namespace: str, now: float, task_queue: str | None = None,
                     ) -> Program[tuple[set[str], set[str]]]:
    """Workflow types and activity names that live workers have registered
    (those of one task queue's workers, if given)."""
    on_queue = "" if task_queue is None else " AND task_queue = ?"
    rows = yield q(
        "SELECT workflow_types, activity_names FROM workers WHERE namespace = ? "
        f"AND expires_at >= ?{on_queue}",
        namespace, now, *(() if task_queue is None else (task_queue,)),
    )
    types: set[str] = set()
    names: set[str] = set()
    for r in rows:
        types.update(json.loads(r["workflow_types"]))
        names.update(json.loads(r["activity_names"]))
    return types, names


def workflow_definitions(namespace: str, workflow_type: str, now: float,
                         ) -> Program[list[dict[str, Any]]]:
    """What each live worker registering `workflow_type` registered for it
    (`durable._registry.describe_definition`; {} from a worker that registered
    none): a start by name checks its arguments against them."""
    rows = yield q(
        "SELECT workflow_types, definitions FROM workers WHERE namespace = ? "
        "AND expires_at >= ? AND stopped_at IS NULL", namespace, now)
    return [_definitions(r["definitions"]).get("workflows", {}).get(workflow_type) or {}
            for r in rows if workflow_type in json.loads(r["workflow_types"])]


def list_workers(namespace: str, now: float) -> Program[list[dict[str, Any]]]:
    """The namespace's workers, alive first, then by last seen (newest first):
    what each is (identity, host, pid, build), serves (queue, names with their
    definitions) and holds (open runs it owns, running activity attempts)."""
    rows = yield q(
        "SELECT w.worker_id, w.task_queue, w.workflow_types, w.activity_names, w.capabilities, "
        "w.heartbeat_at, w.expires_at, w.identity, w.host, w.pid, w.build_id, w.definitions, "
        "w.started_at, w.stopped_at, w.loop_blocks, w.runs_released, "
        "(SELECT count(*) FROM runs r WHERE r.owner = w.worker_id "
        f"AND r.status IN {OPEN_SQL}) AS runs_held, "
        "(SELECT count(*) FROM activity_tasks t WHERE t.owner = w.worker_id "
        "AND t.status = 'running') AS activities_held "
        "FROM workers w WHERE w.namespace = ?",
        namespace,
    )
    rows = sorted(rows, key=lambda r: (not _alive(r, now), -r["heartbeat_at"], r["worker_id"]))
    return [_worker(r, now) for r in rows]


def _definitions(text: str | None) -> dict[str, dict[str, dict[str, str]]]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def _alive(row: Any, now: float) -> bool:
    return row["stopped_at"] is None and row["expires_at"] >= now


def presence(row: Any, now: float) -> dict[str, Any]:
    """Whether a worker is taken to be alive, and on what evidence: when it
    was last seen and until when it is presumed alive without being seen
    again (a SIGKILLed worker looks alive until then). The one shape every
    view names a run's holder by (`durable.present.holder`, run lists)."""
    return {"worker_id": row["worker_id"], "alive": _alive(row, now),
            "last_seen_at": to_iso(row["heartbeat_at"]), "expires_at": to_iso(row["expires_at"])}


#: the keys of the record that names a run's holder
HOLDER_KEYS = ("worker_id", "alive", "last_seen_at", "expires_at", "lease_expires_at")


def holder_of(worker_id: str | None, found: Mapping[str, Any] | None,
              lease_expires_at: float | str | None = None) -> dict[str, Any]:
    """The record naming the worker that holds a run (`HOLDER_KEYS`): its
    `presence` while registered; ``alive`` False and nothing seen once its
    record is gone; ``worker_id`` None when no worker holds the run. One
    shape for describe (`durable.present.holder`) and the run lists.
    ``lease_expires_at``: when the holder's lease on the run ends (ISO 8601;
    None for an activity's worker, whose attempt has a lease of its own):
    a gone worker's run is taken by another worker from then on, and "once
    its lease has lapsed" told an operator nothing of when."""
    record = {**(found or {"worker_id": worker_id, "alive": False}),
              "lease_expires_at": to_iso(lease_expires_at) if isinstance(
                  lease_expires_at, int | float) else lease_expires_at}
    return {key: record.get(key) for key in HOLDER_KEYS}


def presences(namespace: str, worker_ids: set[str], now: float
              ) -> Program[dict[str, dict[str, Any]]]:
    """`presence` of each of these workers still registered, by id: one read
    for a page of runs, not one per run."""
    if not worker_ids:
        return {}
    ids = sorted(worker_ids)
    rows = yield q("SELECT worker_id, heartbeat_at, expires_at, stopped_at FROM workers "
                   f"WHERE namespace = ? AND worker_id IN ({placeholders(len(ids))})",
                   namespace, *ids)
    return {str(r["worker_id"]): presence(r, now) for r in rows}


def _worker(row: Any, now: float) -> dict[str, Any]:
    seen = presence(row, now)
    alive = seen["alive"]
    return {
        "worker_id": row["worker_id"],
        "identity": row["identity"] or row["worker_id"],
        "host": row["host"],
        "pid": row["pid"],
        "build_id": row["build_id"],
        "task_queues": [row["task_queue"]],
        "workflows": json.loads(row["workflow_types"]),
        "activities": json.loads(row["activity_names"]),
        "definitions": _definitions(row["definitions"]),
        "capabilities": json.loads(row["capabilities"]),
        "started_at": to_iso(row["started_at"]),
        "last_seen_at": seen["last_seen_at"],
        "expires_at": seen["expires_at"],
        "stopped_at": to_iso(row["stopped_at"]),
        "alive": alive,
        "status": "alive" if alive else "gone",
        # a crashed worker holds its runs until their leases end
        "runs_held": int(row["runs_held"]),
        "activities_held": int(row["activities_held"]),
        # how often something blocked its event loop, and the last time (or None)
        "loop_blocked": _loop_blocks(row["loop_blocks"]),
        # the runs it put down under pressure (None: none): in all, in the window
        # before its last renewal, when last
        "runs_released": _runs_released(row["runs_released"]),
    }


def _record(text: str | None, instant: str) -> dict[str, Any] | None:
    """A JSON record a worker keeps in its row (None if it has none), its
    `instant` field (epoch seconds) as ISO 8601."""
    if not text:
        return None
    value = json.loads(text)
    if not isinstance(value, dict):
        return None
    return {**value, instant: to_iso(value.get(instant))}


def _loop_blocks(text: str | None) -> dict[str, Any] | None:
    return _record(text, "started_at")


def _runs_released(text: str | None) -> dict[str, Any] | None:
    return _record(text, "last_at")


def gauges(now: float) -> Program[list[dict[str, Any]]]:
    """Every namespace's workers for /metrics: queue, alive or gone, how often
    something blocked its event loop (`loop_blocks`) and the runs it put down
    (`runs_released`), one row each."""
    rows = yield q("SELECT namespace, task_queue, worker_id, stopped_at, expires_at, loop_blocks, "
                   "runs_released FROM workers ORDER BY namespace, task_queue, worker_id")
    return [{"namespace": r["namespace"], "task_queue": r["task_queue"],
             "worker_id": r["worker_id"], "alive": _alive(r, now),
             "loop_blocked": _loop_blocks(r["loop_blocks"]),
             "runs_released": _runs_released(r["runs_released"])} for r in rows]
