"""The ``durable`` group: every command the CLI's modules define joins it, in one place."""

from __future__ import annotations

import importlib
import pkgutil

import click

import durable.cli
from durable.cli._group import cli


def _reachable(group: click.Group) -> set[click.Command]:
    found: set[click.Command] = set()
    for command in group.commands.values():
        found.add(command)
        if isinstance(command, click.Group):
            found |= _reachable(command)
    return found


def test_every_command_a_module_defines_is_in_the_group() -> None:
    defined: dict[str, click.Command] = {}
    for info in pkgutil.iter_modules(durable.cli.__path__):
        module = importlib.import_module(f"durable.cli.{info.name}")
        for attr, value in vars(module).items():
            if isinstance(value, click.Command) and value is not cli:
                defined[f"{info.name}.{attr}"] = value
    reachable = _reachable(cli)
    missing = sorted(name for name, command in defined.items() if command not in reachable)
    assert not missing, f"defined but not added to the group in durable/cli/_group.py: {missing}"


def test_the_group_has_its_documented_commands() -> None:
    assert {"start", "list", "describe", "worker", "serve", "queue", "schedule", "prune",
            "reset", "check-upgrade", "workers"} <= set(cli.commands)
