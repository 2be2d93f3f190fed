"""A run put down under pressure: handed back, claimable again when its wait ends.

A worker with no room for ready work may release a run whose workflow tasks
all wait on durable ops (children, timers, conditions: nothing else in
flight), to take the ready work in its slot (`durable._runtime.relief`,
docs/design/decisions.md (am)). Its history replays it when it is claimed
again. It must not be claimed again before something it waits on happened
(else parents and children would trade slots in a loop), nor be left
unclaimable when that happens. Both rest on the run's ``ready_at``, which a
claim requires to have passed:

- *set here* to NULL (until an event), to the earliest ``fire_at`` of its
  open timers, conditions and phases (a timer or a phase's deadline falls
  due: the executor enforces those in memory), or to now when something
  it waits on already happened: an op it is parked on closed, a signal
  waits to be delivered, an update to be accepted, a cancellation to be
  delivered (the worker had not seen it yet; it is in storage, and the
  replay sees it);
- *set by the event* later, where ``ready_at`` is NULL: a child's close
  (`closing.notify_parent`), an activity's (`activities`), a signal
  (`interaction.insert_signal`), an update (`interaction.submit_request`),
  a cancellation request (`cancellation`); each also wakes the queue's
  claimers when no worker holds the run. A query is answered by a replay
  without claiming the run (`durable._runtime.queries`).

The run's row is locked first (every event above locks or updates it too),
so an event commits either before this transaction reads (and is seen here)
or after it (and finds ``ready_at`` NULL): none is lost. The release bumps
the epoch, as a claim does: a write of the released executor that was still
on its way is refused. Nothing is recorded in the run's history: a run put
down and taken up again has the history of one that never was.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..driver import Program, Row, Tx, ex, placeholders, q, q1
from ..wakes import Wake
from . import claims, queues
from .records import OPEN_SQL, OPEN_STATUSES, Claimed, ClaimedRun, OpKind, loads
from .runs import slot_freed, unheld_wake

#: the kinds of op a run may wait on when it is put down: what ends each is
#: recorded in storage by someone else (a child's close, a due instant, a
#: delivery), never by an attempt in flight
RELEASABLE = frozenset({OpKind.CHILD, OpKind.TIMER, OpKind.CONDITION})


@dataclass(frozen=True)
class Parked:
    """A run to put down: its claim's epoch and the ops its tasks are parked on."""

    run_id: str
    epoch: int
    waits_on: tuple[str, ...]


@dataclass(frozen=True)
class Released:
    """What became of a run put down (`release_parked`)."""

    run_id: str
    #: the run was no longer this worker's (claimed elsewhere, closed): nothing done
    lost: bool = False
    #: when it is claimable again: None until something it waits on happens
    ready_at: float | None = None
    #: why it is claimable at once or at `ready_at` ("op_closed", "signal", "update",
    #: "cancellation"; "due": a timer, a timeout or a deadline), None: at an event
    because: str | None = None


def release_parked(tx: Tx, worker_id: str, runs: list[Parked],
                   now: float) -> Program[list[Released]]:
    """Hand these runs back (this worker owns them at these epochs), each
    claimable again only once something it waits on happened (module
    docstring). Runs in id order (the store's lock order)."""
    done: list[Released] = []
    for parked in sorted(runs, key=lambda p: p.run_id):
        row = yield from _lock_owned(tx, worker_id, parked)
        if row is None:
            done.append(Released(parked.run_id, lost=True))
            continue
        done.append((yield from _release(tx, parked, row, now)))
        # (not in a trade: the slots it frees are the ones it claims in)
        slot_freed(tx, row["namespace"], row["task_queue"])
    return done


def _lock_owned(tx: Tx, worker_id: str, parked: Parked) -> Program[Row | None]:
    """The run's row, locked, if the worker still owns it open at its epoch."""
    row = yield q1("SELECT namespace, task_queue, status, owner, epoch, cancellation, "
                   "blocked_build, concurrency_key FROM runs WHERE run_id = ?" + tx.lock,
                   parked.run_id)
    if (row is None or row["owner"] != worker_id or int(row["epoch"]) != parked.epoch
            or row["status"] not in OPEN_STATUSES):
        return None
    return row


def _release(tx: Tx, parked: Parked, row: Row, now: float) -> Program[Released]:
    """Hand one locked, owned run back, claimable again once its wait ends."""
    ready_at, because = yield from _claimable_at(parked, row, now)
    yield ex("UPDATE runs SET owner = NULL, lease_expires_at = NULL, epoch = epoch + 1, "
             "ready_at = ? WHERE run_id = ?", ready_at, parked.run_id)
    if ready_at is not None and ready_at <= now:
        tx.wake(unheld_wake(tx, row, now))
    queries = yield q1("SELECT request_id FROM requests WHERE run_id = ? AND "
                       "status = 'pending' AND kind = 'query'", parked.run_id)
    if queries is not None:  # answered by a replay now that no worker holds it
        tx.wake(Wake.requests(row["namespace"], row["task_queue"]))
    return Released(parked.run_id, ready_at=ready_at, because=because)


