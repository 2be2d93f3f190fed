"""The workflow routes of the reference engine's control-plane contract (v2).

Start, list, describe (the current run and a given run), runs, history,
signal / query / update (the handler's name in the path),
request-cancellation, cancel and terminate: the reference's paths, request
fields and answers (`durable.http.model`), so its own Python client
(``durable-workflow``) drives `durable serve` unchanged. Our extras are
extra request fields (``id_reuse_policy``, ``require_registered``,
``concurrency_key``, ``requester``, ``source``, ``timeout_seconds``) and extra
answer fields, never a changed meaning of the reference's.

Kept whole: it is one contract, read against one client; its request
schemas, answers and handlers change together when the reference's do.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from .._embedded import check_start_arity, decode_cursor, encode_cursor
from .._visibility_query import run_filter
from ..control import Page
from ..errors import (
    ConfigurationError,
    InvalidVisibilityQuery,
    NameNotRegistered,
    PayloadRejected,
    WorkflowNotFound,
)
from ..options import IdReusePolicy, StartOptions
from ..store.records import HistoryEvent, StartRequest, StartResult
from . import avro, model
from .errors import HTTPError
from .model import parse_payload
from .routes import (
    ERROR_SCHEMA,
    RULES,
    RUN_ID,
    WAIT,
    WORKFLOW_ID,
    Call,
    Handler,
    Operation,
    Param,
    Reply,
    Schema,
    check_schema,
    durable_rules,
    reference_refusal,
    rules_field,
    seconds,
    text,
)
from .schedule_list import list_error
from .wire import encode_payload, record_to_wire

PAYLOAD = {"type": ["object", "array", "null"],
           "description": "An Avro envelope {codec: 'avro', blob} holding the list of "
                          "positional arguments (the reference's client sends this), or a "
                          "plain JSON array of them (for curl)."}
DUPLICATE_POLICIES = ("fail", "use-existing")
#: the reference engine's workflow ids (its start: ``max:128``,
#: ``regex:/^[a-zA-Z0-9._:-]+$/``); durable's SDK takes more (`_validate.name`)
REFERENCE_ID = re.compile(r"[a-zA-Z0-9._:-]{1,128}")
#: the reference engine's bounds on a signal, query or update name (bytes of
#: UTF-8) and on a cancellation's cleanup budget (whole seconds); the SDK takes
#: names of 255 characters and any budget over 0 (`rules: durable`)
REFERENCE_NAME_BYTES = 256
REFERENCE_CLEANUP = (1, 3600)
_NAME_RULES = rules_field("signal, query and update names of up to 255 characters")

START_BODY = check_schema({
    "type": "object",
    "required": ["workflow_type", "workflow_id"],
    "additionalProperties": False,
    "properties": {
        "workflow_id": text(1000, "The instance id (unique per namespace): 1 to 128 "
                                 "letters, digits, '.', '_', ':' or '-', as the reference "
                                 "engine takes them; with rules durable, 1 to 255 "
                                 "characters without control characters."),
        "rules": {
            "type": "string", "enum": list(RULES), "default": "reference",
            "description": "Extension: which ids the start takes: the reference engine's "
                           "(the default), or durable's SDK's (durable's remote client "
                           "sends it)."},
        "workflow_type": text(255, "The registered name of the workflow."),
        "task_queue": {**text(255, "The task queue its workers poll."),
                       "type": ["string", "null"]},
        "input": PAYLOAD,
        "execution_timeout_seconds": seconds(
            "Bounds the whole instance, across continue-as-new.", minimum=1),
        "run_timeout_seconds": seconds("Bounds each run.", minimum=1),
        "duplicate_policy": {
            "type": ["string", "null"], "enum": [*DUPLICATE_POLICIES, None],
            "description": "fail (default): an id in use is 409; use-existing: an open run "
                           "with the id is returned (200), a closed one is 409."},
        "id_reuse_policy": {
            "type": "string", "enum": [p.value for p in IdReusePolicy],
            "description": "Extension, finer than duplicate_policy (send one of the two)."},
        "memo": {"type": ["object", "null"], "description": "Metadata describe() shows."},
        "priority": {
            "type": ["integer", "null"], "minimum": 0, "maximum": 9,
            "description": "Extension: claims go by priority, 0 (first) .. 9, then age; "
                           "null: 5 (docs/queues.md)."},
        "concurrency_key": {
            **text(255, "Extension: runs of one key count against the queue's "
                        "max_running_per_key (docs/queues.md)."), "type": ["string", "null"]},
        "require_registered": {
            "type": "boolean", "default": True,
            "description": "Extension: refuse (400 not_registered) a type no live worker "
                           "registers. Our Python remote client sends false (it checked "
                           "the name already)."},
    },
})
SIGNAL_WITH_START_BODY = check_schema({
    **START_BODY,
    "required": ["workflow_type", "workflow_id", "signal"],
    "properties": {
        **START_BODY["properties"],
        "signal": text(255, "The signal's name."),
        "signal_input": PAYLOAD,
    },
})
REQUEST_ID = {**text(255, "The caller's command key (1-255 characters)."),
              "type": ["string", "null"]}
SIGNAL_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "input": PAYLOAD,
        "request_id": {**REQUEST_ID, "description": "Makes the signal idempotent: a retry "
                       "with the same request_id to the same run is recorded once (the "
                       "answer then says duplicate: true)."},
        "requester": {"type": ["object", "null"],
                      "description": "Extension: who sends it (recorded as given); by "
                                     "default the role."},
        "source": {**text(200, "Extension: where the signal came from."), "default": "http"},
        "rules": _NAME_RULES,
    },
})
QUERY_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "input": PAYLOAD,
        "timeout_seconds": {
            **seconds("Extension: how long to wait for a worker's answer (capped by the "
                      "server's max_wait); the request is withdrawn after.",
                      exclusive_minimum=0, nullable=False), "default": 10},
        "rules": _NAME_RULES,
    },
})
UPDATE_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "input": PAYLOAD,
        "wait_for": {"type": ["string", "null"], "enum": ["accepted", "completed", None],
                     "description": "completed (the default): answer with the handler's "
                                    "result; accepted: answer once the worker that holds "
                                    "the run validated and recorded it (update_status "
                                    "accepted, result null), or with the result if it "
                                    "completed by then."},
        "wait_timeout_seconds": seconds(
            "How long to wait for the outcome (null or above the server's max_wait: "
            "max_wait). An update still running then fails with 422 update_failed and "
            "failure.timeout_kind update_wait; send the same request_id to keep waiting.",
            exclusive_minimum=0),
        "request_id": {**REQUEST_ID, "description": "Makes the update idempotent: the same "
                                                    "id again returns the recorded outcome."},
        "requester": {"type": ["object", "null"],
                      "description": "Extension: who asks (recorded as given); by default "
                                     "the role."},
        "source": {**text(200, "Extension: where the update came from."), "default": "http"},
        "rules": _NAME_RULES,
    },
})
CANCELLATION_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {
        "reason": {**text(10_000, "Why (recorded and shown to the workflow)."),
                   "type": ["string", "null"], "minLength": 0},
        "cleanup_timeout_seconds": {
            **seconds("The cleanup budget; a repeat never extends it.",
                      exclusive_minimum=0, nullable=True), "default": 30},
        "requester": {"type": ["object", "null"],
                      "description": "Extension: who asks (recorded as given)."},
        "source": {**text(200, "Extension: where the request came from."),
                   "default": "http"},
        "rules": rules_field("any cleanup budget over 0 seconds"),
    },
})
CLOSE_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "properties": {"reason": {**text(1000, "Recorded as the closing reason."),
                              "type": ["string", "null"], "minLength": 0},
                   "request_id": REQUEST_ID},
})

START_REPLY: Schema = {
    "type": "object",
    "required": ["workflow_id", "run_id", "workflow_type", "namespace", "status", "outcome",
                 "payload_codec"],
    "properties": {
        "workflow_id": {"type": "string"}, "run_id": {"type": "string"},
        "workflow_type": {"type": "string"}, "namespace": {"type": "string"},
        "status": {"type": "string", "enum": list(model.WIRE_STATUSES)},
        "outcome": {"type": "string", "enum": ["started_new", "returned_existing_active",
                                                "signalled_existing"]},
        "payload_codec": {"type": "string"}, "created": {"type": "boolean"},
    },
}
RECEIPT: Schema = {"type": "object", "required": ["workflow_id"],
                   "properties": {"workflow_id": {"type": "string"}}}
RESULT_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "result"],
    "properties": {"workflow_id": {"type": "string"},
                   "result": {"description": "The handler's return value."},
                   "result_envelope": model.ENVELOPE_SCHEMA},
}
CANCELLATION_REPLY: Schema = {
    "type": "object",
    "required": ["accepted", "duplicate", "workflow_id", "run_id", "cancellation_request"],
    "properties": {
        "accepted": {"type": "boolean"}, "duplicate": {"type": "boolean"},
        "workflow_id": {"type": "string"}, "run_id": {"type": "string"},
        "cancellation_request": {
            "type": "object",
            "required": ["request_id", "requested_at", "cleanup_deadline_at",
                         "history_refresh_page_token"],
            "properties": {"request_id": {"type": "string"},
                           "requested_at": {"type": "string"},
                           "cleanup_deadline_at": {"type": "string"},
                           "history_refresh_page_token": {"type": "string"}}},
        "request": {"type": "object", "description": "Extension: the request as recorded."},
    },
}
CLOSE_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "run_id", "outcome", "status"],
    "properties": {"workflow_id": {"type": "string"}, "run_id": {"type": "string"},
                   "outcome": {"type": "string", "description":
                               "cancelled or terminated (a retry of the close that ended "
                               "the run answers the same)"},
                   "status": {"type": "string", "enum": list(model.WIRE_STATUSES)}},
}


def _arguments(value: Any, where: str) -> list[Any]:
    try:
        return model.payload_in(value, where)
    except avro.PayloadCodecError as exc:
        raise PayloadRejected(f"{where}: {exc}") from None


async def _not_found(call: Call, workflow_id: str, run_id: str | None) -> WorkflowNotFound:
    return await call.client.control.not_found(workflow_id, run_id)


# ---------------------------------------------------------------- start


async def start_request(call: Call) -> StartRequest:
    """A start body (start's, signal-with-start's) as the client's request."""
    body = call.body
    client = call.client
    _check_id(body)
    wf_type: str = body["workflow_type"]
    if body.get("require_registered", True) and (
        wf_type not in await client.control.registered_types()
    ):
        raise NameNotRegistered(
            f"unknown workflow type {wf_type!r}: no live worker in namespace "
            f"{call.namespace!r} has registered it; start a worker with it, check the name "
            "(GET /api/workflow-types lists registered types), or send "
            '"require_registered": false to record the start anyway'
        )
    policy = body.get("id_reuse_policy")
    if policy is None:
        policy = (IdReusePolicy.RETURN_EXISTING_ACTIVE
                  if body.get("duplicate_policy") == "use-existing"
                  else IdReusePolicy.REJECT_DUPLICATE)
    options = StartOptions(
        id_reuse=IdReusePolicy(policy),
        execution_timeout=body.get("execution_timeout_seconds"),
        run_timeout=body.get("run_timeout_seconds"),
        memo=dict(body.get("memo") or {}),
        priority=5 if body.get("priority") is None else body["priority"],
        concurrency_key=body.get("concurrency_key"),
    )
    args = _arguments(body.get("input"), "input")
    if body.get("require_registered", True):
        await check_start_arity(client._store, call.namespace, client.clock, wf_type, None,
                                args)
    return client._start_request(wf_type, args, body["workflow_id"], options,
                                 body.get("task_queue"))


