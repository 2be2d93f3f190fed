"""The MariaDB driver itself: URLs, connecting, the wake log, retries.

The engine's behaviour on MariaDB is the conformance suite's business
(tests/conftest.py runs test_engine.py, test_interaction.py, test_timeouts.py,
test_cancellation.py and test_crash.py on it); these pin what only this
driver does. They take their server from DURABLE_TEST_MARIADB_URL and skip
without one (fail with DURABLE_REQUIRE_MARIADB=1).
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import anyio
import anyio.abc
import pytest
from conftest import (
    MARIADB_URL,
    _mariadb_admin,
    drop_mariadb_database,
    new_mariadb_url,
    require_mariadb,
)

import durable
from durable.driver import Tx, Wake, ex, q1
from durable.errors import ConfigurationError, StorageUnavailable

pytestmark = [pytest.mark.mariadb, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def url() -> AsyncIterator[str]:
    require_mariadb()
    url = new_mariadb_url()
    yield url
    drop_mariadb_database(url)


def test_urls_are_checked_at_the_call() -> None:
    pytest.importorskip("asyncmy")
    from durable_mariadb.url import parse_url

    target = parse_url("mariadb://ann:s3cret@db.example:3307/durable?lock_wait_timeout=5")
    assert (target.host, target.port, target.user, target.database, target.lock_wait_timeout) == (
        "db.example", 3307, "ann", "durable", 5)
    assert "s3cret" not in target.masked
    assert parse_url("mysql://root@127.0.0.1/test").port == 3306
    with pytest.raises(ConfigurationError, match="names no database"):
        parse_url("mariadb://root@127.0.0.1:3306/")
    with pytest.raises(ConfigurationError, match="unknown option"):
        parse_url("mariadb://root@127.0.0.1/test?schema=x")
    with pytest.raises(ConfigurationError, match="lock_wait_timeout"):
        parse_url("mariadb://root@127.0.0.1/test?lock_wait_timeout=0")


async def test_both_schemes_find_the_driver(url: str) -> None:
    for scheme in ("mariadb", "mysql"):
        async with durable.connect(scheme + url[url.index(":"):]) as client:
            assert type(client.driver).__name__ == "MariaDBDriver"


async def test_a_missing_database_is_a_configuration_error_naming_the_fix() -> None:
    require_mariadb()
    missing = new_mariadb_url()
    drop_mariadb_database(missing)
    with pytest.raises(ConfigurationError, match=r"does not exist.*CREATE DATABASE"):
        async with durable.connect(missing):
            pass
    # a socket that is not there is named as a socket, not as a host and port
    with pytest.raises(ConfigurationError, match=r"on the socket /nonexistent\.sock"):
        async with durable.connect(MARIADB_URL + "?unix_socket=/nonexistent.sock"):
            pass
    # the statement to run is one that runs: the name quoted (it read
    # "CREATE DATABASE my db", a syntax error once pasted)
    with pytest.raises(ConfigurationError, match=r"\(CREATE DATABASE `my db`\)"):
        async with durable.connect(MARIADB_URL.rsplit("/", 1)[0] + "/my%20db"):
            pass


async def test_ids_compare_as_bytes_case_and_trailing_spaces_count(url: str) -> None:
    """utf8mb4_nopad_bin: 'A' and 'a', 'x' and 'x ' are different workflow ids,
    as on SQLite and PostgreSQL (MariaDB's default collation says equal)."""
    async with durable.connect(url) as client:
        def both(tx: Tx):  # type: ignore[no-untyped-def]
            for key in ("A", "a", "x", "x "):
                yield ex("INSERT INTO durable_meta (`key`, value) VALUES (?, 'v')", key)
            row = yield q1("SELECT count(*) AS n FROM durable_meta WHERE `key` = 'x'")
            return int(row["n"])

        assert await client.driver.run(both) == 1


async def test_another_process_commit_reaches_the_watcher_as_its_keys(url: str) -> None:
    """The wake log: a commit's keys reach another driver's watch() as remote
    wake-ups within its poll interval, never its own."""
    async with durable.connect(url) as writer, durable.connect(
            url, poll_interval=0.01, any_interval=3600) as reader:
        heard: list[Wake] = []
        reader.driver.hub.subscribe(heard.append)

        def wake(tx: Tx):  # type: ignore[no-untyped-def]
            tx.wake(Wake.runs("ns", "q"))
            yield ex("SELECT 1")

        read_end = reader.driver._last_wake_id
        baseline = threading.Event()  # the watcher has read where the log ends

        async def reading_end() -> int:
            end = await read_end()
            baseline.set()
            return end

        reader.driver._last_wake_id = reading_end  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.driver.watch)
            # the writer commits once the watcher knows where the log ended before
            # it (after a fixed 0.05 s, a slow first read missed the commit)
            with anyio.fail_after(30):
                while not baseline.is_set():
                    await anyio.sleep(0.01)
            await writer.driver.run(wake)
            await reader.driver.run(wake)  # its own: not heard as remote
            with anyio.fail_after(5):
                while not any(w.key == Wake.runs("ns", "q").key and w.remote for w in heard):
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        remote = [w for w in heard if w.remote and w.key == Wake.runs("ns", "q").key]
        assert len(remote) == 1


