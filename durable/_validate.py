"""Checking what users pass, at the call that passes it.

Bad input gets a `ConfigurationError` naming the field, the value and what
is allowed, before anything is written: a value that reached storage and
turned out to be unrepresentable there (an infinite timeout, an id with a
NUL) would fail far from its cause, or poison a transaction shared by other
runs. The same rules apply on every driver.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import inspect
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from .errors import ConfigurationError

#: The longest duration durable accepts (100 years): beyond it, an instant
#: computed from it is not representable as a date.
MAX_SECONDS = 100 * 365.25 * 24 * 3600

#: Ids, names, task queues and namespaces: at most this many characters.
MAX_NAME_LENGTH = 255

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")


def duration(value: Any, what: str, *, minimum: float = 0.0, inclusive: bool = True,
             maximum: float = MAX_SECONDS, unbounded: bool = False) -> float:
    """Seconds given as a number or a `timedelta`, within [minimum, maximum].

    The one home of durations: every timeout, interval and grace durable
    accepts is checked here, with the same rules and messages. Refused:
    strings, booleans, NaN, infinities (unless `unbounded`: infinity then
    means "no limit"), values below `minimum` (or equal to it when not
    `inclusive`) and above `maximum` (by default 100 years: an instant
    computed from a longer duration is not representable as a date).
    """
    # the common case, a float already checked once (options store floats): no more work
    if type(value) is float and (minimum <= value if inclusive else minimum < value) and (
            value <= maximum):
        return value
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(
            f"{what} must be a number of seconds or a datetime.timedelta, got {value!r} "
            f"({type(value).__name__})"
        )
    else:
        seconds = float(value)
    if math.isinf(seconds) and seconds > 0 and unbounded:
        return seconds
    if math.isnan(seconds) or math.isinf(seconds):
        raise ConfigurationError(
            f"{what} must be a finite number of seconds, got {value!r}; leave it unset "
            "(None) for no limit"
        )
    low_ok = seconds >= minimum if inclusive else seconds > minimum
    if not low_ok or seconds > maximum:
        unit = "second" if minimum == 1 else "seconds"
        bound = f"at least {minimum:g} {unit}" if inclusive else (
            f"greater than {minimum:g} {unit}")
        most = f"{maximum:g} seconds" + (" (100 years)" if maximum == MAX_SECONDS else "")
        raise ConfigurationError(f"{what} must be {bound} and at most {most}, got {value!r}")
    return seconds


def optional_duration(value: Any, what: str, *, minimum: float = 0.0, inclusive: bool = True,
                      maximum: float = MAX_SECONDS) -> float | None:
    """A `duration`, or None (no limit) left as it is."""
    if value is None:
        return None
    return duration(value, what, minimum=minimum, inclusive=inclusive, maximum=maximum)


def integer(value: Any, what: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An int (not a bool, float or string) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{what} must be an integer, got {value!r} ({type(value).__name__})"
        )
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ConfigurationError(f"{what} must be at least {minimum}{upper}, got {value!r}")
    return value


def number(value: Any, what: str, *, minimum: float, maximum: float = math.inf) -> float:
    """A finite float (ints accepted) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(
            f"{what} must be a number, got {value!r} ({type(value).__name__})"
        )
    if math.isnan(value) or math.isinf(value) or not minimum <= value <= maximum:
        upper = f" and at most {maximum:g}" if math.isfinite(maximum) else ""
        raise ConfigurationError(
            f"{what} must be a finite number at least {minimum:g}{upper}, got {value!r}"
        )
    return float(value)


def options(value: Any, default: T, what: str) -> T:
    """Options of the type of `default` (None: `default`): a dict, or another
    kind of options, would fail later with an AttributeError far from the call."""
    if value is None:
        return default
    kind = type(default)
    if type(value) is kind or isinstance(value, kind):
        return value
    raise ConfigurationError(
        f"{what} must be a durable.{kind.__name__}, got {value!r} ({type(value).__name__}); "
        f"build one: options=durable.{kind.__name__}(...)"
    )


def misplaced_keywords(call: str, given: Mapping[str, Any], options_type: type,
                       takes: str) -> ConfigurationError:
    """The error for keyword arguments a call does not take, saying where they go.

    Why: a Temporal user writes ``execute_activity(fn, x,
    start_to_close_timeout=10)``; Python's own ``TypeError`` ("unexpected
    keyword argument") says what is wrong but not what to write, and inside a
    workflow it fails the run. Option names are shown as the options object
    to build, with their values; other names as what they are: `takes` (the
    activity's or workflow's) arguments are positional only.
    """
    fields = {f.name for f in dataclasses.fields(options_type)}
    as_options = [name for name in given if name in fields]
    others = [name for name in given if name not in fields]
    parts: list[str] = []
    if as_options:
        shown = ", ".join(f"{name}={given[name]!r}" for name in as_options)
        parts.append(f"{call} takes its options in one object, not as keyword arguments: "
                     f"options=durable.{options_type.__name__}({shown})")
    if others:
        names = ", ".join(repr(name) for name in others)
        parts.append(f"{call} got the keyword argument(s) {names}, which it does not take: "
                     f"{takes} arguments are positional (pass them in order, or one dict "
                     f"or dataclass), and options go in options=durable."
                     f"{options_type.__name__}(...), whose fields are "
                     f"{', '.join(sorted(fields))}")
    return ConfigurationError("; ".join(parts))


