"""What the views say of schedules and queues that an operator acts on: a
schedule overdue (no worker fires it) or ended, a queue nobody uses.

Shared by the CLI (rich) and the web UI (HTML), as `durable.present` is (whose
instants and durations these use), so that both say the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .present import absolute, duration, instant, seconds_text


def schedule_overdue(overdue: Mapping[str, Any] | None) -> str | None:
    """describe()["overdue"] of a schedule as a sentence an operator can act on:
    since when no worker fired it, why (no live worker of its namespace), and
    which fire times a worker back now would count as skipped. None when the
    schedule is not overdue."""
    if not overdue:
        return None
    since = instant(overdue.get("since"))
    late = duration(overdue.get("late_seconds"))
    workers = int(overdue.get("live_workers") or 0)
    text = (f"due since {absolute(since) if since else '-'} ({late} ago) and not "
            + ("fired: no live worker of its namespace runs, and workers fire schedules "
               "(start one)" if not workers else
               f"fired, though {workers} live worker(s) run: behind (a burst of fires due at "
               "once) or stuck (see their logs)"))
    missed = int(overdue.get("missed") or 0)
    if missed:
        more = "at least " if overdue.get("missed_at_least") else ""
        text += (f"; {more}{missed} fire time(s) are past the catch-up window "
                 f"({seconds_text(overdue.get('catchup_window'))}): a worker counts them as "
                 "skipped (reason catchup_window), `backfill` makes them up")
    return text


def schedule_ended(info: Mapping[str, Any]) -> str | None:
    """Why a schedule fires no more (describe()["ended"]), with what lets it go
    on; None while it has fires to come. It read "active" otherwise."""
    ended = info.get("ended")
    if ended == "max_runs":
        return (f"ended: its {info.get('max_runs')} scheduled run(s) (max_runs) have "
                "started; update max_runs to let it go on")
    if ended == "end_at":
        until = instant((info.get("spec") or {}).get("end_at"))
        return ("ended: its spec has no fire time left"
                + (f" (end_at {absolute(until)})" if until else "")
                + "; update its spec to let it go on")
    return None


def idle_queue(queue: Mapping[str, Any]) -> str | None:
    """describe_queue() of a queue no live worker serves and no open work is
    on: a queue is only a name, so a misspelt one is a new, empty queue whose
    limits hold back nothing. Says so, with the queues in use; None otherwise."""
    if not queue.get("idle"):
        return None
    others = ", ".join(str(n) for n in queue.get("queues_in_use") or []) or "none"
    return (f"note: no live worker serves queue {queue.get('name')!r} and no open run or "
            "activity is on it. A queue is only a name: a misspelt one is a new, empty "
            f"queue, and its limits hold back nothing. Queues in use: {others}")
