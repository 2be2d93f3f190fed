"""Every fast path of the store, in one place, on one fence.

The general programs are portable and careful: a commit reads the run's row,
checks its fence in Python, then writes. The commonest writes have shorter
forms, chosen here by the dialect's capabilities (never by its name):

- a run's successful local steps (`local_steps`): with data-modifying CTEs
  (`Dialect.writable_cte`) fence, ops and events are ONE self-committing
  statement; with ``UPDATE ... RETURNING`` (`Dialect.returning`) the fence
  and the event counter are one UPDATE, then one ``executemany`` each for
  ops and events; without either, the fenced UPDATE, a read of the counter
  (the row is locked by then), and the same two ``executemany``;
- a group of runs' local steps (`local_steps_group`): one statement with
  CTEs; elsewhere five (lock and fence every run, bump every counter, insert
  every op, every event), whatever the group's size; on SQLite one fenced
  ``UPDATE ... RETURNING`` a run and one ``executemany`` each for all the
  ops and events (`local_steps_group_returning`), also beside runs with
  other writes in the same commit (`Dialect.steps_group_mixed`);
- one event for each of several runs (`append_events_of_runs`): one
  statement with CTEs, run by run elsewhere;
- a claim of runs (`claim_runs_in_one`): one statement with CTEs;
- a start (`durable.store.start_statement.start_in_one`): the instance, its
  run, its first event and the notification, one self-committing statement
  with CTEs (a module of its own: it is the start, not a step).

Every fenced form uses `fence`: the lease epoch, an open status, the
deadline not passed. When it matches no row nothing is written and the
general path runs in the same transaction to give the precise outcome
(`durable.store.commit`).
"""

from __future__ import annotations

import functools
from typing import Any

from ..driver import Dialect, Program, Row, Stmt, Tx, ex, many, placeholders, q, q1
from .events import EVENT_INSERT, Event, append_events, event_text, local_step_events
from .records import (
    RUN_COLUMNS,
    Claimed,
    ClaimedRun,
    CommitResult,
    OpKind,
    OpRecord,
    OpStatus,
    dump_failure,
    open_status_sql,
    run_from_row,
)
from .returning import update_one_returning
from .writes import RecordLocalActivity, RunWrites

#: a local activity's op row; `local_op_row` gives its parameters (shared with
#: dialects' fast paths, so both paths store the same row)
LOCAL_OP_INSERT = (
    "INSERT INTO ops (run_id, op_id, kind, name, status, result, failure, scheduled_at, "
    "closed_at, interrupted) VALUES (?, ?, 'local_activity', ?, ?, ?, ?, ?, ?, ?)"
)


def local_op_row(run_id: str, w: RecordLocalActivity, status: str,
                 now: float) -> tuple[Any, ...]:
    """The parameters of `LOCAL_OP_INSERT` for one local activity's outcome."""
    return (run_id, w.op_id, w.name, status, w.result, dump_failure(w.failure), w.started_at,
            now, int(w.interrupted))


def fence(table: str = "", *, epoch: str = "?", now: str = "?") -> str:
    """The run fence as SQL: the lease epoch matches, the run is open, its
    deadline has not passed (``now < deadline_at``). `table` prefixes the
    columns; `epoch` and `now` are the expressions compared with (placeholders
    by default, in that order)."""
    t = f"{table}." if table else ""
    return (f"{t}epoch = {epoch} AND {open_status_sql(f'{t}status')} "
            f"AND ({t}deadline_at IS NULL OR {t}deadline_at > {now})")


def local_steps(dialect: Dialect, batch: RunWrites, now: float, *,
                autocommit: bool) -> Program[CommitResult | None]:
    """A batch of one run's successful local steps, by the shortest form the
    dialect has (see the module docstring); None when the fence failed and
    nothing was written (a self-committing statement says "refused" instead)."""
    if dialect.writable_cte:
        return _local_steps_in_one(batch, now, autocommit=autocommit)
    return _local_steps_counted(dialect, batch, now)