def one_of(value: Any, allowed: tuple[str, ...], what: str) -> str:
    """`value` if it is one of `allowed`, else an error listing them and, for a
    near miss ("runing"), the one meant. Why: a filter word nobody stores
    matches nothing, and "no runs match" then reads as a fact about the runs."""
    if isinstance(value, str) and value in allowed:
        return value
    meant = difflib.get_close_matches(value, allowed, n=1) if isinstance(value, str) else []
    hint = f"; did you mean {meant[0]!r}?" if meant else ""
    raise ConfigurationError(f"{what} must be one of {', '.join(allowed)}, got {value!r}{hint}")


def driver_options(factory: Callable[..., Any], url: str, options: dict[str, Any]) -> None:
    """Refuse `durable.connect` options the driver does not take, naming those it
    does: passed on, they would raise a TypeError from inside the driver."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigurationError(
            f"durable.connect({url!r}) does not take {', '.join(unknown)}; its driver "
            f"accepts {', '.join(accepted) or 'no options'} (and namespace, clock, "
            "converter, limits for the client)"
        )


def sender(requester: dict[str, Any] | None, source: str) -> dict[str, Any]:
    """Who sends a signal or an update, as recorded (a cancellation request's shape)."""
    requester = json_object(requester, "requester")
    if not isinstance(source, str) or not source:
        raise ConfigurationError(f"source must be a non-empty string, got {source!r}")
    return {"requester": requester or {"type": "client", "id": None, "label": None},
            "source": source}


def storage_url(value: Any) -> str:
    """A storage URL is a string (a path, a number: an AttributeError once awaited)."""
    if isinstance(value, str):
        return value
    hint = (f"; for a SQLite file: 'sqlite:///{os.path.abspath(value)}'"
            if isinstance(value, os.PathLike) else "")
    raise ConfigurationError(
        "durable.connect() takes a storage URL string such as 'sqlite:///app.db' or "
        f"'postgresql://user@host/db', got {value!r} ({type(value).__name__}){hint}")


def choice(value: Any, kind: type[E], what: str) -> E:
    """A member of the enum `kind`, given as the member or its string value."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(f"{kind.__name__}.{m.name}" for m in kind)
        raise ConfigurationError(
            f"{what} must be one of {allowed}, got {value!r}"
        ) from None


#: a namespace the control plane can address: its X-Namespace header (and the
#: web UI, and the reference engine's client) takes only these
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def namespace(value: Any) -> str:
    """A namespace: `name`'s rules, and 1 to 128 letters, digits, ``.``, ``_``,
    ``:`` or ``-`` starting with a letter or digit. Why narrower than an id:
    HTTP carries a namespace in a header, which the control plane, the web UI
    and the reference client accept only in this form, so runs of any other
    namespace would be stored where no operator's tool could reach them."""
    name(value, "namespace")
    if not NAMESPACE_PATTERN.match(value):
        raise ConfigurationError(
            f"namespace {value!r} cannot be used: a namespace is 1 to 128 letters, digits, "
            "'.', '_', ':' or '-', starting with a letter or digit, because the HTTP control "
            "plane, the web UI and the reference client address it in a header that takes "
            "only these (runs in any other namespace would be out of their reach)")
    return str(value)


def name(value: Any, what: str) -> str:
    """An id, name, task queue or namespace: the same rules on every driver.

    1 to 255 characters of valid Unicode (encodable as UTF-8: no lone
    surrogates), without NUL or other control characters.
    """
    if not isinstance(value, str):
        raise ConfigurationError(f"{what} must be a string, got {value!r} ({type(value).__name__})")
    if not value:
        raise ConfigurationError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ConfigurationError(
            f"{what} is {len(value)} characters long; at most {MAX_NAME_LENGTH} are allowed "
            f"(it starts {value[:40]!r})"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"{what} {value!r} is not valid Unicode (character {exc.start}: a lone "
            "surrogate); ids and names must be encodable as UTF-8"
        ) from None
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ConfigurationError(
            f"{what} {value!r} contains the control character {bad!r}; ids and names "
            "may not contain NUL, newlines or other control characters"
        )
    return value


def optional_name(value: Any, what: str) -> str | None:
    return None if value is None else name(value, what)


def json_object(value: Any, what: str) -> dict[str, Any] | None:
    """None, or a dict of plain JSON values with finite numbers only.

    Such a value (a cancellation's ``requester``) is recorded as given and
    shown by every view; an infinity or NaN in it would be stored as a
    literal no strict JSON reader takes, so it is refused here, as the
    payload converter refuses it in arguments.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{what} must be a dict or None, got {value!r}")
    try:
        json.dumps(value, allow_nan=False)
    except RecursionError:
        raise ConfigurationError(f"{what} is nested too deeply to be stored as JSON") from None
    except ValueError as exc:
        raise ConfigurationError(
            f"{what} {value!r} holds a number JSON cannot carry ({exc}); "
            "pass finite numbers only (not math.inf or NaN)"
        ) from None
    except TypeError as exc:
        raise ConfigurationError(
            f"{what} must hold plain JSON values (dict, list, str, int, float, bool, "
            f"None): {exc}"
        ) from None
    return value


def sqlite_path_hint(path: str) -> str:
    """Why a SQLite URL's file or directory may not be where the user meant.

    ``sqlite:///tmp/app.db`` names ``tmp/app.db`` under the working directory
    (three slashes, then a relative path, as SQLAlchemy reads it); the
    absolute ``/tmp/app.db`` takes four. When the path is relative and the
    absolute reading would find its directory, the fix is that one slash;
    otherwise "" (nothing to add)."""
    from pathlib import Path

    if not path or path.startswith("/") or path == ":memory:":
        return ""
    absolute = Path("/" + path)
    if not absolute.parent.is_dir():
        return ""
    return (f"; three slashes and {path!r} is relative to the working directory: for the "
            f"absolute path {str(absolute)!r} write sqlite:///{absolute} (four slashes)")

