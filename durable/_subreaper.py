"""The launcher `durable.subprocess.run` puts between itself and the child (Linux).

Run as a script (``python -I -S _subreaper.py STATUS_FD CONTROL_FD RESTORE
EXECUTABLE ARG...``), never imported by the package: it must start in
milliseconds, so it imports nothing of durable.

Why it exists: a process that moves into a process group or session of its
own (job control, ``setsid``, a double fork) leaves the group the supervisor
signals, and once its parent dies it is re-parented to init, where nothing
says it was ours. This launcher declares itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``): every orphaned descendant is re-parented
to it instead, so "a descendant of the launcher" stays true for every process
the child ever starts, whatever group or session it moves to. The supervisor
finds and signals those descendants through /proc; the launcher only stays
alive, adopts, reaps, and reports.

Protocol, one ASCII line per message on STATUS_FD:

* ``S <pid>``: the child was forked and exec'd (it leads a session of its own);
* ``E <where> <errno>``: it could not be started (``where`` is ``exec`` or
  ``subreaper``); the launcher then exits;
* ``X <wait status>``: the child ended (raw status, as from waitpid).

The launcher leaves when CONTROL_FD reaches end of file (the supervisor
closed it, or died): it reaps what has ended, reports the child's status if
it has not yet, and exits without signalling anyone. Descendants still alive
then are re-parented to init, as they would be without a launcher.
"""

import ctypes
import os
import select
import signal
import sys
from collections.abc import Mapping

_PR_SET_CHILD_SUBREAPER = 36
# Left alone by the launcher's own signals: its lifetime is bound to CONTROL_FD.
_IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# What subprocess.Popen(restore_signals=True) gives back to the default.
_RESTORED = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ")
                  if hasattr(signal, name))


def _report(fd: int, message: str) -> None:
    os.write(fd, (message + "\n").encode("ascii"))


def _become_subreaper() -> int:
    """0, or the errno that refused it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return ctypes.get_errno() or 1
    return 0


def _start(executable: str, args: list[str], restore: bool,
           inherited: Mapping[signal.Signals, object]) -> tuple[int, int]:
    """Fork and exec the child in a session of its own: (pid, errno or 0)."""
    err_r, err_w = os.pipe()  # close-on-exec: end of file means exec succeeded
    pid = os.fork()
    if pid == 0:
        try:
            os.close(err_r)
            os.setsid()
            for signum, disposition in inherited.items():
                signal.signal(signum, signal.SIG_IGN if disposition == signal.SIG_IGN
                              else signal.SIG_DFL)
            if restore:
                for signum in _RESTORED:
                    signal.signal(signum, signal.SIG_DFL)
            os.execvp(executable, args)
        except OSError as exc:
            os.write(err_w, str(exc.errno or 0).encode("ascii"))
        finally:
            os._exit(127)
    os.close(err_w)
    data = b""
    while chunk := os.read(err_r, 64):
        data += chunk
    os.close(err_r)
    return pid, int(data) if data else 0


def _close_other_fds(keep: set[int]) -> None:
    """The launcher holds none of the child's pipes: their ends must reach end
    of file when the child's own processes close them, not when we leave."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd, inheritable=False)
    keep = keep | {0, 1, 2}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the directory's own descriptor, closed already


def _reap(child: int, status_fd: int, reported: bool) -> bool:
    """Reap every ended child (ours and adopted); report ours. True once reported."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reported
        if pid == 0:
            return reported
        if pid == child and not reported:
            _report(status_fd, f"X {status}")
            reported = True


def main(argv: list[str]) -> int:
    status_fd, control_fd = int(argv[1]), int(argv[2])
    restore, executable, args = argv[3] == "1", argv[4], argv[5:]
    os.set_inheritable(status_fd, False)
    os.set_inheritable(control_fd, False)
    failed = _become_subreaper()
    if failed:
        _report(status_fd, f"E subreaper {failed}")
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes select()
    inherited = {signum: signal.getsignal(signum) for signum in _IGNORED}
    for signum in _IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    child, errno = _start(executable, args, restore, inherited)
    if errno:
        os.waitpid(child, 0)
        _report(status_fd, f"E exec {errno}")
        return 1
    _close_other_fds({status_fd, control_fd, wake_r, wake_w})
    _report(status_fd, f"S {child}")
    reported = False
    while True:
        reported = _reap(child, status_fd, reported)
        ready, _, _ = select.select([control_fd, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
        if control_fd in ready and not os.read(control_fd, 512):
            break
    _reap(child, status_fd, reported)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
