"""The wire model: every shape `/api` answers with, written once (no web framework).

`/api` speaks the reference engine's control-plane contract (version 2):
its run description, run summary, history event, pages and statuses, so
the reference engine's own client reads our answers. Everything we know
beyond the reference is an *extra* field, never a changed meaning of one
of its fields; the extras carry what our Python API needs to rebuild its
own dictionaries (`describe_from_wire`, `summary_from_wire`,
`event_from_wire`), so the remote client, the CLI and the web UI read the
same wire and show what an embedded client shows.

Statuses: the wire's ``status`` is the reference's word (`WIRE_STATUSES`);
ours (`durable.RunStatus`, plus ``needs_review`` and ``unknown`` for open runs
marked for review) travels as the extra ``durable_status``. A timed-out run
is ``failed`` with ``closed_reason: "timed_out"`` (our ``timeout_kind`` says
which deadline), a continued one ``completed`` with ``closed_reason:
"continued"``.

Payloads travel twice, as the reference does: the plain JSON value
(``input``, ``output``, ``result``) and its Avro envelope (``input_envelope``,
``output_envelope``, ``result_envelope``; `durable.http.avro`).

The JSON Schemas at the end are what the OpenAPI document publishes.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import _statuses
from .._statuses import REFERENCE_STATUSES
from ..present import holder, wait_of
from ..present_ops import OWNER_STATES, owner_presence, owner_record
from ..store.records import LISTED_STATUSES, HistoryEvent
from . import avro

if TYPE_CHECKING:
    from ..control import ControlPlane, Page

# ---------------------------------------------------------------- statuses

#: our statuses (`durable.RunStatus`) and the two `describe()`/`list` derive for
#: open runs marked for review; the one list every layer reads
DURABLE_STATUSES = LISTED_STATUSES
#: the reference engine's run statuses, and its list filter's buckets; ours in
#: its words is one mapping, `durable._statuses` (rows and filters read it)
WIRE_STATUSES = REFERENCE_STATUSES
BUCKETS = _statuses.BUCKETS
BUCKET_MEMBERS = _statuses.BUCKET_MEMBERS
#: the most runs a page of ``GET /api/workflows`` holds (the reference's
#: ``page_size`` bound); durable's own clients ask for more in pages of it
LIST_PAGE_MAX = 200
OPEN_DURABLE = _statuses.OPEN
wire_status = _statuses.reference_status
status_bucket = _statuses.status_bucket


def wire_closed_reason(status: str, closed_reason: str | None) -> str | None:
    """The reference's closed reason: ``timed_out`` for every deadline."""
    if status == "timed_out":
        return "timed_out"
    if status == "continued":
        return "continued"
    return closed_reason


def status_fields(status: str, closed_reason: str | None) -> dict[str, Any]:
    """The status fields every run shape carries, for one of our statuses."""
    fields: dict[str, Any] = {
        "status": wire_status(status),
        "status_bucket": status_bucket(status),
        "is_terminal": _statuses.is_terminal(status),
        "closed_reason": wire_closed_reason(status, closed_reason),
        "durable_status": status,
        "durable_closed_reason": closed_reason,
    }
    if status == "timed_out":
        fields["timeout_kind"] = closed_reason
    return fields


# ---------------------------------------------------------------- payloads


def payload_pair(value: Any) -> tuple[Any, dict[str, str] | None]:
    """(plain value, envelope); the envelope is None for a value the ``Value``
    schema cannot hold (an integer beyond 64 bits): the plain value still says it."""
    try:
        return value, avro.envelope(value)
    except avro.PayloadCodecError:
        return value, None


def payload_in(value: Any, where: str) -> list[Any]:
    """Arguments as sent: an Avro envelope holding the list, a plain JSON list
    (curl), or nothing. Raises `avro.PayloadCodecError` naming `where`."""
    if value is None:
        return []
    if avro.is_envelope(value):
        value = avro.from_envelope(value, where)
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    # the reference sends one value for a single argument in some places
    return [value]


# ---------------------------------------------------------------- page tokens


def encode_token(value: int) -> str:
    """The reference's page token: base64 of a decimal number."""
    return base64.b64encode(str(int(value)).encode()).decode("ascii")


def decode_token(token: str | None) -> int | None:
    """A page token's number, or None for no token; ValueError for a token
    that is not one (the route answers 400 naming it)."""
    if token is None or not token.strip():
        return None
    try:
        text = base64.b64decode(token, validate=True).decode("ascii")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("not a page token this server gave") from None
    if not text.isdigit() or len(text) > 18:
        raise ValueError("not a page token this server gave")
    return int(text)


