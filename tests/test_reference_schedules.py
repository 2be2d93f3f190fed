"""The reference engine's own client's schedule methods against `durable serve`.

`durable-workflow` 2.12.0 (pinned in the dev extra) creates, lists,
describes, triggers, pauses, resumes, backfills, updates, reads the history
of and deletes a schedule on our control plane (tests/test_reference_client.py's
live server and worker), with its Avro input envelope and its error mapping
(`ScheduleNotFound`, `ScheduleAlreadyExists`, `ScheduleListError`). The fired
run is executed by our worker and its result read by the reference client.
Its list pages newest first with tokens bound to the namespace and filters
they were given for, filters by the reference's visibility query, and refuses
what the reference refuses (stale tokens included), in its shapes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx
import pytest
from test_reference_client import (
    OPERATOR,
    RESULT_TIMEOUT,
    Live,
    anyio_backend,
    driver_name,
    live,
    run_reference,
    setup,
)
from test_reference_client import client as ref_client

import durable
from durable.clock import VirtualClock
from durable.http.signing import b64, unb64

dw = pytest.importorskip("durable_workflow")
dw_errors = pytest.importorskip("durable_workflow.errors")

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend", "driver_name", "live", "setup"]  # fixtures used from there

NEVER = "0 2 1 1 *"
#: long before the real clock of the test: schedules made at T0 are the oldest
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() + 0.5
HEADERS = {"Authorization": f"Bearer {OPERATOR}",
           "X-Durable-Workflow-Control-Plane-Version": "2"}


async def test_the_reference_clients_schedule_methods_work(live: Live) -> None:
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            handle = await c.create_schedule(
                schedule_id="ref-nightly",
                spec=dw.ScheduleSpec(cron_expressions=[NEVER], timezone="Europe/Amsterdam"),
                action=dw.ScheduleAction(workflow_type="ref_greet", input=["sched"],
                                         execution_timeout_seconds=600),
                overlap_policy="allow_all", note="from the reference client")
            assert handle.schedule_id == "ref-nightly"
            with pytest.raises(dw_errors.ScheduleAlreadyExists):
                await c.create_schedule(
                    schedule_id="ref-nightly", spec=dw.ScheduleSpec(cron_expressions=[NEVER]),
                    action=dw.ScheduleAction(workflow_type="ref_greet"))

            described = await c.describe_schedule("ref-nightly")
            assert described.status == "active" and described.overlap_policy == "allow_all"
            assert described.spec["cron_expressions"] == [NEVER]
            assert described.action["workflow_type"] == "ref_greet"
            assert described.action["execution_timeout_seconds"] == 600
            assert described.next_fire_at and described.note == "from the reference client"
            listed = await c.list_schedules()
            assert [s.schedule_id for s in listed.schedules] == ["ref-nightly"]
            assert listed.next_page_token is None
            # the list says what the runs start with, as describe does (not None)
            assert listed.schedules[0].action == described.action
            assert listed.schedules[0].jitter_seconds == described.jitter_seconds == 0

            fired = await c.trigger_schedule("ref-nightly")
            assert fired.outcome == "triggered" and fired.workflow_id.startswith("ref-nightly-")
            run = c.get_workflow_handle(fired.workflow_id)
            assert await run.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == "hello sched"

            await handle.pause(note="maintenance")
            assert (await c.describe_schedule("ref-nightly")).status == "paused"
            await handle.resume()
            assert (await c.describe_schedule("ref-nightly")).status == "active"

            back = await c.backfill_schedule("ref-nightly", start_time="2026-01-01T00:00:00Z",
                                             end_time="2026-01-03T00:00:00Z")
            assert back.outcome == "backfill_started" and back.fires_attempted == 1  # 1 January
            assert [r["fire_time"] for r in back.results or []] == ["2026-01-01T01:00:00+00:00"]

            await c.update_schedule("ref-nightly", spec=dw.ScheduleSpec(
                intervals=[{"every": "PT1H", "offset": "PT15M"}]), overlap_policy="skip")
            described = await c.describe_schedule("ref-nightly")
            assert described.spec["intervals"] == [{"every": "PT3600S", "offset": "PT900S"}]
            assert described.overlap_policy == "skip"
            assert described.fires_count == 2

            history = await c.get_schedule_history("ref-nightly")
            sequences = [e.sequence for e in history.events]
            assert sequences == sorted(sequences) and len(sequences) == 2
            assert {e.event_type for e in history.events} == {"ScheduleTriggered"}
            assert fired.workflow_id in {e.workflow_instance_id for e in history.events}
            page = await c.get_schedule_history("ref-nightly", limit=1)
            assert page.has_more and page.next_cursor == sequences[0]
            rest = await c.get_schedule_history("ref-nightly", after_sequence=sequences[0])
            assert [e.sequence for e in rest.events] == sequences[1:] and not rest.has_more

            await c.delete_schedule("ref-nightly")
            with pytest.raises(dw_errors.ScheduleNotFound):
                await c.describe_schedule("ref-nightly")

    await run_reference(scenario, live)


async def test_an_ended_schedule_claims_no_next_fire_to_the_reference_client(
        live: Live, storage_client: durable.Client) -> None:
    """A schedule with no fire time left (end_at passed) keeps the reference's
    status (active; its only other is paused), and its reference fields say it
    fires no more: no next_fire_at nor info.next_fire, remaining_actions 0; ours
    say ended. It read remaining_actions None ("no limit") beside ended."""
    past = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    await storage_client.create_schedule(
        "ref-over", durable.ScheduleSpec(every=60, end_at=past), "ref_greet", "x")

    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            described = await c.describe_schedule("ref-over")
            [listed] = (await c.list_schedules()).schedules
            for seen in (described, listed):
                assert seen.status == "active" and seen.next_fire_at is None
                assert seen.remaining_actions == 0 and seen.info is not None
                assert seen.info["next_fire"] is None and seen.info["fires_count"] == 0
        async with httpx.AsyncClient(base_url=url, headers=HEADERS) as http:
            raw = (await http.get("/api/schedules/ref-over")).json()
        assert (raw["ended"], raw["next_fires"], raw["state"]["status"]) == (
            "end_at", [], "active")

    await run_reference(scenario, live)


async def test_the_reference_client_reads_the_memo_and_whole_second_timeouts(
        live: Live) -> None:
    """describe_schedule gives back the memo it was created with (it read None)
    and the action's timeouts as the integers its fields are (they read 60.0)."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            await c.create_schedule(
                schedule_id="ref-memo", spec=dw.ScheduleSpec(cron_expressions=[NEVER]),
                action=dw.ScheduleAction(workflow_type="ref_greet", input=["m"],
                                         execution_timeout_seconds=60, run_timeout_seconds=30),
                memo={"team": "ops", "tier": 2})
            described = await c.describe_schedule("ref-memo")
            assert described.memo == {"team": "ops", "tier": 2}
            assert described.action is not None
            timeouts = (described.action["execution_timeout_seconds"],
                        described.action["run_timeout_seconds"])
            assert timeouts == (60, 30) and all(type(t) is int for t in timeouts)

    await run_reference(scenario, live)


