"""A start as one self-committing statement (data-modifying CTEs,
`Dialect.writable_cte`: PostgreSQL), with or without the run taken by a
worker of this process (an eager start, `durable.store.runs.Taker`).

The general path (`durable.store.runs.start_workflow`) is a transaction of
several round trips; this is one, and carries the driver's notification
with it. Its rows are those of `durable.store.runs.new_run_rows`.
"""

from __future__ import annotations

import re

from ..driver import Program, Stmt, Tx
from .queues import limited_guard
from .records import (
    RUN_COLUMNS,
    ClaimedRun,
    RunStatus,
    StartRequest,
    StartResult,
    plus,
    run_from_row,
)
from .runs import (
    RUN_INSERT,
    RUN_INSERT_TAKEN,
    WORKFLOW_INSERT,
    Taker,
    new_run_rows,
    reuse,
    start_wake,
)


def _cast_select(insert: str, types: str, when: str = "",
                 guarded: dict[int, str] | None = None) -> str:
    """`insert` (``INSERT INTO t (cols) VALUES (?, ...)``) as ``INSERT INTO t
    (cols) SELECT CAST(? AS type), ...``, so that a CTE may make it
    conditional: `types` has one letter per column (T text, R double
    precision, I bigint), the columns' types in the schema. `guarded`: the
    columns (by position) whose parameter is stored only `when` that SQL
    condition holds, else the given SQL (its parameter is still bound)."""
    match = re.fullmatch(r"INSERT INTO (\w+) \(([\w, ]+)\) VALUES \(\?(?:, \?)*\)", insert)
    assert match is not None and len(match[2].split(", ")) == len(types), insert
    names = {"T": "TEXT", "R": "DOUBLE PRECISION", "I": "BIGINT"}
    casts = [f"CAST(? AS {names[t]})" for t in types]
    for i, otherwise in (guarded or {}).items():
        casts[i] = f"CASE WHEN {when} THEN {casts[i]} ELSE {otherwise} END"
    return f"INSERT INTO {match[1]} ({match[2]}) SELECT " + ", ".join(casts)


# A start in one statement: the instance's row unless one is there, and with
# it the run's row, its WorkflowStarted event and the notification to other
# processes; then whether it started, and the instance that was there.
_START_SQL = (
    "WITH existing AS (SELECT current_run_id, status FROM workflows "
    "WHERE namespace = ? AND workflow_id = ?), "
    f"wf AS ({_cast_select(WORKFLOW_INSERT, 'TTTTTRRITR')} "
    "WHERE NOT EXISTS (SELECT 1 FROM existing) RETURNING current_run_id), "
    f"new_run AS ({_cast_select(RUN_INSERT, 'TTTTITTTTTTTRRRRRRRRRTTRITI')} FROM wf), "
    "new_event AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
    "SELECT wf.current_run_id, 1, 'WorkflowStarted', CAST(? AS DOUBLE PRECISION), "
    "CAST(? AS TEXT) FROM wf), "
    # volatile, so never inlined: evaluated once per row, for a new instance only
    "notified AS MATERIALIZED (SELECT pg_notify(n.channel, n.payload) AS sent FROM wf, "
    "unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[])) AS n(channel, payload)) "
    "SELECT (SELECT count(*) FROM wf) AS started, (SELECT count(*) FROM notified) AS notified, "
    "existing.current_run_id, existing.status "
    "FROM (SELECT 1) AS one LEFT JOIN existing ON TRUE"
)

# The same start, its run taken by a worker of this process (`runs.Taker`)
# unless the queue limits its runs (`runs.may_take`, read in the statement):
# then running and owned, its notification not sent. The run's row comes back.
_UNLIMITED = "(SELECT n FROM limited) = 0"
_START_TAKEN_SQL = (
    "WITH existing AS (SELECT current_run_id, status FROM workflows "
    "WHERE namespace = ? AND workflow_id = ?), "
    # (`runs.may_take`: the guard an unlimited queue's claim carries)
    f"limited AS (SELECT {limited_guard('', '', 'runs')[0]} AS n), "
    "wf AS (" + _cast_select(WORKFLOW_INSERT, "TTTTTRRITR", _UNLIMITED, {4: "'pending'"})
    + " "
    "WHERE NOT EXISTS (SELECT 1 FROM existing) RETURNING current_run_id), "
    # (the rows of a taken run: `new_run_rows(taken=True)`): a limited queue's
    # is pending, its claim's columns (`Taker.columns`) NULL, its epoch 0
    "new_run AS ("
    + _cast_select(RUN_INSERT_TAKEN, "TTTTITTTTTTTRRRRRRRRRTTRITI" + "TIRRTTT", _UNLIMITED,
                   {6: "'pending'", 27: "NULL", 28: "0", 29: "NULL", 30: "NULL", 31: "NULL",
                    32: "NULL", 33: "NULL"})
    + f" FROM wf RETURNING {RUN_COLUMNS}), "
    "new_event AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
    "SELECT wf.current_run_id, 1, 'WorkflowStarted', CAST(? AS DOUBLE PRECISION), "
    "CAST(? AS TEXT) FROM wf), "
    "notified AS MATERIALIZED (SELECT pg_notify(n.channel, n.payload) AS sent FROM wf, "
    "unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[])) AS n(channel, payload) "
    f"WHERE NOT {_UNLIMITED}) "
    "SELECT (SELECT count(*) FROM wf) AS started, (SELECT count(*) FROM notified) AS notified, "
    "existing.current_run_id AS existing_run_id, existing.status AS existing_status, "
    "new_run.* FROM (SELECT 1) AS one LEFT JOIN existing ON TRUE LEFT JOIN new_run ON TRUE"
)


