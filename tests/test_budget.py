"""Time budgets and phases (issue 15, seed 001/004): one end-to-end deadline
shared by phases and dependencies, outside any workflow.

Long limits run on a `ManualClock` (no waiting); a few real-time tests use
limits under a second. Real dependencies: httpx against a loopback server,
PostgreSQL's pg_sleep through asyncpg, worker threads for calls that only
stop when they return.
"""

from __future__ import annotations

import datetime
import logging
import math
import pickle
import sys
import threading
import uuid
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from conftest import POSTGRES_URL, require_postgres

import durable
from durable import Budget, BudgetCancelled, BudgetExhausted, ConfigurationError, PhaseTimedOut
from durable.testing import (
    AnswersAtDeadline,
    ManualClock,
    SlowCall,
    SlowHTTPServer,
    UnacceptingServer,
    UninterruptibleCall,
)

httpx = pytest.importorskip("httpx")


def manual_budget(timeout: float | None = 100.0, **kwargs: Any) -> tuple[Budget, ManualClock]:
    clock = ManualClock(1000.0)
    return Budget(timeout=timeout, clock=clock, **kwargs), clock


# ---------------------------------------------------------------- time left


def test_budget_without_limits_never_runs_out_but_can_be_cancelled() -> None:
    budget = Budget()
    assert budget.remaining() == math.inf
    assert budget.deadline is None
    assert not budget.expired
    budget.check()
    assert budget.timeout_for(5) == 5
    assert budget.asyncpg_timeout() is None
    budget.cancel("shutting down")
    with pytest.raises(BudgetCancelled, match="shutting down"):
        budget.check()


def test_remaining_follows_the_monotonic_clock_not_the_wall_clock() -> None:
    budget, clock = manual_budget(100)
    assert budget.remaining() == 100
    clock.advance(40)
    assert budget.remaining() == 60
    clock.advance(100)
    assert budget.remaining() == 0
    assert budget.expired


def test_deadline_may_be_an_aware_datetime_converted_once() -> None:
    clock = ManualClock(50.0)
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    budget = Budget(deadline=at, clock=clock)
    assert budget.deadline is not None
    assert 3590 < budget.deadline - 50.0 <= 3600
    clock.advance(3600)
    assert budget.expired