def _ops(writes: list[RecordLocalActivity], now: float) -> dict[str, OpRecord]:
    return {w.op_id: OpRecord(w.op_id, OpKind.LOCAL_ACTIVITY, w.name, OpStatus.COMPLETED,
                              w.result, None, w.started_at, now) for w in writes}


def _steps(batch: RunWrites) -> list[RecordLocalActivity]:
    return [w for w in batch.writes if isinstance(w, RecordLocalActivity)]


def _local_steps_counted(dialect: Dialect, batch: RunWrites,
                         now: float) -> Program[CommitResult | None]:
    """Fence and count events in one UPDATE (read back where it cannot return),
    then insert ops and events in bulk."""
    writes = _steps(batch)
    events = [event for w in writes for event in local_step_events(w)]
    run_id = batch.run_id
    if dialect.returning:  # `update_one_returning`'s statement, its text made once
        row = yield q1(_COUNTED_RETURNING, len(events), run_id, batch.epoch, now)
    else:
        row = yield from update_one_returning(
            dialect, "runs", "event_seq = event_seq + ?", (len(events),),
            f"run_id = ? AND {fence()}", (run_id, batch.epoch, now), "event_seq",
            key="run_id", value=run_id)
    if row is None:
        return None
    yield many(LOCAL_OP_INSERT,
               [local_op_row(run_id, w, OpStatus.COMPLETED, now) for w in writes])
    first = int(row["event_seq"]) - len(events) + 1
    yield many(EVENT_INSERT, [(run_id, first + i, etype, now, event_text(data))
                              for i, (etype, data) in enumerate(events)])
    return CommitResult(run_id, True, _ops(writes, now))


#: `_local_steps_counted`'s fenced bump of the event counter where UPDATE
#: returns (SQLite): the text `update_one_returning` builds, made once instead
#: of at every step on the database thread (issue 26)
_COUNTED_RETURNING = (f"UPDATE runs SET event_seq = event_seq + ? WHERE run_id = ? AND {fence()} "
                      "RETURNING event_seq")


def _event_texts(w: RecordLocalActivity) -> tuple[str, str]:
    """The data of a successful local step's two history events, scheduled then
    completed: `local_step_events`'s text, so every path stores the same bytes."""
    (_, scheduled), (_, completed) = local_step_events(w)
    assert isinstance(scheduled, str) and isinstance(completed, str)
    return scheduled, completed


@functools.lru_cache(maxsize=64)
def _local_steps_sql(n_steps: int) -> str:
    """`_local_steps_in_one`'s statement for `n_steps` steps.

    Made once per count, not at every step (issue 26): joining its text cost
    a few µs of a sequential step, and the same string object each time lets
    the driver's and asyncpg's statement caches find it by its cached hash
    (a fresh string of ~1,000 characters is hashed again at each lookup).
    """
    op_values = ", ".join(
        "(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION))"
        for _ in range(n_steps)
    )
    event_values = ", ".join(
        "(CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT))" for _ in range(2 * n_steps)
    )
    return (
        "WITH fence AS (UPDATE runs SET event_seq = event_seq + CAST(? AS BIGINT) "
        "WHERE run_id = ? AND "
        + fence(epoch="CAST(? AS BIGINT)", now="CAST(? AS DOUBLE PRECISION)")
        + " RETURNING event_seq), "
        "new_ops AS (INSERT INTO ops (run_id, op_id, kind, name, status, result, "
        "scheduled_at, closed_at) SELECT CAST(? AS TEXT), v.op_id, 'local_activity', v.name, "
        "'completed', v.result, v.started_at, CAST(? AS DOUBLE PRECISION) "
        f"FROM (VALUES {op_values}) "
        "AS v(op_id, name, result, started_at), fence), "
        "new_events AS (INSERT INTO events (run_id, seq, type, recorded_at, data) "
        "SELECT ?, fence.event_seq - CAST(? AS BIGINT) + e.n, e.type, "
        f"CAST(? AS DOUBLE PRECISION), e.data FROM (VALUES {event_values}) "
        "AS e(n, type, data), fence) "
        "SELECT event_seq FROM fence"
    )


