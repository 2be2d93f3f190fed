"""A fresh in-memory SQLite store per test: the domain programs with no worker.

Each test runs twice: with SQLite's dialect, and with that dialect told it
has no ``UPDATE ... RETURNING`` and no LIMIT subquery (``portable``), so the
forms the store takes on such a database (MariaDB: lock, update, read back;
the fair share read first; the group paths in `durable.store.fastpath`) are
checked here, against the same expectations, without a server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from durable_sqlite.dialect import SQLiteDialect

import durable
from durable.store import Store


class PortableDialect(SQLiteDialect):
    """SQLite without the capabilities MariaDB lacks."""

    returning = False
    limit_subquery = False


@pytest.fixture(params=["sqlite", "portable"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    async with durable.connect("sqlite://:memory:") as client:
        if request.param == "portable":
            client.store.driver.dialect = PortableDialect()
        yield client.store


@pytest.fixture
def anyio_backend() -> str:
    """The programs are plain generators run by the SQLite driver on its own
    thread: the host loop cannot change what they do (the engine tests run the
    drivers under both loops), so one loop keeps this tier fast."""
    return "asyncio"
