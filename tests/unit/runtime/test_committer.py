"""The group committer: submissions made while a commit is in flight go together.

The committer's contract is the commit function it is given, so these tests
give it one that records what it was asked and answers per batch the way
storage does (a batch made under a stale epoch is refused).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from durable import StorageUnavailable, VirtualClock
from durable._runtime.committer import Committer
from durable.store.records import CommitResult
from durable.store.writes import FireTimer, RunWrites, ScheduleTimer, Write

pytestmark = pytest.mark.anyio


class Storage:
    """A commit function: records calls, can be held open, can fail."""

    def __init__(self) -> None:
        self.epochs: dict[str, int] = {"r1": 2, "r2": 1, "r3": 1}
        self.calls: list[tuple[list[RunWrites], float]] = []
        self.gate: anyio.Event | None = None
        self.fail_on_call: dict[int, BaseException] = {}
        self.finished = 0
        self.cancelled_inside = False

    async def commit(self, batches: list[RunWrites], now: float) -> list[CommitResult]:
        self.calls.append(([RunWrites(b.run_id, b.epoch, list(b.writes), b.quiet)
                            for b in batches], now))
        call = len(self.calls)
        if self.gate is not None and call == 1:
            try:
                await self.gate.wait()
            except anyio.get_cancelled_exc_class():
                self.cancelled_inside = True
                raise
        if call in self.fail_on_call:
            raise self.fail_on_call[call]
        self.finished += 1
        return [CommitResult(b.run_id, b.epoch == self.epochs.get(b.run_id),
                             next_run_id=f"after-{b.run_id}-{call}") for b in batches]


def timer(op_id: str) -> Write:
    return ScheduleTimer(op_id, 100.0, 1.0)


def make() -> tuple[Storage, Committer]:
    storage = Storage()
    commit: Callable[[list[RunWrites], float], Awaitable[list[CommitResult]]] = storage.commit
    return storage, Committer(commit, VirtualClock(start=500.0))


async def test_an_idle_committer_commits_a_submission_at_once() -> None:
    storage, committer = make()
    result = await committer.submit("r1", 2, [timer("a")])
    assert result.committed and result.run_id == "r1"
    assert len(storage.calls) == 1
    batches, now = storage.calls[0]
    assert now == 500.0  # the committer's clock
    assert [(b.run_id, b.epoch, b.writes) for b in batches] == [("r1", 2, [timer("a")])]


async def test_submissions_during_a_commit_merge_by_run_and_epoch() -> None:
    storage, committer = make()
    storage.gate = anyio.Event()
    results: dict[str, CommitResult] = {}

    async def submit(label: str, run_id: str, epoch: int, writes: list[Write]) -> None:
        results[label] = await committer.submit(run_id, epoch, writes)

    async with anyio.create_task_group() as tg:
        plan: list[tuple[str, str, int, list[Write]]] = [
            ("leader", "r1", 2, [timer("a")]),
            ("b", "r1", 2, [timer("b")]),
            ("c", "r2", 1, [timer("c"), FireTimer("c0")]),
            ("d", "r1", 2, [timer("d")]),
            ("stale", "r1", 1, [timer("e")]),
        ]
        for args in plan:  # one at a time, so the queue order is the plan's
            tg.start_soon(submit, *args)
            await anyio.wait_all_tasks_blocked()
        assert len(storage.calls) == 1  # the others wait for the commit in flight
        storage.gate.set()

    assert len(storage.calls) == 2
    merged = {(b.run_id, b.epoch): b.writes for b in storage.calls[1][0]}
    assert merged == {
        ("r1", 2): [timer("b"), timer("d")],
        ("r2", 1): [timer("c"), FireTimer("c0")],
        ("r1", 1): [timer("e")],
    }
    assert results["b"] is results["d"]  # one merged batch, one result
    assert results["b"].committed and results["c"].committed
    assert results["stale"].committed is False  # a stale epoch is refused on its own
    assert results["leader"].next_run_id == "after-r1-1"
    assert results["c"].next_run_id == "after-r2-2"


async def test_a_merged_batch_is_quiet_only_if_every_submission_was() -> None:
    storage, committer = make()
    storage.gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        for run_id, quiet in (("r3", True), ("r1", True), ("r1", False), ("r2", True),
                              ("r2", True)):
            tg.start_soon(lambda r=run_id, q=quiet: committer.submit(
                r, storage.epochs[r], [timer(r)], quiet=q))
            await anyio.wait_all_tasks_blocked()
        storage.gate.set()
    quiet = {b.run_id: b.quiet for b in storage.calls[1][0]}
    assert quiet == {"r1": False, "r2": True}


async def test_the_commit_is_shielded_from_the_submitters_cancellation() -> None:
    storage, committer = make()
    storage.gate = anyio.Event()
    scopes: list[anyio.CancelScope] = []
    results: list[CommitResult] = []

    async def submitter() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            results.append(await committer.submit("r1", 2, [timer("a")]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(submitter)
        await anyio.wait_all_tasks_blocked()
        scopes[0].cancel()
        await anyio.wait_all_tasks_blocked()
        assert storage.finished == 0  # still in flight, not abandoned
        storage.gate.set()
    assert not storage.cancelled_inside
    assert storage.finished == 1
    assert [r.committed for r in results] == [True]  # its outcome is known, not lost


async def test_a_failed_commit_raises_in_every_waiter_of_its_batch() -> None:
    storage, committer = make()
    storage.gate = anyio.Event()
    boom = StorageUnavailable("connection lost during COMMIT", outcome_unknown=True)
    storage.fail_on_call[2] = boom
    outcomes: dict[str, Any] = {}

    async def submit(label: str, run_id: str, epoch: int) -> None:
        try:
            outcomes[label] = await committer.submit(run_id, epoch, [timer(label)])
        except StorageUnavailable as exc:
            outcomes[label] = exc

    async with anyio.create_task_group() as tg:
        for label, run_id, epoch in (("first", "r1", 2), ("x", "r2", 1), ("y", "r3", 1),
                                     ("z", "r2", 1)):
            tg.start_soon(submit, label, run_id, epoch)
            await anyio.wait_all_tasks_blocked()
        storage.gate.set()

    assert isinstance(outcomes["first"], CommitResult)
    for label in ("x", "y", "z"):  # each waiter raises its own copy of the outage
        got = outcomes[label]
        assert isinstance(got, StorageUnavailable) and got is not boom
        assert str(got) == str(boom) and got.outcome_unknown
    # the committer is not left busy: the next submission commits
    after = await committer.submit("r2", 1, [timer("again")])
    assert after.committed and len(storage.calls) == 3


async def test_a_queued_caller_waits_once_for_its_own_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers queued behind the commit in flight wait once each: the first
    for its turn to lead their batch, the others for that batch's commit;
    not once per commit that ends before theirs (issue 26: one wake-up per
    group commit, not per caller)."""
    from durable._runtime import committer as module

    waits: list[str] = []

    class CountingEvent:
        def __init__(self) -> None:
            self._event = anyio.Event()

        def set(self) -> None:
            self._event.set()

        async def wait(self) -> None:
            waits.append(anyio.get_current_task().name)
            await self._event.wait()

    monkeypatch.setattr(module, "anyio", type("anyio", (), {
        "Event": CountingEvent, "CancelScope": anyio.CancelScope}))
    storage = Storage()
    storage.gate = anyio.Event()

    async def commit(batches: list[RunWrites], now: float) -> list[CommitResult]:
        await anyio.lowlevel.checkpoint()  # every commit suspends, as storage's do
        return await storage.commit(batches, now)

    committer = Committer(commit, VirtualClock(start=500.0))
    async with anyio.create_task_group() as tg:
        for name in ("leader", "b", "c", "d"):
            tg.start_soon(committer.submit, "r1", 2, [timer(name)], name=name)
            await anyio.wait_all_tasks_blocked()
        storage.gate.set()
    assert len(storage.calls) == 2  # the leader's, then b, c and d together
    assert sorted(waits) == ["b", "c", "d"]  # b for its turn to lead, c and d for b's commit


