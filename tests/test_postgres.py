"""What only the PostgreSQL driver does: connection errors, schema migration
across processes, LISTEN/NOTIFY wake-ups, and surviving killed connections.

The behaviour every driver shares is pinned by tests/test_engine.py; these run
on both host loops (asyncio natively, trio through the driver's own asyncio
thread) and skip without a server unless DURABLE_REQUIRE_POSTGRES=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import pytest
from conftest import POSTGRES_URL, drop_postgres_schema, require_postgres
from pg_cut import CuttingProxy

import durable
from durable import activity, workflow
from durable.driver import Program, Stmt, Tx, Wake, ex, q
from durable.store.migrations import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def sql(client: durable.Client, statement: str, *params: Any, mode: str = "exec") -> Any:
    """Run one statement through the driver, as a one-statement program."""

    def program(tx: Tx) -> Program[Any]:
        return (yield Stmt(statement, params, mode))

    return await client.driver.run(program)


async def kill_backends(killer: durable.Client, victim: durable.Client) -> int:
    """Terminate every server backend of `victim`'s driver (pool and LISTEN)."""
    name = victim.driver.application_name  # type: ignore[attr-defined]
    rows = await sql(
        killer,
        "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity "
        "WHERE application_name = ?",
        name, mode="all",
    )
    return sum(1 for r in rows if r["killed"])


class Wakes:
    """The wake-ups a driver's hub publishes, in order."""

    def __init__(self, client: durable.Client) -> None:
        self.seen: list[Wake] = []
        self._arrived = anyio.Event()
        client.driver.hub.subscribe(self._on_wake)

    def _on_wake(self, wake: Wake) -> None:
        self.seen.append(wake)
        self._arrived.set()

    def keys(self) -> list[tuple[str, ...]]:
        """What the wake-ups seen named (a start's may carry `NO_DEADLINE`)."""
        return [wake.key for wake in self.seen]

    async def until(self, *key: str, within: float = 10.0) -> None:
        with anyio.fail_after(within):
            while key not in self.keys():
                await self._arrived.wait()
                self._arrived = anyio.Event()


# ---------------------------------------------------------------- connecting


async def test_malformed_url_is_a_configuration_error_with_the_password_masked() -> None:
    with pytest.raises(durable.ConfigurationError) as err:
        await durable.connect("postgresql://app:s3cret@db.example:notaport/app")
    message = str(err.value)
    assert "s3cret" not in message and "app:***@db.example" in message
    assert "postgresql://user[:password]@host" in message


async def test_schema_must_be_a_plain_identifier() -> None:
    with pytest.raises(durable.ConfigurationError, match="not a plain SQL identifier"):
        await durable.connect("postgresql://postgres@127.0.0.1/test?schema=a;drop")


async def test_refused_connection_names_the_url_and_what_to_check() -> None:
    with pytest.raises(durable.ConfigurationError) as err:
        await durable.connect("postgresql://app:s3cret@127.0.0.1:1/app")
    message = str(err.value)
    assert "postgresql://app:***@127.0.0.1:1/app" in message
    assert "s3cret" not in message
    assert "127.0.0.1:1" in message and "check that PostgreSQL is running" in message


async def test_missing_database_says_how_to_create_it() -> None:
    require_postgres()
    base = POSTGRES_URL.rsplit("/", 1)[0]
    with pytest.raises(durable.ConfigurationError) as err:
        await durable.connect(f"{base}/durable_no_such_db")
    assert "database 'durable_no_such_db' does not exist" in str(err.value)
    assert "createdb durable_no_such_db" in str(err.value)


