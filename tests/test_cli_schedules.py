"""``durable schedule ...`` and ``durable prune``, driven through click's CliRunner.

Over an embedded SQLite file served by a real worker thread (test_cli's
`ThreadWorker`, which registers tests/cli_app.py's workflows). The schedules
created here fire on 1 January at 02:00 only, so nothing fires by itself while
a test runs: every fire is a trigger or a backfill the test asks for. Every
--json output is checked against its shape in `durable.cli.schemas`.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_app import greet
from click.testing import Result
from conftest import drop_postgres_schema, new_postgres_url, require_postgres
from test_cli import ThreadWorker, as_json, invoke, ok, one_error_line, wait_for

from durable import ScheduleSpec
from durable.testing import TimeSkippingEnvironment

NEVER = "0 2 1 1 *"  # 02:00 on 1 January: not while a test runs


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = f"sqlite:///{tmp_path_factory.mktemp('cli-schedules') / 'app.db'}"
    worker = ThreadWorker(db).start()
    yield db
    worker.close()


def run_json(url: str, *args: str) -> Any:
    return as_json(ok(url, *args, "--json"), " ".join(args[:2]) if args[0] == "schedule"
                   else args[0])


def create(url: str, schedule_id: str, *extra: str) -> dict[str, Any]:
    data: dict[str, Any] = run_json(url, "schedule", "create", schedule_id, "cli-greet",
                                    "--cron", NEVER, "--input", '["sched"]', *extra)
    return data


def usage_error(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    return one_error_line(result)


def test_create_list_describe_show_the_schedule_and_its_next_fires(url: str) -> None:
    info = create(url, "nightly", "--timezone", "Europe/Amsterdam", "--overlap", "buffer_one",
                  "--jitter", "1m", "--execution-timeout", "4h", "--note", "the import")
    assert info["spec"]["cron"] == [NEVER] and info["spec"]["timezone"] == "Europe/Amsterdam"
    assert info["overlap"] == "buffer_one" and info["jitter"] == 60
    assert info["execution_timeout"] == 14400 and info["note"] == "the import"
    assert len(info["next_fires"]) == 5
    # 02:00 Amsterdam in January is 01:00 UTC
    assert info["next_fires"][0].endswith("T01:00:00+00:00")
    listed = run_json(url, "schedule", "list")
    (row,) = [s for s in listed["schedules"] if s["schedule_id"] == "nightly"]
    assert row["next_fire_at"] == info["next_fires"][0] and row["last_fire"] is None
    human = ok(url, "schedule", "list").stdout
    assert re.search(r"nightly\s+cli-greet\s+0 2 1 1 \* \(Europe/Amsterdam\)\s+buffer_one\s+"
                     r"active", human), human
    shown = ok(url, "schedule", "describe", "nightly").stdout
    for text in ("Schedule nightly (cli-greet) [active]", "time zone        Europe/Amsterdam",
                 "overlap          buffer_one", "note             the import",
                 "execution timeout 14400s (4h 00m)", "jitter 60s (1m)", 'input ["sched"]',
                 "next fires " + info["next_fires"][0].replace("T", " ")[:19] + " UTC"):
        assert " ".join(text.split()) in " ".join(shown.split()), shown


def test_list_pages_newest_first_keeping_its_filters(url: str) -> None:
    for n in range(5):
        create(url, f"paged-{n}", "--task-queue", "paged")
    run_json(url, "schedule", "pause", "paged-1")
    mine = "TaskQueue = 'paged'"  # the reference's visibility query
    first = run_json(url, "schedule", "list", "--query", mine, "--limit", "2")
    assert [s["schedule_id"] for s in first["schedules"]] == ["paged-4", "paged-3"]
    assert first["count"] == 2 and first["next_cursor"]
    human = ok(url, "schedule", "list", "--query", mine, "--limit", "2").stdout
    assert (f"More: durable schedule list --cursor {first['next_cursor']}"
            in " ".join(human.split())), human
    seen, cursor = [], first["next_cursor"]
    while cursor:
        page = run_json(url, "schedule", "list", "--query", mine, "--limit", "2",
                        "--cursor", cursor)
        seen += [s["schedule_id"] for s in page["schedules"]]
        cursor = page["next_cursor"]
    assert seen == ["paged-2", "paged-1", "paged-0"]
    paused = run_json(url, "schedule", "list", "--status", "paused", "--query", mine)
    assert [s["schedule_id"] for s in paused["schedules"]] == ["paged-1"]
    assert paused["next_cursor"] is None and "More:" not in ok(
        url, "schedule", "list", "--status", "paused", "--query", mine).stdout
    typed = run_json(url, "schedule", "list", "--type", "no-such-type")
    assert typed == {"schedules": [], "count": 0, "next_cursor": None}
    bad = invoke(url, "schedule", "list", "--cursor", "nope")
    assert bad.exit_code != 0 and "not one this server returned" in one_error_line(bad)
    refused = invoke(url, "schedule", "list", "--query", "paged-")
    assert refused.exit_code != 0 and "Field = literal" in one_error_line(refused)


def test_trigger_starts_one_run_named_after_the_fire_and_describe_shows_it(url: str) -> None:
    create(url, "greeter")
    fired = run_json(url, "schedule", "trigger", "greeter", "--overlap", "allow_all")
    assert fired["outcome"] == "started"
    assert re.fullmatch(r"greeter-\d{8}T\d{6}\.\d{3}Z", fired["workflow_id"])
    result = as_json(ok(url, "result", fired["workflow_id"], "--wait", "--json"), "result")
    assert result["result"] == "hello, sched"
    info = run_json(url, "schedule", "describe", "greeter")
    assert info["fires_count"] == 1
    assert info["recent"][0]["workflow_id"] == fired["workflow_id"]
    assert info["recent"][0]["status"] == "completed"
    human = ok(url, "schedule", "describe", "greeter").stdout
    assert "Recent fires" in human and fired["workflow_id"] in human and "[completed]" in human
    listed = run_json(url, "schedule", "list")
    (row,) = [s for s in listed["schedules"] if s["schedule_id"] == "greeter"]
    assert row["last_fire"]["status"] == "completed"


def test_pause_and_resume_with_a_note(url: str) -> None:
    create(url, "pausable")
    paused = run_json(url, "schedule", "pause", "pausable", "--note", "db maintenance")
    assert paused == {"schedule_id": "pausable", "action": "paused"}
    info = run_json(url, "schedule", "describe", "pausable")
    assert info["paused"] is True and info["note"] == "db maintenance"
    assert "[paused]" in ok(url, "schedule", "describe", "pausable").stdout
    ok(url, "schedule", "resume", "pausable")
    info = run_json(url, "schedule", "describe", "pausable")
    assert info["paused"] is False and info["next_fire_at"] is not None


def test_backfill_fires_each_past_fire_time_once(url: str) -> None:
    create(url, "hourly", "--overlap", "allow_all")
    ok(url, "schedule", "update", "hourly", "--every", "1h")
    start, end = "2026-01-01T00:00:00Z", "2026-01-01T03:00:00+00:00"
    done = run_json(url, "schedule", "backfill", "hourly", "--start", start, "--end", end)
    assert (done["fires"], done["started"], done["already_fired"]) == (3, 3, 0)
    assert [r["workflow_id"] for r in done["results"]] == [
        f"hourly-20260101T0{h}0000Z" for h in range(3)]
    again = run_json(url, "schedule", "backfill", "hourly", "--start", start, "--end", end)
    assert (again["fires"], again["started"], again["already_fired"]) == (3, 0, 3)
    human = ok(url, "schedule", "backfill", "hourly", "--start", start, "--end", end).stdout
    assert "3 fire times, 0 started, 0 buffered, 0 skipped, 3 already fired" in human


def test_update_changes_what_is_given_and_keeps_the_rest(url: str) -> None:
    create(url, "changing", "--timezone", "Asia/Tokyo", "--task-queue", "default",
           "--run-timeout", "10m", "--max-runs", "3")
    info = run_json(url, "schedule", "update", "changing", "--execution-timeout", "2h",
                    "--overlap", "terminate_other")
    assert info["execution_timeout"] == 7200 and info["run_timeout"] == 600
    assert info["task_queue"] == "default" and info["overlap"] == "terminate_other"
    assert info["spec"]["timezone"] == "Asia/Tokyo" and info["remaining_actions"] == 3
    info = run_json(url, "schedule", "update", "changing", "--every", "30m", "--max-runs",
                    "none")
    assert info["spec"]["cron"] == [] and info["spec"]["every"] == 1800
    assert info["spec"]["timezone"] == "Asia/Tokyo" and info["remaining_actions"] is None
    assert info["next_fire_at"].endswith((":00:00+00:00", ":30:00+00:00"))
    error = usage_error(invoke(url, "schedule", "update", "changing"))
    assert "nothing to change" in error


def test_delete_then_describe_is_not_found_and_a_taken_id_is_refused(url: str) -> None:
    create(url, "doomed")
    refused = invoke(url, "schedule", "create", "doomed", "cli-greet", "--every", "1h",
                     "--input", '["again"]')
    assert refused.exit_code == 4, refused.stderr
    assert one_error_line(refused) == (
        "durable: refused: schedule 'doomed' already exists in namespace 'default' (pick "
        "another id, or change it with `durable schedule update`)")
    assert run_json(url, "schedule", "delete", "doomed")["action"] == "deleted"
    missing = invoke(url, "schedule", "describe", "doomed")
    assert missing.exit_code == 3
    line = one_error_line(missing)
    assert line.startswith("durable: not found:") and "durable schedule list" in line
    assert invoke(url, "schedule", "pause", "doomed").exit_code == 3
    assert invoke(url, "schedule", "trigger", "doomed").exit_code == 3


@pytest.mark.parametrize(("args", "expected"), [
    (["create", "x", "cli-greet"], "give --cron EXPR"),
    (["create", "x", "cli-greet", "--cron", "61 * * * *"], "not a valid cron expression"),
    (["create", "x", "cli-greet", "--every", "1h", "--timezone", "Mars/Base"],
     "not a known IANA time zone"),
    (["create", "x", "cli-greet", "--every", "soon"], "is not a duration"),
    (["create", "x", "cli-greet", "--every", "1h", "--max-runs", "many"],
     "is not a whole number"),
    (["create", "x", "cli-greet", "--every", "1h", "--max-runs", "0"],
     "must be at least 1 (or 'none': no limit), got 0"),
    (["create", "x", "cli-greet", "--every", "1h", "--input", '{"a": 1}'],
     "must be a JSON array"),
    (["backfill", "x", "--start", "2026-01-01T00:00:00", "--end", "2026-01-02T00:00:00Z"],
     "has no UTC offset"),
    (["backfill", "x", "--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z"],
     "must be after --start"),
    (["trigger", "x", "--overlap", "sometimes"], "'sometimes' is not one of"),
])
def test_bad_input_is_a_usage_error_that_says_what_to_give(
        url: str, args: list[str], expected: str) -> None:
    line = usage_error(invoke(url, "schedule", *args))
    assert expected in line, line


def test_an_instant_without_offset_is_refused_with_an_example_that_is_taken(
        url: str) -> None:
    """The fix the refusal offers parses: a bare date's example is a full
    date-time with Z (it was 2026-12-07Z, itself refused as no date-time)."""
    for given, example in (("2026-12-07", "2026-12-07T00:00:00Z"),
                           ("2026-12-07T10:00", "2026-12-07T10:00:00Z")):
        line = usage_error(invoke(url, "schedule", "create", "x", "cli-greet", "--every",
                                  "1h", "--start-at", given))
        assert f"has no UTC offset; add Z (UTC) or one such as +02:00, e.g. {example}" \
            in line, line
        made = run_json(url, "schedule", "create", f"x-{given}", "cli-greet", "--every", "1h",
                        "--input", '["a"]', "--start-at", example)
        assert made["spec"]["start_at"].startswith(example[:-1])
        ok(url, "schedule", "delete", f"x-{given}")


def test_create_of_a_type_no_worker_registered_says_how_to_fix_it(url: str) -> None:
    result = invoke(url, "schedule", "create", "orphan", "no-such-type", "--every", "1h")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "no live worker in namespace 'default' has registered workflow type " \
           "'no-such-type'" in line and "durable worker" in line


def test_prune_dry_run_lists_and_prune_deletes_closed_runs(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'prune.db'}"
    worker = ThreadWorker(db).start()
    try:
        for n in range(2):
            ok(db, "start", "cli-greet", "--id", f"old-{n}", "--input", '["x"]')
            ok(db, "result", f"old-{n}", "--wait")
        ok(db, "start", "cli-count", "--id", "open-one", "--input", "[100, 0.5]")
        dry = run_json(db, "prune", "--older-than", "0.001", "--dry-run")
        assert dry["dry_run"] is True and dry["runs_expired"] == 2 and dry["runs_deleted"] == 0
        assert sorted(r["workflow_id"] for r in dry["runs"]) == ["old-0", "old-1"]
        human = ok(db, "prune", "--older-than", "0.001", "--dry-run").stdout
        assert "Dry run: 2 runs closed before" in human and "nothing was deleted" in human
        assert "old-0" in human and "open-one" not in human
        assert run_json(db, "describe", "old-0")["status"] == "completed"  # still there
        # under an hour (a bare 30 meant as days is seconds): refused without
        # --yes, saying what it would delete now; nothing deleted
        refused = invoke(db, "prune", "--older-than", "0.001")
        assert refused.exit_code == 4, (refused.stdout, refused.stderr)
        line = one_error_line(refused)
        assert line.startswith("durable: refused: --older-than 0.001s would delete 2 closed "
                               "run(s) now"), line
        assert "nothing was deleted" in line and "durable prune --older-than 0.001s --yes" in line
        assert run_json(db, "describe", "old-0")["status"] == "completed"
        done = run_json(db, "prune", "--older-than", "0.001", "--yes")
        assert done["runs_deleted"] == 2 and done["deleted"]["runs"] == 2
        assert done["deleted"]["events"] > 0
        assert invoke(db, "describe", "old-0").exit_code == 3
        assert run_json(db, "describe", "open-one")["status"] in ("pending", "running")
        assert "Pruned 0 runs" in ok(db, "prune", "--older-than", "1d").stdout
        # what was deleted, and when, reads afterwards too
        kept = run_json(db, "retention")
        assert kept["retention_seconds"] is None and kept["pruned"]["runs"] == 2
        assert kept["last_pruned_at"] is not None
        shown = " ".join(ok(db, "retention").stdout.split())
        assert ("keeps closed runs not set here: each worker's Worker(retention=...) applies; "
                "none: kept for ever") in shown
        assert "last deleted 20" in shown and "deleted so far 2 runs, " in shown
        assert run_json(db, "retention", "--set", "7d")["retention_seconds"] == 7 * 86400
        assert "keeps closed runs 7d (this namespace's setting)" in " ".join(
            ok(db, "retention").stdout.split())
        assert run_json(db, "retention", "--clear")["retention_seconds"] is None
        assert "give --set or --clear, not both" in usage_error(
            invoke(db, "retention", "--set", "1d", "--clear"))
        ok(db, "cancel", "open-one")
    finally:
        worker.close()
    error = usage_error(invoke(db, "prune", "--older-than", "0"))
    assert "must be greater than 0 seconds" in error
    assert usage_error(invoke(db, "prune")).count("--older-than")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def retention_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of its own for the retention guard, on each storage."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'retention.db'}"
        return
    require_postgres()
    pg = new_postgres_url()
    try:
        yield pg
    finally:
        drop_postgres_schema(pg)


def test_retention_set_under_an_hour_is_refused_without_yes_and_says_what_it_deletes(
        retention_db: str) -> None:
    db = retention_db
    worker = ThreadWorker(db).start()
    try:
        for n in range(2):
            ok(db, "start", "cli-greet", "--id", f"closed-{n}", "--input", '["x"]')
            ok(db, "result", f"closed-{n}", "--wait")
        wait_for(lambda: run_json(db, "prune", "--older-than", "1s", "--dry-run")[
            "runs_expired"] == 2, "both runs to be closed more than 1s ago")
        # a typo'd unit (1s for 1d): refused, the count it would delete now, how to confirm
        refused = invoke(db, "retention", "--set", "1s")
        assert refused.exit_code == 4, (refused.stdout, refused.stderr)
        line = one_error_line(refused)
        assert line.startswith("durable: refused: --set 1s keeps closed runs only 1s: ")
        assert "would delete 2 closed run(s)" in line and "nothing was changed" in line
        assert "durable retention --set 1s --yes" in line and "--set 30d" in line
        assert run_json(db, "retention")["retention_seconds"] is None  # nothing written
        assert invoke(db, "retention", "--set", "59m59s").exit_code == 4
        # none stored (the workers' is unknown here): what the next pass deletes
        first = run_json(db, "retention", "--set", "7d")
        assert first["retention_seconds"] == 7 * 86400 and first["runs_to_delete"] == 0
        assert "runs_to_delete" not in run_json(db, "retention", "--set", "30d")  # longer
        shown = " ".join(ok(db, "retention", "--set", "1h").stdout.split())
        assert "The next retention pass deletes 0 closed run(s) (closed more than 1h" in shown
        assert run_json(db, "retention")["retention_seconds"] == 3600
        # confirmed: set, with the runs the next pass deletes
        confirmed = run_json(db, "retention", "--set", "1s", "--yes")
        assert confirmed["retention_seconds"] == 1 and confirmed["runs_to_delete"] == 2
        assert "at least 1 second" in usage_error(invoke(db, "retention", "--set", "0.5"))
    finally:
        worker.close()


def test_schedule_help_lists_every_subcommand() -> None:
    out = ok(None, "schedule", "--help").stdout
    for name in ("create", "list", "describe", "pause", "resume", "trigger", "backfill",
                 "update", "delete"):
        assert re.search(rf"^\s+{name}\s", out, flags=re.M), out


def test_a_schedule_no_worker_fired_reads_overdue_with_what_a_worker_would_skip(
        tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'idle.db'}"
    # created a day ago (a virtual clock set back), and no worker ran since
    created = time.time() - 86400

    async def make() -> None:
        async with TimeSkippingEnvironment(db, start=created) as env:
            await env.client.create_schedule("hourly", ScheduleSpec(every=3600), greet, "x")

    anyio.run(make)
    human = " ".join(ok(db, "schedule", "describe", "hourly").stdout.split())
    first = dt.datetime.fromtimestamp((created // 3600 + 1) * 3600, dt.UTC)
    assert (f"overdue due since {first:%Y-%m-%d %H:%M:%S} UTC (" in human
            and "ago) and not fired: no live worker of its namespace runs, and workers fire "
                "schedules (start one);" in human
            and "fire time(s) are past the catch-up window (3600s (1h 00m)): a worker counts "
                "them as skipped (reason catchup_window), `backfill` makes them up" in human
            ), human
    info = run_json(db, "schedule", "describe", "hourly")
    # its next fires start with the one a worker back now would still start
    assert dt.datetime.fromisoformat(info["next_fires"][0]).timestamp() > time.time() - 7200
    assert info["overdue"]["missed"] >= 21 and info["overdue"]["live_workers"] == 0
    listed = " ".join(ok(db, "schedule", "list").stdout.split())
    assert f"active overdue {first:%Y-%m-%d %H:%M:%S} UTC" in listed, listed
