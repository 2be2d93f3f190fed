"""PostgreSQL's dialect: row locks, SKIP LOCKED claims, and one-statement local steps."""

from __future__ import annotations

import json
from typing import Any

from durable.driver import Dialect, Program, Stmt
from durable.store.records import CommitResult, OpKind, OpRecord, OpStatus, loads
from durable.store.writes import RecordLocalActivity, RunWrites


class PostgresDialect(Dialect):
    """Row locks instead of SQLite's database lock; a CTE for the hot path."""

    name = "postgres"
    lock = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    real = "DOUBLE PRECISION"
    integer = "BIGINT"
    serial = "BIGSERIAL"

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult] | None:
        return _local_steps(batch, now, autocommit=autocommit)


def _local_steps(batch: RunWrites, now: float, *, autocommit: bool) -> Program[CommitResult]:
    """The hot path: fence, ops and events of a run's local steps in ONE statement.

    A data-modifying CTE commits on its own (autocommit), so recording a local
    activity's outcome costs one round trip instead of six. The fence is the
    general path's: the run's epoch, an open status, its deadline not passed.
    """
    writes = [w for w in batch.writes if isinstance(w, RecordLocalActivity)]
    n_events = 2 * len(writes)
    op_values = ", ".join(
        "(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION))"
        for _ in writes
    )
    event_values = ", ".join(
        "(CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT))" for _ in range(n_events)
    )
    op_params: list[Any] = []
    event_params: list[Any] = []
    for i, w in enumerate(writes):
        op_params += [w.op_id, w.name, w.result, w.started_at]
        event_params += [2 * i + 1, "ActivityScheduled", json.dumps({
            "op_id": w.op_id, "activity_type": w.name, "local": True,
        }), 2 * i + 2, "ActivityCompleted", json.dumps({
            "op_id": w.op_id, "activity_type": w.name, "local": True,
            "attempt": w.attempts, "result": loads(w.result),
        }, default=str)]
    row = yield Stmt(
        "WITH fence AS (UPDATE runs SET event_seq = event_seq + CAST(? AS BIGINT) "
        "WHERE run_id = ? AND epoch = CAST(? AS BIGINT) AND status IN ('pending', 'running') "
        "AND (deadline_at IS NULL OR deadline_at > CAST(? AS DOUBLE PRECISION)) "
        "RETURNING event_seq), "
        "new_ops AS (INSERT INTO ops (run_id, op_id, kind, name, status, result, "
        "scheduled_at, closed_at) SELECT CAST(? AS TEXT), v.op_id, 'local_activity', v.name, "
        "'completed', v.result, v.started_at, CAST(? AS DOUBLE PRECISION) "
        f"FROM (VALUES {op_values}) "
        "AS v(op_id, name, result, started_at), fence), "
        "new_events AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
        "SELECT ?, fence.event_seq - CAST(? AS BIGINT) + e.n, e.type, "
        f"CAST(? AS DOUBLE PRECISION), e.data FROM (VALUES {event_values}) "
        "AS e(n, type, data), fence) "
        "SELECT event_seq FROM fence",
        (n_events, batch.run_id, batch.epoch, now, batch.run_id, now, *op_params,
         batch.run_id, n_events, now, *event_params),
        "one",
        autocommit=autocommit,
    )
    if row is None:
        return CommitResult(batch.run_id, False)
    ops = {
        w.op_id: OpRecord(w.op_id, OpKind.LOCAL_ACTIVITY, w.name, OpStatus.COMPLETED, w.result,
                          None, w.started_at, now)
        for w in writes
    }
    return CommitResult(batch.run_id, True, ops)