def _check_id(body: dict[str, Any]) -> None:
    """Refuse a workflow id the reference engine refuses (422 naming the field,
    its shape), unless the start asks for durable's ids (``rules``): its
    client, and callers of ours, must not start on our server an id its own
    server would refuse (docs/control-plane.md, "Workflow ids")."""
    workflow_id: str = body["workflow_id"]
    if body.get("rules") == "durable" or REFERENCE_ID.fullmatch(workflow_id):
        return
    why = (f"is {len(workflow_id)} characters long" if len(workflow_id) > 128
           else "holds a character the reference engine does not take")
    message = (f"body.workflow_id: {workflow_id[:60]!r} {why}; a workflow id is 1 to 128 "
               "letters, digits, '.', '_', ':' or '-' (^[a-zA-Z0-9._:-]+$, the reference "
               "engine's rule). Choose such an id, or send \"rules\": \"durable\" to "
               "start any id durable's SDK takes (1 to 255 characters, no control "
               "characters)")
    raise HTTPError(422, "validation_failed", message, field="body.workflow_id",
                    errors={"workflow_id": [message]})


async def _start_reply(call: Call, started: StartResult, outcome: str) -> dict[str, Any]:
    """A start's answer. The store's answer holds the instance's stored status;
    a run it did not just create (the open run returned or signalled) may be
    in review, so its status is read as describe() shows it (`RunState`,
    `durable._statuses`): ``durable_status`` says needs_review there too."""
    status = started.status
    if not (started.created and status == "pending"):  # not a fresh run: read it
        state = await call.client.control.run_state(call.body["workflow_id"], started.run_id)
        status = status if state is None else state.status
    return {
        "workflow_id": call.body["workflow_id"], "run_id": started.run_id,
        "workflow_type": call.body["workflow_type"], "namespace": call.namespace,
        "status": model.wire_status(status), "durable_status": status,
        "business_key": None, "payload_codec": avro.CODEC, "outcome": outcome,
        "created": started.created,
    }


