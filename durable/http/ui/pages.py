"""The web UI's routes: server-rendered pages, forms and one event stream.

Every read and every action goes through the control plane's `perform`, that
is through the API route's own operation: the same role check (a viewer's
POST is a 403 here exactly as on ``/api``), the same parameter and body
schemas, the same handler and errors. The UI adds only what a browser
needs: a session cookie instead of a bearer token (`session.py`), a CSRF
token on every form, confirmation pages in front of every action, and HTML.

Pages work without JavaScript. ``static/ui.js`` adds live updates (an
EventSource on ``/ui/run/stream``, which follows the run through the history
long poll and holds no database connection while it waits), countdowns that
keep deadlines current, and an auto-refresh of the runs list.

Beside this module: what the pages show is built by `views.py` (and `cascade.py`,
`chart.py`); the run's operator actions are `run_actions.py` (their data `actions.py`),
the Schedules, Queues and dashboard pages their own modules, all in `ui_routes`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

import anyio
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ... import present as _fmt
from ..._log import get_logger
from ...client import WorkflowHandle
from .. import model
from ..auth import role_allows
from ..errors import HTTPError, classify
from ..throttle import client_of
from . import chart, views
from .asgi import EventStream, Labelled
from .cascade import cascade_tree
from .session import COOKIE_NAME, Session, SessionCodec

if TYPE_CHECKING:
    from .plane import Plane

log = get_logger("durable.http.ui")

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# A form body larger than this is refused (the largest field is a signal's arguments).
MAX_FORM_BYTES = 256 * 1024
# How long one event stream lives before the browser reconnects (Last-Event-ID).
STREAM_SECONDS = 50.0
STREAM_WAIT = 15.0
# The most history a run page reads (children, activities); the timeline pages on.
MAX_EVENTS = 5000
TIMELINE_PAGE = 500
SEARCH_SCAN = 500
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
NOTICES = {
    "cancellation-requested": "Cancellation requested: the run is asked to stop and clean up "
                              "before its cleanup deadline.",
    "cancellation-repeated": "A cancellation was already requested: the original request and "
                             "its deadline stand (a repeat never extends the cleanup budget).",
    "cancelled": "The run was cancelled at once (no cleanup ran).",
    "terminated": "The run was terminated.",
    "signalled": "The signal was recorded; the workflow handles it at its next step.",
    "review-cleared": "The review mark was cleared: a worker claims and replays the run now.",
    "review-not-marked": "The run was not marked for review: nothing was changed.",
    "reset": "Reset: this is the new run. It keeps the results recorded before the op you "
             "chose and runs the rest with the code workers run now.",
    "signed-in": "Signed in.",
}


class UIError(Exception):
    """A page that could not be shown: its status, a title and what to do."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


@dataclass
class Visitor:
    """Who is looking, in which namespace, and the links and tokens their pages need."""

    session: Session
    role: str | None
    set_cookie: bool
    namespace: str
    base: str
    csrf: str
    anonymous: bool
    # the namespaces the session's token may act in (None: every one)
    namespaces: frozenset[str] | None = None

    @property
    def can_act(self) -> bool:
        return self.role is not None and role_allows(self.role, "operator")

    def url(self, path: str = "", **query: Any) -> str:
        """A UI link, keeping the namespace; None values are left out."""
        params = {k: v for k, v in query.items() if v is not None and v != ""}
        if self.namespace != "default":
            params = {"ns": self.namespace, **params}
        text = f"{self.base}{path}"
        return f"{text}?{urlencode(params)}" if params else text


def _signal_supported() -> bool:
    """Signals arrive with `WorkflowHandle.signal`; until then the action is not offered."""
    return hasattr(WorkflowHandle, "signal")


