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
binding for the one-statement calls on the event loop: ``_pg_call``); no SQL text is
built from a value. A transaction's writes are one call of the server-side function
``ledger_write`` (installed by the migrations): it takes the key's lock, writes the
key's record (guarded by the chain head the caller expects, when it expects one),
inserts the events only if that write matched, adds the transaction's share to the
ledger-wide tally, and answers the database clock and, when the record was not as
expected, the record as it is.

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
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Literal

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.pq import ConnStatus, ExecStatus, TransactionStatus
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL ledger needs the 'postgres' extra ({exc.name} is missing): "
        "pip install 'temporal-ledger[postgres]'"
    ) from exc

from ._errors import InvalidRequest, LedgerUnavailable
from ._models import LedgerEvent
from ._pg_call import call_one_row
from ._recorder import (
    Recorder,
    T,
    event_from_row,
    events_sql,
    stored_schema_version,
)
from ._sqlite import integrity_error
from ._transaction import (
    TALLY_STRIPES,
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Phase,
    Tally,
    Transaction,
    indexed_values,
)
from ._writer import Job, Writers

#: How many events one ``ledger_write`` call inserts at most (the rule appends up to
#: three in one transaction).
_EVENTS_PER_CALL = 4
# Per event: action id, type, body, body hash, previous hash, hash.
_EVENT_FIELDS = ("a", "t", "b", "d", "r", "h")
_EVENT_PARAMETERS = ",\n            ".join(
    ", ".join(f"{field}{n} TEXT DEFAULT NULL" for field in _EVENT_FIELDS)
    for n in range(1, _EVENTS_PER_CALL + 1)
)
_EVENT_ROWS = ", ".join(
    f"({n}, " + ", ".join(f"{field}{n}" for field in _EVENT_FIELDS) + ")"
    for n in range(1, _EVENTS_PER_CALL + 1)
)

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
            record TEXT NOT NULL,
            -- The key's chain head in a column of its own: a write is guarded by it
            -- without the server parsing the record.
            head_hash TEXT COLLATE "C" NOT NULL
        )
        """,
        "CREATE INDEX ledger_keys_open ON ledger_keys (effect, phase)",
        "CREATE INDEX ledger_keys_settled ON ledger_keys (compacted, settled_at)",
        # The ledger-wide tally (TALLY_STRIPES rows, at zero). Rows are updated in place
        # all the time: room on each page keeps those updates HOT.
        """
        CREATE TABLE ledger_stripes (
            stripe INTEGER PRIMARY KEY,
            keys BIGINT NOT NULL,
            events BIGINT NOT NULL,
            digest BIGINT NOT NULL
        ) WITH (fillfactor = 50)
        """,
        "INSERT INTO ledger_stripes"
        f" SELECT s, 0, 0, 0 FROM generate_series(0, {TALLY_STRIPES - 1}) AS s",
        # The first round trip of a write. The lock is a statement of its own so that the
        # read after it takes a new snapshot (a volatile function's statements each take
        # one under READ COMMITTED), which sees the previous holder's commit.
        """
        CREATE FUNCTION ledger_lock(p_key TEXT)
        RETURNS TABLE (o_clock DOUBLE PRECISION, o_record TEXT)
        LANGUAGE plpgsql VOLATILE AS $fn$
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
            RETURN QUERY SELECT extract(epoch FROM clock_timestamp())::float8,
                (SELECT k.record FROM ledger_keys k WHERE k.key = p_key);
        END
        $fn$
        """,
        # A transaction's writes (see the module's docstring). p_record NULL writes no
        # record; p_create inserts one unless the key has one; otherwise the record is
        # updated where its head is p_expected (any head, for NULL). Up to four events,
        # in order; more go in further calls with no record.
        f"""
        CREATE FUNCTION ledger_write(
            p_key TEXT, p_expected TEXT, p_create BOOLEAN,
            p_phase TEXT, p_effect TEXT, p_settled_at TEXT, p_compacted INTEGER,
            p_token BIGINT, p_lease_expires DOUBLE PRECISION, p_head TEXT, p_record TEXT,
            p_stripe INTEGER, p_keys INTEGER, p_events INTEGER, p_digest BIGINT,
            p_recorded_at TEXT,
            {_EVENT_PARAMETERS}
        )
        RETURNS TABLE (o_clock DOUBLE PRECISION, o_wrote BOOLEAN, o_record TEXT)
        LANGUAGE plpgsql VOLATILE AS $fn$
        DECLARE
            matched BIGINT := 1;
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 0));
            IF p_record IS NOT NULL THEN
                IF p_create THEN
                    INSERT INTO ledger_keys (key, phase, effect, settled_at, compacted, token,
                        lease_expires, head_hash, record)
                    VALUES (p_key, p_phase, p_effect, p_settled_at, p_compacted, p_token,
                        p_lease_expires, p_head, p_record)
                    ON CONFLICT (key) DO NOTHING;
                ELSE
                    UPDATE ledger_keys AS k SET phase = p_phase, effect = p_effect,
                        settled_at = p_settled_at, compacted = p_compacted, token = p_token,
                        lease_expires = p_lease_expires, head_hash = p_head, record = p_record
                    WHERE k.key = p_key AND (p_expected IS NULL OR k.head_hash = p_expected);
                END IF;
                GET DIAGNOSTICS matched = ROW_COUNT;
            END IF;
            IF matched = 0 THEN
                RETURN QUERY SELECT extract(epoch FROM clock_timestamp())::float8, false,
                    (SELECT k.record FROM ledger_keys k WHERE k.key = p_key);
                RETURN;
            END IF;
            INSERT INTO ledger_events (key, action_id, type, payload, recorded_at, body_hash,
                prev_hash, hash)
            SELECT p_key, e.a, e.t, e.b, p_recorded_at, e.d, e.r, e.h
            FROM (VALUES {_EVENT_ROWS}) AS e (n, a, t, b, d, r, h)
            WHERE e.t IS NOT NULL ORDER BY e.n;
            IF p_keys <> 0 OR p_events <> 0 OR p_digest <> 0 THEN
                UPDATE ledger_stripes SET keys = keys + p_keys, events = events + p_events,
                    digest = digest # p_digest
                WHERE stripe = p_stripe;
            END IF;
            RETURN QUERY SELECT extract(epoch FROM clock_timestamp())::float8, true, NULL::text;
        END
        $fn$
        """,
    ),
]

# Two 32-bit advisory lock keys: a key space apart from the single 64-bit keys
# that per-key transactions lock, so a migration never collides with a key's hash.
_MIGRATION_LOCK = (0x4C454447, 0x4D494752)  # "LEDG", "MIGR"

_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"

# The first round trip of a write, after BEGIN: the key's lock, the clock and the record.
_LOCK = "SELECT o_clock, o_record FROM ledger_lock(%s)"

_COMPACT = "UPDATE ledger_events SET payload = %s WHERE key = %s AND seq <= %s AND payload != %s"

# How long a reading of the database clock is trusted to estimate it from this
# machine's monotonic clock; older, a write reads the clock again.
_CLOCK_TRUSTED_FOR = 5.0
# A write's reading is taken before its commit, so it is behind by up to the round trip
# that brought it (a commit waits for the disk): one that took longer is not kept.
_CLOCK_LAG_BOUND = 0.05
# Records of the keys this process wrote or read last, kept to expect them again (a
# replay of a recent call; each about 1 KB).
_REMEMBERED_KEYS = 4096

_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

# Event loops psycopg cannot wait on (Windows' default): their calls take the usual way,
# on the recorder's threads.
_LOOPS_WITHOUT_READERS: tuple[type, ...] = tuple(
    kind for kind in (getattr(asyncio, "ProactorEventLoop", None),) if kind is not None
)

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

_CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


def check_url(url: str) -> None:
    """Refuse a PostgreSQL URL that libpq cannot parse.

    Raises:
        InvalidRequest: The URL is not valid conninfo; the message says why, on one line.
    """
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidRequest(f"not a valid PostgreSQL URL ({' '.join(str(exc).split())})") from None


def _describe(conninfo: str) -> str:
    """Where the ledger lives, for messages: never the password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"postgresql://{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


