"""`durable.testing.explore_crashes`: the worker killed at every durable point of
a run, the run recovered by a fresh worker and checked; the examples pass at
every point, a workflow whose activity has an effect outside its recorded
result is caught at the point that shows it, and that point replays alone."""

from __future__ import annotations

import sqlite3
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import POSTGRES_URL, require_postgres

import durable
from durable import activity, workflow
from durable.store.records import HistoryEvent
from durable.testing import CrashExplorationWarning, CrashReport, explore_crashes
from durable.testing.pytest_plugin import CrashExplorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import approval as approval_example
import nightly_import as nightly_example
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


async def wait_then_approve(handle: durable.WorkflowHandle) -> None:
    """The approval example's application: once the purchase waits, an approval
    over the limit (refused), the limit raised by an update, the approval again."""
    clock = handle.client.clock  # virtual: the waits between queries cost no real time
    while True:
        try:
            # a worker answers in milliseconds; a query sent as the worker is
            # killed is not answered and waits out its timeout (real time: the
            # default 10 s, at about one point of each PostgreSQL exploration),
            # then it is asked again
            if (await handle.query("progress", timeout=2))["stage"] == "waiting for approval":
                break
        except durable.DurableError:  # no worker holds the run at this instant
            pass
        await clock.sleep_until(clock.now() + 0.05)
    await handle.signal("approve", "ann")
    assert await handle.update("set_limit", 5000) == 1000
    await handle.signal("approve", "ann")


async def test_every_crash_point_of_the_approval_example_recovers(storage_url: str) -> None:
    activities = [approval_example.reserve, approval_example.release, approval_example.pay]
    approved = await explore_crashes(approval_example.PurchaseApproval, "p-7", 2500, 60.0,
                                     activities=activities, url=storage_url,
                                     interact=wait_then_approve)
    assert_every_point_passes(approved)
    assert approved.outcome == {"purchase": "p-7",
                                "outcome": "paid hold-p-7-2500 (approved by ann)",
                                "refused": ["ann: 2500 is over the limit of 1000"]}
    wheres = " | ".join(point.where for point in approved.points)
    assert "before UpdateAccepted" in wheres and "before UpdateCompleted" in wheres
    assert "SignalDelivered" in wheres and "before ConditionSatisfied" in wheres
    if storage_url.startswith("postgres"):
        return  # the timer path below is the same engine path on both drivers
    # nobody answers: the durable timer of the wait times out at every point too
    timed_out = await explore_crashes(approval_example.PurchaseApproval, "p-8", 2500, 0.5,
                                      activities=activities, url=storage_url)
    assert_every_point_passes(timed_out)
    assert timed_out.outcome["outcome"] == "no approval in time, money released"
    assert any(p.where.startswith("before ConditionTimedOut") for p in timed_out.points)


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "warehouse.db"
    monkeypatch.setattr(nightly_example, "WAREHOUSE", path)
    # a short night: each row adds three points (scheduled, started, completed);
    # three rows show every kind of point in a third of the time of eight
    monkeypatch.setattr(nightly_example, "ROWS_PER_NIGHT", 3)
    return path


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # real time (~15 s): one loop
async def test_every_crash_point_of_the_nightly_import_recovers(warehouse: Path) -> None:
    """Real I/O (HTTP, a child process, a SQLite warehouse): real time. A crash
    between a row's write and its record leaves that unit unknown; the
    operator (`review`) finds the row in the warehouse and confirms it.
    (Trio and PostgreSQL are covered by the other examples; this one's figures
    on both: docs/benchmarks.md.)"""

    def empty_warehouse() -> None:
        warehouse.unlink(missing_ok=True)
        with sqlite3.connect(warehouse) as db:
            db.execute("CREATE TABLE sales (night TEXT, id TEXT PRIMARY KEY, customer TEXT, "
                       "cents INTEGER)")
            db.execute("CREATE TABLE notes (night TEXT, note TEXT)")

    reviews: list[dict[str, Any]] = []

    async def operator(handle: durable.WorkflowHandle) -> None:
        progress = (await handle.describe())["progress"]
        reviews.append(progress)
        rows = nightly_example.warehouse_rows("n1")
        await handle.retry_after_review(units="confirm" if rows > progress["done"] else "rerun")

    def each_row_once(result: Any, history: list[HistoryEvent]) -> bool:
        return nightly_example.warehouse_rows("n1") == nightly_example.ROWS_PER_NIGHT

    with nightly_example.source_service() as source:
        report = await explore_crashes(
            nightly_example.nightly_import, "n1", source, 0.0, time_skipping=False,
            activities=[nightly_example.fetch_rows, nightly_example.normalise,
                        nightly_example.load_row, nightly_example.record_partial_load],
            task_queues=["default", "warehouse"], before_each=empty_warehouse,
            options=durable.StartOptions(execution_timeout=3600), review=operator,
            check=each_row_once, seconds_per_run=60)
    assert_every_point_passes(report)
    assert report.outcome == {"night": "n1", "loaded": 3}
    lost_writes = [p for p in report.points
                   if p.where.startswith("before ActivityCompleted load-row")]
    assert len(lost_writes) == nightly_example.ROWS_PER_NIGHT
    assert len(reviews) == len(lost_writes)  # each such crash, and only those, asked
    assert all(p.executions["load-row"] == nightly_example.ROWS_PER_NIGHT for p in lost_writes)


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
    # what ran is shown: the debit twice, for one recorded attempt
    assert ("activity executions (the killed worker's and the recovery's): xc_debit 2, "
            "xc_notify 1") in report.describe()
    # the failing point replays alone, and fails the same way
    alone = await explore_crashes(pay, "acct-1", 100, activities=[debit, notify],
                                  url=storage_url, before_each=reset_ledger,
                                  check=debited_once, points=[failed[0].index])
    assert [p.index for p in alone.points] == [failed[0].index]
    assert alone.points[0].problems == failed[0].problems


