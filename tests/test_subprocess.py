"""durable.subprocess.run (issues 15 and 20): a child process bounded by a
budget, stopped with SIGTERM, a grace period and SIGKILL of everything it
started (whatever group or session it moved to), and confirmed stopped, with
real processes on asyncio and trio. The only fakes are signal senders that do
nothing, standing in for a process no signal can stop.

`supervisor` runs a test under both ways a stop is made: through the Linux
subreaper launcher (covers="descendants") and through the child's process
group, what other platforms get (covers="process_group").
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess as std_subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

import durable
import durable._processes
import durable.subprocess
from durable import Budget, BudgetCancelled, BudgetExhausted, ConfigurationError, StopReceipt
from durable.subprocess import SubprocessCancelled, SubprocessFailed, SubprocessTimedOut, run
from durable.testing import ManualClock

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="reads /proc to check that processes are gone"),
]



@pytest.fixture(params=["descendants", "process_group"])
def supervisor(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "process_group":
        monkeypatch.setattr(durable._processes, "_use_launcher", False)
    return str(request.param)


def term_ignoring(ready: Path) -> str:
    """A shell that ignores SIGTERM (and so do the sleeps it starts: an ignored
    signal stays ignored across exec), so only SIGKILL stops it; it creates
    `ready` once the trap is set."""
    return f"trap '' TERM; touch '{ready}'; while :; do sleep 0.05; done"


async def when_ready(ready: Path, stop: Callable[[], object]) -> None:
    """Call `stop` once the child has created `ready`: a stop that races the
    child's own set-up would test the machine's load, not the stop."""
    with anyio.fail_after(30):
        while not await anyio.Path(ready).exists():
            await anyio.sleep(0.01)
    stop()


def alive(pid: int) -> bool:
    """Is `pid` a running process (not gone, not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


# ---------------------------------------------------------------- normal completion


async def test_child_that_exits_returns_code_output_and_time() -> None:
    result = await run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    assert result.elapsed >= 0
    assert not alive(result.pid)


async def test_check_raises_on_non_zero_exit_without_showing_arguments() -> None:
    with pytest.raises(SubprocessFailed) as info:
        await run(["sh", "-c", "exit 4", "--password=hunter2"], check=True)
    err = info.value
    assert err.returncode == 4
    assert isinstance(err, std_subprocess.CalledProcessError)
    assert isinstance(err, durable.DurableError)
    assert "hunter2" not in str(err) and "'sh'" in str(err)


async def test_input_larger_than_a_pipe_buffer_is_fed_to_the_child() -> None:
    data = os.urandom(300_000)
    result = await run(["cat"], input=data)
    assert result.stdout == data


async def test_output_not_captured_when_sent_elsewhere() -> None:
    result = await run(["echo", "hi"], stdout=std_subprocess.DEVNULL)
    assert result.stdout is None and result.stderr == b""


async def test_child_runs_in_a_session_of_its_own() -> None:
    result = await run(["sh", "-c", "ps -o sid= -p $$; echo $$"])
    sid, pid = result.stdout.split()
    assert int(sid) == int(pid) == result.pid


# ---------------------------------------------------------------- stops on time-out


async def test_budget_running_out_stops_the_child_with_sigterm_confirmed(
        supervisor: str) -> None:
    budget = Budget(timeout=0.3, name="export")
    with pytest.raises(SubprocessTimedOut) as info:
        await run(["sleep", "30"], budget=budget)
    err = info.value
    receipt = err.receipt
    assert isinstance(err, BudgetExhausted) and err.budget == "export"
    assert receipt.signals == ("SIGTERM",)
    assert receipt.confirmed and receipt.exit_code == -signal.SIGTERM
    assert receipt.reason == "timed_out" and receipt.pid == receipt.pgid
    assert receipt.covers == supervisor and receipt.escaped == ()
    assert budget.stop_receipts == (receipt,)
    assert "stop confirmed" in str(err)


async def test_child_ignoring_sigterm_is_killed_after_the_grace_period(
        tmp_path: Path, supervisor: str) -> None:
    budget = Budget(timeout=30)
    ready = tmp_path / "ready"
    async with anyio.create_task_group() as tg:
        tg.start_soon(when_ready, ready, budget.cancel)
        with pytest.raises(SubprocessCancelled) as info:
            await run(["sh", "-c", term_ignoring(ready)], budget=budget, grace=0.3)
    receipt = info.value.receipt
    assert receipt.signals == ("SIGTERM", "SIGKILL")
    assert receipt.confirmed and receipt.exit_code == -signal.SIGKILL
    assert not alive(receipt.pid)


@pytest.mark.parametrize("trap", ["", "trap '' TERM; "], ids=["plain", "ignoring-term"])
async def test_grandchild_in_the_group_is_stopped_too(
        trap: str, tmp_path: Path, supervisor: str) -> None:
    budget = Budget(timeout=30)
    ready = tmp_path / "ready"
    async with anyio.create_task_group() as tg:
        tg.start_soon(when_ready, ready, budget.cancel)
        with pytest.raises(SubprocessCancelled) as info:
            await run(["sh", "-c", f"{trap}sleep 30 & echo $!; touch '{ready}'; wait"],
                      budget=budget, grace=0.3)
    grandchild = int(info.value.stdout or b"0")
    assert grandchild > 0
    assert info.value.receipt.confirmed
    assert info.value.receipt.signals == (("SIGTERM", "SIGKILL") if trap else ("SIGTERM",))
    assert not alive(grandchild)


async def test_partial_output_is_kept_on_the_error(tmp_path: Path) -> None:
    budget = Budget(timeout=30)
    ready = tmp_path / "ready"
    async with anyio.create_task_group() as tg:
        tg.start_soon(when_ready, ready, budget.cancel)
        with pytest.raises(SubprocessCancelled) as info:
            await run(["sh", "-c", f"echo started; echo warn >&2; touch '{ready}'; sleep 30"],
                      budget=budget)
    assert (info.value.stdout, info.value.stderr) == (b"started\n", b"warn\n")


async def test_child_in_a_phase_is_bounded_by_the_phase_limit() -> None:
    budget = Budget(timeout=30, name="nightly")
    with pytest.raises(BudgetExhausted) as info:
        async with budget.phase("dump", limit=0.3):
            await run(["sleep", "30"])  # the phase's budget is the current one
    assert info.value.timeout_kind == "phase"
    assert budget.phases[0].outcome == "timed_out"
    (receipt,) = budget.stop_receipts
    assert receipt.confirmed and receipt.reason == "timed_out"


async def test_child_ending_at_or_after_the_deadline_is_refused(tmp_path: Path) -> None:
    clock = ManualClock()
    budget = Budget(timeout=100, clock=clock)
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(go)

    def time_flies() -> None:
        clock.advance(100)  # while the child runs: the budget is spent...
        with open(go, "wb"):  # ...then the child may end on its own
            pass

    async def let_it_end() -> None:
        await when_ready(ready, lambda: None)
        await anyio.to_thread.run_sync(time_flies)

    async with anyio.create_task_group() as tg:
        tg.start_soon(let_it_end)
        with pytest.raises(SubprocessTimedOut) as info:
            await run(["sh", "-c", f"touch '{ready}'; cat '{go}'"], budget=budget)
    receipt = info.value.receipt
    assert receipt.signals == ()  # it had ended on its own
    assert receipt.confirmed and receipt.exit_code == 0


# ---------------------------------------------------------------- stops on cancellation


async def test_cancelling_the_awaiting_task_stops_the_child_then_reraises(
        tmp_path: Path) -> None:
    receipts: list[StopReceipt] = []
    budget = Budget(name="request")
    ready = tmp_path / "ready"
    runner = anyio.CancelScope()
    finished = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(when_ready, ready, runner.cancel)
        with runner:
            await run(["sh", "-c", term_ignoring(ready)], budget=budget, grace=0.2,
                      on_stop=receipts.append)
            finished = True
    assert runner.cancelled_caught and not finished
    (receipt,) = receipts
    assert receipt.reason == "cancelled"
    assert receipt.signals == ("SIGTERM", "SIGKILL") and receipt.confirmed
    assert budget.stop_receipts == (receipt,)
    assert not alive(receipt.pid)


async def test_budget_cancelled_from_another_thread_stops_the_child() -> None:
    budget = Budget(timeout=30)
    timer = threading.Timer(0.2, budget.cancel, args=("operator pressed stop",))
    timer.start()
    try:
        with pytest.raises(SubprocessCancelled) as info:
            await run(["sleep", "30"], budget=budget)
    finally:
        timer.cancel()
    err = info.value
    assert isinstance(err, BudgetCancelled) and err.reason == "operator pressed stop"
    assert err.receipt.reason == "budget_cancelled" and err.receipt.confirmed


async def test_spent_or_cancelled_budget_refuses_to_start_a_child(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(BudgetExhausted):
        await run(["touch", marker], budget=Budget(timeout=0))
    cancelled = Budget()
    cancelled.cancel("shutting down")
    with pytest.raises(BudgetCancelled):
        await run(["touch", marker], budget=cancelled)
    assert not await anyio.Path(marker).exists()


async def test_on_stop_failure_does_not_hide_the_stop() -> None:
    def broken(receipt: StopReceipt) -> None:
        raise RuntimeError("reporting is down")

    with pytest.raises(SubprocessTimedOut):
        await run(["sleep", "30"], budget=Budget(timeout=0.2), on_stop=broken)


# ---------------------------------------------------------------- descendants that leave the group


def stat_of(pid: int) -> tuple[int, int]:
    """(process group, session) of a running process."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[2]), int(fields[3])


def escaping(pids: Path, ready: Path) -> str:
    """A bash script (dash has no job control without a terminal) that starts
    four processes outside its own process group, each writing its pid to
    `pids`: a job-control job (a group of its own), a `setsid` child (a
    session of its own), a double fork into a new session (an orphan: its
    parent exits at once) and a new session that ignores SIGTERM and keeps
    forking; `ready` appears once all four run."""
    report = f"echo \\$\\$ >> '{pids}'"
    return "\n".join([
        f"set -m; sh -c \"{report}; exec sleep 30\" &",
        "set +m",
        f"setsid sh -c \"{report}; exec sleep 30\" &",
        f"( setsid sh -c \"{report}; exec sleep 30\" & )",
        f"setsid sh -c \"trap '' TERM; {report}; while :; do sleep 0.05; done\" &",
        f"while [ \"$(wc -l < '{pids}')\" -lt 4 ]; do sleep 0.01; done",
        f"touch '{ready}'; wait",
    ])


async def test_descendants_in_new_groups_and_sessions_are_stopped_and_confirmed(
        tmp_path: Path) -> None:
    pids, ready = tmp_path / "pids", tmp_path / "ready"
    pids.touch()
    budget = Budget(timeout=30)
    escaped: list[int] = []

    def check_then_cancel() -> None:
        escaped.extend(int(line) for line in pids.read_text().split())
        budget.cancel("operator pressed stop")

    async with anyio.create_task_group() as tg:
        tg.start_soon(when_ready, ready, check_then_cancel)
        with pytest.raises(SubprocessCancelled) as info:
            await run(["bash", "-c", escaping(pids, ready)], budget=budget, grace=0.3)
    receipt = info.value.receipt
    try:
        assert len(escaped) == 4
        assert receipt.covers == "descendants"
        assert receipt.signals == ("SIGTERM", "SIGKILL")  # one of them ignores SIGTERM
        assert receipt.confirmed and receipt.escaped == ()
        assert not any(alive(pid) for pid in escaped)
    finally:
        for pid in escaped:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


async def test_escaped_descendants_really_left_the_group(tmp_path: Path) -> None:
    """What the stop above covers is not the group: the four are elsewhere."""
    pids, ready = tmp_path / "pids", tmp_path / "ready"
    pids.touch()
    budget = Budget(timeout=30)
    where: dict[int, tuple[int, int]] = {}

    def look_then_cancel() -> None:
        where.update({int(p): stat_of(int(p)) for p in pids.read_text().split()})
        budget.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(when_ready, ready, look_then_cancel)
        with pytest.raises(SubprocessCancelled) as info:
            await run(["bash", "-c", escaping(pids, ready)], budget=budget, grace=0.3)
    child = info.value.receipt.pid
    groups = {group for group, _ in where.values()}
    sessions = {session for _, session in where.values()}
    assert child not in groups  # every one left the child's process group
    assert len(sessions - {child}) == 3  # and three left its session too
    assert info.value.receipt.confirmed


async def test_launcher_killed_from_outside_leaves_the_stop_unconfirmed(tmp_path: Path) -> None:
    pids, ready = tmp_path / "pids", tmp_path / "ready"
    receipts: list[StopReceipt] = []
    outside: list[int] = []

    def kill_the_launcher() -> None:
        child, escapee = (int(p) for p in pids.read_text().split())
        outside.append(escapee)
        with open(f"/proc/{child}/stat", "rb") as f:
            launcher = int(f.read().rsplit(b")", 1)[1].split()[1])
        os.kill(launcher, signal.SIGKILL)

    script = (f"echo $$ >> '{pids}'; setsid sleep 30 & echo $! >> '{pids}'; "
              f"touch '{ready}'; sleep 30")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(when_ready, ready, kill_the_launcher)
            with pytest.raises(durable.DurableError, match="can no longer be found"):
                await run(["sh", "-c", script], budget=Budget(timeout=30), grace=0.3,
                          on_stop=receipts.append)
        (receipt,) = receipts
        assert receipt.reason == "error" and not receipt.confirmed
        assert any("launcher" in line for line in receipt.escaped)
        assert not alive(receipt.pid)  # what it could still find (its session) was stopped
    finally:
        for pid in outside:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


async def test_processes_left_by_a_child_that_ended_are_not_stopped(tmp_path: Path) -> None:
    """A child ending on its own is not stopped, as with subprocess.run: what it
    left running (with its output elsewhere) keeps running."""
    result = await run(["sh", "-c", "setsid sleep 30 >/dev/null 2>&1 & echo $!"])
    daemon = int(result.stdout or b"0")
    try:
        assert result.returncode == 0 and alive(daemon)
    finally:
        os.kill(daemon, signal.SIGKILL)


async def test_no_launcher_is_left_behind() -> None:
    await run(["true"])
    with pytest.raises(SubprocessTimedOut):
        await run(["sleep", "30"], budget=Budget(timeout=0.2))
    mine = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                ppid = stat_of_parent(int(entry.name))
            except (OSError, ValueError):
                continue
            if ppid == os.getpid() and b"_subreaper.py" in cmdline:
                mine.append(int(entry.name))
    assert mine == []


def stat_of_parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


async def test_a_reused_pid_gets_no_signal() -> None:
    """Signals go to a (pid, start time): a process with the pid but another
    start time is someone else."""
    stranger = std_subprocess.Popen(["sleep", "30"])  # noqa: ASYNC220
    try:
        seen = durable._processes.read_proc(stranger.pid)
        assert seen is not None
        impostor = seen._replace(start=seen.start - 1)
        assert durable._processes.signal_process(impostor, signal.SIGKILL) is False
        assert alive(stranger.pid)
        assert durable._processes.signal_process(seen, signal.SIGKILL) is True
        assert stranger.wait() == -signal.SIGKILL
    finally:
        stranger.kill()
        stranger.wait()


# ---------------------------------------------------------------- starting the child


async def test_a_missing_program_raises_as_popen_does(supervisor: str) -> None:
    with pytest.raises(FileNotFoundError) as info:
        await run(["no-such-program-xyz", "--flag"])
    assert info.value.filename == "no-such-program-xyz"


async def test_a_file_that_is_not_executable_raises_permission_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("echo hi\n")
    with pytest.raises(PermissionError):
        await run([str(script)])


async def test_popen_options_reach_the_child(tmp_path: Path, supervisor: str) -> None:
    read_end, write_end = os.pipe()
    try:
        result = await run(
            f"echo \"$GREETING\" from \"$(pwd)\"; echo passed >&{write_end}; cat",
            shell=True, executable="bash",  # dash reads `>&12` as `>&1 2`
            cwd=tmp_path, env={"GREETING": "hello", "PATH": os.environ["PATH"]},
            pass_fds=(write_end,), input=b"fed\n")
        os.close(write_end)
        write_end = -1
        assert result.stdout == f"hello from {tmp_path}\nfed\n".encode()
        assert os.read(read_end, 100) == b"passed\n"
        named = await run(["ignored-name", "-c", "echo $0"], executable="sh")
        assert named.stdout == b"ignored-name\n"
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


async def test_child_starts_with_default_signal_handling() -> None:
    """The launcher ignores SIGTERM; the child must not inherit that."""
    result = await run(["sh", "-c", "grep -E '^Sig(Ign|Cgt)' /proc/$$/status"])
    ignored = int(result.stdout.split()[1], 16)
    assert not ignored & (1 << (signal.SIGTERM - 1))
    assert not ignored & (1 << (signal.SIGPIPE - 1))


# ---------------------------------------------------------------- unconfirmed stops


async def test_stop_that_cannot_be_confirmed_says_so_and_names_what_runs(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="durable.subprocess")
    # signals reach nobody
    monkeypatch.setattr(durable._processes, "signal_process", lambda proc, signum: True)
    with pytest.raises(SubprocessTimedOut) as info:
        await run(["sleep", "30"], budget=Budget(timeout=0.2), grace=0.2, confirm_timeout=0.3)
    receipt = info.value.receipt
    try:
        assert receipt.signals == ("SIGTERM", "SIGKILL")
        assert receipt.confirmed is False and receipt.exit_code is None
        assert receipt.escaped == (f"sleep (pid {receipt.pid})",)
        assert f"NOT confirmed: may still be running: sleep (pid {receipt.pid})" in str(info.value)
        assert alive(receipt.pid)  # it really is still running
        (stopped,) = [r for r in caplog.records if "subprocess_stopped" in r.getMessage()]
        assert stopped.levelno == logging.ERROR and "confirmed=False" in stopped.getMessage()
    finally:
        os.kill(receipt.pid, signal.SIGKILL)


async def test_group_stop_that_cannot_be_confirmed_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durable._processes, "_use_launcher", False)
    monkeypatch.setattr(os, "killpg", lambda pgid, signum: None)  # signals reach nobody
    with pytest.raises(SubprocessTimedOut) as info:
        await run(["sleep", "30"], budget=Budget(timeout=0.2), grace=0.2, confirm_timeout=0.3)
    receipt = info.value.receipt
    try:
        assert receipt.signals == ("SIGTERM", "SIGKILL")
        assert receipt.confirmed is False and receipt.exit_code is None
        assert receipt.covers == "process_group"
        assert receipt.escaped == (f"members of process group {receipt.pgid}",)
        assert alive(receipt.pid)
    finally:
        os.kill(receipt.pid, signal.SIGKILL)
        # run() could not reap it: its Popen goes to subprocess's own list of
        # children to reap later, with a ResourceWarning we expect here
        del info
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


async def test_logs_name_the_program_never_its_arguments(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="durable.subprocess")
    with pytest.raises(SubprocessTimedOut):
        await run(["sh", "-c", "sleep 30", "--token=s3cr3t"], budget=Budget(timeout=0.2),
                  env={"API_KEY": "k3y", "PATH": os.environ["PATH"]})
    events = [r.getMessage() for r in caplog.records]
    assert any("subprocess_started" in e and "program='sh'" in e for e in events)
    assert any("subprocess_stopped" in e and "stop_kind='timed_out'" in e for e in events)
    assert not any("s3cr3t" in e or "k3y" in e or "sleep 30" in e for e in events)


async def test_receipt_is_json_ready() -> None:
    with pytest.raises(SubprocessTimedOut) as info:
        await run(["sleep", "30"], budget=Budget(timeout=0.2))
    data = json.loads(json.dumps(info.value.receipt.to_dict()))
    assert data["signals"] == ["SIGTERM"] and data["confirmed"] is True
    assert data["escaped"] == [] and data["covers"] == "descendants"
    assert set(data) == {"pid", "pgid", "signals", "confirmed", "exit_code", "elapsed", "reason",
                         "covers", "escaped"}


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_new_session": False}, "session of its own"),
        ({"preexec_fn": os.getpid}, "out of the group"),
        ({"text": True}, "decode result.stdout yourself"),
        ({"input": "text"}, "must be bytes"),
        ({"input": b"x", "stdin": std_subprocess.DEVNULL}, "input= or stdin=, not both"),
        ({"grace": -1}, "grace"),
        ({"confirm_timeout": 0}, "confirm_timeout=...\\) must be > 0"),
        ({"budget": 30}, "must be a durable.Budget"),
    ],
)
async def test_bad_options_are_refused_before_anything_starts(
        kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await run(["true"], **kwargs)  # type: ignore[arg-type]


async def test_module_is_importable_as_durable_subprocess() -> None:
    assert durable.subprocess.run is run
    assert durable.StopReceipt is StopReceipt