async def start_workflow(call: Call) -> tuple[int, Any]:
    if call.body.get("duplicate_policy") and call.body.get("id_reuse_policy"):
        from ..errors import ConfigurationError

        raise ConfigurationError("send duplicate_policy or id_reuse_policy, not both")
    result = await call.client.control.start(await start_request(call))
    outcome = "started_new" if result.created else "returned_existing_active"
    return (201 if result.created else 200), await _start_reply(call, result, outcome)


async def signal_with_start(call: Call) -> tuple[int, Any]:
    body = call.body
    request = await start_request(call)
    _check_name_bytes(body["signal"], "signal", body)
    args = _arguments(body.get("signal_input"), "signal_input")
    result = await call.client.control.signal_with_start(request, body["signal"],
                                                         encode_payload(args))
    outcome = "started_new" if result.created else "signalled_existing"
    return (201 if result.created else 200), await _start_reply(call, result, outcome)


# ---------------------------------------------------------------- reading


async def _describe_run(call: Call, workflow_id: str, run_id: str | None) -> dict[str, Any]:
    found = await model.read_run_description(call.client.control, workflow_id, run_id,
                                             call.client.list_workers)
    if found is None:
        raise await _not_found(call, workflow_id, run_id)
    return found


async def describe(call: Call) -> tuple[int, Any]:
    p = call.params
    return 200, await _describe_run(call, p["workflowId"], p.get("runId"))


