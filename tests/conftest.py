"""Shared fixtures: every engine test runs on each driver and on each host loop.

`backend` x `driver`: asyncio and trio (anyio's pytest plugin), SQLite and
PostgreSQL, plus `stepwise`: SQLite through a test driver with a deliberately
different executor (tests/stepwise_driver.py), which proves that a driver is
a dialect plus an executor (it runs the conformance tests on asyncio; crash
and PostgreSQL-specific tests are deselected for it). PostgreSQL tests take
their server from DURABLE_TEST_POSTGRES_URL
(default postgresql://postgres@127.0.0.1:5432/test), each test in a schema of
its own (a `db_url` one emptied by an earlier test, whose tables it keeps, or
a fresh one); they skip when no server answers, unless DURABLE_REQUIRE_POSTGRES=1,
when they fail instead (CI sets it).
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from stepwise_driver import SCHEME as STEPWISE_SCHEME
from stepwise_driver import StepwiseSQLiteDriver

import durable
import durable.driver

durable.driver.register_driver(STEPWISE_SCHEME, StepwiseSQLiteDriver)

# the `durable_crash_explorer` fixture, named as a user names it (docs/testing.md)
pytest_plugins = ["durable.testing.pytest_plugin"]

POSTGRES_URL = os.environ.get(
    "DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("DURABLE_REQUIRE_POSTGRES") == "1"
MARIADB_URL = os.environ.get("DURABLE_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test")
REQUIRE_MARIADB = os.environ.get("DURABLE_REQUIRE_MARIADB") == "1"
DRIVERS = [d.strip() for d in os.environ.get("DURABLE_TEST_DRIVERS",
                                             "sqlite,postgres,stepwise,mariadb").split(",")
           if d.strip()]
# Test modules that exercise more than the driver seam: real worker processes
# (they cannot see a driver registered in this process) or PostgreSQL itself.
_NOT_FOR_STEPWISE = ("test_crash.py", "test_postgres.py")
# MariaDB, the third database, proves the seam on the conformance suite (both
# host loops) and on the interaction, timeout, cancellation and crash suites and
# the scheduler's batched pass
# (asyncio): the rest of the suite does not depend on the database, and the
# whole suite must stay fast.
_MARIADB_BOTH_LOOPS = ("test_engine.py",)
# DURABLE_TEST_MARIADB_TRIO=1: every MariaDB suite on trio as well (a longer run)
_MARIADB_TRIO_EVERYWHERE = os.environ.get("DURABLE_TEST_MARIADB_TRIO") == "1"
_MARIADB_ASYNCIO = ("test_interaction.py", "test_timeouts.py", "test_cancellation.py",
                    "test_crash.py", "test_mariadb.py", "test_builds.py", "test_reset.py",
                    "test_queues.py", "test_schedule_statements.py", "test_schedule_list.py",
                    "test_workflow_list.py", "test_relief.py", "test_relief_queue.py",
                    "test_relief_key.py", "test_eager_start.py", "test_generated_ids.py")


def postgres_reachable() -> str | None:
    """None when a server answers at POSTGRES_URL, else the reason it does not."""
    parts = urlsplit(POSTGRES_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 2):
            pass
    except OSError as exc:
        return f"no PostgreSQL server at {POSTGRES_URL} ({exc}); set DURABLE_TEST_POSTGRES_URL"
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "asyncpg is not installed (pip install -e '.[dev]')"
    return None


def mariadb_reachable() -> str | None:
    """None when a server answers at MARIADB_URL, else the reason it does not."""
    parts = urlsplit(MARIADB_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 3306), 2):
            pass
    except OSError as exc:
        return f"no MariaDB server at {MARIADB_URL} ({exc}); set DURABLE_TEST_MARIADB_URL"
    try:
        import asyncmy  # noqa: F401
    except ImportError:
        return "asyncmy is not installed (pip install -e '.[dev]')"
    return None


def require_mariadb() -> None:
    reason = mariadb_reachable()
    if reason is not None:
        if REQUIRE_MARIADB:
            pytest.fail(f"DURABLE_REQUIRE_MARIADB=1 but {reason}")
        pytest.skip(reason)


def _mariadb_admin(*statements: str) -> list[list[Any]]:
    """Run statements on MARIADB_URL's server (outside any test database), on
    the admin thread, so any host loop may call it; each one's rows."""
    import asyncmy

    parts = urlsplit(MARIADB_URL)

    async def connect() -> Any:
        return await asyncmy.connect(host=parts.hostname or "127.0.0.1",
                                     port=parts.port or 3306, user=parts.username or "root",
                                     password=parts.password or "", autocommit=True)

    async def run(conn: Any) -> list[list[Any]]:
        results: list[list[Any]] = []
        async with conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)
                results.append(list(await cur.fetchall()))
        return results

    return _ADMIN.on_connection(MARIADB_URL, connect, run, lambda conn: conn.ensure_closed())


