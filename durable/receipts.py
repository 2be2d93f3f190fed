"""Stop receipts: the evidence that stopped work really stopped.

A signal sent is not a stop confirmed. What `durable.subprocess.run`
observed when it stopped a child is kept as a `StopReceipt`: returned with
its error, handed to ``on_stop``, and recorded on the budget that bounded the
work (`Budget.stop_receipts`). It sits below both modules, so that the
budget that keeps receipts does not need the supervisor that makes them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