async def runs(call: Call) -> tuple[int, Any]:
    wf = call.params["workflowId"]
    ids = await call.client.store.run_ids(call.namespace, wf)
    if not ids:
        raise await _not_found(call, wf, None)
    described = [await _describe_run(call, wf, run_id) for run_id in ids]
    return 200, {"workflow_id": wf, "run_count": len(described), "runs": described}


def _foreign_page_token() -> ConfigurationError:
    """A page token this server never gave, in the words of the wire (the list
    said `next_cursor`, the Python API's name, to clients that send
    `next_page_token`)."""
    return ConfigurationError(
        "next_page_token is not one this server gave: pass the next_page_token of the "
        "previous page, or none for the first page")


async def list_workflows(call: Call) -> tuple[int, Any]:
    p = call.params
    bucket = p.get("status")
    token = p.get("next_page_token")
    try:
        before = decode_cursor(token) if token else None
    except ConfigurationError:  # its words name the Python API's `next_cursor`
        raise _foreign_page_token() from None
    try:  # the one reading of a query, the embedded list's too (`run_filter`)
        found = run_filter(p.get("query"))
    except InvalidVisibilityQuery as exc:
        raise list_error(422, exc.reason, str(exc), "query") from None
    statuses = found.statuses
    if bucket:  # both must hold: ours in the bucket that rows show as the word
        members = model.BUCKET_MEMBERS[bucket]
        statuses = members if statuses is None else tuple(s for s in statuses if s in members)
    items, next_key = await call.client.store.list_runs(
        call.namespace, p.get("durable_status"), p.get("workflow_type"), p["page_size"],
        before, statuses=statuses, id_contains=found.id_contains,
        now=call.client.clock.now(), matching=found.matching)
    return 200, model.list_to_wire(
        Page(items, encode_cursor(next_key) if next_key else None))


