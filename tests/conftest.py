"""Shared fixtures: every engine test runs on each driver and on each host loop.

`backend` x `driver`: asyncio and trio (anyio's pytest plugin), SQLite and
PostgreSQL, plus `stepwise`: SQLite through a test driver with a deliberately
different executor (tests/stepwise_driver.py), which proves that a driver is
a dialect plus an executor (it runs the conformance tests on asyncio; crash
and PostgreSQL-specific tests are deselected for it). PostgreSQL tests take
their server from DURABLE_TEST_POSTGRES_URL
(default postgresql://postgres@127.0.0.1:5432/test), each test in a schema of
its own; they skip when no server answers, unless DURABLE_REQUIRE_POSTGRES=1,
when they fail instead (CI sets it).
"""

from __future__ import annotations

import functools
import os
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
DRIVERS = [d.strip() for d in os.environ.get("DURABLE_TEST_DRIVERS",
                                             "sqlite,postgres,stepwise").split(",")
           if d.strip()]
# Test modules that exercise more than the driver seam: real worker processes
# (they cannot see a driver registered in this process) or PostgreSQL itself.
_NOT_FOR_STEPWISE = ("test_crash.py", "test_postgres.py")


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


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _driver_params() -> list[Any]:
    return [pytest.param(d, marks=[pytest.mark.postgres] if d == "postgres" else [])
            for d in DRIVERS]


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


def drop_postgres_schema(url: str) -> None:
    """Drop the schema of a `new_postgres_url()`, even one the driver would
    refuse to open; on a thread of its own, so any host loop may call it."""
    import asyncio
    import threading

    import asyncpg

    base, schema = url.rsplit("schema=", 1)

    async def drop() -> None:
        conn = await asyncpg.connect(base.rstrip("?&"))
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    thread = threading.Thread(target=asyncio.run, args=(drop(),))
    thread.start()
    thread.join()


@pytest.fixture
def db_url(driver_name: str, tmp_path: Path) -> Iterator[str]:
    if driver_name == "postgres":
        require_postgres()
        url = new_postgres_url()
        yield url
        drop_postgres_schema(url)  # tests that connect by URL leave it behind
        return
    if driver_name == "stepwise":
        yield f"{STEPWISE_SCHEME}:///{tmp_path / 'durable.db'}"
        return
    yield f"sqlite:///{tmp_path / 'durable.db'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The stepwise driver runs the conformance suite once, on asyncio."""
    keep, drop = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        values = params.params if params is not None else {}
        stepwise = values.get("driver_name") == "stepwise"
        if stepwise and (values.get("anyio_backend") == "trio"
                         or item.path.name in _NOT_FOR_STEPWISE):
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


@asynccontextmanager
async def remote_plane(storage: durable.Client) -> AsyncIterator[str]:
    """A live control plane for `storage` on a free loopback port (uvicorn on
    asyncio, hypercorn on trio); its base URL."""
    from durable.http import create_app
    from durable.http.serve import serve_app

    app = create_app(storage, tokens={REMOTE_TOKEN: "operator"}, environ={})
    async with anyio.create_task_group() as tg:
        port = await tg.start(functools.partial(serve_app, app, host="127.0.0.1", port=0))
        yield f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()


@pytest.fixture
async def storage_client(db_url: str) -> AsyncIterator[durable.Client]:
    """The embedded client on the test's storage (workers are built on it)."""
    async with durable.connect(db_url) as c:
        yield c
        if db_url.startswith("postgres"):
            await _drop_schema(c)


@pytest.fixture
async def client(storage_client: durable.Client,
                 client_kind: str) -> AsyncIterator[durable.Client]:
    """The client a test calls: the embedded one, or (client_kind "remote") a
    `durable.connect("http://...")` client of a live control plane serving the
    same storage."""
    if client_kind == "embedded":
        yield storage_client
        return
    async with remote_plane(storage_client) as url:
        async with durable.connect(url, token=REMOTE_TOKEN) as remote:
            yield remote


async def _drop_schema(c: durable.Client) -> None:
    drop = getattr(c.driver, "drop_schema", None)
    if drop is not None:
        await drop()


@pytest.fixture
def make_worker(storage_client: durable.Client) -> Callable[..., durable.Worker]:
    def make(**kwargs: Any) -> durable.Worker:
        kwargs.setdefault("lease_seconds", 5.0)
        kwargs.setdefault("poll_interval", 0.2)
        return durable.Worker(storage_client, **kwargs)

    return make
