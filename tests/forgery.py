"""What somebody who can write the ledger's tables does: append an event to a key's log
with the chain recomputed, and every count and head the ledger keeps rewritten to match,
so that every hash and count checks out (either backend)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from typing import Any

from temporal_ledger.ledger._transaction import iso, payload_text
from temporal_ledger.ledger._verify import body_hash, chain_hash


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
    old_head = record["head_hash"]
    record.update(head_hash=event_hash, events=record["events"] + 1)
    cursor.execute(
        f"UPDATE ledger_keys SET record = {mark} WHERE key = {mark}", (json.dumps(record), key)
    )
    _recount(cursor, mark, key, old_head, event_hash)
    return int(seq)


def _recount(cursor: Any, mark: str, key: str, old_head: str, new_head: str) -> None:
    """Whatever else the ledger keeps about a key's chain, rewritten to match: a head
    column of its own and a ledger-wide tally, where the schema has them."""
    if mark == "?":
        cursor.execute("PRAGMA table_info(ledger_keys)")
        columns = {row[1] for row in cursor.fetchall()}
        cursor.execute("SELECT name FROM sqlite_master WHERE name = 'ledger_stripes'")
        tally = cursor.fetchone() is not None
    else:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'ledger_keys'"
        )
        columns = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT to_regclass('ledger_stripes') IS NOT NULL")
        tally = bool(cursor.fetchone()[0])
    if "head_hash" in columns:
        cursor.execute(
            f"UPDATE ledger_keys SET head_hash = {mark} WHERE key = {mark}", (new_head, key)
        )
    if tally:
        from temporal_ledger.ledger._verify import head_mark as mark_of
        from temporal_ledger.ledger._verify import stripe_of

        stripe = stripe_of(key)
        cursor.execute(
            f"SELECT events, digest FROM ledger_stripes WHERE stripe = {mark}", (stripe,)
        )
        events, digest = cursor.fetchone()
        cursor.execute(
            f"UPDATE ledger_stripes SET events = {mark}, digest = {mark} WHERE stripe = {mark}",
            (events + 1, digest ^ mark_of(old_head) ^ mark_of(new_head), stripe),
        )
