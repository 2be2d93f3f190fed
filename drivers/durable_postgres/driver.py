"""The PostgreSQL executor: programs as transactions on pooled asyncpg connections.

A step's cost is its round trips, so the driver spends as few as the
protocol allows: ``BEGIN``, one per statement (asyncpg keeps them prepared),
and one for ``NOTIFY`` + ``COMMIT`` sent together; programs that only read
skip ``BEGIN``/``COMMIT`` (under READ COMMITTED each statement has its own
snapshot either way); a released connection is not reset (our transactions
leave no session state), which asyncpg would otherwise do with a round trip
of its own. A transaction that certainly did not commit (a lost connection
before COMMIT, a serialization conflict) is re-run whole; a connection lost
during COMMIT, or during a program's one self-committing statement (a step,
a claim, a start: `Stmt.autocommit`), may have committed and is
`StorageUnavailable(outcome_unknown=True)`, which the store resolves by
reading back (`durable.store.Store`).

Kept whole: what makes a driver PostgreSQL's: its transactions, the
connections it keeps between them, and its notifications, which a commit
builds (`_notify`) from the same addresses its listener hears (`watch`) and
its starts choose (`start_addressee`). The pieces that stand alone are
modules of their own (the listener, the addressing of starts, the
connection's statements, the URL).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import asyncpg
import asyncpg.exceptions as pgerr

from durable._pooled import CommitOutcomeUnknown, Failure, PooledDriver
from durable.driver import Program, Tx, Wake
from durable.errors import ConfigurationError
from durable.store.migrations import SCHEMA_VERSION, migrate
from durable.store.schema import schema_statements, table_names
from durable.wakes import WakeKind, address, heard

from .addressing import APPLICATION_PREFIX, KEEP_EVERY, MEMBERS_SQL, Addressing
from .connection import CONFLICT, CONNECTION_LOST, discard, drive, execute, no_reset
from .dialect import PostgresDialect
from .listener import Listener, channel_for
from .url import channel_name, parse_url, quote_ident, quote_literal

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    from .connection import Connection, Pool

    #: a connection the pool handed out
    Pooled = PoolConnectionProxy[asyncpg.Record]

T = TypeVar("T")

# pg_advisory_xact_lock(class, key): the class names "durable schema DDL", the
# key the schema, so processes migrating different schemas do not queue.
_DDL_LOCK_CLASS = 0x64757261
# pg_try_advisory_xact_lock(class, key) of the statistics upkeep (one process at
# a time analyzes a schema's tables)
_STATISTICS_LOCK_CLASS = 0x64757262
#: real seconds between two looks at the planner's statistics (`keep_statistics`)
STATISTICS_EVERY = 30.0
# durable's tables changed enough since they were last analyzed, by autovacuum's
# default thresholds (50 rows plus a tenth of the table), while autovacuum is off
_ANALYZE_DUE = (
    "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
    "AND relname = ANY($1::text[]) AND n_mod_since_analyze > 50 + 0.1 * n_live_tup "
    "AND current_setting('autovacuum') = 'off' ORDER BY relname")
#: connections a driver keeps out of its pool between transactions (`_Lease`)
KEEP = 2
#: a kept connection goes back through the pool after this many transactions
KEEP_USES = 1000
# pg_notify payloads must stay under 8000 bytes; a larger set of keys is sent
# as `Wake.any()`, which every listener treats as "look at everything".
_MAX_PAYLOAD = 7000


class PostgresDriver(PooledDriver["Pool", "Connection"]):
    """Storage on PostgreSQL, shared by any number of worker processes.

    `min_pool`/`max_pool` bound the connection pool (plus one LISTEN
    connection while a worker watches); `poll_interval` is how often a
    watching worker looks at everything even without a notification;
    `retries` is how often a transaction is retried after a lost connection
    or a conflict before `StorageUnavailable` is raised; `command_timeout`
    bounds each statement, so a vanished server cannot hang a worker.
    `create_schema=False` refuses a ``?schema=NAME`` that does not exist
    yet (a mistyped name would otherwise be created, empty, and show no
    runs); ``durable`` CLI commands that only read pass it.

    The pool, the trio bridge, open/close and the retried transaction are
    `durable._pooled.PooledDriver`'s; this class says what is PostgreSQL's.
    """

    engine = "PostgreSQL"
    retry_base = 0.05
    connect_errors = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)

    def __init__(
        self,
        url: str,
        *,
        min_pool: int = 1,
        max_pool: int = 10,
        poll_interval: float = 1.0,
        connect_timeout: float = 10.0,
        command_timeout: float | None = 60.0,
        retries: int = 5,
        statement_cache_size: int = 512,
        create_schema: bool = True,
    ) -> None:
        if poll_interval <= 0:
            raise ConfigurationError("poll_interval must be positive")
        self._target = parse_url(url)
        super().__init__(url, self._target.masked, PostgresDialect(), min_pool=min_pool,
                         max_pool=max_pool, connect_timeout=connect_timeout, retries=retries,
                         logger="durable.postgres")
        self.schema = self._target.schema
        self.channel = channel_name(self.schema)
        self.poll_interval = poll_interval
        self.command_timeout = command_timeout
        self.statement_cache_size = statement_cache_size
        self.create_schema = create_schema
        self.application_name = (self._target.application_name
                                 or f"{APPLICATION_PREFIX}{self.origin}")
        # starts may be addressed to this process only where its connections
        # say who it is (`addressing`: a member is alive while they are there)
        if self._target.application_name is None:
            self.hub.address = self.origin
        #: the channel of the starts addressed to this process (`addressing`)
        self.own_channel = channel_for(self.channel, ("to", self.origin))
        self._listener = Listener(connect=self._connect_one, channel=self.channel,
                                  origin=self.origin, log=self.log,
                                  own_channel=self.own_channel)
        #: whom a start is addressed to (`start_addressee`)
        self.addressing = Addressing(self._members, self.log)
        # a worker's commits of new work address it the same way, without a read
        self._tx_addressee = self._commit_addressee
        self._wanted: frozenset[str] | None = None  # None: to be computed again
        self.hub.on_wanted = self._on_wanted
        self._tx_notices = self._notices
        #: connections taken from the pool and kept between transactions (`_Lease`)
        self._kept: list[tuple[Pooled, int]] = []  # and its transactions

    # ---------------------------------------------------------------- lifecycle

    def _server_settings(self) -> dict[str, str]:
        settings = {"standard_conforming_strings": "on"}
        if self._target.application_name is None:
            settings["application_name"] = self.application_name
        if self.schema is not None:
            settings["search_path"] = quote_ident(self.schema)
        return settings

    async def _connect_one(self) -> Connection:
        """A connection outside the pool (the LISTEN connection)."""
        conn: Connection = await asyncpg.connect(
            self._target.dsn, timeout=self.connect_timeout,
            server_settings=self._server_settings(),
        )
        return conn

    def _connect_error(self, exc: BaseException) -> ConfigurationError:
        t = self._target
        where = f"PostgreSQL at {t.masked!r}"
        if isinstance(exc, pgerr.InvalidCatalogNameError):
            hint = (f"database {t.database!r} does not exist on {t.address}; create it "
                    f"(createdb {t.database}) or fix the database name in the URL")
        elif isinstance(exc, pgerr.InvalidAuthorizationSpecificationError):
            hint = ("the server refused the login; check the user and password in the URL "
                    "and the server's pg_hba.conf")
        elif isinstance(exc, pgerr.InsufficientPrivilegeError):
            hint = (f"the user may not create schema {self.schema!r} or its tables; grant "
                    "CREATE on the database or create the schema beforehand")
        elif isinstance(exc, TimeoutError):
            hint = (f"no answer from {t.address} within connect_timeout="
                    f"{self.connect_timeout:g} s; check that the host and port are "
                    "PostgreSQL's (not another service's), that the server is not hung or "
                    "overloaded and that no firewall drops packets (or pass a larger "
                    "connect_timeout)")
        elif isinstance(exc, OSError):
            hint = (f"no server answered at {t.address}; check that PostgreSQL is running, "
                    "listens on that host and port (listen_addresses, port) and that no "
                    "firewall is in the way")
        else:
            hint = "check the URL and the server's log"
        detail = str(exc) or type(exc).__name__
        return ConfigurationError(f"cannot connect to {where}: {detail}; {hint}")

    def _prepare_timeout_error(self, exc: TimeoutError) -> ConfigurationError:
        """A schema check or upgrade over command_timeout: asyncpg's TimeoutError
        (also an OSError) read as "no server answered" sent the operator after a
        server that was up, while the upgrade waited for older workers' locks."""
        within = ("in time" if self.command_timeout is None
                  else f"within command_timeout={self.command_timeout:g} s")
        return ConfigurationError(
            f"cannot use {self._target.masked!r}: the server answered, but checking or "
            f"upgrading durable's schema did not finish {within}; a statement most "
            "likely waited for a lock another session holds on durable's tables (an "
            "upgrade's ALTER TABLE waits for the transactions of workers still running an "
            "older durable). Find the holder in pg_stat_activity and pg_locks; let its "
            "transaction end or stop those workers, then connect again (or pass a larger "
            "command_timeout)")

    def _new_pool(self) -> Pool:
        # asyncpg's pool, not yet initialized: awaited, it opens its connections
        pool: Pool = asyncpg.create_pool(
            self._target.dsn,
            min_size=self.min_pool,
            max_size=self.max_pool,
            timeout=self.connect_timeout,
            command_timeout=self.command_timeout,
            statement_cache_size=self.statement_cache_size,
            server_settings=self._server_settings(),
            reset=no_reset,
        )
        return pool

    async def _fill_pool(self, pool: Pool) -> None:
        # A failed or cancelled start terminates what it connected (asyncpg)
        await pool

    async def _prepare(self, conn: Connection) -> None:
        if not self.create_schema:
            await self._require_schema(conn)
        await self._migrate(conn)

    async def _require_schema(self, conn: Connection) -> None:
        """Refuse a schema that is not there (create_schema=False), naming the
        schemas of this database that hold durable's tables."""
        if self.schema is None or await conn.fetchval(
                "SELECT 1 FROM pg_namespace WHERE nspname = $1", self.schema):
            return
        rows = await conn.fetch(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = "
            "'durable_meta' ORDER BY table_schema")
        known = ", ".join(repr(r["table_schema"]) for r in rows) or "none"
        t = self._target
        raise ConfigurationError(
            f"schema {self.schema!r} does not exist in database {t.database!r} on {t.address} "
            f"(from {t.masked!r}); schemas with durable's tables there: {known}. Check "
            "?schema= for a typo; to start a new schema, connect once with create_schema=True "
            "(the default of durable.connect; `durable worker` creates it)")

    async def _migrate(self, conn: Connection) -> None:
        """Create or check the schema under an advisory lock, so that processes
        starting together on a fresh database do not race their DDL.

        A schema that is already current is only checked: even a no-op
        ``CREATE INDEX IF NOT EXISTS`` takes a SHARE lock on its table, which
        would stall (and deadlock with) the workers already running on it.
        """
        async with conn.transaction():
            if await conn.fetchval("SELECT to_regclass('durable_meta') IS NOT NULL"):
                found = await conn.fetchval(
                    "SELECT value FROM durable_meta WHERE key = 'schema_version'"
                )
                if found is not None and int(found) >= SCHEMA_VERSION:
                    await drive(conn, migrate())  # refuses a newer schema
                    return
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                _DDL_LOCK_CLASS, self.schema or "",
            )
            if self.schema is not None:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}")
            await conn.execute(";\n".join(schema_statements(self.dialect)))
            await drive(conn, migrate())

    async def _close_pool(self, pool: Pool, within: float = PooledDriver.CLOSE_WITHIN) -> None:
        await self._listener.close()
        for conn in self._release_kept():  # the pool's close waits for every one
            with contextlib.suppress(Exception):
                await pool.release(conn)
        # asyncpg's close cancels a statement in flight on the server (a
        # CancelRequest) before it ends the session: a socket merely dropped
        # leaves the server's session waiting for its lock
        try:
            await asyncio.wait_for(pool.close(), within)
        except Exception:
            with contextlib.suppress(Exception):  # (a pool never started refuses)
                pool.terminate()

    async def drop_schema(self) -> None:
        """Drop this URL's schema and everything in it (tests clean up with it)."""
        if self.schema is None:
            raise ConfigurationError(
                f"{self._target.masked!r} names no schema; drop_schema() only drops a "
                "schema given with ?schema=NAME"
            )
        statement = f"DROP SCHEMA IF EXISTS {quote_ident(self.schema)} CASCADE"

        async def drop(conn: Connection) -> None:
            await conn.execute(statement)

        await self._on_pool(drop)

    # ---------------------------------------------------------------- transactions

    def _acquire(self, pool: Pool) -> AbstractAsyncContextManager[Connection]:
        return _Lease(self, pool)

    def _release_kept(self) -> list[Pooled]:
        """Stop keeping connections out of the pool: the ones kept, to give back."""
        kept, self._kept = self._kept, []
        return [conn for conn, _ in kept]

    def _failure(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, CONNECTION_LOST):
            return "lost"
        return "conflict" if isinstance(exc, CONFLICT) else None

    def _discard(self, conn: Connection) -> None:
        discard(conn)

    async def _connection_lost(self, pool: Pool, exc: BaseException) -> None:
        # The kept connections go back through the pool: it closes them, or
        # (after `expire_connections`) replaces them at their next use.
        for conn in self._release_kept():
            with contextlib.suppress(Exception):
                await pool.release(conn)
        if not isinstance(exc, TimeoutError):
            # The pool's other connections likely died with this one (a
            # restart, a failover): replace them all, not one by one.
            await pool.expire_connections()

    async def _transaction(
        self, conn: Connection, program: Program[T], tx: Tx, write: bool
    ) -> T:
        if not write:
            return await drive(conn, program)
        try:
            first = next(program)
        except StopIteration as done:
            empty: T = done.value
            return empty
        if first.autocommit and not any(not wake.local for wake in tx.wakes):
            # A single self-contained statement commits on its own: one round trip.
            # (Wake-ups its program adds after it are published here only: it
            # sent their notifications itself, `Tx.notices`.)
            try:
                answer = await execute(conn, first)
            except CONNECTION_LOST as exc:
                if isinstance(exc, pgerr.InternalClientError):
                    # asyncpg refused the statement before writing a byte of it
                    # (the server's FATAL already read, the protocol no longer
                    # idle: `_set_state`, `_ensure_connected`): certainly not
                    # run, retried whole like a lost BEGIN.
                    raise
                # Sent, or maybe sent: this statement is its own transaction and
                # the server commits it when it ends, whether or not its answer
                # gets back. A lost connection (ConnectionDoesNotExistError,
                # AdminShutdownError: a backend terminated after the commit
                # still reports it), a reset socket or a command timeout (asyncpg
                # cancels a statement that may have committed already) are the
                # same as a connection lost during COMMIT: outcome unknown,
                # resolved by the caller reading back, never by sending it again
                # blind (a step's fenced counter bumped twice, a claim's runs
                # owned unseen). asyncpg may have been preparing the statement
                # (Parse, not Execute) when it broke: it cannot tell us, and an
                # outcome called unknown that was not costs one read.
                discard(conn)
                raise CommitOutcomeUnknown() from exc
            try:
                program.send(answer)
            except StopIteration as done:
                single: T = done.value
                return single
            raise ConfigurationError(
                "a program's autocommit statement must be its only statement")
        await conn.execute("BEGIN")
        try:
            result = await drive(conn, program, first)
        except BaseException as exc:
            await self._rollback(conn, exc)
            raise
        # NOTIFY travels in the transaction, so listeners hear of a commit only
        # if it happened, and in the same round trip as COMMIT.
        commit = "COMMIT"
        if any(not wake.local for wake in tx.wakes):
            commit = f"{self._notify(tx)} COMMIT"
        try:
            await conn.execute(commit)
        except CONNECTION_LOST as exc:
            discard(conn)
            raise CommitOutcomeUnknown() from exc
        except BaseException as exc:
            await self._rollback(conn, exc)
            raise
        return result

    @staticmethod
    async def _rollback(conn: Connection, cause: BaseException) -> None:
        """Roll back, never masking the error that brought us here. After a
        lost connection there is nothing to roll back (the server did it) and
        waiting for an answer could hang: the connection is discarded."""
        if isinstance(cause, CONNECTION_LOST):
            discard(conn)
            return
        try:
            await conn.execute("ROLLBACK")
        except Exception:
            discard(conn)

    def _notify(self, tx: Tx) -> str:
        """The NOTIFY statements of a commit (`_notify_keys`)."""
        return self._notify_keys(self._sent(tx.wakes))

    def _sent(self, wakes: Iterable[Wake]) -> Iterator[Wake]:
        """The wake-ups that other processes are told of (see `_notifications`
        for the ``ACTIVITIES`` ones a worker here claims)."""
        return (wake for wake in wakes
                if self.hub.for_others(wake) and not (wake.kind is WakeKind.ACTIVITIES
                                                      and self.hub.claimed_here(wake.key)))

    def _notify_keys(self, wakes: Iterable[Wake]) -> str:
        """NOTIFY statements of these wake-ups (`_notifications`)."""
        return " ".join(f"NOTIFY {quote_ident(channel)}, {quote_literal(text)};"
                        for channel, text in self._notifications(wakes))

    def _notices(self, wakes: Iterable[Wake]) -> tuple[list[str], list[str]]:
        """`Tx.notices`: the channels and payloads of these wake-ups' notifications,
        for a statement's ``pg_notify`` (`durable.store.start_statement.start_in_one`);
        the same as a commit's NOTIFY statements would send (`_notify`)."""
        pairs = self._notifications(self._sent(wakes))
        return [channel for channel, _ in pairs], [text for _, text in pairs]

    def _notifications(self, wakes: Iterable[Wake]) -> list[tuple[str, str]]:
        """Notifications, as (channel, payload): one per channel, each key on the
        channel of its `address` (the schema's channel when it has none), with
        the sending driver's id, and in ``"n"`` the positions of the keys all
        of whose wake-ups bring no deadline (`durable.wakes.NO_DEADLINE`: no
        watchdog re-reads for them; a listener that does not know ``"n"``
        re-reads, as before).

        A task queue's ``ACTIVITIES`` wake-up is not sent while a worker of
        this process takes that queue's attempts (`WakeHub.claimed_here`): it
        claims them on the local wake-up, and passes the baton (`announce`)
        when it leaves some behind. Sent, it made every process of the queue
        claim, all but one for nothing (issue 26). A start's ``RUNS`` wake-up
        addressed to one process (`Wake.to`) goes to that process's own
        channel only (`addressing`), or nowhere when that is this process."""
        by_channel: dict[str, dict[tuple[str, ...], bool]] = {}
        for wake in wakes:
            key = wake.key
            if wake.to is not None:  # a start addressed to one process (`addressing`)
                if wake.to == self.origin:
                    continue  # this one: its local wake-up is all it needs
                channel = channel_for(self.channel, ("to", wake.to))
            else:
                where = address(key)
                channel = self.channel if where is None else channel_for(self.channel, where)
            sent = by_channel.setdefault(channel, {})
            sent[key] = sent.get(key, True) and not wake.brings_deadline
        notifications = []
        for channel, quiet in by_channel.items():
            message: dict[str, Any] = {"o": self.origin, "k": list(quiet)}
            no_deadline = [i for i, q in enumerate(quiet.values()) if q]
            if no_deadline:
                message["n"] = no_deadline
            text = json.dumps(message, separators=(",", ":"))
            if len(text) > _MAX_PAYLOAD:  # too many keys: everybody looks at everything
                channel = self.channel
                text = json.dumps({"o": self.origin, "k": [Wake.any().key]},
                                  separators=(",", ":"))
            notifications.append((channel, text))
        return notifications

    async def announce(self, wakes: Iterable[Wake]) -> None:
        """Tell the other processes that want them about these wake-ups now,
        outside any transaction (one round trip): a claimer that was woken
        here, and whose commit's notification was therefore not sent, passes
        the baton with it when it left work for others (`durable._runtime.claiming`)."""
        text = self._notify_keys(wake for wake in wakes if self.hub.for_others(wake))
        if not text:
            return

        async def send(conn: Connection) -> None:
            await conn.execute(text)

        await self._on_pool(send)

    async def start_addressee(self, namespace: str, task_queue: str, now: float) -> str | None:
        """The process a start on this queue is addressed to (`addressing`), or
        None: told to every process of the queue. Reads the queue's members
        at most once every `addressing.REFRESH` seconds."""
        return await self.addressing.pick(namespace, task_queue, now)

    def _commit_addressee(self, namespace: str, task_queue: str, now: float) -> str | None:
        """`Tx.addressee`: the process that new work committed here goes to,
        without a read (`Addressing.peek`): this one while a worker here
        takes the queue's runs (`WakeHub.claimed_here`), else one in turn."""
        here = self.hub.address
        if here is not None and not self.hub.claimed_here(Wake.runs(namespace, task_queue).key):
            here = None
        return self.addressing.peek(namespace, task_queue, now, here)

    async def _members(self, namespace: str, task_queue: str, now: float) -> list[Any]:
        """`addressing.MEMBERS_SQL`'s rows (`Addressing` reads them)."""

        async def read(conn: Connection) -> list[Any]:
            return list(await conn.fetch(MEMBERS_SQL, namespace, task_queue, now,
                                         APPLICATION_PREFIX))

        return await self._on_pool(read)

    async def _keep_addressing(self) -> None:
        """Read again, off the steps' path, the members of the queues whose
        wake-ups this process's transactions address from what is known
        (`Addressing.peek`, `Tx.addressee`), once older than a `REFRESH` and
        for `KEEP_FOR` after a transaction last asked (`refresh_due`): the
        watching process is the one whose workers commit child starts,
        continued runs and schedule fires. Nothing is read for a queue no
        transaction asked about."""
        while True:
            await anyio.sleep(KEEP_EVERY)
            await self.addressing.refresh_due()

    async def _pass_unclaimed(self, wakes: list[Wake]) -> None:
        """Starts addressed to this process on a queue that no worker here claims
        from now (it stopped since the starter read the members): tell the
        queue's processes, as a full worker would (the baton)."""
        unclaimed = [Wake.runs(*wake.key[1:]) for wake in wakes
                     if wake.to is not None and not self.hub.claimed_here(wake.key)]
        if not unclaimed:
            return
        try:
            await self.announce(unclaimed)
        except Exception as exc:  # the fallback poll finds them
            self.log.debug("baton_failed", error=repr(exc))

    # ---------------------------------------------------------------- statistics

    async def keep_statistics(self) -> list[str]:
        """ANALYZE durable's tables that changed enough since they were last
        analyzed, when the server's autovacuum is off (it analyzes them
        itself otherwise); the tables analyzed.

        Why: a table never analyzed has no statistics, and the planner then
        guesses that ``namespace = ?`` matches a few rows, so reads by key of
        a batch (``schedule_id IN (...)``) or the watchdog's next deadline
        scanned and filtered the whole namespace (10,000 schedules, every
        pending run: 10-30 ms a statement, against 0.05-1 ms analyzed). A
        watching driver looks every `STATISTICS_EVERY` seconds (`watch`); one
        process of a schema analyzes at a time (an advisory lock it does not
        wait for).
        """
        tables = table_names()

        async def analyze(conn: Connection) -> list[str]:
            due = [str(r["relname"]) for r in await conn.fetch(_ANALYZE_DUE, tables)]
            if not due:
                return []
            async with conn.transaction():
                if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1, hashtext($2))",
                                           _STATISTICS_LOCK_CLASS, self.schema or ""):
                    return []
                await conn.execute("ANALYZE " + ", ".join(quote_ident(t) for t in due))
            return due

        return await self._on_pool(analyze)

    async def _statistics(self) -> None:
        """`keep_statistics` every `STATISTICS_EVERY` seconds, for as long as
        the driver watches; a failure is logged and the next look comes."""
        while True:
            try:
                analyzed = await self.keep_statistics()
            except Exception as exc:  # a lost connection, a closing pool: next time
                self.log.debug("statistics_failed", error=repr(exc))
            else:
                if analyzed:
                    self.log.debug("statistics_analyzed", tables=analyzed)
            await anyio.sleep(STATISTICS_EVERY)

    # ---------------------------------------------------------------- wake-ups

    def _on_wanted(self) -> None:
        """The hub's wanted addresses changed: listen again (see `watch`)."""
        self._wanted = None
        self._listener.poke()

    def _wanted_channels(self) -> frozenset[str]:
        if self._wanted is None:
            wanted = {channel_for(self.channel, where) for where in self.hub.wanted}
            if self.hub.address is not None:  # the starts addressed here
                wanted.add(self.own_channel)
            self._wanted = frozenset(wanted)
        return self._wanted

    async def watch(self) -> None:
        """Publish other processes' commits (LISTEN), and `Wake.any()` every
        `poll_interval` so that a lost notification delays work, never loses it.

        Listens on the schema's channel and on the channel of each address
        the hub wants (`durable.wakes.WakeHub.want`); once it listens on a
        new one, it publishes a wake-up for each key wanted there, since one
        sent before may have been missed.
        """
        assert self._watch_lock is not None, "open the driver first"
        # One listener per driver however many workers share it; a second
        # watch() takes over when the first is cancelled.
        async with self._watch_lock, anyio.create_task_group() as upkeep:
            upkeep.start_soon(self._statistics)
            upkeep.start_soon(self._keep_addressing)
            next_any = anyio.current_time() + self.poll_interval
            while True:
                # Closed under a running worker: the listener's connection went
                # with it; a reconnect now would only be cancelled when the
                # worker stops, and asyncpg, cut short while its TCP connect
                # completes, leaves a future whose error nobody reads ("Future
                # exception was never retrieved" in the host's log).
                self._require_pool()
                wait = max(0.0, next_any - anyio.current_time())
                keys, fresh, added = await self._call(functools.partial(
                    self._listener.next_batch, wait, self._wanted_channels()), shield=False)
                wakes = heard(keys, self.hub.address)
                if any(wake.to is not None for wake in wakes):
                    await self._pass_unclaimed(wakes)
                if added:
                    wakes += [Wake(key, remote=True)
                              for where, wanted in list(self.hub.wanted.items())
                              if channel_for(self.channel, where) in added
                              for key in wanted]
                now = anyio.current_time()
                if fresh or now >= next_any:
                    wakes.append(Wake.any())
                    next_any = now + self.poll_interval
                self.hub.publish(wakes)


