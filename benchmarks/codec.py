"""JSON codecs for payloads and events: the standard library, orjson, msgspec.

Usage::

    python benchmarks/codec.py [--repeat 7]

Encode + decode of typical payloads (a step's argument list and result, a
small dict, 100 ints, a dataclass with nested dataclasses, a nested order,
a local step's ActivityCompleted event), each:

* ``json``: the standard library as `durable.JSONConverter` calls it (compact
  separators, ``allow_nan=False``, `payload_default`);
* ``orjson``: `durable._json.OrjsonCodec`, i.e. orjson behind the guard that
  keeps its text the standard library's (what durable uses when installed);
* ``orjson-raw``, ``msgspec-raw``: the bare libraries (``orjson.dumps`` /
  ``msgspec.json.Encoder().encode`` with the same default hook), for scale.
  Neither is a drop-in: both write NaN as null, non-ASCII unescaped, small
  floats differently; msgspec also writes UTC datetimes with ``Z`` and sets
  in iteration order, natively, where no hook can intervene.

Figures: µs per encode, per decode, and per encode + decode (median of
`--repeat` timeit runs); the speed-up is against ``json``. Timings on a
shared machine are noisy: compare rows of one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from durable._json import STDLIB, OrjsonCodec, payload_default


@dataclasses.dataclass
class Item:
    sku: str
    quantity: int
    price: float


@dataclasses.dataclass
class Order:
    order_id: str
    customer: str
    items: list[Item]
    express: bool = False


ORDER = Order("o-1042", "c-77", [Item("sku-1", 2, 9.5), Item("sku-2", 1, 120.0),
                                  Item("sku-3", 5, 0.99)], express=True)
NESTED = {
    "customer": {"id": "c-77", "name": "Ada Lovelace", "tier": "gold", "since": "2019-04-01"},
    "lines": [{"sku": f"sku-{i}", "qty": i, "price": 1.25 * i, "tags": ["a", "b"]}
              for i in range(10)],
    "totals": {"net": 68.75, "tax": 13.06, "gross": 81.81},
    "flags": [True, False, True],
}
PAYLOADS: dict[str, Any] = {
    "step args [int]": [12345],
    "step result int": 24691,
    "small dict": {"order_id": "o-123", "amount": 42, "currency": "EUR", "paid": True},
    "100 ints": list(range(1000, 1100)),
    "dataclass (nested)": ORDER,
    "nested order": NESTED,
    "event ActivityCompleted": {"op_id": "0:17", "activity_type": "bench_step", "local": True,
                                "attempt": 1, "result": 24691},
}


def _codecs() -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]:
    codecs: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
        "json": (lambda v: STDLIB.dumps(v, payload_default, False), STDLIB.loads),
    }
    try:
        import orjson

        fast = OrjsonCodec()
        codecs["orjson"] = (lambda v: fast.dumps(v, payload_default, False), fast.loads)
        codecs["orjson-raw"] = (lambda v: orjson.dumps(v, default=payload_default),
                                orjson.loads)
    except ImportError:
        print("orjson not installed: pip install 'durable-sdk[fast]'", file=sys.stderr)
    try:
        import msgspec

        encoder = msgspec.json.Encoder(enc_hook=payload_default)
        decoder = msgspec.json.Decoder()
        codecs["msgspec-raw"] = (encoder.encode, decoder.decode)
    except ImportError:
        print("msgspec not installed (pip install msgspec) to compare it", file=sys.stderr)
    return codecs


def _time(fn: Callable[[], Any], repeat: int) -> float:
    """Median µs per call."""
    number = max(1, int(0.02 / max(timeit.timeit(fn, number=50) / 50, 1e-9)))
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    codecs = _codecs()
    names = list(codecs)
    print(f"Python {sys.version.split()[0]}, "
          + ", ".join(f"{m} {__import__(m).__version__}" for m in ("orjson", "msgspec")
                      if m in sys.modules or _importable(m)))
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; µs per operation, "
          f"median of {args.repeat}; (x) = speed-up of encode+decode against json\n")
    header = "| payload | " + " | ".join(f"{n} enc / dec" for n in names) + " |"
    print(header)
    print("|---|" + "---:|" * len(names))
    totals = dict.fromkeys(names, 0.0)
    for label, value in PAYLOADS.items():
        cells = []
        reference = 0.0
        for name in names:
            encode, decode = codecs[name]
            text = encode(value)
            e = _time(lambda encode=encode, value=value: encode(value), args.repeat)
            d = _time(lambda decode=decode, text=text: decode(text), args.repeat)
            totals[name] += e + d
            if name == "json":
                reference = e + d
                cells.append(f"{e:.2f} / {d:.2f}")
            else:
                cells.append(f"{e:.2f} / {d:.2f} ({reference / (e + d):.1f}x)")
        print(f"| {label} | " + " | ".join(cells) + " |")
    ref = totals["json"]
    print("| **all, enc+dec** | " + " | ".join(
        f"**{totals[n]:.1f}**" + ("" if n == "json" else f" ({ref / totals[n]:.1f}x)")
        for n in names) + " |")
    same = all(json.loads(codecs["orjson"][0](v)) == json.loads(STDLIB.dumps(
        v, payload_default, False)) for v in PAYLOADS.values()) if "orjson" in codecs else None
    print(f"\norjson codec text decodes to the standard library's values: {same}")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
