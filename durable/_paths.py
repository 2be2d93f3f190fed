"""Whose code a frame runs: the user's, or a library's.

A library here is the standard library, the installed packages (this
interpreter's ``site-packages``) and durable itself, with its drivers. Two places judge frames
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
    here = os.path.dirname(os.path.abspath(__file__))
    dirs.add(here + os.sep)  # durable itself
    # its built-in drivers, from a source checkout (an editable install puts
    # `drivers/` on the path beside `durable/`; a wheel, in site-packages):
    # the SQLite driver's step commit yields to the loop from a workflow's
    # task, which strict_determinism took for the workflow's own sleep
    drivers = os.path.join(os.path.dirname(here), "drivers")
    if os.path.isdir(drivers):
        dirs.add(drivers + os.sep)
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