@functools.cache
def _write_sql(events: int, *, durable: bool = True) -> str:
    """The call of ``ledger_write`` with ``events`` events (the rest default to none), in
    the server's own placeholders: it runs on a raw cursor or through libpq, and neither
    rewrites it. Not ``durable``: alone in its implicit transaction, it commits without waiting for
    the disk (``set_config`` local to that transaction, in the same statement)."""
    count = 16 + len(_EVENT_FIELDS) * events
    placeholders = ", ".join(f"${n}" for n in range(1, count + 1))
    unsynced = "" if durable else ", set_config('synchronous_commit', 'off', true)"
    return f"SELECT o_clock, o_wrote, o_record{unsynced} FROM ledger_write({placeholders})"


def _event_values(event: PendingEvent) -> tuple[Any, ...]:
    return (
        event.action_id,
        event.type,
        event.payload_json,
        event.body_hash,
        event.prev_hash,
        event.hash,
    )


_UNSYNCED = "SET LOCAL synchronous_commit = off"

_NO_RECORD = (None,) * 8  # phase, effect, settled_at, compacted, token, lease, head, record


class _PostgresTransaction(Transaction):
    """Holds the rule's writes until it has decided, then sends them with the COMMIT: one
    ``ledger_write`` call (more only past four events) and COMMIT, in one pipeline."""

    def __init__(
        self,
        conn: psycopg.Connection[Any] | None,
        key: str,
        record: KeyRecord | None,
        now: float,
    ) -> None:
        super().__init__(key, record, now)
        self._conn = conn
        self._events: list[PendingEvent] = []
        self._saved: KeyRecord | None = None
        self._create = record is None
        #: The record's JSON as this transaction wrote it, if it did.
        self.written: str | None = None

    def insert_event(self, event: PendingEvent) -> None:
        self._events.append(event)

    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        self._saved = record  # written by the next call, whole, as it is then

    def _calls(self, *, expected: str | None = None, tally: bool = True) -> list[tuple[Any, ...]]:
        """The ``ledger_write`` calls of what is held (then held no more), as (SQL,
        parameters); ``expected`` guards the record's write by its head; ``tally`` adds the
        whole transaction's share of the tally to the first call."""
        saved, events = self._saved, self._events
        self._saved, self._events = None, []
        added = self.tally() if tally else None
        if saved is None and not events and added is None:
            return []
        if saved is None:
            record_fields: tuple[Any, ...] = _NO_RECORD
        else:
            text = saved.to_json()
            self.written = text
            record_fields = (
                *indexed_values(saved),
                saved.token,
                saved.lease_expires,
                saved.head_hash,
                text,
            )
        stripe, share = added if added is not None else (0, Tally(0, 0, 0))
        head = (
            self.key,
            expected,
            self._create,
            *record_fields,
            stripe,
            share.keys,
            share.events,
            share.digest,
            self.recorded_at,
        )
        if saved is not None:
            self._create = False  # written: a later save in this transaction updates it
        calls: list[tuple[Any, ...]] = []
        chunks = [events[i : i + _EVENTS_PER_CALL] for i in range(0, len(events), _EVENTS_PER_CALL)]
        for chunk in chunks or [[]]:
            values = [value for event in chunk for value in _event_values(event)]
            calls.append((_write_sql(len(chunk)), (*head, *values)))
            # Further events of a long transaction: no record, no tally, same order.
            head = (self.key, None, False, *_NO_RECORD, stripe, 0, 0, 0, self.recorded_at)
        return calls

    def compact_bodies(self, through_seq: int) -> int:
        # The rule needs the count now; the writes held so far go first, in order.
        assert self._conn is not None
        tombstone = json.dumps(TOMBSTONE)
        compact = self._conn.cursor()
        with self._conn.pipeline():
            for sql, params in self._calls(tally=False):
                psycopg.RawCursor(self._conn).execute(sql, params)
            compact.execute(_COMPACT, (tombstone, self.key, through_seq, tombstone))
        return max(compact.rowcount, 0)

    def commit(self) -> None:
        assert self._conn is not None
        conn = self._conn
        commit = conn.cursor()
        try:
            with conn.pipeline():
                for sql, params in self._calls():
                    psycopg.RawCursor(conn).execute(sql, params)
                if not self.durable:
                    # A replay's record: committed without waiting for the disk.
                    conn.execute(_UNSYNCED, prepare=False)
                commit.execute("COMMIT", prepare=False)
        except psycopg.Error:
            result = commit.pgresult
            if result is not None and result.status == ExecStatus.COMMAND_OK:
                return  # it committed; only what came after failed
            raise


