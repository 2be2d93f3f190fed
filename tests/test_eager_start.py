"""Eager starts: a worker of the starting process takes the run in the start's
transaction (`durable._runtime.eager`), only where its claim would have taken
it at once, and a run so taken lives as a claimed one does: a start whose
answer was lost, a worker that stops, a worker SIGKILLed with it.

On PostgreSQL the start stays one self-committing statement, the take and
the queue's limits read in it (`durable.store.start_statement.start_in_one`); a
start that replaces a closed instance is a transaction there too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from eager_app import EagerGate

import durable
from durable import IdReusePolicy, QueueLimits, StartOptions, workflow
from durable._runtime.claiming import CLAIM_BATCH, CLAIM_START
from durable.errors import StorageUnavailable
from durable.store import unknown
from durable.store.records import RunStatus, StartRequest

pytestmark = pytest.mark.anyio

APP = Path(__file__).with_name("eager_app.py")


@workflow.defn(name="eager_echo")
async def eager_echo(n: int) -> int:
    return n


async def test_a_start_with_a_free_local_slot_is_taken_in_its_own_transaction(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
) -> None:
    client = storage_client
    worker = make_worker(workflows=[EagerGate, eager_echo], build_id="v1")
    async with worker:
        await worker.runs.claim_now()
        claimed = worker.runs.claimed
        handle = await client.start(EagerGate, 3, id="eager-1")
        run = await client.store.get_run(client.namespace, "eager-1")
        assert run is not None
        assert worker.eager.taken == 1
        # owned as a claim would own it: epoch 1, its lease, its build
        assert (run.owner, run.epoch, run.status) == (worker.worker_id, 1, RunStatus.RUNNING)
        assert run.started_build == run.last_build == "v1"
        assert (await handle.describe())["status"] == "running"
        await handle.signal("open", "test")
        assert await handle.result() == {"n": 3, "opened_by": "test"}
        assert await client.execute(eager_echo, 5, id="eager-2") == 5
        assert worker.eager.taken == 2
        assert worker.runs.claimed == claimed  # no claim took either
        assert worker.eager.reserved == 0
        history = [e.type for e in await handle.history()]
        assert history[0] == "WorkflowStarted" and history[-1] == "WorkflowCompleted"


@pytest.mark.parametrize("why", ["key", "limited", "disabled", "other_queue", "not_its_type"])
async def test_a_start_its_claim_must_decide_is_left_to_the_claim(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker], why: str,
) -> None:
    """A concurrency key's slots, a queue's limits are a claim's to honour; a
    worker built with ``eager_starts=False`` takes none; a worker takes only
    its own queue's and types' starts."""
    client = storage_client
    if why == "limited":
        await client.set_queue_limits("default", QueueLimits(max_running=10))
    worker = make_worker(workflows=[eager_echo] if why != "not_its_type" else [EagerGate],
                         eager_starts=why != "disabled")
    other = make_worker(workflows=[eager_echo], task_queue="other",
                        eager_starts=False) if why in ("other_queue", "not_its_type") else None
    options = StartOptions(concurrency_key="k") if why == "key" else None
    queue = "other" if why in ("other_queue", "not_its_type") else None
    async with worker:
        await worker.runs.claim_now()
        handle = await client.start(eager_echo, 4, id=f"claimed-{why}", options=options,
                                    task_queue=queue)
        assert worker.eager.taken == 0 and worker.eager.reserved == 0
        if other is None:
            assert await handle.result() == 4
        else:
            async with other:
                assert await handle.result() == 4
            assert other.runs.claimed == 1


@workflow.defn(name="eager_fails")
async def eager_fails(n: int) -> int:
    raise durable.ApplicationError(f"failed with {n}", non_retryable=True)


async def test_a_start_that_replaces_a_failed_instance_or_returns_an_open_one(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
) -> None:
    """A start that replaces a failed instance (a transaction on every driver)
    is taken too; one that returns the open run already there takes nothing
    and gives its reserved slot back."""
    client = storage_client
    worker = make_worker(workflows=[eager_fails, EagerGate])
    async with worker:
        await worker.runs.claim_now()
        first = await client.start(eager_fails, 1, id="again")
        with pytest.raises(durable.WorkflowFailed):
            await first.result()
        again = await client.start(eager_fails, 2, id="again", options=StartOptions(
            id_reuse=IdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY))
        assert again.run_id != first.run_id and worker.eager.taken == 2
        with pytest.raises(durable.WorkflowFailed):
            await again.result()
        gate = await client.start(EagerGate, 3, id="open")
        same = await client.start(EagerGate, 4, id="open", options=StartOptions(
            id_reuse=IdReusePolicy.RETURN_EXISTING_ACTIVE))
        assert same.run_id == gate.run_id
        assert worker.eager.taken == 3 and worker.eager.reserved == 0
        await gate.signal("open", "test")
        assert (await same.result())["n"] == 3


async def test_a_full_worker_takes_no_start_and_claims_it_once_a_slot_frees(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
) -> None:
    client = storage_client
    # (not putting the waiting run down to make room: tests/test_relief.py)
    worker = make_worker(workflows=[EagerGate, eager_echo], max_concurrent_runs=1,
                         release_waiting_runs=False)
    async with worker:
        await worker.runs.claim_now()
        first = await client.start(EagerGate, 1, id="full-1")
        await worker.runs.claim_now()  # taken or claimed: it holds the one slot
        assert len(worker.executors) == 1
        taken = worker.eager.taken
        second = await client.start(eager_echo, 2, id="full-2")
        assert worker.eager.taken == taken
        run = await client.store.get_run(client.namespace, "full-2")
        assert run is not None and run.owner is None and run.status == RunStatus.PENDING
        await first.signal("open", "test")
        assert await second.result() == 2
        assert (await first.result())["n"] == 1


async def test_ready_work_waiting_for_the_claim_is_not_overtaken(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
) -> None:
    """While its last claim left ready runs, or a wake-up announced work it has
    not claimed, a worker takes a start only with a slot to spare beyond its
    next claim's batch; none while the queue's limits held some back, a claim
    under way fills its room, a claim's outcome must be cleared up first, or
    it is not serving, nor a start made on another thread: the claim takes
    the ready runs in their order (priority, age)."""
    client = storage_client
    # room for exactly one first claim's batch (slow start): no slot to spare
    worker = make_worker(workflows=[eager_echo], max_concurrent_runs=CLAIM_START)
    request = StartRequest(namespace=client.namespace, workflow_id="w", workflow_type="eager_echo",
                           task_queue="default", input="[1]", id_reuse="allow_duplicate",
                           execution_timeout=None, run_timeout=None)
    assert worker.eager.offer(request, "r0") is None  # not started yet
    async with worker:
        await worker.runs.claim_now()
        runs = worker.runs
        states: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
            ("left", lambda: setattr(runs, "left", 1), lambda: setattr(runs, "left", 0)),
            ("held", lambda: setattr(runs, "held", 1), lambda: setattr(runs, "held", 0)),
            ("claiming", lambda: setattr(runs, "claiming", worker.max_concurrent_runs),
             lambda: setattr(runs, "claiming", 0)),
            ("failed", lambda: setattr(worker.run_claims, "failed", True),
             lambda: setattr(worker.run_claims, "failed", False)),
            ("outage", lambda: setattr(worker.outage, "down", True),
             lambda: setattr(worker.outage, "down", False)),
        ]
        for name, enter, leave in states:
            enter()
            assert worker.eager.offer(request, f"r-{name}") is None, name
            leave()
        # a start made on another thread (another loop): the worker's task group
        # is not that thread's to start a run in
        assert await anyio.to_thread.run_sync(worker.eager.offer, request, "r-thread") is None
        runs.trigger.set()  # a wake-up announced work: the claim goes first
        assert worker.eager.offer(request, "r-woken") is None
        # slots to spare beyond the next claim's batch, and beyond a claim the
        # watchdog's poke may have begun meanwhile (`claiming`, at most a batch)
        worker.max_concurrent_runs = 2 * CLAIM_BATCH + 1
        taker = worker.eager.offer(request, "r-1")
        assert taker is not None and taker.worker_id == worker.worker_id
        assert worker.eager.reserved == 1 and worker.run_room() == worker.max_concurrent_runs - 1
        worker.eager.settle("r-1", None, failed=False)
        assert worker.eager.reserved == 0 and not worker.eager.in_flight
    assert worker.eager.offer(request, "r-2") is None  # stopped
    assert worker.eager not in client.store.takers


async def test_a_taken_start_whose_answer_was_lost_is_read_back_and_still_taken(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = storage_client
    real = unknown._start
    lost: list[str] = []

    async def answer_lost(*args: Any, **kwargs: Any) -> Any:
        started = await real(*args, **kwargs)
        if not lost:
            lost.append(started.run_id)
            raise StorageUnavailable("the connection broke during COMMIT", outcome_unknown=True)
        return started

    monkeypatch.setattr(unknown, "_start", answer_lost)
    worker = make_worker(workflows=[eager_echo])
    async with worker:
        await worker.runs.claim_now()
        handle = await client.start(eager_echo, 6, id="lost-answer")
        assert lost == [handle.run_id]
        assert worker.eager.taken == 1
        assert await handle.result() == 6


async def test_a_taken_start_that_raised_is_handed_back_by_the_next_claim(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start committed a run the worker owns, and the caller heard an
    error: the worker's next claim hands back what it owns and does not run,
    then claims it (as after a claim whose outcome was lost)."""
    client = storage_client
    real = unknown.start_workflow

    async def committed_then_raised(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)
        raise StorageUnavailable("the answer was lost", outcome_unknown=True)

    monkeypatch.setattr(unknown, "start_workflow", committed_then_raised)
    worker = make_worker(workflows=[eager_echo])
    async with worker:
        await worker.runs.claim_now()
        with pytest.raises(StorageUnavailable):
            await client.start(eager_echo, 8, id="raised")
        monkeypatch.setattr(unknown, "start_workflow", real)
        assert worker.eager.reserved == 0
        assert await client.get_handle("raised").result() == 8
        assert worker.eager.taken == 0 and worker.runs.claimed == 1  # after the hand-back