def test_deadline_and_timeout_together_the_earlier_binds() -> None:
    clock = ManualClock(0.0)
    assert Budget(deadline=30.0, timeout=60, clock=clock).deadline == 30.0
    assert Budget(deadline=90.0, timeout=60, clock=clock).deadline == 60.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": -1}, "Budget\\(timeout=...\\) must be at least 0 seconds"),
        ({"timeout": float("nan")}, "finite number"),
        ({"timeout": "60"}, "must be a number of seconds"),
        ({"timeout": True}, "must be a number of seconds"),
        ({"deadline": datetime.datetime(2030, 1, 1)}, "naive datetime"),
        ({"deadline": "tomorrow"}, "monotonic instant"),
        ({"clock": 5}, "must be a callable"),
        ({"name": ""}, "non-empty str"),
    ],
)
def test_bad_budget_input_is_refused_with_the_fix(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Budget(**kwargs)


def test_at_the_deadline_counts_as_expired() -> None:
    budget, clock = manual_budget(10)
    clock.advance(9.999)
    budget.check()
    clock.advance(0.001)
    assert budget.remaining() == 0
    assert budget.expired
    with pytest.raises(BudgetExhausted) as info:
        budget.check()
    assert info.value.late_by == 0
    assert info.value.timeout_kind == "budget"


def test_check_says_which_budget_and_how_late() -> None:
    budget, clock = manual_budget(10, name="nightly-import")
    clock.advance(12.5)
    with pytest.raises(BudgetExhausted) as info:
        budget.check()
    err = info.value
    assert err.budget == "nightly-import"
    assert err.late_by == pytest.approx(2.5)
    assert isinstance(err, TimeoutError)
    assert isinstance(err, durable.DurableError)
    assert "nightly-import" in str(err)


def test_timeout_for_is_min_of_the_ops_own_and_the_time_left() -> None:
    budget, clock = manual_budget(100)
    assert budget.timeout_for(30) == 30
    clock.advance(80)
    assert budget.timeout_for(30) == 20
    assert budget.timeout_for(None) == 20
    assert budget.asyncpg_timeout(60) == 20


def test_timeout_for_refuses_instead_of_handing_out_zero() -> None:
    budget, clock = manual_budget(1)
    clock.advance(1)
    with pytest.raises(BudgetExhausted):
        budget.timeout_for(30)
    with pytest.raises(BudgetExhausted):
        budget.asyncpg_timeout(30)
    budget2, _ = manual_budget(100)
    budget2.cancel("user pressed stop")
    with pytest.raises(BudgetCancelled):
        budget2.timeout_for(30)


# ---------------------------------------------------------------- child budgets


def test_child_budget_is_never_longer_than_its_parent() -> None:
    parent, clock = manual_budget(100, name="job")
    longer = parent.child(timeout=500, name="greedy")
    assert longer.deadline == parent.deadline
    assert longer.remaining() == 100
    shorter = parent.child(timeout=10)
    assert shorter.remaining() == 10
    clock.advance(10)
    with pytest.raises(BudgetExhausted) as info:
        shorter.check()
    assert info.value.budget == "job/child"
    parent.check()  # the parent still has time
    clock.advance(90)
    with pytest.raises(BudgetExhausted) as info:
        longer.check()
    assert info.value.budget == "job"  # the parent's deadline bound, not the child's


def test_child_sees_its_parents_cancellation_but_not_the_other_way() -> None:
    parent, _ = manual_budget(100)
    first, second = parent.child(timeout=10), parent.child(timeout=10)
    first.cancel("this part is no longer needed")
    assert first.cancelled and not parent.cancelled and not second.cancelled
    parent.cancel("the whole job was cancelled")
    assert second.cancelled
    assert second.cancel_reason == "the whole job was cancelled"
    assert first.cancel_reason == "this part is no longer needed"  # the earlier one


def test_cancellation_and_deadline_the_earlier_is_reported() -> None:
    budget, clock = manual_budget(10)
    budget.cancel("operator stop")
    clock.advance(20)
    with pytest.raises(BudgetCancelled):
        budget.check()  # cancelled before time ran out: a cancellation
    late, clock2 = manual_budget(10)
    clock2.advance(20)
    late.cancel("too late to matter")
    with pytest.raises(BudgetExhausted):
        late.check()  # time ran out first: a time-out


def test_cancel_keeps_the_first_reason_and_may_come_from_any_thread() -> None:
    budget, _ = manual_budget(100)
    thread = threading.Thread(target=budget.cancel, args=("from a web handler",))
    thread.start()
    thread.join()
    budget.cancel("second reason")
    assert budget.cancel_reason == "from a web handler"
    with pytest.raises(ConfigurationError, match="must be a str"):
        budget.cancel(42)  # type: ignore[arg-type]


def test_current_budget_is_unbounded_unless_one_is_in_use() -> None:
    assert Budget.current().remaining() == math.inf
    budget, _ = manual_budget(100)
    with budget.use():
        assert Budget.current() is budget
    assert Budget.current() is not budget


# ---------------------------------------------------------------- phases, sync (no loop)


def test_phase_in_a_plain_script_records_what_happened() -> None:
    budget, clock = manual_budget(1000, name="import")
    with budget.phase("read", limit=600) as read:
        assert Budget.current() is read.budget
        clock.advance(120)
    with pytest.raises(ValueError, match="bad row"), budget.phase("transform"):
        raise ValueError("bad row")
    records = budget.phases
    assert [(r.name, r.outcome) for r in records] == [("read", "completed"),
                                                     ("transform", "failed")]
    assert records[0].duration == 120
    assert records[0].limit == 600
    assert records[1].error == "ValueError"


def test_phases_share_the_budget_and_never_outlast_it() -> None:
    budget, clock = manual_budget(1000)
    for name in ("read", "transform"):
        with budget.phase(name, limit=600):
            clock.advance(400)
    with budget.phase("write", limit=600) as write:
        assert write.budget.remaining() == 200  # min(600, what is left)
        clock.advance(150)


def test_phase_overrunning_its_own_limit_is_a_phase_timeout_not_the_budgets() -> None:
    budget, clock = manual_budget(1000, name="import")
    with pytest.raises(PhaseTimedOut) as info, budget.phase("read", limit=60):
        clock.advance(61)
    err = info.value
    assert (err.phase, err.limit, err.budget, err.timeout_kind) == ("read", 60, "import", "phase")
    assert err.late_by == pytest.approx(1)
    assert "its result is refused" in str(err)
    with budget.phase("write", limit=60):  # the budget still has time: go on
        clock.advance(1)
    assert [(r.outcome, r.timeout_kind) for r in budget.phases] == [
        ("timed_out", "phase"), ("completed", None)]


def test_budget_running_out_inside_a_phase_is_not_a_phase_timeout() -> None:
    budget, clock = manual_budget(100, name="import")
    with pytest.raises(BudgetExhausted) as info, budget.phase("write", limit=600):
        clock.advance(100)
    assert not isinstance(info.value, PhaseTimedOut)
    assert info.value.timeout_kind == "budget"
    assert (info.value.budget, info.value.phase) == ("import", "write")
    assert budget.phases[0].timeout_kind == "budget"


def test_no_phase_starts_after_the_deadline() -> None:
    budget, clock = manual_budget(100)
    clock.advance(100)
    ran = False
    with pytest.raises(BudgetExhausted, match="phase 'write' not started"), \
            budget.phase("write"):
        ran = True
    assert not ran
    assert budget.phases == ()


def test_an_error_at_the_deadline_is_the_budget_running_out() -> None:
    """A client fed timeout_for() fails at the deadline: that is a time-out."""
    budget, clock = manual_budget(30)
    with pytest.raises(BudgetExhausted) as info, budget.phase("fetch"):
        clock.advance(30)
        raise ConnectionError("read timed out")
    assert isinstance(info.value.__cause__, ConnectionError)
    assert budget.phases[0].outcome == "timed_out"


def test_phase_is_single_use_and_validates_its_limit() -> None:
    budget, _ = manual_budget(100)
    phase = budget.phase("read")
    with phase:
        pass
    with pytest.raises(ConfigurationError, match="single-use"), phase:
        pass
    with pytest.raises(ConfigurationError, match="limit must be > 0"):
        budget.phase("read", limit=0)
    with pytest.raises(ConfigurationError, match="non-empty str"):
        budget.phase("")


def test_phase_logs_kind_and_duration_but_never_error_messages(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="durable.budget")
    budget, clock = manual_budget(100, name="billing")
    with budget.phase("charge", limit=10):
        clock.advance(2)
    with pytest.raises(RuntimeError), budget.phase("notify"):
        raise RuntimeError("card 4111-1111-1111-1111 declined")
    text = caplog.text
    assert "event='phase_started'" in text
    assert "phase='charge' stop_kind='completed' duration=2.0" in text
    assert "stop_kind='failed'" in text and "error_type='RuntimeError'" in text
    assert "4111" not in text


def test_budget_errors_survive_pickling_with_their_fields() -> None:
    err = PhaseTimedOut("phase 'read' overran", budget="b", phase="read", limit=30.0,
                        late_by=1.5)
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), str(copy), copy.phase, copy.limit, copy.late_by) == (
        PhaseTimedOut, "phase 'read' overran", "read", 30.0, 1.5)
    cancelled = pickle.loads(pickle.dumps(BudgetCancelled("x", budget="b", reason="r")))
    assert cancelled.reason == "r"