class _AdminThread:
    """One thread, for the whole session, running an asyncio loop for the
    set-up work of the tests (any host loop may wait for it), and keeping its
    admin connections open: a test on PostgreSQL or MariaDB cost a connect (a
    server process forked) and a thread with a loop of its own at each admin
    call, four of them for a MariaDB database emptied."""

    def __init__(self) -> None:
        self.loop: Any = None
        self.connections: dict[str, tuple[Any, Callable[[Any], Any]]] = {}

    def run(self, make: Callable[[], Any]) -> Any:
        """`make()`'s coroutine run on the admin loop; its result, or its error."""
        import asyncio
        import threading

        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, name="durable-tests admin",
                             daemon=True).start()
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result()

    def on_connection(self, key: str, connect: Callable[[], Any], work: Callable[[Any], Any],
                      close: Callable[[Any], Any]) -> Any:
        """`work(connection)` on the admin loop, on the connection kept under
        `key` (made by `connect()` when there is none); a connection whose work
        failed is closed and made again next time."""

        async def run() -> Any:
            if key not in self.connections:
                self.connections[key] = (await connect(), close)
            conn = self.connections[key][0]
            try:
                return await work(conn)
            except BaseException:
                self.connections.pop(key, None)
                try:
                    await close(conn)
                except Exception:
                    pass
                raise

        return self.run(run)

    def close(self) -> None:
        """Close the connections kept, stop the loop."""
        if self.loop is None:
            return

        async def close_all() -> None:
            while self.connections:
                _, (conn, close) = self.connections.popitem()
                try:
                    await close(conn)
                except Exception:
                    pass

        self.run(close_all)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop = None


_ADMIN = _AdminThread()


def on_a_thread(run: Callable[[], Any]) -> Any:
    """`run()`'s coroutine run on the admin thread's loop (so any host loop may
    call it), raising what it raised; its result."""
    return _ADMIN.run(run)


# Creating a database and its tables costs MariaDB ~2 s (a file per table), so
# a test's database is emptied afterwards and handed to the next test.
_MARIADB_FREE: list[str] = []


def new_mariadb_url() -> str:
    """A URL naming an empty database of its own on MARIADB_URL's server (a fresh
    one, or one an earlier test used and `recycle_mariadb_database` emptied)."""
    if _MARIADB_FREE:
        database = _MARIADB_FREE.pop()
    else:
        database = f"durable_test_{uuid.uuid4().hex[:12]}"
        _mariadb_admin(f"CREATE DATABASE {database}")
    parts = urlsplit(MARIADB_URL)
    return parts._replace(path=f"/{database}").geturl()


def drop_mariadb_database(url: str) -> None:
    """Drop the database of a `new_mariadb_url()`."""
    _mariadb_admin(f"DROP DATABASE IF EXISTS `{urlsplit(url).path.lstrip('/')}`")


@functools.cache
def _schema_columns() -> set[tuple[str, str]]:
    """(table, column) of every column the current schema creates (and the
    MariaDB driver's wake log): what an unchanged test database has."""
    from durable.store.schema import _SCHEMA

    found = {("durable_wakes", c) for c in ("id", "origin", "wake_keys", "at")}
    table = None
    for line in _SCHEMA.splitlines():
        if line.startswith("CREATE TABLE IF NOT EXISTS"):
            table = line.split()[5]
        elif table and line.startswith("    ") and not line.strip().startswith("PRIMARY KEY"):
            found.add((table, line.split()[0].strip('{}').replace("quoted_key", "key")))
        elif line.startswith(")"):
            table = None
    return found