class _Lease:
    """A connection for one transaction: the one the last transaction left,
    kept out of asyncpg's pool, or one from the pool.

    Why: asyncpg's ``acquire`` and ``release`` cost ~70 µs of CPU a
    transaction (a timeout context, a proxy, an inactivity timer set and
    cancelled, and a release run as a task of its own behind
    ``asyncio.shield``, two more turns of the loop before the caller
    resumes): nearly as much as the statement's own client work, and a tenth of a
    sequential local step, which is one statement (issue 26;
    docs/benchmarks.md, "PostgreSQL sequential steps: a kept connection").

    A connection kept here is one the pool handed out and nobody uses. It is
    kept (at most `KEEP`; the others go back to the pool) when its
    transaction ended without an error, outside a transaction, not closed.
    Every `KEEP_USES` transactions it goes back through the pool anyway, so
    asyncpg's upkeep (``max_queries``, expired connections) still sees it; a
    lost connection gives every kept one back (`_connection_lost`), and
    closing the driver gives them back before the pool closes.
    """

    __slots__ = ("_conn", "_driver", "_pool", "_uses")

    def __init__(self, driver: PostgresDriver, pool: Pool) -> None:
        self._driver = driver
        self._pool = pool
        self._conn: Pooled | None = None
        self._uses = 0

    async def __aenter__(self) -> Pooled:
        kept = self._driver._kept
        while kept:
            conn, self._uses = kept.pop()
            if _open(conn):  # (kept only when idle, and nobody used it since)
                self._conn = conn
                return conn
            # Closed while kept (the server ended the session): asyncpg's pool
            # took it back then (the proxy is detached); this is a no-op then.
            await self._pool.release(conn)
        self._uses = 0
        self._conn = await self._pool.acquire(timeout=self._driver.connect_timeout)
        return self._conn

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: object,
                        tb: object) -> None:
        conn, self._conn = self._conn, None
        assert conn is not None
        kept = self._driver._kept
        if (exc_type is None and self._uses + 1 < KEEP_USES and len(kept) < KEEP
                and self._driver._pool is self._pool and _idle(conn)):
            kept.append((conn, self._uses + 1))
            return
        await self._pool.release(conn)


def _idle(conn: Connection) -> bool:
    """Whether a pooled connection can take a transaction now: open, in none."""
    return _open(conn) and not conn.is_in_transaction()


def _open(conn: Connection) -> bool:
    """Whether a pooled connection is open (a proxy the pool took back when
    its connection closed says so by refusing the call)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False