async def history(call: Call) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    state = await control.run_state(wf, run)
    if state is None:
        raise await _not_found(call, wf, run)
    try:
        after = model.decode_token(p.get("next_page_token"))
    except ValueError:
        raise _foreign_page_token() from None
    if after is None:
        after = int(p.get("after_sequence") or 0)
    size: int = p["page_size"]
    wait = float(p.get("wait") or 0) or (call.max_wait if p.get("wait_new_event") else 0.0)
    wait = min(wait, call.max_wait)
    events = await control.history(wf, state.run_id, after_sequence=after, limit=size + 1)
    if not events and wait > 0 and state.is_open:
        async def newer() -> list[HistoryEvent] | None:
            return await control.history(wf, state.run_id, after_sequence=after,
                                         limit=size + 1) or None

        events = await call.wait_for_change(state.run_id, newer, wait) or []
    return 200, model.history_to_wire(wf, state.run_id, events[:size],
                                      more=len(events) > size, after=after)


# ---------------------------------------------------------------- messages


def _sender(call: Call) -> dict[str, Any]:
    """Who sends a signal or an update: as the body says, else the token's role."""
    return {"requester": call.body.get("requester") or {"type": "http", "id": None,
                                                        "label": call.role},
            "source": call.body.get("source") or "http"}


def _check_name(call: Call, param: str, field_name: str) -> None:
    """Refuse a signal, query or update name over the reference engine's 256
    bytes (422 naming the field, its answer), unless the request asks for the
    SDK's rules (``rules``: names of up to 255 characters, the path's bound)."""
    _check_name_bytes(call.params[param], field_name, call.body)


def _check_name_bytes(name: str, field_name: str, body: dict[str, Any]) -> None:
    size = len(name.encode())
    if size > REFERENCE_NAME_BYTES and not durable_rules(body):
        raise reference_refusal(field_name, (
            f"{field_name} is {size} bytes of UTF-8; the reference engine takes at most "
            f"{REFERENCE_NAME_BYTES}. Use a shorter name, or send \"rules\": \"durable\" "
            "for durable's SDK's (up to 255 characters)"))


