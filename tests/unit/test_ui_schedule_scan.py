"""The UI's Schedules page reads the list page after page; a schedule deleted
between two of its pages makes its token stale (409, the reference's), and the
page starts its scan again rather than showing an error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from durable.http.errors import HTTPError
from durable.http.ui.schedules import SchedulePages

pytestmark = pytest.mark.anyio


class FakeUI:
    """`perform` answers from a script; `render` hands back what it was given."""

    def __init__(self, answers: list[dict[str, Any] | HTTPError]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []

    async def perform(self, request: Any, visitor: Any, operation_id: str,
                      params: Mapping[str, Any]) -> tuple[int, Any]:
        assert operation_id == "listSchedules"
        self.asked.append(dict(params))
        answer = self.answers.pop(0)
        if isinstance(answer, HTTPError):
            raise answer
        return 200, answer

    def render(self, request: Any, visitor: Any, template: str, **context: Any) -> Any:
        return context


def page(*ids: str, token: str | None = None) -> dict[str, Any]:
    return {"schedules": [{"schedule_id": i} for i in ids], "next_page_token": token}


def stale() -> HTTPError:
    return HTTPError(409, "stale_schedule_page_token", "stale")


async def test_a_stale_token_between_the_pages_starts_the_scan_again() -> None:
    ui = FakeUI([page("c", "b", token="t1"), stale(), page("c", token="t2"), page("a")])
    shown = await SchedulePages(ui).list(None, None)  # type: ignore[arg-type]
    assert [s["schedule_id"] for s in shown["items"]] == ["c", "a"]
    assert [p.get("next_page_token") for p in ui.asked] == [None, "t1", None, "t2"]


async def test_a_list_stale_every_time_gives_up_after_three_scans() -> None:
    ui = FakeUI([page("b", token="t"), stale()] * 3)
    with pytest.raises(HTTPError) as caught:
        await SchedulePages(ui).list(None, None)  # type: ignore[arg-type]
    assert caught.value.code == "stale_schedule_page_token" and not ui.answers


async def test_other_refusals_are_not_retried() -> None:
    ui = FakeUI([page("b", token="t"), HTTPError(403, "forbidden", "no"), page("x")])
    with pytest.raises(HTTPError):
        await SchedulePages(ui).list(None, None)  # type: ignore[arg-type]
    assert len(ui.answers) == 1
