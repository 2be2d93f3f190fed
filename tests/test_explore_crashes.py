"""`durable.testing.explore_crashes`: the worker killed at every durable point of
a run, the run recovered by a fresh worker and checked; the examples pass at
every point, a workflow whose activity has an effect outside its recorded
result is caught at the point that shows it, and that point replays alone."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import POSTGRES_URL, require_postgres

import durable
from durable import activity, workflow
from durable.store.records import HistoryEvent
from durable.testing import CrashReport, explore_crashes
from durable.testing.pytest_plugin import CrashExplorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import order as order_example

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage_url(request: pytest.FixtureRequest) -> str:
    """The storage explore_crashes is given: it makes fresh storage per run from it."""
    if request.param == "postgres":
        require_postgres()
        return POSTGRES_URL
    return "sqlite://:memory:"


def assert_every_point_passes(report: CrashReport) -> None:
    assert report.ok, report.describe()
    assert report.points and len(report.points) == report.total_points
    assert all(point.reached for point in report.points)


# ---------------------------------------------------------------- the examples


async def test_every_crash_point_of_the_order_example_recovers(storage_url: str) -> None:
    report = await explore_crashes(
        order_example.order, "o-1", ["book", "lamp"], url=storage_url,
        activities=[order_example.charge, order_example.reserve_stock, order_example.ship],
        check=lambda result, history: result["reserved"] == 2,
    )
    assert_every_point_passes(report)
    assert report.outcome == {"receipt": "receipt-o-1-4200", "reserved": 2,
                              "tracking": "tracking-o-1"}
    wheres = [point.where for point in report.points]
    # every kind of durable point is there: an activity's claim and result, a
    # local step, a timer, the close, and the point after the close
    for where in ("before ActivityStarted charge", "before ActivityCompleted charge",
                  "before ActivityScheduled reserve-stock", "before TimerFired",
                  "before WorkflowCompleted", "after WorkflowCompleted"):
        assert any(w.startswith(where) for w in wheres), (where, wheres)
    # a crash between an activity's effect and its record runs it once more, no more
    lost = next(p for p in report.points if p.where.startswith("before ActivityCompleted ship"))
    assert lost.executions["ship"] == 2
    assert all(p.executions["charge"] == 1 for p in report.points
               if not p.where.startswith("before ActivityCompleted charge"))


# ---------------------------------------------------------------- a broken workflow

LEDGER: dict[str, int] = {}


@activity.defn(name="xc_debit")
async def debit(account: str, cents: int) -> int:
    """Broken on purpose: the debit is an effect outside the recorded result (no
    idempotency key), so running it again after a lost result debits twice."""
    LEDGER[account] = LEDGER.get(account, 0) - cents
    return LEDGER[account]


@activity.defn(name="xc_notify")
async def notify(account: str) -> str:
    return f"notified {account}"


@workflow.defn(name="xc_pay")
async def pay(account: str, cents: int) -> dict[str, Any]:
    balance = await workflow.execute_activity(debit, account, cents)
    note = await workflow.execute_activity(notify, account)
    return {"balance": balance, "note": note}


def reset_ledger() -> None:
    LEDGER.clear()


def debited_once(result: Any, history: list[HistoryEvent]) -> bool:
    return LEDGER.get("acct-1") == -100


async def test_an_effect_outside_the_recorded_result_is_caught_where_it_shows(
    storage_url: str,
) -> None:
    report = await explore_crashes(pay, "acct-1", 100, activities=[debit, notify],
                                   url=storage_url, before_each=reset_ledger,
                                   check=debited_once)
    assert not report.ok
    assert not report.baseline_problems  # the uncrashed run is fine: only a crash shows it
    failed = report.failures
    assert [p.where for p in failed] == ["before ActivityCompleted xc_debit 0:1"]
    problems = "\n".join(failed[0].problems)
    assert "outcome {'balance': -200" in problems and "differs from the uncrashed" in problems
    assert "check returned False" in problems
    assert f"points=[{failed[0].index}]" in report.describe()
    # the failing point replays alone, and fails the same way
    alone = await explore_crashes(pay, "acct-1", 100, activities=[debit, notify],
                                  url=storage_url, before_each=reset_ledger,
                                  check=debited_once, points=[failed[0].index])
    assert [p.index for p in alone.points] == [failed[0].index]
    assert alone.points[0].problems == failed[0].problems


async def test_a_check_that_raises_fails_the_point_with_its_message() -> None:
    def never(result: Any, history: list[HistoryEvent]) -> None:
        raise AssertionError("the ledger is off")

    report = await explore_crashes(pay, "acct-2", 5, activities=[debit, notify],
                                   before_each=reset_ledger, check=never, points=[0])
    assert report.baseline_problems == ["check failed: AssertionError: the ledger is off"]
    assert report.points[0].problems == ["check failed: AssertionError: the ledger is off"]


async def test_bad_arguments_are_refused_at_the_call() -> None:
    with pytest.raises(durable.ConfigurationError, match="are not among this run's points"):
        await explore_crashes(pay, "acct-3", 5, activities=[debit, notify],
                              before_each=reset_ledger, points=[99])
    with pytest.raises(durable.ConfigurationError, match="SQLite or PostgreSQL"):
        await explore_crashes(pay, "acct-3", 5, activities=[debit, notify],
                              url="http://localhost:8000")
    with pytest.raises(durable.ConfigurationError, match="task_queues= must be a list"):
        await explore_crashes(pay, "acct-3", 5, activities=[debit, notify],
                              task_queues="default")


async def test_the_pytest_fixture_explores_and_asserts(
    durable_crash_explorer: CrashExplorer,
) -> None:
    report = await durable_crash_explorer(pay, "acct-1", 100, activities=[debit, notify],
                                          before_each=reset_ledger, points=[0, 1])
    assert [p.index for p in report.points] == [0, 1] and report.ok
    with pytest.raises(AssertionError, match="1 failed"):
        await durable_crash_explorer(pay, "acct-1", 100, activities=[debit, notify],
                                     before_each=reset_ledger, check=debited_once)
    assert len(durable_crash_explorer.reports) == 2
