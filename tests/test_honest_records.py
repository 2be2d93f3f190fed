"""Honest records (issue 21): what the history and the views say about a
stop is what happened. The nightly import cancelled mid-batch: the cleanup's
count, the history, the cascade and the rows written agree."""

from __future__ import annotations

import datetime
import io
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

import durable
from durable import activity, workflow
from durable import present as _fmt
from durable.cli import _cascade, _views
from durable.cli._app import Output

pytestmark = pytest.mark.anyio

#: per test: the warehouse file, and the gate the in-flight row waits at
WAREHOUSES: dict[str, Path] = {}
IN_FLIGHT: dict[str, threading.Event] = {}
RELEASE: dict[str, threading.Event] = {}


@activity.defn(name="hr-load-row")
def load_row(row: dict[str, Any]) -> str:
    """Write one row; the gated row waits until the test has cancelled the run."""
    night = row["night"]
    if row["id"] == row["gate"]:
        IN_FLIGHT[night].set()
        if not RELEASE[night].wait(30):
            raise RuntimeError("the test never released the gated row")
    with sqlite3.connect(WAREHOUSES[night]) as db:
        db.execute("INSERT INTO sales (night, id) VALUES (?, ?)", (night, row["id"]))
    return row["id"]


@activity.defn(name="hr-count-rows")
def count_rows(night: str) -> int:
    with sqlite3.connect(WAREHOUSES[night]) as db:
        (n,) = db.execute("SELECT COUNT(*) FROM sales WHERE night = ?", (night,)).fetchone()
    return int(n)


@workflow.defn(name="hr-import")
async def nightly(night: str, rows: int, gate: str, policy: str | None = None) -> dict[str, Any]:
    try:
        loaded = await workflow.units(
            [{"id": f"r{n}", "night": night, "gate": gate} for n in range(rows)],
            key=lambda row: row["id"], handler=load_row,
            options=durable.ActivityOptions(start_to_close_timeout=60, max_attempts=1),
            cancellation=None if policy is None else durable.CancellationPolicy(policy))
        return {"loaded": len(loaded.done)}
    finally:
        if workflow.cancellation() is not None:
            with workflow.cancellation_shield():
                counted = await workflow.execute_activity(
                    count_rows, night,
                    options=durable.ActivityOptions(start_to_close_timeout=30))
                COUNTED[night] = counted


COUNTED: dict[str, int] = {}


async def test_the_nightly_import_cancelled_mid_batch_agrees_everywhere(
        client: durable.Client, make_worker: Callable[..., durable.Worker],
        tmp_path: Path) -> None:
    """Row r3 is being written when the operator cancels: with the units'
    default policy (WAIT_CANCELLATION_COMPLETED) the batch waits for it, the
    cleanup counts 4 rows, the warehouse holds 4, the history says r3
    completed (never cancelled) and the cascade says so too."""
    night = f"n-{tmp_path.name}"
    WAREHOUSES[night] = tmp_path / "warehouse.db"
    with sqlite3.connect(WAREHOUSES[night]) as db:
        db.execute("CREATE TABLE sales (night TEXT, id TEXT PRIMARY KEY)")
    IN_FLIGHT[night], RELEASE[night] = threading.Event(), threading.Event()
    async with make_worker(workflows=[nightly], activities=[load_row, count_rows]):
        handle = await client.start(nightly, night, 8, "r3", id=f"import-{night}")
        assert await anyio.to_thread.run_sync(IN_FLIGHT[night].wait, 30)
        await handle.request_cancellation("operator: wrong file", cleanup_timeout=30)
        with anyio.fail_after(30):  # the stop is recorded before the row finishes
            while "ActivityCancelRequested" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.02)
        RELEASE[night].set()
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
    with sqlite3.connect(WAREHOUSES[night]) as db:
        (written,) = db.execute("SELECT COUNT(*) FROM sales").fetchone()
    assert written == 4
    assert COUNTED[night] == 4
    events = await handle.history()
    r3 = [e for e in events if str(e.data.get("op_id", "")).endswith("/r3")]
    kinds = [e.type for e in r3]
    assert "ActivityCompleted" in kinds and "ActivityCancelled" not in kinds, kinds
    cascade = await handle.cancellation_cascade()
    stops = cascade["runs"][0]["activity_stops"]
    assert [(s["op_id"].rsplit("/", 1)[1], s["state"]) for s in stops] == [("r3", "completed")]
    assert cascade["inspection_complete"]
    info = await handle.describe()
    assert info["progress"] is None or info["progress"]["done"] == 4
    # the closed run's cleanup deadline was met; the view says so, and when
    # the cleanup finished (not "passed N ago", which reads as an overrun)
    shown = rendered(_views.cancellation_grid(info["cancellation"], _fmt.utcnow(), False))
    assert "met, " in shown and "to spare" in shown and "cleanup finished" in shown, shown
    assert "passed" not in shown


