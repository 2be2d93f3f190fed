"""``GET /api/schedules``: the schedule list in the reference engine's contract.

Newest first (``created_at``; schedules created at the same instant by id),
one page at a time, with the reference's page tokens and refusals:

- a query parameter the list does not take: 422
  ``unsupported_schedule_list_filter`` naming it (``field``);
- a ``next_page_token`` this server did not sign: 400
  ``malformed_schedule_page_token``;
- a token given out in another namespace: 403
  ``schedule_page_token_namespace_mismatch``;
- a ``query`` that does not fit the reference's schedule visibility grammar
  (``Field = literal`` joined by ``AND``: `durable._visibility_query`): 422
  ``invalid_schedule_visibility_query``, ``unsupported_schedule_visibility_field``
  or ``unsupported_schedule_visibility_predicate``, ``field: query``;
- a token given out for other filters (``status``, ``workflow_type``, the
  ``query``'s predicates however written; ``page_size`` may change): 409
  ``schedule_page_token_filter_mismatch``;
- a token whose last schedule is no longer in the list it was given for
  (deleted, or changed so that the filters no longer keep it): 409
  ``stale_schedule_page_token``: page again from the first page.

They are checked in the reference's order (the token's seal, its namespace,
the query, the filters, then whether its position is still listed), and each
refusal is the reference's body: ``message``, ``reason``, ``field``,
``errors`` and ``validation_errors`` (``{field: [message]}``) and
``last_safe_cursor`` (the position the token held, ``{created_at,
schedule_id}``, once it is known to be ours; else null), which its client's
``ScheduleListError`` reads.

A token is the SDK's cursor (the created_at and id of the page's last
schedule, `durable._embedded.encode_cursor`, as the run list's) with the
namespace and a fingerprint of the filters it was given for, sealed with the
server's key (`durable.http.signing`): one a client made or changed is
malformed, so none can name a position, a namespace or filters the server
did not give it. (The rows are read in the request's namespace whatever a
token says: a token is never a way into another namespace.) Paging is keyset
paging; whether the position is still listed is read in the page's own
transaction (`durable.store.schedule_reads.list_schedules`, the SDK's
`StaleCursor`), so a schedule created or deleted between two pages moves no
other one, and the deletion of the page's last one is said, not passed over.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

from .._embedded import decode_cursor
from .._visibility_query import Predicate, canonical
from .._visibility_query import parse as parse_query
from ..errors import ConfigurationError, InvalidScheduleQuery, StaleCursor
from .errors import HTTPError
from .remote_schedules import schedule_to_wire
from .routes import ANY_OBJECT, ERROR_SCHEMA, Call, Operation, Param, Reply, text
from .signing import seal, unseal

#: the reference's bound: pages of 1 to 200 schedules, 50 by default
LIST_PAGE_MAX = 200
#: what a token is signed for (`durable.http.signing`)
PURPOSE = b"durable-schedule-list-page"
#: a query parameter the reference takes and does not filter by (it names the
#: namespace, which comes from the X-Namespace header here)
TOLERATED = frozenset({"namespace"})


def list_error(status: int, reason: str, message: str, field: str,
               cursor: dict[str, str] | None = None) -> HTTPError:
    """A refusal in the reference's shape (its ScheduleController's list errors)."""
    errors = {field: [message]}
    return HTTPError(status, reason, message, field=field, errors=errors,
                     validation_errors=errors, last_safe_cursor=cursor)


def unsupported_filter(name: str) -> HTTPError | None:
    """A query parameter the list does not declare: 422, as the reference's."""
    if name in TOLERATED:
        return None
    return list_error(422, "unsupported_schedule_list_filter", (
        f"Schedule list filter [{name}] is not supported. The list takes status, "
        "workflow_type, query, page_size and next_page_token."), name)


def fingerprint(params: dict[str, Any], predicates: tuple[Predicate, ...]) -> str:
    """The filters a page was read with, as a token keeps them (the query by its
    predicates, however it was written)."""
    chosen = json.dumps([params.get("status"), params.get("workflow_type"),
                         canonical(predicates)], separators=(",", ":"))
    return hashlib.sha256(chosen.encode()).hexdigest()[:32]


def seal_token(key: bytes, namespace: str, filters: str, cursor: str) -> str:
    body = {"v": 1, "ns": namespace, "f": filters, "c": cursor}
    return seal(key, PURPOSE, json.dumps(body, separators=(",", ":")).encode())


def _malformed() -> HTTPError:
    return list_error(400, "malformed_schedule_page_token", (
        "Schedule continuation token is malformed or has an invalid signature. It is not "
        "one this server returned: pass the next_page_token of the previous page, or none "
        "for the first page."), "next_page_token")


