"""Presentation helpers shared by the CLI and the web UI (`durable.present`)."""

from __future__ import annotations

import pytest

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
    # ... so an attempt that heartbeated past it neither "passed" it (it ended
    # in time) nor is "late" while it runs (the watchdog times out one that
    # stops heartbeating): the page showed a healthy attempt as "⚠ 3s late"
    extended = ("extended by the attempt's heartbeats (the first was due then)", "passed")
    assert present.attempt_deadline_state(deadline, now, False, later, "heartbeat") == extended
    assert present.attempt_deadline_state(deadline, now, True, None, "heartbeat") == extended
    assert present.attempt_deadline_state(
        deadline, now, False, later, "heartbeat", "heartbeat") == (
        "reached: the attempt timed out", "missed")
    assert present.attempt_deadline_state(deadline, deadline - timedelta(seconds=2), True,
                                          None, "heartbeat") == ("in 2s", "ahead")
    assert "met" not in present.attempt_deadline_state(deadline, now, False, ended,
                                                       "heartbeat")[0]
    assert present.attempt_deadline_state(deadline, deadline - timedelta(seconds=5), True,
                                          None, "start_to_close") == ("in 5s", "ahead")


def test_a_runs_deadline_is_judged_by_how_the_run_closed() -> None:
    from datetime import UTC, datetime, timedelta

    deadline = datetime(2026, 12, 6, 13, 51, 42, tzinfo=UTC)
    ended = deadline - timedelta(minutes=9, seconds=58)
    now = ended + timedelta(seconds=5)

    def state(status: str, reason: str | None, kind: str = "run_timeout",
              at: datetime = ended) -> tuple[str, str]:
        return present.run_deadline_state(deadline, now, False, at, (status, reason), kind)

    # a run terminated 9m 58s before its deadline read "met, 9m 58s to spare"
    assert state("terminated", "stuck") == ("not reached: terminated 9m 58s before it", "passed")
    assert state("failed", "failed")[0] == "not reached: failed 9m 58s before it"
    assert state("completed", "completed") == ("met, 9m 58s to spare", "met")
    assert state("continued", "continued") == ("met, 9m 58s to spare", "met")
    assert state("continued", "continued", "execution_timeout") == (
        "handed on to the next run, 9m 58s left", "passed")
    # the deadline that timed the run out read "missed by 0ms"
    assert state("timed_out", "run_timeout", at=deadline) == (
        "reached: the run timed out", "missed")
    assert state("timed_out", "execution_timeout")[0] == "not reached: timed out 9m 58s before it"
    assert present.run_deadline_state(deadline, now, True, None, ("running", None),
                                      "run_timeout")[1] == "ahead"


async def _holder_of(info: dict[str, object], workers: list[dict[str, object]]) -> object:
    async def listed() -> list[dict[str, object]]:
        return workers

    return await present.holder(info, listed)


def test_a_run_with_nothing_open_is_told_by_the_worker_that_holds_it() -> None:
    import anyio

    from durable.cli._words import waiting_text

    now = present.instant("2026-12-06T13:40:00+00:00")
    assert now is not None
    run: dict[str, object] = {"status": "running", "waiting_for": None,
                              "run": {"owner": "w-killed"}, "pending_operations": []}
    seen = {"worker_id": "w-killed", "alive": True, "last_seen_at": "2026-12-06T13:32:35+00:00",
            "expires_at": "2026-12-06T13:52:35+00:00"}
    alive = anyio.run(_holder_of, run, [seen])
    text = waiting_text(None, now, alive).plain
    # it read "nothing: it is busy (its code or an activity runs)"
    assert "busy" not in text and "its code runs on worker w-killed (last seen" in text
    assert "presumed alive until 2026-12-06 13:52:35 UTC" in text
    gone = anyio.run(_holder_of, run, [])
    assert "worker w-killed, which holds it, is gone" in waiting_text(None, now, gone).plain
    ready = anyio.run(_holder_of, {**run, "run": {"owner": None}}, [])
    assert "ready for a worker of its queue" in waiting_text(None, now, ready).plain
    # an activity runs: busy, and no worker is looked up
    busy = {**run, "pending_operations": [{"task_status": "running"}]}
    assert anyio.run(_holder_of, busy, []) is None
    assert "it is busy" in waiting_text(None, now, None).plain


