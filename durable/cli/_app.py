"""The command group, its global options, and the one place errors become exit codes.

A command is one small function (see `_commands`): it declares its click
arguments, and its body is an ``async def`` given a connected `durable.Client`
through `Session.run`. Everything around it (connecting from ``--db`` or
``--server``, choosing JSON or human output, turning exceptions into one line
on stderr and an exit code) lives here, once.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import click
from rich.console import Console

import durable

from .. import _validate
from .. import present as _fmt
from .._log import mask_password_in, mask_url

T = TypeVar("T")

# Exit codes (docs/cli.md, "Exit codes").
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_INTERRUPTED = 130

ENV_DB = "DURABLE_DB_URL"
ENV_SERVER = "DURABLE_SERVER_URL"
ENV_TOKEN = "DURABLE_TOKEN"
ENV_NAMESPACE = "DURABLE_NAMESPACE"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _colour_allowed(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and "NO_COLOR" not in os.environ


class CliError(click.ClickException):
    """An error shown as one line on stderr, ``durable: <label>: <message> (<fix>)``."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR, *, label: str = "error",
                 fix: str | None = None) -> None:
        text = _one_line(message)
        if fix and fix not in text:
            text = f"{text} ({fix})"
        super().__init__(text)
        # click declares exit_code on the class; each error here carries its own
        setattr(self, "exit_code", exit_code)  # noqa: B010
        self.label = label

    def format_message(self) -> str:
        return f"durable: {self.label}: {self.message}"

    def show(self, file: Any = None) -> None:
        stream = file if file is not None else sys.stderr
        line = _fmt.escape_surrogates(self.format_message())
        if _colour_allowed(stream):
            line = click.style(line, fg="red")
        click.echo(line, file=stream)


#: the group's own options: given after a command, click knows them not
_GLOBAL_OPTIONS = ("--db", "--server", "--token", "--namespace", "-n", "--debug")


def _global_option_misplaced(exc: click.UsageError) -> str | None:
    """The message for a global option given after the command
    (``durable serve --db URL``), which click refuses as "No such option":
    where it goes instead, with the command line rewritten. None for any
    other usage error."""
    if not isinstance(exc, click.NoSuchOption) or exc.option_name not in _GLOBAL_OPTIONS:
        return None
    command = exc.ctx.command_path.split(" ", 1)[-1] if exc.ctx is not None else "COMMAND"
    value = "" if exc.option_name == "--debug" else (" NS" if exc.option_name in (
        "--namespace", "-n") else " URL" if exc.option_name in ("--db", "--server") else " T")
    return (f"{exc.option_name} is a global option: give it before the command, "
            f"durable {exc.option_name}{value} {command} ...")


class OneLineUsageError(click.UsageError):
    """A usage error as one line, pointing at the command's --help (exit code 2)."""

    def __init__(self, exc: click.UsageError) -> None:
        super().__init__(_global_option_misplaced(exc) or exc.format_message(), exc.ctx)

    def show(self, file: Any = None) -> None:
        stream = file if file is not None else sys.stderr
        path = self.ctx.command_path if self.ctx is not None else "durable"
        line = _fmt.escape_surrogates(
            f"{path}: usage error: {_one_line(self.message)} (see: {path} --help)")
        if _colour_allowed(stream):
            line = click.style(line, fg="red")
        click.echo(line, file=stream)


_REFUSED: tuple[type[BaseException], ...] = (
    durable.WorkflowAlreadyStarted,
    durable.RunNotCurrent,
    durable.RunAlreadyClosed,
    durable.PolicyRejected,
    durable.CapabilityUnsupported,
    durable.UpdateRejected,
    durable.ScheduleAlreadyExists,
)

