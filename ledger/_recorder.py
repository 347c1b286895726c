"""The storage contract every backend implements.

The rule in :mod:`ledger._ledger` is written once against this contract; a backend
supplies atomic per-key transactions, the log and the per-key state table. Hash
chaining is done here, so every backend chains the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import math
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any, TypeVar

from ._canonical import sha256_hex
from ._models import LedgerEvent

T = TypeVar("T")

#: The payload a compacted event keeps: its body is gone, its hash is not.
TOMBSTONE: dict[str, Any] = {"compacted": True}

SCHEMA_VERSION = 2

#: The ledger-wide tally (``ledger_stripes``) keeps, per stripe of the keys, how many
#: keys have a record, how many events they hold, and the XOR of their chain heads: a
#: whole key deleted (its events and its record) leaves the stripe short. A transaction
#: updates only its key's stripe, so writers of different keys rarely meet on one row.
TALLY_STRIPES = 256


class Phase:
    """Where a key is in its life. Stored as text in ``ledger_keys.phase``."""

    VACANT = "vacant"  # only denials so far: no identity bound, nothing claimed
    CLAIMED = "claimed"  # claimed under a fencing token; no started marker yet
    #: Identity bound, nothing claimed: the call waits for a person's approval.
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"  # the started marker is durable; the adapter may be acting
    SETTLED = "settled"  # an outcome is recorded


@dataclasses.dataclass
class KeyRecord:
    """The per-key current state: what a lookup reads instead of scanning the log."""

    key: str
    phase: str = Phase.VACANT
    head_hash: str = ""
    events: int = 0
    fingerprint: str | None = None
    fingerprint_version: str | None = None
    dimensions: dict[str, str] = dataclasses.field(default_factory=dict)
    capability: str | None = None
    performer: str | None = None
    original_action_id: str | None = None
    token: int = 0
    holder_action_id: str | None = None
    lease_expires: float | None = None
    retry_safe: bool = False
    output_schema: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None
    reconciliations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The approval of the key's call, for calls that need one (``Approval`` fields).
    approval: dict[str, Any] | None = None
    updated_at: str = ""

    @property
    def effect(self) -> str | None:
        return None if self.outcome is None else self.outcome["effect"]

    @property
    def settled_at(self) -> str | None:
        return None if self.outcome is None else self.outcome.get("recorded_at")

    def to_json(self) -> str:
        # Every field is already a JSON value; vars() avoids asdict's deep copy.
        return _RECORD_ENCODER.encode(vars(self))

    @classmethod
    def from_json(cls, text: str) -> KeyRecord:
        fields = json.loads(text)
        if fields.keys() != _RECORD_FIELDS:
            # A record of another release (a field it lacks, or one it adds): the
            # constructor fills defaults in, or refuses what it does not know.
            return cls(**fields)
        # Every field present: the constructor would only copy them, one by one.
        record = cls.__new__(cls)
        record.__dict__.update(fields)
        return record


_RECORD_FIELDS = frozenset(field.name for field in dataclasses.fields(KeyRecord))


def resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Answer a caller's future on its event loop, unless it stopped waiting."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def iso(epoch: float) -> str:
    """``datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")``, with the
    date and time of day formatted once per second: every transaction stamps its events
    (and a claim its lease's end, a lease later: a few seconds are kept)."""
    if epoch < 0:
        return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")
    fraction, whole = math.modf(epoch)
    # Rounded as datetime rounds (half to even), carrying into the next second.
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole += 1.0
        micros -= 1_000_000
    second = int(whole)
    text = _ISO_SECONDS.get(second)
    if text is None:
        if len(_ISO_SECONDS) >= 64:
            _ISO_SECONDS.clear()  # a cache: another thread's entry may go too
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _ISO_SECONDS[second] = text
    return f"{text}.{micros:06d}+00:00"


_ISO_SECONDS: dict[int, str] = {}


# Built once: json.dumps with options builds a new encoder on every call.
# A record is built from JSON values and never refers to itself: no cycle check.
_RECORD_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
_PAYLOAD_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def payload_text(payload: dict[str, Any]) -> str:
    """The stored JSON text of a payload: sorted keys, so it re-serialises identically."""
    return _PAYLOAD_ENCODER.encode(payload)


def body_hash(payload: dict[str, Any]) -> str:
    return sha256_hex(payload_text(payload).encode())


def chain_hash(
    *, prev_hash: str, key: str, action_id: str | None, type: str, body: str, recorded_at: str
) -> str:
    """The hash that links one event to the previous event of the same key.

    Chains are per key so that appends for different keys never contend; the key's
    head hash and event count live in ``ledger_keys``, so a dropped tail is seen too.
    The fields are joined by a unit separator, which no key, id or type can contain.
    """
    fields = (prev_hash, key, action_id or "", type, body, recorded_at)
    return sha256_hex("\x1f".join(fields).encode())


def stripe_of(key: str) -> int:
    """The tally stripe a key counts in."""
    return zlib.crc32(key.encode()) % TALLY_STRIPES


def head_mark(head: str) -> int:
    """A chain head as the signed 64-bit number the tally XORs (0 for no events)."""
    if not head:
        return 0
    value = int(head[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclasses.dataclass(frozen=True)
class Tally:
    """One stripe of the ledger-wide tally, or what one transaction adds to its stripe."""

    keys: int
    events: int
    digest: int


def tally_of_records(records: Iterable[tuple[str, str, int]]) -> dict[int, Tally]:
    """The tally of ``(key, head hash, events)`` rows: what a migration writes for a
    ledger that had none, and what ``verify`` recomputes."""
    keys = [0] * TALLY_STRIPES
    events = [0] * TALLY_STRIPES
    digests = [0] * TALLY_STRIPES
    for key, head, count in records:
        stripe = stripe_of(key)
        keys[stripe] += 1
        events[stripe] += count
        digests[stripe] ^= head_mark(head)
    return {s: Tally(keys[s], events[s], digests[s]) for s in range(TALLY_STRIPES)}


@dataclasses.dataclass
class PendingEvent:
    key: str
    action_id: str | None
    type: str
    payload: dict[str, Any]
    payload_json: str
    recorded_at: str
    body_hash: str
    prev_hash: str
    hash: str


class Transaction(ABC):
    """One atomic, durable write transaction that holds one key.

    ``record`` is the key's current state (``None`` for a key never seen) and
    ``now`` the storage's clock. Nothing is visible to others until the backend
    commits, which it does only after the rule's function returned.
    """

    def __init__(self, key: str, record: KeyRecord | None, now: float) -> None:
        self.key = key
        self.record = record
        self.now = now
        self.recorded_at = iso(now)
        self._head = record.head_hash if record else ""
        self._count = record.events if record else 0
        self._start = (self._head, self._count)
        self._created = False
        # The indexed columns as stored: a save that leaves them as they were (a replay,
        # a lease renewal) rewrites only the row, not the indexes (SQLite skips an index
        # whose columns an UPDATE does not set; PostgreSQL can update the row in place).
        self._stored_index = indexed_values(record) if record else None

    def append(self, type: str, action_id: str | None, payload: dict[str, Any]) -> PendingEvent:
        text = payload_text(payload)
        digest = sha256_hex(text.encode())
        event = PendingEvent(
            key=self.key,
            action_id=action_id,
            type=type,
            payload=payload,
            payload_json=text,
            recorded_at=self.recorded_at,
            body_hash=digest,
            prev_hash=self._head,
            hash=chain_hash(
                prev_hash=self._head,
                key=self.key,
                action_id=action_id,
                type=type,
                body=digest,
                recorded_at=self.recorded_at,
            ),
        )
        self._insert_event(event)
        self._head = event.hash
        self._count += 1
        return event

    def save(self, record: KeyRecord) -> None:
        """Write the key's state, with the chain head of everything appended so far."""
        record.head_hash = self._head
        record.events = self._count
        record.updated_at = self.recorded_at
        created = self.record is None
        self._created = self._created or created
        self._write_record(record, created=created)
        self.record = record
        self._stored_index = indexed_values(record)

    def tally(self) -> tuple[int, Tally] | None:
        """What this transaction adds to the ledger-wide tally (its key's stripe, and the
        keys, events and head it adds there), or ``None`` if it wrote nothing that counts.
        A backend writes it in the same transaction as the events."""
        head, count = self._start
        if count == self._count and not self._created:
            return None
        return stripe_of(self.key), Tally(
            keys=int(self._created),
            events=self._count - count,
            digest=head_mark(head) ^ head_mark(self._head),
        )

    def index_unchanged(self, record: KeyRecord) -> bool:
        """Whether saving ``record`` leaves the indexed columns of the stored row as they
        are, so that :func:`update_row_sql` suffices (backends call it from ``_write_record``)."""
        return self._stored_index is not None and self._stored_index == indexed_values(record)

    @abstractmethod
    def _insert_event(self, event: PendingEvent) -> None: ...

    @abstractmethod
    def _write_record(self, record: KeyRecord, *, created: bool) -> None: ...

    @abstractmethod
    def compact_bodies(self, through_seq: int) -> int:
        """Replace the payload of this key's events up to ``through_seq`` by the tombstone."""


class Recorder(ABC):
    """A ledger's storage. Methods are synchronous; the ledger runs them off the event loop."""

    #: How many threads may call into this recorder at once.
    max_concurrency: int = 1

    #: Whether a :class:`LedgerUnavailable` from :meth:`transact` may be a lost
    #: connection that the next call does not meet (a pooled server backend). The
    #: ledger then retries the writes it must not lose; a local file's failed write
    #: is final, and retrying it would only delay the error.
    reconnects: bool = False

    @abstractmethod
    def transact(self, key: str, fn: Callable[[Transaction], T]) -> T:
        """Run ``fn`` in one atomic write transaction holding ``key``, then commit durably.

        If ``fn`` raises, nothing it did is kept.
        """

    def submit(self, key: str, fn: Callable[[Transaction], T]) -> Future[T] | None:
        """Queue ``fn`` like :meth:`transact` and answer once it is durable, or ``None``.

        A recorder that commits queued transactions together (one sync for many
        callers) returns a future; ``None`` means: call :meth:`transact` on a thread.
        """
        return None

    def submit_on_loop(
        self, key: str, fn: Callable[[Transaction], T], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[T] | None:
        """:meth:`submit`, answered as a future of the running event ``loop`` (a recorder
        may then wake the loop once for a whole batch of answers), or ``None``."""
        queued = self.submit(key, fn)
        return None if queued is None else asyncio.wrap_future(queued, loop=loop)

    def read_now(self, key: str) -> tuple[KeyRecord | None, float] | None:
        """The key's state and the storage's clock, read on the calling thread if that is
        cheap and cannot block (a local file), else ``None``: the caller then reads on a
        thread. A batched replay answers from this read without leaving the event loop."""
        return None

    def expect(self, key: str) -> tuple[KeyRecord | None, float] | None:
        """What this process expects the key's record to be (the last it wrote or read
        of it; ``None`` for a key it has not met) and the storage's clock estimated now,
        never ahead of the storage's own; or ``None`` when this recorder keeps no such
        memory. A guess that :meth:`transact_unchanged` checks, never trusted alone."""
        return None

    async def transact_unchanged(
        self, key: str, expected: KeyRecord | None, now: float, fn: Callable[[Transaction], T]
    ) -> tuple[bool, T | None] | None:
        """Run ``fn`` on ``expected`` as the key's record (``None``: the key has none), at
        ``now``, and commit what it wrote in one exchange with the storage, provided the
        key's log still ends where ``expected`` says (nothing was appended since; for
        ``None``, the key has no record yet). Answers ``(True, result)``, or ``(False,
        None)`` with nothing written when the key was not as expected; ``None`` means no
        shortcut was taken: use :meth:`transact`.

        A server backend saves round trips with it: the completion of an execution that
        nobody else touched, the claim of a new key, the replay of a recent call. ``fn``
        must be safe to run again through :meth:`transact`, and must not depend on what a
        write without an event changes (a lease): the caller does not offer a claimed or
        running key's record, except to the completion, which reads no lease.
        """
        return None

    def tally(self) -> dict[int, Tally] | None:
        """The ledger-wide tally by stripe, or ``None`` for a backend that keeps none
        (``verify`` then cannot see a whole key deleted)."""
        return None

    async def open_on_loop(self) -> None:
        """Get ready to serve the running event loop (``Ledger.__aenter__`` calls it: a
        server backend connects now rather than during its first call)."""
        return None

    async def close_on_loop(self) -> None:
        """Release what this recorder holds on the running event loop (``Ledger.aclose``
        calls it before :meth:`close`, which may run on another thread)."""
        return None

    @abstractmethod
    def get(self, key: str) -> KeyRecord | None: ...

    @abstractmethod
    def now(self) -> float:
        """The storage's clock, in seconds since the epoch (leases are judged by it)."""

    @abstractmethod
    def events(
        self, key: str | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[LedgerEvent]: ...

    @abstractmethod
    def records(self) -> Iterator[KeyRecord]:
        """Every key's state, in key order."""

    @abstractmethod
    def candidate_open_effects(self) -> list[KeyRecord]:
        """Keys whose effect may be unknown: settled unknown, or claimed/running (by index)."""

    @abstractmethod
    def compactable(self, settled_before: str) -> list[str]:
        """Keys with a final, known outcome settled before ``settled_before``, not compacted."""

    @abstractmethod
    def close(self) -> None: ...


def event_from_row(row: tuple[Any, ...]) -> LedgerEvent:
    """Build an event from ``(seq, key, action_id, type, payload, recorded_at, body_hash,
    prev_hash, hash)``; the column order every backend selects in."""
    seq, key, action_id, type_, payload, recorded_at, digest, prev_hash, hash_ = row
    if isinstance(payload, str):
        payload = json.loads(payload)
    return LedgerEvent(
        seq=seq,
        key=key,
        action_id=action_id,
        type=type_,
        payload=payload,
        recorded_at=recorded_at if isinstance(recorded_at, str) else recorded_at.isoformat(),
        body_hash=digest,
        prev_hash=prev_hash,
        hash=hash_,
    )


EVENT_COLUMNS = "seq, key, action_id, type, payload, recorded_at, body_hash, prev_hash, hash"

_EVENT_INSERT_COLUMNS = (
    "key",
    "action_id",
    "type",
    "payload",
    "recorded_at",
    "body_hash",
    "prev_hash",
    "hash",
)
_RECORD_COLUMNS = (
    "phase",
    "effect",
    "settled_at",
    "compacted",
    "token",
    "lease_expires",
    "head_hash",
    "record",
)


def events_sql(
    placeholder: str, *, key: str | None, after: int, limit: int | None
) -> tuple[str, list[object]]:
    """The SELECT of the log in order, optionally one key's, in the backend's style."""
    sql = f"SELECT {EVENT_COLUMNS} FROM ledger_events WHERE seq > {placeholder}"
    params: list[object] = [after]
    if key is not None:
        sql += f" AND key = {placeholder}"
        params.append(key)
    sql += " ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {placeholder}"
        params.append(limit)
    return sql, params


@functools.cache
def insert_event_sql(placeholder: str, rows: int = 1) -> str:
    """The INSERT of ``rows`` events in one statement, in the backend's parameter style
    (``?`` or ``%s``); parameters are the :func:`event_values` of each, in order."""
    marks = "(" + ", ".join([placeholder] * len(_EVENT_INSERT_COLUMNS)) + ")"
    values = ", ".join([marks] * rows)
    return f"INSERT INTO ledger_events ({', '.join(_EVENT_INSERT_COLUMNS)}) VALUES {values}"


def event_values(event: PendingEvent) -> tuple[Any, ...]:
    return (
        event.key,
        event.action_id,
        event.type,
        event.payload_json,
        event.recorded_at,
        event.body_hash,
        event.prev_hash,
        event.hash,
    )


@functools.cache
def write_record_sql(placeholder: str, *, created: bool) -> str:
    """The INSERT or UPDATE of a key's state; parameters are :func:`record_values`."""
    if created:
        columns = (*_RECORD_COLUMNS, "key")
        marks = ", ".join([placeholder] * len(columns))
        return f"INSERT INTO ledger_keys ({', '.join(columns)}) VALUES ({marks})"
    sets = ", ".join(f"{column} = {placeholder}" for column in _RECORD_COLUMNS)
    return f"UPDATE ledger_keys SET {sets} WHERE key = {placeholder}"


_ROW_COLUMNS = ("token", "lease_expires", "head_hash", "record")


def indexed_values(record: KeyRecord) -> tuple[Any, ...]:
    """The values of the indexed columns of ``ledger_keys`` (the first four of
    :func:`record_values`)."""
    outcome = record.outcome
    if outcome is None:
        return (record.phase, None, None, 0)
    return (
        record.phase,
        outcome["effect"],
        outcome.get("recorded_at"),
        int(bool(outcome.get("compacted"))),
    )


@functools.cache
def update_row_sql(placeholder: str) -> str:
    """The UPDATE of a key's state that leaves its indexed columns alone; parameters are
    :func:`row_values`."""
    sets = ", ".join(f"{column} = {placeholder}" for column in _ROW_COLUMNS)
    return f"UPDATE ledger_keys SET {sets} WHERE key = {placeholder}"


#: Where :func:`row_values` and :func:`record_values` hold the record's JSON.
RECORD_TEXT = -2


def row_values(record: KeyRecord) -> tuple[Any, ...]:
    return (record.token, record.lease_expires, record.head_hash, record.to_json(), record.key)


def record_values(record: KeyRecord) -> tuple[Any, ...]:
    """The indexed columns of ``ledger_keys`` beside the full record, key last."""
    return (*indexed_values(record), *row_values(record))
