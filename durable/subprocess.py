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
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

import anyio

from . import _validate
from ._log import get_logger
from .budget import Budget
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
_PYTHON = sys.executable
_LAUNCHER = Path(__file__).with_name("_subreaper.py")
# The subreaper launcher needs Linux, /proc, an interpreter to run it and its
# file; run() stops using it for good if the kernel refuses it a subreaper.
_use_launcher = (_LINUX_PROC and bool(_PYTHON) and os.path.isfile(_PYTHON)
                 and _LAUNCHER.is_file())
_LAUNCH_TIMEOUT = 30.0  # an interpreter starting on a loaded host; beyond, it is broken
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
    signals sent in order (empty when nothing was left running), `confirmed`
    True only when no live process remained of what `covers` names,
    `exit_code` the child's as `subprocess` reports it (``-9``: killed by
    SIGKILL) or None when it could not be reaped, `elapsed` the seconds from
    the decision to stop to confirmation (or to giving up), `reason` why it
    was stopped: ``"timed_out"`` (the budget ran out), ``"budget_cancelled"``
    (`Budget.cancel()`), ``"cancelled"`` (the awaiting task was cancelled) or
    ``"error"`` (run() itself failed while supervising).

    `covers` is what the confirmation looked at: ``"descendants"`` (Linux:
    the child and every process it started, whatever group or session they
    moved to) or ``"process_group"`` (elsewhere: the child's group only; a
    process that left the group is not seen). `escaped` names what may still
    run when the stop is not confirmed (``"sleep (pid 4242)"``, or why the
    processes could not be tracked); empty when confirmed.
    """

    pid: int
    pgid: int
    signals: tuple[str, ...]
    confirmed: bool
    exit_code: int | None
    elapsed: float
    reason: str
    covers: str
    escaped: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, for history events and reports."""
        data = asdict(self)
        data["signals"] = list(self.signals)
        data["escaped"] = list(self.escaped)
        return data

    def describe(self) -> str:
        """One line for operators."""
        sent = ", ".join(self.signals) if self.signals else "no signal (nothing was left running)"
        if self.confirmed:
            verdict = f"stop confirmed (exit code {self.exit_code})"
        else:
            left = "; ".join(self.escaped) or "unknown"
            verdict = f"stop NOT confirmed: may still be running: {left}"
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


# ---------------------------------------------------------------- what runs, from /proc


class _Proc(NamedTuple):
    """One process as /proc/<pid>/stat showed it; (pid, start) is its identity."""

    pid: int
    ppid: int
    state: bytes
    session: int
    start: int  # clock ticks after boot: a reused pid has another
    name: str

    @property
    def running(self) -> bool:
        return self.state not in (b"Z", b"X")

    def label(self) -> str:
        return f"{self.name} (pid {self.pid})"


