"""Our run statuses in the reference engine's words: the one mapping.

Every view that speaks the reference's vocabulary reads it here: the
``status``, ``status_bucket`` and ``is_terminal`` of a list row, of a
description and of a command's answer (`durable.http.model.status_fields`),
the list's ``status`` bucket filter (`BUCKET_MEMBERS`) and its visibility
query's ``ExecutionStatus`` (`listed_as`, `durable._visibility_query`), over
HTTP and in the embedded ``Client.list(query=...)``. A filter selects the
statuses a row *shows* as that word, never the stored ones: a run marked for
review (``needs_review``, ``unknown``) is shown ``running`` whatever its
stored status, so ``ExecutionStatus = 'running'`` finds it and ``'pending'``
does not. Kept apart, the row and the filter had each their own table; that
is how a view could show one word and filter by another.

Ours are `durable.store.records.LISTED_STATUSES`: `RunStatus` and the two
statuses a list and ``describe()`` derive for an open run marked for review;
``records.listed_status`` derives them (``listed_status_sql`` in SQL), for
rows, descriptions and a run's state (`durable.control.RunState`) alike, so
that every reply that carries a ``durable_status`` (the result route's, a
start's, a cancel's or terminate's) says what describe() says: a run in
review is ``needs_review`` or ``unknown`` there too, and open (`OPEN`,
`is_terminal`) to every client that waits for it.
"""

from __future__ import annotations

from .store.records import LISTED_STATUSES, OPEN_STATUSES, REVIEW_STATUSES

#: the reference engine's run statuses (its ``RunStatus``), lowercase, as its
#: server compares them (strictly: ``'Running'`` is none of them)
REFERENCE_STATUSES = ("pending", "running", "waiting", "completed", "failed", "cancelled",
                      "terminated")
#: the reference's list filter ``status``: a bucket of statuses
BUCKETS = ("running", "completed", "failed")

#: ours -> the reference's word. A deadline is ``failed`` (``closed_reason:
#: timed_out`` says which), a continued run ``completed`` (``closed_reason:
#: continued``), a run waiting for a person ``running`` (it is open, and the
#: reference has no word for it); ``waiting`` is shown for none of ours.
_REFERENCE: dict[str, str] = {
    "pending": "pending", "running": "running", "completed": "completed",
    "failed": "failed", "cancelled": "cancelled", "terminated": "terminated",
    "timed_out": "failed", "continued": "completed",
    "needs_review": "running", "unknown": "running",
}
#: ours -> the reference's bucket
_BUCKET: dict[str, str] = {
    **{str(s): "running" for s in (*OPEN_STATUSES, *REVIEW_STATUSES)},
    "completed": "completed", "continued": "completed",
    "failed": "failed", "cancelled": "failed", "timed_out": "failed", "terminated": "failed",
}
if set(_REFERENCE) != set(LISTED_STATUSES) or set(_BUCKET) != set(LISTED_STATUSES):
    raise AssertionError("every listed status needs a reference word and a bucket")

#: ours that are open (not terminal): stored open, or open and marked for review
OPEN: frozenset[str] = frozenset(str(s) for s in (*OPEN_STATUSES, *REVIEW_STATUSES))


def reference_status(status: str) -> str:
    """The reference's word for one of ours (``running`` for a status this
    engine does not know: a newer engine's open run)."""
    return _REFERENCE.get(status, "running")


def status_bucket(status: str) -> str:
    """running (open), completed or failed (every other close), for one of ours."""
    return _BUCKET.get(status, "running")


def is_terminal(status: str) -> bool:
    """Whether one of ours is closed (the reference's ``is_terminal``)."""
    return status in LISTED_STATUSES and status not in OPEN


def listed_as(word: str) -> tuple[str, ...]:
    """Ours that a row shows as the reference's `word` (none for ``waiting``)."""
    return tuple(s for s in LISTED_STATUSES if _REFERENCE[s] == word)


#: ours in each bucket (what the list's ``status`` filter selects)
BUCKET_MEMBERS: dict[str, tuple[str, ...]] = {
    bucket: tuple(s for s in LISTED_STATUSES if _BUCKET[s] == bucket) for bucket in BUCKETS}
