"""The control plane's routes, each declared once: method, path, role, parameters,
request and response schemas, and the handler.

`app.py` turns every `Operation` into a Starlette route that checks the
version header, the token's role, the namespace, the parameters and the
body against these very schemas before the handler runs; `openapi.py`
writes the OpenAPI document from the same objects. The reference contract's
workflow routes are in `workflows.py`, the schedules in `schedules.py`;
here are the framework, discovery (health, cluster info) and our extension
routes (result, cascade, review, workflow types, repair pass).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..clock import to_iso
from .avro import CODEC
from .errors import VERSION, VERSION_HEADER, HTTPError
from .model import DURABLE_STATUSES, WIRE_STATUSES
from .schema import TEXT_PATTERN, Schema, check_schema
from .wire import state_to_wire

__all__ = ["Call", "Handler", "Operation", "Param", "Reply", "Schema", "check_schema",
           "operations", "seconds", "text"]

if TYPE_CHECKING:
    from ..client import Client
    from ..control import RunState

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
    # the server's key for what it signs and takes back (`durable.http.signing`)
    signing_key: bytes
    # the namespaces the token may act in (None: every one); a route that names
    # a namespace other than the request's checks it (`system.py`)
    namespaces: frozenset[str] | None = None


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
    # what a query parameter the route does not declare is: the refusal to
    # raise, or None to let it be (None here: any such parameter is ignored)
    unknown_query: Callable[[str], Exception | None] | None = None


def check_query_names(op: Operation, names: Iterable[str]) -> None:
    """Refuse a query parameter `op` does not declare, if it refuses them
    (`Operation.unknown_query`), before any parameter is read."""
    if op.unknown_query is None:
        return
    known = {p.name for p in op.params if p.location == "query"}
    for name in names:
        refusal = None if name in known else op.unknown_query(name)
        if refusal is not None:
            raise refusal


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


#: the extension field a request sends to be checked by durable's SDK's rules
#: rather than the reference engine's (its ids, names and bounds are wider);
#: durable's remote client sends ``"rules": "durable"`` on every write
RULES = ("reference", "durable")


def rules_field(what: str) -> Schema:
    """The ``rules`` body field; `what` says what the SDK's rules widen here."""
    return {"type": "string", "enum": list(RULES), "default": "reference",
            "description": "Extension: whose rules the request is checked by: the reference "
                           f"engine's (the default) or durable's SDK's ({what}); durable's "
                           "remote client sends durable."}


def durable_rules(body: dict[str, Any] | None) -> bool:
    """True when the request asked for the SDK's rules (``rules: durable``)."""
    return bool(body) and body.get("rules") == "durable"  # type: ignore[union-attr]


def reference_refusal(field_name: str, message: str, reason: str = "validation_failed",
                      ) -> HTTPError:
    """What the reference engine answers for input it refuses: 422 naming the
    field in Laravel's shape (its client raises ``InvalidArgument``)."""
    return HTTPError(422, reason, message, field=field_name, errors={field_name: [message]})


WORKFLOW_ID = Param("workflowId", "path", text(1000, "The workflow id."), "The workflow id.",
                    required=True)
RUN_ID = Param("runId", "path", text(200, "A run id of the workflow."),
               "A run id of the workflow.", required=True)
WAIT = Param("wait", "query",
             {"type": "number", "minimum": 0, "default": 0,
              "description": "Long-poll for up to this many seconds (capped by the server's "
                             "max_wait); 0 answers at once."},
             "Long-poll for up to this many seconds (capped by the server).")
UNTIL_REVIEW = Param(
    "until_review", "query",
    {"type": "boolean", "default": False,
     "description": "With wait: answer as soon as the run is seen waiting for a person "
                    "(durable_status needs_review or unknown), not only once it closes."},
    "With wait: answer once the run waits for a person, too.")

ID_FIELD = {"type": "string"}
INSTANT = {"type": ["string", "null"], "description": "ISO 8601 with an offset"}
ANY_OBJECT: Schema = {"type": "object"}

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

