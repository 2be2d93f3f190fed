"""An order workflow on the embedded SQLite default.

    python examples/order.py

Charges a card (a remote activity with a timeout and retries), reserves stock
(a local activity), waits on a durable timer, ships, and prints the result and
the run's history. The database lives in your temporary directory
(``durable-example/orders.db``; pass another URL as the first argument). Run
it twice: the second start of the same order id is refused, because ids are
unique (`WorkflowAlreadyStarted`), and the script says so and shows the
recorded result instead.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import anyio

import durable
from durable import activity, workflow


@activity.defn
async def charge(order_id: str, amount_cents: int) -> str:
    return f"receipt-{order_id}-{amount_cents}"


@activity.defn(name="reserve-stock")
def reserve_stock(order_id: str, items: list[str]) -> int:
    for n, _item in enumerate(items, 1):
        activity.heartbeat({"reserved": n})
    return len(items)


@activity.defn
async def ship(order_id: str) -> str:
    return f"tracking-{order_id}"


@workflow.defn(name="order")
async def order(order_id: str, items: list[str]) -> dict[str, object]:
    opts = durable.ActivityOptions(start_to_close_timeout=30, max_attempts=3)
    receipt = await workflow.execute_activity(charge, order_id, 4200, options=opts)
    reserved = await workflow.execute_local_activity(reserve_stock, order_id, items, options=opts)
    await workflow.sleep(0.2)  # e.g. wait for the warehouse cut-off
    tracking = await workflow.execute_activity(ship, order_id, options=opts)
    workflow.logger.info("order_done", order_id=order_id)
    return {"receipt": receipt, "reserved": reserved, "tracking": tracking}


async def main(db_url: str) -> None:
    # where the runs are kept: the CLI and the UI reach them with this URL
    print(f"database: {db_url}")
    print(f'  look at it: durable --db "{db_url}" describe order-o-1')
    async with durable.connect(db_url) as client:
        worker = durable.Worker(client, workflows=[order], activities=[charge, reserve_stock, ship])
        async with worker:
            try:
                handle = await client.start(
                    order, "o-1", ["book", "lamp"], id="order-o-1",
                    options=durable.StartOptions.reject_duplicate().with_execution_timeout(3600),
                )
            except durable.WorkflowAlreadyStarted:
                print("order-o-1 was started before: workflow ids are unique, so this start "
                      "was refused; here is the recorded run")
                handle = client.get_handle("order-o-1")
            result = await handle.result()
            print("result:", result)
            print("history:")
            for event in await handle.history():
                print(f"  {event.sequence:>3} {event.recorded_at:%H:%M:%S.%f} {event.type}")
            info = await handle.describe()
            print("status:", info["status"], "| execution deadline:",
                  info["run"]["execution_deadline_at"])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        url = sys.argv[1]
    else:
        folder = Path(tempfile.gettempdir()) / "durable-example"
        folder.mkdir(exist_ok=True)
        url = f"sqlite:///{folder / 'orders.db'}"
    anyio.run(main, url, backend=os.environ.get("DURABLE_BACKEND", "asyncio"))
