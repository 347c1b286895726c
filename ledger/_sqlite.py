"""The embedded backend: one SQLite file in WAL mode with durable (FULL) commits.

Every write is a ``BEGIN IMMEDIATE`` transaction, so two processes on one file
serialise on SQLite's write lock and can never both claim a key. Within a process, the
writes of an event loop's calls go to one writer thread, in order, each committed
before its caller is answered. (Committing the transitions queued together in one
transaction and one sync paid nothing a user sees: bench/README.md, issue 42.)
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ._errors import DuplicateActionId, InvalidRequest, LedgerUnavailable
from ._models import LedgerEvent
from ._recorder import (
    _EVENT_INSERT_COLUMNS,
    _RECORD_COLUMNS,
    EVENT_COLUMNS,
    Recorder,
    T,
    event_from_row,
    event_values,
    events_sql,
    record_values,
    row_values,
    stored_schema_version,
    update_row_sql,
    write_record_sql,
)
from ._transaction import (
    TALLY_STRIPES,
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Phase,
    Tally,
    Transaction,
)
from ._writer import Job, Writers

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

_LINKED_EVENT_COLUMNS = (*_EVENT_INSERT_COLUMNS, "key_prev")


@functools.cache
def _insert_events_sql(rows: int) -> str:
    """The INSERT of ``rows`` events with their links."""
    marks = "(" + ", ".join("?" * len(_LINKED_EVENT_COLUMNS)) + ")"
    values = ", ".join([marks] * rows)
    return f"INSERT INTO ledger_events ({', '.join(_LINKED_EVENT_COLUMNS)}) VALUES {values}"


# The key's row with its last event's sequence number (parameters: the recorder's
# values with head_seq before the key).
_INSERT_LINKED_RECORD = (
    f"INSERT INTO ledger_keys ({', '.join(_RECORD_COLUMNS)}, head_seq, key)"
    f" VALUES ({', '.join('?' * (len(_RECORD_COLUMNS) + 2))})"
)
_UPDATE_LINKED_RECORD = write_record_sql("?", created=False).replace(
    " WHERE key = ?", ", head_seq = ? WHERE key = ?"
)
_UPDATE_LINKED_ROW = update_row_sql("?").replace(" WHERE key = ?", ", head_seq = ? WHERE key = ?")

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
# The read of a key's row a transition starts with: chain head, record, last event.
_READ_ROW = "SELECT head_hash, record, head_seq FROM ledger_keys WHERE key = ?"
_KEY_EVENTS_SCANNED = f"SELECT {EVENT_COLUMNS} FROM ledger_events WHERE key = ? ORDER BY seq"


def _key_events(conn: sqlite3.Connection, key: str) -> list[tuple[Any, ...]]:
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


def path_from_url(url: str) -> Path:
    if not url.startswith("sqlite:///"):
        raise InvalidRequest(f"not a SQLite ledger URL (want sqlite:///path): {url!r}")
    raw = url.removeprefix("sqlite:///")
    if not raw:
        raise InvalidRequest(
            "sqlite URL names no file: use sqlite:///relative.db or sqlite:////absolute/path.db"
        )
    return Path(raw)


def integrity_error(exc: Exception) -> InvalidRequest:
    """What a unique index's refusal means to the caller (shared with the PostgreSQL recorder)."""
    if "action_id" in str(exc):
        return DuplicateActionId(
            "this action_id was already submitted for a different request: every "
            "submission needs its own action_id"
        )
    return InvalidRequest(f"the ledger refused the write: {exc}")


def _into_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put the file in WAL mode. The switch does not wait on the busy handler: while
    another process creates the same new file (its first transaction holds it), it says
    "database is locked" at once, so it is tried again until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class _SQLiteTransaction(Transaction):
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
        values: list[Any] = [*event_values(pending[0]), self._head_seq]
        for event in pending[1:]:
            values.extend((*event_values(event), 0))
        cursor = self._conn.execute(_insert_events_sql(len(pending)), values)
        self._head_seq = cursor.lastrowid

    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        self.flush()
        if created:
            sql, values = _INSERT_LINKED_RECORD, record_values(record)
        elif self.index_unchanged(record):
            sql, values = _UPDATE_LINKED_ROW, row_values(record)
        else:
            sql, values = _UPDATE_LINKED_RECORD, record_values(record)
        self._conn.execute(sql, (*values[:-1], self._head_seq, values[-1]))
        self._stored_head_seq = self._head_seq

    def compact_bodies(self, through_seq: int) -> int:
        self.flush()
        tombstone = json.dumps(TOMBSTONE)
        cursor = self._conn.executemany(
            "UPDATE ledger_events SET payload = ? WHERE seq = ? AND payload != ?",
            [
                (tombstone, row[0], tombstone)
                for row in _key_events(self._conn, self.key)
                if row[0] <= through_seq
            ],
        )
        return cursor.rowcount