ERROR_SCHEMA: Schema = {
    "type": "object",
    "required": ["message", "reason"],
    "description": "The reference engine's flat error body; 422 adds errors {field: [...]}.",
    "properties": {"message": {"type": "string"}, "reason": {"type": "string"},
                   "errors": {"type": "object",
                              "additionalProperties": {"type": "array",
                                                       "items": {"type": "string"}}}},
}
RESULT_REPLY: Schema = {
    "type": "object", "required": ["workflow_id", "run_id", "status", "durable_status"],
    "properties": {
        "workflow_id": ID_FIELD, "run_id": ID_FIELD,
        "status": {"type": "string", "enum": list(WIRE_STATUSES)},
        "durable_status": {"type": "string", "enum": list(DURABLE_STATUSES)},
        "result": {"description": "The workflow's return value (completed)."},
        "result_envelope": {"type": ["object", "null"]},
        "failure": {"type": "object", "description": "What ended the run (failed, cancelled, "
                                                     "timed_out, terminated)."},
        "continued_run_id": {"type": ["string", "null"]},
    },
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


async def _run_state_or_404(call: Call, workflow_id: str, run_id: str | None) -> RunState:
    state = await call.client.control.run_state(workflow_id, run_id)
    if state is None:
        raise await call.client.control.not_found(workflow_id, run_id)
    return state


# ---------------------------------------------------------------- handlers


async def result(call: Call) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p.get("runId")
    control = call.client.control
    state = await _run_state_or_404(call, wf, run)
    wait = min(float(p.get("wait") or 0), call.max_wait)
    until_review = bool(p.get("until_review"))
    if state.is_open and wait > 0 and not (until_review and state.in_review):
        state = await control.await_run(wf, state.run_id, wait, until_review=until_review)
    return (202 if state.is_open else 200), state_to_wire(wf, state)


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


async def repair_pass(call: Call) -> tuple[int, Any]:
    return 200, {"counts": await call.client.control.repair_pass()}


async def overdue(call: Call) -> tuple[int, Any]:
    return 200, await call.client.control.overdue()


#: the shape of `durable.store.deadlines.overdue`
OVERDUE: Schema = {
    "type": "object",
    "required": ["runs", "activity_attempts", "run_ids", "attempt_ids", "oldest_due_at",
                 "oldest_overdue_seconds", "scan_limit", "scan_pressure"],
    "properties": {
        "runs": {"type": "object", "additionalProperties": {"type": "integer"},
                 "description": "Open runs past a deadline, by kind."},
        "activity_attempts": {"type": "object", "additionalProperties": {"type": "integer"},
                              "description": "Open activity attempts past one, by kind."},
        "run_ids": {"type": "array", "items": {"type": "string"}},
        "attempt_ids": {"type": "array", "items": {"type": "string"}},
        "oldest_due_at": {"type": ["string", "null"]},
        "oldest_overdue_seconds": {"type": ["number", "null"]},
        "scan_limit": {"type": "integer"},
        "scan_pressure": {"type": "boolean"},
    },
}


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
            "cooperative_cancellation": True, "history_export": True,
            # no search attributes, and no worker plane: workers run against
            # storage, never poll this server for tasks (`durable.http.fleet`)
            "search_attributes": False, "workflow_tasks": False, "activity_tasks": False,
            "history_retention": True,
            # a queue's builds are shown (GET /api/task-queues/{q}/build-ids), not
            # drained or promoted: stopping a build's workers does that here
            "build_id_rollouts": True, "build_id_rollout_control": False,
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
            "GET", "/api/deadlines/overdue", "overdueDeadlines",
            "Deadlines passed and not enforced yet", overdue,
            replies=(Reply(200, "Counts by kind, ids (oldest first), how late the oldest is.",
                           OVERDUE),),
            description="Read only: what a repair pass would enforce now. Every worker's "
                        "watchdog enforces a deadline as it falls due, so counts that stay, "
                        "or an oldest one seconds late, mean no watchdog runs in the "
                        "namespace."),
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
    ops += _run_scoped(
        "GET", "result", "getResult", "The outcome", result, params=(WAIT, UNTIL_REVIEW),
        replies=(
            Reply(200, "The run is closed: result (completed), failure (failed, cancelled, "
                       "timed_out, terminated) or continued_run_id (continued).",
                  RESULT_REPLY),
            Reply(202, "The run is still open (after waiting up to wait seconds).",
                  RESULT_REPLY),
        ),
        long_poll=True,
    )
    ops += _run_scoped("GET", "cancellation-cascade", "getCancellationCascade",
                       "What a cancellation did across the tree of runs", cascade,
                       replies=(Reply(200, "The cascade view.", CASCADE_REPLY),))
    return ops