# ---------------------------------------------------------------- an unknown outcome


async def test_an_unknown_outcome_is_settled_by_reading_back() -> None:
    storage = Storage()
    settled: list[list[str]] = []

    async def settle(batches: list[RunWrites], now: float) -> list[CommitResult] | None:
        settled.append([b.run_id for b in batches])
        return [CommitResult(b.run_id, True) for b in batches]

    committer = Committer(storage.commit, VirtualClock(start=500.0), commit_shielded=True,
                          settle=settle)
    storage.fail_on_call[1] = StorageUnavailable("lost", outcome_unknown=True)
    result = await committer.submit("r1", 2, [timer("t1")])
    assert result.committed and settled == [["r1"]]
    # a failure known not to have committed is not read back: it is raised
    storage.fail_on_call[2] = StorageUnavailable("down", outcome_unknown=False)
    with pytest.raises(StorageUnavailable):
        await committer.submit("r1", 2, [timer("t2")])
    assert settled == [["r1"]]


async def test_an_unknown_outcome_storage_cannot_tell_reaches_the_submitter() -> None:
    storage = Storage()

    async def settle(batches: list[RunWrites], now: float) -> list[CommitResult] | None:
        return None

    for shielded in (True, False):
        committer = Committer(storage.commit, VirtualClock(start=500.0),
                              commit_shielded=shielded, settle=settle)
        storage.fail_on_call[len(storage.calls) + 1] = StorageUnavailable(
            "lost", outcome_unknown=True)
        with pytest.raises(StorageUnavailable) as err:
            await committer.submit("r1", 2, [timer("t1")])
        assert err.value.outcome_unknown


async def test_a_caller_queued_behind_the_commit_in_flight_gets_its_outcome_when_cancelled(
) -> None:
    """The queued caller's shielded wait (a scope made by the running
    backend, `durable._scopes`): its writes are committed with the next batch,
    it learns the outcome, and the cancellation lands after, at its next
    checkpoint."""
    storage, committer = make()
    storage.gate = anyio.Event()
    scopes: list[anyio.CancelScope] = []
    results: list[CommitResult] = []
    after: list[str] = []

    async def first() -> None:
        results.append(await committer.submit("r1", 2, [timer("a")]))

    async def queued() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            results.append(await committer.submit("r2", 1, [timer("b")]))
            after.append("past the submit")
            await anyio.lowlevel.checkpoint()
            after.append("past the checkpoint")

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(queued)
        await anyio.wait_all_tasks_blocked()
        scopes[0].cancel()
        await anyio.wait_all_tasks_blocked()
        assert len(storage.calls) == 1  # the queued caller waits for its batch, uncancelled
        storage.gate.set()
    assert [r.run_id for r in results] == ["r1", "r2"]
    assert all(r.committed for r in results)
    assert after == ["past the submit"]  # the cancellation arrived at its next checkpoint
    assert scopes[0].cancelled_caught
