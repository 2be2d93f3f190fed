"""Controllable dependencies for testing time limits and interruptions.

Tests of a time limit must show both the stop and the status it leaves, for
the awkward cases too: a call that is slow, one that answers exactly at the
deadline, one that only stops when it returns, a server that accepts but
answers late or never accepts at all. These stand in for real dependencies
without mocks: real threads, real sockets, real time (or a `ManualClock` when
an hour-long limit must cost nothing). Each works on asyncio and trio.
`durable.testing` re-exports them.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel

from . import _validate
from .budget import Budget
from .errors import ConfigurationError

__all__ = [
    "AnswersAtDeadline",
    "ManualClock",
    "SlowCall",
    "SlowHTTPServer",
    "UnacceptingServer",
    "UninterruptibleCall",
]


class ManualClock:
    """A monotonic clock that moves only when told: ``Budget(clock=ManualClock())``.

    Thread-safe. Time never goes back. `SlowCall` and `AnswersAtDeadline`
    given this clock "take" time by advancing it instead of sleeping.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by `seconds`; returns the new reading."""
        step = _validate.duration(seconds, "ManualClock.advance(seconds)")
        with self._lock:
            self._now += step
            return self._now

    def set(self, instant: float) -> None:
        """Move to `instant`; refuses to go back (a monotonic clock never does)."""
        with self._lock:
            if instant < self._now:
                raise ConfigurationError(
                    f"ManualClock.set({instant!r}) would move time back from {self._now!r}")
            self._now = float(instant)

    def __repr__(self) -> str:
        return f"<ManualClock {self._now!r}>"


def _budget(budget: Budget | None) -> Budget:
    return Budget.current() if budget is None else budget


def _manual(budget: Budget, clock: ManualClock | None) -> ManualClock | None:
    if clock is not None and budget.clock is not clock:
        raise ConfigurationError(
            "this dependency was given a ManualClock but the budget reads another clock: "
            "create the budget with Budget(..., clock=<the same ManualClock>)")
    return clock


class SlowCall:
    """A call that takes `delay` seconds, then returns `result`.

    It honours its budget (argument, else `Budget.current()`): it refuses to
    start when no time is left, and is cut at the deadline with the budget's
    own error (`BudgetExhausted`, or `PhaseTimedOut` inside a phase whose
    limit binds). It honours the host's cancellation too. With `clock` (a
    `ManualClock`, the budget's), it advances the clock instead of sleeping.
    Counters: `calls`, `completed`, `cut` (by the budget), `cancelled`.
    """

    def __init__(self, delay: float, result: Any = None, *,
                 clock: ManualClock | None = None) -> None:
        self.delay = _validate.duration(delay, "SlowCall(delay=...)")
        self.result = result
        self.clock = clock
        self.calls = 0
        self.completed = 0
        self.cut = 0
        self.cancelled = 0

    async def __call__(self, budget: Budget | None = None) -> Any:
        budget = _budget(budget)
        manual = _manual(budget, self.clock)
        self.calls += 1
        budget.check()
        try:
            if manual is not None:
                await anyio.lowlevel.checkpoint()
                left = budget.remaining()
                if self.delay >= left:
                    manual.advance(left)
                    budget.check()  # at the deadline: raises the budget's error
                manual.advance(self.delay)
            else:
                with budget.fail_after():
                    await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        except TimeoutError:
            self.cut += 1
            raise
        self.completed += 1
        return self.result


class AnswersAtDeadline:
    """A call that answers exactly when its budget's deadline arrives.

    With `clock` (a `ManualClock`) the clock is set to the deadline itself,
    so the answer lands on the boundary to the nanosecond. In real time it
    waits, shielded from cancellation, until the deadline has passed, so it
    answers at (never before) the deadline. Either way a caller applying
    durable's rule refuses it: a result at the deadline is too late.
    Needs a bounded budget. Counter: `answered`.
    """

    def __init__(self, result: Any = None, *, clock: ManualClock | None = None) -> None:
        self.result = result
        self.clock = clock
        self.answered = 0

    async def __call__(self, budget: Budget | None = None) -> Any:
        budget = _budget(budget)
        manual = _manual(budget, self.clock)
        deadline = budget.deadline
        if deadline is None:
            raise ConfigurationError(
                "AnswersAtDeadline needs a budget with a deadline (Budget(timeout=...))")
        if manual is not None:
            await anyio.lowlevel.checkpoint()
            manual.set(max(manual(), deadline))
        else:
            with anyio.CancelScope(shield=True):
                # sleep() may wake a hair early on another clock: wait until
                # the budget's own clock says the deadline has come
                while budget.clock() < deadline:  # noqa: ASYNC110
                    await anyio.sleep(max(deadline - budget.clock(), 0.0005))
        self.answered += 1
        return self.result


class UninterruptibleCall:
    """A call that only stops when it returns: cancellation waits for it.

    It runs in a worker thread, shielded, like a blocking client call that
    cannot be interrupted; a cancellation of the caller (the host's, or a
    phase's deadline) is delivered only once it has returned, and a budget
    that was cancelled or ran out meanwhile is then reported by its error
    (`budget.check()`). It returns after `delay` seconds, or, with
    ``delay=None``, when `release()` is called (from any thread): the test
    then decides exactly when. `effect`, if given, runs in the thread just
    before returning: the external effect that happened even if the caller
    gave up. Counters: `calls`, `returned`. ``await wait_started()`` returns
    once a call is in its thread's wait.
    """

    def __init__(self, delay: float | None = None, result: Any = None, *,
                 effect: Callable[[], Any] | None = None) -> None:
        self.delay = _validate.optional_duration(delay, "UninterruptibleCall(delay=...)")
        self.result = result
        self.effect = effect
        self.calls = 0
        self.returned = 0
        self._gate = threading.Event()
        self._in_thread = threading.Event()

    def release(self) -> None:
        """Let a call waiting with ``delay=None`` return (thread-safe)."""
        self._gate.set()

    async def wait_started(self, within: float = 10.0) -> None:
        """Return once a call is running in its thread (raises TimeoutError after `within`)."""
        with anyio.fail_after(within):
            await anyio.to_thread.run_sync(self._in_thread.wait, abandon_on_cancel=True)

    def _work(self) -> Any:
        self._in_thread.set()
        self._gate.wait(self.delay)
        if self.effect is not None:
            self.effect()
        return self.result

    async def __call__(self, budget: Budget | None = None) -> Any:
        budget = _budget(budget)
        self.calls += 1
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(self._work)
        self.returned += 1
        await anyio.lowlevel.checkpoint()  # a cancellation that came meanwhile lands here
        budget.check()
        return result


# ---------------------------------------------------------------- HTTP on loopback


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _SlowServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        owner = self.server.owner
        owner._count("requests")
        if owner._closing.wait(owner.delay):
            return  # closing: drop the connection
        chunks = max(1, owner.chunks)
        body = owner.body
        try:
            self.send_response(owner.status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body) * chunks))
            self.end_headers()
            self.wfile.flush()
            for n in range(chunks):
                if n and owner._closing.wait(owner.chunk_delay):
                    return
                self.wfile.write(body)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            owner._count("abandoned")  # the client stopped waiting
            return
        owner._count("served")

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read counters, not access logs."""


class _SlowServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: SlowHTTPServer


class SlowHTTPServer:
    """A real HTTP/1.1 server on 127.0.0.1 whose answers take as long as you say.

        with SlowHTTPServer(delay=2.0) as server:
            timeout = budget.httpx_timeout(connect=1, read=0.5)
            httpx.get(server.url, timeout=timeout)      # ReadTimeout after 0.5 s

    Every request waits `delay` seconds before the status line, then sends
    `chunks` copies of `body`, `chunk_delay` seconds apart (a server that
    drips: each read is quick, the whole answer slow). The attributes may
    be changed between requests. Counters: `requests`, `served`,
    `abandoned` (the client hung up first). Closing wakes delayed handlers.
    """

    def __init__(self, delay: float = 0.0, *, body: bytes = b"ok", status: int = 200,
                 chunks: int = 1, chunk_delay: float = 0.0) -> None:
        self.delay = _validate.duration(delay, "SlowHTTPServer(delay=...)")
        self.chunk_delay = _validate.duration(chunk_delay, "SlowHTTPServer(chunk_delay=...)")
        self.body = body
        self.status = status
        self.chunks = chunks
        self.requests = 0
        self.served = 0
        self.abandoned = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: _SlowServer | None = None
        self._thread: threading.Thread | None = None

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    @property
    def url(self) -> str:
        if self._server is None:
            raise ConfigurationError("SlowHTTPServer is not running: use it as `with ... as s:`")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> SlowHTTPServer:
        server = _SlowServer(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="durable-slow-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> SlowHTTPServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class UnacceptingServer:
    """A loopback listener that never accepts: connecting to it hangs.

    Its accept queue is filled at start, so the kernel leaves further
    connection attempts unanswered and a client waits for its *connect*
    limit (Linux drops the SYN; other systems may refuse at once instead,
    which `connect_hangs` reports). `url` is an http:// URL to it.
    """

    def __init__(self) -> None:
        self._listener: socket.socket | None = None
        self._fillers: list[socket.socket] = []
        self.connect_hangs = False

    @property
    def url(self) -> str:
        if self._listener is None:
            raise ConfigurationError("UnacceptingServer is not running: use it as `with ... as s:`")
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}/"

    def start(self) -> UnacceptingServer:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        self._listener = listener
        address = listener.getsockname()
        for _ in range(16):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.settimeout(0.1)
            try:
                filler.connect(address)
            except TimeoutError:
                filler.close()
                self.connect_hangs = True
                break
            except OSError:
                filler.close()
                break
            self._fillers.append(filler)
        return self

    def close(self) -> None:
        for sock in self._fillers:
            sock.close()
        self._fillers.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def __enter__(self) -> UnacceptingServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
