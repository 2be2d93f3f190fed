"""A list's ``query``: the reference engine's visibility grammar.

``Field = literal`` predicates joined by ``AND`` (any case, between spaces),
nothing else: no other operator (``!=``, ``<``, ``LIKE``, ``IN``, ``OR``,
``NOT``, ...), no parentheses. A literal is a double-quoted JSON string, a
single-quoted string (``\\'`` and ``\\\\`` escaped), ``true``/``false`` or a
number. Each field is an exact match. Two lists read it (a `Grammar` each):

- the schedule list (`SCHEDULES`): the reference's schedule system fields,
  ``ScheduleId``, ``Status`` (``"active"`` or ``"paused"``),
  ``WorkflowType``, ``TaskQueue`` and ``Note``; the reference also takes a
  namespace's registered search attributes, and this engine registers none
  (``GET /api/search-attributes`` lists none), so any other field is refused.
  Embedded and remote: `Client.list_schedules_page(query=...)` reads it
  here, and ``GET /api/schedules`` too.
- the workflow list ``GET /api/workflows`` (`WORKFLOWS`): ``WorkflowId``,
  ``WorkflowType``, ``TaskQueue`` and ``ExecutionStatus`` (or ``Status``: the
  reference's status word each row shows, lowercase). The reference's own
  workflow list takes ``query`` as an id substring; a query with no ``=``,
  ``<`` or ``>`` still is one (`is_visibility_query`, docs/control-plane.md).
  Embedded and remote: `Client.list(query=...)` reads it here too
  (`run_filter`).

A query that does not fit is refused with the reasons the reference gives a
schedule list (`InvalidVisibilityQuery.reason`, ``schedule`` being the
grammar's `noun`): ``unsupported_schedule_visibility_predicate`` (another
operator), ``unsupported_schedule_visibility_field`` (another field),
``invalid_schedule_visibility_query`` (anything else: an empty predicate, an
unterminated string, a literal of the wrong type).
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from ._statuses import REFERENCE_STATUSES, listed_as
from .errors import ConfigurationError, InvalidScheduleQuery, InvalidVisibilityQuery

_PREDICATE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*=\s*(.+)$", re.S)
_UNSUPPORTED_OPERATOR = re.compile(r"!=|<>|>=|<=|>|<")
_UNSUPPORTED_WORD = re.compile(
    r"\b(?:OR|NOT|IN|LIKE|CONTAINS|STARTS_WITH|ENDS_WITH)\b", re.I)
_INT = re.compile(r"^-?(?:0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^-?(?:0|[1-9][0-9]*)\.[0-9]+$")

Literal = str | bool | int | float


class Field(NamedTuple):
    """A searchable field: the column storage compares, and, for a field of a
    few words, the value of each (a quoted literal, none other)."""

    column: str
    choices: dict[str, str | int] | None = None


class Grammar(NamedTuple):
    """One list's fields; `noun` names the list in messages and reasons."""

    noun: str
    fields: dict[str, Field]
    error: type[InvalidVisibilityQuery]
    #: how a refused field's message ends: what to use instead
    use: str


SCHEDULES = Grammar("schedule", {
    "ScheduleId": Field("schedule_id"),
    "Status": Field("paused", {"active": 0, "paused": 1}),
    "WorkflowType": Field("workflow_type"),
    "TaskQueue": Field("task_queue"),
    "Note": Field("note"),
}, InvalidScheduleQuery,
    "Use ScheduleId, Status, WorkflowType, TaskQueue, Note, or a registered search attribute.")

#: the reference's run statuses (`durable._statuses`), as its server takes them:
#: lowercase, compared strictly (``'Running'`` is refused, naming these)
_RUN_STATUSES: dict[str, str | int] = {s: s for s in REFERENCE_STATUSES}
WORKFLOWS = Grammar("workflow", {
    "WorkflowId": Field("workflow_id"),
    "WorkflowType": Field("workflow_type"),
    "TaskQueue": Field("task_queue"),
    "ExecutionStatus": Field("status", _RUN_STATUSES),
    "Status": Field("status", _RUN_STATUSES),
}, InvalidVisibilityQuery, "Use WorkflowId, WorkflowType, TaskQueue or ExecutionStatus "
    "(Status); a query with no =, < or > matches workflow ids holding it.")


class Predicate(NamedTuple):
    """``field = literal``; `column` and `value` are what storage compares."""

    field: str
    literal: Literal
    column: str
    value: str | int


def is_visibility_query(query: str) -> bool:
    """Whether the workflow list reads `query` as the grammar (it holds ``=``,
    ``<`` or ``>``), not as an id substring."""
    return any(ch in query for ch in "=<>")


def check_text(query: object) -> None:
    """`ConfigurationError` for a query that is not text (None is no query): the
    remote client sends it as it is, where a number would become id text."""
    if query is not None and not isinstance(query, str):
        raise ConfigurationError(f"query must be a string (Field = 'literal' [AND ...], "
                                 f"or id text), got {type(query).__name__}")


class RunFilter(NamedTuple):
    """What a workflow list's `query` asks of storage (`Store.list_runs`):
    `statuses`, ours that a row shows as the asked ``ExecutionStatus`` (None:
    any); `matching`, column = value pairs; `id_contains`, id text."""

    statuses: tuple[str, ...] | None
    matching: tuple[tuple[str, str], ...]
    id_contains: str | None


