"""What somebody who can write the ledger's tables does: append an event to a key's log
with the chain recomputed, so that every hash and count checks out (either backend)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from typing import Any

from temporal_ledger.ledger._recorder import body_hash, chain_hash, iso, payload_text


def append_forged_event(
    ledger_url: str, key: str, type: str, payload: dict[str, Any], action_id: str | None = None
) -> int:
    """Append ``payload`` as the key's newest event, chained as the ledger would, and move
    the key's head and count; returns the new event's seq."""
    if ledger_url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(ledger_url.removeprefix("sqlite:///"))) as db:
            with db:
                return _forge(db.cursor(), "?", key, type, payload, action_id)
    import psycopg

    with psycopg.connect(ledger_url) as db, db.cursor() as cursor:
        return _forge(cursor, "%s", key, type, payload, action_id)


def _forge(
    cursor: Any, mark: str, key: str, type: str, payload: dict[str, Any], action_id: str | None
) -> int:
    cursor.execute(f"SELECT record FROM ledger_keys WHERE key = {mark}", (key,))
    record = json.loads(cursor.fetchone()[0])
    recorded_at = iso(time.time())
    digest = body_hash(payload)
    event_hash = chain_hash(
        prev_hash=record["head_hash"],
        key=key,
        action_id=action_id,
        type=type,
        body=digest,
        recorded_at=recorded_at,
    )
    cursor.execute(
        "INSERT INTO ledger_events (key, action_id, type, payload, recorded_at, body_hash,"
        f" prev_hash, hash) VALUES ({', '.join([mark] * 8)}) RETURNING seq",
        (key, action_id, type, payload_text(payload), recorded_at, digest,
         record["head_hash"], event_hash),
    )  # fmt: skip
    seq = cursor.fetchone()[0]
    record.update(head_hash=event_hash, events=record["events"] + 1)
    cursor.execute(
        f"UPDATE ledger_keys SET record = {mark} WHERE key = {mark}", (json.dumps(record), key)
    )
    return int(seq)