# ---------------------------------------------------------------- phases on asyncio and trio


@pytest.mark.anyio
async def test_slow_call_is_cut_by_the_budget() -> None:
    budget = Budget(timeout=0.3, name="report")
    slow = SlowCall(30)
    with pytest.raises(BudgetExhausted) as info:
        async with budget.phase("query", limit=60):
            await slow()
            pytest.fail("the slow call was not cut")
    assert not isinstance(info.value, PhaseTimedOut)
    assert (slow.calls, slow.completed) == (1, 0)
    assert budget.phases[0].outcome == "timed_out"


@pytest.mark.anyio
async def test_phase_limit_cuts_its_body_and_the_next_phase_still_runs() -> None:
    budget = Budget(timeout=30, name="import")
    with pytest.raises(PhaseTimedOut) as info:
        async with budget.phase("read", limit=0.2):
            await anyio.sleep(30)
    assert info.value.phase == "read"
    async with budget.phase("write", limit=5):
        await anyio.lowlevel.checkpoint()
    assert [r.outcome for r in budget.phases] == ["timed_out", "completed"]


@pytest.mark.anyio
async def test_hour_long_limits_on_a_manual_clock() -> None:
    budget, clock = manual_budget(3 * 3600)
    async with budget.phase("read", limit=3600):
        assert await SlowCall(1800, "rows", clock=clock)() == "rows"
    with pytest.raises(PhaseTimedOut):
        async with budget.phase("transform", limit=3600):
            await SlowCall(7200, clock=clock)()
    assert budget.remaining() == 3 * 3600 - 1800 - 3600


