"""Queue limits and priorities, at the claim: what one claim may take.

These call the store's claim directly at chosen instants (no worker, no
sleeping), on SQLite and PostgreSQL (whose claim of an unlimited queue is one
statement: the limited one is a transaction that locks the queue's row). The
worker processes that share a limit under SIGKILL are in
tests/test_queues_crash.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

import durable
from durable import workflow
from durable.driver import Program, ProgramFactory, Tx
from durable.store import Store
from durable.store.parked import Parked
from durable.store.records import RunStatus
from durable.store.writes import CloseRun, RunWrites
from durable.wakes import Wake

pytestmark = pytest.mark.anyio

LEASE = 30.0


@workflow.defn(name="queued")
async def queued(n: int) -> int:
    return n


@pytest.fixture
def anyio_backend() -> str:
    """Claims are storage programs: the host loop does not change them."""
    return "asyncio"


async def start(client: durable.Client, n: int, *, prefix: str = "r", **options: Any) -> list[str]:
    ids = []
    for i in range(n):
        handle = await client.start(queued, i, id=f"{prefix}-{i}",
                                    options=durable.StartOptions(task_queue="q", **options))
        ids.append(handle.workflow_id)
    return ids


async def claim(store: Store, client: durable.Client, worker: str, now: float,
                limit: int = 100) -> list[str]:
    got = await store.claim_runs(client.namespace, "q", worker, ("queued",), limit, LEASE, now)
    return [c.run.workflow_id for c in got]


async def test_max_running_holds_across_claimers_and_a_dead_workers_slots_come_back(
    storage_client: durable.Client,
) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 5)
    await client.set_queue_limits("q", durable.QueueLimits(max_running=3))
    now = client.clock.now()
    first = await claim(store, client, "w1", now)
    assert len(first) == 3
    assert await claim(store, client, "w2", now) == []  # the queue is full
    described = await client.describe_queue("q")
    assert described["limits"]["max_running"] == 3
    assert (described["runs"]["running"], described["runs"]["waiting"]) == (3, 2)
    # w1 dies: its leases end at now + LEASE, and its slots come back then
    assert await claim(store, client, "w2", now + LEASE - 1) == []
    again = await claim(store, client, "w2", now + LEASE + 1)
    assert sorted(again) == sorted(first)  # the dead worker's runs, the oldest, go first


async def test_limits_change_at_run_time(storage_client: durable.Client) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 4)
    await client.set_queue_limits("q", durable.QueueLimits(max_running=1))
    now = client.clock.now()
    assert len(await claim(store, client, "w1", now)) == 1
    await client.set_queue_limits("q", durable.QueueLimits(max_running=2))
    assert len(await claim(store, client, "w1", now)) == 1
    await client.set_queue_limits("q", durable.QueueLimits())  # no limits at all
    assert len(await claim(store, client, "w1", now)) == 2
    assert (await client.describe_queue("q"))["limits"]["max_running"] is None


async def test_priority_zero_goes_first_then_age(storage_client: durable.Client) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 2, prefix="normal")
    await start(client, 1, prefix="urgent", priority=0)
    await start(client, 1, prefix="later", priority=9)
    now = client.clock.now()
    order = [(await claim(store, client, "w", now, limit=1)) for _ in range(4)]
    assert order == [["urgent-0"], ["normal-0"], ["normal-1"], ["later-0"]]


async def test_priority_holds_on_a_limited_queue_too(storage_client: durable.Client) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 3, prefix="normal")
    await start(client, 1, prefix="urgent", priority=0)
    await client.set_queue_limits("q", durable.QueueLimits(max_running=2))
    now = client.clock.now()
    assert sorted(await claim(store, client, "w", now)) == ["normal-0", "urgent-0"]


async def test_one_run_per_key_over_twenty_keys(storage_client: durable.Client) -> None:
    client, store = storage_client, storage_client.store
    for key in range(20):
        await start(client, 3, prefix=f"k{key}", concurrency_key=f"customer-{key}")
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=1))
    now = client.clock.now()
    got = await claim(store, client, "w1", now)
    assert sorted(got) == sorted(f"k{key}-0" for key in range(20))  # one per key, oldest
    assert await claim(store, client, "w2", now) == []  # every key is at its limit
    described = await client.describe_queue("q")
    assert described["runs"]["running_by_key"]["customer-7"] == 1


async def test_a_hot_key_does_not_hold_back_the_other_keys(
    storage_client: durable.Client,
) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 30, prefix="hot", concurrency_key="hot")  # older, all of one key
    for key in range(3):
        await start(client, 1, prefix=f"cold{key}", concurrency_key=f"cold-{key}")
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=1))
    now = client.clock.now()
    # the first claim round takes the hot key's oldest and every other key's
    assert sorted(await claim(store, client, "w", now, limit=4)) == [
        "cold0-0", "cold1-0", "cold2-0", "hot-0"]


async def test_a_rate_paces_first_starts(storage_client: durable.Client) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 20)
    await client.set_queue_limits("q", durable.QueueLimits(rate=durable.Rate(10, per=10)))
    now = client.clock.now()
    assert len(await claim(store, client, "w", now)) == 1  # one token at first
    assert await claim(store, client, "w", now + 0.5) == []
    assert (await client.describe_queue("q"))["runs"]["rate_left"] == 0
    assert len(await claim(store, client, "w", now + 5.0)) == 5  # one a second since
    assert len(await claim(store, client, "w", now + 25)) == 10  # at most the count at once
    # the 16 started before (their leases ended) are taken again without a
    # token, beside the last 4 new ones
    assert len(await claim(store, client, "w", now + 60)) == 20
    assert (await client.describe_queue("q"))["runs"]["rate_left"] == 6


async def test_an_unlimited_queue_claims_by_fair_share_as_before(
    storage_client: durable.Client,
) -> None:
    client, store = storage_client, storage_client.store
    await start(client, 3)
    assert len(await claim(store, client, "w", client.clock.now())) == 3
    assert (await client.describe_queue("q"))["limits"] == {
        "max_running": None, "max_running_activities": None, "rate": None,
        "activity_rate": None, "max_running_per_key": None}


async def test_a_slot_that_comes_free_wakes_the_queues_claimers_only_where_it_counts(
    storage_client: durable.Client,
) -> None:
    """A close or a release of a run that held a slot of a queue limited by
    slots wakes the queue's claimers in its commit: here, and in the other
    processes through the driver (tests/test_queues_wake.py). A queue without
    such a limit (none, or a rate only), or a close of a run that held no
    slot, wakes no one more than before (decision (at))."""
    client, store = storage_client, storage_client.store
    ns = client.namespace
    handles = {}
    for queue, n in (("q", 6), ("u", 2), ("paced", 1)):
        for i in range(n):
            handles[f"{queue}-{i}"] = await client.start(
                queued, i, id=f"{queue}-{i}", options=durable.StartOptions(task_queue=queue))
    await client.set_queue_limits("q", durable.QueueLimits(max_running=5))
    await client.set_queue_limits("paced", durable.QueueLimits(rate=durable.Rate(10, per=1)))
    now = client.clock.now()
    held = {}
    for queue in ("q", "u", "paced"):
        for got in await store.claim_runs(ns, queue, "w1", ("queued",), 5, LEASE, now):
            held[got.run.workflow_id] = got.run
    assert sorted(held) == ["paced-0", "q-0", "q-1", "q-2", "q-3", "q-4",
                            "u-0", "u-1"]
    seen: list[Wake] = []
    unsubscribe = store.hub.subscribe(seen.append)

    def woken(queue: str) -> list[Wake]:
        return [w for w in seen if w.key == Wake.runs(ns, queue).key]

    try:
        await store.release_runs("w1", [held["q-0"].run_id], now)  # a hand-back
        assert len(woken("q")) == 1
        assert not woken("q")[0].brings_deadline  # a free slot brings no deadline
        await handles["q-1"].terminate()  # a close by someone else than its owner
        assert len(woken("q")) == 2
        await handles["q-5"].terminate()  # it waited: it held no slot
        assert len(woken("q")) == 2
        await store.release_parked("w1", [Parked(held["q-2"].run_id, held["q-2"].epoch, ())],
                                   now)  # put down under pressure
        assert len(woken("q")) == 3
        # no slots counted (no limit, a rate only): nothing more than before
        await handles["u-0"].terminate()
        await store.release_runs("w1", [held["u-1"].run_id], now)
        await handles["paced-0"].terminate()
        assert woken("u") == woken("paced") == []
    finally:
        unsubscribe()


def limits_reads(store: Store) -> tuple[list[str], Callable[[], None]]:
    """Record the statements of `store`'s transactions that read a queue's
    limits row (``task_queues``); and a function that stops recording."""
    seen: list[str] = []
    driver = store.driver
    run = driver.run

    def recorded(program: Program[Any]) -> Iterator[Any]:
        try:
            stmt = next(program)
            while True:
                if "task_queues" in stmt.sql:
                    seen.append(stmt.sql)
                stmt = program.send((yield stmt))
        except StopIteration as stop:
            return stop.value

    def watching(factory: ProgramFactory[Any], **options: Any) -> Any:
        def wrapped(tx: Tx) -> Program[Any]:
            return recorded(factory(tx))
        if getattr(factory, "durable_brief", False):
            wrapped.durable_brief = True  # type: ignore[attr-defined]
        return run(wrapped, **options)

    driver.run = watching  # type: ignore[method-assign]
    return seen, lambda: setattr(driver, "run", run)


async def test_a_terminate_by_a_process_that_never_claimed_wakes_a_limited_queues_claimers(
    storage_client: durable.Client, db_url: str,
) -> None:
    """A client that never claims from a queue (a ``durable.connect`` with no
    worker, ``durable serve``, the CLI) does not know whether it counts slots:
    its close of a held run reads the queue's limits row in the close's
    transaction, once, and wakes the claimers when the queue counts slots
    (decision (at)). The owner's close reads nothing more: its process
    learnt the queue's limits at its claim."""
    client, store = storage_client, storage_client.store
    ns = client.namespace
    for queue, n in (("q", 4), ("u", 3)):
        for i in range(n):
            await client.start(queued, i, id=f"{queue}-{i}",
                               options=durable.StartOptions(task_queue=queue))
    await client.set_queue_limits("q", durable.QueueLimits(max_running=3))
    now = client.clock.now()
    held = {}
    for queue in ("q", "u"):
        for got in await store.claim_runs(ns, queue, "w1", ("queued",), 3, LEASE, now):
            held[got.run.workflow_id] = got.run
    assert sorted(held) == ["q-0", "q-1", "q-2", "u-0", "u-1", "u-2"]
    async with durable.connect(db_url, namespace=ns) as other:
        assert not other.store.hub.slot_limited  # it never claimed
        seen: list[Wake] = []
        unsubscribe = other.store.hub.subscribe(seen.append)
        reads, stop = limits_reads(other.store)

        def woken(queue: str) -> list[Wake]:
            return [w for w in seen if w.key == Wake.runs(ns, queue).key]

        try:
            await other.get_handle("q-0").terminate()
            assert len(woken("q")) == 1 and not woken("q")[0].brings_deadline
            assert len(reads) == 1  # one small read of the queue's row
            await other.get_handle("u-0").terminate()
            assert woken("u") == [] and len(reads) == 2
            await other.get_handle("q-3").terminate()  # it waited: no slot, no read
            assert len(woken("q")) == 1 and len(reads) == 2
            # a process that knows the queue counts slots wakes without a read
            other.store.hub.limit_slots(ns, "q", True)
            await other.get_handle("q-1").cancel()
            assert len(woken("q")) == 2 and len(reads) == 2
        finally:
            stop()
            unsubscribe()
    # the owner's close (and its review) reads no limits, limited queue or not
    seen = []
    unsubscribe = store.hub.subscribe(seen.append)
    reads, stop = limits_reads(store)
    try:
        for workflow_id, close in (("q-2", CloseRun(RunStatus.COMPLETED, result="2")),
                                   ("u-1", CloseRun(RunStatus.COMPLETED, result="1")),
                                   ("u-2", CloseRun(RunStatus.FAILED, needs_review=True))):
            run = held[workflow_id]
            [result] = await store.commit([RunWrites(run.run_id, run.epoch, [close])], now)
            assert result.committed
        assert reads == []
        assert len([w for w in seen if w.key == Wake.runs(ns, "q").key]) == 1
        assert [w for w in seen if w.key == Wake.runs(ns, "u").key] == []
    finally:
        stop()
        unsubscribe()


