"""Presentation helpers shared by the CLI and the web UI (`durable.present`)."""

from __future__ import annotations

from durable import present


def test_cascade_links_index_runs_and_group_edges_by_parent() -> None:
    data = {
        "runs": [{"run_id": "r1", "workflow_id": "parent"},
                 {"run_id": "r2", "workflow_id": "child-a"},
                 "not a run",
                 {"run_id": "r3", "workflow_id": "child-b"}],
        "edges": [{"parent_run_id": "r1", "child_run_id": "r2"},
                  None,
                  {"parent_run_id": "r1", "child_run_id": "r3"}],
    }
    by_run, edges = present.cascade_links(data)
    assert list(by_run) == ["r1", "r2", "r3"]
    assert [e["child_run_id"] for e in edges["r1"]] == ["r2", "r3"]
    assert present.cascade_links({}) == ({}, {})


def test_an_attempts_deadline_is_judged_by_how_the_attempt_ended() -> None:
    from datetime import UTC, datetime, timedelta

    deadline = datetime(2026, 12, 6, 13, 33, 58, tzinfo=UTC)
    now = deadline + timedelta(minutes=6)
    # cancelled 30s before its start-to-close deadline: it read "passed 6m ago"
    ended = deadline - timedelta(seconds=30)
    assert present.attempt_deadline_state(deadline, now, False, ended, "start_to_close") == (
        "not reached: the attempt ended 30s before it", "passed")
    assert present.attempt_deadline_state(
        deadline, now, False, deadline, "start_to_close", "start_to_close") == (
        "reached: the attempt timed out", "missed")
    # a heartbeat deadline recorded at the start moves with each heartbeat
    later = deadline + timedelta(seconds=20)
    assert present.attempt_deadline_state(deadline, now, False, later, "heartbeat")[0] == (
        "passed 6m ago")
    assert "met" not in present.attempt_deadline_state(deadline, now, False, ended,
                                                       "heartbeat")[0]
    assert present.attempt_deadline_state(deadline, deadline - timedelta(seconds=5), True,
                                          None, "start_to_close") == ("in 5s", "ahead")