class SQLiteRecorder(Recorder):
    """A ledger in one SQLite file (WAL, ``synchronous=FULL``; a replay's record
    ``synchronous=NORMAL``)."""

    max_concurrency = 1
    reads_now = True
    # A failed local COMMIT did not commit, and the next try meets the same file.
    reconnects = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 60.0,
    ) -> None:
        """Open (and create, or migrate) the ledger in the file at ``path``.

        Args:
            path: The file.
            busy_timeout: How long a write waits for another process's.
        """
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            raise InvalidRequest(
                f"SQLite ledger {self.path}: folder {self.path.parent.absolute()} does not "
                "exist: create it or pass another path"
            )
        self._lock = threading.RLock()
        self._writer = Writers(
            "ledger-sqlite-writer",
            lambda job: self._commit(job.key, job.fn, durable=job.durable, expected=job.expected),
        )
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            _into_wal(self._conn, busy_timeout)
            # The started marker must be on disk before the adapter acts.
            self._conn.execute("PRAGMA synchronous=FULL")
            self._synchronous_full = True
            # Key lookups touch a few index pages of a large file; keep them cached
            # (64 MiB at most, allocated as used).
            self._conn.execute("PRAGMA cache_size=-65536")
            self._busy_ms = int(busy_timeout * 1000)
            self._conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            self._migrate()
            # Reads on their own connection: in WAL mode they see what is committed and
            # never wait for the writer's commit (and its sync) to finish.
            self._read_lock = threading.Lock()
            self._read_conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            self._read_conn.execute("PRAGMA cache_size=-65536")
            # The event loop's own reads (read_now): a connection no other thread waits
            # on, so a long read elsewhere (verify, events) never blocks the loop.
            self._loop_read_lock = threading.Lock()
            self._loop_read_conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            self._loop_read_conn.execute("PRAGMA cache_size=-16384")
        except sqlite3.DatabaseError as exc:
            raise LedgerUnavailable(f"cannot open SQLite ledger {self.path}: {exc}") from exc

    @classmethod
    def from_url(cls, url: str) -> SQLiteRecorder:
        return cls(path_from_url(url))

    def _migrate(self) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                current = stored_schema_version(
                    self._conn, where=str(self.path), known=len(MIGRATIONS)
                )
                for statements in MIGRATIONS[current:]:
                    for statement in statements:
                        self._conn.execute(statement)
                if current < len(MIGRATIONS):
                    self._conn.execute(
                        "INSERT OR REPLACE INTO ledger_meta (name, value)"
                        " VALUES ('schema_version', ?)",
                        (str(len(MIGRATIONS)),),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def now(self) -> float:
        return time.time()

    def submit(self, key: str, fn: Callable[[Transaction], T]) -> Future[T]:
        future: Future[T] = Future()
        self._writer.put(Job(key, fn, future))
        return future

    def submit_on_loop(
        self, key: str, fn: Callable[[Transaction], T], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[T] | None:
        if type(self).submit is not SQLiteRecorder.submit:
            # A subclass that reroutes submit (a test's fault injection) keeps its route.
            return super().submit_on_loop(key, fn, loop)
        future: asyncio.Future[T] = loop.create_future()
        self._writer.put(Job(key, fn, future, loop))
        return future

    def submit_replay_on_loop(
        self,
        key: str,
        fn: Callable[[Transaction], T],
        loop: asyncio.AbstractEventLoop,
        *,
        expected: KeyRecord | None = None,
    ) -> asyncio.Future[T] | None:
        if type(self).submit is not SQLiteRecorder.submit:
            return super().submit_replay_on_loop(key, fn, loop, expected=expected)
        future: asyncio.Future[T] = loop.create_future()
        self._writer.put(Job(key, fn, future, loop, durable=False, expected=expected))
        return future

    def _synchronous(self, full: bool) -> None:
        """Set the writer's sync level for its next commit (outside a transaction: SQLite
        refuses to change it inside one). In WAL mode a NORMAL commit is written to the
        log without a sync; the next FULL commit's sync of the log carries it to the disk,
        and a process killed meanwhile loses nothing (the operating system has it)."""
        if self._synchronous_full != full:
            self._conn.execute("PRAGMA synchronous=FULL" if full else "PRAGMA synchronous=NORMAL")
            self._synchronous_full = full

    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        return self._commit(key, fn)

    def _commit(
        self,
        key: str,
        fn: Callable[[Transaction], T],
        *,
        durable: bool = True,
        expected: KeyRecord | None = None,
    ) -> T:
        """Run ``fn`` in one transaction and commit it (``durable``: with a sync).
        ``expected``: the settled record a replay was decided on, used as it is while the
        key's chain head still matches (its parse is most of a replay's read)."""
        conn = self._conn
        with self._lock:
            try:
                self._synchronous(durable)
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise LedgerUnavailable(f"SQLite ledger {self.path} is busy: {exc}") from exc
            try:
                row = conn.execute(_READ_ROW, (key,)).fetchone()
                if row is None:
                    record = None
                elif expected is not None and row[0] == expected.head_hash:
                    record = expected
                else:
                    record = KeyRecord.from_json(row[1])
                head_seq = None if row is None else row[2]
                tx = _SQLiteTransaction(conn, key, record, self.now(), head_seq)
                result = fn(tx)
                tx.finish()
                conn.execute("COMMIT")
                return result
            except sqlite3.IntegrityError as exc:
                conn.execute("ROLLBACK")
                raise integrity_error(exc) from exc
            except sqlite3.OperationalError as exc:
                # A failed COMMIT on a local file did not commit: nothing was recorded.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise LedgerUnavailable(
                    f"SQLite ledger {self.path} failed a write for key {key!r}; nothing was "
                    f"recorded: {exc}"
                ) from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def read_now(self, key: str) -> tuple[KeyRecord | None, float] | None:
        # A read of one row by its primary key in WAL mode never waits for a writer; a
        # second event loop reading at this instant is sent to a thread instead.
        if not self._loop_read_lock.acquire(blocking=False):
            return None
        try:
            row = self._loop_read_conn.execute(
                "SELECT record FROM ledger_keys WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.OperationalError:
            return None  # the thread's read reports it
        finally:
            self._loop_read_lock.release()
        return (KeyRecord.from_json(row[0]) if row else None), self.now()

    def tally(self) -> dict[int, Tally]:
        with self._read_lock:
            rows = self._read_conn.execute(
                "SELECT stripe, keys, events, digest FROM ledger_stripes"
            ).fetchall()
        return {stripe: Tally(keys, events, digest) for stripe, keys, events, digest in rows}

    def get(self, key: str) -> KeyRecord | None:
        with self._read_lock:
            row = self._read_conn.execute(
                "SELECT record FROM ledger_keys WHERE key = ?", (key,)
            ).fetchone()
        return KeyRecord.from_json(row[0]) if row else None

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        if key is not None:
            with self._read_lock:
                rows = _key_events(self._read_conn, key)
            found = [event_from_row(row) for row in rows if row[0] > after]
            return found if limit is None or limit < 0 else found[:limit]  # as SQL's LIMIT
        sql, params = events_sql("?", key=key, after=after, limit=limit)
        with self._read_lock:
            rows = self._read_conn.execute(sql, params).fetchall()
        return [event_from_row(row) for row in rows]

    def records(self) -> Iterator[KeyRecord]:
        with self._read_lock:
            rows = self._read_conn.execute("SELECT record FROM ledger_keys ORDER BY key").fetchall()
        for (text,) in rows:
            yield KeyRecord.from_json(text)

    def candidate_open_effects(self) -> list[KeyRecord]:
        with self._read_lock:
            # The partial index's own condition, word for word: the planner uses an index
            # only for a query whose condition implies the index's, and not through
            # bound parameters.
            rows = self._read_conn.execute(
                "SELECT record FROM ledger_keys"
                " WHERE effect = 'unknown' OR phase IN ('claimed', 'running') ORDER BY key"
            ).fetchall()
        return [KeyRecord.from_json(text) for (text,) in rows]

    def compactable(self, settled_before: str) -> list[str]:
        # No index serves this (see MIGRATIONS): one pass
        # over the table, sorted here (UTF-8 byte order, SQLite's, is code point order).
        with self._read_lock:
            rows = self._read_conn.execute(
                "SELECT key FROM ledger_keys NOT INDEXED WHERE compacted = 0 AND phase = ?"
                " AND settled_at < ? AND effect != 'unknown'",
                (Phase.SETTLED, settled_before),
            ).fetchall()
        return sorted(key for (key,) in rows)

    def close(self) -> None:
        self._writer.close()
        with self._read_lock:
            self._read_conn.close()
        with self._loop_read_lock:
            self._loop_read_conn.close()
        with self._lock:
            self._conn.close()
