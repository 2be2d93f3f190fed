"""Facts in words, shared by the CLI's views: when something happened, who
asked, what a run waits for (describe()["waiting_for"]), who sent a signal
or an update. Apart from `_views` so that module stays under the size limit
(tests/unit/test_layout.py); it depends on `_fmt` and rich alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rich.text import Text

from .. import present as _fmt
from ..present import sender_text


def when(value: Any, now: datetime) -> Text:
    """``2026-04-12 14:00:00 UTC (4m ago)``; ``-`` when unset."""
    moment = _fmt.instant(value)
    if moment is None:
        return Text("-", style="dim")
    return Text.assemble(_fmt.absolute(moment), (f" ({_fmt.relative(moment, now)})", "dim"))



def waiting_text(waiting: Any, now: datetime, holder: Any = None) -> Text:
    """What an open run waits for (describe()["waiting_for"]), in words; with
    nothing to wait for and no activity running, by the worker that holds it
    (`durable.present.holder`)."""
    if not isinstance(waiting, Mapping) and isinstance(holder, Mapping):
        if holder.get("worker_id") is None:
            return Text("nothing open: it is ready for a worker of its queue to take")
        if holder.get("alive"):
            return Text.assemble(f"nothing open: its code runs on worker {holder['worker_id']} "
                                 "(last seen ", when(holder.get("last_seen_at"), now),
                                 "; presumed alive until ", when(holder.get("expires_at"), now),
                                 ")")
        return Text(f"nothing open, but worker {holder['worker_id']}, which holds it, is gone: "
                    + _fmt.taken_text(holder.get("lease_expires_at"), now), style="bold yellow")
    if not isinstance(waiting, Mapping):
        return Text("nothing: it is busy (an activity of it runs)", style="green")
    kind = waiting.get("kind")
    text = Text()
    if kind == "timer":
        text.append("a timer, which fires ")
        text.append_text(when(waiting.get("fire_at"), now))
    elif kind == "condition":
        text.append("a condition (a signal or an update that makes it true)")
        if waiting.get("timeout_at"):
            text.append(", or its timeout ")
            text.append_text(when(waiting.get("timeout_at"), now))
        else:
            text.append(", with no timeout")
    elif kind == "child":
        text.append(f"child workflow {waiting.get('child_workflow_id')} "
                    f"({waiting.get('child_status') or 'not started'})")
    elif kind == "activity":
        text.append(f"activity {waiting.get('activity')} to be picked up on queue "
                    f"{waiting.get('queue')} (attempt {waiting.get('attempt')}, available ")
        text.append_text(when(waiting.get("available_at"), now))
        text.append(")")
    elif kind == "activity_worker":
        text.append(f"activity {waiting.get('activity')} on queue {waiting.get('queue')}, "
                    f"which no live worker serves ({waiting.get('live_workers')} live "
                    "worker(s) on it): start one that registers it", style="bold yellow")
    elif kind == "worker":
        text.append(f"a worker: none of the {waiting.get('live_workers')} live worker(s) of "
                    f"queue {waiting.get('queue')} registers {waiting.get('workflow_type')}",
                    style="bold yellow")
    elif kind in ("queue_slot", "key_slot"):
        text.append(f"a {'slot' if kind == 'queue_slot' else 'slot of its key'} on queue "
                    f"{waiting.get('queue')} ({waiting.get('running')} of "
                    f"{waiting.get('limit')} running){_fmt.holders_text(waiting)}",
                    style="yellow")
        held = _fmt.ancestors_text(waiting)
        if held:
            every = "it never starts" in held
            text.append(held, style="bold red" if every else "yellow")
    elif kind == "rate":
        text.append(f"the rate limit of queue {waiting.get('queue')} (next start ",
                    style="yellow")
        text.append_text(when(waiting.get("next_start_at"), now))
        text.append(")")
    elif kind == "review":
        text.append(f"a person to review it: {waiting.get('hint')}", style="bold red")
    elif kind == "build":
        text.append(_fmt.build_wait_text(waiting), style="bold yellow")
    else:
        text.append(_fmt.compact(dict(waiting), 120))
    return text



def received_lines(info: Mapping[str, Any], now: datetime) -> list[Text]:
    """describe()["received"]: the latest signals and updates, and who sent them."""
    received = [r for r in info.get("received") or [] if isinstance(r, Mapping)]
    if not received:
        return []
    lines = [Text(""), Text("Signals and updates received (latest)", style="bold")]
    for r in received:
        line = Text.assemble(f"  #{r.get('seq')} {r.get('kind')} ",
                             (str(r.get("name")), "bold"), f"  {r.get('status')}  received ")
        line.append_text(when(r.get("received_at"), now))
        line.append(f"  by {sender_text(r.get('sender'))}")
        lines.append(line)
    return lines


def run_tag(run: Mapping[str, Any]) -> tuple[str, str]:
    """A listed open run's tag after its status, and its style: ``holder gone``
    (its worker is presumed gone), ``blocked by deploy v2`` (no live build
    replays it: it waits for one that does), ``waiting`` or ``busy``; none
    once closed (``waiting`` None)."""
    if run.get("waiting") is None:
        return "", "dim"
    if _fmt.holder_gone(run.get("holder")):
        return " holder gone", "bold yellow"
    if run.get("blocked_build"):
        return f" blocked by deploy {run['blocked_build']}", "bold yellow"
    return (" waiting" if run.get("waiting") else " busy"), "dim"