_FIXES: dict[type[BaseException], str] = {
    durable.WorkflowNotFound: "check the id and --namespace; `durable list` shows the runs",
    durable.RunNotCurrent: "leave out --run to act on the workflow's current run",
    durable.RunAlreadyClosed: "the run is closed; `durable describe ID` shows how it ended",
    durable.CapabilityUnsupported: (
        "`durable cancel ID` or `durable terminate ID` stop it without cleanup"
    ),
    durable.ScheduleNotFound: (
        "check the id and --namespace; `durable schedule list` shows the schedules"
    ),
    durable.ScheduleAlreadyExists: (
        "pick another id, or change it with `durable schedule update`"
    ),
    durable.StorageUnavailable: (
        "check --db / DURABLE_DB_URL and that the database is reachable"
    ),
}


def error_from_exception(exc: BaseException) -> CliError:
    """The one line and exit code for an exception a command body raised."""
    if isinstance(exc, CliError):
        return exc
    fix = next((text for cls, text in _FIXES.items() if isinstance(exc, cls)), None)
    message = str(exc) or type(exc).__name__
    if isinstance(exc, durable.QueryFailed) and "no worker answered" in message:
        fix = ("`durable describe ID` shows the run's type and task queue; a worker with "
               "that type must be running to answer")
    if isinstance(exc, durable.WorkflowNotFound | durable.ScheduleNotFound):
        return CliError(message, EXIT_NOT_FOUND, label="not found", fix=fix)
    if isinstance(exc, durable.WorkflowAlreadyStarted):
        # The engine's text names a Python option; on the command line the fix is
        # --id, and --id-reuse return_existing_active helps only while it is open
        if exc.closed:
            again = ("" if exc.status == "completed" else
                     ", --id-reuse allow_duplicate_failed_only starts it again")
            return CliError(
                f"workflow id {exc.workflow_id!r} was used by a run that closed {exc.status} "
                f"(run {exc.run_id}); an id is used once in a namespace, closed runs included",
                EXIT_REFUSED, label="refused",
                fix=f"`durable result {exc.workflow_id}` prints its outcome{again}, "
                    "or pick another --id")
        held = f"run {exc.run_id}, {exc.status}" if exc.status else f"run {exc.run_id}"
        return CliError(f"workflow id {exc.workflow_id!r} is already in use ({held})",
                        EXIT_REFUSED, label="refused",
                        fix="pick another --id, or --id-reuse return_existing_active")
    if isinstance(exc, durable.ScheduleAlreadyExists):
        # the engine's text names the Python API's fix; the fix here is a command
        return CliError(f"schedule {exc.schedule_id!r} already exists in namespace "
                        f"{exc.namespace!r}", EXIT_REFUSED, label="refused", fix=fix)
    if isinstance(exc, _REFUSED):
        return CliError(message, EXIT_REFUSED, label="refused", fix=fix)
    if isinstance(exc, durable.DurableError):
        return CliError(message, EXIT_ERROR, fix=fix)
    if isinstance(exc, OSError):
        return CliError(f"{type(exc).__name__}: {message}", EXIT_ERROR)
    return CliError(f"{type(exc).__name__}: {message}", EXIT_ERROR,
                    fix="run with --debug for the traceback")


class Output:
    """Where a command writes: rich consoles on stdout/stderr, or JSON.

    Rich turns colour and styles off by itself when the stream is not a
    terminal and when ``NO_COLOR`` is set; `plain` tells views to avoid
    anything that only colour would distinguish.
    """

    def __init__(self) -> None:
        self.json = False
        self.console = make_console(sys.stdout)
        self.err = make_console(sys.stderr)

    @property
    def plain(self) -> bool:
        return self.console.no_color or self.console.color_system is None

    @property
    def unicode(self) -> bool:
        return self.console.encoding.lower().startswith("utf")

    def glyph(self, fancy: str, ascii_: str) -> str:
        return fancy if self.unicode else ascii_

    def emit(self, data: Any, human: Callable[[Output, Any], None], *,
             wire: Any = None) -> None:
        """JSON when --json was given (`wire`, the wire model's shape of it, when
        given, else `data`), else the human view of `data`."""
        if self.json:
            self.print_json(data if wire is None else wire)
        else:
            human(self, data)

    def print_json(self, data: Any, *, lines: bool = False) -> None:
        text = _fmt.dumps(data, indent=None if lines else 2)
        self.console.file.write(text + "\n")
        self.console.file.flush()

    def note(self, text: str) -> None:
        """A status line for humans on stderr (so stdout stays clean for pipes)."""
        self.err.print(text, markup=False, highlight=False, soft_wrap=True)