async def test_bad_limits_are_refused_saying_what_to_fix() -> None:
    with pytest.raises(durable.ConfigurationError, match="max_running must be at least 1"):
        durable.QueueLimits(max_running=0)
    with pytest.raises(durable.ConfigurationError, match=r"must be a durable\.Rate"):
        durable.QueueLimits(rate=100)  # type: ignore[arg-type]
    with pytest.raises(durable.ConfigurationError, match="priority must be at least 0 and at "
                                                         "most 9"):
        durable.StartOptions(priority=10)


async def test_a_run_held_back_says_why_in_describe(storage_client: durable.Client) -> None:
    from durable.cli._words import waiting_text
    from durable.present import utcnow, wait_of

    client, store = storage_client, storage_client.store
    await start(client, 2, prefix="a", concurrency_key="k1")
    await start(client, 1, prefix="b", concurrency_key="k2")
    # nothing claimed yet and no worker serves the queue: it waits for one
    assert (await client.get_handle("a-0").describe())["waiting_for"] == {
        "kind": "worker", "queue": "q", "workflow_type": "queued", "live_workers": 0}
    await client.set_queue_limits("q", durable.QueueLimits(max_running=2,
                                                           max_running_per_key=1))
    now = client.clock.now()
    assert sorted(await claim(store, client, "w", now)) == ["a-0", "b-0"]
    assert (await client.get_handle("a-0").describe())["waiting_for"] is None  # it runs
    # it says who holds the slots: the runs, the worker holding each, and until
    # when its lease runs (a killed worker's slot comes back then)
    leased = dt.datetime.fromtimestamp(now + LEASE, dt.UTC)
    until = leased.isoformat()
    waiting = (await client.get_handle("a-1").describe())["waiting_for"]
    assert waiting == {
        "kind": "queue_slot", "queue": "q", "running": 2, "limit": 2,
        "held_by": [{"workflow_id": "a-0", "worker_id": "w", "lease_expires_at": until},
                    {"workflow_id": "b-0", "worker_id": "w", "lease_expires_at": until}]}
    shown = f"{leased:%Y-%m-%d %H:%M:%S} UTC"
    _, reason = wait_of(waiting)
    assert reason == ("Workflow task waiting for a slot on queue q (2 of 2 running); held by "
                      f"a-0 (worker w, leased to {shown}), b-0 (worker w, leased to {shown})")
    assert waiting_text(waiting, utcnow()).plain.endswith(
        f"(2 of 2 running); held by a-0 (worker w, leased to {shown}), b-0 (worker w, "
        f"leased to {shown})")
    await client.set_queue_limits("q", durable.QueueLimits(max_running=5,
                                                           max_running_per_key=1))
    assert (await client.get_handle("a-1").describe())["waiting_for"] == {
        "kind": "key_slot", "queue": "q", "concurrency_key": "k1", "running": 1, "limit": 1,
        "held_by": [{"workflow_id": "a-0", "worker_id": "w", "lease_expires_at": until}]}
    # beyond the first few, the words count the rest
    many = dict(waiting, running=9)
    assert str(wait_of(many)[1]).endswith(f"b-0 (worker w, leased to {shown}) and 7 more")
    # the queue's describe lists the leases behind its running count (the
    # reference's current_leases said [] whatever was held); a list leaves them out
    described = await client.describe_queue("q")
    assert described["runs"]["running"] == 2
    assert sorted((x["kind"], x["workflow_id"], x["worker_id"], x["lease_expires_at"])
                  for x in described["leases"]) == [
        ("workflow", "a-0", "w", until), ("workflow", "b-0", "w", until)]
    assert all("leases" not in listed for listed in await client.list_queues())


