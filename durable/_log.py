"""Loggers: structlog, bound to context, routed so that an unconfigured app is quiet.

Two kinds of log lines, configured in one place (docs/logging.md):

- durable's own events (``durable.worker``, ``durable.workflow``,
  ``durable.postgres``, ...): if the application has configured structlog
  when a line is logged, it joins its pipeline (with ``logger=<name>``); if
  not, it goes to the standard `logging` logger of the same name (rendered
  as key=value), so Python's default WARNING level keeps a library quiet
  until the application asks for more.
- the lines workflow code writes with ``workflow.logger``: the application's
  own events, so they are visible by default. If structlog is configured
  they join its pipeline; if not, structlog's default prints them to
  standard output (``logger="durable.workflow"`` with the run's ids bound).
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import quote, urlsplit

import structlog

#: Fields whose values are masked in every event durable logs (a field whose
#: name contains one of these, case-insensitively); see `redact_fields`.
SECRET_FIELDS: set[str] = {
    "password", "passwd", "secret", "token", "authorization", "api_key", "apikey",
    "private_key", "credential", "cookie",
}
_MASK = "***"


def mask_url(url: str) -> str:
    """`url` with the password of its userinfo (``http://user:PW@host``) masked,
    for error messages and logs (as the PostgreSQL driver masks its URLs)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        password = None
    if password:
        return url.replace(f":{password}@", f":{_MASK}@", 1)
    return re.sub(r"(//[^:/@\s]*:)[^@/\s]*@", rf"\1{_MASK}@", url)


def mask_password_in(text: str, url: str) -> str:
    """`text` (an error message that may quote `url`, whole or in parts) with the
    URL's password masked wherever it appears."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if not password:
        return text
    text = text.replace(f":{password}@", f":{_MASK}@")
    if len(password) >= 4:  # a shorter one would mask unrelated text; it is too weak anyway
        for form in {password, quote(password, safe="")}:
            text = text.replace(form, _MASK)
    return text


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


def _stdlib(name: str) -> Any:
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


class _DurableLogger:
    """A logger that picks its route when it logs, not when it was made:
    module-level loggers (``durable.budget``, ``durable.http``) are made at
    ``import durable``, usually before the application configures structlog,
    and must still join its pipeline once it has."""

    def __init__(self, name: str, context: dict[str, Any]) -> None:
        self._name = name
        self._context = context

    def bind(self, **values: Any) -> _DurableLogger:
        return _DurableLogger(self._name, {**self._context, **values})

    def __getattr__(self, method: str) -> Any:
        if structlog.is_configured():
            logger = structlog.wrap_logger(None, processors=_Redacting(),
                                           logger_factory_args=(self._name,))
            logger = logger.bind(logger=self._name)
        else:
            level = _LEVELS.get(method)
            if level is not None and not logging.getLogger(self._name).isEnabledFor(level):
                # what `_stdlib`'s first processor (filter_by_level) would drop:
                # not built only to be dropped (14 µs a run's `run_stopped`
                # line at Python's default WARNING, issue 26)
                return _dropped
            logger = _stdlib(self._name)
        return getattr(logger.bind(**self._context), method)


#: the methods of a structlog stdlib logger that log at one level, and that level
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}


def _dropped(*args: Any, **kwargs: Any) -> None:
    """An event below its logger's level: nothing to do (structlog's dropped
    events return None too)."""
    return None


def get_logger(name: str) -> Any:
    """durable's own events: quiet unless the application asks for them."""
    return _DurableLogger(name, {})


def get_user_logger(name: str) -> Any:
    """What ``workflow.logger`` writes to: visible with no configuration."""
    return structlog.wrap_logger(None, processors=_Redacting(),
                                 logger_factory_args=(name,)).bind(logger=name)
