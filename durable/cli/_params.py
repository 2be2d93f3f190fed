"""Parameter types and completions shared by the commands."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import click
from click.shell_completion import CompletionItem

import durable
from durable.store.records import LISTED_STATUSES

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class Duration(click.ParamType):  # type: ignore[type-arg,unused-ignore]
    """Seconds as a number (``90``, ``1.5``) or with units (``90s``, ``5m``, ``1h30m``, ``2d``)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        text = str(value).strip().lower()
        try:
            return float(text)
        except ValueError:
            pass
        if text and _PART.sub("", text) == "":
            return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))
        self.fail(f"{value!r} is not a duration: give seconds (90, 1.5) or a value with units "
                  "(90s, 5m, 1h30m, 2d)", param, ctx)


DURATION = Duration()


def parse_args_json(text: str | None, option: str, whose: str = "workflow's") -> list[Any]:
    """Positional arguments (a workflow's, a handler's) from a JSON array (``'["o-1", 3]'``)."""
    if text is None or text.strip() == "":
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc.msg} at character {exc.pos}); give a JSON array of the "
            f"{whose} arguments, e.g. '[\"o-1\", 3]'", param_hint=option) from exc
    if not isinstance(value, list):
        raise click.BadParameter(
            f"must be a JSON array of the {whose} arguments, got a {type(value).__name__}; "
            f"wrap a single argument in brackets, e.g. '[{text.strip()}]'", param_hint=option)
    return value


KNOWN_STATUSES = LISTED_STATUSES


def complete_status(ctx: click.Context, param: click.Parameter,
                    incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(s) for s in KNOWN_STATUSES if s.startswith(incomplete)]


def complete_workflow_id(ctx: click.Context, param: click.Parameter,
                         incomplete: str) -> list[CompletionItem]:
    """Workflow ids from the database given by --db / DURABLE_DB_URL (embedded only).

    Completion must never print an error into the user's shell, so any
    failure (no database configured, file missing, storage down) offers
    nothing rather than raising.
    """
    from ._app import _check_sqlite_exists

    root = ctx.find_root()
    url = root.params.get("db")
    namespace = root.params.get("namespace") or "default"
    if not url or root.params.get("server"):
        return []

    async def ids() -> list[str]:
        async with durable.connect(url, namespace=namespace) as client:
            runs = await client.list(limit=200)
        return sorted({str(r["workflow_id"]) for r in runs})

    try:
        _check_sqlite_exists(url)
        found = anyio.run(ids)
    except Exception:
        return []
    return [CompletionItem(i) for i in found if i.startswith(incomplete)]


workflow_id_argument = click.argument("workflow_id", metavar="ID",
                                      shell_complete=complete_workflow_id)
run_option = click.option("--run", "run_id", metavar="RUN",
                          help="A given run of the workflow (default: its current run).")