@workflow.defn(name="slot-parent")
async def slot_parent(n: int) -> int:
    result: int = await workflow.execute_child(queued, n, id=f"{workflow.info().workflow_id}-c")
    return result


async def test_a_child_waiting_for_a_slot_its_parent_holds_says_so(
        storage_client: durable.Client, make_worker: Any) -> None:
    """max_running=1, and the parent starts its child on its own queue: the
    parent holds the one slot while it waits for the child, which waits for
    that slot. describe() names the parent as the holder, and the words say
    that the child never starts if the parent waits for it, and the fix.
    (With ``release_waiting_runs=False``: by default the worker trades the
    parent for its child, tests/test_relief_queue.py.)"""
    from durable.cli._words import waiting_text
    from durable.present import utcnow, wait_of

    client = storage_client
    await client.set_queue_limits("q", durable.QueueLimits(max_running=1))
    async with make_worker(workflows=[slot_parent, queued], task_queue="q",
                           release_waiting_runs=False):
        parent = await client.start(slot_parent, 4, id="p-1",
                                    options=durable.StartOptions(task_queue="q"))
        child = client.get_handle("p-1-c")
        with anyio.fail_after(30):
            while True:
                try:
                    waiting = (await child.describe())["waiting_for"]
                except durable.WorkflowNotFound:
                    waiting = None
                if waiting is not None and waiting["kind"] == "queue_slot":
                    break
                await anyio.sleep(0.02)
        assert [h["workflow_id"] for h in waiting.pop("held_by")] == ["p-1"]
        assert waiting == {"kind": "queue_slot", "queue": "q", "running": 1, "limit": 1,
                           "held_by_ancestors": ["p-1"]}
        _, reason = wait_of(waiting)
        assert reason is not None and "held by p-1" in reason and "never starts" in reason
        assert "its worker puts p-1 down for it once p-1 only waits" in reason
        assert "never starts" in waiting_text(waiting, utcnow()).plain
        # a run of the queue that descends from nobody says nothing of the kind
        await start(client, 1, prefix="x")
        other = (await client.get_handle("x-0").describe())["waiting_for"]
        assert other is not None and "held_by_ancestors" not in other
        # lifting the limit lets the child run, and the parent ends
        await client.set_queue_limits("q", durable.QueueLimits(max_running=3))
        with anyio.fail_after(30):
            assert await parent.result() == 4


