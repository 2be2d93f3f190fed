"""What the worker's background parts ask of the worker they serve.

Answering queries of idle runs (`queries`) and running remote attempts
(`remote`) are parts of a `durable.Worker` that live beside the engine; each
is typed against a small protocol (extending `ServingWorker`) rather than
the `Worker` class, so that they do not import the module that imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .context import RunSetup

if TYPE_CHECKING:
    from ..store import Store


class ServingWorker(Protocol):
    """A worker on one task queue: its storage, identity, pace and log."""

    @property
    def store(self) -> Store: ...
    @property
    def namespace(self) -> str: ...
    @property
    def task_queue(self) -> str: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def poll_interval(self) -> float:
        """The fallback poll, for a wake-up that got lost."""
    @property
    def log(self) -> Any: ...
    @property
    def run_setup(self) -> RunSetup:
        """The clock, converter, limits and stop grace its work runs with."""