def recycle_mariadb_database(url: str) -> None:
    """Empty the database of a `new_mariadb_url()` for the next test, keeping its
    schema (and its version row); drop it instead when its schema is not the
    current one (a test changed it) or emptying it fails."""
    from durable.store.migrations import SCHEMA_VERSION

    database = urlsplit(url).path.lstrip("/")
    try:
        [tables] = _mariadb_admin(
            "SELECT table_name FROM information_schema.tables "
            f"WHERE table_schema = '{database}'")
        names = {row[0] for row in tables}
        [columns] = _mariadb_admin(
            "SELECT table_name, column_name FROM information_schema.columns "
            f"WHERE table_schema = '{database}'")
        if {(row[0], row[1]) for row in columns} != _schema_columns():
            raise LookupError("a test changed the schema")
        [version] = _mariadb_admin(
            f"SELECT value FROM `{database}`.durable_meta WHERE `key` = 'schema_version'")
        if [row[0] for row in version] != [str(SCHEMA_VERSION)]:
            raise LookupError("another schema version")
        _mariadb_admin(*(f"DELETE FROM `{database}`.`{name}`" for name in sorted(names)
                         if name != "durable_meta"))
    except Exception:
        drop_mariadb_database(url)
        return
    _MARIADB_FREE.append(database)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _driver_params() -> list[Any]:
    marks = {"postgres": [pytest.mark.postgres], "mariadb": [pytest.mark.mariadb]}
    return [pytest.param(d, marks=marks.get(d, [])) for d in DRIVERS]


@pytest.fixture(params=_driver_params())
def driver_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def require_postgres() -> None:
    reason = postgres_reachable()
    if reason is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"DURABLE_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)


def new_postgres_url() -> str:
    """A URL whose connections use a schema of their own (created on connect)."""
    schema = f"durable_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}schema={schema}"


def _postgres_admin(base: str, work: Callable[[Any], Any]) -> Any:
    """Run `work(connection)` (a coroutine function) on an asyncpg connection to
    `base` kept open on the admin thread, so any host loop may call it; its result."""
    import asyncpg

    return _ADMIN.on_connection(base, lambda: asyncpg.connect(base), work,
                                lambda conn: conn.close())


# Creating a schema's tables and dropping them costs PostgreSQL ~0.3 s a test
# (more on a loaded box), over 700 tests: a `db_url` schema is emptied afterwards
# and handed to the next test, as MariaDB's databases are.
_POSTGRES_FREE: list[str] = []
_SCHEMA_SHAPE = """
WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1),
rel AS (SELECT c.oid, c.relname, c.relkind FROM pg_class c, ns WHERE c.relnamespace = ns.oid)
SELECT 'relation', relkind::text, relname::text FROM rel
UNION ALL SELECT 'column', rel.relname::text, a.attname || ' ' || a.atttypid::text || ' '
       || a.atttypmod::text || ' ' || a.attnotnull::text || ' ' || a.atthasdef::text
  FROM pg_attribute a JOIN rel ON rel.oid = a.attrelid
  WHERE rel.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL SELECT 'index', rel.relname::text, pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN rel ON rel.oid = i.indrelid
UNION ALL SELECT 'constraint', rel.relname::text, conname || ' ' || contype::text
  FROM pg_constraint c JOIN rel ON rel.oid = c.conrelid
UNION ALL SELECT 'trigger', rel.relname::text, tgname::text
  FROM pg_trigger t JOIN rel ON rel.oid = t.tgrelid
UNION ALL SELECT 'function', '', proname::text FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
"""


def _schema_shape(conn: Any, schema: str) -> Any:
    async def shape() -> frozenset[tuple[str, str, str]]:
        rows = await conn.fetch(_SCHEMA_SHAPE, schema)
        return frozenset(tuple(str(v).replace(schema, "<schema>") for v in r) for r in rows)
    return shape()


@functools.cache
def _fresh_postgres_shape() -> frozenset[tuple[str, str, str]]:
    """What a schema the current durable just created holds (tables, columns,
    indexes, constraints, triggers, functions): what an unchanged test schema has."""
    url = new_postgres_url()

    async def create() -> None:
        async with durable.connect(url):
            pass

    on_a_thread(create)
    base, schema = url.rsplit("schema=", 1)
    try:
        shape: frozenset[tuple[str, str, str]] = _postgres_admin(
            base.rstrip("?&"), lambda conn: _schema_shape(conn, schema))
    finally:
        drop_postgres_schema(url)
    return shape


