"""The control plane's routes, each declared once: method, path, role, parameters,
request and response schemas, and the handler.

`app.py` turns every `Operation` into a Starlette route that checks the
version header, the token's role, the namespace, the parameters and the
body against these very schemas before the handler runs; `openapi.py`
writes the OpenAPI document from the same objects. To add routes (signals,
for instance), append `Operation`s to the list that
`operations()` returns: the server, its validation and its spec follow.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..clock import to_iso
from ..errors import NameNotRegistered, WorkflowNotFound
from ..options import IdReusePolicy, StartOptions
from .avro import CODEC
from .errors import VERSION, VERSION_HEADER
from .schema import TEXT_PATTERN, Schema, check_schema
from .wire import encode_payload, event_to_wire, parse_payload, record_to_wire, state_to_wire

if TYPE_CHECKING:
    from ..client import Client
    from ..control import RunState
    from ..store.records import HistoryEvent, StartRequest

STATUSES = ["pending", "running", "completed", "failed", "cancelled", "timed_out",
            "terminated", "continued"]
# What a run summary (and the list filter) may say: open runs marked for review
# are listed as needs_review or unknown, as describe() shows them.
LISTED_STATUSES = [*STATUSES, "needs_review", "unknown"]
# The worker protocol version we advertise: the reference client asks for at
# least 1.20 before it sends a cooperative cancellation request.
WORKER_PROTOCOL_VERSION = "1.20"
# The update wait stages an update may ask for (`wait_for`).
UPDATE_WAIT_STAGES = ("accepted", "completed")
# Ten years: a longer timeout has no date storage or ISO 8601 can show.
MAX_SECONDS = 315_360_000
# PostgreSQL stores a sequence number in a 32-bit integer.
MAX_SEQUENCE = 2_147_483_647


@dataclass
class Call:
    """One validated request, as a handler sees it."""

    client: Client  # acting in the request's namespace
    namespace: str
    role: str | None
    params: dict[str, Any]
    body: dict[str, Any]
    request_id: str
    max_wait: float
    # (run_id, read, seconds): calls `read` until it returns something, again on
    # each wake-up naming the run (or a bounded poll); None after `seconds`
    # (`durable.wakes.WakeHub.until`)
    wait_for_change: Callable[[str, Callable[[], Awaitable[Any]], float], Awaitable[Any]]


Handler = Callable[[Call], Awaitable[tuple[int, Any]]]


@dataclass(frozen=True)
class Param:
    name: str
    location: str  # "path" | "query" | "header"
    schema: Schema
    description: str
    required: bool = False


@dataclass(frozen=True)
class Reply:
    status: int
    description: str
    schema: Schema | None = None
    content_type: str = "application/json"


@dataclass(frozen=True)
class Operation:
    """A route: where it is, who may call it, what it takes and gives, what it does."""

    method: str
    path: str
    operation_id: str
    summary: str
    handler: Handler
    role: str | None = "viewer"  # None: no token needed
    versioned: bool = True  # requires the version header
    params: tuple[Param, ...] = ()
    body: Schema | None = None
    replies: tuple[Reply, ...] = ()
    body_required: bool = False
    long_poll: bool = False  # ends when the client disconnects
    # OpenAPI links from this operation's reply to others: {name: (operationId,
    # {parameter: runtime expression})}.
    links: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    tags: tuple[str, ...] = ("workflows",)
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def text(max_length: int, description: str, *, min_length: int = 1) -> Schema:
    return {"type": "string", "minLength": min_length, "maxLength": max_length,
            "pattern": TEXT_PATTERN, "description": description}


def seconds(description: str, *, minimum: float | None = None,
            exclusive_minimum: float | None = None, nullable: bool = True) -> Schema:
    schema: Schema = {"type": ["number", "null"] if nullable else "number",
                      "maximum": MAX_SECONDS, "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if exclusive_minimum is not None:
        schema["exclusiveMinimum"] = exclusive_minimum
    return schema


WORKFLOW_ID = Param("workflowId", "path", text(1000, "The workflow id."), "The workflow id.",
                    required=True)
RUN_ID = Param("runId", "path", text(200, "A run id of the workflow."),
               "A run id of the workflow.", required=True)
WAIT = Param("wait", "query",
             {"type": "number", "minimum": 0, "default": 0,
              "description": "Long-poll for up to this many seconds (capped by the server's "
                             "max_wait); 0 answers at once."},
             "Long-poll for up to this many seconds (capped by the server).")

ID_FIELD = {"type": "string"}
INSTANT = {"type": ["string", "null"], "description": "ISO 8601 with an offset"}
ANY_OBJECT: Schema = {"type": "object"}

START_BODY = check_schema({
    "type": "object",
    "required": ["workflow_type", "workflow_id"],
    "additionalProperties": False,
    "properties": {
        "workflow_type": text(1000, "The registered name of the workflow."),
        "workflow_id": text(1000, "The instance id (unique per namespace)."),
        "input": {"type": "array", "maxItems": 10_000,
                  "description": "The workflow's positional arguments, as JSON values."},
        "execution_timeout_seconds": seconds(
            "Bounds the whole instance, across continue-as-new.", minimum=1),
        "run_timeout_seconds": seconds("Bounds each run.", minimum=1),
        "id_reuse_policy": {"type": "string", "enum": [p.value for p in IdReusePolicy],
                            "default": "reject_duplicate"},
        "task_queue": {**text(1000, "The task queue its workers poll."),
                       "type": ["string", "null"]},
        "memo": {"type": ["object", "null"], "description": "Metadata describe() shows."},
        "require_registered": {
            "type": "boolean", "default": True,
            "description": "Refuse (400 not_registered) a type no live worker registers. "
                           "The Python remote client sends false: like the embedded client "
                           "it has already checked a name, and a workflow function it "
                           "imports needs no live worker to be started."},
    },
})

CANCELLATION_BODY = check_schema({
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "reason": {**text(10_000, "Why (recorded and shown to the workflow)."),
                   "default": "cancellation requested", "minLength": 0},
        "cleanup_timeout_seconds": {
            **seconds("The cleanup budget; a repeat never extends it.",
                      exclusive_minimum=0, nullable=False), "default": 30},
        "requester": {"type": ["object", "null"],
                      "description": "Who asks (recorded as given); by default the role."},
        "source": {**text(200, "Where the request came from."), "default": "http"},
    },
})

REASON_BODY = check_schema({
    "type": "object",
    "additionalProperties": False,
    "properties": {"reason": {**text(10_000, "Recorded as the closing reason."),
                              "minLength": 0}},
})

REVIEW_BODY = check_schema({
    "type": "object",
    "additionalProperties": False,
    "properties": {"units": {
        "enum": ["rerun", "confirm"],
        "description": "For a run whose units' outcome is unknown (workflow.units): run "
                       "them again, or record them done.",
    }},
})

RESET_BODY = check_schema({
    "type": "object",
    "additionalProperties": False,
    "required": ["to_op", "reason"],
    "properties": {
        "to_op": text(255, "The op id to continue from (history shows each op's id); "
                           "results recorded before it are kept."),
        "reason": text(10_000, "Why the run is reset (recorded in both runs' history)."),
        "run_id": text(200, "The run to reset (default: the current run)."),
    },
})

ARGS = {"type": "array", "maxItems": 10_000,
        "description": "The handler's positional arguments, as JSON values."}
HANDLER_NAME = text(255, "The handler's name (as the workflow declares it).")

SIGNAL_BODY = check_schema({
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": HANDLER_NAME, "args": ARGS,
        "requester": {"type": ["object", "null"],
                      "description": "Who sends it (recorded as given); by default the role."},
        "source": {**text(200, "Where the signal came from."), "default": "http"},
    },
})

QUERY_BODY = check_schema({
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": HANDLER_NAME, "args": ARGS,
        "timeout_seconds": {
            **seconds("How long to wait for a worker's answer (capped by the server's "
                      "max_wait); the request is withdrawn after.",
                      exclusive_minimum=0, nullable=False), "default": 10},
    },
})

UPDATE_BODY = check_schema({
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": HANDLER_NAME, "args": ARGS,
        "update_id": {**text(255, "Makes the update idempotent: the same id again returns "
                                  "the recorded outcome instead of running it twice."),
                      "type": ["string", "null"]},
        "wait_seconds": seconds(
            "How long to wait for the outcome (null or above the server's max_wait: "
            "max_wait). An update still running then fails with update_failed and "
            "failure.timeout_kind update_wait; send the same update_id again to keep "
            "waiting.", exclusive_minimum=0),
        "requester": {"type": ["object", "null"],
                      "description": "Who asks (recorded as given); by default the role."},
        "source": {**text(200, "Where the update came from."), "default": "http"},
    },
})

SIGNAL_WITH_START_BODY = check_schema({
    **START_BODY,
    "required": ["workflow_type", "workflow_id", "signal"],
    "properties": {
        **START_BODY["properties"],
        "signal": HANDLER_NAME,
        "signal_args": ARGS,
    },
})

ERROR_SCHEMA: Schema = {
    "type": "object",
    "required": ["message", "reason"],
    "description": "The reference engine's flat error body; 422 adds errors {field: [...]}.",
    "properties": {"message": {"type": "string"}, "reason": {"type": "string"},
                   "errors": {"type": "object",
                              "additionalProperties": {"type": "array",
                                                       "items": {"type": "string"}}}},
}
SUMMARY: Schema = {
    "type": "object",
    "required": ["workflow_id", "run_id", "workflow_type", "status"],
    "properties": {
        "workflow_id": ID_FIELD, "run_id": ID_FIELD, "workflow_type": {"type": "string"},
        "status": {"type": "string", "enum": LISTED_STATUSES},
        "run_number": {"type": "integer"},
        "task_queue": {"type": "string"}, "created_at": INSTANT, "started_at": INSTANT,
        "closed_at": INSTANT, "closed_reason": {"type": ["string", "null"]},
    },
}
LIST_REPLY: Schema = {
    "type": "object", "required": ["items", "next_cursor"],
    "properties": {"items": {"type": "array", "items": SUMMARY},
                   "next_cursor": {"type": ["string", "null"]}},
}
START_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "run_id", "namespace", "status", "created"],
    "properties": {"workflow_id": ID_FIELD, "run_id": ID_FIELD, "namespace": ID_FIELD,
                   "status": {"type": "string", "enum": STATUSES},
                   "created": {"type": "boolean"}},
}
DESCRIBE_REPLY: Schema = {
    "type": "object",
    "required": ["workflow_id", "workflow_type", "namespace", "status", "run"],
    "properties": {
        "workflow_id": ID_FIELD, "workflow_type": {"type": "string"},
        "namespace": {"type": "string"}, "status": {"type": "string"},
        "run": {"type": "object", "required": ["run_id", "status"]},
        "failures": {"type": "array"},
        "cancellation": {"type": ["object", "null"]},
    },
}
EVENT: Schema = {
    "type": "object", "required": ["sequence", "type", "recorded_at", "data"],
    "properties": {"sequence": {"type": "integer"}, "type": {"type": "string"},
                   "recorded_at": {"type": "string"}, "data": {"type": "object"}},
}
HISTORY_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "run_id", "events", "next_after_sequence"],
    "properties": {"workflow_id": ID_FIELD, "run_id": ID_FIELD,
                   "events": {"type": "array", "items": EVENT},
                   "next_after_sequence": {"type": "integer"}},
}
RESULT_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "run_id", "status"],
    "properties": {
        "workflow_id": ID_FIELD, "run_id": ID_FIELD,
        "status": {"type": "string", "enum": STATUSES},
        "result": {"description": "The workflow's return value (status completed)."},
        "failure": {"type": "object", "description": "What ended the run (failed, cancelled, "
                                                     "timed_out, terminated)."},
        "continued_run_id": {"type": ["string", "null"]},
    },
}
REQUEST_RECORD: Schema = {
    "type": "object",
    "required": ["request_id", "root_request_id", "reason", "source", "requested_at",
                 "deadline_at", "lineage"],
    "properties": {"request_id": ID_FIELD, "root_request_id": ID_FIELD,
                   "reason": {"type": "string"}, "source": {"type": "string"},
                   "requested_at": {"type": "string"}, "deadline_at": {"type": "string"},
                   "lineage": {"type": "array"}, "lifecycle": {"type": ["string", "null"]}},
}
CANCELLATION_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "accepted", "request"],
    "properties": {"workflow_id": ID_FIELD, "accepted": {"type": "boolean"},
                   "request": REQUEST_RECORD},
}
CLOSE_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "run_id", "status"],
    "properties": {"workflow_id": ID_FIELD, "run_id": ID_FIELD,
                   "status": {"type": "string", "enum": STATUSES}},
}
SIGNAL_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "recorded"],
    "properties": {"workflow_id": ID_FIELD, "recorded": {"type": "boolean"}},
}
QUERY_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "result"],
    "properties": {"workflow_id": ID_FIELD,
                   "result": {"description": "The query handler's return value."}},
}
UPDATE_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "update_id", "result"],
    "properties": {"workflow_id": ID_FIELD, "update_id": ID_FIELD,
                   "result": {"description": "The update handler's return value."}},
}
HEALTH_REPLY: Schema = {
    "type": "object", "required": ["status", "timestamp", "checks"],
    "properties": {"status": {"type": "string", "enum": ["serving", "degraded"]},
                   "timestamp": {"type": "string"}, "checks": {"type": "object"}},
}
CLUSTER_INFO_REPLY: Schema = {
    "type": "object", "required": ["version", "capabilities", "control_plane", "worker_protocol"],
    "properties": {"version": {"type": "string"}, "capabilities": {"type": "object"},
                   "control_plane": {"type": "object"}, "worker_protocol": {"type": "object"},
                   "limits": {"type": "object"}},
}
CASCADE_REPLY: Schema = {"type": "object", "required": ["runs"],
                         "properties": {"runs": {"type": "array"}}}


def _run_state_or_404(state: RunState | None, workflow_id: str, run_id: str | None,
                      namespace: str) -> RunState:
    if state is None:
        run = f" run {run_id!r}" if run_id else ""
        raise WorkflowNotFound(f"no workflow {workflow_id!r}{run} in namespace {namespace!r}")
    return state


# ---------------------------------------------------------------- handlers


async def list_workflows(call: Call) -> tuple[int, Any]:
    p = call.params
    page = await call.client.list_page(status=p.get("status"),
                                       workflow_type=p.get("workflow_type"),
                                       limit=p["limit"], cursor=p.get("cursor"))
    return 200, {"items": page.items, "next_cursor": page.next_cursor}


async def start_workflow(call: Call) -> tuple[int, Any]:
    body = call.body
    result = await call.client.control.start(await _start_request(call))
    return (201 if result.created else 200), {
        "workflow_id": body["workflow_id"], "run_id": result.run_id,
        "namespace": call.namespace, "status": result.status, "created": result.created,
    }


async def _start_request(call: Call) -> StartRequest:
    """A start body (startWorkflow's, signalWithStart's) as the client's request."""
    body = call.body
    client = call.client
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
    options = StartOptions(
        id_reuse=IdReusePolicy(body.get("id_reuse_policy", "reject_duplicate")),
        execution_timeout=body.get("execution_timeout_seconds"),
        run_timeout=body.get("run_timeout_seconds"),
        memo=dict(body.get("memo") or {}),
    )
    return client._start_request(wf_type, list(body.get("input") or []),
                                 body["workflow_id"], options, body.get("task_queue"))


