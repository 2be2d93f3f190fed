"""The inbox: signals delivered at scheduling points, queries answered read-only."""

from __future__ import annotations

import anyio
import pytest

from durable import VirtualClock, workflow
from durable._runtime.inbox import answer_query
from durable.store import Store
from durable.store.records import RunStatus

from ._support import T0, Recorder, claimed, executor, run_record, run_to_end, setup

pytestmark = pytest.mark.anyio


@workflow.defn(name="unit_inbox_cart")
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: "checkout" in self.items)
        return self.items

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.query
    def count(self) -> int:
        return len(self.items)

    @workflow.query
    async def sneaky(self) -> None:
        await workflow.sleep(1)  # a query may not record anything


async def test_signals_received_before_the_code_started_are_delivered_first_in_order(
        store: Store) -> None:
    clock = VirtualClock(T0)
    async with claimed(store, Cart, workflow_id="cart-1", clock=clock) as ex:
        for item in ("apple", "checkout"):
            await store.send_signal("default", "cart-1", None, "add", f'["{item}"]', T0)
        ex.run.inbox_seq = 2  # as a claim made after the signals would have read it
        await run_to_end(ex, clock)
    run = await store.get_run("default", "cart-1")
    assert run is not None and run.status == RunStatus.COMPLETED
    assert run.result == '["apple","checkout"]'
    delivered = [e.data for e in await store.history(run.run_id)
                 if e.type == "SignalDelivered"]
    assert [d["delivery"] for d in delivered] == [1, 2]
    assert all(d["frontier"] == [] for d in delivered)  # before the code: no op waited


async def test_a_query_reads_the_instance_and_may_not_record() -> None:
    ex = executor(Cart, run_record("unit_inbox_cart"), setup(Recorder()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(ex.execute)
        with anyio.fail_after(10):
            while ex.ctx.instance is None or not ex.ctx.parking.parked:
                await anyio.wait_all_tasks_blocked()
        ex.ctx.instance.items.append("pear")
        assert await answer_query(ex.ctx, "count", "[]") == {"result": "1"}
        refused = await answer_query(ex.ctx, "sneaky", "[]")
        assert "is read-only and cannot call workflow.sleep()" in refused["error"]["message"]
        missing = await answer_query(ex.ctx, "total", "[]")
        assert "no query handler named 'total' (it has: count, sneaky)" in (
            missing["error"]["message"])
        ex.stop("done")
