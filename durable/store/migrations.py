"""The schema's version: recorded when created, checked on every connect.

A database written by a newer durable is refused rather than misread; the
schema statements themselves are idempotent (`durable.store.schema`).
"""

from __future__ import annotations

from ..driver import Program, ex, q1
from ..errors import ConfigurationError

SCHEMA_VERSION = 1


def migrate() -> Program[int]:
    """Record the version of a fresh schema or check an existing one; the version."""
    row = yield q1("SELECT value FROM durable_meta WHERE key = 'schema_version'")
    if row is None:
        yield ex("INSERT INTO durable_meta (key, value) VALUES ('schema_version', ?)",
                 str(SCHEMA_VERSION))
        return SCHEMA_VERSION
    found = int(row["value"])
    if found > SCHEMA_VERSION:
        raise ConfigurationError(
            f"the database schema is version {found}, newer than this durable's "
            f"({SCHEMA_VERSION}); upgrade durable-sdk before connecting to it"
        )
    return found
