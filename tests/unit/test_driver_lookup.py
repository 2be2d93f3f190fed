"""durable.driver.driver_factory: the `durable.drivers` entry points are read
once per scheme found (reading them reads every installed distribution's
metadata, which every connect paid), and again for a scheme not found."""

from __future__ import annotations

import types
from importlib import metadata
from typing import Any

import pytest

import durable.driver
from durable.errors import ConfigurationError


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each entry-point read, by group, with nothing found before the test."""
    seen: list[str] = []

    def entry_points(*, group: str) -> Any:
        seen.append(group)
        return metadata.entry_points(group=group)

    monkeypatch.setattr(durable.driver, "metadata", types.SimpleNamespace(
        entry_points=entry_points))
    monkeypatch.setattr(durable.driver, "_from_entry_points", {})
    return seen


def test_an_installed_driver_is_read_from_the_entry_points_once(lookups: list[str]) -> None:
    first = durable.driver.driver_factory("sqlite:///a.db")
    again = durable.driver.driver_factory("sqlite:///b.db")
    assert first is again and first.__name__ == "SQLiteDriver"
    assert lookups == ["durable.drivers"]


def test_a_scheme_not_installed_is_looked_up_again_each_time(lookups: list[str]) -> None:
    for _ in range(2):
        with pytest.raises(ConfigurationError, match="no storage driver for URL scheme 'nope'"):
            durable.driver.driver_factory("nope://x")
    assert lookups == ["durable.drivers", "durable.drivers"]