def run_cli(url: str, *args: str) -> Any:
    from click.testing import CliRunner

    from durable.cli._group import cli

    result = CliRunner().invoke(cli, ["--db", url, *args], env={"NO_COLOR": "1"},
                                prog_name="durable")
    return result


async def test_durable_queue_sets_limits_and_shows_them(tmp_path: Any) -> None:
    import json

    import anyio

    url = f"sqlite:///{tmp_path / 'q.db'}"
    async with durable.connect(url) as client:
        await start(client, 2)

    def cli(*args: str) -> Any:
        return anyio.to_thread.run_sync(run_cli, url, *args)

    done = await cli("queue", "set-limits", "q", "--max-running", "3", "--rate", "100/60",
                     "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["limits"] == {
        "max_running": 3, "max_running_activities": None, "rate": {"count": 100, "per": 60.0},
        "activity_rate": None, "max_running_per_key": None}
    # limits not given keep their value
    done = await cli("queue", "set-limits", "q", "--max-running-per-key", "1")
    assert done.exit_code == 0, done.stderr
    assert "running <= 3, per key <= 1, rate 100/60s" in done.stdout
    described = await cli("queue", "describe", "q")
    assert "0 running of 3, 2 waiting" in described.stdout
    listed = await cli("queue", "list")
    assert "QUEUE" in listed.stdout and "q " in listed.stdout
    cleared = await cli("queue", "set-limits", "q", "--clear", "--json")
    assert json.loads(cleared.stdout)["limits"]["max_running"] is None
    bad = await cli("queue", "set-limits", "q", "--rate", "fast")
    assert bad.exit_code == 2 and "write COUNT/SECONDS, e.g. 100/60" in bad.stderr
    # a misspelt queue is a new, empty one whose limits hold back nothing: said so
    typo = await cli("queue", "set-limits", "qq", "--max-running", "1")
    assert typo.exit_code == 0, typo.stderr
    assert ("note: no live worker serves queue 'qq' and no open run or activity is on it. "
            "A queue is only a name: a misspelt one is a new, empty queue, and its limits "
            "hold back nothing. Queues in use: q") in " ".join(typo.stdout.split())
    assert "note:" not in (await cli("queue", "describe", "q")).stdout


