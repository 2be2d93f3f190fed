"""The web UI's Schedules pages: the list, one schedule, and its operator actions.

Like every page (`pages.py`), each read and action goes through the API
route's own operation (`listSchedules`, `describeSchedule`, `pauseSchedule`,
`resumeSchedule`, `triggerSchedule`) with the visitor's role, so a viewer
reads and an operator acts, exactly as on ``/api``. Actions have a
confirmation page (GET) in front of the form that does them (POST, with the
session's CSRF token).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ...present_ops import schedule_ended, schedule_overdue
from ...schedules import Overlap
from ..errors import HTTPError, classify
from ..remote_schedules import LIST_PAGE_MAX
from .pages import NOTICES, UIError, Visitor, _required

if TYPE_CHECKING:
    from .pages import WebUI

OVERLAPS = [o.value for o in Overlap]
#: the most schedules the list page shows (read LIST_PAGE_MAX at a time)
LIST_SCAN = 1000
NOTICES.update({
    "schedule-paused": "The schedule is paused: it fires no more until it is resumed.",
    "schedule-resumed": "The schedule is resumed: it fires from its next fire time (fires "
                        "that fell in the pause are not made up).",
    "schedule-started": "Fired: a run was started (it is the newest of the recent fires).",
    "schedule-buffered": "Fired, and buffered: its run starts when the open run closes.",
    "schedule-skipped": "Fired, and skipped under the overlap policy (an earlier run is "
                        "still open).",
})
#: action -> (API operation, title, verb, what it does)
ACTIONS: dict[str, tuple[str, str, str, str]] = {
    "pause": ("pauseSchedule", "Pause the schedule", "Pause",
              "The schedule fires no more until it is resumed. Runs it started go on."),
    "resume": ("resumeSchedule", "Resume the schedule", "Resume",
               "The schedule fires again from its next fire time after now; fires that fell "
               "in the pause are not made up (a backfill does that)."),
    "trigger": ("triggerSchedule", "Fire the schedule now", "Fire now",
                "One fire at the current second, under the overlap policy chosen here: it "
                "may start a run, wait for the open one, or be skipped."),
}


class SchedulePages:
    """The pages of `ui` (a `WebUI`) about schedules."""

    def __init__(self, ui: WebUI) -> None:
        self.ui = ui

    def routes(self) -> list[BaseRoute]:
        page = self.ui._page
        return [
            Route("/ui/schedules", page("/ui/schedules", self.list), methods=["GET"]),
            Route("/ui/schedule", page("/ui/schedule", self.detail), methods=["GET"]),
            Route("/ui/schedule/{action}", page("/ui/schedule/{action}", self.action),
                  methods=["GET", "POST"]),
        ]

    async def _describe(self, request: Request, visitor: Visitor) -> dict[str, Any]:
        schedule_id = _required(request, "id", "schedule id")
        _, info = await self.ui.perform(request, visitor, "describeSchedule",
                                        {"scheduleId": schedule_id})
        return dict(info)

    async def list(self, request: Request, visitor: Visitor) -> Response:
        # the first LIST_SCAN schedules, a page (at most the reference's 200) at a time;
        # a schedule deleted between two pages (the page's last one: its token is
        # stale) starts the scan again, a few times at most
        for attempt in range(3):
            items: list[dict[str, Any]] = []
            params: dict[str, Any] = {"page_size": LIST_PAGE_MAX}
            try:
                while True:
                    _, page = await self.ui.perform(request, visitor, "listSchedules", params)
                    items += page.get("schedules") or []
                    params["next_page_token"] = page.get("next_page_token")
                    if not params["next_page_token"] or len(items) >= LIST_SCAN:
                        break
            except HTTPError as exc:
                if exc.code != "stale_schedule_page_token" or attempt == 2:
                    raise
                continue
            break
        return self.ui.render(request, visitor, "schedules.html", items=items,
                              when_text=when_text)

    async def detail(self, request: Request, visitor: Visitor) -> Response:
        info = await self._describe(request, visitor)
        return self.ui.render(request, visitor, "schedule.html", s=info, when_text=when_text,
                              overdue=schedule_overdue(info.get("overdue")),
                              ended=schedule_ended(info))

    async def action(self, request: Request, visitor: Visitor) -> Response:
        name = str(request.path_params.get("action"))
        if name not in ACTIONS:
            raise UIError(404, "Not found", f"There is no action {name!r} for schedules.")
        operation_id, title, verb, warning = ACTIONS[name]
        values: dict[str, str] = {}
        error: str | None = None
        status = 200
        if request.method == "POST":
            values = await self.ui._form(request, visitor)
            schedule_id = _required(request, "id", "schedule id")
            try:
                notice = await self._act(request, visitor, name, operation_id, schedule_id,
                                         values)
                return RedirectResponse(visitor.url("/schedule", id=schedule_id,
                                                    notice=notice), status_code=303)
            except (UIError, HTTPError) as exc:
                if exc.status in (401, 403):
                    raise
                status, error = exc.status, exc.message
            except Exception as exc:
                known = classify(exc)
                if known is None or known[0] == 404:
                    raise
                status, error = known[0], str(exc)
        elif not visitor.can_act:
            raise UIError(403, "Not allowed",
                          f"A {visitor.role} may only read; to {verb.lower()} a schedule "
                          "needs the operator role. Sign in with an operator token.")
        info = await self._describe(request, visitor)
        return self.ui.render(request, visitor, "schedule_action.html", status_code=status,
                              s=info, action=name, title=title, verb=verb, warning=warning,
                              values=values, error=error, overlaps=OVERLAPS)

    async def _act(self, request: Request, visitor: Visitor, name: str, operation_id: str,
                   schedule_id: str, form: Mapping[str, str]) -> str:
        params = {"scheduleId": schedule_id}
        if name == "trigger":
            overlap = form.get("overlap", "").strip() or None
            if overlap is not None and overlap not in OVERLAPS:
                raise UIError(422, "Unknown overlap policy",
                              f"The overlap policy is one of {', '.join(OVERLAPS)}, not "
                              f"{overlap!r}.")
            _, fire = await self.ui.perform(request, visitor, operation_id, params,
                                            {"overlap_policy": overlap})
            return f"schedule-{fire.get('fire_outcome', 'started')}"
        note = form.get("note", "").strip() or None
        await self.ui.perform(request, visitor, operation_id, params, {"note": note})
        return "schedule-paused" if name == "pause" else "schedule-resumed"


def when_text(spec: Mapping[str, Any]) -> str:
    """``0 2 * * * (Europe/Amsterdam)``, ``every 3600 s``, or both."""
    parts = [str(c) for c in spec.get("cron") or ()]
    if spec.get("every"):
        every = f"every {spec['every']} s"
        if spec.get("offset"):
            every += f" (+{spec['offset']} s)"
        parts.append(every)
    text = " | ".join(parts) or "-"
    if spec.get("cron") and spec.get("timezone") not in (None, "UTC"):
        text += f" ({spec['timezone']})"
    return text
