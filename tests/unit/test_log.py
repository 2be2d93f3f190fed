"""durable's own loggers: an event below its stdlib logger's level is dropped
before a structlog logger is built for it (a run's `run_stopped` line cost
14 µs at Python's default WARNING, issue 26); one at or above it is logged
as before, and the level is read at each call."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from durable import _log


@pytest.fixture
def quiet_structlog() -> Iterator[None]:
    """structlog unconfigured (durable's events then go to `logging`)."""
    was, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        if was:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()


def test_events_below_the_level_build_nothing_and_the_rest_are_logged(
    quiet_structlog: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    real = _log._stdlib

    def counted(name: str) -> Any:
        built.append(name)
        return real(name)

    monkeypatch.setattr(_log, "_stdlib", counted)
    logger = _log.get_logger("durable.test_log").bind(run_id="r-1")
    caplog.set_level(logging.WARNING, logger="durable.test_log")
    assert logger.info("dropped", n=1) is None
    assert logger.debug("dropped too") is None
    assert built == []  # nothing was built for them
    logger.warning("kept", n=2)
    assert built == ["durable.test_log"]
    caplog.set_level(logging.INFO, logger="durable.test_log")  # read at each call
    logger.info("now kept", n=3)
    lines = [r.getMessage() for r in caplog.records if r.name == "durable.test_log"]
    assert len(lines) == 2
    assert "event='kept'" in lines[0] and "run_id='r-1'" in lines[0] and "n=2" in lines[0]
    assert "event='now kept'" in lines[1] and "n=3" in lines[1]
    assert all("dropped" not in line for line in lines)
