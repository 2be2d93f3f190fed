"""Claiming: one loop for runs and attempts, and the trigger that wakes it."""

from __future__ import annotations

import anyio
import pytest

from durable._runtime.claiming import CLAIM_BATCH, ClaimLoop, Trigger
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
