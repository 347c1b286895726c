"""What a PostgreSQL transaction writes: the schema with its server-side functions, and
the transactions of the rule, which hold its writes until it has decided.

A transaction's writes are one call of the server-side function ``ledger_write``: it
takes the key's lock, writes the key's record (guarded by the chain head the caller
expects, when it expects one), inserts the events only if that write matched, adds the
transaction's share to the ledger-wide tally, and answers the database clock and, when
the record was not as expected, the record as it is. Every value is a bound parameter.
"""

from __future__ import annotations

import functools
import json
from contextlib import suppress
from typing import Any

import psycopg
from psycopg.pq import ConnStatus, ExecStatus, TransactionStatus

from ._transaction import (
    TALLY_STRIPES,
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Tally,
    Transaction,
    compact_json,
    indexed_values,
)

CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)

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
MIGRATION_LOCK = (0x4C454447, 0x4D494752)  # "LEDG", "MIGR"

NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"

# The first round trip of a write, after BEGIN: the key's lock, the clock and the record.
_LOCK = "SELECT o_clock, o_record FROM ledger_lock(%s)"

_COMPACT = "UPDATE ledger_events SET payload = %s WHERE key = %s AND payload != %s"


# The types of ``ledger_write``'s arguments before the events' (text, all of them).
# The types of ``ledger_write``'s arguments ("" for text), but for JSON texts (the
# record, each event's body): those go as parameters of their own, as they are, and the
# rest as one JSON array the statement unpacks (cheaper to encode than one parameter each).
_HEAD_TYPES = ",,boolean,,,,integer,bigint,float8,,JSON,integer,integer,integer,bigint,"
_EVENT_TYPES = ",,JSON,,,"


@functools.cache
def _write_sql(events: int, *, durable: bool = True) -> str:
    """The call of ``ledger_write`` with ``events`` events (the rest default to none), in
    the server's own placeholders: it runs on a raw cursor or through libpq, and neither
    rewrites it (parameters: see :meth:`WriteTransaction._calls`). Not ``durable``: alone
    in its implicit transaction, it commits without waiting for the disk (``set_config``
    local to that transaction, in the same statement)."""
    args, scalars, texts = [], 0, 1
    for kind in ",".join([_HEAD_TYPES] + [_EVENT_TYPES] * events).split(","):
        if kind == "JSON":
            texts += 1
            args.append(f"${texts}")
        else:
            scalars += 1
            args.append(f"v[{scalars}]" + (f"::{kind}" if kind else ""))
    unsynced = "" if durable else ", set_config('synchronous_commit', 'off', true)"
    return (
        f"SELECT o_clock, o_wrote, o_record{unsynced} FROM (SELECT ARRAY(SELECT e FROM"
        " json_array_elements_text($1::json) WITH ORDINALITY AS a (e, n) ORDER BY n) AS v)"
        f" AS p, ledger_write({', '.join(args)})"
    )


_UNSYNCED = "SET LOCAL synchronous_commit = off"

_NO_RECORD = (None,) * 7  # phase, effect, settled_at, compacted, token, lease, head
_NO_SHARE = Tally(0, 0, 0)


