"""The shared backend: PostgreSQL through psycopg 3 and a connection pool.

Workers on many machines share one ledger. Every write is one transaction that
first takes a transaction-scoped advisory lock on the key's hash, so writes to one
key serialise while writes to different keys run side by side. Leases are judged
by the database clock, never by a worker's clock, so skewed workers still agree on
who holds a key.

The payload is stored as TEXT (not jsonb) so the stored bytes are exactly the ones
hashed, as in the SQLite backend.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL ledger needs the 'postgres' extra ({exc.name} is missing): "
        "pip install 'temporal-ledger[postgres]'"
    ) from exc

from ._errors import InvalidRequest, LedgerUnavailable
from ._models import LedgerEvent
from ._recorder import (
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Phase,
    Recorder,
    T,
    Transaction,
    event_from_row,
    event_values,
    events_sql,
    insert_event_sql,
    record_values,
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
    def __init__(
        self, conn: psycopg.Connection[Any], key: str, record: KeyRecord | None, now: float
    ) -> None:
        super().__init__(key, record, now)
        self._conn = conn

    def _insert_event(self, event: PendingEvent) -> None:
        self._conn.execute(insert_event_sql("%s"), event_values(event))

    def _write_record(self, record: KeyRecord, *, created: bool) -> None:
        self._conn.execute(write_record_sql("%s", created=created), record_values(record))

    def compact_bodies(self, through_seq: int) -> int:
        tombstone = json.dumps(TOMBSTONE)
        cursor = self._conn.execute(
            "UPDATE ledger_events SET payload = %s WHERE key = %s AND seq <= %s AND payload != %s",
            (tombstone, self.key, through_seq, tombstone),
        )
        return cursor.rowcount


class PostgresRecorder(Recorder):
    """A ledger in a PostgreSQL database, shared by any number of processes and machines.

    ``pool_size`` bounds the connections this process opens (and so how many
    ledger calls run at once); ``timeout`` bounds how long a call waits for a
    connection before raising :class:`LedgerUnavailable`.
    """

    # A dead connection is discarded; the next transaction runs on a checked or new one.
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
            # A connection killed by a restart or pg_terminate_backend is found
            # and replaced when taken from the pool, not on first use by the rule.
            check=self._check,
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

    @contextmanager
    def _connection(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; connection failures become :class:`LedgerUnavailable`."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except _CONNECTION_ERRORS as exc:
            self._purge()
            raise LedgerUnavailable(
                f"the PostgreSQL ledger at {self.where} is unavailable while {doing}: "
                f"{_reason(exc)}"
            ) from exc

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            # One dead connection usually means a restart killed them all. Purging
            # the rest now lets the pool hand out a fresh one at once, instead of
            # backing off (1 s, 2 s, ...) through each dead one in turn.
            self._purge()
            raise

    def _purge(self) -> None:
        with suppress(Exception):
            self._pool.check()

    def now(self) -> float:
        with self._connection("reading the database clock") as conn:
            row = conn.execute(_NOW).fetchone()
        assert row is not None
        return float(row[0])

    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        committing = False
        try:
            with self._pool.connection() as conn, conn.transaction():
                # Per-key serialisation: other keys are never blocked. The lock is
                # taken in its own statement so the read below sees the previous
                # holder's commit (READ COMMITTED snapshots per statement).
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
                row = conn.execute(
                    f"SELECT ({_NOW}), (SELECT record FROM ledger_keys WHERE key = %s)", (key,)
                ).fetchone()
                assert row is not None
                now, text = row
                record = KeyRecord.from_json(text) if text is not None else None
                result = fn(_PostgresTransaction(conn, key, record, float(now)))
                committing = True
            return result
        except psycopg.IntegrityError as exc:
            raise integrity_error(exc) from exc
        except _CONNECTION_ERRORS as exc:
            self._purge()
            if committing:
                # The COMMIT was sent and its answer lost: it may or may not have
                # landed. The ledger releases a claim that did land as a no-effect
                # failure (Ledger._release_unused_claim), and retries a completion,
                # which finds its own record if the first try landed.
                what = "while committing; the commit may or may not have been recorded"
            else:
                what = "before commit; the transaction was rolled back, nothing was recorded"
            raise LedgerUnavailable(
                f"the PostgreSQL ledger at {self.where} became unavailable for key {key!r} "
                f"{what}: {_reason(exc)}",
                maybe_committed=committing,
            ) from exc
        except psycopg.DataError as exc:
            raise InvalidRequest(f"the ledger refused the write: {exc}") from exc
        except psycopg.Error as exc:
            raise LedgerUnavailable(
                f"the PostgreSQL ledger at {self.where} failed a write for key {key!r}; the "
                f"transaction was rolled back: {_reason(exc)}"
            ) from exc

    def get(self, key: str) -> KeyRecord | None:
        with self._connection("reading a key") as conn:
            row = conn.execute("SELECT record FROM ledger_keys WHERE key = %s", (key,)).fetchone()
        return KeyRecord.from_json(row[0]) if row else None

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        sql, params = events_sql("%s", key=key, after=after, limit=limit)
        with self._connection("reading events") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [event_from_row(row) for row in rows]

    def records(self) -> Iterator[KeyRecord]:
        # Pages by key so a large ledger neither sits in memory nor pins a pooled
        # connection while the caller iterates.
        last: str | None = None
        while True:
            with self._connection("reading key states") as conn:
                if last is None:
                    rows = conn.execute(
                        "SELECT key, record FROM ledger_keys ORDER BY key LIMIT 1000"
                    ).fetchall()
                else:
                    rows = conn.execute(
                        "SELECT key, record FROM ledger_keys WHERE key > %s ORDER BY key"
                        " LIMIT 1000",
                        (last,),
                    ).fetchall()
            for _, text in rows:
                yield KeyRecord.from_json(text)
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def candidate_open_effects(self) -> list[KeyRecord]:
        with self._connection("listing open effects") as conn:
            rows = conn.execute(
                "SELECT record FROM ledger_keys WHERE effect = 'unknown' OR phase IN (%s, %s)"
                " ORDER BY key",
                (Phase.CLAIMED, Phase.RUNNING),
            ).fetchall()
        return [KeyRecord.from_json(text) for (text,) in rows]

    def compactable(self, settled_before: str) -> list[str]:
        with self._connection("listing compactable keys") as conn:
            rows = conn.execute(
                "SELECT key FROM ledger_keys WHERE compacted = 0 AND phase = %s"
                " AND settled_at < %s AND effect != 'unknown' ORDER BY key",
                (Phase.SETTLED, settled_before),
            ).fetchall()
        return [key for (key,) in rows]

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._pool.close()


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


__all__ = ["MIGRATIONS", "PostgresRecorder"]