async def test_a_bare_pause_or_resume_keeps_the_note_as_the_reference_does(
        live: Live) -> None:
    """The reference client sends no note when given none, and the reference
    keeps the schedule's note then; it was cleared here (a note set at create
    lost to a bare pause). One sent replaces it."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            await c.create_schedule(
                schedule_id="ref-note", spec=dw.ScheduleSpec(cron_expressions=[NEVER]),
                action=dw.ScheduleAction(workflow_type="ref_greet", input=["n"]),
                note="owned by ops")
            await c.pause_schedule("ref-note")
            paused = await c.describe_schedule("ref-note")
            assert (paused.status, paused.note) == ("paused", "owned by ops")
            await c.resume_schedule("ref-note")
            resumed = await c.describe_schedule("ref-note")
            assert (resumed.status, resumed.note) == ("active", "owned by ops")
            await c.pause_schedule("ref-note", note="db maintenance")
            assert (await c.describe_schedule("ref-note")).note == "db maintenance"

    await run_reference(scenario, live)


async def test_a_cron_nickname_from_the_reference_client_is_taken(live: Live) -> None:
    """``@daily`` is a cron expression the reference's cron library takes (it
    was 422 invalid_cron_expression here): it fires at midnight, kept as sent."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            await c.create_schedule(schedule_id="ref-daily", spec=dw.ScheduleSpec(
                cron_expressions=["@daily"], timezone="UTC"), action=dw.ScheduleAction(
                workflow_type="ref_greet", input=["d"]))
            described = await c.describe_schedule("ref-daily")
            assert described.spec is not None
            assert described.spec["cron_expressions"] == ["@daily"]
            assert described.next_fire_at is not None
            assert described.next_fire_at.endswith("T00:00:00+00:00")

    await run_reference(scenario, live)