def rendered(renderable: Any) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


async def test_try_cancel_on_units_records_a_late_completion_as_completed(
        client: durable.Client, make_worker: Callable[..., durable.Worker],
        tmp_path: Path) -> None:
    """TRY_CANCEL chosen explicitly: the workflow stops waiting at once, so the
    row in flight finishes after the run closed. Its receipt, the history
    and the cascade say it completed (its effect happened), not stopped."""
    night = f"t-{tmp_path.name}"
    WAREHOUSES[night] = tmp_path / "warehouse.db"
    with sqlite3.connect(WAREHOUSES[night]) as db:
        db.execute("CREATE TABLE sales (night TEXT, id TEXT PRIMARY KEY)")
    IN_FLIGHT[night], RELEASE[night] = threading.Event(), threading.Event()
    async with make_worker(workflows=[nightly], activities=[load_row, count_rows]):
        handle = await client.start(nightly, night, 8, "r3", "try_cancel", id=f"import-{night}")
        assert await anyio.to_thread.run_sync(IN_FLIGHT[night].wait, 30)
        await handle.request_cancellation("operator: wrong file", cleanup_timeout=30)
        with pytest.raises(durable.WorkflowCancelled):
            await handle.result()
        RELEASE[night].set()
        with anyio.fail_after(30):
            while "ActivityStopReceipt" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.02)
    events = await handle.history()
    cancelled = [e.data for e in events if e.type == "ActivityCancelled"]
    assert cancelled and cancelled[0]["attempt_running"] is True  # not "it stopped"
    refused = [e for e in events if e.type == "ActivityResultRefused"]
    assert len(refused) == 1 and refused[0].data["completed_after_stop"] is True
    assert "its effect happened" in refused[0].data["reason"]
    cascade = await handle.cancellation_cascade()
    assert [s["state"] for s in cascade["runs"][0]["activity_stops"]] == ["completed"]


@workflow.defn(name="hr-child")
async def sleepy_child() -> str:
    await workflow.sleep(3600)
    return "woke"


@workflow.defn(name="hr-parent")
async def parent_of_sleepy() -> str:
    return await workflow.execute_child(sleepy_child, id=f"{workflow.info().workflow_id}-child")


async def test_a_terminated_parent_shows_its_cancelled_childs_real_end(
        client: durable.Client, make_worker: Callable[..., durable.Worker],
        tmp_path: Path) -> None:
    """The parent is terminated; its parent-close policy cancels the child.
    The parent's describe and CLI show the child's end, not an open op."""
    parent_id = f"parent-{tmp_path.name}"
    async with make_worker(workflows=[parent_of_sleepy, sleepy_child]):
        handle = await client.start(parent_of_sleepy, id=parent_id)
        child = client.get_handle(f"{parent_id}-child")
        with anyio.fail_after(30):
            while True:
                try:
                    if any(p["kind"] == "timer" for p in
                           (await child.describe())["pending_operations"]):
                        break
                except durable.WorkflowNotFound:
                    pass
                await anyio.sleep(0.02)
        await handle.terminate("operator: stop the tree")
        with pytest.raises(durable.WorkflowCancelled):
            await child.result()
    info = await handle.describe()
    ops = [op for op in info["pending_operations"] if op["kind"] == "child"]
    assert len(ops) == 1
    assert ops[0]["child_status"] == "cancelled" and ops[0]["child_closed_at"] is not None
    shown = rendered(_views.describe_renderable(Output(), info,
                                                _fmt.utcnow()))
    assert "Operations open when the run closed" in shown and "ended cancelled" in shown, shown
    # the cascade of the parent's close shows what happened to the child
    cascade = await handle.cancellation_cascade()
    assert cascade["root"] is None
    assert [(r["workflow_id"], r["status"]) for r in cascade["runs"]] == [
        (parent_id, "terminated"), (f"{parent_id}-child", "cancelled")]
    propagation = cascade["runs"][0]["child_propagation"][f"{parent_id}-child"]
    assert propagation["outcome"] == "cancelled"
    tree = rendered(_cascade.cascade_tree(Output(), {**cascade, "workflow_id": parent_id},
                                        _fmt.utcnow()))
    assert "did to its children" in tree and f"{parent_id}-child" in tree, tree