def _proc(pid: int | str) -> _Proc | None:
    """Linux: /proc/<pid>/stat read, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    close = stat.rindex(b")")
    fields = stat[close + 2:].split()
    name = stat[stat.index(b"(") + 1:close].decode(errors="replace")
    return _Proc(int(pid), int(fields[1]), fields[0], int(fields[3]), int(fields[19]), name)


def _live_members(pgid: int) -> bool:
    """Linux: is any process of the group alive (not a zombie waiting for its parent)?"""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
                return True
    return False


def _live_descendants(root: int | None, session: int) -> list[_Proc]:
    """Linux: the live descendants of `root`, or (root None) the live members of `session`.

    There is no kernel call listing a process's descendants, so this reads
    every process's stat: milliseconds on a busy host, hence run on a thread.
    """
    table: dict[int, _Proc] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            proc = _proc(entry.name)
            if proc is not None:
                table[proc.pid] = proc
    if root is None:
        return [p for p in table.values() if p.session == session and p.running]
    children: dict[int, list[_Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[_Proc] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child.pid)
    return [p for p in found if p.running]


def _signal_process(proc: _Proc, signum: signal.Signals) -> bool:
    """Signal `proc` if it is still that process (same pid *and* start time).

    The pidfd is opened before the start time is checked, so the process it
    names cannot be replaced in between: a pid reused since the scan never
    gets the signal. Kernels without pidfds (before 5.3) leave a window of
    microseconds between check and kill.
    """
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return False
    except OSError:
        pidfd = None  # ENOSYS or a sandbox: check, then kill by pid
    try:
        now = _proc(proc.pid)
        if now is None or now.start != proc.start:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signum)
        else:
            os.kill(proc.pid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        _log.warning("subprocess_signal_refused", pid=proc.pid, signal=signum.name)
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


# ---------------------------------------------------------------- supervisors


class _Supervisor(ABC):
    """A started child and everything it starts, watched until the end.

    Two kinds: `_Tree` (Linux, through the subreaper launcher: every
    descendant) and `_Group` (elsewhere: the child's process group).
    """

    covers: str
    proc: subprocess.Popen[bytes]  # whose pipes are the child's stdin/stdout/stderr
    pid: int
    pgid: int

    @abstractmethod
    async def wait_exit(self) -> None:
        """Wait for the child to end."""

    def lost(self) -> str | None:
        """Why the child can no longer be supervised (None while it can)."""
        return None

    @abstractmethod
    def returncode(self) -> int:
        """The ended child's return code, as subprocess gives it (after wait_exit)."""

    @abstractmethod
    async def stop(self, reason: str, grace: float, confirm_timeout: float) -> StopReceipt:
        """SIGTERM, grace, SIGKILL, confirm; call shielded."""

    @abstractmethod
    async def close(self) -> None:
        """Release what supervising took (call shielded, once, at the end)."""

    def close_streams(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


async def _backoff(end: float, delay: float) -> float | None:
    """Sleep a little (doubling up to 50 ms) before looking again; None once past `end`."""
    left = end - time.monotonic()
    if left <= 0:
        return None
    await anyio.sleep(min(delay, left))
    return min(delay * 2, 0.05)


class _Tree(_Supervisor):
    """Linux: the child started by the subreaper launcher; every descendant is tracked.

    The launcher (`durable/_subreaper.py`) is our direct child and outlives
    the child: orphans anywhere below it are re-parented to it, so the live
    descendants of the launcher are exactly what the child started and is
    still running. We find and signal them; the launcher adopts, reaps and
    reports the child's exit status on a pipe. Closing our end of its control
    pipe lets it go.
    """

    covers = "descendants"

    def __init__(self, proc: subprocess.Popen[bytes], status_fd: int, control_fd: int) -> None:
        self.proc = proc
        self.pid = self.pgid = 0
        self._status_fd = status_fd
        self._control_fd: int | None = control_fd
        self._pending = b""
        self._eof = False
        self._returncode: int | None = None
        os.set_blocking(status_fd, False)

    @classmethod
    async def launch(cls, argv: Sequence[str | os.PathLike[str]] | str,
                     popen_kwargs: dict[str, Any]) -> _Tree | None:
        """Start the launcher and, through it, the child. None when this kernel
        refuses a subreaper (the caller falls back to a process group)."""
        executable, args = _exec_args(argv, popen_kwargs.pop("shell", False),
                                      popen_kwargs.pop("executable", None))
        restore = popen_kwargs.get("restore_signals", True)
        status_r, status_w = os.pipe()
        control_r, control_w = os.pipe()
        ours = (status_w, control_r)
        if popen_kwargs.get("close_fds", True):
            popen_kwargs["pass_fds"] = (*popen_kwargs.get("pass_fds", ()), *ours)
        else:  # everything inheritable passes already: make our two so
            for fd in ours:
                os.set_inheritable(fd, True)
        command = [_PYTHON, "-I", "-S", str(_LAUNCHER), str(status_w), str(control_r),
                   "1" if restore else "0", executable, *args]
        try:
            proc: subprocess.Popen[bytes] = subprocess.Popen(  # noqa: ASYNC220
                command, start_new_session=True, **popen_kwargs)
        except BaseException:
            for fd in (status_r, control_w):
                os.close(fd)
            raise
        finally:
            for fd in ours:
                os.close(fd)
        tree = cls(proc, status_r, control_w)
        with anyio.CancelScope(shield=True):
            # A few tens of ms (an interpreter starting): shielded, so that a
            # cancellation cannot leave a started child unsupervised.
            with anyio.move_on_after(_LAUNCH_TIMEOUT):
                message = await tree._message()
            if message is not None and message.startswith("S "):
                tree.pid = tree.pgid = int(message[2:])
                return tree
            await tree._abandon()
            os.close(status_r)
            tree.close_streams()
        if message is not None and message.startswith("E exec "):
            errno = int(message[len("E exec "):])
            raise OSError(errno, os.strerror(errno), executable)
        if message is not None and message.startswith("E subreaper "):
            return None
        raise DurableError(
            f"durable.subprocess.run could not start {_program(argv)!r}: its launcher "
            f"({_PYTHON} {_LAUNCHER}) did not report within {_LAUNCH_TIMEOUT:g} s "
            f"(it said {message!r})")

    async def _message(self) -> str | None:
        """The launcher's next line, or None once it has closed its end."""
        while b"\n" not in self._pending:
            if self._eof:
                return None
            try:
                data = os.read(self._status_fd, 4096)
            except BlockingIOError:
                await anyio.wait_readable(self._status_fd)
                continue
            if not data:
                self._eof = True
            self._pending += data
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode("ascii")

    def _note(self, message: str) -> None:
        if message.startswith("X "):
            self._returncode = os.waitstatus_to_exitcode(int(message[2:]))

    async def wait_exit(self) -> None:
        while self._returncode is None:
            message = await self._message()
            if message is None:
                return  # the launcher died: lost() says so
            self._note(message)

    def lost(self) -> str | None:
        if self._returncode is None and self._eof and self._control_fd is not None:
            return self._lost()
        return None

    def returncode(self) -> int:
        assert self._returncode is not None  # wait_exit() returned
        return self._returncode

    def _lost(self) -> str:
        return (f"the launcher (pid {self.proc.pid}) supervising pid {self.pid} ended "
                "before it was let go (killed from outside?): processes that left "
                f"session {self.pid} can no longer be found")

    def _launcher_gone(self) -> bool:
        return self._eof or self.proc.poll() is not None

    async def _live(self) -> list[_Proc]:
        """The live descendants; once the launcher is gone, the child's session.

        The launcher is looked at *after* the scan: a launcher dying hands
        its children to init and becomes a zombie under one kernel lock, so
        a scan that saw the hand-over is always followed by a poll() that
        sees the death, and the session is scanned instead.
        """
        if not self._launcher_gone():
            live = await anyio.to_thread.run_sync(_live_descendants, self.proc.pid, self.pid)
            if not self._launcher_gone():
                return live
        return await anyio.to_thread.run_sync(_live_descendants, None, self.pid)

    async def _gone(self, within: float, kill: bool) -> tuple[list[_Proc], bool]:
        """Look until nothing is left (seen twice in a row) or `within` passes,
        SIGKILLing what is seen when `kill`: (what is left, whether a signal was sent).

        Twice, because a process whose parent exits and is reaped during a
        scan is re-parented mid-scan and can be missed once, never twice.
        """
        end = time.monotonic() + within
        delay: float | None = 0.005
        sent = False
        empty = 0
        while True:
            live = await self._live()
            empty = 0 if live else empty + 1
            if empty == 2:
                return [], sent
            for proc in live if kill else ():
                sent = _signal_process(proc, signal.SIGKILL) or sent
            if live:
                delay = await _backoff(end, delay or 0.05)
                if delay is None:
                    return live, sent

    async def stop(self, reason: str, grace: float, confirm_timeout: float) -> StopReceipt:
        started = time.monotonic()
        sent: list[str] = []
        live = await self._live()
        if live:
            if any([_signal_process(p, signal.SIGTERM) for p in live]):
                sent.append("SIGTERM")
            left, _ = await self._gone(grace, kill=False)
            if left:
                left, killed = await self._gone(confirm_timeout, kill=True)
                if killed:
                    sent.append("SIGKILL")
        left, _ = await self._gone(0, kill=False)
        escaped = [p.label() for p in left]
        if self._launcher_gone() and self._control_fd is not None:
            escaped.append(self._lost())
        await self._let_go()
        return StopReceipt(
            pid=self.pid, pgid=self.pgid, signals=tuple(sent), confirmed=not escaped,
            exit_code=self._returncode, elapsed=time.monotonic() - started, reason=reason,
            covers=self.covers, escaped=tuple(escaped),
        )

    async def _let_go(self) -> None:
        """Close the control pipe; read the launcher's last words (the child's
        status, if it has ended) until it exits."""
        if self._control_fd is None:
            return
        os.close(self._control_fd)
        self._control_fd = None
        with anyio.move_on_after(_LAUNCH_TIMEOUT):
            while (message := await self._message()) is not None:
                self._note(message)
        await self._abandon()

    async def _abandon(self) -> None:
        """Make sure the launcher has exited (it is our child: its pid is ours
        until reaped, so SIGKILL cannot reach a stranger), then reap it."""
        if self._control_fd is not None:
            os.close(self._control_fd)
            self._control_fd = None
        end = time.monotonic() + _LAUNCH_TIMEOUT
        delay: float | None = 0.001
        while self.proc.poll() is None:
            delay = await _backoff(end, delay or 0.05)
            if delay is None:
                self.proc.kill()
                end = time.monotonic() + _LAUNCH_TIMEOUT
                delay = 0.001

    async def close(self) -> None:
        await self._let_go()
        os.close(self._status_fd)
        self.close_streams()


class _Group(_Supervisor):
    """The child leading a process group of its own (where there is no subreaper).

    Watched without reaping until the end: an unreaped child keeps its pid,
    which is also the group's id, so no signal to the group can reach a
    stranger.
    """

    covers = "process_group"

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

    def returncode(self) -> int:
        returncode = self.reap()
        assert returncode is not None  # wait_exit() returned: it has ended
        return returncode

    async def group_alive(self) -> bool:
        """Does any live process remain in the child's group?"""
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a member we may not signal is still a member
        if _LINUX_PROC:
            if (me := _proc(self.pid)) is not None and me.running:
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
        delay: float | None = 0.005
        while await self.group_alive():
            delay = await _backoff(end, delay or 0.05)
            if delay is None:
                return False
        return True

    def reap(self) -> int | None:
        """Collect the exit status of an ended child (None if it still runs)."""
        if self.proc.returncode is None and not self.exited():
            return None
        return self.proc.wait()

    async def stop(self, reason: str, grace: float, confirm_timeout: float) -> StopReceipt:
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
            covers=self.covers,
            escaped=() if confirmed else (f"members of process group {self.pgid}",),
        )

    async def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self.close_streams()


def _exec_args(argv: Sequence[str | os.PathLike[str]] | str, shell: bool,
               executable: str | os.PathLike[str] | None) -> tuple[str, list[str]]:
    """What subprocess.Popen would exec: (program to look up on PATH, argv)."""
    args: list[str | bytes | os.PathLike[str]] = (
        [argv] if isinstance(argv, str | bytes | os.PathLike) else list(argv))
    if shell:
        args = ["/bin/sh", "-c", *args]
        if executable is not None:
            args[0] = executable
    texts = [os.fsdecode(a) for a in args]
    return (os.fsdecode(executable) if executable is not None else texts[0]), texts


async def _start(argv: Sequence[str | os.PathLike[str]] | str,
                 popen_kwargs: dict[str, Any]) -> _Supervisor:
    """The child, started under the best supervisor this platform has."""
    global _use_launcher
    if _use_launcher:
        tree = await _Tree.launch(argv, dict(popen_kwargs))
        if tree is not None:
            return tree
        _use_launcher = False
        _log.warning("subprocess_subreaper_refused",
                     consequence="stops cover the child's process group only")
    # Popen on the loop's thread, as asyncio does: it only forks and execs,
    # and doing it on a worker thread would let a cancellation arrive after
    # the child started but before anyone supervises it.
    return _Group(subprocess.Popen(argv, start_new_session=True,  # noqa: ASYNC220
                                   **popen_kwargs))


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
    program = _program(argv)
    started = time.monotonic()
    child = await _start(argv, popen_kwargs)
    proc = child.proc
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
