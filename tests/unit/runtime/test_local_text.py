"""A local step's shortcuts give what the general path gives (issue 26, 12-06).

`_scalar_text` writes a scalar result's JSON without the converter: it must be
the converter's text byte for byte (with either codec), or None (the
converter then decides, and raises what it raises). `RecordLocalActivity.
succeeded` must make the record the dataclass's constructor makes.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from durable import JSONConverter
from durable._runtime.local import _scalar_text
from durable.store.writes import RecordLocalActivity


def _ctx(converter: Any, limit: int = 1 << 20) -> Any:
    return SimpleNamespace(converter=converter, limits=SimpleNamespace(payload_bytes=limit))


def _values(rng: random.Random) -> list[Any]:
    ints = [0, 1, -1, 10**18 - 1, -(10**18) + 1, 10**18, -(10**18), 2**63, 10**40]
    ints += [rng.randrange(-(10**19), 10**19) for _ in range(300)]
    floats = [0.0, -0.0, 1.5, 1e16, 1e-7, 1e300, -2.5e-300, float("inf"), float("nan"),
              sys.float_info.max, sys.float_info.min]
    floats += [rng.uniform(-1e6, 1e6) for _ in range(100)]
    floats += [rng.random() * 10 ** rng.randrange(-30, 30) for _ in range(100)]
    texts = ["", "plain", "with space", 'a"quote', "back\\slash", "tab\there", "del\x7f",
             "nl\n", "é", "\u2028", "\ud800", "/slash", "~}{", "null"]
    texts += ["".join(chr(rng.randrange(0, 0x90)) for _ in range(rng.randrange(0, 12)))
              for _ in range(300)]
    return [None, True, False, *ints, *floats, *texts, [1], {"a": 1}, (1,), b"x"]


class _Int(int):
    pass


@pytest.mark.parametrize("codec", ["json", "orjson"])
def test_a_scalar_results_text_is_the_converters(codec: str) -> None:
    converter = JSONConverter(codec=codec)
    ctx = _ctx(converter)
    shortcut = 0
    for value in [*_values(random.Random(12_06)), _Int(3)]:
        text = _scalar_text(value, ctx)
        if text is None:
            continue
        shortcut += 1
        assert text == converter.encode(value, "a result"), value
    assert shortcut > 250  # the shortcut is taken for the common scalars


def test_a_text_over_the_payload_limit_goes_to_the_converter() -> None:
    ctx = _ctx(JSONConverter(), limit=4)
    assert _scalar_text(123, ctx) == "123"
    assert _scalar_text(12345, ctx) is None  # ctx.encode raises StructuralLimitExceeded
    assert _scalar_text("abcd", ctx) is None


def test_no_shortcut_for_another_converter() -> None:
    class Other(JSONConverter):
        pass

    assert _scalar_text(1, _ctx(Other())) is None


def test_a_success_is_the_record_its_constructor_makes() -> None:
    fast = RecordLocalActivity.succeeded("0:7", "double", 12.5, 2, "15")
    slow = RecordLocalActivity(op_id="0:7", name="double", started_at=12.5, attempts=2,
                               result="15")
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert vars(fast) == vars(slow)
    assert [f.name for f in dataclasses.fields(RecordLocalActivity)] == list(vars(fast))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.result = "16"  # type: ignore[misc]
