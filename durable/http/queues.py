"""The control plane's worker and task-queue routes, in the reference engine's shape.

``GET /api/workers[/{workerId}]`` (the reference's WorkerManagementController:
``{workers: [...], stale_after_seconds}``, each worker with ``worker_id,
namespace, task_queue, runtime, build_id, supported_workflow_types,
supported_activity_types, status, last_heartbeat_at, registered_at, ...``)
and ``GET /api/task-queues[/{taskQueue}]`` (its TaskQueueController:
``{namespace, task_queues: [{name, stats, ...}]}``, one queue with its
``pollers``), with our own fields beside theirs: each worker's identity,
host, pid, definitions and what it holds; each queue's ``limits``, runs and
activities running and waiting, and rate left. ``PUT
/api/task-queues/{taskQueue}/limits`` (operator) sets the limits. Each
handler is one call of the client's queue API (`durable._queues`).
"""

from __future__ import annotations

from typing import Any

from .._builds import registration_span
from .._queues import QueueLimits
from ..clock import to_iso
from .errors import HTTPError
from .routes import ANY_OBJECT, ERROR_SCHEMA, Call, Handler, Operation, Param, Reply, text
from .schema import check_schema

RUNTIME = "python"
WORKER_ID = Param("workerId", "path", text(300, "The worker id."), "The worker id.",
                  required=True)
TASK_QUEUE = Param("taskQueue", "path", text(1000, "The task queue."), "The task queue.",
                   required=True)
_COUNT = {"type": ["integer", "null"], "minimum": 1}
_RATE = {"type": ["object", "null"], "additionalProperties": False, "required": ["count"],
         "properties": {"count": {"type": "integer", "minimum": 1},
                        "per": {"type": "number", "exclusiveMinimum": 0,
                                "description": "Seconds (default 1)."}}}
LIMITS_BODY = check_schema({
    "type": "object", "additionalProperties": False,
    "description": "The queue's limits; each one left out (or null) is no limit.",
    "properties": {
        "max_running": _COUNT, "max_running_activities": _COUNT, "max_running_per_key": _COUNT,
        "rate": _RATE, "activity_rate": _RATE,
    },
})

BUILD_BODY = check_schema({
    "type": "object", "required": ["build_id"], "additionalProperties": False,
    "properties": {"build_id": {"type": ["string", "null"], "maxLength": 255}},
})


def worker_summary(worker: dict[str, Any]) -> dict[str, Any]:
    """A worker as the reference lists it, with ours beside."""
    [queue] = worker["task_queues"]
    status = "active" if worker["alive"] else ("stopped" if worker["stopped_at"] else "stale")
    return {
        "worker_id": worker["worker_id"],
        "namespace": worker.get("namespace"),
        "task_queue": queue,
        "runtime": RUNTIME,
        "sdk_version": None,
        "build_id": worker["build_id"],
        "supported_workflow_types": worker["workflows"],
        "workflow_definition_fingerprints": {
            name: d.get("fingerprint")
            for name, d in (worker["definitions"].get("workflows") or {}).items()},
        "supported_activity_types": worker["activities"],
        "capabilities": worker["capabilities"],
        "process_metrics": {"process_id": worker["pid"], "host": worker["host"]},
        "heartbeat_interval_seconds": None,
        "status": status,
        "last_heartbeat_at": worker["last_seen_at"],
        "registered_at": worker["started_at"],
        # ours
        "identity": worker["identity"],
        "host": worker["host"],
        "pid": worker["pid"],
        "alive": worker["alive"],
        "definitions": worker["definitions"],
        "heartbeat_expires_at": worker["expires_at"],
        "stopped_at": worker["stopped_at"],
        "runs_held": worker["runs_held"],
        "activities_held": worker["activities_held"],
        # how often something blocked its event loop, and the last time (None: never)
        "loop_blocked": worker.get("loop_blocked"),
        # the runs it put down under pressure: {count, recent, window_seconds,
        # last_at, failed} as of its last renewal (None: none)
        "runs_released": worker.get("runs_released"),
    }


async def _workers(call: Call) -> list[dict[str, Any]]:
    found = await call.client.list_workers()
    return [worker_summary({**w, "namespace": call.namespace}) for w in found]


async def list_workers(call: Call) -> tuple[int, Any]:
    workers = await _workers(call)
    queue, status = call.params.get("task_queue"), call.params.get("status")
    if queue:
        workers = [w for w in workers if w["task_queue"] == queue]
    # the reference lists live workers unless asked for a status
    workers = [w for w in workers if (w["status"] == status if status else w["alive"])]
    stale = [s for w in workers if w["alive"] and (s := registration_span(
        w["last_heartbeat_at"], w["heartbeat_expires_at"])) is not None]
    return 200, {"workers": workers, "stale_after_seconds": max(stale) if stale else None}


