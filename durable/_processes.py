"""Finding and stopping every process a child started (for `durable.subprocess`).

On Linux the child is started by a small launcher (`durable/_subreaper.py`)
that is a *child subreaper*, so every orphaned descendant is re-parented to
it and stays findable through /proc as a descendant of the launcher
(`_Tree`); each one is signalled through a pidfd opened after checking its
start time, so a reused pid never gets a signal. Elsewhere, or when the
kernel refuses a subreaper, the child's process group is what is stopped
(`_Group`). Both are a `Supervisor`: wait for the child, stop it (SIGTERM,
grace, SIGKILL until nothing new appears), confirm the stop by looking, and
say so in a `StopReceipt`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from ._log import get_logger
from .errors import DurableError
from .receipts import StopReceipt

_log = get_logger("durable.subprocess")

_LINUX_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
_PYTHON = sys.executable
_LAUNCHER = Path(__file__).with_name("_subreaper.py")
# The subreaper launcher needs Linux, /proc, an interpreter to run it and its
# file; run() stops using it for good if the kernel refuses it a subreaper.
_use_launcher = (_LINUX_PROC and bool(_PYTHON) and os.path.isfile(_PYTHON)
                 and _LAUNCHER.is_file())
_LAUNCH_TIMEOUT = 30.0  # an interpreter starting on a loaded host; beyond, it is broken


def program_name(argv: Any) -> str:
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


def read_proc(pid: int | str) -> _Proc | None:
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
            proc = read_proc(entry.name)
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


def signal_process(proc: _Proc, signum: signal.Signals) -> bool:
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
        now = read_proc(proc.pid)
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


class Supervisor(ABC):
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


class _Tree(Supervisor):
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
            f"durable.subprocess.run could not start {program_name(argv)!r}: its launcher "
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
                sent = signal_process(proc, signal.SIGKILL) or sent
            if live:
                delay = await _backoff(end, delay or 0.05)
                if delay is None:
                    return live, sent

    async def stop(self, reason: str, grace: float, confirm_timeout: float) -> StopReceipt:
        started = time.monotonic()
        sent: list[str] = []
        live = await self._live()
        if live:
            if any([signal_process(p, signal.SIGTERM) for p in live]):
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


class _Group(Supervisor):
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
            if (me := read_proc(self.pid)) is not None and me.running:
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


async def start(argv: Sequence[str | os.PathLike[str]] | str,
                 popen_kwargs: dict[str, Any]) -> Supervisor:
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
