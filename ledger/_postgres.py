"""The shared backend: PostgreSQL through psycopg 3 and its connection pools.

Workers on many machines share one ledger. Every write is one transaction that
first takes a transaction-scoped advisory lock on the key's hash, so writes to one
key serialise while writes to different keys run side by side. Leases are judged
by the database clock, never by a worker's clock, so skewed workers still agree on
who holds a key.

The payload is stored as TEXT (not jsonb) so the stored bytes are exactly the ones
hashed, as in the SQLite backend; nothing on the server parses it, so any text JSON
can hold (a NUL escape too) is written as it is, every time.

Every value reaches the server as a bound parameter (of psycopg, or of its libpq
binding for the one-statement calls on the event loop: ``_pg_loop``); no SQL text is
built from a value. A transaction's writes are one call of the server-side function
``ledger_write`` (``_pg_write``).

A write transaction that reads first costs two round trips: the rule needs the key's
record and the database clock before it can decide, and its decision must be committed
before it is acted on. The first (BEGIN and ``ledger_lock``, one pipeline) takes the
key's lock and reads both; the rule's writes wait in a buffer and go out with the
COMMIT in the second (one pipeline). These run on the recorder's threads.

Most transactions need only one, because the process can expect what it would read:
the record it last wrote or read of the key (none, for a key it never met), and the
database clock estimated from its last reading plus the time elapsed since (never
ahead of the database's; a reading that took longer than 50 ms to arrive is not kept).
The rule decides on that expectation, and its writes go out as one ``ledger_write``
call in an implicit transaction, on the event loop, through an ``AsyncConnectionPool``.
If the key was not as expected, nothing is written, and what the call answers is what
the next try expects. A call that the server answers with an error (a SQLSTATE, even
"terminating connection") did not commit; only a connection lost without the server's
word may have. A claimed or running key is never
expected (its lease moves without an event), except by the completion of the claim this
process holds, which reads no lease. A fresh call costs two round trips, the limit (its
claim, its completion); a replay of a call this process made or saw recently one, and
another two.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL ledger needs the 'postgres' extra ({exc.name} is missing): "
        "pip install 'temporal-ledger[postgres]'"
    ) from exc

from ._errors import InvalidRequest, LedgerUnavailable
from ._pg_loop import LoopPool, usable
from ._pg_write import (
    CONNECTION_ERRORS,
    MIGRATION_LOCK,
    MIGRATIONS,
    NOW,
    DeadOnArrival,
    KeyMovedOn,
    UnchangedTransaction,
    WriteTransaction,
    begin,
    roll_back,
)
from ._recorder import T, Writers
from ._sql import SQLRecorder, migrate
from ._sqlite import integrity_error
from ._transaction import KeyRecord, Transaction

# How long a reading of the database clock is trusted to estimate it from this
# machine's monotonic clock; older, a write reads the clock again.
_CLOCK_TRUSTED_FOR = 5.0
# A write's reading is taken before its commit, so it is behind by up to the round trip
# that brought it (a commit waits for the disk): one that took longer is not kept.
_CLOCK_LAG_BOUND = 0.05
# Records of the keys this process wrote or read last, kept to expect them again (a
# replay of a recent call; each about 1 KB).
_REMEMBERED_KEYS = 4096

# Applied only where the URL does not say otherwise.
_CONNECT_DEFAULTS: dict[str, str] = {
    "connect_timeout": "10",
    "application_name": "temporal-ledger",
    # A peer that vanishes without a FIN (machine lost, network cut) is noticed in
    # about a minute instead of hanging a call until the OS gives up.
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    # Python text is Unicode; so is what the ledger writes (see _migrate).
    "client_encoding": "UTF8",
}


def check_url(url: str) -> dict[str, Any]:
    """Refuse a PostgreSQL URL that libpq cannot parse.

    Returns:
        The URL's connection parameters.

    Raises:
        InvalidRequest: The URL is not valid conninfo; the message says why, on one line.
    """
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidRequest(f"not a valid PostgreSQL URL ({' '.join(str(exc).split())})") from None


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection lost without the server's word on the statement:
    it may or may not have committed. An error the server sent (it has a SQLSTATE, as
    "terminating connection due to administrator command" has) ended the transaction
    before its commit: nothing of it was recorded."""
    return isinstance(exc, CONNECTION_ERRORS) and getattr(exc, "sqlstate", None) is None


