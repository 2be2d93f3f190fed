"""Claiming: one loop for runs and attempts, and the trigger that wakes it."""

from __future__ import annotations

import anyio
import pytest

from durable._runtime.claiming import CLAIM_BATCH, CLAIM_START, ClaimLoop, Trigger
from durable.store.records import Claimed

pytestmark = pytest.mark.anyio


async def test_a_local_wake_up_is_acted_on_at_once_and_a_remote_one_may_be_gathered() -> None:
    trigger = Trigger()
    trigger.set(remote=True)
    trigger.set(remote=True)
    assert await trigger.wait(60, gather=0.0) == "remote"  # consumed, level-triggered
    assert await trigger.wait(0.01) is None
    trigger.set()
    assert await trigger.wait(60, gather=60) == "local"  # a local one never waits


async def test_gathering_ends_as_soon_as_a_local_wake_up_comes() -> None:
    trigger = Trigger()
    async with anyio.create_task_group() as tg:
        got: list[str | None] = []

        async def waiter() -> None:
            got.append(await trigger.wait(60, gather=60))

        tg.start_soon(waiter)
        trigger.set(remote=True)
        await anyio.wait_all_tasks_blocked()  # gathering
        trigger.set()
    assert got == ["local"]


class Queue:
    """Ready work, claimed like the store claims it (with a backlog flag)."""

    def __init__(self, ready: int) -> None:
        self.ready = ready
        self.asked: list[int] = []

    async def claim(self, n: int) -> Claimed[int]:
        self.asked.append(n)
        took = min(n, self.ready)
        self.ready -= took
        return Claimed.of(list(range(took)), ready=self.ready + took, live=1)


async def test_a_pass_claims_what_there_is_room_for_and_starts_each() -> None:
    queue = Queue(ready=3)
    started: list[int] = []
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 5 - len(started), claim=queue.claim,
                                     start=started.append, poll_interval=3600)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.claim_now()
        assert started == [0, 1, 2] and queue.asked[0] == 5
        queue.ready = 10
        await loop.claim_now()  # room for 2 only
        assert len(started) == 5 and queue.asked[-1] == 2
        asked = len(queue.asked)
        await loop.claim_now()  # full: a pass that claims nothing
        assert len(queue.asked) == asked
        tg.cancel_scope.cancel()


async def test_a_claim_never_takes_more_than_a_batch() -> None:
    queue = Queue(ready=CLAIM_BATCH * 3)
    started: list[int] = []
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 10**6, claim=queue.claim,
                                     start=started.append, poll_interval=3600)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        with anyio.fail_after(10):  # the backlog is claimed pass after pass
            while queue.ready:
                await loop.claim_now()
        tg.cancel_scope.cancel()
    assert max(queue.asked) == CLAIM_BATCH and len(started) == CLAIM_BATCH * 3


async def drain(queue: Queue | SharedQueue, loop: ClaimLoop[int]) -> None:
    """Until `queue` is empty (pass after pass: the backlog's re-claims)."""
    with anyio.fail_after(10):
        while queue.ready:
            await loop.claim_now()


async def test_claims_of_runs_start_small_and_double_while_a_backlog_lasts() -> None:
    """Slow start: a worker cannot know who registers next, so its first claims
    are small (the others' fair shares count them once they registered)."""
    queue = Queue(ready=300)
    started: list[int] = []
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 10**6, claim=queue.claim,
                                     start=started.append, poll_interval=3600,
                                     first_batch=CLAIM_START)
    assert loop.batch == CLAIM_START == 10
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await drain(queue, loop)
        # 10 + 20 + 40 + 80 + 100 = 250, then the last 50: the backlog is over
        # (and a pass the trigger may still make finds nothing, asking 10)
        assert queue.asked[:6] == [10, 20, 40, 80, CLAIM_BATCH, CLAIM_BATCH]
        assert set(queue.asked[6:]) <= {CLAIM_START}
        assert len(started) == 300 and loop.batch == CLAIM_START
        queue.ready, queue.asked = 15, []  # the next burst starts small again
        await drain(queue, loop)
        assert queue.asked[:2] == [10, 20] and set(queue.asked[2:]) <= {CLAIM_START}
        assert loop.batch == CLAIM_START
        tg.cancel_scope.cancel()