# ---------------------------------------------------------------- under queue pressure

#: how deep a trade looks below the runs it may put down (parent, child, grandchild...)
DEPTH = 8
#: most open descendants a trade looks at (a bound on its reads, not a rule)
WIDTH = 1000
#: parents named in one read (well within every database's bound on parameters)
CHUNK = 500


def open_descendants(roots: list[str],
                     links: dict[str, str] | None = None) -> Program[dict[str, Row]]:
    """The open runs that descend from `roots` (children, their children...,
    on any queue), by run id: their ``root`` (the nearest of `roots` they
    descend from), parent, queue, key, owner, lease and ``ready_at``. One
    indexed read per generation (``runs_parent``), at most `DEPTH`
    generations and about `WIDTH` runs. `links` is given the parent of each
    of `roots` that descends from another (`ancestors` walks through them)."""
    found: dict[str, Row] = {}
    root_set = set(roots)
    root_of = {r: r for r in roots}
    frontier = list(roots)
    for _ in range(DEPTH):
        if not frontier or len(found) >= WIDTH:
            break
        rows: list[Row] = []
        for start in range(0, len(frontier), CHUNK):
            chunk = frontier[start:start + CHUNK]
            rows += yield q("SELECT run_id, parent_run_id, namespace, task_queue, owner, "
                            "lease_expires_at, ready_at, needs_review, workflow_type, "
                            "concurrency_key FROM runs "
                            f"WHERE parent_run_id IN ({placeholders(len(chunk))}) AND status IN "
                            f"{OPEN_SQL} ORDER BY run_id", *chunk)
        frontier = []
        for r in rows:
            if links is not None and r["run_id"] in root_set:
                links[str(r["run_id"])] = str(r["parent_run_id"])
            if r["run_id"] in found or r["run_id"] in root_of:
                continue
            root_of[r["run_id"]] = root_of[r["parent_run_id"]]
            found[r["run_id"]] = {**dict(r), "root": root_of[r["parent_run_id"]]}
            frontier.append(r["run_id"])
    return found


def waited_for(namespace: str, task_queue: str, types: tuple[str, ...], roots: list[str],
               now: float) -> Program[dict[str, int]]:
    """Of `roots` (runs a worker of this queue holds that only wait), those
    with a descendant of the queue ready for that worker (unowned, its
    ``ready_at`` come: a run that waits for a slot they hold), and how many
    each: what a trade may take for them (`trade_parked`). A read.

    With ``max_running_per_key``, a ready run of a key at its limit counts
    only for its ancestors of that key (putting another down frees no slot
    of its key: a trade would stop it for nothing, at every claim pass), and
    without ``max_running`` a ready run of a key not at its limit counts for
    none (no slot holds it back: a claim takes it). Decision (aw)."""
    links: dict[str, str] = {}
    found = yield from open_descendants(roots, links)
    ready = [run_id for run_id, r in found.items()
             if r["namespace"] == namespace and r["task_queue"] == task_queue
             and r["workflow_type"] in types and not int(r["needs_review"])
             and r["ready_at"] is not None and float(r["ready_at"]) <= now
             and (r["owner"] is None or float(r["lease_expires_at"] or 0) <= now)]
    if not ready:
        return {}
    queue = yield q1("SELECT limits FROM task_queues WHERE namespace = ? AND name = ?",
                     namespace, task_queue)
    limits = json.loads(queue["limits"]) if queue is not None else {}
    per_key, max_running = limits.get("max_running_per_key"), limits.get("max_running")
    full: set[Any] = set()
    keys_of: dict[str, Any] = {}
    wanted = sorted({found[r]["concurrency_key"] for r in ready} - {None})
    if per_key is not None and wanted:
        rows = yield q(f"SELECT concurrency_key, count(*) AS n FROM {queues.RUNNING_RUNS}"
                       f"AND concurrency_key IN ({placeholders(len(wanted))}) "
                       "GROUP BY concurrency_key", namespace, task_queue, now, *wanted)
        full = {r["concurrency_key"] for r in rows if int(r["n"]) >= int(per_key)}
        if full:
            for start in range(0, len(roots), CHUNK):
                chunk = roots[start:start + CHUNK]
                rows = yield q("SELECT run_id, concurrency_key FROM runs WHERE run_id IN "
                               f"({placeholders(len(chunk))})", *chunk)
                keys_of.update((str(r["run_id"]), r["concurrency_key"]) for r in rows)
    held = set(roots)
    counts: dict[str, int] = {}
    for run_id in ready:
        key = found[run_id]["concurrency_key"]
        if key is None or key not in full:
            if max_running is None:
                continue
            above = ancestors(run_id, found, links, held)
        else:  # held by its key: only an ancestor in one of the key's slots frees one
            above = [a for a in ancestors(run_id, found, links, held) if keys_of.get(a) == key]
        # every ancestor held here, not only the nearest: a grandparent may
        # hold the key's slot the run waits for
        for a in above:
            counts[a] = counts.get(a, 0) + 1
    return counts


