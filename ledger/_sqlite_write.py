"""What a SQLite transaction writes: the schema, the statements of a transition, and the
transaction of the rule, which writes its events in one multi-row statement."""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any

from ._sql import EVENT_COLUMNS
from ._transaction import (
    TALLY_STRIPES,
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Transaction,
    indexed_values,
)

# The schema, as the ordered list of migrations that built it: a file records the
# version it reached in ledger_meta, and opening applies whatever follows, in order, in
# one BEGIN IMMEDIATE transaction (so two processes opening a new file agree). A later
# release appends entries and never edits one it shipped.
# seq is a plain INTEGER PRIMARY KEY (max + 1): events are never deleted, so it only
# grows, and AUTOINCREMENT would cost a sqlite_sequence page write per commit.
# A key's events are found from its row, not from an index of (key, seq), which would
# cost a page in every commit (bench/sqlite_pages.py counts them): each event names the
# key's event before it (key_prev: its seq, NULL for the key's first, 0 for the row just
# before, as a transition's later events are written), the key's row its last (head_seq).
MIGRATIONS: list[tuple[str, ...]] = [
    (
        """
        CREATE TABLE ledger_events (
            seq INTEGER PRIMARY KEY,
            key TEXT NOT NULL,
            action_id TEXT,
            type TEXT NOT NULL,
            payload TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            body_hash TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            key_prev INTEGER
        )
        """,
        """
        CREATE UNIQUE INDEX ledger_events_one_request
            ON ledger_events (action_id) WHERE type = 'action.requested'
        """,
        """
        CREATE TABLE ledger_keys (
            key TEXT PRIMARY KEY,
            phase TEXT NOT NULL,
            effect TEXT,
            settled_at TEXT,
            compacted INTEGER NOT NULL DEFAULT 0,
            token INTEGER NOT NULL,
            lease_expires REAL,
            record TEXT NOT NULL,
            head_hash TEXT NOT NULL DEFAULT '',
            head_seq INTEGER
        )
        """,
        # Only the keys open_effects asks for (claimed, running, an unknown effect): a
        # call that settles in one commit, and every replay, never touches it. Compaction
        # has no index (a page in every commit that settles a key, for a command an
        # operator runs now and then): it scans the keys.
        """
        CREATE INDEX ledger_keys_open ON ledger_keys (key)
            WHERE effect = 'unknown' OR phase IN ('claimed', 'running')
        """,
        # The ledger-wide tally (see TALLY_STRIPES), every stripe at zero.
        """
        CREATE TABLE ledger_stripes (
            stripe INTEGER PRIMARY KEY,
            keys INTEGER NOT NULL,
            events INTEGER NOT NULL,
            digest INTEGER NOT NULL
        )
        """,
        f"""
        WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s LIMIT {TALLY_STRIPES})
        INSERT INTO ledger_stripes SELECT n, 0, 0, 0 FROM s
        """,
    ),
]


@functools.cache
def _insert_events_sql(rows: int) -> str:
    """The INSERT of ``rows`` events with their links."""
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
    return (
        "INSERT INTO ledger_events (key, action_id, type, payload, recorded_at, body_hash,"
        f" prev_hash, hash, key_prev) VALUES {values}"
    )


# A key's row: its indexed columns (indexed_values), then the rest and its last event's
# sequence number, key last. A save that leaves the indexed columns as they were (a
# replay, a lease renewal) writes the rest only: SQLite then leaves the indexes alone.
_INSERT_RECORD = (
    "INSERT INTO ledger_keys (phase, effect, settled_at, compacted, token, lease_expires,"
    " head_hash, record, head_seq, key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_RECORD = (
    "UPDATE ledger_keys SET phase = ?, effect = ?, settled_at = ?, compacted = ?, token = ?,"
    " lease_expires = ?, head_hash = ?, record = ?, head_seq = ? WHERE key = ?"
)
_UPDATE_ROW = (
    "UPDATE ledger_keys SET token = ?, lease_expires = ?, head_hash = ?, record = ?,"
    " head_seq = ? WHERE key = ?"
)

