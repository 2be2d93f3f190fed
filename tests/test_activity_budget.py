"""`activity.budget()`: the attempt's deadline and stop as a `durable.Budget`."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest

import durable
import durable.subprocess
from durable import activity, workflow

pytestmark = pytest.mark.anyio

OBSERVED: dict[str, Any] = {}


@activity.defn(name="budget_probe")
async def probe(key: str) -> dict[str, Any]:
    budget = activity.budget()
    assert durable.Budget.current() is budget  # what durable.subprocess.run uses by default
    return {"remaining": budget.remaining(), "name": budget.name,
            "timeout_for": budget.timeout_for(1000.0)}


@activity.defn(name="budget_subprocess")
async def run_child(key: str) -> str:
    try:
        await durable.subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"],
                                     grace=0.2)
    except durable.BudgetExhausted as exc:
        receipt = getattr(exc, "receipt", None)
        OBSERVED[key] = receipt
        return f"stopped: confirmed={receipt.confirmed if receipt else None}"
    return "finished"


@workflow.defn(name="budget_wf")
async def budget_wf(name: str, key: str, stc: float) -> Any:
    try:
        return await workflow.execute_activity(
            name, key, options=durable.ActivityOptions(start_to_close_timeout=stc,
                                                       max_attempts=1))
    except durable.ActivityFailed as exc:
        return {"failed": exc.failure.get("timeout_kind") or exc.failure.get("cause_type")}


async def test_the_attempt_budget_is_its_start_to_close_deadline(
    client: durable.Client, make_worker: Any,
) -> None:
    async with make_worker(workflows=[budget_wf], activities=[probe, run_child]):
        out = await client.execute(budget_wf, "budget_probe", "p", 30.0, id="probe")
    assert 0 < out["remaining"] <= 30.0
    assert out["timeout_for"] <= 30.0
    assert out["name"] == "activity budget_probe"


async def test_a_subprocess_inside_an_activity_is_bounded_by_the_attempt(
    client: durable.Client, make_worker: Any,
) -> None:
    """durable.subprocess.run picks up the attempt's budget: the child is stopped,
    confirmed, when the attempt's start-to-close deadline passes."""
    key = f"sub-{id(client)}"
    async with make_worker(workflows=[budget_wf], activities=[probe, run_child]):
        with anyio.fail_after(30):
            out = await client.execute(budget_wf, "budget_subprocess", key, 1.5, id=key)
    # either the activity saw its budget run out first (and reports the confirmed
    # stop) or the engine's own start-to-close fence stopped it: never a hang
    assert out in ("stopped: confirmed=True", {"failed": "start_to_close"})