async def test_a_slow_start_never_asks_more_than_the_room_and_grows_only_on_a_backlog() -> None:
    queue = SharedQueue(ready=200, live=4)
    asked: list[int] = []

    async def claim(n: int) -> Claimed[int]:
        asked.append(n)
        return await queue.claim(n)

    started: list[int] = []
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 25 - len(started), claim=claim,
                                     start=started.append, poll_interval=3600,
                                     first_batch=CLAIM_START)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.claim_now()
        # 10 of 200 (190 left, 4 live workers: a backlog), then 20 asked of
        # which only 15 fit; full, it asks no more
        with anyio.fail_after(10):
            while len(started) < 25:
                await loop.claim_now()
        assert asked == [10, 15] and loop.batch == 40
        queue.ready = 3  # fewer than one each for 4 workers: no backlog
        started.clear()
        await loop.claim_now()
        assert asked[-1] == 25 and loop.batch == CLAIM_START
        tg.cancel_scope.cancel()


async def test_without_a_first_batch_a_claim_takes_a_full_batch_at_once() -> None:
    """Activity attempts (short, re-claimed all the time) claim as before."""
    queue = Queue(ready=150)
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 10**6, claim=queue.claim,
                                     start=lambda _: None, poll_interval=3600)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await drain(queue, loop)
        tg.cancel_scope.cancel()
    assert set(queue.asked) == {CLAIM_BATCH} and len(queue.asked) >= 2


class SharedQueue:
    """Ready work that `live` workers share: a claim takes at most its fair
    share, ceil(ready / live), as the store's claims do."""

    def __init__(self, ready: int, live: int) -> None:
        self.ready = ready
        self.live = live

    async def claim(self, n: int) -> Claimed[int]:
        took = min(n, self.ready, -(-self.ready // self.live))
        self.ready -= took
        return Claimed.of(list(range(took)), ready=self.ready + took, live=self.live)


class Baton:
    """Counts the batons a loop passes (`ClaimLoop(spread=...)`)."""

    def __init__(self) -> None:
        self.passed = 0

    async def spread(self) -> None:
        self.passed += 1


async def test_woken_here_with_no_room_for_what_is_left_a_worker_passes_the_baton() -> None:
    """Issue 26: the other processes did not hear of work a commit here made
    ready (the driver did not notify them): a worker that cannot take it all
    tells them, once per wake-up, for as long as some of it is unclaimed."""
    queue = SharedQueue(ready=0, live=1)
    started: list[int] = []
    baton = Baton()
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 2 - len(started), claim=queue.claim,
                                     start=started.append, poll_interval=3600,
                                     spread=baton.spread, unheard=lambda: queue.ready > 0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.claim_now()  # the loop's first pass: nothing ready yet
        queue.ready = 5  # a commit here made work ready, and woke the loop
        await loop.claim_now()
        assert len(started) == 2 and queue.ready == 3
        assert baton.passed == loop.spread == 1
        await loop.claim_now()  # full: nothing claimed, and the rest still waits
        assert baton.passed == 2 and queue.ready == 3
        queue.ready = 0  # the others took it
        await loop.claim_now()
        assert baton.passed == 2
        tg.cancel_scope.cancel()


async def test_alone_a_worker_takes_the_few_left_over_itself_without_a_baton() -> None:
    """Fewer left than one each for the live workers: the worker woken here
    takes them too (the others were not told), pass after pass."""
    queue = SharedQueue(ready=0, live=4)
    started: list[int] = []
    baton = Baton()
    loop: ClaimLoop[int] = ClaimLoop(room=lambda: 10 - len(started), claim=queue.claim,
                                     start=started.append, poll_interval=3600,
                                     spread=baton.spread)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.claim_now()  # the loop's first pass: nothing ready yet
        queue.ready = 3
        await loop.claim_now()
        with anyio.fail_after(10):
            while queue.ready:
                await anyio.wait_all_tasks_blocked()  # the loop's CLAIM_TURN
                await anyio.sleep(0.01)
        assert len(started) == 3 and baton.passed == 0
        tg.cancel_scope.cancel()


async def test_a_remote_wake_up_or_a_heard_queue_passes_no_baton() -> None:
    """Only work announced here may be unheard elsewhere; and where the other
    processes hear every wake-up (`unheard()` false) nobody passes a baton."""
    for remote, unheard in ((True, True), (False, False)):
        queue = SharedQueue(ready=0, live=1)
        started: list[int] = []
        baton = Baton()
        loop: ClaimLoop[int] = ClaimLoop(room=lambda: 2 - len(started),  # noqa: B023
                                         claim=queue.claim, start=started.append,
                                         poll_interval=3600, spread=baton.spread,
                                         unheard=lambda: unheard)  # noqa: B023
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await loop.claim_now()  # the loop's first pass: nothing ready yet
            await anyio.wait_all_tasks_blocked()  # waiting for a wake-up
            queue.ready = 5
            passes = loop.passes
            loop.trigger.set(remote=remote)
            with anyio.fail_after(10):
                while loop.passes == passes:
                    await anyio.sleep(0.001)
            assert len(started) == 2 and baton.passed == 0
            tg.cancel_scope.cancel()
