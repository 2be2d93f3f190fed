"""History export of a run: the reference engine's replay bundle.

``GET /api/workflows/{workflowId}/runs/{runId}/history/export`` answers a
``durable-workflow.v2.history-export`` bundle (schema_version 1), the shape
the reference server exports and its tooling reads: the run's snapshot
(``workflow``), its input and output (``payloads``), every history event
(``history_events``, each ``{id, sequence, type, recorded_at, payload}``),
the Avro writer schema its payloads need (``codec_schemas``), a manifest of
those payloads, and an ``integrity`` block: the SHA-256 of the bundle's
canonical JSON (``json-recursive-ksort-v1``: keys sorted at every level,
no spaces, non-ASCII as ``\\uXXXX`` UTF-16 units, floats as PHP writes
them), so the reference client's own verifier
(``durable_workflow.history_bundle_verify.verify_bundle``) recomputes it.
The bundle is not signed.

What we cannot honestly fill from our storage stays empty rather than made
up: ``commands``, ``signals``, ``updates``, ``tasks``, ``activities``,
``timers``, ``failures`` and the ``links`` are lists the reference builds
from tables of its own; every fact they would repeat (signals received,
updates, activity attempts, timers, failures, children) is an event of
``history_events``, where our history keeps it.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import time
from typing import Any

from ..clock import to_iso
from . import avro
from .model import event_to_wire
from .routes import RUN_ID, WORKFLOW_ID, Call, Operation, Reply, Schema
from .wire import dumps
from .workflows import _describe_run, _not_found

SCHEMA = "durable-workflow.v2.history-export"
SCHEMA_VERSION = 1
CANONICALIZATION = "json-recursive-ksort-v1"
# events read per storage round trip
_PAGE = 1000

EXPORT_REPLY: Schema = {
    "type": "object",
    "required": ["schema", "schema_version", "exported_at", "dedupe_key", "history_complete",
                 "workflow", "payloads", "history_events", "integrity"],
    "properties": {
        "schema": {"type": "string", "enum": [SCHEMA]},
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        "exported_at": {"type": "string"}, "dedupe_key": {"type": "string"},
        "history_complete": {"type": "boolean"},
        "workflow": {"type": "object",
                     "required": ["instance_id", "run_id", "run_number", "workflow_type",
                                  "status"]},
        "payloads": {"type": "object", "required": ["codec", "arguments", "output"]},
        "history_events": {"type": "array", "items": {
            "type": "object", "required": ["id", "sequence", "type", "payload"]}},
        "payload_manifest": {"type": "object", "required": ["version", "entries"]},
        "integrity": {"type": "object",
                      "required": ["canonicalization", "checksum_algorithm", "checksum"]},
    },
}


# ---------------------------------------------------------------- canonical JSON


def canonical_json(value: Any) -> str:
    """`value` (parsed JSON) in the ``json-recursive-ksort-v1`` form the
    reference hashes: keys sorted at every level, no whitespace, strings with
    every non-ASCII character as ``\\uXXXX`` UTF-16 units (DEL stays as is),
    floats as PHP's ``json_encode`` writes them."""
    parts: list[str] = []
    _canonical(value, parts)
    return "".join(parts)


