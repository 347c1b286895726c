"""The shared backend: PostgreSQL through psycopg 3 and a connection pool.

Workers on many machines share one ledger. Every write is one transaction that
first takes a transaction-scoped advisory lock on the key's hash, so writes to one
key serialise while writes to different keys run side by side. Leases are judged
by the database clock, never by a worker's clock, so skewed workers still agree on
who holds a key.

The payload is stored as TEXT (not jsonb) so the stored bytes are exactly the ones
hashed, as in the SQLite backend.

A write transaction that reads first costs two client-server round trips: the rule
needs the key's record and the database clock before it can decide, and its decision
must be committed before it is acted on. The first round trip begins the transaction,
takes the key's lock and reads both; the rule's writes wait in a buffer and go out
with the COMMIT in the second. Each is one simple-protocol message of several
statements, so the server runs them in order without the client waiting between them.

Most transactions need only one, because the process can expect what it would read:
the record it last wrote or read of the key (none, for a key it never met), and the
database clock estimated from its last reading plus the time elapsed since (never
ahead of the database's). The rule decides on that expectation, and its writes go out
whole, on the event loop: the key's lock, the record's write guarded by the chain head
expected (for a new key, an insert that yields to an existing row) with the events
inserted only if it matched, COMMIT, then a read of the clock and the record. If the
key was not as expected, nothing is written, and the read-back is what the next try
expects. A claimed or running key is never expected (its lease moves without an
event), except by the completion of the claim this process holds, which reads no
lease. A fresh call costs two round trips, the limit (its claim, its completion); a
replay of a call this process made or saw recently one, and another two.
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from typing import Any

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.pq import ConnStatus, Escaping, ExecStatus, TransactionStatus
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL ledger needs the 'postgres' extra ({exc.name} is missing): "
        "pip install 'temporal-ledger[postgres]'"
    ) from exc

from ._errors import InvalidRequest, LedgerUnavailable
from ._models import LedgerEvent
from ._recorder import (
    RECORD_TEXT,
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Phase,
    Recorder,
    T,
    Transaction,
    event_from_row,
    events_sql,
    indexed_values,
    insert_event_sql,
    record_values,
    resolve,
    row_values,
    update_row_sql,
    write_record_sql,
)
from .sqlite import integrity_error

#: Ordered schema migrations: entry ``i`` upgrades a ledger from version ``i`` to
#: ``i + 1``. A later release appends entries; it never edits a released one, so
#: an existing database upgrades in place on the next open.
#:
#: Text columns that are compared or ordered use the "C" collation so that key
#: order and ISO timestamp comparison are bytewise, as in SQLite, whatever the
#: database's default locale.
MIGRATIONS: list[tuple[str, ...]] = [
    (
        """
        CREATE TABLE ledger_events (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            key TEXT COLLATE "C" NOT NULL,
            action_id TEXT,
            type TEXT NOT NULL,
            payload TEXT NOT NULL,
            recorded_at TEXT COLLATE "C" NOT NULL,
            body_hash TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL
        )
        """,
        "CREATE INDEX ledger_events_key ON ledger_events (key, seq)",
        "CREATE UNIQUE INDEX ledger_events_one_request"
        " ON ledger_events (action_id) WHERE type = 'action.requested'",
        """
        CREATE TABLE ledger_keys (
            key TEXT COLLATE "C" PRIMARY KEY,
            phase TEXT NOT NULL,
            effect TEXT,
            settled_at TEXT COLLATE "C",
            compacted INTEGER NOT NULL DEFAULT 0,
            token BIGINT NOT NULL,
            lease_expires DOUBLE PRECISION,
            record TEXT NOT NULL
        )
        """,
        "CREATE INDEX ledger_keys_open ON ledger_keys (effect, phase)",
        "CREATE INDEX ledger_keys_settled ON ledger_keys (compacted, settled_at)",
    ),
]

# Two 32-bit advisory lock keys: a key space apart from the single 64-bit keys
# that per-key transactions lock, so a migration never collides with a key's hash.
_MIGRATION_LOCK = (0x4C454447, 0x4D494752)  # "LEDG", "MIGR"

_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"

_LOCK = "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
# The clock and the key's record.
_READ = f"SELECT ({_NOW}), (SELECT record FROM ledger_keys WHERE key = %s)"

# The first round trip of a write. The lock is a statement of its own so that the read
# after it takes a new snapshot (READ COMMITTED: one per statement), which sees the
# previous holder's commit; in one statement the snapshot would predate the wait.
_START = f"{_LOCK}; {_READ}"

# The INSERT of events up to its VALUES, which :func:`_event_row` renders.
_INSERT_EVENTS = insert_event_sql("%s").split(" VALUES ", 1)[0]
# Guarded by the chain head: every transition that changes what a completion decides
# appends an event; a lease renewal, which appends none, changes nothing it reads.
_HEAD_IS = " AND (record::json ->> 'head_hash') = %s"
_GUARDED_UPDATE = write_record_sql("%s", created=False) + _HEAD_IS
_GUARDED_ROW_UPDATE = update_row_sql("%s") + _HEAD_IS
_INSERT_IF_ABSENT = write_record_sql("%s", created=True) + " ON CONFLICT (key) DO NOTHING"
# The events of a one-message transaction, inserted only if its record's write (the
# statement's WITH) matched.
_INSERT_EVENTS_IF_WRITTEN = (
    _INSERT_EVENTS + " SELECT * FROM (VALUES %s) AS events WHERE EXISTS (SELECT 1 FROM written)"
)

_COMPACT = "UPDATE ledger_events SET payload = %s WHERE key = %s AND seq <= %s AND payload != %s"

# How long a reading of the database clock is trusted to estimate it from this
# machine's monotonic clock; older, a write reads the clock again.
_CLOCK_TRUSTED_FOR = 5.0
# Records of the keys this process wrote or read last, kept to expect them again (a
# replay of a recent call; each about 1 KB).
_REMEMBERED_KEYS = 4096
# How long the event loop may wait for a connection the pool said was idle, should
# another thread take it first (then the usual queue serves the call). Not less: the
# pool measures its deadline from before its own bookkeeping, and a loaded machine
# can pause a thread for a millisecond between the two.
_IDLE_ONLY = 0.01

# Event loops that cannot watch a socket (Windows' default): their calls take the
# usual way, on the recorder's threads.
_LOOPS_WITHOUT_READERS: tuple[type, ...] = tuple(
    kind for kind in (getattr(asyncio, "ProactorEventLoop", None),) if kind is not None
)

_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

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
}

_CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


def _describe(conninfo: str) -> str:
    """Where the ledger lives, for messages: never the password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"postgresql://{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


