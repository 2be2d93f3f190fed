"""A fleet started together onto a backlog: every worker gets some of it.

A claim takes at most its fair share of the ready runs, counted over the
workers registered at that moment. The first worker of a fleet to register
used to take 100 runs in its first claim, alone in the registry: all of a
backlog of up to 100, and the workers registering a few milliseconds later
found nothing (in the scale-out benchmark, one process of four closed no
run). A worker's claims of runs now start at `CLAIM_START` and double while
a backlog lasts (`ClaimLoop`, slow start). On every driver; the moment the
second worker registers is chosen by holding the first worker's next claim
until the second has claimed (no sleeping, nothing timed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

import durable
from durable import workflow
from durable._runtime.claiming import CLAIM_START
from durable.store.records import Claimed, ClaimedRun

pytestmark = pytest.mark.anyio

BACKLOG = 3 * CLAIM_START  # fewer than one claim took before (100)


@workflow.defn(name="fleet_flow")
async def fleet_flow(n: int) -> int:
    return n


async def test_a_worker_registering_just_after_another_gets_a_share_of_the_backlog(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, store = storage_client, storage_client.store
    handles = [await client.start(fleet_flow, i, id=f"fleet-{i}") for i in range(BACKLOG)]
    first, second = make_worker(workflows=[fleet_flow]), make_worker(workflows=[fleet_flow])
    taken: dict[str, list[int]] = {first.worker_id: [], second.worker_id: []}
    first_claimed, second_claimed = anyio.Event(), anyio.Event()
    claim_runs = store.claim_runs

    async def held_claim_runs(namespace: str, task_queue: str, worker_id: str,
                              *args: Any, **kwargs: Any) -> Claimed[ClaimedRun]:
        if worker_id == first.worker_id and first_claimed.is_set():
            # the first worker's next claim waits for the second worker, which
            # registers after the first worker's first claim (a fleet whose
            # second process comes up a moment after the first)
            await second_claimed.wait()
        got = await claim_runs(namespace, task_queue, worker_id, *args, **kwargs)
        taken[worker_id].append(len(got))
        (first_claimed if worker_id == first.worker_id else second_claimed).set()
        return got

    monkeypatch.setattr(store, "claim_runs", held_claim_runs)
    with anyio.fail_after(60):
        async with first:
            await first_claimed.wait()
            async with second:
                await second_claimed.wait()
                assert [await h.result() for h in handles] == list(range(BACKLOG))
    # alone in the registry, the first claim took a slow start's first batch,
    # not the whole backlog; the second worker, registered then, took its
    # share of the rest: ceil(20 / 2) live workers, at most its own first batch
    assert taken[first.worker_id][0] == CLAIM_START
    assert taken[second.worker_id][0] == min(CLAIM_START, -(-(BACKLOG - CLAIM_START) // 2))
