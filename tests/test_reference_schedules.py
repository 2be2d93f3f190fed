"""The reference engine's own client's schedule methods against `durable serve`.

`durable-workflow` 2.12.0 (pinned in the dev extra) creates, lists,
describes, triggers, pauses, resumes, backfills, updates, reads the history
of and deletes a schedule on our control plane (tests/test_reference_client.py's
live server and worker), with its Avro input envelope and its error mapping
(`ScheduleNotFound`, `ScheduleAlreadyExists`). The fired run is executed by
our worker and its result read by the reference client.
"""

from __future__ import annotations

import pytest
from test_reference_client import (
    RESULT_TIMEOUT,
    Live,
    anyio_backend,
    driver_name,
    live,
    run_reference,
    setup,
)
from test_reference_client import client as ref_client

dw = pytest.importorskip("durable_workflow")
dw_errors = pytest.importorskip("durable_workflow.errors")

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend", "driver_name", "live", "setup"]  # fixtures used from there

NEVER = "0 2 1 1 *"


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
