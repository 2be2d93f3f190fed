"""MariaDB's dialect: the store's SQL vocabulary as MariaDB 10.6+ speaks it.

- row locks (``FOR UPDATE``) and ``SKIP LOCKED`` claims (10.6);
- no ``UPDATE ... RETURNING`` (10.11 has it for INSERT and DELETE only): the
  store locks, updates and reads back (`durable.store.returning`);
- a TEXT column cannot be indexed whole: keys are ``VARCHAR``; every table is
  InnoDB in ``utf8mb4`` with the binary, no-pad collation, so ids compare as
  they do in SQLite and PostgreSQL (case and trailing spaces count);
- no partial indexes (a plain index; a unique one admits many NULLs, as the
  partial one did);
- ``key`` is a keyword (quoted with backticks);
- a LIMIT is a number or a parameter, never a subquery: a claim reads its
  fair share first;
- the local-steps fast paths without RETURNING (`durable.store.fastpath`):
  the fenced UPDATE, a read of the event counter, one ``executemany`` each
  for ops and events; a group commit's runs all at once in five statements.
"""

from __future__ import annotations

from durable.driver import Dialect, Program
from durable.store import fastpath
from durable.store.records import CommitResult
from durable.store.writes import RunWrites


class MariaDBDialect(Dialect):
    """InnoDB row locks, VARCHAR keys, no UPDATE ... RETURNING."""

    name = "mariadb"
    lock = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    real = "DOUBLE"
    integer = "BIGINT"
    serial = "BIGINT AUTO_INCREMENT"
    # payloads and histories may exceed TEXT's 64 KiB
    text = "LONGTEXT"
    table_options = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"
    returning = False
    partial_indexes = False
    limit_subquery = False
    writable_cte = False
    pipelined_many = False
    # a prepared statement's limit (65535); the driver formats parameters into
    # the text, so only the packet size bounds it there
    max_params = 65535
    # InnoDB reuses a deleted row's space by itself
    vacuum = None

    def key_type(self, length: int) -> str:
        return f"VARCHAR({length})"

    def index_text(self, column: str) -> str:
        # 191 characters of utf8mb4: with two VARCHAR(255) keys beside it the
        # index stays under InnoDB's 3072 bytes
        return f"{column}(191)"

    def quote(self, name: str) -> str:
        return f"`{name}`"

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult | None] | None:
        # Several statements: never `autocommit`.
        return fastpath.local_steps(self, batch, now, autocommit=False)

    def local_steps_group(
        self, batches: list[RunWrites], now: float
    ) -> Program[list[CommitResult]] | None:
        # five statements for the whole group, whatever its size
        return fastpath.local_steps_group(self, batches, now)
