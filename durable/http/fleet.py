"""Reference routes for workers and search attributes: what maps onto our engine,
and an honest refusal for what does not.

- ``DELETE /api/workers/{workerId}`` (admin) deletes the record of a worker
  that is gone (stopped, or its lease expired): `durable.store.workers`
  keeps it an hour for ``durable workers`` and ``/api/workers``. A live
  worker's record is kept (409 ``worker_alive``): it writes it again at its
  next renewal, so deleting it would only hide the worker, and the names it
  serves, for a while.
- The reference's worker plane (``POST /api/worker/register``,
  ``/api/worker/heartbeat``) is for workers that poll the server for tasks
  over HTTP. Our workers run in their own processes against storage, and
  nothing here would hand a task to an HTTP worker: recording one would list
  a worker that runs nothing and make its types look served (a start of
  such a type would wait forever). Both answer 409 ``capability_unsupported``
  and cluster info says ``workflow_tasks: false, activity_tasks: false``.
- A run's archive, repair and redrive (``POST /api/workflows/{id}/archive``,
  ``.../repair``, ``.../runs/{run}/redrive``) are the reference's answers to
  problems this engine solves otherwise: no archive tier (retention deletes
  closed runs; export a history to keep it), no task to lose (a run's state
  is in storage and any worker of its queue claims it), and a failed run
  continues after a fix through ``reset``. Each is 409
  ``capability_unsupported`` naming what to do here; so are its standalone
  activities (``/api/activities``): an activity runs inside a workflow here.
- Search attributes: the engine stores none and cannot filter runs by
  them (its list filters are the workflow type, the status and an id
  substring). ``GET /api/search-attributes`` lists none (``supported:
  false``); registering or removing one is 409 ``capability_unsupported``;
  cluster info says ``search_attributes: false``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import HTTPError
from .routes import (
    ERROR_SCHEMA,
    RUN_ID,
    WORKFLOW_ID,
    Call,
    Handler,
    Operation,
    Param,
    Reply,
    Schema,
    check_schema,
    text,
)

WORKER_ID = Param("workerId", "path", text(300, "The worker id."), "The worker id.",
                  required=True)
ACTIVITY_ID = Param("activityId", "path", text(300, "The activity id."), "The activity id.",
                    required=True)
ATTRIBUTE = Param("name", "path", text(128, "The attribute's name."), "The attribute's name.",
                  required=True)
#: the reference's search attribute types (what its create route takes)
ATTRIBUTE_TYPES = ("keyword", "text", "int", "double", "bool", "datetime", "keyword_list")
ATTRIBUTE_BODY = check_schema({
    "type": "object", "required": ["name", "type"], "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-zA-Z][a-zA-Z0-9_]{0,127}$"},
        "type": {"type": "string", "enum": list(ATTRIBUTE_TYPES)},
    },
})
WORKER_PLANE_BODY = check_schema({"type": "object", "description":
                                  "The reference's worker registration or heartbeat (ignored)."})
WORKER_PLANE_BODY_ANY = check_schema({"type": "object",
                                      "description": "The reference's command body (ignored)."})
ATTRIBUTE_LIST: Schema = {
    "type": "object", "required": ["system_attributes", "custom_attributes", "supported"],
    "properties": {
        "system_attributes": {"type": "object", "maxProperties": 0},
        "custom_attributes": {"type": "object", "maxProperties": 0},
        "supported": {"type": "boolean", "enum": [False]},
        "message": {"type": "string"},
    },
}
_UNSUPPORTED = Reply(409, "capability_unsupported: this engine does not have it.",
                     ERROR_SCHEMA)
_NO_ATTRIBUTES = ("this server stores no search attributes and cannot filter runs by them "
                  "(capabilities.search_attributes is false in GET /api/cluster/info); list "
                  "runs by workflow_type, status or an id substring (query), and keep "
                  "descriptive facts in the memo")


def _unsupported(capability: str, message: str) -> NoReturn:
    raise HTTPError(409, "capability_unsupported", message, capability=capability,
                    discovery_path=f"capabilities.{capability}", supported=False)


async def list_search_attributes(call: Call) -> tuple[int, Any]:
    return 200, {"system_attributes": {}, "custom_attributes": {}, "supported": False,
                 "message": _NO_ATTRIBUTES}


async def create_search_attribute(call: Call) -> tuple[int, Any]:
    _unsupported("search_attributes",
                 f"cannot register search attribute {call.body['name']!r}: {_NO_ATTRIBUTES}")


async def delete_search_attribute(call: Call) -> tuple[int, Any]:
    _unsupported("search_attributes",
                 f"cannot remove search attribute {call.params['name']!r}: {_NO_ATTRIBUTES}")


async def worker_plane(call: Call) -> tuple[int, Any]:
    _unsupported("workflow_tasks",
                 "this server has no worker plane: it hands no tasks to workers over HTTP "
                 "(capabilities.workflow_tasks and activity_tasks are false in GET "
                 "/api/cluster/info). Run a durable.Worker against the same storage instead: "
                 "it registers itself, and /api/workers lists it")


#: the reference's run commands with no counterpart: (path suffix, operation id,
#: summary, capability, what to do here instead)
RUN_COMMANDS = (
    ("/api/workflows/{workflowId}/archive", "archiveWorkflow",
     "Move a closed run to an archive tier", "archive",
     "this server has no archive tier: a closed run is kept until the namespace's retention "
     "deletes it (GET/PUT /api/system/retention); to keep a run's record past that, export "
     "its history (GET /api/workflows/{id}/runs/{run}/history/export)"),
    ("/api/workflows/{workflowId}/repair", "repairWorkflow",
     "Repair a stalled workflow", "workflow_repair",
     "a run has no task here to lose or recreate: its state is in storage and any live worker "
     "of its queue claims it. GET /api/workflows/{id} says what it waits for (waiting_for: a "
     "worker, a build, a queue slot) and POST /api/system/repair/pass enforces the deadlines "
     "due when no worker runs"),
    ("/api/workflows/{workflowId}/runs/{runId}/redrive", "redriveWorkflowRun",
     "Continue a failed run, reusing its completed activity results", "redrive",
     "continue a failed run after a fix with POST /api/workflows/{id}/reset "
     "{\"to_op\": ..., \"reason\": ...}: the new run keeps the ops recorded before to_op, "
     "their results included, and runs the rest with today's code (docs/deploying.md)"),
)


#: the reference's standalone activities (an activity run on its own, outside
#: any workflow): (method, path, operation id, summary)
STANDALONE_ACTIVITIES = (
    ("POST", "/api/activities", "startActivity", "Start an activity outside a workflow"),
    ("GET", "/api/activities", "listActivities", "List activities run outside workflows"),
    ("GET", "/api/activities/{activityId}", "describeActivity",
     "Describe an activity run outside a workflow"),
)
_NO_STANDALONE = (
    "this server runs activities only inside workflows: start a workflow whose one step "
    "calls the activity (workflow.execute_activity), and read its result, failure and "
    "history through that workflow's routes")


async def standalone_activity(call: Call) -> tuple[int, Any]:
    _unsupported("standalone_activities", _NO_STANDALONE)


def refuse_run_command(capability: str, message: str) -> Handler:
    """The handler of one of `RUN_COMMANDS`: refused, naming what to do here."""
    async def refuse(call: Call) -> tuple[int, Any]:
        _unsupported(capability, f"cannot {capability.split('_')[-1]} workflow "
                                 f"{call.params['workflowId']!r}: " + message)
    return refuse


async def forget_worker(call: Call) -> tuple[int, Any]:
    worker_id = call.params["workerId"]
    outcome = await call.client.store.forget_worker(call.namespace, worker_id,
                                                    call.client.clock.now())
    if outcome == "missing":
        return 404, {"message": f"Worker [{worker_id}] not found in namespace "
                                f"[{call.namespace}].", "reason": "worker_not_found"}
    if outcome == "alive":
        raise HTTPError(409, "worker_alive",
                        f"worker {worker_id!r} is alive: it writes its record again at its "
                        "next renewal, so it is kept; stop the worker first (its record is "
                        "then deleted after an hour, or here)", worker_id=worker_id)
    return 200, {"worker_id": worker_id, "outcome": "deregistered"}


def fleet_operations() -> list[Operation]:
    """Worker deregistration, the worker plane and search attributes."""
    attributes, workers = ("search-attributes",), ("workers",)
    return [
        Operation(
            "GET", "/api/search-attributes", "listSearchAttributes",
            "Search attributes (none: this engine cannot filter runs by them)",
            list_search_attributes, tags=attributes,
            replies=(Reply(200, "No attributes, supported: false.", ATTRIBUTE_LIST),)),
        Operation(
            "POST", "/api/search-attributes", "createSearchAttribute",
            "Register a custom search attribute (not supported here)",
            create_search_attribute, "operator", tags=attributes, body=ATTRIBUTE_BODY,
            body_required=True, replies=(_UNSUPPORTED,)),
        Operation(
            "DELETE", "/api/search-attributes/{name}", "deleteSearchAttribute",
            "Remove a custom search attribute (not supported here)",
            delete_search_attribute, "operator", tags=attributes, params=(ATTRIBUTE,),
            replies=(_UNSUPPORTED,)),
        Operation(
            "DELETE", "/api/workers/{workerId}", "deregisterWorker",
            "Delete the record of a worker that is gone", forget_worker, "admin",
            tags=workers, params=(WORKER_ID,),
            replies=(Reply(200, "{worker_id, outcome: deregistered}", {
                "type": "object", "required": ["worker_id", "outcome"],
                "properties": {"worker_id": {"type": "string"},
                               "outcome": {"type": "string", "enum": ["deregistered"]}}}),
                     Reply(404, "worker_not_found.", ERROR_SCHEMA),
                     Reply(409, "worker_alive: a live worker's record is kept.",
                           ERROR_SCHEMA))),
        *(Operation(
            "POST", path, op_id, f"The reference's: {summary} (not supported here)",
            refuse_run_command(capability, message), "operator",
            params=(WORKFLOW_ID, *((RUN_ID,) if "{runId}" in path else ())),
            body=WORKER_PLANE_BODY_ANY, replies=(_UNSUPPORTED,))
          for path, op_id, summary, capability, message in RUN_COMMANDS),
        *(Operation(
            method, path, op_id, f"The reference's: {summary} (not supported here)",
            standalone_activity, "operator" if method == "POST" else "viewer",
            params=(ACTIVITY_ID,) if "{activityId}" in path else (),
            body=WORKER_PLANE_BODY_ANY if method == "POST" else None,
            replies=(_UNSUPPORTED,))
          for method, path, op_id, summary in STANDALONE_ACTIVITIES),
        *(Operation(
            "POST", f"/api/worker/{action}", f"worker{action.title()}",
            f"The reference's worker-plane {action} (not supported here)", worker_plane,
            "operator", versioned=False, tags=workers, body=WORKER_PLANE_BODY,
            replies=(_UNSUPPORTED,),
            description="Sent with X-Durable-Workflow-Protocol-Version by the reference's "
                        "workers; this server hands no tasks to workers over HTTP.")
          for action in ("register", "heartbeat")),
    ]
