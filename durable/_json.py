"""Compact JSON text for everything durable stores, fast when orjson is installed.

Payloads (through `durable.JSONConverter`), history events, failures and
options are all stored as compact JSON. The standard library writes it in
~3-5 µs for a small value; orjson (the ``fast`` extra) in well under 1 µs,
and a step writes and reads several of them. So there are two codecs with
one contract, and the text they produce is the same, byte for byte:

- `StdlibCodec`: ``json`` with compact separators, ASCII-only output
  (``ensure_ascii``), NaN and Infinity refused or written as the standard
  library writes them (`allow_nan`).
- `OrjsonCodec`: orjson, with a guard. Wherever orjson's text could differ
  from the standard library's, or orjson declines a value, the standard
  library decides instead, so the text, or the error and its message, is
  exactly what `StdlibCodec` gives. The cases: output that is not ASCII
  (orjson never escapes), that contains ``null`` (orjson writes NaN and
  Infinity as null where the standard library refuses them), a float below
  1e-4 written differently (``0.00001`` / ``1e-7`` for ``1e-05`` /
  ``1e-07``), DEL (0x7f, escaped by the standard library); any value orjson
  refuses (ints beyond 64 bits, non-string dict keys, nesting deeper than
  254, types only our `default` knows how to refuse). When reading, text
  with a run of 19 or more digits goes to the standard library (orjson
  reads integers beyond 64 bits as floats), and so does anything orjson
  refuses (NaN literals, lone surrogates, numbers out of float range).

orjson encodes enums and UUIDs itself, as `payload_default` does (the value;
the canonical string), so orjson is used only with that default: a caller
with another (the store's ``default=str``) gets the standard library, and
the store's own hot path (a local step's history events) holds plain JSON
values only, for which every default gives the same text. Dataclasses and
datetimes are handed to `default` (orjson's passthrough options): orjson's
own dataclass encoding differs (it reads ``__dict__``, skips names starting
with ``_``), `dataclasses.asdict`'s is what is stored.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import json
import re
import uuid
from collections.abc import Callable
from typing import Any, Protocol

try:
    import orjson
except ImportError:  # the `fast` extra is not installed: the standard library does it all
    orjson = None  # type: ignore[assignment]

Default = Callable[[Any], Any]


def payload_default(value: Any) -> Any:
    """What JSON lacks, for payloads: dataclasses and pydantic models as
    objects, dates as ISO 8601, UUIDs as strings, enums as their value, sets
    as sorted arrays (so equal sets store equal text)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__qualname__} is not JSON serialisable")


class Codec(Protocol):
    """Values to compact JSON text and back (one contract, two implementations)."""

    name: str

    def dumps(self, value: Any, default: Default | None = None, allow_nan: bool = True) -> str:
        """Compact, ASCII-only JSON text; `default` converts what JSON lacks."""
        ...

    def loads(self, text: str) -> Any:
        """The value of a JSON text (raises `json.JSONDecodeError` when it is not)."""
        ...


class StdlibCodec:
    """The standard library's ``json``: the reference the fast codec must match."""

    name = "json"

    def dumps(self, value: Any, default: Default | None = None, allow_nan: bool = True) -> str:
        return json.dumps(value, default=default, separators=(",", ":"), allow_nan=allow_nan)

    def loads(self, text: str) -> Any:
        return json.loads(text)


# Text orjson writes that the standard library would write otherwise (see the
# module docstring), looked for in orjson's output before it is accepted: by
# one regular expression in short texts, by substring searches in long ones
# (faster per byte).
_MARKERS = (b"null", b"e-", b"0.0000", b"\x7f")
_DIFFERS = re.compile(b"|".join(re.escape(m) for m in _MARKERS))
# orjson before 3.11 wrote big floats' exponents without their sign (1e16 for
# 1e+16): with such a version every exponent goes to the standard library.
_DIFFERS_OLD = re.compile(_DIFFERS.pattern + rb"|\de\d")
# Integers orjson would read as floats: beyond 64 bits (below -2**63 has 19
# digits). Found by mapping digits to "0" and the rest to " " (bytes.translate)
# and searching for 19 zeros: ~20 times faster than a regular expression.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_DIGIT_RUN = b"0" * 19


@functools.lru_cache(maxsize=1024)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _shallow_default(value: Any) -> Any:
    """`payload_default` for orjson: a dataclass as a shallow dict of its fields
    (orjson encodes the values itself, nested dataclasses through this again),
    which gives `dataclasses.asdict`'s JSON without its deep copy (~30 times
    faster). Should it differ in an error, the standard library's attempt
    with `payload_default` gives the usual error."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: getattr(value, name) for name in _field_names(type(value))}
    return payload_default(value)


class OrjsonCodec:
    """orjson where its text is the standard library's; the standard library elsewhere."""

    name = "orjson"

    def __init__(self) -> None:
        if orjson is None:
            raise ImportError("orjson is not installed: pip install 'durable-sdk[fast]'")
        self._dumps = orjson.dumps
        self._loads = orjson.loads
        self._options = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
        self._stdlib = StdlibCodec()
        self._signed_exponents = orjson.dumps(1e16) == b"1e+16"
        self._pattern = _DIFFERS if self._signed_exponents else _DIFFERS_OLD

    def dumps(self, value: Any, default: Default | None = None, allow_nan: bool = True) -> str:
        if default is not payload_default:  # orjson's enums and UUIDs are payload_default's
            return self._stdlib.dumps(value, default, allow_nan)
        try:
            out = self._dumps(value, default=_shallow_default, option=self._options)
        except Exception:
            # orjson declined (a big int, a non-string key, a type `default`
            # refuses, ...): the standard library gives the text or the error.
            return self._stdlib.dumps(value, default, allow_nan)
        if out.isascii() and not self._differs(out):
            return out.decode("ascii")
        return self._stdlib.dumps(value, default, allow_nan)

    def _differs(self, out: bytes) -> bool:
        """Whether the standard library might write `out` otherwise."""
        if len(out) < 128 or not self._signed_exponents:
            return self._pattern.search(out) is not None
        null, small, smaller, delete = _MARKERS
        return null in out or small in out or smaller in out or delete in out

    def loads(self, text: str) -> Any:
        if not isinstance(text, str):  # bytes (a BLOB): as the standard library reads it
            return json.loads(text)
        if len(text) < 19 or _DIGIT_RUN not in text.encode(
                "utf-8", "surrogatepass").translate(_DIGITS):
            try:
                return self._loads(text)
            except orjson.JSONDecodeError:
                pass  # NaN, a lone surrogate, 1e400...: the standard library decides
        return json.loads(text)


STDLIB = StdlibCodec()
#: the codec durable uses by default: orjson when installed
DEFAULT: Codec = OrjsonCodec() if orjson is not None else STDLIB

_CODECS: dict[str, Callable[[], Codec]] = {"json": StdlibCodec, "orjson": OrjsonCodec}


def codec(name: str | None = None) -> Codec:
    """The codec called `name` (``"json"`` or ``"orjson"``), or the default."""
    if name is None:
        return DEFAULT
    factory = _CODECS.get(name)
    if factory is None:
        raise ValueError(f"unknown JSON codec {name!r}; use 'json' or 'orjson'")
    return factory()


def dumps(value: Any, default: Default | None = None, allow_nan: bool = True) -> str:
    """Compact JSON text with the default codec."""
    return DEFAULT.dumps(value, default, allow_nan)


def loads(text: str) -> Any:
    """A JSON text's value with the default codec."""
    return DEFAULT.loads(text)
