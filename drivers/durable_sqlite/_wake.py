"""asyncio: how the database thread wakes an event loop (`Wake`).

The thread completes a drain's callers with one callback on their loop
(`_writer.Writer._complete`). It posts it to the loop's `Wake`: the
driver's own eventfd (a pipe where there is none), which the loop watches
(``add_reader``), and a queue of the callbacks posted, run on the loop in
the order posted. Where a loop cannot watch a file (Windows' proactor) or be
referred to weakly, ``loop.call_soon_threadsafe`` is used, as before.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any


class Wake:
    """The database thread's way into one asyncio loop: its own eventfd (a
    pipe where there is none) read by the loop (``add_reader``), and the
    callbacks posted through it, run in the order posted.

    Why not ``loop.call_soon_threadsafe``: it wakes the loop through the
    loop's self-pipe, a socket pair, whose ``send`` took 7 µs of the database
    thread's time before the caller's wake-up against 1.8 µs for an eventfd's
    write (and the loop then reads the socket twice, the second time to learn
    it is empty). A sequential step pays it once per commit (issue 26). The
    callbacks and their order are the same.
    """

    __slots__ = ("__weakref__", "fd", "loop", "pending", "post", "wfd")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, wfd: int) -> None:
        # weakly: the loop holds this (its reader), and the map of loops'
        # wake-ups must not keep a closed loop alive
        self.loop = weakref.ref(loop)
        self.fd = fd
        self.wfd = wfd
        self.pending: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self.post = self._post  # one bound method: the Writer keys its turns by it

    def _post(self, fn: Callable[..., object], *args: Any) -> None:
        """On the database thread: run `fn(*args)` on the loop soon."""
        loop = self.loop()
        if loop is None or loop.is_closed():
            raise RuntimeError("Event loop is closed")
        self.pending.append((fn, args))
        try:
            if self.fd == self.wfd:
                os.eventfd_write(self.wfd, 1)
            else:
                os.write(self.wfd, b"\0")
        except BlockingIOError:
            pass  # full: a wake-up is pending already

    def run(self) -> None:
        """On the loop: what was posted, in order (read first, so that a post
        coming meanwhile is run now or leaves a wake-up behind it)."""
        try:
            if self.fd == self.wfd:
                os.eventfd_read(self.fd)
            else:
                os.read(self.fd, 4096)
        except BlockingIOError:
            pass
        pending = self.pending
        while pending:
            fn, args = pending.popleft()
            try:
                fn(*args)
            except BaseException as exc:  # as a loop reports a callback's error
                if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                    raise
                loop = self.loop()
                if loop is not None:
                    loop.call_exception_handler({
                        "message": f"Exception in callback {fn!r}", "exception": exc})


def _close_fds(fd: int, wfd: int) -> None:
    for one in {fd, wfd}:
        try:
            os.close(one)
        except OSError:
            pass


#: each loop's `Wake`, or False where it cannot have one
_wakes: weakref.WeakKeyDictionary[Any, Wake | bool] = weakref.WeakKeyDictionary()


def _no_wake() -> None:
    return None


#: the last loop's wake-up (one loop at a time is the rule), held weakly:
#: the loop holds it (its reader), and it must not keep a closed loop alive
_last_wake: Callable[[], Any] = _no_wake


def notify_of(loop: asyncio.AbstractEventLoop) -> Callable[..., object]:
    """The database thread's "call soon" into `loop`: its `Wake`'s ``post``
    (the same bound method every time: the thread keys its turns by it), or
    ``loop.call_soon_threadsafe`` where it cannot have one."""
    wake = _last_wake()
    if wake is None or wake.loop() is not loop:
        wake = _loop_wake(loop)
        if wake is None:
            return loop.call_soon_threadsafe
    return wake.post  # type: ignore[no-any-return]


def _loop_wake(loop: asyncio.AbstractEventLoop) -> Wake | None:
    """The loop's `Wake`, made on first use; None where the loop cannot
    watch a file (Windows' proactor) or be referred to weakly: then
    ``call_soon_threadsafe``, as before."""
    global _last_wake
    try:
        wake = _wakes.get(loop)
        if wake is None:
            wake = _wakes[loop] = _new_wake(loop)
    except TypeError:
        return None
    if not isinstance(wake, Wake):
        return None
    _last_wake = weakref.ref(wake)
    return wake


def _new_wake(loop: asyncio.AbstractEventLoop) -> Wake | bool:
    """A `Wake` watched by the loop, or False."""
    try:
        if hasattr(os, "eventfd"):
            fd = wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:
            fd, wfd = os.pipe()
            os.set_blocking(fd, False)
            os.set_blocking(wfd, False)
    except OSError:
        return False
    wake = Wake(loop, fd, wfd)
    try:
        loop.add_reader(fd, wake.run)
    except (NotImplementedError, AttributeError):
        _close_fds(fd, wfd)
        return False
    weakref.finalize(loop, _close_fds, fd, wfd)
    return wake