async def test_a_queue_nobody_uses_reads_idle_with_the_queues_in_use(
    client: durable.Client,
) -> None:
    await start(client, 1)  # queue q has open work (no worker yet)
    assert (await client.describe_queue("q"))["idle"] is False
    await client.set_queue_limits("qq", durable.QueueLimits(max_running=1))
    described = await client.describe_queue("qq")
    assert described["idle"] is True and described["queues_in_use"] == ["q"]
    assert "queues_in_use" not in await client.describe_queue("q")
    listed = {q["name"]: q["idle"] for q in await client.list_queues()}
    assert listed == {"q": False, "qq": True}


async def test_metrics_show_each_queues_depth_running_limits_and_rate(
    storage_client: durable.Client,
) -> None:
    import httpx

    from durable.http import create_app

    client, store = storage_client, storage_client.store
    await start(client, 5)
    await client.set_queue_limits("q", durable.QueueLimits(
        max_running=2, rate=durable.Rate(100, per=60)))
    assert len(await claim(store, client, "w", client.clock.now())) == 1  # one rate token
    app = create_app(client, {"t": "viewer"}, environ={})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://plane") as http:
        text = (await http.get("/metrics", headers={"Authorization": "Bearer t"})).text
    ns = client.namespace
    assert f'durable_queue_runs{{namespace="{ns}",queue="q",state="running"}} 1.0' in text
    assert f'durable_queue_runs{{namespace="{ns}",queue="q",state="waiting"}} 4.0' in text
    assert f'durable_queue_limit{{limit="max_running",namespace="{ns}",queue="q"}} 2.0' in text
    assert f'durable_queue_limit{{limit="rate",namespace="{ns}",queue="q"}} 100.0' in text
    assert (f'durable_queue_rate_period_seconds{{limit="rate",namespace="{ns}",queue="q"}} '
            "60.0") in text
    assert f'durable_queue_rate_left{{kind="runs",namespace="{ns}",queue="q"}}' in text


