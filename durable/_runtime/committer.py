"""Group commit: writes submitted while a commit is in flight go together.

One transaction carries the writes of many runs (each fenced by its own
epoch), so under load a step costs a fraction of a round trip; when the
worker is idle, a submission commits at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from .._scopes import ScopeFactory, scope_factory
from ..clock import Clock
from ..errors import AuthorityLost, StorageUnavailable, WriteRejected
from ..store.records import CommitResult
from ..store.writes import RunWrites, Write


class Committer:
    """Group commit: writes submitted while a commit is in flight go together.

    One transaction carries the writes of many runs (each fenced by its own
    epoch), so under load a step costs a fraction of a round trip. A run whose
    writes storage refuses as invalid does not drag the others down: the
    group is committed again run by run, and only that run's submitters get
    `WriteRejected`. A storage outage reaches every submitter.

    A commit whose outcome is unknown (its connection lost during COMMIT, or
    during a self-committing statement) is handed to `settle`, which reads
    back what landed and sends again what did not (`Store.settle_commit`):
    its submitters get their results as if the answer had arrived, and the
    run goes on. Only when storage cannot tell does the unknown outcome reach
    them (the run is then replayed from storage).
    """

    def __init__(self, commit: Callable[[list[RunWrites], float], Awaitable[list[CommitResult]]],
                 clock: Clock, *, commit_shielded: bool = False,
                 settle: Callable[[list[RunWrites], float],
                                  Awaitable[list[CommitResult] | None]] | None = None) -> None:
        self._commit = commit
        self._settle = settle
        self._clock = clock
        # `commit` shields itself whole from its first await (the driver's
        # `runs_shielded`, durable.driver): an idle submit needs no scope of its own
        self._commit_shielded = commit_shielded
        self._busy = False  # a commit is in flight
        self._next: _Batch | None = None  # what queued behind it: the next commit
        self._scopes: ScopeFactory | None = None  # the running backend's scopes

    async def submit(self, run_id: str, epoch: int, writes: list[Write],
                     quiet: bool = False) -> CommitResult:
        """Record one run's writes (with whatever else is queued); its result.

        Raises `WriteRejected` when storage refuses these writes as invalid,
        `StorageUnavailable` when storage cannot be reached.

        One wake-up per caller per commit: a caller that queues behind the
        commit in flight waits on its own batch (`_Batch.done`), which is set
        once, when the batch's own commit ended; the first caller of a batch
        is woken once more, alone, to lead it (`_Batch.turn`). (Waiting on
        one "idle" event woke every queued caller at each commit, and all but
        one went back to sleep.)
        """
        batch_writes = RunWrites(run_id, epoch, list(writes), quiet)
        if not self._busy and self._commit_shielded:
            # Idle, and the commit is shielded by the driver (from before its
            # first await to its end): the same guarantee as the scope below,
            # without entering one more (a cancel scope per step is a
            # noticeable share of a sequential step's CPU, issue 26).
            # `_lead` and `_commit_group` for this lone batch, in this frame:
            # every await layer is paid again at each suspension and resume,
            # and a sequential step commits this way every time.
            self._busy = True
            failed: BaseException | None = None
            try:
                try:
                    results = await self._commit([batch_writes], self._clock.now())
                except StorageUnavailable as exc:
                    results = await self._settled([batch_writes], exc)
            except (StorageUnavailable, AuthorityLost) as exc:
                failed = exc
            except Exception as exc:
                failed = _rejected(batch_writes, exc)
            finally:
                waiting = self._next
                if waiting is not None:
                    waiting.turn.set()  # still busy: the next batch's leader commits now
                else:
                    self._busy = False
            if failed is not None:  # raised here, as below from a slot's outcome
                raise _own(failed)
            return results[0]
        slot: list[CommitResult | BaseException] = []
        entry = (batch_writes, slot)
        # Shielded: a caller cancelled while its writes wait for a commit still
        # learns whether they were recorded (the cancellation lands right after),
        # so code never goes on believing a recorded write was not.
        make_scope = self._scopes
        if make_scope is None:  # the loop's backend, found once (durable._scopes)
            make_scope = self._scopes = scope_factory()
        with make_scope(shield=True):
            if not self._busy:
                self._busy = True
                await self._lead([entry])
            else:
                batch = self._next
                if batch is None:
                    batch = self._next = _Batch()
                batch.entries.append(entry)
                if len(batch.entries) > 1:
                    await batch.done.wait()
                else:  # the first of its batch leads it once the commit in flight ended
                    await batch.turn.wait()
                    self._next = None  # it closes now: later callers form the next
                    try:
                        await self._lead(batch.entries)
                    finally:
                        batch.done.set()
        outcome = slot[0]
        if isinstance(outcome, BaseException):
            raise _own(outcome)
        return outcome

    async def _lead(self, batch: list[tuple[RunWrites, list[CommitResult | BaseException]]]
                    ) -> None:
        """Commit one batch (its runs' writes merged by run and epoch) and give
        every caller in it its outcome; then hand the turn to the next batch."""
        try:
            if len(batch) == 1:  # one caller (an idle worker): nothing to merge
                entry, out = batch[0]
                results = await self._commit_group([entry])
                out.append(results[0])
                return
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
            results = await self._commit_group([merged[k] for k in keys])
            by_key = dict(zip(keys, results, strict=True))
            for entry, out in batch:
                out.append(by_key[(entry.run_id, entry.epoch)])
        except BaseException as exc:
            for _, out in batch:
                if not out:
                    out.append(exc)
        finally:
            waiting = self._next
            if waiting is not None:
                waiting.turn.set()  # still busy: the next batch's leader commits now
            else:
                self._busy = False

    async def _commit_group(self, batches: list[RunWrites]
                            ) -> list[CommitResult | BaseException]:
        """One transaction for all; run by run if one run's writes are invalid."""
        try:
            try:
                return list(await self._commit(batches, self._clock.now()))
            except StorageUnavailable as exc:
                return list(await self._settled(batches, exc))
        except (StorageUnavailable, AuthorityLost):
            raise
        except Exception as exc:
            if len(batches) == 1:
                return [_rejected(batches[0], exc)]
        results: list[CommitResult | BaseException] = []
        for batch in batches:
            try:
                try:
                    results.extend(await self._commit([batch], self._clock.now()))
                except StorageUnavailable as exc:
                    results.extend(await self._settled([batch], exc))
            except (StorageUnavailable, AuthorityLost):
                raise
            except Exception as exc:
                results.append(_rejected(batch, exc))
        return results


    async def _settled(self, batches: list[RunWrites],
                       exc: StorageUnavailable) -> list[CommitResult]:
        """After `exc`: the batches' results, read back by `settle` when the
        outcome was unknown and storage can tell; otherwise `exc` again.
        Shielded: a submitter cancelled meanwhile still learns the outcome."""
        if not exc.outcome_unknown or self._settle is None:
            raise exc
        with anyio.CancelScope(shield=True):
            results = await self._settle(batches, self._clock.now())
        if results is None:
            raise exc
        return results


class _Batch:
    """Callers queued behind the commit in flight: committed together next."""

    __slots__ = ("done", "entries", "turn")

    def __init__(self) -> None:
        self.entries: list[tuple[RunWrites, list[CommitResult | BaseException]]] = []
        self.turn = anyio.Event()  # the commit in flight ended: its first caller leads
        self.done = anyio.Event()  # its commit ended: every caller has its outcome


def _rejected(batch: RunWrites, exc: Exception) -> WriteRejected:
    kinds = ", ".join(sorted({type(w).__name__ for w in batch.writes}))
    rejected = WriteRejected(
        f"storage refused the writes of run {batch.run_id} ({kinds}): "
        f"{type(exc).__name__}: {exc}; nothing of them was recorded"
    )
    rejected.__cause__ = exc
    return rejected


def _own(exc: BaseException) -> BaseException:
    """A copy of a shared outcome for one submitter (an exception object raised
    in several tasks at once would have its traceback rewritten by each)."""
    copy: BaseException
    if isinstance(exc, StorageUnavailable):
        copy = type(exc)(str(exc), outcome_unknown=exc.outcome_unknown)
    elif isinstance(exc, WriteRejected):
        copy = WriteRejected(str(exc))
    else:
        return exc
    copy.__cause__ = exc.__cause__
    return copy
