"""A fresh in-memory SQLite store per test: the domain programs with no worker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import durable
from durable.store import Store


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with durable.connect("sqlite://:memory:") as client:
        yield client.store


@pytest.fixture
def anyio_backend() -> str:
    """The programs are plain generators run by the SQLite driver on its own
    thread: the host loop cannot change what they do (the engine tests run the
    drivers under both loops), so one loop keeps this tier fast."""
    return "asyncio"