RUNNING: list[str] = []
GATE: dict[str, Any] = {}


@durable.activity.defn(name="queued_call")
async def call_api(n: int) -> int:
    RUNNING.append(f"start {n}")
    await GATE["open"].wait()
    RUNNING.append(f"end {n}")
    return n


@workflow.defn(name="queued_fan_out")
async def fan_out(n: int) -> list[int]:
    results: list[int] = []

    async def one(i: int) -> None:
        results.append(await workflow.execute_activity(call_api, i))

    async with workflow.task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return sorted(results)


def most_running() -> int:
    now = best = 0
    for line in RUNNING:
        now += 1 if line.startswith("start") else -1
        best = max(best, now)
    return best


async def test_max_running_activities_holds_attempts_back_until_one_ends(
    storage_client: durable.Client,
) -> None:
    import anyio

    RUNNING.clear()
    GATE["open"] = anyio.Event()
    client = storage_client
    await client.set_queue_limits("q", durable.QueueLimits(max_running_activities=2))
    handle = await client.start(fan_out, 5, id="fan",
                                options=durable.StartOptions(task_queue="q"))
    async with durable.Worker(client, workflows=[fan_out], activities=[call_api],
                              task_queue="q", poll_interval=0.1) as worker:
        with anyio.fail_after(10):
            while len(RUNNING) < 2:
                await anyio.sleep(0.01)
            described = await client.describe_queue("q")
            while described["activities"]["waiting"] < 3:  # all five scheduled
                await anyio.sleep(0.01)
                described = await client.describe_queue("q")
        await worker.remote.claims.claim_now()  # a claim pass with room: takes nothing
        assert (len(RUNNING), described["activities"]["running"]) == (2, 2)
        GATE["open"].set()
        with anyio.fail_after(10):
            assert await handle.result() == [0, 1, 2, 3, 4]
    assert most_running() == 2


async def test_an_attempt_that_ends_frees_its_activity_slot_at_once_not_at_the_poll(
    storage_client: durable.Client,
) -> None:
    """At ``max_running_activities=1`` each attempt's end must let the next one
    start at once: before, the worker learnt of the freed slot only at its
    next poll (30 s here; PostgreSQL's own look, 1 s), so eight short
    attempts took eight polls."""
    import anyio

    RUNNING.clear()
    GATE["open"] = anyio.Event()
    GATE["open"].set()
    client = storage_client
    await client.set_queue_limits("q", durable.QueueLimits(max_running_activities=1))
    async with durable.Worker(client, workflows=[fan_out], activities=[call_api],
                              task_queue="q", poll_interval=30) as worker:
        await worker.remote.claims.claim_now()  # it looked, found nothing, and waits
        handle = await client.start(fan_out, 8, id="fan-free",
                                    options=durable.StartOptions(task_queue="q"))
        with anyio.fail_after(4):
            assert await handle.result() == list(range(8))
    assert most_running() == 1


async def test_durable_start_takes_a_priority_and_a_concurrency_key(tmp_path: Any) -> None:
    import anyio

    url = f"sqlite:///{tmp_path / 'p.db'}"
    async with durable.connect(url):
        pass
    done = await anyio.to_thread.run_sync(
        run_cli, url, "start", "queued", "--id", "urgent", "--input", "[1]", "--task-queue",
        "q", "--priority", "0", "--concurrency-key", "customer-1")
    assert done.exit_code == 0, done.stderr
    async with durable.connect(url) as client:
        run = (await client.get_handle("urgent").describe())["run"]
    assert (run["priority"], run["concurrency_key"]) == (0, "customer-1")
    bad = await anyio.to_thread.run_sync(run_cli, url, "start", "queued", "--id", "x",
                                         "--priority", "10")
    assert bad.exit_code == 2


