"""Strict determinism in tests: workflow code that reads the host clock, draws
random numbers or waits outside durable is stopped at the call.

Replay re-runs workflow code and must see it ask for the same operations
(docs/concepts.md, "Determinism: the rules for workflow code"). A workflow
that calls ``time.time()``, ``random.random()``, ``uuid.uuid4()`` or
``await asyncio.sleep()`` passes every test and breaks later, in production,
on the replay that follows a crash or a deploy. Temporal catches these with a
sandbox that re-imports modules, and its users' top complaint is the sandbox
itself; `durable` runs workflows as plain coroutines in the application's
loop (decisions.md (ai)). So the check lives where it costs nothing in
production: in the user's tests.

``with strict_determinism():`` replaces, for its duration, the functions
below in their modules with guards. A guard called by workflow code raises
`NondeterministicCall`, naming the function, the workflow, the file and line,
and what to use instead; the run fails with it, so the test that awaits its
result fails. The violation is also kept, and leaving the block raises it
again if the workflow swallowed it (an ``except Exception`` must not hide
it). Called from anywhere else, a guard is the original function.

"Workflow code" is a call whose direct caller is a workflow task (a
`TaskState` is current and no activity attempt is: activities may read the
clock) and whose caller's file is the user's: the module that defines the
workflow, or any file outside the standard library, the installed packages
and durable. A library a workflow calls may read the clock for its own
bookkeeping (logging timestamps); only the user's own calls are judged.
Calls through names imported before the block (``from time import time``)
are not seen: the guard replaces module attributes, not bindings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._paths import is_library
from .._runtime.attempts import _current as _current_attempt
from .._runtime.state import _task_state
from ..errors import NondeterministicCall

_USE_NOW = "workflow.now() (recorded time)"
_USE_SLEEP = "await workflow.sleep(seconds) (a durable timer)"
_USE_RANDOM = "workflow.random() (seeded from the run)"
_USE_UUID = "workflow.uuid4() (seeded from the run)"

#: (module, attribute, what to use instead): what the guard replaces
GUARDED: tuple[tuple[Any, str, str], ...] = (
    (time, "time", _USE_NOW),
    (time, "time_ns", _USE_NOW),
    (time, "sleep", _USE_SLEEP + "; a blocking sleep also blocks the event loop"),
    *((random, name, _USE_RANDOM) for name in (
        "random", "randint", "randrange", "choice", "choices", "shuffle", "sample",
        "uniform", "getrandbits", "gauss", "randbytes")),
    (uuid, "uuid1", _USE_UUID),
    (uuid, "uuid4", _USE_UUID),
    (os, "urandom", _USE_RANDOM),
    (asyncio, "sleep", _USE_SLEEP),
    (anyio, "sleep", _USE_SLEEP),
    (anyio, "sleep_until", _USE_SLEEP),
)


def _guarded() -> tuple[tuple[Any, str, str], ...]:
    """`GUARDED`, with trio's sleeps when trio is imported (never imported here)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return GUARDED
    return (*GUARDED, (trio, "sleep", _USE_SLEEP), (trio, "sleep_until", _USE_SLEEP))


@dataclass
class DeterminismGuard:
    """What ``with strict_determinism() as guard:`` saw: every violation, in order."""

    violations: list[NondeterministicCall] = field(default_factory=list)


_lock = threading.Lock()
_active: list[DeterminismGuard] = []
_originals: dict[tuple[int, str], Any] = {}


def _users(filename: str, workflow_file: str) -> bool:
    """Whether code in `filename` is the user's (see the module's docstring)."""
    return filename == workflow_file or not is_library(filename)


def _violation(name: str, advice: str) -> NondeterministicCall | None:
    """The violation if the caller's caller is workflow code, else None."""
    state = _task_state.get()
    if state is None or _current_attempt.get() is not None:
        return None
    frame = sys._getframe(2)
    defn = state.ctx.defn
    code = getattr(getattr(defn, "fn", None), "__code__", None)
    if not _users(frame.f_code.co_filename, getattr(code, "co_filename", "")):
        return None
    where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    return NondeterministicCall(
        f"workflow {defn.name!r} called {name}() at {where}: it returns something else "
        f"when the run replays after a crash or a deploy; use {advice}, or call it in an "
        "activity (its result is recorded)")


def _guard(module: Any, attribute: str, advice: str) -> Callable[..., Any]:
    original = getattr(module, attribute)
    name = f"{module.__name__}.{attribute}"

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        problem = _violation(name, advice)
        if problem is not None:
            for guard in _active:
                guard.violations.append(problem)
            raise problem
        return original(*args, **kwargs)

    return guarded


@contextlib.contextmanager
def strict_determinism() -> Iterator[DeterminismGuard]:
    """Stop workflow code at calls that differ on replay, while the block runs.

    Leaving the block raises the first `NondeterministicCall` seen if nothing
    else is raised out of it: a workflow that caught the error, or a test
    that expected its run to fail for another reason, must not hide it
    (clear ``guard.violations`` to accept them). Blocks may nest and overlap
    across tests; the functions are restored when the last one ends."""
    guard = DeterminismGuard()
    with _lock:
        if not _active:
            for module, attribute, advice in _guarded():
                if hasattr(module, attribute):
                    _originals[(id(module), attribute)] = getattr(module, attribute)
                    setattr(module, attribute, _guard(module, attribute, advice))
        _active.append(guard)
    raised = False
    try:
        yield guard
    except BaseException:  # the block's own error goes on (a run's failure names the call)
        raised = True
        raise
    finally:
        with _lock:
            _active.remove(guard)
            if not _active:
                for module, attribute, _advice in _guarded():
                    original = _originals.pop((id(module), attribute), None)
                    if original is not None:
                        setattr(module, attribute, original)
        if guard.violations and not raised:
            raise guard.violations[0]
