"""Workflows to try the `durable` command line on (docs/cli.md).

    durable --db sqlite:///shop.db worker examples.shop:WORKER &
    durable --db sqlite:///shop.db start fulfil --id order-7 --input '["o-7", 300]'
    durable --db sqlite:///shop.db watch order-7

`fulfil` reserves stock, then packs the order in a child workflow whose
activity reports its progress as ``{"done": n, "total": m}`` heartbeats (what
`durable watch` draws as a bar); asked to cancel, both release what they hold
inside a cancellation shield, so `durable cascade` has a tree to show.
"""

from __future__ import annotations

import anyio

import durable
from durable import activity, workflow

OPTS = durable.ActivityOptions(start_to_close_timeout=600, heartbeat_timeout=30)


@activity.defn
async def reserve(order_id: str) -> str:
    return f"reservation-{order_id}"


@activity.defn
async def release(reservation: str) -> str:
    return f"released {reservation}"


@activity.defn(name="pack-items")
async def pack_items(order_id: str, items: int) -> int:
    """Packs one item every 0.2 s, reporting progress on every heartbeat."""
    info = activity.info()
    done = (info.heartbeat_details or {}).get("done", 0)   # resume after a retry
    for n in range(done, items):
        await anyio.sleep(0.2)
        activity.heartbeat({"done": n + 1, "total": items})
    return items


@workflow.defn
async def pack(order_id: str, items: int) -> int:
    return await workflow.execute_activity(pack_items, order_id, items, options=OPTS)


@workflow.defn
async def fulfil(order_id: str, items: int) -> str:
    reservation = await workflow.execute_activity(reserve, order_id, options=OPTS)
    try:
        packed = await workflow.execute_child(pack, order_id, items, id=f"{order_id}-pack")
        return f"{order_id}: {packed} items packed"
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(release, reservation, options=OPTS)


# `durable worker examples.shop:WORKER` runs these.
WORKER = {"workflows": [fulfil, pack], "activities": [reserve, release, pack_items]}
