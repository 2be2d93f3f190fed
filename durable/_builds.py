"""A task queue's builds during a deploy: who runs each build, and which open
runs each one still holds or cannot take.

The question an operator asks before stopping an old build's last workers is
"which builds can still claim work on this queue, and does a run still need
the old one?" (docs/deploying.md). `rollout` answers it in the reference
engine's shape (its ``GET /api/task-queues/{q}/build-ids``: one cohort per
build id, ``None`` for workers without one, with worker counts by status and
each workflow type's definition fingerprints) and with what our upgrade gate
knows beside it: the open runs each build last advanced (``open_runs``), how
many of those another build refused (``refused_elsewhere``: only this build,
or a patched one, continues them), and the open runs it refused itself
(``blocked_runs``). A build that no live worker runs but that open runs still
name is listed too (``no_workers``): those are the runs a deploy would
strand.

The reference's drain, promote and resume have no counterpart here: a build
is taken out by stopping its workers (they hand their runs back at once),
and a run moves to the build whose code replays it (the upgrade gate). Its
fields for them say so truthfully: nothing drained, nothing promoted.
"""

from __future__ import annotations

import datetime
from typing import Any

#: the reference's order of cohorts: serving first, then gone, then empty
_RANK = {"active": 0, "stale_only": 1, "no_workers": 2}


def _instant(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


def _epoch(value: str | None) -> float | None:
    return None if value is None else _instant(value)


def registration_span(last_seen: str | None, expires: str | None) -> float | None:
    """How long after its last heartbeat a live worker turns stale: its
    registration's lifetime (twice its lease), from the two instants a worker
    record gives (ISO 8601; None when either is unknown). `/api/workers`'
    ``stale_after_seconds`` and a rollout's are this, the longest among the
    live workers listed."""
    seen, until = _epoch(last_seen), _epoch(expires)
    return None if seen is None or until is None else max(0.0, until - seen)


def stale_after(workers: list[dict[str, Any]]) -> int | None:
    """`registration_span`'s longest among these (client) workers that are
    alive, in whole seconds as the reference's rollout gives it."""
    spans = [s for w in workers if w["alive"]
             if (s := registration_span(w["last_seen_at"], w["expires_at"])) is not None]
    return round(max(spans)) if spans else None


def _fingerprints(cohort: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """How many distinct workflow definitions the cohort's workers register, and
    the workflow types registered with more than one (a build id re-used for
    different code: the upgrade gate's record of that build then misleads)."""
    seen: dict[str, set[str]] = {}
    for w in cohort:
        for name, definition in (w["definitions"].get("workflows") or {}).items():
            if definition.get("fingerprint"):
                seen.setdefault(name, set()).add(definition["fingerprint"])
    conflicts = [{"workflow_type": name, "fingerprint_count": len(prints)}
                 for name, prints in sorted(seen.items()) if len(prints) > 1]
    return sum(len(prints) for prints in seen.values()), conflicts


def _cohort(build_id: str | None, cohort: list[dict[str, Any]],
            runs: dict[str, int]) -> dict[str, Any]:
    active = [w for w in cohort if w["alive"]]
    stopped = [w for w in cohort if not w["alive"] and w["stopped_at"] is not None]
    stale = [w for w in cohort if not w["alive"] and w["stopped_at"] is None]
    listed = active + stale  # the reference keeps no record of a stopped worker
    status = "active" if active else "stale_only" if stale else "no_workers"
    count, conflicts = _fingerprints(listed)
    seen = [w["last_seen_at"] for w in listed if w["last_seen_at"]]
    started = [w["started_at"] for w in listed if w["started_at"]]
    return {
        "build_id": build_id,
        "rollout_status": status,
        # nothing is drained or promoted here (the module's docstring)
        "drain_intent": "active", "drained_at": None, "promoted_at": None,
        "rolled_back_at": None, "new_start_selected": False,
        "active_worker_count": len(active),
        "draining_worker_count": 0,
        "stale_worker_count": len(stale),
        "total_worker_count": len(listed),
        "runtimes": ["python"] if listed else [],
        "sdk_versions": [],
        "workflow_definition_fingerprint_count": count,
        "workflow_definition_fingerprint_conflicts": conflicts,
        "last_heartbeat_at": max(seen, key=_instant) if seen else None,
        "first_seen_at": min(started, key=_instant) if started else None,
        # ours
        "stopped_worker_count": len(stopped),
        "worker_ids": [w["worker_id"] for w in active],
        "open_runs": runs.get("open_runs", 0),
        "refused_elsewhere": runs.get("refused_elsewhere", 0),
        "blocked_runs": runs.get("blocked_runs", 0),
    }


def rollout(namespace: str, task_queue: str, workers: list[dict[str, Any]],
            runs: dict[str | None, dict[str, int]]) -> dict[str, Any]:
    """The queue's builds: `workers` as `client.list_workers()` lists them (only
    this queue's count), `runs` as `durable.store.queue_views.build_runs` reads
    them."""
    mine = [w for w in workers if task_queue in w["task_queues"]]
    cohorts: dict[str | None, list[dict[str, Any]]] = {}
    for w in mine:
        cohorts.setdefault(w["build_id"], []).append(w)
    for build in runs:
        cohorts.setdefault(build, [])
    entries = [_cohort(build, cohort, runs.get(build, {})) for build, cohort in cohorts.items()]
    # a build only stopped workers ran and no open run names: nothing to say
    entries = [e for e in entries if e["total_worker_count"] or e["open_runs"]
               or e["blocked_runs"]]
    entries.sort(key=lambda e: (_RANK[e["rollout_status"]] * 2 + (e["build_id"] is None),
                                -(_epoch(e["last_heartbeat_at"]) or 0.0), e["build_id"] or ""))
    return {"namespace": namespace, "task_queue": task_queue,
            "stale_after_seconds": stale_after(mine), "build_ids": entries}
