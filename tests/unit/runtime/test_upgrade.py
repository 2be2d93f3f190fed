"""The upgrade gate's check: does this code replay an open run's history? (no storage)"""

from __future__ import annotations

import json

import pytest

from durable import JSONConverter, Limits, activity, workflow
from durable._registry import WorkflowDefn, workflow_defn_of
from durable._runtime.upgrade import replay_check
from durable.store.records import OpRecord, RunRecord, RunStatus
from durable.testing import isolated_definitions

from ._support import T0

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@activity.defn(name="ug_a")
async def step_a() -> int:
    return 1


@activity.defn(name="ug_b")
async def step_b() -> int:
    return 2


@workflow.defn(name="ug_flow")
async def flow_v1() -> int:
    return (await workflow.execute_activity(step_a)) + (await workflow.execute_activity(step_b))


with isolated_definitions():

    @workflow.defn(name="ug_flow")
    async def flow_reordered() -> int:
        return (await workflow.execute_activity(step_b)) + (
            await workflow.execute_activity(step_a))

with isolated_definitions():

    @workflow.defn(name="ug_flow")
    async def flow_shorter() -> int:
        return await workflow.execute_activity(step_a)

with isolated_definitions():

    @workflow.defn(name="ug_flow")
    async def flow_patched() -> int:
        first = await workflow.execute_activity(step_a)
        if workflow.patched("double-b"):
            return first + 2 * (await workflow.execute_activity(step_b))
        return first + (await workflow.execute_activity(step_b))


def defn(fn: object) -> WorkflowDefn:
    found = workflow_defn_of(fn)  # type: ignore[arg-type]
    assert found is not None
    return found


def run_with(*names: str) -> tuple[RunRecord, dict[str, OpRecord]]:
    run = RunRecord("r1", "default", "wf-1", "ug_flow", 1, "default", RunStatus.RUNNING, "[]",
                    T0, started_at=T0, epoch=2)
    ops = {f"0:{i}": OpRecord(f"0:{i}", "activity", name, "completed", json.dumps(i),
                              scheduled_at=T0, closed_at=T0)
           for i, name in enumerate(names, start=1)}
    return run, ops


async def check(fn: object, *names: str) -> str | None:
    run, ops = run_with(*names)
    return await replay_check(defn(fn), run, ops, [], activity_names={"ug_a", "ug_b"},
                              converter=JSONConverter(), limits=Limits())


async def test_code_that_replays_the_history_passes_past_its_end_too() -> None:
    assert await check(flow_v1, "ug_a", "ug_b") is None
    assert await check(flow_v1, "ug_a") is None  # in flight: the rest runs live
    assert await check(flow_v1) is None  # nothing recorded yet


async def test_a_reordered_op_is_named_as_the_first_divergence() -> None:
    divergence = await check(flow_reordered, "ug_a")
    assert divergence == ("workflow ug_flow (run r1) asked for activity 'ug_b' at 0:1, but "
                          "history recorded activity 'ug_a' there: the code changed in a way "
                          "that does not replay.")


async def test_code_that_returns_without_asking_for_recorded_ops_diverges() -> None:
    divergence = await check(flow_shorter, "ug_a", "ug_b")
    assert divergence is not None and "0:2" in divergence
    assert "marked for review" not in divergence  # the gate marks nothing


async def test_a_patched_change_replays() -> None:
    assert await check(flow_patched, "ug_a", "ug_b") is None
