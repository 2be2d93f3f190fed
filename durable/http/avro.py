"""The reference engine's payload codec: Avro envelopes of its fixed ``Value`` schema.

The reference engine's control plane (v2) carries every payload (a start's
arguments, a result, a signal's arguments) as ``{"codec": "avro", "blob":
base64(...)}``: Avro single-object encoding (``C3 01``, the schema's
CRC-64-AVRO fingerprint, the datum) of one fixed recursive record,
``durable_workflow.protocol.Value``, whose only field is a union of null,
boolean, long, double, bytes, string, array<Value> and map<Value>. The schema
never changes, so this module writes and reads it by hand with the standard
library (no fastavro, no schema parser): the bytes are the same as the
reference client's fastavro codec writes (tests/unit/test_avro_value.py
checks that on randomized values).

Edges, the same on both sides: integers must fit a signed 64-bit long, floats
must be finite, map keys must be strings, text must be valid Unicode (a
lone surrogate, which our JSON payloads can hold, has no envelope: the
plain value still carries it). ``bytes`` is a kind of its own in
the ``Value`` union; our payloads are JSON, which has no bytes, so a bytes
value decodes here but `to_json_value` refuses it (the control plane answers
422). Nothing here imports a web framework: the remote client uses it too.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Any

CODEC = "avro"
MAGIC = b"\xc3\x01"
FINGERPRINT = bytes.fromhex("e2a33dff55802237")
#: the writer schema, as the reference writes it (a history export embeds it):
#: the fixed recursive ``durable_workflow.protocol.Value`` union whose CRC-64
#: fingerprint is `FINGERPRINT`
VALUE_SCHEMA_JSON = (
    '{"type":"record","name":"Value","namespace":"durable_workflow.protocol",'
    '"fields":[{"name":"value","type":["null",'
    '{"type":"record","name":"BooleanValue","fields":[{"name":"boolean","type":"boolean"}]},'
    '{"type":"record","name":"LongValue","fields":[{"name":"long","type":"long"}]},'
    '{"type":"record","name":"DoubleValue","fields":[{"name":"double","type":"double"}]},'
    '{"type":"record","name":"BytesValue","fields":[{"name":"bytes","type":"bytes"}]},'
    '{"type":"record","name":"StringValue","fields":[{"name":"string","type":"string"}]},'
    '{"type":"record","name":"ArrayValue","fields":[{"name":"items",'
    '"type":{"type":"array","items":"Value"}}]},'
    '{"type":"record","name":"MapValue","fields":[{"name":"entries",'
    '"type":{"type":"map","values":"Value"}}]}]}]}'
)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# Union branch indices of Value.value, in the schema's order.
_NULL, _BOOLEAN, _LONG, _DOUBLE, _BYTES, _STRING, _ARRAY, _MAP = range(8)
# Deeper nesting than this is refused on decode (a hostile blob cannot recurse us out).
MAX_DEPTH = 64


class PayloadCodecError(ValueError):
    """A value cannot be written as, or a blob read as, a ``Value`` envelope;
    `reason` is the reference engine's word for why (``invalid_payload_framing``,
    ``integer_overflow``, ``non_finite_float``, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


# ---------------------------------------------------------------- writing


def _long(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)  # zig-zag, as a 64-bit value
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadCodecError("invalid_string", "an Avro string must be valid Unicode "
                                "(a lone surrogate is not)") from None


