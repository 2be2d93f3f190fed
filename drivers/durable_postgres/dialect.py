"""PostgreSQL's dialect: row locks, SKIP LOCKED claims, and one-statement local steps
(one run's, or a whole group commit's)."""

from __future__ import annotations

from typing import Any

from durable.driver import Dialect, Program, Stmt
from durable.store.events import local_step_events
from durable.store.records import CommitResult, OpKind, OpRecord, OpStatus
from durable.store.writes import RecordLocalActivity, RunWrites


class PostgresDialect(Dialect):
    """Row locks instead of SQLite's database lock; a CTE for the hot path."""

    name = "postgres"
    lock = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    real = "DOUBLE PRECISION"
    integer = "BIGINT"
    serial = "BIGSERIAL"
    writable_cte = True
    # deleted rows' space is reused only after VACUUM (autovacuum may be off or late)
    vacuum = "VACUUM {tables}"

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult | None] | None:
        return _local_steps(batch, now, autocommit=autocommit)

    def local_steps_group(
        self, batches: list[RunWrites], now: float
    ) -> Program[list[CommitResult]] | None:
        return _local_steps_group(batches, now)


def _events(w: RecordLocalActivity) -> tuple[str, str]:
    """The data of a successful local step's two history events, scheduled then
    completed: `durable.store.events.local_step_events`'s text, so this path
    and the general one store the same bytes (and share the fast codec)."""
    (_, scheduled), (_, completed) = local_step_events(w)
    assert isinstance(scheduled, str) and isinstance(completed, str)
    return scheduled, completed


def _op(w: RecordLocalActivity, now: float) -> OpRecord:
    return OpRecord(w.op_id, OpKind.LOCAL_ACTIVITY, w.name, OpStatus.COMPLETED, w.result,
                    None, w.started_at, now)


def _local_steps(batch: RunWrites, now: float, *, autocommit: bool
                 ) -> Program[CommitResult | None]:
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
        scheduled, completed = _events(w)
        event_params += [2 * i + 1, "ActivityScheduled", scheduled,
                         2 * i + 2, "ActivityCompleted", completed]
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
        # Nothing was written. Inside a larger transaction the general path
        # runs next and gives the precise refusal (a passed deadline is
        # enforced at once); a self-committing statement can only say "no".
        return CommitResult(batch.run_id, False) if autocommit else None
    return CommitResult(batch.run_id, True, {w.op_id: _op(w, now) for w in writes})


# A group commit's runs, ops and events travel as parallel arrays (unnest), so
# the statement's text depends on nothing but itself: one prepared statement
# serves every group, whatever its size.
_GROUP_SQL = (
    "WITH v AS MATERIALIZED (SELECT * FROM unnest(CAST(? AS INT[]), CAST(? AS TEXT[]), "
    "CAST(? AS BIGINT[]), CAST(? AS BIGINT[])) AS v(b, run_id, epoch, n)), "
    # the store's lock order (run_id), whatever order the join below takes
    "locked AS MATERIALIZED (SELECT run_id FROM runs WHERE run_id IN (SELECT run_id FROM v) "
    "ORDER BY run_id FOR UPDATE), "
    "fence AS (UPDATE runs SET event_seq = runs.event_seq + v.n FROM v "
    "WHERE runs.run_id = v.run_id AND runs.run_id IN (SELECT run_id FROM locked) "
    "AND runs.epoch = v.epoch AND runs.status IN ('pending', 'running') "
    "AND (runs.deadline_at IS NULL OR runs.deadline_at > CAST(? AS DOUBLE PRECISION)) "
    "RETURNING v.b, v.n, runs.run_id, runs.event_seq), "
    "new_ops AS (INSERT INTO ops (run_id, op_id, kind, name, status, result, scheduled_at, "
    "closed_at) SELECT fence.run_id, o.op_id, 'local_activity', o.name, 'completed', "
    "o.result, o.started_at, CAST(? AS DOUBLE PRECISION) FROM unnest(CAST(? AS INT[]), "
    "CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), "
    "CAST(? AS DOUBLE PRECISION[])) AS o(b, op_id, name, result, started_at) "
    "JOIN fence ON fence.b = o.b), "
    "new_events AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
    "SELECT fence.run_id, fence.event_seq - fence.n + e.n, e.type, "
    "CAST(? AS DOUBLE PRECISION), e.data FROM unnest(CAST(? AS INT[]), CAST(? AS BIGINT[]), "
    "CAST(? AS TEXT[]), CAST(? AS TEXT[])) AS e(b, n, type, data) "
    "JOIN fence ON fence.b = e.b) "
    "SELECT b FROM fence"
)


def _local_steps_group(batches: list[RunWrites], now: float) -> Program[list[CommitResult]]:
    """A group commit of many runs' local steps in ONE self-committing statement.

    Each run is fenced on its own (epoch, open status, deadline not passed),
    exactly as `_local_steps` fences it: a run that fails its fence records
    nothing and gets ``CommitResult(run_id, False)``; the others commit. The
    rows and results are those of the run-by-run path (tests/test_postgres.py
    compares them on two schemas).
    """
    run_b: list[int] = []
    run_ids: list[str] = []
    epochs: list[int] = []
    counts: list[int] = []
    op_b: list[int] = []
    op_ids: list[str] = []
    names: list[str] = []
    results: list[str | None] = []
    started: list[float] = []
    event_b: list[int] = []
    seqs: list[int] = []
    types: list[str] = []
    data: list[str] = []
    steps: list[list[RecordLocalActivity]] = []
    for b, batch in enumerate(batches):
        writes = [w for w in batch.writes if isinstance(w, RecordLocalActivity)]
        steps.append(writes)
        run_b.append(b)
        run_ids.append(batch.run_id)
        epochs.append(batch.epoch)
        counts.append(2 * len(writes))
        for i, w in enumerate(writes):
            op_b.append(b)
            op_ids.append(w.op_id)
            names.append(w.name)
            results.append(w.result)
            started.append(w.started_at)
            scheduled, completed = _events(w)
            event_b += [b, b]
            seqs += [2 * i + 1, 2 * i + 2]
            types += ["ActivityScheduled", "ActivityCompleted"]
            data += [scheduled, completed]
    rows = yield Stmt(_GROUP_SQL, (run_b, run_ids, epochs, counts, now, now, op_b, op_ids,
                                   names, results, started, now, event_b, seqs, types, data),
                      "all",
                      autocommit=True)
    fenced = {int(r["b"]) for r in rows}
    return [
        CommitResult(batch.run_id, True, {w.op_id: _op(w, now) for w in writes})
        if b in fenced else CommitResult(batch.run_id, False)
        for b, (batch, writes) in enumerate(zip(batches, steps, strict=True))
    ]
