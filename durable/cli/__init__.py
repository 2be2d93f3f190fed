"""The `durable` command line: see and steer runs from a terminal.

``durable [--db URL | --server URL --token T] [--namespace NS] COMMAND ...``

The commands live in `durable.cli._commands` and its siblings, added to the
group in one place (`durable.cli._group`); this module only checks that the
``cli`` extra (click and rich) is installed, so that a core install without it
gets one clear line instead of an ImportError traceback. See docs/cli.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

INSTALL_HINT = (
    "durable: the command line needs the 'cli' extra ({missing} is not installed); "
    "install it with: pip install 'durable-sdk[cli]'"
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``durable`` console script (and ``python -m durable.cli``)."""
    try:
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(INSTALL_HINT.format(missing=exc.name or "click or rich") + "\n")
        sys.exit(1)
    from ._group import run

    run(argv)