class _PostgresTransaction(Transaction):
    """Holds the rule's writes until it has decided, then sends them with the COMMIT.

    The statements are bound on the client (:func:`_quoter`) so that all of them and the
    COMMIT travel in one simple-protocol message: one round trip, however many events
    the rule appended.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], key: str, record: KeyRecord | None, now: float
    ) -> None:
        super().__init__(key, record, now)
        self._conn = conn
        self._encoding = conn.info.encoding
        self._quote = _quoter(conn.pgconn, self._encoding)
        self._statements: list[str] = []
        #: The record's JSON as this transaction wrote it, if it did.
        self.written: str | None = None

    def _add(self, sql: str, params: Sequence[Any]) -> None:
        self._statements.append(sql % tuple(map(self._quote, params)))

    def _insert_event(self, event: PendingEvent) -> None:
        row = _event_row(self._quote, self._quote(self.key), event)
        self._statements.append(f"{_INSERT_EVENTS} VALUES {row}")

    def _write_record(self, record: KeyRecord, *, created: bool) -> None:
        if not created and self.index_unchanged(record):
            # No indexed column changes: PostgreSQL can update the row in place (HOT),
            # without new index entries.
            values = row_values(record)
            self._add(update_row_sql("%s"), values)
        else:
            values = record_values(record)
            self._add(write_record_sql("%s", created=created), values)
        self.written = values[RECORD_TEXT]

    def compact_bodies(self, through_seq: int) -> int:
        # The rule needs the count now; the writes held so far go first, in order.
        tombstone = json.dumps(TOMBSTONE)
        self._add(_COMPACT, (tombstone, self.key, through_seq, tombstone))
        results = self._send()
        return int(results[-1].command_tuples or 0)

    def commit(self) -> None:
        self._statements.append("COMMIT")
        self._send()

    def _message(self) -> bytes:
        message = "; ".join(self._statements).encode(self._encoding)
        self._statements = []
        return message

    def _send(self) -> list[psycopg.pq.abc.PGresult]:
        message = self._message()
        return _answered(self._conn, *_exchange(self._conn.pgconn, message))


class _UnchangedTransaction(_PostgresTransaction):
    """A transaction against the record the caller expects (``None``: no record), sent
    in one message: the key's lock; one statement that writes the record guarded by the
    chain head expected (or, for a key expected new, an insert that yields to an
    existing row) and inserts the events only if that write matched; COMMIT; and a read
    of the clock and of the record as committed, which tells a caller whose expectation
    was wrong what to expect next."""

    def __init__(
        self, conn: psycopg.Connection[Any], key: str, record: KeyRecord | None, now: float
    ) -> None:
        super().__init__(conn, key, record, now)
        self._expected_head = None if record is None else record.head_hash
        self._expected_index = None if record is None else indexed_values(record)
        self._events: list[PendingEvent] = []
        self._saved: KeyRecord | None = None

    def _insert_event(self, event: PendingEvent) -> None:
        self._events.append(event)

    def _write_record(self, record: KeyRecord, *, created: bool) -> None:
        self._saved = record  # written by message(), guarded

    def compact_bodies(self, through_seq: int) -> int:
        raise NotImplementedError("compaction reads what it changes: use transact")

    def message(self) -> bytes:
        """The whole transaction; raises :class:`_KeyMovedOn` if it would write nothing
        (not worth a shortcut: the caller's usual transaction decides again)."""
        saved = self._saved
        if saved is None or not self._events:
            raise _KeyMovedOn
        self._add(_LOCK, (self.key,))
        row = row_values(saved)
        self.written = row[RECORD_TEXT]
        if self._expected_head is None:
            write, values = _INSERT_IF_ABSENT, (*indexed_values(saved), *row)
        elif self._expected_index == indexed_values(saved):
            write, values = _GUARDED_ROW_UPDATE, (*row, self._expected_head)
        else:
            write, values = _GUARDED_UPDATE, (*indexed_values(saved), *row, self._expected_head)
        quote = self._quote
        key = quote(self.key)
        rows = ", ".join(_event_row(quote, key, event) for event in self._events)
        self._statements.append(
            f"WITH written AS ({write % tuple(map(quote, values))} RETURNING 1) "
            f"{_INSERT_EVENTS_IF_WRITTEN % rows}"
        )
        self._statements.append("COMMIT")
        # In a snapshot of its own, after the COMMIT: the clock for the next call's
        # expectation, and the record that call should expect.
        self._add(_READ, (self.key,))
        return self._message()

    def wrote(self, results: list[psycopg.pq.abc.PGresult]) -> bool:
        """Whether the record's write matched, and with it every event was inserted
        (BEGIN, the lock, the write, ...)."""
        return int(results[2].command_tuples or 0) == len(self._events)


def _event_row(quote: Callable[[Any], str], key: str, event: PendingEvent) -> str:
    """An event's parenthesised VALUES row, in ``event_values`` order; ``key`` is the
    key already quoted. The hashes and the timestamp are ``Transaction.append``'s own
    hex and ISO text: nothing in them needs quoting."""
    return (
        f"({key}, {quote(event.action_id)}, {quote(event.type)}, {quote(event.payload_json)}, "
        f"'{event.recorded_at}', '{event.body_hash}', '{event.prev_hash}', '{event.hash}')"
    )


class _KeyMovedOn(Exception):
    """The key's log moved past what an :class:`_UnchangedTransaction` expected."""


def _quoter(pgconn: psycopg.pq.abc.PGconn, encoding: str) -> Callable[[Any], str]:
    """How values become SQL literals on this connection: text quoted for its encoding,
    numbers as their exact decimal form (``repr`` of a float round-trips), ``None`` as
    NULL. In UTF-8, where no byte of a multi-byte character is a quote or a backslash,
    Python quotes text as libpq's ``PQescapeLiteral`` would, without a call per value."""
    if encoding == "utf-8":
        return _quote_utf8
    escaping = Escaping(pgconn)

    def quote(value: Any) -> str:
        if type(value) is not str:
            return _quote_utf8(value)
        if "\x00" in value:
            raise _nul(value)
        return escaping.escape_literal(value.encode(encoding)).decode(encoding)

    return quote


def _quote_utf8(value: Any) -> str:
    if type(value) is str:
        if "\x00" in value:
            raise _nul(value)
        if "\\" in value:
            # An E'' string reads a backslash the same whatever standard_conforming_strings.
            return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
        return "'" + value.replace("'", "''") + "'"
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))  # int(): an IntEnum too prints as its number
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):  # a str subclass
        return _quote_utf8(str(value))
    raise InvalidRequest(f"cannot record a {type(value).__name__} ({value!r}) as a literal")


