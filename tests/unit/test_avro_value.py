"""The standard-library Avro ``Value`` codec against the reference client's fastavro one.

`durable.http.avro` must write the very bytes the reference engine's Python
client (``durable-workflow``, fastavro) writes, and read what it writes, for
every kind of the ``Value`` union: randomized values, a fixed seed.
"""

from __future__ import annotations

import base64
import math
import random
import struct
from typing import Any

import pytest

from durable.http import avro

reference = pytest.importorskip("durable_workflow._avro")

SEED = 20261201
ROUNDS = 2000


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["null", "bool", "long", "double", "bytes", "string"]
    if depth < 4:
        kinds += ["array", "map"]
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "long":
        return rng.choice([0, 1, -1, 63, -64, 64, -65, 2**31, -(2**31), 2**63 - 1, -(2**63),
                           rng.randint(-(2**63), 2**63 - 1), rng.randint(-1000, 1000)])
    if kind == "double":
        value = rng.choice([0.0, -0.0, 1.5, 1e308, -1e-308, 5e-324,
                            struct.unpack("<d", rng.randbytes(8))[0]])
        return value if math.isfinite(value) else 0.25
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 40))
    if kind == "string":
        alphabet = "aZ09 _-\u00e9\u4e2d\U0001f600\x00\n\""
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    if kind == "array":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {"".join(rng.choice("abc\u00e9") for _ in range(rng.randint(0, 5))):
            random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def test_bytes_identical_to_the_reference_codec_on_random_values() -> None:
    rng = random.Random(SEED)
    for _ in range(ROUNDS):
        value = random_value(rng)
        ours = avro.encode_blob(value)
        theirs = reference.encode(value)
        assert ours == theirs, value
        assert avro.decode_blob(theirs) == reference.decode(ours) == value


def test_the_framing_is_magic_then_the_fixed_fingerprint() -> None:
    raw = base64.b64decode(avro.encode_blob(None))
    assert raw == b"\xc3\x01" + bytes.fromhex("e2a33dff55802237") + b"\x00"
    assert avro.FINGERPRINT == reference.VALUE_SCHEMA_FINGERPRINT


def test_negative_block_counts_are_read() -> None:
    # An array of two longs written as one block with a negative count and a byte size.
    datum = bytearray()
    avro._long(datum, 6)       # ArrayValue
    avro._long(datum, -2)      # two items, size follows
    avro._long(datum, 4)       # the block's size in bytes
    for n in (7, -3):
        avro._long(datum, 2)   # LongValue
        avro._long(datum, n)
    avro._long(datum, 0)
    blob = base64.b64encode(avro.MAGIC + avro.FINGERPRINT + bytes(datum)).decode()
    assert avro.decode_blob(blob) == [7, -3] == reference.decode(blob)


@pytest.mark.parametrize(("value", "reason"), [
    (2**63, "integer_overflow"), (-(2**63) - 1, "integer_overflow"),
    (math.inf, "non_finite_float"), (math.nan, "non_finite_float"),
    ({1: "x"}, "invalid_map_key"), (object(), "unsupported_value_type"),
    ("lone \udcff", "invalid_string"), ({"\ud800": 1}, "invalid_string"),
])
def test_edges_are_refused_like_the_reference(value: Any, reason: str) -> None:
    with pytest.raises(avro.PayloadCodecError) as caught:
        avro.encode_blob(value)
    assert caught.value.reason == reason
    with pytest.raises((ValueError, TypeError)):
        reference.encode(value)


@pytest.mark.parametrize(("blob", "reason"), [
    ("not base64!", "invalid_payload_framing"),
    (base64.b64encode(b"\xc3\x01" + b"\x00" * 8 + b"\x00").decode(), "unsupported_payload_schema"),
    (base64.b64encode(b"\xc3\x01" + avro.FINGERPRINT).decode(), "invalid_payload_framing"),
    (base64.b64encode(b"\xc3\x01" + avro.FINGERPRINT + b"\x00\x00").decode(),
     "invalid_payload_framing"),
    (base64.b64encode(b"\xc3\x01" + avro.FINGERPRINT + b"\x0a\x10ab").decode(),
     "invalid_payload_framing"),
    (base64.b64encode(b"\xc3\x01" + avro.FINGERPRINT + b"\x20").decode(),
     "invalid_payload_framing"),
])
def test_malformed_blobs_are_refused_with_a_reason(blob: str, reason: str) -> None:
    with pytest.raises(avro.PayloadCodecError) as caught:
        avro.decode_blob(blob)
    assert caught.value.reason == reason


def test_envelopes_carry_json_values_and_refuse_bytes_other_codecs_and_references() -> None:
    value = {"a": [1, 2.5, None, True, "x"]}
    assert avro.from_envelope(avro.envelope(value)) == value
    with pytest.raises(avro.PayloadCodecError) as caught:
        avro.from_envelope(avro.envelope([b"raw"]))
    assert caught.value.reason == "unsupported_value_type"
    with pytest.raises(avro.PayloadCodecError) as caught:
        avro.from_envelope({"codec": "json", "blob": "[]"})
    assert caught.value.reason == "unsupported_payload_codec"
    with pytest.raises(avro.PayloadCodecError) as caught:
        avro.from_envelope({"codec": "avro", "external_storage": {"uri": "s3://x"}})
    assert caught.value.reason == "external_payload_unsupported"


def test_nesting_beyond_the_limit_is_refused_both_ways() -> None:
    deep: Any = None
    for _ in range(avro.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(avro.PayloadCodecError):
        avro.encode_blob(deep)
    with pytest.raises(avro.PayloadCodecError):
        avro.decode_blob(reference.encode(deep))
