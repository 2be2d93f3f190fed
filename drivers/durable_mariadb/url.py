"""MariaDB URLs: ``mariadb://user[:password]@host[:port]/database[?option=value]``.

``mysql://`` is the same. Options (ours, not the server's):
``lock_wait_timeout`` (seconds a statement waits for a row lock, or a
table's metadata lock, before the transaction is retried; default 10),
``unix_socket`` (a socket path instead of host and port).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from durable.errors import ConfigurationError

SCHEMES = ("mariadb", "mysql")
_OPTIONS = ("lock_wait_timeout", "unix_socket")


@dataclass(frozen=True)
class Target:
    """Where a MariaDB URL points."""

    host: str
    port: int
    user: str
    password: str
    database: str
    unix_socket: str | None
    lock_wait_timeout: int
    masked: str

    @property
    def address(self) -> str:
        return self.unix_socket or f"{self.host}:{self.port}"


def parse_url(url: str) -> Target:
    """The connection target of a ``mariadb://`` or ``mysql://`` URL.

    Raises `ConfigurationError` naming what is wrong with it.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"not a MariaDB URL: {url!r}; use mariadb://user:password@host:3306/database")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ConfigurationError(
            f"the MariaDB URL {_mask(url)!r} names no database; add it as the path, "
            "e.g. mariadb://root@127.0.0.1:3306/durable")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} in the MariaDB URL {_mask(url)!r}; "
            f"known: {', '.join(_OPTIONS)}")
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigurationError(f"bad port in the MariaDB URL {_mask(url)!r}: {exc}") from exc
    wait = query.get("lock_wait_timeout", ["10"])[-1]
    if not wait.isdigit() or int(wait) < 1:
        raise ConfigurationError(
            f"lock_wait_timeout={wait!r} in {_mask(url)!r} must be a whole number of seconds "
            ">= 1")
    return Target(
        host=parts.hostname or "127.0.0.1", port=port,
        user=unquote(parts.username or "root"), password=unquote(parts.password or ""),
        database=database, unix_socket=query.get("unix_socket", [None])[-1],
        lock_wait_timeout=int(wait), masked=_mask(url),
    )


def _mask(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def quote_ident(name: str) -> str:
    """A database name as a MariaDB identifier (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"
