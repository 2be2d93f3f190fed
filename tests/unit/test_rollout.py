"""`durable._builds.rollout`: a queue's builds as the reference's rollout
snapshot shows them, with the open runs each holds or refused."""

from __future__ import annotations

from typing import Any

from durable._builds import rollout


def worker(worker_id: str, build: str | None, *, alive: bool = True, stopped: bool = False,
           queue: str = "q", seen: str = "2026-12-07T10:00:00+00:00",
           prints: dict[str, str] | None = None) -> dict[str, Any]:
    return {"worker_id": worker_id, "build_id": build, "task_queues": [queue], "alive": alive,
            "stopped_at": "2026-12-07T10:00:05+00:00" if stopped else None,
            "last_seen_at": seen, "expires_at": "2026-12-07T10:00:30+00:00",
            "started_at": "2026-12-07T09:00:00+00:00",
            "definitions": {"workflows": {name: {"fingerprint": p}
                                          for name, p in (prints or {}).items()}}}


def by_build(snapshot: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {e["build_id"]: e for e in snapshot["build_ids"]}


def test_workers_are_counted_by_build_and_status_and_ordered_as_the_reference_does() -> None:
    snapshot = rollout("ns", "q", [
        worker("w1", "v2"), worker("w2", "v2", seen="2026-12-07T10:00:10+00:00"),
        worker("w3", "v1", alive=False),                      # stale: its lease lapsed
        worker("w4", "v1", alive=False, stopped=True),        # stopped: not the reference's
        worker("w5", None), worker("w6", "v9", queue="other"),  # another queue's: not here
    ], {})
    assert [e["build_id"] for e in snapshot["build_ids"]] == ["v2", None, "v1"]
    v2, unversioned, v1 = snapshot["build_ids"]
    assert (v2["rollout_status"], v2["active_worker_count"], v2["total_worker_count"],
            v2["worker_ids"]) == ("active", 2, 2, ["w1", "w2"])
    assert v2["last_heartbeat_at"] == "2026-12-07T10:00:10+00:00"
    assert (unversioned["rollout_status"], unversioned["runtimes"]) == ("active", ["python"])
    assert (v1["rollout_status"], v1["stale_worker_count"], v1["total_worker_count"],
            v1["stopped_worker_count"], v1["worker_ids"]) == ("stale_only", 1, 1, 1, [])
    assert snapshot["stale_after_seconds"] == 30


def test_a_build_no_worker_runs_is_listed_while_open_runs_name_it() -> None:
    runs = {"v1": {"open_runs": 3, "refused_elsewhere": 2, "blocked_runs": 0},
            "v2": {"open_runs": 1, "refused_elsewhere": 0, "blocked_runs": 2}}
    snapshot = rollout("ns", "q", [worker("w1", "v2"),
                                   worker("w0", "v0", alive=False, stopped=True)], runs)
    builds = by_build(snapshot)
    assert set(builds) == {"v1", "v2"}  # v0: stopped workers only, and no run names it
    assert (builds["v1"]["rollout_status"], builds["v1"]["open_runs"],
            builds["v1"]["refused_elsewhere"], builds["v1"]["runtimes"]) == (
        "no_workers", 3, 2, [])
    assert (builds["v2"]["open_runs"], builds["v2"]["blocked_runs"]) == (1, 2)
    assert rollout("ns", "q", [], {})["stale_after_seconds"] is None


def test_one_build_id_for_different_code_is_a_conflict() -> None:
    snapshot = rollout("ns", "q", [worker("w1", "v2", prints={"order": "aaa", "ship": "s"}),
                                   worker("w2", "v2", prints={"order": "bbb", "ship": "s"})],
                       {})
    [v2] = snapshot["build_ids"]
    assert v2["workflow_definition_fingerprint_count"] == 3
    assert v2["workflow_definition_fingerprint_conflicts"] == [
        {"workflow_type": "order", "fingerprint_count": 2}]
