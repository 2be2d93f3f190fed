"""PostgreSQL URLs: parsing, masking passwords, identifiers and the NOTIFY channel."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durable.errors import ConfigurationError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
USAGE = "postgresql://user[:password]@host[:port]/database[?schema=NAME]"


@dataclass(frozen=True)
class Target:
    """A parsed URL: what to give asyncpg and what to show people."""

    dsn: str
    masked: str
    schema: str | None
    database: str
    address: str
    application_name: str | None


def mask(url: str) -> str:
    """The URL with its password replaced, fit for error messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def parse_url(url: str) -> Target:
    masked = mask(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(
            f"invalid PostgreSQL URL {masked!r} ({exc}); expected {USAGE}"
        ) from exc
    if parts.scheme.split("+", 1)[0].lower() not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {masked!r}; expected {USAGE}")
    if not parts.hostname and "host=" not in parts.query:
        raise ConfigurationError(f"PostgreSQL URL {masked!r} names no host; expected {USAGE}")
    schema: str | None = None
    rest: list[tuple[str, str]] = []
    application_name: str | None = None
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        else:
            if key == "application_name":
                application_name = value
            rest.append((key, value))
    if schema is not None and not IDENTIFIER.match(schema):
        raise ConfigurationError(
            f"schema={schema!r} in {masked!r} is not a plain SQL identifier (letters, digits "
            "and _, not starting with a digit, at most 63 characters)"
        )
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    database = parts.path.lstrip("/") or (parts.username or "")
    address = f"{parts.hostname or 'localhost'}:{port or 5432}"
    return Target(dsn, masked, schema, database, address, application_name)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    # standard_conforming_strings is forced on for our sessions: backslashes
    # are plain characters and a doubled quote is the only escape.
    return "'" + text.replace("'", "''") + "'"


def channel_name(schema: str | None) -> str:
    """The NOTIFY channel of one durable database (a schema is one database)."""
    name = f"durable_{schema}" if schema else "durable"
    if len(name) > 63:
        name = "durable_" + hashlib.sha1(name.encode()).hexdigest()[:24]
    return name