async def test_the_reference_client_is_refused_a_schedule_its_workers_cannot_run(
        live: Live) -> None:
    """A schedule names its workflow: arguments the live workers' function does
    not take (each fire would fail with TypeError) are refused at create and at
    update, as a start by name is (400 invalid_argument), nothing written."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            spec = dw.ScheduleSpec(cron_expressions=[NEVER])
            with pytest.raises(dw_errors.ServerError) as refused:
                await c.create_schedule(schedule_id="ref-arity", spec=spec,
                                        action=dw.ScheduleAction(workflow_type="ref_greet",
                                                                 input=["a", "b"]))
            assert (refused.value.status, refused.value.reason()) == (400, "invalid_argument")
            assert "takes 1 argument (name), got 2" in refused.value.body["message"]
            assert (await c.list_schedules()).schedules == []
            await c.create_schedule(schedule_id="ref-arity", spec=spec, action=dw.ScheduleAction(
                workflow_type="ref_greet", input=["a"]))
            with pytest.raises(dw_errors.ServerError) as changed:
                await c.update_schedule("ref-arity", action=dw.ScheduleAction(
                    workflow_type="ref_greet", input=[]))
            assert changed.value.status == 400 and "got 0" in changed.value.body["message"]
            # another workflow type keeps the stored input: ref_hold takes none
            with pytest.raises(dw_errors.ServerError) as retyped:
                await c.update_schedule("ref-arity", action=dw.ScheduleAction(
                    workflow_type="ref_hold"))
            assert retyped.value.status == 400 and "got 1" in retyped.value.body["message"]
            assert (await c.describe_schedule("ref-arity")).action == {
                "workflow_type": "ref_greet", "task_queue": "default",
                "execution_timeout_seconds": None, "run_timeout_seconds": None}
            fired = await c.trigger_schedule("ref-arity")
            run = c.get_workflow_handle(fired.workflow_id)
            assert await run.result(timeout=RESULT_TIMEOUT, poll_interval=0.05) == "hello a"

    await run_reference(scenario, live)


async def test_what_the_reference_refuses_of_schedules_its_client_is_refused_here(
        live: Live) -> None:
    """The reference's bounds, with its errors: `InvalidArgument` naming the field,
    `ScheduleListError` (field, errors) for a list; and what it takes (naive
    backfill bounds, a history limit over 500) is taken."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            action = dw.ScheduleAction(workflow_type="ref_greet", input=["x"])
            spec = dw.ScheduleSpec(cron_expressions=[NEVER])
            for kwargs, field in (({"schedule_id": "x" * 129}, "schedule_id"),
                                  ({"jitter_seconds": 3601}, "jitter_seconds"),
                                  ({"max_runs": 0}, "max_runs")):
                with pytest.raises(dw_errors.InvalidArgument) as refused:
                    await c.create_schedule(spec=spec, action=action, **kwargs)
                assert list(refused.value.errors) == [field], kwargs
            with pytest.raises(dw_errors.InvalidArgument) as refused:
                await c.create_schedule(schedule_id="bad-cron", action=action,
                                        spec=dw.ScheduleSpec(cron_expressions=["* *"]))
            assert list(refused.value.errors) == ["spec.cron_expressions"]
            handle = await c.create_schedule(schedule_id="r" * 128, spec=spec, action=action,
                                             jitter_seconds=3600, max_runs=1)
            with pytest.raises(dw_errors.InvalidArgument):
                await handle.update(max_runs=0)

            for size in (0, 201):
                with pytest.raises(dw_errors.ScheduleListError) as listed:
                    await c.list_schedules(page_size=size)
                assert listed.value.field == "page_size" and list(listed.value.errors) == [
                    "page_size"]
            with pytest.raises(dw_errors.ScheduleListError) as listed:
                await c.list_schedules(next_page_token="zzz")
            assert listed.value.status == 400 and listed.value.field == "next_page_token"
            assert len((await c.list_schedules(page_size=200)).schedules) == 1
            described = await handle.describe()
            assert described.jitter_seconds == 3600 and described.max_runs == 1
            assert described.info and described.info["skipped_trigger_count"] == 0

            back = await handle.backfill(start_time="2026-01-01", end_time="2026-01-02T00:00:00")
            assert back.outcome == "backfill_started" and back.fires_attempted == 1
            for start, end in (("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"),
                               ("not a date", "2026-01-01T00:00:00Z")):
                with pytest.raises(dw_errors.InvalidArgument):
                    await handle.backfill(start_time=start, end_time=end)
            assert len((await handle.history(limit=501)).events) == 1  # clamped, as there
            await handle.delete()

    await run_reference(scenario, live)