def start_in_one(tx: Tx, req: StartRequest, run_id: str, now: float,
                 to: str | None = None, taker: Taker | None = None,
                 ) -> Program[StartResult | None]:
    """A start as ONE self-committing statement (data-modifying CTEs,
    `Dialect.writable_cte`): the instance, its run and its first event are
    inserted unless the instance is there, and the driver's notification
    (`Tx.notices`) travels in the statement: one round trip instead of six
    (BEGIN, a locking read, three INSERTs, NOTIFY + COMMIT).

    The rows are those of `durable.store.runs.insert_run` (`new_run_rows`).
    When the instance is there, nothing was written and `reuse` decides as
    the general path does; None when the policy lets this start replace it:
    the caller then runs `durable.store.runs.start_workflow`, which locks the
    instance first, in a transaction of its own. Two starts of one new id at
    once: the second's INSERT meets the first's key and is rolled back
    (unique violation, a conflict the driver retries), as in the general path.

    With a `taker` (`runs.Taker`), the same statement inserts the run taken
    by it unless the queue limits its runs (`_START_TAKEN_SQL`); a taken run
    is announced to nobody, and comes back as `StartResult.taken`.
    """
    if taker is not None:
        return (yield from _start_taken_in_one(tx, req, run_id, now, to, taker))
    execution_deadline = plus(now, req.execution_timeout)
    wake = start_wake(req, now, execution_deadline, to)
    channels: list[str] = []
    payloads: list[str] = []
    if tx.notices is None:  # the driver tells the others (a transaction of its own)
        tx.wake(wake)
    else:
        channels, payloads = tx.notices([wake])
    workflow_row, run_row, started = new_run_rows(req, run_id, 1, now, execution_deadline)
    row = yield Stmt(_START_SQL, (req.namespace, req.workflow_id, *workflow_row, *run_row,
                                  now, started, channels, payloads), "one", autocommit=True)
    assert row is not None  # (a SELECT FROM (SELECT 1) always has its row)
    if row["started"]:
        if tx.notices is not None:
            tx.wake(wake)  # sent by the statement: published in this process only
        return StartResult(run_id, True, RunStatus.PENDING)
    # not inserted: the instance is there (else the INSERT ran, and inserted or
    # raised); the same snapshot read it
    assert row["current_run_id"] is not None
    return reuse(req, run_id, row)


def _start_taken_in_one(tx: Tx, req: StartRequest, run_id: str, now: float, to: str | None,
                        taker: Taker) -> Program[StartResult | None]:
    """`start_in_one` with a `taker`: one statement too (`_START_TAKEN_SQL`)."""
    execution_deadline = plus(now, req.execution_timeout)
    wake = start_wake(req, now, execution_deadline, to)
    channels: list[str] = []
    payloads: list[str] = []
    if tx.notices is not None:  # sent by the statement only if the run is not taken
        channels, payloads = tx.notices([wake])
    workflow_row, run_row, started = new_run_rows(req, run_id, 1, now, execution_deadline,
                                                  taken=True)
    row = yield Stmt(_START_TAKEN_SQL, (
        req.namespace, req.workflow_id, req.namespace, req.task_queue, *workflow_row,
        *run_row, *taker.columns(now), now, started, channels, payloads), "one",
        autocommit=True)
    assert row is not None  # (a SELECT FROM (SELECT 1) always has its row)
    if row["started"]:
        if row["owner"] is not None:
            return StartResult(run_id, True, RunStatus.RUNNING,
                               ClaimedRun(run_from_row(row), {}))
        tx.wake(wake)  # (sent by the statement, or by the driver after it)
        return StartResult(run_id, True, RunStatus.PENDING)
    assert row["existing_run_id"] is not None
    return reuse(req, run_id, {"current_run_id": row["existing_run_id"],
                               "status": row["existing_status"]})
