"""The embedded backend: one SQLite file in WAL mode with durable (FULL) commits.

Every write is a ``BEGIN IMMEDIATE`` transaction, so two processes on one file
serialise on SQLite's write lock and can never both claim a key. Within a process, the
writes of an event loop's calls go to one writer thread, in order, each committed
before its caller is answered. (Committing the transitions queued together in one
transaction and one sync paid nothing a user sees: bench/README.md, issue 42.)
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ._errors import DuplicateActionId, InvalidRequest, LedgerUnavailable
from ._models import LedgerEvent
from ._recorder import Job, T, Writers
from ._sql import SQLRecorder, event_from_row, migrate
from ._sqlite_write import MIGRATIONS, READ_ROW, SQLiteTransaction, key_events
from ._transaction import KeyRecord, Transaction


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


def _connect(path: Path, timeout: float, *, cache_kib: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)
    conn.execute(f"PRAGMA cache_size=-{cache_kib}")
    return conn


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


class SQLiteRecorder(SQLRecorder):
    """A ledger in one SQLite file (WAL, ``synchronous=FULL``; a replay's record
    ``synchronous=NORMAL``)."""

    reads_now = True
    # No index serves compaction (see MIGRATIONS): one pass over the table.
    _scan = " NOT INDEXED"
    # A failed local COMMIT did not commit, and the next try meets the same file.
    reconnects = False

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 60.0) -> None:
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
        self._writers: Writers = Writers("ledger-sqlite-writer")
        try:
            # Key lookups touch a few index pages of a large file; keep them cached (up
            # to 64 MiB, allocated as used; 16 MiB for the event loop's own reads).
            self._conn = _connect(self.path, busy_timeout, cache_kib=65536)
            _into_wal(self._conn, busy_timeout)
            # The started marker must be on disk before the adapter acts.
            self._conn.execute("PRAGMA synchronous=FULL")
            self._synchronous_full = True
            self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            # Two processes opening a new file agree: the migration holds the write lock.
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                migrate(self._conn, MIGRATIONS, where=str(self.path))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            # Reads on their own connection: in WAL mode they see what is committed and
            # never wait for the writer's commit (and its sync) to finish.
            self._read_lock = threading.Lock()
            self._read_conn = _connect(self.path, busy_timeout, cache_kib=65536)
            # The event loop's own reads (read_now): a connection no other thread waits
            # on, so a long read elsewhere (verify, events) never blocks the loop.
            self._loop_read_lock = threading.Lock()
            self._loop_read_conn = _connect(self.path, busy_timeout, cache_kib=16384)
        except sqlite3.DatabaseError as exc:
            raise LedgerUnavailable(f"cannot open SQLite ledger {self.path}: {exc}") from exc

    def now(self) -> float:
        return time.time()

    def submit(self, key: str, fn: Callable[[Transaction], T]) -> Future[T]:
        future: Future[T] = Future()
        self._writers.put(Job(functools.partial(self._commit, key, fn), future))
        return future

    def _job(
        self, key: str, fn: Callable[[Transaction], T], durable: bool, expected: KeyRecord | None
    ) -> Callable[[], T] | None:
        if type(self).submit is not SQLiteRecorder.submit:
            return None  # a subclass that reroutes submit (a test's fault injection) keeps it
        return functools.partial(self._commit, key, fn, durable=durable, expected=expected)

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
                # The sync level of this commit, set outside a transaction (SQLite refuses
                # to change it inside one). In WAL mode a NORMAL commit is written to the
                # log without a sync; the next FULL commit's sync of the log carries it to
                # the disk, and a process killed meanwhile loses nothing (the OS has it).
                if self._synchronous_full != durable:
                    conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                    self._synchronous_full = durable
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise LedgerUnavailable(f"SQLite ledger {self.path} is busy: {exc}") from exc
            try:
                row = conn.execute(READ_ROW, (key,)).fetchone()
                if row is None:
                    record = None
                elif expected is not None and row[0] == expected.head_hash:
                    record = expected
                else:
                    record = KeyRecord.from_json(row[1])
                head_seq = None if row is None else row[2]
                tx = SQLiteTransaction(conn, key, record, self.now(), head_seq)
                result = fn(tx)
                tx.finish()
                conn.execute("COMMIT")
                return result
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.IntegrityError):
                    raise integrity_error(exc) from exc
                if isinstance(exc, sqlite3.OperationalError):
                    # A failed COMMIT on a local file did not commit: nothing was recorded.
                    raise LedgerUnavailable(
                        f"SQLite ledger {self.path} failed a write for key {key!r}; nothing "
                        f"was recorded: {exc}"
                    ) from exc
                raise

    # The ledger's own transactions; the writer threads run _commit's jobs themselves.
    transact = _commit

    def read_now(self, key: str) -> tuple[KeyRecord | None, float] | None:
        # A read of one row by its primary key in WAL mode never waits for a writer; a
        # second event loop reading at this instant is sent to a thread instead.
        if not self._loop_read_lock.acquire(blocking=False):
            return None
        try:
            row = self._loop_read_conn.execute(READ_ROW, (key,)).fetchone()
        except sqlite3.OperationalError:
            return None  # the thread's read reports it
        finally:
            self._loop_read_lock.release()
        return (KeyRecord.from_json(row[1]) if row else None), self.now()

    def _rows(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            return self._read_conn.execute(sql, params).fetchall()

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        if key is None:
            return super().events(after=after, limit=limit)
        with self._read_lock:
            rows = key_events(self._read_conn, key)
        found = [event_from_row(row) for row in rows if row[0] > after]
        return found if limit is None or limit < 0 else found[:limit]  # as SQL's LIMIT

    def close(self) -> None:
        self._writers.close()
        with self._read_lock:
            self._read_conn.close()
        with self._loop_read_lock:
            self._loop_read_conn.close()
        with self._lock:
            self._conn.close()