async def test_an_activity_rate_paces_attempts_and_lifting_it_lets_them_all_run(
    storage_client: durable.Client,
) -> None:
    import anyio

    RUNNING.clear()
    GATE["open"] = anyio.Event()
    GATE["open"].set()  # attempts end at once: only the rate holds them back
    client = storage_client
    await client.set_queue_limits("q", durable.QueueLimits(
        activity_rate=durable.Rate(1, per=3600)))  # one attempt, then one an hour
    handle = await client.start(fan_out, 3, id="paced",
                                options=durable.StartOptions(task_queue="q"))
    async with durable.Worker(client, workflows=[fan_out], activities=[call_api],
                              task_queue="q", poll_interval=0.1) as worker:
        with anyio.fail_after(10):
            while len(RUNNING) < 2 or (await client.describe_queue("q"))["activities"][
                    "waiting"] < 2:
                await anyio.sleep(0.01)
        await worker.remote.claims.claim_now()
        assert RUNNING == ["start " + RUNNING[0].split()[1], "end " + RUNNING[0].split()[1]]
        assert (await client.describe_queue("q"))["activities"]["rate_left"] == 0
        await client.set_queue_limits("q", durable.QueueLimits())  # lifted at run time
        with anyio.fail_after(10):
            assert await handle.result() == [0, 1, 2]


async def test_a_key_longer_than_a_claims_view_delays_the_others_one_round_at_most(
    storage_client: durable.Client,
) -> None:
    from durable.store import queues

    client, store = storage_client, storage_client.store
    limit = 4  # a claim's view: PREFIX x (2 x limit + 8) = 64 ready runs
    hot = (2 * limit + 8) * queues.PREFIX + 16
    await start(client, hot, prefix="hot", concurrency_key="hot")  # older than the rest
    for key in range(3):
        await start(client, 1, prefix=f"cold{key}", concurrency_key=f"cold-{key}")
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=1))
    now = client.clock.now()
    assert await claim(store, client, "w", now, limit=limit) == ["hot-0"]  # all it saw
    # the hot key is at its limit now, so the next round sees past it
    assert sorted(await claim(store, client, "w", now, limit=limit)) == [
        "cold0-0", "cold1-0", "cold2-0"]


async def test_a_key_that_crowds_a_claims_first_view_is_looked_past_in_the_same_claim(
    storage_client: durable.Client,
) -> None:
    # A claim first reads 2 x limit + 8 candidates; only when keys at their
    # limit crowd them out does it look further (PREFIX x as many), in the
    # same claim: the first claim is a transaction on every storage, the
    # second one statement where the dialect has writable CTEs.
    client, store = storage_client, storage_client.store
    limit = 4  # a first view of 16 ready runs, a longer one of 64
    await start(client, 20, prefix="hot", concurrency_key="hot")  # older than the rest
    for key in range(3):
        await start(client, 1, prefix=f"cold{key}", concurrency_key=f"cold-{key}")
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=1))
    now = client.clock.now()
    assert sorted(await claim(store, client, "w", now, limit=limit)) == [
        "cold0-0", "cold1-0", "cold2-0", "hot-0"]
    await start(client, 20, prefix="warm", concurrency_key="warm")
    for key in range(3, 6):
        await start(client, 1, prefix=f"cold{key}", concurrency_key=f"cold-{key}")
    now = client.clock.now()  # the first claim's leases still hold
    assert sorted(await claim(store, client, "w", now, limit=limit)) == [
        "cold3-0", "cold4-0", "cold5-0", "warm-0"]


async def test_a_key_far_from_its_limit_is_claimed_in_order_until_it_nears_it(
    storage_client: durable.Client,
) -> None:
    # While no key can reach its limit in a claim (what runs of it + the
    # claim's size <= the limit), a claim takes the first ready runs in order
    # with no per-key window (PostgreSQL's statement skips it); once one can,
    # the key's runs past its limit are passed over for the next key's.
    client, store = storage_client, storage_client.store
    await start(client, 8, prefix="a", concurrency_key="a")  # older than b's
    await start(client, 2, prefix="b", concurrency_key="b")
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=5))
    now = client.clock.now()
    assert sorted(await claim(store, client, "w", now, limit=2)) == ["a-0", "a-1"]
    assert sorted(await claim(store, client, "w", now, limit=2)) == ["a-2", "a-3"]
    assert sorted(await claim(store, client, "w", now, limit=2)) == ["a-4", "b-0"]
    assert await claim(store, client, "w", now, limit=2) == ["b-1"]
    assert await claim(store, client, "w", now, limit=2) == []


