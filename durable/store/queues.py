"""Queue limits: how much of a task queue may run at once, across every worker.

A queue's limits are one row of `task_queues` (changeable at run time):
``max_running`` (open runs owned under a live lease), ``max_running_per_key``
(the same, per `concurrency_key`), ``rate`` (first starts of runs per period),
``max_running_activities`` and ``activity_rate`` (remote activity attempts).
They hold across processes because every claim of a limited queue locks its
row first (``FOR UPDATE``; SQLite's write lock does it by itself): limited
claims of one queue take turns, then count what runs under a live lease and
take at most what is left. A slot held by a dead worker comes back when its
lease ends: only live leases count. Where the dialect has writable CTEs that
is one statement (`claim_limited_in_one`), which trusts its snapshot's
counts only when no claim committed while it waited for the row (the row's
``claims``), and otherwise hands over to the transaction (`pick_runs`).

An unlimited queue costs nothing more: the one-statement claim
(`claims._claim_runs_in_one`) carries a guard that claims nothing when the
queue is limited and says so; the store then uses the limited claim for that
queue (`Store.claim_runs`). Rates are token buckets (capacity: the count,
refilled continuously, one token at first), kept in the row.

Which runs: by priority (0 first), then age; with ``max_running_per_key``,
at most that many candidates per key enter a claim and keys at their limit
are passed over in SQL, so one busy key never holds back the others.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..driver import Program, Row, Stmt, Tx, ex, placeholders, q, q1
from ..wakes import Wake
from .records import OPEN_SQL, RUN_COLUMNS, Claimed, ClaimedRun, run_from_row

#: the limits a queue may have, and what kind of work each bounds
RUN_LIMITS = ("max_running", "max_running_per_key", "rate")
ACTIVITY_LIMITS = ("max_running_activities", "activity_rate")

#: the limits on runs that count slots: a run's close or release frees one
SLOT_LIMITS = ("max_running", "max_running_per_key")


def counts_slots(limits: str | None) -> bool:
    """Whether a limited queue's `limits` (JSON, as a claim read them) count
    slots (`SLOT_LIMITS`); limits not read count, to be safe (a wake-up too many)."""
    if limits is None:
        return True
    found = json.loads(limits)
    return any(found.get(name) is not None for name in SLOT_LIMITS)


def counts_activity_slots(limits: str | None) -> bool:
    """`counts_slots` for activity attempts: whether the limits cap how many
    run at once (``max_running_activities``); limits not read count."""
    return limits is None or json.loads(limits).get("max_running_activities") is not None


RUNNING_RUNS = (f"runs WHERE namespace = ? AND task_queue = ? AND status IN {OPEN_SQL} "
                "AND owner IS NOT NULL AND lease_expires_at > ? ")
RUNNING_TASKS = ("activity_tasks WHERE namespace = ? AND task_queue = ? AND status = 'running' "
                 "AND lease_expires_at > ? ")

#: a per-key claim looks at this many times its candidates' window of ready runs
PREFIX = 4

LIMIT_COLUMNS = ("limits, runs_limited, activities_limited, run_tokens, run_refilled_at, "
                 "activity_tokens, activity_refilled_at, updated_at")


@dataclass
class Bucket:
    """A token bucket: `count` starts per `per` seconds, `tokens` left at `at`."""

    count: float
    per: float
    tokens: float
    at: float

    def refill(self, now: float) -> float:
        elapsed = max(0.0, now - self.at)
        self.tokens = min(self.count, self.tokens + elapsed * self.count / self.per)
        self.at = max(self.at, now)
        return self.tokens

    def next_token_at(self) -> float:
        """When the next whole token is there."""
        missing = max(0.0, 1.0 - self.tokens)
        return self.at + missing * self.per / self.count


def token_bucket(rate: Any, tokens: Any, at: Any, now: float) -> Bucket | None:
    if not rate:
        return None
    count, per = float(rate["count"]), float(rate["per"])
    if tokens is None or at is None:
        return Bucket(count, per, min(1.0, count), now)  # one start at once, then paced
    bucket = Bucket(count, per, float(tokens), float(at))
    bucket.refill(now)
    return bucket


def read_limits(tx: Tx, namespace: str, name: str, kind: str,
                known: bool = False) -> Program[Row | None]:
    """The queue's row when it limits this kind of work ("runs" or
    "activities"), locked until commit; None when it does not.

    Unless the queue is `known` to be limited, a plain read first, so that
    claims of an unlimited queue never take turns on its row."""
    flag = "runs_limited" if kind == "runs" else "activities_limited"
    if not known:
        row = yield q1(f"SELECT {flag} AS limited FROM task_queues WHERE namespace = ? "
                       "AND name = ?", namespace, name)
        if row is None or not int(row["limited"]):
            return None
    locked = yield q1(f"SELECT {LIMIT_COLUMNS} FROM task_queues WHERE namespace = ? AND name = ?"
                      + tx.lock, namespace, name)
    if locked is None or not int(locked["runs_limited" if kind == "runs"
                                         else "activities_limited"]):
        return None
    return locked


def limited_guard(namespace: str, name: str, kind: str) -> tuple[str, tuple[Any, ...]]:
    """An SQL expression: 1 when the queue limits this kind of work, else 0."""
    flag = "runs_limited" if kind == "runs" else "activities_limited"
    return (f"(SELECT count(*) FROM task_queues WHERE namespace = ? AND name = ? AND {flag} = 1)",
            (namespace, name))


@dataclass
class Pick:
    """What a limited claim chose, and why it did not choose more."""

    ids: list[str]
    ready: int
    live: int
    #: when a rate token comes next, if the rate held work back
    next_at: float | None = None
    #: keys at their limit held candidates back and it took fewer than it might
    crowded: bool = False
    #: ready runs it would have taken but for ``max_running`` (`held_back`)
    held: int = 0
    #: runs of the queue under a live lease (with ``max_running``), else None
    running: int | None = None
    #: runs under a live lease per key (with ``max_running_per_key``), as read
    #: before the choice (a trade's runs put down still counted)
    by_key: dict[Any, int] = field(default_factory=dict)


def keys_held_back(fair: int, ready: int, taken: int, full: bool) -> int:
    """How many more ready runs a claim (`fair`: at most its fair share and its
    size) might have taken had keys at their ``max_running_per_key`` (`full`:
    some key's slots are all taken) not held them back: a hint, as the ready
    runs are not counted per key (a trade verifies under the queue's lock
    which of them wait for a slot their own ancestor holds; decision (aw))."""
    if not full:
        return 0
    return max(0, min(fair, ready) - taken)


def held_back(fair: int, ready: int, taken: int, max_running: Any,
              running: int | None) -> int:
    """How many more ready runs a claim would have taken (`fair`: at most its
    fair share and its size) had the queue's ``max_running`` not been taken by
    `running` runs under live leases (`Claimed.held_back`)."""
    if max_running is None or running is None:
        return 0
    wanted = min(fair, ready)
    if int(max_running) - running >= wanted:
        return 0
    return max(0, wanted - taken)


def pick_runs(tx: Tx, row: Row, namespace: str, task_queue: str, ready_sql: str,
              ready_params: tuple[Any, ...], counted: str, counted_params: tuple[Any, ...],
              limit: int, now: float, freeing: int | None = None,
              freeing_keys: Sequence[Any] = ()) -> Program[Pick]:
    """Choose the runs a claim of a limited queue takes (the row is locked).

    One read brings the candidates (by priority, then age; keys at their
    limit left out), the ready and live counts of the fair share and, with
    ``max_running``, what runs now; the choice is made here, within every
    limit. With a per-key limit, what runs per key is read first (an index
    read: ``runs_running``); only when keys at their limit crowd the
    candidates out of a claim (it takes fewer than it may) is a second read
    made, at most ``max_running_per_key`` per key over a longer view.

    `freeing`: a trade (`durable.store.parked.trade_parked`) that puts that
    many of the queue's runs down in the same transaction: they count as
    not running, and no fair share applies (the runs it may take descend
    from those it puts down, which no other worker can trade for);
    `freeing_keys`: the keys of those runs (a run of each given key counts as
    not running; `Pick.by_key` still counts them)."""
    limits = json.loads(row["limits"])
    per_key = limits.get("max_running_per_key")
    order = "ORDER BY priority, ready_at"
    by_key: dict[Any, int] = {}
    columns = f"run_id, concurrency_key, started_at, {counted}"
    columns_params: tuple[Any, ...] = counted_params
    if limits.get("max_running") is not None:  # the count only a queue-wide limit needs
        columns += f", (SELECT count(*) FROM {RUNNING_RUNS}) AS running"
        columns_params += (namespace, task_queue, now)
    skip, full = "", []
    if per_key is not None:
        running_rows = yield q(f"SELECT concurrency_key, count(*) AS n FROM {RUNNING_RUNS}"
                               "AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
                               namespace, task_queue, now)
        by_key = {r["concurrency_key"]: int(r["n"]) for r in running_rows}
        read_by_key = dict(by_key)
        for key in freeing_keys:
            if key is not None and by_key.get(key, 0) > 0:
                by_key[key] -= 1
        full = [k for k, n in by_key.items() if n >= int(per_key)]
        skip = ("" if not full else "AND (concurrency_key IS NULL OR concurrency_key NOT IN "
                f"({placeholders(len(full))})) ")
    bucket = token_bucket(limits.get("rate"), row["run_tokens"], row["run_refilled_at"], now)
    # A few more candidates than a claim takes where some may be dropped (a
    # key's slots, the rate's tokens) and the next ones in line go instead; as
    # many as it takes where no limit can drop one (max_running only bounds
    # how many: a claim takes the first ones)
    droppable = ((bucket is not None and math.floor(bucket.tokens + 1e-9) < limit)
                 or (per_key is not None and max(by_key.values(), default=0) + limit
                     > int(per_key)))
    window = limit * 2 + 8 if droppable else limit
    rows = yield q(f"SELECT {columns} FROM {ready_sql}{skip}{order} LIMIT ?" + tx.skip_locked,
                   *columns_params, *ready_params, *full, window)
    pick = _choose(rows, limit, limits, dict(by_key), bucket, freeing, bool(full))
    if not rows and full and freeing is None:
        # every ready run (if any) is of a key at its limit: how many, for the
        # hint (`keys_held_back`); read only when a claim found nothing so
        counts = yield q1(f"SELECT {counted}", *counted_params)
        ready, live = int(counts["ready"]), int(counts["live"])
        fair = limit if live < 1 else min(limit, -(-ready // live))
        pick = Pick([], 0, 0, held=keys_held_back(fair, ready, 0, True))
    if per_key is not None and pick.crowded and len(rows) == window:
        # Keys at their limit crowded this view: look again, at most per_key
        # candidates a key. The window looks at the first PREFIX x window ready
        # runs in claim order only, so a claim costs the same over a backlog of
        # millions. A key with more runs than that at the head of the queue can
        # fill the prefix for one claim round; the next round it is at its
        # limit and left out above, so the other keys wait at most one round.
        rows = yield q(
            f"SELECT {columns} FROM "
            "(SELECT run_id, concurrency_key, started_at, priority, ready_at, ROW_NUMBER() "
            f"OVER (PARTITION BY COALESCE(concurrency_key, run_id) {order}) AS nth FROM "
            "(SELECT run_id, concurrency_key, started_at, priority, ready_at FROM "
            f"{ready_sql}{skip}{order} LIMIT ?) AS head) AS candidates WHERE nth <= ? "
            f"{order} LIMIT ?",
            *columns_params, *ready_params, *full, window * PREFIX, int(per_key), window)
        bucket = token_bucket(limits.get("rate"), row["run_tokens"], row["run_refilled_at"], now)
        pick = _choose(rows, limit, limits, by_key, bucket, freeing, bool(full))
    if per_key is not None:
        pick.by_key = read_by_key
    if bucket is not None:
        yield ex("UPDATE task_queues SET run_tokens = ?, run_refilled_at = ? WHERE namespace = ? "
                 "AND name = ?", bucket.tokens, bucket.at, namespace, task_queue)
    return pick


def _choose(rows: list[Row], limit: int, limits: dict[str, Any], by_key: dict[Any, int],
            bucket: Bucket | None, freeing: int | None = None, full: bool = False) -> Pick:
    """The candidates a claim takes, in order, within every limit: its fair
    share, ``max_running``, each key's slots (`by_key`: what runs per key,
    counted up as runs are chosen) and the rate's tokens (spent from
    `bucket`). `Pick.crowded`: it took fewer than it might because keys at
    their limit held candidates back. `full`: keys at their limit were left
    out of `rows` (`Pick.held` counts what they may have held back too)."""
    if not rows:
        return Pick([], 0, 0)
    per_key = limits.get("max_running_per_key")
    ready, live = int(rows[0]["ready"]), int(rows[0]["live"])
    fair = limit if live < 1 or freeing is not None else min(limit, -(-ready // live))
    room = fair
    running = None if limits.get("max_running") is None else int(rows[0]["running"])
    if running is not None:
        room = min(room, int(limits["max_running"]) - running + (freeing or 0))
    new_room = math.inf if bucket is None else math.floor(bucket.tokens + 1e-9)
    chosen: list[str] = []
    next_at = None
    held = False
    for r in rows:
        if len(chosen) >= room:
            break
        key = r["concurrency_key"]
        if per_key is not None and key is not None and by_key.get(key, 0) >= int(per_key):
            held = True
            continue
        if r["started_at"] is None:  # a first start spends a token of the rate
            if new_room < 1:
                next_at = None if bucket is None else bucket.next_token_at()
                continue
            new_room -= 1
            if bucket is not None:
                bucket.tokens -= 1
        if key is not None:
            by_key[key] = by_key.get(key, 0) + 1
        chosen.append(r["run_id"])
    return Pick(chosen, ready, live, next_at, crowded=held and len(chosen) < room,
                held=max(held_back(fair, ready, len(chosen), limits.get("max_running"), running),
                         keys_held_back(fair, ready, len(chosen), full or held)),
                running=running)


def claim_limited_in_one(tx: Tx, namespace: str, task_queue: str, ready_sql: str,
                         ready_params: tuple[Any, ...], counted: str,
                         counted_params: tuple[Any, ...], claim: str,
                         claim_params: tuple[Any, ...], limit: int, now: float,
                         limits_text: str) -> Program[Claimed[ClaimedRun]]:
    """A claim of a limited queue as ONE self-committing statement (data-modifying
    CTEs), for limits the store last read as `limits_text`: one round trip
    where `pick_runs`' transaction takes five or six.

    Why it can be one statement: the statement's snapshot is taken before it
    waits for the queue's row, so its counts could miss a claim committed
    while it waited. Every claim of a limited queue that takes runs bumps the
    row's ``claims`` in its own transaction; the statement reads ``claims``
    twice, as its snapshot saw it and as the locked row has it (``FOR
    UPDATE`` returns the newest version), and claims only when the two agree
    and the limits are still `limits_text`: then no claim committed in
    between and the snapshot's counts are the truth under the lock. When
    they do not agree it claims nothing and says so (`Claimed.stale`): the
    store claims again in a transaction (`pick_runs`), which reads after the
    lock. Runs that closed meanwhile only make the count too high (a slot
    missed until the next claim), never too low.

    The choice is `pick_runs`' in SQL: candidates by priority then age, keys
    at their limit left out, at most ``max_running_per_key`` minus what runs
    per key, first starts within the rate's tokens, at most the fair share
    and ``max_running`` minus what runs."""
    limits = json.loads(limits_text)
    per_key, max_running, rate = (limits.get("max_running_per_key"), limits.get("max_running"),
                                  limits.get("rate"))
    # the scans of runs go in the index's order (runs_claim_order), so that they
    # stop after their LIMIT; run_id only breaks ties among the few they return
    scan = "priority, ready_at"
    order = "priority, ready_at, run_id"
    # more candidates than a claim takes where a limit may drop some (as
    # `pick_runs`); the rate's tokens are read in the statement itself
    window = limit if per_key is None and rate is None else limit * 2 + 8
    key_params: tuple[Any, ...]
    parts: list[str] = []
    params: list[Any] = []

    def add(sql: str, *values: Any) -> None:
        parts.append(sql)
        params.extend(values)

    add("WITH snap AS (SELECT claims FROM task_queues WHERE namespace = ? AND name = ?), ",
        namespace, task_queue)
    add("lk AS MATERIALIZED (SELECT claims, limits, run_tokens, run_refilled_at FROM "
        f"task_queues WHERE namespace = ? AND name = ?{tx.lock}), ", namespace, task_queue)
    add("ok AS MATERIALIZED (SELECT lk.run_tokens AS t0, lk.run_refilled_at AS at0 FROM lk "
        "JOIN snap ON snap.claims = lk.claims WHERE lk.limits = ?), ", limits_text)
    if max_running is not None:  # the count only a queue-wide limit needs
        add(f"s AS MATERIALIZED (SELECT {counted}, (SELECT count(*) FROM {RUNNING_RUNS}) "
            "AS running), ", *counted_params, namespace, task_queue, now)
    else:
        add(f"s AS MATERIALIZED (SELECT {counted}), ", *counted_params)
    if per_key is not None:
        is_first = "CASE WHEN started_at IS NULL THEN 1 ELSE 0 END"
        # what runs per key: one read of runs_running, the queue's leased runs
        add(f"rk AS MATERIALIZED (SELECT concurrency_key, count(*) AS n FROM {RUNNING_RUNS}"
            "AND concurrency_key IS NOT NULL GROUP BY concurrency_key), ",
            namespace, task_queue, now)
        # Where the first ready runs in claim order, as many as the claim takes
        # (a rate's window), leave every key among them within its limit, they
        # are the candidates, as the full path below would choose (no per-key
        # numbering: it cost +17% of claim throughput, docs/benchmarks.md 12-06)
        first = limit if rate is None else window
        add("h0 AS MATERIALIZED (SELECT run_id, concurrency_key, started_at, priority, "
            f"ready_at FROM {ready_sql}ORDER BY {scan} LIMIT ?), ", *ready_params, first)
        add("safe AS MATERIALIZED (SELECT NOT EXISTS (SELECT 1 FROM (SELECT concurrency_key, "
            "count(*) AS c FROM h0 WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key) "
            "AS g LEFT JOIN rk ON rk.concurrency_key = g.concurrency_key "
            "WHERE g.c + COALESCE(rk.n, 0) > ?) AS ok), ", int(per_key))
        # Otherwise (read only then: a CTE is read as far as its readers go, and
        # the branches of c are guarded) keys at their limit are left out before
        # the window, so one busy key cannot fill it (docs/queues.md, "no key
        # starves the others")
        add("head AS MATERIALIZED (SELECT run_id, concurrency_key, started_at, priority, "
            f"ready_at FROM {ready_sql}AND (concurrency_key IS NULL OR concurrency_key NOT IN "
            f"(SELECT concurrency_key FROM rk WHERE n >= ?)) ORDER BY {scan} LIMIT ?), ",
            *ready_params, int(per_key), window * PREFIX)
        # what runs per key as one JSON object, read once (a join with rk compared
        # every candidate with every key; the object joined in went through the sort)
        add("rkm AS MATERIALIZED (SELECT jsonb_object_agg(concurrency_key, n) AS m FROM rk), ")
        key_n = ("ROW_NUMBER() OVER (PARTITION BY COALESCE(h.concurrency_key, h.run_id) "
                 "ORDER BY h.priority, h.ready_at, h.run_id) + "
                 "COALESCE(CAST((SELECT m FROM rkm) ->> h.concurrency_key AS BIGINT), 0)")
        keyed = ("SELECT h.run_id, h.priority, h.ready_at, CASE WHEN h.started_at IS NULL "
                 f"THEN 1 ELSE 0 END AS is_first, {key_n} AS key_n FROM")
        # The first `window` of head first; only when keys at their limit crowd
        # them out is head read on, as `pick_runs` reads a second time
        add(f"near AS MATERIALIZED ({keyed} (SELECT * FROM head LIMIT ?) AS h), ", window)
        add("wide AS MATERIALIZED (SELECT count(*) = ? AND COALESCE(bool_or(key_n > ?), FALSE) "
            "AS go FROM near), ", window, int(per_key))
        add(f"c AS (SELECT run_id, priority, ready_at, {is_first} AS is_first, CAST(0 AS BIGINT) "
            "AS key_n FROM h0 WHERE (SELECT ok FROM safe) UNION ALL SELECT * FROM near WHERE "
            "NOT (SELECT ok FROM safe) AND NOT (SELECT go FROM wide) UNION ALL SELECT * FROM "
            f"({keyed} head h) AS far WHERE NOT (SELECT ok FROM safe) AND "
            "(SELECT go FROM wide)), ")
        key_filter, key_params = "WHERE key_n <= ?", (int(per_key),)
    else:
        add("c AS (SELECT run_id, priority, ready_at, CASE WHEN started_at IS NULL THEN 1 "
            f"ELSE 0 END AS is_first FROM {ready_sql}ORDER BY {scan} LIMIT ?), ",
            *ready_params, window)
        key_filter, key_params = "", ()
    add("e AS (SELECT run_id, priority, ready_at, is_first, SUM(is_first) OVER (ORDER BY "
        f"{order} ROWS UNBOUNDED PRECEDING) AS firsts FROM c {key_filter}), ", *key_params)
    if rate is not None:
        count, per = float(rate["count"]), float(rate["per"])
        # `_bucket` in SQL: one token at first, then refilled continuously up to `count`
        add("tok AS MATERIALIZED (SELECT CASE WHEN ok.t0 IS NULL OR ok.at0 IS NULL "
            "THEN CAST(? AS DOUBLE PRECISION) ELSE CASE WHEN ok.t0 + (CASE WHEN ? > ok.at0 "
            "THEN ? - ok.at0 ELSE 0 END) * CAST(? AS DOUBLE PRECISION) < ? THEN ok.t0 + "
            "(CASE WHEN ? > ok.at0 THEN ? - ok.at0 ELSE 0 END) * CAST(? AS DOUBLE PRECISION) "
            "ELSE ? END END AS tokens FROM ok), ",
            min(1.0, count), now, now, count / per, count, now, now, count / per, count)
        add("f AS (SELECT e.run_id, e.is_first, ROW_NUMBER() OVER (ORDER BY e.priority, "
            "e.ready_at, e.run_id) AS rn FROM e, tok WHERE e.is_first = 0 OR "
            "e.firsts <= FLOOR(tok.tokens + 1e-9)), ")
    else:
        add("f AS (SELECT run_id, is_first, ROW_NUMBER() OVER (ORDER BY priority, ready_at, "
            "run_id) AS rn FROM e), ")
    fair = ("(CASE WHEN s.live < 1 THEN ? WHEN (s.ready + s.live - 1) / s.live < ? "
            "THEN (s.ready + s.live - 1) / s.live ELSE ? END)")
    if max_running is not None:
        room = f"(CASE WHEN {fair} < ? - s.running THEN {fair} ELSE ? - s.running END)"
        room_params: tuple[Any, ...] = (limit, limit, limit, int(max_running), limit, limit,
                                        limit, int(max_running))
    else:
        room, room_params = fair, (limit, limit, limit)
    add(f"pick AS MATERIALIZED (SELECT f.run_id, f.is_first FROM f, s, ok WHERE f.rn <= {room}), ",
        *room_params)
    add(f"claimed AS ({claim}WHERE run_id IN (SELECT run_id FROM pick) AND status IN "
        f"{OPEN_SQL} AND (owner IS NULL OR lease_expires_at <= ?) RETURNING {RUN_COLUMNS}), ",
        *claim_params, now)
    add("started AS (UPDATE workflows w SET status = 'running' FROM claimed c "
        "WHERE w.namespace = c.namespace AND w.workflow_id = c.workflow_id "
        "AND w.current_run_id = c.run_id AND w.status = 'pending'), ")
    spent = ("(SELECT COALESCE(SUM(pick.is_first), 0) FROM pick WHERE pick.run_id IN "
             "(SELECT run_id FROM claimed))")
    if rate is not None:
        add(f"bump AS (UPDATE task_queues SET claims = claims + 1, run_tokens = tok.tokens - "
            f"{spent}, run_refilled_at = CASE WHEN ok.at0 IS NULL OR ok.at0 < ? THEN ? "
            "ELSE ok.at0 END FROM ok, tok WHERE namespace = ? AND name = ? "
            "AND EXISTS (SELECT 1 FROM claimed)) ", now, now, namespace, task_queue)
    else:
        add("bump AS (UPDATE task_queues SET claims = claims + 1 WHERE namespace = ? "
            "AND name = ? AND EXISTS (SELECT 1 FROM claimed)) ", namespace, task_queue)
    running_col = "s.running AS queue_running, " if max_running is not None else ""
    if per_key is not None:  # keys at their limit, for the hint (`keys_held_back`)
        running_col += "(SELECT count(*) FROM rk WHERE n >= ?) AS full_keys, "
        params.append(int(per_key))
    add(f"SELECT claimed.*, pick.is_first AS first_start, s.ready, s.live, {running_col}"
        "lk.limits AS "
        "queue_limits, lk.run_tokens AS queue_tokens, lk.run_refilled_at AS queue_refilled_at, "
        "(SELECT count(*) FROM ok) AS fresh FROM lk CROSS JOIN s LEFT JOIN claimed ON TRUE "
        "LEFT JOIN pick ON pick.run_id = claimed.run_id")
    rows: list[Row] = yield Stmt("".join(parts), tuple(params), "all", autocommit=True)
    if not rows or not int(rows[0]["fresh"]):
        stale: Claimed[ClaimedRun] = Claimed()
        stale.stale = True
        stale.limited = bool(rows)
        stale.limits = str(rows[0]["queue_limits"]) if rows else None
        return stale
    taken = [r for r in rows if r["run_id"] is not None]
    claimed = Claimed.of([ClaimedRun(run_from_row(r), {}) for r in taken], int(rows[0]["ready"]),
                         int(rows[0]["live"]))
    claimed.limited = True
    claimed.limits = limits_text
    ready, live = int(rows[0]["ready"]), int(rows[0]["live"])
    share = limit if live < 1 else min(limit, -(-ready // live))
    if max_running is not None:
        claimed.held_back = held_back(share, ready, len(taken), max_running,
                                      int(rows[0]["queue_running"]))
    if per_key is not None:
        claimed.held_back = max(claimed.held_back, keys_held_back(
            share, ready, len(taken), int(rows[0]["full_keys"]) > 0))
    # a reset's new run starts with the ops it kept (durable.store.reset)
    claimed.unread = [c.run.run_id for c in claimed
                      if c.run.epoch > 1 or c.run.reset_from_run_id is not None]
    bucket = token_bucket(rate, rows[0]["queue_tokens"], rows[0]["queue_refilled_at"], now)
    if bucket is not None:
        bucket.tokens -= sum(int(r["first_start"] or 0) for r in taken)
        if bucket.tokens < 1:
            claimed.next_at = bucket.next_token_at()
    return claimed


def activity_room(tx: Tx, row: Row, namespace: str, task_queue: str, limit: int,
                  now: float) -> Program[tuple[int, Bucket | None]]:
    """How many attempts a claim of a limited queue may start (the row is
    locked), and the rate's bucket to spend from (`spend_activity_tokens`)."""
    limits = json.loads(row["limits"])
    room = limit
    if limits.get("max_running_activities") is not None:
        running = yield q1(f"SELECT count(*) AS n FROM {RUNNING_TASKS}", namespace, task_queue,
                           now)
        room = min(room, int(limits["max_running_activities"]) - int(running["n"]))
    bucket = token_bucket(limits.get("activity_rate"), row["activity_tokens"],
                     row["activity_refilled_at"], now)
    if bucket is not None:
        room = min(room, math.floor(bucket.tokens + 1e-9))
    return max(0, room), bucket