# ---------------------------------------------------------------- run description


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime.datetime) else value


#: keys the wire's description adds to describe()'s from the worker records
WIRE_ONLY = ("holder", "owner_presence")


def describe_to_wire(info: dict[str, Any], input_value: Any = None,
                     output_value: Any = None, *, has_output: bool = False) -> dict[str, Any]:
    """`WorkflowHandle.describe()` as the reference's run description: its flat
    fields first, then every key of ours the reference does not have."""
    run = info.get("run") or {}
    status = str(info.get("status") or run.get("status") or "unknown")
    plain_in, env_in = payload_pair(input_value)
    plain_out, env_out = payload_pair(output_value) if has_output else (None, None)
    is_current = run.get("continued_run_id") is None
    wait_kind, wait_reason = wait_of(info.get("waiting_for"), info.get("holder"))
    body: dict[str, Any] = {
        "workflow_id": info.get("workflow_id"),
        "run_id": run.get("run_id"),
        "namespace": info.get("namespace"),
        "workflow_type": info.get("workflow_type"),
        "business_key": None,
        **status_fields(status, info.get("closed_reason")),
        "task_queue": run.get("task_queue"),
        "run_number": run.get("run_number"),
        "run_count": info.get("run_count"),
        "is_current_run": is_current,
        "compatibility": run.get("started_build"),
        "payload_codec": avro.CODEC,
        "execution_timeout_seconds": info.get("execution_timeout_seconds"),
        "run_timeout_seconds": run.get("run_timeout_seconds"),
        "execution_deadline_at": _iso(run.get("execution_deadline_at")),
        "run_deadline_at": _iso(run.get("run_deadline_at")),
        "input": plain_in,
        "output": plain_out,
        "input_envelope": env_in,
        "output_envelope": env_out,
        "started_at": _iso(run.get("started_at")),
        "closed_at": _iso(run.get("closed_at")),
        "last_progress_at": None,
        "wait_kind": wait_kind,
        "wait_reason": wait_reason,
        "memo": info.get("memo") or {},
        "search_attributes": {},
        "actions": _actions(status),
    }
    for key, value in info.items():
        if key not in body:
            body[key] = value
    body["durable_memo"] = info.get("memo")
    # the keys of our describe(), so a remote client rebuilds exactly that dictionary
    # (``holder`` and ``owner_presence``, when the caller named them, are the
    # wire's alone: not describe()'s)
    body["durable_keys"] = [key for key in info if key not in WIRE_ONLY]
    return body


def _actions(status: str) -> dict[str, bool]:
    open_ = status in OPEN_DURABLE
    return {"can_signal": open_, "can_query": True, "can_update": open_,
            "can_cancel": open_, "can_terminate": open_, "can_repair": False,
            "can_archive": False}


#: keys of our describe() that the wire's flat fields replace
_OURS_REPLACED = ("status", "closed_reason", "memo")


def describe_from_wire(body: dict[str, Any]) -> dict[str, Any]:
    """The wire's run description back to `WorkflowHandle.describe()`'s dictionary."""
    keys = body.get("durable_keys")
    out = {key: body.get(key) for key in keys} if isinstance(keys, list) else dict(body)
    out["status"] = body.get("durable_status", body.get("status"))
    out["closed_reason"] = body.get("durable_closed_reason", body.get("closed_reason"))
    out["memo"] = body.get("durable_memo")
    return out


def parse_payload(text: str | None, what: str) -> Any:
    """A stored payload as a JSON value (the wire carries values, not text)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f"{what} is not JSON text; the HTTP control plane carries JSON payloads, so "
            "clients and workers must use a JSON payload converter"
        ) from exc


async def read_run_description(
        control: ControlPlane, workflow_id: str, run_id: str | None,
        list_workers: Callable[[], Awaitable[Sequence[Mapping[str, Any]]]] | None = None,
) -> dict[str, Any] | None:
    """A run's description as the wire carries it (its input and, once
    completed, its output read too), or None for no such run: what
    ``GET /api/workflows/{id}`` answers and ``durable describe --json`` prints.
    With `list_workers`, an open run with nothing open names its ``holder``
    (`durable.present.holder`): whether that worker is presumed alive; and
    every run names its owner's presence (``owner_presence``,
    `durable.present_ops.owner_record`), the run page's "Worker" line."""
    info = await control.describe(workflow_id, run_id)
    if info is None:
        return None
    if list_workers is not None:
        workers: list[Sequence[Mapping[str, Any]]] = []

        async def read_once() -> Sequence[Mapping[str, Any]]:
            # one read of the worker records for both
            if not workers:
                workers.append(await list_workers())
            return workers[0]
        info["holder"] = await holder(info, read_once)
        info["owner_presence"] = owner_record(await owner_presence(info, read_once))
    actual = str((info.get("run") or {}).get("run_id"))
    first = await control.history(workflow_id, actual, after_sequence=0, limit=1)
    started = first[0].data if first and first[0].type == "WorkflowStarted" else {}
    state = await control.run_state(workflow_id, actual)
    completed = state is not None and state.status == "completed"
    output = (parse_payload(state.result, "the workflow's result")
              if state is not None and completed else None)
    return describe_to_wire(info, started.get("input"), output, has_output=completed)


