"""What the SQL backends share: their schema's migration, their events' columns and
reads, over each backend's own way to run a statement (:class:`SQLRecorder`)."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

from ._errors import InvalidRequest
from ._models import LedgerEvent
from ._recorder import Recorder
from ._transaction import KeyRecord, Phase, Tally


def migrate(conn: Any, migrations: list[tuple[str, ...]], *, where: str) -> None:
    """Bring the ledger behind ``conn`` (a DB-API connection, inside the caller's
    transaction) from the schema version it records (0 for a new database, whose version
    table this creates) to the last of ``migrations``, applying those in between in order.

    Raises:
        InvalidRequest: The version is newer than the migrations of this release.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS ledger_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
    )
    row = conn.execute("SELECT value FROM ledger_meta WHERE name = 'schema_version'").fetchone()
    current = int(row[0]) if row else 0
    if current > len(migrations):
        raise InvalidRequest(
            f"ledger {where} has schema version {current}, newer than this release "
            f"understands ({len(migrations)}); upgrade the package"
        )
    for statements in migrations[current:]:
        for statement in statements:
            conn.execute(statement)
    if current < len(migrations):
        conn.execute(  # the version is this module's own number, never a value given
            f"INSERT INTO ledger_meta (name, value) VALUES ('schema_version', '{len(migrations)}')"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value"
        )


EVENT_COLUMNS = "seq, key, action_id, type, payload, recorded_at, body_hash, prev_hash, hash"


def event_from_row(row: tuple[Any, ...]) -> LedgerEvent:
    """Build an event from a row of :data:`EVENT_COLUMNS`, the order every backend selects
    in (its payload as the JSON text stored)."""
    event = dict(zip(EVENT_COLUMNS.split(", "), row, strict=True))
    event["payload"] = json.loads(event["payload"])
    return LedgerEvent(**event)


class SQLRecorder(Recorder):
    """The reads the SQL backends share, over the backend's :meth:`_rows`."""

    #: The backend's placeholder of a bound parameter.
    _mark = "?"
    #: How :meth:`compactable` reads the table (after its name).
    _scan = ""

    @abstractmethod
    def _rows(self, doing: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read; ``doing`` says what it is, for an error's message."""

    def tally(self) -> dict[int, Tally]:
        rows = self._rows(
            "reading the tally", "SELECT stripe, keys, events, digest FROM ledger_stripes"
        )
        return {stripe: Tally(keys, events, digest) for stripe, keys, events, digest in rows}

    def get(self, key: str) -> KeyRecord | None:
        sql = f"SELECT record FROM ledger_keys WHERE key = {self._mark}"
        rows = self._rows("reading a key", sql, (key,))
        return KeyRecord.from_json(rows[0][0]) if rows else None

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        mark = self._mark
        sql = f"SELECT {EVENT_COLUMNS} FROM ledger_events WHERE seq > {mark}"
        params: list[object] = [after]
        if key is not None:
            sql += f" AND key = {mark}"
            params.append(key)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {mark}"
            params.append(limit)
        return [event_from_row(row) for row in self._rows("reading events", sql, params)]

    def records(self) -> Iterator[KeyRecord]:
        # Pages by key so a large ledger neither sits in memory nor holds a connection
        # while the caller iterates.
        last = ""  # below every key (a key has at least one character)
        sql = (
            f"SELECT key, record FROM ledger_keys WHERE key > {self._mark} ORDER BY key LIMIT 1000"
        )
        while True:
            rows = self._rows("reading key states", sql, (last,))
            for _, text in rows:
                yield KeyRecord.from_json(text)
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def candidate_open_effects(self) -> list[KeyRecord]:
        # SQLite's partial index's own condition, word for word: its planner uses an index
        # only for a query whose condition implies the index's, and not through parameters.
        rows = self._rows(
            "listing open effects",
            "SELECT record FROM ledger_keys"
            " WHERE effect = 'unknown' OR phase IN ('claimed', 'running') ORDER BY key",
        )
        return [KeyRecord.from_json(text) for (text,) in rows]

    def compactable(self, settled_before: str) -> list[str]:
        # Sorted here: UTF-8 byte order (SQLite's, and PostgreSQL's "C" collation of the
        # keys) is code point order.
        mark = self._mark
        rows = self._rows(
            "listing compactable keys",
            f"SELECT key FROM ledger_keys{self._scan} WHERE compacted = 0 AND phase = {mark}"
            f" AND settled_at < {mark} AND effect != 'unknown'",
            (Phase.SETTLED, settled_before),
        )
        return sorted(key for (key,) in rows)
