"""What the views say of schedules, queues and cancellations that an operator
acts on: a schedule overdue (no worker fires it) or ended, a queue nobody
uses, a cancellation cascade still under way.

Shared by the CLI (rich) and the web UI (HTML), as `durable.present` is (whose
instants and durations these use), so that both say the same words.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .present import OPEN_STATUSES, absolute, duration, holder_text, instant, seconds_text
from .store.workers import holder_of


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


def cascade_going(runs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The runs of a cascade (`Client.cascade`'s ``runs``, root first) still
    stopping: the root while open, and any other open run asked to stop. An
    abandoned child keeps running by design: the cleanup deadline of the
    request is not "late" because of it (the cascade's header said so while
    it also said "verified")."""
    return [r for i, r in enumerate(runs) if r.get("status") in OPEN_STATUSES and (
        i == 0 or r.get("lifecycle") in ("requested", "delivered", "cleaning_up"))]


def cascade_in_progress(data: Mapping[str, Any]) -> str | None:
    """What of a cancellation cascade (`Client.cascade`'s dict) is still under
    way, in words, or None once nothing is: the cascade's first run still
    open, a run of the tree asked to stop and not closed yet, a stop awaiting
    its receipt from a live worker.

    While any is, there is nothing to call verified: "every stop is confirmed
    by a receipt" read true of a request no worker had taken yet (no stop had
    been asked for). A child the tree abandoned (its lifecycle
    ``not_requested`` once its parent closed) keeps running by design and
    does not count.
    """
    runs = [r for r in data.get("runs") or [] if isinstance(r, Mapping)]
    going = cascade_going(runs)
    stopping = sum(1 for r in runs for stop in r.get("activity_stops") or []
                   if isinstance(stop, Mapping) and stop.get("state") == "stopping")
    if not going and not stopping:
        return None
    parts = []
    if going:
        parts.append(f"{len(going)} of {len(runs)} {'run' if len(runs) == 1 else 'runs'} "
                     "still open")
    if stopping:
        parts.append(f"{stopping} activity {'stop' if stopping == 1 else 'stops'} awaiting "
                     "a receipt")
    return f"in progress: {', '.join(parts)}; nothing to verify until they end"


async def owner_presence(info: Mapping[str, Any],
                         list_workers: Callable[[], Awaitable[Sequence[Mapping[str, Any]]]],
                         ) -> dict[str, Any] | None:
    """For an open run a worker holds (describe()'s ``run.owner``): that
    worker's record, `holder_of`'s shape (alive, last seen, presumed alive
    until), so a view can say whether the owner is still there; None for a
    closed run or one no worker holds. `durable describe` named a worker
    SIGKILLed a minute before as the run's owner, with nothing to say it was
    gone."""
    owner = (info.get("run") or {}).get("owner")
    if not owner or info.get("status") not in OPEN_STATUSES:
        return None
    found = next((w for w in await list_workers() if w.get("worker_id") == owner), None)
    return holder_of(owner, found, (info.get("run") or {}).get("lease_expires_at"))


#: ``owner_record``'s states. There is no plain "alive": a worker is only ever
#: presumed alive until its registration lapses (a SIGKILLed one looks alive
#: until then), so the record says no more than the store knows.
OWNER_STATES = ("presumed_alive", "gone", "none")
#: the keys of ``owner_record``
OWNER_KEYS = ("worker_id", "state", "alive", "last_seen_at", "expires_at", "lease_expires_at")


def owner_record(presence: Any) -> dict[str, Any]:
    """`owner_presence`'s answer as the wire's ``owner_presence`` (``GET
    /api/workflows/{id}``, the web UI's run page): ``{worker_id, state, alive,
    last_seen_at, expires_at, lease_expires_at}`` (the last: the run's lease,
    which a gone worker's run waits out), state one of `OWNER_STATES` (``none``, with
    nulls, for a closed run or one no worker holds). The page read
    "worker-x · epoch 1" for a worker SIGKILLed long before."""
    if not isinstance(presence, Mapping) or presence.get("worker_id") is None:
        return {"worker_id": None, "state": "none", "alive": False, "last_seen_at": None,
                "expires_at": None, "lease_expires_at": None}
    alive = bool(presence.get("alive"))
    return {"worker_id": presence.get("worker_id"),
            "state": "presumed_alive" if alive else "gone", "alive": alive,
            "last_seen_at": presence.get("last_seen_at"),
            "expires_at": presence.get("expires_at"),
            "lease_expires_at": presence.get("lease_expires_at")}


def owner_text(owner: Any, presence: Any, now: datetime) -> str:
    """describe's ``owner`` line: the worker, and whether it is presumed alive
    or gone (`owner_presence`, or the wire's `owner_record`) when that is known."""
    if not owner:
        return "none (no worker holds it)"
    said = (holder_text(presence, now) if isinstance(presence, Mapping)
            and presence.get("worker_id") == owner else None)
    if said is None:
        return str(owner)
    return f"{owner} ({said.removeprefix(f'held by worker {owner}, ')})"