class PostgresRecorder(SQLRecorder):
    """A ledger in a PostgreSQL database, shared by any number of processes and machines.

    ``pool_size`` bounds the connections this process opens (and so how many
    ledger calls run at once); ``timeout`` bounds how long a call waits for a
    connection before raising :class:`LedgerUnavailable`.
    """

    # A dead connection is discarded; the next transaction runs on another or a new one.
    reconnects = True
    _mark = "%s"

    def __init__(self, url: str, *, pool_size: int = 10, timeout: float = 10.0) -> None:
        if pool_size < 1:
            raise InvalidRequest(f"pool_size must be >= 1, got {pool_size!r}")
        if not timeout > 0:
            raise InvalidRequest(f"timeout must be > 0 seconds, got {timeout!r}")
        given = check_url(url)
        # Where the ledger lives, for messages: never the password.
        host, port = given.get("host") or "localhost", given.get("port") or "5432"
        self.where = f"postgresql://{host}:{port}/{given.get('dbname') or given.get('user') or ''}"
        self.max_concurrency = pool_size
        self._kwargs: dict[str, Any] = {
            k: v for k, v in _CONNECT_DEFAULTS.items() if k not in given
        }
        self._kwargs["autocommit"] = True
        self._timeout = float(timeout)
        self._closed = threading.Event()
        # The database clock as last read (its reading, and this machine's monotonic
        # clock when it arrived), and the records last written or read, by key: what a
        # one-message transaction expects (see expect).
        self._clock: tuple[float, float] | None = None
        self._seen: dict[str, str] = {}
        # Transactions submitted from an event loop run on these threads, one per pooled
        # connection, started on first use (see submit_on_loop).
        self._writers: Writers = Writers("ledger-postgres", threads=pool_size)
        # One-message transactions run on the event loop that first sends one (see
        # transact_unchanged); a call from another loop takes the usual way.
        # Both pools: no check by the pool when a connection is taken (its own costs a
        # round trip, and it backs off for a second after each dead connection): each
        # connection taken is refused if the server ended it while it sat idle, from what
        # already arrived (see usable).
        pooled: dict[str, Any] = dict(
            kwargs=self._kwargs, min_size=1, max_size=pool_size, open=False, timeout=self._timeout
        )
        self._on_loop = LoopPool(url, {**pooled, "name": f"ledger {self.where} (event loop)"})

        # One direct connection first: it gives libpq's own error ("connection
        # refused", "database does not exist") instead of a pool timeout.
        try:
            with psycopg.connect(url, **self._kwargs) as conn:
                self._migrate(conn)
        except psycopg.Error as exc:
            raise LedgerUnavailable(
                f"cannot open the PostgreSQL ledger at {self.where}: {_reason(exc)}"
            ) from exc

        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url, **pooled, name=f"ledger {self.where}"
        )
        try:
            self._pool.open(wait=True, timeout=self._timeout)
        except psycopg.Error as exc:
            self._pool.close()
            raise LedgerUnavailable(
                f"cannot open a connection pool to the PostgreSQL ledger at {self.where}: "
                f"{_reason(exc)}"
            ) from exc

    # -- schema --------------------------------------------------------------------

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            # Serialises concurrent first opens: CREATE TABLE IF NOT EXISTS alone is
            # not safe against a racing CREATE in another session.
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", MIGRATION_LOCK)
            ((encoding,),) = conn.execute("SHOW server_encoding").fetchall()
            if encoding != "UTF8":
                # Text the ledger accepted must fit every later write: only UTF8 holds
                # every character a request or an output can carry.
                raise InvalidRequest(
                    f"ledger {self.where} is a database in encoding {encoding}; the ledger "
                    "needs UTF8 (CREATE DATABASE ... ENCODING 'UTF8')"
                )
            migrate(conn, MIGRATIONS, where=self.where)

    # -- connections ---------------------------------------------------------------

    @contextmanager
    def _taken(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection that the server has not ended while it sat idle. A restart
        ends them all: each is refused here from what already arrived, without a round
        trip, while the pool opens new ones."""
        deadline = time.monotonic() + self._timeout
        while True:
            conn = self._pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
            if usable(conn.pgconn):
                break
            self._pool.putconn(conn)  # broken: the pool closes it and opens another
        try:
            yield conn
        finally:
            self._pool.putconn(conn)

    def _rows(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read. A read changes nothing, so one whose connection fails
        goes again on another: connections may have been ended while pooled (a restart
        ends them all, so as many tries as the pool holds, and one more)."""
        tries = self.max_concurrency + 1
        while True:
            tries -= 1
            try:
                with self._taken() as conn:
                    return conn.execute(sql, params).fetchall()
            except PoolTimeout as exc:
                raise self._unavailable(doing, exc) from exc
            except CONNECTION_ERRORS as exc:
                if not tries:
                    raise self._unavailable(doing, exc) from exc

    def _unavailable(self, doing: str, exc: BaseException) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"the PostgreSQL ledger at {self.where} is unavailable while {doing}: {_reason(exc)}"
        )

    def now(self) -> float:
        ((now,),) = self._rows("reading the database clock", NOW)
        return float(now)

    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        # A connection ended while pooled fails before anything ran; after a restart every
        # pooled one may: as many tries as the pool holds, and one more.
        tries = self.max_concurrency + 1
        while True:
            tries -= 1
            try:
                return self._transact(key, fn)
            except DeadOnArrival as exc:
                if not tries:
                    raise self._write_failed(key, exc, committing=False) from exc

    def _transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        committing = False
        try:
            with self._taken() as conn:
                try:
                    now, text = begin(conn, key)
                    self._clock = (now, time.monotonic())
                    record = KeyRecord.from_json(text) if text is not None else None
                    tx = WriteTransaction(key, record, now, conn)
                    result = fn(tx)
                    committing = True
                    tx.commit()
                except BaseException:
                    roll_back(conn)
                    raise
            self._remember(key, tx.written or text)
            return result
        except PoolTimeout as exc:
            raise self._unavailable(f"writing key {key!r}; nothing was recorded", exc) from exc
        except DeadOnArrival:
            raise  # nothing of this transaction ran: it goes again on another connection
        except psycopg.Error as exc:
            raise self._write_failed(key, exc, committing=committing and _lost(exc)) from exc

    def _write_failed(self, key: str, exc: psycopg.Error, *, committing: bool) -> Exception:
        """What a write's caller hears of ``exc``; ``committing``: the COMMIT may have
        landed (it was sent, and the connection was lost without the server's answer)."""
        if isinstance(exc, psycopg.IntegrityError):
            return integrity_error(exc)
        if isinstance(exc, CONNECTION_ERRORS):
            if committing:
                # The COMMIT was sent and its answer lost: it may or may not have
                # landed. The ledger releases a claim that did land as a no-effect
                # failure (Ledger._release_unused_claim), and retries a completion,
                # which finds its own record if the first try landed. The rule's
                # writes travel with the COMMIT, so a loss while sending them is
                # counted here too: the message may have reached the server whole.
                what = "while committing; the commit may or may not have been recorded"
            else:
                what = "before commit; the transaction was rolled back, nothing was recorded"
            return LedgerUnavailable(
                f"the PostgreSQL ledger at {self.where} became unavailable for key {key!r} "
                f"{what}: {_reason(exc)}",
                maybe_committed=committing,
            )
        if isinstance(exc, psycopg.DataError):
            return InvalidRequest(f"the ledger refused the write: {exc}")
        return LedgerUnavailable(
            f"the PostgreSQL ledger at {self.where} failed a write for key {key!r}; the "
            f"transaction was rolled back: {_reason(exc)}"
        )

    def _job(
        self, key: str, fn: Callable[[Transaction], T], durable: bool, expected: KeyRecord | None
    ) -> Callable[[], T] | None:
        # On one of this recorder's threads; the fn clears tx.durable itself, and the
        # record is read under the key's lock whatever was expected.
        if self._closed.is_set() or type(self).transact is not PostgresRecorder.transact:
            return None  # closed, or a subclass's own transact: the ledger's executor
        return functools.partial(self.transact, key, fn)

    # -- one-message transactions ----------------------------------------------------

    def expect(self, key: str) -> tuple[KeyRecord | None, float] | None:
        clock = self._clock
        if clock is None:
            return None
        read_at, received = clock
        elapsed = time.monotonic() - received
        if elapsed > _CLOCK_TRUSTED_FOR:
            return None
        text = self._seen.get(key)
        # Estimated from a reading taken before it arrived, so never ahead of the
        # database's own clock: a lease it starts ends no later than the database says.
        return (None if text is None else KeyRecord.from_json(text)), read_at + elapsed

    def _remember(self, key: str, text: str | None) -> None:
        # Without a lock: each dict operation is atomic, and a race only forgets a key.
        seen = self._seen
        try:
            del seen[key]  # (pop costs a call more: this runs on the event loop)
        except KeyError:
            pass
        if text is not None:
            seen[key] = text
            if len(seen) > _REMEMBERED_KEYS:
                seen.pop(next(iter(seen)), None)

    async def transact_unchanged(
        self, key: str, expected: KeyRecord | None, now: float, fn: Callable[[Transaction], T]
    ) -> tuple[Literal[True], T] | tuple[Literal[False], None] | None:
        """One ``ledger_write`` call on the event loop, on a connection of the loop's pool
        (``None`` when no connection comes in time, or on another loop than the pool's:
        the usual way then decides)."""
        on_loop = self._on_loop
        if on_loop.loop is not asyncio.get_running_loop() and not await on_loop.here():
            return None
        tx = UnchangedTransaction(key, expected, now)
        result = fn(tx)
        try:
            sql, params = tx.call()
        except KeyMovedOn:
            return False, None
        sent = time.monotonic()
        try:
            row = await self._on_loop.call(sql.encode(), params)
        except psycopg.Error as exc:
            if isinstance(exc, CONNECTION_ERRORS) and not _lost(exc):
                # The server ended the connection before the implicit transaction
                # committed (it said so): nothing ran, and the usual way goes again.
                return None
            raise self._write_failed(key, exc, committing=_lost(exc)) from exc
        if row is None:
            return None  # no connection came in time: the usual way waits, and says why
        clock, wrote, seen = row[:3]
        received = time.monotonic()
        if received - sent < _CLOCK_LAG_BOUND:
            assert clock is not None
            self._clock = (float(clock), received)
        if wrote == b"t":
            self._remember(key, tx.written)
            return True, result
        self._remember(key, None if seen is None else seen.decode())
        return False, None

    async def open_on_loop(self) -> None:
        if await self._on_loop.here():
            await self._on_loop.wait()

    async def close_on_loop(self) -> None:
        await self._on_loop.close_here()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._writers.close()
        self._pool.close()
        self._on_loop.close()


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or type(exc).__name__}"


__all__ = ["PostgresRecorder"]