async def test_many_keys_each_with_some_running_are_claimed_in_order_within_their_limit(
    storage_client: durable.Client,
) -> None:
    # Many keys, a few runs of each among a claim's candidates, some of each
    # running: where the first ready runs leave every key within its limit
    # (PostgreSQL's statement then skips the per-key numbering, though the
    # claim's size alone could pass a limit), a claim takes them in order;
    # where one key's runs would pass it, its extra run is passed over.
    client, store = storage_client, storage_client.store

    async def start_one(k: int, i: int) -> None:
        await client.start(queued, i, id=f"k{k}-{i}", options=durable.StartOptions(
            task_queue="q", concurrency_key=f"k{k}"))

    for i in range(2):  # age order: k0-0, k1-0, k2-0, k3-0, k0-1, ...
        for k in range(4):
            await start_one(k, i)
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=2))
    now = client.clock.now()
    assert sorted(await claim(store, client, "w", now, limit=4)) == [
        "k0-0", "k1-0", "k2-0", "k3-0"]
    # one running of each key: the next two in order take k0 and k1 to 2
    assert sorted(await claim(store, client, "w", now, limit=2)) == ["k0-1", "k1-1"]
    await start_one(2, 2)  # k2: one running, k2-1 and k2-2 waiting
    now = client.clock.now()  # (k2-2 is ready from now on)
    assert sorted(await claim(store, client, "w", now, limit=5)) == ["k2-1", "k3-1"]
    assert await claim(store, client, "w", now, limit=5) == []  # k2-2 waits for a slot


@workflow.defn(name="queued_parent")
async def queued_parent(child_priority: int | None) -> list[int]:
    options = durable.ChildOptions(priority=child_priority, concurrency_key="child-key")
    return [await workflow.execute_child(queued, 1, id="child-1", options=options),
            await workflow.execute_child(queued, 2, id="child-2")]


@pytest.mark.parametrize("child_priority", [None, 7])
async def test_a_child_inherits_its_parents_priority_unless_it_is_given_one(
    storage_client: durable.Client, child_priority: int | None,
) -> None:
    import anyio

    client = storage_client
    handle = await client.start(queued_parent, child_priority, id="parent",
                                options=durable.StartOptions(task_queue="q", priority=2,
                                                             concurrency_key="parent-key"))
    async with durable.Worker(client, workflows=[queued_parent, queued], task_queue="q",
                              poll_interval=0.1):
        with anyio.fail_after(20):
            assert await handle.result() == [1, 2]
    first = (await client.get_handle("child-1").describe())["run"]
    second = (await client.get_handle("child-2").describe())["run"]
    # the given priority, or the parent's; a key only when given (never the parent's)
    assert (first["priority"], first["concurrency_key"]) == (
        2 if child_priority is None else child_priority, "child-key")
    assert (second["priority"], second["concurrency_key"]) == (2, None)


async def test_a_claim_says_when_keys_at_their_limit_may_have_held_runs_back(
    storage_client: durable.Client,
) -> None:
    """`Claimed.held_back` hints at runs a key at its max_running_per_key held
    back (what a worker's trade looks at, decision (aw)): in the transaction
    that reads the limits, and in the one-statement claim of PostgreSQL that
    trusts the limits the store read (there the claim found nothing at all,
    the case of a child whose key's slot its parent holds)."""
    client, store = storage_client, storage_client.store
    await start(client, 2, prefix="a", concurrency_key="k1")
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=1))
    now = client.clock.now()
    got = await store.claim_runs(client.namespace, "q", "w", ("queued",), 10, LEASE, now)
    assert [c.run.workflow_id for c in got] == ["a-0"] and got.held_back == 1
    assert ("runs", client.namespace, "q") in store._limits  # PostgreSQL: one statement next
    got = await store.claim_runs(client.namespace, "q", "w", ("queued",), 10, LEASE, now)
    assert list(got) == [] and got.held_back == 1
    await start(client, 1, prefix="b", concurrency_key="k2")
    now = client.clock.now()
    got = await store.claim_runs(client.namespace, "q", "w", ("queued",), 10, LEASE, now)
    assert [c.run.workflow_id for c in got] == ["b-0"] and got.held_back == 1
    await client.set_queue_limits("q", durable.QueueLimits(max_running_per_key=2))
    got = await store.claim_runs(client.namespace, "q", "w", ("queued",), 10, LEASE, now)
    assert [c.run.workflow_id for c in got] == ["a-1"] and got.held_back == 0