async def signal(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    _check_name(call, "signalName", "signal_name")
    args = _arguments(body.get("input"), "input")
    key = body.get("request_id") or None
    recorded = await call.client.control.signal(
        p["workflowId"], p.get("runId"), p["signalName"], encode_payload(args),
        sender=_sender(call), request_id=key)
    return 202, {"workflow_id": p["workflowId"], "run_id": p.get("runId"),
                 "signal_name": p["signalName"], "request_id": key,
                 "outcome": "signal_received", "recorded": True, "duplicate": not recorded}


async def query(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    _check_name(call, "queryName", "query_name")
    wait = min(float(body.get("timeout_seconds", 10)), call.max_wait)
    args = _arguments(body.get("input"), "input")
    answer = await call.client.control.query(p["workflowId"], p.get("runId"), p["queryName"],
                                             encode_payload(args), wait)
    value, envelope = model.payload_pair(parse_payload(answer, "the query's result"))
    return 200, {"workflow_id": p["workflowId"], "query_name": p["queryName"],
                 "result": value, "result_envelope": envelope}


async def update(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    _check_name(call, "updateName", "update_name")
    requested = body.get("wait_timeout_seconds")
    wait = call.max_wait if requested is None else min(float(requested), call.max_wait)
    update_id = body.get("request_id") or uuid.uuid4().hex
    args = _arguments(body.get("input"), "input")
    stage = body.get("wait_for") or "completed"
    control = call.client.control
    if stage == "accepted":  # answer once validated and recorded
        answer = await control.update_accepted(p["workflowId"], p.get("runId"),
                                               p["updateName"], encode_payload(args),
                                               update_id, wait, sender=_sender(call))
    else:
        answer = await control.update(p["workflowId"], p.get("runId"), p["updateName"],
                                      encode_payload(args), update_id, wait,
                                      sender=_sender(call))
    reply = {"workflow_id": p["workflowId"], "update_name": p["updateName"],
             "update_id": update_id, "request_id": update_id, "wait_for": stage}
    if answer is None:  # accepted, still running
        return 200, {**reply, "outcome": "update_accepted", "update_status": "accepted",
                     "result": None, "result_envelope": None}
    value, envelope = model.payload_pair(parse_payload(answer, "the update's result"))
    return 200, {**reply, "outcome": "update_completed", "update_status": "completed",
                 "result": value, "result_envelope": envelope}


# ---------------------------------------------------------------- stopping


async def request_cancellation(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    state = await control.run_state(wf, run)
    if state is None:
        raise await _not_found(call, wf, run)
    requester = body.get("requester") or {"type": "http", "id": None, "label": call.role}
    cleanup = body.get("cleanup_timeout_seconds")
    low, high = REFERENCE_CLEANUP
    if cleanup is not None and not durable_rules(body) and (
            cleanup != int(cleanup) or not low <= cleanup <= high):
        raise reference_refusal("cleanup_timeout_seconds", (
            f"cleanup_timeout_seconds must be a whole number from {low} to {high} (the "
            f"reference engine's bound), got {cleanup!r}; send \"rules\": \"durable\" "
            "for durable's SDK's (any duration over 0)"))
    accepted, record = await control.request_cancellation(
        wf, run, reason=body.get("reason") or "cancellation requested",
        cleanup_timeout=float(30 if cleanup is None else cleanup),
        requester=requester, source=body.get("source", "http"),
    )
    wire = record_to_wire(record)
    token = await _refresh_token(call, wf, state.run_id, str(record.get("request_id")))
    return (202 if accepted else 200), {
        "accepted": True, "duplicate": not accepted, "workflow_id": wf,
        "run_id": state.run_id,
        "cancellation_request": {
            "request_id": wire.get("request_id"), "requested_at": wire.get("requested_at"),
            "cleanup_deadline_at": wire.get("deadline_at"), "reason": wire.get("reason"),
            "history_refresh_page_token": token,
        },
        "request": wire,
    }


async def _refresh_token(call: Call, workflow_id: str, run_id: str, request_id: str) -> str:
    """Where to re-read the run's history to see the request: just before its
    CancellationRequested event (from the start when it is not found)."""
    after = 0
    control = call.client.control
    while True:
        events = await control.history(workflow_id, run_id, after_sequence=after, limit=500)
        for event in events:
            if event.type == "CancellationRequested" and (
                event.data.get("request_id") in (request_id, None)
            ):
                return model.encode_token(event.sequence - 1)
        if len(events) < 500:
            return model.encode_token(0)
        after = events[-1].sequence


async def _close(call: Call, status: str, outcome: str) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    reason = call.body.get("reason") or status
    await control.close_run(wf, run, status=status, reason=reason)
    state = await control.run_state(wf, run)
    if state is None:
        raise await _not_found(call, wf, run)
    reply = {"workflow_id": wf, "run_id": state.run_id, "outcome": outcome,
             "reason": reason, "request_id": call.body.get("request_id"),
             **model.status_fields(state.status, state.closed_reason)}
    if state.status != status:
        # closed otherwise before this call (completed, failed, the other of
        # cancel/terminate): nothing was done, and the answer must not read as
        # done. The reference answers 409 run_not_active (its client raises),
        # so a caller that believed it stopped a run learns that it had already
        # ended, and how. A retry of the close that ended it (terminate after
        # terminate) is still 200. The SDK's cancel() and terminate() stay
        # no-ops on a closed run, remote too (`RemoteControl.close_run`).
        verb = {"cancelled": "cancel", "terminated": "terminate"}[status]
        raise HTTPError(
            409, "run_not_active",
            f"workflow {wf!r} run {state.run_id} is already {state.status}; nothing was "
            f"{status} ({verb} closes open runs only)",
            workflow_id=wf, run_id=state.run_id, outcome="rejected_not_active",
            **model.status_fields(state.status, state.closed_reason))
    return 200, reply


async def cancel(call: Call) -> tuple[int, Any]:
    return await _close(call, "cancelled", "cancelled")


async def terminate(call: Call) -> tuple[int, Any]:
    return await _close(call, "terminated", "terminated")


# ---------------------------------------------------------------- the table


def _both(method: str, action: str, op_id: str, summary: str, handler: Handler, *,
          role: str = "viewer", params: tuple[Param, ...] = (), body: Schema | None = None,
          replies: tuple[Reply, ...] = (), long_poll: bool = False,
          description: str = "", operation: str | None = None) -> list[Operation]:
    """An action on a given run and on the workflow's current run."""
    suffix = f"/{action}" if action else ""
    extra = {"operation": operation} if operation else {}
    return [
        Operation(method, f"/api/workflows/{{workflowId}}/runs/{{runId}}{suffix}",
                  f"{op_id}Run", f"{summary} (a given run)", handler, role,
                  params=(WORKFLOW_ID, RUN_ID, *params), body=body, replies=replies,
                  long_poll=long_poll, description=description, extra=extra),
        Operation(method, f"/api/workflows/{{workflowId}}{suffix}", op_id,
                  f"{summary} (the current run)", handler, role,
                  params=(WORKFLOW_ID, *params), body=body, replies=replies,
                  long_poll=long_poll, description=description, extra=extra),
    ]


def _name(param: str, what: str) -> Param:
    return Param(param, "path", text(255, f"The {what}'s name."), f"The {what}'s name.",
                 required=True)


RUN_REPLY = Reply(200, "The run (the reference's run description, plus our fields).",
                  model.RUN_SCHEMA)


def workflow_operations() -> list[Operation]:
    """The reference contract's workflow routes."""
    ops = [
        Operation(
            "POST", "/api/workflows", "startWorkflow", "Start a workflow", start_workflow,
            "operator", body=START_BODY, body_required=True,
            replies=(Reply(201, "Started (outcome started_new).", START_REPLY),
                     Reply(200, "duplicate_policy use-existing: the open run "
                                "(outcome returned_existing_active).", START_REPLY),
                     Reply(409, "instance_already_started.", ERROR_SCHEMA)),
        ),
        Operation(
            "POST", "/api/signal-with-start", "signalWithStart",
            "Extension: signal the open run, or start one and signal it", signal_with_start,
            "operator", body=SIGNAL_WITH_START_BODY, body_required=True,
            replies=(Reply(201, "Started, with the signal as its first.", START_REPLY),
                     Reply(200, "The open run was signalled.", START_REPLY),
                     Reply(409, "instance_already_started.", ERROR_SCHEMA)),
        ),
        Operation(
            "GET", "/api/workflows", "listWorkflows", "List runs, newest first",
            list_workflows,
            params=(
                Param("status", "query", {"type": "string", "enum": list(model.BUCKETS)},
                      "Only runs in this bucket: running (open), completed, failed (every "
                      "other close)."),
                Param("durable_status", "query",
                      {"type": "string", "enum": list(model.DURABLE_STATUSES)},
                      "Extension: only runs with this status of ours."),
                Param("workflow_type", "query", text(1000, "Only runs of this type."),
                      "Only runs of this type."),
                Param("query", "query", text(1000, "Field = literal [AND ...], or id text."),
                      "A visibility query: equality predicates joined by AND on WorkflowId, "
                      "WorkflowType, TaskQueue or ExecutionStatus (Status), e.g. "
                      "WorkflowType = 'order' AND ExecutionStatus = 'running'. A status "
                      "(lowercase) finds the runs whose rows show it: a run waiting for "
                      "review is running, a timed-out one failed. A query with no =, < or > "
                      "keeps the workflow ids holding it."),
                Param("page_size", "query",
                      {"type": "integer", "minimum": 1, "maximum": model.LIST_PAGE_MAX,
                       "default": 50},
                      "Page size, 1 to 200 (the reference's bound)."),
                Param("next_page_token", "query", text(1000, "The previous page's token."),
                      "The next_page_token of the previous page."),
            ),
            replies=(Reply(200, "One page of run summaries.", model.LIST_SCHEMA),
                     Reply(422, "invalid_workflow_visibility_query, "
                                "unsupported_workflow_visibility_field, "
                                "unsupported_workflow_visibility_predicate: a query that does "
                                "not fit the grammar (field: query)", ERROR_SCHEMA)),
        ),
        Operation(
            "GET", "/api/workflows/{workflowId}/runs", "listWorkflowRuns",
            "Every run of the workflow id, oldest first", runs, params=(WORKFLOW_ID,),
            replies=(Reply(200, "The runs.", model.RUNS_SCHEMA),),
        ),
    ]
    ops += _both("GET", "", "describeWorkflow", "Describe", describe, replies=(RUN_REPLY,))
    ops += _both(
        "GET", "history", "getHistory", "History events, a page at a time", history,
        params=(
            Param("page_size", "query",
                  {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                  "At most this many events."),
            Param("next_page_token", "query", text(100, "The previous page's token."),
                  "The next_page_token of the previous page."),
            Param("wait_new_event", "query", {"type": "boolean", "default": False},
                  "Long-poll (up to the server's max_wait) until an event follows the "
                  "token."),
            Param("after_sequence", "query",
                  {"type": "integer", "minimum": 0, "maximum": 2_147_483_647},
                  "Extension: only events after this sequence (instead of a token)."),
            WAIT,
        ),
        replies=(Reply(200, "Events, oldest first; next_page_token is null on the last "
                            "page.", model.HISTORY_SCHEMA),),
        long_poll=True,
    )
    ops += _both(
        "POST", "request-cancellation", "requestCancellation",
        "Ask the run to stop cooperatively (bounded cleanup)", request_cancellation,
        role="operator", body=CANCELLATION_BODY,
        replies=(
            Reply(202, "Recorded (duplicate false).", CANCELLATION_REPLY),
            Reply(200, "A repeat (duplicate true): the original request, identity and "
                       "deadline.", CANCELLATION_REPLY),
            Reply(409, "run_not_current, run_not_active or capability_unsupported.",
                  ERROR_SCHEMA),
        ),
    )
    ops += _both("POST", "cancel", "cancelWorkflow",
                 "Close the run at once as cancelled (no cleanup)", cancel, role="operator",
                 body=CLOSE_BODY, replies=(
                     Reply(200, "The run after.", CLOSE_REPLY),
                     Reply(409, "run_not_active: the run had closed otherwise; nothing "
                                "done (its status in the body).", ERROR_SCHEMA)))
    ops += _both("POST", "terminate", "terminateWorkflow",
                 "Close the run at once as terminated", terminate, role="operator",
                 body=CLOSE_BODY, replies=(
                     Reply(200, "The run after.", CLOSE_REPLY),
                     Reply(409, "run_not_active: the run had closed otherwise; nothing "
                                "done (its status in the body).", ERROR_SCHEMA)))
    ops += _both(
        "POST", "signal/{signalName}", "signalWorkflow", "Send the run a signal", signal,
        role="operator", params=(_name("signalName", "signal"),), body=SIGNAL_BODY,
        operation="signal",
        replies=(Reply(202, "Recorded; delivered to the workflow's handler in order, "
                            "exactly once.", RECEIPT),
                 Reply(409, "run_not_active (nothing recorded).", ERROR_SCHEMA)),
    )
    ops += _both(
        "POST", "query/{queryName}", "queryWorkflow", "Ask a query (read-only)", query,
        params=(_name("queryName", "query"),), body=QUERY_BODY, long_poll=True,
        operation="query",
        replies=(Reply(200, "The handler's answer.", RESULT_REPLY),
                 Reply(409, "query_rejected: the handler raised or tried to record, or no "
                            "such handler.", ERROR_SCHEMA),
                 Reply(504, "query_worker_timeout: no worker answered in time.",
                       ERROR_SCHEMA)),
        description="Viewers may query.",
    )
    ops += _both(
        "POST", "update/{updateName}", "updateWorkflow",
        "Run an update and wait for its outcome", update, role="operator",
        params=(_name("updateName", "update"),), body=UPDATE_BODY, long_poll=True,
        operation="update",
        replies=(Reply(200, "Completed (update_status completed), or accepted and still "
                            "running (update_status accepted, wait_for accepted).",
                       RESULT_REPLY),
                 Reply(409, "update_rejected (nothing recorded) or run_not_active.",
                       ERROR_SCHEMA),
                 Reply(422, "update_failed (update_status failed): the handler raised, "
                            "the run closed first, or the wait ran out.", ERROR_SCHEMA)),
    )
    return ops
