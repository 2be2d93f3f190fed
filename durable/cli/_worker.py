"""``durable worker MODULE:ATTR``: load what a worker runs, run it, stop it on a signal.

``ATTR`` names one of two things (docs/cli.md, "durable worker"):

* **a spec**: a dict, or any object (a module, a class, a SimpleNamespace)
  with a ``workflows`` and/or ``activities`` attribute, e.g.::

      WORKER = {"workflows": [order], "activities": [charge, ship],
                "task_queue": "orders"}

  Its keys are passed to `durable.Worker` (``workflows``, ``activities``,
  ``task_queue``, ``max_concurrent_runs``, ``max_concurrent_activities``,
  ``lease_seconds``, ``poll_interval``, ``identity``, ``capabilities``,
  ``build_id``);
* **a factory**: a callable taking the connected `durable.Client` and
  returning a `durable.Worker` (or an awaitable of one), for workers that need
  code to build, e.g. ``def make_worker(client): return durable.Worker(client, ...)``.

A spec is recognised first, so a class with ``workflows`` attributes is a
spec even though classes are callable.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import click

import durable

from ._app import CliError, Output

SPEC_KEYS = ("workflows", "activities", "task_queue", "max_concurrent_runs",
             "max_concurrent_activities", "lease_seconds", "poll_interval", "identity",
             "capabilities", "build_id", "eager_starts")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def load_target(ref: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) from the current directory too."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{ref!r} is not MODULE:ATTR; e.g. myapp.workers:WORKER", param_hint="MODULE:ATTR")
    # Like `python -m`, look in the current directory first: a console script's
    # sys.path starts at its own bin directory, not where the user stands.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise CliError(f"cannot import module {module_name!r}: {exc}",
                           fix="run from the directory that contains it, or set PYTHONPATH"
                           ) from exc
        raise
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}",
                           fix="ATTR must name a worker spec or a factory; see "
                               "`durable worker --help`") from None
    return target


def is_spec(target: Any) -> bool:
    if isinstance(target, Mapping):
        return True
    return hasattr(target, "workflows") or hasattr(target, "activities")


def spec_kwargs(target: Any, ref: str) -> dict[str, Any]:
    """Worker keyword arguments from a dict or an object with those attributes."""
    if isinstance(target, Mapping):
        unknown = sorted(set(map(str, target)) - set(SPEC_KEYS))
        if unknown:
            raise CliError(f"worker spec {ref} has unknown key(s) {', '.join(unknown)}",
                           fix=f"allowed keys: {', '.join(SPEC_KEYS)}")
        values = dict(target)
    else:
        values = {k: getattr(target, k) for k in SPEC_KEYS if hasattr(target, k)}
    for key in ("workflows", "activities"):
        value = values.get(key, ())
        if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
            raise CliError(f"worker spec {ref}: {key!r} must be a list, got "
                           f"{type(value).__name__}")
        values[key] = list(value)
    if not values["workflows"] and not values["activities"]:
        raise CliError(f"worker spec {ref} lists no workflows and no activities",
                       fix='e.g. {"workflows": [order], "activities": [charge]}')
    return values


async def build_worker(client: durable.Client, target: Any, ref: str,
                       overrides: Mapping[str, Any]) -> durable.Worker:
    if is_spec(target):
        kwargs = spec_kwargs(target, ref)
        kwargs.update({k: v for k, v in overrides.items() if v is not None})
        return durable.Worker(client, **kwargs)
    if callable(target):
        if any(v is not None for v in overrides.values()):
            raise CliError(f"{ref} is a factory: set the task queue, identity and build id "
                           "in it", fix="--task-queue, --identity and --build-id apply to worker "
                                        "specs only")
        made = target(client)
        if inspect.isawaitable(made):
            made = await made
        if not isinstance(made, durable.Worker):
            raise CliError(f"factory {ref} returned {type(made).__name__}, not a durable.Worker",
                           fix="return durable.Worker(client, workflows=[...], activities=[...])")
        return made
    raise CliError(f"{ref} is a {type(target).__name__}: neither a worker spec nor a factory",
                   fix='give {"workflows": [...], "activities": [...]} or a function '
                       "taking the client and returning a durable.Worker")


def configure_logging(level: str) -> None:
    """Send the engine's log events to stderr at `level`, unless the app configured logging."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("durable").setLevel(level.upper())


async def serve(client: durable.Client, target: Any, ref: str, overrides: Mapping[str, Any],
                out: Output, forced_exit: Callable[[int], None] = os._exit) -> None:
    """Run the worker until SIGINT or SIGTERM; a second signal exits at once.

    The first signal stops the worker gracefully: its runs are released and
    running activities are asked to stop, so another worker can take over
    at once instead of waiting for leases to expire. An activity that ignores
    the stop (a blocking call in a thread) holds that up; the second signal
    then exits the process without waiting (leases expire and another worker
    resumes the work).
    """
    worker = await build_worker(client, target, ref, overrides)
    stop = anyio.Event()

    async def watch_signals() -> None:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            count = 0
            async for signum in signals:
                count += 1
                name = signal.Signals(signum).name
                if count == 1:
                    out.note(f"durable worker: {name} received, stopping gracefully "
                             "(send it again to exit at once)")
                    stop.set()
                else:
                    out.note(f"durable worker: second {name}, exiting now without waiting "
                             "(leases expire; another worker resumes the work)")
                    sys.stderr.flush()
                    forced_exit(128 + signum)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_signals)
        async with worker:
            out.note(
                f"durable worker {worker.identity} running in namespace {worker.namespace!r}, "
                f"task queue {worker.task_queue!r}"
                + (f", build {worker.build_id}" if worker.build_id else "") + ": workflows "
                f"{', '.join(sorted(worker.workflows)) or '-'}; activities "
                f"{', '.join(sorted(worker.activities)) or '-'} (Ctrl-C to stop)")
            await stop.wait()
        out.note(f"durable worker {worker.identity} stopped")
        tg.cancel_scope.cancel()