# ---------------------------------------------------------------- run summary


def summary_to_wire(item: dict[str, Any]) -> dict[str, Any]:
    """A `Client.list` run summary as the reference's list item (+ ours)."""
    status = str(item.get("status"))
    body: dict[str, Any] = {
        "workflow_id": item.get("workflow_id"),
        "run_id": item.get("run_id"),
        "workflow_type": item.get("workflow_type"),
        "business_key": None,
        **status_fields(status, item.get("closed_reason")),
        "task_queue": item.get("task_queue"),
        "started_at": _iso(item.get("started_at")),
        "closed_at": _iso(item.get("closed_at")),
        "search_attributes": {},
        "run_number": item.get("run_number"),
        "created_at": _iso(item.get("created_at")),
    }
    for key, value in item.items():
        if key not in body:
            body[key] = _iso(value)
    return body


_SUMMARY_INSTANTS = ("created_at", "started_at", "closed_at")
_REFERENCE_ONLY_SUMMARY = ("business_key", "status_bucket", "is_terminal", "search_attributes",
                           "durable_status", "durable_closed_reason", "timeout_kind")


def summary_from_wire(item: dict[str, Any]) -> dict[str, Any]:
    """A wire list item back to `Client.list`'s dictionary."""
    out = {k: v for k, v in item.items() if k not in _REFERENCE_ONLY_SUMMARY}
    status = item.get("durable_status", item.get("status"))
    out["status"] = status
    out["closed_reason"] = item.get("durable_closed_reason", item.get("closed_reason"))
    for key in _SUMMARY_INSTANTS:
        value = out.get(key)
        if isinstance(value, str):
            out[key] = datetime.datetime.fromisoformat(value)
    return out


def list_to_wire(page: Page) -> dict[str, Any]:
    """A page of run summaries: ``{workflows, workflow_count, next_page_token}``."""
    workflows = [summary_to_wire(item) for item in page.items]
    return {"workflows": workflows, "workflow_count": len(workflows),
            "next_page_token": page.next_cursor}


# ---------------------------------------------------------------- history events

_TERMINAL_EXTRAS = {
    "WorkflowCompleted": ("output", "payload_codec"),
    "WorkflowFailed": ("message", "exception_class"),
}


def event_to_wire(event: HistoryEvent) -> dict[str, Any]:
    """A history event as the reference's: ``{sequence, event_type, timestamp,
    payload}``; a closing event's payload also holds what the reference's
    ``result()`` reads (``output`` + ``payload_codec``; ``message`` +
    ``exception_class``)."""
    payload = dict(event.data)
    added: list[str] = []
    if event.type == "WorkflowCompleted":
        _, envelope = payload_pair(payload.get("result"))
        extras: dict[str, Any] = {"output": envelope, "payload_codec": avro.CODEC}
    elif event.type == "WorkflowFailed":
        found = payload.get("failure")
        failure: dict[str, Any] = found if isinstance(found, dict) else {}
        extras = {"message": failure.get("message", "workflow failed"),
                  "exception_class": failure.get("exception_class")}
    else:
        extras = {}
    for key, value in extras.items():
        if key not in payload:
            payload[key] = value
            added.append(key)
    if added:
        payload["durable_added"] = added
    return {"sequence": event.sequence, "event_type": event.type,
            "timestamp": _iso(event.recorded_at), "payload": payload}


def event_from_wire(item: dict[str, Any]) -> HistoryEvent:
    """A wire event back to the `HistoryEvent` an embedded client reads."""
    payload = dict(item.get("payload") or {})
    for key in payload.pop("durable_added", None) or []:
        payload.pop(key, None)
    recorded = item.get("timestamp")
    return HistoryEvent(
        sequence=int(item["sequence"]), type=str(item["event_type"]),
        recorded_at=datetime.datetime.fromisoformat(recorded) if isinstance(recorded, str)
        else recorded,
        data=payload,
    )


