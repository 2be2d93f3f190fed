"""The words of durable.present_ops on the documented dict shapes: what an
operator reads of an overdue or ended schedule and of a queue nobody uses."""

from __future__ import annotations

from durable.present_ops import idle_queue, schedule_ended, schedule_overdue


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
