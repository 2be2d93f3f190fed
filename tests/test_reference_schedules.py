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
            assert back.outcome == "backfilled" and back.fires_attempted == 1  # 1 January
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
