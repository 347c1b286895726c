"""A third backend, kept in the tests: a ledger held in memory.

It is what a backend of one's own needs and no more: a :class:`Transaction` that stages
its writes and a :class:`Recorder` that commits them whole under one lock. It proves that
``temporal_ledger.ledger.testing`` runs over any recorder, not only over the URLs
``Ledger.open`` knows. Nothing here is durable; it is not for use outside the tests.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from temporal_ledger.ledger import Ledger
from temporal_ledger.ledger._errors import DuplicateActionId
from temporal_ledger.ledger._models import EventType, LedgerEvent
from temporal_ledger.ledger._recorder import Recorder, T
from temporal_ledger.ledger._transaction import (
    TALLY_STRIPES,
    TOMBSTONE,
    KeyRecord,
    PendingEvent,
    Phase,
    Tally,
    Transaction,
    indexed_values,
)


class MemoryStore:
    """What outlives one recorder: the log, the records and the tally."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[LedgerEvent] = []
        self.records: dict[str, str] = {}  # the record as JSON, as a database keeps it
        self.requested: set[str] = set()  # action ids with a request event
        self.stripes = {stripe: Tally(0, 0, 0) for stripe in range(TALLY_STRIPES)}


class MemoryTransaction(Transaction):
    """Stages events and the record; :meth:`commit` makes them visible together."""

    def __init__(self, store: MemoryStore, key: str, record: KeyRecord | None, now: float):
        super().__init__(key, record, now)
        self._store = store
        self._events: list[PendingEvent] = []
        self._record: KeyRecord | None = None
        self._compacted = False

    def insert_event(self, event: PendingEvent) -> None:
        if event.type == EventType.REQUESTED and (
            event.action_id in self._store.requested
            or any(e.action_id == event.action_id and e.type == event.type for e in self._events)
        ):
            raise DuplicateActionId(
                "this action_id was already submitted for a different request: every "
                "submission needs its own action_id"
            )
        self._events.append(event)

    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        self._record = copy.deepcopy(record)

    def compact_bodies(self) -> int:
        self._compacted = True
        return sum(1 for e in self._store.events if e.key == self.key and e.payload != TOMBSTONE)

    def commit(self) -> None:
        store = self._store
        if self._compacted:
            store.events = [
                e.model_copy(update={"payload": dict(TOMBSTONE)}) if e.key == self.key else e
                for e in store.events
            ]
        for event in self._events:
            store.events.append(
                LedgerEvent(
                    seq=len(store.events) + 1,
                    key=event.key,
                    action_id=event.action_id,
                    type=event.type,
                    payload=copy.deepcopy(event.payload),
                    recorded_at=event.recorded_at,
                    body_hash=event.body_hash,
                    prev_hash=event.prev_hash,
                    hash=event.hash,
                )
            )
            if event.type == EventType.REQUESTED and event.action_id is not None:
                store.requested.add(event.action_id)
        if self._record is not None:
            store.records[self.key] = self._record.to_json()
        added = self.tally()
        if added is not None:
            stripe, tally = added
            was = store.stripes[stripe]
            store.stripes[stripe] = Tally(
                was.keys + tally.keys, was.events + tally.events, was.digest ^ tally.digest
            )


class MemoryRecorder(Recorder):
    """A recorder over a :class:`MemoryStore`; several may share one, as processes share
    a database."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        with self._store.lock:
            tx = MemoryTransaction(self._store, key, self._read(key), self.now())
            result = fn(tx)  # if it raises, nothing staged is kept
            tx.commit()
            return result

    def _read(self, key: str) -> KeyRecord | None:
        text = self._store.records.get(key)
        return None if text is None else KeyRecord.from_json(text)

    def get(self, key: str) -> KeyRecord | None:
        with self._store.lock:
            return self._read(key)

    def now(self) -> float:
        return time.time()

    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]:
        with self._store.lock:
            chosen = [
                e for e in self._store.events if e.seq > after and (key is None or e.key == key)
            ]
        return chosen if limit is None else chosen[:limit]

    def records(self) -> Iterator[KeyRecord]:
        with self._store.lock:
            texts = [self._store.records[key] for key in sorted(self._store.records)]
        return iter([KeyRecord.from_json(text) for text in texts])

    def candidate_open_effects(self) -> list[KeyRecord]:
        return [
            record
            for record in self.records()
            if record.effect == "unknown" or record.phase in (Phase.CLAIMED, Phase.RUNNING)
        ]

    def compactable(self, settled_before: str) -> list[str]:
        keys = []
        for record in self.records():
            phase, effect, settled_at, compacted = indexed_values(record)
            if (
                phase == Phase.SETTLED
                and not compacted
                and effect != "unknown"
                and settled_at < settled_before
            ):
                keys.append(record.key)
        return keys

    def tally(self) -> dict[int, Tally]:
        with self._store.lock:
            return dict(self._store.stripes)

    def close(self) -> None:
        pass


def memory_ledger_opener(store: MemoryStore) -> Callable[..., Ledger]:
    """``open_ledger`` for the contract suite: each call a ledger over the same store."""

    def open_ledger(**options: Any) -> Ledger:
        return Ledger(MemoryRecorder(store), url="memory:", **options)

    return open_ledger
