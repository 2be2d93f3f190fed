"""Whose code a frame runs: the user's, or a library's.

A library here is the standard library, the installed packages (this
interpreter's ``site-packages``) and durable itself. Two places judge frames
by it: the loop watch names the user's own line that holds a blocked event
loop (not the socket read deep inside the HTTP client it called), and
`durable.testing.strict_determinism` judges only the calls the user's own
code makes (a logger reading the clock for its timestamps is no fault). The
files that define registered workflows and activities are the user's even
when installed as a package: callers pass them in.
"""

from __future__ import annotations

import functools
import os
import sysconfig


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.abspath(paths[key]) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.add(os.path.dirname(os.path.abspath(__file__)) + os.sep)  # durable itself
    return tuple(sorted(dirs))


#: where library code lives (directories, each ending with a separator)
LIBRARY_DIRS = _library_dirs()


@functools.lru_cache(maxsize=4096)
def is_library(filename: str) -> bool:
    """Whether code in `filename` is a library's (``<frozen ...>`` and
    ``<string>`` count as the runtime's own)."""
    if filename.startswith("<"):
        return True
    return os.path.abspath(filename).startswith(LIBRARY_DIRS)
