"""Talking to running workflows: signals, queries, updates, and what runs send each other.

Signals and updates are durable and live in a run's *inbox*. A signal is
recorded when it is received (``SignalReceived``: an inbox row and an event,
in one transaction) and delivered later by the run's owner, which records
*where* it delivered it (``SignalDelivered``: a delivery number and the
frontier of ops the run's tasks waited on) before any handler code runs. An
update is recorded once the owner has validated and accepted it
(``UpdateAccepted``, same delivery bookkeeping) and again when its handler
returns (``UpdateCompleted``).

Queries, and updates not yet accepted, are *requests*: transport rows that a
worker answers and the caller deletes. They are never part of a run's
history (a rejected update leaves no trace).

The write handlers at the end are the owner's side: `durable.store.commit`
dispatches those write types here, inside the run's fenced commit.

Kept whole: the senders' side and the owner's side read and write the same
inbox and request rows through the same states (received, delivered,
pending, accepted, answered) and the same message keys (an update's id, a
signal's request id); apart, each half would keep the other's invariants
without seeing them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from ..clock import to_iso
from ..driver import Program, Row, Tx, ex, placeholders, q, q1
from ..errors import (
    CapabilityUnsupported,
    RequestIdConflict,
    RunAlreadyClosed,
    RunNotCurrent,
    WorkflowNotFound,
)
from ..failure import Failure
from ..wakes import Wake
from . import cancellation
from .events import Event, append_events
from .records import (
    INBOX_COLUMNS,
    OP_COLUMNS,
    OPEN_SQL,
    OPEN_STATUSES,
    REQUEST_COLUMNS,
    RUN_COLUMNS,
    ClientRequest,
    InboxItem,
    OpKind,
    OpRecord,
    OpStatus,
    RunRecord,
    StartRequest,
    StartResult,
    dump_failure,
    dumps,
    inbox_from_row,
    loads,
    new_id,
    op_from_row,
    request_from_row,
    run_from_row,
)
from .returning import update_one_returning
from .runs import live_owner, start_workflow, unheld_wake
from .writes import (
    AcceptUpdate,
    CancelExternal,
    CompleteUpdate,
    DeliverSignal,
    RecordMarker,
    ResolveCondition,
    ScheduleCondition,
    SignalExternal,
)


@dataclass(frozen=True)
class RequestTicket:
    """What submitting a query or update returned: the request to wait on, or,
    for an update id the run already accepted, its inbox record."""

    run_id: str
    request_id: str | None
    existing: InboxItem | None = None
    workflow_type: str = ""
    task_queue: str = ""


@dataclass(frozen=True)
class UpdateState:
    """Where an update stands, as its caller polls it."""

    item: InboxItem | None  # once accepted
    answer: dict[str, Any] | None  # the request's answer (a rejection, or accepted)
    run_status: str | None


# ---------------------------------------------------------------- reaching a run


def _target_run(tx: Tx, namespace: str, workflow_id: str,
                run_id: str | None) -> Program[Row]:
    """The run a request names (the instance's current run by default), locked."""
    if run_id is None:
        row = yield q1(
            f"SELECT {RUN_COLUMNS}, lease_expires_at FROM runs WHERE run_id = (SELECT "
            "current_run_id FROM workflows WHERE namespace = ? AND workflow_id = ?)" + tx.lock,
            namespace, workflow_id,
        )
    else:
        row = yield q1(
            f"SELECT {RUN_COLUMNS}, lease_expires_at FROM runs WHERE run_id = ? "
            "AND namespace = ? AND workflow_id = ?" + tx.lock,
            run_id, namespace, workflow_id,
        )
    if row is None:
        run = f" run {run_id!r}" if run_id else ""
        raise WorkflowNotFound(f"no workflow {workflow_id!r}{run} in namespace {namespace!r}")
    return row


def insert_signal(tx: Tx, row: Row, name: str, payload: str, now: float,
                  sender: dict[str, Any] | None = None,
                  request_id: str | None = None) -> Program[InboxItem]:
    """Record a received signal on an open run (``SignalReceived``) and wake its owner.
    `request_id`, the sender's idempotency key, is kept in the inbox row's
    ``update_id`` column (the run's one namespace of message keys: an update's
    id or a signal's request id) and in the event."""
    run_id = row["run_id"]
    counter = yield from update_one_returning(
        tx.dialect, "runs", "inbox_seq = inbox_seq + 1, ready_at = COALESCE(ready_at, ?)",
        (now,), "run_id = ?", (run_id,), "inbox_seq", key="run_id", value=run_id)
    assert counter is not None  # the run is locked: it exists
    seq = int(counter["inbox_seq"])
    yield ex(
        "INSERT INTO inbox (run_id, seq, kind, name, input, update_id, sender, received_at, "
        "status) VALUES (?, ?, 'signal', ?, ?, ?, ?, ?, 'received')",
        run_id, seq, name, payload, request_id, dumps(sender), now,
    )
    data: dict[str, Any] = {"seq": seq, "name": name, "args": loads(payload)}
    if sender is not None:
        data["sender"] = sender
    if request_id is not None:
        data["request_id"] = request_id
    yield from append_events(tx, run_id, [("SignalReceived", data)], now)
    item = InboxItem(run_id, seq, "signal", name, payload, now, "received",
                     update_id=request_id)
    tx.wake(Wake.run(run_id, item))
    if not live_owner(row, now):
        tx.wake(unheld_wake(tx, row, now))
    return item


@dataclass(frozen=True)
class SignalReceipt:
    """What sending a signal did: its inbox record, and whether it was recorded
    now (False: a signal with the same request id was recorded before)."""

    item: InboxItem
    recorded: bool


def send_signal(tx: Tx, namespace: str, workflow_id: str, run_id: str | None, name: str,
                payload: str, now: float, sender: dict[str, Any] | None = None,
                request_id: str | None = None) -> Program[SignalReceipt]:
    """A client's signal, with who sent it (``{"requester", "source"}``, as a
    cancellation request records them). With a `request_id`, a retry of the
    same signal to the same run is recorded once: the retry returns the first
    record, even once the run has closed (the sender learns its signal
    arrived). Raises `WorkflowNotFound`, `RunAlreadyClosed` (nothing
    recorded), `ConfigurationError` for a request id this run already holds
    for another signal or an update."""
    row = yield from _target_run(tx, namespace, workflow_id, run_id)
    if request_id is not None:
        found = yield from _message_key(tx, row["run_id"], request_id)
        if found is not None:
            if found.kind != "signal" or found.name != name:
                raise _key_conflict(request_id, found.kind, found.name, "signal", name)
            return SignalReceipt(found, False)
    if row["status"] not in OPEN_STATUSES:
        raise RunAlreadyClosed(
            f"workflow {workflow_id!r} run {row['run_id']} is already {row['status']}; "
            "signals reach open runs only (start a new run, e.g. with signal_with_start)"
        )
    item = yield from insert_signal(tx, row, name, payload, now, sender, request_id)
    return SignalReceipt(item, True)


def _message_key(tx: Tx, run_id: str, key: str) -> Program[InboxItem | None]:
    """The run's message holding idempotency key `key`: an inbox record, or an
    update still waiting to be accepted (as an unrecorded placeholder)."""
    row = yield q1(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE run_id = ? AND update_id = ?",
                   run_id, key)
    if row is not None:
        return inbox_from_row(row)
    pending = yield q1(
        "SELECT name FROM requests WHERE run_id = ? AND update_id = ? AND kind = 'update' "
        "AND status <> 'answered'", run_id, key)
    if pending is not None:
        return InboxItem(run_id, 0, "update", str(pending["name"]), "", 0.0, "pending",
                         update_id=key)
    return None


def _key_conflict(key: str, kind: str, name: str, new_kind: str,
                  new_name: str) -> RequestIdConflict:
    return RequestIdConflict(
        f"request id {key!r} already names {kind} {name!r} of this run, so it cannot "
        f"also name {new_kind} {new_name!r}: give each signal and update its own request "
        "id (reuse one only to retry the very same message)",
        request_id=key, retained_command_type=kind, retained_name=name)


def signal_with_start(tx: Tx, request: StartRequest, name: str, payload: str,
                      now: float) -> Program[StartResult]:
    """Signal the instance's open run, or start it (a closed instance under its
    id-reuse policy) and signal the new run, in one transaction."""
    current = yield q1(
        "SELECT current_run_id, status FROM workflows WHERE namespace = ? AND workflow_id = ?"
        + tx.lock,
        request.namespace, request.workflow_id,
    )
    if current is not None and current["status"] in OPEN_STATUSES:
        started = StartResult(current["current_run_id"], False, current["status"])
    else:
        started = yield from start_workflow(tx, request, now)
    row = yield from _target_run(tx, request.namespace, request.workflow_id, started.run_id)
    yield from insert_signal(tx, row, name, payload, now)
    return started


# ---------------------------------------------------------------- requests (queries, updates)

def _offered(t: str) -> str:
    """A request (of table or alias `t`) is offered to a worker that answers
    queries by replaying their run while it is pending, or taken by a worker
    that is gone (crashed: its registration lapsed; or stopped): one that took
    it and died before answering would otherwise leave its caller waiting its
    whole timeout. One parameter: now."""
    return (f"({t}.status = 'pending' OR ({t}.status = 'taken' AND NOT EXISTS (SELECT 1 FROM "
            f"workers w WHERE w.worker_id = {t}.taken_by AND w.expires_at >= ? "
            "AND w.stopped_at IS NULL)))")


#: The requests a run's owner answers: pending ones, and ones taken for a replay
#: while no live worker held the run (their taker may have died; if not, the
#: first answer counts, both being read-only).
_UNANSWERED = "('pending', 'taken')"


def submit_request(tx: Tx, namespace: str, workflow_id: str, run_id: str | None, kind: str,
                   name: str, payload: str, update_id: str | None,
                   now: float, sender: dict[str, Any] | None = None) -> Program[RequestTicket]:
    """Ask a run a query or an update; a worker that owns (or can load) it answers.
    An update's `sender` waits in ``request_senders`` until the update is
    accepted into the inbox (`accept_update` moves it there)."""
    row = yield from _target_run(tx, namespace, workflow_id, run_id)
    run = run_from_row(row)
    if kind == "update":
        existing = yield q1(
            f"SELECT {INBOX_COLUMNS} FROM inbox WHERE run_id = ? AND update_id = ?",
            run.run_id, update_id,
        )
        if existing is not None and (existing["kind"] != "update" or existing["name"] != name):
            # another signal, or another update: the key names that message, and
            # its outcome is not this update's (as for a signal's key)
            raise _key_conflict(str(update_id), existing["kind"], existing["name"],
                                "update", name)
        if existing is not None:  # the same update again: its recorded outcome
            return RequestTicket(run.run_id, None, inbox_from_row(existing),
                                 run.workflow_type, run.task_queue)
        if not run.is_open:
            raise RunAlreadyClosed(
                f"workflow {workflow_id!r} run {run.run_id} is already {run.status}; "
                "updates reach open runs only"
            )
        pending = yield q1(
            "SELECT request_id, name FROM requests WHERE run_id = ? AND update_id = ? "
            "AND status <> 'answered'",
            run.run_id, update_id,
        )
        if pending is not None and pending["name"] != name:
            raise _key_conflict(str(update_id), "update", str(pending["name"]), "update", name)
        if pending is not None:  # another caller asked the same update: wait together
            return RequestTicket(run.run_id, pending["request_id"], None, run.workflow_type,
                                 run.task_queue)
    request_id = new_id()
    yield ex(
        "INSERT INTO requests (request_id, namespace, workflow_id, run_id, workflow_type, "
        "task_queue, kind, name, input, update_id, status, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
        request_id, namespace, run.workflow_id, run.run_id, run.workflow_type, run.task_queue,
        kind, name, payload, update_id, now,
    )
    if kind == "update" and sender is not None:
        yield ex("INSERT INTO request_senders (request_id, run_id, sender) VALUES (?, ?, ?)",
                 request_id, run.run_id, dumps(sender))
    if kind == "update":  # a run put down under pressure is claimable again (store.parked)
        yield ex("UPDATE runs SET request_seq = request_seq + 1, ready_at = COALESCE(ready_at, "
                 "?) WHERE run_id = ?", now, run.run_id)
    else:  # a query of such a run is answered by a replay, without claiming it
        yield ex("UPDATE runs SET request_seq = request_seq + 1 WHERE run_id = ?", run.run_id)
    tx.wake(Wake.run(run.run_id, ClientRequest(
        request_id, run.run_id, run.workflow_id, run.workflow_type, run.task_queue, kind, name,
        payload, update_id, now)))
    if not run.is_open or not live_owner(row, now):
        tx.wake(Wake.requests(namespace, run.task_queue))
        if run.is_open:
            tx.wake(unheld_wake(tx, row, now))
    return RequestTicket(run.run_id, request_id, None, run.workflow_type, run.task_queue)


def take_answer(request_id: str) -> Program[dict[str, Any] | None]:
    """A query's answer (its request row is deleted then), or None while unanswered."""
    row = yield q1("SELECT status, answer FROM requests WHERE request_id = ?", request_id)
    if row is None:
        return {"error": {"message": "the request was withdrawn before it was answered"}}
    if row["status"] != "answered":
        return None
    yield ex("DELETE FROM requests WHERE request_id = ?", request_id)
    answer: dict[str, Any] = json.loads(row["answer"])
    return answer


def withdraw_request(request_id: str) -> Program[dict[str, Any] | None]:
    """Give up on a request; its answer if one arrived meanwhile, else None."""
    count = yield ex("DELETE FROM requests WHERE request_id = ? AND status <> 'answered'",
                     request_id)
    if count:
        yield ex("DELETE FROM request_senders WHERE request_id = ?", request_id)
        return None
    return (yield from take_answer(request_id))


def answer_request(tx: Tx, request_id: str, answer: dict[str, Any], now: float,
                   taker: str | None = None) -> Program[bool]:
    """Record a worker's answer (the first one counts) and wake the caller. A
    `taker` (a worker that took the request to answer it by a replay) answers
    only while the request is still its own: once it was offered again and
    taken by another worker (the taker was thought gone), its late answer is
    refused. A run's owner answers without taking (`taker` None)."""
    mine = "" if taker is None else " AND (status = 'pending' OR taken_by = ?)"
    count = yield ex(
        "UPDATE requests SET status = 'answered', answer = ?, answered_at = ? "
        f"WHERE request_id = ? AND status <> 'answered'{mine}",
        json.dumps(answer, default=str), now, request_id,
        *(() if taker is None else (taker,)),
    )
    tx.wake(Wake.request(request_id))
    return bool(count)


def update_state(run_id: str, update_id: str,
                 request_id: str | None) -> Program[UpdateState]:
    """An update's inbox record (once accepted), its request's answer, the run's status."""
    item = yield q1(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE run_id = ? AND update_id = ?",
                    run_id, update_id)
    answer = None
    if request_id is not None and item is None:
        request = yield q1("SELECT status, answer FROM requests WHERE request_id = ?",
                           request_id)
        if request is not None and request["status"] == "answered":
            answer = json.loads(request["answer"])
    run = yield q1("SELECT status FROM runs WHERE run_id = ?", run_id)
    return UpdateState(None if item is None else inbox_from_row(item), answer,
                       None if run is None else run["status"])


def pending_interactions(run_id: str,
                         after_seq: int) -> Program[tuple[list[InboxItem], list[ClientRequest]]]:
    """A run's signals received after `after_seq` and its unanswered requests."""
    signals = yield q(
        f"SELECT {INBOX_COLUMNS} FROM inbox WHERE run_id = ? AND seq > ? AND status = 'received' "
        "ORDER BY seq",
        run_id, after_seq,
    )
    requests = yield q(
        f"SELECT {REQUEST_COLUMNS} FROM requests WHERE run_id = ? AND status IN {_UNANSWERED} "
        "ORDER BY created_at",
        run_id,
    )
    return [inbox_from_row(r) for r in signals], [request_from_row(r) for r in requests]


def load_inbox(run_id: str) -> Program[tuple[list[InboxItem], list[ClientRequest]]]:
    """Everything in a run's inbox (for replay) and its unanswered requests."""
    items = yield q(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE run_id = ? ORDER BY seq", run_id)
    requests = yield q(
        f"SELECT {REQUEST_COLUMNS} FROM requests WHERE run_id = ? AND status IN {_UNANSWERED} "
        "ORDER BY created_at",
        run_id,
    )
    return [inbox_from_row(r) for r in items], [request_from_row(r) for r in requests]


def load_for_replay(
    run_id: str,
) -> Program[tuple[RunRecord, dict[str, OpRecord], list[InboxItem]] | None]:
    """A run, its ops and its inbox: what a read-only replay needs."""
    row = yield q1(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", run_id)
    if row is None:
        return None
    op_rows = yield q(f"SELECT {OP_COLUMNS} FROM ops WHERE run_id = ?", run_id)
    items = yield q(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE run_id = ? ORDER BY seq", run_id)
    return (run_from_row(row), {r["op_id"]: op_from_row(r) for r in op_rows},
            [inbox_from_row(r) for r in items])


def _idle_sql(types: int) -> str:
    """The offered queries of runs no live worker holds, oldest first (`idle_requests`).
    Parameters: namespace, task queue, now, the `types` workflow types, now, limit."""
    return ("SELECT r.request_id, r.created_at FROM requests r JOIN runs u ON "
            f"u.run_id = r.run_id WHERE r.namespace = ? AND r.task_queue = ? AND {_offered('r')} "
            f"AND r.kind = 'query' AND r.workflow_type IN ({placeholders(types)}) "
            f"AND (u.status NOT IN {OPEN_SQL} OR u.owner IS NULL "
            "OR u.lease_expires_at <= ?) ORDER BY r.created_at LIMIT ?")


def idle_requests(namespace: str, task_queue: str, types: tuple[str, ...], limit: int,
                  now: float) -> Program[list[str]]:
    """Queries waiting for runs no live worker holds (closed ones included), that
    a worker with these workflow types can answer by replaying the run (a read):
    pending ones, and ones taken by a worker that is gone (`_offered`)."""
    if not types or limit <= 0:
        return []
    rows = yield q(_idle_sql(len(types)), namespace, task_queue, now, *types, now, limit)
    return [r["request_id"] for r in rows]


def queries_due(namespace: str, task_queue: str, types: tuple[str, ...], limit: int,
                now: float, worker_id: str) -> Program[tuple[list[str], float | None]]:
    """`idle_requests`, and when the first of the other live workers that took
    such a query registered until (None: none did), in ONE statement: a taker
    that dies before it answers makes its query offered again once its
    registration lapses (`_offered`), an instant no commit announces, so the
    answerers look again just after it (`durable._runtime.queries`), instead
    of at their slow fallback poll. The second part reads the index of
    pending requests (``requests_pending``) for the queue's taken queries:
    none most of the time."""
    if not types or limit <= 0:
        return [], None
    rows = yield q(
        f"SELECT o.request_id, o.created_at, NULL AS lapse FROM ({_idle_sql(len(types))}) o "
        "UNION ALL SELECT NULL, NULL, MIN(w.expires_at) FROM requests t JOIN workers w ON "
        "w.worker_id = t.taken_by WHERE t.namespace = ? AND t.task_queue = ? AND "
        f"t.status = 'taken' AND t.kind = 'query' AND t.workflow_type IN "
        f"({placeholders(len(types))}) AND t.taken_by <> ? AND w.expires_at >= ? "
        "AND w.stopped_at IS NULL",
        namespace, task_queue, now, *types, now, limit,
        namespace, task_queue, *types, worker_id, now,
    )
    offered = sorted((float(r["created_at"]), str(r["request_id"])) for r in rows
                     if r["request_id"] is not None)
    lapses = [float(r["lapse"]) for r in rows if r["request_id"] is None
              and r["lapse"] is not None]
    return [request_id for _, request_id in offered], min(lapses, default=None)


def take_requests(tx: Tx, request_ids: list[str], worker_id: str,
                  now: float) -> Program[list[ClientRequest]]:
    """Take requests for this worker to answer; each is taken once while its
    taker lives (a row another live worker took meanwhile is skipped; one whose
    taker is gone is taken again: `_offered`)."""
    taken: list[ClientRequest] = []
    for request_id in request_ids:
        row = yield from update_one_returning(
            tx.dialect, "requests", "status = 'taken', taken_by = ?", (worker_id,),
            f"request_id = ? AND {_offered('requests')}", (request_id, now), REQUEST_COLUMNS,
            key="request_id", value=request_id)
        if row is not None:
            taken.append(request_from_row(row))
    return taken


def purge_requests(before: float) -> Program[int]:
    """Delete requests older than `before` (answered ones nobody read, and ones
    nobody answered: their callers gave up long ago)."""
    count: int = yield ex("DELETE FROM requests WHERE created_at < ?", before)
    yield ex("DELETE FROM request_senders WHERE request_id NOT IN "
             "(SELECT request_id FROM requests)")
    return count


# ---------------------------------------------------------------- the owner's writes


class RunCommitState(Protocol):
    """What a write handler sees of the run's share of a commit (`store.commit`)."""

    tx: Tx
    run: RunRecord
    now: float
    events: list[Event]
    ops: dict[str, OpRecord]


def deliver_signal(c: RunCommitState, w: DeliverSignal) -> Program[None]:
    count = yield ex(
        "UPDATE inbox SET status = 'delivered', delivery = ?, frontier = ?, delivered_at = ? "
        "WHERE run_id = ? AND seq = ? AND status = 'received'",
        w.delivery, dumps(w.frontier), w.delivered_at, c.run.run_id, w.seq,
    )
    if count:
        c.events.append(("SignalDelivered", {
            "seq": w.seq, "name": w.name, "delivery": w.delivery, "frontier": w.frontier,
            "delivered_at": to_iso(w.delivered_at),
        }))
        c.tx.wake(Wake.delivered(c.run.run_id))  # for whoever waits to see it handled
    return None


def accept_update(c: RunCommitState, w: AcceptUpdate) -> Program[None]:
    run_id = c.run.run_id
    existing = yield q1("SELECT seq FROM inbox WHERE run_id = ? AND update_id = ?",
                        run_id, w.update_id)
    if existing is None:
        counter = yield from update_one_returning(
            c.tx.dialect, "runs", "inbox_seq = inbox_seq + 1", (), "run_id = ?", (run_id,),
            "inbox_seq", key="run_id", value=run_id)
        assert counter is not None  # the run is locked: it exists
        seq = int(counter["inbox_seq"])
        sender = None
        if w.request_id is not None:  # who asked (kept with the request until now)
            found = yield q1("SELECT sender FROM request_senders WHERE request_id = ?",
                             w.request_id)
            if found is not None:
                sender = found["sender"]
                yield ex("DELETE FROM request_senders WHERE request_id = ?", w.request_id)
        yield ex(
            "INSERT INTO inbox (run_id, seq, kind, name, input, update_id, sender, received_at, "
            "status, delivery, frontier, delivered_at) "
            "VALUES (?, ?, 'update', ?, ?, ?, ?, ?, 'accepted', ?, ?, ?)",
            run_id, seq, w.name, w.input, w.update_id, sender, c.now, w.delivery,
            dumps(w.frontier), w.delivered_at,
        )
        data: dict[str, Any] = {
            "update_id": w.update_id, "name": w.name, "args": loads(w.input), "seq": seq,
            "delivery": w.delivery, "frontier": w.frontier,
            "delivered_at": to_iso(w.delivered_at),
        }
        if sender is not None:
            data["sender"] = loads(sender)
        c.events.append(("UpdateAccepted", data))
    if w.request_id is not None:
        yield from answer_request(c.tx, w.request_id, {"accepted": True}, c.now)
    c.tx.wake(Wake.update(run_id, w.update_id))
    return None


def complete_update(c: RunCommitState, w: CompleteUpdate) -> Program[None]:
    status = "completed" if w.failure is None else "failed"
    count = yield ex(
        "UPDATE inbox SET status = ?, result = ?, failure = ?, completed_at = ? "
        "WHERE run_id = ? AND update_id = ? AND status = 'accepted'",
        status, w.result, dump_failure(w.failure), c.now, c.run.run_id, w.update_id,
    )
    if count:
        data: dict[str, Any] = {"update_id": w.update_id, "name": w.name, "status": status}
        if w.failure is None:
            data["result"] = loads(w.result)
        else:
            data["failure"] = w.failure.to_dict()
        c.events.append(("UpdateCompleted", data))
    c.tx.wake(Wake.update(c.run.run_id, w.update_id))
    return None


def schedule_condition(c: RunCommitState, w: ScheduleCondition) -> Program[None]:
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, scheduled_at, fire_at) "
        "VALUES (?, ?, 'condition', 'wait_condition', 'scheduled', ?, ?)",
        c.run.run_id, w.op_id, c.now, w.fire_at,
    )
    c.events.append(("ConditionScheduled", {
        "op_id": w.op_id, "timeout_seconds": w.timeout, "fire_at": to_iso(w.fire_at),
    }))
    return None


def resolve_condition(c: RunCommitState, w: ResolveCondition) -> Program[None]:
    run_id = c.run.run_id
    if w.satisfied is None:  # interrupted by the run's cancellation, like a timer
        failure = Failure("cancelled", "condition wait cancelled").with_details(interrupted=True)
        count = yield ex(
            "UPDATE ops SET status = 'cancelled', failure = ?, closed_at = ?, interrupted = 1 "
            "WHERE run_id = ? AND op_id = ? AND interrupted = 0",
            dump_failure(failure), c.now, run_id, w.op_id,
        )
        if count:
            c.events.append(("ConditionCancelled", {"op_id": w.op_id,
                                                    "reason": "cancellation delivered"}))
        return None
    result = "true" if w.satisfied else "false"
    count = yield ex(
        "UPDATE ops SET status = 'completed', result = ?, closed_at = ? "
        "WHERE run_id = ? AND op_id = ? AND status = 'scheduled'",
        result, c.now, run_id, w.op_id,
    )
    if count:
        c.events.append(("ConditionSatisfied" if w.satisfied else "ConditionTimedOut",
                         {"op_id": w.op_id}))
        c.ops[w.op_id] = OpRecord(w.op_id, OpKind.CONDITION, "wait_condition",
                                  OpStatus.COMPLETED, result, None, None, c.now)
    return None


def record_marker(c: RunCommitState, w: RecordMarker) -> Program[None]:
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, result, scheduled_at, closed_at) "
        "VALUES (?, ?, 'marker', ?, 'completed', ?, ?, ?)",
        c.run.run_id, w.op_id, w.name, dumps(w.details), c.now, c.now,
    )
    c.events.append(("MarkerRecorded", {"op_id": w.op_id, "name": w.name, **w.details}))
    return None