@pytest.mark.anyio
async def test_response_exactly_at_the_deadline_is_refused() -> None:
    budget, clock = manual_budget(60)
    answer = AnswersAtDeadline("the answer", clock=clock)
    with pytest.raises(BudgetExhausted) as info:
        async with budget.phase("ask"):
            await answer()
    assert answer.answered == 1
    assert info.value.late_by == 0
    assert "returned at its deadline" in str(info.value)
    assert clock() == budget.deadline


@pytest.mark.anyio
async def test_response_at_the_deadline_in_real_time_is_refused() -> None:
    budget = Budget(timeout=0.2)
    answer = AnswersAtDeadline("late")
    with pytest.raises(PhaseTimedOut):
        async with budget.phase("ask", limit=0.1):
            await answer()
    assert answer.answered == 1


@pytest.mark.anyio
async def test_cancellation_between_phases_refuses_the_next_phase() -> None:
    budget = Budget(timeout=30, name="import")
    async with budget.phase("read"):
        await anyio.lowlevel.checkpoint()
    budget.cancel("operator asked to stop")
    started_write = False
    with pytest.raises(BudgetCancelled) as info:
        async with budget.phase("write"):
            started_write = True
    assert not started_write
    assert (info.value.phase, info.value.reason) == ("write", "operator asked to stop")
    assert [(r.name, r.outcome) for r in budget.phases] == [("read", "completed")]


@pytest.mark.anyio
async def test_host_cancellation_waits_for_an_operation_that_only_stops_when_it_returns() -> None:
    budget = Budget(timeout=30)
    effects: list[str] = []
    call = UninterruptibleCall(effect=lambda: effects.append("row written"))
    after_call = False
    writer = anyio.CancelScope()

    async def write() -> None:
        nonlocal after_call
        with writer:
            async with budget.phase("write"):
                await call()
                after_call = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        await call.wait_started()
        writer.cancel()
        await anyio.wait_all_tasks_blocked()  # the cancelled writer waits for the call
        assert budget.phases[0].outcome == "running"  # still inside the call
        call.release()
    assert effects == ["row written"]  # the effect happened although we cancelled
    assert call.returned == 1
    assert not after_call
    assert budget.phases[0].outcome == "cancelled"


@pytest.mark.anyio
async def test_budget_cancelled_during_an_uninterruptible_call_is_seen_when_it_returns() -> None:
    budget = Budget(timeout=30)
    call = UninterruptibleCall(result="done")
    outcome: list[BaseException] = []

    async def work() -> None:
        try:
            async with budget.phase("push"):
                await call(budget)
        except BudgetCancelled as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(work)
        await call.wait_started()
        budget.cancel("deploy in progress")
        call.release()
    assert len(outcome) == 1 and call.returned == 1
    assert budget.phases[0].outcome == "cancelled"
    with pytest.raises(BudgetCancelled):
        async with budget.phase("next"):
            pass


@pytest.mark.anyio
async def test_uninterruptible_call_past_the_phase_limit_is_refused_after_it_returns() -> None:
    budget = Budget(timeout=30)
    call = UninterruptibleCall(delay=0.4, result="late")
    with pytest.raises(PhaseTimedOut):
        async with budget.phase("push", limit=0.1):
            await call()
    assert call.returned == 1


@pytest.mark.anyio
async def test_tasks_started_in_a_phase_see_its_budget() -> None:
    budget = Budget(timeout=30)
    seen: list[Budget] = []
    async with budget.phase("fan-out", limit=10) as phase, anyio.create_task_group() as tg:
        tg.start_soon(lambda: _record_current(seen))
    assert seen == [phase.budget]


async def _record_current(seen: list[Budget]) -> None:
    seen.append(Budget.current())


# ---------------------------------------------------------------- anyio scopes


@pytest.mark.anyio
async def test_fail_after_raises_the_budgets_error() -> None:
    budget = Budget(timeout=0.2, name="render")
    with pytest.raises(BudgetExhausted, match="'render' ran out"), budget.fail_after():
        await anyio.sleep(30)


@pytest.mark.anyio
async def test_move_on_after_ends_quietly_and_skips_when_spent() -> None:
    budget = Budget(timeout=0.2)
    with budget.move_on_after() as scope:
        await anyio.sleep(30)
    assert scope.cancelled_caught
    reached = False
    with budget.move_on_after() as spent:
        await anyio.lowlevel.checkpoint()
        reached = True
    assert spent.cancelled_caught and not reached


# ---------------------------------------------------------------- httpx: connect and read apart