async def test_a_deadlock_reruns_the_transaction_and_too_many_give_up(url: str) -> None:
    import asyncmy.errors

    async with durable.connect(url, retries=2) as client:
        attempts = []

        def deadlocks_once(tx: Tx):  # type: ignore[no-untyped-def]
            attempts.append(1)
            yield ex("SELECT 1")
            if len(attempts) == 1:
                raise asyncmy.errors.OperationalError(1213, "Deadlock found")
            return "done"

        assert await client.driver.run(deadlocks_once) == "done"
        assert len(attempts) == 2

        def always(tx: Tx):  # type: ignore[no-untyped-def]
            yield ex("SELECT 1")
            raise asyncmy.errors.OperationalError(1205, "Lock wait timeout exceeded")

        with pytest.raises(StorageUnavailable, match="kept colliding") as caught:
            await client.driver.run(always)
        assert caught.value.outcome_unknown is False


async def test_an_update_counts_the_rows_it_matched_not_those_it_changed(url: str) -> None:
    """`durable.store.returning` reads an UPDATE's row count to know whether the
    row matched: an UPDATE that sets what is already there still counts."""
    async with durable.connect(url) as client:
        def same_value(tx: Tx):  # type: ignore[no-untyped-def]
            yield ex("INSERT INTO durable_meta (`key`, value) VALUES ('k', 'v')")
            return (yield ex("UPDATE durable_meta SET value = 'v' WHERE `key` = 'k'"))

        assert await client.driver.run(same_value) == 1


class OutageProxy:
    """A TCP proxy to the MariaDB server that can play a server restart: `down()`
    cuts every connection it carries and closes each new one at once (the
    client sees a lost connection, as while the server restarts); `up()`
    carries them again. `refused` counts the connections it closed;
    `frozen` holds every byte while set."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 3306)
        self._url = url
        self._carried: set[anyio.abc.SocketStream] = set()
        self.is_down = False
        #: hold every byte (connections stay open): a server that stopped answering
        self.frozen = False
        self.refused = 0

    async def start(self, tg: anyio.abc.TaskGroup) -> str:
        """Listen; the URL that reaches the server through the proxy."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(listener.serve, self._handle)
        parts = urlsplit(self._url)
        userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return parts._replace(netloc=f"{userinfo}127.0.0.1:{port}").geturl()

    def down(self) -> None:
        self.is_down = True
        for stream in list(self._carried):  # both ends see the connection end
            stream.extra(anyio.abc.SocketAttribute.raw_socket).shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        self.is_down = False

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            if self.is_down:
                self.refused += 1
                return
            async with await anyio.connect_tcp(*self._target) as server:
                self._carried.update((client, server))
                try:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_pump, self, client, server)
                        tg.start_soon(_pump, self, server, client)
                finally:
                    self._carried.difference_update((client, server))


async def _pump(proxy: OutageProxy, a: anyio.abc.SocketStream,
                b: anyio.abc.SocketStream) -> None:
    try:
        async for chunk in a:
            while proxy.frozen:  # the bytes are held, the connection kept
                await anyio.sleep(0.01)
            await b.send(chunk)
        await b.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if f"event='{event}'" in r.getMessage()
            or r.getMessage().startswith(event)]


