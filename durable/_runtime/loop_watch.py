"""The loop watch: notices when something blocks the host's event loop, and says what.

A worker lives in the application's own event loop, and so do workflow code
and async activities. Code that blocks that loop (``time.sleep``, a
synchronous HTTP call, a CPU-bound loop in an ``async def``) stops every
other run, every lease renewal, the deadline watchdog and the application
itself: deadlines fire late, other workers take the runs over once the
leases lapse, and nothing in the run's history says why. Temporal fails a
workflow task after 2 s ("deadlock detected"); we cannot interrupt the
blocked code (it holds the loop), but we can tell the truth about it.

Two halves:

- a beat, a task of the worker that notes the monotonic time every
  `interval` seconds on the loop;
- a watcher thread that looks at the beat. When it is `threshold` seconds
  old, the loop is blocked: the thread reads the loop thread's stack
  (`sys._current_frames`), finds the innermost frame (where it is blocked)
  and the workflow run or activity whose code is on the stack, and logs
  ``event_loop_blocked`` (a WARNING of ``durable.worker``) while the loop is
  still blocked: a loop that never comes back is reported too.

When the beat comes back, the loop side logs ``event_loop_unblocked`` with
the episode's whole length and keeps it as the worker's `last` block and in
its `count`, which the worker records in the registry at its next renewal
(``durable workers``, the Workers page, ``/api/workers``). Time is the
process's real monotonic time, never the worker's clock: a virtual clock
does not block a loop, and a blocked loop is blocked in real time.

The cost on the loop is one short sleep every `interval` (a quarter of a
second by default); nothing runs per step.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import CodeType, FrameType
from typing import Any

import anyio

from .._paths import is_library
from ..present import loop_culprit

#: how many frames of the blocked stack are kept (innermost first)
STACK_FRAMES = 8
#: the longest stack walked (a deep recursion is cut here)
MAX_DEPTH = 500


@dataclass(frozen=True)
class LoopBlock:
    """One time the event loop stopped turning for `threshold` seconds or more."""

    #: when the loop stopped turning (seconds since the epoch)
    started_at: float
    #: how long it was blocked: so far while `ended` is False, in all once it is True
    seconds: float
    ended: bool
    #: the innermost frame outside durable and the event loop: ``file:line in function``
    where: str | None = None
    #: the innermost frames of the blocked stack, innermost first
    stack: tuple[str, ...] = ()
    workflow_type: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    activity_type: str | None = None

    def culprit(self) -> str:
        """Whose code held the loop, in words (``workflow 'order' (run ...)``)."""
        return loop_culprit(self.as_record(0))

    def as_record(self, count: int) -> dict[str, Any]:
        """What the registry keeps of it (JSON), with how many blocks the worker saw."""
        return {"count": count, "started_at": self.started_at, "seconds": round(self.seconds, 3),
                "where": self.where, "workflow_type": self.workflow_type,
                "workflow_id": self.workflow_id, "run_id": self.run_id,
                "activity_type": self.activity_type}


class LoopWatch:
    """Watches one event loop from a thread; see the module's docstring."""

    def __init__(self, threshold: float, log: Any,
                 codes: Callable[[], dict[CodeType, tuple[str, str]]] | None = None,
                 consequence: Callable[[float], str | None] | None = None) -> None:
        self.threshold = threshold
        #: how often the beat notes the time (and the thread looks at it)
        self.interval = min(0.25, threshold / 4)
        self.log = log
        #: code objects of registered workflows and activities -> ("workflow"|"activity", name)
        self._codes = codes
        #: what a block did meanwhile (the worker's leases), asked when it ends
        self._consequence = consequence
        #: blocks that ended so far, and the last of them
        self.count = 0
        self.last_ended: LoopBlock | None = None
        #: the last block seen, ended or still going on (set by the thread too)
        self.last: LoopBlock | None = None
        self._beat = time.monotonic()
        self._loop_thread: int | None = None
        self._reported: LoopBlock | None = None  # the block the thread logged, not yet ended
        self._lock = threading.Lock()
        self._stop = threading.Event()

    async def run(self) -> None:
        """The beat (a task on the watched loop); starts and stops the thread."""
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._stop.clear()
        thread = threading.Thread(target=self._watch, name="durable-loop-watch", daemon=True)
        thread.start()
        try:
            while True:
                await anyio.sleep(self.interval)
                now = time.monotonic()
                self._turned(now)
        finally:
            self._stop.set()  # the thread ends at its next look; nothing to wait for

    def _turned(self, now: float) -> None:
        """The loop turned again at `now`: end a block if it was one."""
        gap = now - self._beat
        with self._lock:
            self._beat = now
            reported, self._reported = self._reported, None
        if reported is None and gap - self.interval < self.threshold:
            return
        block = reported or LoopBlock(started_at=time.time() - gap, seconds=gap, ended=True)
        block = replace(block, seconds=gap, ended=True)
        self.count += 1
        self.last = self.last_ended = block
        consequence = self._consequence(now) if self._consequence is not None else None
        self.log.warning(
            "event_loop_unblocked", seconds=round(gap, 3), where=block.where,
            culprit=block.culprit(), workflow_type=block.workflow_type,
            workflow_id=block.workflow_id, run_id=block.run_id, activity_type=block.activity_type,
            leases_lapsed=consequence is not None,
            detail=(f"the event loop was blocked for {gap:.1f}s by {block.culprit()}"
                    + (f" at {block.where}" if block.where else "")
                    + ": no other run, lease renewal or deadline could proceed meanwhile"
                    + (f"; {consequence}" if consequence else "")))

    def _watch(self) -> None:
        """The thread: looks at the beat every `interval` seconds."""
        while not self._stop.wait(self.interval):
            with self._lock:
                late = time.monotonic() - self._beat
                if late < self.threshold or self._reported is not None:
                    continue
                block = self.inspect(late)
                self._reported = block
            self.last = block
            self.log.warning(
                "event_loop_blocked", seconds=round(late, 3), where=block.where,
                culprit=block.culprit(), workflow_type=block.workflow_type,
                workflow_id=block.workflow_id, run_id=block.run_id,
                activity_type=block.activity_type, stack=list(block.stack),
                detail=(f"the event loop has been blocked for {late:.1f}s by {block.culprit()}"
                        + (f" at {block.where}" if block.where else "")
                        + "; blocking calls belong in a sync activity (it runs in a thread) "
                          "or anyio.to_thread.run_sync"))

    def inspect(self, late: float) -> LoopBlock:
        """The block as the loop thread's stack shows it now (from the thread)."""
        frame = sys._current_frames().get(self._loop_thread or -1)
        try:
            return describe(frame, time.time() - late, late,
                            self._codes() if self._codes is not None else {})
        finally:
            del frame


