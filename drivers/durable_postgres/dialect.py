"""PostgreSQL's dialect: row locks, SKIP LOCKED claims, and data-modifying CTEs
(`durable.store.fastpath`: one-statement local steps, one run's or a whole group
commit's, claims and groups of events)."""

from __future__ import annotations

from durable.driver import Dialect, Program
from durable.store import fastpath
from durable.store.records import CommitResult
from durable.store.writes import RunWrites


class PostgresDialect(Dialect):
    """Row locks instead of SQLite's database lock; a CTE for the hot path."""

    name = "postgres"
    lock = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    real = "DOUBLE PRECISION"
    integer = "BIGINT"
    serial = "BIGSERIAL"
    writable_cte = True
    lateral_arrays = True
    # the protocol's parameter count is 16 bits (Bind), the server's limit 32767
    max_params = 32767
    # deleted rows' space is reused only after VACUUM (autovacuum may be off or late)
    vacuum = "VACUUM {tables}"

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult | None] | None:
        return fastpath.local_steps(self, batch, now, autocommit=autocommit)

    def local_steps_group(
        self, batches: list[RunWrites], now: float
    ) -> Program[list[CommitResult]] | None:
        return fastpath.local_steps_group(self, batches, now)

