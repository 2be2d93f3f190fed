"""The pytest fixtures `durable_crash_explorer` (crash exploration in a test) and
`durable_strict_determinism` (the test under `strict_determinism`).

    async def test_order_survives_every_crash(durable_crash_explorer):
        report = await durable_crash_explorer(order, "o-1", activities=[charge, ship])
        # it asserted report.ok (showing report.describe() if not)

Name the plugin in your top-level conftest.py:
``pytest_plugins = ["durable.testing.pytest_plugin"]`` (it is not loaded into
every pytest session by an entry point: importing durable is the user's
choice). The
storage URL defaults to ``DURABLE_EXPLORE_URL`` when set (e.g. a PostgreSQL
server, where each exploration takes a schema of its own), else SQLite in
memory. Works under any async test runner that runs the test on asyncio or
trio (anyio's pytest plugin, pytest-trio, pytest-asyncio).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from .crashes import CrashReport, explore_crashes
from .determinism import DeterminismGuard, strict_determinism


class CrashExplorer:
    """`explore_crashes` with this test's defaults; every report it made is kept."""

    def __init__(self, **defaults: Any) -> None:
        self.defaults = defaults
        #: every report, in order
        self.reports: list[CrashReport] = []

    async def explore(self, workflow: Any, *args: Any, **kwargs: Any) -> CrashReport:
        """Explore and return the report, passing or not."""
        report = await explore_crashes(workflow, *args, **{**self.defaults, **kwargs})
        self.reports.append(report)
        return report

    async def __call__(self, workflow: Any, *args: Any, points: Sequence[int] | None = None,
                       **kwargs: Any) -> CrashReport:
        """Explore and assert that every point passed (the failing ones described)."""
        report = await self.explore(workflow, *args, points=points, **kwargs)
        assert report.ok, report.describe("await durable_crash_explorer")
        return report


@pytest.fixture
def durable_crash_explorer() -> CrashExplorer:
    """A `CrashExplorer`: ``await durable_crash_explorer(workflow, *args, activities=[...])``."""
    url = os.environ.get("DURABLE_EXPLORE_URL")
    return CrashExplorer(**({"url": url} if url else {}))


@pytest.fixture
def durable_strict_determinism() -> Iterator[DeterminismGuard]:
    """The test runs under `durable.testing.strict_determinism`: workflow code
    that reads the host clock, draws random numbers or sleeps outside durable
    fails its run at the call, and the test with it."""
    with strict_determinism() as guard:
        yield guard
