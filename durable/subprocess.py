"""Child processes bounded by a budget, stopped and *confirmed* stopped.

    result = await durable.subprocess.run(["pg_dump", "-f", path, dsn], budget=budget, grace=10)

A signal sent is not a stop confirmed. When the budget runs out, the budget is
cancelled, or the awaiting task is cancelled, `run()`:

1. sends SIGTERM to the child's process group (the child runs in a session of
   its own, so its own children are in that group too);
2. waits up to `grace` seconds for the group to empty (shielded: nothing
   shortens the grace period);
3. sends SIGKILL to whatever is left of the group;
4. confirms the stop: no live process remains in the group (on Linux, read
   from /proc, so members that are already dead but not yet reaped by
   their parent do not count as running), within `confirm_timeout` seconds;
   then reaps the child.

The child is reaped last, so its pid, which is also the group's id, cannot be
handed to another process while signals are being sent (a parent's
unreaped child keeps its pid). The outcome is a `StopReceipt`; when the group
could not be confirmed empty (a process stuck in uninterruptible I/O, a
process that left the group is not ours to judge) it says
``confirmed=False``: the stop is unknown, never "stopped".

Runs on asyncio and trio (anyio), POSIX only. The child's pipes are read
without threads; output is kept in memory (bytes), like `subprocess.run`.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

import anyio

from ._log import get_logger
from .budget import Budget, _seconds
from .errors import (
    BudgetCancelled,
    BudgetExhausted,
    CapabilityUnsupported,
    ConfigurationError,
    DurableError,
)

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

_LINUX_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
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
class StopReceipt:
    """How a child process was stopped, and whether the stop is confirmed.

    `pid` the child, `pgid` its process group (equal to `pid`), `signals` the
    signals sent to the group in order (empty when it had already ended),
    `confirmed` True only when no live process remained in the group,
    `exit_code` the child's as `subprocess` reports it (``-9``: killed by
    SIGKILL) or None when it could not be reaped, `elapsed` the seconds from
    the decision to stop to confirmation (or to giving up), `reason` why it
    was stopped: ``"timed_out"`` (the budget ran out), ``"budget_cancelled"``
    (`Budget.cancel()`), ``"cancelled"`` (the awaiting task was cancelled) or
    ``"error"`` (run() itself failed while supervising).
    """

    pid: int
    pgid: int
    signals: tuple[str, ...]
    confirmed: bool
    exit_code: int | None
    elapsed: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, for history events and reports."""
        data = asdict(self)
        data["signals"] = list(self.signals)
        return data

    def describe(self) -> str:
        """One line for operators."""
        sent = ", ".join(self.signals) if self.signals else "no signal (it had ended)"
        if self.confirmed:
            verdict = f"stop confirmed (exit code {self.exit_code})"
        else:
            verdict = "stop NOT confirmed: processes of the group may still be running"
        return f"pid {self.pid} ({self.reason}): sent {sent}; {verdict}"


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
        return f"{_program(self.cmd)!r} exited with code {self.returncode}"


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


def _program(argv: Any) -> str:
    """The program's name, the only part of a command line we log."""
    if isinstance(argv, str | bytes | os.PathLike):
        first: Any = argv
    else:
        first = next(iter(argv), "?")
    text = os.fsdecode(first) if isinstance(first, bytes | os.PathLike) else str(first)
    return os.path.basename(text.split()[0]) if text.strip() else "?"


# ---------------------------------------------------------------- the process group