def test_the_ui_shows_the_end_of_a_child_the_closed_parent_never_heard_of() -> None:
    from durable.http.ui import views
    events = [{"type": "ChildWorkflowScheduled", "recorded_at": "2026-04-12T12:00:00+00:00",
               "data": {"child_workflow_id": "c1", "workflow_type": "child"}}]
    pending = [{"kind": "child", "child_workflow_id": "c1", "child_status": "cancelled",
                "child_closed_at": "2026-04-12T12:00:01+00:00"}]
    assert views.children(events)[0]["outcome"] is None
    assert views.children(events, pending)[0]["outcome"] == "cancelled"


@workflow.defn(name="hr-approval")
class Approval:
    def __init__(self) -> None:
        self.by: str | None = None

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.by is not None)
        return f"approved by {self.by}"

    @workflow.signal
    def approve(self, by: str) -> None:
        self.by = by

    @workflow.update
    def approve_now(self, by: str) -> str:
        self.by = by
        return f"ok {by}"


@pytest.mark.remote_client
async def test_a_signal_records_who_sent_it(
        client: durable.Client, make_worker: Callable[..., durable.Worker],
        tmp_path: Path) -> None:
    """"Who approved this order" has an answer: the requester and source go
    with the signal into the history, describe() and the CLI's describe."""
    handle = await client.start(Approval, id=f"approval-{tmp_path.name}")
    await handle.signal("approve", "ana", requester={"type": "user", "id": "ana"},
                        source="ops-portal")
    async with make_worker(workflows=[Approval]):
        assert await handle.result() == "approved by ana"
    sender = {"requester": {"type": "user", "id": "ana"}, "source": "ops-portal"}
    received = [e.data for e in await handle.history() if e.type == "SignalReceived"]
    assert received[0]["sender"] == sender
    info = await handle.describe()
    assert [(r["name"], r["sender"]) for r in info["received"]] == [("approve", sender)]
    shown = rendered(_views.describe_renderable(Output(), info, _fmt.utcnow()))
    assert "by user ana via ops-portal" in shown, shown
    history = rendered(_views.history_table(
        [{"sequence": 1, "type": "SignalReceived", "recorded_at": None, "data": received[0]}],
        None))
    assert "sent by user ana via ops-portal" in history


async def test_a_signal_without_a_requester_says_the_client_sent_it(
        client: durable.Client, tmp_path: Path) -> None:
    handle = await client.start(Approval, id=f"approval-anon-{tmp_path.name}")
    await handle.signal("approve", "bo")
    data = next(e.data for e in await handle.history() if e.type == "SignalReceived")
    assert data["sender"] == {"requester": {"type": "client", "id": None, "label": None},
                              "source": "client"}
    with pytest.raises(durable.ConfigurationError, match="source"):
        await handle.signal("approve", "bo", source="")


def test_the_review_hint_names_the_cli_command_and_its_flags() -> None:
    from durable.failure import Failure
    message = Failure.units_unknown(["r0"], "load-row", "night-1").message or ""
    assert "durable retry-after-review night-1 --units rerun" in message
    assert "--units confirm" in message


