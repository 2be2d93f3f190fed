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

#: Fields whose values are masked in every event durable logs (a field whose
#: name contains one of these, case-insensitively); see `redact_fields`.
SECRET_FIELDS: set[str] = {
    "password", "passwd", "secret", "token", "authorization", "api_key", "apikey",
    "private_key", "credential", "cookie",
}
_MASK = "***"


def redact_fields(*names: str) -> None:
    """Mask these fields too (e.g. ``redact_fields("iban", "ssn")``) in every event
    durable logs, its own and those written with ``workflow.logger``."""
    SECRET_FIELDS.update(name.lower() for name in names)


def _secret(key: str) -> bool:
    lowered = key.lower()
    return any(field in lowered for field in SECRET_FIELDS)


def redact_secrets(logger: Any, method: str, event_dict: Any) -> Any:
    """A structlog processor: mask secret-looking fields, one level deep."""
    for key, value in list(event_dict.items()):
        if _secret(str(key)):
            event_dict[key] = _MASK
        elif isinstance(value, dict):
            event_dict[key] = {k: (_MASK if _secret(str(k)) else v) for k, v in value.items()}
    return event_dict


class _Redacting:
    """The application's structlog processors, read at each event, behind
    `redact_secrets`: configuring structlog after importing durable still counts."""

    def __iter__(self) -> Any:
        yield redact_secrets
        yield from structlog.get_config()["processors"]


def get_logger(name: str) -> Any:
    """durable's own events: quiet unless the application asks for them."""
    if structlog.is_configured():
        return structlog.wrap_logger(None, processors=_Redacting(),
                                     logger_factory_args=(name,))
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            redact_secrets,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


def get_user_logger(name: str) -> Any:
    """What ``workflow.logger`` writes to: visible with no configuration."""
    return structlog.wrap_logger(None, processors=_Redacting(),
                                 logger_factory_args=(name,)).bind(logger=name)
