"""Storage outages, as a worker lives through them: retried, logged once, never fatal.

A worker runs inside someone else's application, so a storage outage must
neither crash it nor flood its log: every storage call a worker makes in the
background goes through `Outage.retry`, which backs off while storage is
unavailable (0.1 s, doubling, at most 5 s), logs the outage once when it
starts (``storage_unavailable``) and once when storage answers again
(``storage_available_again``), and gives up quietly when the client was
closed or the worker stops meanwhile. A commit whose outcome is unknown is
never simply sent again when the caller can tell whether it landed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from ..errors import StorageClosed, StorageUnavailable

T = TypeVar("T")

#: the first wait after a failed storage call, and the longest
FIRST_DELAY = 0.1
MAX_DELAY = 5.0


class Outage:
    """A worker's view of its storage: up or down, and how to get through."""

    def __init__(self, log: Any, stopping: Callable[[], bool]) -> None:
        self._log = log
        self._stopping = stopping
        self.down = False

    def storage_down(self, where: str, exc: BaseException) -> None:
        """A call failed with `StorageUnavailable` (logged once per outage)."""
        if not self.down:
            self.down = True
            self._log.warning("storage_unavailable", where=where, error=str(exc))

    def storage_up(self) -> None:
        """A call succeeded: an outage, if any, is over (logged once)."""
        if self.down:
            self.down = False
            self._log.info("storage_available_again")

    async def retry(self, where: str, call: Callable[[], Awaitable[T]], *,
                    landed: Callable[[], Awaitable[bool]] | None = None) -> T | None:
        """`call()`'s value, calling it again while storage is unavailable.

        None when the client was closed (`StorageClosed`) or the worker stops
        during the outage; after a commit whose outcome is unknown, when
        `landed()` says it took effect after all. Any other error is raised:
        it is not an outage.
        """
        delay = FIRST_DELAY
        while True:
            try:
                try:
                    return await call()
                except BaseExceptionGroup as group:
                    error = _storage_error(group)
                    if error is group:
                        raise
                    raise error from None
            except StorageClosed:
                return None
            except StorageUnavailable as exc:
                self.storage_down(where, exc)
                if exc.outcome_unknown and landed is not None and await landed():
                    return None
                if self._stopping():
                    return None
                await anyio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)


def _storage_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a loop's own task group raised, when all of it is one storage error.

    A loop that runs helpers in a task group (the PostgreSQL listener does) gets
    their errors wrapped in an exception group (trio, anyio 4): a client closed
    under it came back as ``ExceptionGroup([StorageClosed(...)])``, which was
    taken for a bug and failed the worker. A group of nothing but
    `StorageClosed` (or of nothing but `StorageUnavailable`) is that error;
    anything else is the group itself.
    """
    for kind in (StorageClosed, StorageUnavailable):
        matched, rest = group.split(kind)
        if matched is not None and rest is None:
            first: BaseException = matched
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return first
    return group


def raise_unless_storage(group: BaseExceptionGroup[BaseException]) -> None:
    """Return if a worker loop's leftover group holds storage errors alone;
    raise its cancellation alone if that is all that is left besides them;
    else raise the group.

    Why: the worker stopped a loop (cancelled its scope) while storage closed
    under a task group of the loop (the PostgreSQL listener's). The group then
    held the closed storage and the cancellation, so it was no storage error
    alone for `Outage.retry`, and the loop's scope took the cancellation and
    left the rest: on trio the host's `async with worker` raised a group of
    `StorageClosed` (2 runs in 30 of a test that closes the client under a
    running worker). The worker stops anyway; nothing is a bug.
    """
    rest = group.split(StorageUnavailable)[1]
    if rest is None:
        return
    if rest.split(anyio.get_cancelled_exc_class())[1] is None:
        raise rest from None  # the cancellation alone, for the scope it belongs to
    raise group
