"""The JSON shapes both sides of the control plane agree on (no web framework here).

Instants travel as ISO 8601 strings with an explicit offset; payloads (a
workflow's input, result, memo) travel as JSON values, decoded from the text
storage keeps, so `curl` users read them and the remote client re-encodes
them into the same text its converter decodes.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

from ..clock import to_iso
from ..control import RunState
from ..errors import PayloadRejected
from .model import parse_payload, payload_pair, status_fields

# Keys of a cancellation request record that are instants (epoch seconds in storage).
_RECORD_INSTANTS = ("requested_at", "deadline_at", "delivered_at", "closed_at")


def json_default(value: Any) -> Any:
    """`json.dumps` hook: datetimes as ISO 8601, sets as sorted lists."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__qualname__} is not JSON serialisable")


def dumps(value: Any) -> bytes:
    """A response body: strict JSON (no NaN or Infinity literals).

    The doors refuse non-finite numbers, but a value recorded before they
    did (a cancellation's ``requester`` holding ``math.inf``) must not make
    its run unreadable: such a number is served as null, as the CLI shows
    it, instead of failing the whole answer."""
    try:
        text = json.dumps(value, default=json_default, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(finite(value), default=json_default, separators=(",", ":"),
                          allow_nan=False)
    return text.encode()


def finite(value: Any) -> Any:
    """`value` with every infinite or NaN float (at any depth) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


class NonFiniteNumber(ValueError):
    """A JSON number too large for a float (``1e400``): valid JSON text that
    Python would read as infinity, which no payload, record or view can carry."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(text)
    return value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_finite(text: str) -> Any:
    """JSON text from outside (a request body, a form) as a value with finite
    numbers only: `NonFiniteNumber` for ``1e400``, ValueError for NaN and
    Infinity literals (not JSON) and anything else that is not JSON."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite_float)


def encode_payload(value: Any) -> str:
    """A JSON value back to the compact text `JSONConverter` writes (a
    non-finite number is refused as the converter refuses it)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise PayloadRejected(
            f"the arguments hold a number JSON cannot carry ({exc}); send finite numbers only"
        ) from None


def record_to_wire(record: dict[str, Any]) -> dict[str, Any]:
    """A cancellation request as stored (epoch instants) to its wire form (ISO)."""
    out = dict(record)
    for key in _RECORD_INSTANTS:
        value = out.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = to_iso(float(value))
    return out


def record_from_wire(data: dict[str, Any]) -> dict[str, Any]:
    """The wire form of a cancellation request back to the stored form."""
    out = dict(data)
    for key in _RECORD_INSTANTS:
        value = out.get(key)
        if isinstance(value, str):
            out[key] = datetime.datetime.fromisoformat(value).timestamp()
    return out


def state_to_wire(workflow_id: str, state: RunState) -> dict[str, Any]:
    """The result route's body (our extension): the outcome of a closed run,
    or its open status, in the wire's status fields."""
    body: dict[str, Any] = {"workflow_id": workflow_id, "run_id": state.run_id,
                            **status_fields(state.status, state.closed_reason)}
    if state.status == "completed":
        body["result"], body["result_envelope"] = payload_pair(
            parse_payload(state.result, "the workflow's result"))
    elif state.status == "continued":
        body["continued_run_id"] = state.continued_run_id
    elif not state.is_open:
        body["failure"] = state.failure or {"failure_category": state.status,
                                            "message": state.status}
    return body


def state_from_wire(body: dict[str, Any]) -> RunState:
    status = str(body.get("durable_status") or body["status"])
    result = encode_payload(body.get("result")) if status == "completed" else None
    failure = body.get("failure")
    return RunState(
        run_id=str(body["run_id"]), status=status, result=result,
        failure=dict(failure) if isinstance(failure, dict) else None,
        continued_run_id=body.get("continued_run_id"),
        # ours (an older server's answer lacks it: None, as it was)
        closed_reason=body.get("durable_closed_reason"),
    )
