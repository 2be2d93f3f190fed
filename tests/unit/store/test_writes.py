"""What an owner asks storage to record: one run's batch, fenced by its epoch."""

from __future__ import annotations

from durable.failure import Failure
from durable.store.writes import RecordLocalActivity, RunWrites, ScheduleTimer

T0 = 1_700_000_000.0


def step(op_id: str, **fields: object) -> RecordLocalActivity:
    values: dict[str, object] = {"result": "2", **fields}
    return RecordLocalActivity(op_id=op_id, name="double", started_at=T0, attempts=1,
                               **values)  # type: ignore[arg-type]


def test_only_a_quiet_batch_of_successful_local_steps_may_take_a_dialects_short_path() -> None:
    assert RunWrites("r1", 3, [step("0:1"), step("0:2")], quiet=True).local_steps_only()
    # a delivered cancellation may need marking: the general path decides
    assert not RunWrites("r1", 3, [step("0:1")], quiet=False).local_steps_only()
    failed = step("0:1", result=None, failure=Failure("application", "x"))
    assert not RunWrites("r1", 3, [failed], quiet=True).local_steps_only()
    assert not RunWrites("r1", 3, [step("0:1", interrupted=True)], quiet=True).local_steps_only()
    assert not RunWrites("r1", 3, [step("0:1"), ScheduleTimer("0:2", T0 + 1, 1.0)],
                         quiet=True).local_steps_only()
