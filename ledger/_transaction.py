"""A key's record and the transaction that writes it: what the rule reads and writes.

Hash chaining and the ledger-wide tally are computed here, so every backend chains and
counts the same way. Nothing here waits: a backend runs a :class:`Transaction` on
whatever thread or loop it likes (:mod:`._recorder` says how a ledger reaches one).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime
from hashlib import sha256
from typing import Any

from ._canonical import payload_text
from ._models import STATUSES, ActionStatus, Approval, EffectState, Reconciliation, may_act_again

#: The payload a compacted event keeps: its body is gone, its hash is not.
TOMBSTONE: dict[str, Any] = {"compacted": True}

#: The ledger-wide tally (``ledger_stripes``) keeps, per stripe of the keys, how many
#: keys have a record, how many events they hold, and the XOR of their chain heads: a
#: whole key deleted (its events and its record) leaves the stripe short. A transaction
#: updates only its key's stripe, so writers of different keys rarely meet on one row.
TALLY_STRIPES = 256


class Phase(enum.StrEnum):
    """Where a key is in its life. Stored as text in ``ledger_keys.phase``."""

    VACANT = "vacant"  # only denials so far: no identity bound, nothing claimed
    CLAIMED = "claimed"  # claimed under a fencing token; no started marker yet
    #: Identity bound, nothing claimed: the call waits for a person's approval.
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"  # the started marker is durable; the adapter may be acting
    SETTLED = "settled"  # an outcome is recorded


# Not frozen: a record's outcome is built on every read of the record, and a frozen
# dataclass's constructor costs four times as much. The rule replaces it, never edits it.
@dataclasses.dataclass(slots=True)
class Outcome:
    """A key's outcome: the body of its original ``action.completed``, as a record.

    :meth:`body` is the event's payload and the record's stored form; the fields that
    apply to some outcomes only (``token`` onwards) are in it only where they apply.
    """

    action_id: str
    status: ActionStatus
    effect: EffectState
    recorded_at: str = ""
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    retryable: bool = False
    retry_after: float | None = None
    verdict: str | None = None
    compacted: bool = False
    #: The fencing token of the execution it ends (none for a denial or a replay).
    token: int | None = None
    #: The execution started and never reported before its lease expired.
    interrupted: bool = False
    #: The request a call waiting for its approval is bound to.
    fingerprint: str | None = None
    #: The hash of an output the adapter returned and the storage could not record.
    output_sha256: str | None = None

    def body(self) -> dict[str, Any]:
        """The outcome as recorded: the payload of its ``action.completed``."""
        body = {
            "action_id": self.action_id,
            "status": self.status,
            "effect": self.effect,
            "output": self.output,
            "error": self.error,
            "error_type": self.error_type,
            "retryable": self.retryable,
            "retry_after": self.retry_after,
            "verdict": self.verdict,
            "compacted": self.compacted,
            "recorded_at": self.recorded_at,
        }
        if self.token is not None:
            body["token"] = self.token
        if self.interrupted:
            body["interrupted"] = True
        if self.fingerprint is not None:
            body["fingerprint"] = self.fingerprint
        if self.output_sha256 is not None:
            body["output_sha256"] = self.output_sha256
        return body

    def may_act_again(self, retry_safe: bool) -> bool:
        """Whether the key may act again after this outcome (:func:`may_act_again`)."""
        return may_act_again(
            status=self.status,
            effect=self.effect,
            retryable=self.retryable,
            retry_safe=retry_safe,
        )

    @classmethod
    def of(cls, body: dict[str, Any]) -> Outcome:
        """The outcome a :meth:`body` records, or an ``action.completed`` payload holds
        (a replay's adds its own fields beside it, which the outcome leaves out)."""
        if body.keys() <= _OUTCOME_FIELDS:
            fields = dict(body)
        else:
            fields = {name: value for name, value in body.items() if name in _OUTCOME_FIELDS}
        # By value, without the enum's call: a record is read on every transaction.
        fields["status"] = _STATUSES[fields["status"]]
        fields["effect"] = _EFFECTS[fields["effect"]]
        return cls(**fields)


_OUTCOME_FIELDS = frozenset(field.name for field in dataclasses.fields(Outcome))
_STATUSES: dict[str, ActionStatus] = {status: status for status in STATUSES}
_EFFECTS = {effect.value: effect for effect in EffectState}
_PHASES = {phase.value: phase for phase in Phase}


@dataclasses.dataclass
class KeyRecord:
    """The per-key current state: what a lookup reads instead of scanning the log.

    A backend stores it as it likes (the shipped ones keep :meth:`to_json` in a row,
    beside indexed columns of ``phase``, the effect and when it settled) and hands it
    back unchanged; only the rule writes its fields.

    Attributes:
        key: The idempotency key.
        phase: Where the key is: ``vacant``, ``claimed``, ``awaiting_approval``,
            ``running`` or ``settled``.
        head_hash: The hash of the key's last event: the head of its chain.
        events: How many events the key has.
        fingerprint: The fingerprint of the request bound to the key.
        fingerprint_version: The fingerprint's version, e.g. ``action-fingerprint-v1``.
        dimensions: The fingerprint's per-dimension hashes.
        capability: The bound request's capability.
        performer: The bound request's performer.
        original_action_id: The submission whose execution is the key's effect.
        token: The fencing token of the latest claim.
        holder_action_id: The submission that holds the claim.
        lease_expires: When the holder's lease runs out (storage clock).
        retry_safe: Whether the bound request may act again after an unknown effect.
        output_schema: The tool's output schema, for an operator's output.
        outcome: The recorded outcome, once settled.
        reconciliations: The verdicts recorded beside the history.
        approval: The approval of the key's call, for calls that need one.
        updated_at: When the record was last written (ISO 8601).
    """

    key: str
    phase: Phase = Phase.VACANT
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
    outcome: Outcome | None = None
    reconciliations: list[Reconciliation] = dataclasses.field(default_factory=list)
    #: The approval of the key's call, for calls that need one.
    approval: Approval | None = None
    updated_at: str = ""

    @property
    def effect(self) -> EffectState | None:
        return None if self.outcome is None else self.outcome.effect

    @property
    def settled_at(self) -> str | None:
        return None if self.outcome is None else self.outcome.recorded_at or None

    def to_json(self) -> str:
        """The record as JSON text, as the shipped backends store it.

        Returns:
            The text :meth:`from_json` reads back.
        """
        # The other fields are JSON values already; vars() avoids asdict's deep copy.
        fields = dict(vars(self))
        if self.outcome is not None:
            fields["outcome"] = self.outcome.body()
        if self.approval is not None:
            fields["approval"] = self.approval.model_dump(mode="json", exclude_none=True)
        if self.reconciliations:
            fields["reconciliations"] = [
                r.model_dump(mode="json", exclude_none=True) for r in self.reconciliations
            ]
        return "".join(compact_json(fields, 0))

    @classmethod
    def from_json(cls, text: str) -> KeyRecord:
        """A record from :meth:`to_json`'s text.

        Args:
            text: The stored JSON.

        Returns:
            The record.
        """
        fields = json.loads(text)
        fields["phase"] = _PHASES[fields["phase"]]
        if fields.get("outcome") is not None:
            fields["outcome"] = Outcome.of(fields["outcome"])
        if fields.get("approval") is not None:
            fields["approval"] = Approval.model_validate(fields["approval"])
        if fields.get("reconciliations"):
            fields["reconciliations"] = [
                Reconciliation.model_validate(r) for r in fields["reconciliations"]
            ]
        if fields.keys() != _RECORD_FIELDS:
            unknown = sorted(fields.keys() ^ _RECORD_FIELDS)
            raise TypeError(f"not a key record this release writes: fields {unknown}")
        # Every field present: the constructor would only copy them, one by one.
        record = cls.__new__(cls)
        record.__dict__.update(fields)
        return record


_RECORD_FIELDS = frozenset(field.name for field in dataclasses.fields(KeyRecord))


def iso(epoch: float) -> str:
    """``datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")``, with the
    date and time of day formatted once per second: every transaction stamps its events
    (and a claim its lease's end, a lease later: a few seconds are kept)."""
    if epoch < 0:
        return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")
    second = int(epoch)
    # Rounded as datetime rounds (half to even), carrying into the next second.
    micros = round((epoch - second) * 1e6)
    if micros >= 1_000_000:
        second += 1
        micros -= 1_000_000
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
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
#: ``"".join(compact_json(value, 0))`` is ``_ENCODER.encode(value)`` for a dict or a list,
#: without the C encoder built anew on every call (JSONEncoder.encode does; a write
#: encodes its record and arguments, on the event loop for PostgreSQL).
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ARGS = (None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",")
compact_json: Callable[[Any, int], Any] = (
    _C_MAKE_ENCODER(*_C_ARGS, False, False, True)
    if _C_MAKE_ENCODER is not None
    else lambda value, _: (_ENCODER.encode(value),)  # pragma: no cover - no C accelerator
)


@dataclasses.dataclass(frozen=True)
class Tally:
    """One stripe of the ledger-wide tally, or what one transaction adds to its stripe."""

    keys: int
    events: int
    digest: int


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

    A backend subclasses it with the three writes below; the rule calls :meth:`append`
    and :meth:`save`, which hash the chain and keep the counts. Nothing is visible to
    others until the backend commits, which it does only after the rule's function
    returned.

    Args:
        key: The key the transaction holds.
        record: The key's current state, read inside the transaction (``None`` for a
            key never seen).
        now: The storage's clock.
    """

    #: Whether :meth:`index_unchanged` is asked (it answers ``False`` otherwise): the
    #: indexed columns as stored are then kept, at a cost the other backends skip.
    _keeps_index = True

    def __init__(self, key: str, record: KeyRecord | None, now: float) -> None:
        self.key = key
        self.record = record
        self.now = now
        self.recorded_at = iso(now)
        self._head = record.head_hash if record else ""
        self._count = record.events if record else 0
        self._start = (self._head, self._count)
        self._created = False
        # The indexed columns as stored: a save that leaves them as they were (a replay, a
        # lease renewal) may rewrite only the row (SQLite then leaves the indexes alone).
        self._stored_index = indexed_values(record) if record and self._keeps_index else None
        #: Whether the commit must wait for the disk. The rule clears it for a
        #: transaction that records only a replay (it changed nothing in the world): a
        #: backend may then commit without waiting for its sync, and the next durable
        #: commit carries it to the disk. A power cut may lose such a record, never an
        #: effect or a decision.
        self.durable = True

    def append(self, type: str, action_id: str | None, payload: dict[str, Any]) -> PendingEvent:
        """Append an event to the key's chain (the rule calls it).

        Args:
            type: The event's type, e.g. ``action.completed``.
            action_id: The submission it belongs to.
            payload: Its body, a JSON object.

        Returns:
            The event as the backend's :meth:`insert_event` received it.
        """
        text = payload_text(payload)
        digest = sha256(text.encode()).hexdigest()
        # chain_hash, inlined: every event of every transaction goes through here.
        fields = (self._head, self.key, action_id or "", type, digest, self.recorded_at)
        event = PendingEvent(
            key=self.key,
            action_id=action_id,
            type=type,
            payload=payload,
            payload_json=text,
            recorded_at=self.recorded_at,
            body_hash=digest,
            prev_hash=self._head,
            hash=sha256("\x1f".join(fields).encode()).hexdigest(),
        )
        self.insert_event(event)
        self._head = event.hash
        self._count += 1
        return event

    def save(self, record: KeyRecord) -> None:
        """Write the key's state, with the chain head of everything appended so far (the
        rule calls it).

        Args:
            record: The key's new state.
        """
        record.head_hash = self._head
        record.events = self._count
        record.updated_at = self.recorded_at
        created = self.record is None
        self._created = self._created or created
        self.write_record(record, created=created)
        self.record = record
        if self._keeps_index:
            self._stored_index = indexed_values(record)

    def tally(self) -> tuple[int, Tally] | None:
        """What this transaction adds to the ledger-wide tally. A backend that keeps one
        (see ``Recorder.tally``) writes it in the same transaction as the events.

        Returns:
            The key's stripe and the keys, events and head it adds there, or ``None``
            if it wrote nothing that counts.
        """
        head, count = self._start
        if count == self._count and not self._created:
            return None
        # stripe_of and head_mark, inlined: every transaction that writes comes here.
        marks = int(head[:16] or "0", 16) ^ int(self._head[:16] or "0", 16)
        digest = marks - (1 << 64) if marks >= 1 << 63 else marks
        return zlib.crc32(self.key.encode()) % TALLY_STRIPES, Tally(
            int(self._created), self._count - count, digest
        )

    def index_unchanged(self, record: KeyRecord) -> bool:
        """Whether saving ``record`` leaves the indexed columns of the stored row as they
        are (a backend may then rewrite the row without touching its indexes).

        Args:
            record: The state about to be written.

        Returns:
            ``True`` when phase, effect, settling time and compaction are unchanged.
        """
        return self._stored_index is not None and self._stored_index == indexed_values(record)

    @abstractmethod
    def insert_event(self, event: PendingEvent) -> None:
        """Store ``event`` at the end of the log, with the next sequence number.

        Args:
            event: The event, its hashes computed already.
        """

    @abstractmethod
    def write_record(self, record: KeyRecord, *, created: bool) -> None:
        """Store the key's state.

        Args:
            record: The state to store.
            created: The key has no stored state yet: insert it, else update it.
        """

    @abstractmethod
    def compact_bodies(self) -> int:
        """Replace the payload of every event of this key by the tombstone
        (``compact``); their hashes stay.

        Returns:
            How many events were compacted.
        """


class Draft(Transaction):
    """What the rule would append, neither hashed nor stored: a batched replay answers
    from it at once, and :meth:`write` records it later, hashed against the chain head
    it finds then."""

    def __init__(self, key: str, record: KeyRecord | None, now: float) -> None:
        super().__init__(key, record, now)
        self.appended: list[tuple[str, str | None, dict[str, Any]]] = []

    def append(  # type: ignore[override]  # a draft has no event yet; no caller reads it
        self, type: str, action_id: str | None, payload: dict[str, Any]
    ) -> None:
        self.appended.append((type, action_id, payload))

    def save(self, record: KeyRecord) -> None:
        pass

    def write(self, tx: Transaction) -> None:
        """Append what was drafted in ``tx``, all of it or, if ``tx`` fails, none (so
        ``verify`` still holds after a crash drops the batch)."""
        tx.durable = False  # a drafted replay changes nothing in the world
        for type_, action_id, payload in self.appended:
            tx.append(type_, action_id, payload)
        assert tx.record is not None  # a drafted replay's key is settled, never removed
        tx.save(tx.record)

    def insert_event(self, event: PendingEvent) -> None:  # pragma: no cover - append is lazy
        raise NotImplementedError

    def write_record(self, record: KeyRecord, *, created: bool) -> None:  # pragma: no cover
        raise NotImplementedError

    def compact_bodies(self) -> int:  # pragma: no cover - never compacts
        raise NotImplementedError


def indexed_values(record: KeyRecord) -> tuple[Any, ...]:
    """The values of the indexed columns of ``ledger_keys``, as the SQL backends write
    them."""
    outcome = record.outcome
    if outcome is None:
        return (record.phase, None, None, 0)
    return (record.phase, outcome.effect, outcome.recorded_at or None, int(outcome.compacted))
