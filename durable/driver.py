"""The storage seam: a driver is a dialect plus an executor.

Everything durable stores goes through domain transactions written once, in
`durable.store`, as *programs*: generators that yield statements (`Stmt`,
with ``?`` placeholders) and receive their results (`durable.program`,
re-exported here with the wake-ups of `durable.wakes`: this module is the
face a driver author reads). A driver only has to

- open and close its connection(s), creating or checking the schema
  (`durable.store.schema` / `durable.store.migrations`);
- ``run(program, write=...)``: execute one program as ONE transaction and
  return its value, publishing the wake-ups the program collected once it
  has committed;
- ``watch()``: notice other processes' commits and publish `Wake.any()`
  (or finer wake-ups, `durable.wakes`) on its `hub`;
- name its `dialect`: the few SQL fragments that differ between databases,
  plus optional hooks for statements only one database can do in one round
  trip (PostgreSQL's data-modifying CTEs for a run's local steps, for a
  group of runs' local steps, and for a claim).

Policy (fencing, retries, timeouts, cancellation, parent close) lives above
this seam, so a driver for another SQL database is a dialect and an executor;
see docs/design/writing-a-driver.md. Drivers are found by URL scheme through
the ``durable.drivers`` entry-point group (or `register_driver` in-process);
core code never imports a driver module.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from .errors import ConfigurationError
from .program import (
    Program,
    Row,
    Stmt,
    StmtMode,
    drive,
    drive_sync,
    ex,
    many,
    placeholders,
    q,
    q1,
)
from .wakes import Wake, WakeHub, WakeKind

#: the face a driver's author reads (docs/api.md, "durable.driver")
__all__ = [
    "Dialect", "Driver", "Program", "ProgramFactory", "Row", "Stmt", "StmtMode", "Tx", "Wake",
    "WakeHub", "WakeKind", "drive", "drive_sync", "ex", "many", "placeholders", "q", "q1",
    "register_driver",
]

if TYPE_CHECKING:
    from .store.records import CommitResult
    from .store.writes import RunWrites

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Dialect:
    """The SQL vocabulary the store needs, as one database speaks it.

    The store's programs are written once (`durable.store`); where databases
    differ they ask the dialect: row locks, what a key column and a text
    column are, whether ``UPDATE ... RETURNING`` exists, whether an index
    may be partial, how to quote a column named like a keyword, whether a
    ``LIMIT`` may be a subquery. The defaults are SQLite's: no row locks
    (``BEGIN IMMEDIATE`` takes the database's write lock up front). A driver
    subclasses it for its database; it names no database in the store.
    """

    name = "sqlite"
    #: appended to a SELECT that must lock the rows it reads until commit
    lock = ""
    #: appended to a claim's SELECT so concurrent claimers skip each other's rows
    skip_locked = ""
    #: column type names used by the schema
    real = "REAL"
    integer = "INTEGER"
    serial = "INTEGER"
    #: a text column outside keys and indexes (JSON, payloads, messages)
    text = "TEXT"
    #: appended to every CREATE TABLE (MariaDB: engine, charset, collation)
    table_options = ""
    #: ``UPDATE ... RETURNING`` exists; without it `durable.store.returning`
    #: locks, updates and reads back (MariaDB 10.11 has INSERT/DELETE
    #: ... RETURNING only)
    returning = True
    #: an index may have a WHERE clause; without it the index covers every row
    #: (a unique index still admits many NULLs, as a partial one would)
    partial_indexes = True
    #: a LIMIT may be a scalar subquery (a claim's fair share computed in the
    #: statement itself); without it the share is read first, then bound as
    #: ``LIMIT ?``
    limit_subquery = True
    #: PostgreSQL-style data-modifying CTEs with array parameters (``unnest``):
    #: a claim, a group of runs' events and a group commit are one statement
    #: each (`durable.store.fastpath`); SQLite, MariaDB: no
    writable_cte = False
    #: `local_steps_group` runs inside the commit's transaction (never
    #: ``autocommit``) and gives None for a run that failed its fence, and
    #: the database has no row locks to order (SQLite's write lock covers
    #: all): a group commit then records its runs of local steps only with
    #: that program and its other runs by the general path, in the same
    #: transaction (`durable.store.commit`). Without it a group takes the
    #: group program only when every run in it is local steps only.
    steps_group_mixed = False
    #: the owner's close of a run with no open work (`durable.store.closing.
    #: close_owned_in_one`) is a fenced ``UPDATE ... RETURNING`` of the run's
    #: row, then its close event and its instance's row, instead of a locking
    #: read of the row, a read of its open work and the general close (where
    #: `writable_cte`, the three are one statement whatever this says)
    owned_close_returning = False
    #: array parameters joined ``LATERAL`` (``unnest(CAST(? AS TEXT[]))``): a
    #: read of a batch's rows by key is then one statement of fixed text whose
    #: plan probes the key for each element whatever the planner's statistics
    #: (PostgreSQL; elsewhere an ``IN`` list, which SQLite and MariaDB probe
    #: by key without statistics)
    lateral_arrays = False
    #: ``executemany`` of any statement costs about one round trip (SQLite: in
    #: process; PostgreSQL: asyncpg pipelines it), so a batch's UPDATE goes row
    #: by row by primary key; False (MariaDB's client sends each row of a non-
    #: INSERT apart): one UPDATE of ``CASE`` expressions over the batch's keys
    pipelined_many = True
    #: the most parameters one statement may bind: statements over a batch (the
    #: scheduler's pass, `durable.store.schedule_pass`) split to stay under it.
    #: 999 by default, the lowest limit of the databases we know (SQLite
    #: before 3.32)
    max_params = 999
    #: a statement that makes the space of deleted rows reusable, run outside a
    #: transaction after retention deleted runs (``{tables}``: a comma-separated
    #: list); None where the database reuses it by itself (SQLite's free pages)
    vacuum: str | None = None

    def key_type(self, length: int) -> str:
        """The type of a text column in a key or an index, holding up to
        `length` characters (ids and names: 255, `durable._validate`); TEXT
        by default. MariaDB cannot index a TEXT: a VARCHAR there."""
        return "TEXT"

    def index_text(self, column: str) -> str:
        """A `text` column as an index names it: whole by default; MariaDB
        indexes a prefix of a LONGTEXT only."""
        return column

    def quote(self, name: str) -> str:
        """A column or table name quoted as an identifier (``key`` is a keyword
        in MariaDB); the SQL standard's double quotes by default."""
        return f'"{name}"'

    def local_steps(
        self, batch: RunWrites, now: float, *, autocommit: bool
    ) -> Program[CommitResult | None] | None:
        """A short program recording a batch of one run's successful local
        steps, or None to use the general commit path (the default).

        The shipped drivers return `durable.store.fastpath.local_steps`,
        which picks its statements by this dialect's capabilities. Called
        only for batches of successful local steps that need no cancellation
        bookkeeping; it must store exactly what the general path stores and
        fence the run exactly as it does (`durable.store.fastpath.fence`).
        When the fence matches no row, the program may return None, having
        written nothing: the general path then runs in the same transaction
        to give the precise outcome. A program whose statement is
        `autocommit` must return a result instead (nothing can follow it).
        """
        return None

    def local_steps_group(
        self, batches: list[RunWrites], now: float
    ) -> Program[Sequence[CommitResult | None]] | None:
        """A program recording SEVERAL runs' batches of successful local steps
        (a group commit) in a few statements, one result per batch in order,
        or None to record them run by run (the default).

        Called only when every batch passes `RunWrites.local_steps_only`. Each
        run is fenced on its own, as `local_steps` would fence it alone: a run
        whose fence fails has nothing of it recorded, whatever the others
        get, and its result is ``CommitResult(run_id, False)``, or None when
        the program does not commit on its own: the general path then runs
        for that run in the same transaction and gives the precise outcome.
        It must lock the runs in run_id order (the store's lock order). A
        self-committing (``autocommit``) statement must be the program's only
        one.
        """
        return None


@dataclass
class Tx:
    """Per-transaction context handed to programs: the dialect and the
    wake-ups to publish once the transaction has committed."""

    dialect: Dialect
    wakes: list[Wake] = field(default_factory=list)
    #: how this driver tells other processes of wake-ups from INSIDE a
    #: statement: the channels and payloads to send for them (PostgreSQL:
    #: ``pg_notify(channel, payload)``, delivered when the statement's
    #: transaction commits), so that a self-committing statement carries its
    #: own notification and still costs one round trip; None where a driver
    #: cannot. A program that used it adds those wake-ups with `wake` after
    #: the statement, so that they are published in this process only.
    notices: Callable[[Iterable[Wake]], tuple[list[str], list[str]]] | None = None
    #: the process that a ``RUNS`` wake-up of new work on a task queue
    #: (`namespace`, `task_queue`; `now` on the caller's clock) is addressed to
    #: (`durable.wakes.Wake.to`), or None: every process of the queue hears
    #: it. Chosen without a round trip, from what the driver knows already
    #: (PostgreSQL: `durable_postgres.addressing.Addressing.peek`), because a
    #: program is a synchronous generator and a worker's commit must not wait
    #: for a read; None where a driver does not address wake-ups (SQLite,
    #: MariaDB). Use it through `durable.store.runs.addressee`.
    addressee: Callable[[str, str, float], str | None] | None = None
    #: the task queues, as (namespace, name), that this process knows to be
    #: limited by a count of slots (`durable.wakes.WakeHub.slot_limited`, which
    #: a driver passes): a program that frees a slot of one (a close, a
    #: release) wakes the queue's claimers everywhere, in this commit
    #: (`durable.store.runs.slot_freed`); empty: no program wakes for a slot
    slot_limited: Collection[tuple[str, str]] = frozenset()
    #: the task queues, as (namespace, name), that this process knows to limit
    #: remote activity attempts by a count (``max_running_activities``;
    #: `durable.wakes.WakeHub.activity_slot_limited`): an attempt of one that
    #: stops running wakes the queue's activity claimers, in this commit
    #: (`durable.store.activities.activity_slot_freed`)
    activity_slot_limited: Collection[tuple[str, str]] = frozenset()

    @property
    def lock(self) -> str:
        return self.dialect.lock

    @property
    def skip_locked(self) -> str:
        return self.dialect.skip_locked

    def wake(self, wake: Wake) -> None:
        """Publish `wake` once this transaction has committed (`durable.wakes`)."""
        self.wakes.append(wake)


ProgramFactory = Callable[[Tx], Program[T]]


@runtime_checkable
class Driver(Protocol):
    """A storage driver: open/close, run a program as one transaction, watch.

    `hub` is where the driver publishes wake-ups: those collected by each
    committed program, and `Wake.any()` when `watch()` notices another
    process's commit. `dialect` tells the programs how to write their SQL.

    Optional: a driver class may set ``runs_shielded = True`` when `run` is
    shielded whole from cancellation, from before its first await to its
    end (the built-in drivers are): a caller cancelled meanwhile still gets
    the transaction's outcome, and the cancellation lands after. The worker's
    group committer then enters no cancel scope of its own for a commit it
    sends alone (`runs_shielded`). A subclass whose `run` awaits anything
    outside that shield must set it back to False.
    """

    hub: WakeHub
    dialect: Dialect

    async def open(self) -> None:
        """Connect, and create or check the schema.

        Raises `ConfigurationError` naming what to fix when the database
        cannot be used (unreachable, bad URL, a schema from a newer version).
        """
        ...

    async def close(self) -> None:
        """Release connections and background threads; idempotent."""
        ...

    async def run(self, program: ProgramFactory[T], *, write: bool = True) -> T:
        """Run ``program(tx)`` as one transaction and return its value.

        The factory may be called again if the driver retries a transaction
        that certainly did not commit (a lost connection before COMMIT, a
        serialization conflict); once the transaction committed, its
        wake-ups are published on `hub`. An exception raised by the program
        rolls the transaction back and propagates unchanged. Raises
        `StorageUnavailable` when storage cannot be reached; with
        ``outcome_unknown=True`` when COMMIT (or a self-committing statement,
        `Stmt.autocommit`) was sent but not acknowledged.
        `write=False` promises the program only reads.
        """
        ...

    async def watch(self) -> None:
        """Run until cancelled, publishing `Wake.any()` on `hub` when
        another process commits (SQLite: data_version polling; PostgreSQL:
        LISTEN/NOTIFY with a polling fallback)."""
        ...


def runs_shielded(driver: object) -> bool:
    """Whether `driver`'s class promises a `run` shielded whole (see `Driver`);
    read from the class, so that a wrapper forwarding attributes never claims it."""
    return getattr(type(driver), "runs_shielded", False) is True


def urgent(program: ProgramFactory[T]) -> ProgramFactory[T]:
    """Mark `program` as one whose caller keeps time: the watchdog's pass,
    which records a deadline as enforced at the instant it runs. A driver
    that serves transactions one after another (SQLite's database thread)
    may run it ahead of the others queued with it, in a transaction of its
    own, and hand its outcome back before theirs; any other may ignore the
    mark. Why: a deadline that falls while the watchdog's pass is on its way
    waits for the next pass (docs/benchmarks.md, "Heartbeat-timeout lateness
    tail")."""
    program.durable_urgent = True  # type: ignore[attr-defined]
    return program


def is_urgent(program: object) -> bool:
    """Whether `program` was marked by `urgent`."""
    return getattr(program, "durable_urgent", False) is True


def brief(program: ProgramFactory[T]) -> ProgramFactory[T]:
    """Mark `program` as brief: its statements are bounded by the rows it
    names by key (no scan, no wait on anything but the write lock). A
    worker's step commit; a client's start (one instance's rows, decision
    (ba)); a read of one run by its id. A driver whose commit costs no fsync
    may run it on the caller's own thread while its storage is idle (SQLite
    at ``synchronous=NORMAL``: decision (aj)); any other may ignore the
    mark. Why only these: the event loop then waits for the transaction,
    which is harmless for a few rows by key and not for a claim, a scan or
    a watchdog pass."""
    program.durable_brief = True  # type: ignore[attr-defined]
    return program


def is_brief(program: object) -> bool:
    """Whether `program` was marked by `brief`."""
    return getattr(program, "durable_brief", False) is True


_registered: dict[str, Callable[..., Driver]] = {}
# the factories found through the entry points, by scheme: reading them means
# reading every installed distribution's metadata (~6 ms measured, more on a busy host),
# which every connect paid. A scheme not found is looked up again next time.
_from_entry_points: dict[str, Callable[..., Driver]] = {}


def register_driver(scheme: str, factory: Callable[..., Driver]) -> None:
    """Make `factory(url, **options)` the driver for URLs with this scheme, in
    this process (ahead of the ``durable.drivers`` entry points). For tests
    and for drivers shipped inside an application rather than a package."""
    if not scheme or not scheme.replace("-", "").replace(".", "").isalnum():
        raise ConfigurationError(
            f"driver scheme {scheme!r} must be letters, digits, '-' or '.', e.g. 'mysql'"
        )
    _registered[scheme.lower()] = factory


def url_scheme(url: str) -> str:
    """The scheme of a storage URL, lower-cased, without a ``+variant``."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    return scheme.split("+", 1)[0]


def driver_factory(url: str) -> Callable[..., Driver]:
    """The driver registered for the URL's scheme."""
    scheme = url_scheme(url)
    if not scheme:
        raise ConfigurationError(
            f"storage URL {url!r} has no scheme; use e.g. 'sqlite:///app.db', "
            "'sqlite://:memory:' or 'postgresql://user@host/db'"
        )
    if scheme in _registered:
        return _registered[scheme]
    if scheme in _from_entry_points:
        return _from_entry_points[scheme]
    entry_points = metadata.entry_points(group="durable.drivers")
    for entry_point in entry_points:
        if entry_point.name == scheme:
            factory: Callable[..., Driver] = entry_point.load()
            _from_entry_points[scheme] = factory
            return factory
    known = sorted({ep.name for ep in entry_points} | set(_registered))
    raise ConfigurationError(
        f"no storage driver for URL scheme {scheme!r} in {url!r}; installed drivers: "
        f"{', '.join(known) or 'none'} (PostgreSQL needs `pip install durable-sdk[postgres]`)"
    )