def _write(out: bytearray, value: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise PayloadCodecError("payload_too_deep", f"nested deeper than {MAX_DEPTH} levels")
    if value is None:
        _long(out, _NULL)
    elif isinstance(value, bool):
        _long(out, _BOOLEAN)
        out.append(1 if value else 0)
    elif isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise PayloadCodecError("integer_overflow",
                                    "Avro Value long must be within signed 64-bit range")
        _long(out, _LONG)
        _long(out, value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadCodecError("non_finite_float", "Avro Value doubles must be finite")
        _long(out, _DOUBLE)
        out += struct.pack("<d", value)
    elif isinstance(value, bytes | bytearray):
        _long(out, _BYTES)
        _long(out, len(value))
        out += value
    elif isinstance(value, str):
        raw = _utf8(value)
        _long(out, _STRING)
        _long(out, len(raw))
        out += raw
    elif isinstance(value, list | tuple):
        _long(out, _ARRAY)
        if value:
            _long(out, len(value))
            for item in value:
                _write(out, item, depth + 1)
        _long(out, 0)
    elif isinstance(value, dict):
        _long(out, _MAP)
        if value:
            _long(out, len(value))
            for key, item in value.items():
                if not isinstance(key, str):
                    raise PayloadCodecError("invalid_map_key",
                                            "Avro Value maps require string keys")
                raw = _utf8(key)
                _long(out, len(raw))
                out += raw
                _write(out, item, depth + 1)
        _long(out, 0)
    else:
        raise PayloadCodecError("unsupported_value_type",
                                f"{type(value).__name__} is not an Avro Value kind")


def encode(value: Any) -> bytes:
    """One value as the framed single-object bytes (magic, fingerprint, datum)."""
    out = bytearray(MAGIC + FINGERPRINT)
    _write(out, value, 0)
    return bytes(out)


def encode_blob(value: Any) -> str:
    """One value as the base64 text of an envelope's ``blob``."""
    return base64.b64encode(encode(value)).decode("ascii")


def envelope(value: Any) -> dict[str, str]:
    """``{"codec": "avro", "blob": ...}`` holding `value`."""
    return {"codec": CODEC, "blob": encode_blob(value)}


# ---------------------------------------------------------------- reading


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise PayloadCodecError("invalid_payload_framing", "truncated Avro Value datum")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def long(self) -> int:
        shift = 0
        z = 0
        while True:
            if self.pos >= len(self.data):
                raise PayloadCodecError("invalid_payload_framing",
                                        "truncated Avro Value datum")
            byte = self.data[self.pos]
            self.pos += 1
            z |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise PayloadCodecError("invalid_payload_framing", "malformed Avro long")
        n = (z >> 1) ^ -(z & 1)
        if not _INT64_MIN <= n <= _INT64_MAX:
            raise PayloadCodecError("integer_overflow", "an Avro long beyond 64 bits")
        return n

    def blocks(self) -> Any:
        """Item counts of an array's or map's blocks (a negative count is
        followed by the block's size in bytes, which is skipped)."""
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:
                count = -count
                self.long()
            yield count

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise PayloadCodecError("payload_too_deep",
                                    f"nested deeper than {MAX_DEPTH} levels")
        branch = self.long()
        if branch == _NULL:
            return None
        if branch == _BOOLEAN:
            flag = self.take(1)[0]
            if flag > 1:
                raise PayloadCodecError("invalid_payload_framing", "malformed Avro boolean")
            return flag == 1
        if branch == _LONG:
            return self.long()
        if branch == _DOUBLE:
            number: float = struct.unpack("<d", self.take(8))[0]
            if not math.isfinite(number):
                raise PayloadCodecError("non_finite_float", "Avro Value doubles must be finite")
            return number
        if branch == _BYTES:
            return self.take(self.long())
        if branch == _STRING:
            try:
                return self.take(self.long()).decode("utf-8")
            except UnicodeDecodeError:
                raise PayloadCodecError("invalid_payload_framing",
                                        "an Avro string is not UTF-8") from None
        if branch == _ARRAY:
            items: list[Any] = []
            for count in self.blocks():
                items.extend(self.value(depth + 1) for _ in range(count))
            return items
        if branch == _MAP:
            entries: dict[str, Any] = {}
            for count in self.blocks():
                for _ in range(count):
                    try:
                        key = self.take(self.long()).decode("utf-8")
                    except UnicodeDecodeError:
                        raise PayloadCodecError("invalid_payload_framing",
                                                "an Avro map key is not UTF-8") from None
                    entries[key] = self.value(depth + 1)
            return entries
        raise PayloadCodecError("invalid_payload_framing", "unknown Value union branch")


def decode(raw: bytes) -> Any:
    """The value of framed single-object bytes."""
    if len(raw) < 10 or raw[:2] != MAGIC:
        raise PayloadCodecError("invalid_payload_framing",
                                "expected Avro single-object magic c301")
    if raw[2:10] != FINGERPRINT:
        raise PayloadCodecError("unsupported_payload_schema",
                                f"unknown CRC-64-AVRO fingerprint {raw[2:10].hex()}")
    reader = _Reader(raw[10:])
    value = reader.value(0)
    if reader.pos != len(reader.data):
        raise PayloadCodecError("invalid_payload_framing",
                                "trailing bytes after Avro Value datum")
    return value


def decode_blob(blob: str) -> Any:
    """The value of an envelope's base64 ``blob``."""
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadCodecError("invalid_payload_framing",
                                "the blob is not strict base64") from None
    return decode(raw)


# ---------------------------------------------------------------- JSON values


def to_json_value(value: Any, where: str = "payload") -> Any:
    """A decoded ``Value`` as a JSON value (our payloads are JSON): refuses
    bytes, which JSON has no kind for."""
    if isinstance(value, bytes):
        raise PayloadCodecError(
            "unsupported_value_type",
            f"{where} holds bytes; this server stores JSON payloads, which have no bytes "
            "kind: send them as a (base64) string")
    if isinstance(value, list):
        return [to_json_value(item, where) for item in value]
    if isinstance(value, dict):
        return {key: to_json_value(item, where) for key, item in value.items()}
    return value


def is_envelope(value: Any) -> bool:
    """Whether `value` looks like a payload envelope (an object with a codec)."""
    return isinstance(value, dict) and "codec" in value


def from_envelope(value: Any, where: str = "payload") -> Any:
    """The JSON value an envelope holds. Refuses other codecs and external
    storage references (this server keeps payloads inline)."""
    if not isinstance(value, dict):
        raise PayloadCodecError("invalid_payload_framing", f"{where} is not an envelope")
    codec = value.get("codec")
    if "external_storage" in value or "external_payload" in value:
        raise PayloadCodecError(
            "external_payload_unsupported",
            f"{where} is an external storage reference; this server keeps payloads inline: "
            "send the value itself")
    if codec != CODEC:
        raise PayloadCodecError(
            "unsupported_payload_codec",
            f"{where} has codec {codec!r}; this server takes {CODEC!r} envelopes or a plain "
            "JSON value")
    blob = value.get("blob")
    if not isinstance(blob, str):
        raise PayloadCodecError("invalid_payload_framing", f"{where}.blob must be a string")
    return to_json_value(decode_blob(blob), where)