async def describe_worker(call: Call) -> tuple[int, Any]:
    worker_id = call.params["workerId"]
    for worker in await _workers(call):
        if worker["worker_id"] == worker_id:
            return 200, worker
    return 404, {"message": f"Worker [{worker_id}] not found in namespace [{call.namespace}].",
                 "reason": "worker_not_found"}


def queue_summary(queue: dict[str, Any], pollers: list[dict[str, Any]]) -> dict[str, Any]:
    """A queue as the reference shows it (``name, stats``), with ours beside."""
    runs, acts = queue["runs"], queue["activities"]
    ages = [a for a in (runs["oldest_waiting_seconds"], acts["oldest_waiting_seconds"])
            if a is not None]
    age = int(max(ages)) if ages else None
    return {
        "name": queue["name"],
        "namespace": queue["namespace"],
        "stats": {
            "approximate_backlog_count": runs["waiting"] + acts["waiting"],
            "approximate_backlog_age_seconds": age,
            "workflow_tasks": {"ready_count": runs["waiting"], "leased_count": runs["running"]},
            "activity_tasks": {"ready_count": acts["waiting"], "leased_count": acts["running"]},
            "pollers": {"active_count": sum(1 for p in pollers if p["alive"]),
                        "stale_count": sum(1 for p in pollers if not p["alive"])},
        },
        "limits": queue["limits"],
        "runs": runs,
        "activities": acts,
        "workers": queue["workers"],
        "updated_at": queue["updated_at"],
        "idle": queue["idle"],
        **({"queues_in_use": queue["queues_in_use"]} if "queues_in_use" in queue else {}),
    }


def _poller(worker: dict[str, Any]) -> dict[str, Any]:
    return {
        "worker_id": worker["worker_id"], "runtime": RUNTIME, "sdk_version": None,
        "build_id": worker["build_id"], "last_heartbeat_at": worker["last_heartbeat_at"],
        "heartbeat_expires_at": worker["heartbeat_expires_at"], "status": worker["status"],
        "is_stale": not worker["alive"], "alive": worker["alive"],
        "supported_workflow_types": worker["supported_workflow_types"],
        "supported_activity_types": worker["supported_activity_types"],
        "identity": worker["identity"], "host": worker["host"], "pid": worker["pid"],
        "runs_held": worker["runs_held"],
    }


async def list_task_queues(call: Call) -> tuple[int, Any]:
    workers = await _workers(call)
    queues = await call.client.list_queues()
    return 200, {"namespace": call.namespace, "task_queues": [
        queue_summary(q, [w for w in workers if w["task_queue"] == q["name"]]) for q in queues]}


async def describe_task_queue(call: Call) -> tuple[int, Any]:
    name = call.params["taskQueue"]
    pollers = [_poller(w) for w in await _workers(call) if w["task_queue"] == name]
    described = await call.client.describe_queue(name)
    queue = queue_summary(described, pollers)
    # the leases held now (it said [] whatever was held: "nothing leased")
    return 200, {**queue, "pollers": pollers, "current_leases": described.get("leases", []),
                 "repair": {}}


async def set_task_queue_limits(call: Call) -> tuple[int, Any]:
    name = call.params["taskQueue"]
    await call.client.set_queue_limits(name, QueueLimits.from_dict(
        {k: (v if k not in ("rate", "activity_rate") or v is None
             else {"count": v["count"], "per": v.get("per", 1.0)})
         for k, v in call.body.items()}))
    described = await call.client.describe_queue(name)
    return 200, {"name": name, "namespace": call.namespace, "outcome": "updated",
                 "limits": described["limits"], "updated_at": described["updated_at"] or
                 to_iso(call.client.clock.now())}


async def task_queue_builds(call: Call) -> tuple[int, Any]:
    return 200, await call.client.queue_builds(call.params["taskQueue"])


#: why the reference's drain, promote and resume of a build are refused
_NO_ROLLOUT_STEERING = (
    "this server does not drain, promote or resume builds: take a build out by stopping "
    "its workers (they hand their runs back at once), and each open run moves to a "
    "build whose code replays it (the upgrade gate, docs/deploying.md); GET "
    "/api/task-queues/{queue}/build-ids shows each build's workers and the open runs "
    "only it can continue")


def _cohort_name(build_id: str | None) -> str:
    return "the workers without a build id" if build_id is None else f"build {build_id!r}"