class _UnchangedTransaction(_PostgresTransaction):
    """A transaction against the record the caller expects (``None``: no record), sent as
    one ``ledger_write`` call in an implicit transaction: the record's write guarded by
    the chain head expected (for a key expected new, an insert that yields to an existing
    row), the events inserted only if it matched."""

    def __init__(self, key: str, record: KeyRecord | None, now: float) -> None:
        super().__init__(None, key, record, now)
        self._expected_head = None if record is None else record.head_hash

    def compact_bodies(self, through_seq: int) -> int:
        raise NotImplementedError("compaction reads what it changes: use transact")

    def call(self) -> tuple[str, tuple[Any, ...]]:
        """The whole transaction; raises :class:`_KeyMovedOn` if it would write nothing,
        or more than one call holds (not worth a shortcut: the caller's usual transaction
        decides again)."""
        if self._saved is None or not self._events or len(self._events) > _EVENTS_PER_CALL:
            raise _KeyMovedOn
        events = len(self._events)
        ((sql, params),) = self._calls(expected=self._expected_head)
        if not self.durable:
            sql = _write_sql(events, durable=False)
        return sql, params


class _KeyMovedOn(Exception):
    """The key's log moved past what an :class:`_UnchangedTransaction` expected."""


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection lost without the server's word on the statement:
    it may or may not have committed. An error the server sent (it has a SQLSTATE, as
    "terminating connection due to administrator command" has) ended the transaction
    before its commit: nothing of it was recorded."""
    return isinstance(exc, _CONNECTION_ERRORS) and getattr(exc, "sqlstate", None) is None


def _check_pooled(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Refuse a pooled connection the server has ended while it sat idle (it closed the
    socket after saying so), without a round trip: only what already arrived is read."""
    pgconn = conn.pgconn
    pgconn.consume_input()  # raises when the server closed the connection
    if pgconn.status != ConnStatus.OK or pgconn.transaction_status != TransactionStatus.IDLE:
        raise psycopg.OperationalError("the server ended the connection while it was pooled")


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
        self._writers = Writers(
            "ledger-postgres", lambda job: self.transact(job.key, job.fn), threads=pool_size
        )
        # One-message transactions run on the event loop that first sends one, on
        # connections of a pool of its own (see transact_unchanged); a call from another
        # loop takes the usual way.
        self._loop_pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Connections the loop took from its pool and keeps, idle, for its next calls:
        # the pool's checkout and return cost more instructions than the rest of a
        # one-message transaction's psycopg work (bench/README.md). The pool still opens,
        # sizes and replaces them; a broken one goes back to it.
        self._loop_idle: list[psycopg.AsyncConnection[Any]] = []
        self._loop_waiting = 0  # calls of the loop waiting on its pool for a connection

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
            # No check by the pool when a connection is taken: its own costs a round
            # trip, and it backs off for a second after each dead connection. _taken
            # refuses one the server ended while it sat idle, from what already arrived.
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
            current = stored_schema_version(conn, where=self.where, known=len(MIGRATIONS))
            target = len(MIGRATIONS)
            encoding = conn.execute("SHOW server_encoding").fetchone()
            if encoding is None or encoding[0] != "UTF8":
                # Text the ledger accepted must fit every later write: only UTF8 holds
                # every character a request or an output can carry.
                raise InvalidRequest(
                    f"ledger {self.where} is a database in encoding "
                    f"{encoding[0] if encoding else '?'}; the ledger needs UTF8 "
                    "(CREATE DATABASE ... ENCODING 'UTF8')"
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

    @contextmanager
    def _taken(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection that the server has not ended while it sat idle. A restart
        ends them all: each is refused here from what already arrived, without a round
        trip, while the pool opens new ones."""
        deadline = time.monotonic() + self._timeout
        while True:
            conn = self._pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
            try:
                _check_pooled(conn)
            except psycopg.Error:
                self._pool.putconn(conn)  # broken: the pool closes it and opens another
                continue
            break
        try:
            yield conn
        finally:
            self._pool.putconn(conn)

    def _read(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
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
            except _CONNECTION_ERRORS as exc:
                if not tries:
                    raise self._unavailable(doing, exc) from exc

    def _unavailable(self, doing: str, exc: BaseException) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"the PostgreSQL ledger at {self.where} is unavailable while {doing}: {_reason(exc)}"
        )

    def now(self) -> float:
        ((now,),) = self._read("reading the database clock", _NOW)
        return float(now)

    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        # A connection ended while pooled fails before anything ran; after a restart every
        # pooled one may: as many tries as the pool holds, and one more.
        for _ in range(self.max_concurrency):
            try:
                return self._transact(key, fn, last_try=False)
            except _DeadOnArrival:
                continue
        return self._transact(key, fn, last_try=True)

    def _transact(self, key: str, fn: Callable[[Transaction], T], *, last_try: bool) -> T:
        committing = False
        try:
            with self._taken() as conn:
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
        except PoolTimeout as exc:
            raise self._unavailable(f"writing key {key!r}; nothing was recorded", exc) from exc
        except _DeadOnArrival as exc:
            if not last_try:
                raise  # nothing of this transaction ran: it goes again on another connection
            raise self._write_failed(key, exc, committing=False) from exc
        except psycopg.Error as exc:
            raise self._write_failed(key, exc, committing=committing and _lost(exc)) from exc

    def _write_failed(self, key: str, exc: psycopg.Error, *, committing: bool) -> Exception:
        """What a write's caller hears of ``exc``; ``committing``: the COMMIT may have
        landed (it was sent, and the connection was lost without the server's answer)."""
        if isinstance(exc, psycopg.IntegrityError):
            return integrity_error(exc)
        if isinstance(exc, _CONNECTION_ERRORS):
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
        future: asyncio.Future[T] = loop.create_future()
        self._writers.put(Job(key, fn, future, loop))
        return future

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
    ) -> tuple[Literal[True], T] | tuple[Literal[False], None] | None:
        """One ``ledger_write`` call on the event loop, on a connection of the loop's pool
        (``None`` when no connection comes in time, or on another loop than the pool's:
        the usual way then decides)."""
        pool = await self._loop_pool_here()
        if pool is None:
            return None
        tx = _UnchangedTransaction(key, expected, now)
        result = fn(tx)
        try:
            sql, params = tx.call()
        except _KeyMovedOn:
            return False, None
        conn = await self._taken_on_loop(pool)
        if conn is None:
            return None  # the usual way waits, and says why
        try:
            sent = time.monotonic()
            # Not prepared: a statement prepared on first use would cost that call a
            # round trip of its own.
            row = await call_one_row(conn, sql.encode(), params)
        except psycopg.Error as exc:
            if isinstance(exc, _CONNECTION_ERRORS) and not _lost(exc):
                # The server ended the connection before the implicit transaction
                # committed (it said so): nothing ran, and the usual way goes again.
                return None
            raise self._write_failed(key, exc, committing=_lost(exc)) from exc
        finally:
            await self._given_back_on_loop(pool, conn)
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
        pool = await self._loop_pool_here()
        if pool is not None:
            with suppress(PoolTimeout):  # the calls will wait for it, and say why
                await pool.wait(timeout=self._timeout)

    async def _loop_pool_here(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None:
        """The pool of one-message transactions, opened on the first loop that asks."""
        loop = asyncio.get_running_loop()
        pool = self._loop_pool
        if pool is not None and self._loop is loop:
            return pool
        if self._closed.is_set() or self._loop is not None:
            return None  # closed, or another loop's
        if isinstance(loop, _LOOPS_WITHOUT_READERS):
            return None
        pool = AsyncConnectionPool(
            self._url,
            kwargs=self._kwargs,
            min_size=1,
            max_size=self.max_concurrency,
            open=False,
            timeout=self._timeout,
            name=f"ledger {self.where} (event loop)",
        )
        self._loop_pool, self._loop = pool, loop
        # Without waiting for connections: getconn waits for the first.
        await pool.open(wait=False)
        return pool

    async def _taken_on_loop(
        self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]
    ) -> psycopg.AsyncConnection[Any] | None:
        """:meth:`_taken` on the event loop's pool: a connection, or ``None`` if none
        came within the pool's timeout."""
        deadline = time.monotonic() + self._timeout
        while True:
            if self._loop_idle:
                conn = self._loop_idle.pop()
            else:
                self._loop_waiting += 1
                try:
                    conn = await pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
                except (PoolTimeout, psycopg.Error):
                    return None
                finally:
                    self._loop_waiting -= 1
            try:
                _check_pooled(conn)
            except psycopg.Error:
                await pool.putconn(conn)
                continue
            return conn

    async def _given_back_on_loop(
        self,
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]],
        conn: psycopg.AsyncConnection[Any],
    ) -> None:
        """A connection done with: kept for the loop's next call while it is idle and
        healthy, else handed back to the pool, which closes a broken one and opens
        another."""
        pgconn = conn.pgconn
        if (
            self._loop_pool is pool
            and not self._loop_waiting  # a call waits on the pool: the pool gets it back
            and pgconn.status == ConnStatus.OK
            and pgconn.transaction_status == TransactionStatus.IDLE
        ):
            self._loop_idle.append(conn)
        else:
            await pool.putconn(conn)

    def tally(self) -> dict[int, Tally]:
        rows = self._read(
            "reading the tally", "SELECT stripe, keys, events, digest FROM ledger_stripes"
        )
        return {stripe: Tally(keys, events, digest) for stripe, keys, events, digest in rows}

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

    async def close_on_loop(self) -> None:
        pool, loop = self._loop_pool, self._loop
        if pool is not None and loop is asyncio.get_running_loop():
            self._loop_pool = None
            await _close_pool(pool, self._loop_idle)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._writers.close()
        self._pool.close()
        self._close_loop_pool()

    def _close_loop_pool(self) -> None:
        """Close the event loop's pool from outside ``close_on_loop`` (a plain ``close``):
        on its loop, from another thread while it runs, or, from the loop's own thread,
        once that thread is free again."""
        pool, loop = self._loop_pool, self._loop
        self._loop_pool = None
        if pool is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        closing = _close_pool(pool, self._loop_idle)
        if running is loop:
            task = loop.create_task(closing)
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)
        elif loop.is_running():
            with suppress(Exception):
                asyncio.run_coroutine_threadsafe(closing, loop).result(self._timeout)
        else:
            closing.close()