@activity.defn(name="xc_refuse")
async def refuse(account: str) -> None:
    raise ValueError(f"account {account} is closed")  # retried, then the run fails


@workflow.defn(name="xc_closed")
async def closed_account(account: str) -> None:
    await workflow.execute_activity(notify, account)
    await workflow.execute_activity(refuse, account)


async def test_a_run_that_fails_fails_the_same_way_after_every_crash() -> None:
    # it passes, and warns: a workflow broken before any crash would pass the
    # same way (until a check says the failure is what is tested)
    with pytest.warns(CrashExplorationWarning,
                      match=r"the uncrashed run of xc_closed did not complete \(WorkflowFailed: "
                            r".*account acct-5 is closed.*pass check= to say so"):
        report = await explore_crashes(closed_account, "acct-5", activities=[notify, refuse])
    assert_every_point_passes(report)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CrashExplorationWarning)
        await explore_crashes(closed_account, "acct-5", activities=[notify, refuse], points=[0],
                              check=lambda result, history: "closed" in str(result))
    assert isinstance(report.outcome, durable.WorkflowFailed)
    assert "account acct-5 is closed" in str(report.outcome)
    assert all(type(p.outcome) is durable.WorkflowFailed for p in report.points)
    wheres = [p.where for p in report.points]
    assert any(w.startswith("before WorkflowFailed") for w in wheres)
    assert sum(w.startswith("before ActivityRetryScheduled xc_refuse") for w in wheres) == 2
    # a crash before the last attempt's failure is recorded costs that attempt:
    # the run fails because the worker was lost, which is the same outcome
    last = next(p for p in report.points if p.where.startswith("before ActivityFailed"))
    assert "stopped renewing its lease" in str(last.outcome) and last.ok


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
    with pytest.raises(durable.ConfigurationError, match=r"points=\[\] explores no point"):
        await explore_crashes(pay, "acct-3", 5, activities=[debit, notify], points=[])
    with pytest.raises(durable.ConfigurationError, match="SQLite or PostgreSQL"):
        await explore_crashes(pay, "acct-3", 5, activities=[debit, notify],
                              url="http://localhost:8000")
    with pytest.raises(durable.ConfigurationError, match="task_queues= must be a list"):
        await explore_crashes(pay, "acct-3", 5, activities=[debit, notify],
                              task_queues="default")


async def test_a_run_that_never_ends_explores_nothing_and_names_what_it_waits_for() -> None:
    """The activity is left out of activities=: the uncrashed run waits for a
    worker that never comes. Before, every point was then run to the same
    bound (points x seconds_per_run) and each reported a timeout unlike the
    uncrashed run's timeout, none saying why."""
    report = await explore_crashes(pay, "acct-4", 5, activities=[debit],
                                   before_each=reset_ledger, seconds_per_run=1)
    assert not report.ok and report.points == []
    [problem] = report.baseline_problems
    assert "the run did not end within 1 s (seconds_per_run)" in problem
    assert ("it asked for activity 'xc_notify', which the exploration's worker does not "
            "register: pass it in activities=") in problem
    assert problem.endswith("no crash point was explored (each needs the run to end)")


async def test_the_pytest_fixture_explores_and_asserts(
    durable_crash_explorer: CrashExplorer,
) -> None:
    report = await durable_crash_explorer(pay, "acct-1", 100, activities=[debit, notify],
                                          before_each=reset_ledger, points=[0, 1])
    assert [p.index for p in report.points] == [0, 1] and report.ok
    with pytest.raises(AssertionError, match="1 failed") as caught:
        await durable_crash_explorer(pay, "acct-1", 100, activities=[debit, notify],
                                     before_each=reset_ledger, check=debited_once)
    # the hint replays the point the way this test explored it
    assert "replay one alone: await durable_crash_explorer(..., points=[2])" in str(caught.value)
    assert len(durable_crash_explorer.reports) == 2


async def test_the_killed_workers_storage_rolls_back_the_crossing_write_and_refuses_the_rest(
) -> None:
    """The mechanism under every point: the write that would record past the
    point is rolled back whole and kills; nothing after it reaches storage."""
    from durable.driver import Tx, ex, q1
    from durable.testing.crashes import _KillableDriver

    def bump(label: str) -> Any:  # a write that records "history": the run's counter + 1
        def program(tx: Tx) -> Any:
            yield ex("UPDATE runs SET event_seq = event_seq + 1 WHERE namespace = 'default'")
            yield ex("UPDATE runs SET closed_reason = ? WHERE namespace = 'default'", label)
        return program

    def progress(tx: Tx) -> Any:
        row = yield q1("SELECT event_seq, closed_reason FROM runs WHERE namespace = 'default'")
        return int(row["event_seq"]), row["closed_reason"]

    async with durable.connect("sqlite://:memory:") as client:
        await client.start(pay, "acct-9", 1, id="acct-9")  # WorkflowStarted: 1 event
        view = _KillableDriver(client.driver, "default", limit=2)
        await view.run(bump("first"))  # 1 -> 2: not past the point
        assert await client.driver.run(progress, write=False) == (2, "first")
        assert view.writes == [(1, 2)] and not view.killed.is_set()
        with pytest.raises(durable.StorageClosed, match="killed"):
            await view.run(bump("second"))  # 2 -> 3 would pass it: rolled back whole, killed
        assert view.killed.is_set()
        assert await client.driver.run(progress, write=False) == (2, "first")
        with pytest.raises(durable.StorageClosed, match="killed"):
            await view.run(progress, write=False)  # a dead worker reads nothing either