async def test_a_stopping_worker_takes_no_start(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker],
) -> None:
    client = storage_client
    worker = make_worker(workflows=[eager_echo])
    async with worker:
        await worker.runs.claim_now()
        assert worker.eager in client.store.takers
    assert worker.eager not in client.store.takers
    handle = await client.start(eager_echo, 9, id="after-stop")
    run = await client.store.get_run(client.namespace, "after-stop")
    assert run is not None and run.owner is None and run.status == RunStatus.PENDING
    async with make_worker(workflows=[eager_echo]):
        assert await handle.result() == 9


def _spawn_taker(db_url: str, workflow_id: str) -> subprocess.Popen[bytes]:
    """tests/eager_app.py on `db_url`: its worker takes its own start of `workflow_id`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(APP.parent.parent), str(APP.parent.parent / "drivers"),
         os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(APP), db_url, workflow_id],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


@pytest.mark.parametrize("driver_name", ["sqlite"], indirect=True)
async def test_a_run_whose_taker_was_sigkilled_is_taken_over_when_its_lease_lapses(
    storage_client: durable.Client, make_worker: Callable[..., durable.Worker], db_url: str,
    tmp_path: Path,
) -> None:
    """A real SIGKILL of the process whose worker took its own start: the run
    is claimed by another worker once the dead one's lease (1 s) lapses."""
    client = storage_client
    proc = _spawn_taker(db_url, "killed-taker")
    try:
        assert proc.stdout is not None
        with anyio.fail_after(60):
            line = (await anyio.to_thread.run_sync(proc.stdout.readline)).decode()
        assert line.startswith("taken "), (line, proc.stderr.read() if proc.stderr else b"")
        _, taken, dead_worker, run_id = line.split()
        assert taken == "1"
        run = await client.store.get_run(client.namespace, "killed-taker")
        assert run is not None and (run.owner, run.epoch) == (dead_worker, 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    async with make_worker(workflows=[EagerGate], lease_seconds=1.0) as worker:
        handle = client.get_handle("killed-taker")
        await handle.signal("open", "survivor")
        with anyio.fail_after(30):
            assert await handle.result() == {"n": 7, "opened_by": "survivor"}
        run = await client.store.get_run(client.namespace, "killed-taker")
        assert run is not None and run.run_id == run_id and run.owner != dead_worker
        assert worker.runs.claimed >= 1 and worker.eager.taken == 0