def test_a_run_lists_holder_is_told_alive_gone_or_none() -> None:
    # the run lists said "busy" for a run held by a SIGKILLed worker
    now = present.instant("2026-12-06T13:40:00+00:00")
    assert now is not None
    seen = {"worker_id": "w-7", "alive": True, "last_seen_at": "2026-12-06T13:39:50+00:00",
            "expires_at": "2026-12-06T13:40:20+00:00", "activity": None}
    assert present.holder_text(seen, now) == (
        "held by worker w-7, last seen 10s ago, presumed alive until 2026-12-06 13:40:20 UTC "
        "(in 20s)")
    gone = {**seen, "alive": False, "last_seen_at": "2026-12-06T13:39:20+00:00"}
    assert present.holder_text(gone, now) == (
        "held by worker w-7, last seen 40s ago, presumed gone: another worker takes the run "
        "once that worker's lease on it has lapsed")
    # with the run's lease end known (describe's run, the lists' holder): when
    assert present.holder_text({**gone, "lease_expires_at": "2026-12-06T13:40:12+00:00"},
                               now) == (
        "held by worker w-7, last seen 40s ago, presumed gone: another worker takes the run "
        "once that worker's lease on it has lapsed (lease end: 2026-12-06 13:40:12 UTC, in 12s)")
    assert present.holder_text({**gone, "lease_expires_at": "2026-12-06T13:39:55+00:00"},
                               now).endswith("(lease end: 2026-12-06 13:39:55 UTC, 5s ago)")
    assert present.holder_text({**gone, "activity": "pack"}, now) == (
        "activity pack runs on worker w-7, last seen 40s ago, presumed gone: the attempt ends "
        "when it times out")
    unregistered = {"worker_id": "w-7", "alive": False, "last_seen_at": None,
                    "expires_at": None, "activity": None}
    assert "w-7, no longer registered, presumed gone" in str(
        present.holder_text(unregistered, now))
    assert present.holder_text({"worker_id": None}, now) == "waiting for a worker: none holds it"
    assert present.holder_text(None, now) is None
    assert [present.holder_gone(h) for h in (seen, gone, unregistered, {"worker_id": None},
                                              None)] == [False, True, True, False, False]
    # the wire's words: a workflow task waiting for a worker, not "running" (null)
    kind, reason = present.wait_of(None, gone)
    assert kind == "workflow-task" and reason is not None
    assert reason.startswith("Workflow task waiting for a worker: worker w-7, which holds it, "
                             "was last seen at 2026-12-06T13:39:20+00:00 and is presumed gone")
    assert present.wait_of(None, seen) == (None, None)
    assert present.wait_of(None, {"worker_id": None})[0] == "workflow-task"


def test_a_run_no_worker_started_is_not_listed_as_started(
        capsys: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from durable.cli._app import Output

    # a pipe's width (160), whatever COLUMNS the runner set (pytest-xdist's
    # workers have 80, which cuts "never started" short)
    monkeypatch.delenv("COLUMNS", raising=False)
    from durable.cli._views import run_list

    base = {"workflow_type": "w", "durable_status": "pending", "run_number": 1,
            "run_id": "01a24b906cdf797e89d2a87476bf47f1", "started_at": None,
            "created_at": "2026-12-06T13:34:45+00:00", "closed_at": None, "waiting": True}
    out = Output()
    run_list(out, {"workflows": [{**base, "workflow_id": "queued-1"},
                                 {**base, "workflow_id": "dropped-1", "durable_status":
                                  "cancelled", "closed_at": "2026-12-06T13:40:00+00:00"}]})
    shown = capsys.readouterr().out  # type: ignore[attr-defined]
    # it read "2026-12-06 13:34:45 UTC (21m ago)  21m so far" for a run still queued
    assert "not started, created 2026-12-06 13:34:45 UTC" in shown and "so far" not in shown
    assert "never started" in shown


def test_a_deadline_that_expired_before_any_delivery_cut_no_cleanup_short() -> None:
    from datetime import UTC, datetime, timedelta

    deadline = datetime(2026, 12, 6, 13, 59, 10, tzinfo=UTC)
    ended = deadline + timedelta(milliseconds=2)
    # the worker holding the run was SIGKILLed: the request was never delivered,
    # yet the views said "missed: cleanup cut short by it"
    never = {"cleanup_outcome": "deadline_expired", "delivered_at": None}
    outcome = present.cleanup_of(never)
    assert outcome == "deadline_expired_undelivered"
    text, state = present.cleanup_deadline_state(deadline, ended, False, ended, outcome)
    assert text == ("missed: never delivered: no worker ran the run before it, "
                    "closed 2ms after it") and state == "missed"
    assert present.cleanup_end_label(outcome) == "closed without cleanup"
    # a cascade run carries its delivery apart; a delivered one was cut short
    cut = {"cleanup_outcome": "deadline_expired",
           "delivery": {"delivered_at": "2026-12-06T13:59:05+00:00"}}
    assert present.cleanup_of(cut) == "deadline_expired"
    assert "cut short by it" in present.cleanup_deadline_state(
        deadline, ended, False, ended, present.cleanup_of(cut))[0]
    assert present.cleanup_of(None) is None
    assert present.cleanup_of({"cleanup_outcome": "completed"}) == "completed"
