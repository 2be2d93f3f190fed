"""The schema's version: recorded, checked on every connect, a newer one refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import durable
from durable import ConfigurationError
from durable.driver import ex
from durable.store.migrations import SCHEMA_VERSION

from ._support import row

pytestmark = pytest.mark.anyio


async def test_a_fresh_database_records_the_current_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    for _ in range(2):  # connecting again finds it and changes nothing
        async with durable.connect(url) as client:
            found = await row(client.store, "SELECT value FROM durable_meta "
                              "WHERE key = 'schema_version'")
            assert found["value"] == str(SCHEMA_VERSION)


async def test_a_database_of_a_newer_durable_is_refused_not_misread(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    async with durable.connect(url) as client:
        await client.driver.run(lambda tx: _set_version(SCHEMA_VERSION + 1))
    with pytest.raises(ConfigurationError, match=f"schema is version {SCHEMA_VERSION + 1}, "
                                                 f"newer than this durable's"):
        await durable.connect(url)


def _set_version(version: int):  # type: ignore[no-untyped-def]
    yield ex("UPDATE durable_meta SET value = ? WHERE key = 'schema_version'", str(version))
