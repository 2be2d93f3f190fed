"""Loggers: structlog, bound to context, routed so that an unconfigured app is quiet.

If the application configured structlog, our events join its pipeline. If not,
they go to the standard `logging` logger of the same name (rendered as
key=value), so that Python's default WARNING level keeps a library quiet until
the application asks for more.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


def get_logger(name: str) -> Any:
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
