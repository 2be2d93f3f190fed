"""A small JSON Schema (2020-12 subset) validator for request bodies and parameters.

The control plane declares each route's request schema once; the same
dictionary is published in the OpenAPI document and checked here, so the
spec and the server cannot disagree. Only the keywords the routes use are
supported (type, enum, properties, required, additionalProperties, items,
minItems/maxItems, minLength/maxLength, pattern, minimum/maximum,
exclusiveMinimum, maxProperties); an unknown keyword is a programming error
and raises at import time through `check_schema`.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

Schema = dict[str, Any]

_KNOWN = {
    "type", "enum", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "maxProperties", "description", "default", "examples", "format", "title",
}

# Text fields refuse NUL (PostgreSQL cannot store it in TEXT); the pattern is
# published too, so generated clients and property-based tests know it.
TEXT_PATTERN = "^[^\\u0000]*$"


class SchemaViolation(Exception):
    """`where` (a dotted path such as ``body.input[2]``) does not fit its schema."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def check_schema(schema: Schema) -> Schema:
    """Refuse keywords this validator does not implement (fail at import, not at runtime)."""
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"schema keywords not supported by durable.http.schema: {unknown}")
    for sub in (schema.get("properties") or {}).values():
        check_schema(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            check_schema(schema[key])
    return schema


@lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _fits(actual: str, allowed: list[str]) -> bool:
    return actual in allowed or (actual == "integer" and "number" in allowed)


def validate(value: Any, schema: Schema, where: str) -> None:
    """Raise `SchemaViolation` naming the first place `value` breaks `schema`."""
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        actual = _type_of(value)
        if not _fits(actual, allowed):
            raise SchemaViolation(where, f"must be {' or '.join(allowed)}, got {actual}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SchemaViolation(where, "must be a finite number")
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(v) for v in schema["enum"])
        raise SchemaViolation(where, f"must be one of {choices}, got {value!r}")
    if isinstance(value, str):
        _validate_string(value, schema, where)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, where)
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaViolation(where, f"must have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaViolation(where, f"must have at most {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                validate(item, schema["items"], f"{where}[{i}]")
    elif isinstance(value, dict):
        _validate_object(value, schema, where)


def _validate_string(value: str, schema: Schema, where: str) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise SchemaViolation(where, f"must be at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise SchemaViolation(where, f"must be at most {schema['maxLength']} characters")
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        raise SchemaViolation(where, f"must match the pattern {schema['pattern']}")
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        raise SchemaViolation(where, "must be valid Unicode text (no lone surrogates)")


def _validate_number(value: float, schema: Schema, where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaViolation(where, f"must be at least {schema['minimum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise SchemaViolation(where, f"must be greater than {schema['exclusiveMinimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaViolation(where, f"must be at most {schema['maximum']}")


def _validate_object(value: dict[str, Any], schema: Schema, where: str) -> None:
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        raise SchemaViolation(where, f"must have at most {schema['maxProperties']} members")
    for name in schema.get("required", ()):
        if name not in value:
            raise SchemaViolation(f"{where}.{name}", "is required")
    properties: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            validate(item, properties[name], f"{where}.{name}")
        elif extra is False:
            known = ", ".join(sorted(properties)) or "none"
            raise SchemaViolation(f"{where}.{name}", f"is not a known field (known: {known})")
        elif isinstance(extra, dict):
            validate(item, extra, f"{where}.{name}")