def _nul(value: str) -> InvalidRequest:
    # libpq sends a query as a C string; PostgreSQL text cannot hold NUL anyway.
    return InvalidRequest(f"PostgreSQL text cannot contain NUL (0x00) characters: {value!r}")


def _bind(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any]) -> bytes:
    """``sql`` (``%s`` placeholders, no other ``%``) with ``params`` bound as literals."""
    encoding = conn.info.encoding
    quote = _quoter(conn.pgconn, encoding)
    return (sql % tuple(map(quote, params))).encode(encoding)


_Results = list[psycopg.pq.abc.PGresult]


def _exchange(
    pgconn: psycopg.pq.abc.PGconn, message: bytes
) -> tuple[_Results, psycopg.OperationalError | None]:
    """Send one simple-protocol message and read every result, without raising: the
    results that came and the connection failure that ended them, if any."""
    results: _Results = []
    try:
        for fd, writable in _steps(pgconn, message, results):
            _wait(fd, writable=writable)
    except psycopg.OperationalError as exc:
        return results, exc
    return results, None


async def _exchange_on_loop(
    pgconn: psycopg.pq.abc.PGconn, message: bytes, loop: asyncio.AbstractEventLoop
) -> tuple[_Results, psycopg.OperationalError | None]:
    """:func:`_exchange` on the event loop: it waits for the socket, not a thread."""
    results: _Results = []
    try:
        for fd, writable in _steps(pgconn, message, results):
            ready = loop.create_future()
            watch, unwatch = (
                (loop.add_writer, loop.remove_writer)
                if writable
                else (loop.add_reader, loop.remove_reader)
            )
            watch(fd, _set_ready, ready)
            try:
                await ready
            finally:
                unwatch(fd)
    except psycopg.OperationalError as exc:
        return results, exc
    return results, None