def ancestors(run_id: str, found: dict[str, Row], links: dict[str, str],
              held: Collection[str]) -> list[str]:
    """The ancestors of a run of `found` (`open_descendants`) among `held`,
    nearest first."""
    out: list[str] = []
    seen = {run_id}
    parent: str | None = str(found[run_id]["parent_run_id"])
    while parent is not None and parent not in seen:
        seen.add(parent)
        if parent in held:
            out.append(parent)
        row = found.get(parent)
        parent = str(row["parent_run_id"]) if row is not None else links.get(parent)
    return out


@dataclass
class Traded:
    """What a trade did (`trade_parked`): the runs put down (and those it had
    lost), and the runs to start, `taken` (ready runs that descend from those
    put down) then `kept` (runs it stopped and did not put down: claimed again,
    to be replayed)."""

    released: list[Released] = field(default_factory=list)
    claimed: Claimed[ClaimedRun] = field(default_factory=Claimed)
    taken: int = 0
    kept: list[str] = field(default_factory=list)


def trade_parked(tx: Tx, worker_id: str, runs: list[Parked], sql: claims.ClaimSql,
                 namespace: str, task_queue: str, now: float) -> Program[Traded]:
    """Under queue pressure, in ONE transaction: put down runs of `runs` (this
    worker's, its executors stopped, least recently active first) that ready
    runs of the queue descend from, and claim as many of those (`sql`: this
    worker's claim) in the slots of ``max_running`` they free; no other claim
    can take those slots, as the queue's row is locked throughout
    (`queues.read_limits`, as every limited claim does). A run put down is
    claimable again once its wait ends, as in `release_parked`. Runs of
    `runs` not put down (no descendant of theirs ready any more: another
    worker took it, it was cancelled) are claimed again by this worker
    (epoch bumped) and returned with the runs to start: their executors
    ended. Runs in id order, after the queue's row (the store's lock order).
    Decision (ao).

    With ``max_running_per_key`` (decision (aw)): a run put down counts as
    not running in its key too, and a ready run of a key at its limit is
    taken only in the slot of an ancestor of its of that key, which is then
    put down for it (`_key_slots`); without ``max_running`` nothing else is
    taken. "Ancestor" is any run of `runs` above it, not only the nearest:
    a grandparent may hold the key's slot."""
    traded = Traded()
    queue = yield from queues.read_limits(tx, namespace, task_queue, "runs", known=True)
    owned: list[tuple[Parked, Row]] = []
    for parked in sorted(runs, key=lambda p: p.run_id):
        row = yield from _lock_owned(tx, worker_id, parked)
        if row is None:
            traded.released.append(Released(parked.run_id, lost=True))
        else:
            owned.append((parked, row))
    order = {p.run_id: i for i, p in enumerate(runs)}
    owned.sort(key=lambda pr: order[pr[0].run_id])  # least recently active first
    limits = json.loads(queue["limits"]) if queue is not None else {}
    per_key, max_running = limits.get("max_running_per_key"), limits.get("max_running")
    found: dict[str, Row] = {}
    links: dict[str, str] = {}
    if max_running is not None or per_key is not None:
        found = yield from open_descendants([p.run_id for p, _ in owned], links)
    held = {p.run_id for p, _ in owned}
    mine = [r for r, d in found.items() if d["task_queue"] == task_queue]
    above_of = {r: ancestors(r, found, links, held) for r in mine}
    roots = {a for r in mine for a in above_of[r]}
    freeing = [(p, row) for p, row in owned if p.run_id in roots]
    taken: Claimed[ClaimedRun] = Claimed()
    holders: dict[str, str] = {}  # a run taken in a key's slot: its ancestor put down for it
    if queue is not None and freeing and mine:
        chosen = yield from queues.pick_runs(
            tx, queue, namespace, task_queue,
            sql.ready_sql + f"AND run_id IN ({placeholders(len(mine))}) ",
            (*sql.ready_params, *mine), sql.counted, sql.counted_params, len(freeing), now,
            freeing=len(freeing), freeing_keys=[row["concurrency_key"] for _, row in freeing])
        ids = chosen.ids
        if per_key is not None:
            ids, holders = _key_slots(ids, found, above_of, freeing, int(per_key),
                                      chosen.by_key, max_running is not None)
        taken = yield from claims.claim_ids(tx, sql.claim, sql.claim_params, ids,
                                            chosen.ready, chosen.live, recheck=now)
        if taken and tx.dialect.writable_cte:  # as every limited claim (queues)
            yield ex("UPDATE task_queues SET claims = claims + 1 WHERE namespace = ? AND "
                     "name = ?", namespace, task_queue)
        # one run put down per run taken (as under worker pressure, decision (am)):
        # first the ancestor of each run taken in its key's slot (decision (aw)),
        # then the ancestors of the other runs taken, then the others, least
        # recently active first (a slot that came free meanwhile is not told apart)
        got = [c.run.run_id for c in taken]
        must = {holders[r] for r in got if r in holders}
        above = {a for r in got for a in above_of[r][:1]}
        freeing.sort(key=lambda pr: (pr[0].run_id not in must, pr[0].run_id not in above))
        for parked, row in freeing[:len(got)]:
            traded.released.append((yield from _release(tx, parked, row, now)))
    down = {r.run_id for r in traded.released}
    kept = sorted(p.run_id for p, _ in owned if p.run_id not in down)
    again: Claimed[ClaimedRun] = Claimed()
    if kept:  # stopped for nothing: theirs again (their executors ended), replayed
        again = yield from claims.claim_ids(tx, sql.claim, sql.claim_params, kept, 0, 0)
    traded.taken = len(taken)
    traded.kept = [c.run.run_id for c in again]
    traded.claimed = Claimed.of([*taken, *again], 0)
    return traded