def history_to_wire(workflow_id: str, run_id: str, events: Sequence[HistoryEvent], *,
                    more: bool, after: int = 0) -> dict[str, Any]:
    """A page of a run's history: ``{workflow_id, run_id, events, next_page_token,
    last_sequence}``; `more` says whether events follow the page's last."""
    return {
        "workflow_id": workflow_id, "run_id": run_id,
        "events": [event_to_wire(e) for e in events],
        "next_page_token": encode_token(events[-1].sequence) if more and events else None,
        "last_sequence": events[-1].sequence if events else after,
    }


# ---------------------------------------------------------------- JSON Schemas

_ID = {"type": "string"}
_INSTANT = {"type": ["string", "null"], "description": "ISO 8601 with an offset"}
ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "An Avro envelope {codec: 'avro', blob: base64} of the reference's "
                   "Value schema (null when the value does not fit it).",
}
_STATUS_PROPS: dict[str, Any] = {
    "status": {"type": "string", "enum": list(WIRE_STATUSES)},
    "status_bucket": {"type": "string", "enum": list(BUCKETS)},
    "is_terminal": {"type": "boolean"},
    "closed_reason": {"type": ["string", "null"]},
    "durable_status": {"type": "string", "enum": list(DURABLE_STATUSES),
                       "description": "Our status (extension): timed_out, continued, "
                                      "needs_review, unknown, ..."},
}
RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["workflow_id", "run_id", "workflow_type", "status", "status_bucket",
                 "is_terminal", "payload_codec"],
    "properties": {
        "workflow_id": _ID, "run_id": _ID, "namespace": _ID,
        "workflow_type": {"type": "string"}, **_STATUS_PROPS,
        "task_queue": {"type": ["string", "null"]}, "run_number": {"type": ["integer", "null"]},
        "run_count": {"type": ["integer", "null"]},
        "is_current_run": {"type": ["boolean", "null"]},
        "payload_codec": {"type": "string", "enum": [avro.CODEC]},
        "input_envelope": ENVELOPE_SCHEMA, "output_envelope": ENVELOPE_SCHEMA,
        "started_at": _INSTANT, "closed_at": _INSTANT,
        "execution_deadline_at": _INSTANT, "run_deadline_at": _INSTANT,
        "memo": {"type": "object"}, "actions": {"type": "object"},
        # ours: whether the worker that owns the run is still there
        "owner_presence": {
            "type": "object", "required": ["worker_id", "state", "alive", "last_seen_at",
                                           "expires_at"],
            "properties": {"worker_id": {"type": ["string", "null"]},
                           "state": {"type": "string", "enum": list(OWNER_STATES)},
                           "alive": {"type": "boolean"},
                           "last_seen_at": _INSTANT, "expires_at": _INSTANT,
                           "lease_expires_at": _INSTANT}},
    },
}
SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["workflow_id", "run_id", "workflow_type", "status", "status_bucket",
                 "is_terminal"],
    "properties": {
        "workflow_id": _ID, "run_id": _ID, "workflow_type": {"type": "string"},
        **_STATUS_PROPS, "task_queue": {"type": ["string", "null"]},
        "started_at": _INSTANT, "closed_at": _INSTANT, "created_at": _INSTANT,
        "run_number": {"type": ["integer", "null"]},
    },
}
LIST_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["workflows", "workflow_count", "next_page_token"],
    "properties": {"workflows": {"type": "array", "items": SUMMARY_SCHEMA},
                   "workflow_count": {"type": "integer"},
                   "next_page_token": {"type": ["string", "null"]}},
}
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["sequence", "event_type", "timestamp", "payload"],
    "properties": {"sequence": {"type": "integer"}, "event_type": {"type": "string"},
                   "timestamp": {"type": ["string", "null"]}, "payload": {"type": "object"}},
}
HISTORY_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["workflow_id", "run_id", "events", "next_page_token"],
    "properties": {"workflow_id": _ID, "run_id": _ID,
                   "events": {"type": "array", "items": EVENT_SCHEMA},
                   "next_page_token": {"type": ["string", "null"]}},
}
RUNS_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["workflow_id", "run_count", "runs"],
    "properties": {"workflow_id": _ID, "run_count": {"type": "integer"},
                   "runs": {"type": "array", "items": RUN_SCHEMA}},
}
