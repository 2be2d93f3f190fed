"""Namespaces: the ones that hold something, and creating or describing one.

A namespace needs no creating before use: any run, worker, schedule or
setting stored under a name makes it exist (`listed`). Creating one
(`create`, the reference engine's ``POST /api/namespaces``) stores its
settings row with a description, a retention and a creation time, so it
exists (is listed, described, not created twice) before anything runs in
it; `update` changes the description or the retention of one that exists.
Both are a check then a write of the ``namespace_settings`` row: a create
raced in by another transaction is a duplicate key, which the drivers
re-run, and the re-run finds the row.
"""

from __future__ import annotations

from typing import Any

from ..clock import to_iso
from ..driver import Program, Tx, ex, q, q1
from ..errors import WorkflowNotFound
from ..wakes import Wake
from .records import dumps, open_status_sql


class NamespaceAlreadyExists(Exception):
    """Raised by `create` for a name that already holds something."""


class NoSuchNamespace(WorkflowNotFound):
    """Raised by `update` for a name that holds nothing."""


_HOLDERS = ("workers", "schedules", "namespace_settings")


def listed() -> Program[list[dict[str, Any]]]:
    """Every namespace that holds something (runs, workers, schedules or
    settings), by name: run counts, description, retention, creation time
    (a created one's, else its first run's)."""
    found: dict[str, dict[str, Any]] = {}
    rows = yield q(f"SELECT namespace, COUNT(*) AS runs, "
                   f"SUM(CASE WHEN {open_status_sql()} THEN 1 ELSE 0 END) AS open_runs, "
                   "MIN(created_at) AS first_at FROM runs GROUP BY namespace")
    for r in rows:
        found[str(r["namespace"])] = _facts(int(r["runs"]), int(r["open_runs"] or 0),
                                            r["first_at"])
    for table in _HOLDERS[:2]:
        others = yield q(f"SELECT DISTINCT namespace FROM {table}")
        for r in others:
            found.setdefault(str(r["namespace"]), _facts(0, 0, None))
    settings = yield q("SELECT namespace, description, retention_seconds, created_at, "
                       "updated_at FROM namespace_settings")
    for r in settings:
        facts = found.setdefault(str(r["namespace"]), _facts(0, 0, None))
        facts["description"] = r["description"]
        facts["retention_seconds"] = r["retention_seconds"]
        if r["created_at"] is not None:
            facts["created_at"] = to_iso(r["created_at"])
        facts["updated_at"] = to_iso(r["updated_at"])
    return [{"name": name, **facts} for name, facts in sorted(found.items())]


def _facts(runs: int, open_runs: int, first_at: float | None) -> dict[str, Any]:
    return {"run_count": runs, "open_run_count": open_runs, "created_at": to_iso(first_at),
            "updated_at": None, "description": None, "retention_seconds": None}


def _holds_something(namespace: str) -> Program[bool]:
    row = yield q1("SELECT run_id FROM runs WHERE namespace = ? LIMIT 1", namespace)
    if row is not None:
        return True
    for table in _HOLDERS:
        row = yield q1(f"SELECT namespace FROM {table} WHERE namespace = ? LIMIT 1", namespace)
        if row is not None:
            return True
    return False


def create(tx: Tx, namespace: str, description: str | None, retention_seconds: float | None,
           now: float) -> Program[None]:
    """Store a new namespace's settings; `NamespaceAlreadyExists` when the name
    already holds something (``default`` always does)."""
    held = yield from _holds_something(namespace)
    if held or namespace == "default":
        raise NamespaceAlreadyExists(namespace)
    yield ex("INSERT INTO namespace_settings (namespace, retention_seconds, pruned, "
             "last_pruned_at, updated_at, description, created_at) "
             "VALUES (?, ?, ?, NULL, ?, ?, ?)",
             namespace, retention_seconds, dumps({}), now, description, now)
    tx.wake(Wake.retention(namespace))
    return None


def update(tx: Tx, namespace: str, fields: dict[str, Any], now: float) -> Program[None]:
    """Change `fields` (``description``, ``retention_seconds``) of a namespace
    that holds something; `NoSuchNamespace` otherwise."""
    held = yield from _holds_something(namespace)
    if not held and namespace != "default":
        raise NoSuchNamespace(f"no namespace {namespace!r}: nothing was stored in it")
    row = yield q1("SELECT namespace FROM namespace_settings WHERE namespace = ?" + tx.lock,
                   namespace)
    if row is None:
        yield ex("INSERT INTO namespace_settings (namespace, retention_seconds, pruned, "
                 "last_pruned_at, updated_at, description, created_at) "
                 "VALUES (?, NULL, ?, NULL, ?, NULL, NULL)", namespace, dumps({}), now)
    unknown = set(fields) - {"description", "retention_seconds"}
    assert not unknown, f"not a namespace setting: {unknown}"
    sets = [f"{column} = ?" for column in fields]
    yield ex(f"UPDATE namespace_settings SET {', '.join(sets)}, updated_at = ? "
             "WHERE namespace = ?", *fields.values(), now, namespace)
    if "retention_seconds" in fields:
        tx.wake(Wake.retention(namespace))
    return None
