"""Storage outages as a worker lives through them: retried, logged once, never fatal."""

from __future__ import annotations

from typing import Any

import pytest

from durable import StorageClosed, StorageUnavailable
from durable._runtime.outage import Outage

pytestmark = pytest.mark.anyio


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event))


class Flaky:
    """A storage call that fails `times` times with `error`, then answers."""

    def __init__(self, times: int, error: Exception) -> None:
        self.times = times
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return "answer"


async def test_an_outage_is_retried_and_logged_once_with_its_end() -> None:
    log = Log()
    outage = Outage(log, stopping=lambda: False)
    call = Flaky(2, StorageUnavailable("down"))
    assert await outage.retry("claim", call) == "answer"
    assert call.calls == 3
    assert log.lines == [("warning", "storage_unavailable")]  # once, not per failure
    outage.storage_up()
    assert log.lines[-1] == ("info", "storage_available_again") and not outage.down
    outage.storage_up()
    assert len(log.lines) == 2


async def test_a_closed_client_or_a_stopping_worker_ends_the_wait_quietly() -> None:
    closed = Flaky(1, StorageClosed("closed"))
    assert await Outage(Log(), stopping=lambda: False).retry("x", closed) is None
    down = Flaky(10**6, StorageUnavailable("down"))
    assert await Outage(Log(), stopping=lambda: True).retry("x", down) is None
    assert down.calls == 1  # not retried once the worker stops


async def test_a_commit_whose_outcome_is_unknown_is_read_back_not_sent_again() -> None:
    unknown = Flaky(1, StorageUnavailable("lost at COMMIT", outcome_unknown=True))
    asked: list[str] = []

    async def landed() -> bool:
        asked.append("landed?")
        return True

    assert await Outage(Log(), stopping=lambda: False).retry("record", unknown,
                                                            landed=landed) is None
    assert unknown.calls == 1 and asked == ["landed?"]


async def test_an_error_that_is_not_an_outage_is_raised() -> None:
    bug = Flaky(1, RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        await Outage(Log(), stopping=lambda: False).retry("x", bug)


async def test_a_storage_error_from_a_loops_own_task_group_is_that_error() -> None:
    """A loop with helpers in a task group (the PostgreSQL listener) gets their
    errors in an exception group: a closed client in one is still a closed
    client (it failed the worker as a bug, 2 in 15 of a trio test), an outage
    still an outage; anything else in the group is raised as it is."""
    closed = Flaky(1, ExceptionGroup("nursery", [StorageClosed("closed")]))
    assert await Outage(Log(), stopping=lambda: False).retry("watch", closed) is None
    nested = Flaky(1, ExceptionGroup("a", [ExceptionGroup("b", [StorageClosed("closed")])]))
    assert await Outage(Log(), stopping=lambda: False).retry("watch", nested) is None
    log = Log()
    down = Flaky(1, ExceptionGroup("nursery", [StorageUnavailable("down")]))
    assert await Outage(log, stopping=lambda: False).retry("watch", down) == "answer"
    assert down.calls == 2 and log.lines == [("warning", "storage_unavailable")]
    bug = Flaky(1, ExceptionGroup("nursery", [StorageClosed("closed"), KeyError("bug")]))
    with pytest.raises(ExceptionGroup) as raised:
        await Outage(Log(), stopping=lambda: False).retry("watch", bug)
    assert raised.value is bug.error