async def _every_page(c: Any, page_size: int, **filters: Any) -> list[str]:
    ids: list[str] = []
    token = None
    while True:
        page = await c.list_schedules(page_size=page_size, next_page_token=token, **filters)
        ids += [s.schedule_id for s in page.schedules]
        token = page.next_page_token
        if token is None:
            return ids


async def test_the_reference_clients_list_pages_newest_first_with_ties(
        live: Live, db_url: str) -> None:
    """Newest first, those created at the same instant (a virtual clock on the
    same storage makes them) by id; pages of the reference client's tokens
    neither skip nor repeat a schedule while others are created and deleted
    between them; a token whose last schedule was deleted, or that its filters
    no longer keep, is refused as the reference refuses it (409
    ``stale_schedule_page_token``)."""
    clock = VirtualClock(T0)
    async with durable.connect(db_url, clock=clock) as maker:
        for name in ("tie-b", "tie-a", "tie-c"):
            await maker.create_schedule(name, durable.ScheduleSpec(cron=NEVER), "ref_greet",
                                        "x", paused=name == "tie-b")
        clock.advance_to(T0 + 60)
        await maker.create_schedule("later", durable.ScheduleSpec(cron=NEVER), "ref_greet",
                                    "x")

    async def scenario(url: str) -> None:
        async with ref_client(url) as c:
            action = dw.ScheduleAction(workflow_type="ref_greet", input=["x"])
            spec = dw.ScheduleSpec(cron_expressions=[NEVER])
            for name in ("now-1", "now-2"):  # on the real clock: the newest
                await c.create_schedule(schedule_id=name, spec=spec, action=action)
            every = ["now-2", "now-1", "later", "tie-a", "tie-b", "tie-c"]
            for size in (1, 2, 4, 200):
                assert await _every_page(c, size) == every, size
            listed = (await c.list_schedules()).schedules
            created = [dt.datetime.fromisoformat(s.created_at) for s in listed]
            assert created == sorted(created, reverse=True)
            assert await _every_page(c, 1, status="active") == [
                "now-2", "now-1", "later", "tie-a", "tie-c"]

            first = await c.list_schedules(page_size=3)
            assert [s.schedule_id for s in first.schedules] == ["now-2", "now-1", "later"]
            await c.delete_schedule("tie-b")  # one not read yet: not listed
            await c.create_schedule(schedule_id="now-3", spec=spec, action=action)
            second = await c.list_schedules(page_size=2, next_page_token=first.next_page_token)
            assert [s.schedule_id for s in second.schedules] == ["tie-a", "tie-c"]
            assert second.next_page_token is None

            # the page's last one deleted, or no longer kept by the filters: the
            # reference's 409, which its client raises with the last safe cursor
            async def stale(token: str | None, **filters: Any) -> None:
                with pytest.raises(dw_errors.ScheduleListError) as caught:
                    await c.list_schedules(page_size=1, next_page_token=token, **filters)
                error = caught.value
                assert (error.status, error.reason()) == (409, "stale_schedule_page_token")
                assert error.field == "next_page_token"
                assert error.body["message"] == (
                    "Schedule continuation token cursor is no longer present in the "
                    "unchanged filtered set. Restart pagination without a token.")
                assert error.errors == {"next_page_token": [error.body["message"]]}
                assert error.last_safe_cursor is not None
                assert error.last_safe_cursor["schedule_id"] == "now-3"

            newest = await c.list_schedules(page_size=1)
            active = await c.list_schedules(page_size=1, status="active")
            assert [s.schedule_id for s in newest.schedules] == ["now-3"]
            await c.pause_schedule("now-3")
            await stale(active.next_page_token, status="active")
            unfiltered = await c.list_schedules(page_size=1,
                                                next_page_token=newest.next_page_token)
            assert [s.schedule_id for s in unfiltered.schedules] == ["now-2"]
            await c.delete_schedule("now-3")
            await stale(newest.next_page_token)

    await run_reference(scenario, live)