def _key_slots(ids: list[str], found: dict[str, Row], above_of: dict[str, list[str]],
               freeing: list[tuple[Parked, Row]], per_key: int, by_key: dict[Any, int],
               counted: bool) -> tuple[list[str], dict[str, str]]:
    """Of the runs a trade chose (in claim order), those it may take within
    ``max_running_per_key``, and for each taken in a slot of a key at its
    limit the ancestor of its, of that key, that is put down for it (each
    ancestor once): a run of a key whose slots unrelated runs hold is not
    taken (decision (aw)). Without ``max_running`` (`counted` False) the
    runs no key held back are not taken either: a claim takes them."""
    keys = {p.run_id: row["concurrency_key"] for p, row in freeing}
    used = dict(by_key)
    holders: dict[str, str] = {}
    keep: list[str] = []
    for run_id in ids:
        key = found[run_id]["concurrency_key"]
        if key is not None and used.get(key, 0) >= per_key:
            holder = next((a for a in above_of[run_id] if keys.get(a) == key
                           and a not in holders.values()), None)
            if holder is None:
                continue
            holders[run_id] = holder  # it leaves the key's slot, the run takes it
        elif not counted:
            continue
        elif key is not None:
            used[key] = used.get(key, 0) + 1
        keep.append(run_id)
    return keep, holders


def _claimable_at(parked: Parked, row: Row,
                  now: float) -> Program[tuple[float | None, str | None]]:
    """When the run is claimable again, and why (see `Released`)."""
    run_id = parked.run_id
    ops = yield q("SELECT op_id, kind, fire_at FROM ops WHERE run_id = ? AND "
                  "status = 'scheduled'", run_id)
    open_ids = {r["op_id"] for r in ops}
    if any(op_id not in open_ids for op_id in parked.waits_on):
        return now, "op_closed"
    signal = yield q1("SELECT seq FROM inbox WHERE run_id = ? AND status = 'received' "
                      "AND kind = 'signal'", run_id)
    if signal is not None:
        return now, "signal"
    update = yield q1("SELECT request_id FROM requests WHERE run_id = ? AND "
                      "status = 'pending' AND kind = 'update'", run_id)
    if update is not None:
        return now, "update"
    cancellation = loads(row["cancellation"])
    if cancellation is not None and cancellation.get("delivered_at") is None:
        return now, "cancellation"
    # a timer, a condition's timeout, or a phase's deadline (the executor bounds
    # the ops inside a phase in memory: replayed past it, the phase times out)
    due = [float(r["fire_at"]) for r in ops if r["fire_at"] is not None
           and r["kind"] in (OpKind.TIMER, OpKind.CONDITION, OpKind.PHASE)]
    if due:
        return max(now, min(due)), "due"
    return None, None
