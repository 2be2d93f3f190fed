"""Loggers: structlog, bound to context, routed so that an unconfigured app is quiet.

Two kinds of log lines, configured in one place (docs/logging.md):

- durable's own events (``durable.worker``, ``durable.workflow``,
  ``durable.postgres``, ...): if the application configured structlog they
  join its pipeline; if not, they go to the standard `logging` logger of the
  same name (rendered as key=value), so Python's default WARNING level keeps
  a library quiet until the application asks for more.
- the lines workflow code writes with ``workflow.logger``: the application's
  own events, so they are visible by default. If structlog is configured
  they join its pipeline; if not, structlog's default prints them to
  standard output (``logger="durable.workflow"`` with the run's ids bound).
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


def get_logger(name: str) -> Any:
    """durable's own events: quiet unless the application asks for them."""
    if structlog.is_configured():
        return structlog.get_logger(name)
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


def get_user_logger(name: str) -> Any:
    """What ``workflow.logger`` writes to: visible with no configuration."""
    return structlog.get_logger(name).bind(logger=name)