def open_token(key: bytes, token: str) -> tuple[str, str, str, dict[str, str]]:
    """(namespace, filters, the SDK's cursor, the public position) of a token
    this server sealed; else 400 ``malformed_schedule_page_token``."""
    raw = unseal(key, PURPOSE, token)
    try:
        body = json.loads(raw) if raw is not None else None
    except ValueError:
        body = None
    if not (isinstance(body, dict) and body.get("v") == 1
            and all(isinstance(body.get(k), str) and body[k] for k in ("ns", "f", "c"))):
        raise _malformed()
    try:
        created_at, schedule_id = decode_cursor(body["c"])
        moment = datetime.datetime.fromtimestamp(created_at, datetime.UTC)
    except (ConfigurationError, ValueError, OverflowError, OSError):
        raise _malformed() from None
    position = {"created_at": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "schedule_id": schedule_id}
    return body["ns"], body["f"], body["c"], position


async def list_schedules(call: Call) -> tuple[int, Any]:
    """One page, newest first, filtered in storage (so a page is full whatever
    the filters); ``next_page_token`` is null on the last page."""
    p = call.params
    cursor = given_for = position = None
    token = p.get("next_page_token")
    if token:
        namespace, given_for, cursor, position = open_token(call.signing_key, token)
        if namespace != call.namespace:
            raise list_error(403, "schedule_page_token_namespace_mismatch", (
                "Schedule continuation token belongs to a different namespace. Page on in "
                "the namespace that gave it, or start without a token."),
                "next_page_token", position)
    try:
        predicates = parse_query(p["query"]) if p.get("query") is not None else ()
    except InvalidScheduleQuery as exc:
        raise list_error(422, exc.reason, str(exc), "query", position) from None
    filters = fingerprint(p, predicates)
    if given_for is not None and given_for != filters:
        raise list_error(409, "schedule_page_token_filter_mismatch", (
            "Schedule continuation token must be reused with the same status, workflow "
            "type, and visibility query. Start without a token to list with other "
            "filters."), "next_page_token", position)
    try:
        page = await call.client.list_schedules_page(
            limit=p["page_size"], cursor=cursor, status=p.get("status"),
            workflow_type=p.get("workflow_type"), query=p.get("query"))
    except StaleCursor:
        raise list_error(409, "stale_schedule_page_token", (
            "Schedule continuation token cursor is no longer present in the unchanged "
            "filtered set. Restart pagination without a token."),
            "next_page_token", position) from None
    shown = [schedule_to_wire(i) for i in page.items]
    after = page.next_cursor
    return 200, {"schedules": shown, "schedule_count": len(shown),
                 "next_page_token": None if after is None else seal_token(
                     call.signing_key, call.namespace, filters, after)}


def list_operation() -> Operation:
    """The list's route (one of `schedules.schedule_operations()`)."""
    token_refusal = "{message, reason, field, errors, validation_errors, last_safe_cursor}"
    return Operation(
        "GET", "/api/schedules", "listSchedules",
        "List the namespace's schedules, newest first", list_schedules, tags=("schedules",),
        unknown_query=unsupported_filter,
        params=(
            Param("page_size", "query",
                  {"type": "integer", "minimum": 1, "maximum": LIST_PAGE_MAX, "default": 50},
                  "At most this many: 1 to 200 (the reference's bound)."),
            Param("status", "query", {"type": "string", "enum": ["active", "paused"]},
                  "Only active or only paused schedules."),
            Param("workflow_type", "query", text(255, "Only this workflow type."),
                  "Only schedules starting this type."),
            Param("query", "query", text(2048, "Field = literal [AND ...]."),
                  "The reference's schedule visibility query: equality predicates "
                  "joined by AND on ScheduleId, Status, WorkflowType, TaskQueue, Note "
                  "(e.g. WorkflowType = \"report\" AND Status = \"active\")."),
            Param("next_page_token", "query", text(8192, "The previous page's token."),
                  "The next_page_token of the previous page, in the same namespace with "
                  "the same status, workflow_type and query."),
        ),
        replies=(
            Reply(200, "{schedules, schedule_count, next_page_token}: newest first "
                       "(created_at, then schedule id); next_page_token is null on the "
                       "last page", ANY_OBJECT),
            Reply(400, f"malformed_schedule_page_token: a next_page_token this server did "
                       f"not give, {token_refusal}", ERROR_SCHEMA),
            Reply(403, "schedule_page_token_namespace_mismatch: a next_page_token of "
                       "another namespace (or forbidden: the token's role)", ERROR_SCHEMA),
            Reply(409, "schedule_page_token_filter_mismatch: a next_page_token given for "
                       "other filters; stale_schedule_page_token: one whose last schedule "
                       "the filters no longer keep (restart without a token)",
                  ERROR_SCHEMA),
            Reply(422, "unsupported_schedule_list_filter: a query parameter the list does "
                       "not take (field names it); validation_failed: a parameter that "
                       "does not fit; invalid_schedule_visibility_query, "
                       "unsupported_schedule_visibility_field, "
                       "unsupported_schedule_visibility_predicate: a query that does not "
                       "fit the grammar (field: query)", ERROR_SCHEMA),
        ),
    )