class WebUI:
    """The pages for one control plane (`create_app(ui=True)` mounts them at /ui)."""

    def __init__(self, plane: Plane, key: bytes) -> None:
        self.plane = plane
        self.codec = SessionCodec(key)
        self.env = Environment(
            loader=FileSystemLoader(str(TEMPLATES)), autoescape=True,
            undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.globals.update(
            statuses=views.STATUSES, lifecycles=views.LIFECYCLES, is_open=views.is_open,
            seconds_text=views.seconds_text, pretty=views.pretty, compact=views.compact,
            failure_chain=views.failure_chain, failure_message=views.failure_message,
            requester_text=_fmt.requester_text, sender_text=_fmt.sender_text,
            boundary_text=views.boundary_text, duration=_fmt.duration, progress_of=_fmt.progress_of,
            cleanup_end_label=_fmt.cleanup_end_label, ancestors_text=_fmt.ancestors_text,
            holders_text=_fmt.holders_text, cleanup_of=_fmt.cleanup_of, owner_text=views.owner_text,
            build_wait_text=_fmt.build_wait_text, blocked_text=_fmt.blocked_text,
            holder_text=_fmt.holder_text, holder_gone=_fmt.holder_gone)

    # ------------------------------------------------------------ plumbing

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ui", self._page("/ui", self.index), methods=["GET"]),
            Route("/ui/", self._page("/ui", self.index), methods=["GET"]),
            Route("/ui/login", self._page("/ui/login", self.login, public=True),
                  methods=["GET", "POST"]),
            Route("/ui/logout", self._page("/ui/logout", self.logout, public=True),
                  methods=["POST"]),
            Route("/ui/runs", self._page("/ui/runs", self.runs), methods=["GET"]),
            Route("/ui/run", self._page("/ui/run", self.run), methods=["GET"]),
            Route("/ui/run/timeline", self._page("/ui/run/timeline", self.timeline),
                  methods=["GET"]),
            Route("/ui/run/activity", self._page("/ui/run/activity", self.activity),
                  methods=["GET"]),
            Route("/ui/run/cascade", self._page("/ui/run/cascade", self.cascade),
                  methods=["GET"]),
            Route("/ui/run/stream", self._page("/ui/run/stream", self.stream),
                  methods=["GET"]),
            Route("/ui/run/live", self._page("/ui/run/live", self.live), methods=["GET"]),
            Mount("/ui/static", Labelled("/ui/static", StaticFiles(directory=str(STATIC))),
                  name="ui-static"),
            Route("/ui/{rest:path}", self._page("/ui/{rest}", self.not_found, public=True),
                  methods=["GET", "POST"]),
        ]

    def _visitor(self, request: Request) -> Visitor:
        session = self._session_of(request)
        fresh = session is None
        role: str | None = None
        namespaces: frozenset[str] | None = None
        if session is not None and session.fingerprint is not None:
            grant = self.plane.tokens.grant_of_fingerprint(session.fingerprint, self.codec.key)
            if grant is None:  # its token was removed: the session ends
                session, fresh = None, True
            else:
                role, namespaces = grant.role, grant.namespaces
        if session is None:
            session = self.codec.new()
        anonymous = role is None and self.plane.anonymous_role is not None
        if role is None:
            role = self.plane.anonymous_role
        namespace = request.query_params.get("ns") or (
            "default" if namespaces is None or "default" in namespaces else min(namespaces))
        base = str(request.scope.get("root_path", "")).rstrip("/") + "/ui"
        visitor = Visitor(session, role, fresh, "default", base,
                          self.codec.csrf_token(session), anonymous, namespaces)
        if not _NAMESPACE.match(namespace):
            raise UIError(400, "Bad namespace",
                          "The namespace (ns=) must be 1 to 128 letters, digits, '.', '_', ':' "
                          "or '-', starting with a letter or digit.")
        visitor.namespace = namespace
        return visitor

    def _session_of(self, request: Request) -> Session | None:
        """The first valid session among the request's ``durable_ui`` cookies.

        A browser may hold several (a broken one for path ``/`` and a fresh one
        for ``/ui``) and sends them all; taking whichever came last, as a
        plain cookie dict does, would let a broken cookie shadow the session
        the login page set, and lock the browser out."""
        header = request.headers.get("cookie", "")
        for part in header.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name == COOKIE_NAME:
                session = self.codec.decode(value.strip().strip('"'))
                if session is not None:
                    return session
        return None

    def _page(self, label: str, handler: Callable[[Request, Visitor], Awaitable[Response]],
              *, public: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            request.scope["durable.route"] = label
            visitor: Visitor | None = None
            try:
                visitor = self._visitor(request)
                if not public and visitor.role is None:
                    if request.method != "GET":
                        raise UIError(401, "Sign in first",
                                      "This form needs a signed-in session; sign in and try "
                                      "again.")
                    target = request.url.path + (f"?{request.url.query}"
                                                 if request.url.query else "")
                    response: Response = RedirectResponse(
                        visitor.url("/login", next=target), status_code=303)
                else:
                    response = await handler(request, visitor)
            except UIError as exc:
                response = self._error(request, visitor, exc.status, exc.title, exc.message)
            except HTTPError as exc:
                response = self._error(request, visitor, exc.status, _title(exc.status),
                                       exc.message)
            except Exception as exc:
                known = classify(exc)
                if known is None:
                    request_id = str(request.scope.get("durable.request_id", ""))
                    log.exception("web UI page failed", request_id=request_id, route=label)
                    response = self._error(request, visitor, 500, "Server error",
                                           f"The server failed (request id {request_id}); "
                                           "see its logs.")
                else:
                    response = self._error(request, visitor, known[0], _title(known[0]),
                                           str(exc))
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            if visitor is not None and visitor.set_cookie:
                self._set_cookie(request, response, visitor)
            return response

        return endpoint

    def _set_cookie(self, request: Request, response: Response, visitor: Visitor) -> None:
        response.set_cookie(
            COOKIE_NAME, self.codec.encode(visitor.session), max_age=self.codec.lifetime,
            path=visitor.base, httponly=True, samesite="strict",
            secure=request.url.scheme == "https",
        )

    def render(self, request: Request, visitor: Visitor | None, template: str,
               status_code: int = 200, **context: Any) -> HTMLResponse:
        now = _fmt.utcnow()
        html = self.env.get_template(template).render(
            v=visitor, now=now, request_path=request.url.path,
            current_url=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            when=lambda value: views.when(value, now),
            deadline=lambda value, *rest, **kw: views.deadline(value, now, *rest, **kw),
            took=lambda a, b: views.took(a, b, now),
            notice=NOTICES.get(request.query_params.get("notice") or ""),
            signal_supported=_signal_supported(),
            **context,
        )
        # a stored value may hold a lone surrogate, which UTF-8 cannot encode:
        # shown escaped, as the CLI shows it (decisions.md (t))
        return HTMLResponse(_fmt.escape_surrogates(html), status_code=status_code)

    def _error(self, request: Request, visitor: Visitor | None, status: int, title: str,
               message: str) -> Response:
        return self.render(request, visitor, "error.html", status_code=status, title=title,
                           message=message)

    async def perform(self, request: Request, visitor: Visitor, operation_id: str,
                      params: Mapping[str, Any], body: Any = None) -> tuple[int, Any]:
        if visitor.role is None:
            raise UIError(401, "Sign in first", "Sign in to see this page.")
        return await self.plane.perform(
            operation_id, role=visitor.role, namespace=visitor.namespace, params=params,
            body=body, request_id=str(request.scope.get("durable.request_id", "")),
            namespaces=visitor.namespaces)

    async def _form(self, request: Request, visitor: Visitor) -> dict[str, str]:
        """The urlencoded form, size-capped; 403 unless its CSRF token is the session's."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        size = 0
        chunks: list[bytes] = []
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                raise UIError(413, "Form too large",
                              f"The form is over {MAX_FORM_BYTES} bytes, the most this page "
                              "takes.")
            chunks.append(chunk)
        form: dict[str, str] = {}
        if kind == "application/x-www-form-urlencoded":
            try:
                parsed = parse_qs(b"".join(chunks).decode("utf-8"), keep_blank_values=True,
                                  max_num_fields=50, strict_parsing=False)
            except (UnicodeDecodeError, ValueError):
                parsed = {}
            form = {k: v[-1] for k, v in parsed.items()}
        if not self.codec.csrf_ok(visitor.session, form.get("csrf")):
            raise UIError(403, "Form refused (CSRF)",
                          "The form's CSRF token is missing or does not belong to your "
                          "session, so nothing was done. Reload the page and submit the form "
                          "again.")
        return form

    async def _history(self, request: Request, visitor: Visitor, workflow_id: str,
                       run_id: str, after: int = 0, most: int = MAX_EVENTS,
                       ) -> tuple[list[dict[str, Any]], bool]:
        """The run's events after `after` (at most `most`; True when there are more)."""
        events: list[dict[str, Any]] = []
        while len(events) < most:
            limit = min(1000, most - len(events))
            _, page = await self.perform(request, visitor, "getHistoryRun", {
                "workflowId": workflow_id, "runId": run_id, "after_sequence": after,
                "page_size": limit})
            batch = [_event(item) for item in page.get("events") or []]
            events.extend(batch)
            if not page.get("next_page_token"):
                return events, False
            after = int(page["last_sequence"])
        return events, True

    async def _describe(self, request: Request, visitor: Visitor) -> dict[str, Any]:
        workflow_id = _required(request, "wf", "workflow id")
        run_id = request.query_params.get("run") or None
        _, info = await self.perform(request, visitor, *(
            ("describeWorkflowRun", {"workflowId": workflow_id, "runId": run_id}) if run_id
            else ("describeWorkflow", {"workflowId": workflow_id})))

        # the worker holding an open run with nothing open: the wire names it
        # (`durable.present.holder`), alive or presumed gone; and the run's owner's presence
        return views.with_holder(views.describe_view(model.describe_from_wire(info)),
                                 info.get("holder"), info.get("owner_presence"))

    # ------------------------------------------------------------ auth pages

    async def index(self, request: Request, visitor: Visitor) -> Response:
        return RedirectResponse(visitor.url("/runs"), status_code=303)

    async def login(self, request: Request, visitor: Visitor) -> Response:
        next_url = request.query_params.get("next") or ""
        if not next_url.startswith(visitor.base + "/") or next_url.startswith("//"):
            next_url = visitor.url("/runs")
        if request.method == "GET":
            return self.render(request, visitor, "login.html", next_url=next_url, error=None,
                               has_tokens=len(self.plane.tokens) > 0)
        form = await self._form(request, visitor)
        client = client_of(request.scope)
        self.plane.check_throttle(client)  # before the token is looked at (throttle.py)
        token = form.get("token", "").strip()
        fingerprint = self.plane.tokens.session_fingerprint(token, self.codec.key) \
            if token else None
        if fingerprint is None:
            self.plane.throttle.failed(client)
            return self.render(request, visitor, "login.html", status_code=401,
                               next_url=next_url,
                               error="That token is not known here. Use a token from the "
                                     "server's DURABLE_TOKENS, tokens file or tokens=.",
                               has_tokens=len(self.plane.tokens) > 0)
        role = self.plane.tokens.role_of(token)
        signed = Visitor(self.codec.new(fingerprint), role, True, visitor.namespace,
                         visitor.base, "", False)
        response = RedirectResponse(next_url, status_code=303)
        self._set_cookie(request, response, signed)
        return response

    async def logout(self, request: Request, visitor: Visitor) -> Response:
        await self._form(request, visitor)
        visitor.session = self.codec.new()
        visitor.set_cookie = True
        return RedirectResponse(visitor.url("/login"), status_code=303)

    async def not_found(self, request: Request, visitor: Visitor) -> Response:
        raise UIError(404, "Not found",
                      "There is no such page in the web UI; start from the runs list.")

    # ------------------------------------------------------------ runs list

    async def runs(self, request: Request, visitor: Visitor) -> Response:
        q = request.query_params
        status = q.get("status") or None
        if status is not None and status not in views.STATUSES:
            raise UIError(400, "Bad filter",
                          f"status must be one of {', '.join(views.STATUSES)}, got {status!r}")
        workflow_type = (q.get("type") or "").strip() or None
        search = (q.get("q") or "").strip()
        cursor = q.get("cursor") or None
        try:
            limit = max(1, min(200, int(q.get("limit") or 50)))
        except ValueError:
            raise UIError(400, "Bad page size", "limit must be a whole number") from None
        params: dict[str, Any] = {"durable_status": status, "workflow_type": workflow_type,
                                  "next_page_token": None if search else cursor}
        searched = bool(search)
        if search:
            try:
                await self.perform(request, visitor, "describeWorkflow",
                                   {"workflowId": search})
                return RedirectResponse(visitor.url("/run", wf=search), status_code=303)
            except Exception as exc:
                known = classify(exc)
                if known is None or known[0] != 404:
                    raise
        want, found = (SEARCH_SCAN if searched else limit), list[dict[str, Any]]()
        while True:  # (a search reads the newest SEARCH_SCAN runs, a page at a time)
            params["page_size"] = min(model.LIST_PAGE_MAX, want - len(found))
            _, page = await self.perform(request, visitor, "listWorkflows", params)
            found += page.get("workflows") or []
            params["next_page_token"] = next_cursor = page.get("next_page_token")
            if not next_cursor or len(found) >= want:
                break
        items = [views.filled(_summary(item), views.SUMMARY_KEYS) for item in found]
        if searched:
            needle = search.casefold()
            items = [i for i in items if needle in str(i.get("workflow_id")).casefold()]
            next_cursor = None
        _, types = await self.perform(request, visitor, "listWorkflowTypes", {})
        return self.render(request, visitor, "runs.html", items=items, status=status,
                           workflow_type=workflow_type, search=search, searched=searched,
                           scan=SEARCH_SCAN, cursor=cursor, next_cursor=next_cursor,
                           limit=limit, types=types.get("workflow_types") or [])

    # ------------------------------------------------------------ run pages

    async def run(self, request: Request, visitor: Visitor) -> Response:
        info = await self._describe(request, visitor)
        run = info.get("run") or {}
        events, truncated = await self._history(request, visitor, info["workflow_id"],
                                                run["run_id"])
        pending = [op for op in info.get("pending_operations") or [] if isinstance(op, dict)]
        started = next((e.get("data") or {} for e in events
                        if e.get("type") == "WorkflowStarted"), {})
        ends = [e["data"] for e in events if e.get("type") in ("WorkflowCompleted",
                "WorkflowCancelled") and "result" in (e.get("data") or {})]
        result, has_result = (ends[-1]["result"], True) if ends else (None, False)
        return self.render(
            request, visitor, "run.html", info=info, run=run, tab="overview",
            timeouts=views.run_timeouts(info), pending=pending,
            children=views.children(events, pending),
            activities=views.activities(events, pending),
            failures=[f for f in info.get("failures") or [] if isinstance(f, dict)],
            input=started.get("input"), result=result, has_result=has_result,
            truncated=truncated, last_sequence=events[-1]["sequence"] if events else 0,
        )

    async def live(self, request: Request, visitor: Visitor) -> Response:
        """The overview's live parts alone: what the run waits for and its pending
        operations with their heartbeat progress. A heartbeat records no history
        event, so the event stream never wakes for one; the page's script fetches
        this every second instead (one describe, no history read)."""
        info = await self._describe(request, visitor)
        return self.render(request, visitor, "run_live.html", info=info,
                           run=info.get("run") or {}, pending=info["pending_operations"])

    async def timeline(self, request: Request, visitor: Visitor) -> Response:
        info = await self._describe(request, visitor)
        run = info.get("run") or {}
        try:
            after = max(0, int(request.query_params.get("after") or 0))
        except ValueError:
            raise UIError(400, "Bad position", "after must be a whole number") from None
        events, more = await self._history(request, visitor, info["workflow_id"],
                                           run["run_id"], after=after, most=TIMELINE_PAGE)
        started = run.get("started_at")
        if started is None and events:
            started = events[0].get("recorded_at")
        every, cut = (events, more) if after == 0 and not more else await self._history(
            request, visitor, info["workflow_id"], run["run_id"])
        return self.render(
            request, visitor, "timeline.html", info=info, run=run, tab="timeline",
            rows=views.timeline(events, started), after=after, more=more,
            last_sequence=events[-1]["sequence"] if events else after,
            chart=chart.chart(chart.spans(every), started, run.get("closed_at"),
                              _fmt.utcnow()),
            chart_cut=cut, tree=await chart.run_tree(self, request, visitor, info),
        )

    async def activity(self, request: Request, visitor: Visitor) -> Response:
        info = await self._describe(request, visitor)
        run = info.get("run") or {}
        op_id = _required(request, "op", "activity op id")
        events, _ = await self._history(request, visitor, info["workflow_id"], run["run_id"])
        pending = [op for op in info.get("pending_operations") or [] if isinstance(op, dict)]
        detail = views.activity_detail(events, op_id, pending, _fmt.utcnow())
        if detail is None:
            raise UIError(404, "No such activity",
                          f"Run {run.get('run_id')} of {info.get('workflow_id')!r} scheduled "
                          f"no activity with op id {op_id!r}.")
        return self.render(
            request, visitor, "activity.html", info=info, run=run, tab="activities",
            a=detail, timeline_rows=views.timeline(detail["events"], run.get("started_at")),
            last_sequence=events[-1]["sequence"] if events else 0,
        )

    async def cascade(self, request: Request, visitor: Visitor) -> Response:
        info = await self._describe(request, visitor)
        run = info.get("run") or {}
        _, data = await self.perform(request, visitor, "getCancellationCascadeRun",
                                     {"workflowId": info["workflow_id"], "runId": run["run_id"]})
        return self.render(request, visitor, "cascade.html", info=info, run=run,
                           tab="cascade", c=cascade_tree(data), last_sequence=None)

    async def stream(self, request: Request, visitor: Visitor) -> Response:
        """Server-sent events for a run page: ``history`` when events were recorded
        (the page then fetches itself again), ``closed`` once the run is closed."""
        workflow_id = _required(request, "wf", "workflow id")
        run_id = _required(request, "run", "run id")
        raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            first = max(0, int(raw))
        except ValueError:
            raise UIError(400, "Bad position", "after must be a whole number") from None
        # fail here (a page, not a broken stream) for a run that is not there
        await self.perform(request, visitor, "getResultRun",
                           {"workflowId": workflow_id, "runId": run_id})

        async def events() -> AsyncIterator[str]:
            after = first
            yield "retry: 2000\n\n"
            end = anyio.current_time() + STREAM_SECONDS
            while (left := end - anyio.current_time()) > 0:
                try:
                    _, page = await self.perform(request, visitor, "getHistoryRun", {
                        "workflowId": workflow_id, "runId": run_id, "after_sequence": after,
                        "wait": min(STREAM_WAIT, max(0.1, left))})
                    batch = page.get("events") or []
                    if batch:
                        after = int(page["last_sequence"])
                        data = {"after": after, "types": [e.get("event_type") for e in batch]}
                        yield f"id: {after}\nevent: history\ndata: {json.dumps(data)}\n\n"
                        continue
                    status, result = await self.perform(
                        request, visitor, "getResultRun",
                        {"workflowId": workflow_id, "runId": run_id})
                except Exception as exc:
                    log.warning("web UI event stream stopped", error=str(exc)[:200])
                    yield "event: failed\ndata: {}\n\n"
                    return
                if status == 200:
                    yield (f"id: {after}\nevent: closed\ndata: "
                           f"{json.dumps({'status': result.get('durable_status')})}\n\n")
                    return
                yield ": waiting\n\n"

        return EventStream(events, {"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _event(item: dict[str, Any]) -> dict[str, Any]:
    """A wire history event as the page shows it (our event's fields)."""
    event = model.event_from_wire(item)
    return {"sequence": event.sequence, "type": event.type,
            "recorded_at": item.get("timestamp"), "data": event.data}


def _summary(item: dict[str, Any]) -> dict[str, Any]:
    """A wire list item as the page shows it (our status; instants as ISO text)."""
    out = model.summary_from_wire(item)
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in out.items()}


def _required(request: Request, name: str, what: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise UIError(400, f"Missing {what}",
                      f"This page needs the {what} in its address ({name}=...).")
    return value


def _title(status: int) -> str:
    return {400: "Bad request", 401: "Sign in first", 403: "Not allowed", 404: "Not found",
            409: "Conflict", 413: "Too large", 422: "Not accepted",
            429: "Too many failed sign-ins",
            503: "Storage unavailable"}.get(status, "Error")
