"""Child processes bounded by a budget, stopped and *confirmed* stopped.

    result = await durable.subprocess.run(["pg_dump", "-f", path, dsn], budget=budget, grace=10)

A signal sent is not a stop confirmed. When the budget runs out, the budget is
cancelled, or the awaiting task is cancelled, `run()`:

1. sends SIGTERM to every process the child started, whatever process group
   or session it moved to (job control, ``setsid``, a double fork);
2. waits up to `grace` seconds for them to end (shielded: nothing shortens
   the grace period);
3. sends SIGKILL to whatever is left (again and again, until nothing new
   appears: a process forking while it is killed cannot outrun the stop);
4. confirms the stop: no live process remains, within `confirm_timeout`
   seconds (processes that are dead but not yet reaped do not count).

On Linux "every process the child started" is exact: the child is started
by a small launcher (`durable/_subreaper.py`) that is a *child subreaper*, so
every orphaned descendant is re-parented to it and stays findable through
/proc as a descendant of the launcher; each one is signalled through a pidfd
opened after checking its start time, so a reused pid never gets a signal.
Elsewhere (macOS, BSD) or when the launcher cannot be used, what is stopped
and confirmed is the child's process group, and the receipt says so
(``covers="process_group"``).

The outcome is a `StopReceipt`; when the stop could not be confirmed (a
process stuck in uninterruptible I/O, one we may not signal, the launcher
killed from outside) it says ``confirmed=False`` and names what may still
run: the stop is unknown, never "stopped".

Runs on asyncio and trio (anyio), POSIX only. The child's pipes are read
without threads; output is kept in memory (bytes), like `subprocess.run`.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import anyio

from . import _validate
from ._log import get_logger
from ._processes import program_name
from ._processes import start as start_child
from .budget import Budget
from .errors import (
    BudgetCancelled,
    BudgetExhausted,
    CapabilityUnsupported,
    ConfigurationError,
    DurableError,
)
from .receipts import StopReceipt

__all__ = [
    "CompletedProcess",
    "StopReceipt",
    "SubprocessCancelled",
    "SubprocessFailed",
    "SubprocessTimedOut",
    "run",
]

_log = get_logger("durable.subprocess")

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

_CANCEL_POLL = 0.1  # how often a running child looks at its budget's cooperative cancel
_FORBIDDEN = {
    "start_new_session": "run() always starts the child in a session of its own",
    "process_group": "run() always starts the child in a session (and group) of its own",
    "preexec_fn": "it could move the child out of the group run() stops",
    "text": "run() reads the pipes as bytes: decode result.stdout yourself",
    "universal_newlines": "run() reads the pipes as bytes: decode result.stdout yourself",
    "encoding": "run() reads the pipes as bytes: decode result.stdout yourself",
    "errors": "run() reads the pipes as bytes: decode result.stdout yourself",
}


@dataclass(frozen=True)
class CompletedProcess:
    """A child that ended on its own, within its budget.

    `stdout`/`stderr` are None when not captured (passed as something other
    than PIPE). `elapsed` is the seconds from start to exit.
    """

    argv: tuple[str, ...]
    pid: int
    returncode: int
    stdout: bytes | None
    stderr: bytes | None
    elapsed: float


class SubprocessFailed(DurableError, subprocess.CalledProcessError):
    """`run(..., check=True)`: the child exited with a non-zero code.

    Also a `subprocess.CalledProcessError` (`returncode`, `cmd`, `output`,
    `stderr`). Its message names the program only: arguments often carry
    credentials, and messages end up in logs and recorded failures.
    """

    def __init__(self, returncode: int, cmd: Any, output: bytes | None = None,
                 stderr: bytes | None = None, *, elapsed: float | None = None) -> None:
        super().__init__(returncode, cmd, output, stderr)
        self.elapsed = elapsed

    def __str__(self) -> str:
        return f"{program_name(self.cmd)!r} exited with code {self.returncode}"


class SubprocessTimedOut(BudgetExhausted):
    """The budget ran out while the child ran; it was stopped (see `receipt`).

    Carries the `BudgetExhausted` fields (`budget`, `phase`, `late_by`;
    `timeout_kind` is ``"phase"`` when a phase's limit bound), the
    `StopReceipt` and the output read before the stop.
    """

    def __init__(self, message: str, *, receipt: StopReceipt, base: BudgetExhausted,
                 stdout: bytes | None = None, stderr: bytes | None = None) -> None:
        super().__init__(message, budget=base.budget, phase=base.phase,
                         deadline=base.deadline, late_by=base.late_by)
        self.timeout_kind = base.timeout_kind
        self.limit: float | None = getattr(base, "limit", None)
        self.receipt = receipt
        self.stdout = stdout
        self.stderr = stderr


class SubprocessCancelled(BudgetCancelled):
    """The budget was cancelled while the child ran; it was stopped (see `receipt`)."""

    def __init__(self, message: str, *, receipt: StopReceipt, base: BudgetCancelled,
                 stdout: bytes | None = None, stderr: bytes | None = None) -> None:
        super().__init__(message, budget=base.budget, reason=base.reason, phase=base.phase)
        self.receipt = receipt
        self.stdout = stdout
        self.stderr = stderr


# ---------------------------------------------------------------- pipes


async def _drain(stream: IO[bytes], chunks: list[bytes]) -> None:
    fd = stream.fileno()
    os.set_blocking(fd, False)
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not data:
            return
        chunks.append(data)


def _drain_now(stream: IO[bytes] | None, chunks: list[bytes]) -> None:
    """Whatever is already in the pipe, without waiting (after a stop)."""
    if stream is None or stream.closed:
        return
    fd = stream.fileno()
    os.set_blocking(fd, False)
    while True:
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            return
        if not data:
            return
        chunks.append(data)


async def _feed(stream: IO[bytes], data: bytes) -> None:
    fd = stream.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                await anyio.wait_writable(fd)
                continue
            except BrokenPipeError:
                return  # the child stopped reading its input: not an error, as in subprocess
            view = view[written:]
    finally:
        stream.close()


# ---------------------------------------------------------------- run


def _check_options(popen_kwargs: dict[str, Any], confirm_timeout: float,
                   input: bytes | None) -> None:
    for key, why in _FORBIDDEN.items():
        if key in popen_kwargs:
            raise ConfigurationError(f"durable.subprocess.run() does not take {key}=: {why}")
    if input is not None:
        if not isinstance(input, bytes | bytearray | memoryview):
            raise ConfigurationError(
                f"run(input=...) must be bytes, not {type(input).__name__} (encode text first)")
        if "stdin" in popen_kwargs:
            raise ConfigurationError("run() takes input= or stdin=, not both")
    if confirm_timeout <= 0:
        raise ConfigurationError(
            f"run(confirm_timeout=...) must be > 0 seconds, not {confirm_timeout!r}: "
            "a stop is confirmed by looking, and looking takes time")


async def run(
    argv: Sequence[str | os.PathLike[str]] | str,
    *,
    budget: Budget | None = None,
    grace: float = 5.0,
    check: bool = False,
    input: bytes | None = None,
    on_stop: Callable[[StopReceipt], object] | None = None,
    confirm_timeout: float = 5.0,
    **popen_kwargs: Any,
) -> CompletedProcess:
    """Run `argv` to completion within `budget` (default: `Budget.current()`).

    Returns a `CompletedProcess` when the child exits on its own strictly
    before the deadline (raises `SubprocessFailed` for a non-zero exit when
    `check`). Otherwise the child's group is stopped (module docstring) and:

    * the budget ran out (or the child ended at or after the deadline):
      `SubprocessTimedOut`, a `BudgetExhausted` carrying `.receipt`;
    * the budget was cancelled (`Budget.cancel()`, noticed within 0.1 s):
      `SubprocessCancelled`, a `BudgetCancelled` carrying `.receipt`;
    * the awaiting task was cancelled: the host's cancellation is re-raised
      once the stop is confirmed (or given up on); the receipt reaches you
      through `on_stop` and `budget.stop_receipts`.

    Every stop calls `on_stop(receipt)` (exceptions from it are logged and
    ignored: a stop must end with its own outcome) and records the receipt on
    the budget. A budget already spent or cancelled refuses to start the
    child. stdout and stderr are captured unless given; other keyword
    arguments go to `subprocess.Popen` (`cwd`, `env`, `stdin`, ...).
    """
    if os.name != "posix":
        raise CapabilityUnsupported(
            "durable.subprocess.run needs POSIX process groups (Linux, macOS, BSD)")
    grace = _validate.duration(grace, "run(grace=...)")
    confirm_timeout = _validate.duration(confirm_timeout, "run(confirm_timeout=...)")
    _check_options(popen_kwargs, confirm_timeout, input)
    if budget is None:
        budget = Budget.current()
    elif not isinstance(budget, Budget):
        raise ConfigurationError(
            f"run(budget=...) must be a durable.Budget, not {type(budget).__name__}")
    budget.check()  # no new work once the time is spent or the work cancelled
    popen_kwargs.setdefault("stdout", PIPE)
    popen_kwargs.setdefault("stderr", PIPE)
    if input is not None:
        popen_kwargs["stdin"] = PIPE
    program = program_name(argv)
    started = time.monotonic()
    child = await start_child(argv, popen_kwargs)
    proc = child.proc
    log = _log.bind(program=program, pid=child.pid, budget=budget.name)
    log.info("subprocess_started", remaining=_finite(budget.remaining()))
    out: list[bytes] = []
    err: list[bytes] = []
    cancelled_by_budget = False
    try:
        try:
            with anyio.CancelScope(deadline=budget.host_deadline()) as scope:
                async with anyio.create_task_group() as watchers:

                    async def watch_cancel() -> None:
                        nonlocal cancelled_by_budget
                        # Budget.cancel() may be called from any thread, so it
                        # cannot set an Event of this loop: look now and then.
                        while not budget.cancelled:  # noqa: ASYNC110
                            await anyio.sleep(_CANCEL_POLL)
                        cancelled_by_budget = True
                        scope.cancel()

                    watchers.start_soon(watch_cancel)
                    async with anyio.create_task_group() as io:
                        if proc.stdout is not None:
                            io.start_soon(_drain, proc.stdout, out)
                        if proc.stderr is not None:
                            io.start_soon(_drain, proc.stderr, err)
                        if input is not None and proc.stdin is not None:
                            io.start_soon(_feed, proc.stdin, bytes(input))
                        await child.wait_exit()
                        if child.lost() is not None:
                            io.cancel_scope.cancel()  # its pipes may stay open: stop now
                    watchers.cancel_scope.cancel()
        except BaseException as exc:
            # Not our scope's doing: the host cancelled us (or we failed).
            # Stop the child before letting the exception go.
            if isinstance(exc, Exception):
                reason = "error"
            else:
                reason = "timed_out" if budget.expired else "cancelled"
            with anyio.CancelScope(shield=True):
                receipt = await child.stop(reason, grace, confirm_timeout)
            _stopped(log, budget, receipt, on_stop)
            raise
        lost = child.lost()
        if lost is not None:
            with anyio.CancelScope(shield=True):
                receipt = await child.stop("error", grace, confirm_timeout)
            _stopped(log, budget, receipt, on_stop)
            raise DurableError(f"{program!r} could not be supervised to its end: {lost}; "
                               f"{receipt.describe()}")
        if scope.cancelled_caught or budget.expired:
            reason = "budget_cancelled" if cancelled_by_budget else "timed_out"
            decided = budget.clock()  # how late, as of the decision, not after the grace
            with anyio.CancelScope(shield=True):
                receipt = await child.stop(reason, grace, confirm_timeout)
            _stopped(log, budget, receipt, on_stop)
            _drain_now(proc.stdout, out)
            _drain_now(proc.stderr, err)
            raise _stop_error(program, budget, receipt, cancelled_by_budget, decided,
                              _joined(proc.stdout, out), _joined(proc.stderr, err))
        returncode = child.returncode()
    finally:
        with anyio.CancelScope(shield=True):
            await child.close()
    elapsed = time.monotonic() - started
    log.info("subprocess_exited", returncode=returncode, elapsed=round(elapsed, 6))
    stdout, stderr = _joined(proc.stdout, out), _joined(proc.stderr, err)
    argv_tuple = _argv_tuple(argv)
    if check and returncode != 0:
        raise SubprocessFailed(returncode, argv_tuple, stdout, stderr, elapsed=elapsed)
    return CompletedProcess(argv=argv_tuple, pid=child.pid, returncode=returncode,
                            stdout=stdout, stderr=stderr, elapsed=elapsed)


def _stop_error(program: str, budget: Budget, receipt: StopReceipt, by_cancel: bool,
                decided: float, stdout: bytes | None,
                stderr: bytes | None) -> BudgetExhausted | BudgetCancelled:
    base = budget.stop_error(decided, cancelled=by_cancel)
    if isinstance(base, BudgetCancelled):
        return SubprocessCancelled(f"{program!r} was stopped: {base}; {receipt.describe()}",
                                   receipt=receipt, base=base, stdout=stdout, stderr=stderr)
    return SubprocessTimedOut(f"{program!r} was stopped: {base}; {receipt.describe()}",
                              receipt=receipt, base=base, stdout=stdout, stderr=stderr)


def _stopped(log: Any, budget: Budget, receipt: StopReceipt,
             on_stop: Callable[[StopReceipt], object] | None) -> None:
    budget.record_stop(receipt)
    # an unconfirmed stop is an operator's problem: the group may still run
    emit = log.info if receipt.confirmed else log.error
    emit("subprocess_stopped", stop_kind=receipt.reason, signals=list(receipt.signals),
         confirmed=receipt.confirmed, covers=receipt.covers, escaped=list(receipt.escaped),
         exit_code=receipt.exit_code, elapsed=round(receipt.elapsed, 6))
    if on_stop is not None:
        try:
            on_stop(receipt)
        except Exception as exc:
            log.error("subprocess_on_stop_failed", error_type=type(exc).__name__)


def _joined(stream: IO[bytes] | None, chunks: list[bytes]) -> bytes | None:
    return None if stream is None else b"".join(chunks)


def _argv_tuple(argv: Sequence[str | os.PathLike[str]] | str) -> tuple[str, ...]:
    if isinstance(argv, str | os.PathLike):
        return (os.fspath(argv),)
    return tuple(os.fspath(a) for a in argv)


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 6)