def recycled_postgres_url() -> str:
    """A URL naming an empty schema of its own (a fresh one, or one an earlier
    test used and `recycle_postgres_schema` emptied)."""
    return _POSTGRES_FREE.pop() if _POSTGRES_FREE else new_postgres_url()


def recycle_postgres_schema(url: str) -> None:
    """Empty the schema of a `recycled_postgres_url()` for the next test, keeping
    its tables (and its version row); drop it instead when it is not exactly
    what the current durable creates (a test changed it), or emptying it fails
    (a lock a killed process's session still holds, say)."""
    from durable.store.migrations import SCHEMA_VERSION

    base, schema = url.rsplit("schema=", 1)
    reference = _fresh_postgres_shape()

    async def empty(conn: Any) -> bool:
        if await _schema_shape(conn, schema) != reference:
            return False
        quoted = '"' + schema.replace('"', '""') + '"'
        async with conn.transaction():
            await conn.execute("SET LOCAL lock_timeout = '5s'")
            version = await conn.fetch(
                f"SELECT value FROM {quoted}.durable_meta WHERE key = 'schema_version'")
            if [r[0] for r in version] != [str(SCHEMA_VERSION)]:
                return False
            # DELETE, not TRUNCATE: the tables hold a test's few rows, and TRUNCATE
            # (new files for every table) costs ten times as much
            statements = [f"DELETE FROM {quoted}.durable_meta WHERE key <> 'schema_version'"]
            for kind, what, name in sorted(reference):
                if kind == "relation" and what == "r" and name != "durable_meta":
                    statements.append(f'DELETE FROM {quoted}."{name}"')
                elif kind == "relation" and what == "S":
                    statements.append(f'ALTER SEQUENCE {quoted}."{name}" RESTART')
            await conn.execute(";\n".join(statements))
        return True

    try:
        emptied = _postgres_admin(base.rstrip("?&"), empty)
    except Exception:
        emptied = False
    if emptied:
        _POSTGRES_FREE.append(url)
    else:
        drop_postgres_schema(url)


