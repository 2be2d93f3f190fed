"""durable.subprocess.run (issue 15): a child process bounded by a budget,
stopped with SIGTERM, a grace period and SIGKILL of its group, and confirmed
stopped, with real processes on asyncio and trio. The only fake is an
`os.killpg` that does nothing, standing in for a process no signal can stop.
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
import durable.subprocess
from durable import Budget, BudgetCancelled, BudgetExhausted, ConfigurationError, StopReceipt
from durable.subprocess import SubprocessCancelled, SubprocessFailed, SubprocessTimedOut, run
from durable.testing import ManualClock

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="reads /proc to check that processes are gone"),
]



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


async def test_budget_running_out_stops_the_child_with_sigterm_confirmed() -> None:
    budget = Budget(timeout=0.3, name="export")
    with pytest.raises(SubprocessTimedOut) as info:
        await run(["sleep", "30"], budget=budget)
    err = info.value
    receipt = err.receipt
    assert isinstance(err, BudgetExhausted) and err.budget == "export"
    assert receipt.signals == ("SIGTERM",)
    assert receipt.confirmed and receipt.exit_code == -signal.SIGTERM
    assert receipt.reason == "timed_out" and receipt.pid == receipt.pgid
    assert budget.stop_receipts == (receipt,)
    assert "stop confirmed" in str(err)


async def test_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
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
async def test_grandchild_in_the_group_is_stopped_too(trap: str, tmp_path: Path) -> None:
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


async def test_child_ending_at_or_after_the_deadline_is_refused() -> None:
    clock = ManualClock()
    budget = Budget(timeout=100, clock=clock)

    async def time_flies() -> None:
        await anyio.sleep(0.05)
        clock.advance(100)

    async with anyio.create_task_group() as tg:
        tg.start_soon(time_flies)
        with pytest.raises(SubprocessTimedOut) as info:
            await run(["sleep", "0.3"], budget=budget)
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


# ---------------------------------------------------------------- unconfirmed stops


async def test_stop_that_cannot_be_confirmed_says_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="durable.subprocess")
    monkeypatch.setattr(os, "killpg", lambda pgid, signum: None)  # signals reach nobody
    with pytest.raises(SubprocessTimedOut) as info:
        await run(["sleep", "30"], budget=Budget(timeout=0.2), grace=0.2, confirm_timeout=0.3)
    receipt = info.value.receipt
    try:
        assert receipt.signals == ("SIGTERM", "SIGKILL")
        assert receipt.confirmed is False and receipt.exit_code is None
        assert "NOT confirmed" in str(info.value)
        assert alive(receipt.pid)  # it really is still running
        (stopped,) = [r for r in caplog.records if "subprocess_stopped" in r.getMessage()]
        assert stopped.levelno == logging.ERROR and "confirmed=False" in stopped.getMessage()
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
    assert set(data) == {"pid", "pgid", "signals", "confirmed", "exit_code", "elapsed", "reason"}


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