class _DeadOnArrival(psycopg.OperationalError):
    """The connection failed before the server ran any statement of the transaction:
    the server had ended it (pg_terminate_backend, a restart) while it sat in the pool."""


# Pools being closed from their own loop's thread (see _close_loop_pool).
_CLOSING: set[asyncio.Task[None]] = set()


async def _close_pool(
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]],
    idle: list[psycopg.AsyncConnection[Any]],
) -> None:
    """Close the event loop's pool, with the connections kept out of it."""
    while idle:
        await pool.putconn(idle.pop())
    await pool.close()


def _begin(conn: psycopg.Connection[Any], key: str) -> tuple[float, str | None]:
    """The first round trip of a write: BEGIN, then ``ledger_lock``: the key's lock, the
    clock and the record, in one pipeline.

    A connection that fails before BEGIN was answered (the server ended it while it was
    pooled) is told apart from one that fails inside the transaction, such as while
    waiting for the lock: the first may go again on another connection, the second is
    the caller's to hear of.
    """
    begin, read = conn.cursor(), conn.cursor()
    try:
        with conn.pipeline():
            begin.execute("BEGIN", prepare=False)
            read.execute(_LOCK, (key,))
    except _CONNECTION_ERRORS as exc:
        if begin.pgresult is None:
            raise _DeadOnArrival(str(exc)) from exc
        raise
    row = read.fetchone()
    assert row is not None
    now, text = row
    return float(now), text


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed write's transaction before the connection goes back to the pool.

    A broken connection has no transaction left to end; the pool discards it.
    """
    if conn.pgconn.status == ConnStatus.OK and conn.pgconn.transaction_status in _IN_TRANSACTION:
        with suppress(psycopg.Error):
            conn.execute("ROLLBACK", prepare=False)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


__all__ = ["MIGRATIONS", "PostgresRecorder"]