class _TrimmedLines:
    """A text stream that drops the spaces rich pads table lines with.

    On a terminal the padding is invisible; in a file or a pipe it turns every
    line of a table into a line ending in blanks, which diff, grep and
    copy-paste then carry around.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""

    @property
    def encoding(self) -> str:
        return str(getattr(self._stream, "encoding", None) or "utf-8")

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write("\n".join(line.rstrip(" ") for line in lines) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()


class _Escaping:
    """A text stream that writes lone surrogates as escapes (`_fmt.escape_surrogates`),
    so a stored value no UTF-8 output can encode is shown instead of failing
    the command. Everything else is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_fmt.escape_surrogates(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def make_console(stream: Any) -> Console:
    """A console on `stream`; wide and without padding when writing to a pipe."""
    isatty = getattr(stream, "isatty", None)
    tty = bool(isatty and isatty())
    if tty:
        return Console(file=cast(IO[str], _Escaping(stream)), highlight=False, emoji=False)
    width = None if "COLUMNS" in os.environ else 160
    trimmed = cast(IO[str], _TrimmedLines(_Escaping(stream)))  # write/flush/isatty/encoding
    return Console(file=trimmed, highlight=False, width=width, emoji=False)


@dataclass
class Session:
    """The global options of one invocation, and the output it writes to."""

    db: str | None
    server: str | None
    token: str | None
    namespace: str
    debug: bool
    out: Output = field(default_factory=Output)

    def run(self, body: Callable[[durable.Client], Awaitable[T]], *,
            create_database: bool = False, backend: str = "asyncio") -> T:
        """Connect, run the async `body` with the client, close; on `backend`."""

        async def main() -> T:
            client = await self._connect(create_database)
            try:
                return await body(client)
            except Exception as exc:
                if self.server and _is_transport_error(exc):
                    raise self._server_error(exc) from exc
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await client.close()

        return anyio.run(main, backend=backend)

    def _server_error(self, exc: Exception) -> CliError:
        """One line for a control plane that cannot be used (at connect or at a request)."""
        if self.debug:
            traceback.print_exc()
        if isinstance(exc, durable.ConfigurationError) and "no storage driver" in str(exc):
            detail = ("this installation of durable has no remote client for http(s) URLs; "
                      "use --db URL with the database itself")
        else:
            detail = str(exc) or type(exc).__name__
        server = self.server or ""
        return CliError(mask_password_in(
            f"cannot use the control plane at {mask_url(server)}: {detail}", server),
            fix="check --server / DURABLE_SERVER_URL and --token / DURABLE_TOKEN")

    def describe_target(self) -> str:
        return (f"control plane {mask_url(self.server)}" if self.server
                else f"database {mask_url(self.db or '')}")

    async def _connect(self, create_database: bool) -> durable.Client:
        if self.db and self.server:
            raise click.UsageError(
                f"give --db or --server, not both (from the options or {ENV_DB} / {ENV_SERVER})"
            )
        if self.server:
            kwargs: dict[str, Any] = {"namespace": self.namespace}
            if self.token:
                kwargs["token"] = self.token
            try:
                client: durable.Client = await durable.connect(self.server, **kwargs)
            except Exception as exc:
                raise self._server_error(exc) from exc
            return client
        if not self.db:
            raise click.UsageError(
                f"no database or server given: pass --db URL (e.g. --db sqlite:///app.db) or "
                f"--server URL --token T before the command, or set {ENV_DB} / {ENV_SERVER}"
            )
        options: dict[str, Any] = {}
        if not create_database:
            _check_sqlite_exists(self.db)
            if urlsplit(self.db).scheme.split("+", 1)[0].lower() in ("postgresql", "postgres"):
                options["create_schema"] = False  # a mistyped ?schema= is refused, not created
        embedded: durable.Client = await durable.connect(self.db, namespace=self.namespace,
                                                         **options)
        return embedded


def _is_transport_error(exc: Exception) -> bool:
    """An error about reaching the server, not about the workflow asked for."""
    if isinstance(exc, click.ClickException):
        return False
    if isinstance(exc, durable.DurableError):
        return isinstance(exc, durable.StorageUnavailable)
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in ("httpx", "httpcore")


def _check_sqlite_exists(url: str) -> None:
    """Refuse to read a SQLite file that is not there (opening would create it empty)."""
    parts = urlsplit(url)
    if not parts.scheme.lower().startswith("sqlite"):
        return
    if parts.netloc == ":memory:" or parts.path in ("/:memory:", ":memory:") or parts.netloc:
        return  # in memory, or malformed: the driver names the problem
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if path and not Path(path).exists():
        raise CliError(
            f"no SQLite database at {str(Path(path).resolve())!r} (from {url!r})"
            + _validate.sqlite_path_hint(path),
            fix="check --db / DURABLE_DB_URL; `durable worker` creates the database",
        )


class DurableGroup(click.Group):
    """The ``durable`` group: usage errors on one line, exceptions mapped to exit codes."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt as exc:
            raise CliError("stopped by Ctrl-C", EXIT_INTERRUPTED, label="interrupted") from exc
        except Exception as exc:
            session = ctx.find_object(Session)
            if session is not None and session.debug:
                traceback.print_exc()
            raise error_from_exception(exc) from exc


def fail(message: str, exit_code: int = EXIT_ERROR, *, fix: str | None = None) -> NoReturn:
    raise CliError(message, exit_code, fix=fix)


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    session = ctx.find_object(Session)
    if session is not None and value:
        session.out.json = True


json_option = click.option(
    "--json", is_flag=True, expose_value=False, callback=_set_json, is_eager=True,
    help="Print machine-readable JSON (its shape is documented in docs/cli.md).",
)


@click.group(cls=DurableGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                 "max_content_width": 100})
@click.option("--db", metavar="URL", envvar=ENV_DB, show_envvar=True,
              help="Storage URL of an embedded deployment, e.g. sqlite:///app.db or "
                   "postgresql://user@host/db.")
@click.option("--server", metavar="URL", envvar=ENV_SERVER, show_envvar=True,
              help="URL of a durable control plane (durable serve), e.g. http://host:8233.")
@click.option("--token", metavar="T", envvar=ENV_TOKEN, show_envvar=True,
              help="Bearer token for --server.")
@click.option("--namespace", "-n", metavar="NS", envvar=ENV_NAMESPACE, show_envvar=True,
              default="default", show_default=True, help="Namespace of the workflows.")
@click.option("--debug", is_flag=True, envvar="DURABLE_DEBUG",
              help="Show the traceback of an error.")
@click.version_option(durable.__version__, "--version", prog_name="durable")
@click.pass_context
def cli(ctx: click.Context, db: str | None, server: str | None, token: str | None,
        namespace: str, debug: bool) -> None:
    """See and steer durable workflows from a terminal.

    Global options go before the command, --json after it:

    \b
        durable --db sqlite:///app.db list --status running --json

    \b
    Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 refused.
    Shell completion: eval "$(_DURABLE_COMPLETE=bash_source durable)"
    Documentation: docs/cli.md
    """
    ctx.obj = Session(db=db or None, server=server or None, token=token or None,
                      namespace=namespace, debug=debug)

