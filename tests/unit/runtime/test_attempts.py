"""Activity attempts: one runner for local and remote, stoppable, with a recorded failure."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import anyio
import pytest

from durable import (
    JSONConverter,
    PayloadRejected,
    StructuralLimitExceeded,
    VirtualClock,
    activity,
)
from durable._registry import activity_defn_of
from durable._runtime import attempts

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000.0


@dataclasses.dataclass
class Parcel:
    sku: str
    grams: int


@activity.defn(name="unit_attempt_weigh")
async def weigh(parcel: Parcel) -> int:
    activity.heartbeat({"weighing": parcel.sku})
    return parcel.grams


STARTED = threading.Event()


@activity.defn(name="unit_attempt_grind")
def grind(rounds: int) -> int:
    STARTED.set()
    for i in range(rounds):
        activity.heartbeat(i)  # raises once the attempt must stop
        threading.Event().wait(0.01)
    return rounds


def context(name: str, **fields: Any) -> attempts.ActivityContext:
    defn = activity_defn_of(name)
    assert defn is not None
    values: dict[str, Any] = {
        "activity_id": "t1", "attempt": 1, "workflow_id": "wf", "run_id": "r1",
        "task_queue": "q", "local": False, "scheduled_at": T0, "started_at": T0,
        "deadline": None, "heartbeat_timeout": None, "heartbeat_details": None,
        "clock": VirtualClock(T0),
        "encode_details": attempts.details_encoder(JSONConverter(), 64),
    }
    values.update(fields)
    return attempts.new_context(defn, **values)


async def test_arguments_are_rebuilt_by_type_hint_and_heartbeats_kept_for_the_supervisor(
        ) -> None:
    defn = activity_defn_of(weigh)
    assert defn is not None
    args = attempts.arguments(defn, JSONConverter(), '[{"sku": "a-1", "grams": 250}]')
    assert args == [Parcel("a-1", 250)]
    actx = context("unit_attempt_weigh")
    assert await attempts.run_attempt(actx, defn, args) == 250
    assert actx.take_details() == (True, '{"weighing":"a-1"}')
    assert actx.take_details() == (False, '{"weighing":"a-1"}')  # flushed once
    assert actx.info.activity_type == "unit_attempt_weigh" and actx.info.attempt == 1


def test_heartbeat_details_are_checked_at_the_call() -> None:
    encode = attempts.details_encoder(JSONConverter(), 64)
    assert encode({"i": 1}) == '{"i":1}'
    with pytest.raises(StructuralLimitExceeded):
        encode("x" * 100)  # over the payload limit: refused where it was made
    with pytest.raises(PayloadRejected):
        encode(object())


async def test_a_stop_ends_a_sync_attempt_at_its_next_heartbeat_and_says_how() -> None:
    STARTED.clear()
    defn = activity_defn_of(grind)
    assert defn is not None
    actx = context("unit_attempt_grind")
    failure = None
    async with anyio.create_task_group() as tg:
        async def run() -> None:
            nonlocal failure
            try:
                await attempts.run_attempt(actx, defn, [10**6])
            except Exception as exc:
                failure = attempts.attempt_failure(exc, actx, defn)

        tg.start_soon(run)
        await anyio.to_thread.run_sync(STARTED.wait, 10)
        actx.request_stop("the attempt was fenced")
    assert failure is not None and failure.category == "stopped"
    assert failure.get("stop_kind") == "cooperative" and failure.get("stop_confirmed") is not False
    assert failure.get("stop_reason") == "the attempt was fenced"
    assert not actx.abandoned


def test_a_result_over_the_payload_limit_is_not_retried() -> None:
    defn = activity_defn_of(weigh)
    assert defn is not None
    failure = attempts.attempt_failure(StructuralLimitExceeded("payload_bytes", 10, 5),
                                       context("unit_attempt_weigh"), defn)
    assert failure.non_retryable