def run_filter(query: str | None) -> RunFilter:
    """A workflow list's `query` (`WORKFLOWS`, or id text: `is_visibility_query`)
    as storage filters it; the one reading of it, so ``GET /api/workflows`` and
    the embedded ``Client.list(query=...)`` answer alike. A status is matched
    by the word a row shows for it (`durable._statuses.listed_as`), never by
    the stored one. Raises `InvalidVisibilityQuery` (`check_text` first)."""
    check_text(query)
    if not query or not is_visibility_query(query):
        return RunFilter(None, (), query or None)
    statuses: tuple[str, ...] | None = None
    matching: list[tuple[str, str]] = []
    for pred in parse(query, WORKFLOWS):
        if pred.column == "status":
            shown = listed_as(str(pred.value))
            statuses = shown if statuses is None else tuple(s for s in statuses if s in shown)
        else:
            matching.append((pred.column, str(pred.value)))
    return RunFilter(statuses, tuple(matching), None)


def parse(query: str, grammar: Grammar = SCHEDULES) -> tuple[Predicate, ...]:
    """The predicates of `query`, in order; `grammar.error` if it does not fit."""
    refuse = _Refuse(grammar)
    text = query.strip()
    if not text:
        raise refuse("visibility query must not be empty.")
    parts = _split_and(text)
    if not parts:
        raise refuse("visibility query contains an unterminated string or empty predicate.")
    return tuple(_predicate(part, grammar, refuse) for part in parts)


def canonical(predicates: tuple[Predicate, ...]) -> list[list[Literal]]:
    """What a page token binds of a query: its fields and literals, however written
    (``ScheduleId = 'a'`` and ``ScheduleId="a"`` are the same filter)."""
    return [[p.field, p.literal] for p in predicates]


class _Refuse:
    """`grammar`'s error, its message led by the noun (``Schedule visibility ...``)."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar

    def __call__(self, message: str, kind: str = "invalid") -> InvalidVisibilityQuery:
        noun = self.grammar.noun
        reason = (f"invalid_{noun}_visibility_query" if kind == "invalid"
                  else f"unsupported_{noun}_visibility_{kind}")
        return self.grammar.error(f"{noun.capitalize()} {message}", reason=reason)


def _predicate(part: str, grammar: Grammar, refuse: _Refuse) -> Predicate:
    unquoted = _blank_quoted(part)
    if _UNSUPPORTED_OPERATOR.search(unquoted) or _UNSUPPORTED_WORD.search(unquoted):
        raise refuse("visibility supports only equality predicates joined by AND.",
                     "predicate")
    match = _PREDICATE.match(part)
    if match is None:
        raise refuse("visibility predicates must use: Field = literal.")
    field, literal = match[1], _literal(match[2].strip(), refuse)
    known = grammar.fields.get(field)
    if known is None:
        raise refuse(f"visibility field [{field}] is not searchable. {grammar.use}", "field")
    if known.choices is not None:
        if not isinstance(literal, str) or literal not in known.choices:
            raise refuse(f"visibility field [{field}] requires a quoted "
                         f"{_either(list(known.choices))} literal.")
        return Predicate(field, literal, known.column, known.choices[literal])
    if not isinstance(literal, str):
        raise refuse(f"visibility field [{field}] requires a quoted string literal.")
    return Predicate(field, literal, known.column, literal)


def _either(words: list[str]) -> str:
    return ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1]


def _literal(text: str, refuse: _Refuse) -> Literal:
    if not text:
        raise refuse("visibility predicate literal must not be empty.")
    if text[0] == '"':
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, str):
            raise refuse(f"visibility literal [{text}] is not a valid JSON string.")
        return value
    if text[0] == "'":
        if len(text) < 2 or not text.endswith("'"):
            raise refuse(f"visibility literal [{text}] is not a valid quoted string.")
        return text[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    raise refuse(f"visibility literal [{text}] must be a quoted string, number, or boolean.")


def _blank_quoted(text: str) -> str:
    """`text` with every quoted literal blanked, so words in a string are not operators."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == "\\" and i + 1 < len(text):
                i += 1
            elif ch == quote:
                quote = None
            out.append(" ")
        elif ch in "\"'":
            quote = ch
            out.append(" ")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _split_and(text: str) -> list[str]:
    """The predicates between the ``AND`` s outside quotes; [] when one is empty
    or a quote is left open."""
    parts: list[str] = []
    current: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            current.append(ch)
            if ch == "\\" and i + 1 < len(text):
                i += 1
                current.append(text[i])
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            current.append(ch)
        elif _and_at(text, i):
            part = "".join(current).strip()
            if not part:
                return []
            parts.append(part)
            current = []
            i += 3
            continue
        else:
            current.append(ch)
        i += 1
    last = "".join(current).strip()
    if quote is not None or not last:
        return []
    parts.append(last)
    return parts


def _and_at(text: str, i: int) -> bool:
    if text[i:i + 3].upper() != "AND":
        return False
    before = text[i - 1] if i else " "
    after = text[i + 3] if i + 3 < len(text) else " "
    return before.isspace() and after.isspace()
