"""Opening PostgreSQL or MariaDB storage honours the caller's cancellation.

A worker runs inside someone else's application: ``with
anyio.move_on_after(1): await durable.connect(url)``, or a task group
cancelled while a worker starts, must end at once, not when the pool's own
timeouts give up (the open was shielded whole: a hung server held the caller
for ``connect_timeout``, MariaDB's handshake for ``command_timeout``, a lock
held by another process for as long as it was held). And nothing of the
half-made pool may stay behind: no connection, no session on the server
(PostgreSQL's waiting for a lock outlives a dropped socket), no loop thread.

On both host loops (trio runs the drivers on a loop thread of their own).
The servers come from DURABLE_TEST_POSTGRES_URL / DURABLE_TEST_MARIADB_URL;
the hung server is a local listener that accepts and never answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from conftest import (
    MARIADB_URL,
    POSTGRES_URL,
    _mariadb_admin,
    drop_mariadb_database,
    require_mariadb,
)

import durable

pytestmark = pytest.mark.anyio

#: seconds a cancelled open may take to return: it closes what it opened
#: gracefully for at most `PooledDriver.ABANDON_WITHIN` (1 s); it waited for
#: connect_timeout (5 s here), a lock wait's timeout, or the lock's holder
PROMPT = 2.0


class Silent:
    """A server that accepts connections and never answers (hung, or a
    network that drops replies); `closed` counts the connections the client
    closed again."""

    def __init__(self) -> None:
        self.accepted = 0
        self.closed = 0
        self.arrived = anyio.Event()

    async def start(self, tg: anyio.abc.TaskGroup) -> int:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        tg.start_soon(listener.serve, self._handle)
        return int(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        self.accepted += 1
        self.arrived.set()
        async with stream:
            try:
                while True:  # read what the client says, answer nothing
                    await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self.closed += 1


def _loop_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith("-asyncio")]


async def _cancel_once(connect: Callable[[], Awaitable[Any]],
                       waiting: Callable[[], Awaitable[bool]]) -> float:
    """Run `connect` in a task group, cancel the group once `waiting()` says the
    open waits for the server; the seconds from the cancel to its return.
    Fails if `connect` returned or raised instead."""
    outcome: list[object] = []

    async def call() -> None:
        outcome.append(await connect())

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            while not await waiting():
                await anyio.sleep(0.01)
        cancelled_at = anyio.current_time()
        tg.cancel_scope.cancel()
    assert outcome == [], "the open ended before it was cancelled"
    return anyio.current_time() - cancelled_at


@contextlib.asynccontextmanager
async def _silent_server(scheme: str) -> AsyncIterator[tuple[Silent, int, str]]:
    """A `Silent` server, its port and a URL of `scheme` to it; on leaving,
    checks that the client closed every connection it opened and that no
    loop thread of a driver (trio's) was left running."""
    pytest.importorskip("asyncpg" if scheme == "postgresql" else "asyncmy")
    threads = _loop_threads()
    async with anyio.create_task_group() as serving:
        silent = Silent()
        port = await silent.start(serving)
        yield silent, port, f"{scheme}://someone@127.0.0.1:{port}/db"
        with anyio.fail_after(5):
            while silent.closed < silent.accepted:  # every connection closed again
                await anyio.sleep(0.01)
        serving.cancel_scope.cancel()
    assert _loop_threads() == threads  # trio: the driver's loop thread is gone


SCHEMES = [pytest.param("postgresql", marks=pytest.mark.postgres),
           pytest.param("mysql", marks=pytest.mark.mariadb)]


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_a_connect_to_a_server_that_never_answers_is_cancelled_at_once(
        scheme: str, anyio_backend: str) -> None:
    """The client waits for the server's first answer (asyncpg up to
    connect_timeout, asyncmy's handshake up to command_timeout): cancelled,
    it returns at once and closes the connection it opened."""
    async with _silent_server(scheme) as (silent, _, url):

        async def arrived() -> bool:
            return silent.arrived.is_set()

        took = await _cancel_once(lambda: durable.connect(url, connect_timeout=5), arrived)
        assert took < PROMPT


@pytest.mark.parametrize("scheme", SCHEMES)
async def test_a_connect_to_a_server_that_never_answers_gives_up_at_connect_timeout(
        scheme: str, anyio_backend: str) -> None:
    """Not cancelled, the open gives up after connect_timeout with an error
    that names it and what to check. asyncmy's own connect_timeout bounds the
    TCP connect only, and the server's greeting was awaited for
    command_timeout (60 s) after an accepted connection; asyncpg's error
    had no text ("cannot connect ...: ; no server answered")."""
    async with _silent_server(scheme) as (_, port, url):
        with anyio.fail_after(10), pytest.raises(durable.ConfigurationError) as caught:
            await durable.connect(url, connect_timeout=0.5)
        message = str(caught.value)
        assert f"no answer from 127.0.0.1:{port} within connect_timeout=0.5 s" in message
        assert ": ;" not in message and "TimeoutError" in message


class Side:
    """A connection of another process: its own asyncio loop on a thread, so
    a test on either host loop can hold a lock with it."""

    def __init__(self, connect: Callable[[], Awaitable[Any]]) -> None:
        self._connect = connect
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.conn: Any = None

    async def run(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        async def call() -> Any:
            if self.conn is None:
                self.conn = await self._connect()
            return await fn(self.conn)

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        return await anyio.to_thread.run_sync(future.result)

    async def close(self, close: Callable[[Any], Awaitable[Any]]) -> None:
        if self.conn is not None:
            await self.run(close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        await anyio.to_thread.run_sync(self._thread.join)


@pytest.mark.postgres
async def test_a_connect_waiting_for_the_schema_lock_is_cancelled_and_leaves_no_session(
        pg_url: str, anyio_backend: str) -> None:
    """Another process migrates the schema (it holds the advisory lock the
    migration takes): the open waits for it. Cancelled, it returns at once and
    its sessions end on the server while the lock is still held: a socket
    dropped under a statement waiting for a lock leaves the server's session
    waiting (it does not read the socket meanwhile); the statement is
    cancelled on the server first. A later connect opens the schema."""
    import asyncpg
    from durable_postgres.driver import _DDL_LOCK_CLASS

    schema = pg_url.rsplit("schema=", 1)[1]
    app = f"durable-cancel-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={app}"
    side = Side(lambda: asyncpg.connect(POSTGRES_URL))
    try:
        await side.run(lambda c: c.execute("SELECT pg_advisory_lock($1, hashtext($2))",
                                           _DDL_LOCK_CLASS, schema))

        async def sessions(where: str = "") -> int:
            return int(await side.run(lambda c: c.fetchval(
                f"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 {where}",
                app)))

        async def waits_for_the_lock() -> bool:
            return await sessions("AND wait_event_type = 'Lock'") == 1

        took = await _cancel_once(
            lambda: durable.connect(url, min_pool=2, command_timeout=5), waits_for_the_lock)
        assert took < PROMPT
        with anyio.fail_after(PROMPT):  # the server ends them: its own business
            while await sessions():
                await anyio.sleep(0.01)
        await side.run(lambda c: c.execute("SELECT pg_advisory_unlock_all()"))
        async with durable.connect(url) as client:
            assert client.driver._pool is not None  # type: ignore[attr-defined]
    finally:
        await side.close(lambda c: c.close())


@pytest.mark.mariadb
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: the bridge is PostgreSQL's
async def test_a_mariadb_connect_waiting_for_the_schema_lock_is_cancelled_and_leaves_no_session(
        anyio_backend: str) -> None:
    """The same on MariaDB: another process holds the named lock of the
    schema's DDL (GET_LOCK) on a database whose tables are to be created;
    the open waits for it with min_pool=2 connections open. Cancelled, it
    returns at once, and no session of it is left on the server: the one
    waiting for the lock is ended there (KILL; the server itself notices a
    client gone only at its next look, a second into a lock wait). A later
    connect creates the tables. (asyncio only, as the MariaDB suites: the
    trio bridge is the one tested above.)"""
    import asyncmy
    from durable_mariadb.driver import ddl_lock

    require_mariadb()
    database = f"durable_test_{uuid.uuid4().hex[:12]}"
    _mariadb_admin(f"CREATE DATABASE {database}")
    url = urlsplit(MARIADB_URL)._replace(path=f"/{database}").geturl()
    parts = urlsplit(MARIADB_URL)
    side = Side(lambda: asyncmy.connect(host=parts.hostname, port=parts.port or 3306,
                                        user=parts.username or "root",
                                        password=parts.password or "", autocommit=True))

    async def query(statement: str) -> Any:
        async def run(conn: Any) -> Any:
            async with conn.cursor() as cur:
                await cur.execute(statement)
                return (await cur.fetchone())[0]

        return await side.run(run)

    async def sessions(where: str = "") -> int:
        return int(await query("SELECT count(*) FROM information_schema.processlist "
                               f"WHERE db = '{database}' {where}"))

    async def waits_for_the_lock() -> bool:
        return await sessions("AND info LIKE 'SELECT GET_LOCK%'") == 1

    try:
        assert await query(f"SELECT GET_LOCK('{ddl_lock(database)}', 5)") == 1
        took = await _cancel_once(lambda: durable.connect(url, min_pool=2), waits_for_the_lock)
        assert took < PROMPT
        with anyio.fail_after(0.5):  # (under the server's own second)
            while await sessions():
                await anyio.sleep(0.01)
        await query(f"SELECT RELEASE_LOCK('{ddl_lock(database)}')")
        async with durable.connect(url) as client:
            assert client.driver._pool is not None  # type: ignore[attr-defined]
    finally:
        async def close(conn: Any) -> None:
            conn.close()

        await side.close(close)
        drop_mariadb_database(url)


@pytest.mark.postgres
@pytest.mark.parametrize("anyio_backend", ["trio"])  # asyncio awaits the call itself
async def test_virtual_time_holds_still_while_a_stopped_watch_winds_down_on_the_loop(
        pg_url: str, anyio_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that stops cancels the driver's watch, which waits on the
    library's loop (LISTEN) and is no storage call the time-skipping
    environment counts. Its caller then waits, blocked to trio's eyes, for the
    loop's task to end: real work in flight, and the environment must not take
    it for idle (it skipped virtual time to the next timer meanwhile:
    test_virtual_time_holds_still_while_a_sync_activity_works, flaky on
    trio-postgres). The loop's task winds down only once the environment has
    seen it in flight; had it not looked, `_idle` returned first."""
    import trio

    from durable.testing import TimeSkippingEnvironment

    token = trio.lowlevel.current_trio_token()
    waiting, seen, wound_down = anyio.Event(), threading.Event(), threading.Event()

    async def next_batch(wait: float, wanted: frozenset[str]) -> Any:  # on the loop
        try:
            token.run_sync_soon(waiting.set)
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.to_thread(seen.wait, 10)
            wound_down.set()
            raise

    async with TimeSkippingEnvironment(pg_url, auto_skip=False) as env:
        driver: Any = env._counting._inner
        calls_ending = type(driver).calls_ending

        def looked(self: Any) -> int:
            ending = int(calls_ending.fget(self))
            if ending:
                seen.set()
            return ending

        monkeypatch.setattr(type(driver), "calls_ending", property(looked))
        monkeypatch.setattr(driver._listener, "next_batch", next_batch)
        stop = anyio.CancelScope()

        async def watching() -> None:
            with stop:
                await env._counting.watch()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watching)
            try:
                with anyio.fail_after(10):
                    await waiting.wait()
                stop.cancel()  # as a stopping worker does
                with anyio.fail_after(10):
                    await env._idle()
                assert wound_down.is_set(), "idle while the watch still wound down"
            finally:
                seen.set()  # (failing: the watch ends at once)