def spend_activity_tokens(namespace: str, task_queue: str, bucket: Bucket | None,
                          started: int) -> Program[None]:
    if bucket is None:
        return None
    bucket.tokens -= started
    yield ex("UPDATE task_queues SET activity_tokens = ?, activity_refilled_at = ? "
             "WHERE namespace = ? AND name = ?", bucket.tokens, bucket.at, namespace, task_queue)
    return None


# ---------------------------------------------------------------- settings and views


def set_limits(tx: Tx, namespace: str, name: str, limits: dict[str, Any],
               now: float) -> Program[None]:
    """Store the queue's limits (an empty dict: no limits); a rate that changed
    starts again with one token."""
    old = yield q1(f"SELECT {LIMIT_COLUMNS} FROM task_queues WHERE namespace = ? AND name = ?"
                   + tx.lock, namespace, name)
    runs_limited = int(any(limits.get(k) is not None for k in RUN_LIMITS))
    activities_limited = int(any(limits.get(k) is not None for k in ACTIVITY_LIMITS))
    text = json.dumps(limits, sort_keys=True)
    if old is None:
        yield ex(f"INSERT INTO task_queues (namespace, name, {LIMIT_COLUMNS}) "
                 "VALUES (?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?)",
                 namespace, name, text, runs_limited, activities_limited, now)
    else:
        before = json.loads(old["limits"])
        yield ex("UPDATE task_queues SET limits = ?, runs_limited = ?, activities_limited = ?, "
                 "updated_at = ? WHERE namespace = ? AND name = ?",
                 text, runs_limited, activities_limited, now, namespace, name)
        if before.get("rate") != limits.get("rate"):
            yield ex("UPDATE task_queues SET run_tokens = NULL, run_refilled_at = NULL "
                     "WHERE namespace = ? AND name = ?", namespace, name)
        if before.get("activity_rate") != limits.get("activity_rate"):
            yield ex("UPDATE task_queues SET activity_tokens = NULL, activity_refilled_at = NULL "
                     "WHERE namespace = ? AND name = ?", namespace, name)
    # looser limits may let held-back work run now
    tx.wake(Wake.runs(namespace, name))
    tx.wake(Wake.activities(namespace, name))
    return None