async def describe(call: Call) -> tuple[int, Any]:
    wf, run = call.params["workflowId"], call.params.get("runId")
    return 200, await call.client.get_handle(wf, run_id=run).describe()


async def history(call: Call) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    state = _run_state_or_404(await control.run_state(wf, run), wf, run, call.namespace)
    after: int = p["after_sequence"]
    wait = min(float(p.get("wait") or 0), call.max_wait)
    events = await control.history(wf, state.run_id, after_sequence=after, limit=p["limit"])
    if not events and wait > 0 and state.is_open:
        async def newer() -> list[HistoryEvent] | None:
            return await control.history(wf, state.run_id, after_sequence=after,
                                         limit=p["limit"]) or None

        events = await call.wait_for_change(state.run_id, newer, wait) or []
    return 200, {
        "workflow_id": wf, "run_id": state.run_id,
        "events": [event_to_wire(e) for e in events],
        "next_after_sequence": events[-1].sequence if events else after,
    }


async def result(call: Call) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    state = _run_state_or_404(await control.run_state(wf, run), wf, run, call.namespace)
    wait = min(float(p.get("wait") or 0), call.max_wait)
    if state.is_open and wait > 0:
        state = await control.await_run(wf, state.run_id, wait)
    return (202 if state.is_open else 200), state_to_wire(wf, state)