def _canonical(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, got {key!r}")
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _canonical(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _canonical(item, out)
        out.append("]")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, float):
        out.append(_float(value))
    else:  # None, bool, int
        out.append(json.dumps(value))


def _string(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isascii():
        return quoted
    escaped = []
    for char in quoted:
        if ord(char) < 128:
            escaped.append(char)
            continue
        units = char.encode("utf-16-be")
        escaped.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
    return "".join(escaped)


def _float(number: float) -> str:
    """PHP's shortest round-trip float: fixed notation for exponents -4..16
    (with a ``.0`` when whole), else ``1.0e+20`` (no leading exponent zeros)."""
    if not math.isfinite(number):
        raise ValueError("JSON numbers must be finite")
    text = repr(number)
    mantissa, marker, exponent_text = text.partition("e")
    if not marker:
        return text
    exponent = int(exponent_text)
    if -4 <= exponent < 17:
        fixed = format(decimal.Decimal(text), "f")
        return fixed if "." in fixed else f"{fixed}.0"
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent:+d}"


def with_integrity(bundle: dict[str, Any]) -> dict[str, Any]:
    """The bundle with its ``integrity`` block: the SHA-256 of the canonical
    JSON of everything else (no signature: none is configured)."""
    body = {key: value for key, value in bundle.items() if key != "integrity"}
    digest = hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
    return {**body, "integrity": {
        "canonicalization": CANONICALIZATION, "checksum_algorithm": "sha256",
        "checksum": digest, "signature_algorithm": None, "signature": None, "key_id": None,
    }}


# ---------------------------------------------------------------- payloads


def _payload(value: Any, present: bool) -> tuple[dict[str, Any], str | None]:
    """A payload section (``{available, data}``: data is the Avro blob, as the
    reference stores it) and its blob. A value the ``Value`` schema cannot
    hold (an integer beyond 64 bits) is unavailable, with its plain JSON as
    our extension ``plain``."""
    if not present:
        return {"available": False, "data": None}, None
    try:
        blob = avro.encode_blob(value)
    except avro.PayloadCodecError:
        return {"available": False, "data": None, "plain": value}, None
    return {"available": True, "data": blob}, blob


def _manifest_entry(path: str, blob: Any, available: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "path": path, "codec": avro.CODEC, "available": available, "redacted": False,
        "encoding": "base64-avro-single-object", "avro_framing": None,
        "avro_prefix_hex": None, "writer_schema": None, "writer_schema_fingerprint": None,
        "diagnostic": None if available else "payload_unavailable",
    }
    if available and isinstance(blob, str):
        entry.update(avro_framing="single_object",
                     avro_prefix_hex=(avro.MAGIC + avro.FINGERPRINT).hex(),
                     writer_schema=avro.VALUE_SCHEMA_JSON,
                     writer_schema_fingerprint=f"crc64-avro:{avro.FINGERPRINT.hex()}")
    return entry


def _manifest(arguments: str | None, output: str | None,
              events: list[dict[str, Any]]) -> dict[str, Any]:
    entries = [_manifest_entry("payloads.arguments.data", arguments, arguments is not None),
               _manifest_entry("payloads.output.data", output, output is not None)]
    for index, event in enumerate(events):
        if event["type"] != "WorkflowCompleted":
            continue
        envelope = event["payload"].get("output")
        blob = envelope.get("blob") if isinstance(envelope, dict) else None
        entries.append(_manifest_entry(f"history_events.{index}.payload.output", blob,
                                       blob is not None))
    return {"version": 1, "entries": entries}


# ---------------------------------------------------------------- the bundle


async def export_history(call: Call) -> tuple[int, Any]:
    p = call.params
    wf, run = p["workflowId"], p["runId"]
    control = call.client.control
    state = await control.run_state(wf, run)
    if state is None:
        raise await _not_found(call, wf, run)
    described = await _describe_run(call, wf, state.run_id)
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await control.history(wf, state.run_id, after_sequence=after, limit=_PAGE)
        for event in page:
            wire = event_to_wire(event)
            events.append({"id": f"{state.run_id}:{event.sequence}",
                           "sequence": event.sequence, "type": event.type,
                           "workflow_task_id": None, "workflow_command_id": None,
                           "recorded_at": wire["timestamp"], "payload": wire["payload"]})
        if len(page) < _PAGE:
            break
        after = page[-1].sequence
    last = events[-1]["sequence"] if events else 0
    arguments, arguments_blob = _payload(described.get("input"), True)
    completed = described.get("durable_status") == "completed"
    output, output_blob = _payload(described.get("output"), completed)
    current = bool(described.get("is_current_run"))
    workflow = {
        "instance_id": wf, "run_id": state.run_id,
        "run_number": described.get("run_number") or 1,
        "is_current_run": current,
        # a continued run names the run it continued as (the next one of the chain)
        "current_run_id": state.run_id if current
        else (described.get("run") or {}).get("continued_run_id"),
        "current_run_source": "selected_run" if current else "continued_run_id",
        "workflow_type": described.get("workflow_type"), "workflow_class": None,
        "business_key": None, "visibility_labels": [],
        "memo": described.get("memo") or {}, "search_attributes": {},
        "status": described.get("status"), "status_bucket": described.get("status_bucket"),
        "closed_reason": described.get("closed_reason"),
        "durable_status": described.get("durable_status"),
        "compatibility": described.get("compatibility"), "queue": described.get("task_queue"),
        "task_queue": described.get("task_queue"), "last_history_sequence": last,
        "started_at": described.get("started_at"), "closed_at": described.get("closed_at"),
        "last_progress_at": events[-1]["recorded_at"] if events else None,
    }
    bundle: dict[str, Any] = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "exported_at": to_iso(time.time()),
        "dedupe_key": f"{state.run_id}:{last}:{workflow['last_progress_at'] or 'unknown'}",
        "history_complete": bool(described.get("is_terminal")),
        "workflow": workflow,
        "payloads": {"codec": avro.CODEC, "arguments": arguments,
                     "output": {**output, "codec": avro.CODEC if completed else None}},
        "history_events": events,
        "commands": [], "signals": [], "updates": [], "tasks": [], "activities": [],
        "timers": [], "failures": [],
        "links": {"projection_source": "history_events", "parents": [], "children": []},
        "redaction": {"applied": False, "policy": None, "paths": []},
        "codec_schemas": {avro.CODEC: {
            "encoding": "base64-avro-single-object", "framing": "single_object",
            "magic_hex": avro.MAGIC.hex(), "current_fingerprint": avro.FINGERPRINT.hex(),
            "writer_schemas": {avro.FINGERPRINT.hex(): {
                "schema": avro.VALUE_SCHEMA_JSON,
                "fingerprint": f"crc64-avro:{avro.FINGERPRINT.hex()}"}},
        }},
    }
    bundle["payload_manifest"] = _manifest(arguments_blob, output_blob, events)
    # hashed as the client will parse it: through the same JSON encoder
    parsed: dict[str, Any] = json.loads(dumps(bundle))
    return 200, with_integrity(parsed)


def export_operations() -> list[Operation]:
    """The history export route (appended to `routes.operations()`)."""
    return [Operation(
        "GET", "/api/workflows/{workflowId}/runs/{runId}/history/export", "exportHistory",
        "A run's history as the reference engine's replay bundle "
        "(durable-workflow.v2.history-export)", export_history,
        params=(WORKFLOW_ID, RUN_ID),
        replies=(Reply(200, "The bundle, with its SHA-256 over the canonical JSON.",
                       EXPORT_REPLY),),
        description="The whole history of the run, open or closed (history_complete says "
                    "which). Sections the reference fills from tables of its own (commands, "
                    "signals, updates, tasks, activities, timers, failures, links) are empty: "
                    "their facts are events of history_events.",
    )]
