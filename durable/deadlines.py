"""A run's deadlines as one value: which binds, which has expired, what is left.

A run has up to three deadlines, stored as UTC epoch seconds: the execution
deadline (the whole instance, carried across continue-as-new), the run
deadline (this run), and the cleanup deadline of a cooperative cancellation.
The runtime bounds a live run by the earliest; the workflow API's
`deadline()`/`remaining()` report it; the watchdog and every commit enforce
the expired one; cancellation caps a child's budget by it. All of them ask
this value, so the rule is written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

KINDS = ("execution_timeout", "run_timeout", "cleanup_deadline")


@dataclass(frozen=True)
class Deadlines:
    """Execution, run and cleanup deadlines (epoch seconds, None = unbounded)."""

    execution: float | None = None
    run: float | None = None
    cleanup: float | None = None

    def _pairs(self) -> list[tuple[float, str]]:
        pairs = [(self.execution, KINDS[0]), (self.run, KINDS[1]), (self.cleanup, KINDS[2])]
        return [(d, k) for d, k in pairs if d is not None]

    @property
    def earliest(self) -> float | None:
        """The binding deadline, or None when the run is unbounded."""
        pairs = self._pairs()
        return min(d for d, _ in pairs) if pairs else None

    def expired(self, now: float) -> tuple[str, float] | None:
        """(kind, deadline) of the earliest deadline at or before `now`, or None."""
        due = sorted((d, k) for d, k in self._pairs() if now >= d)  # ties: by kind name
        if not due:
            return None
        deadline, kind = due[0]
        return kind, deadline

    def remaining(self, now: float) -> float:
        """Seconds until the binding deadline (never negative); inf when unbounded."""
        earliest = self.earliest
        return math.inf if earliest is None else max(0.0, earliest - now)

    def with_cleanup(self, cleanup: float | None) -> Deadlines:
        return replace(self, cleanup=cleanup)

    def without_cleanup(self) -> Deadlines:
        return replace(self, cleanup=None)
