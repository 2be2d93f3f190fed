"""The run page's operator actions: a confirmation page, a form, the API operation.

Request cancellation, cancel, terminate, retry after review, reset, signal,
query and update: each is a confirmation page (GET) in front of a form
(POST, with the session's CSRF token) that performs the action's API
operation (`actions.ACTIONS`, the data) with the visitor's role, exactly as
on ``/api``; a query or an update shows its answer on the page. Like the
Schedules pages (`schedules.py`), they are added to the UI by `ui_routes`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import HTTPError, classify
from ..wire import loads_finite
from .actions import ACTIONS, ANSWERED, QUERY_WAIT, Action
from .pages import UIError, Visitor, _required, _signal_supported

if TYPE_CHECKING:
    from .pages import WebUI


class RunActionPages:
    """The operator actions of `ui` (a `WebUI`) on one run."""

    def __init__(self, ui: WebUI) -> None:
        self.ui = ui

    def routes(self) -> list[BaseRoute]:
        # after the run's own pages (/ui/run/timeline, ...), which it would shadow
        return [Route("/ui/run/{action}", self.ui._page("/ui/run/{action}", self.action),
                      methods=["GET", "POST"])]

    async def action(self, request: Request, visitor: Visitor) -> Response:
        name = str(request.path_params.get("action"))
        action = ACTIONS.get(name)
        if action is None or (name == "signal" and not _signal_supported()):
            raise UIError(404, "Not found", f"There is no action {name!r} for runs.")
        values: dict[str, str] = {}
        error: str | None = None
        answer: dict[str, Any] | None = None
        status = 200
        if request.method == "POST" and name in ANSWERED:
            values = await self.ui._form(request, visitor)
            try:
                answer = await self._ask(request, visitor, action, values)
            except Exception as exc:
                status, error = _shown(exc)
        elif request.method == "POST":
            values = await self.ui._form(request, visitor)
            workflow_id = _required(request, "wf", "workflow id")
            run_id = _required(request, "run", "run id")
            assert visitor.role is not None
            try:
                if name == "reset":  # shows the new run
                    run_id = await self._reset(request, visitor, workflow_id, run_id, values)
                    notice = action.notice
                else:
                    notice = await self._act(request, visitor, action, workflow_id, run_id,
                                             values)
                return RedirectResponse(visitor.url("/run", wf=workflow_id, run=run_id,
                                                    notice=notice), status_code=303)
            except Exception as exc:
                status, error = _shown(exc)
        elif not visitor.can_act and name != "query":
            raise UIError(403, "Not allowed",
                          f"A {visitor.role} may only read; {action.title.lower()} needs the "
                          "operator role. Sign in with an operator token.")
        info = await self.ui._describe(request, visitor)
        return self.ui.render(request, visitor, "action.html", status_code=status, info=info,
                           run=info.get("run") or {}, tab="", action=action, values=values,
                           error=error, answer=answer, request_id=uuid.uuid4().hex,
                           last_sequence=None)

    async def _ask(self, request: Request, visitor: Visitor, action: Action,
                   form: Mapping[str, str]) -> dict[str, Any]:
        """A query or an update through its API operation; what to show of the answer."""
        workflow_id = _required(request, "wf", "workflow id")
        run_id = _required(request, "run", "run id")
        what = action.name
        name = form.get("name", "").strip()
        if not name:
            raise UIError(422, f"The {what} name is missing",
                          f"Give the name of the workflow's {what} handler.")
        args = _arguments(form)
        params = {"workflowId": workflow_id, "runId": run_id, f"{what}Name": name}
        if what == "query":
            _, answer = await self.ui.perform(request, visitor, action.operation_id, params,
                                           {"input": args, "timeout_seconds": QUERY_WAIT})
            return {"name": name, "result": answer.get("result")}
        request_id = form.get("request_id", "").strip() or uuid.uuid4().hex
        _, answer = await self.ui.perform(request, visitor, action.operation_id, params, {
            "input": args, "request_id": request_id, "source": "web_ui",
            "requester": {"type": "web_ui", "id": None, "label": visitor.role}})
        return {"name": name, "result": answer.get("result"),
                "update_id": answer.get("update_id")}

    async def _act(self, request: Request, visitor: Visitor, action: Action,
                   workflow_id: str, run_id: str, form: Mapping[str, str]) -> str:
        """Perform the action through its API operation; the notice to show after."""
        params = {"workflowId": workflow_id, "runId": run_id}
        reason = form.get("reason", "").strip()
        if action.name == "request-cancellation":
            raw = form.get("cleanup_timeout_seconds", "").strip() or "30"
            try:
                timeout = float(raw)
            except ValueError:
                timeout = math.nan
            if not math.isfinite(timeout):
                raise UIError(422, "Bad cleanup timeout",
                              f"The cleanup timeout must be a number of seconds, got {raw!r}.")
            body: dict[str, Any] = {
                "cleanup_timeout_seconds": timeout, "source": "web_ui",
                "requester": {"type": "web_ui", "id": None, "label": visitor.role},
                "rules": "durable",  # (the SDK's budgets: any number of seconds over 0)
            }
            if reason:
                body["reason"] = reason
            status, _ = await self.ui.perform(request, visitor, action.operation_id, params, body)
            return "cancellation-requested" if status == 202 else "cancellation-repeated"
        if action.name == "signal":
            await self._signal(request, visitor, workflow_id, run_id, form)
            return action.notice
        if action.name == "retry-after-review":
            units = form.get("units", "").strip()
            if units not in ("", "rerun", "confirm"):
                raise UIError(422, "Unknown choice",
                              f"Units are run again (rerun) or recorded done (confirm), "
                              f"not {units!r}.")
            _, answer = await self.ui.perform(request, visitor, action.operation_id,
                                           {"workflowId": workflow_id},
                                           {"units": units} if units else {})
            return "review-cleared" if answer.get("cleared") else "review-not-marked"
        await self.ui.perform(request, visitor, action.operation_id, params,
                           {"reason": reason} if reason else {})
        return action.notice

    async def _reset(self, request: Request, visitor: Visitor, workflow_id: str, run_id: str,
                     form: Mapping[str, str]) -> str:
        """Through the API's reset route; the new run's id."""
        to_op = form.get("to_op", "").strip()
        if not to_op:
            raise UIError(422, "Op missing", "Give the op to continue from, e.g. 0:5 (the "
                                             "timeline shows each op's id).")
        _, answer = await self.ui.perform(
            request, visitor, "resetWorkflow", {"workflowId": workflow_id},
            {"to_op": to_op, "reason": form.get("reason", "").strip() or "reset from the web UI",
             "run_id": run_id})
        return str(answer["run_id"])

    async def _signal(self, request: Request, visitor: Visitor, workflow_id: str, run_id: str,
                      form: Mapping[str, str]) -> None:
        """Through the API's own signal route (its role check, schema and errors)."""
        name = form.get("name", "").strip()
        if not name:
            raise UIError(422, "Signal name missing", "Give the signal's name.")
        args = _arguments(form)
        await self.ui.perform(request, visitor, "signalWorkflowRun",
                           {"workflowId": workflow_id, "runId": run_id, "signalName": name},
                           {"input": args, "source": "web_ui", "rules": "durable",
                            "requester": {"type": "web_ui", "id": None,
                                          "label": visitor.role}})


def _shown(exc: Exception) -> tuple[int, str]:
    """The status and message of a failed action, to show on its page; raised
    again when the page cannot explain it, or when it is 401/403 (sign in)."""
    if isinstance(exc, UIError | HTTPError):
        if exc.status in (401, 403):
            raise exc
        return exc.status, exc.message
    known = classify(exc)
    if known is None:
        raise exc
    return known[0], str(exc)


def _arguments(form: Mapping[str, str]) -> list[Any]:
    """The form's ``args`` field: a JSON array (the handler's positional arguments)."""
    raw = form.get("args", "").strip() or "[]"
    try:
        args = loads_finite(raw)
    except ValueError as exc:
        raise UIError(422, "Arguments are not JSON",
                      f"The arguments must be a JSON array, e.g. [\"approved\", 3] ({exc})."
                      ) from None
    if not isinstance(args, list):
        raise UIError(422, "Arguments are not a list",
                      "The arguments must be a JSON array (the handler's positional "
                      "arguments), e.g. [] or [\"approved\"].")
    return args