async def test_schema_from_a_newer_version_is_refused(pg_url: str) -> None:
    async with durable.connect(pg_url) as client:
        await sql(client, "UPDATE durable_meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(durable.ConfigurationError, match="version 999, newer than"):
        await durable.connect(pg_url)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the lock's holder is asyncpg's
async def test_an_upgrade_that_waits_for_a_lock_says_so_not_that_no_server_answered(
        pg_url: str, anyio_backend: str) -> None:
    """Upgrading the schema while workers of the older version still write to it:
    the upgrade waits for their locks until command_timeout. That was reported as
    "no server answered ...; check that PostgreSQL is running" (a TimeoutError is
    an OSError), sending the operator after a server that was up all along."""
    import asyncpg

    async with durable.connect(pg_url) as client:  # a schema one version behind
        await sql(client, "ALTER TABLE workers DROP COLUMN runs_released")
        await sql(client, "UPDATE durable_meta SET value = ? WHERE key = 'schema_version'",
                  str(SCHEMA_VERSION - 1))
    schema = pg_url.rsplit("schema=", 1)[1]
    older_worker = await asyncpg.connect(POSTGRES_URL)
    try:
        async with older_worker.transaction():
            await older_worker.execute(f'LOCK TABLE "{schema}".workers IN ROW EXCLUSIVE MODE')
            with pytest.raises(durable.ConfigurationError) as err:
                await durable.connect(pg_url, command_timeout=1)
    finally:
        await older_worker.close()
    message = str(err.value)
    assert "no server answered" not in message and "PostgreSQL is running" not in message
    assert "did not finish within command_timeout=1" in message, message
    assert "lock" in message and "pg_stat_activity" in message, message
    async with durable.connect(pg_url) as client:  # the lock gone, the upgrade runs
        row = await sql(client, "SELECT value FROM durable_meta WHERE key = 'schema_version'",
                        mode="one")
    assert int(row["value"]) == SCHEMA_VERSION


async def test_a_mistyped_schema_is_refused_unless_it_may_be_created(pg_url: str) -> None:
    """create_schema=False (what the CLI's reading commands pass) refuses a
    schema that is not there, naming the ones that hold durable's tables;
    the default creates it (a new application's first start)."""
    async with durable.connect(pg_url):
        pass  # the application's schema exists now
    schema = pg_url.rsplit("schema=", 1)[1]
    typo = pg_url.replace(f"schema={schema}", f"schema={schema}x")
    with pytest.raises(durable.ConfigurationError) as err:
        await durable.connect(typo, create_schema=False)
    message = str(err.value)
    assert f"schema '{schema}x' does not exist" in message and f"'{schema}'" in message
    async with durable.connect(pg_url, create_schema=False):
        pass  # an existing schema is used as before
    drop_postgres_schema(typo)  # nothing was created: dropping is a no-op


def test_the_cli_refuses_a_mistyped_schema(pg_url: str) -> None:
    """`durable list` with a schema nobody created says so (SQLite's CLI refuses
    a missing file alike); once the application created it, it reads it."""
    from click.testing import CliRunner

    from durable.cli._group import cli

    result = CliRunner().invoke(cli, ["--db", pg_url, "list"])
    schema = pg_url.rsplit("schema=", 1)[1]
    assert result.exit_code != 0 and f"schema '{schema}' does not exist" in result.stderr, (
        result.stdout + result.stderr)

    async def create() -> None:
        async with durable.connect(pg_url):
            pass

    anyio.run(create)
    assert CliRunner().invoke(cli, ["--db", pg_url, "list"]).exit_code == 0


_MIGRATE_CHILD = textwrap.dedent("""
    import asyncio, sys
    import durable

    async def main(url):
        print("ready", flush=True)
        sys.stdin.readline()  # the barrier: all four connect at once
        client = await durable.connect(url)
        await client.close()
        print("migrated", flush=True)

    asyncio.run(main(sys.argv[1]))
""")


def _migrate_in_processes(url: str, n: int) -> list[tuple[int, str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _MIGRATE_CHILD, url], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for _ in range(n)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outcomes = []
    for proc in procs:
        out, errors = proc.communicate(timeout=60)
        outcomes.append((proc.returncode, out + errors))
    return outcomes


async def test_four_processes_migrate_one_fresh_schema_at_once(pg_url: str) -> None:
    outcomes = await anyio.to_thread.run_sync(_migrate_in_processes, pg_url, 4)
    for code, output in outcomes:
        assert code == 0, output
        assert "migrated" in output
    async with durable.connect(pg_url) as client:
        rows = await sql(client, "SELECT value FROM durable_meta WHERE key = 'schema_version'",
                         mode="all")
    assert [r["value"] for r in rows] == [str(SCHEMA_VERSION)]


# ---------------------------------------------------------------- namespaces


@activity.defn
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow.defn
async def greeting(name: str) -> str:
    result: str = await workflow.execute_activity(greet, name)
    return result


async def test_namespaces_share_a_schema_without_seeing_each_other(pg_url: str) -> None:
    async with (
        durable.connect(pg_url, namespace="billing") as billing,
        durable.connect(pg_url, namespace="shipping") as shipping,
    ):
        await billing.start(greeting, "billing", id="same-id")
        await shipping.start(greeting, "shipping", id="same-id")  # no clash across namespaces
        async with durable.Worker(billing, workflows=[greeting], activities=[greet],
                                  poll_interval=0.2):
            assert await billing.get_handle("same-id").result() == "hello billing"
        assert [r["status"] for r in await billing.list()] == ["completed"]
        assert [r["status"] for r in await shipping.list()] == ["pending"]


# ---------------------------------------------------------------- wake-ups


async def test_a_commit_in_another_process_wakes_this_one(pg_url: str) -> None:
    async with (
        durable.connect(pg_url, poll_interval=60) as here,
        durable.connect(pg_url, poll_interval=60) as elsewhere,
        anyio.create_task_group() as tg,
    ):
        wakes = Wakes(here)
        here.driver.hub.want([("runs", "default", q) for q in ("q1", "q2", "q4")])
        tg.start_soon(here.driver.watch)
        await wakes.until("any")  # listening: a (re)connect says "any"
        await elsewhere.start(greeting, "x", id="remote-start", task_queue="q1")
        await wakes.until("runs", "default", "q1")

        # our own commits are published once, locally, not echoed back by NOTIFY:
        # a later commit's notification arrives after the echo would have
        await here.start(greeting, "y", id="local-start", task_queue="q2")
        await elsewhere.start(greeting, "z", id="marker", task_queue="q4")
        await wakes.until("runs", "default", "q4")
        assert wakes.keys().count(("runs", "default", "q2")) == 1
        tg.cancel_scope.cancel()


async def test_a_process_hears_only_the_queues_and_runs_it_wants(pg_url: str) -> None:
    """NOTIFY goes to the channel of a wake-up's address (durable.wakes.address):
    a process hears another queue's work, or another run's steps, not at all.
    Notifications reach one listener in commit order whatever their channel,
    so a later marker shows that the earlier ones were never sent here."""
    async with (
        durable.connect(pg_url, poll_interval=60) as here,
        durable.connect(pg_url, poll_interval=60) as elsewhere,
        anyio.create_task_group() as tg,
    ):
        wakes = Wakes(here)
        tg.start_soon(here.driver.watch)
        await wakes.until("any")
        # wanted once listening: the LISTEN is followed by a wake-up of the key
        # itself, since a notification sent before it may have been missed
        unwant = here.driver.hub.want([("runs", "default", "mine")])
        await wakes.until("runs", "default", "mine")
        wakes.seen.clear()
        await elsewhere.start(greeting, "x", id="theirs", task_queue="theirs")
        ours = await elsewhere.start(greeting, "y", id="ours", task_queue="mine")
        await wakes.until("runs", "default", "mine")
        assert ("runs", "default", "theirs") not in wakes.keys(), wakes.seen

        # a run's wake-ups reach whoever wants the run (its owner, a waiter) only
        assert ours.run_id is not None
        hold = here.driver.hub.want([Wake.run(ours.run_id).key])
        await wakes.until("run", ours.run_id)
        other = await elsewhere.start(greeting, "z", id="other", task_queue="mine")
        wakes.seen.clear()
        await other.cancel()
        await ours.cancel()
        await wakes.until("run", ours.run_id)
        assert Wake.run(other.run_id or "") not in wakes.seen, wakes.seen

        # wanted no more: nothing is heard of it
        unwant()
        hold()
        marker = here.driver.hub.want([("runs", "default", "marker")])
        await wakes.until("runs", "default", "marker")  # listening for the marker
        wakes.seen.clear()
        await elsewhere.start(greeting, "w", id="late", task_queue="mine")
        await elsewhere.start(greeting, "m", id="marker", task_queue="marker")
        await wakes.until("runs", "default", "marker")
        assert ("runs", "default", "mine") not in wakes.keys(), wakes.seen
        marker()
        tg.cancel_scope.cancel()


async def test_a_wake_up_for_queue_a_makes_no_worker_of_queue_b_claim(pg_url: str) -> None:
    """Counted, not timed: a published wake-up either leaves the claim loop's
    trigger set or has begun a claim pass (`ClaimLoop.begun`), so a worker of
    queue b that shows neither after queue a's wake-ups (from this process,
    and from another one, heard before a later marker) never scanned for them."""
    async with (
        durable.connect(pg_url, poll_interval=60) as here,
        durable.connect(pg_url, poll_interval=60) as elsewhere,
    ):
        wakes = Wakes(here)
        async with durable.Worker(here, workflows=[greeting], activities=[greet],
                                  task_queue="b", poll_interval=60) as worker:
            # the worker's watch() listens, on queue b's channels too ("any" follows
            # the LISTENs of a (re)connect)
            await wakes.until("any")
            await worker.watchdog_poked.wait()  # its first pass pokes the claim loops
            await worker.runs.claim_now()
            await worker.remote.claims.claim_now()
            begun = (worker.runs.begun, worker.remote.claims.begun)
            unwant = here.driver.hub.want([("runs", "default", "marker")])
            await wakes.until("runs", "default", "marker")
            wakes.seen.clear()

            await here.start(greeting, "local", id="a-here", task_queue="a")
            await elsewhere.start(greeting, "remote", id="a-elsewhere", task_queue="a")
            await elsewhere.start(greeting, "m", id="marker", task_queue="marker")
            await wakes.until("runs", "default", "marker")  # commit order: a's came first
            assert ("runs", "default", "a") in wakes.keys()  # the local one only
            assert not worker.runs.trigger.pending
            assert not worker.remote.claims.trigger.pending
            assert (worker.runs.begun, worker.remote.claims.begun) == begun

            # its own queue's work, started in another process, is claimed at once
            handle = await elsewhere.start(greeting, "b", id="b-elsewhere", task_queue="b")
            assert await handle.result() == "hello b"
            unwant()


async def test_an_attempt_is_claimed_where_its_run_runs_and_announced_nowhere_else(
        pg_url: str) -> None:
    """Issue 26, counted: an attempt a run schedules is claimed by the worker of
    the run's process (its outcome then reaches the run in process), and while
    that worker takes its queue's attempts the queue's other processes are not
    told: another process's worker of the queue heard nothing and began no
    claim pass before a later marker (notifications arrive in commit order)."""
    async with (
        durable.connect(pg_url, poll_interval=60) as here,
        durable.connect(pg_url, poll_interval=60) as elsewhere,
    ):
        theirs = Wakes(elsewhere)
        async with (
            durable.Worker(here, workflows=[greeting], activities=[greet], task_queue="q",
                           poll_interval=60) as ours,
            durable.Worker(elsewhere, activities=[greet], task_queue="q",
                           poll_interval=60) as other,
        ):
            await theirs.until("any")
            await other.watchdog_poked.wait()  # its first pass pokes the claim loops
            await other.remote.claims.claim_now()
            counted = (other.remote.claims.begun, other.remote.claims.claimed)
            marker = elsewhere.driver.hub.want([("runs", "default", "marker")])
            await theirs.until("runs", "default", "marker")
            theirs.seen.clear()

            handle = await here.start(greeting, "x", id="x", task_queue="q")
            assert await handle.result() == "hello x"
            await here.start(greeting, "m", id="marker", task_queue="marker")
            await theirs.until("runs", "default", "marker")
            assert Wake.activities("default", "q") not in theirs.seen, theirs.seen
            assert not other.remote.claims.trigger.pending
            assert (other.remote.claims.begun, other.remote.claims.claimed) == counted
            assert ours.remote.claims.claimed == 1 and ours.remote.claims.spread == 0
            marker()


_parking: dict[str, anyio.Event] = {}


@activity.defn
async def parked(i: int) -> int:
    await _parking["open"].wait()
    return i


@workflow.defn(name="baton_fan_out")  # conformance.engine has a fan_out
async def fan_out(n: int) -> int:
    handles = [workflow.start_activity(parked, i) for i in range(n)]
    return sum([await h for h in handles])


async def test_attempts_beyond_the_room_of_their_runs_process_go_to_the_others(
        pg_url: str) -> None:
    """Issue 26, the baton: a run schedules 4 attempts where its worker has room
    for 1; the others' processes were not told by the commit, so that worker
    tells them, and the other process's worker drains the rest."""
    _parking["open"] = anyio.Event()
    async with (
        durable.connect(pg_url, poll_interval=60) as here,
        durable.connect(pg_url, poll_interval=60) as elsewhere,
    ):
        async with (
            durable.Worker(here, workflows=[fan_out], activities=[parked], task_queue="fan",
                           max_concurrent_activities=1, poll_interval=60) as ours,
            durable.Worker(elsewhere, activities=[parked], task_queue="fan",
                           poll_interval=60) as other,
        ):
            handle = await here.start(fan_out, 4, id="fan", task_queue="fan")
            with anyio.fail_after(30):
                while other.remote.claims.claimed < 3:
                    await anyio.sleep(0.01)
            assert ours.remote.claims.claimed == 1 and ours.remote.claims.spread >= 1
            _parking["open"].set()
            assert await handle.result() == 6


async def test_watch_reconnects_after_its_connection_is_killed(pg_url: str) -> None:
    async with (
        durable.connect(pg_url, poll_interval=60) as here,
        durable.connect(pg_url, poll_interval=60) as elsewhere,
        anyio.create_task_group() as tg,
    ):
        wakes = Wakes(here)
        here.driver.hub.want([("runs", "default", "q3")])  # heard again after the reconnect
        tg.start_soon(here.driver.watch)
        await wakes.until("any")
        wakes.seen.clear()
        assert await kill_backends(elsewhere, here) >= 1
        # the reconnect says "any" (notifications may have been missed meanwhile) ...
        await wakes.until("any")
        # ... and notifications flow again
        await elsewhere.start(greeting, "x", id="after-kill", task_queue="q3")
        await wakes.until("runs", "default", "q3")
        tg.cancel_scope.cancel()


async def test_watch_says_any_every_poll_interval_without_notifications(pg_url: str) -> None:
    async with (
        durable.connect(pg_url, poll_interval=0.1) as client,
        anyio.create_task_group() as tg,
    ):
        wakes = Wakes(client)
        began = anyio.current_time()
        tg.start_soon(client.driver.watch)
        with anyio.fail_after(30):
            while wakes.seen.count(Wake(("any",))) < 5:  # the connect's, then 4 polls
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    # never more often than the poll interval (a loaded host only makes it rarer)
    assert anyio.current_time() - began >= 4 * 0.1


async def test_tables_that_changed_are_analyzed_where_autovacuum_is_off(pg_url: str) -> None:
    """Never-analyzed tables make the planner scan whole namespaces (docs/benchmarks.md,
    "Schedules"): where the server's autovacuum is off, the driver analyzes them."""
    async with durable.connect(pg_url) as client:
        off = (await sql(client, "SELECT current_setting('autovacuum') = 'off' AS off",
                         mode="one"))["off"]
        for k in range(80):  # past autovacuum's threshold, 50 rows plus a tenth
            await sql(client, "INSERT INTO namespace_settings (namespace, pruned, updated_at) "
                      "VALUES (?, '{}', 0)", f"ns-{k}")
        analyzed: list[str] = []
        # the server counts a backend's changes when that backend reports them (up
        # to a second later): look until they show
        with anyio.fail_after(30):
            while off and not analyzed:
                analyzed = await client.driver.keep_statistics()  # type: ignore[attr-defined]
                await anyio.sleep(0.1)
        last = await sql(client, "SELECT last_analyze FROM pg_stat_user_tables WHERE "
                         "schemaname = current_schema() AND relname = 'namespace_settings'",
                         mode="one")
    if off:
        assert "namespace_settings" in analyzed
        assert last["last_analyze"] is not None
    else:  # autovacuum analyzes them
        assert analyzed == []


# ---------------------------------------------------------------- lost connections

CALLS: dict[str, int] = {}
GATES: dict[str, tuple[anyio.Event, anyio.Event]] = {}  # (started, opened)


@activity.defn
async def counted_step(key: str) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    return CALLS[key]


@activity.defn
async def gate(key: str) -> str:
    started, opened = GATES[key]
    started.set()
    await opened.wait()
    return "opened"


@workflow.defn
async def three_steps(key: str) -> list[Any]:
    first = await workflow.execute_local_activity(counted_step, f"{key}-1")
    opened = await workflow.execute_activity(gate, key)
    second = await workflow.execute_local_activity(counted_step, f"{key}-2")
    third = await workflow.execute_activity(counted_step, f"{key}-3")
    return [first, opened, second, third]


async def test_killed_connections_mid_run_lose_nothing_and_repeat_nothing(pg_url: str) -> None:
    key = f"kill-{id(pg_url)}"
    started, opened = GATES[key] = (anyio.Event(), anyio.Event())
    async with (
        durable.connect(pg_url, poll_interval=0.2) as client,
        durable.connect(pg_url) as killer,
    ):
        async with durable.Worker(client, workflows=[three_steps],
                                  activities=[counted_step, gate], poll_interval=0.2):
            handle = await client.start(three_steps, key, id="killed")
            with anyio.fail_after(10):
                await started.wait()  # step 1 is recorded, the gate activity runs
            assert await kill_backends(killer, client) >= 1
            opened.set()
            assert await handle.result() == [1, "opened", 1, 1]
        history = [e.type for e in await handle.history()]
    assert history.count("ActivityCompleted") == 4
    assert history.count("WorkflowCompleted") == 1
    assert [CALLS[f"{key}-{n}"] for n in (1, 2, 3)] == [1, 1, 1]


async def _retried_whole(pg_url: str, table: str, failure: list[Stmt]) -> None:
    """A program whose first attempt meets `failure` after its INSERT is run
    again whole: its answer is the second attempt's, and only that attempt's
    row is recorded."""
    async with durable.connect(pg_url) as client:
        await sql(client, f"CREATE TABLE {table} (n BIGINT)")
        attempts = 0

        def program(tx: Tx) -> Program[int]:
            nonlocal attempts
            attempts += 1
            yield ex(f"INSERT INTO {table} (n) VALUES (?)", attempts)
            if attempts == 1:  # nothing of the first attempt is recorded
                for stmt in failure:  # noqa: UP028 (yield from a list cannot take a result sent back)
                    yield stmt
            return attempts

        assert await client.driver.run(program) == 2
        rows = await sql(client, f"SELECT n FROM {table}", mode="all")
    assert [r["n"] for r in rows] == [2]


async def test_connection_lost_inside_a_transaction_retries_it_whole(pg_url: str) -> None:
    # the connection dies before COMMIT
    await _retried_whole(pg_url, "marks", [q("SELECT pg_terminate_backend(pg_backend_pid())")])


async def test_a_statement_cancelled_by_the_server_retries_its_transaction_whole(
        pg_url: str) -> None:
    """A DBA's ``pg_cancel_backend`` or a ``statement_timeout`` cancels the
    statement (57014), not the connection: the transaction is rolled back, so
    it is re-run whole, as a deadlock is. It was the program's own error: a
    worker's claim that met it stopped the worker (the MariaDB audit found
    the same with KILL QUERY there)."""
    await _retried_whole(pg_url, "cancelled_marks", [ex("SET LOCAL statement_timeout = 1"),
                                                     q("SELECT pg_sleep(5)")])


async def test_connection_lost_during_commit_is_storage_unavailable(pg_url: str) -> None:
    async with durable.connect(pg_url) as client:
        # a deferred trigger runs inside COMMIT: kill the session right there
        await sql(client, "CREATE TABLE commit_bomb (n BIGINT)")
        await sql(client, "CREATE FUNCTION commit_bomb() RETURNS trigger LANGUAGE plpgsql AS "
                          "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); "
                          "RETURN NULL; END $$")
        await sql(client, "CREATE CONSTRAINT TRIGGER commit_bomb AFTER INSERT ON commit_bomb "
                          "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "
                          "commit_bomb()")
        with pytest.raises(durable.StorageUnavailable) as err:
            await sql(client, "INSERT INTO commit_bomb (n) VALUES (1)")
        assert err.value.outcome_unknown
        assert "may or may not have been recorded" in str(err.value)
        # the driver goes on with fresh connections
        assert await sql(client, "SELECT 1 AS one", mode="one") is not None


# ------------------------------------- a self-committing statement whose answer is lost
#
# A step's local activities, a claim and a start are each ONE statement sent
# without BEGIN/COMMIT: the server commits it when it ends. The proxy
# (tests/pg_cut.py) cuts the connection right after the server answered such
# a statement ("after": it committed, the client never hears so) or right
# before it would have reached the server ("before": it did not). Either way
# the outcome is unknown to the client; it must read back, not re-send blind.

BODIES: dict[str, int] = {}
NOTED: dict[str, int] = {}


@asynccontextmanager
async def cutting(url: str) -> AsyncIterator[tuple[CuttingProxy, str]]:
    """A cutting proxy to the test server, and `url` through it."""
    parts = urlsplit(POSTGRES_URL)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    async with anyio.create_task_group() as tg:
        await proxy.start(tg)
        try:
            yield proxy, proxy.url(url)
        finally:
            tg.cancel_scope.cancel()


@activity.defn
async def noted(key: str) -> str:
    NOTED[key] = NOTED.get(key, 0) + 1
    return f"{key}-result"


@workflow.defn
async def noted_steps(key: str) -> list[str]:
    BODIES[key] = BODIES.get(key, 0) + 1  # a replay (the run dropped) runs this again
    first = await workflow.execute_local_activity(noted, f"{key}-1")
    second = await workflow.execute_local_activity(noted, f"{key}-2")
    return [first, second]


@pytest.mark.parametrize("when", ["after", "before"])
async def test_a_step_whose_answer_is_lost_is_read_back_and_the_run_goes_on(
    pg_url: str, when: str,
) -> None:
    key = f"step-{when}-{uuid.uuid4().hex[:8]}"
    async with (
        durable.connect(pg_url) as direct,
        cutting(pg_url) as (proxy, via_proxy),
        durable.connect(via_proxy) as client,
    ):
        # the first step's one statement (`fastpath._local_steps_in_one`)
        cut = proxy.arm("WITH fence AS", when)  # type: ignore[arg-type]
        async with durable.Worker(client, workflows=[noted_steps], activities=[noted],
                                  lease_seconds=60):
            handle = await direct.start(noted_steps, key, id=key)
            with anyio.fail_after(15):  # far below the 60 s lease
                assert await handle.result() == [f"{key}-1-result", f"{key}-2-result"]
        assert cut.is_set() and proxy.cuts == 1
        history = [e.type for e in await direct.get_handle(key).history()]
    assert history.count("ActivityCompleted") == 2  # the first step recorded once
    assert (NOTED[f"{key}-1"], NOTED[f"{key}-2"]) == (1, 1)
    assert BODIES[key] == 1  # the run went on: never dropped, never replayed


@pytest.mark.parametrize("when", ["after", "before"])
async def test_a_start_whose_answer_is_lost_returns_its_one_run(pg_url: str, when: str) -> None:
    key = f"start-{when}-{uuid.uuid4().hex[:8]}"
    async with (
        durable.connect(pg_url) as direct,
        cutting(pg_url) as (proxy, via_proxy),
        durable.connect(via_proxy) as client,
    ):
        cut = proxy.arm("WITH existing AS", when)  # type: ignore[arg-type]  # start_in_one
        handle = await client.start(noted_steps, key, id=key,
                                    options=durable.StartOptions.reject_duplicate())
        assert cut.is_set()
        run_ids = await direct.store.run_ids("default", key)
        assert run_ids == [handle.run_id]  # the run it started, once
        async with durable.Worker(direct, workflows=[noted_steps], activities=[noted]):
            with anyio.fail_after(15):
                assert await handle.result() == [f"{key}-1-result", f"{key}-2-result"]
        history = [e.type for e in await direct.get_handle(key).history()]
    assert history.count("WorkflowStarted") == 1


async def test_a_claim_whose_answer_is_lost_strands_no_run_for_a_lease(pg_url: str) -> None:
    key = f"claim-{uuid.uuid4().hex[:8]}"
    async with (
        durable.connect(pg_url) as direct,
        cutting(pg_url) as (proxy, via_proxy),
        durable.connect(via_proxy) as client,
    ):
        handle = await direct.start(noted_steps, key, id=key)  # ready before any claim
        # the worker's first claim (`fastpath.claim_runs_in_one`) takes the run,
        # commits, and its answer is lost
        cut = proxy.arm("WITH picked AS MATERIALIZED", "after")
        async with durable.Worker(client, workflows=[noted_steps], activities=[noted],
                                  lease_seconds=60):
            with anyio.fail_after(15):  # far below the 60 s lease it would have waited
                assert await handle.result() == [f"{key}-1-result", f"{key}-2-result"]
        assert cut.is_set() and proxy.cuts == 1
        history = [e.type for e in await direct.get_handle(key).history()]
    assert history.count("WorkflowStarted") == 1 and history.count("ActivityCompleted") == 2
    assert BODIES[key] == 1


# ---------------------------------------------------------------- kept connections


async def test_a_transaction_takes_the_connection_the_last_one_left(pg_url: str) -> None:
    """One session after another takes the connection the last transaction
    left, not asyncpg's pool (whose acquire and release cost a tenth of a
    sequential step: docs/benchmarks.md, "PostgreSQL sequential steps: a
    kept connection")."""
    async with durable.connect(pg_url) as client:
        pids = [(await sql(client, "SELECT pg_backend_pid() AS pid", mode="one"))["pid"]
                for _ in range(5)]
        assert len(set(pids)) == 1
        # a failed transaction's connection goes back through the pool (which
        # resets what asyncpg should); the next one still works
        with pytest.raises(Exception, match="division by zero"):
            await sql(client, "SELECT 1 / 0 AS n", mode="one")
        assert client.driver._kept == []  # type: ignore[attr-defined]
        assert await sql(client, "SELECT 1 AS one", mode="one") is not None


async def test_a_kept_connection_the_server_ended_is_not_used(pg_url: str) -> None:
    async with durable.connect(pg_url) as client, durable.connect(pg_url) as killer:
        before = (await sql(client, "SELECT pg_backend_pid() AS pid", mode="one"))["pid"]
        assert await kill_backends(killer, client) >= 1
        await anyio.sleep(0.05)  # (the client may or may not have noticed yet: both work)
        after = (await sql(client, "SELECT pg_backend_pid() AS pid", mode="one"))["pid"]
        assert after != before
        await client.start(greeting, "kept", id="after-kill")  # and writes go on


async def test_a_kept_connection_goes_back_through_the_pool_now_and_then(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every KEEP_USES transactions, so that asyncpg's upkeep (max_queries,
    expired connections) still sees it; closing gives it back at once."""
    import asyncpg
    import durable_postgres.driver as pg

    monkeypatch.setattr(pg, "KEEP_USES", 3)
    taken = 0
    acquire = asyncpg.Pool.acquire

    def counted(pool: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal taken
        taken += 1
        return acquire(pool, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Pool, "acquire", counted)
    async with durable.connect(pg_url) as client:
        for _ in range(9):
            await sql(client, "SELECT 1 AS one", mode="one")
        assert taken == 4  # the schema check's, then transactions 1, 4 and 7
        began = anyio.current_time()
    # the pool's close waits for every connection out of it (up to 10 s)
    assert anyio.current_time() - began < 5


async def test_only_an_idle_connection_is_kept() -> None:
    """`_Lease` with stand-ins: a connection left in a transaction, closed, or
    detached by the pool (its calls refused) is given back, never kept; a kept
    one closed meanwhile is not used."""
    import asyncpg
    import durable_postgres.driver as pg

    class Conn:
        def __init__(self, *, in_tx: bool = False, closed: bool = False,
                     detached: bool = False) -> None:
            self.in_tx, self.closed, self.detached = in_tx, closed, detached

        def is_closed(self) -> bool:
            if self.detached:
                raise asyncpg.InterfaceError("connection has been released back to the pool")
            return self.closed

        def is_in_transaction(self) -> bool:
            return self.in_tx

    class Pool:
        def __init__(self) -> None:
            self.released: list[Conn] = []
            self.fresh = 0

        async def acquire(self, timeout: float) -> Conn:  # noqa: ASYNC109 (asyncpg's)
            self.fresh += 1
            return Conn()

        async def release(self, conn: Conn) -> None:
            self.released.append(conn)

    class Driver:
        connect_timeout = 1.0

        def __init__(self, pool: Pool) -> None:
            self._pool = pool
            self._kept: list[tuple[Conn, int]] = []

    pool = Pool()
    driver = Driver(pool)
    for bad in (Conn(in_tx=True), Conn(closed=True), Conn(detached=True)):
        if not bad.in_tx:  # (a kept one was idle when kept, and nobody took it since)
            lease = pg._Lease(driver, pool)  # type: ignore[arg-type]
            driver._kept = [(bad, 1)]
            async with lease as conn:  # a kept connection closed meanwhile is skipped
                assert conn is not bad
            assert pool.released[-1] is bad and driver._kept == [(conn, 1)]
        lease = pg._Lease(driver, pool)  # type: ignore[arg-type]
        driver._kept = []
        async with lease as conn:
            conn.in_tx = bad.in_tx
            conn.closed = bad.closed
            conn.detached = bad.detached
        assert pool.released[-1] is conn and driver._kept == []  # not kept either
    lease = pg._Lease(driver, pool)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        async with lease as conn:
            raise RuntimeError("the transaction failed")
    assert pool.released[-1] is conn and driver._kept == []


async def test_a_connection_lost_outside_a_transaction_is_storage_unavailable(
    pg_url: str,
) -> None:
    """A baton's NOTIFY (`announce`) is sent outside `run`, on a pooled
    connection. A connection lost there reached the worker's claim loop as the
    library's own error (an `OSError`), which a worker takes for a bug in
    durable: it stopped serving. It is `StorageUnavailable`, as from `run`,
    and the next call opens a new connection."""
    from durable.wakes import Wake

    async with cutting(pg_url) as (proxy, via_proxy), durable.connect(via_proxy) as client:
        driver: Any = client.driver
        baton = [Wake.activities(client.namespace, "q")]
        cut = proxy.arm("NOTIFY", "before")
        with pytest.raises(durable.StorageUnavailable) as err:
            await driver.announce(baton)
        assert cut.is_set() and proxy.cuts == 1
        assert err.value.outcome_unknown  # it may have been sent
        await driver.announce(baton)  # a new connection
    assert proxy.cuts == 1


async def test_a_transaction_that_meets_the_client_closing_is_storage_closed(
    pg_url: str,
) -> None:
    """The client closed between a transaction's check of its pool and its
    acquiring a connection: asyncpg says the pool is closed (an
    `InterfaceError`), which a worker took for a bug in durable and stopped
    on. It is `StorageClosed`, as if the close had come first."""
    client = await durable.connect(pg_url)
    driver: Any = client.driver
    acquire = driver._acquire

    @asynccontextmanager
    async def closed_first(pool: Any) -> AsyncIterator[Any]:
        driver._pool = None  # what close() does first ...
        await driver._close_pool(pool)  # ... then it closes the pool
        async with acquire(pool) as conn:
            yield conn

    driver._acquire = closed_first

    def program(tx: Tx) -> Program[Any]:
        raise AssertionError("ran on a closed pool")
        yield  # a program

    with pytest.raises(durable.StorageClosed):
        await driver.run(program)
    await client.close()
