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


@workflow.defn(name="approval")
class Approval:
    """Waits for an `approve` signal; answers the `status` query; takes the
    `set_limit` update (validated) and the slow `recheck` update."""

    def __init__(self) -> None:
        self.approver: str | None = None
        self.limit = 100

    @workflow.run
    async def run(self, order_id: str, amount: int) -> str:
        await workflow.wait_condition(lambda: self.approver is not None)
        return f"{order_id}: {min(amount, self.limit)} approved by {self.approver}"

    @workflow.signal
    def approve(self, by: str) -> None:
        self.approver = by

    @workflow.query
    def status(self) -> dict[str, object]:
        return {"approver": self.approver, "limit": self.limit}

    @workflow.update
    def set_limit(self, limit: int) -> int:
        previous, self.limit = self.limit, limit
        return previous

    @set_limit.validator
    def _check_limit(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"a limit must be positive, got {limit}")

    @workflow.update
    async def recheck(self, seconds: float) -> str:
        await workflow.sleep(seconds)  # durable: the update outlives a short wait
        return f"rechecked after {seconds}s"


def make_worker(client: durable.Client) -> durable.Worker:
    return durable.Worker(client, workflows=[order, Approval], activities=[charge, refund])
