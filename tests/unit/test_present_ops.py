"""The words of durable.present_ops on the documented dict shapes: what an
operator reads of an overdue or ended schedule and of a queue nobody uses."""

from __future__ import annotations

from datetime import UTC, datetime

from durable.present_ops import (
    idle_queue,
    owner_record,
    owner_text,
    schedule_ended,
    schedule_overdue,
)


def test_an_overdue_schedule_with_live_workers_reads_behind_or_stuck() -> None:
    text = schedule_overdue({"since": "2026-01-01T00:01:00+00:00", "late_seconds": 90.0,
                             "missed": 0, "missed_at_least": False, "catchup_window": 3600.0,
                             "live_workers": 2})
    assert text == ("due since 2026-01-01 00:01:00 UTC (1m 30s ago) and not fired, though 2 "
                    "live worker(s) run: behind (a burst of fires due at once) or stuck (see "
                    "their logs)")
    capped = schedule_overdue({"since": "2026-01-01T00:01:00+00:00", "late_seconds": 9e5,
                               "missed": 10000, "missed_at_least": True,
                               "catchup_window": 60.0, "live_workers": 0})
    assert capped is not None and "; at least 10000 fire time(s) are past" in capped
    assert schedule_overdue(None) is None


def test_ended_and_idle_say_nothing_when_not_so() -> None:
    assert schedule_ended({"ended": None}) is None
    assert schedule_ended({"ended": "end_at", "spec": {"end_at": None}}) == (
        "ended: its spec has no fire time left; update its spec to let it go on")
    assert idle_queue({"name": "q", "idle": False}) is None
    assert idle_queue({"name": "qq", "idle": True, "queues_in_use": []}) == (
        "note: no live worker serves queue 'qq' and no open run or activity is on it. A queue "
        "is only a name: a misspelt one is a new, empty queue, and its limits hold back "
        "nothing. Queues in use: none")


def test_the_wire_owner_record_reads_as_the_cli_owner_line() -> None:
    # the web UI's Worker line reads /api's owner_presence with describe's
    # owner_text: the same words for the same worker record
    now = datetime(2026, 12, 7, 4, 0, 0, tzinfo=UTC)
    gone = {"worker_id": "w-1", "alive": False, "last_seen_at": "2026-12-07T03:43:20+00:00",
            "expires_at": "2026-12-07T03:43:50+00:00"}
    record = owner_record(gone)
    assert (record["state"], record["alive"]) == ("gone", False)
    assert owner_text("w-1", record, now) == owner_text("w-1", gone, now)
    assert owner_text("w-1", record, now).startswith("w-1 (last seen 16m 40s ago, presumed gone")
    # the wire carries the run's lease end, and the Worker line says when it is taken
    leased = owner_record({**gone, "lease_expires_at": "2026-12-07T04:00:20+00:00"})
    assert leased["lease_expires_at"] == "2026-12-07T04:00:20+00:00"
    assert owner_text("w-1", leased, now).endswith(
        "(lease end: 2026-12-07 04:00:20 UTC, in 20s))")
    live = owner_record({**gone, "alive": True, "expires_at": "2026-12-07T04:10:00+00:00"})
    assert live["state"] == "presumed_alive"
    assert "presumed alive until" in owner_text("w-1", live, now)
    # a closed run (no presence: state none) is named by its owner alone, not
    # "w-1 (waiting for a worker: none holds it)"
    assert owner_record(None) == {"worker_id": None, "state": "none", "alive": False,
                                  "last_seen_at": None, "expires_at": None,
                                  "lease_expires_at": None}
    assert owner_text("w-1", owner_record(None), now) == "w-1"
    assert owner_text(None, owner_record(None), now) == "none (no worker holds it)"