def _set_ready(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def _steps(
    pgconn: psycopg.pq.abc.PGconn, message: bytes, results: _Results
) -> Iterator[tuple[int, bool]]:
    """Drive libpq (non-blocking) through one exchange, collecting into ``results``;
    yields ``(socket, writable)`` whenever it must wait for the socket."""
    pgconn.send_query(message)
    while pgconn.flush():
        yield pgconn.socket, True
    while True:
        while pgconn.is_busy():
            yield pgconn.socket, False
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            return
        results.append(result)


def _answered(
    conn: psycopg.Connection[Any], results: _Results, failure: psycopg.OperationalError | None
) -> _Results:
    """The results of an exchange, or the error it ended in (the server's first)."""
    if failure is not None:
        raise failure
    errors = [r for r in results if r.status == ExecStatus.FATAL_ERROR]
    if errors:
        raise psycopg.errors.error_from_result(errors[0], encoding=conn.info.encoding)
    if conn.pgconn.status != ConnStatus.OK:
        raise psycopg.OperationalError("the connection was lost before its answer came")
    return results


class PostgresRecorder(Recorder):
    """A ledger in a PostgreSQL database, shared by any number of processes and machines.

    ``pool_size`` bounds the connections this process opens (and so how many
    ledger calls run at once); ``timeout`` bounds how long a call waits for a
    connection before raising :class:`LedgerUnavailable`.
    """

    # A dead connection is discarded; the next transaction runs on another or a new one.
    reconnects = True

    def __init__(self, url: str, *, pool_size: int = 10, timeout: float = 10.0) -> None:
        if pool_size < 1:
            raise InvalidRequest(f"pool_size must be >= 1, got {pool_size!r}")
        if not timeout > 0:
            raise InvalidRequest(f"timeout must be > 0 seconds, got {timeout!r}")
        try:
            given = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise InvalidRequest(f"not a valid PostgreSQL ledger URL: {exc}") from None
        self.where = _describe(url)
        self.max_concurrency = pool_size
        self._url = url
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
        self._seen_lock = threading.Lock()
        # Transactions submitted from an event loop run on these threads, one per pooled
        # connection, started on first use (see submit_on_loop).
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._workers_lock = threading.Lock()

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
            url,
            kwargs=self._kwargs,
            min_size=1,
            max_size=pool_size,
            open=False,
            # No check when a connection is taken (it would cost a round trip per
            # call): a connection the server ended while it sat in the pool fails
            # before anything of the call ran, and the call goes again on another
            # (_begin, _read).
            timeout=self._timeout,
            name=f"ledger {self.where}",
        )
        try:
            self._pool.open(wait=True, timeout=self._timeout)
        except psycopg.Error as exc:
            self._pool.close()
            raise LedgerUnavailable(
                f"cannot open a connection pool to the PostgreSQL ledger at {self.where}: "
                f"{_reason(exc)}"
            ) from exc

    @classmethod
    def from_url(cls, url: str) -> PostgresRecorder:
        return cls(url)

    # -- schema --------------------------------------------------------------------

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            # Serialises concurrent first opens: CREATE TABLE IF NOT EXISTS alone is
            # not safe against a racing CREATE in another session.
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _MIGRATION_LOCK)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS ledger_meta"
                " (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = conn.execute(
                "SELECT value FROM ledger_meta WHERE name = 'schema_version'"
            ).fetchone()
            current = int(row[0]) if row else 0
            target = len(MIGRATIONS)
            if current > target:
                raise InvalidRequest(
                    f"ledger {self.where} has schema version {current}, newer than this "
                    f"release understands ({target}); upgrade the package"
                )
            for statements in MIGRATIONS[current:]:
                for statement in statements:
                    conn.execute(statement)
            if current < target:
                conn.execute(
                    "INSERT INTO ledger_meta (name, value) VALUES ('schema_version', %s)"
                    " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                    (str(target),),
                )

    # -- connections ---------------------------------------------------------------

    def _read(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read. A read changes nothing, so one whose connection fails
        goes once more on another: a connection may have been ended while pooled."""
        last_try = False
        while True:
            try:
                with self._pool.connection() as conn:
                    return conn.execute(sql, params).fetchall()
            except PoolTimeout as exc:
                raise self._unavailable(doing, exc) from exc
            except _CONNECTION_ERRORS as exc:
                self._purge()
                if last_try:
                    raise self._unavailable(doing, exc) from exc
                last_try = True

    def _unavailable(self, doing: str, exc: BaseException) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"the PostgreSQL ledger at {self.where} is unavailable while {doing}: {_reason(exc)}"
        )

    def _purge(self) -> None:
        # One dead connection usually means a restart killed them all. Checking the
        # rest now lets the pool hand out a fresh one at once, instead of failing
        # through each dead one in turn.
        with suppress(Exception):
            self._pool.check()

    def now(self) -> float:
        ((now,),) = self._read("reading the database clock", _NOW)
        return float(now)

    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        try:
            return self._transact(key, fn, last_try=False)
        except _DeadOnArrival:
            return self._transact(key, fn, last_try=True)

    def _transact(self, key: str, fn: Callable[[Transaction], T], *, last_try: bool) -> T:
        committing = False
        try:
            with self._pool.connection() as conn:
                try:
                    now, text = _begin(conn, key)
                    self._clock = (now, time.monotonic())
                    record = KeyRecord.from_json(text) if text is not None else None
                    tx = _PostgresTransaction(conn, key, record, now)
                    result = fn(tx)
                    committing = True
                    tx.commit()
                except BaseException:
                    _roll_back(conn)
                    raise
            self._remember(key, tx.written or text)
            return result
        except _DeadOnArrival as exc:
            self._purge()
            if not last_try:
                raise  # nothing of this transaction ran: it goes again on another connection
            raise self._write_failed(key, exc, committing=False) from exc
        except psycopg.Error as exc:
            raise self._write_failed(key, exc, committing=committing) from exc

    def _write_failed(self, key: str, exc: psycopg.Error, *, committing: bool) -> Exception:
        """What a write's caller hears of ``exc``."""
        if isinstance(exc, psycopg.IntegrityError):
            return integrity_error(exc)
        if isinstance(exc, _CONNECTION_ERRORS):
            self._purge()
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

    def submit_on_loop(
        self, key: str, fn: Callable[[Transaction], T], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[T] | None:
        """:meth:`transact` on one of this recorder's threads, answered on ``loop``: a
        queue and one ``call_soon_threadsafe``, lighter than an executor's future chain."""
        if self._closed.is_set() or type(self).transact is not PostgresRecorder.transact:
            return None  # closed, or a subclass's own transact: the ledger's executor
        if len(self._workers) < self.max_concurrency:
            self._start_workers()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(key, fn, future, loop))
        return future

    def _start_workers(self) -> None:
        with self._workers_lock:
            while len(self._workers) < self.max_concurrency:
                worker = threading.Thread(
                    target=self._work, name=f"ledger-postgres-{len(self._workers)}", daemon=True
                )
                worker.start()
                self._workers.append(worker)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.future.cancelled():  # the caller stopped waiting before its turn
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = self.transact(job.key, job.fn)
            except BaseException as exc:
                error = exc
            with suppress(RuntimeError):  # a loop closed meanwhile hears nothing
                job.loop.call_soon_threadsafe(resolve, job.future, result, error)

    # -- one-message transactions ----------------------------------------------------

    def expect(self, key: str) -> tuple[KeyRecord | None, float] | None:
        clock = self._clock
        if clock is None:
            return None
        read_at, received = clock
        elapsed = time.monotonic() - received
        if elapsed > _CLOCK_TRUSTED_FOR:
            return None
        with self._seen_lock:
            text = self._seen.get(key)
        # Estimated from a reading taken before it arrived, so never ahead of the
        # database's own clock: a lease it starts ends no later than the database says.
        return (None if text is None else KeyRecord.from_json(text)), read_at + elapsed

    def _remember(self, key: str, text: str | None) -> None:
        with self._seen_lock:
            self._seen.pop(key, None)
            if text is None:
                return
            self._seen[key] = text
            if len(self._seen) > _REMEMBERED_KEYS:
                del self._seen[next(iter(self._seen))]

    async def transact_unchanged(
        self, key: str, expected: KeyRecord | None, now: float, fn: Callable[[Transaction], T]
    ) -> tuple[bool, T | None] | None:
        """One message on the event loop itself, on a connection that is idle now (when
        none is, ``None``: the usual queue waits for one)."""
        loop = asyncio.get_running_loop()
        if (
            self._closed.is_set()
            or isinstance(loop, _LOOPS_WITHOUT_READERS)
            or not self._pool.get_stats().get("pool_available")
        ):
            return None
        try:
            conn = self._pool.getconn(timeout=_IDLE_ONLY)
        except psycopg.Error:  # taken meanwhile, or the pool closed
            return None
        committing = False
        try:
            try:
                tx = _UnchangedTransaction(conn, key, expected, now)
                result = fn(tx)
                message = tx.message()
                committing = True
                results, failure = await _exchange_on_loop(conn.pgconn, message, loop)
                if (failure is not None or conn.pgconn.status != ConnStatus.OK) and not _began(
                    results
                ):
                    # The server had ended the connection while it was pooled: nothing
                    # ran, and the usual way goes again on another connection.
                    self._purge()
                    return None
                _answered(conn, results, failure)
            except BaseException:
                await _roll_back_on_loop(conn, loop)
                raise
            finally:
                self._pool.putconn(conn)
        except _KeyMovedOn:
            return False, None
        except psycopg.Error as exc:
            raise self._write_failed(key, exc, committing=committing) from exc
        read_back = results[-1]
        clock = read_back.get_value(0, 0)
        assert clock is not None
        self._clock = (float(clock), time.monotonic())
        if tx.wrote(results):
            self._remember(key, tx.written)
            return True, result
        seen = read_back.get_value(0, 1)
        self._remember(key, None if seen is None else seen.decode(conn.info.encoding))
        return False, None

    def get(self, key: str) -> KeyRecord | None:
        rows = self._read("reading a key", "SELECT record FROM ledger_keys WHERE key = %s", (key,))
        return KeyRecord.from_json(rows[0][0]) if rows else None

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        sql, params = events_sql("%s", key=key, after=after, limit=limit)
        return [event_from_row(row) for row in self._read("reading events", sql, params)]

    def records(self) -> Iterator[KeyRecord]:
        # Pages by key so a large ledger neither sits in memory nor pins a pooled
        # connection while the caller iterates.
        last: str | None = None
        while True:
            if last is None:
                rows = self._read(
                    "reading key states",
                    "SELECT key, record FROM ledger_keys ORDER BY key LIMIT 1000",
                )
            else:
                rows = self._read(
                    "reading key states",
                    "SELECT key, record FROM ledger_keys WHERE key > %s ORDER BY key LIMIT 1000",
                    (last,),
                )
            for _, text in rows:
                yield KeyRecord.from_json(text)
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def candidate_open_effects(self) -> list[KeyRecord]:
        rows = self._read(
            "listing open effects",
            "SELECT record FROM ledger_keys WHERE effect = 'unknown' OR phase IN (%s, %s)"
            " ORDER BY key",
            (Phase.CLAIMED, Phase.RUNNING),
        )
        return [KeyRecord.from_json(text) for (text,) in rows]

    def compactable(self, settled_before: str) -> list[str]:
        rows = self._read(
            "listing compactable keys",
            "SELECT key FROM ledger_keys WHERE compacted = 0 AND phase = %s"
            " AND settled_at < %s AND effect != 'unknown' ORDER BY key",
            (Phase.SETTLED, settled_before),
        )
        return [key for (key,) in rows]

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._workers_lock:
            workers, self._workers = self._workers, []
        for _ in workers:
            self._jobs.put(None)
        for worker in workers:
            worker.join()
        self._pool.close()


class _Job:
    __slots__ = ("fn", "future", "key", "loop")

    def __init__(
        self,
        key: str,
        fn: Callable[[Transaction], Any],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.key, self.fn, self.future, self.loop = key, fn, future, loop


class _DeadOnArrival(psycopg.OperationalError):
    """The connection failed before the server ran any statement of the transaction:
    the server had ended it (pg_terminate_backend, a restart) while it sat in the pool."""


def _begin(conn: psycopg.Connection[Any], key: str) -> tuple[float, str | None]:
    """The first round trip of a write: BEGIN, the key's lock, the clock and the record.

    Sent as one message, read one statement's result at a time, so that a connection
    that fails before BEGIN was answered (the server ended it while it was pooled)
    is told apart from one that fails inside the transaction, such as while waiting
    for the lock: the first may go again on another connection, the second is the
    caller's to hear of.
    """
    pgconn = conn.pgconn
    encoding = conn.info.encoding
    results, failure = _exchange(pgconn, _bind(conn, _START, (key, key)))
    error: psycopg.Error | None = failure
    errors = [r for r in results if r.status == ExecStatus.FATAL_ERROR]
    if errors:
        # The server's own words (say, "terminating connection due to administrator
        # command") rather than libpq's report of the socket closing after them.
        error = psycopg.errors.error_from_result(errors[0], encoding=encoding)
    if error is not None:
        if not _began(results) and pgconn.status != ConnStatus.OK:
            raise _DeadOnArrival(str(error)) from error
        raise error
    read = results[-1]
    now, text = read.get_value(0, 0), read.get_value(0, 1)
    assert now is not None
    return float(now), None if text is None else text.decode(encoding)


def _began(results: _Results) -> bool:
    """Whether the server ran a message's first statement (its BEGIN): a connection it
    had ended while pooled answers nothing, or only the error that ended it."""
    return bool(results) and results[0].status != ExecStatus.FATAL_ERROR


def _wait(fd: int, *, writable: bool = False) -> None:
    """Block until the socket is readable, or writable."""
    if hasattr(select, "poll"):  # any descriptor number, unlike select()
        poller = select.poll()
        poller.register(fd, select.POLLOUT if writable else select.POLLIN)
        poller.poll()
    else:
        select.select([] if writable else [fd], [fd] if writable else [], [])


async def _roll_back_on_loop(
    conn: psycopg.Connection[Any], loop: asyncio.AbstractEventLoop
) -> None:
    """:func:`_roll_back` on the event loop."""
    if conn.pgconn.transaction_status in _IN_TRANSACTION:
        await _exchange_on_loop(conn.pgconn, b"ROLLBACK", loop)


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed write's transaction before the connection goes back to the pool.

    A broken connection has no transaction left to end; the pool discards it.
    """
    if conn.pgconn.transaction_status in _IN_TRANSACTION:
        with suppress(psycopg.Error):
            conn.rollback()


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


__all__ = ["MIGRATIONS", "PostgresRecorder"]