async def request_cancellation(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    requester = body.get("requester") or {"type": "http", "id": None, "label": call.role}
    accepted, record = await call.client.control.request_cancellation(
        p["workflowId"], p.get("runId"), reason=body.get("reason", "cancellation requested"),
        cleanup_timeout=float(body.get("cleanup_timeout_seconds", 30)),
        requester=requester, source=body.get("source", "http"),
    )
    return (202 if accepted else 200), {"workflow_id": p["workflowId"], "accepted": accepted,
                                        "request": record_to_wire(record)}


async def _close(call: Call, status: str) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    await control.close_run(wf, run, status=status, reason=call.body.get("reason", status))
    state = _run_state_or_404(await control.run_state(wf, run), wf, run, call.namespace)
    return 200, {"workflow_id": wf, "run_id": state.run_id, "status": state.status}


async def cancel(call: Call) -> tuple[int, Any]:
    return await _close(call, "cancelled")


async def terminate(call: Call) -> tuple[int, Any]:
    return await _close(call, "terminated")


async def cascade(call: Call) -> tuple[int, Any]:
    p = call.params
    return 200, await call.client.control.cancellation_cascade(p["workflowId"], p.get("runId"))


async def retry_after_review(call: Call) -> tuple[int, Any]:
    return 200, {"cleared": await call.client.control.clear_review(
        call.params["workflowId"], units=call.body.get("units"))}


async def reset(call: Call) -> tuple[int, Any]:
    body = call.body
    return 200, await call.client.control.reset(
        call.params["workflowId"], body.get("run_id"), to_op=body["to_op"],
        reason=body["reason"])


async def signal(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    sender = {"requester": body.get("requester") or {"type": "http", "id": None,
                                                     "label": call.role},
              "source": body.get("source") or "http"}
    await call.client.control.signal(p["workflowId"], p.get("runId"), body["name"],
                                     encode_payload(list(body.get("args") or [])),
                                     sender=sender)
    return 202, {"workflow_id": p["workflowId"], "recorded": True}


async def query(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    wait = min(float(body.get("timeout_seconds", 10)), call.max_wait)
    text_ = await call.client.control.query(p["workflowId"], p.get("runId"), body["name"],
                                            encode_payload(list(body.get("args") or [])),
                                            wait)
    return 200, {"workflow_id": p["workflowId"],
                 "result": parse_payload(text_, "the query's result")}


async def update(call: Call) -> tuple[int, Any]:
    p, body = call.params, call.body
    requested = body.get("wait_seconds")
    wait = call.max_wait if requested is None else min(float(requested), call.max_wait)
    update_id = body.get("update_id") or uuid.uuid4().hex
    sender = {"requester": body.get("requester") or {"type": "http", "id": None,
                                                     "label": call.role},
              "source": body.get("source") or "http"}
    text_ = await call.client.control.update(p["workflowId"], p.get("runId"), body["name"],
                                             encode_payload(list(body.get("args") or [])),
                                             update_id, wait, sender=sender)
    return 200, {"workflow_id": p["workflowId"], "update_id": update_id,
                 "result": parse_payload(text_, "the update's result")}


async def signal_with_start(call: Call) -> tuple[int, Any]:
    body = call.body
    client = call.client
    request = await _start_request(call)
    result = await client.control.signal_with_start(
        request, body["signal"], encode_payload(list(body.get("signal_args") or [])))
    return (201 if result.created else 200), {
        "workflow_id": body["workflow_id"], "run_id": result.run_id,
        "namespace": call.namespace, "status": result.status, "created": result.created,
    }


async def repair_pass(call: Call) -> tuple[int, Any]:
    return 200, {"counts": await call.client.control.repair_pass()}


async def health(call: Call) -> tuple[int, Any]:
    """The reference's health answer: 200 serving, or 503 degraded when storage fails."""
    try:
        await call.client.control.list_runs(status=None, workflow_type=None, limit=1,
                                            cursor=None)
        healthy = True
    except Exception:
        healthy = False
    return (200 if healthy else 503), {
        "status": "serving" if healthy else "degraded",
        "timestamp": to_iso(time.time()),
        "checks": {"database": "ok" if healthy else "unavailable"},
    }


async def cluster_info(call: Call) -> tuple[int, Any]:
    return 200, cluster_info_body(call.client)


def cluster_info_body(client: Client) -> dict[str, Any]:
    """What this server supports, in the reference's discovery shape: the
    reference client reads `worker_protocol.server_capabilities.query_tasks`
    before a query, `.cooperative_cancellation` and `worker_protocol.version`
    (>= 1.20) before a cancellation request, and
    `control_plane.request_contract.operations.update.fields.wait_for` before
    an update."""
    from .. import __version__

    return {
        "server_id": "durable",
        "engine": "durable",
        "version": __version__,
        "default_namespace": "default",
        "capabilities": {
            "signals": True, "queries": True, "updates": True, "continue_as_new": True,
            "child_workflows": True, "schedules": True, "payload_codec_envelope": True,
            "payload_codec_envelope_responses": True, "payload_codecs": [CODEC],
            "cooperative_cancellation": True, "history_export": False,
            "search_attributes": False,
        },
        "limits": {"max_payload_bytes": client.limits.payload_bytes,
                   "max_memo_bytes": client.limits.memo_bytes},
        "control_plane": {
            "version": VERSION,
            "header": VERSION_HEADER,
            "request_contract": {
                "schema": "durable-workflow.v2.control-plane-request.contract",
                "version": 1,
                "operations": {"update": {"fields": {"wait_for": {
                    "canonical_values": list(UPDATE_WAIT_STAGES)}}}},
            },
        },
        "worker_protocol": {
            "version": WORKER_PROTOCOL_VERSION,
            "server_capabilities": {"query_tasks": True, "cooperative_cancellation": True},
        },
    }


async def workflow_types(call: Call) -> tuple[int, Any]:
    return 200, {"workflow_types": sorted(await call.client.control.registered_types())}


# ---------------------------------------------------------------- the table


def _run_scoped(method: str, action: str, op_id: str, summary: str, handler: Handler, *,
                role: str = "viewer", params: tuple[Param, ...] = (),
                body: Schema | None = None, replies: tuple[Reply, ...] = (),
                long_poll: bool = False, description: str = "",
                body_required: bool = False) -> list[Operation]:
    """An action on a run, twice: on a given run, and on the workflow's current run."""
    suffix = f"/{action}" if action else ""
    return [
        Operation(method, f"/api/workflows/{{workflowId}}/runs/{{runId}}{suffix}",
                  f"{op_id}Run", f"{summary} (a given run)", handler, role,
                  params=(WORKFLOW_ID, RUN_ID, *params), body=body, replies=replies,
                  long_poll=long_poll, description=description, body_required=body_required),
        Operation(method, f"/api/workflows/{{workflowId}}{suffix}", op_id,
                  f"{summary} (the current run)", handler, role,
                  params=(WORKFLOW_ID, *params), body=body, replies=replies,
                  long_poll=long_poll, description=description, body_required=body_required),
    ]


_RUN_ACTIONS = ("describeWorkflow", "getHistory", "getResult", "requestCancellation",
                "cancelWorkflow", "terminateWorkflow", "getCancellationCascade")


def operations() -> list[Operation]:
    """Every route of the control plane (the OpenAPI document is written from these)."""
    ops = [
        Operation(
            "GET", "/api/health", "health", "Is the server up and its storage reachable",
            health, role=None, versioned=False, tags=("system",),
            replies=(Reply(200, "Serving.", HEALTH_REPLY),
                     Reply(503, "Degraded: storage is unreachable.", HEALTH_REPLY)),
        ),
        Operation(
            "GET", "/api/cluster/info", "clusterInfo",
            "What this server supports (the reference engine's discovery document)",
            cluster_info, versioned=False, tags=("system",),
            replies=(Reply(200, "Versions, capabilities and limits.", CLUSTER_INFO_REPLY),),
        ),
        Operation(
            "POST", "/api/workflows", "startWorkflow", "Start a workflow", start_workflow,
            "operator", body=START_BODY, body_required=True,
            links={
                **{f"{op_id}Run": (f"{op_id}Run", {"workflowId": "$response.body#/workflow_id",
                                                   "runId": "$response.body#/run_id"})
                   for op_id in _RUN_ACTIONS},
                **{op_id: (op_id, {"workflowId": "$response.body#/workflow_id"})
                   for op_id in (*_RUN_ACTIONS, "retryAfterReview")},
            },
            replies=(Reply(201, "Started: the ids of the new run.", START_REPLY),
                     Reply(200, "id_reuse_policy return_existing_active: the running one.",
                           START_REPLY),
                     Reply(409, "The id is taken (code already_started).", ERROR_SCHEMA)),
        ),
        Operation(
            "POST", "/api/signal-with-start", "signalWithStart",
            "Signal the workflow's open run, or start it and signal the new run",
            signal_with_start, "operator", body=SIGNAL_WITH_START_BODY, body_required=True,
            replies=(Reply(201, "Started, with the signal as its first.", START_REPLY),
                     Reply(200, "The open run was signalled.", START_REPLY),
                     Reply(409, "The id is taken by a closed run its id_reuse_policy does "
                                "not let start again (code already_started).", ERROR_SCHEMA)),
            description="One transaction: a new run's handlers see the signal before its "
                        "code starts.",
        ),
        Operation(
            "GET", "/api/workflows", "listWorkflows", "List runs, newest first",
            list_workflows,
            params=(
                Param("status", "query", {"type": "string", "enum": LISTED_STATUSES},
                      "Only runs with this status."),
                Param("workflow_type", "query", text(1000, "Only runs of this type."),
                      "Only runs of this type."),
                Param("limit", "query",
                      {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                      "Page size."),
                Param("cursor", "query", text(1000, "The next_cursor of the previous page."),
                      "The next_cursor of the previous page."),
            ),
            replies=(Reply(200, "One page of run summaries.", LIST_REPLY),),
        ),
        Operation(
            "GET", "/api/workflow-types", "listWorkflowTypes",
            "Workflow types live workers have registered", workflow_types,
            replies=(Reply(200, "The types, sorted.", {
                "type": "object", "required": ["workflow_types"],
                "properties": {"workflow_types": {"type": "array",
                                                  "items": {"type": "string"}}}}),),
        ),
        Operation(
            "POST", "/api/repair-pass", "repairPass",
            "Enforce every deadline due now, once", repair_pass, "operator",
            replies=(Reply(200, "Counts by kind of what was enforced.", {
                "type": "object", "required": ["counts"],
                "properties": {"counts": {"type": "object",
                                          "additionalProperties": {"type": "integer"}}}}),),
        ),
        Operation(
            "POST", "/api/workflows/{workflowId}/retry-after-review", "retryAfterReview",
            "Replay a run marked for review (after a code fix or a decision on units "
            "whose outcome is unknown)", retry_after_review,
            "operator", params=(WORKFLOW_ID,), body=REVIEW_BODY,
            replies=(Reply(200, "cleared is false when the run was not marked.", {
                "type": "object", "required": ["cleared"],
                "properties": {"cleared": {"type": "boolean"}}}),),
        ),
        Operation(
            "POST", "/api/workflows/{workflowId}/reset", "resetWorkflow",
            "Continue a failed or stuck run as a new run from an op, keeping the results "
            "recorded before it", reset,
            "operator", params=(WORKFLOW_ID,), body=RESET_BODY,
            replies=(Reply(200, "The new run, and the run and op it continues from.", {
                "type": "object",
                "required": ["workflow_id", "run_id", "reset_from_run_id", "to_op", "kept_ops"],
                "properties": {"workflow_id": ID_FIELD, "run_id": ID_FIELD,
                               "reset_from_run_id": ID_FIELD, "to_op": {"type": "string"},
                               "kept_ops": {"type": "integer"},
                               "reason": {"type": "string"}}}),),
        ),
    ]
    ops += _run_scoped("GET", "", "describeWorkflow", "Describe", describe,
                       replies=(Reply(200, "The instance and the run.", DESCRIBE_REPLY),))
    ops += _run_scoped(
        "GET", "history", "getHistory", "History events", history,
        params=(
            Param("after_sequence", "query",
                  {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE, "default": 0},
                  "Only events with a higher sequence number."),
            Param("limit", "query",
                  {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1000},
                  "At most this many events."),
            WAIT,
        ),
        replies=(Reply(200, "Events, oldest first (empty when a wait ran out).",
                       HISTORY_REPLY),),
        long_poll=True,
        description="With wait=N and no event after after_sequence, waits up to N seconds "
                    "for one. Pass next_after_sequence back to follow a run.",
    )
    ops += _run_scoped(
        "GET", "result", "getResult", "The outcome", result, params=(WAIT,),
        replies=(
            Reply(200, "The run is closed: result (completed), failure (failed, cancelled, "
                       "timed_out, terminated) or continued_run_id (continued).",
                  RESULT_REPLY),
            Reply(202, "The run is still open (after waiting up to wait seconds).",
                  RESULT_REPLY),
        ),
        long_poll=True,
    )
    ops += _run_scoped(
        "POST", "request-cancellation", "requestCancellation",
        "Ask the run to stop cooperatively (bounded cleanup)", request_cancellation,
        role="operator", body=CANCELLATION_BODY,
        replies=(
            Reply(202, "Accepted: the request as recorded.", CANCELLATION_REPLY),
            Reply(200, "A repeat: the original request, identity and deadline (a different "
                       "cleanup timeout never extends it).", CANCELLATION_REPLY),
            Reply(409, "run_not_current, run_already_closed or capability_unsupported "
                       "(nothing recorded).", ERROR_SCHEMA),
        ),
    )
    ops += _run_scoped("POST", "cancel", "cancelWorkflow",
                       "Close the run at once as cancelled (no cleanup)", cancel,
                       role="operator", body=REASON_BODY,
                       replies=(Reply(200, "The run's status after.", CLOSE_REPLY),))
    ops += _run_scoped("POST", "terminate", "terminateWorkflow",
                       "Close the run at once as terminated", terminate, role="operator",
                       body=REASON_BODY,
                       replies=(Reply(200, "The run's status after.", CLOSE_REPLY),))
    ops += _run_scoped(
        "POST", "signal", "signalWorkflow", "Send the run a signal", signal, role="operator",
        body=SIGNAL_BODY, body_required=True,
        replies=(Reply(202, "Recorded (SignalReceived); delivered to the workflow's handler "
                            "in order, exactly once.", SIGNAL_REPLY),
                 Reply(409, "run_already_closed (nothing recorded).", ERROR_SCHEMA)),
    )
    ops += _run_scoped(
        "POST", "query", "queryWorkflow", "Ask a query (read-only)", query, body=QUERY_BODY,
        body_required=True, long_poll=True,
        replies=(Reply(200, "The handler's answer.", QUERY_REPLY),
                 Reply(422, "query_failed: the handler raised or tried to record, no such "
                            "handler, or no worker answered in time (the message says which; "
                            "failure holds the handler's error when it raised one).",
                       ERROR_SCHEMA)),
        description="Answered by the worker that holds the run, or by a read-only replay "
                    "on a worker of its type for idle and closed runs. Viewers may query.",
    )
    ops += _run_scoped(
        "POST", "update", "updateWorkflow", "Run an update and wait for its result", update,
        role="operator", body=UPDATE_BODY, body_required=True, long_poll=True,
        replies=(Reply(200, "The handler's result (recorded: UpdateCompleted).", UPDATE_REPLY),
                 Reply(422, "update_rejected: the validator refused it, or no such handler "
                            "(nothing recorded).", ERROR_SCHEMA),
                 Reply(409, "update_failed (the handler raised, the run closed first, or the "
                            "wait ran out) or run_already_closed.", ERROR_SCHEMA)),
    )
    ops += _run_scoped("GET", "cancellation-cascade", "getCancellationCascade",
                       "What a cancellation did across the tree of runs", cascade,
                       replies=(Reply(200, "The cascade view.", CASCADE_REPLY),))
    return ops
