"""Helpers for the store's unit tests: start, claim and commit with explicit times.

Every program takes `now`, so these tests set time by argument: T0 is "now",
and a test moves it on by passing T0 + seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable.driver import Program, Row, Wake, q
from durable.options import ActivityOptions
from durable.store import Store
from durable.store.records import (
    ClaimedRun,
    CommitResult,
    HistoryEvent,
    RunRecord,
    StartRequest,
)
from durable.store.writes import RunWrites, ScheduleActivity, Write

T0 = 1_700_000_000.0
NS = "default"
WF = "unit_flow"
CAPS = ("cooperative_cancellation", "activity_supervision")


def request(workflow_id: str = "wf-1", **fields: Any) -> StartRequest:
    """A start request with test defaults; `fields` override them."""
    values: dict[str, Any] = {
        "namespace": NS, "workflow_id": workflow_id, "workflow_type": WF,
        "task_queue": "default", "input": "[1]", "id_reuse": "reject_duplicate",
        "execution_timeout": None, "run_timeout": None,
    }
    values.update(fields)
    return StartRequest(**values)


async def start(store: Store, workflow_id: str = "wf-1", now: float = T0,
                **fields: Any) -> str:
    """Start an instance; its run id."""
    result = await store.start_workflow(request(workflow_id, **fields), now)
    return result.run_id


async def claim_one(store: Store, worker: str = "w1", now: float = T0, lease: float = 30.0,
                    capabilities: tuple[str, ...] = CAPS, types: tuple[str, ...] = (WF,),
                    task_queue: str = "default") -> ClaimedRun:
    claimed = await store.claim_runs(NS, task_queue, worker, types, 1, lease, now, capabilities)
    assert len(claimed) == 1, f"expected one runnable run, claimed {claimed!r}"
    return claimed[0]


async def started_and_claimed(store: Store, workflow_id: str = "wf-1", now: float = T0,
                              worker: str = "w1", **fields: Any) -> RunRecord:
    """A run owned by `worker` (epoch 1), on a task queue of its own (named
    after the instance) so that other runnable runs are not claimed with it."""
    fields.setdefault("task_queue", workflow_id)
    await start(store, workflow_id, now, **fields)
    claimed = await claim_one(store, worker, now, task_queue=fields["task_queue"])
    assert claimed.run.workflow_id == workflow_id
    return claimed.run


async def commit(store: Store, run: RunRecord, *writes: Write, now: float = T0,
                 epoch: int | None = None) -> CommitResult:
    """Commit `writes` for one run under its epoch (or the one given)."""
    batch = RunWrites(run.run_id, run.epoch if epoch is None else epoch, list(writes))
    [result] = await store.commit([batch], now)
    return result


async def current(store: Store, workflow_id: str = "wf-1",
                  run_id: str | None = None) -> RunRecord:
    run = await store.get_run(NS, workflow_id, run_id)
    assert run is not None
    return run


async def history(store: Store, run_id: str) -> list[HistoryEvent]:
    return await store.history(run_id)


async def types(store: Store, run_id: str) -> list[str]:
    return [e.type for e in await store.history(run_id)]


async def events_of(store: Store, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in await store.history(run_id) if e.type == kind]


def _select(sql: str, params: tuple[Any, ...]) -> Program[list[Row]]:
    rows = yield q(sql, *params)
    return list(rows)


async def rows(store: Store, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Rows of a read-only query, as dicts (to look at what the programs wrote)."""
    found = await store.driver.run(lambda tx: _select(sql, params), write=False)
    return [dict(r) for r in found]


async def row(store: Store, sql: str, *params: Any) -> dict[str, Any]:
    found = await rows(store, sql, *params)
    assert len(found) == 1, f"expected one row for {sql!r}, got {found!r}"
    return found[0]


async def task_of(store: Store, task_id: str) -> dict[str, Any]:
    return await row(store, "SELECT * FROM activity_tasks WHERE task_id = ?", task_id)


async def op_of(store: Store, run_id: str, op_id: str) -> dict[str, Any]:
    return await row(store, "SELECT * FROM ops WHERE run_id = ? AND op_id = ?", run_id, op_id)


def schedule(op_id: str = "0:1", name: str = "ship", task_id: str | None = None,
             task_queue: str = "default", input: str = '["box"]',
             **options: Any) -> ScheduleActivity:
    """A remote activity's scheduling write; `options` are ActivityOptions fields."""
    snapshot = ActivityOptions(**options).snapshot()
    return ScheduleActivity(op_id, name, task_id or f"task-{op_id}", task_queue, input, snapshot)


class Wakes:
    """Collects the wake-ups the driver publishes after each commit."""

    def __init__(self, store: Store) -> None:
        self.seen: list[Wake] = []
        self.unsubscribe: Callable[[], None] = store.hub.subscribe(self.seen.append)

    def keys(self) -> list[tuple[str, ...]]:
        return [w.key for w in self.seen]