@pytest.mark.anyio
async def test_httpx_read_limit_applies_after_a_quick_connect() -> None:
    budget = Budget(timeout=30)
    timeout = budget.httpx_timeout(connect=2, read=0.3)
    assert (timeout.connect, timeout.read) == (2, 0.3)
    assert timeout.write == pytest.approx(30, abs=1)  # left out: the time left
    with SlowHTTPServer(delay=10) as server:
        async with httpx.AsyncClient(timeout=timeout) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(server.url)
        with anyio.fail_after(10):  # connected, then waited for the answer
            while server.requests < 1:
                await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_httpx_connect_limit_applies_when_nobody_accepts() -> None:
    with UnacceptingServer() as server:
        if not server.connect_hangs:
            pytest.skip("this system refuses connections to a full listener instead of stalling")
        timeout = Budget(timeout=30).httpx_timeout(connect=0.3, read=30)
        async with httpx.AsyncClient(timeout=timeout) as client:
            with pytest.raises(httpx.ConnectTimeout):
                await client.get(server.url)


@pytest.mark.anyio
async def test_httpx_gets_the_time_left_when_it_is_less_than_its_limits() -> None:
    budget = Budget(timeout=0.3, name="sync")
    with SlowHTTPServer(delay=10) as server:
        with pytest.raises(BudgetExhausted) as info:
            async with budget.phase("pull"):
                timeout = budget.httpx_timeout(connect=5, read=30)
                assert timeout.read is not None and timeout.read <= 0.3
                async with httpx.AsyncClient(timeout=timeout) as client:
                    await client.get(server.url)
    # the phase's scope or httpx's own read limit fires first: both are the budget
    assert info.value.phase == "pull"


@pytest.mark.anyio
async def test_httpx_answer_within_limits_is_used() -> None:
    budget = Budget(timeout=30)
    with SlowHTTPServer(delay=0.05, body=b"rows") as server:
        async with budget.phase("pull"):
            async with httpx.AsyncClient(timeout=budget.httpx_timeout(connect=2, read=2)) as c:
                response = await c.get(server.url)
    assert (response.status_code, response.content) == (200, b"rows")
    assert budget.phases[0].outcome == "completed"


@pytest.mark.anyio
async def test_dripping_server_outlasts_a_read_limit_but_not_fail_after() -> None:
    """httpx's read limit is per read: only a scope bounds the whole answer."""
    with SlowHTTPServer(body=b"x", chunks=6, chunk_delay=0.1) as server:
        timeout = Budget(timeout=30).httpx_timeout(connect=2, read=2)
        async with httpx.AsyncClient(timeout=timeout) as client:
            assert (await client.get(server.url)).content == b"x" * 6  # each read was quick
            budget = Budget(timeout=0.25)
            with pytest.raises(BudgetExhausted), budget.fail_after():
                await client.get(server.url)


def test_httpx_timeout_without_httpx_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ConfigurationError, match="pip install httpx"):
        Budget(timeout=5).httpx_timeout(connect=1, read=1)


# ---------------------------------------------------------------- PostgreSQL: a query over its time


@pytest.mark.postgres
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncpg runs on asyncio only
@pytest.mark.anyio
async def test_query_over_its_time_is_cancelled_on_the_server(anyio_backend: str) -> None:
    require_postgres()
    import asyncpg

    marker = f"durable-budget-{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(POSTGRES_URL)
    watcher = await asyncpg.connect(POSTGRES_URL)
    try:
        budget = Budget(timeout=0.4, name="report")
        with pytest.raises(TimeoutError):
            await conn.fetchval(f"SELECT pg_sleep(30) /* {marker} */",
                                timeout=budget.asyncpg_timeout(60))
        running = -1
        with anyio.move_on_after(10):
            while running != 0:
                running = await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    "AND query LIKE $1 AND pid <> pg_backend_pid()", f"%{marker}%")
                await anyio.sleep(0.05)
        assert running == 0, "the statement kept running on the server"
        assert await conn.fetchval("SELECT 1") == 1  # the connection is still usable
    finally:
        await conn.close()
        await watcher.close()


@pytest.mark.postgres
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_command_timeout_takes_the_time_left(anyio_backend: str) -> None:
    require_postgres()
    import asyncpg

    budget = Budget(timeout=0.4)
    conn = await asyncpg.connect(POSTGRES_URL, command_timeout=budget.asyncpg_timeout(60))
    try:
        with pytest.raises(TimeoutError):
            await conn.fetchval("SELECT pg_sleep(30)")
    finally:
        await conn.close()

