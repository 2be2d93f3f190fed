"""``durable worker``, ``durable serve`` and ``durable repair-pass``: operating a deployment.

The commands that run something in this process rather than look at runs:
a worker for what ``MODULE:ATTR`` lists (built by `_worker`), the HTTP
control plane (optionally with workers beside it), and one pass of deadline
enforcement. Each is one small function as in `_commands`.
"""

from __future__ import annotations

from typing import Any

import click

import durable

from . import _views
from ._app import CliError, Session, json_option

pass_session = click.make_pass_decorator(Session)


@click.command("repair-pass", short_help="Enforce every deadline that is due, once.")
@click.option("--dry-run", is_flag=True,
              help="Enforce nothing: show the deadlines passed and not enforced yet.")
@json_option
@pass_session
def repair_pass(session: Session, dry_run: bool) -> None:
    """Enforce every deadline that is due now, once (works with no worker running).

    With --dry-run, only show what it would enforce, by kind, and how late the
    oldest is: every worker's watchdog enforces deadlines as they fall due, so
    anything seconds late means none runs in the namespace."""

    async def body(client: durable.Client) -> dict[str, Any]:
        if dry_run:
            return dict(await client.overdue_deadlines())
        counts = await client.repair_pass()
        return {"repaired": dict(counts), "total": sum(counts.values())}

    session.out.emit(session.run(body), _views.overdue if dry_run else _views.repair)


@click.command(short_help="Run a worker for what MODULE:ATTR lists.")
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--task-queue", metavar="Q", help="Override the spec's task queue.")
@click.option("--identity", metavar="NAME", help="Worker id shown in describe() and receipts.")
@click.option("--build-id", metavar="ID", envvar="DURABLE_BUILD_ID", show_envvar=True,
              help="Override the spec's build_id (a release tag or commit: the upgrade gate, "
                   "docs/deploying.md).")
@click.option("--backend", type=click.Choice(["asyncio", "trio"]), default="asyncio",
              show_default=True, help="Event loop to run the worker on.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                               case_sensitive=False),
              default="INFO", show_default=True, help="Level of the worker's log on stderr.")
@pass_session
def worker(session: Session, target: str, task_queue: str | None, identity: str | None,
           build_id: str | None, backend: str, log_level: str) -> None:
    """Run a worker for the workflows and activities MODULE:ATTR names.

    ATTR is a spec, a dict or object listing them:

    \b
        WORKER = {"workflows": [order], "activities": [charge], "task_queue": "orders"}

    or a factory: a function taking the client and returning a durable.Worker.
    MODULE is imported from the current directory too. SIGINT/SIGTERM stop
    the worker gracefully; a second signal exits at once.
    """
    from . import _worker

    if session.server:
        raise click.UsageError(
            "a worker reads and writes the database itself: give --db URL (or DURABLE_DB_URL), "
            "not --server")
    loaded = _worker.load_target(target)
    _worker.configure_logging(log_level)
    overrides = {"task_queue": task_queue, "identity": identity, "build_id": build_id}
    session.run(lambda client: _worker.serve(client, loaded, target, overrides, session.out),
                create_database=True, backend=backend)



@click.command(short_help="Serve the HTTP control plane (and, optionally, a worker).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but loopback needs tokens.")
@click.option("--port", type=click.IntRange(0, 65535), default=8233, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--worker", "worker_targets", metavar="MODULE:ATTR", multiple=True,
              help="Also run a worker in this process (a spec or factory, as `durable "
                   "worker`); repeat for several (e.g. one per task queue).")
@click.option("--loop", type=click.Choice(["asyncio", "trio"]), default="asyncio",
              show_default=True, help="asyncio runs uvicorn; trio runs hypercorn.")
@click.option("--tokens-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Bearer tokens, one `token:role` per line (also DURABLE_TOKENS).")
@click.option("--max-wait", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              help="The longest long poll a request may ask for, in seconds.")
@click.option("--public-metrics", is_flag=True, help="Serve /metrics without a token.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A name clients reach the server by (the Host header; *.example.com for "
                   "subdomains, * for any); repeat for several. Others are refused (DNS "
                   "rebinding). Default: loopback names without tokens, any host with them.")
@click.option("--max-auth-failures", type=click.IntRange(0), default=10, show_default=True,
              help="Failed authentications per client address within a minute before it is "
                   "refused (429) for a while; 0: no limit (e.g. behind a proxy that limits).")
@click.option("--build-id", metavar="ID", envvar="DURABLE_BUILD_ID", show_envvar=True,
              help="The build id of the --worker specs (as `durable worker --build-id`: the "
                   "upgrade gate, docs/deploying.md).")
@click.option("--ui/--no-ui", default=True, show_default=True,
              help="Serve the web UI at /ui (the API is the same either way).")
@pass_session
def serve(session: Session, host: str, port: int, worker_targets: tuple[str, ...], loop: str,
          tokens_file: str | None, max_wait: float, public_metrics: bool, ui: bool,
          allowed_hosts: tuple[str, ...], max_auth_failures: int,
          build_id: str | None = None) -> None:
    """Serve the control plane for the database of --db (DURABLE_DB_URL).

    Operators and tools (curl, `durable --server URL ...`, the web UI at /ui)
    then reach the runs over HTTP. Tokens come from DURABLE_TOKENS
    ("tok1:operator,tok2:viewer") or --tokens-file; without tokens only a
    loopback address is allowed. The UI's session key comes from
    DURABLE_UI_SECRET (several servers behind one address need the same).
    Ctrl-C stops it.
    """
    if session.server or not session.db:
        raise click.UsageError(
            "serve needs the database itself: give --db URL (or DURABLE_DB_URL)")
    try:
        from ..http.serve import serve as serve_http
    except ImportError as exc:
        raise CliError(f"the control plane is not installed ({exc.name} is missing)",
                       fix="pip install 'durable-sdk[server]'") from None
    from ..http.serve import urls
    from . import _worker

    specs: list[Any] = []
    for target in worker_targets:
        loaded = _worker.load_target(target)
        if _worker.is_spec(loaded):
            kwargs = _worker.spec_kwargs(loaded, target)
            if build_id is not None:  # the deploy pipeline's DURABLE_BUILD_ID too
                kwargs["build_id"] = build_id
            specs.append(kwargs)
        elif build_id is not None:
            # ignored silently, the worker would run without the upgrade gate
            raise CliError(f"{target} is a factory: set the build id in it",
                           fix="--build-id (DURABLE_BUILD_ID) applies to worker specs only; "
                               "unset it for this command, or pass a spec")
        else:
            specs.append(loaded)

    def ready(bound: int) -> None:
        api, web = urls(host, bound)
        session.out.note(f"durable serve: the API at {api}"
                         + (f", the web UI at {web}" if ui else "")
                         + (f"; {len(specs)} worker(s) in this process" if specs else "")
                         + " (Ctrl-C stops it)")

    _worker.configure_logging("INFO")
    try:
        serve_http(session.db, host, port, tokens_file=tokens_file, worker=specs or None,
                   loop=loop, max_wait=max_wait, public_metrics=public_metrics, ui=ui,
                   allowed_hosts=list(allowed_hosts) or None,
                   max_auth_failures=max_auth_failures, on_ready=ready)
    except KeyboardInterrupt:
        session.out.note("durable serve stopped")