# One key's events, newest first, by their links: each must be the key's, and older than
# the one that names it (so no edited link can loop); beside each, the number of events
# the key's record counts, read in the same statement (one snapshot).
_KEY_EVENTS_BY_LINKS = f"""
    WITH RECURSIVE chain(seq, prev) AS (
        SELECT seq, CASE key_prev WHEN 0 THEN seq - 1 ELSE key_prev END FROM ledger_events
        WHERE seq = (SELECT head_seq FROM ledger_keys WHERE key = ?1) AND key = ?1
        UNION ALL
        SELECT
            earlier.seq,
            CASE earlier.key_prev WHEN 0 THEN earlier.seq - 1 ELSE earlier.key_prev END
        FROM chain
        JOIN ledger_events AS earlier ON earlier.seq = chain.prev
        WHERE earlier.seq < chain.seq AND earlier.key = ?1
    )
    SELECT {EVENT_COLUMNS},
        (SELECT json_extract(record, '$.events') FROM ledger_keys WHERE key = ?1)
    FROM ledger_events WHERE seq IN (SELECT seq FROM chain) ORDER BY seq
"""
# The read of a key's row a transition (and read_now) starts with: chain head, record, last event.
READ_ROW = "SELECT head_hash, record, head_seq FROM ledger_keys WHERE key = ?"
_KEY_EVENTS_SCANNED = f"SELECT {EVENT_COLUMNS} FROM ledger_events WHERE key = ? ORDER BY seq"


def key_events(conn: sqlite3.Connection, key: str) -> list[tuple[Any, ...]]:
    """Every event of ``key``, in order, found by the links (a few primary-key reads).
    Links that do not reach as many events as the key's record counts (edited by hand:
    ``verify`` names the chain's problems) are set aside for a scan of the whole log."""
    rows = conn.execute(_KEY_EVENTS_BY_LINKS, (key,)).fetchall()
    if not rows:
        counted = conn.execute(
            "SELECT json_extract(record, '$.events') FROM ledger_keys WHERE key = ?", (key,)
        ).fetchone()
        if counted is None or not counted[0]:
            return []  # no record, or one with no events (none written by this release)
    elif len(rows) == rows[0][-1]:
        return [row[:-1] for row in rows]
    return conn.execute(_KEY_EVENTS_SCANNED, (key,)).fetchall()


_ADD_TO_TALLY = (
    "UPDATE ledger_stripes SET keys = keys + ?, events = events + ?,"
    " digest = (digest | ?) & ~(digest & ?) WHERE stripe = ?"  # digest XOR the change
)


class SQLiteTransaction(Transaction):
    """Holds appended events until the record is written (or the rule is done), then
    inserts them in one multi-row statement: one statement per transition's events."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        key: str,
        record: KeyRecord | None,
        now: float,
        head_seq: int | None = None,
    ) -> None:
        super().__init__(key, record, now)
        self._conn = conn
        self._pending: list[PendingEvent] = []
        #: The key's last event's sequence number, as appended and as stored in its row.
        self._head_seq = self._stored_head_seq = head_seq

    def insert_event(self, event: PendingEvent) -> None:
        self._pending.append(event)

    def finish(self) -> None:
        """Write what is held and the transition's share of the ledger-wide tally."""
        self.flush()
        if self._head_seq != self._stored_head_seq and self.record is not None:
            # Events appended after the record was last saved: the row names them too.
            self._conn.execute(
                "UPDATE ledger_keys SET head_seq = ? WHERE key = ?", (self._head_seq, self.key)
            )
            self._stored_head_seq = self._head_seq
        added = self.tally()
        if added is not None:
            stripe, tally = added
            self._conn.execute(
                _ADD_TO_TALLY, (tally.keys, tally.events, tally.digest, tally.digest, stripe)
            )

    def flush(self) -> None:
        """Insert the events held so far (a unique index's refusal is raised here)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        # Each event names the key's event before it: the first by its seq, the others as
        # 0, the row just before (one statement numbers its rows one after another).
        values: list[Any] = []
        key_prev = self._head_seq
        for e in pending:
            values += (e.key, e.action_id, e.type, e.payload_json, e.recorded_at, e.body_hash)
            values += (e.prev_hash, e.hash, key_prev)
            key_prev = 0
        self._head_seq = self._conn.execute(_insert_events_sql(len(pending)), values).lastrowid

    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        self.flush()
        text, head_seq = record.to_json(), self._head_seq
        row = (record.token, record.lease_expires, record.head_hash, text, head_seq, self.key)
        if created:
            self._conn.execute(_INSERT_RECORD, (*indexed_values(record), *row))
        elif self.index_unchanged(record):
            self._conn.execute(_UPDATE_ROW, row)
        else:
            self._conn.execute(_UPDATE_RECORD, (*indexed_values(record), *row))
        self._stored_head_seq = self._head_seq

    def compact_bodies(self) -> int:
        self.flush()
        tombstone = json.dumps(TOMBSTONE)
        cursor = self._conn.executemany(
            "UPDATE ledger_events SET payload = ? WHERE seq = ? AND payload != ?",
            [(tombstone, row[0], tombstone) for row in key_events(self._conn, self.key)],
        )
        return cursor.rowcount
