"""Run the control plane: `serve()` (blocking, for ``durable serve``) and its parts.

uvicorn serves it on asyncio, hypercorn on trio; either way the process's
event loop is the one the storage driver and an optional in-process worker
run on. A server reachable from other machines must authenticate: `serve`
refuses a non-loopback address when no token is configured.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskStatus

from .._log import get_logger
from ..client import Client, connect
from ..errors import ConfigurationError
from ..worker import Worker
from .app import create_app
from .auth import load_tokens

log = get_logger("durable.http")

LOOPS = ("asyncio", "trio")
#: The signals that stop `serve` gracefully (the first; a second ends it at once).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: What a token-less server logs when it starts (and the UI shows on every page).
NO_TOKEN_BANNER = (
    "NO TOKENS: this control plane is in development mode. Every request acts as "
    "OPERATOR (list, start, signal, cancel, terminate) without a token; it answers only "
    "on loopback and only to requests naming a loopback host (localhost, 127.0.0.1, ::1) "
    "or an --allowed-host. Set DURABLE_TOKENS or --tokens-file for anything else."
)
#: What `serve(worker=...)` takes: "module:attr", a factory or a dict of Worker arguments.
WorkerSpec = str | Callable[[Client], Worker] | Mapping[str, Any]
# One worker spec, or several (a list or tuple: each runs in this process).
WorkerSpecs = WorkerSpec | Sequence[WorkerSpec]


def is_loopback(host: str) -> bool:
    """Whether `host` is only reachable from this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only
    # for sockets that say they are TCP (else Nagle + delayed ACK add ~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


async def serve_app(app: Any, *, host: str = "127.0.0.1", port: int = 8233,
                    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve an ASGI app until cancelled: uvicorn on asyncio, hypercorn on trio.

    Reports the bound port through `task_status` (``port=0`` picks a free
    one: ``port = await tg.start(partial(serve_app, app, port=0))``). On
    cancellation the server stops accepting, finishes its lifespan and returns.
    """
    import sniffio

    if sniffio.current_async_library() == "trio":
        await _serve_hypercorn(app, host, port, task_status)
    else:
        await _serve_uvicorn(app, host, port, task_status)


async def _serve_uvicorn(app: Any, host: str, port: int, task_status: TaskStatus[int]) -> None:
    import uvicorn

    sock = _bind(host, port)
    bound = int(sock.getsockname()[1])
    config = uvicorn.Config(app, host=host, port=bound, log_config=None, access_log=False,
                            lifespan="on", timeout_graceful_shutdown=5)

    class Server(uvicorn.Server):
        """uvicorn's server without its signal handlers: uvicorn raises a caught
        SIGTERM again once it has shut down, which ended the process before its
        workers stopped; `serve` (or the embedding program) owns the signals."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    server = Server(config)
    done = anyio.Event()

    async def run() -> None:
        try:
            with anyio.CancelScope(shield=True):  # stopped by should_exit, not cancellation
                await server.serve(sockets=[sock])
        finally:
            sock.close()
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            while not server.started:
                if done.is_set():
                    raise ConfigurationError(
                        f"the control plane on {host}:{bound} did not start; see its log")
                await anyio.sleep(0.01)
            task_status.started(bound)
            await done.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(15):
                await done.wait()


async def _stop_on_signal(stop: anyio.Event) -> None:
    """`serve`'s first SIGINT or SIGTERM stops it gracefully: the server stops
    accepting and its workers stop as `durable worker`'s do (runs released,
    the worker deregistered); a second one, with the default handlers back,
    ends the process at once."""
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            log.info("stopping gracefully (send the signal again to exit at once)",
                     signal=signal.Signals(signum).name)
            stop.set()
            return


async def _serve_hypercorn(app: Any, host: str, port: int, task_status: TaskStatus[int]) -> None:
    import hypercorn.trio
    from hypercorn.config import Config

    sock = _bind(host, port)
    bound = int(sock.getsockname()[1])
    config = Config()
    # hypercorn closes the socket it is given: give it a duplicate of ours
    config.bind = [f"fd://{os.dup(sock.fileno())}"]
    config.accesslog = None
    config.loglevel = "WARNING"  # our access log says what happened
    config.graceful_timeout = 5
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            async def run(*, task_status: Any) -> None:
                with anyio.CancelScope(shield=True):  # stopped by `stop`, not cancellation
                    await hypercorn.trio.serve(app, config, shutdown_trigger=stop.wait,
                                               task_status=task_status)

            await tg.start(run)
            task_status.started(bound)
            try:
                await anyio.sleep_forever()
            finally:
                stop.set()
    finally:
        sock.close()


def load_worker(spec: WorkerSpec, client: Client) -> Worker:
    """A worker from ``"module:attr"`` (the module is looked for in the current
    directory too, like ``python -m``), or from what it names: a callable taking
    the client and returning a Worker, or a dict of Worker keyword arguments
    (``{"workflows": [...], "activities": [...]}``)."""
    target: Any = spec
    if isinstance(spec, str):
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise ConfigurationError(
                f"worker {spec!r} must be MODULE:ATTR, e.g. 'myapp.worker:make_worker'")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(
                f"cannot import the worker module {module_name!r}: {exc}") from exc
        target = getattr(module, attr, None)
        if target is None:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attr!r}")
    if isinstance(target, Mapping):
        return Worker(client, **dict(target))
    if callable(target):
        worker = target(client)
        if isinstance(worker, Worker):
            return worker
        raise ConfigurationError(
            f"{spec} returned {type(worker).__name__}, not a durable.Worker")
    raise ConfigurationError(
        f"{spec} must be a callable taking the client and returning a durable.Worker, or a "
        "dict of Worker arguments ({'workflows': [...], 'activities': [...]})")


