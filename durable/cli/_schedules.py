"""``durable schedule ...`` and ``durable prune``: schedules and retention from a terminal.

Each command is one call of the client's schedule or retention API
(`client.create_schedule`, `ScheduleHandle`, `client.prune`), so it works the
same over ``--db`` and ``--server``; connecting, ``--json`` and exit codes are
`_app`'s. The human views live here too (they are only used here). See
docs/cli.md, "durable schedule" and "durable prune".

Kept whole: each command and the view that prints its answer are read
together (the view renders exactly the dict the command returns), and the
views are used nowhere else; a split would pair every command with a
function in another module.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.table import Table
from rich.text import Text

import durable

from .. import present as _fmt
from .. import present_ops as _ops
from ._app import EXIT_REFUSED, CliError, Output, Session, json_option
from ._params import DURATION, parse_args_json
from ._views import _grid, badge, status_badge, when

pass_session = click.make_pass_decorator(Session)

OVERLAPS = [o.value for o in durable.Overlap]
schedule_id_argument = click.argument("schedule_id", metavar="ID")

FIRE_STYLES = {"started": "green", "buffered": "yellow", "skipped": "magenta"}


# ---------------------------------------------------------------- parameters


class Instant(click.ParamType):  # type: ignore[type-arg,unused-ignore]
    """An ISO 8601 date-time with a UTC offset (``2026-04-01T00:00:00Z``)."""

    name = "instant"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> datetime.datetime:
        if isinstance(value, datetime.datetime):
            return value
        try:
            parsed = datetime.datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 date-time; give e.g. "
                      "2026-04-01T00:00:00Z or 2026-04-01T02:00:00+02:00", param, ctx)
        if parsed.tzinfo is None:
            # the example is the value itself, in full: a bare date with Z
            # (2026-12-07Z) is not one fromisoformat reads
            self.fail(f"{value!r} has no UTC offset; add Z (UTC) or one such as +02:00, "
                      f"e.g. {parsed.isoformat()}Z", param, ctx)
        return parsed


INSTANT = Instant()


def _spec_options(f: Any) -> Any:
    """The options that say when a schedule fires (create and update)."""
    options = [
        click.option("--cron", "crons", multiple=True, metavar="EXPR",
                     help="A cron expression, e.g. '0 2 * * *' (repeat for several; a "
                          "sixth, leading field is seconds)."),
        click.option("--every", type=DURATION, metavar="S",
                     help="A fixed interval (60, 15m, 1h), counted from the Unix epoch."),
        click.option("--offset", type=DURATION, metavar="S",
                     help="Shift --every: --every 1h --offset 15m fires at a quarter past."),
        click.option("--timezone", "tz", metavar="TZ",
                     help="IANA time zone the cron expressions read in (default UTC)."),
        click.option("--start-at", type=INSTANT, metavar="ISO",
                     help="No fire before this instant (ISO 8601 with an offset)."),
        click.option("--end-at", type=INSTANT, metavar="ISO",
                     help="No fire at or after this instant."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _run_options(f: Any) -> Any:
    """What each fire starts, besides its type (create and update)."""
    options = [
        click.option("--input", "input_json", metavar="JSON_ARRAY",
                     help="The workflow's arguments as a JSON array, e.g. '[\"s3://b\"]'."),
        click.option("--overlap", type=click.Choice(OVERLAPS),
                     help="What a fire does while an earlier run is open (default skip)."),
        click.option("--jitter", type=DURATION, metavar="S",
                     help="Delay each fire by up to this long (fixed per fire)."),
        click.option("--catchup-window", type=DURATION, metavar="S",
                     help="Start a fire missed while no worker ran if one is back within "
                          "this long (default 1h)."),
        click.option("--max-runs", metavar="N",
                     help="At most this many more scheduled runs ('none': no limit)."),
        click.option("--note", metavar="TEXT", help="Why (shown by describe)."),
        click.option("--execution-timeout", type=DURATION, metavar="S",
                     help="Each run's execution timeout (90, 5m, 4h)."),
        click.option("--run-timeout", type=DURATION, metavar="S", help="Each run's run timeout."),
        click.option("--task-queue", metavar="Q", help="Task queue of the runs."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _max_runs(text: str | None) -> int | None:
    if text is None or text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a whole number; give e.g. 10, or 'none'",
                                 param_hint="--max-runs") from None
    if value < 1:  # (as the SDK and the control plane refuse it)
        raise click.BadParameter(f"must be at least 1 (or 'none': no limit), got {value}",
                                 param_hint="--max-runs")
    return value


def _build_spec(base: Mapping[str, Any], crons: Sequence[str], every: float | None,
                offset: float | None, tz: str | None, start_at: datetime.datetime | None,
                end_at: datetime.datetime | None) -> durable.ScheduleSpec:
    """A spec from `base` (a spec's `to_dict()`) with what was given on the command
    line: --cron / --every replace the fire times (both, together), the rest
    replaces its own field."""
    data = dict(base)
    if crons or every is not None:
        data.update(cron=list(crons), every=every, offset=offset or 0)
    elif offset is not None:
        data["offset"] = offset
    if tz is not None:
        data["timezone"] = tz
    if start_at is not None:
        data["start_at"] = start_at.isoformat()
    if end_at is not None:
        data["end_at"] = end_at.isoformat()
    for key in ("every", "offset"):
        value = data.get(key)
        if isinstance(value, float) and value.is_integer():
            data[key] = int(value)
    try:
        return durable.ScheduleSpec.from_dict(data)
    except durable.ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc


def _start_options(execution_timeout: float | None, run_timeout: float | None,
                   task_queue: str | None) -> durable.StartOptions:
    options = durable.StartOptions(task_queue=task_queue)
    try:
        if execution_timeout is not None:
            options = options.with_execution_timeout(execution_timeout)
        if run_timeout is not None:
            options = options.with_run_timeout(run_timeout)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    return options


# ---------------------------------------------------------------- the group


@click.group(short_help="Create, see and steer schedules.")
def schedule() -> None:
    """Schedules: start a workflow at given times (cron or a fixed interval), once per fire.

    \b
        durable schedule create nightly-import import-rows --cron '0 2 * * *' \\
            --timezone Europe/Amsterdam --input '["s3://bucket"]'
        durable schedule list
        durable schedule describe nightly-import

    Workers of the namespace fire them; see docs/schedules.md.
    """


@schedule.command(short_help="Create a schedule.")
@schedule_id_argument
@click.argument("workflow_type", metavar="TYPE")
@_spec_options
@_run_options
@click.option("--paused", is_flag=True, help="Create it paused (resume starts it).")
@json_option
@pass_session
def create(session: Session, schedule_id: str, workflow_type: str, crons: tuple[str, ...],
           every: float | None, offset: float | None, tz: str | None,
           start_at: datetime.datetime | None, end_at: datetime.datetime | None,
           input_json: str | None, overlap: str | None, jitter: float | None,
           catchup_window: float | None, max_runs: str | None, note: str | None,
           execution_timeout: float | None, run_timeout: float | None,
           task_queue: str | None, paused: bool) -> None:
    """Create schedule ID that starts workflow TYPE at every fire time.

    Give --cron (one or several) and/or --every. Each fire starts one run with
    id ID-YYYYmmddTHHMMSSZ (the fire's UTC time). TYPE must be registered by a
    live worker of the namespace.
    """
    if not crons and every is None:
        raise click.UsageError("give --cron EXPR (e.g. '0 2 * * *') or --every S (e.g. 1h)")
    spec = _build_spec({}, crons, every, offset, tz, start_at, end_at)
    args = parse_args_json(input_json, "--input")
    options = _start_options(execution_timeout, run_timeout, task_queue)
    limit = _max_runs(max_runs)

    async def body(client: durable.Client) -> dict[str, Any]:
        try:
            handle = await client.create_schedule(
                schedule_id, spec, workflow_type, *args,
                overlap=overlap or durable.Overlap.SKIP,
                jitter=0 if jitter is None else jitter,
                catchup_window=3600 if catchup_window is None else catchup_window,
                max_runs=limit, paused=paused, note=note, options=options)
        except durable.NameNotRegistered as exc:
            raise durable.NameNotRegistered(
                f"no live worker in namespace {session.namespace!r} has registered workflow "
                f"type {workflow_type!r}; start a worker that registers it (`durable worker "
                "MODULE:ATTR`), or check the name and --namespace") from exc
        return dict(_fmt.jsonable(await handle.describe()))

    session.out.emit(session.run(body), _created)


@schedule.command("list", short_help="List the namespace's schedules.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="At most this many schedules (one page), newest first.")
@click.option("--cursor", metavar="C",
              help="The next page: the cursor the previous page printed (same filters).")
@click.option("--status", type=click.Choice(["active", "paused"]),
              help="Only active or only paused schedules.")
@click.option("--type", "workflow_type", metavar="T",
              help="Only schedules starting this workflow type.")
@click.option("--query", metavar="Q",
              help="Only schedules Q keeps: Field = \"value\" joined by AND, fields "
                   "ScheduleId, Status, WorkflowType, TaskQueue, Note (the reference "
                   "engine's schedule visibility query).")
@json_option
@pass_session
def list_(session: Session, limit: int, cursor: str | None, status: str | None,
          workflow_type: str | None, query: str | None) -> None:
    """List schedules, newest first: when they fire, the next fire, the last fire and its run.
    A page ends with the cursor of the next one when there are more; a cursor whose
    last schedule was deleted or no longer fits the filters is refused (list again)."""

    async def body(client: durable.Client) -> dict[str, Any]:
        page = await client.list_schedules_page(limit=limit, cursor=cursor, status=status,
                                                workflow_type=workflow_type, query=query)
        return {"schedules": _fmt.jsonable(page.items), "count": len(page.items),
                "next_cursor": page.next_cursor}

    session.out.emit(session.run(body), _list_view)


@schedule.command(short_help="Show a schedule: next fires, recent fires and their runs.")
@schedule_id_argument
@json_option
@pass_session
def describe(session: Session, schedule_id: str) -> None:
    """Show a schedule: its spec and policy, next fire times, running and buffered
    fires, and its recent fires with their runs' status."""

    async def body(client: durable.Client) -> dict[str, Any]:
        return dict(_fmt.jsonable(await client.get_schedule(schedule_id).describe()))

    session.out.emit(session.run(body), _describe_view)


@schedule.command(short_help="Stop firing until resume.")
@schedule_id_argument
@click.option("--note", metavar="TEXT", help="Why (shown by describe).")
@json_option
@pass_session
def pause(session: Session, schedule_id: str, note: str | None) -> None:
    """Stop the schedule firing until `durable schedule resume ID`."""
    _act(session, schedule_id, "paused", lambda h: h.pause(note=note))


@schedule.command(short_help="Fire again, from the next fire time.")
@schedule_id_argument
@click.option("--note", metavar="TEXT", help="Replaces the pause's note.")
@json_option
@pass_session
def resume(session: Session, schedule_id: str, note: str | None) -> None:
    """Fire again from the next fire time after now (backfill makes up a pause)."""
    _act(session, schedule_id, "resumed", lambda h: h.resume(note=note))


@schedule.command(short_help="Fire now.")
@schedule_id_argument
@click.option("--overlap", type=click.Choice(OVERLAPS),
              help="This fire's overlap policy (default: the schedule's).")
@json_option
@pass_session
def trigger(session: Session, schedule_id: str, overlap: str | None) -> None:
    """Fire now (at the current second), under the schedule's overlap policy or --overlap."""

    async def body(client: durable.Client) -> dict[str, Any]:
        result = await client.get_schedule(schedule_id).trigger(overlap=overlap)
        return {"schedule_id": schedule_id, **_fmt.jsonable(result)}

    session.out.emit(session.run(body), _triggered)


@schedule.command(short_help="Fire every fire time of a past range.")
@schedule_id_argument
@click.option("--start", "start", type=INSTANT, required=True, metavar="ISO",
              help="First instant of the range (ISO 8601 with an offset).")
@click.option("--end", "end", type=INSTANT, required=True, metavar="ISO",
              help="End of the range (excluded).")
@click.option("--overlap", type=click.Choice(OVERLAPS),
              help="These fires' overlap policy (default: the schedule's).")
@json_option
@pass_session
def backfill(session: Session, schedule_id: str, start: datetime.datetime,
             end: datetime.datetime, overlap: str | None) -> None:
    """Fire for every fire time of the spec in [--start, --end), in order; fire
    times that already fired are left alone (so a backfill can be repeated)."""
    if end <= start:
        raise click.BadParameter(f"must be after --start ({start.isoformat()})",
                                 param_hint="--end")

    async def body(client: durable.Client) -> dict[str, Any]:
        result = await client.get_schedule(schedule_id).backfill(start, end, overlap=overlap)
        return dict(_fmt.jsonable(result))

    session.out.emit(session.run(body), _backfilled)


@schedule.command(short_help="Change a schedule; what is not given is kept.")
@schedule_id_argument
@click.option("--type", "workflow_type", metavar="TYPE", help="Start this workflow type.")
@_spec_options
@_run_options
@json_option
@pass_session
def update(session: Session, schedule_id: str, workflow_type: str | None,
           crons: tuple[str, ...], every: float | None, offset: float | None, tz: str | None,
           start_at: datetime.datetime | None, end_at: datetime.datetime | None,
           input_json: str | None, overlap: str | None, jitter: float | None,
           catchup_window: float | None, max_runs: str | None, note: str | None,
           execution_timeout: float | None, run_timeout: float | None,
           task_queue: str | None) -> None:
    """Change schedule ID. --cron / --every replace when it fires (together);
    --timezone, --start-at, --end-at, the run's timeouts and task queue
    replace their own value; the rest is kept. A new spec fires from its
    first fire time after now."""
    args = None if input_json is None else parse_args_json(input_json, "--input")
    spec_given = bool(crons) or any(
        v is not None for v in (every, offset, tz, start_at, end_at))
    run_given = any(v is not None for v in (execution_timeout, run_timeout, task_queue))
    changes: dict[str, Any] = {}
    for key, value in (("overlap", overlap), ("jitter", jitter),
                       ("catchup_window", catchup_window), ("note", note),
                       ("workflow", workflow_type)):
        if value is not None:
            changes[key] = value
    if max_runs is not None:
        changes["max_runs"] = _max_runs(max_runs)
    if args is not None:
        changes["args"] = args
    if not changes and not spec_given and not run_given:
        raise click.UsageError("nothing to change: give at least one option "
                               "(see: durable schedule update --help)")

    async def body(client: durable.Client) -> dict[str, Any]:
        handle = client.get_schedule(schedule_id)
        if spec_given or run_given:
            info = await handle.describe()
            if spec_given:
                changes["spec"] = _build_spec(info["spec"], crons, every, offset, tz,
                                              start_at, end_at)
            if run_given:
                changes["options"] = _start_options(
                    execution_timeout if execution_timeout is not None
                    else info.get("execution_timeout"),
                    run_timeout if run_timeout is not None else info.get("run_timeout"),
                    task_queue or info.get("task_queue"))
        await handle.update(**changes)
        return dict(_fmt.jsonable(await handle.describe()))

    session.out.emit(session.run(body), _updated)


@schedule.command(short_help="Delete a schedule (its runs go on).")
@schedule_id_argument
@json_option
@pass_session
def delete(session: Session, schedule_id: str) -> None:
    """Delete the schedule and its record of fires; runs it started go on."""
    _act(session, schedule_id, "deleted", lambda h: h.delete())


def _act(session: Session, schedule_id: str, action: str, call: Any) -> None:
    async def body(client: durable.Client) -> dict[str, Any]:
        await call(client.get_schedule(schedule_id))
        return {"schedule_id": schedule_id, "action": action}

    session.out.emit(session.run(body), _acted)


# ---------------------------------------------------------------- prune


@click.command(short_help="Delete closed runs older than a duration (retention, now).")
@click.option("--older-than", type=DURATION, required=True, metavar="S",
              help="Runs closed longer ago than this (30d, 12h, 3600).")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@click.option("--yes", is_flag=True,
              help="Prune runs closed less than 1h ago too (deleted at once, irreversibly).")
@json_option
@pass_session
def prune(session: Session, older_than: float, dry_run: bool, yes: bool) -> None:
    """Delete the namespace's runs closed more than --older-than ago, with their
    history, ops, requests and units, in small transactions (`client.prune`).

    --dry-run lists them and deletes nothing. Workers do this by themselves
    with a retention (Worker(retention=...) or the namespace's setting).
    An --older-than under 1h is refused unless --yes is given (a bare number
    is seconds: "--older-than 30" meant for days would delete at once every
    run closed more than 30 seconds ago), with what it would delete.
    """
    if older_than <= 0:
        raise click.BadParameter("must be greater than 0 seconds", param_hint="--older-than")

    async def body(client: durable.Client) -> dict[str, Any]:
        if older_than < SHORT_RETENTION and not dry_run and not yes:
            doomed = int((await client.prune(older_than, dry_run=True))["runs_expired"])
            text, arg = _fmt.duration(older_than), f"{older_than:g}s"
            raise CliError(
                f"--older-than {arg} would delete {doomed} closed run(s) now, every one "
                f"closed more than {text} ago, with its history, irreversibly; nothing was "
                "deleted", EXIT_REFUSED, label="refused",
                fix=f"if that is meant, run again with --yes (durable prune --older-than {arg} "
                    "--yes); for days give a unit, e.g. --older-than 30d; --dry-run lists them")
        return dict(_fmt.jsonable(await client.prune(older_than, dry_run=dry_run)))

    session.out.emit(session.run(body), _pruned)


#: ``retention --set`` below this many seconds is refused without ``--yes``:
#: every bare number under 3600 (seconds, not the days or hours meant) and
#: every ``s``/``m`` slip for ``d`` (``1s`` for ``1d``, ``30m`` for ``30d``)
#: falls under it, while hours-long retentions of scratch namespaces stay
#: one command. The API and the HTTP route take any positive value (tests and
#: virtual clocks set seconds on purpose): the guard is for a human typing.
SHORT_RETENTION = 3600.0


@click.command(short_help="Show (or set) how long closed runs are kept, and what was deleted.")
@click.option("--set", "keep", type=DURATION, metavar="S",
              help="Keep the namespace's closed runs this long (30d): wins over the workers'. "
                   "Under 1h it needs --yes.")
@click.option("--clear", is_flag=True,
              help="Remove the namespace's setting (the workers' retention applies again).")
@click.option("--yes", is_flag=True,
              help="Set a retention under 1h anyway (the next pass deletes every run "
                   "closed longer ago, irreversibly).")
@json_option
@pass_session
def retention(session: Session, keep: float | None, clear: bool, yes: bool) -> None:
    """The namespace's retention (`client.get_retention`): how long it keeps
    closed runs, when retention last deleted runs and how many rows, by
    table, it deleted so far. --set / --clear change the setting first
    (`client.set_retention`). With --server it needs an admin token.

    A --set under 1h is refused unless --yes is given, with the number of
    closed runs it would delete now; a --set shorter than the setting (or
    with none stored) reports how many closed runs the next pass deletes."""
    if keep is not None and clear:
        raise click.UsageError("give --set or --clear, not both")
    if keep is not None and keep < 1:  # client.set_retention's floor, said before any read
        raise click.BadParameter("must be at least 1 second (1s)", param_hint="--set")

    async def body(client: durable.Client) -> dict[str, Any]:
        doomed: int | None = None
        if clear:
            await client.set_retention(days=None)
        elif keep is not None:
            current = (await client.get_retention())["retention_seconds"]
            if keep < SHORT_RETENTION or current is None or keep < current:
                # what the next pass deletes: counted before anything is written
                doomed = int((await client.prune(keep, dry_run=True))["runs_expired"])
            if keep < SHORT_RETENTION and not yes:
                text, arg = _fmt.duration(keep), f"{keep:g}s"
                raise CliError(
                    f"--set {arg} keeps closed runs only {text}: the workers' next retention "
                    f"pass would delete {doomed} closed run(s), every one closed more than "
                    f"{text} ago, irreversibly; nothing was changed",
                    EXIT_REFUSED, label="refused",
                    fix=f"if that is meant, run again with --yes (durable retention --set "
                        f"{arg} --yes); for days give a unit, e.g. --set 30d")
            await client.set_retention(days=keep / 86400)
        settings = dict(_fmt.jsonable(await client.get_retention()))
        if doomed is not None:
            settings["runs_to_delete"] = doomed
        return settings

    session.out.emit(session.run(body), _retention_view)


# ---------------------------------------------------------------- views


def _when_text(spec: Mapping[str, Any]) -> str:
    """``0 2 * * * (Europe/Amsterdam)``, ``every 1h``, or both."""
    parts = [str(c) for c in spec.get("cron") or ()]
    if spec.get("every"):
        every = f"every {_fmt.seconds_text(spec['every'])}"
        if spec.get("offset"):
            every += f" +{_fmt.seconds_text(spec['offset'])}"
        parts.append(every)
    text = " | ".join(parts) or "-"
    if spec.get("cron") and spec.get("timezone") not in (None, "UTC"):
        text += f" ({spec['timezone']})"
    return text


def _paused_text(info: Mapping[str, Any]) -> Text:
    if info.get("ended"):
        return Text("ended", style="dim")
    return Text("paused", style="yellow") if info.get("paused") else Text("active")


def _fire_outcome(fire: Mapping[str, Any]) -> Text:
    return badge(fire.get("outcome"), FIRE_STYLES)


def _list_view(out: Output, data: Mapping[str, Any]) -> None:
    items = data.get("schedules") or []
    following = data.get("next_cursor")
    if not items:
        out.console.print("No schedules in this namespace.")
        return
    now = _fmt.utcnow()
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("SCHEDULE", "TYPE", "WHEN", "OVERLAP", "STATE", "NEXT FIRE", "LAST FIRE",
                 "LAST RUN", "FIRES", "SKIPPED"):
        table.add_column(name, justify="right" if name in ("FIRES", "SKIPPED") else "left")
    for s in items:
        last = s.get("last_fire") or {}
        last_run: Text = Text("-")
        if last.get("outcome") == "started":
            last_run = status_badge(last.get("status"))
        elif last:
            last_run = _fire_outcome(last)
        table.add_row(Text(str(s.get("schedule_id"))), Text(str(s.get("workflow_type"))),
                      Text(_when_text(s.get("spec") or {})), str(s.get("overlap")),
                      _paused_text(s), _next_fire(s, now),
                      when(last.get("scheduled_at"), now), last_run,
                      str(s.get("fires_count", 0)), str(s.get("skipped_count", 0)))
    out.console.print(table)
    if following:
        out.console.print(Text(f"More: durable schedule list --cursor {following} "
                               "(with the same filters)", style="dim"))


def _next_fire(s: Mapping[str, Any], now: datetime.datetime) -> Text:
    """A list row's next fire; an overdue one says so (no worker fires it); one
    its jitter starts later says when (its fire time alone read "40s ago")."""
    due, fire = _fmt.instant(s.get("next_due_at")), _fmt.instant(s.get("next_fire_at"))
    if not s.get("overdue_since") and due is not None and fire is not None and due != fire:
        return Text.assemble(_fmt.absolute(fire),
                             (f" (jitter: starts {_fmt.relative(due, now)})", "dim"))
    if not s.get("overdue_since"):
        return when(s.get("next_fire_at"), now)
    return Text.assemble(("overdue ", "bold red"), when(s.get("overdue_since"), now))


def _describe_view(out: Output, info: Mapping[str, Any]) -> None:
    now = _fmt.utcnow()
    out.console.print(Text.assemble(
        "Schedule ", (str(info.get("schedule_id")), "bold"),
        f" ({info.get('workflow_type')}) ", badge(
            "ended" if info.get("ended") else "paused" if info.get("paused") else "active",
            {"paused": "yellow", "active": "green", "ended": "dim"})),
        soft_wrap=True)
    grid = _grid()
    spec = info.get("spec") or {}
    grid.add_row("namespace", Text(str(info.get("namespace"))))
    grid.add_row("when", Text(_when_text(spec)))
    grid.add_row("time zone", Text(str(spec.get("timezone") or "UTC")))
    for key, label in (("start_at", "from"), ("end_at", "until")):
        if spec.get(key):
            grid.add_row(label, when(spec[key], now))
    grid.add_row("overlap", Text(str(info.get("overlap"))))
    if info.get("note"):
        grid.add_row("note", Text(str(info["note"])))
    grid.add_row("jitter", Text(_fmt.seconds_text(info.get("jitter") or 0)))
    grid.add_row("catch-up window", Text(_fmt.seconds_text(info.get("catchup_window"))))
    remaining = info.get("remaining_actions")
    grid.add_row("remaining runs", Text("no limit" if remaining is None else str(remaining)))
    grid.add_row("task queue", Text(str(info.get("task_queue") or "-")))
    for key in ("input", "memo"):  # what each fire starts with
        if info.get(key) is not None:
            grid.add_row(key, Text(json.dumps(info[key], ensure_ascii=False)[:200]))
    for key, label in (("execution_timeout", "execution timeout"),
                       ("run_timeout", "run timeout")):
        if info.get(key) is not None:
            grid.add_row(label, Text(_fmt.seconds_text(info[key])))
    grid.add_row("fires", Text(f"{info.get('fires_count', 0)} "
                               f"({info.get('skipped_count', 0)} skipped)"))
    grid.add_row("last fired", when(info.get("last_fired_at"), now))
    if info.get("last_skip_reason"):
        grid.add_row("last skip", Text.assemble(
            when(info.get("last_skipped_at"), now), f"  {info['last_skip_reason']}"))
    overdue = _ops.schedule_overdue(info.get("overdue"))
    if overdue:
        grid.add_row("overdue", Text(overdue, style="bold red"))
    next_fires = [f for f in info.get("next_fires") or [] if f]
    grid.add_row("next fires", Text("\n".join(
        f"{_fmt.absolute(t)}" for t in (_fmt.instant(f) for f in next_fires) if t)
        if next_fires else (_ops.schedule_ended(info)
                            or ("none (paused)" if info.get("paused") else "none"))))
    if info.get("running"):
        grid.add_row("running", Text(", ".join(str(r) for r in info["running"])))
    if info.get("buffered"):
        grid.add_row("buffered", Text(", ".join(
            str(b.get("scheduled_at")) for b in info["buffered"])))
    out.console.print(grid)
    recent = info.get("recent") or []
    if recent:
        out.console.print()
        out.console.print(Text("Recent fires", style="bold"))
        out.console.print(_fires_table(recent, now))


def _fires_table(fires: Sequence[Mapping[str, Any]], now: datetime.datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("SCHEDULED", "ORIGIN", "OUTCOME", "WORKFLOW", "RUN STATUS", "REASON"):
        table.add_column(name)
    for f in fires:
        table.add_row(when(f.get("scheduled_at"), now), str(f.get("origin") or "-"),
                      _fire_outcome(f), Text(str(f.get("workflow_id") or "-")),
                      status_badge(f.get("status")) if f.get("status") else Text("-"),
                      Text(str(f.get("reason") or "")))
    return table


def _created(out: Output, info: Mapping[str, Any]) -> None:
    out.note(f"created schedule {info.get('schedule_id')}")
    _describe_view(out, info)


def _updated(out: Output, info: Mapping[str, Any]) -> None:
    out.note(f"updated schedule {info.get('schedule_id')}")
    _describe_view(out, info)


def _acted(out: Output, data: Mapping[str, Any]) -> None:
    out.console.print(Text(f"Schedule {data.get('schedule_id')} {data.get('action')}."),
                      soft_wrap=True)


def _triggered(out: Output, data: Mapping[str, Any]) -> None:
    outcome = data.get("outcome")
    line = Text.assemble(f"Schedule {data.get('schedule_id')} fired at "
                         f"{data.get('scheduled_at')}: ", _fire_outcome(data))
    if outcome == "started":
        line.append(f" workflow {data.get('workflow_id')} run {data.get('run_id')}")
    elif data.get("reason"):
        line.append(f" ({data.get('reason')})")
    out.console.print(line, soft_wrap=True)


def _backfilled(out: Output, data: Mapping[str, Any]) -> None:
    out.console.print(Text(
        f"Backfill of {data.get('schedule_id')}: {data.get('fires', 0)} fire times, "
        f"{data.get('started', 0)} started, {data.get('buffered', 0)} buffered, "
        f"{data.get('skipped', 0)} skipped, {data.get('already_fired', 0)} already fired",
        style="bold"), soft_wrap=True)
    fires = data.get("results") or []
    if fires:
        out.console.print(_fires_table(fires, _fmt.utcnow()))


def _absolute(value: Any) -> Text:
    moment = _fmt.instant(value)
    return Text(_fmt.absolute(moment) if moment is not None else "-")


def _pruned(out: Output, data: Mapping[str, Any]) -> None:
    runs = data.get("runs") or []
    moment = _fmt.instant(data.get("cutoff"))
    cutoff = _fmt.absolute(moment) if moment is not None else "-"
    if data.get("dry_run"):
        n = int(data.get("runs_expired") or 0)
        out.console.print(Text(
            f"Dry run: {n} {'run' if n == 1 else 'runs'} closed before {cutoff} would be "
            "deleted (nothing was deleted)", style="bold"), soft_wrap=True)
    else:
        n = int(data.get("runs_deleted") or 0)
        out.console.print(Text(
            f"Pruned {n} {'run' if n == 1 else 'runs'} closed before {cutoff}", style="bold"),
            soft_wrap=True)
    if runs:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for name in ("WORKFLOW", "RUN", "TYPE", "STATUS", "CLOSED"):
            table.add_column(name)
        for r in runs:
            table.add_row(Text(str(r.get("workflow_id"))), Text(str(r.get("run_id"))),
                          Text(str(r.get("workflow_type") or "-")),
                          status_badge(r.get("status")), _absolute(r.get("closed_at")))
        out.console.print(table)
        if len(runs) < n:
            out.console.print(Text(f"(first {len(runs)} of {n} listed)"))
    deleted = data.get("deleted") or {}
    if deleted:
        table = Table(box=None, header_style="bold", pad_edge=False)
        table.add_column("TABLE")
        table.add_column("ROWS DELETED", justify="right")
        for name, count in sorted(deleted.items()):
            table.add_row(name, str(count))
        out.console.print(table)


def _retention_view(out: Output, data: Mapping[str, Any]) -> None:
    now = _fmt.utcnow()
    out.console.print(Text.assemble(("Retention of namespace ", "bold"),
                                    (str(data.get("namespace")), "bold")))
    grid = _grid()
    seconds = data.get("retention_seconds")
    grid.add_row("keeps closed runs", Text(
        f"{_fmt.duration(seconds)} (this namespace's setting)" if seconds is not None else
        "not set here: each worker's Worker(retention=...) applies; none: kept for ever"))
    grid.add_row("last deleted", when(data.get("last_pruned_at"), now)
                 if data.get("last_pruned_at") else Text("never"))
    pruned = data.get("pruned") or {}
    grid.add_row("deleted so far", Text(
        f"{pruned.get('runs', 0)} runs" + "".join(
            f", {n} {table}" for table, n in sorted(pruned.items()) if table != "runs")))
    out.console.print(grid)
    if data.get("runs_to_delete") is not None:
        out.console.print(Text(
            f"The next retention pass deletes {data['runs_to_delete']} closed run(s) "
            f"(closed more than {_fmt.duration(seconds)} ago)",
            style="yellow" if data["runs_to_delete"] else ""))
