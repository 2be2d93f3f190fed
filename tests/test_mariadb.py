"""The MariaDB driver itself: URLs, connecting, the wake log, retries.

The engine's behaviour on MariaDB is the conformance suite's business
(tests/conftest.py runs test_engine.py, test_interaction.py, test_timeouts.py,
test_cancellation.py and test_crash.py on it); these pin what only this
driver does. They take their server from DURABLE_TEST_MARIADB_URL and skip
without one (fail with DURABLE_REQUIRE_MARIADB=1).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import anyio
import pytest
from conftest import drop_mariadb_database, new_mariadb_url, require_mariadb

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
