"""Guarding deploys: replay recorded histories against the current code.

The histories in tests/histories/ were recorded by real runs of the workflows
below (``python tests/test_replayer.py`` records them again). Replaying them
in CI fails the build when a code change would not replay the runs already in
flight, the way Temporal users guard their deploys: `NonDeterminismDetected`
names the first op where the code and the history part.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import durable
from durable import activity, workflow
from durable.testing import Replayer, history_to_json, isolated_definitions

pytestmark = pytest.mark.anyio

HISTORIES = Path(__file__).parent / "histories"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Replayer needs no storage and no worker: one host is enough


@activity.defn(name="rp_price")
async def price(amounts: list[int]) -> int:
    return sum(amounts)


@activity.defn(name="rp_pack")
async def pack(item: str) -> str:
    return f"packed {item}"


@workflow.defn(name="rp_order")
class ReplayOrder:
    """Waits for approval (a signal), takes a discount (an update), prices the
    items (a remote and a local activity), sleeps in between."""

    def __init__(self) -> None:
        self.items: list[int] = []
        self.approved = False
        self.discount = 0

    @workflow.run
    async def run(self, order_id: str) -> dict[str, Any]:
        approved = await workflow.wait_condition(lambda: self.approved, timeout=60)
        total = await workflow.execute_activity(price, self.items)
        await workflow.sleep(0.01)
        final = await workflow.execute_local_activity(price, [total, -self.discount])
        return {"order": order_id, "approved": approved, "total": total, "final": final}

    @workflow.signal
    def add_item(self, amount: int) -> None:
        self.items.append(amount)

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.update
    async def set_discount(self, amount: int) -> int:
        await workflow.sleep(0.01)
        self.discount = amount
        return amount

    @workflow.query
    def items_so_far(self) -> list[int]:
        return list(self.items)


@workflow.defn(name="rp_shipping")
async def shipping(items: list[str]) -> list[str]:
    """Packs items concurrently, then waits for a label from a child workflow."""
    packed: dict[str, str] = {}

    async def one(item: str) -> None:
        packed[item] = await workflow.execute_activity(pack, item)

    async with workflow.task_group() as tg:
        for item in items:
            tg.start_soon(one, item)
    label = await workflow.execute_child(label_maker, len(items),
                                         id=f"{workflow.info().workflow_id}/label")
    return [packed[i] for i in items] + [label]


@workflow.defn(name="rp_label")
async def label_maker(count: int) -> str:
    await workflow.sleep(0.01)
    return f"label for {count}"


with isolated_definitions():  # the same workflow after a change that does not replay

    @workflow.defn(name="rp_order")
    class ReplayOrderPricedLocally(ReplayOrder):
        @workflow.run
        async def run(self, order_id: str) -> dict[str, Any]:
            approved = await workflow.wait_condition(lambda: self.approved, timeout=60)
            total = await workflow.execute_local_activity(price, self.items)  # was remote
            await workflow.sleep(0.01)
            final = await workflow.execute_local_activity(price, [total, -self.discount])
            return {"order": order_id, "approved": approved, "total": total, "final": final}

with isolated_definitions():  # ... and after a change made safe with a patch

    @workflow.defn(name="rp_order")
    class ReplayOrderPatched(ReplayOrder):
        @workflow.run
        async def run(self, order_id: str) -> dict[str, Any]:
            approved = await workflow.wait_condition(lambda: self.approved, timeout=60)
            if workflow.patched("price-locally"):
                total = await workflow.execute_local_activity(price, self.items)
            else:
                total = await workflow.execute_activity(price, self.items)
            await workflow.sleep(0.01)
            final = await workflow.execute_local_activity(price, [total, -self.discount])
            return {"order": order_id, "approved": approved, "total": total, "final": final}

with isolated_definitions():  # ... and after one that drops a step

    @workflow.defn(name="rp_order")
    class ReplayOrderWithoutSleep(ReplayOrder):
        @workflow.run
        async def run(self, order_id: str) -> dict[str, Any]:
            approved = await workflow.wait_condition(lambda: self.approved, timeout=60)
            total = await workflow.execute_activity(price, self.items)
            return {"order": order_id, "approved": approved, "total": total, "final": total}


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_stored_histories_replay_against_the_current_code(path: Path) -> None:
    result = await Replayer(workflows=[ReplayOrder, shipping, label_maker]).replay(path)
    assert result.finished and result.status == "completed"
    assert result.ops > 0


async def test_a_change_that_does_not_replay_is_named_at_its_first_op() -> None:
    replayer = Replayer(workflows=[ReplayOrderPricedLocally])
    with pytest.raises(durable.NonDeterminismDetected,
                       match="asked for local_activity 'rp_price' at 0:2, but history recorded "
                             "activity 'rp_price' there"):
        await replayer.replay(HISTORIES / "rp_order.json")


async def test_a_patched_change_replays_old_histories() -> None:
    result = await Replayer(workflows=[ReplayOrderPatched]).replay(HISTORIES / "rp_order.json")
    assert result.finished


async def test_history_ops_the_code_no_longer_asks_for_are_reported() -> None:
    with pytest.raises(durable.NonDeterminismDetected,
                       match="history recorded timer 'sleep' at 0:3, which the code never"):
        await Replayer(workflows=[ReplayOrderWithoutSleep]).replay(HISTORIES / "rp_order.json")


async def test_the_replayer_reads_handle_history_output_json_text_and_files(
    tmp_path: Path,
) -> None:
    events, _ = await record_order(tmp_path / "live.db", "live")
    replayer = Replayer(workflows=[ReplayOrder])
    for form in (events, history_to_json(events)):
        assert (await replayer.replay(form)).deliveries == 5
    path = tmp_path / "order.json"
    path.write_text(history_to_json(events))
    assert (await replayer.replay(str(path))).finished
    with pytest.raises(durable.ConfigurationError, match="no history file"):
        await replayer.replay(str(tmp_path / "missing.json"))
    with pytest.raises(durable.ConfigurationError, match="was not given"):
        await Replayer(workflows=[shipping]).replay(events)


async def test_a_history_of_a_running_workflow_replays_up_to_where_it_waits(
    tmp_path: Path,
) -> None:
    async with durable.connect(f"sqlite:///{tmp_path / 'open.db'}") as client:
        async with durable.Worker(client, workflows=[ReplayOrder], activities=[price],
                                  poll_interval=0.1):
            handle = await client.start(ReplayOrder, "o-open", id="open")
            await handle.signal("add_item", 5)
            with anyio.fail_after(10):
                while await handle.query("items_so_far") != [5]:
                    await anyio.sleep(0.02)
        events = await handle.history()
    result = await Replayer(workflows=[ReplayOrder]).replay(events)
    assert result.status == "running" and not result.finished and result.deliveries == 1


# ---------------------------------------------------------------- recording the histories


async def record_order(db: Path, workflow_id: str) -> tuple[list[durable.HistoryEvent], Any]:
    async with durable.connect(f"sqlite:///{db}") as client:
        async with durable.Worker(client, workflows=[ReplayOrder], activities=[price],
                                  poll_interval=0.1):
            handle = await client.start(ReplayOrder, "o-1", id=workflow_id)
            for amount in (30, 12, 8):
                await handle.signal("add_item", amount)
            assert await handle.update("set_discount", 5) == 5
            await handle.signal("approve")
            result = await handle.result()
        return await handle.history(), result


async def record_shipping(db: Path, workflow_id: str) -> list[durable.HistoryEvent]:
    async with durable.connect(f"sqlite:///{db}") as client:
        async with durable.Worker(client, workflows=[shipping, label_maker],
                                  activities=[pack], poll_interval=0.1):
            handle = await client.start(shipping, ["cup", "plate"], id=workflow_id)
            await handle.result()
        return await handle.history()


async def record_all(directory: Path, scratch: Path) -> None:
    order, _ = await record_order(scratch / "order.db", "rp-order-1")
    (directory / "rp_order.json").write_text(history_to_json(order) + "\n")
    ship = await record_shipping(scratch / "shipping.db", "rp-shipping-1")
    (directory / "rp_shipping.json").write_text(history_to_json(ship) + "\n")


if __name__ == "__main__":  # python tests/test_replayer.py: record the histories again
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        anyio.run(record_all, HISTORIES, Path(scratch))
    print(f"recorded {', '.join(p.name for p in sorted(HISTORIES.glob('*.json')))}",
          file=sys.stderr)
