"""Payload conversion: values to the JSON text that storage keeps, and back.

JSON by default, because operators read payloads in describe(), history and
SQL. Dataclasses and pydantic models are encoded as objects and rebuilt from
the type hint of the function that receives them. A value that cannot be
serialised fails at the call that passed it, naming what it was.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import sys
import types
import typing
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from . import _json
from ._json import Codec, payload_default
from .errors import PayloadRejected, StructuralLimitExceeded


class PayloadConverter(Protocol):
    """Turns values into stored text and back; replace it to use another format."""

    def encode(self, value: Any, what: str) -> str: ...

    def decode(self, text: str | None, type_hint: Any = None) -> Any: ...


class JSONConverter:
    """The default converter: compact JSON; dataclasses and pydantic supported.

    `codec` picks the JSON library: ``"orjson"`` (the ``fast`` extra; the
    default when it is installed) or ``"json"`` (the standard library; the
    default otherwise). Both store the same text and raise the same errors
    (see `durable._json`), so data written with one is read by the other.
    """

    def __init__(self, codec: str | None = None) -> None:
        self.codec: Codec = _json.codec(codec)

    def encode(self, value: Any, what: str) -> str:
        try:
            return self.codec.dumps(value, payload_default, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise PayloadRejected(
                f"{what} cannot be serialised to JSON: {exc}. Pass JSON-compatible values "
                "(dict, list, str, int, float, bool, None), dataclasses or pydantic models, "
                "or configure another payload converter"
            ) from exc

    def decode(self, text: str | None, type_hint: Any = None) -> Any:
        if text is None:
            return None
        return rebuild(self.codec.loads(text), type_hint)


def rebuild(value: Any, type_hint: Any) -> Any:
    """Rebuild dataclasses / pydantic models from decoded JSON using a type hint."""
    if type_hint is None or type_hint is Any or value is None:
        return value
    origin = typing.get_origin(type_hint)
    if origin is not None:
        args = typing.get_args(type_hint)
        if origin in (typing.Union, types.UnionType):
            present = [a for a in args if a is not type(None)]
            return rebuild(value, present[0]) if len(present) == 1 else value
        if origin in (list, Sequence) and args and isinstance(value, list):
            return [rebuild(v, args[0]) for v in value]
        if origin in (set, frozenset) and args and isinstance(value, list):
            return origin(rebuild(v, args[0]) for v in value)
        if origin is tuple and args and isinstance(value, list):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(rebuild(v, args[0]) for v in value)
            if len(args) == len(value):
                return tuple(rebuild(v, a) for v, a in zip(value, args, strict=True))
            return tuple(value)
        if origin is dict and len(args) == 2 and isinstance(value, dict):
            return {k: rebuild(v, args[1]) for k, v in value.items()}
        return value
    if isinstance(type_hint, type):
        if dataclasses.is_dataclass(type_hint) and isinstance(value, dict):
            hints = resolve_hints(type_hint)
            fields = {f.name for f in dataclasses.fields(type_hint)}
            return type_hint(
                **{k: rebuild(v, hints.get(k)) for k, v in value.items() if k in fields}
            )
        validate = getattr(type_hint, "model_validate", None)
        if callable(validate):
            return validate(value)
        if issubclass(type_hint, enum.Enum):
            return type_hint(value)
        if type_hint is datetime.datetime and isinstance(value, str):
            return datetime.datetime.fromisoformat(value)
        if type_hint is datetime.date and isinstance(value, str):
            return datetime.date.fromisoformat(value)
        if type_hint is uuid.UUID and isinstance(value, str):
            return uuid.UUID(value)
        if type_hint in (tuple, set, frozenset) and isinstance(value, list):
            return type_hint(value)
    return value


def check_size(text: str, limit: int, what: str) -> None:
    """Enforce the payload structural limit (bytes of UTF-8)."""
    size = len(text.encode("utf-8")) if len(text) * 4 > limit else len(text)
    if size > limit:
        raise StructuralLimitExceeded(
            "payload_bytes", size, limit, f"{what} is too large; store it elsewhere and pass a key"
        )


def decode_args(converter: PayloadConverter, payload: str, hints: Sequence[Any]) -> list[Any]:
    """Arguments recorded as a JSON array, each rebuilt from its parameter's hint."""
    decoded = converter.decode(payload)
    if not isinstance(decoded, list):
        return [decoded]
    return [rebuild(a, hints[i] if i < len(hints) else None) for i, a in enumerate(decoded)]


def resolve_hints(obj: Any) -> dict[str, Any]:
    """The type hints of a function or class, evaluated one by one.

    `typing.get_type_hints` fails as a whole when one annotation names
    something that does not exist at run time (a type imported under
    ``if TYPE_CHECKING:``); that would silently drop every hint, and
    dataclass arguments would arrive as dicts. Evaluating each annotation on
    its own keeps every hint that can be resolved.
    """
    try:
        return typing.get_type_hints(obj)
    except Exception:
        pass
    if isinstance(obj, type):
        annotations: dict[str, Any] = {}
        for klass in reversed(obj.__mro__):
            annotations.update(getattr(klass, "__annotations__", {}))
        module = sys.modules.get(obj.__module__)
        globalns = dict(vars(module)) if module is not None else {}
        localns: dict[str, Any] = dict(vars(obj))
    else:
        target = inspect.unwrap(obj)
        annotations = dict(getattr(target, "__annotations__", {}) or {})
        globalns = dict(getattr(target, "__globals__", {}) or {})
        localns = {}
    hints: dict[str, Any] = {}
    for name, annotation in annotations.items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, globalns, localns)  # as get_type_hints does
            except Exception:
                continue
        hints[name] = annotation
    return hints


def parameter_hints(fn: Callable[..., Any]) -> tuple[list[Any], Any]:
    """The positional parameter type hints and the return hint of `fn`."""
    hints = resolve_hints(fn)
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return [hints.get(p.name) for p in params], hints.get("return")