def describe(frame: FrameType | None, started_at: float, seconds: float,
             codes: dict[CodeType, tuple[str, str]]) -> LoopBlock:
    """Who holds the loop, read from its innermost `frame` outwards: `where` is
    the innermost frame of the user's code (`durable._paths`: outside the
    standard library, installed packages and durable, or in a file that
    defines one of `codes`), the line that called whatever blocks."""
    user_files = {code.co_filename for code in codes}
    where: str | None = None
    stack: list[str] = []
    found: dict[str, str] = {}
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        code = frame.f_code
        text = f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
        if len(stack) < STACK_FRAMES:
            stack.append(text)
        if where is None and (code.co_filename in user_files
                              or not is_library(code.co_filename)):
            where = text
        known = codes.get(code)
        if known is not None:
            found.setdefault(f"{known[0]}_type", known[1])
        for key, value in _engine_frame(frame).items():
            found.setdefault(key, value)
        frame = frame.f_back
        depth += 1
    return LoopBlock(started_at=started_at, seconds=seconds, ended=False, where=where,
                     stack=tuple(stack), workflow_type=found.get("workflow_type"),
                     workflow_id=found.get("workflow_id"), run_id=found.get("run_id"),
                     activity_type=found.get("activity_type"))


def _engine_frame(frame: FrameType) -> dict[str, str]:
    """What a frame of the engine knows of whose code it runs: a workflow's
    (`RunExecutor._run_code` and the tasks it spawns beside the code: the run)
    or an activity attempt's (`attempts.call_activity`: its name and run).
    Only these frames' locals are read, and only from the watch thread while
    the loop is blocked."""
    kind = _ENGINE_FRAMES.get(frame.f_code)
    if kind is None:
        return {}
    found: dict[str, str] = {}
    if kind == "run":
        run = getattr(frame.f_locals.get("self"), "run", None)
        pairs = (("run_id", getattr(run, "run_id", None)),
                 ("workflow_id", getattr(run, "workflow_id", None)),
                 ("workflow_type", getattr(run, "workflow_type", None)))
    else:
        actx = frame.f_locals.get("ctx")
        info = getattr(actx, "_info", None)
        make = getattr(actx, "_make_info", None)
        if info is None and callable(make):
            try:  # built here and dropped: the attempt's own stays unbuilt
                info = make()
            except Exception:  # a view must never fail the watch
                info = None
        pairs = (("activity_type", getattr(actx, "activity_type", None)),
                 ("workflow_id", getattr(info, "workflow_id", None)),
                 ("run_id", getattr(info, "run_id", None)))
    for key, value in pairs:
        if isinstance(value, str) and value:
            found[key] = value
    return found


def _engine_frames() -> dict[CodeType, str]:
    from . import attempts
    from .executor import RunExecutor

    spawn = RunExecutor.spawn_task.__code__
    nested = [c for c in spawn.co_consts if isinstance(c, CodeType) and c.co_name == "run"]
    found = {code: "run" for code in (RunExecutor._run_code.__code__, *nested)}
    found[attempts.call_activity.__code__] = "attempt"
    return found


_ENGINE_FRAMES = _engine_frames()


def codes_of(workflows: dict[str, Any], activities: dict[str, Any]
             ) -> dict[CodeType, tuple[str, str]]:
    """The code objects of a worker's workflows and activities (their `fn`), for
    `describe` to name whose code is on a blocked stack."""
    found: dict[CodeType, tuple[str, str]] = {}
    for kind, defns in (("workflow", workflows), ("activity", activities)):
        for name, defn in defns.items():
            fn = getattr(defn, "fn", None)
            code = getattr(inspect.unwrap(fn) if callable(fn) else fn, "__code__", None)
            if isinstance(code, CodeType):
                found.setdefault(code, (kind, name))
    return found