async def serve_async(
    db_url: str,
    host: str = "127.0.0.1",
    port: int = 8233,
    *,
    tokens: Mapping[str, str] | None = None,
    tokens_file: str | os.PathLike[str] | None = None,
    worker: WorkerSpecs | None = None,
    max_wait: float = 60.0,
    public_metrics: bool = False,
    ui: bool = True,
    ui_secret: str | bytes | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_auth_failures: int = 10,
    stop: anyio.Event | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """`serve` inside a running event loop (asyncio or trio); see `serve`.

    Setting `stop` stops it gracefully: the server stops accepting, then the
    workers stop as on leaving their ``async with`` (runs released), and it
    returns. Cancelling it instead stops the workers abruptly (their runs
    stay held until their leases end)."""
    token_set = load_tokens(tokens, tokens_file)
    anonymous: str | None = None
    if not len(token_set):
        if not is_loopback(host):
            raise ConfigurationError(
                f"refusing to serve the control plane on {host}, which other machines can "
                "reach, without tokens: set DURABLE_TOKENS ('tok1:operator,tok2:viewer'), "
                "DURABLE_TOKENS_FILE or tokens=, or bind 127.0.0.1"
            )
        anonymous = "operator"
        log.warning(NO_TOKEN_BANNER, host=host,
                    allowed_hosts=["localhost", "127.0.0.1", "::1", *(allowed_hosts or ())])
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(connect(db_url))
        for spec in worker_specs(worker):
            await stack.enter_async_context(load_worker(spec, client))
        app = create_app(client, tokens, tokens_file=tokens_file, anonymous_role=anonymous,
                         max_wait=max_wait, public_metrics=public_metrics, ui=ui,
                         ui_secret=ui_secret, allowed_hosts=_hosts_for(host, allowed_hosts),
                         max_auth_failures=max_auth_failures)
        if stop is None:
            await serve_app(app, host=host, port=port, task_status=task_status)
            return
        async with anyio.create_task_group() as serving:
            bound = await serving.start(partial(serve_app, app, host=host, port=port))
            task_status.started(bound)
            await stop.wait()
            serving.cancel_scope.cancel()  # the server only: the workers stop on their own


def worker_specs(worker: WorkerSpecs | None) -> list[WorkerSpec]:
    """`worker` as a list of specs: none, one, or each of a list or tuple."""
    if worker is None:
        return []
    if isinstance(worker, (list, tuple)):
        return list(worker)
    return [worker]  # type: ignore[list-item]  # a str is a Sequence, but one spec


def urls(host: str, port: int) -> tuple[str, str]:
    """The API's and the web UI's addresses for a server listening on `host`:`port`."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    base = f"http://{shown}:{port}"
    return f"{base}/api", f"{base}/ui"


def _hosts_for(host: str, allowed_hosts: Sequence[str] | None) -> list[str] | None:
    """The names a served app answers to: those given plus the address it
    listens on (unless a wildcard address); None (the app's default) when
    none are given."""
    if allowed_hosts is None:
        return None
    names = list(allowed_hosts)
    bare = host.strip("[]")
    if bare not in ("0.0.0.0", "::", ""):
        names.append(bare)
    return names


def serve(
    db_url: str,
    host: str = "127.0.0.1",
    port: int = 8233,
    *,
    tokens: Mapping[str, str] | None = None,
    tokens_file: str | os.PathLike[str] | None = None,
    worker: WorkerSpecs | None = None,
    loop: str = "asyncio",
    max_wait: float = 60.0,
    public_metrics: bool = False,
    on_ready: Callable[[int], Any] | None = None,
    ui: bool = True,
    ui_secret: str | bytes | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_auth_failures: int = 10,
) -> None:
    """Serve the control plane for the storage at `db_url` until interrupted.

    - `host`, `port`: where to listen (``port=0``: any free port, passed to
      `on_ready`). A non-loopback `host` needs tokens.
    - `tokens` / `tokens_file`: bearer tokens and roles, merged with
      ``DURABLE_TOKENS`` and ``DURABLE_TOKENS_FILE``. With none on loopback,
      every request acts as operator (a warning is logged).
    - `worker`: ``"module:attr"``, a callable ``(client) -> durable.Worker`` or
      a dict of Worker arguments, run in this process on the same storage; or
      a list of them (several workers, e.g. on different task queues).
    - `loop`: ``"asyncio"`` (uvicorn) or ``"trio"`` (hypercorn).
    - `max_wait`: the longest long poll; `public_metrics`: /metrics without a token.
    - `ui`: serve the web UI at /ui (docs/ui.md); `ui_secret` signs its session
      cookies (else ``DURABLE_UI_SECRET``, else a random key per process).
    - `allowed_hosts`: the names clients reach the server by (``Host``
      header; ``*.example.com``, ``*`` for any), besides the address it
      listens on. Without tokens the loopback names are always allowed and
      nothing else by default (DNS rebinding); with tokens, any host by
      default (`durable.http.hosts`).
    - `max_auth_failures`: failed authentications per client address within a
      minute before it is refused with 429 for a while (0: no limit;
      `durable.http.throttle`).
    """
    if loop not in LOOPS:
        raise ConfigurationError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")

    async def main() -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            if threading.current_thread() is threading.main_thread():
                tg.start_soon(_stop_on_signal, stop)
            bound = await tg.start(partial(
                serve_async, db_url, host, port, tokens=tokens, tokens_file=tokens_file,
                worker=worker, max_wait=max_wait, public_metrics=public_metrics, ui=ui,
                ui_secret=ui_secret, allowed_hosts=allowed_hosts,
                max_auth_failures=max_auth_failures, stop=stop))
            api, web = urls(host, bound)
            log.info("control plane listening", url=api.removesuffix("/api"), loop=loop,
                     **({"ui": web} if ui else {}))
            if on_ready is not None:
                result = on_ready(bound)
                if inspect.isawaitable(result):
                    await result

    try:
        anyio.run(main, backend=loop)
    except* KeyboardInterrupt:  # Ctrl-C: trio raises it inside the task group
        pass
    except* Exception as group:  # one clear error, not a group of one
        leaves = group.exceptions
        if len(leaves) == 1 and not isinstance(leaves[0], BaseExceptionGroup):
            raise leaves[0] from None
        raise