def _external_op(c: RunCommitState, op_id: str, name: str, result: Any,
                 failure: Failure | None, event: Event) -> Program[None]:
    status = OpStatus.COMPLETED if failure is None else OpStatus.FAILED
    text = dumps(result)
    yield ex(
        "INSERT INTO ops (run_id, op_id, kind, name, status, result, failure, scheduled_at, "
        "closed_at) VALUES (?, ?, 'external', ?, ?, ?, ?, ?, ?)",
        c.run.run_id, op_id, name, status, text, dump_failure(failure), c.now, c.now,
    )
    c.events.append(event)
    c.ops[op_id] = OpRecord(op_id, OpKind.EXTERNAL, name, status, text, failure, c.now, c.now)
    return None


def _refusal(exc: Exception) -> Failure:
    return Failure("external", str(exc), f"durable.{type(exc).__name__}")


def signal_external(c: RunCommitState, w: SignalExternal) -> Program[None]:
    run = c.run
    failure: Failure | None = None
    target_run: str | None = None
    try:
        row = yield from _target_run(c.tx, run.namespace, w.workflow_id, w.run_id)
        if row["status"] not in OPEN_STATUSES:
            raise RunAlreadyClosed(
                f"workflow {w.workflow_id!r} run {row['run_id']} is already {row['status']}; "
                "signals reach open runs only"
            )
        target_run = row["run_id"]
        yield from insert_signal(c.tx, row, w.name, w.input, c.now, sender={
            "workflow_id": run.workflow_id, "run_id": run.run_id, "op_id": w.op_id})
    except (WorkflowNotFound, RunAlreadyClosed) as exc:
        failure = _refusal(exc)
    data: dict[str, Any] = {"op_id": w.op_id, "workflow_id": w.workflow_id,
                            "run_id": target_run, "name": w.name}
    if failure is not None:
        data["failure"] = failure.to_dict()
    yield from _external_op(c, w.op_id, f"signal:{w.name}", {"run_id": target_run}, failure,
                            ("ExternalSignalSent", data))
    return None