async def test_an_outage_is_logged_once_by_the_wake_log_reader_and_the_transactions(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A server restart: the wake-log reader, started during it, logs ``wake_log_unreadable`` once
    and ``wake_log_readable_again`` once, and reads less often meanwhile; the
    transactions retried after the lost connections say so once
    (``transaction_retried``) and ``storage_reconnected`` once it is back. A
    warning per poll (20 a second) and per retried transaction flooded the
    host's log: hundreds of lines per worker for a five-second restart."""
    caplog.set_level(logging.INFO, logger="durable.mariadb")
    async with anyio.create_task_group() as proxying:
        proxy = OutageProxy(url)
        proxied = await proxy.start(proxying)
        # the reader's task group inside the client's block: it ends (cancelled)
        # before the client closes. Outside it, the cancellation took effect only
        # after the close, and a read in between raised StorageClosed (CI, once)
        async with durable.connect(proxied, poll_interval=0.01, any_interval=0.08,
                                   retries=2, min_pool=0) as client, \
                anyio.create_task_group() as tg:
            driver = client.driver

            def touch(tx: Tx):  # type: ignore[no-untyped-def]
                yield ex("SELECT 1")

            await driver.run(touch)
            proxy.down()
            # a worker that starts while the server is away: its reader waits
            # for the server (it raised asyncmy's OperationalError, which
            # stopped the worker)
            tg.start_soon(driver.watch)
            for _ in range(3):
                with pytest.raises(StorageUnavailable):
                    await driver.run(touch)
            with anyio.fail_after(30):
                while proxy.refused < 20:  # the reader kept trying, less often
                    await anyio.sleep(0.01)
            assert len(_events(caplog, "wake_log_unreadable")) == 1
            assert len(_events(caplog, "transaction_retried")) == 1
            proxy.up()
            await driver.run(touch)
            with anyio.fail_after(30):
                while not _events(caplog, "wake_log_readable_again"):
                    await anyio.sleep(0.01)
            await driver.run(touch)
            assert len(_events(caplog, "storage_reconnected")) == 1
            assert len(_events(caplog, "wake_log_unreadable")) == 1
            tg.cancel_scope.cancel()
        proxying.cancel_scope.cancel()


async def test_a_server_that_stops_answering_is_a_lost_connection(url: str) -> None:
    """A server that keeps the connection but answers nothing (hung, frozen, a
    network that drops packets): each answer is awaited at most
    `command_timeout`, then the connection counts as lost and the
    transaction is retried, then `StorageUnavailable`. Without a bound the
    statement waited forever, shielded, and so did its worker."""
    async with anyio.create_task_group() as proxying:
        proxy = OutageProxy(url)
        proxied = await proxy.start(proxying)
        async with durable.connect(proxied + "?lock_wait_timeout=1", command_timeout=1.5,
                                   retries=1, min_pool=0) as client:
            def touch(tx: Tx):  # type: ignore[no-untyped-def]
                yield ex("SELECT 1")

            await client.driver.run(touch)
            proxy.frozen = True
            outcome: list[BaseException] = []
            done = anyio.Event()

            async def call() -> None:
                try:
                    await client.driver.run(touch)
                except StorageUnavailable as exc:
                    outcome.append(exc)
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                try:
                    with anyio.fail_after(60):  # a guard: it hung for good before
                        await done.wait()
                finally:
                    proxy.frozen = False
            assert outcome and "unavailable" in str(outcome[0])
            from durable_mariadb import MariaDBDriver

            with pytest.raises(ConfigurationError, match="command_timeout"):
                MariaDBDriver(url + "?lock_wait_timeout=10", command_timeout=5)
        proxying.cancel_scope.cancel()


async def test_connect_options_are_checked_at_the_call() -> None:
    """A fractional connect_timeout is kept (it was truncated to 0, and asyncmy
    raised ValueError at connect); nonsense is a ConfigurationError naming it."""
    require_mariadb()
    from durable_mariadb import MariaDBDriver

    driver = MariaDBDriver(MARIADB_URL, connect_timeout=0.5)
    await driver.open()
    await driver.close()
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        MariaDBDriver(MARIADB_URL, connect_timeout=0)
    with pytest.raises(ConfigurationError, match="retries"):
        MariaDBDriver(MARIADB_URL, retries=-1)


async def test_losses_that_come_and_go_warn_once_and_name_max_connections(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A server at its connection limit refuses one new connection in a few:
    the transactions between succeed, so each refusal began an outage of its
    own and warned again (58 warnings a worker in 7 s at max_connections=12).
    Now `transaction_retried` warns at most once a minute, and a refusal for
    the connection limit says what to change."""
    import asyncmy.errors

    caplog.set_level(logging.INFO, logger="durable.mariadb")
    async with anyio.create_task_group() as proxying:
        proxy = OutageProxy(url)
        proxied = await proxy.start(proxying)
        async with durable.connect(proxied, retries=1, min_pool=0, max_pool=3) as client:
            def touch(tx: Tx):  # type: ignore[no-untyped-def]
                yield ex("SELECT 1")

            for _ in range(3):
                await client.driver.run(touch)
                proxy.down()
                with pytest.raises(StorageUnavailable):
                    await client.driver.run(touch)
                proxy.up()
            await client.driver.run(touch)
            assert len(_events(caplog, "transaction_retried")) == 1
            assert len(_events(caplog, "storage_reconnected")) == 1
            hint = client.driver._lost_hint(
                asyncmy.errors.OperationalError(1040, "Too many connections"))
            assert hint and "max_connections" in hint and "max_pool=3" in hint
        proxying.cancel_scope.cancel()


async def test_a_table_locked_by_another_client_is_a_lock_wait_retried(url: str) -> None:
    """Another client holds a table lock (LOCK TABLES, a backup's FLUSH TABLES
    WITH READ LOCK, DDL): a statement waits `lock_wait_timeout` for it, like
    for a row lock, and the transaction is retried as a conflict. The server's
    own limit for a metadata lock is a year: the statement waited until the
    read timeout and was taken for a lost server."""
    import asyncmy

    parts = urlsplit(url)
    other = await asyncmy.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                                  user=parts.username or "root", password=parts.password or "",
                                  database=parts.path.lstrip("/"), autocommit=True)
    try:
        async with durable.connect(url + "?lock_wait_timeout=1", command_timeout=20,
                                   retries=0) as client:
            async with other.cursor() as cur:
                await cur.execute("LOCK TABLES durable_meta WRITE")

            def read(tx: Tx):  # type: ignore[no-untyped-def]
                return (yield q1("SELECT value FROM durable_meta WHERE `key` = 'schema_version'"))

            with pytest.raises(StorageUnavailable, match="kept colliding") as caught:
                await client.driver.run(read)
            assert caught.value.outcome_unknown is False
            async with other.cursor() as cur:
                await cur.execute("UNLOCK TABLES")
            assert await client.driver.run(read)
    finally:
        await other.ensure_closed()


async def test_a_migration_waits_for_its_own_database_only_and_says_when_it_gave_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes creating durable's tables take turns under a named lock
    (GET_LOCK), whose names are the whole server's: one name for every
    database made a process wait for another creating tables elsewhere (a
    minute, seen in the suite beside other runs on the same server), and a
    lock not taken in time was not noticed: the DDL went ahead without it.
    Now the lock is the database's own, and a wait that runs out is a clear
    error naming the lock."""
    import asyncmy
    from durable_mariadb import driver as mariadb_driver

    require_mariadb()
    names = [f"durable_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    _mariadb_admin(*(f"CREATE DATABASE {name}" for name in names))
    parts = urlsplit(MARIADB_URL)
    urls = [parts._replace(path=f"/{name}").geturl() for name in names]
    holder = await asyncmy.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                                   user=parts.username or "root",
                                   password=parts.password or "", autocommit=True)
    try:
        lock = mariadb_driver.ddl_lock(names[0])
        async with holder.cursor() as cur:
            await cur.execute("SELECT GET_LOCK(%s, 5)", (lock,))
            assert (await cur.fetchone())[0] == 1
        monkeypatch.setattr(mariadb_driver, "_DDL_LOCK_TAKE", 1)
        async with durable.connect(urls[1]):  # another database: not held up
            pass
        with pytest.raises(ConfigurationError, match=f"schema lock.*{lock}"):
            async with durable.connect(urls[0]):
                pass
    finally:
        holder.close()
        for url in urls:
            drop_mariadb_database(url)


async def test_a_statement_stopped_by_kill_query_reruns_the_transaction(url: str) -> None:
    """An operator's ``KILL QUERY`` (or the server's ``max_statement_time``)
    stops a statement, not the connection: error 1317 (1969). The transaction
    is rolled back whole, so it is re-run like a lock wait past its timeout.
    It was the program's own error: a worker whose claim met it stopped
    (`worker_failed`), and an activity's completion it met was never recorded."""
    import asyncmy

    parts = urlsplit(url)

    async def connect(autocommit: bool) -> object:
        return await asyncmy.connect(
            host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
            user=parts.username or "root", password=parts.password or "",
            database=parts.path.lstrip("/"), autocommit=autocommit)

    async with durable.connect(url + "?lock_wait_timeout=30", retries=2) as client:
        holder = await connect(False)
        admin = await connect(True)
        try:
            async with holder.cursor() as cur:  # type: ignore[attr-defined]
                await cur.execute("BEGIN")
                await cur.execute("SELECT value FROM durable_meta WHERE `key` = "
                                  "'schema_version' FOR UPDATE")
            attempts = []

            def locking_read(tx: Tx):  # type: ignore[no-untyped-def]
                attempts.append(1)
                row = yield q1("SELECT value FROM durable_meta WHERE `key` = "
                               "'schema_version' FOR UPDATE")
                return row["value"]

            async def kill_the_wait_then_release() -> None:
                async with admin.cursor() as cur:  # type: ignore[attr-defined]
                    with anyio.fail_after(20):
                        # until the program runs again: a KILL QUERY that reached the
                        # statement before it began to wait can be spent on nothing
                        # (seen once in a loaded suite), so it is sent again
                        while len(attempts) < 2:
                            await cur.execute(
                                "SELECT id FROM information_schema.processlist WHERE "
                                "db = DATABASE() AND info LIKE 'SELECT value FROM durable_meta%'")
                            rows = await cur.fetchall()
                            if rows:
                                await cur.execute(f"KILL QUERY {int(rows[0][0])}")
                                await anyio.sleep(0.3)
                            else:
                                await anyio.sleep(0.05)
                await anyio.sleep(0.2)
                async with holder.cursor() as cur:  # type: ignore[attr-defined]
                    await cur.execute("ROLLBACK")

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_the_wait_then_release)
                assert await client.driver.run(locking_read)
            assert len(attempts) >= 2  # killed, and run again: the answer above is the rerun's
        finally:
            await holder.ensure_closed()  # type: ignore[attr-defined]
            await admin.ensure_closed()  # type: ignore[attr-defined]


async def test_a_value_the_server_refuses_is_a_write_rejected_naming_the_limit(url: str) -> None:
    """A start whose statement is past the server's max_allowed_packet (a
    client's `Limits(payload_bytes=...)` raised above it) raised asyncmy's own
    OperationalError(1153) from `client.start`, not a durable error; a value
    past its column (1406) likewise. Now `WriteRejected`, naming the setting,
    nothing recorded, and the next start goes through."""
    import asyncmy.errors

    packet = int(_mariadb_admin("SELECT @@max_allowed_packet")[0][0][0])
    if packet > 48 * 2**20:
        pytest.skip(f"the server's max_allowed_packet ({packet}) is above the test's payload")
    from durable.testing import isolated_definitions

    with isolated_definitions():
        @durable.workflow.defn(name="anything")
        async def anything(text: str) -> int:
            return len(text)

    limits = durable.Limits(payload_bytes=64 * 2**20)
    async with durable.connect(url, limits=limits) as client:
        with pytest.raises(durable.WriteRejected, match="max_allowed_packet") as caught:
            await client.start(anything, "a" * (packet + 2**20), id="too-big")
        assert isinstance(caught.value.__cause__, asyncmy.errors.OperationalError)
        with pytest.raises(durable.WorkflowNotFound):
            await client.get_handle("too-big").describe()
        handle = await client.start(anything, "small", id="small")
        assert (await handle.describe())["status"] == "pending"

        def too_long(tx: Tx):  # type: ignore[no-untyped-def]
            yield ex("INSERT INTO durable_meta (`key`, value) VALUES (?, 'x')", "k" * 256)

        with pytest.raises(durable.WriteRejected, match="1406"):
            await client.driver.run(too_long)
