"""Recording local-activity outcomes that the workflow already went on from.

With ``ActivityOptions(record="batched")`` a local activity's outcome is kept
in memory and recorded later, with the run's next commit. Its record must say
what the live run saw: the instant the outcome was known (the workflow's
time advanced to it), not the instant of the commit that carries it. This
handler records it exactly as a per-step outcome, at its own `closed_at`.

It lives apart from `durable.store.commit` (whose `HANDLERS` it joins on
import) so that the batched mode touched no shared program; it belongs in
that table once merged.
"""

from __future__ import annotations

from ..driver import Program
from .commit import HANDLERS, _record_local_activity, _RunCommit
from .writes import RecordBatchedLocalActivity


def record_batched_local_activity(c: _RunCommit, w: RecordBatchedLocalActivity
                                  ) -> Program[None]:
    """Record one batched outcome as of its own `closed_at` (events and ops shared)."""
    at = _RunCommit(c.tx, c.run, w.closed_at, c.events, c.ops)
    yield from _record_local_activity(at, w.step)
    return None


HANDLERS[RecordBatchedLocalActivity] = record_batched_local_activity