async def test_the_reference_clients_list_refusals(live: Live) -> None:
    """A token used in another namespace (403), with other filters (409),
    changed or made up (400), a parameter the list does not take and a query
    its grammar refuses (422):
    the reference's statuses, reasons and bodies, which its client raises as
    `ScheduleListError` with the field, errors and last safe cursor."""
    async def scenario(url: str) -> None:
        async with ref_client(url) as c, ref_client(url, namespace="other") as elsewhere:
            action = dw.ScheduleAction(workflow_type="ref_greet", input=["x"])
            for n in range(3):
                await c.create_schedule(schedule_id=f"l-{n}", action=action,
                                        spec=dw.ScheduleSpec(cron_expressions=[NEVER]))
                await elsewhere.create_schedule(schedule_id=f"o-{n}", action=action,
                                                spec=dw.ScheduleSpec(cron_expressions=[NEVER]))
            mine = 'WorkflowType = "ref_greet"'
            first = await c.list_schedules(page_size=1, query=mine)
            token = first.next_page_token
            assert token and [s.schedule_id for s in first.schedules] == ["l-2"]

            async def refused(client: Any, code: int, reason: str, **kwargs: Any) -> Any:
                with pytest.raises(dw_errors.ScheduleListError) as caught:
                    await client.list_schedules(**kwargs)
                error = caught.value
                assert (error.status, error.reason()) == (code, reason), error.body
                assert error.field == "next_page_token"
                assert error.errors == {"next_page_token": [error.body["message"]]}
                return error

            foreign = await refused(elsewhere, 403, "schedule_page_token_namespace_mismatch",
                                    page_size=1, query=mine, next_page_token=token)
            assert foreign.body["message"].startswith(
                "Schedule continuation token belongs to a different namespace.")
            assert foreign.last_safe_cursor is not None
            assert foreign.last_safe_cursor["schedule_id"] == "l-2"
            assert foreign.last_safe_cursor["created_at"].endswith("Z")
            for filters in ({}, {"query": 'ScheduleId = "l-1"'},
                            {"query": mine, "status": "active"},
                            {"query": mine, "workflow_type": "ref_greet"}):
                changed = await refused(c, 409, "schedule_page_token_filter_mismatch",
                                        page_size=1, next_page_token=token, **filters)
                assert changed.last_safe_cursor == foreign.last_safe_cursor
            # another page size is the same filters, and so is the query written otherwise
            rest = await c.list_schedules(page_size=5, query="WorkflowType='ref_greet'",
                                          next_page_token=token)
            assert [s.schedule_id for s in rest.schedules] == ["l-1", "l-0"]
            # a query the grammar refuses: 422 naming it, with the token's position
            for query, reason in (('ScheduleId STARTS_WITH "l"',
                                   "unsupported_schedule_visibility_predicate"),
                                  ('Region = "eu"', "unsupported_schedule_visibility_field"),
                                  ('Status = "deleted"', "invalid_schedule_visibility_query"),
                                  ("l-", "invalid_schedule_visibility_query")):
                for given in (token, None):
                    with pytest.raises(dw_errors.ScheduleListError) as caught:
                        await c.list_schedules(query=query, next_page_token=given)
                    error = caught.value
                    assert (error.status, error.reason(), error.field) == (
                        422, reason, "query"), error.body
                    assert error.errors and error.errors["query"][0]
                    assert error.last_safe_cursor == (foreign.last_safe_cursor
                                                      if given else None)

            payload, signature = token.split(".")
            forged = b64(unb64(payload).replace(b'"ns":"default"', b'"ns":"other"'))
            flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
            assert forged != payload
            for bad in (f"{forged}.{signature}", f"{payload}.{flipped}", payload, "x.y"):
                malformed = await refused(c, 400, "malformed_schedule_page_token",
                                          query=mine, next_page_token=bad)
                assert malformed.last_safe_cursor is None
                await refused(elsewhere, 400, "malformed_schedule_page_token",
                              next_page_token=bad)

            with pytest.raises(dw_errors.ScheduleListError) as unknown:
                await c._request("GET", "/schedules?page_size=1&rules=durable&bogus=1",
                                 context="schedule.list")
            assert unknown.value.status == 422 and unknown.value.field == "rules"
            assert unknown.value.reason() == "unsupported_schedule_list_filter"
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=15) as http:
                answer = await http.get("/api/schedules", params={"bogus": "1"})
                message = ("Schedule list filter [bogus] is not supported. The list takes "
                           "status, workflow_type, query, page_size and next_page_token.")
                assert answer.status_code == 422 and answer.json() == {
                    "message": message, "reason": "unsupported_schedule_list_filter",
                    "field": "bogus", "errors": {"bogus": [message]},
                    "validation_errors": {"bogus": [message]}, "last_safe_cursor": None}
                # refused before the parameters it takes are read (as there)
                both = await http.get("/api/schedules", params={"page_size": "0", "x": "1"})
                assert both.status_code == 422 and both.json()["field"] == "x"
                # the namespace may be named (the reference takes it); the header decides
                named = await http.get("/api/schedules", params={"namespace": "default",
                                                                 "query": mine})
                assert named.status_code == 200 and named.json()["schedule_count"] == 3

    await run_reference(scenario, live)
