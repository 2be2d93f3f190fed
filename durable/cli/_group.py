"""The ``durable`` group and its commands: the one place a command joins it.

Each command module defines its commands with ``@click.command`` (or a
subgroup with ``@click.group``, its subcommands beside it) and imports only
what lies below it (`_app`, `_params`, `_views`); this module adds them to
the group (`_app.cli`), in click's explicit way. Nothing registers by being
imported, so which commands exist is read here, and no command module needs
the group's module to import it back.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _cascade, _commands, _operations, _queues, _schedules, _upgrade, _watch
from ._app import cli

__all__ = ["cli", "run"]

for _command in (
    # runs: start, see, wait
    _commands.start, _commands.list_, _commands.describe, _commands.history,
    _commands.result, _watch.watch, _cascade.cascade,
    # runs: steer
    _commands.signal, _commands.query, _commands.update,
    _commands.request_cancellation, _commands.cancel, _commands.terminate,
    _commands.retry_after_review, _upgrade.reset,
    # processes and upkeep
    _operations.worker, _operations.serve, _operations.repair_pass, _upgrade.check_upgrade,
    _queues.workers, _queues.queue,
    # schedules and retention
    _schedules.schedule, _schedules.prune, _schedules.retention,
):
    cli.add_command(_command)


def run(argv: Sequence[str] | None = None) -> None:
    """Run the command line: hand the arguments over to click."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="durable")