def _local_steps_in_one(batch: RunWrites, now: float, *, autocommit: bool
                        ) -> Program[CommitResult | None]:
    """Fence, ops and events of a run's local steps in ONE data-modifying CTE.

    It commits on its own (autocommit) when it is the transaction's only
    statement, so recording a local activity's outcome costs one round trip
    instead of six.
    """
    writes = _steps(batch)
    n_events = 2 * len(writes)
    op_params: list[Any] = []
    event_params: list[Any] = []
    for i, w in enumerate(writes):
        op_params += [w.op_id, w.name, w.result, w.started_at]
        scheduled, completed = _event_texts(w)
        event_params += [2 * i + 1, "ActivityScheduled", scheduled,
                         2 * i + 2, "ActivityCompleted", completed]
    row = yield Stmt(
        _local_steps_sql(len(writes)),
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
    return CommitResult(batch.run_id, True, _ops(writes, now))


# A group commit's runs, ops and events travel as parallel arrays (unnest), so
# the statement's text depends on nothing but itself: one prepared statement
# serves every group, whatever its size.
_GROUP_SQL = (
    "WITH v AS MATERIALIZED (SELECT * FROM unnest(CAST(? AS INT[]), CAST(? AS TEXT[]), "
    "CAST(? AS BIGINT[]), CAST(? AS BIGINT[])) AS v(b, run_id, epoch, n)), "
    # the store's lock order (run_id), whatever order the join below takes; with
    # the group's other runs (a group with other writes, `local_steps_in_group`)
    "locked AS MATERIALIZED (SELECT run_id FROM runs WHERE run_id IN (SELECT run_id FROM v "
    "UNION ALL SELECT unnest(CAST(? AS TEXT[]))) ORDER BY run_id FOR UPDATE), "
    "fence AS (UPDATE runs SET event_seq = runs.event_seq + v.n FROM v "
    "WHERE runs.run_id = v.run_id AND runs.run_id IN (SELECT run_id FROM locked) AND "
    + fence("runs", epoch="v.epoch", now="CAST(? AS DOUBLE PRECISION)") + " "
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


def local_steps_group(dialect: Dialect, batches: list[RunWrites],
                      now: float) -> Program[list[CommitResult]] | None:
    """A group commit of many runs' local steps in ONE self-committing statement
    with data-modifying CTEs, in five statements elsewhere (None when a run
    comes twice: run by run).

    Each run is fenced on its own, exactly as `local_steps` fences it: a run
    that fails its fence records nothing and gets ``CommitResult(run_id,
    False)``; the others commit. The rows and results are those of the
    run-by-run path (tests/test_postgres.py compares them on two schemas).
    """
    if dialect.writable_cte:
        return _local_steps_group(batches, now)
    if len({b.run_id for b in batches}) < len(batches):
        return None  # a run twice: run by run
    return _local_steps_group_locked(dialect, batches, now)


def local_steps_group_returning(batches: list[RunWrites], now: float
                                ) -> Program[list[CommitResult | None]] | None:
    """A group commit of many runs' local steps where ``UPDATE ... RETURNING``
    exists but data-modifying CTEs do not (SQLite): each run fenced and its
    event counter bumped by `_local_steps_counted`'s one UPDATE, in run_id
    order, then ONE ``executemany`` for every run's ops and ONE for every
    run's events. None when a run comes twice (run by run).

    A run that fails its fence has nothing written and a None result: the
    general path then records it in the same transaction and gives the
    precise outcome (lost authority, closed run, a deadline enforced now),
    exactly as when the runs were committed one by one (`durable.store.commit`).

    Why not `_local_steps_group_locked`'s five statements: their text grows
    with the group (a ``CASE`` arm per run), so each group size is one more
    statement to prepare and one more entry in the connection's statement
    cache; here every text is fixed, and a run costs one cached UPDATE
    instead of an UPDATE and two ``executemany`` (issue 26). The rows, and
    the outcome of a run that fails its fence, are those of the run-by-run path.
    """
    if len({b.run_id for b in batches}) < len(batches):
        return None
    return _local_steps_group_returning(batches, now)


def _local_steps_group_returning(batches: list[RunWrites], now: float
                                 ) -> Program[list[CommitResult | None]]:
    results: dict[str, CommitResult | None] = {}
    op_rows: list[tuple[Any, ...]] = []
    event_rows: list[tuple[Any, ...]] = []
    for batch in sorted(batches, key=lambda b: b.run_id):  # the store's lock order
        run_id = batch.run_id
        writes = _steps(batch)
        events = [event for w in writes for event in local_step_events(w)]
        row = yield q1(_COUNTED_RETURNING, len(events), run_id, batch.epoch, now)
        if row is None:  # nothing written: the general path gives the outcome
            results[run_id] = None
            continue
        op_rows += [local_op_row(run_id, w, OpStatus.COMPLETED, now) for w in writes]
        first = int(row["event_seq"]) - len(events) + 1
        event_rows += [(run_id, first + i, etype, now, event_text(data))
                       for i, (etype, data) in enumerate(events)]
        results[run_id] = CommitResult(run_id, True, _ops(writes, now))
    if op_rows:
        yield many(LOCAL_OP_INSERT, op_rows)
        yield many(EVENT_INSERT, event_rows)
    return [results[b.run_id] for b in batches]


def _local_steps_group_locked(dialect: Dialect, batches: list[RunWrites],
                              now: float) -> Program[list[CommitResult]]:
    """A group commit in five statements whatever its size, on any database:
    lock and fence the runs (one locking read, in run_id order), bump their
    event counters (one UPDATE), insert every op and every event (one
    ``executemany`` each, which a client library may send as one
    multi-row INSERT). Run by run it was four round trips per run.
    """
    ids = sorted(b.run_id for b in batches)
    epochs = " ".join("WHEN ? THEN ?" for _ in batches)
    fenced_rows = yield q(
        f"SELECT run_id, event_seq FROM runs WHERE run_id IN ({placeholders(len(ids))}) AND "
        + fence(epoch=f"CASE run_id {epochs} END") + f" ORDER BY run_id{dialect.lock}",
        *ids, *(v for b in batches for v in (b.run_id, b.epoch)), now)
    seq = {r["run_id"]: int(r["event_seq"]) for r in fenced_rows}
    fenced = [b for b in batches if b.run_id in seq]
    if fenced:
        steps = {b.run_id: _steps(b) for b in fenced}
        bumps = " ".join("WHEN ? THEN ?" for _ in fenced)
        yield ex(f"UPDATE runs SET event_seq = CASE run_id {bumps} END "
                 f"WHERE run_id IN ({placeholders(len(fenced))})",
                 *(v for b in fenced for v in (b.run_id, seq[b.run_id] + 2 * len(steps[b.run_id]))),
                 *(b.run_id for b in fenced))
        yield many(LOCAL_OP_INSERT, [local_op_row(b.run_id, w, OpStatus.COMPLETED, now)
                                     for b in fenced for w in steps[b.run_id]])
        yield many(EVENT_INSERT, [
            (b.run_id, seq[b.run_id] + 1 + i, etype, now, event_text(data))
            for b in fenced
            for i, (etype, data) in enumerate(
                event for w in steps[b.run_id] for event in local_step_events(w))])
    return [CommitResult(b.run_id, True, _ops(_steps(b), now)) if b.run_id in seq
            else CommitResult(b.run_id, False) for b in batches]


def local_steps_in_group(batches: list[RunWrites], now: float,
                         others: list[str]) -> Program[list[CommitResult]]:
    """The local steps of a group commit that has other writes too (a run's
    close, a durable op): every steps-only batch in ONE statement of the
    transaction (`Dialect.writable_cte`), which first locks the group's runs,
    these and the `others`, in run_id order (the store's lock order). Each
    run is fenced on its own; a run that fails its fence gets
    ``CommitResult(run_id, False)`` with nothing written, and the caller
    records it by the general path for the precise outcome. Run by run, it
    was one statement per run (most of a busy worker's steps, issue 26)."""
    return _local_steps_group(batches, now, others)


def _local_steps_group(batches: list[RunWrites], now: float,
                       others: list[str] | None = None) -> Program[list[CommitResult]]:
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
        writes = _steps(batch)
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
            scheduled, completed = _event_texts(w)
            event_b += [b, b]
            seqs += [2 * i + 1, 2 * i + 2]
            types += ["ActivityScheduled", "ActivityCompleted"]
            data += [scheduled, completed]
    rows = yield Stmt(_GROUP_SQL, (run_b, run_ids, epochs, counts, others or [], now, now,
                                   op_b, op_ids, names, results, started, now, event_b, seqs,
                                   types, data),
                      "all",
                      autocommit=others is None)
    fenced = {int(r["b"]) for r in rows}
    return [
        CommitResult(batch.run_id, True, _ops(writes, now))
        if b in fenced else CommitResult(batch.run_id, False)
        for b, (batch, writes) in enumerate(zip(batches, steps, strict=True))
    ]


def append_events_of_runs(tx: Tx, items: list[tuple[str, Event]], now: float
                          ) -> Program[None]:
    """Append one event to each of several runs (a run may come more than once:
    its events keep their order), locking the runs in run_id order.

    With data-modifying CTEs ONE statement bumps every run's counter and
    inserts every event; elsewhere `append_events` run by run. Why: a claim of
    k activity attempts appended k events in 2k round trips.
    """
    items = sorted(items, key=lambda item: item[0])  # lock order: see claims
    if not items:
        return None
    if not tx.dialect.writable_cte and tx.dialect.returning:
        for run_id, event in items:  # two statements a run
            yield from append_events(tx, run_id, [event], now)
        return None
    if not tx.dialect.writable_cte:
        # without RETURNING a run by run would be three statements a run: here
        # three in all (lock and read the counters, bump them, insert)
        yield from _append_events_of_runs_locked(tx.dialect, items, now)
        return None
    yield Stmt(
        "WITH v AS MATERIALIZED (SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]), "
        "CAST(? AS TEXT[])) WITH ORDINALITY AS v(run_id, type, data, k)), "
        "c AS (SELECT run_id, count(*) AS n FROM v GROUP BY run_id), "
        "locked AS MATERIALIZED (SELECT run_id FROM runs WHERE run_id IN (SELECT run_id FROM c) "
        "ORDER BY run_id FOR UPDATE), "
        "bump AS (UPDATE runs SET event_seq = runs.event_seq + c.n FROM c "
        "WHERE runs.run_id = c.run_id AND runs.run_id IN (SELECT run_id FROM locked) "
        "RETURNING runs.run_id, runs.event_seq, c.n) "
        "INSERT INTO events (run_id, seq, type, recorded_at, data) "
        "SELECT v.run_id, bump.event_seq - bump.n "
        "+ row_number() OVER (PARTITION BY v.run_id ORDER BY v.k), v.type, "
        "CAST(? AS DOUBLE PRECISION), v.data FROM v JOIN bump ON bump.run_id = v.run_id",
        ([run_id for run_id, _ in items], [etype for _, (etype, _) in items],
         [event_text(data) for _, (_, data) in items], now),
        "exec",
    )
    return None


def _append_events_of_runs_locked(dialect: Dialect, items: list[tuple[str, Event]],
                                  now: float) -> Program[None]:
    """`append_events_of_runs` in three statements: the runs' counters read and
    locked in run_id order, bumped in one UPDATE, the events inserted in bulk.
    A run that does not exist gets nothing (as `append_events`)."""
    ids = sorted({run_id for run_id, _ in items})
    rows = yield q(f"SELECT run_id, event_seq FROM runs WHERE run_id IN "
                   f"({placeholders(len(ids))}) ORDER BY run_id{dialect.lock}", *ids)
    seq = {r["run_id"]: int(r["event_seq"]) for r in rows}
    if not seq:
        return None
    inserts: list[tuple[Any, ...]] = []
    for run_id, (etype, data) in items:  # sorted by run_id, each run's in order
        if run_id in seq:
            seq[run_id] += 1
            inserts.append((run_id, seq[run_id], etype, now, event_text(data)))
    yield ex(f"UPDATE runs SET event_seq = CASE run_id {' '.join('WHEN ? THEN ?' for _ in seq)} "
             f"END WHERE run_id IN ({placeholders(len(seq))})",
             *(v for run_id, n in seq.items() for v in (run_id, n)), *seq)
    yield many(EVENT_INSERT, inserts)
    return None


def claim_runs_in_one(claim: str, claim_params: tuple[Any, ...], pick: str,
                      pick_params: tuple[Any, ...], counted: str,
                      counted_params: tuple[Any, ...],
                      guard: tuple[str, tuple[Any, ...]] | None = None,
                      ) -> Program[Claimed[ClaimedRun]]:
    """A claim as one self-committing data-modifying CTE: lock (SKIP LOCKED),
    bump the epochs, mark the workflows running, in one round trip.
    The pick is a MATERIALIZED CTE, run once (inlined, a nested loop ran it for
    each row scanned, each time past the rows just updated: over its LIMIT).

    `guard`: an SQL expression (and its parameters) that is 1 when the queue
    has limits; `pick` claims nothing then, and the statement still returns a
    row saying so (`Claimed.limited`: claim again within the limits,
    `durable.store.queues`).

    The claimed runs' ops are NOT read here: this statement's snapshot
    predates its own locks, so it could miss an op that the run's previous
    owner (its lease expired) committed a moment before the claim. A run
    claimed for the first time (epoch 1 now) has no ops (only an owner
    writes them; a reset's new run is the exception: it starts with the ops it
    kept); the others are listed in `Claimed.unread`, and
    `durable.store.claims.read_claimed_ops` reads them after the claim has
    committed, when every later write of the previous owner is refused by
    its stale epoch.
    """
    guard_sql, guard_params = guard if guard is not None else ("0", ())
    rows = yield Stmt(
        f"WITH picked AS MATERIALIZED ({pick}), "
        f"claimed AS ({claim}WHERE run_id IN (SELECT run_id FROM picked) "
        f"RETURNING {RUN_COLUMNS}), "
        # by the workflows' key: matching current_run_id alone scans every
        # workflow (no index), for each claimed run when the planner guesses
        # one claimed row (measured: 200 ms a claim of 100 over 1000 pending)
        "started AS (UPDATE workflows w SET status = 'running' FROM claimed c "
        "WHERE w.namespace = c.namespace AND w.workflow_id = c.workflow_id "
        "AND w.current_run_id = c.run_id AND w.status = 'pending') "
        f"SELECT claimed.*, {counted}, g.limited FROM (SELECT {guard_sql} AS limited) AS g "
        "LEFT JOIN claimed ON TRUE",
        (*pick_params, *claim_params, *counted_params, *guard_params), "all", autocommit=True,
    )
    limited = bool(rows and int(rows[0]["limited"]))
    rows = [r for r in rows if r["run_id"] is not None]
    if not rows:
        empty: Claimed[ClaimedRun] = Claimed()
        empty.limited = limited
        return empty
    claimed = Claimed.of([ClaimedRun(run_from_row(r), {}) for r in rows], int(rows[0]["ready"]),
                         int(rows[0]["live"]))
    claimed.limited = limited
    # a reset's new run starts with the ops it kept (durable.store.reset)
    claimed.unread = [c.run.run_id for c in claimed
                      if c.run.epoch > 1 or c.run.reset_from_run_id is not None]
    return claimed



def claim_ids_in_one(claim: str, claim_params: tuple[Any, ...], where: str,
                     where_params: tuple[Any, ...]) -> Program[list[Row]]:
    """A limited claim's chosen runs claimed and their workflows started in one
    statement of its transaction (`durable.store.claims.claim_ids`): one round
    trip less than the UPDATE and the workflows' status apart. The rows."""
    rows: list[Row] = yield q(
        f"WITH claimed AS ({claim}WHERE {where} RETURNING {RUN_COLUMNS}), "
        "started AS (UPDATE workflows w SET status = 'running' FROM claimed c "
        "WHERE w.namespace = c.namespace AND w.workflow_id = c.workflow_id "
        "AND w.current_run_id = c.run_id AND w.status = 'pending') "
        "SELECT * FROM claimed", *claim_params, *where_params)
    return rows