class WriteTransaction(Transaction):
    """Holds the rule's writes until it has decided, then sends them with the COMMIT: one
    ``ledger_write`` call (more only past four events) and COMMIT, in one pipeline."""

    _keeps_index = False  # it writes every column, every time

    def __init__(
        self,
        key: str,
        record: KeyRecord | None,
        now: float,
        conn: psycopg.Connection[Any] | None = None,
    ) -> None:
        super().__init__(key, record, now)
        self._conn = conn
        self._events: list[PendingEvent] = []
        self._saved: KeyRecord | None = None
        self._create = record is None
        self._expected_head = None if record is None else record.head_hash
        #: The record's JSON as this transaction wrote it, if it did.
        self.written: str | None = None

    def insert_event(self, event: PendingEvent) -> None:
        self._events.append(event)

    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        self._saved = record  # written by the next call, whole, as it is then

    def _calls(
        self, *, expected: str | None = None, tally: bool = True, durable: bool = True
    ) -> list[tuple[str, tuple[str | None, ...]]]:
        """The ``ledger_write`` calls of what is held (then held no more), as (SQL,
        parameters: the JSON array of the arguments but the JSON texts, then the record's
        and the events' bodies); ``expected`` guards the record's write by its head;
        ``tally`` adds the whole transaction's share of the tally to the first call; not
        ``durable``: the one call commits without waiting for the disk."""
        saved, events = self._saved, self._events
        self._saved, self._events = None, []
        added = self.tally() if tally else None
        if saved is None and not events and added is None:
            return []
        stripe, share = added or (0, _NO_SHARE)
        text = None if saved is None else saved.to_json()
        if saved is None:
            fields: tuple[Any, ...] = _NO_RECORD
        else:
            self.written = text
            fields = (*indexed_values(saved), saved.token, saved.lease_expires, saved.head_hash)
        values = [self.key, expected, self._create, *fields, stripe, share.keys, share.events]
        values += (share.digest, self.recorded_at)
        if saved is not None:
            self._create = False  # written: a later save in this transaction updates it
        calls = []
        while True:
            chunk, events = events[:_EVENTS_PER_CALL], events[_EVENTS_PER_CALL:]
            for e in chunk:
                values += (e.action_id, e.type, e.body_hash, e.prev_hash, e.hash)
            params = ("".join(compact_json(values, 0)), text, *[e.payload_json for e in chunk])
            calls.append((_write_sql(len(chunk), durable=durable), params))
            if not events:
                return calls
            # Further events of a long transaction: no record, no tally, same order.
            values = [self.key, None, False, *_NO_RECORD, stripe, 0, 0, 0, self.recorded_at]
            text = None

    def compact_bodies(self) -> int:
        # The rule needs the count now; the writes held so far go first, in order.
        assert self._conn is not None
        tombstone = json.dumps(TOMBSTONE)
        compact = self._conn.cursor()
        with self._conn.pipeline():
            for sql, params in self._calls(tally=False):
                psycopg.RawCursor(self._conn).execute(sql, params)
            compact.execute(_COMPACT, (tombstone, self.key, tombstone))
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


class UnchangedTransaction(WriteTransaction):
    """A transaction against the record the caller expects (``None``: no record), sent as
    one ``ledger_write`` call in an implicit transaction: the record's write guarded by
    the chain head expected (for a key expected new, an insert that yields to an existing
    row), the events inserted only if it matched."""

    def compact_bodies(self) -> int:
        raise NotImplementedError("compaction reads what it changes: use transact")

    def call(self) -> tuple[str, list[bytes | None]]:
        """The whole transaction; raises :class:`KeyMovedOn` if it would write nothing,
        or more than one call holds (not worth a shortcut: the caller's usual transaction
        decides again)."""
        if self._saved is None or not 0 < len(self._events) <= _EVENTS_PER_CALL:
            raise KeyMovedOn
        ((sql, params),) = self._calls(expected=self._expected_head, durable=self.durable)
        return sql, [None if p is None else p.encode() for p in params]


class KeyMovedOn(Exception):
    """The key's log moved past what an :class:`UnchangedTransaction` expected."""


class DeadOnArrival(psycopg.OperationalError):
    """The connection failed before the server ran any statement of the transaction:
    the server had ended it (pg_terminate_backend, a restart) while it sat in the pool."""


def begin(conn: psycopg.Connection[Any], key: str) -> tuple[float, str | None]:
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
    except CONNECTION_ERRORS as exc:
        if begin.pgresult is None:
            raise DeadOnArrival(str(exc)) from exc
        raise
    ((now, text),) = read.fetchall()  # o_clock is float8: a float
    return now, text


def roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed write's transaction before the connection goes back to the pool.

    A broken connection has no transaction left to end; the pool discards it.
    """
    if conn.pgconn.status == ConnStatus.OK and conn.pgconn.transaction_status in (
        TransactionStatus.INTRANS,
        TransactionStatus.INERROR,
    ):
        with suppress(psycopg.Error):
            conn.execute("ROLLBACK", prepare=False)