def cancel_external(c: RunCommitState, w: CancelExternal) -> Program[None]:
    run = c.run
    failure: Failure | None = None
    result: dict[str, Any] | None = None
    try:
        accepted, record = yield from cancellation.request_cancellation(
            c.tx, run.namespace, w.workflow_id, w.run_id, w.reason, w.cleanup_timeout,
            {"type": "workflow", "id": run.workflow_id, "label": run.workflow_type},
            "workflow", c.now,
        )
        result = {"accepted": accepted, "request": record}
    except (WorkflowNotFound, RunNotCurrent, RunAlreadyClosed, CapabilityUnsupported) as exc:
        failure = _refusal(exc)
    data: dict[str, Any] = {"op_id": w.op_id, "workflow_id": w.workflow_id, "reason": w.reason}
    if result is not None:
        data["accepted"] = result["accepted"]
        data["request_id"] = result["request"]["request_id"]
        data["request"] = result["request"]  # as stored: what the op returns on replay
    if failure is not None:
        data["failure"] = failure.to_dict()
    yield from _external_op(c, w.op_id, "request_cancellation", result, failure,
                            ("ExternalCancellationRequested", data))
    return None


#: The write handlers of this module, merged into `durable.store.commit.HANDLERS`.
HANDLERS: dict[type[Any], Any] = {
    DeliverSignal: deliver_signal,
    AcceptUpdate: accept_update,
    CompleteUpdate: complete_update,
    ScheduleCondition: schedule_condition,
    ResolveCondition: resolve_condition,
    RecordMarker: record_marker,
    SignalExternal: signal_external,
    CancelExternal: cancel_external,
}
