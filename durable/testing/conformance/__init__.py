"""The conformance suite as a pytest plugin: prove a storage driver the way durable's
own drivers are proven (as SQLAlchemy ships its dialect suite).

In the driver's test directory::

    # conftest.py
    pytest_plugins = ["durable.testing.conformance"]

    @pytest.fixture
    def durable_url(tmp_path):          # a fresh, empty storage for each test
        url = create_database()         # yours
        yield url
        drop_database(url)

    # test_conformance.py
    from durable.testing.conformance.engine import *  # noqa: F403
    from durable.testing.conformance.interaction import *  # noqa: F403
    from durable.testing.conformance.timeouts import *  # noqa: F403
    from durable.testing.conformance.cancellation import *  # noqa: F403

The suite: `engine` (ops, timers, retries, children, continue-as-new, replay,
non-determinism), `interaction` (signals, queries, updates, conditions,
versioning), `timeouts` (workflow and activity timeouts, the watchdog) and
`cancellation` (requests, policies, shielded cleanup, the cascade).

Without a `durable_url` fixture of its own, the suite takes ``--durable-url``
(or ``DURABLE_CONFORMANCE_URL``), where ``{tmp}`` is replaced by the test's
temporary directory (``sqlite-stepwise:///{tmp}/durable.db``); a URL without
it is shared by every test. Each test runs on asyncio and trio (anyio's pytest
plugin, installed with anyio). The suite's tests take `db_url`, `client` and
`make_worker`; a conftest.py of the driver's may override any of them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durable

ENV = "DURABLE_CONFORMANCE_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--durable-url", default=None,
                     help=f"storage URL for the durable conformance suite (or ${ENV}); "
                          "{tmp} is replaced by each test's temporary directory")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "remote_client: durable's own suite runs the test once more through a "
                   "remote client (ignored here)")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every conformance test runs on both host loops."""
    return str(request.param)


@pytest.fixture
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The storage URL of one test: ``--durable-url`` / ``$DURABLE_CONFORMANCE_URL``
    with ``{tmp}`` replaced. Override it to hand each test a fresh database."""
    url = request.config.getoption("--durable-url") or os.environ.get(ENV)
    if not url:
        raise pytest.UsageError(
            "the durable conformance suite needs storage: define a `durable_url` fixture, "
            f"pass --durable-url URL or set {ENV} (e.g. 'sqlite:///{{tmp}}/durable.db')")
    return str(url).replace("{tmp}", str(tmp_path))


@pytest.fixture
def db_url(durable_url: str) -> Iterator[str]:
    """What the suite's tests connect to."""
    yield durable_url


@pytest.fixture
async def client(db_url: str) -> AsyncIterator[durable.Client]:
    """An embedded client on the test's storage (workers are built on it)."""
    async with durable.connect(db_url) as c:
        yield c


@pytest.fixture
def make_worker(client: durable.Client) -> Callable[..., durable.Worker]:
    """A `durable.Worker` on the test's client, with short leases and polls."""
    def make(**kwargs: Any) -> durable.Worker:
        kwargs.setdefault("lease_seconds", 5.0)
        kwargs.setdefault("poll_interval", 0.2)
        return durable.Worker(client, **kwargs)

    return make