def steer_build(action: str) -> Handler:
    """The handler of the reference's `action` (drain, promote, resume) of a
    build: refused, saying what does that here."""
    async def refuse(call: Call) -> tuple[int, Any]:
        raise HTTPError(
            409, "capability_unsupported",
            f"cannot {action} {_cohort_name(call.body.get('build_id'))} of task queue "
            f"{call.params['taskQueue']!r}: "
            + _NO_ROLLOUT_STEERING.replace("{queue}", call.params["taskQueue"]),
            capability="build_id_rollout_control",
            discovery_path="capabilities.build_id_rollout_control", supported=False)
    return refuse


def queue_operations() -> list[Operation]:
    """The worker and task-queue routes (appended to `routes.operations()`)."""
    workers, queues = ("workers",), ("task-queues",)
    return [
        Operation(
            "GET", "/api/workers", "listWorkers", "List the namespace's workers",
            list_workers, tags=workers,
            params=(
                Param("task_queue", "query", text(1000, "Only this queue's."),
                      "Only the workers of this task queue."),
                Param("status", "query", {"type": "string",
                                          "enum": ["active", "stale", "stopped"]},
                      "Workers with this status (default: the live ones)."),
            ),
            replies=(Reply(200, "{workers, stale_after_seconds}.", ANY_OBJECT),),
            description="Who serves the namespace: each worker's queue, build, the types "
                        "it serves (with a fingerprint of each definition), last heartbeat, "
                        "and ours: identity, host, pid, alive, runs and attempts it holds."),
        Operation(
            "GET", "/api/workers/{workerId}", "describeWorker", "Describe one worker",
            describe_worker, tags=workers, params=(WORKER_ID,),
            replies=(Reply(200, "The worker.", ANY_OBJECT),
                     Reply(404, "worker_not_found.", ERROR_SCHEMA))),
        Operation(
            "GET", "/api/task-queues", "listTaskQueues", "List the namespace's task queues",
            list_task_queues, tags=queues,
            replies=(Reply(200, "{namespace, task_queues: [{name, stats, limits, ...}]}.",
                           ANY_OBJECT),),
            description="Every queue that has limits, a live worker, or open work: "
                        "backlog, running, pollers, and our limits and rate left."),
        Operation(
            "GET", "/api/task-queues/{taskQueue}", "describeTaskQueue",
            "Describe one task queue", describe_task_queue, tags=queues,
            params=(TASK_QUEUE,),
            replies=(Reply(200, "{name, stats, pollers, limits, runs, activities, "
                                "current_leases: [{kind: workflow|activity, workflow_id, "
                                "run_id, worker_id, lease_expires_at, (task_id, "
                                "activity_type, attempt)}] (the first 100 of each kind), "
                                "...}.", ANY_OBJECT),)),
        Operation(
            "GET", "/api/task-queues/{taskQueue}/build-ids", "listTaskQueueBuildIds",
            "The queue's builds during a deploy", task_queue_builds, tags=queues,
            params=(TASK_QUEUE,),
            replies=(Reply(200, "{namespace, task_queue, stale_after_seconds, build_ids: "
                                "[{build_id, rollout_status, worker counts, ..., open_runs, "
                                "refused_elsewhere, blocked_runs}]}.", ANY_OBJECT),),
            description="One entry per build id (null: workers without one): its live and "
                        "stale workers, the definitions they register, and ours: the open "
                        "runs it last advanced, how many of those other builds refused "
                        "(only it, or a patched build, continues them), and the open runs "
                        "it refused. A build no live worker runs is listed while open runs "
                        "name it (docs/deploying.md)."),
        *(Operation(
            "POST", f"/api/task-queues/{{taskQueue}}/build-ids/{action}",
            f"{action}TaskQueueBuildId", f"The reference's {action} of a build (not supported "
            "here)", steer_build(action), "operator", tags=queues, params=(TASK_QUEUE,),
            body=BUILD_BODY, body_required=True,
            replies=(Reply(409, "capability_unsupported: stop a build's workers instead.",
                           ERROR_SCHEMA),))
          for action in ("drain", "promote", "resume")),
        Operation(
            "PUT", "/api/task-queues/{taskQueue}/limits", "setTaskQueueLimits",
            "Set how much of a task queue may run at once", set_task_queue_limits,
            role="operator", tags=queues, params=(TASK_QUEUE,), body=LIMITS_BODY,
            body_required=True,
            replies=(Reply(200, "{name, namespace, outcome, limits, updated_at}.",
                           ANY_OBJECT),),
            description="Replaces the queue's limits (docs/queues.md); workers hold to them "
                        "from their next claim."),
    ]