def drop_postgres_schema(url: str) -> None:
    """Drop the schema of a `new_postgres_url()`, even one the driver would
    refuse to open; on the admin thread, so any host loop may call it."""
    base, schema = url.rsplit("schema=", 1)
    _postgres_admin(base.rstrip("?&"),
                    lambda conn: conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema of its own, dropped afterwards (skipped, or
    failed under DURABLE_REQUIRE_POSTGRES=1, without a server)."""
    require_postgres()
    url = new_postgres_url()
    yield url
    drop_postgres_schema(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database the current durable created and closed, copied for
    each `db_url` test: a copy costs a millisecond, creating the tables and
    checkpointing them at the close ~25 ms (more on a busy host), over a
    thousand tests. What a test sees is the same file: the schema, its version
    row, WAL mode (kept in the file's header) and the owner-only mode."""
    path = tmp_path_factory.mktemp("sqlite-template") / "durable.db"

    async def create() -> None:
        async with durable.connect(f"sqlite:///{path}"):
            pass

    on_a_thread(create)
    leftovers = [p.name for p in path.parent.iterdir() if p != path]
    assert not leftovers, f"the closed template left {leftovers}: copy them too"
    return path


@pytest.fixture
def db_url(driver_name: str, tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    if driver_name == "postgres":
        require_postgres()
        url = recycled_postgres_url()
        yield url
        recycle_postgres_schema(url)
        return
    if driver_name == "stepwise":
        yield f"{STEPWISE_SCHEME}:///{tmp_path / 'durable.db'}"
        return
    if driver_name == "mariadb":
        require_mariadb()
        url = new_mariadb_url()
        yield url
        recycle_mariadb_database(url)
        return
    shutil.copy(sqlite_template, tmp_path / "durable.db")
    yield f"sqlite:///{tmp_path / 'durable.db'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The stepwise driver runs the conformance suite once, on asyncio; MariaDB
    runs the suites named above."""
    keep, drop = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        values = params.params if params is not None else {}
        stepwise = values.get("driver_name") == "stepwise"
        mariadb = values.get("driver_name") == "mariadb"
        trio = values.get("anyio_backend") == "trio"
        if stepwise and (trio or item.path.name in _NOT_FOR_STEPWISE):
            drop.append(item)
        elif mariadb and not (item.path.name in _MARIADB_BOTH_LOOPS
                              or (item.path.name in _MARIADB_ASYNCIO
                                  and (not trio or _MARIADB_TRIO_EVERYWHERE))):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def client_kind() -> str:
    """How tests reach the runs: "embedded" (storage in this process), unless a
    test is marked `remote_client`; then it runs once more with "remote"."""
    return "embedded"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "client_kind" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "remote_client"
    ):
        metafunc.parametrize("client_kind", ["embedded", "remote"])


REMOTE_TOKEN = "test-operator-token"
# for a test marked remote_client(role="admin"): the retention and namespace routes need it
REMOTE_ADMIN_TOKEN = "test-admin-token"


@asynccontextmanager
async def remote_plane(storage: durable.Client) -> AsyncIterator[str]:
    """A live control plane for `storage` on a free loopback port (uvicorn on
    asyncio, hypercorn on trio); its base URL."""
    from durable.http import create_app
    from durable.http.serve import serve_app

    app = create_app(storage, tokens={REMOTE_TOKEN: "operator", REMOTE_ADMIN_TOKEN: "admin"},
                     environ={})
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(serve_app, app, host="127.0.0.1", port=0))
        yield f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()


@pytest.fixture
async def storage_client(db_url: str) -> AsyncIterator[durable.Client]:
    """The embedded client on the test's storage (workers are built on it)."""
    async with durable.connect(db_url) as c:
        yield c


@pytest.fixture
async def client(storage_client: durable.Client, client_kind: str,
                 request: pytest.FixtureRequest) -> AsyncIterator[durable.Client]:
    """The client a test calls: the embedded one, or (client_kind "remote") a
    `durable.connect("http://...")` client of a live control plane serving the
    same storage, with an operator token (an admin one when the test is marked
    ``remote_client(role="admin")``)."""
    if client_kind == "embedded":
        yield storage_client
        return
    marker = request.node.get_closest_marker("remote_client")
    admin = marker is not None and marker.kwargs.get("role") == "admin"
    async with remote_plane(storage_client) as url:
        async with durable.connect(url, token=REMOTE_ADMIN_TOKEN if admin
                                   else REMOTE_TOKEN) as remote:
            yield remote


@pytest.fixture
def make_worker(storage_client: durable.Client) -> Callable[..., durable.Worker]:
    def make(**kwargs: Any) -> durable.Worker:
        kwargs.setdefault("lease_seconds", 5.0)
        kwargs.setdefault("poll_interval", 0.2)
        return durable.Worker(storage_client, **kwargs)

    return make


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop the emptied MariaDB test databases and PostgreSQL schemas kept for reuse."""
    while _POSTGRES_FREE:
        try:
            drop_postgres_schema(_POSTGRES_FREE.pop())
        except Exception:
            break
    while _MARIADB_FREE:
        database = _MARIADB_FREE.pop()
        try:
            _mariadb_admin(f"DROP DATABASE IF EXISTS `{database}`")
        except Exception:
            break
    _ADMIN.close()


#: seconds the interpreter may take to exit after the last test
EXIT_GRACE = 60.0


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A thread that outlives the suite and never ends hangs the run at the
    interpreter's exit, silently, until CI's limit (it happened: a sync
    activity's thread blocked on a stopped loop, after "3522 passed"). A
    daemon thread started here outlives nothing: if the interpreter has not
    exited `EXIT_GRACE` seconds later, it prints where every thread is and
    ends the process, failing the run."""
    import sys
    import threading
    import time
    import traceback

    def give_up() -> None:
        time.sleep(EXIT_GRACE)
        frames = sys._current_frames()
        for thread in threading.enumerate():
            if thread is threading.current_thread():
                continue
            stack = "".join(traceback.format_stack(frames.get(thread.ident or 0)))
            sys.stderr.write(f"\nthread {thread.name!r} (daemon={thread.daemon}):\n{stack}")
        sys.stderr.write(f"\nthe interpreter did not exit {EXIT_GRACE:.0f} s after the suite: "
                         "a thread above never ended; failing the run\n")
        sys.stderr.flush()
        os._exit(3)

    threading.Thread(target=give_up, name="durable-tests exit watch", daemon=True).start()
