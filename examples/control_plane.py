"""Workflows for a control plane demo: `durable serve` with this worker in-process.

    python -c "import durable.http; durable.http.serve('sqlite:///demo.db',
        tokens={'s3cret': 'operator', 'peek': 'viewer'},
        worker='control_plane:make_worker')"     # with examples/ on PYTHONPATH

then drive it with curl (docs/control-plane.md) or a remote client::

    async with durable.connect("http://127.0.0.1:8233", token="s3cret") as client:
        print(await client.execute("order", "o-1", id="order-1"))
"""

from __future__ import annotations

import durable
from durable import activity, workflow


@activity.defn
async def charge(order_id: str) -> str:
    return f"receipt-{order_id}"


@activity.defn
async def refund(order_id: str) -> str:
    return f"refunded-{order_id}"


@workflow.defn(name="order")
async def order(order_id: str, ship_after_seconds: float = 0.1) -> str:
    receipt: str = await workflow.execute_activity(charge, order_id)
    try:
        await workflow.sleep(ship_after_seconds)
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                await workflow.execute_activity(refund, order_id)
    return f"shipped {order_id} ({receipt})"


def make_worker(client: durable.Client) -> durable.Worker:
    return durable.Worker(client, workflows=[order], activities=[charge, refund])
