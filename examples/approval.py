"""A purchase that waits for a person's approval, on the embedded SQLite default.

    python examples/approval.py            # approved in time
    python examples/approval.py --no-one   # nobody answers: the approval times out

The workflow reserves the money for a purchase, then waits (a durable timer,
survives restarts) for an approval signal. While it waits, anyone can ask how
it is doing (a query, which records nothing) and a manager can raise the
spending limit (an update: validated first, recorded, and its result returned
to the caller). An approval over the limit is refused; no approval within the
timeout releases the money. The script plays the people: it queries, raises
the limit, approves, and prints the run's history.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

import durable
from durable import activity, workflow


@activity.defn
async def reserve(purchase_id: str, amount: int) -> str:
    return f"hold-{purchase_id}-{amount}"


@activity.defn
async def release(hold: str) -> None:
    return None


@activity.defn
async def pay(hold: str, approver: str) -> str:
    return f"paid {hold} (approved by {approver})"


@workflow.defn(name="purchase-approval")
class PurchaseApproval:
    def __init__(self) -> None:
        self.stage = "starting"
        self.limit = 1000
        self.approver: str | None = None
        self.refusals: list[str] = []

    @workflow.run
    async def run(self, purchase_id: str, amount: int, wait_seconds: float) -> dict[str, Any]:
        self.amount = amount
        hold = await workflow.execute_activity(reserve, purchase_id, amount)
        self.stage = "waiting for approval"
        approved = await workflow.wait_condition(lambda: self.approver is not None,
                                                 timeout=wait_seconds)
        if not approved:
            self.stage = "timed out"
            await workflow.execute_activity(release, hold)
            return {"purchase": purchase_id, "outcome": "no approval in time, money released"}
        self.stage = "paying"
        receipt = await workflow.execute_activity(pay, hold, self.approver)
        self.stage = "done"
        return {"purchase": purchase_id, "outcome": receipt, "refused": self.refusals}

    @workflow.signal
    def approve(self, who: str) -> None:
        if self.amount > self.limit:  # the signal is kept in history either way
            self.refusals.append(f"{who}: {self.amount} is over the limit of {self.limit}")
            return
        self.approver = who

    @workflow.query
    def progress(self) -> dict[str, Any]:
        return {"stage": self.stage, "limit": self.limit, "approver": self.approver,
                "refusals": self.refusals}

    @workflow.update
    def set_limit(self, limit: int) -> int:
        previous, self.limit = self.limit, limit
        workflow.logger.info("limit_changed", previous=previous, limit=limit)
        return previous

    @set_limit.validator
    def _check_limit(self, limit: int) -> None:
        if limit <= 0 or limit > 100_000:
            raise ValueError(f"a limit must be between 1 and 100000, got {limit}")


# `durable worker examples.approval:WORKER` runs these (docs/cli.md).
WORKER = {"workflows": [PurchaseApproval], "activities": [reserve, release, pay]}


async def main(db_url: str, someone_answers: bool) -> None:
    async with durable.connect(db_url) as client:
        worker = durable.Worker(client, workflows=[PurchaseApproval],
                                activities=[reserve, release, pay])
        async with worker:
            handle = await client.start(PurchaseApproval, "p-7", 2500,
                                        2.0 if someone_answers else 0.5, id="purchase-p-7")
            for _ in range(200):  # until it waits (queries never change the workflow)
                progress = await handle.query("progress")
                if progress["stage"] == "waiting for approval":
                    break
                await anyio.sleep(0.05)
            print("progress:", progress)
            if someone_answers:
                await handle.signal("approve", "ann")  # over the limit: refused
                try:
                    await handle.update("set_limit", 0)
                except durable.UpdateRejected as exc:
                    print("update rejected:", exc)
                print("limit raised from", await handle.update("set_limit", 5000))
                await handle.signal("approve", "ann")
            print("result:", await handle.result())
            print("history:")
            for event in await handle.history():
                print(f"  {event.sequence:>3} {event.type}")


if __name__ == "__main__":
    url = next((a for a in sys.argv[1:] if not a.startswith("--")), None) or (
        f"sqlite:///{Path(tempfile.mkdtemp(prefix='durable-approval-')) / 'approval.db'}"
    )
    anyio.run(main, url, "--no-one" not in sys.argv,
              backend=os.environ.get("DURABLE_BACKEND", "asyncio"))