def _stat(pid: int | str) -> list[bytes] | None:
    """Linux: the fields of /proc/<pid>/stat after the command name (state,
    ppid, pgrp, ...), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()


def _running(fields: list[bytes] | None) -> bool:
    return fields is not None and fields[0] not in (b"Z", b"X")


def _live_members(pgid: int) -> bool:
    """Linux: is any process of the group alive (not a zombie waiting for its parent)?

    There is no kernel call listing a group's members, so this reads every
    process's stat: milliseconds on a busy host, hence run on a thread.
    """
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None and _running(fields) and int(fields[2]) == pgid:
                return True
    return False


class _Child:
    """One child process and its group, watched without reaping until the end."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # start_new_session: the child leads its own group
        self.pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(proc.pid)
            except OSError:
                self.pidfd = None  # an old kernel or a sandbox: poll instead

    def exited(self) -> bool:
        """Has the child ended? Looks without reaping it (WNOWAIT)."""
        if self.proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # someone else reaped it (a SIGCHLD handler reaping every child)
            return True
        return info is not None

    async def wait_exit(self) -> None:
        if self.pidfd is not None:
            await anyio.wait_readable(self.pidfd)
            return
        delay = 0.005
        while not self.exited():
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def group_alive(self) -> bool:
        """Does any live process remain in the child's group?"""
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a member we may not signal is still a member
        if _LINUX_PROC:
            if _running(_stat(self.pid)):
                return True  # the leader itself: no need to look further
            return await anyio.to_thread.run_sync(_live_members, self.pgid)
        # Elsewhere a zombie counts as a member: reap our own once it ended
        # (its group id stays taken while any other member lives), look again.
        if self.exited():
            self.reap()
            try:
                os.killpg(self.pgid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        return True

    def signal_group(self, signum: signal.Signals) -> bool:
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:
            _log.warning("subprocess_signal_refused", pid=self.pid, signal=signum.name)
            return False
        return True

    async def wait_group_gone(self, within: float) -> bool:
        end = time.monotonic() + within
        delay = 0.005
        while await self.group_alive():
            left = end - time.monotonic()
            if left <= 0:
                return False
            await anyio.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
        return True

    def reap(self) -> int | None:
        """Collect the exit status of an ended child (None if it still runs)."""
        if self.proc.returncode is None and not self.exited():
            return None
        return self.proc.wait()

    async def stop(self, reason: str, grace: float, confirm_timeout: float) -> StopReceipt:
        """SIGTERM, grace, SIGKILL, confirm; call shielded."""
        started = time.monotonic()
        sent: list[str] = []
        if await self.group_alive():
            if self.signal_group(signal.SIGTERM):
                sent.append("SIGTERM")
            if not await self.wait_group_gone(grace):
                if self.signal_group(signal.SIGKILL):
                    sent.append("SIGKILL")
                await self.wait_group_gone(confirm_timeout)
        confirmed = not await self.group_alive()
        exit_code = self.reap()
        return StopReceipt(
            pid=self.pid, pgid=self.pgid, signals=tuple(sent), confirmed=confirmed,
            exit_code=exit_code, elapsed=time.monotonic() - started, reason=reason,
        )

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


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
    grace = _seconds(grace, "run(grace=...)")
    confirm_timeout = _seconds(confirm_timeout, "run(confirm_timeout=...)")
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
    program = _program(argv)
    started = time.monotonic()
    # Popen on the loop's thread, as asyncio does: it only forks and execs,
    # and doing it on a worker thread would let a cancellation arrive after
    # the child started but before anyone supervises it.
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # noqa: ASYNC220
        argv, start_new_session=True, **popen_kwargs)
    child = _Child(proc)
    log = _log.bind(program=program, pid=child.pid, budget=budget.name)
    log.info("subprocess_started", remaining=_finite(budget.remaining()))
    out: list[bytes] = []
    err: list[bytes] = []
    cancelled_by_budget = False
    try:
        try:
            with anyio.CancelScope(deadline=budget._host_deadline()) as scope:
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
        returncode = child.reap()
        assert returncode is not None  # wait_exit() returned: it has ended
    finally:
        child.close()
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
    if by_cancel:
        cancellation = budget._first_cancellation()
        assert cancellation is not None
        base_c = budget._cancelled_error(cancellation)
        return SubprocessCancelled(f"{program!r} was stopped: {base_c}; {receipt.describe()}",
                                   receipt=receipt, base=base_c, stdout=stdout, stderr=stderr)
    base = budget._exhausted_error(decided)
    return SubprocessTimedOut(f"{program!r} was stopped: {base}; {receipt.describe()}",
                              receipt=receipt, base=base, stdout=stdout, stderr=stderr)


def _stopped(log: Any, budget: Budget, receipt: StopReceipt,
             on_stop: Callable[[StopReceipt], object] | None) -> None:
    budget.record_stop(receipt)
    # an unconfirmed stop is an operator's problem: the group may still run
    emit = log.info if receipt.confirmed else log.error
    emit("subprocess_stopped", stop_kind=receipt.reason, signals=list(receipt.signals),
         confirmed=receipt.confirmed, exit_code=receipt.exit_code,
         elapsed=round(receipt.elapsed, 6))
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