@pytest.mark.remote_client
async def test_an_update_records_who_sent_it(
        client: durable.Client, make_worker: Callable[..., durable.Worker],
        tmp_path: Path) -> None:
    handle = await client.start(Approval, id=f"approval-upd-{tmp_path.name}")
    async with make_worker(workflows=[Approval]):
        assert await handle.update("approve_now", "ana", requester={"type": "user",
                                                                    "id": "ana"},
                                   source="ops-portal") == "ok ana"
        assert await handle.result() == "approved by ana"
    sender = {"requester": {"type": "user", "id": "ana"}, "source": "ops-portal"}
    accepted = [e.data for e in await handle.history() if e.type == "UpdateAccepted"]
    assert accepted[0]["sender"] == sender
    info = await handle.describe()
    assert [(r["kind"], r["name"], r["sender"]) for r in info["received"]] == [
        ("update", "approve_now", sender)]
    assert "by user ana via ops-portal" in rendered(
        _views.describe_renderable(Output(), info, _fmt.utcnow()))
    left = await client.store.driver.run(  # type: ignore[union-attr]
        lambda tx: _count_senders()) if client.embedded else 0
    assert left == 0  # moved into the inbox, not left behind


def _count_senders() -> Any:
    from durable.driver import q1
    row = yield q1("SELECT COUNT(*) AS n FROM request_senders")
    return int(row["n"])


async def test_a_run_closed_before_its_cleanup_ran_never_reads_as_a_met_deadline(
        client: durable.Client, tmp_path: Path) -> None:
    """Cancellation requested, then the run closed by `cancel()` before any
    worker delivered it (the worker was gone): no cleanup ran. The cleanup
    deadline was not "met, 28s to spare", and the close is not "cleanup
    finished": describe, the cascade and the web UI say no cleanup ran, and
    when the run closed against the deadline."""
    handle = await client.start(nightly, f"u-{tmp_path.name}", 8, "r3",
                                id=f"import-u-{tmp_path.name}")  # no worker: never delivered
    await handle.request_cancellation("worker lost", cleanup_timeout=30)
    await handle.cancel("no worker left")
    info = await handle.describe()
    assert info["cancellation"]["cleanup_outcome"] == "not_delivered"
    shown = rendered(_views.cancellation_grid(info["cancellation"], _fmt.utcnow(), False))
    assert "no cleanup ran: closed " in shown and " before it" in shown, shown
    assert "closed without cleanup" in shown, shown
    assert "met, " not in shown and "cleanup finished" not in shown, shown
    cascade = await handle.cancellation_cascade()
    tree = rendered(_cascade.cascade_tree(Output(), {**cascade, "workflow_id": handle.workflow_id},
                                          _fmt.utcnow()))
    assert tree.count("no cleanup ran: closed ") == 2 and "met, " not in tree, tree
    from durable.http.ui import views  # the web UI's helper, on the same record
    html = str(views.deadline(info["cancellation"]["deadline_at"], _fmt.utcnow(), False,
                              info["cancellation"]["closed_at"],
                              info["cancellation"]["cleanup_outcome"]))
    assert "no cleanup ran" in html and 'class="deadline cut"' in html and "met" not in html


@workflow.defn(name="honest_waits")
async def honest_waits() -> str:
    await workflow.sleep(3600)
    return "woke"


@pytest.mark.parametrize("close", ["terminate", "run_timeout"])
async def test_a_run_closed_otherwise_before_delivery_says_no_cleanup_ran(
        client: durable.Client, tmp_path: Path, close: str) -> None:
    """A request recorded, then the run closed another way (terminated, timed
    out; a run that completed in the same race read so too) before any worker
    delivered it: no cleanup ran. The record said ``cleanup_outcome``
    ``terminated`` / ``timed_out`` ("cleanup cut short by ...") and, for a run
    that completed, ``completed`` ("cleanup finished, deadline met")."""
    options = (durable.StartOptions().with_run_timeout(1) if close == "run_timeout"
               else durable.StartOptions())
    handle = await client.start(honest_waits, id=f"undelivered-{close}-{tmp_path.name}",
                                options=options)  # no worker: never delivered
    await handle.request_cancellation("stop", cleanup_timeout=30)
    if close == "terminate":
        await handle.terminate("operator")
    else:  # enforced once its 1 s run timeout has passed (polled, not a fixed sleep)
        with anyio.fail_after(20):
            while await client.repair_pass() != {"run_timeout": 1}:
                await anyio.sleep(0.05)
    info = await handle.describe()
    expected = "terminated" if close == "terminate" else "timed_out"
    assert info["status"] == expected
    assert info["cancellation"]["lifecycle"] == expected
    assert info["cancellation"]["cleanup_outcome"] == "not_delivered"
    shown = rendered(_views.cancellation_grid(info["cancellation"], _fmt.utcnow(), False))
    assert "no cleanup ran" in shown and "cut short" not in shown, shown
    assert "met, " not in shown and "cleanup finished" not in shown, shown


