"""Group commit: writes submitted while a commit is in flight go together.

One transaction carries the writes of many runs (each fenced by its own
epoch), so under load a step costs a fraction of a round trip; when the
worker is idle, a submission commits at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..clock import Clock
from ..store.records import CommitResult
from ..store.writes import RunWrites, Write


class Committer:
    """Group commit: writes submitted while a commit is in flight go together.

    One transaction carries the writes of many runs (each fenced by its own
    epoch), so under load a step costs a fraction of a round trip.
    """

    def __init__(self, commit: Callable[[list[RunWrites], float], Awaitable[list[CommitResult]]],
                 clock: Clock) -> None:
        self._commit = commit
        self._clock = clock
        self._queue: list[tuple[RunWrites, list[Any]]] = []
        self._busy = False
        self._idle = anyio.Event()

    async def submit(self, run_id: str, epoch: int, writes: list[Write],
                     quiet: bool = False) -> CommitResult:
        slot: list[Any] = []
        self._queue.append((RunWrites(run_id, epoch, list(writes), quiet), slot))
        while not slot:
            if self._busy:
                await self._idle.wait()
                continue
            self._busy = True
            batch, self._queue = self._queue, []
            try:
                merged: dict[tuple[str, int], RunWrites] = {}
                for entry, _ in batch:
                    target = merged.get((entry.run_id, entry.epoch))
                    if target is None:
                        merged[(entry.run_id, entry.epoch)] = RunWrites(
                            entry.run_id, entry.epoch, list(entry.writes), entry.quiet)
                    else:
                        target.writes.extend(entry.writes)
                        target.quiet = target.quiet and entry.quiet
                keys = list(merged)
                with anyio.CancelScope(shield=True):
                    results = await self._commit([merged[k] for k in keys], self._clock.now())
                by_key = dict(zip(keys, results, strict=True))
                for entry, out in batch:
                    out.append(by_key[(entry.run_id, entry.epoch)])
            except BaseException as exc:
                for _, out in batch:
                    if not out:
                        out.append(exc)
                raise
            finally:
                self._busy = False
                idle, self._idle = self._idle, anyio.Event()
                idle.set()
        outcome = slot[0]
        if isinstance(outcome, BaseException):
            raise outcome
        result: CommitResult = outcome
        return result
