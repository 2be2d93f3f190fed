"""A process whose worker takes its own start (an eager start), says so and
waits to be killed: `tests/test_eager_start.py` SIGKILLs it and checks that
another worker takes the run over when its lease lapses.

    python tests/eager_app.py DB_URL WORKFLOW_ID
"""

from __future__ import annotations

import sys

import anyio

import durable
from durable import workflow


@workflow.defn(name="eager_gate")
class EagerGate:
    """Waits for `open`, then returns what it was started with and who opened it."""

    def __init__(self) -> None:
        self.opened_by: str | None = None

    @workflow.run
    async def run(self, n: int) -> dict[str, object]:
        await workflow.wait_condition(lambda: self.opened_by is not None)
        return {"n": n, "opened_by": self.opened_by}

    @workflow.signal
    def open(self, who: str) -> None:
        self.opened_by = who


async def main(db: str, workflow_id: str) -> None:
    async with durable.connect(db) as client:
        worker = durable.Worker(client, workflows=[EagerGate], lease_seconds=1.0,
                                poll_interval=0.2)
        async with worker:
            await worker.runs.claim_now()  # its claim loop runs: it may take starts
            handle = await client.start(EagerGate, 7, id=workflow_id)
            print(f"taken {worker.eager.taken} {worker.worker_id} {handle.run_id}", flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
