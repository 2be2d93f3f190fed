"""The history export's canonical JSON against the reference client's verifier.

The bundle's checksum is the SHA-256 of its ``json-recursive-ksort-v1``
form; `durable.http.export.canonical_json` must write the very string the
reference engine's Python client (``durable-workflow``) recomputes, for
randomized JSON values (floats of every magnitude, non-ASCII text and DEL,
nesting): a fixed seed. The writer schema a bundle embeds is the client's.
"""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest

from durable.http import avro
from durable.http.export import canonical_json, with_integrity

verifier = pytest.importorskip("durable_workflow.history_bundle_verify")
reference_avro = pytest.importorskip("durable_workflow._avro")

SEED = 20261202
ROUNDS = 2000


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["null", "bool", "int", "float", "str"]
    if depth < 4:
        kinds += ["list", "dict"]
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, -1, 2**53, -(2**63), 2**70, rng.randint(-10**6, 10**6)])
    if kind == "float":
        value = rng.choice([0.0, -0.0, 1.0, 1.5, 1e16, 1e17, 1e-4, 1e-5, 123456789.125,
                            1e308, 5e-324, rng.uniform(-1e20, 1e20),
                            struct.unpack("<d", rng.randbytes(8))[0]])
        return value if math.isfinite(value) else 0.25
    if kind == "str":
        alphabet = "ab\"\\/\n\t\x00\x7f\x1fé€😀\u2028"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
    if kind == "list":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f"k{rng.choice('zaé😀')}{i}": random_json(rng, depth + 1)
            for i in range(rng.randint(0, 4))}


def test_canonical_json_is_the_reference_verifiers() -> None:
    rng = random.Random(SEED)
    for _ in range(ROUNDS):
        value = {"v": random_json(rng)}
        assert canonical_json(value) == verifier._canonicalize(value)


def test_an_exported_bundle_checks_out_and_a_changed_one_does_not() -> None:
    rng = random.Random(SEED + 1)
    bundle = with_integrity({"schema": "durable-workflow.v2.history-export",
                             "payload": random_json(rng), "n": 1e17})
    report = verifier.verify_bundle(bundle)
    assert report["integrity"]["checksum_matches"] is True
    bundle["n"] = 1e16
    assert verifier.verify_bundle(bundle)["integrity"]["checksum_matches"] is False


def test_the_embedded_writer_schema_is_the_clients() -> None:
    assert avro.VALUE_SCHEMA_JSON == reference_avro.VALUE_SCHEMA_JSON
    assert avro.FINGERPRINT.hex() == reference_avro.VALUE_SCHEMA_FINGERPRINT_HEX
