"""The one-statement claim of a limited queue, raced on PostgreSQL.

A limited claim on PostgreSQL is ONE statement (`durable.store.queues.
claim_limited_in_one`). Its snapshot is taken before it waits for the
queue's row, so if another claim commits while it waits, its counts are
stale. These tests make that happen on purpose, with no timing: a second
connection holds the queue's row in an open transaction that claims, the
statement is started and seen waiting for the lock (``pg_stat_activity``),
then the transaction commits. The statement must notice (the row's
``claims`` moved), claim nothing itself, and the store's claim must then take
only what the limit leaves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from conftest import drop_postgres_schema, new_postgres_url, require_postgres

import durable
from durable import workflow
from durable.store import claims

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

LEASE = 30.0


@workflow.defn(name="raced")
async def raced(n: int) -> int:
    return n


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def pg() -> AsyncIterator[tuple[durable.Client, Any]]:
    """A client on a fresh schema, and a raw asyncpg connection to it."""
    import asyncpg

    require_postgres()
    url = new_postgres_url()
    base, schema = url.rsplit("schema=", 1)
    async with durable.connect(url) as client:
        conn = await asyncpg.connect(base.rstrip("?&"), server_settings={
            "search_path": f'"{schema}"'})
        try:
            yield client, conn
        finally:
            await conn.close()
    drop_postgres_schema(url)


async def start(client: durable.Client, n: int, **options: Any) -> None:
    for i in range(n):
        await client.start(raced, i, id=f"r-{i}", options=durable.StartOptions(
            task_queue="q", **options))


async def wait_for_lock(conn: Any) -> None:
    """Until another session waits for a lock this one holds (the statement
    under test; not any session of the database, which other test runs share)."""
    with anyio.fail_after(20):
        while not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"):
            await anyio.sleep(0.01)


async def hold_and_claim(conn: Any, n: int, now: float) -> Any:
    """Another claimer's transaction: the queue's row locked, `n` runs claimed,
    the row's ``claims`` bumped; not committed (the caller commits)."""
    tx = conn.transaction()
    await tx.start()
    await conn.execute("SELECT 1 FROM task_queues WHERE namespace = 'default' AND name = 'q' "
                       "FOR UPDATE")
    await conn.execute(
        "UPDATE runs SET owner = 'other', epoch = epoch + 1, status = 'running', "
        "lease_expires_at = $1, started_at = COALESCE(started_at, $2) WHERE run_id IN "
        "(SELECT run_id FROM runs WHERE task_queue = 'q' AND owner IS NULL "
        "ORDER BY priority, ready_at LIMIT $3)", now + LEASE, now, n)
    await conn.execute("UPDATE task_queues SET claims = claims + 1 WHERE namespace = 'default' "
                       "AND name = 'q'")
    return tx


@pytest.mark.parametrize("limits, held, expected", [
    (durable.QueueLimits(max_running=3), 3, 0),
    (durable.QueueLimits(max_running=4), 3, 1),
    (durable.QueueLimits(max_running_per_key=1), 2, 0),  # all of one key
])
async def test_a_claim_that_commits_while_the_statement_waits_is_counted(
    pg: tuple[durable.Client, Any], limits: durable.QueueLimits, held: int, expected: int,
) -> None:
    client, conn = pg
    await start(client, 6, concurrency_key="k")
    await client.set_queue_limits("q", limits)
    store, now = client.store, client.clock.now()
    text = await conn.fetchval("SELECT limits FROM task_queues WHERE name = 'q'")
    assert json.loads(text)  # the limits the store would have read at its last claim
    tx = await hold_and_claim(conn, held, now)
    got: list[Any] = []

    async def one_statement() -> None:
        got.append(await store.driver.run(lambda t: claims.claim_runs(
            t, client.namespace, "q", "w", ("raced",), 100, LEASE, now, limited=True,
            limits=text)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one_statement)
        await wait_for_lock(conn)
        await tx.commit()
    [stale] = got
    # its snapshot missed the other claim: it took nothing and said so
    assert (len(stale), stale.stale) == (0, True)
    # the store then claims in a transaction, which counts after the lock
    again = await store.claim_runs(client.namespace, "q", "w", ("raced",), 100, LEASE, now)
    assert len(again) == expected
    running = await conn.fetchval("SELECT count(*) FROM runs WHERE task_queue = 'q' AND "
                                  "owner IS NOT NULL AND lease_expires_at > $1", now)
    assert running == held + expected


async def test_a_claim_with_no_other_claimer_in_between_is_one_statement(
    pg: tuple[durable.Client, Any],
) -> None:
    client, conn = pg
    await start(client, 6)
    await client.set_queue_limits("q", durable.QueueLimits(max_running=4))
    store, now = client.store, client.clock.now()
    text = await conn.fetchval("SELECT limits FROM task_queues WHERE name = 'q'")
    first = await store.driver.run(lambda t: claims.claim_runs(
        t, client.namespace, "q", "w", ("raced",), 2, LEASE, now, limited=True, limits=text))
    assert (len(first), first.stale, first.limited) == (2, False, True)
    second = await store.driver.run(lambda t: claims.claim_runs(
        t, client.namespace, "q", "w", ("raced",), 100, LEASE, now, limited=True, limits=text))
    assert (len(second), second.stale) == (2, False)  # 4 running: the limit
    # limits changed since the store read them: nothing claimed, told to read again
    await client.set_queue_limits("q", durable.QueueLimits(max_running=5))
    third = await store.driver.run(lambda t: claims.claim_runs(
        t, client.namespace, "q", "w", ("raced",), 100, LEASE, now, limited=True, limits=text))
    assert (len(third), third.stale, json.loads(third.limits or "{}")) == (
        0, True, {"max_running": 5})
    assert await conn.fetchval("SELECT claims FROM task_queues WHERE name = 'q'") == 2
