"""A fresh in-memory SQLite store per test, for runs executed without a worker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import durable
from durable.store import Store


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with durable.connect("sqlite://:memory:") as client:
        yield client.store
