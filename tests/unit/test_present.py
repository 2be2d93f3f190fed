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