@activity.defn(name="hr-unserved")
def unserved_step() -> None:  # no worker of its queue ever runs it
    raise AssertionError("not claimed by any worker in this test")


@workflow.defn(name="hr-waits-for-an-attempt")
async def waits_for_an_attempt() -> None:
    await workflow.execute_activity(
        unserved_step, options=durable.ActivityOptions(task_queue="hr-nobody-serves"))


async def test_a_closed_runs_unclaimed_attempt_is_verified_as_stopped(
        client: durable.Client, make_worker: Callable[..., durable.Worker],
        tmp_path: Path) -> None:
    """An attempt waiting in a queue, never claimed, is cancelled in storage
    when its run closes (here: its cancellation's cleanup deadline expired
    with no worker to deliver it): nothing can run it, and its receipt says
    so (``not_started``). The cascade said "NOT VERIFIED: ... its worker
    (None) is gone or it was fenced" and "inspection incomplete"."""
    handle = await client.start(waits_for_an_attempt, id=f"unclaimed-{tmp_path.name}")
    async with make_worker(workflows=[waits_for_an_attempt]):
        with anyio.fail_after(20):  # the workflow's code scheduled its activity
            while "ActivityScheduled" not in [e.type for e in await handle.history()]:
                await anyio.sleep(0.02)
    await handle.request_cancellation("stop", cleanup_timeout=0.2)
    with anyio.fail_after(20):  # no worker: the repair pass enforces the deadline
        while (await handle.describe())["status"] != "cancelled":
            await client.repair_pass()
            await anyio.sleep(0.05)
    view = await handle.cancellation_cascade()
    assert view["findings"] == [] and view["inspection_complete"] is True, view
    [stop] = view["runs"][0]["activity_stops"]
    assert stop["state"] == "stopped" and stop["stop_receipt"]["kind"] == "not_started", stop
    cancelled = [e for e in await handle.history() if e.type == "ActivityCancelled"]
    assert cancelled[-1].data["stop_receipt"]["kind"] == "not_started"


def test_an_abandoned_child_still_running_does_not_make_the_cleanup_deadline_late() -> None:
    """The tree's root met its cleanup deadline; a child its policy abandons
    keeps running by design. The cascade's header read "(2.5s late)" beside
    "verified", growing for as long as the abandoned child ran."""
    from durable.http.ui import cascade as ui_cascade

    now = _fmt.utcnow()
    deadline = now - datetime.timedelta(seconds=3)
    closed = now - datetime.timedelta(seconds=8)
    data = {
        "workflow_id": "root",
        "root": {"request_id": "r", "deadline_at": deadline.isoformat(), "source": "client",
                 "requested_at": (closed - datetime.timedelta(seconds=1)).isoformat(),
                 "cleanup_timeout_seconds": 10.0},
        "inspection_complete": True, "findings": [], "truncated": False,
        "runs": [
            {"workflow_id": "root", "run_id": "1", "status": "cancelled",
             "lifecycle": "cancelled", "cleanup_outcome": "completed",
             "cleanup_closed_at": closed.isoformat(), "activity_stops": []},
            {"workflow_id": "kept", "run_id": "2", "status": "running",
             "lifecycle": "not_requested", "activity_stops": []},
        ],
        "edges": [{"parent_run_id": "1", "child_workflow_id": "kept", "child_run_id": "2",
                   "policy": "parent_close:abandon"}],
    }
    header = rendered(_cascade.cascade_tree(Output(), data, now)).splitlines()
    line = next(x for x in header if "cleanup deadline" in x)
    assert "late" not in line and "met, 5s to spare" in line, line
    assert ui_cascade.cascade_tree(data)["any_open"] is False
    # while a run asked to stop is still open, the deadline is judged as open
    asked = {**data, "runs": [data["runs"][0], {**data["runs"][1],
                                                "lifecycle": "cleaning_up"}]}
    line = next(x for x in rendered(_cascade.cascade_tree(Output(), asked, now)).splitlines()
                if "cleanup deadline" in x)
    assert "3s late" in line, line
